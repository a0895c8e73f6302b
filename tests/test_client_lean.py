"""The aiohttp transport's lean request path (client/transports/aiohttp.py, issue 38): the same request
on the wire as ``session.post``, T_submit taken between all but the last body byte and the last byte
(App. B.1.1), connections back to aiohttp's pool only when their body was read to its end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pytest_llmbench.client import ClientConfig, LLMClient, SubmitStamp
from pytest_llmbench.client.transports import aiohttp as aiohttp_mod
from pytest_llmbench.common.records import RequestSpec

SSE = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
       b"data: [DONE]\n\n")


class RawServer:
    """An HTTP/1.1 server on a socket, written out by hand: it keeps each request's bytes and each
    connection's peer, and answers ``SSE`` (``stall=True``: the first half, then nothing)."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.peers: list[Any] = []
        self.closed = 0
        self.stall = False
        self.server: asyncio.AbstractServer | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer.get_extra_info("peername"))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                self.requests.append(head + await reader.readexactly(length))
                body = SSE[: len(SSE) // 2] if self.stall else SSE
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(SSE) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed += 1
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    srv = RawServer()
    srv.server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    try:
        yield srv
    finally:
        srv.server.close()


def parse(request: bytes) -> tuple[str, dict[str, str], bytes]:
    head, body = request.split(b"\r\n\r\n", 1)
    line, *fields = head.decode().split("\r\n")
    return line, {k.lower(): v for k, v in (f.split(": ", 1) for f in fields)}, body


def spec() -> RequestSpec:
    return RequestSpec(index=0, workload="t", input_tokens=1, max_tokens=4, prompt_text="hello")


async def test_lean_request_on_the_wire_is_the_one_session_post_sends(raw: RawServer) -> None:
    cfg = ClientConfig(base_url=raw.url, model="m", headers={"X-Extra": "1"})
    async with LLMClient(cfg) as c:
        lean = c._ensure_transport()
        assert isinstance(lean, aiohttp_mod.AiohttpTransport) and lean._lean
        r1 = await c.send(spec())
        lean._lean = False  # aiohttp's own request path (what a traced request takes)
        r2 = await c.send(spec())
    assert r1.ok and r2.ok and r1.chunk_text == r2.chunk_text == ["hi"]
    (line1, h1, b1), (line2, h2, b2) = parse(raw.requests[0]), parse(raw.requests[1])
    assert line1 == line2 == "POST /v1/chat/completions HTTP/1.1"
    assert h1 == h2 and h1["x-extra"] == "1" and h1["content-length"] == str(len(b1))
    assert b1 == b2 and json.loads(b1)["messages"] == [{"role": "user", "content": "hello"}]
    assert len(raw.peers) == 1  # the two requests shared aiohttp's one pooled connection


async def test_lean_path_only_untraced() -> None:
    traced = aiohttp_mod.AiohttpTransport(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", http_trace=True),
                                          None)
    plain = aiohttp_mod.AiohttpTransport(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), None)
    try:
        assert not traced._lean and plain._lean
    finally:
        await traced.aclose()
        await plain.aclose()


class Writes:
    """A transport that keeps what happens to it in order: writes and the clock read T_submit takes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.events: list[tuple[str, int]] = []

    def write(self, data: bytes | memoryview) -> None:
        self.written.append(bytes(data))
        self.events.append(("write", len(data)))

    def clock(self) -> int:
        self.events.append(("stamp", sum(map(len, self.written))))
        return 42


@pytest.mark.parametrize("body", [b"{}", b"x", b"", b"y" * 70_000])
def test_t_submit_is_taken_between_all_but_the_last_byte_and_the_last_byte(
        body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """App. B.1.1: the head and all but the last body byte are written, then the stamp, then the last byte."""
    t = Writes()
    monkeypatch.setattr(aiohttp_mod, "_clock", t.clock)
    submit = SubmitStamp()
    head = b"POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: "
    aiohttp_mod._write_all_but_last(t, head, body)
    aiohttp_mod._write_last(t, body, submit)
    wire = b"".join(t.written)
    assert wire == head + str(len(body)).encode() + b"\r\n\r\n" + body
    head_writes = [("write", len(w)) for w in t.written[: -1 if body else None]]
    last = [("write", 1)] if body else []
    assert t.events == [*head_writes, ("stamp", len(wire) - len(body[-1:])), *last]
    assert submit.ns == 42
    assert len(t.written) == 1 + (len(body) >= 65536) + (len(body) > 0)  # head (+ a long body apart) + last byte


async def test_a_body_not_read_to_its_end_closes_its_connection(raw: RawServer) -> None:
    """Released before its end, a response's connection is closed, not pooled: the next request opens
    another; one read to its end goes back to the pool."""
    cfg = ClientConfig(base_url=raw.url, model="m")
    async with LLMClient(cfg) as c:
        t = c._ensure_transport()
        url, headers = raw.url + "/chat/completions", c.headers
        raw.stall = True
        resp = await t.post(url, b"{}", headers, SubmitStamp())
        assert resp.status == 200 and (await resp.read_chunk()).startswith(b"data: ")
        await resp.release()
        raw.stall = False
        for _ in range(2):
            resp = await t.post(url, b"{}", headers, SubmitStamp())
            assert await resp.read_body(1 << 20) == SSE
            await resp.release()
        for _ in range(100):  # the server sees the first connection's end when the loop turns
            if raw.closed:
                break
            await asyncio.sleep(0.01)
    assert raw.closed >= 1 and len(raw.peers) == 2 and len(raw.requests) == 3
