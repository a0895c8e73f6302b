"""One request to an OpenAI-compatible endpoint -> one :class:`RequestRecord` (§4.2.2, §4.2.6).

:class:`LLMClient` sends chat or completions requests, streaming (SSE, parsed by
:mod:`pytest_llmbench.client.sse`) or not, and times every chunk with ``time.perf_counter_ns()`` at the
read that completed its ``data:`` event (App. B.1.1). T_submit (``sent_ns``) is the moment the
transport sends the last byte of the request body, after any connection set-up (App. B.1.1);
the earlier hand-over to the transport is kept as ``queued_ns``. The first token is the first chunk whose
*content* has a non-whitespace character (``records.TTFT_RULE``, §5.1.3.1); per-chunk token
counts are assigned after the stream ends by tokenizing the joined output once (§4.6.3).

Every outcome is classified into :class:`ErrorType` and no exception escapes :meth:`LLMClient.send`
except the caller's own cancellation (the record passed in is then marked ``cancelled``).

The HTTP transport sits behind a small interface (:class:`Transport`); ``"aiohttp"`` (plain
aiohttp, the fastest measured, see bench/loadgen.py), ``"httpx-aiohttp"`` (httpx API over the
aiohttp transport) and ``"httpx"`` (httpx default transport) are available. The API key is read
from the environment variable named by ``ClientConfig.api_key_env``; it is never stored in the
config, records, logs or error messages.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..common.records import ErrorType, RequestRecord, RequestSpec
from ..common.tokenizer import Tokenizer, get_tokenizer
from ..measure import tokencount
from ..measure.refusals import RefusalPolicy, policy_code, refusal_reason
from . import httptrace
from .sse import SSEDecodeError, SSEError, SSEParser

try:  # orjson is ~3-5x faster than json on the per-chunk hot path
    import orjson as _orjson

    _loads = _orjson.loads

    def _dumps(obj: Any) -> bytes:
        return _orjson.dumps(obj)

except ImportError:  # pragma: no cover - fallback when orjson is not installed
    import json as _json

    _loads = _json.loads

    def _dumps(obj: Any) -> bytes:
        return _json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


if sys.version_info >= (3, 11):
    from asyncio import timeout as _timeout
else:  # pragma: no cover
    from async_timeout import timeout as _timeout

__all__ = [
    "API_KINDS",
    "ClientConfig",
    "LLMClient",
    "TRANSPORTS",
    "Transport",
    "TransportError",
    "assign_chunk_tokens",
    "build_body",
    "classify_status",
]

API_KINDS = ("chat", "completions")
TRANSPORTS = ("aiohttp", "httpx-aiohttp", "httpx")
#: Per-request fields the embedded simulator sends on the finish chunk (``llmbench_timing``).
SERVER_TIMING_FIELDS = ("queue_ns", "prefill_ns", "preemptions", "preempted_tokens", "cached_tokens")


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the SUT and what to ask of it. Times in seconds; ``None`` = no limit.

    ``base_url`` is the API root the paths ``/chat/completions`` and ``/completions`` are
    appended to (e.g. ``http://127.0.0.1:8000/v1``). ``api_key_env`` names the environment
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
    http_trace: bool = False  # per-request HTTP timings into record.http_trace (httptrace.py)
    require_done: bool = True  # a stream that closes without [DONE] is a protocol error
    tokenizer: str | None = "cl100k_base"  # client-side output counts; None: do not count
    error_message_chars: int = 500
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    refusals: RefusalPolicy = field(default_factory=RefusalPolicy)  # what counts as refused (refusals.py)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
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
    def path(self) -> str:
        return "/chat/completions" if self.api == "chat" else "/completions"

    def describe(self) -> dict[str, Any]:
        """The configuration as recorded in run.json (the API key's *variable name* only)."""
        d = asdict(self)
        d["extra_body"] = dict(self.extra_body)
        d["headers"] = sorted(self.headers)  # header names only
        return d


# --------------------------------------------------------------------------------------------
# Body building
# --------------------------------------------------------------------------------------------


def build_body(config: ClientConfig, spec: RequestSpec, *, system_ids: list[int] | None = None) -> dict[str, Any]:
    """The JSON body for ``spec`` (chat: [system], user; completions: text or token ids)."""
    body: dict[str, Any] = {"model": config.model}
    if config.api == "chat":
        messages = []
        if spec.system_prompt:
            messages.append({"role": "system", "content": spec.system_prompt})
        messages.append({"role": "user", "content": spec.prompt_text})
        body["messages"] = messages
    elif config.token_id_prompts and spec.prompt_ids is not None:
        body["prompt"] = (system_ids or []) + list(spec.prompt_ids)
    else:
        body["prompt"] = (spec.system_prompt or "") + spec.prompt_text
    body["max_tokens"] = spec.max_tokens
    body["temperature"] = spec.temperature
    if spec.stop:
        body["stop"] = list(spec.stop)
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
        body.update(config.extra_body)
    return body


def classify_status(status: int) -> ErrorType | None:
    """HTTP status -> error type (None for 2xx)."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return ErrorType.RATE_LIMITED
    if 400 <= status < 500:
        return ErrorType.HTTP_4XX
    if status >= 500:
        return ErrorType.HTTP_5XX
    return ErrorType.PROTOCOL  # 1xx/3xx where a completion was expected


def assign_chunk_tokens(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    """Tokens per chunk: tokenize ``"".join(texts)`` once, give each token to the chunk that
    holds its first character (§4.6.3). Never tokenizes chunks one by one."""
    counts = [0] * len(texts)
    joined = "".join(texts)
    if not joined:
        return counts
    starts = tokenizer.token_starts(joined)
    j = 0
    end = len(texts[0])
    last = len(texts) - 1
    for s in starts:
        while s >= end and j < last:
            j += 1
            end += len(texts[j])
        counts[j] += 1
    return counts


# --------------------------------------------------------------------------------------------
# Transports
# --------------------------------------------------------------------------------------------


class TransportError(Exception):
    """A transport-level failure, already classified (``error_type``, readable ``message``)."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


class Response(Protocol):
    status: int
    content_type: str

    async def read_chunk(self) -> bytes:
        """Next bytes of the body, ``b""`` at the end; raises :class:`TransportError`."""
        ...

    async def read_body(self, limit: int) -> bytes: ...

    async def release(self) -> None: ...


class SubmitStamp:
    """T_submit of one request (App. B.1.1): ``ns`` is set when the transport has written the last
    byte of the request body (0 until then)."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns = 0


async def stamped_body(body: bytes, stamp: SubmitStamp) -> AsyncIterator[bytes]:
    """The request body as a stream whose last chunk is its final byte: ``stamp`` is set when the
    transport asks for that byte, having written the rest (aiohttp, httpx and httpx-aiohttp all
    write a chunk before pulling the next), i.e. as the final byte is sent (App. B.1.1).

    Stamping *after* a single write instead reads late: on a loaded host the write that wakes the
    server can deschedule the client until the server has answered. The extra one-byte write costs
    one send per request; the stream is sent with a ``Content-Length`` (no chunked framing).
    """
    if len(body) > 1:
        yield body[:-1]
    stamp.ns = time.perf_counter_ns()
    yield body[-1:]


def _body_writes(body: bytes) -> int:
    """How many writes :func:`stamped_body` makes of ``body`` (the request's chunks sent)."""
    return 2 if len(body) > 1 else len(body)


def _body_headers(headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    return {**headers, "Content-Length": str(len(body))}


class Transport(Protocol):
    name: str

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: httptrace.HttpTraceData | None = None) -> Response: ...

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


# One error map for every transport (like httpx's ``HTTPCORE_EXC_MAP`` with
# ``map_httpcore_exceptions()``): an exception class -> how it is classified before the response
# arrives and while its body is read. The most specific class wins (first hit in the exception's
# MRO); an exception with no entry is a PROTOCOL error "unexpected client error".


@dataclass(frozen=True)
class ErrorRule:
    """How one exception class is classified: ``before`` the response (connect, send, headers)
    and ``mid`` stream (reading the body); a note, if any, prefixes the message."""

    before: ErrorType
    mid: ErrorType
    before_note: str = ""
    mid_note: str = ""

    def classify(self, exc: BaseException, *, mid_stream: bool) -> TransportError:
        note = self.mid_note if mid_stream else self.before_note
        text = _describe(exc)
        return TransportError(self.mid if mid_stream else self.before, f"{note}: {text}" if note else text)


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    return f"{name}: {exc}" if str(exc) else name


_BODY_BROKEN = "response body broken"
_CLOSED_BEFORE = "server closed the connection before responding"
_CLOSED_MID = "server closed the connection mid-stream"
ERROR_MAP: dict[type[BaseException], ErrorRule] = {}  # filled on first use (lazy library imports)
#: Exceptions that wrap another library's (httpx-aiohttp raises httpx errors ``from`` aiohttp's).
_WRAPPERS: list[type[BaseException]] = []


def _load_error_map() -> dict[type[BaseException], ErrorRule]:
    import aiohttp
    import httpx

    _WRAPPERS[:] = [httpx.HTTPError]
    t, c, p = ErrorType.TIMEOUT, ErrorType.CONNECT, ErrorType.PROTOCOL
    return {
        # any transport (asyncio.TimeoutError is TimeoutError from Python 3.11 on)
        asyncio.TimeoutError: ErrorRule(t, t),
        TimeoutError: ErrorRule(t, t),
        ConnectionError: ErrorRule(c, p),
        # aiohttp (also what httpx-aiohttp wraps)
        aiohttp.ServerTimeoutError: ErrorRule(t, t),
        aiohttp.ClientConnectorError: ErrorRule(c, c),  # includes TLS handshake / certificate errors
        aiohttp.ClientPayloadError: ErrorRule(p, p, _BODY_BROKEN, _BODY_BROKEN),
        aiohttp.ServerDisconnectedError: ErrorRule(p, p, _CLOSED_BEFORE, _CLOSED_MID),
        aiohttp.ClientOSError: ErrorRule(c, p),
        aiohttp.ClientResponseError: ErrorRule(p, p),  # malformed HTTP response
        aiohttp.ClientError: ErrorRule(c, p),
        # httpx default transport
        httpx.TimeoutException: ErrorRule(t, t),
        httpx.ConnectError: ErrorRule(c, c),
        httpx.RemoteProtocolError: ErrorRule(p, p, _CLOSED_BEFORE, _BODY_BROKEN),
        httpx.ReadError: ErrorRule(p, p, "", _BODY_BROKEN),
        httpx.DecodingError: ErrorRule(p, p, "", _BODY_BROKEN),
        httpx.TransportError: ErrorRule(c, p),
    }


def _lookup(exc: BaseException) -> ErrorRule | None:
    for cls in type(exc).__mro__:  # most specific first
        rule = ERROR_MAP.get(cls)
        if rule is not None:
            return rule
    return None


def classify_transport_error(exc: BaseException, *, mid_stream: bool) -> TransportError:
    """``exc`` from an HTTP library -> a classified :class:`TransportError` by :data:`ERROR_MAP`.

    httpx-aiohttp re-raises aiohttp errors as loosely chosen httpx errors (a dropped connection
    becomes ``ConnectTimeout``) ``from`` the original; when the direct cause has its own entry,
    the cause is classified instead.
    """
    if not ERROR_MAP:
        ERROR_MAP.update(_load_error_map())
    cause = exc.__cause__
    if cause is not None and isinstance(exc, tuple(_WRAPPERS)):
        rule = _lookup(cause)
        if rule is not None:
            return rule.classify(cause, mid_stream=mid_stream)
    rule = _lookup(exc)
    if rule is None:
        return TransportError(ErrorType.PROTOCOL, f"unexpected client error {_describe(exc)}")
    return rule.classify(exc, mid_stream=mid_stream)


class map_transport_errors:  # lower case: used like httpx's map_httpcore_exceptions()
    """Context manager: an ``Exception`` raised inside becomes :func:`classify_transport_error`'s
    :class:`TransportError`, chained ``from`` the original. Cancellation (a ``BaseException``)
    and an already classified :class:`TransportError` pass through. Stateless, so one instance
    per phase is shared (:data:`_BEFORE`, :data:`_MID`) and the hot read path allocates nothing."""

    __slots__ = ("mid_stream",)

    def __init__(self, *, mid_stream: bool) -> None:
        self.mid_stream = mid_stream

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, TransportError):
            return False
        raise classify_transport_error(exc, mid_stream=self.mid_stream) from exc


_BEFORE = map_transport_errors(mid_stream=False)
_MID = map_transport_errors(mid_stream=True)


class _ReadBody:
    """``read_body`` for any response with ``read_chunk`` (error bodies, non-streaming answers)."""

    __slots__ = ()

    async def read_chunk(self) -> bytes:
        raise NotImplementedError

    async def read_body(self, limit: int) -> bytes:
        parts: list[bytes] = []
        n = 0
        while n < limit:
            b = await self.read_chunk()
            if not b:
                break
            parts.append(b)
            n += len(b)
        return b"".join(parts)[:limit]


class _AiohttpResponse(_ReadBody):
    __slots__ = ("_resp", "_content", "status", "content_type")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self._content = resp.content
        self.status: int = resp.status
        self.content_type: str = resp.headers.get("Content-Type", "")

    async def read_chunk(self) -> bytes:
        with _MID:
            return await self._content.readany()

    async def release(self) -> None:
        self._resp.release()


class AiohttpTransport:
    """Plain aiohttp: one session, one connector sized to the load."""

    name = "aiohttp"

    def __init__(self, config: ClientConfig, max_connections: int | None) -> None:
        import aiohttp

        make = httptrace.make_connector if config.http_trace else aiohttp.TCPConnector
        connector = make(
            limit=max_connections or 0,
            limit_per_host=0,
            force_close=not config.reuse_connections,
            ssl=bool(config.verify_tls),  # True: verify certificates (the default)
            ttl_dns_cache=300,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=config.connect_timeout_s, sock_read=config.read_timeout_s
            ),
            read_bufsize=config.read_bufsize,
            max_line_size=config.read_bufsize,
            max_field_size=config.read_bufsize,
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: httptrace.HttpTraceData | None = None) -> Response:
        if trace is None:
            with _BEFORE:
                resp = await self._session.post(url, data=stamped_body(body, submit),
                                                headers=_body_headers(headers, body))
            return _AiohttpResponse(resp)
        token = httptrace.CURRENT_TRACE.set(trace)  # the connector's hooks stamp into it
        try:
            with _BEFORE:
                resp = await self._session.post(url, data=stamped_body(body, submit),
                                                headers=_body_headers(headers, body))
        except BaseException:  # before the response headers (cancellation included)
            trace["exception_ns"] = time.perf_counter_ns()
            if submit.ns:  # the body went out whole (one cut off before its last byte counts none)
                httptrace.note_request_sent(trace, submit.ns, len(body), _body_writes(body))
            raise
        finally:
            httptrace.CURRENT_TRACE.reset(token)
        httptrace.note_response(trace, resp)
        # T_submit; the answer when it came before the last body byte was pulled (as record.sent_ns)
        httptrace.note_request_sent(trace, submit.ns or trace["response_headers_ns"], len(body), _body_writes(body))
        return httptrace.TracedResponse(_AiohttpResponse(resp), trace)

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with _BEFORE:
            async with self._session.get(url, headers=headers) as resp:
                return resp.status, await resp.read()

    async def aclose(self) -> None:
        await self._session.close()


class _HttpxResponse(_ReadBody):
    __slots__ = ("_resp", "_it", "status", "content_type")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self._it = resp.aiter_bytes()
        self.status = resp.status_code
        self.content_type = resp.headers.get("content-type", "")

    async def read_chunk(self) -> bytes:
        with _MID:
            try:
                return await self._it.__anext__()
            except StopAsyncIteration:  # an Exception: must not reach the error map
                return b""

    async def release(self) -> None:
        await self._resp.aclose()


class HttpxTransport:
    """httpx API; its default transport, or ``httpx-aiohttp``'s aiohttp transport."""

    def __init__(self, config: ClientConfig, max_connections: int | None, *, over_aiohttp: bool) -> None:
        import httpx

        self.name = "httpx-aiohttp" if over_aiohttp else "httpx"
        keepalive = max_connections if config.reuse_connections else 0
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=keepalive)
        timeout = httpx.Timeout(
            connect=config.connect_timeout_s,
            read=config.read_timeout_s,
            write=config.read_timeout_s,
            pool=None,
        )
        if over_aiohttp:
            from httpx_aiohttp import AiohttpTransport as _HxA

            transport = _HxA(verify=config.verify_tls, limits=limits)
            self._client = httpx.AsyncClient(transport=transport, timeout=timeout)
        else:
            self._client = httpx.AsyncClient(verify=config.verify_tls, limits=limits, timeout=timeout)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: httptrace.HttpTraceData | None = None) -> _HttpxResponse:
        with _BEFORE:
            req = self._client.build_request("POST", url, content=stamped_body(body, submit),
                                             headers=_body_headers(headers, body))
            resp = await self._client.send(req, stream=True)
        return _HttpxResponse(resp)

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with _BEFORE:
            resp = await self._client.get(url, headers=headers)
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self._client.aclose()


def make_transport(config: ClientConfig, max_connections: int | None) -> Transport:
    if config.transport == "aiohttp":
        return AiohttpTransport(config, max_connections)
    return HttpxTransport(config, max_connections, over_aiohttp=config.transport == "httpx-aiohttp")


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------


class _Fail(TransportError):
    """Internal: a classified failure found in the response itself (status, content type, SSE
    framing, JSON shape) rather than raised by the HTTP library."""


def _error_message(body: bytes) -> str:
    """The human message of an error body (OpenAI ``{"error": {"message": ...}}`` or raw text)."""
    try:
        obj = _loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(err.get(key), str):
                    return err[key]
        elif isinstance(err, str):
            return err
    return body.decode("utf-8", "replace").strip()


def _json_or_none(body: bytes) -> Any:
    try:
        return _loads(body)
    except ValueError:
        return None


def _stream_error(err: Any, policy: RefusalPolicy | None = None) -> _Fail:
    """An ``{"error": ...}`` object sent inside a 200 stream (vLLM does this); a policy code is a refusal."""
    code = err.get("code") if isinstance(err, dict) else None
    msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    refusal = policy_code(None, {"error": err}, policy)
    if refusal is not None:
        return _Fail(ErrorType.REFUSED, f"policy refusal in stream ({refusal}): {msg}")
    try:
        code = int(code)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        code = 500
    et = classify_status(code) or ErrorType.HTTP_5XX
    return _Fail(et, f"error event in stream: {msg}")


class LLMClient:
    """Async client for one SUT endpoint. Use as ``async with LLMClient(cfg) as c: await c.send(spec)``.

    ``max_connections`` overrides ``config.max_connections`` (the load generator sizes the pool to
    the load). ``tokenizer`` overrides ``config.tokenizer`` for client-side token counts.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        max_connections: int | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.config = config
        self._max_connections = max_connections if max_connections is not None else config.max_connections
        self._url = config.base_url.rstrip("/") + config.path
        self._tokenizer = tokenizer
        if tokenizer is None and config.tokenizer is not None:
            self._tokenizer = get_tokenizer(config.tokenizer)
        if config.token_id_prompts and config.api == "completions" and self._tokenizer is None:
            raise ValueError("token_id_prompts needs a tokenizer (for system prompts); set ClientConfig.tokenizer")
        self._secret = ""
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if config.stream else "application/json",
        }
        if not config.reuse_connections:
            headers["Connection"] = "close"  # every transport and server honour it (RFC 9112 §9.6)
        headers.update(config.headers)
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise ValueError(
                    f"environment variable {config.api_key_env!r} (api_key_env) is not set or empty"
                )
            self._secret = key
            headers["Authorization"] = f"Bearer {key}"
        self._headers = headers
        self._get_headers = {k: v for k, v in headers.items() if k != "Content-Type"}
        self._system_ids: dict[str, list[int]] = {}
        self._transport: Transport | None = None

    def __repr__(self) -> str:
        return f"LLMClient({self._url!r}, api={self.config.api!r}, transport={self.transport_name!r})"

    # -- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> LLMClient:
        self._ensure_transport()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None

    def _ensure_transport(self) -> Transport:
        if self._transport is None:
            self._transport = make_transport(self.config, self._max_connections)
        return self._transport

    @property
    def transport_name(self) -> str:
        return self.config.transport

    @property
    def max_connections(self) -> int | None:
        """Connection pool size (None: unlimited)."""
        return self._max_connections

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self._tokenizer

    def describe(self) -> dict[str, Any]:
        d = self.config.describe()
        d["url"] = self._url
        d["max_connections"] = self._max_connections
        d["protocol"] = "sse" if self.config.stream else "http-json"
        d["tokenizer"] = self._tokenizer.declaration.to_json() if self._tokenizer else None
        return d

    # -- requests --------------------------------------------------------------------------
    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        sys_ids = None
        if (
            self.config.api == "completions"
            and self.config.token_id_prompts
            and spec.prompt_ids is not None
            and spec.system_prompt
        ):
            sys_ids = self._system_ids.get(spec.system_prompt)
            if sys_ids is None:
                if self._tokenizer is None:
                    raise ValueError("token_id_prompts with a system_prompt needs a tokenizer")
                sys_ids = self._tokenizer.encode(spec.system_prompt)
                self._system_ids[spec.system_prompt] = sys_ids
        return build_body(self.config, spec, system_ids=sys_ids)

    async def send(
        self,
        spec: RequestSpec,
        *,
        record: RequestRecord | None = None,
        phase: str = "measure",
        intended_ns: int | None = None,
        finalize: bool = True,
    ) -> RequestRecord:
        """Send ``spec`` and return its record (never raises for SUT or network failures).

        ``record`` lets the caller hold the record before the request runs (the load generator
        does, so that a cancelled request still yields its record, marked ``cancelled``, with
        the chunks timed so far). ``finalize=False`` leaves token counting to :meth:`finalize`
        so the caller can do it off the submission path.
        """
        rec = record if record is not None else RequestRecord.from_spec(spec, phase=phase)
        if intended_ns is not None:
            rec.intended_ns = intended_ns
        rec.input_tokens_client = spec.input_tokens
        submit = SubmitStamp()
        try:
            try:
                body = _dumps(self.build_body(spec))
                transport = self._ensure_transport()
                async with _timeout(self.config.total_timeout_s):
                    rec.queued_ns = time.perf_counter_ns()
                    await self._exchange(transport, body, rec, submit)
            finally:  # failed before a response: T_submit if the body went out, else the hand-over
                if not rec.sent_ns:
                    rec.sent_ns = submit.ns or rec.queued_ns or 0
        except TransportError as e:  # includes _Fail
            self._fail(rec, e.error_type, e.message)
        except TimeoutError:  # our total timeout (asyncio.timeout converts the cancellation)
            self._fail(rec, ErrorType.TIMEOUT, f"total timeout of {self.config.total_timeout_s} s expired")
        except SSEDecodeError as e:
            self._fail(rec, ErrorType.PARSE, str(e))
        except SSEError as e:
            self._fail(rec, ErrorType.PROTOCOL, str(e))
        except ValueError as e:  # JSON decoding of a chunk/body (orjson and json raise ValueError)
            self._fail(rec, ErrorType.PARSE, f"malformed JSON: {e}")
        except asyncio.CancelledError:
            self._fail(rec, ErrorType.CANCELLED, "cancelled by the load generator")
            self._complete(rec, finalize)
            raise
        except Exception as e:  # a bug or an unforeseen library error: still one record
            self._fail(rec, ErrorType.PROTOCOL, f"unexpected client error {type(e).__name__}: {e}")
        self._complete(rec, finalize)
        return rec

    def _fail(self, rec: RequestRecord, et: ErrorType, message: str) -> None:
        now = time.perf_counter_ns()
        if rec.error_type is None:
            rec.error_type = et
            msg = message[: self.config.error_message_chars]
            if self._secret and self._secret in msg:
                msg = msg.replace(self._secret, "***")
            rec.error_message = msg
        if rec.end_ns is None:
            rec.end_ns = now

    def _complete(self, rec: RequestRecord, finalize: bool) -> None:
        if rec.end_ns is None:
            rec.end_ns = time.perf_counter_ns()
        usage = rec.usage
        if usage:
            pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
            rec.input_tokens_server = pt if isinstance(pt, int) else None
            rec.output_tokens_server = ct if isinstance(ct, int) else None
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                rec.cached_tokens = details["cached_tokens"]
        if rec.cached_tokens is None and rec.server_timing and isinstance(rec.server_timing.get("cached_tokens"), int):
            rec.cached_tokens = rec.server_timing["cached_tokens"]
        if rec.error_type is None:
            why = refusal_reason(rec.finish_reason, rec.refusal, rec.output_text, self.config.refusals)
            if why is not None:
                rec.error_type = ErrorType.REFUSED
                rec.error_message = why
        if finalize:
            self.finalize(rec)

    def finalize(self, rec: RequestRecord) -> RequestRecord:
        """Per-chunk and total client-side output token counts (§4.6.3); idempotent."""
        tok = self._tokenizer
        if tok is None or (rec.tokenizer is not None and len(rec.chunk_tokens) == len(rec.chunk_ns)):
            return rec
        counts = assign_chunk_tokens(tok, rec.chunk_text)
        if any(rec.chunk_reasoning):
            reasoning = assign_chunk_tokens(tok, rec.chunk_reasoning)
            for i, n in enumerate(reasoning):
                counts[i] += n
            rec.reasoning_tokens_client = sum(reasoning)
        rec.chunk_tokens = counts
        rec.output_tokens_client = sum(counts)
        rec.tokenizer = tok.declaration.name
        rec.token_count_method = tokencount.REFERENCE
        tokencount.apply_one_per_chunk(rec)  # server tokens when one token per content chunk (§4.4)
        return rec

    async def reconcile_token_counts(self, records: list[RequestRecord], *, concurrency: int = 4,
                                     timeout_s: float = 30.0) -> int:
        """Per-chunk counts in the server's tokens via llama.cpp ``POST /tokenize`` (with pieces,
        no special tokens), once per record not already exact; after the run, so the measured
        load is not perturbed (tokencount.py). Returns the number of records recounted; a server
        without the endpoint leaves the reference counts (the declared fallback)."""
        import httpx

        todo = [r for r in records if tokencount.needs_server_count(r)]
        if not todo:
            return 0
        url = self.server_root + "/tokenize"
        sem = asyncio.Semaphore(concurrency)
        done = 0
        async with httpx.AsyncClient(verify=self.config.verify_tls, timeout=timeout_s) as hx:
            async def one(rec: RequestRecord) -> bool:
                nonlocal done
                reasoning = rec.chunk_reasoning if len(rec.chunk_reasoning) == len(rec.chunk_text) \
                    else [""] * len(rec.chunk_text)
                text = "".join(r + t for t, r in zip(rec.chunk_text, reasoning))  # as apply_pieces aligns
                async with sem:
                    resp = await hx.post(url, headers=self._headers,
                                         json={"content": text, "with_pieces": True, "add_special": False})
                if resp.status_code != 200:
                    return False
                tokencount.apply_pieces(rec, tokencount.piece_byte_lengths(resp.json().get("tokens") or []))
                done += 1
                return True

            first = await one(todo[0])
            if not first:
                return 0
            await asyncio.gather(*(one(r) for r in todo[1:]))
        return done

    async def _exchange(self, transport: Transport, body: bytes, rec: RequestRecord, submit: SubmitStamp) -> None:
        if self.config.http_trace:
            rec.http_trace = httptrace.new_trace(rec.queued_ns)  # type: ignore[assignment]
            resp = await transport.post(self._url, body, self._headers, submit, trace=rec.http_trace)
        else:
            resp = await transport.post(self._url, body, self._headers, submit)
        # T_submit (App. B.1.1); a server that answered before the body was written bounds it
        rec.sent_ns = submit.ns or time.perf_counter_ns()
        try:
            rec.status = resp.status
            et = classify_status(resp.status)
            if et is not None:
                raw = await resp.read_body(64 * 1024)
                code = policy_code(resp.status, _json_or_none(raw), self.config.refusals)
                if code is not None:  # a content-policy rejection is a refusal (§4.8.1)
                    raise _Fail(ErrorType.REFUSED, f"HTTP {resp.status} policy refusal ({code}): "
                                f"{_error_message(raw)}")
                raise _Fail(et, f"HTTP {resp.status}: {_error_message(raw)}")
            if self.config.stream:
                if not resp.content_type.startswith("text/event-stream"):
                    raw = await resp.read_body(64 * 1024)
                    raise _Fail(
                        ErrorType.PROTOCOL,
                        f"streaming request answered with Content-Type {resp.content_type!r}, "
                        f"not text/event-stream: {_error_message(raw)}",
                    )
                await self._read_stream(resp, rec)
            else:
                await self._read_json(resp, rec)
        finally:
            if rec.http_trace is not None:  # body reads once per response, from the per-read stamps
                httptrace.note_stream_reads(rec.http_trace, rec.chunk_ns,  # type: ignore[arg-type]
                                            rec.first_chunk_ns, rec.end_ns)
            await resp.release()

    async def _read_json(self, resp: Response, rec: RequestRecord) -> None:
        raw = await resp.read_body(1 << 31)
        now = time.perf_counter_ns()
        rec.end_ns = now
        obj = _loads(raw)
        if not isinstance(obj, dict):
            raise _Fail(ErrorType.PARSE, "response body is not a JSON object")
        if "error" in obj and not obj.get("choices"):
            raise _stream_error(obj["error"], self.config.refusals)
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            if self.config.api == "chat":
                msg = c.get("message") or {}
                content = msg.get("content") or ""
                reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
                if msg.get("refusal"):
                    rec.refusal = msg["refusal"]
            else:
                content = c.get("text") or ""
                reasoning = ""
            rec.first_chunk_ns = now
            rec.chunk_ns.append(now)
            rec.chunk_text.append(content)
            rec.chunk_reasoning.append(reasoning)
            if content and not content.isspace():
                rec.first_token_ns = now
            rec.finish_reason = c.get("finish_reason")
        else:
            raise _Fail(ErrorType.PROTOCOL, "response has no choices")
        if obj.get("usage"):
            rec.usage = obj["usage"]

    async def _read_stream(self, resp: Response, rec: RequestRecord) -> None:
        """The hot path: read, time, parse, record. One clock read per socket read."""
        parser = SSEParser()
        feed = parser.feed
        read = resp.read_chunk
        clock = time.perf_counter_ns
        loads = _loads
        chat = self.config.api == "chat"
        ns_app = rec.chunk_ns.append
        text_app = rec.chunk_text.append
        reas_app = rec.chunk_reasoning.append
        done = False
        events_seen = 0
        while True:
            data = await read()
            if not data:
                break
            now = clock()
            events = feed(data)
            if not events:
                continue
            if rec.first_chunk_ns is None:
                rec.first_chunk_ns = now
            events_seen += len(events)
            for ev in events:
                d = ev.data
                if d == "[DONE]":
                    if not done:
                        done = True
                        rec.end_ns = now
                    continue
                obj = loads(d)
                if type(obj) is not dict:
                    raise _Fail(ErrorType.PARSE, f"SSE data is not a JSON object: {d[:80]!r}")
                choices = obj.get("choices")
                if choices:
                    c = choices[0]
                    if chat:
                        delta = c.get("delta")
                        if delta:
                            content = delta.get("content") or ""
                            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
                            if delta.get("refusal"):  # OpenAI: the refusal streams instead of content
                                rec.refusal = (rec.refusal or "") + delta["refusal"]
                        else:
                            content = reasoning = ""
                    else:
                        content = c.get("text") or ""
                        reasoning = ""
                    ns_app(now)
                    text_app(content)
                    reas_app(reasoning)
                    if rec.first_token_ns is None and content and not content.isspace():
                        rec.first_token_ns = now
                    fr = c.get("finish_reason")
                    if fr:
                        rec.finish_reason = fr
                # metadata is rare; "usage": null rides on every chunk with include_usage
                if not choices or obj.get("usage") or "llmbench_timing" in obj or "error" in obj or "timings" in obj:
                    self._metadata(obj, rec, self.config.refusals)
        parser.close()
        if rec.end_ns is None:
            rec.end_ns = clock()
        if parser.partial:
            raise _Fail(ErrorType.PROTOCOL, "stream ended inside an SSE event")
        if events_seen == 0:
            raise _Fail(ErrorType.PROTOCOL, "empty stream: no SSE events")
        if not done and self.config.require_done:
            raise _Fail(ErrorType.PROTOCOL, "stream closed without data: [DONE]")

    @staticmethod
    def _metadata(obj: dict[str, Any], rec: RequestRecord, refusals: RefusalPolicy) -> None:
        err = obj.get("error")
        if err:
            raise _stream_error(err, refusals)
        usage = obj.get("usage")
        if usage:
            rec.usage = usage
        timing = obj.get("llmbench_timing")
        if timing:
            tok = timing.get("token_ns")
            if tok:
                if rec.server_token_ns is None:
                    rec.server_token_ns = []
                rec.server_token_ns.extend(tok)
            st = rec.server_timing
            if st is None:
                st = rec.server_timing = {}
            unix = timing.get("token_unix_ns")
            if tok and unix and "unix_minus_monotonic_ns" not in st:
                st["unix_minus_monotonic_ns"] = unix[0] - tok[0]
            for k in SERVER_TIMING_FIELDS:
                if k in timing:
                    st[k] = timing[k]
        timings = obj.get("timings")  # llama.cpp per-request timings on the finish chunk
        if isinstance(timings, dict):
            if rec.server_timing is None:
                rec.server_timing = {}
            rec.server_timing["timings"] = timings

    async def get(self, url: str) -> tuple[int, str]:
        """GET ``url`` (absolute, or a path on the server root) -> (status, text). Raises
        :class:`TransportError` on failure. Used for ``/metrics`` (§4.5.1 queue drain)."""
        if not url.startswith(("http://", "https://")):
            url = self.server_root + "/" + url.lstrip("/")
        status, body = await self._ensure_transport().get(url, self._get_headers)
        return status, body.decode("utf-8", "replace")

    @property
    def server_root(self) -> str:
        """``base_url`` without a trailing ``/v1`` (where ``/metrics`` and ``/health`` live)."""
        root = self.config.base_url.rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root
