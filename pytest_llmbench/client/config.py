"""What the client sends: :class:`ClientConfig` (how to reach the SUT, what to ask of it) and the
OpenAI request body built from one :class:`~pytest_llmbench.common.records.RequestSpec` (§4.2.2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..common.records import RequestSpec
from ..measure.refusals import RefusalPolicy
from ..settings import GRPC_SCHEMES  # endpoint URL schemes of the gRPC transport (transports/grpc.py)

__all__ = ["API_KINDS", "GRPC_SCHEMES", "TRANSPORTS", "ClientConfig", "build_body", "is_grpc_url"]

API_KINDS = ("chat", "completions")
TRANSPORTS = ("aiohttp", "httpx-aiohttp", "httpx")


def is_grpc_url(url: str) -> bool:
    """True for a gRPC endpoint (``grpc://host:port``, ``grpcs://host:port``)."""
    return url.startswith(GRPC_SCHEMES)


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the SUT and what to ask of it. Times in seconds; ``None`` = no limit.

    ``base_url`` is the API root the paths ``/chat/completions`` and ``/completions`` are
    appended to (e.g. ``http://127.0.0.1:8000/v1``), or a gRPC endpoint ``grpc://host:port`` (``grpcs://``
    with TLS): requests then go as ``Generate`` calls (transports/grpc.py; completions only, ``transport``
    and the HTTP-only fields not used). ``api_key_env`` names the environment
    variable that holds the API key (the key itself is never part of the config).
    """

    base_url: str
    model: str
    api: str = "chat"
    stream: bool = True
    api_key_env: str | None = None
    transport: str = "aiohttp"
    connect_timeout_s: float | None = 10.0
    read_timeout_s: float | None = 300.0  # longest silence between two reads
    total_timeout_s: float | None = 1800.0
    verify_tls: bool = True
    max_connections: int | None = None  # None: unlimited (open loop); closed loop passes N
    read_bufsize: int = 4 * 1024 * 1024  # large reads for long contexts (vllm#39963)
    token_id_prompts: bool = False  # completions: send prompt_ids instead of prompt_text
    send_extra_fields: bool = True  # min_tokens / ignore_eos (vLLM extensions)
    reuse_connections: bool = True  # HTTP keep-alive; False: a new connection per request
    include_usage: bool = True  # stream_options.include_usage
    request_server_timing: bool = False  # ask the embedded simulator for llmbench_timing
    http_trace: bool = False  # per-request HTTP timings into record.http_trace (transports/httptrace.py)
    require_done: bool = True  # a stream that closes without [DONE] is a protocol error
    tokenizer: str | None = "cl100k_base"  # client-side output counts; None: do not count
    # gRPC: the tokenizer of the server's output ids (get_tokenizer name), to give each chunk its text;
    # None: records carry exact counts and times but no text (transports/grpc.py)
    output_tokenizer: str | None = None
    # gRPC: the server's HTTP root beside its gRPC endpoint (/metrics: the embedded simulator's); None: none
    http_root: str | None = None
    error_message_chars: int = 500
    #: the model writes its reasoning as <think>...</think> inside the content (no reasoning parser on the
    #: server): the client splits it off into the reasoning phase (client/phases.py; --llm-think-tags)
    think_tags: bool = False
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    refusals: RefusalPolicy = field(default_factory=RefusalPolicy)  # what counts as refused (refusals.py)

    def __post_init__(self) -> None:
        if is_grpc_url(self.base_url):
            if self.api != "completions":
                raise ValueError("a gRPC endpoint takes completions (a prompt of text or token ids), not chat "
                                 "messages: use api 'completions' (--llm-api completions)")
            if self.http_trace:
                raise ValueError("http_trace (--llm-http-trace) times HTTP phases; a gRPC endpoint has none")
            if not self.verify_tls and self.base_url.startswith("grpcs://"):
                raise ValueError("grpcs:// always verifies the server's certificate (gRPC has no insecure TLS)")
        elif not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http://, https://, grpc:// or grpcs://, got {self.base_url!r}")
        if self.api not in API_KINDS:
            raise ValueError(f"api must be one of {API_KINDS}, got {self.api!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        for name in ("connect_timeout_s", "read_timeout_s", "total_timeout_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 or None, got {v!r}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1 or None, got {self.max_connections}")
        if self.http_trace and self.transport != "aiohttp":
            raise ValueError(f"http_trace (--llm-http-trace) needs transport 'aiohttp' (its connector hooks "
                             f"give the HTTP phases), got {self.transport!r}")
        if self.read_bufsize < 1024:
            raise ValueError(f"read_bufsize must be >= 1024 bytes, got {self.read_bufsize}")
        for k in self.headers:
            if k.lower() == "authorization":
                raise ValueError("put the API key in an environment variable and name it in api_key_env")

    @property
    def protocol(self) -> str:
        """The protocol the responses come in (§4.6.1, reported per §4.6.2): ``grpc``, ``sse`` or ``http-json``."""
        if is_grpc_url(self.base_url):
            return "grpc"
        return "sse" if self.stream else "http-json"

    @property
    def path(self) -> str:
        return "/chat/completions" if self.api == "chat" else "/completions"

    def describe(self) -> dict[str, Any]:
        """The configuration as recorded in run.json (the API key's *variable name* only)."""
        d = asdict(self)
        for key in ("output_tokenizer", "http_root"):  # gRPC only: an HTTP run's description stays as it was
            if d[key] is None:
                del d[key]
        if not d["think_tags"]:  # said only when asked: a run without it is described as before
            del d["think_tags"]
        d["extra_body"] = dict(self.extra_body)
        d["headers"] = sorted(self.headers)  # header names only
        return d


def build_body(config: ClientConfig, spec: RequestSpec, *, system_ids: list[int] | None = None) -> dict[str, Any]:
    """The JSON body for ``spec`` (chat: [system], a session's earlier turns, user; completions: text or token
    ids)."""
    body: dict[str, Any] = {"model": config.model}
    if config.api == "chat":
        messages = []
        if spec.system_prompt:
            messages.append({"role": "system", "content": spec.system_prompt})
        if spec.history:  # a session's earlier turns, the server's answers among them (issue 50)
            messages.extend({"role": role, "content": content} for role, content in spec.history)
        messages.append({"role": "user", "content": spec.prompt_text})
        body["messages"] = messages
    elif config.token_id_prompts and spec.prompt_ids is not None:
        body["prompt"] = (system_ids or []) + list(spec.prompt_ids)
    elif spec.history:  # completions: the earlier turns' text in order, so turn k's prompt extends turn k-1's
        body["prompt"] = (spec.system_prompt or "") + "".join(c for _, c in spec.history) + spec.prompt_text
    else:
        body["prompt"] = (spec.system_prompt or "") + spec.prompt_text
    body["max_tokens"] = spec.max_tokens
    body["temperature"] = spec.temperature
    if spec.stop:
        body["stop"] = list(spec.stop)
    if spec.request_fields:  # reasoning_effort and the like, from the workload spec (issue 49)
        body.update(spec.request_fields)
    if config.send_extra_fields:
        if spec.min_tokens is not None:
            body["min_tokens"] = spec.min_tokens
        if spec.ignore_eos:
            body["ignore_eos"] = True
    body["stream"] = config.stream
    if config.stream and config.include_usage:
        body["stream_options"] = {"include_usage": True}
    if config.request_server_timing:
        body["llmbench_timing"] = True
    if config.extra_body:
        extra = dict(config.extra_body)
        options = extra.pop("stream_options", None)
        body.update(extra)
        if isinstance(options, dict) and config.stream:  # merged: an adapter adds to include_usage
            body["stream_options"] = {**body.get("stream_options", {}), **options}
    return body
