"""The regression gate through the plugin (§6): --llm-save/--llm-compare/--llm-compare-fail/--llm-runs.

Measured (2026-11-23, shared 2-core host, load average 3-13): the TPOT P50 ratio between
``--llm-time-scale 0.30`` and ``0.25`` at ``--llm-capacity rate=20`` is about 1.10, not 1.20
(3 vs 3 repetitions: 1.101 with a 40 ms engine step, 1.096 and 1.100 with 100 ms; 1.04-1.13 with
the default 8 ms step). A ``tpot.p50:10%`` rule therefore sits on the true change at 0.30 and
goes either way by design (the whole CI must lie beyond +10 %: "+9.6 %, CI +8.1 … +11.2 %" passed);
under load average 12 even a 5 % rule did not fail it ("+10.0 %, CI +4.0 … +16.0 %"); 0.40 gave
only +20.8 % (CI +11.5 … +30.1 %): TPOT is not model time plus a constant, the prefill iterations
of arriving requests interleave with decode. So the slowdown this test must catch is a time scale
of 0.60 under ``tpot.p50:10%``.

False-failure reasoning for ``test_slowdown_fails_and_identical_rerun_passes`` (the identical rerun
is judged under ``tpot.p50:20%``: in a full ``pytest tests -n 2`` at load average ~10 an identical
3-repetition session drifted by +9.9 %, CI +7.0 … +12.8 %, from a baseline a minute earlier): each side is three
repetitions (``--llm-runs 3``) and the gate uses the across-run Student-t CI (df=4), so host-load
drift *between repetitions* is in the interval. The engine step is made 100 ms (sim config) so
TPOT (~35 ms) is dominated by modelled time, and host jitter is a few percent of it (the widest
3-vs-3 CI seen, at load average 12, was ±6 %). The identical rerun is flagged only if its mean
TPOT P50 drifts by more than 20 % + that CI between two sessions a minute apart; the 0.60 run
(expected well above +30 %) fails unless its lower CI bound falls below +10 %.
"""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

SIM = 'step_ms = 100.0\ndecode_per_seq_ms = 0.15\n'
TEST = '''
import pytest

@pytest.mark.llm_procedure("5.1", requests={requests}, warmup_requests=3, warmup_tokens=100, warmup_probes=0,
                           max_output_tokens=24)
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", "--llm-sim-config",
                                         "sim.toml", *args, timeout=600)


def _doc(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "llmbench-report" / "results.json").read_text())


def test_slowdown_fails_and_identical_rerun_passes(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", sim=SIM)
    pytester.makepyfile(test_t=TEST.format(requests=40))
    common = ("--llm-capacity", "rate=20", "--llm-runs", "3")
    base = _run(pytester, *common, "--llm-time-scale", "0.25", "--llm-save", "base")
    base.assert_outcomes(passed=1)
    stored = pytester.path / ".llmbench" / "0001_base"
    assert (stored / "samples.npz").is_file() and (stored / "meta.json").is_file()
    reps = json.loads((stored / "results.json").read_text())["procedures"][0]["repetitions"]
    assert reps["n"] == 3 and "flush" in reps["isolation"]
    summary = reps["across_runs"]["tpot.p50"]
    assert summary["n"] == 3 and summary["ci_low"] < summary["mean"] < summary["ci_high"]

    slow = _run(pytester, *common, "--llm-time-scale", "0.60", "--llm-compare", "base",
                "--llm-compare-fail", "tpot.p50:10%")
    slow.assert_outcomes(failed=1)
    out = slow.stdout.str()
    assert "REGRESSION: tpot.p50" in out and "rule tpot.p50:10%" in out and "Student-t CI across runs" in out
    assert "baseline" in out and "n=3" in out and "95% CI" in out
    comp = _doc(pytester)["comparison"]
    assert comp["failed"] and comp["rules"] == ["tpot.p50:10%"]
    fail = [o for o in comp["pairs"][0]["outcomes"] if o["verdict"] == "FAIL"]
    assert [o["figure"] for o in fail] == ["tpot.p50"] and fail[0]["change"]["rel_ci"][0] > 0.10
    md = (pytester.path / "llmbench-report" / "report.md").read_text()
    assert "Compared with baseline (§6)" in md
    # §6.3 from the comparison itself: 3 runs on each side, a CI and a method for every compared figure
    assert comp["section6"]["6.3-PARAM-1"]["met"] and "3 baseline run(s), 3 new run(s)" in md
    assert "| 6.3-PARAM-1 | met |" in md and "| 6.3-REPORT-1 | met |" in md

    same = _run(pytester, *common, "--llm-time-scale", "0.25", "--llm-compare", "base",
                "--llm-compare-fail", "tpot.p50:20%")
    same.assert_outcomes(passed=1)
    comp = _doc(pytester)["comparison"]
    assert not comp["failed"]
    assert [o["verdict"] for o in comp["pairs"][0]["outcomes"] if o["rule"]] in (["pass"], ["pass (not significant)"])


def test_incomparable_runs_are_refused_unless_forced(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", sim=SIM)
    pytester.makepyfile(test_t=TEST.format(requests=12))
    fast = ("--llm-capacity", "rate=20", "--llm-time-scale", "0.05")
    _run(pytester, *fast, "--llm-autosave").assert_outcomes(passed=1)
    pytester.makepyfile(test_t=TEST.format(requests=15))
    refused = _run(pytester, *fast, "--llm-compare", "--llm-compare-fail", "ttft.p99:10%")
    refused.assert_outcomes(failed=1)
    out = refused.stdout.str()
    assert "refused" in out and "parameters.requests: baseline 12, new 15" in out
    assert _doc(pytester)["comparison"]["pairs"][0]["refused"]

    forced = _run(pytester, *fast, "--llm-compare", "1", "--llm-compare-fail", "ttft.p99:1000%",
                  "--llm-compare-force")
    forced.assert_outcomes(passed=1)
    pair = _doc(pytester)["comparison"]["pairs"][0]
    assert pair["forced"] and not pair["refused"] and pair["outcomes"]
    assert "FORCED" in forced.stdout.str()
    # one run on each side: §6.3's repeated runs are not met, and the report says so with the counts
    assert not _doc(pytester)["comparison"]["section6"]["6.3-PARAM-1"]["met"]
    md = (pytester.path / "llmbench-report" / "report.md").read_text()
    assert "| 6.3-PARAM-1 | not met | 1 baseline run(s), 1 new run(s)" in md
    # the comparison's own §2 verdict (test "6", issue 32): 15 requests against 12 is not the identical workload
    # (6.1-MUST-1); one machine ran both sessions against the simulator (6.1-MUST-3 measured)
    verdict = _doc(pytester)["comparison"]["section6_verdict"]
    assert verdict["verdict"] == "not compliant" and "6.1-MUST-1" in verdict["unmet_must"]
    hw = next(i for i in verdict["items"] if i["id"] == "6.1-MUST-3")
    assert hw["status"] == "met" and hw["source"] == "measured"
    assert "§6 verdict (§2, test 6): 6: not compliant" in forced.stdout.str()


def test_bad_rule_and_missing_baseline_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", sim=SIM)
    pytester.makepyfile(test_t=TEST.format(requests=5))
    bad = _run(pytester, "--llm-compare", "--llm-compare-fail", "ttft.p99:10tok/s")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--llm-compare-fail" in bad.stderr.str() and "10tok/s" in bad.stderr.str()
    missing = _run(pytester, "--llm-compare", "nosuch")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "--llm-compare" in missing.stderr.str() and "nosuch" in missing.stderr.str()
