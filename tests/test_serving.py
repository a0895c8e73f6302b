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


def test_a_free_port_is_drawn_below_the_ephemeral_range() -> None:
    """Outgoing connections and bind(0) take ports from the ephemeral range; a port a server binds tens of
    seconds after it was chosen is drawn below it, so only an explicit bind can take it meanwhile."""
    from pytest_llmbench.sut.adapters.serving import _ephemeral_low

    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports) and len(ports) > 1, (low, ports)


def test_with_no_room_below_the_ephemeral_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_llmbench.sut.adapters import serving

    monkeypatch.setattr(serving, "_ephemeral_low", lambda: 1024)  # ip_local_port_range "1024 65535"
    assert serving.free_port() >= 1024


# A stand-in for vLLM's server: the first start finds its port taken (vLLM's gRPC launcher's words), the
# next one serves GET /v1/models on the port it is given.
_FAKE_VLLM = r'''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
marker, port = Path(sys.argv[1]), int(sys.argv[sys.argv.index("--port") + 1])
with marker.open("a") as fh:
    fh.write(f"{port}\n")
if len(marker.read_text().split()) == 1:
    print(f"RuntimeError: Failed to bind to address 127.0.0.1:{port}; set GRPC_VERBOSITY=debug", flush=True)
    raise SystemExit(1)
class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
HTTPServer(("127.0.0.1", port), Ok).serve_forever()
'''


def test_a_server_whose_chosen_port_was_taken_starts_again_on_another(tmp_path: Path) -> None:
    """vLLM exits with "Failed to bind to address" when its port was taken before it bound it: on a port it
    chose itself, the server is started again on a new one; on a port the caller gave, the error stands."""
    from pytest_llmbench.sut.adapters.vllm.server import InstallError, Installation, VllmServer

    class Fake(VllmServer):
        def command(self) -> list[str]:
            return [sys.executable, "-c", _FAKE_VLLM, str(tmp_path / f"ports-{self.served_model_name}"),
                    "--port", str(self.port)]

        def environment(self) -> dict[str, str]:
            return {}

    inst = Installation(python=Path(sys.executable), model=tmp_path)
    server = Fake(inst, served_model_name="chosen", log_path=tmp_path / "chosen.log")
    try:
        server.start()
        ports = [int(p) for p in (tmp_path / "ports-chosen").read_text().split()]
        assert len(ports) == 2 and ports[0] != ports[1] and server.port == ports[1] and server.running
    finally:
        server.close()
    given = Fake(inst, served_model_name="given", port=free_port(), log_path=tmp_path / "given.log")
    with pytest.raises(InstallError, match="Failed to bind to address"):
        given.start()
    assert len((tmp_path / "ports-given").read_text().split()) == 1
