"""An in-process transport for unit tests that gain nothing from a socket, in the style of
``httpx.MockTransport``: a handler gets each :class:`MockRequest` and returns a :class:`MockResponse`.

::

    def handler(request: MockRequest) -> MockResponse:
        assert request.json()["stream"]
        return MockResponse.sse([{"choices": [{"index": 0, "text": "Hi", "finish_reason": "stop"}]}])

    async with LLMClient(config, transport=MockTransport(handler)) as client:
        record = await client.send(spec)

A body is bytes, or an iterable or async iterable of byte chunks: each chunk is one read of the
client, so the chunk timing of App. B.1.1 can be scripted (an async iterable may sleep between
chunks; :meth:`MockResponse.sse` does with ``gap_s``). The handler may be a coroutine function. An
exception raised by the handler fails the request before its response, one raised by the body
iterator fails it mid-stream; both are classified by the client's error map like a real library's
(:mod:`pytest_llmbench.client.errors`: ``ConnectionRefusedError`` is ``connect``, ``TimeoutError``
``timeout``, anything unmapped ``protocol``). T_submit is stamped as the real transports stamp it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BEFORE_RESPONSE, MID_STREAM
from .base import ReadBody, SubmitStamp, body_headers, stamped_body

if TYPE_CHECKING:
    from .httptrace import HttpTraceData

__all__ = ["Handler", "MockRequest", "MockResponse", "MockTransport"]

Body = bytes | Iterable[bytes] | AsyncIterable[bytes]


@dataclass(frozen=True)
class MockRequest:
    """One request as the transport received it (``body`` and ``headers`` as a real transport sends them)."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class MockResponse:
    """What the handler answers: status, headers, and a body of bytes or of byte chunks (one per read)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Body = b""

    @property
    def content_type(self) -> str:
        return next((v for k, v in self.headers.items() if k.lower() == "content-type"), "")

    @classmethod
    def sse(cls, events: Iterable[Mapping[str, Any] | str | bytes], *, done: bool = True, gap_s: float = 0.0,
            status: int = 200) -> MockResponse:
        """A ``text/event-stream`` body: each event one read (a mapping is sent as ``data: <json>``, a
        str as ``data: <str>``, bytes as they are), then ``data: [DONE]`` unless ``done=False``;
        ``gap_s`` > 0 sleeps that long before every read after the first."""
        chunks = [_event(e) for e in events] + ([b"data: [DONE]\n\n"] if done else [])
        body: Body = _paced(chunks, gap_s) if gap_s > 0 else chunks
        return cls(status, {"Content-Type": "text/event-stream"}, body)

    @classmethod
    def json(cls, obj: Any, *, status: int = 200) -> MockResponse:
        """A JSON body (a completion, or an error object ``{"error": {...}}``)."""
        return cls(status, {"Content-Type": "application/json"}, json.dumps(obj).encode())


#: ``handler(request) -> response``, or a coroutine function returning one.
Handler = Callable[[MockRequest], MockResponse | Awaitable[MockResponse]]


def _event(e: Mapping[str, Any] | str | bytes) -> bytes:
    if isinstance(e, bytes):
        return e
    data = e if isinstance(e, str) else json.dumps(e)
    return f"data: {data}\n\n".encode()


async def _paced(chunks: list[bytes], gap_s: float) -> AsyncIterator[bytes]:
    for i, chunk in enumerate(chunks):
        if i:
            await asyncio.sleep(gap_s)
        yield chunk


class _MockStream(ReadBody):
    """The :class:`~.base.Response` over a :class:`MockResponse`'s body."""

    __slots__ = ("status", "content_type", "_sync", "_async")

    def __init__(self, response: MockResponse) -> None:
        self.status = response.status
        self.content_type = response.content_type
        body = response.body
        self._sync: Iterator[bytes] | None = None
        self._async: AsyncIterator[bytes] | None = None
        if isinstance(body, (bytes, bytearray)):
            self._sync = iter([bytes(body)])
        elif isinstance(body, AsyncIterable):
            self._async = body.__aiter__()
        else:
            self._sync = iter(body)

    async def read_chunk(self) -> bytes:
        with MID_STREAM:
            while True:
                if self._async is not None:
                    chunk = await anext(self._async, None)
                else:
                    chunk = next(self._sync, None)  # type: ignore[call-overload]
                if chunk is None:
                    return b""
                if chunk:  # an empty chunk is no read (b"" would end the body)
                    return bytes(chunk)

    async def release(self) -> None:
        close = getattr(self._async, "aclose", None)
        if close is not None:
            await close()


class MockTransport:
    """A :class:`~.base.Transport` that answers every request with ``handler(request)``; the requests
    it received are kept in :attr:`requests` (in order)."""

    name = "mock"

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[MockRequest] = []

    async def _answer(self, request: MockRequest) -> MockResponse:
        self.requests.append(request)
        response = self.handler(request)
        if inspect.isawaitable(response):
            response = await response
        return response

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: HttpTraceData | None = None) -> _MockStream:
        with BEFORE_RESPONSE:
            sent = b"".join([chunk async for chunk in stamped_body(body, submit)])  # T_submit as sent
            response = await self._answer(MockRequest("POST", url, body_headers(headers, body), sent))
        return _MockStream(response)

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with BEFORE_RESPONSE:
            stream = _MockStream(await self._answer(MockRequest("GET", url, dict(headers))))
            return stream.status, await stream.read_body(1 << 31)

    async def aclose(self) -> None:
        return None
