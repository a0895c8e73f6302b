"""The readiness wait and helpers the real-server tools share (sut/adapters/serving.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from pytest_llmbench.sut.adapters.serving import NotReady, free_port, log_tail, wait_ready


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def test_a_process_that_exits_first_names_its_exit_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(NotReady) as exc:
        wait_ready(proc, f"http://127.0.0.1:{free_port()}/health", 30.0, 0.05)
    assert exc.value.exit_code == 3


def test_no_answer_before_the_deadline_is_a_timeout() -> None:
    proc = _sleeper()
    try:
        with pytest.raises(NotReady) as exc:
            wait_ready(proc, f"http://127.0.0.1:{free_port()}/health", 0.3, 0.05)
        assert exc.value.exit_code is None
    finally:
        proc.kill()
        proc.wait()


def test_a_200_answer_is_ready() -> None:
    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    proc = _sleeper()
    try:
        wait_ready(proc, f"http://127.0.0.1:{httpd.server_port}/health", 5.0, 0.05)
    finally:
        proc.kill()
        proc.wait()
        httpd.shutdown()


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(f"line {i}" for i in range(30)))
    assert log_tail(log, 2) == "line 28\nline 29"
    assert log_tail(tmp_path / "missing.log", 2) == "" and log_tail(None, 2) == ""
