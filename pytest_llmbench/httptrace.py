"""HTTP request-lifecycle timings from aiohttp's client tracing (AIPerf "HTTP Trace Metrics").

Opt-in (``ClientConfig.http_trace=True``, plain ``aiohttp`` transport only). Every request gets
one :class:`HttpTraceData` dict in ``RequestRecord.http_trace``: raw ``perf_counter_ns`` event
times plus byte and chunk counts. aiohttp's ``TraceConfig`` signals are per request (pool
queue, DNS, connection create/reuse, headers sent, body chunk sent, response headers). Nothing
is added per response read: the body side is filled once per response, from the client's own
per-read clock stamps (:func:`note_stream_reads`) and the byte count aiohttp's body stream
keeps (:class:`TracedResponse`), so a traced stream runs the same per-chunk code as an untraced
one.

:func:`phases` turns one dict into AIPerf's 14 ``http_req_*`` values (k6/HAR phases):

* ``blocked``    = pool wait (``on_connection_queued_start`` → ``_end``), 0 without a wait
* ``dns_lookup`` = ``on_dns_resolvehost_start`` → ``_end``, 0 on a cache hit / IP literal / reuse
* ``connecting`` = connection create span − the DNS span inside it (aiohttp resolves inside
  ``create``; TLS handshake included), 0 on reuse
* ``sending``    = connection ready → request body written (headers when there is no body)
* ``waiting``    = request written → first response *body* byte (TTFB): the client's stamp of
  the first read that completed an SSE event
* ``receiving``  = first → last response body byte: to the read that carried ``[DONE]`` (the
  stream's end without one)
* ``duration``   = connection ready → last body byte (measured, not summed)
* ``connection_overhead`` = blocked + dns_lookup + connecting; ``total`` = the six phases summed
* ``data_sent`` / ``data_received``: request line + headers + body bytes / status line + headers
  + body bytes, the header blocks reconstructed from the header lists as HTTP/1.1 serialises
  them; body bytes received are after chunked-transfer decoding (framing not counted)
* ``chunks_sent`` = body writes (``on_request_chunk_sent``); ``chunks_received`` = reads of the
  response body stream that completed a chunk the client timed (the first SSE event and every
  event with ``choices``: the distinct per-read stamps); a read that completed only ``[DONE]``,
  the usage chunk, a comment or part of an event is not counted (AIPerf counts every read). A
  body read whole, non-streaming or an error, counts once; aiohttp's buffer may merge socket reads
* ``connection_reused`` = 1 when a pooled connection was taken, else 0
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, TypedDict

__all__ = [
    "HTTP_PHASES",
    "HttpTraceData",
    "TracedResponse",
    "make_trace_config",
    "new_trace",
    "note_stream_reads",
    "phases",
]

_clock = time.perf_counter_ns


class HttpTraceData(TypedDict, total=False):
    """One request's trace: ``*_ns`` are ``perf_counter_ns`` readings, the rest counts."""

    request_start_ns: int
    queued_start_ns: int
    queued_end_ns: int
    create_start_ns: int
    create_end_ns: int
    reused_ns: int
    dns_start_ns: int
    dns_end_ns: int
    dns_cache_hit_ns: int
    dns_cache_miss_ns: int
    headers_sent_ns: int
    body_sent_ns: int  # last body chunk written
    response_headers_ns: int  # response status line + headers parsed (on_request_end)
    first_byte_ns: int  # first read of the response body that completed an event (note_stream_reads)
    last_byte_ns: int  # the read that carried [DONE], or the body's end
    exception_ns: int
    request_header_bytes: int
    request_body_bytes: int
    request_chunks: int
    response_header_bytes: int
    response_body_bytes: int
    response_chunks: int


def new_trace() -> HttpTraceData:
    """An empty trace for one request (passed to the transport as ``trace_request_ctx``)."""
    return HttpTraceData(request_body_bytes=0, request_chunks=0, response_body_bytes=0, response_chunks=0)


def _header_block_bytes(first_line: str, items: Any) -> int:
    """Bytes of an HTTP/1.1 header block: first line, ``Name: value\r\n`` each, blank line.

    Header text is latin-1 on the wire (one byte per character), so ``len`` of the str or
    bytes is the byte count; no encoding pass is needed.
    """
    items = list(items)
    # the lengths summed in C (map), not one Python-level len() per name and value
    return len(first_line) + 4 + sum(map(len, itertools.chain.from_iterable(items))) + 4 * len(items)


def _ctx_factory(trace_request_ctx: Any = None) -> Any:
    # requests sent without a trace dict (GET /metrics) write into a throwaway namespace
    return trace_request_ctx if isinstance(trace_request_ctx, dict) else SimpleNamespace()


def _stamp(key: str) -> Any:
    async def on_event(session: Any, ctx: Any, params: Any) -> None:
        if isinstance(ctx, dict):
            ctx[key] = _clock()

    return on_event


def _stamp_once(key: str) -> Any:
    async def on_event(session: Any, ctx: Any, params: Any) -> None:
        if isinstance(ctx, dict) and key not in ctx:
            ctx[key] = _clock()

    return on_event


async def _on_headers_sent(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx, dict):
        ctx["headers_sent_ns"] = _clock()
        url = params.url
        target = url.raw_path_qs if hasattr(url, "raw_path_qs") else str(url)
        ctx["request_header_bytes"] = _header_block_bytes(f"{params.method} {target} HTTP/1.1",
                                                          params.headers.items())


async def _on_chunk_sent(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx, dict):
        ctx["body_sent_ns"] = _clock()
        ctx["request_body_bytes"] = ctx.get("request_body_bytes", 0) + len(params.chunk)
        ctx["request_chunks"] = ctx.get("request_chunks", 0) + 1


async def _on_request_end(session: Any, ctx: Any, params: Any) -> None:
    if isinstance(ctx, dict):
        ctx["response_headers_ns"] = _clock()
        resp = params.response
        ctx["response_header_bytes"] = _header_block_bytes(
            f"HTTP/{resp.version.major}.{resp.version.minor} {resp.status} {resp.reason or ''}",
            resp.raw_headers)


def make_trace_config() -> Any:
    """An ``aiohttp.TraceConfig`` filling the :class:`HttpTraceData` passed as
    ``trace_request_ctx``. Every signal fires once per request (none per response chunk)."""
    import aiohttp

    tc = aiohttp.TraceConfig(trace_config_ctx_factory=_ctx_factory)
    tc.on_request_start.append(_stamp("request_start_ns"))
    tc.on_connection_queued_start.append(_stamp("queued_start_ns"))
    tc.on_connection_queued_end.append(_stamp("queued_end_ns"))
    tc.on_connection_create_start.append(_stamp("create_start_ns"))
    tc.on_connection_create_end.append(_stamp("create_end_ns"))
    tc.on_connection_reuseconn.append(_stamp("reused_ns"))
    tc.on_dns_resolvehost_start.append(_stamp("dns_start_ns"))
    tc.on_dns_resolvehost_end.append(_stamp("dns_end_ns"))
    tc.on_dns_cache_hit.append(_stamp_once("dns_cache_hit_ns"))
    tc.on_dns_cache_miss.append(_stamp_once("dns_cache_miss_ns"))
    tc.on_request_headers_sent.append(_on_headers_sent)
    tc.on_request_chunk_sent.append(_on_chunk_sent)
    tc.on_request_end.append(_on_request_end)
    tc.on_request_exception.append(_stamp("exception_ns"))
    tc.freeze()
    return tc


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


#: AIPerf's 14 HTTP-trace tags, in the order of its reference, mapped to :func:`phases` keys.
HTTP_PHASES: tuple[str, ...] = (
    "blocked", "dns_lookup", "connecting", "sending", "waiting", "receiving", "duration",
    "connection_overhead", "total", "data_sent", "data_received", "connection_reused",
    "chunks_sent", "chunks_received",
)


def phases(trace: Mapping[str, Any] | None) -> dict[str, float | int | None]:
    """AIPerf's HTTP-trace values for one request: times in seconds, bytes, counts.

    A phase whose events did not happen (request failed before the response) is ``None``;
    phases that legitimately did not occur (no pool wait, reused connection) are 0.
    """
    out: dict[str, float | int | None] = dict.fromkeys(HTTP_PHASES)
    if not trace or "request_start_ns" not in trace:
        return out
    t = trace
    ns = 1e-9

    def span(a: str, b: str) -> int:
        return t[b] - t[a] if a in t and b in t else 0

    blocked = span("queued_start_ns", "queued_end_ns")
    dns = span("dns_start_ns", "dns_end_ns")
    created = "create_end_ns" in t
    connecting = max(span("create_start_ns", "create_end_ns") - dns, 0) if created else 0
    ready = t.get("create_end_ns") or t.get("reused_ns") or t.get("queued_end_ns") or t["request_start_ns"]
    reused = "reused_ns" in t and not created
    out["blocked"], out["dns_lookup"], out["connecting"] = blocked * ns, dns * ns, connecting * ns
    out["connection_overhead"] = (blocked + dns + connecting) * ns
    out["connection_reused"] = 1 if reused else 0
    sent = t.get("body_sent_ns") or t.get("headers_sent_ns")
    out["chunks_sent"] = int(t.get("request_chunks", 0))
    if "request_header_bytes" in t:
        out["data_sent"] = int(t["request_header_bytes"]) + int(t.get("request_body_bytes", 0))
    if sent is None:
        return out
    out["sending"] = max(sent - ready, 0) * ns
    first = t.get("first_byte_ns") or t.get("response_headers_ns")
    last = t.get("last_byte_ns") or first
    if "response_header_bytes" in t:
        out["data_received"] = int(t["response_header_bytes"]) + int(t.get("response_body_bytes", 0))
        out["chunks_received"] = int(t.get("response_chunks", 0))
    if first is None or last is None:
        return out
    out["waiting"] = max(first - sent, 0) * ns
    out["receiving"] = max(last - first, 0) * ns
    out["duration"] = max(last - ready, 0) * ns
    out["total"] = (blocked + dns + connecting) * ns + out["sending"] + out["waiting"] + out["receiving"]
    return out
