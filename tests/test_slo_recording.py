"""Every SLO counted: ``assert_slo`` in a test body records its SLOs on the test (pytester), so
``results.json`` ``tests[]``, the headline, the terminal table and JUnit carry them next to the
marker's and ``--llm-slo``'s; outside pytest it stays a plain function.

A fake procedure (registered from the test's conftest) stands in for a real one: TTFTs of 10, 20,
..., 400 ms (median 205 ms) and one procedure figure (``max_concurrency`` = 12).
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from factories import make_record

from pytest_llmbench import assert_slo
from pytest_llmbench.measure.slo import SLO_RECORDER, SLOViolation, recording

HERE = str(Path(__file__).parent)

CONFTEST = '''
from dataclasses import dataclass
from pytest_llmbench.procedures.base import Procedure, register
from pytest_llmbench.procedures.result import ProcedureResult
from pytest_llmbench.measure.summary import summarize
from factories import make_record  # tests/ is on PYTHONPATH (_session)

@dataclass
class Params:
    size: int = 40

def _record(i, ttft_ms):
    return make_record(i, sent=1_000_000_000 * i, ttft=int(ttft_ms * 1e6), itl=1_000_000, n_chunks=2,
                       text=[" a", " b"], unit=1, workload="fake", spec_input_tokens=10, max_tokens=4,
                       output_tokens_client=2, input_tokens_client=10)

async def run(ctx, p):
    metrics = summarize([_record(i, 10.0 * (i + 1)) for i in range(p.size)])
    return ProcedureResult(procedure="5.1", title="Fake", params={"size": p.size}, profile=ctx.settings.profile,
                           metrics=metrics, measurements={"max_concurrency": 12})

register(Procedure("5.98", "Fake procedure", Params, run, {}, lambda p: {"requests": p.size, "min_duration_s": 1.0}))
'''

TESTS = '''
import pytest
from pytest_llmbench import assert_slo

@pytest.mark.llm_procedure("5.98")
def test_body_passes(llm_result):
    assert_slo(llm_result, "ttft.p50 <= 2s")

@pytest.mark.llm_procedure("5.98")
def test_body_fails(llm_result):
    assert_slo(llm_result, "ttft.p50 <= 5ms")  # every request beyond: FAIL (at 100 ms: INCONCLUSIVE, one burst)

@pytest.mark.llm_procedure("5.98")
def test_procedure_figure(llm_result):
    assert_slo(llm_result, "max_concurrency >= 8")

@pytest.mark.llm_procedure("5.98", slo=["success_rate >= 90%"])  # 40 requests: 99% cannot be shown to hold (needs >= 299), 90% can
def test_marker_and_body(llm_result):
    assert_slo(llm_result, "ttft.max <= 1s")

@pytest.mark.llm_procedure("5.98")
def test_no_slo(llm_result):
    assert llm_result.metrics is not None
'''


def _session(pytester: pytest.Pytester, tests: str, *args: str) -> dict[str, Any]:
    """One pytest session of ``tests`` on the fake procedure (run once), with the extra ``args``, read back."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_slos=tests)
    with pytest.MonkeyPatch.context() as mp:  # the subprocess imports tests/factories.py
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")])))
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--junitxml", "j.xml",
                                               *args)
    junit = ET.parse(pytester.path / "j.xml").getroot()
    props = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")} for tc in junit.iter("testcase")}
    return {"result": result, "out": result.stdout.str(), "props": props,
            "doc": json.loads((pytester.path / "rep" / "results.json").read_text()),
            "md": (pytester.path / "rep" / "report.md").read_text(),
            "summary": (pytester.path / "rep" / "summary.md").read_text()}


def _test(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in doc["tests"] if t["nodeid"].endswith(f"::{name}"))


def test_body_slos_are_counted_pass_and_fail_in_tests_headline_terminal_and_junit(pytester: pytest.Pytester) -> None:
    session = _session(pytester, TESTS)
    session["result"].assert_outcomes(passed=4, failed=1)
    doc, props = session["doc"], session["props"]
    # a body SLO that holds: PASS, with its SLO, value, n and CI in tests[] and JUnit
    t = _test(doc, "test_body_passes")
    assert t["verdict"] == "PASS" and t["label"] == "PASS" and t["slos"] == ["ttft.p50 <= 2s"]
    (r,) = t["slo_results"]
    assert r["origin"] == "body" and r["outcome"] == "PASS" and r["threshold"] == 2.0
    assert r["value"] == pytest.approx(0.205) and r["n"] == 40 and r["ci_low"] < r["value"] < r["ci_high"]
    assert t["objectives"][0]["metric"] == "ttft"  # drawn on the procedure's TTFT plots
    assert props["test_body_passes"]["llmbench.slo.ttft.p50 <= 2s"].startswith("PASS: TTFT P50 205 ms <= 2 s (n=40")
    # a body SLO that does not hold: FAIL, with value, threshold, n and CI in the document
    t = _test(doc, "test_body_fails")
    assert t["verdict"] == "FAIL" and t["label"] == "FAIL" and t["slos"] == ["ttft.p50 <= 5ms"]
    (r,) = t["slo_results"]
    assert r["outcome"] == "FAIL" and r["threshold"] == 0.005 and r["value"] == pytest.approx(0.205) and r["n"] == 40
    assert r["ci_low"] is not None and r["ci_high"] is not None and r["unit"] == "s"
    assert (r["method"], r["judged"], r["exceedances"]) == ("binomial", 40, 40)
    assert r["message"].startswith("TTFT P50 205 ms > 5 ms (n=40, 95% CI ")
    assert "TTFT P50 205 ms > 5 ms" in t["message"]  # the pytest failure
    assert props["test_body_fails"]["llmbench.slo.ttft.p50 <= 5ms"].startswith("FAIL: TTFT P50 205 ms > 5 ms")
    # a procedure figure in the SLO grammar, and marker + body SLOs of one test, each with its origin
    (fig,) = _test(doc, "test_procedure_figure")["slo_results"]
    assert (fig["metric"], fig["outcome"], fig["value"], fig["threshold"]) == ("max_concurrency", "PASS", 12, 8)
    t = _test(doc, "test_marker_and_body")
    assert t["slos"] == ["success_rate >= 90%", "ttft.max <= 1s"]
    assert [(r["origin"], r["outcome"]) for r in t["slo_results"]] == [("body", "PASS"), ("marker", "PASS")]
    assert {"llmbench.slo.ttft.max <= 1s", "llmbench.slo.success_rate >= 90%"} <= set(props["test_marker_and_body"])
    assert _test(doc, "test_no_slo")["label"] == "INFORMATIONAL"
    # the headline and the terminal count them: four tests asserted SLOs, the fifth is informational
    h = doc["headline"]["tests"]
    assert (h["passed"], h["failed"], h["informational"], h["with_slos"]) == (3, 1, 1, 4)
    assert "5 tests: 3 passed, 1 failed, 1 informational (no SLO set); 4 had SLOs" in session["out"]
    assert "ttft.p50 <= 2s" in session["md"] and "ttft.p50 <= 5ms" in session["md"]


def test_outside_pytest_assert_slo_is_a_plain_function() -> None:
    """No recorder is set outside a pytest-llmbench test; one set by hand receives every result."""
    from pytest_llmbench.measure.summary import summarize
    from pytest_llmbench.procedures.result import ProcedureResult

    records = [make_record(i, sent=i * 10**9, ttft=10**8, itl=10**6, n_chunks=2, text=[" a", " b"], unit=1,
                           spec_input_tokens=10, max_tokens=2, output_tokens_client=2, input_tokens_client=10)
               for i in range(10)]
    result = ProcedureResult("5.5", "Fake", {}, "smoke", summarize(records), measurements={"max_concurrency": 12})
    assert SLO_RECORDER.get() is None
    assert [r.passed for r in assert_slo(result, "ttft.p50 <= 2s")] == [True]
    seen: list[Any] = []
    with recording(seen.extend), pytest.raises(SLOViolation):
        assert_slo(result, "ttft.p50 <= 2s", "max_concurrency >= 100")
    assert [(r.slo.metric, r.passed) for r in seen] == [("ttft", True), ("max_concurrency", False)]
    assert SLO_RECORDER.get() is None
