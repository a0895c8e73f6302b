"""The httpx API: its default transport (``"httpx"``) or httpx-aiohttp's (``"httpx-aiohttp"``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import BEFORE_RESPONSE, MID_STREAM
from .base import ReadBody, SubmitStamp, body_headers, stamped_body

if TYPE_CHECKING:
    from ..config import ClientConfig
    from .httptrace import HttpTraceData

__all__ = ["HttpxTransport"]


class _HttpxResponse(ReadBody):
    __slots__ = ("_resp", "_it", "status", "content_type")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self._it = resp.aiter_bytes()
        self.status = resp.status_code
        self.content_type = resp.headers.get("content-type", "")

    async def read_chunk(self) -> bytes:
        with MID_STREAM:
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
                   trace: HttpTraceData | None = None) -> _HttpxResponse:
        with BEFORE_RESPONSE:
            req = self._client.build_request("POST", url, content=stamped_body(body, submit),
                                             headers=body_headers(headers, body))
            resp = await self._client.send(req, stream=True)
        return _HttpxResponse(resp)

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with BEFORE_RESPONSE:
            resp = await self._client.get(url, headers=headers)
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self._client.aclose()
