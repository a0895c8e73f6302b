"""What the build-and-run tools of real servers share (``llamacpp/server.py``, ``vllm/server.py``):
a cache lock, a free loopback port, a log's tail and the readiness wait of a server just started.
Imported only with those tools (POSIX ``fcntl``)."""

from __future__ import annotations

import contextlib
import fcntl
import random
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PORT_TAKEN", "NotReady", "free_port", "port_taken", "locked", "log_tail", "wait_ready"]


@contextlib.contextmanager
def locked(root: Path, what: str) -> Iterator[None]:
    """Exclusive lock on one artefact of a cache (parallel pytest workers / CI jobs install once)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".lock-{what}", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux ``ip_local_port_range``; 32768 elsewhere)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound, read, released), drawn below the kernel's ephemeral range.

    A server told its port binds it later: vLLM's gRPC server only once its engine is up, tens of seconds
    on. A port from the ephemeral range can be taken in between by any outgoing connection on the host or
    any ``bind(port 0)`` (CI once saw vLLM's gRPC server fail with "Failed to bind to address" beside
    another process's load tests); below that range only an explicit bind can take it."""
    low = _ephemeral_low()
    first = max(1024, low - 12000)  # equal to low when the range starts at 1024: then the kernel chooses
    for port in (random.randrange(first, low) for _ in range(64 if first < low else 0)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: What a server's log says when its listening port was taken between :func:`free_port` and its bind
#: (vLLM's gRPC launcher, uvicorn), compared case-insensitively by :func:`port_taken`.
PORT_TAKEN = ("failed to bind to address", "address already in use")


def port_taken(log: str) -> bool:
    """Whether a server's log (its tail) says its listening port was taken (:data:`PORT_TAKEN`)."""
    text = log.lower()
    return any(m in text for m in PORT_TAKEN)


def log_tail(path: Path | None, n: int) -> str:
    """The last ``n`` lines of a server's log ("" when there is none)."""
    if path is None:
        return ""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    return ""


class NotReady(RuntimeError):
    """The server did not answer in time (``exit_code`` None) or exited first (its exit code)."""

    def __init__(self, exit_code: int | None) -> None:
        super().__init__("exited" if exit_code is not None else "timed out")
        self.exit_code = exit_code


def wait_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float, poll_s: float) -> None:
    """Poll ``GET url`` every ``poll_s`` until it answers 200; :class:`NotReady` when the process exits
    first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NotReady(proc.returncode)
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(poll_s)
    raise NotReady(None)
