"""HTTP transports behind one small interface (:class:`Transport`, :class:`Response`).

``"aiohttp"`` (plain aiohttp, the fastest measured, see bench/loadgen.py; HTTP-trace hooks in
:mod:`.httptrace`), ``"httpx-aiohttp"`` (httpx API over the aiohttp transport) and ``"httpx"``
(httpx default transport) are built by :func:`make_transport` from ``ClientConfig.transport``;
:class:`~.mock.MockTransport` (in process, no socket) is handed to the client as an instance:
``LLMClient(config, transport=MockTransport(handler))``. A ``grpc://`` or ``grpcs://`` base URL
gets :class:`~.grpc.GrpcTransport` (``Generate`` calls, App. B.1.2), which needs the ``grpc`` extra
(:func:`grpc_missing`); nothing else here imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...settings import GRPC_EXTRA, grpc_missing

from . import httptrace
from .base import ReadBody, Response, SubmitStamp, Transport, body_headers, body_writes, stamped_body
from .mock import MockRequest, MockResponse, MockTransport

if TYPE_CHECKING:
    from ..config import ClientConfig

__all__ = ["GRPC_EXTRA", "MockRequest", "MockResponse", "MockTransport", "ReadBody", "Response", "SubmitStamp",
           "Transport", "body_headers", "body_writes", "grpc_missing", "httptrace", "make_transport", "stamped_body"]



def make_transport(config: ClientConfig, max_connections: int | None, **grpc_options: Any) -> Transport:
    """The transport ``config.transport`` names, its pool sized to ``max_connections`` (None: unlimited);
    for a gRPC base URL the gRPC transport (``grpc_options``: its keyword arguments, ``decode``), or
    ``ImportError`` naming the extra when it is not installed."""
    if config.protocol == "grpc":
        why = grpc_missing()
        if why is not None:
            raise ImportError(f"a gRPC endpoint ({config.base_url}) needs {why}")
        from .grpc import GrpcTransport

        return GrpcTransport(config, max_connections, **grpc_options)  # type: ignore[return-value]
    if config.transport == "aiohttp":
        from .aiohttp import AiohttpTransport

        return AiohttpTransport(config, max_connections)
    from .httpx import HttpxTransport

    return HttpxTransport(config, max_connections, over_aiohttp=config.transport == "httpx-aiohttp")
