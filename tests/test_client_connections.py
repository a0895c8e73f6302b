"""Connection reuse (HTTP keep-alive) as the server adapter chooses it, on every transport.

llama.cpp's server closes kept-alive connections while a client reuses them (see
``adapters/llamacpp.py``), so its adapter asks for a new connection per request.
"""

from __future__ import annotations

from typing import AsyncIterator

import pytest
from aiohttp import web
from factories import serve_app
from test_client import make_app

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.sut.adapters import get_adapter

PEERS: list[tuple[str, int]] = []


@web.middleware
async def _peer(request: web.Request, handler):  # type: ignore[no-untyped-def]
    PEERS.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
    return await handler(request)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = make_app()
    app.middlewares.append(_peer)
    async with serve_app(app) as url:
        PEERS.clear()
        yield url


@pytest.mark.parametrize("transport", ["aiohttp", "httpx-aiohttp", "httpx"])
@pytest.mark.parametrize("reuse", [True, False])
async def test_one_connection_per_request_unless_reused(server: str, transport: str, reuse: bool) -> None:
    config = ClientConfig(base_url=server, model="m", transport=transport, reuse_connections=reuse)
    async with LLMClient(config, max_connections=1) as client:
        for i in range(4):
            rec = await client.send(RequestSpec(index=i, workload="t", input_tokens=1, max_tokens=4,
                                                prompt_text="normal"))
            assert rec.ok, rec.error_message
    assert len(PEERS) == 4
    assert len(set(PEERS)) == (1 if reuse else 4)


def test_llamacpp_adapter_asks_for_a_new_connection_per_request() -> None:
    assert get_adapter("llama.cpp").reuse_connections is False
    assert get_adapter("vllm").reuse_connections is True
