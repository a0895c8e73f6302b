"""One request to an OpenAI-compatible endpoint -> one :class:`RequestRecord` (§4.2.2, §4.2.6).

:class:`LLMClient` sends chat or completions requests, streaming (SSE) or not, and times every
chunk at the read that completed its ``data:`` event (App. B.1.1; :mod:`.stream`). T_submit
(``sent_ns``) is the moment the transport sends the last byte of the request body, after any
connection set-up (App. B.1.1); the earlier hand-over to the transport is kept as ``queued_ns``.
Per-chunk token counts are assigned after the stream ends by tokenizing the joined output once
(§4.6.3). What a server adds to the OpenAI API is read by its adapter (``adapter=``, from
``pytest_llmbench.sut.adapters``), never by a server-kind test here; what it needs of a request body
beyond it is shaped by the hook its adapter makes (``body_hook=``, :mod:`.hooks`).

Every outcome is classified into :class:`ErrorType` (:mod:`.errors`) and no exception escapes
:meth:`LLMClient.send` except the caller's own cancellation (the record passed in is then marked
``cancelled``).

A ``grpc://`` (``grpcs://``) base URL sends each request as a gRPC ``Generate`` call instead
(§4.6.1, App. B.1.2; :mod:`.transports.grpc`, the ``grpc`` extra): the same body is built and shaped,
then turned into the call's message; the transport times the messages into the same record.

The package, like httpx: :mod:`.config` (``ClientConfig``, the body), :mod:`.transports`
(aiohttp with its HTTP-trace hooks, httpx, httpx-aiohttp, an in-process ``MockTransport``, gRPC),
:mod:`.errors` (the one error map), :mod:`.stream` (the response reader), :mod:`.sse` (the SSE
parser). The API key is read from the environment variable named by ``ClientConfig.api_key_env``;
it is never stored in the config, records, logs or error messages.
"""

from __future__ import annotations

import asyncio
import errno as _errno
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from ..common.records import ErrorType, RequestRecord, RequestSpec
from ..common.tokenizer import Tokenizer, get_tokenizer
from ..measure import tokencount
from ..measure.tokencount import TOKEN_IDS
from ..measure.refusals import refusal_reason
from ..sut.adapters import GENERIC, ServerAdapter, root_url
from .config import API_KINDS, TRANSPORTS, ClientConfig, build_body
from .errors import (
    CLOSED_AFTER_SEND,
    ERROR_MAP,
    ErrorRule,
    TransportError,
    classify_status,
    classify_transport_error,
    map_transport_errors,
)
from .hooks import BodyHook
from .phases import assign_phases, split_think_tags
from .sse import SSEDecodeError, SSEError
from .stream import Hold, ResponseReader, assign_chunk_tokens, dumps
from .transports import (
    MockRequest,
    MockResponse,
    MockTransport,
    Response,
    SubmitStamp,
    Transport,
    httptrace,
    make_transport,
)
from .transports.aiohttp import AiohttpTransport
from .transports.httpx import HttpxTransport

if sys.version_info >= (3, 11):
    from asyncio import timeout as _timeout
else:  # pragma: no cover
    from async_timeout import timeout as _timeout

#: the per-request deadline below needs ``Task.uncancel`` (3.11); before it, ``async_timeout``
_LEAN_DEADLINE = sys.version_info >= (3, 11)
_current_task = asyncio.current_task


def _expire(task: asyncio.Task[Any], expired: list[bool]) -> None:
    """The total timeout fired: mark it, cancel the request's task (as ``asyncio.timeout`` does)."""
    expired[0] = True
    task.cancel()

_DROPPED = frozenset({_errno.ECONNRESET, _errno.EPIPE, _errno.ECONNABORTED})

__all__ = [
    "CLOSED_AFTER_SEND",
    "API_KINDS",
    "ERROR_MAP",
    "AiohttpTransport",
    "BodyHook",
    "ClientConfig",
    "ErrorRule",
    "HttpxTransport",
    "LLMClient",
    "MockRequest",
    "MockResponse",
    "MockTransport",
    "Response",
    "SubmitStamp",
    "TRANSPORTS",
    "Transport",
    "TransportError",
    "assign_chunk_tokens",
    "build_body",
    "classify_status",
    "classify_transport_error",
    "httptrace",
    "make_transport",
    "map_transport_errors",
]


def _dropped(exc: BaseException) -> bool:
    """A connection reset or broken pipe somewhere in ``exc``'s chain (not a refused connection)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 4:
        if isinstance(cur, (ConnectionResetError, BrokenPipeError)) or getattr(cur, "errno", None) in _DROPPED:
            return True
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return False


class LLMClient:
    """Async client for one SUT endpoint. Use as ``async with LLMClient(cfg) as c: await c.send(spec)``.

    ``max_connections`` overrides ``config.max_connections`` (the load generator sizes the pool to
    the load). ``tokenizer`` overrides ``config.tokenizer`` for client-side token counts.
    ``transport`` replaces the one ``config.transport`` names (e.g. a ``MockTransport``).
    ``adapter`` reads the server's response extensions (default: the generic adapter, which reads
    every known one); ``SUT.adapter`` gives the SUT's. ``body_hook`` shapes each request body for the
    server (:class:`~.hooks.BodyHook`, e.g. the adapter's prompt fitting); None: the OpenAI body as built.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        max_connections: int | None = None,
        tokenizer: Tokenizer | None = None,
        transport: Transport | None = None,
        adapter: ServerAdapter | None = None,
        body_hook: BodyHook | None = None,
    ) -> None:
        self.config = config
        self.adapter = adapter if adapter is not None else GENERIC
        self.body_hook = body_hook
        self._given_transport = transport
        self._max_connections = max_connections if max_connections is not None else config.max_connections
        self._grpc = config.protocol == "grpc"
        self._url = config.base_url.rstrip("/") + ("" if self._grpc else config.path)
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
        self._loop: asyncio.AbstractEventLoop | None = None  # the transport's (its requests' deadlines)
        self._reader = ResponseReader(config, self.adapter)

    def __repr__(self) -> str:
        return f"LLMClient({self._url!r}, api={self.config.api!r}, transport={self.transport_name!r})"

    # -- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> LLMClient:
        self._ensure_transport()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.body_hook is not None:
            await self.body_hook.aclose()
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None
            self._loop = None

    def _ensure_transport(self) -> Transport:
        if self._transport is None:
            given = self._given_transport
            if given is not None:
                self._transport = given
            elif self._grpc:  # the server's output ids decoded with its tokenizer, when one is named
                name = self.config.output_tokenizer
                self._transport = make_transport(self.config, self._max_connections,
                                                 decode=get_tokenizer(name).decode if name else None)
            else:
                self._transport = make_transport(self.config, self._max_connections)
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:  # made outside a loop: deadlines take asyncio.timeout
                self._loop = None
        return self._transport

    @property
    def transport_name(self) -> str:
        if self._given_transport is not None:
            return self._given_transport.name
        return "grpc" if self._grpc else self.config.transport

    @property
    def max_connections(self) -> int | None:
        """Connection pool size (None: unlimited)."""
        return self._max_connections

    def set_hold(self, hold: Hold | None) -> None:
        """Before parsing a read, ask ``hold`` whether to wait first (:data:`.stream.Hold`; None: never).
        The open loop sets one so that a due send is not queued behind a batch of parsing."""
        self._reader.hold = hold

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self._tokenizer

    @property
    def headers(self) -> dict[str, str]:
        """The request headers, ``Authorization`` included (for an adapter's own requests; never log them)."""
        return dict(self._headers)

    @property
    def verify_tls(self) -> bool:
        return self.config.verify_tls

    def describe(self) -> dict[str, Any]:
        d = self.config.describe()
        d["transport"] = self.transport_name
        d["url"] = self._url
        d["max_connections"] = self._max_connections
        d["protocol"] = self.config.protocol
        d["tokenizer"] = self._tokenizer.declaration.to_json() if self._tokenizer else None
        if self.body_hook is not None:
            d.update(self.body_hook.describe())
        return d

    # -- requests --------------------------------------------------------------------------
    async def prepare(self, specs: Iterable[RequestSpec]) -> None:
        """Before a run: what the body hook needs for every spec, concurrently (raises what it raises),
        so that no request waits for it at its send. Nothing without a hook."""
        hook = self.body_hook
        if hook is not None:
            await asyncio.gather(*(hook.prepare(s) for s in specs))

    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        """The OpenAI body for ``spec`` (:func:`.config.build_body`); :meth:`send` hands it to the body hook,
        as httpx's ``send`` runs its request hooks on what ``build_request`` built."""
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
        so the caller can do it off the submission path. A body hook that must prepare ``spec`` first
        (:mod:`.hooks`) does so here; when it fails, the record fails (``protocol``) unsent.
        """
        hook = self.body_hook
        if hook is not None and not hook.ready(spec):
            try:
                await hook.prepare(spec)
            except Exception as e:  # the hook's own failure (its server call): still one record
                rec = record if record is not None else RequestRecord.from_spec(spec, phase=phase)
                self._fail(rec, ErrorType.PROTOCOL, f"{hook.name}: {str(e) or type(e).__name__}")  # never empty
                self._complete(rec, finalize)
                return rec
        rec = record if record is not None else RequestRecord.from_spec(spec, phase=phase)
        if intended_ns is not None:
            rec.intended_ns = intended_ns
        rec.input_tokens_client = spec.input_tokens
        submit = SubmitStamp()
        try:
            try:
                built = self.build_body(spec) if hook is None else hook(spec, self.build_body(spec))
                body = built if self._grpc else dumps(built)
                transport = self._ensure_transport()
                # a request's own headers (a session's sticky-routing header) beside the client's
                headers = self._headers if not spec.headers else {**self._headers, **dict(spec.headers)}
                await self._exchange_in_time(transport, body, rec, submit, headers)
            finally:  # failed before a response: T_submit if the body went out, else the hand-over
                if not rec.sent_ns:
                    rec.sent_ns = submit.ns or rec.queued_ns or 0
        except TransportError as e:  # the transport's, or found in the response
            if e.error_type is ErrorType.CONNECT and submit.ns and _dropped(e):  # it went out: the server dropped it
                self._fail(rec, ErrorType.PROTOCOL, f"{CLOSED_AFTER_SEND}: {e.message}")
            else:
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
        if self.config.think_tags:  # the user says the model thinks in <think> tags inside its content
            split_think_tags(rec)
        assign_phases(rec)
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
        if rec.token_count_method == TOKEN_IDS:  # gRPC: counted from the ids each message carried
            return rec
        counts = assign_chunk_tokens(tok, rec.chunk_text)
        if any(rec.chunk_reasoning):
            reasoning = assign_chunk_tokens(tok, rec.chunk_reasoning)
            for i, n in enumerate(reasoning):
                counts[i] += n
            rec.reasoning_tokens_client = sum(reasoning)
        if rec.chunk_tool and any(rec.chunk_tool):  # tool-call arguments, a phase of their own
            tool = assign_chunk_tokens(tok, rec.chunk_tool)
            for i, n in enumerate(tool):
                counts[i] += n
            rec.tool_tokens_client = sum(tool)
        rec.chunk_tokens = counts
        rec.output_tokens_client = sum(counts)
        rec.tokenizer = tok.declaration.name
        rec.token_count_method = tokencount.REFERENCE
        # server tokens (§4.4): its running count on every chunk, else one token per content chunk
        if not tokencount.apply_chunk_usage(rec):
            tokencount.apply_one_per_chunk(rec)
        return rec

    async def _exchange_in_time(self, transport: Transport, body: Any, rec: RequestRecord,
                                submit: SubmitStamp, headers: dict[str, str]) -> None:
        """:meth:`_exchange` within ``total_timeout_s``, its expiry raised as ``TimeoutError``.

        What ``asyncio.timeout`` does, one loop timer per request that cancels the request's task,
        the cancellation turned into ``TimeoutError`` unless someone else also cancelled it, without
        its per-request context object and loop and task lookups (on CPython 3.11 two of those cost
        a ``getpid`` system call each, ~4 % of the closed loop's CPU: issue 38). The loop is the
        transport's (:meth:`_ensure_transport`); outside it, and before 3.11, ``asyncio.timeout``.
        """
        total = self.config.total_timeout_s
        loop = self._loop
        task = _current_task(loop) if _LEAN_DEADLINE and loop is not None and total is not None else None
        if task is None:  # no timeout (None), outside the transport's loop, or before 3.11
            async with _timeout(total):
                rec.queued_ns = time.perf_counter_ns()
                await self._exchange(transport, body, rec, submit, headers)
            return
        cancelling = task.cancelling()
        expired = [False]
        handle = loop.call_at(loop.time() + total, _expire, task, expired)  # type: ignore[union-attr]
        try:
            rec.queued_ns = time.perf_counter_ns()
            await self._exchange(transport, body, rec, submit, headers)
        except asyncio.CancelledError as exc:
            if expired[0]:
                expired[0] = False  # our cancellation, taken back here
                if task.uncancel() <= cancelling:  # ours alone: the total timeout
                    raise TimeoutError from exc
            raise
        finally:
            handle.cancel()
            if expired[0]:  # expired as the exchange ended otherwise: take our cancellation back
                task.uncancel()

    async def _exchange(self, transport: Transport, body: Any, rec: RequestRecord, submit: SubmitStamp,
                        headers: dict[str, str]) -> None:
        if self._grpc:  # one Generate call, timed into rec by the transport (App. B.1.2)
            await transport.stream(body, headers, rec, submit)  # type: ignore[attr-defined]
            rec.sent_ns = submit.ns or time.perf_counter_ns()
            return
        if self.config.http_trace:
            rec.http_trace = httptrace.new_trace(rec.queued_ns)  # type: ignore[assignment]
            resp = await transport.post(self._url, body, headers, submit, trace=rec.http_trace)
        else:
            resp = await transport.post(self._url, body, headers, submit)
        # T_submit (App. B.1.1); a server that answered before the body was written bounds it
        rec.sent_ns = submit.ns or time.perf_counter_ns()
        try:
            await self._reader.read(resp, rec)
        finally:
            if rec.http_trace is not None:  # body reads once per response, from the per-read stamps
                httptrace.note_stream_reads(rec.http_trace, rec.chunk_ns,  # type: ignore[arg-type]
                                            rec.first_chunk_ns, rec.end_ns)
            await resp.release()

    async def get(self, url: str) -> tuple[int, str]:
        """GET ``url`` (absolute, or a path on the server root) -> (status, text). Raises
        :class:`TransportError` on failure. Used for ``/metrics`` (§4.5.1 queue drain)."""
        if not url.startswith(("http://", "https://")):
            url = self.server_root + "/" + url.lstrip("/")
        status, body = await self._ensure_transport().get(url, self._get_headers)
        return status, body.decode("utf-8", "replace")

    @property
    def server_root(self) -> str:
        """The server root of ``base_url`` (``adapters.root_url``: where ``/metrics`` and ``/health`` live); for a
        gRPC endpoint its HTTP root beside it (``ClientConfig.http_root``) when it has one."""
        return self.config.http_root or root_url(self.config.base_url)
