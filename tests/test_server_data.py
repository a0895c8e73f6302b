"""Server data the client can read, each with its source named (issue 48 G, fidelity-audit-3 finding 9)."""

from __future__ import annotations

import socket
import threading

from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.compliance import RunFacts, Status, evaluate_test
from pytest_llmbench.sut.adapters import get_adapter
from pytest_llmbench.sut.system import probe_rtt


def test_llama_cpp_prompt_ms_is_the_prefill_part_of_ttft() -> None:
    """llama.cpp's ``timings.prompt_ms`` was stored and never read (5.1's split came from the simulator only)."""
    rec = RequestRecord.from_spec(RequestSpec(index=0, workload="w", input_tokens=1, prompt_text="x", max_tokens=4))
    get_adapter("llama.cpp").parse_extensions({"timings": {"prompt_ms": 12.5, "predicted_ms": 40.0}}, rec)
    assert rec.server_timing is not None
    assert rec.server_timing["prefill_ns"] == 12_500_000
    assert rec.server_timing["prefill_source"] == "llama.cpp timings.prompt_ms"
    assert "queue_ns" not in rec.server_timing  # llama.cpp reports no queue wait


def test_one_rtt_probe_before_the_runs_answers_4_7_3_should_1() -> None:
    """4.7.3-SHOULD-1 was unmet on every run: the RTT was never measured."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        rtt = probe_rtt(f"http://127.0.0.1:{port}/v1", probes=3)
    finally:
        stop.set()
        t.join()
        server.close()
    assert rtt is not None and 0 < rtt["rtt_s"] < 1 and rtt["samples"] == 3 and "TCP connect" in rtt["method"]
    c = evaluate_test("5.1", {}, RunFacts(network_rtt_s=rtt["rtt_s"], network_rtt_method=rtt["method"]))
    assert c["4.7.3-SHOULD-1"].status is Status.MET and "TCP connects" in c["4.7.3-SHOULD-1"].reason
    closed = probe_rtt(f"http://127.0.0.1:{port}/v1", probes=1, timeout_s=0.2)  # nothing listens any more
    assert closed is None
    assert evaluate_test("5.1", {}, RunFacts())["4.7.3-SHOULD-1"].status is Status.UNMET
