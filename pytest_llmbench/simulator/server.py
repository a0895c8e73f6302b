"""Command line and uvicorn runner: ``python -m pytest_llmbench.simulator --port 8000 ...``.

Configuration precedence: defaults < ``--config FILE`` (TOML/JSON) < ``--config-json`` < one flag
per :class:`~.config.SimConfig` field (``--step-ms 8``, ``--chunked-prefill``/``--no-chunked-prefill``).
Once the socket listens, one line ``LLMBENCH_SIMULATOR_LISTENING <host> <port>`` goes to stdout
(``port 0`` picks a free port; that line says which). ``--grpc-port P`` also serves the gRPC
``VllmEngine`` service (``grpcfront.py``, the ``grpc`` extra) on the same engine; once it listens,
``LLMBENCH_SIMULATOR_GRPC_LISTENING <host> <port>`` follows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
from types import FrameType
from typing import Any

import uvicorn

from ..settings import grpc_missing
from .app import Simulator
from .config import _FIELD_TYPES, SimConfig, SimConfigError
from .process import GRPC_READY_PREFIX, READY_PREFIX

__all__ = ["READY_PREFIX", "build_parser", "config_from_args", "main", "serve"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_llmbench.simulator",
                                description="OpenAI-compatible simulated LLM server (pytest-llmbench).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to bind; 0 picks a free one (default 8000)")
    p.add_argument("--config", metavar="FILE", help="TOML or JSON file of SimConfig fields")
    p.add_argument("--config-json", metavar="JSON", help="SimConfig fields as a JSON object")
    p.add_argument("--grpc-port", type=int, default=None, metavar="P",
                   help="also serve the gRPC VllmEngine service (smg-grpc-proto) on port P; 0 picks a free one "
                        "(needs pytest-llmbench[grpc])")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    g = p.add_argument_group("SimConfig fields (see docs/simulator.md)")
    defaults = SimConfig()
    for f in dataclasses.fields(SimConfig):
        typ = _FIELD_TYPES[f.name]
        flag = "--" + f.name.replace("_", "-")
        if typ is bool:
            g.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                           help=f"(default {getattr(defaults, f.name)})")
        else:
            g.add_argument(flag, dest=f.name, type=typ, default=None, metavar=typ.__name__.upper(),
                           help=f"(default {getattr(defaults, f.name)})")
    return p


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    d: dict[str, Any] = SimConfig.from_file(ns.config).to_json() if ns.config else {}
    if ns.config_json:
        try:
            extra = json.loads(ns.config_json)
        except ValueError as exc:
            raise SimConfigError(f"--config-json is not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise SimConfigError("--config-json must be a JSON object")
        d.update(extra)
    for name in _FIELD_TYPES:
        v = getattr(ns, name, None)
        if v is not None:
            d[name] = v
    return SimConfig.from_dict(d)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, sim: Simulator) -> None:
        super().__init__(config)
        self._sim = sim

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._sim.begin_shutdown()  # new requests get 503 while open streams drain
        super().handle_exit(sig, frame)


def _grpc_front(sim: Simulator, host: str, port: int) -> None:
    """Start the gRPC front with the engine (and announce its port), stop it before the engine."""
    from .grpcfront import GrpcFront

    front = GrpcFront(sim, host, port)

    async def start() -> None:
        real = await front.start()
        print(f"{GRPC_READY_PREFIX} {host} {real}", flush=True)

    async def stop() -> None:
        await front.stop(max(sim.config.graceful_shutdown_s, 0.1))

    sim.on_start.append(start)
    sim.on_stop.append(stop)


def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning",
          grpc_port: int | None = None) -> None:
    """Run the simulator in this process until SIGINT/SIGTERM (with the gRPC front on ``grpc_port``)."""
    sim = Simulator(config)
    if grpc_port is not None:
        _grpc_front(sim, host, grpc_port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    real_port = sock.getsockname()[1]
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:  # pragma: no cover
        loop = "asyncio"
    ucfg = uvicorn.Config(sim, lifespan="on", log_level=log_level, access_log=False, loop=loop,
                          http="httptools", timeout_graceful_shutdown=max(config.graceful_shutdown_s, 0.1),
                          backlog=2048)
    server = _Server(ucfg, sim)
    print(f"{READY_PREFIX} {host} {real_port}", flush=True)
    server.run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        cfg = config_from_args(ns)
    except SimConfigError as exc:
        parser.error(str(exc))
    if ns.grpc_port is not None:
        why = grpc_missing()
        if why is not None:
            parser.error(f"--grpc-port needs {why}")
    serve(cfg, ns.host, ns.port, ns.log_level, grpc_port=ns.grpc_port)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
