"""Prompts that fit the server, and errors that name their cause.

The workloads build every prompt in the reference tokenizer (cl100k_base, 100,277 ids): token ids
plus a text that re-tokenizes to exactly those ids (§4.4). On a real server those ids are another
model's: beyond a smaller vocabulary the server rejects them ("Token id 100130 is out of
vocabulary"), and within it they are *different tokens*. So a prompt mode is chosen once per SUT
(:func:`plan_prompts`, kept in ``sut.server_info["prompt_mode"]``):

``reference-ids``
    the workload's token ids as they are: the embedded simulator (the reference vocabulary), or a
    server whose vocabulary is known (llama.cpp ``/v1/models`` ``meta.n_vocab``, or declared as
    ``server_info["vocab_size"]``) and holds every reference id.
``server-ids``
    the server offers ``POST /tokenize`` (vLLM; llama.cpp's form too): each distinct prompt text is
    tokenized by the server once (cached), cut or repeated to the intended length, and sent as the
    server's own ids (completions), or detokenized back to text (chat): input lengths are exact in
    the server's tokens.
``reference-text``
    otherwise: the text, sized in reference tokens, checked before the run by one request whose
    ``usage.prompt_tokens`` is compared with the intended length (a warning above 5 %).

Before a run, a workload whose longest prompt plus output exceeds the discovered context window
fails with the workload, the length and the limit (:func:`check_context`). When every request of a
probe or level fails, :func:`failure_cause` quotes the server's most frequent error with its count
and says what to change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..client import LLMClient, build_body
from ..common.records import RequestRecord, RequestSpec
from ..sut.adapters.vllm.switch import fresh_salt
from ..workloads import SpecStream

__all__ = ["PromptFitError", "PromptPlan", "ServerGone", "ServerPromptClient", "check_context", "check_server_alive",
           "failure_cause", "plan_prompts", "prefit"]

REFERENCE_VOCAB = 100_277  # cl100k_base ids: 0 … 100,276
PREFLIGHT_TOLERANCE = 0.05
TOKENIZE_CONCURRENCY = 8


class PromptFitError(RuntimeError):
    """The workload does not fit the server (context window) or the server's tokenizer failed."""


@dataclass(frozen=True)
class PromptPlan:
    mode: str  # "reference-ids" | "server-ids" | "reference-text"
    reason: str
    vocab_size: int | None = None
    tokenize_style: str | None = None  # "vllm" | "llama.cpp"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _root(sut: Any) -> str:
    return str(getattr(sut, "root_url", "") or sut.base_url.rstrip("/").removesuffix("/v1")).rstrip("/")


def _headers(sut: Any) -> dict[str, str]:
    with_headers = getattr(sut, "headers", None)
    return dict(with_headers()) if callable(with_headers) else {}


def _vocab_size(sut: Any, http: httpx.Client) -> tuple[int | None, str | None]:
    declared = sut.server_info.get("vocab_size")
    if isinstance(declared, int) and declared > 0:
        return declared, "declared (server_info vocab_size)"
    try:
        r = http.get(_root(sut) + "/v1/models")
        for m in (r.json().get("data") or []) if r.status_code == 200 else []:
            n = (m.get("meta") or {}).get("n_vocab") if isinstance(m, dict) else None
            if isinstance(n, int) and n > 0:
                return n, "/v1/models meta.n_vocab"
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return None, None


def _tokenize_style(sut: Any, http: httpx.Client) -> str | None:
    """``vllm`` (``{"prompt"}`` → ``{"tokens"}``), ``llama.cpp`` (``{"content"}`` → ``{"tokens"}``) or None."""
    url = _root(sut) + "/tokenize"
    for style, body in (("vllm", {"model": sut.model, "prompt": "a b", "add_special_tokens": False}),
                        ("llama.cpp", {"content": "a b", "add_special": False})):
        try:
            r = http.post(url, json=body)
            if r.status_code == 200 and isinstance(r.json().get("tokens"), list) and r.json()["tokens"]:
                return style
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
    return None


def plan_prompts(sut: Any) -> PromptPlan:
    """The prompt mode for ``sut`` (probed once; kept in ``sut.server_info["prompt_mode"]``)."""
    known = sut.server_info.get("prompt_mode")
    if isinstance(known, dict) and known.get("mode"):
        return PromptPlan(**known)
    if getattr(sut, "embedded", False):
        plan = PromptPlan("reference-ids", "the embedded simulator tokenizes with the reference tokenizer",
                          REFERENCE_VOCAB)
    else:
        with httpx.Client(timeout=10.0, headers=_headers(sut), verify=getattr(sut, "verify_tls", True)) as http:
            vocab, source = _vocab_size(sut, http)
            style = _tokenize_style(sut, http)
        if vocab is not None and vocab >= REFERENCE_VOCAB and sut.api == "completions":
            plan = PromptPlan("reference-ids", f"the server's vocabulary ({vocab:,} ids, {source}) holds every "
                              f"reference-tokenizer id", vocab, style)
        elif style is not None:
            why = (f"its vocabulary ({vocab:,} ids, {source}) is smaller than the reference tokenizer's"
                   if vocab is not None else "its vocabulary is not known")
            plan = PromptPlan("server-ids", f"the server offers /tokenize ({style} form) and {why}: prompts "
                              "are sized in the server's own tokens", vocab, style)
        else:
            plan = PromptPlan("reference-text", "no known vocabulary and no /tokenize: text prompts sized with the "
                              "reference tokenizer, checked by a pre-flight request against usage.prompt_tokens",
                              vocab)
    sut.server_info["prompt_mode"] = plan.to_json()
    return plan


class ServerPromptClient(LLMClient):
    """An :class:`LLMClient` that sends each prompt as the server's own tokens, fitted to its intended length.

    The fitting (one ``/tokenize`` per distinct text, cached) happens in :meth:`prefit` before a run,
    or, for a spec not prefitted, in :meth:`send` before the request (delaying its submission)."""

    def __init__(self, *args: Any, root_url: str, model: str, style: str, headers: dict[str, str] | None = None,
                 verify: bool = True, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._root_url, self._model, self._style = root_url.rstrip("/"), model, style
        self._http_headers, self._verify = headers or {}, verify
        self._ids: dict[str, list[int]] = {}
        self._ref_len: dict[str, int] = {}
        self._fitted: dict[tuple[str, str | None, int], tuple[list[int], str | None]] = {}
        self._sem: asyncio.Semaphore | None = None
        self._http: httpx.AsyncClient | None = None
        self.tokenize_calls = 0

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["prompt_mode"] = f"server-ids (/tokenize, {self._style} form)"
        return d

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        await super().aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=60.0, headers=self._http_headers, verify=self._verify)
        if self._sem is None:
            self._sem = asyncio.Semaphore(TOKENIZE_CONCURRENCY)
        async with self._sem:
            r = await self._http.post(self._root_url + path, json=body)
        if r.status_code != 200:
            raise PromptFitError(f"POST {path} answered {r.status_code}: {r.text[:300]}")
        return dict(r.json())

    async def server_ids(self, text: str) -> list[int]:
        ids = self._ids.get(text)
        if ids is None:
            self.tokenize_calls += 1
            body = ({"model": self._model, "prompt": text, "add_special_tokens": False} if self._style == "vllm"
                    else {"content": text, "add_special": False})
            ids = [int(t) for t in (await self._post("/tokenize", body)).get("tokens") or []]
            self._ids[text] = ids
        return ids

    async def _detokenize(self, ids: list[int]) -> str:
        body = {"model": self._model, "tokens": ids} if self._style == "vllm" else {"tokens": ids}
        out = await self._post("/detokenize", body)
        return str(out.get("prompt", out.get("content", "")))

    @staticmethod
    def _key(spec: RequestSpec) -> tuple[str, str | None, int]:
        return (spec.prompt_text, spec.system_prompt, spec.input_tokens or len(spec.prompt_ids or ()))

    async def _part(self, text: str, n: int) -> list[int]:
        """``text`` in the server's ids, cut or repeated to ``n`` ids."""
        if n <= 0:
            return []
        ids = await self.server_ids(text) or await self.server_ids(" x")
        return (ids * math.ceil(n / len(ids)))[:n]

    def _reference_len(self, text: str) -> int:
        if self._tokenizer is None:
            return 0
        n = self._ref_len.get(text)
        if n is None:
            n = self._ref_len[text] = len(self._tokenizer.encode(text))
        return n

    async def fit(self, spec: RequestSpec) -> None:
        """Each part of the prompt keeps its reference length in the server's ids: the system prompt, a
        shared prefix at the head of ``prompt_ids`` (``prefix_tokens``), the rest; the total is
        ``input_tokens``. A prefix shared in reference tokens is shared in server tokens."""
        key = self._key(spec)
        if key in self._fitted:
            return
        target = spec.input_tokens or len(spec.prompt_ids or ()) or 1
        sys_len = min(self._reference_len(spec.system_prompt), target - 1) if spec.system_prompt else 0
        system = await self._part(spec.system_prompt or "", sys_len) if spec.system_prompt else []
        want = max(target - len(system), 1)
        head: list[int] = []
        rest_text = spec.prompt_text
        ids = spec.prompt_ids
        k = spec.prefix_tokens - (sys_len if spec.system_prompt else 0)
        if ids is not None and self._tokenizer is not None and spec.prefix_id is not None and 0 < k < min(len(ids), want):
            head = await self._part(self._tokenizer.decode(ids[:k]), k)
            rest_text = self._tokenizer.decode(ids[k:])
        body_ids = head + await self._part(rest_text, want - len(head))
        text = await self._detokenize(body_ids) if self.config.api == "chat" else None
        self._fitted[key] = (system + body_ids, text)

    async def prefit(self, specs: Sequence[RequestSpec]) -> None:
        await asyncio.gather(*(self.fit(s) for s in specs))

    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        return fresh_salt(self._fitted_body(spec))  # 5.7's cache switch on vLLM: a new salt per request

    def _fitted_body(self, spec: RequestSpec) -> dict[str, Any]:
        fitted = self._fitted.get(self._key(spec))
        if fitted is None:
            return super().build_body(spec)
        ids, text = fitted
        if self.config.api == "chat":
            return build_body(self.config, dataclasses.replace(spec, prompt_text=text or spec.prompt_text))
        cfg = dataclasses.replace(self.config, token_id_prompts=True)
        return build_body(cfg, dataclasses.replace(spec, prompt_ids=tuple(ids), system_prompt=None))

    async def send(self, spec: RequestSpec, **kw: Any) -> RequestRecord:
        if self._key(spec) not in self._fitted:
            try:
                await self.fit(spec)
            except (PromptFitError, httpx.HTTPError) as exc:
                rec = kw.get("record") or RequestRecord.from_spec(spec, phase=kw.get("phase", "measure"))
                self._fail(rec, _protocol_error(), f"prompt fitting: {exc}")
                self._complete(rec, kw.get("finalize", True))
                return rec
        return await super().send(spec, **kw)


def _protocol_error() -> Any:
    from ..common.records import ErrorType

    return ErrorType.PROTOCOL


def _window(sut: Any) -> tuple[int | None, str]:
    w = sut.server_info.get("context_window")
    return (int(w), str(sut.server_info.get("context_window_source") or "discovered")) if isinstance(w, int) else (None, "")


def check_context(sut: Any, specs: Iterable[RequestSpec]) -> None:
    """Fail before the run when the longest prompt plus output exceeds the server's context window."""
    window, source = _window(sut)
    if window is None or getattr(sut, "embedded", False):
        return
    worst = max(specs, key=lambda s: s.input_tokens + s.max_tokens, default=None)
    if worst is None or worst.input_tokens + worst.max_tokens <= window:
        return
    need = worst.input_tokens + worst.max_tokens
    raise PromptFitError(
        f"workload {worst.workload!r} does not fit the server's context window: request {worst.index} needs "
        f"{worst.input_tokens:,} input + {worst.max_tokens:,} output = {need:,} tokens, the limit is {window:,} "
        f"({source}); use a workload with shorter prompts or fewer output tokens, or start the server with a "
        f"larger context (vLLM --max-model-len, llama.cpp -c)")


async def prefit(client: LLMClient, ctx: Any, specs: Iterable[RequestSpec]) -> Iterable[RequestSpec]:
    """Before a run of procedure context ``ctx``: the context check and, for the server-ids mode, one
    /tokenize per distinct prompt; for reference-text, one pre-flight request (its record written to
    the run directory ``preflight``, like every request sent). Only a list or a lazy workload's
    re-iterable :class:`~..workloads.SpecStream` is inspected (another lazy stream is fitted as it is sent)."""
    sut = ctx.sut
    if not isinstance(specs, (list, tuple, SpecStream)) or not specs or getattr(sut, "embedded", False):
        return specs
    check_context(sut, specs)
    if isinstance(client, ServerPromptClient):
        await client.prefit(specs)
    elif plan_prompts(sut).mode == "reference-text" and "prompt_preflight" not in sut.server_info:
        await _preflight(client, ctx, specs)
    return specs


async def _preflight(client: LLMClient, ctx: Any, specs: Sequence[RequestSpec]) -> None:
    from ..common.storage import RunMetadata, RunWriter

    sut, note = ctx.sut, ctx.progress
    spec = max(specs, key=lambda s: s.input_tokens)
    probe = dataclasses.replace(spec, max_tokens=1, min_tokens=None, ignore_eos=False)
    rec = await client.send(probe, phase="probe")
    with RunWriter(ctx.run_dir("preflight"), keep_text=not ctx.settings.drop_text) as writer:
        writer.write(rec)
        writer.write_metadata(RunMetadata(parameters={"phase": "preflight", "purpose": "usage.prompt_tokens vs "
                                                      "the intended input length (reference-text prompts)"},
                                          profile=ctx.settings.profile, seed=ctx.settings.seed))
    if not rec.ok or not rec.input_tokens_server or not spec.input_tokens:
        sut.server_info["prompt_preflight"] = {"ok": False, "error": rec.error_message}
        return
    err = (rec.input_tokens_server - spec.input_tokens) / spec.input_tokens
    sut.server_info["prompt_preflight"] = {"intended": spec.input_tokens, "server": rec.input_tokens_server,
                                           "relative_error": round(err, 4)}
    if abs(err) > PREFLIGHT_TOLERANCE and note is not None:
        note(f"warning: prompts sized in reference tokens come to {rec.input_tokens_server:,} server tokens for "
             f"an intended {spec.input_tokens:,} ({err:+.0%}); input lengths in the report are the reference "
             f"tokenizer's, not the server's")


# ------------------------------------------------------------------------- failure causes
_IDS = re.compile(r"\b(?:cmpl|chatcmpl|req|request)[-_][0-9a-zA-Z-]+\b")

_FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"out of vocabulary|token id .* (?:invalid|out of range)|vocab", re.I),
     "the prompts are token ids from the reference tokenizer (cl100k_base, 100,277 ids) and the server's "
     "vocabulary is smaller: send text prompts (--llm-api chat), or let the plugin size prompts with the "
     "server's /tokenize (vLLM offers it), or declare the server's vocabulary"),
    (re.compile(r"context length|context window|maximum context|too long|exceeds? the (?:maximum|max)", re.I),
     "prompt plus output exceed the server's context window: use shorter prompts or fewer output tokens "
     "(max_output_tokens), or start the server with a larger context (vLLM --max-model-len, llama.cpp -c)"),
    (re.compile(r"connect|refused|disconnect|reset by peer|server closed|eof", re.I),
     "the server did not answer or went away: check --llm-endpoint and that the server is running (its log)"),
    (re.compile(r"\b401\b|\b403\b|unauthori[sz]ed|api key|forbidden", re.I),
     "the server refused the credentials: set the API key (--llm-api-key-env)"),
    (re.compile(r"model .*(?:not found|does not exist)|\b404\b", re.I),
     "the server does not serve that model or path: check --llm-model and --llm-endpoint (…/v1)"),
    (re.compile(r"timeout|timed out", re.I),
     "requests timed out: raise --llm-timeout or lower the load"),
)


def failure_cause(records: Iterable[RequestRecord]) -> str:
    """``N of M requests failed; the most frequent error (k×): "…"; <what to change>`` (or why none completed)."""
    recs = list(records)
    failed = [r for r in recs if r.failed]
    if not recs:
        return "no request was sent (the load ended before its first arrival)"
    if not failed:
        done = sum(1 for r in recs if r.ok)
        return (f"{len(recs)} requests sent, none failed, {done} completed, none within the probe's steady window: "
                "the server is slower than the window allows (each request outlasts it); give the probe a longer "
                "window (probe_duration_s) or fewer output tokens (max_output_tokens)")
    counts = Counter(_IDS.sub("<id>", (r.error_message or str(r.error_type)).strip())[:300] for r in failed)
    msg, n = counts.most_common(1)[0]
    fix = next((f for pat, f in _FIXES if pat.search(msg)), "see the run's records.jsonl and the server's log")
    others = f" ({len(counts) - 1} other messages)" if len(counts) > 1 else ""
    return (f"{len(failed)} of {len(recs)} requests failed; the most frequent error ({n}x){others}: "
            f"\"{msg}\"; {fix}")


class ServerGone(RuntimeError):
    """The server stopped answering during a run (it died or was stopped): the run cannot be trusted."""


async def check_server_alive(client: LLMClient, label: str, records: Sequence[RequestRecord]) -> None:
    """After a run with connection or stream failures: raise :class:`ServerGone` when the server no longer
    accepts connections, naming its death, the run and the failures (the records are on disk already)."""
    from ..client import TransportError
    from ..common.records import ErrorType

    if not any(r.error_type in (ErrorType.CONNECT, ErrorType.PROTOCOL, ErrorType.TIMEOUT) for r in records):
        return
    try:
        await asyncio.wait_for(client.get("/v1/models"), 5.0)
        return  # it answers (any status): a transient failure, judged by the success-rate checks
    except TransportError as exc:
        if exc.error_type != ErrorType.CONNECT:
            return
        why = exc.message
    except (asyncio.TimeoutError, OSError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    ok = sum(1 for r in records if r.ok)
    kinds = Counter(str(r.error_type) for r in records if r.failed)
    by_kind = ", ".join(f"{k} {n}" for k, n in kinds.most_common())
    raise ServerGone(f"{label}: the server at {client.server_root} died or was stopped during the run: it no longer "
                     f"accepts connections ({why}); {ok} of {len(records)} requests completed before, failures by "
                     f"kind: {by_kind} (protocol: in flight when it died; connect: sent after); "
                     f"{failure_cause(records)}")
