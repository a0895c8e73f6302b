"""The transport interface: what the client needs of an HTTP library, and T_submit (App. B.1.1).

A :class:`Transport` POSTs a body and hands back a :class:`Response` whose body is read chunk by
chunk; its library's exceptions become classified
:class:`~pytest_llmbench.client.errors.TransportError` s (``errors.BEFORE_RESPONSE`` /
``errors.MID_STREAM``). :func:`stamped_body` sets the request's :class:`SubmitStamp`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .httptrace import HttpTraceData

__all__ = ["ReadBody", "Response", "SubmitStamp", "Transport", "body_headers", "body_writes", "stamped_body"]


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


class Transport(Protocol):
    name: str

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: HttpTraceData | None = None) -> Response: ...

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


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


def body_writes(body: bytes) -> int:
    """How many writes :func:`stamped_body` makes of ``body`` (the request's chunks sent)."""
    return 2 if len(body) > 1 else len(body)


def body_headers(headers: Mapping[str, str], body: bytes) -> dict[str, str]:
    """``headers`` with the ``Content-Length`` of ``body`` (sent as a stream, not chunked)."""
    return {**headers, "Content-Length": str(len(body))}


class ReadBody:
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
