"""Run the simulator in its own subprocess (never in the caller's event loop).

>>> with start_simulator(SimConfig(time_scale=0.1)) as sim:   # doctest: +SKIP
...     client = openai.OpenAI(base_url=sim.base_url, api_key="x")
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from ..measure.telemetry import read_samples
from ..sut.children import die_with_parent
from .config import SimConfig

__all__ = ["GRPC_READY_PREFIX", "READY_PREFIX", "SimulatorError", "SimulatorProcess", "start_simulator"]

#: The line the child prints on stdout once it listens: ``<prefix> <host> <port>``.
READY_PREFIX = "LLMBENCH_SIMULATOR_LISTENING"
#: ... and once its gRPC front listens (``--grpc-port``)
GRPC_READY_PREFIX = "LLMBENCH_SIMULATOR_GRPC_LISTENING"


class SimulatorError(RuntimeError):
    """The simulator subprocess failed to start or answer (message holds its stderr tail)."""


class SimulatorProcess:
    """A running simulator subprocess: URLs, effective config, small admin helpers, ``stop()``."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str, port: int, config: SimConfig,
                 stdout: IO[bytes], stderr: IO[bytes], grpc_port: int | None = None) -> None:
        self.proc = proc
        self.grpc_port = grpc_port  # its gRPC front's port (None: HTTP only)
        self.host = host
        self.port = port
        self.config = config
        self._stdout = stdout
        self._stderr = stderr
        h = f"[{host}]" if ":" in host else host
        self.url = f"http://{h}:{port}"

    @property
    def base_url(self) -> str:
        """OpenAI base URL (``.../v1``)."""
        return self.url + "/v1"

    @property
    def grpc_url(self) -> str | None:
        """``grpc://host:port`` of its gRPC front (None when it has none)."""
        if self.grpc_port is None:
            return None
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"grpc://{h}:{self.grpc_port}"

    @property
    def admin_url(self) -> str:
        """``GET``/``POST`` runtime configuration endpoint."""
        return self.url + "/admin/config"

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    # ------------------------------------------------------------------ helpers (blocking)
    def _request(self, url: str, data: bytes | None = None, timeout: float = 10.0) -> bytes:
        req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read()
        except urllib.error.HTTPError as exc:
            raise SimulatorError(f"{url} answered {exc.code}: {exc.read()[:500]!r}") from None

    def get_config(self) -> dict[str, Any]:
        return json.loads(self._request(self.admin_url))

    def set_config(self, **changes: Any) -> dict[str, Any]:
        """``POST /admin/config`` (e.g. ``prefix_cache=False``, ``flush_prefix_cache=True``,
        ``guardrails="full"``); updates :attr:`config` and returns the server's new config."""
        new = json.loads(self._request(self.admin_url, json.dumps(changes).encode()))
        fields = {k: v for k, v in new.items() if k not in ("runtime_fields", "guardrail_defaults")}
        self.config = SimConfig.from_dict(fields)
        return new

    def metrics(self) -> dict[str, float]:
        return read_samples(self._request(self.metrics_url).decode())

    def stderr_tail(self, n: int = 4000) -> str:
        try:
            self._stderr.flush()
            data = Path(self._stderr.name).read_bytes()
        except (OSError, ValueError):
            return ""
        return data[-n:].decode(errors="replace")

    # ------------------------------------------------------------------ lifecycle
    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (open streams drain for ``graceful_shutdown_s``), then SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for f in (self._stdout, self._stderr):
            try:
                f.close()
                os.unlink(f.name)
            except OSError:
                pass
        return self.proc.returncode

    def restart(self, startup_timeout: float = 60.0) -> None:
        """Stop this process and start a new one on the same port with the current config: a cold
        start (empty KV and prefix cache, counters at 0), for the ``restart`` configuration setting."""
        self.stop()
        new = start_simulator(self.config, host=self.host, port=self.port, startup_timeout=startup_timeout,
                              grpc_port=self.grpc_port)
        self.proc, self._stdout, self._stderr = new.proc, new._stdout, new._stderr

    def __enter__(self) -> SimulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SimulatorProcess(pid={self.proc.pid}, url={self.url!r}, alive={self.alive()})"


def start_simulator(config: SimConfig | None = None, *, host: str = "127.0.0.1", port: int = 0,
                    startup_timeout: float = 60.0, grpc_port: int | None = None) -> SimulatorProcess:
    """Launch ``python -m pytest_llmbench.simulator`` with ``config`` and wait until ``/health``
    answers. ``port=0`` picks a free port. ``grpc_port``: also serve the gRPC front there (0: a free
    port; ``SimulatorProcess.grpc_url``), announced before the engine starts taking requests. Raises
    :class:`SimulatorError` with the child's stderr tail if it dies or does not come up within
    ``startup_timeout`` seconds."""
    config = config if config is not None else SimConfig()
    config.validate()
    out = tempfile.NamedTemporaryFile(prefix="llmbench-sim-", suffix=".out", delete=False)
    err = tempfile.NamedTemporaryFile(prefix="llmbench-sim-", suffix=".err", delete=False)
    cmd = [sys.executable, "-m", "pytest_llmbench.simulator", "--host", host, "--port", str(port),
           "--config-json", json.dumps(config.to_json())]
    if grpc_port is not None:
        cmd += ["--grpc-port", str(grpc_port)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True, preexec_fn=die_with_parent())
    sim = SimulatorProcess(proc, host, port, config, out, err)
    deadline = time.monotonic() + startup_timeout
    real_port: int | None = None
    real_grpc: int | None = None
    try:
        while real_port is None or (grpc_port is not None and real_grpc is None):
            for line in Path(out.name).read_text(errors="replace").splitlines():
                if line.startswith(READY_PREFIX + " "):
                    real_port = int(line.split()[-1])
                elif line.startswith(GRPC_READY_PREFIX + " "):
                    real_grpc = int(line.split()[-1])
            if real_port is not None and (grpc_port is None or real_grpc is not None):
                break
            _check_alive(sim, deadline, "announce its port")
            time.sleep(0.02)
        sim.port = real_port
        sim.grpc_port = real_grpc
        h = f"[{host}]" if ":" in host else host
        sim.url = f"http://{h}:{real_port}"
        while True:
            try:
                with urllib.request.urlopen(sim.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return sim
            except (urllib.error.URLError, OSError):
                pass
            _check_alive(sim, deadline, "answer /health")
            time.sleep(0.02)
    except BaseException:
        sim.stop(timeout=2)
        raise


def _check_alive(sim: SimulatorProcess, deadline: float, what: str) -> None:
    rc = sim.proc.poll()
    if rc is not None:
        raise SimulatorError(f"simulator exited with code {rc} before it could {what}; stderr tail:\n"
                             f"{sim.stderr_tail()}")
    if time.monotonic() > deadline:
        raise SimulatorError(f"simulator did not {what} in time; stderr tail:\n{sim.stderr_tail()}")
