"""Plain aiohttp, the fastest transport measured (bench/loadgen.py); the only one with HTTP-trace
hooks (:mod:`.httptrace`, ``ClientConfig.http_trace``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import BEFORE_RESPONSE, MID_STREAM
from . import httptrace
from .base import ReadBody, Response, SubmitStamp, body_headers, body_writes, stamped_body

if TYPE_CHECKING:
    from ..config import ClientConfig

__all__ = ["AiohttpTransport"]


class _AiohttpResponse(ReadBody):
    __slots__ = ("_resp", "_content", "status", "content_type")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self._content = resp.content
        self.status: int = resp.status
        self.content_type: str = resp.headers.get("Content-Type", "")

    async def read_chunk(self) -> bytes:
        with MID_STREAM:
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
            with BEFORE_RESPONSE:
                resp = await self._session.post(url, data=stamped_body(body, submit),
                                                headers=body_headers(headers, body))
            return _AiohttpResponse(resp)
        token = httptrace.CURRENT_TRACE.set(trace)  # the connector's hooks stamp into it
        try:
            with BEFORE_RESPONSE:
                resp = await self._session.post(url, data=stamped_body(body, submit),
                                                headers=body_headers(headers, body))
        except BaseException:  # before the response headers (cancellation included)
            trace["exception_ns"] = time.perf_counter_ns()
            if submit.ns:  # the body went out whole (one cut off before its last byte counts none)
                httptrace.note_request_sent(trace, submit.ns, len(body), body_writes(body))
            raise
        finally:
            httptrace.CURRENT_TRACE.reset(token)
        httptrace.note_response(trace, resp)
        # T_submit; the answer when it came before the last body byte was pulled (as record.sent_ns)
        httptrace.note_request_sent(trace, submit.ns or trace["response_headers_ns"], len(body), body_writes(body))
        return httptrace.TracedResponse(_AiohttpResponse(resp), trace)

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with BEFORE_RESPONSE:
            async with self._session.get(url, headers=headers) as resp:
                return resp.status, await resp.read()

    async def aclose(self) -> None:
        await self._session.close()
