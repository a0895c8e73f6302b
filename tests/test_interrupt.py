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
from factories import SUITE_5_1 as SUITE
from factories import WITH_SIGINT, count_lines, endpoint_args, read_results
from faultserver import FaultServer, start_fault_server

from pytest_llmbench.common.files import write_json_atomic, write_text_atomic
from pytest_llmbench.common.storage import RECORDS_FILE, iter_records, load_run


@pytest.fixture(scope="module")
def faulty_server() -> Iterator[FaultServer]:
    srv = start_fault_server(mix={"http_500": 0.1, "reset": 0.05, "no_done": 0.05}, seed=3, cap=6)
    yield srv
    srv.stop()


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
from pytest_llmbench.loadgen.load import ArrivalProcess, OpenLoop
from pytest_llmbench.procedures.base import Procedure, register
from pytest_llmbench.procedures.run import client_for, measure
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


SUITES = Path(__file__).resolve().parent.parent / "suites"


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_sigterm_on_the_5_1_suite_writes_incomplete_reports(pytester: pytest.Pytester, sig: signal.Signals) -> None:
    """A CI timeout (SIGTERM) during ``pytest suites/test_5_1_ttft.py``: exit non-zero, every report
    written and marked INCOMPLETE, every record on disk counted (issue 16)."""
    out, err = pytester.path / "out.txt", pytester.path / "err.txt"
    report = pytester.path / "rep"
    with open(out, "w") as fo, open(err, "w") as fe:
        # SIGINT ignored as a CI runner's background job would have it: SIGTERM must not rely on it
        proc = pytester.popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                               str(SUITES / "test_5_1_ttft.py"), "--llm-report", str(report)],
                              stdout=fo, stderr=fe)
        try:
            deadline = time.monotonic() + 300
            records: Path | None = None
            while records is None or count_lines(records) < 1:  # 5.1's first measured record is on disk
                assert proc.poll() is None, (out.read_text(), err.read_text())
                assert time.monotonic() < deadline, "no 5.1 measured record appeared within 300 s"
                found = sorted(report.glob("runs/5_1-*/measure/" + RECORDS_FILE))
                records = found[0] if found else None
                time.sleep(0.05)
            at_signal = count_lines(records)
            proc.send_signal(sig)
            ret = proc.wait(120)
        finally:
            if proc.poll() is None:  # pragma: no cover - only when the test already failed
                proc.kill()
                proc.wait()
    stdout, stderr = out.read_text(), err.read_text()
    assert ret != 0 and ret == pytest.ExitCode.INTERRUPTED, stdout + stderr
    assert "Traceback" not in stdout + stderr and "INCOMPLETE" in stdout
    doc = read_results(report)
    assert doc["complete"] is False
    p51 = [p for p in doc["procedures"] if p["procedure"] == "5.1"]
    assert len(p51) == 1 and p51[0]["complete"] is False
    assert any(sig.name in n for n in p51[0]["result"]["notes"])
    assert "INCOMPLETE" in (report / "report.md").read_text(encoding="utf-8").splitlines()[0]
    assert "INCOMPLETE" in (report / "report.html").read_text(encoding="utf-8")
    run = load_run(records.parent)  # no record lost: all on disk, whole, and counted by the report
    assert run.torn_lines == 0 and len(run.records) >= at_signal >= 1
    assert p51[0]["configuration"]["requests"] == len(run.records)
    assert all(r.ok or r.error_type.value == "cancelled" for r in run.records)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_termination_signal_cancels_a_running_procedure_like_ctrl_c(name: str) -> None:
    """Inside asyncio.run the signal cancels the main task (in-flight work sees CancelledError, as
    after Ctrl-C), then KeyboardInterrupt reaches the caller; the signal's name is kept."""
    import asyncio
    import os

    from pytest_llmbench.session import TerminationSignals

    sig = getattr(signal, name)
    seen: list[str] = []

    async def procedure() -> None:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), sig)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    handlers = TerminationSignals()
    previous = signal.getsignal(sig)
    handlers.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(procedure())
    finally:
        handlers.restore()
    assert seen == ["cancelled"] and handlers.received == name
    assert signal.getsignal(sig) == previous
