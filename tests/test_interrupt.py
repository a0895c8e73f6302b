"""Interrupted, stopped and crashed sessions still leave truthful reports (App. C, §4.2.6).

Ctrl-C is a real SIGINT sent to a real ``pytest`` process once its first measured record is on
disk (polled, never a fixed sleep). ``pytest -x`` and an exception inside a procedure are run
through pytester too. Report files are written atomically: a reader never sees half a file.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import FaultServer, start_fault_server

from pytest_llmbench.storage import write_text_atomic
from pytest_llmbench.storage import (
    RECORDS_FILE,
    iter_records,
    load_run,
    write_json_atomic,
)

SUITE = '''
import pytest
from pytest_llmbench.procedures.base import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate={rate}), requests={requests}, warmup_requests=8,
                           warmup_tokens=30{extra})
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


#: ``python`` with SIGINT restored to its default first: a process started from a non-interactive
#: shell's background job inherits SIGINT *ignored*, and Python then never raises KeyboardInterrupt.
WITH_SIGINT = [sys.executable, "-c",
               ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")]


@pytest.fixture(scope="module")
def slow_server() -> Iterator[FaultServer]:
    """Every completion takes ~8 × 25 ms, so a run has requests in flight when it is interrupted."""
    srv = start_fault_server(cap=8, itl_ms=25.0)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def faulty_server() -> Iterator[FaultServer]:
    srv = start_fault_server(mix={"http_500": 0.1, "reset": 0.05, "no_done": 0.05}, seed=3, cap=6)
    yield srv
    srv.stop()


def endpoint_args(srv: FaultServer, report: str = "rep") -> list[str]:
    return ["-p", "no:cacheprovider", "--llm-endpoint", srv.url, "--llm-boundary", "gateway",
            "--llm-report", report]


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.endswith(b"\n"))


def read_results(report: Path) -> dict:
    assert not list(report.glob(".*.tmp")), "a temporary report file was left behind"
    doc = json.loads((report / "results.json").read_text(encoding="utf-8"))
    assert (report / "report.md").is_file() and (report / "report.html").is_file()
    return doc


def test_sigint_mid_measurement_leaves_parseable_incomplete_reports(pytester: pytest.Pytester,
                                                                    slow_server: FaultServer) -> None:
    pytester.makepyfile(test_suite=SUITE.format(rate=40, requests=5000, extra=""))
    out, err = pytester.path / "out.txt", pytester.path / "err.txt"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = pytester.popen([*WITH_SIGINT, "-m", "pytest", *endpoint_args(slow_server)], stdout=fo, stderr=fe)
        try:
            deadline = time.monotonic() + 60
            records: Path | None = None
            while records is None or count_lines(records) < 1:  # the first measured record is on disk
                assert proc.poll() is None, (out.read_text(), err.read_text())
                assert time.monotonic() < deadline, "no measured record appeared within 60 s"
                found = sorted((pytester.path / "rep" / "runs").glob("*/measure/" + RECORDS_FILE))
                records = found[0] if found else None
                time.sleep(0.02)
            at_signal = count_lines(records)
            proc.send_signal(signal.SIGINT)
            ret = proc.wait(60)
        finally:
            if proc.poll() is None:  # pragma: no cover - only when the test already failed
                proc.kill()
                proc.wait()
    stdout = out.read_text()
    assert ret == pytest.ExitCode.INTERRUPTED, stdout + err.read_text()
    assert "Traceback" not in stdout + err.read_text()
    assert "INCOMPLETE" in stdout  # the terminal summary says so too

    report = pytester.path / "rep"
    doc = read_results(report)
    assert doc["complete"] is False and doc["interrupted"] is True
    (proc_doc,) = doc["procedures"]
    assert proc_doc["procedure"] == "5.1" and proc_doc["complete"] is False
    assert any("interrupted" in n for n in proc_doc["result"]["notes"])
    md = (report / "report.md").read_text(encoding="utf-8")
    assert md.startswith("# ") and "INCOMPLETE" in md.splitlines()[0]
    assert "INCOMPLETE" in (report / "report.html").read_text(encoding="utf-8")

    # what was measured before Ctrl-C is on disk, whole, and is what the report counted
    run = load_run(records.parent)
    assert run.torn_lines == 0 and len(run.records) >= at_signal >= 1
    assert proc_doc["configuration"]["requests"] == len(run.records) < 5000
    for r in run.records:
        assert r.phase == "measure" and r.end_ns is not None and r.end_ns >= r.sent_ns > 0
        assert r.chunk_ns == sorted(r.chunk_ns)
        assert r.ok or r.error_type.value == "cancelled"  # the healthy server: only Ctrl-C cut requests
    json.loads((records.parent / "run.json").read_text(encoding="utf-8"))
    # every run directory of the session parses: warm-up records too
    for f in report.glob("runs/*/*/" + RECORDS_FILE):
        list(iter_records(f.parent))


def test_pytest_x_stops_early_and_still_reports(pytester: pytest.Pytester, faulty_server: FaultServer) -> None:
    pytester.makepyfile(test_suite=SUITE.format(rate=80, requests=60, extra=', slo=["success_rate >= 100%"]')
                        + SUITE.format(rate=80, requests=70, extra="").replace("test_ttft", "test_second"))
    result = pytester.runpytest_subprocess("-x", *endpoint_args(faulty_server), "--junitxml", "j.xml")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Success rate" in out and "< 100%" in out and "Traceback" not in out
    doc = read_results(pytester.path / "rep")
    # test_second never ran: the session is incomplete, the procedure that ran is complete
    assert doc["complete"] is False
    (p,) = doc["procedures"]
    assert p["complete"] is True and p["configuration"]["requests"] == 60
    tests = {t["nodeid"].split("::")[-1]: t for t in doc["tests"]}
    assert tests["test_ttft"]["outcome"] == "failed" and "test_second" not in tests
    assert 'name="llmbench.procedure"' in (pytester.path / "j.xml").read_text()


CRASH_CONFTEST = '''
from dataclasses import dataclass
from pytest_llmbench.load import ArrivalProcess, OpenLoop
from pytest_llmbench.procedures.base import Procedure, register
from pytest_llmbench.procedures.common import client_for, measure
from pytest_llmbench.workloads import build_workload

@dataclass
class CrashParams:
    requests: int = 25

async def run(ctx, p):
    wl = build_workload("synthetic-uniform", n=p.requests, seed=ctx.settings.seed, tokenizer=ctx.tokenizer)
    async with client_for(ctx) as client:
        await measure(ctx, client, "measure", wl.specs, OpenLoop(ArrivalProcess("uniform", 200.0),
                                                                   max_requests=p.requests))
    raise RuntimeError("analysis step failed after measuring")

register(Procedure("5.97", "Crashing procedure", CrashParams, run, {}, lambda p: {"requests": p.requests}))
'''


def test_crash_inside_a_procedure_keeps_what_completed(pytester: pytest.Pytester,
                                                       faulty_server: FaultServer) -> None:
    pytester.makeconftest(CRASH_CONFTEST)
    pytester.makepyfile(test_suite=SUITE.format(rate=80, requests=40, extra="") + '''

@pytest.mark.llm_procedure("5.97", requests=25)
def test_crash(llm_result):
    pass
''')
    result = pytester.runpytest_subprocess(*endpoint_args(faulty_server))
    result.assert_outcomes(passed=1, errors=1)
    assert "analysis step failed after measuring" in result.stdout.str()
    doc = read_results(pytester.path / "rep")
    by_id = {p["procedure"]: p for p in doc["procedures"]}
    assert by_id["5.1"]["complete"] is True and by_id["5.1"]["configuration"]["requests"] == 40
    crashed = by_id["5.97"]
    assert crashed["complete"] is False and crashed["configuration"]["requests"] == 25
    assert doc["complete"] is False  # a session with a crashed procedure is not a complete run
    assert any("crashed: RuntimeError: analysis step failed" in n for n in crashed["result"]["notes"])
    # its 25 measured records were summarised from disk, errors by type included
    metrics = crashed["result"]["metrics"]
    on_disk = load_run(pytester.path / "rep" / crashed["run_dirs"][0]).records
    assert len(on_disk) == 25 and metrics["scalars"]["request_count"]["value"] == 25
    errors: dict[str, int] = {}
    for r in on_disk:
        if r.error_type is not None:
            errors[r.error_type.value] = errors.get(r.error_type.value, 0) + 1
    assert metrics["errors_by_type"] == errors
    md = (pytester.path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "Crashing procedure (INCOMPLETE)" in md


@pytest.mark.parametrize("writer", ["report", "storage"])
def test_report_files_are_replaced_atomically(tmp_path: Path, writer: str) -> None:
    """A reader polling the file while it is rewritten always parses a whole document."""
    target = tmp_path / "results.json"
    docs = [{"version": i, "payload": ["x" * 100] * (2000 + 500 * (i % 3))} for i in range(40)]

    def write(doc: dict) -> None:
        if writer == "report":
            write_text_atomic(target, json.dumps(doc))
        else:
            write_json_atomic(target, doc)

    write(docs[0])
    stop = threading.Event()
    seen: list[int] = []
    bad: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            text = target.read_text(encoding="utf-8")
            try:
                seen.append(json.loads(text)["version"])
            except ValueError:
                bad.append(text[-80:])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for doc in docs[1:]:
            write(doc)
    finally:
        stop.set()
        t.join()
    assert not bad and seen == sorted(seen) and json.loads(target.read_text())["version"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left

    # a write that fails half-way (unencodable text / an unserialisable value): the old file survives
    with pytest.raises((UnicodeEncodeError, TypeError)):
        if writer == "report":
            write_text_atomic(target, "x" * 200_000 + "\ud800")
        else:
            write_json_atomic(target, {"payload": ["x" * 100] * 2000, "bad": object()})
    assert json.loads(target.read_text())["version"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_interrupt_test_sends_a_real_signal() -> None:
    """Guard for the SIGINT test: a child started through WITH_SIGINT does get KeyboardInterrupt."""
    code = "import time,sys\ntry:\n print('up',flush=True)\n time.sleep(30)\nexcept KeyboardInterrupt:\n sys.exit(7)\n"
    proc = subprocess.Popen([*WITH_SIGINT, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 7
