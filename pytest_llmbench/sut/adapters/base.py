"""The adapter interface, the registry of server kinds, the forms of a server's tokenize endpoints and
the small HTTP helpers adapters use (no pytest, no load generator)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, TypeVar

import httpx

from ...common.records import RequestRecord

#: Roles of server metrics the procedures read and measure/telemetry.py samples during every run; each
#: adapter names its Prometheus series per role: gauges ``waiting``, ``running`` (requests), ``kv_usage``
#: (fraction of the KV cache in use); counters ``preemptions`` (events), ``prefix_hits``/``prefix_queries``
#: (prefix-cache lookups, in the server's unit), ``requests_preempted`` (requests preempted at least once),
#: ``requests_finished``.
METRIC_ROLES = ("waiting", "running", "preemptions", "kv_usage", "prefix_hits", "prefix_queries",
                "requests_preempted", "requests_finished")

#: ``fetch(path)`` GETs ``path`` on the server root -> (HTTP status, parsed JSON or text; None on failure).
Fetch = Callable[[str], tuple[int, Any]]
#: ``post(path, body)`` POSTs the JSON ``body`` to ``path`` on the server root -> as :data:`Fetch`.
Post = Callable[[str, Any], tuple[int, Any]]
#: A request body hook: ``isolate(body) -> body`` (see :attr:`ServerAdapter.isolate_prefix`).
BodyEdit = Callable[[dict[str, Any]], dict[str, Any]]


def root_url(base_url: str) -> str:
    """The server root: an OpenAI base URL (``.../v1``) without its ``/v1``, where a server's own
    endpoints live (``/metrics``, ``/health``, tokenize, cache flushes). The one place it is derived."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


@dataclass(frozen=True)
class TokenizeForm:
    """One form of a server's tokenize and detokenize endpoints (§4.4: the server's own tokens).

    ``name`` is the form's name in the prompt plan (``tokenize_style``); a tokenize request carries the
    text under ``text_key`` and turns special tokens off under ``special_key``, with the model's name when
    ``sends_model``; it answers ``{"tokens": [...]}``. A detokenize request carries ``{"tokens": [...]}``
    (and the model), and answers the text under ``detokenized_key``.
    """

    name: str
    tokenize_path: str = "/tokenize"
    detokenize_path: str = "/detokenize"
    text_key: str = "prompt"
    special_key: str = "add_special_tokens"
    sends_model: bool = True
    detokenized_key: str = "prompt"

    @property
    def title(self) -> str:
        """How reports name it: ``/tokenize (vllm form)``."""
        return f"{self.tokenize_path} ({self.name} form)"

    def tokenize_body(self, text: str, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model} if self.sends_model else {}
        body[self.text_key] = text
        body[self.special_key] = False
        return body

    def detokenize_body(self, ids: list[int], model: str) -> dict[str, Any]:
        return {"model": model, "tokens": ids} if self.sends_model else {"tokens": ids}

    def ids(self, answer: Mapping[str, Any]) -> list[int]:
        """The token ids of a tokenize answer."""
        return [int(t) for t in answer.get("tokens") or []]

    def text(self, answer: Mapping[str, Any]) -> str:
        """The text of a detokenize answer."""
        return str(answer.get(self.detokenized_key, ""))

    def answers(self, status: int, body: Any) -> bool | None:
        """A probe's verdict on this form: True (tokens came back), False (not this form: try the next),
        None (the server failed or answered something else: stop probing)."""
        if status == 0:
            return None
        if status != 200:
            return False
        if not isinstance(body, dict):
            return None
        return isinstance(body.get("tokens"), list) and bool(body["tokens"])


def models_tokenizer(fetch: Fetch) -> dict[str, Any]:
    """The tokenizer the server counts in, as ``/v1/models`` names it (§4.4.1): the first model's
    ``root`` (vLLM, SGLang: the Hugging Face id or path it was loaded from) else its ``id``, and
    llama.cpp's ``meta.n_vocab``; {} when the endpoint lists no model. Keys ``tokenizer_*``."""
    status, body = fetch("/v1/models")
    models = [m for m in (body.get("data") or []) if isinstance(m, dict)] if status == 200 and isinstance(body, dict) else []
    if not models:
        return {}
    m, info = models[0], {}
    for key in ("root", "id"):
        if isinstance(m.get(key), str) and m[key]:
            info["tokenizer_name"] = m[key]
            info["tokenizer_source"] = f"/v1/models {key} (the model's own tokenizer)"
            break
    meta = m.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("n_vocab"), int) and meta["n_vocab"] > 0:
        info["tokenizer_vocab_size"] = meta["n_vocab"]
        info["tokenizer_vocab_size_source"] = "/v1/models meta.n_vocab"
    return info


def http_fetch(root_url: str, headers: Mapping[str, str] | None = None, *, verify: bool = True,
               timeout: float = 10.0) -> Fetch:
    """A :data:`Fetch` over httpx; a network failure is status 0 (detection moves on)."""
    root = root_url.rstrip("/")

    def fetch(path: str) -> tuple[int, Any]:
        try:
            r = httpx.get(root + path, headers=dict(headers or {}), verify=verify, timeout=timeout)
        except httpx.HTTPError:
            return 0, None
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    return fetch


class ServerHttp:
    """GET and POST on a server root over one connection pool (httpx), for the short exchanges before a
    run (the prompt plan's probes): a network failure is status 0, a body that is not JSON its text.
    ``get`` is a :data:`Fetch`, ``post`` a :data:`Post`. Use as a context manager."""

    def __init__(self, root: str, headers: Mapping[str, str] | None = None, *, verify: bool = True,
                 timeout: float = 10.0) -> None:
        self.root = root.rstrip("/")
        self._http = httpx.Client(timeout=timeout, headers=dict(headers or {}), verify=verify)

    def __enter__(self) -> ServerHttp:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._http.close()

    @staticmethod
    def _read(r: httpx.Response) -> tuple[int, Any]:
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    def get(self, path: str) -> tuple[int, Any]:
        try:
            return self._read(self._http.get(self.root + path))
        except httpx.HTTPError:
            return 0, None

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        try:
            return self._read(self._http.post(self.root + path, json=body))
        except httpx.HTTPError:
            return 0, None


def sut_post(sut: Any, path: str, json: Any = None, timeout: float = 30.0) -> httpx.Response:
    """POST on the SUT's server root with its headers (the API key is read from the environment)."""
    return httpx.post(sut.root_url + path, json=json, headers=sut.headers(), verify=sut.verify_tls, timeout=timeout)


class ServerClient(Protocol):
    """What :meth:`ServerAdapter.recount_tokens` uses of the load generator's client (duck-typed:
    the sut layer imports no client)."""

    @property
    def server_root(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def verify_tls(self) -> bool: ...


@dataclass(frozen=True)
class ServerAdapter:
    """One serving engine's protocol beyond the OpenAI API, in one place. Subclasses override
    :meth:`probe`, :meth:`describe`, :meth:`configure`, and on the response side
    :attr:`extension_keys`, :meth:`parse_extensions` and :meth:`recount_tokens`; the data fields say
    the rest (docs/architecture.md, "The adapter's protocol hooks").

    ``request_fields``: body fields sent with every request (through ``SUT.extra_body``).
    ``metrics``: role (:data:`METRIC_ROLES`) -> Prometheus names, first present wins; served at
    ``metrics_path``. ``tokenize_forms``: the server's own tokenize/detokenize endpoints (prompts sized
    in its tokens, §4.4). ``isolate_prefix``: the per-request body hook that keeps a request off every
    other's prefix cache while the cache is switched off (vLLM: a fresh ``cache_salt``).
    ``aliases``: other spellings of ``kind`` for ``--llm-server-kind``; ``detect_order``: place in the
    detection order (lower first). ``documented``: the server versions whose documented formats the
    offline tests use. ``reasoning``: where the server puts a reasoning model's thinking (issue 49).
    """

    kind: str
    title: str
    owned_by: tuple[str, ...] = ()
    request_fields: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: per-request phase histograms on the same page, by TTFT component (``queue_wait``, ``prefill``): a run's
    #: increase gives their distribution over its requests (§5.1.4.2; measure/telemetry.ServerHistogram)
    histograms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    honours: tuple[str, ...] = ()  # OpenAI extensions the server honours (ignore_eos, min_tokens, ...)
    reuse_connections: bool = True  # False: the server closes kept-alive connections under load
    tested_live: bool = False
    documented: str = ""
    metrics_path: str = "/metrics"
    tokenize_forms: tuple[TokenizeForm, ...] = ()
    isolate_prefix: BodyEdit | None = None
    aliases: tuple[str, ...] = ()
    detect_order: int = 50
    #: where the server puts a reasoning model's thinking (issue 49), for the SUT description and the reader of
    #: a hidden-reasoning finding: the streamed field and the server option that fills it
    reasoning: str = ("delta.reasoning_content or delta.reasoning (chat), choices[0].reasoning_content "
                      "(completions) when the server separates it; else <think>...</think> in the content "
                      "(--llm-think-tags)")

    def probe(self, fetch: Fetch) -> str | None:
        """Evidence that the server at ``fetch`` is this kind (None: not recognised this way)."""
        return None

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        """Facts for the SUT description (version, context window, ...); never secrets."""
        return {}

    def vocab_size(self, fetch: Fetch) -> tuple[int | None, str | None]:
        """The size of the server's vocabulary and where it was read (None, None: not known): the
        first model's ``meta.n_vocab`` in ``/v1/models`` (llama.cpp lists it; other servers do not)."""
        status, body = fetch("/v1/models")
        try:
            for m in (body.get("data") or []) if status == 200 else []:
                n = (m.get("meta") or {}).get("n_vocab") if isinstance(m, dict) else None
                if isinstance(n, int) and n > 0:
                    return n, "/v1/models meta.n_vocab"
        except AttributeError:  # not a model list
            pass
        return None, None

    def configure(self, sut: Any, setting: str, value: Any) -> bool | None:
        """Make a ``pytest_llmbench_configure_sut`` setting; None when this server cannot."""
        return None

    @property
    def extension_keys(self) -> frozenset[str]:
        """Top-level keys of a streamed response object that carry this server's extensions: the
        client calls :meth:`parse_extensions` on an object holding one (and on every metadata object)."""
        return frozenset()

    def parse_extensions(self, obj: dict[str, Any], rec: RequestRecord) -> None:
        """Record this server's extensions of one streamed response object (App. B.1.1) in ``rec``
        (``server_timing``, ``server_token_ns``). Runs on the client's read path: keep it short."""
        return None

    async def recount_tokens(self, records: Sequence[RequestRecord], client: ServerClient) -> int:
        """After a run, recount per-chunk output tokens in the server's own tokens (§4.4,
        measure/tokencount.py). Returns the number of records recounted; 0 keeps the reference counts."""
        return 0

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "honours": list(self.honours),
                "tested_live": self.tested_live,
                "reuse_connections": self.reuse_connections, "documented_formats": self.documented,
                "reasoning": self.reasoning}


# --- the registry of server kinds (read by sut/adapters/__init__.py) ------------------------------
_REGISTRY: dict[str, ServerAdapter] = {}
_ORDERED: tuple[ServerAdapter, ...] = ()
A = TypeVar("A", bound=ServerAdapter)


def _reorder() -> None:
    global _ORDERED
    _ORDERED = tuple(sorted(_REGISTRY.values(), key=lambda a: a.detect_order))


def register(adapter: A) -> A:
    """Make a server kind known: detected, a ``--llm-server-kind`` choice, its metric names read,
    its tokenize forms probed. An adapter module calls it on its adapters (``X = register(...)``);
    the modules of this folder are found by directory (``sut/adapters/__init__.py``)."""
    held = _REGISTRY.get(adapter.kind)
    if held is not None and held is not adapter:
        raise ValueError(f"server kind {adapter.kind!r} is registered already ({held.title})")
    _REGISTRY[adapter.kind] = adapter
    _reorder()
    return adapter


def unregister(kind: str) -> None:
    """Forget a server kind (a test's throw-away adapter)."""
    if _REGISTRY.pop(kind, None) is not None:
        _reorder()


def registered() -> tuple[ServerAdapter, ...]:
    """The known server kinds in detection order."""
    return _ORDERED
