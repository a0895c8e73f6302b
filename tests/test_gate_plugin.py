"""The regression gate through the plugin (§6): --llm-save/--llm-compare/--llm-compare-fail/--llm-runs.

False-failure reasoning for ``test_slowdown_fails_and_identical_rerun_passes``: each side is three
repetitions (``--llm-runs 3``) and the gate uses the across-run Student-t CI (df=4), so host-load
drift *between repetitions* is in the interval. The simulator's engine step is made 100 ms (sim
config) so TPOT is dominated by modelled time: a 0.25 -> 0.30 time scale is a +20 % TPOT change,
while the host's scheduling jitter (sub-millisecond to a few ms) is a few percent of a 10 ms
token time. The identical rerun is flagged only if its mean TPOT P50 drifts by more than
10 % + 2.3 SD of the repetitions, i.e. a sustained host-load change of well over 10 % of a
10 ms token time between sessions of a few seconds each.
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

    slow = _run(pytester, *common, "--llm-time-scale", "0.30", "--llm-compare", "base",
                "--llm-compare-fail", "tpot.p50:5%")
    slow.assert_outcomes(failed=1)
    out = slow.stdout.str()
    assert "REGRESSION: tpot.p50" in out and "rule tpot.p50:5%" in out and "Student-t CI across runs" in out
    assert "baseline" in out and "n=3" in out and "95% CI" in out
    comp = _doc(pytester)["comparison"]
    assert comp["failed"] and comp["rules"] == ["tpot.p50:5%"]
    fail = [o for o in comp["pairs"][0]["outcomes"] if o["verdict"] == "FAIL"]
    assert [o["figure"] for o in fail] == ["tpot.p50"] and fail[0]["change"]["rel_ci"][0] > 0.05
    assert "compared with baseline" in (pytester.path / "llmbench-report" / "report.md").read_text()

    same = _run(pytester, *common, "--llm-time-scale", "0.25", "--llm-compare", "base",
                "--llm-compare-fail", "tpot.p50:5%")
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


def test_bad_rule_and_missing_baseline_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", sim=SIM)
    pytester.makepyfile(test_t=TEST.format(requests=5))
    bad = _run(pytester, "--llm-compare", "--llm-compare-fail", "ttft.p99:10tok/s")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--llm-compare-fail" in bad.stderr.str() and "10tok/s" in bad.stderr.str()
    missing = _run(pytester, "--llm-compare", "nosuch")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert "--llm-compare" in missing.stderr.str() and "nosuch" in missing.stderr.str()
