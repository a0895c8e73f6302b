"""HTTP-trace timings (httptrace.py) against a loopback server with known injected delays.

The server delays the TLS handshake after accepting (a plain TCP accept cannot be delayed as seen
by the client: the kernel completes the handshake before ``accept()``), the response headers,
and the second half of the body; a resolver wrapper delays DNS. Assertions are lower bounds
(a phase can only be longer than the delay injected into it on a busy machine) and exact byte
counts, never tight upper bounds.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from factories import delta_chunk, make_record, sse

from pytest_llmbench.client import TRANSPORTS, ClientConfig, LLMClient, httptrace
from pytest_llmbench.common.records import ErrorType, RequestRecord, RequestSpec

trustme = pytest.importorskip("trustme")

TLS_DELAY = 0.20  # before the server reads the ClientHello
HEADER_DELAY = 0.15  # request fully read -> response headers written
BODY_GAP = 0.10  # first SSE event -> the rest of the body
DNS_DELAY = 0.12
EVENT_GAP = 0.03  # between the body writes of LoopbackServer.events


class LoopbackServer:
    """HTTP/1.1 keep-alive over TLS; counts the bytes it reads and writes per request."""

    def __init__(self) -> None:
        ca = trustme.CA()
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost").configure_cert(self.ctx)
        self.received: list[int] = []
        self.sent: list[int] = []
        self.port = 0
        self.error_body: bytes | None = None  # set: answer 500 with this JSON body
        self.truncate = False  # set: close the connection after the first SSE event
        self.events: list[bytes] | None = None  # set: the SSE body, one write per item, EVENT_GAP apart
        self.chunked = False  # with events: Transfer-Encoding chunked, one HTTP chunk per write
        self.body_writes: list[int] = []  # per request: body writes (the server's chunks)
        self.body_bytes: list[int] = []  # per request: body bytes before any transfer framing
        self.hello_read_ns: list[int] = []  # when the server began reading a ClientHello (after TLS_DELAY)
        self.body_read_ns: list[int] = []  # when a request body had been read in full

    async def __aenter__(self) -> LoopbackServer:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        self._tasks: set[asyncio.Task[None]] = set()
        self._accepting = asyncio.create_task(self._accept())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._accepting.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(self._accepting, *self._tasks, return_exceptions=True)
        self._sock.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self._sock)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle/delayed-ACK stalls
            task = asyncio.create_task(self._handle(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            # the ClientHello waits unread in the socket buffer: the client's TLS handshake
            # (its "connecting" phase) cannot finish before this delay
            await asyncio.sleep(TLS_DELAY)
            self.hello_read_ns.append(time.perf_counter_ns())
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn, ssl=self.ctx)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.body_read_ns.append(time.perf_counter_ns())
                self.received.append(len(head) + len(body))
                await asyncio.sleep(HEADER_DELAY)
                if self.error_body is not None:
                    head_out = (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                                b"Content-Length: " + str(len(self.error_body)).encode() + b"\r\n\r\n")
                    writer.write(head_out + self.error_body)
                    await writer.drain()
                    self.sent.append(len(head_out) + len(self.error_body))
                    continue
                if self.events is not None:
                    await self._write_events(writer)
                    continue
                part1 = sse(delta_chunk("Hello"))
                part2 = sse(delta_chunk(" world", "stop"), done=True)
                headers = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           b"Content-Length: " + str(len(part1) + len(part2)).encode() + b"\r\n\r\n")
                writer.write(headers)
                await writer.drain()
                writer.write(part1)
                await writer.drain()
                if self.truncate:
                    return
                await asyncio.sleep(BODY_GAP)
                writer.write(part2)
                await writer.drain()
                self.sent.append(len(headers) + len(part1) + len(part2))
                self.body_writes.append(2)
                self.body_bytes.append(len(part1) + len(part2))
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            if writer is not None:
                writer.close()
            else:
                conn.close()


    async def _write_events(self, writer: asyncio.StreamWriter) -> None:
        assert self.events is not None
        framing = b"Transfer-Encoding: chunked" if self.chunked else \
            b"Content-Length: " + str(sum(map(len, self.events))).encode()
        headers = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + framing + b"\r\n\r\n"
        writer.write(headers)
        sent = len(headers)
        for i, ev in enumerate(self.events):
            if i:
                await asyncio.sleep(EVENT_GAP)  # far apart: the client reads each write alone
            out = b"%x\r\n%s\r\n" % (len(ev), ev) if self.chunked else ev
            if self.chunked and i == len(self.events) - 1:
                out += b"0\r\n\r\n"
            writer.write(out)
            await writer.drain()
            sent += len(out)
        self.sent.append(sent)
        self.body_writes.append(len(self.events))
        self.body_bytes.append(sum(map(len, self.events)))


def _spec(i: int = 0) -> RequestSpec:
    return RequestSpec(index=i, workload="t", input_tokens=4, max_tokens=8, prompt_text="hi there")


def _config(port: int, host: str = "127.0.0.1", **kw: Any) -> ClientConfig:
    return ClientConfig(base_url=f"https://{host}:{port}/v1", model="m", verify_tls=False, http_trace=True,
                        tokenizer=None, include_usage=False, **kw)


class _SlowResolver:
    """aiohttp resolver that waits DNS_DELAY, then answers 127.0.0.1."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        from aiohttp.resolver import ThreadedResolver

        self._inner = ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: int = 0) -> Any:
        await asyncio.sleep(DNS_DELAY)
        return await self._inner.resolve("127.0.0.1", port, family)

    async def close(self) -> None:
        await self._inner.close()


def _check_sums(p: dict[str, Any]) -> None:
    six = ("blocked", "dns_lookup", "connecting", "sending", "waiting", "receiving")
    assert p["total"] == pytest.approx(sum(p[k] for k in six), abs=1e-12)
    assert p["connection_overhead"] == pytest.approx(p["blocked"] + p["dns_lookup"] + p["connecting"], abs=1e-12)


async def test_new_connection_then_reuse_reflects_injected_delays() -> None:
    async with LoopbackServer() as srv, LLMClient(_config(srv.port)) as client:
        first = await client.send(_spec(0))
        second = await client.send(_spec(1))
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert first.output_text == "Hello world"
    p1, p2 = httptrace.phases(first.http_trace), httptrace.phases(second.http_trace)
    # new connection: the delayed TLS handshake is inside "connecting"
    assert p1["connection_reused"] == 0
    assert p1["connecting"] >= TLS_DELAY
    assert p1["waiting"] >= HEADER_DELAY
    assert p1["receiving"] >= BODY_GAP
    assert p1["duration"] >= HEADER_DELAY + BODY_GAP
    assert p1["chunks_received"] >= 2 and p1["chunks_sent"] >= 1
    # bytes: exactly what the server read and wrote (Content-Length body, no chunked framing)
    assert p1["data_sent"] == srv.received[0]
    assert p1["data_received"] == srv.sent[0]
    # T_submit (sent_ns) is the last request byte, after the connection set-up: TTFT excludes it
    # (the trace's body-sent time is T_submit itself: the client's stamp as the transport pulls the final byte)
    assert first.http_trace["create_end_ns"] <= first.sent_ns <= first.http_trace["body_sent_ns"]
    assert (first.sent_ns - first.queued_ns) / 1e9 >= p1["connecting"]
    assert (first.first_token_ns - first.sent_ns) / 1e9 >= HEADER_DELAY
    # reused connection: no connecting, no DNS
    assert p2["connection_reused"] == 1
    assert p2["connecting"] == 0 and p2["dns_lookup"] == 0
    assert p2["waiting"] >= HEADER_DELAY and p2["receiving"] >= BODY_GAP
    assert p2["data_sent"] == srv.received[1] and p2["data_received"] == srv.sent[1]
    _check_sums(p1)
    _check_sums(p2)
    # the trace rides in the record's JSON and back
    back = RequestRecord.from_json(json.loads(first.dumps()))
    assert httptrace.phases(back.http_trace) == p1


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_chunks_and_bytes_received_equal_what_the_server_sent(chunked: bool) -> None:
    # the server's writes, far apart: a role-only chunk first (vLLM's), one write with two chunks,
    # the last with [DONE] too; every write is one read, counted once (not once per chunk)
    events = [sse(delta_chunk("")), sse(delta_chunk("Hello")), sse(delta_chunk(" big"), delta_chunk("")),
              sse(delta_chunk(" world", "stop"), done=True)]
    async with LoopbackServer() as srv:
        srv.events, srv.chunked = events, chunked
        async with LLMClient(_config(srv.port)) as client:
            recs = [await client.send(_spec(i)) for i in range(2)]
    for i, rec in enumerate(recs):
        assert rec.ok, rec.error_message
        assert rec.output_text == "Hello big world" and len(rec.chunk_ns) == len(events) + 1
        t = rec.http_trace
        assert t is not None
        p = httptrace.phases(t)
        assert p["chunks_received"] == srv.body_writes[i] == len(events)
        assert t["response_body_bytes"] == srv.body_bytes[i] == sum(map(len, events))
        header_bytes = t["response_header_bytes"]
        assert p["data_received"] == header_bytes + srv.body_bytes[i]
        if not chunked:  # the whole response as written; chunked framing is not body data
            assert p["data_received"] == srv.sent[i]
        else:
            assert p["data_received"] < srv.sent[i]
        # first byte = the first write, last byte = the write with [DONE]
        assert t["first_byte_ns"] == rec.first_chunk_ns and t["last_byte_ns"] == rec.end_ns
        assert p["receiving"] >= (len(events) - 1) * EVENT_GAP
        _check_sums(p)


def test_stream_reads_from_the_client_stamps() -> None:
    # three reads (the second completed two chunks), then [DONE] in a read of its own
    t = httptrace.new_trace()
    httptrace.note_stream_reads(t, [10, 20, 20, 30], 10, 40)
    assert (t["response_chunks"], t["first_byte_ns"], t["last_byte_ns"]) == (3, 10, 40)
    # the first read completed only a usage/metadata event; the stream then broke (no end)
    t = httptrace.new_trace()
    httptrace.note_stream_reads(t, [20, 30], 5, None)
    assert (t["response_chunks"], t["first_byte_ns"], t["last_byte_ns"]) == (3, 5, 30)
    # a body already stamped whole (error body), or no event at all: left as it is
    t = httptrace.new_trace()
    t["first_byte_ns"] = t["last_byte_ns"] = 7
    t["response_chunks"] = 1
    httptrace.note_stream_reads(t, [10], 10, 10)
    assert (t["response_chunks"], t["first_byte_ns"]) == (1, 7)
    t = httptrace.new_trace()
    httptrace.note_stream_reads(t, [], None, 50)
    assert t["response_chunks"] == 0 and "first_byte_ns" not in t


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_t_submit_is_the_last_request_byte_after_the_handshake(transport: str) -> None:
    """App. B.1.1: T_submit is when the final request byte is written. The server reads the ClientHello
    only after TLS_DELAY, so no request byte can be written before it; the server reads the whole body
    only after the client wrote it. Both bounds are causal, so host load cannot break them."""
    async with LoopbackServer() as srv, LLMClient(replace(_config(srv.port), transport=transport, http_trace=False)) as c:
        first = await c.send(_spec(0))
        second = await c.send(_spec(1))  # reused connection
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert first.queued_ns is not None and second.queued_ns is not None
    # new connection: T_submit after the handshake the server held back, before the server had the body
    assert srv.hello_read_ns[0] < first.sent_ns <= srv.body_read_ns[0]
    assert first.sent_ns - first.queued_ns >= TLS_DELAY * 1e9
    # TTFT = first token - T_submit: the server's header delay is in it, the handshake delay is not
    assert first.first_token_ns - first.sent_ns >= HEADER_DELAY * 1e9
    assert first.first_token_ns - first.queued_ns >= (TLS_DELAY + HEADER_DELAY) * 1e9
    # reused connection: still between the hand-over and the server's read of the body
    assert second.queued_ns <= second.sent_ns <= srv.body_read_ns[1]
    assert len(srv.hello_read_ns) == 1


async def test_error_response_body_is_counted() -> None:
    async with LoopbackServer() as srv:
        srv.error_body = b'{"error": {"message": "boom"}}'
        async with LLMClient(_config(srv.port)) as client:
            rec = await client.send(_spec(0))
    assert rec.status == 500 and rec.error_message == "HTTP 500: boom"
    p = httptrace.phases(rec.http_trace)
    assert p["data_received"] == srv.sent[0] and p["chunks_received"] >= 1
    assert p["waiting"] >= HEADER_DELAY
    _check_sums(p)


async def test_broken_body_is_classified_with_the_trace_kept() -> None:
    async with LoopbackServer() as srv:
        srv.truncate = True
        async with LLMClient(_config(srv.port)) as client:
            rec = await client.send(_spec(0))
    assert rec.error_type is ErrorType.PROTOCOL, rec.error_message
    p = httptrace.phases(rec.http_trace)
    assert p["chunks_received"] >= 1 and p["waiting"] >= HEADER_DELAY


async def test_pool_wait_shows_as_blocked() -> None:
    async with LoopbackServer() as srv, LLMClient(_config(srv.port), max_connections=1) as client:
        a, b = await asyncio.gather(client.send(_spec(0)), client.send(_spec(1)))
    assert a.ok and b.ok
    pa, pb = httptrace.phases(a.http_trace), httptrace.phases(b.http_trace)
    waited = max(pa["blocked"], pb["blocked"])
    # the second request waits for the whole first exchange (headers + body gap at least)
    assert waited >= HEADER_DELAY + BODY_GAP
    assert min(pa["blocked"], pb["blocked"]) < waited
    _check_sums(pa)
    _check_sums(pb)


async def test_dns_lookup_measured_and_not_counted_in_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    import aiohttp.connector

    monkeypatch.setattr(aiohttp.connector, "DefaultResolver", _SlowResolver)
    async with LoopbackServer() as srv, LLMClient(_config(srv.port, host="slow.invalid")) as client:
        rec = await client.send(_spec(0))
    assert rec.ok, rec.error_message
    p = httptrace.phases(rec.http_trace)
    assert p["dns_lookup"] >= DNS_DELAY
    assert p["connecting"] >= TLS_DELAY
    t = rec.http_trace
    assert t is not None
    create_span = (t["create_end_ns"] - t["create_start_ns"]) / 1e9
    assert p["connecting"] == pytest.approx(create_span - p["dns_lookup"], abs=1e-9)
    _check_sums(p)


async def test_failed_connection_keeps_partial_trace() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with LLMClient(_config(port)) as client:
        rec = await client.send(_spec(0))
    assert not rec.ok
    assert rec.http_trace is not None and "exception_ns" in rec.http_trace
    p = httptrace.phases(rec.http_trace)
    assert p["waiting"] is None and p["duration"] is None  # no response: undefined, not 0
    # the connection attempt is in it, nothing of the body went out
    t = rec.http_trace
    assert t["request_start_ns"] == rec.queued_ns <= t["create_start_ns"] <= t["exception_ns"]
    assert "create_end_ns" not in t and "body_sent_ns" not in t
    assert p["chunks_sent"] == 0 and t["request_body_bytes"] == 0


async def test_tracing_off_leaves_records_unchanged() -> None:
    async with LoopbackServer() as srv:
        cfg = ClientConfig(base_url=f"https://127.0.0.1:{srv.port}/v1", model="m", verify_tls=False,
                           tokenizer=None, include_usage=False)
        async with LLMClient(cfg) as client:
            rec = await client.send(_spec(0))
    assert rec.ok and rec.http_trace is None
    assert "http_trace" in json.loads(rec.dumps())


def test_http_trace_needs_aiohttp_transport() -> None:
    with pytest.raises(ValueError, match=r"http_trace \(--llm-http-trace\) needs transport 'aiohttp'"):
        ClientConfig(base_url="http://x/v1", model="m", transport="httpx", http_trace=True)


def test_old_records_without_trace_fields_load() -> None:
    d = make_record().to_json()
    del d["http_trace"], d["reasoning_tokens_client"]
    rec = RequestRecord.from_json(d)
    assert rec.http_trace is None and rec.reasoning_tokens_client is None
    assert all(v is None for v in httptrace.phases(rec.http_trace).values())


# --- the hooks that replace aiohttp's TraceConfig (connector events, the request's own stamps) -------


async def test_new_connection_without_reuse_hits_the_dns_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep-alive off: every request creates a connection. The first resolves (cache miss, DNS_DELAY),
    the second takes the cached address: DNS 0, its TLS handshake still in connecting, not reused.
    The request headers aiohttp adds when it sends (``Connection: close``) are in data_sent."""
    import aiohttp.connector

    monkeypatch.setattr(aiohttp.connector, "DefaultResolver", _SlowResolver)
    async with LoopbackServer() as srv, \
            LLMClient(_config(srv.port, host="slow.invalid", reuse_connections=False)) as client:
        recs = [await client.send(_spec(i)) for i in range(2)]
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    assert len(srv.hello_read_ns) == 2  # two TLS handshakes: two connections
    (t1, p1), (t2, p2) = ((r.http_trace, httptrace.phases(r.http_trace)) for r in recs)
    assert t1 is not None and t2 is not None
    assert "dns_cache_miss_ns" in t1 and p1["dns_lookup"] >= DNS_DELAY
    assert "dns_cache_hit_ns" in t2 and "dns_start_ns" not in t2 and p2["dns_lookup"] == 0
    for i, (t, p) in enumerate(((t1, p1), (t2, p2))):
        assert p["connection_reused"] == 0 and "reused_ns" not in t
        assert p["connecting"] >= TLS_DELAY and p["blocked"] == 0
        assert p["data_sent"] == srv.received[i] and p["data_received"] == srv.sent[i]
        _check_sums(p)


async def test_pool_wait_then_a_new_connection_are_told_apart() -> None:
    """One connection slot, keep-alive off: the second request waits for the slot (blocked), then
    creates its own connection (connecting, after the wait); the first neither waited nor was reused."""
    async with LoopbackServer() as srv, \
            LLMClient(_config(srv.port, reuse_connections=False), max_connections=1) as client:
        recs = await asyncio.gather(client.send(_spec(0)), client.send(_spec(1)))
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    traces = sorted((r.http_trace for r in recs), key=lambda t: "queued_start_ns" in t)  # type: ignore[operator]
    first, waited = traces
    assert first is not None and waited is not None
    pf, pw = httptrace.phases(first), httptrace.phases(waited)
    assert "queued_start_ns" not in first and pf["blocked"] == 0  # no wait: exactly 0
    assert pw["blocked"] >= HEADER_DELAY + BODY_GAP
    assert waited["queued_end_ns"] <= waited["create_start_ns"]  # the creation after the wait
    for t, p in ((first, pf), (waited, pw)):
        assert p["connecting"] >= TLS_DELAY and p["connection_reused"] == 0 and "reused_ns" not in t
        _check_sums(p)


async def test_concurrent_requests_stamp_their_own_traces() -> None:
    """The connector's hooks reach each request's trace through a context variable: of two requests
    in flight at once, the one that took the pooled connection (left by an untraced GET) has only
    the reuse stamp, the other only its own creation; the untraced GET stamps nothing anywhere."""
    async with LoopbackServer() as srv, LLMClient(_config(srv.port)) as client:
        status, _ = await client.get(client.server_root + "/metrics")
        assert status == 200
        assert httptrace.CURRENT_TRACE.get() is None
        recs = await asyncio.gather(client.send(_spec(0)), client.send(_spec(1)))
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    assert len(srv.hello_read_ns) == 2  # the GET's connection, and one more
    reused = [r.http_trace for r in recs if "reused_ns" in r.http_trace]  # type: ignore[operator]
    created = [r.http_trace for r in recs if "create_start_ns" in r.http_trace]  # type: ignore[operator]
    assert len(reused) == 1 and len(created) == 1
    assert "create_start_ns" not in reused[0] and "create_end_ns" not in reused[0]
    assert "reused_ns" not in created[0]
    pr, pc = httptrace.phases(reused[0]), httptrace.phases(created[0])
    assert pr["connection_reused"] == 1 and pr["connecting"] == 0
    assert pc["connection_reused"] == 0 and pc["connecting"] >= TLS_DELAY


async def test_traced_transport_installs_no_trace_config() -> None:
    """Tracing on adds no ``TraceConfig`` (no ``Trace`` or signals per request); the connector's hooks
    are one object per connector and stamp only into the current request's trace."""
    from aiohttp import TCPConnector

    from pytest_llmbench.client import AiohttpTransport

    transport = AiohttpTransport(_config(1), None)
    try:
        session = transport._session
        assert session.trace_configs == []
        connector = session.connector
        assert isinstance(connector, TCPConnector) and type(connector) is not TCPConnector
        (hooks,) = connector._hooks  # type: ignore[union-attr]
        await hooks.send_connection_reuseconn()  # no current trace: nothing to stamp, no error
        t = httptrace.new_trace(5)
        token = httptrace.CURRENT_TRACE.set(t)
        try:
            await hooks.send_connection_reuseconn()
            await hooks.send_dns_cache_hit("h")
            first_hit = t["dns_cache_hit_ns"]
            await hooks.send_dns_cache_hit("h")
        finally:
            httptrace.CURRENT_TRACE.reset(token)
        assert t["reused_ns"] >= t["request_start_ns"] == 5 and t["dns_cache_hit_ns"] == first_hit
    finally:
        await transport.aclose()
    untraced = AiohttpTransport(replace(_config(1), http_trace=False), None)
    try:
        assert type(untraced._session.connector) is TCPConnector
    finally:
        await untraced.aclose()


def test_request_and_response_header_bytes_from_the_response() -> None:
    """Header blocks sized from what aiohttp keeps on the response: the request's final headers and
    target, the response's status line and raw headers (each ``Name: value\\r\\n``, a blank line)."""
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    req_headers = CIMultiDictProxy(CIMultiDict({"Host": "h:1", "Content-Length": "12"}))
    resp = SimpleNamespace(
        request_info=SimpleNamespace(method="POST", url=URL("http://h:1/v1/x?a=b"), headers=req_headers),
        version=SimpleNamespace(major=1, minor=1), status=200, reason="OK",
        raw_headers=((b"Content-Type", b"text/event-stream"),))
    t = httptrace.new_trace()
    httptrace.note_response(t, resp)
    assert t["request_header_bytes"] == len(b"POST /v1/x?a=b HTTP/1.1\r\nHost: h:1\r\nContent-Length: 12\r\n\r\n")
    assert t["response_header_bytes"] == len(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    assert "response_headers_ns" in t
