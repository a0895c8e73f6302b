"""HTTP request-lifecycle timings for the aiohttp transport (AIPerf "HTTP Trace Metrics").

Opt-in (``ClientConfig.http_trace=True``, plain ``aiohttp`` transport only). Every request gets
one :class:`HttpTraceData` dict in ``RequestRecord.http_trace``: raw ``perf_counter_ns`` event
times plus byte and chunk counts. No ``aiohttp.TraceConfig`` is installed (it builds a ``Trace``
per request and sends six signals, each with a parameters object, whether or not anything
happened). Instead, each figure comes from where its event happens, at no cost elsewhere:

* the transport's ``post()`` makes the request's dict current (:data:`CURRENT_TRACE`, a
  ``ContextVar``) for the connector, stamps an exception, and when the response headers are in,
  stamps them and takes both header blocks' sizes from the response (:func:`note_response`);
* the request start and the last body byte are the client's own stamps (``record.queued_ns``,
  and T_submit ``record.sent_ns`` from ``transports.base.stamped_body``; :func:`note_request_sent`);
* connection events come from the connector (:func:`make_connector`): pool wait, creation, reuse
  and DNS are stamped by hooks aiohttp's connector calls only when they happen (see there);
* nothing is added per response read: the body side is filled once per response, from the
  client's own per-read clock stamps (:func:`note_stream_reads`) and the byte count aiohttp's body
  stream keeps (:class:`TracedResponse`), so a traced stream runs the same per-chunk code as an
  untraced one.

:func:`~pytest_llmbench.measure.http_phases.phases` turns one dict into AIPerf's 14 ``http_req_*`` values
(defined there).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypedDict

from ...measure.http_phases import HTTP_PHASES, phases

if TYPE_CHECKING:
    import aiohttp
    from aiohttp.tracing import Trace

__all__ = [
    "CURRENT_TRACE",
    "HTTP_PHASES",
    "HttpTraceData",
    "TracedResponse",
    "make_connector",
    "new_trace",
    "note_request_sent",
    "note_response",
    "note_stream_reads",
    "phases",
]

_clock = time.perf_counter_ns


class HttpTraceData(TypedDict, total=False):
    """One request's trace: ``*_ns`` are ``perf_counter_ns`` readings, the rest counts."""

    request_start_ns: int  # hand-over to the transport (record.queued_ns)
    queued_start_ns: int
    queued_end_ns: int
    create_start_ns: int
    create_end_ns: int
    reused_ns: int
    dns_start_ns: int
    dns_end_ns: int
    dns_cache_hit_ns: int
    dns_cache_miss_ns: int
    headers_sent_ns: int  # not stamped since the body's end is (records written before may have it)
    body_sent_ns: int  # last body byte handed to the connection: T_submit (record.sent_ns)
    response_headers_ns: int  # response status line + headers parsed (session.post returned)
    first_byte_ns: int  # first read of the response body that completed an event (note_stream_reads)
    last_byte_ns: int  # the read that carried [DONE], or the body's end
    exception_ns: int  # the request failed before its response headers
    request_header_bytes: int
    request_body_bytes: int
    request_chunks: int
    response_header_bytes: int
    response_body_bytes: int
    response_chunks: int


#: The trace of the request the current task is sending (set by the transport's ``post()``);
#: the connector hooks stamp into it. ``None``: untraced (e.g. ``GET /metrics``).
CURRENT_TRACE: ContextVar[HttpTraceData | None] = ContextVar("llmbench_http_trace", default=None)


def new_trace(request_start_ns: int | None = None) -> HttpTraceData:
    """An empty trace for one request, started at ``request_start_ns`` (the hand-over)."""
    t = HttpTraceData(request_body_bytes=0, request_chunks=0, response_body_bytes=0, response_chunks=0)
    if request_start_ns is not None:
        t["request_start_ns"] = request_start_ns
    return t


def _header_block_bytes(first_line: str, items: Any) -> int:
    """Bytes of an HTTP/1.1 header block: first line, ``Name: value\r\n`` each, blank line.

    Header text is latin-1 on the wire (one byte per character), so ``len`` of the str or
    bytes is the byte count; no encoding pass is needed.
    """
    items = list(items)
    # the lengths summed in C (map), not one Python-level len() per name and value
    return len(first_line) + 4 + sum(map(len, itertools.chain.from_iterable(items))) + 4 * len(items)


def note_request_sent(trace: HttpTraceData, sent_ns: int, body_bytes: int, writes: int) -> None:
    """The request body went out whole: its last byte at ``sent_ns`` (T_submit), in ``writes``."""
    trace["body_sent_ns"] = sent_ns
    trace["request_body_bytes"] = body_bytes
    trace["request_chunks"] = writes


def note_response(trace: HttpTraceData, resp: Any) -> None:
    """The response headers of an ``aiohttp.ClientResponse`` are in: stamp them, and size both
    header blocks. The request's headers are the ones aiohttp wrote (``request_info.headers`` is a
    view of the request's final headers, ``Host``, ``User-Agent``, ``Accept-Encoding``,
    ``Content-Length``, ``Connection`` included), its target the URL's path and query."""
    trace["response_headers_ns"] = _clock()
    info = resp.request_info
    trace["request_header_bytes"] = _header_block_bytes(f"{info.method} {info.url.raw_path_qs} HTTP/1.1",
                                                        info.headers.items())
    v = resp.version
    trace["response_header_bytes"] = _header_block_bytes(f"HTTP/{v.major}.{v.minor} {resp.status} {resp.reason or ''}",
                                                         resp.raw_headers)


def _stamp(key: str) -> Callable[..., Awaitable[None]]:
    """A connector hook that stamps ``key`` into the current request's trace."""
    async def hook(self: Any, *args: Any) -> None:
        t = CURRENT_TRACE.get()
        if t is not None:
            t[key] = _clock()  # type: ignore[literal-required]

    return hook


def _stamp_once(key: str) -> Callable[..., Awaitable[None]]:
    """As :func:`_stamp`, keeping the first stamp (a lookup may hit the cache after a miss)."""
    async def hook(self: Any, *args: Any) -> None:
        t = CURRENT_TRACE.get()
        if t is not None and key not in t:
            t[key] = _clock()  # type: ignore[literal-required]

    return hook


@functools.cache
def _hooks_class() -> type[Trace]:
    """:class:`ConnectorHooks` (built on first use: aiohttp is imported only then)."""
    from aiohttp.tracing import Trace

    class ConnectorHooks(Trace):
        """The connection-level events, as aiohttp's connector reports them to a ``Trace``.

        ``connect(req, traces, timeout)`` calls these ``send_*`` methods on every element of
        ``traces`` exactly where the event happens, and never otherwise: a pool wait (queued
        start/end, only when the pool is full), a new connection (create start/end, with the DNS
        lookup, cache hit or miss inside it) or a pooled one taken (reuse). Checked identical, call
        sites and signatures, from aiohttp 3.9.0 (the lower bound) through 3.14.x (installed). One
        instance per connector; each hook stamps into :data:`CURRENT_TRACE`. The request-level
        ``send_*`` methods are never called from the connector; were one called, it would send
        on the empty frozen ``TraceConfig`` this is built with (a no-op).
        """

        send_connection_queued_start = _stamp("queued_start_ns")
        send_connection_queued_end = _stamp("queued_end_ns")
        send_connection_create_start = _stamp("create_start_ns")
        send_connection_create_end = _stamp("create_end_ns")
        send_connection_reuseconn = _stamp("reused_ns")
        send_dns_resolvehost_start = _stamp("dns_start_ns")
        send_dns_resolvehost_end = _stamp("dns_end_ns")
        send_dns_cache_hit = _stamp_once("dns_cache_hit_ns")
        send_dns_cache_miss = _stamp_once("dns_cache_miss_ns")

    return ConnectorHooks


def _connector_hooks() -> Trace:
    """A new :class:`ConnectorHooks` (one per connector)."""
    import aiohttp

    empty = aiohttp.TraceConfig()
    empty.freeze()
    return _hooks_class()(None, empty, SimpleNamespace())  # type: ignore[arg-type]


@functools.cache
def _connector_class() -> type[aiohttp.TCPConnector]:
    """The traced ``TCPConnector`` subclass (built on first use: aiohttp is imported only then)."""
    import aiohttp
    from aiohttp.client_reqrep import ClientRequest

    class TracingConnector(aiohttp.TCPConnector):
        """A ``TCPConnector`` whose ``connect`` passes :class:`ConnectorHooks` as a trace.

        ``connect(req, traces, timeout)`` is the connector's public entry point (the session calls
        it once per request with its own traces: none, as no ``TraceConfig`` is installed). A
        weak set of protocols seen before would tell reuse from creation but not a pool wait from
        the start of a creation after it; aiohttp's own connection events do both, at the points
        they happen, and cost one hook (the reuse stamp) on a request that takes a pooled connection.
        """

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._hooks: list[Trace] = [_connector_hooks()]

        async def connect(self, req: ClientRequest, traces: list[Trace],
                          timeout: aiohttp.ClientTimeout) -> aiohttp.connector.Connection:
            return await super().connect(req, [*traces, *self._hooks] if traces else self._hooks, timeout)

    return TracingConnector


def make_connector(**kwargs: Any) -> aiohttp.TCPConnector:
    """A ``TCPConnector`` (``kwargs`` as for it) that stamps connection events into
    :data:`CURRENT_TRACE`: pool wait, connection creation, DNS lookup, reuse."""
    return _connector_class()(**kwargs)


class TracedResponse:
    """The aiohttp transport's response when tracing is on, adding nothing per read.

    ``read_chunk`` *is* the untraced response's bound method (the client's read loop binds it
    once), so a traced stream runs the same per-read code as an untraced one. The body-read
    figures come once per response instead: :func:`note_stream_reads` derives the read count and
    first/last byte times from the client's own per-read stamps, ``release`` takes the body bytes
    from the count aiohttp's stream keeps anyway, and ``read_body`` (a whole body read at once:
    error bodies, non-streaming answers) stamps its arrival.
    """

    __slots__ = ("_inner", "_trace", "read_chunk", "status", "content_type")

    def __init__(self, inner: Any, trace: HttpTraceData) -> None:
        self._inner = inner
        self._trace = trace
        self.read_chunk: Callable[[], Awaitable[bytes]] = inner.read_chunk
        self.status: int = inner.status
        self.content_type: str = inner.content_type

    async def read_body(self, limit: int) -> bytes:
        """Whole body, counted as one read and stamped when complete (such a body arrives at
        once, so first ≈ last byte)."""
        body: bytes = await self._inner.read_body(limit)
        if body:
            t = self._trace
            t["first_byte_ns"] = t["last_byte_ns"] = _clock()
            t["response_chunks"] = 1
        return body

    async def release(self) -> None:
        # bytes fed into aiohttp's body stream (after chunked-transfer decoding), whether or not
        # the client read them all
        self._trace["response_body_bytes"] = int(self._inner._content.total_bytes)
        await self._inner.release()


def note_stream_reads(trace: HttpTraceData, chunk_ns: Sequence[int], first_ns: int | None,
                      end_ns: int | None) -> None:
    """Body reads of a streamed response, once at its end, from what the client stamped per read.

    The client reads the clock once per body read and gives that time to every chunk the read
    completed (``chunk_ns``), to the first read that completed any SSE event (``first_ns``) and to
    the read that carried ``[DONE]`` (``end_ns``; the end of the stream when it closed without
    one; ``None`` when it broke). So the distinct stamps are the reads that completed a timed
    chunk: ``response_chunks`` counts them, ``first_byte_ns`` is the first and ``last_byte_ns``
    the end (the last timed read when the stream broke). A body already stamped by ``read_body``,
    or one in which no event completed, is left as it is.
    """
    if first_ns is None or "first_byte_ns" in trace:
        return
    reads = len(set(chunk_ns))
    if not chunk_ns or chunk_ns[0] != first_ns:
        reads += 1  # the first event carried no choices (metadata only)
    trace["response_chunks"] = reads
    trace["first_byte_ns"] = first_ns
    trace["last_byte_ns"] = end_ns if end_ns is not None else (chunk_ns[-1] if chunk_ns else first_ns)
