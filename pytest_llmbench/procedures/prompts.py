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
    the server offers a tokenize endpoint (in a form its adapter knows: vLLM's, llama.cpp's): each
    distinct prompt text is tokenized by the server once (cached), cut or repeated to the intended
    length, and sent as the server's own ids (completions), or detokenized back to text (chat): input
    lengths are exact in the server's tokens. The fitting is the body hook the SUT's adapter hands the
    client (``sut/adapters/fitting.py``); nothing here speaks the server's protocol.
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
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..client import LLMClient
from ..common.records import RequestRecord, RequestSpec
from ..sut import adapters
from ..sut.adapters import PromptFitError
from ..workloads import SpecStream
from .base import CannotMeasure

__all__ = ["PromptFitError", "PromptPlan", "ServerGone", "check_context", "check_server_alive", "failure_cause",
           "plan_prompts", "prefit"]

REFERENCE_VOCAB = 100_277  # cl100k_base ids: 0 … 100,276
PREFLIGHT_TOLERANCE = 0.05


@dataclass(frozen=True)
class PromptPlan:
    mode: str  # "reference-ids" | "server-ids" | "reference-text"
    reason: str
    vocab_size: int | None = None
    tokenize_style: str | None = None  # the name of the server's tokenize form (adapters.TokenizeForm)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def plan_prompts(sut: Any) -> PromptPlan:
    """The prompt mode for ``sut`` (probed once; kept in ``sut.server_info["prompt_mode"]``): its
    vocabulary and tokenize endpoints are its adapter's (``sut/adapters``)."""
    known = sut.server_info.get("prompt_mode")
    if isinstance(known, dict) and known.get("mode"):
        return PromptPlan(**known)
    if getattr(sut, "embedded", False):
        plan = PromptPlan("reference-ids", "the embedded simulator tokenizes with the reference tokenizer",
                          REFERENCE_VOCAB)
    else:
        adapter = sut.adapter
        declared = sut.server_info.get("vocab_size")
        with adapters.ServerHttp(sut.root_url, sut.headers(), verify=sut.verify_tls) as http:
            if isinstance(declared, int) and declared > 0:
                vocab, source = declared, "declared (server_info vocab_size)"
            else:
                vocab, source = adapter.vocab_size(http.get)
            form = adapters.find_tokenize_form(adapter, http.post, sut.model)
        style = form.name if form is not None else None
        if vocab is not None and vocab >= REFERENCE_VOCAB and sut.api == "completions":
            plan = PromptPlan("reference-ids", f"the server's vocabulary ({vocab:,} ids, {source}) holds every "
                              f"reference-tokenizer id", vocab, style)
        elif form is not None:
            why = (f"its vocabulary ({vocab:,} ids, {source}) is smaller than the reference tokenizer's"
                   if vocab is not None else "its vocabulary is not known")
            plan = PromptPlan("server-ids", f"the server offers {form.title} and {why}: prompts "
                              "are sized in the server's own tokens", vocab, style)
        else:
            plan = PromptPlan("reference-text", f"no known vocabulary and no {adapters.tokenize_paths(adapter)}: text "
                              "prompts sized with the reference tokenizer, checked by a pre-flight request against "
                              "usage.prompt_tokens", vocab)
    sut.server_info["prompt_mode"] = plan.to_json()
    return plan


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
    """Before a run of procedure context ``ctx``: the context check and, for the server-ids mode (a client
    with the adapter's prompt-fitting hook), the server's tokens of every distinct prompt
    (``LLMClient.prepare``); for reference-text, one pre-flight request (its record written to the run
    directory ``preflight``, like every request sent). Only a list or a lazy workload's re-iterable
    :class:`~..workloads.SpecStream` is inspected (another lazy stream is fitted as it is sent)."""
    sut = ctx.sut
    if not isinstance(specs, (list, tuple, SpecStream)) or not specs or getattr(sut, "embedded", False):
        return specs
    check_context(sut, specs)
    if client.body_hook is not None:
        await client.prepare(specs)
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
     f"server's {adapters.tokenize_paths()} (vLLM offers it), or declare the server's vocabulary"),
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


class ServerGone(CannotMeasure):
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
