"""HTTP transports behind one small interface (:class:`Transport`, :class:`Response`).

``"aiohttp"`` (plain aiohttp, the fastest measured, see bench/loadgen.py; HTTP-trace hooks in
:mod:`.httptrace`), ``"httpx-aiohttp"`` (httpx API over the aiohttp transport) and ``"httpx"``
(httpx default transport) are built by :func:`make_transport` from ``ClientConfig.transport``;
:class:`~.mock.MockTransport` (in process, no socket) is handed to the client as an instance:
``LLMClient(config, transport=MockTransport(handler))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import httptrace
from .base import ReadBody, Response, SubmitStamp, Transport, body_headers, body_writes, stamped_body
from .mock import MockRequest, MockResponse, MockTransport

if TYPE_CHECKING:
    from ..config import ClientConfig

__all__ = ["MockRequest", "MockResponse", "MockTransport", "ReadBody", "Response", "SubmitStamp", "Transport",
           "body_headers", "body_writes", "httptrace", "make_transport", "stamped_body"]


def make_transport(config: ClientConfig, max_connections: int | None) -> Transport:
    """The transport ``config.transport`` names, its pool sized to ``max_connections`` (None: unlimited)."""
    if config.transport == "aiohttp":
        from .aiohttp import AiohttpTransport

        return AiohttpTransport(config, max_connections)
    from .httpx import HttpxTransport

    return HttpxTransport(config, max_connections, over_aiohttp=config.transport == "httpx-aiohttp")
