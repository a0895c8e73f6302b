"""What the build-and-run tools of real servers share (``llamacpp/server.py``, ``vllm/server.py``):
a cache lock, a free loopback port, a log's tail and the readiness wait of a server just started.
Imported only with those tools (POSIX ``fcntl``)."""

from __future__ import annotations

import contextlib
import fcntl
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["NotReady", "free_port", "locked", "log_tail", "wait_ready"]


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


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
