"""SLO verdicts as pytest outcomes (issue 47): ``--llm-slo-confidence`` and a marker SLO's own ``confidence=``,
and what ``--llm-inconclusive fail|pass|skip`` makes of an INCONCLUSIVE verdict, in the marker and in the body.

The fake procedure of test_slo_recording (TTFTs of 10, 20, ..., 400 ms, no failure) stands in for a real
one: 40 requests, none beyond 2 s. The exact bound on the share beyond 2 s is ``1 - (1-c)^(1/40)``: 7.2 % at
95 %, 3.9 % at 80 %, 10.9 % at 99 %. So ``ttft.p90 <= 2s`` (limit 10 %) PASSes at 95 % and is INCONCLUSIVE
at 99 %; ``ttft.p95 <= 2s`` (limit 5 %) is INCONCLUSIVE at 95 % and PASSes at 80 %; ``ttft.p99 <= 2s``
(limit 1 %) is INCONCLUSIVE at every confidence used here (it needs 299 requests at 95 %).
"""

from __future__ import annotations

import pytest
from test_slo_recording import _session, _test

TESTS = '''
import pathlib
import pytest
from pytest_llmbench import assert_slo

@pytest.mark.llm_procedure("5.98", slo=["ttft.p99 <= 2s"])
def test_marker_open(llm_result):
    pass

@pytest.mark.llm_procedure("5.98")
def test_body_open(llm_result):
    assert_slo(llm_result, "ttft.p99 <= 2s")
    pathlib.Path("after_body_open").write_text("ran")  # the rest of the body: runs only under 'pass'

@pytest.mark.llm_procedure("5.98", slo=["ttft.p90 <= 2s"])
def test_marker_pass(llm_result):
    pass

@pytest.mark.llm_procedure("5.98", slo=["ttft.p90 <= 2s", "ttft.p99 <= 2s", "max_concurrency >= 100"])
def test_fail_wins(llm_result):
    pass
'''


def test_inconclusive_fails_by_default_with_its_bound_and_need_more(pytester: pytest.Pytester) -> None:
    s = _session(pytester, TESTS, "-rs")
    s["result"].assert_outcomes(passed=1, failed=3)
    out = s["out"]
    assert "INCONCLUSIVE at 95% confidence" in out and "need ~" in out
    assert not (pytester.path / "after_body_open").exists()  # the body stopped at its assert_slo
    # a FAIL among INCONCLUSIVE ones: the message counts both
    assert "1 of 3 SLOs failed, 1 inconclusive" in out
    doc, props = s["doc"], s["props"]
    # the document: the test's verdict is INCONCLUSIVE (not FAIL), each SLO with its bound, n, exceedances, need
    t = _test(doc, "test_marker_open")
    assert (t["outcome"], t["verdict"], t["label"]) == ("failed", "INCONCLUSIVE", "INCONCLUSIVE")
    (r,) = t["slo_results"]
    assert (r["outcome"], r["method"], r["judged"], r["exceedances"]) == ("INCONCLUSIVE", "binomial", 40, 0)
    assert r["limit"] == pytest.approx(0.01)
    assert r["bound"] == pytest.approx(1 - 0.05 ** (1 / 40)) and r["verdict_confidence"] == 0.95
    assert r["needed_more"] == 259  # 299 with no exceedance, 40 seen
    assert _test(doc, "test_body_open")["verdict"] == "INCONCLUSIVE"
    assert _test(doc, "test_marker_pass")["verdict"] == "PASS"
    fw = _test(doc, "test_fail_wins")
    assert fw["verdict"] == "FAIL" and [r["outcome"] for r in fw["slo_results"]] == ["PASS", "INCONCLUSIVE", "FAIL"]
    h = doc["headline"]["tests"]
    assert (h["passed"], h["failed"], h["inconclusive"]) == (1, 1, 2)
    assert "4 tests: 1 passed, 1 failed, 2 inconclusive; 4 had SLOs" in out
    # the terminal table: one verdict per SLO-bearing test
    assert "1 INCONCLUSIVE, 1 PASS, 1 FAIL" in out or "2 INCONCLUSIVE, 1 PASS, 1 FAIL" in out
    # JUnit: the verdict and the bound of each SLO by its number
    p = props["test_marker_open"]
    assert p["llmbench.slo.0.verdict"] == "INCONCLUSIVE" and p["llmbench.slo.0.text"] == "ttft.p99 <= 2s"
    assert float(p["llmbench.slo.0.bound"]) == pytest.approx(0.0722, abs=1e-4) and p["llmbench.slo.0.needed_more"] == "259"
    assert props["test_fail_wins"]["llmbench.slo.2.verdict"] == "FAIL"
    assert props["test_fail_wins"]["llmbench.slo.2.method"] == "point"
    # summary.md: verdict, bound against its limit, n, exceedances and "need ~N more"
    row = next(line for line in s["summary"].splitlines() if "test_marker_open" in line and "ttft.p99" in line)
    assert "INCONCLUSIVE" in row and "<= 7.216% (1.000%)" in row and "| 40 |" in row and "need ~259 more" in row


def test_inconclusive_pass_warns_and_lets_the_body_run_on(pytester: pytest.Pytester) -> None:
    s = _session(pytester, TESTS, "-rs", "--llm-inconclusive", "pass")
    s["result"].assert_outcomes(passed=3, failed=1)  # a FAIL still fails
    assert (pytester.path / "after_body_open").read_text() == "ran"
    assert "SLOInconclusiveWarning" in s["out"] and "counted as passed: --llm-inconclusive pass" in s["out"]


def test_inconclusive_skip_skips_with_the_reason(pytester: pytest.Pytester) -> None:
    s = _session(pytester, TESTS, "-rs", "--llm-inconclusive=skip")
    s["result"].assert_outcomes(passed=1, failed=1, skipped=2)
    assert "SLO inconclusive (--llm-inconclusive skip): TTFT P99" in s["out"]
    assert not (pytester.path / "after_body_open").exists()


CONFIDENCE_TESTS = '''
import pytest
from pytest_llmbench import assert_slo

@pytest.mark.llm_procedure("5.98", slo=["ttft.p95 <= 2s"])
def test_session_confidence(llm_result):
    pass

@pytest.mark.llm_procedure("5.98", slo=["ttft.p90 <= 2s confidence=99%"])
def test_own_confidence(llm_result):
    pass

@pytest.mark.llm_procedure("5.98")
def test_call_confidence(llm_result):
    assert_slo(llm_result, "ttft.p95 <= 2s", confidence=0.95)
'''


def test_session_confidence_and_an_slos_own(pytester: pytest.Pytester) -> None:
    """At 80 % (ini ``llm_slo_confidence``) P95 on 40 requests PASSes; an SLO's ``confidence=99%`` and a
    call's ``confidence=`` keep their own and stay INCONCLUSIVE."""
    pytester.makeini("[pytest]\nllm_slo_confidence = 0.8\n")
    s = _session(pytester, CONFIDENCE_TESTS)
    s["result"].assert_outcomes(passed=1, failed=2)
    assert "INCONCLUSIVE at 99% confidence" in s["out"] and "INCONCLUSIVE at 95% confidence" in s["out"]
    (r,) = _test(s["doc"], "test_session_confidence")["slo_results"]
    assert r["outcome"] == "PASS" and r["verdict_confidence"] == 0.8 and r["method"] == "binomial"
    assert s["doc"]["settings"]["slo_confidence"] == 0.8


@pytest.mark.parametrize(("args", "message"), [
    (("--llm-slo-confidence", "1.5"), "--llm-slo-confidence: invalid value 1.5 for slo-confidence"),
    (("--llm-inconclusive", "maybe"), "--llm-inconclusive: invalid value 'maybe' for inconclusive"),
])
def test_bad_values_are_usage_errors(pytester: pytest.Pytester, args: tuple[str, ...], message: str) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
