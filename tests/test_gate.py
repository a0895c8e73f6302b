"""Regression gate (§6): rules, direction, comparability, significance, repeated runs, CLI output."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from factories import ttft_records
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.__main__ import compare_main, history_main
from pytest_llmbench.common.records import RECORDS_FORMAT
from pytest_llmbench.gate import (
    RuleError,
    StoredRun,
    across_runs,
    compare,
    list_runs,
    load_run,
    parse_rule,
    save,
    summarize_runs,
)
from pytest_llmbench.gate.compare import IncomparableRunsError, check_comparable, load_as_written
from pytest_llmbench.gate.history import history
from pytest_llmbench.gate.metricinfo import UnknownMetricError, metric_info
from pytest_llmbench.gate.storage import GateStorageError
from pytest_llmbench.gate.systems import compare_systems
from pytest_llmbench.measure.stats.runs import change_points
from pytest_llmbench.measure.stats.significance import (
    across_runs_change,
    bootstrap_percentile_draws,
    mean_change,
    percentile_change,
    scalar_change,
)
from pytest_llmbench.measure.summary import DEFINITIONS_VERSION
from pytest_llmbench.report.comparison import (
    junit_properties,
    render_comparison_markdown,
    render_systems_html,
    render_systems_markdown,
)

STORE = Path(__file__).parent / "data" / "gate" / "store"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(STORE, dst)
    return dst


# ---------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize("text, metric, stat, level, threshold, relative", [
    ("ttft.p99:10%", "ttft", "p99", None, 0.10, True),
    ("tpot.p50:5%", "tpot", "p50", None, 0.05, True),
    ("output_throughput:5%", "output_throughput", None, None, 0.05, True),
    ("e2e.p99:50ms", "e2e", "p99", None, 0.050, False),
    ("itl.p99.9@level-2:1.5%", "itl", "p99.9", "level-2", 0.015, True),
    ("ttft.median : 2 ms", "ttft", "p50", None, 0.002, False),
    ("output_throughput:200tok/s", "output_throughput", None, None, 200.0, False),
    ("ttft.mean:3%", "ttft", "mean", None, 0.03, True),
])
def test_rule_parsing(text, metric, stat, level, threshold, relative):
    r = parse_rule(text)
    assert (r.metric, r.statistic, r.level, r.relative) == (metric, stat, level, relative)
    assert r.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("text, names", [
    ("ttft:10%", "name a statistic"),
    ("foo.p99:10%", "metric part 'foo'"),
    ("ttft.p99", "missing ':'"),
    ("output_throughput.p99:5%", "statistic part '.p99'"),
    ("ttft.p99:10tok/s", "threshold part '10tok/s'"),
    ("ttft.q1:3%", "statistic part 'q1'"),
    ("ttft.p99:abc", "threshold part 'abc'"),
    ("ttft.p120:5%", "statistic part 'p120'"),
    ("", "empty fail rule"),
])
def test_rule_errors_name_the_bad_part(text, names):
    with pytest.raises(RuleError, match=re.escape(names)):
        parse_rule(text)


def test_direction_comes_from_the_metric_definition():
    assert metric_info("ttft").worse == "higher"
    assert metric_info("tpot").worse == "higher"
    assert metric_info("output_throughput").worse == "lower"
    assert metric_info("success_rate").worse == "lower"
    with pytest.raises(UnknownMetricError, match="known: "):
        metric_info("nope")


def test_load_as_written():
    assert load_as_written({"model": "open", "arrival": "poisson", "rate": None, "capacity_fraction": 0.5,
                            "concurrency": None, "cv": None}) == "poisson(capacity_fraction=0.5)"
    assert load_as_written({"model": "closed", "concurrency": 8}) == "closed(concurrency=8)"


# ---------------------------------------------------------------------------------------------- significance


def test_exact_percentile_bootstrap_matches_naive_resampling():
    rng = np.random.default_rng(3)
    x = np.sort(rng.lognormal(0, 0.6, 800))
    for p in (50.0, 90.0, 99.0):
        fast = bootstrap_percentile_draws(x, p, 20000, np.random.default_rng(1))
        naive = np.percentile(x[np.random.default_rng(2).integers(0, x.size, (4000, x.size))], p, axis=1)
        for q in (5, 50, 95):
            assert np.percentile(fast, q) == pytest.approx(np.percentile(naive, q), rel=0.02)


@settings(max_examples=15, deadline=None, derandomize=True)  # a statistical claim: the same 15 examples every run
@given(shift=st.floats(1.25, 2.0), p=st.sampled_from([50.0, 90.0]), seed=st.integers(0, 10_000))
def test_known_slowdown_beyond_threshold_is_significant(shift, p, seed):
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0, 0.3, 2000)
    new = rng.lognormal(0, 0.3, 2000) * shift
    c = percentile_change(base, new, p)
    assert c.rel_ci[0] > 0.10  # a >= 25 % slowdown: the whole CI lies beyond a 10 % rule
    assert c.rel_ci[0] <= shift - 1 <= c.rel_ci[1] or abs(c.rel - (shift - 1)) < 0.08


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_identical_distributions_never_fail_a_10_percent_rule(seed):
    rng = np.random.default_rng(seed)
    c = percentile_change(rng.lognormal(0, 0.3, 1000), rng.lognormal(0, 0.3, 1000), 50.0)
    assert c.rel_ci[0] < 0.10 and c.rel_ci[1] > -0.10


def test_percentile_ci_coverage_is_near_nominal():
    hits = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        c = percentile_change(rng.exponential(1.0, 1500), rng.exponential(1.2, 1500), 50.0, resamples=2000)
        hits += c.rel_ci[0] <= 0.2 <= c.rel_ci[1]
    assert hits >= 51  # 95 % nominal; >= 85 % of 60 allows for sampling noise


def test_bootstrap_is_deterministic():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 500), rng.normal(10.5, 1, 500)
    assert percentile_change(a, b, 99) == percentile_change(a, b, 99)
    assert mean_change(a, b) == mean_change(a, b)
    assert "seed" in percentile_change(a, b, 99).method


def test_mean_change_of_large_samples_uses_the_normal_approximation():
    rng = np.random.default_rng(5)
    c = mean_change(rng.exponential(1.0, 60_000), rng.exponential(1.1, 60_000))
    assert "normal approximation" in c.method and c.rel_ci[0] < 0.1 < c.rel_ci[1]


def test_scalar_change_reads_the_cis():
    base = {"value": 100.0, "ci_low": 98.0, "ci_high": 102.0, "n": 10, "confidence": 0.95}
    new = {"value": 80.0, "ci_low": 78.0, "ci_high": 82.0, "n": 10, "confidence": 0.95}
    c = scalar_change(base, new)
    assert c.rel == pytest.approx(-0.2)
    assert -0.24 < c.rel_ci[0] < c.rel_ci[1] < -0.16
    with pytest.raises(ValueError, match="without a confidence interval"):
        scalar_change({"value": 1.0}, {"value": 2.0})


# ---------------------------------------------------------------------------------------------- repeated runs


def test_summarize_runs_on_known_numbers():
    s = summarize_runs("ttft.p99", [10.0, 12.0, 14.0])
    assert (s.n, s.mean, s.std) == (3, 12.0, 2.0)
    assert s.cv == pytest.approx(2 / 12)
    half = 4.302652729911275 * 2.0 / math.sqrt(3)  # t(0.975, 2)
    assert (s.ci_low, s.ci_high) == (pytest.approx(12 - half), pytest.approx(12 + half))
    assert s.enough_runs
    one = summarize_runs("x", [5.0, float("nan")])
    assert one.n == 1 and math.isnan(one.std) and one.ci_low is None and not one.enough_runs


def test_across_runs_change_uses_the_larger_variation_when_counts_differ():
    c = across_runs_change([10.0, 10.0, 10.0, 10.0], [12.0, 11.0, 13.0])  # sd 0 vs 1: uses 1
    half = 2.5705818366147395 * 1.0 * math.sqrt(1 / 4 + 1 / 3)  # t(0.975, 5)
    assert c.diff == pytest.approx(2.0)
    assert c.diff_ci == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert "larger standard deviation" in c.method
    eq = across_runs_change([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])
    assert "pooled" in eq.method and eq.diff == pytest.approx(1.0)
    with pytest.raises(ValueError, match=">= 3 in all"):
        across_runs_change([1.0], [2.0])


# ---------------------------------------------------------------------------------------------- storage


def test_save_names_and_loads_runs(tmp_path: Path, store: Path):
    src = load_run("base", store)
    dst = tmp_path / "s2"
    a = save(src.document, dst, samples=src.samples, commit="abc123", now=1795465564.0)
    assert re.fullmatch(r"0001_abc123_20261123T\d{6}Z", a.id)
    b = save(src.document, dst, samples=src.samples, name="main", commit="def")
    assert b.id == "0002_main"
    meta = json.loads((dst / "0002_main" / "meta.json").read_text())
    assert meta["sut"]["model"] == "llmbench-sim" and meta["machine"]["python_version"]
    assert meta["sut"]["plugin_version"] and meta["commit"] == "def"
    assert [r.id for r in list_runs(dst)] == [a.id, "0002_main"]
    assert load_run(None, dst).id == "0002_main" and load_run("latest", dst).id == "0002_main"
    assert load_run("1", dst).id == a.id and load_run("0001", dst).id == a.id
    assert load_run("main", dst).id == "0002_main"
    assert load_run(str(dst / a.id), dst).id == a.id
    again = load_run("main", dst)
    k = next(iter(src.samples))
    assert np.array_equal(again.samples[k], src.samples[k].astype(np.float32))
    with pytest.raises(GateStorageError, match="no stored run matches 'nope'"):
        load_run("nope", dst)
    with pytest.raises(GateStorageError, match="save name"):
        save(src.document, dst, samples=src.samples, name="bad name!")
    with pytest.raises(GateStorageError, match="no stored runs"):
        load_run(None, tmp_path / "empty")


# ---------------------------------------------------------------------------------------------- compare


def test_slower_run_fails_with_the_figures_and_rerun_passes(store: Path):
    base, rerun, slow = (load_run(n, store) for n in ("base", "rerun", "slow"))
    bad = compare(base, slow, ["tpot.p50:10%"])
    assert bad.failed and len(bad.violations) == 1
    msg = bad.violations[0].message
    for part in ("tpot.p50", "baseline 2.316 ms", "new 2.838 ms", "n=299", "change +22.", "95% CI", "p(no change)=",
                 "rule tpot.p50:10%", "method: percentile bootstrap", "0001_base"):
        assert part in msg, (part, msg)
    ok = compare(base, rerun, ["tpot.p50:10%", "ttft.p99:10%", "output_throughput:5%"])
    assert not ok.failed and ok.violations == []
    assert {o.verdict for o in ok.pairs[0].outcomes[:3]} <= {"pass", "pass (not significant)"}
    assert ok.pairs[0].load == "poisson(capacity_fraction=0.5)" and ok.pairs[0].rate_baseline == [10.0]
    mem = StoredRun.in_memory(slow.document, samples=slow.samples)
    assert [o.message for o in compare(base, mem, ["tpot.p50:10%"]).violations] == [
        o.message for o in bad.violations]
    tests = ok.pairs[0].tests
    assert tests and ok.outcomes_for_test(tests[0])
    md = render_comparison_markdown(bad.to_json())
    assert "| tpot.p50 | 2.316 ms (n=299) | 2.838 ms (n=299) | +22.6% |" in md and "| FAIL |" in md
    props = dict(junit_properties(bad.to_json(), tests[0]))
    assert props["llmbench_baseline"] == "0001_base" and props["llmbench_change_tpot.p50"].endswith("FAIL")


def test_throughput_drop_fails_a_throughput_rule(store: Path):
    base = load_run("base", store)
    doc = json.loads(json.dumps(base.document))
    for p in doc["procedures"]:
        for m in [p["result"]["metrics"]] + [r["metrics"] for r in p["result"]["runs"]]:
            e = m["scalars"]["output_throughput"]
            e["value"], e["ci_low"], e["ci_high"] = e["value"] * 0.5, e["ci_low"] * 0.5, e["ci_high"] * 0.5
    slow = save(doc, store, samples=base.samples, name="halfspeed", commit="x")
    comp = compare(base, slow, ["output_throughput:10%"])
    assert comp.violations and "lower is worse" in comp.violations[0].message
    assert compare(slow, base, ["output_throughput:10%"]).violations == []  # faster is not a regression


def test_incomparable_runs_are_refused_with_the_differences(store: Path):
    base = load_run("base", store)
    doc = json.loads(json.dumps(base.document))
    p = doc["procedures"][0]
    p["configuration"]["seed"] = 7
    p["result"]["params"]["load"]["capacity_fraction"] = 0.8
    doc["sut"]["model"] = "other-model"
    other = save(doc, store, samples=base.samples, name="changed", commit="x")
    comp = compare(base, other, ["tpot.p50:10%"])
    assert comp.failed and comp.refused and not comp.pairs[0].outcomes
    fields = {d.field for d in comp.pairs[0].differences}
    assert {"seed", "parameters.load", "model"} <= fields
    assert "poisson(capacity_fraction=0.8)" in comp.pairs[0].note
    forced = compare(base, other, ["tpot.p50:10%"], force=True)
    assert not forced.refused and forced.pairs[0].forced and forced.pairs[0].outcomes
    assert forced.to_json()["forced"] is True
    with pytest.raises(IncomparableRunsError) as ei:
        check_comparable(base, other)
    assert {d.field for d in ei.value.differences} >= {"seed", "model"}


def test_baseline_of_another_records_format_is_refused(store: Path):
    """Records format 2.0 moved T_submit to the last request byte (App. B.1.1): a baseline saved from
    1.x records (its key was the run.json schema alone) is not compared with one of this version."""
    meta_path = store / "0001_base" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["records_format"] = "pytest-llmbench/run/1"  # what a baseline saved before 2.0 carries
    meta_path.write_text(json.dumps(meta))
    base, rerun = load_run("base", store), load_run("rerun", store)
    with pytest.raises(IncomparableRunsError) as ei:
        check_comparable(base, rerun)
    assert [(d.field, d.new) for d in ei.value.differences] == [
        ("records format", f"pytest-llmbench/run/1 records {RECORDS_FORMAT.split('.')[0]}.x")]


def test_a_baseline_of_the_previous_metric_definitions_is_refused_with_the_reason(store: Path):
    """Issue 36: throughput moved to the send window (definitions version 2); a baseline stored before
    (no version: 1) is refused, never compared silently, and the note says why."""
    base = load_run("base", store)
    doc = json.loads(json.dumps(base.document))
    for run in doc["procedures"][0]["result"]["runs"]:
        run["metrics"]["definitions_version"] = DEFINITIONS_VERSION
    new = save(doc, store, samples=base.samples, name="v2", commit="x")
    comp = compare(base, new, ["output_throughput:10%"])
    assert comp.refused and not comp.pairs[0].outcomes
    assert [(d.field, d.baseline, d.new) for d in comp.pairs[0].differences] == [("metric definitions", 1, 2)]
    assert "send window" in comp.pairs[0].note and "save a new baseline" in comp.pairs[0].note
    assert not compare(new, new, ["output_throughput:10%"]).refused  # the same version compares


def test_a_compared_slo_verdict_of_inconclusive_is_shown_as_such_never_as_a_pass(store: Path):
    """Issue 47: each compared test's SLOs with their verdict in the baseline and the new run, beside the
    figures; INCONCLUSIVE is shown as INCONCLUSIVE (with "need ~N more"), a baseline stored before verdicts
    had three values gives its PASS/FAIL, and SLO verdicts are no fail rule."""
    from pytest_llmbench.report.comparison import render_comparison

    base = load_run("base", store)
    nodeid = "suites/test_5_1_ttft.py::test_ttft_slo"
    doc = json.loads(json.dumps(base.document))
    test = next(t for t in doc["tests"] if t["nodeid"] == nodeid)
    test["slo_results"] = [{"text": "ttft.p99 <= 500ms", "outcome": "INCONCLUSIVE", "needed_more": 259},
                           {"text": "ttft.p50 <= 2s", "outcome": "PASS"}]
    new = save(doc, store, samples=base.samples, name="inconclusive", commit="x")
    old = json.loads(json.dumps(base.document))
    next(t for t in old["tests"] if t["nodeid"] == nodeid)["slo_results"] = [
        {"text": "ttft.p99 <= 500ms", "passed": True}]  # recorded before results 1.8: no outcome field
    baseline = save(old, store, samples=base.samples, name="two-way", commit="y")
    comp = compare(baseline, new, ["tpot.p50:10%"])
    assert not comp.failed
    v = {x.slo: x for x in comp.pairs[0].slo_verdicts}
    assert (v["ttft.p99 <= 500ms"].baseline, v["ttft.p99 <= 500ms"].new) == ("PASS", "INCONCLUSIVE")
    assert (v["ttft.p50 <= 2s"].baseline, v["ttft.p50 <= 2s"].new) == (None, "PASS")
    text = render_comparison(comp.to_json())
    assert (f"[SLO INCONCLUSIVE] SLO ttft.p99 <= 500ms [{nodeid}]: baseline PASS → new INCONCLUSIVE (not shown to "
            "hold; need ~259 more requests)") in text
    assert "[SLO PASS] SLO ttft.p99" not in text and "baseline not judged → new PASS" in text
    md = render_comparison_markdown(comp.to_json())
    assert f"| ttft.p99 <= 500ms | {nodeid} | PASS | INCONCLUSIVE |" in md


def test_repeated_runs_use_across_run_statistics(store: Path):
    base, rerun, slow = (load_run(n, store) for n in ("base", "rerun", "slow"))
    comp = compare([base, rerun], [slow], ["tpot.p50:10%"])
    o = comp.pairs[0].outcomes[0]
    assert "Student-t CI across runs (2 vs 1 runs" in o.message and o.change.n_baseline == 2
    stats = across_runs([base, rerun, slow], ["tpot.p50"])
    s = next(iter(stats.values()))["tpot.p50"]
    assert s.n == 3 and s.std > 0 and s.ci_low < s.mean < s.ci_high


# ---------------------------------------------------------------------------------------------- reports and CLI


def test_system_comparison_report(store: Path):
    runs = [load_run(n, store) for n in ("base", "slow")]
    c = compare_systems(runs, gpus={"0001_base": 2, "0003_slow": 4}, prices={"0001_base": 3.0})
    n0, n1 = c.normalisation
    assert n0["tokens_per_gpu_second"] == pytest.approx(n0["output_throughput"] / 2)
    assert n1["tokens_per_gpu_second"] == pytest.approx(n1["output_throughput"] / 4)
    assert n0["tokens_per_dollar_hour"] == pytest.approx(n0["output_throughput"] * 3600 / 3.0)
    assert n1["tokens_per_dollar_hour"] is None
    ids = {i.id: i.status for i in c.equivalence + c.checklist}
    assert ids["6.1-MUST-1"] == "met" and ids["6.1-MUST-4"] == "met" and ids["6.4-PARAM-6"] == "needs declaration"
    assert any(k.endswith("time_scale") for k, _ in c.config_differences)  # 0.25 vs 0.30 noted (§6.4)
    md, html = render_systems_markdown(c.to_json()), render_systems_html(c.to_json())
    assert "| 6.1-MUST-2 |" in md and "tokens per GPU-second" in md
    assert html.count("<svg") == 2 and "<script" not in html


def test_compare_cli_exit_status_and_files(store: Path, tmp_path: Path, capsys):
    out = tmp_path / "out"
    rc = compare_main(["base", "slow", "--fail", "tpot.p50:10%", "--storage", str(store), "--output", str(out)])
    text = capsys.readouterr().out
    assert rc == 1 and "REGRESSION: tpot.p50" in text and "1 rule violation" in text
    assert (out / "compare.md").is_file() and "<svg" in (out / "compare.html").read_text()
    assert json.loads((out / "compare.json").read_text())["comparisons"][0]["failed"] is True
    assert compare_main(["base", "rerun", "--fail", "tpot.p50:10%", "--storage", str(store),
                         "--output", str(out)]) == 0
    assert compare_main(["base", "1+2", "--storage", str(store), "--output", str(out)]) == 0
    assert compare_main(["base", "slow", "--fail", "ttft:10%", "--storage", str(store)]) == 2
    assert "name a statistic" in capsys.readouterr().err


def test_change_points_and_history(store: Path, capsys):
    assert change_points([1.0, 1.01, 0.99, 1.0, 1.2, 1.21, 1.19, 1.2]) == [4]
    assert change_points([1.0, 1.01, 0.99, 1.0, 1.01, 0.99]) == []
    hist = store.parent / "hist"
    for name in ("base", "rerun", "base", "rerun", "slow", "slow", "slow", "slow"):  # 0.25 ×4, then 0.30 ×4
        r = load_run(name, store)
        save(r.document, hist, samples=r.samples, commit=name)
    series = history(list_runs(hist), "tpot.p50")
    assert len(series) == 1 and len(series[0].points) == 8
    assert [i for i, p in enumerate(series[0].points) if p.change_point] == [4]
    assert history(list_runs(hist), "tpot.p50", test="no-such-test") == []
    assert history_main(["--metric", "tpot.p50", "--storage", str(hist)]) == 0
    text = capsys.readouterr().out
    assert "change point" in text and "PELT" in text
    assert history_main(["--metric", "nope.p5", "--storage", str(store)]) == 2


def test_save_from_an_older_report_directory_summarises_each_run_once(tmp_path: Path, store: Path):
    """A report directory written before runs kept samples.npz: the gate refuses to summarise it itself;
    with a re-summariser from above (session.resummarize_run) each run is summarised once, its samples
    file written beside the records, and the stored run says so."""
    from pytest_llmbench.common.storage import RunWriter
    from pytest_llmbench.session import resummarize_run

    report = tmp_path / "llmbench-report"
    doc = json.loads(json.dumps(load_run("base", store).document))
    run_dir = doc["procedures"][0]["result"]["runs"][0]["run_dir"]
    with RunWriter(report / run_dir) as w:
        for r in ttft_records([10.0 + i for i in range(50)]):
            w.write(r)
    (report / "results.json").write_text(json.dumps(doc))
    with pytest.raises(GateStorageError, match="does not summarise records itself"):
        save(report, tmp_path / "st", commit="c0ffee")
    calls: list[tuple[Path, str]] = []

    def counted(path: Path, itl_option: str):
        calls.append((path, itl_option))
        return resummarize_run(path, itl_option)

    saved = save(report, tmp_path / "st", commit="c0ffee", resummarize=counted)
    key = (doc["procedures"][0]["key"], "measure", "ttft")
    assert saved.samples[key].dtype == np.float32 and saved.samples[key].size == 50
    assert saved.samples[key][0] == pytest.approx(0.010) and saved.samples[key][-1] == pytest.approx(0.059)
    assert calls == [(report / run_dir, doc["procedures"][0]["result"]["runs"][0]["metrics"]["itl_option"])]
    assert (report / run_dir / "samples.npz").is_file()
    stored = load_run("latest", tmp_path / "st")
    assert "summarised again once" in saved.notes[0] and stored.meta["notes"] == saved.notes
    assert stored.meta["records_format"] == f"pytest-llmbench/run/1 records {RECORDS_FORMAT.split('.')[0]}.x"
    again = save(report, tmp_path / "st", resummarize=counted)  # the samples file is there now: copied
    assert len(calls) == 1 and again.notes == [] and np.array_equal(again.samples[key], saved.samples[key])
    (report / run_dir / "records.jsonl").unlink()
    assert save(report, tmp_path / "st").samples[key].size == 50  # the samples file alone is enough
    (report / run_dir / "samples.npz").unlink()
    with pytest.raises(GateStorageError, match="run records missing"):
        save(report, tmp_path / "st")


# ---------------------------------------------------------------------------------------------- variance (issue 14)


def _scaled(doc: dict, metric: str, factor: float) -> dict:
    """A copy of a results document with every stored percentile of ``metric`` multiplied by ``factor``."""
    doc = json.loads(json.dumps(doc))
    for p in doc["procedures"]:
        for m in [p["result"]["metrics"]] + [r["metrics"] for r in p["result"]["runs"]]:
            for e in (m["distributions"][metric]["percentiles"] or {}).values():
                e["value"] *= factor
    return doc


def test_widen_by_history_on_known_numbers():
    from pytest_llmbench.measure.stats.significance import Change, widen_by_history

    c = Change(10.0, 11.0, 1.0, (0.9, 1.1), 0.1, (0.09, 0.11), 100, 100, 0.95, "bootstrap", 0.001)
    w = widen_by_history(c, [10.0, 11.0, 12.0])  # s = 1, t(0.975, 2) = 4.3027
    half = 4.302653 * math.sqrt(2)
    assert w.diff_ci == pytest.approx((1 - half, 1 + half), rel=1e-5)
    assert w.rel_ci == pytest.approx((0.1 - half / 10, 0.1 + half / 10), rel=1e-5)
    assert "between-run SD 1 of 3 stored runs" in w.method and w.p_value > 0.5
    narrow = widen_by_history(c, [10.0, 10.001, 10.002])  # history tighter than the bootstrap: unchanged CI
    assert narrow.diff_ci == (0.9, 1.1)


def test_single_runs_use_the_stored_history_and_say_which_variance(store: Path):
    base, slow = load_run("base", store), load_run("slow", store)
    alone = compare(base, slow, ["tpot.p50:10%"], history=[base])
    assert alone.failed and "within-run sampling only" in alone.violations[0].message
    noisy = [save(_scaled(base.document, "tpot", f), store, samples=base.samples, name=f"h{i}", commit="x")
             for i, f in enumerate((0.7, 1.0, 1.4))]
    widened = compare(base, slow, ["tpot.p50:10%"], history=[base, *noisy])
    o = widened.pairs[0].outcomes[0]
    assert not widened.failed and "widened by the between-run SD" in o.message and "of 4 stored runs" in o.message
    steady = [save(_scaled(base.document, "tpot", f), store, samples=base.samples, name=f"s{i}", commit="x")
              for i, f in enumerate((0.999, 1.0, 1.001))]
    still = compare(base, slow, ["tpot.p50:10%"], history=[base, *steady])
    assert still.failed and "widened" in still.violations[0].message


def test_a_run_of_llm_runs_counts_as_its_repetitions(store: Path):
    from pytest_llmbench.gate.storage import repetition_views

    base, slow = load_run("base", store), load_run("slow", store)
    doc = json.loads(json.dumps(base.document))
    p = doc["procedures"][0]
    reps = [{"result": q["procedures"][0]["result"], "run_dirs": []}
            for q in (base.document, _scaled(base.document, "tpot", 1.01), _scaled(base.document, "tpot", 0.99))]
    p["repetitions"] = {"n": 3, "runs": reps}
    three = save(doc, store, samples=base.samples, name="three", commit="x")
    views = repetition_views(load_run("three", store))
    assert [v.id for v in views] == [f"{three.id}#{k}" for k in (1, 2, 3)]
    comp = compare(three, slow, ["tpot.p50:10%"])
    o = comp.pairs[0].outcomes[0]
    assert "3 vs 1 runs" in o.message and o.change.n_baseline == 3
    facts = comp.to_json()["section6"]
    assert facts["6.3-PARAM-1"]["met"] is False and "3 baseline run(s), 1 new run(s)" in facts["6.3-PARAM-1"]["evidence"]
    assert compare(three, three).to_json()["section6"]["6.3-PARAM-1"]["met"] is True
    assert facts["6.3-REPORT-1"]["met"] and facts["6.3-PARAM-2"]["met"]


def test_a_metric_without_direction_cannot_be_gated():
    from pytest_llmbench.measure.registry import METRICS

    neutral = next(k for k, v in METRICS.items() if v.direction == "neutral" and v.kind != "column")
    with pytest.raises(RuleError, match=neutral):
        parse_rule(f"{neutral}.p50:10%" if METRICS[neutral].kind == "distribution" else f"{neutral}:10%")
    assert metric_info("tpot").higher_is_better is False and metric_info("output_throughput").higher_is_better


def test_gate_settings_resolve_and_validate():
    from pytest_llmbench.settings import LLMBenchConfigError, resolve

    cli = {"llm_compare": "latest", "llm_compare_fail": ["tpot.p50:10%"], "llm_runs": "3"}
    s = resolve(lambda k: cli.get(k), lambda k: None, environ={"LLMBENCH_STORAGE": "/tmp/st"})
    assert (s.compare, s.compare_fail, s.runs, str(s.storage)) == ("latest", ["tpot.p50:10%"], 3, "/tmp/st")
    with pytest.raises(LLMBenchConfigError, match="--llm-runs.*>= 1"):
        resolve(lambda k: {"llm_runs": "0"}.get(k), lambda k: None, environ={})


def test_unreadable_stored_samples_fall_back_to_the_stored_summaries_and_a_bug_is_not_hidden(store: Path):
    """A damaged samples.npz is a GateStorageError naming the file; the comparison then reads the stored
    percentile. Any other error reading samples (a bug) propagates instead of being swallowed."""
    from pytest_llmbench.gate.compare import figure_samples, figure_value

    rule = parse_rule("ttft.p99:10%")
    run = load_run("base", store)
    proc = run.document["procedures"][0]
    with_samples = figure_value(run, proc, rule)
    assert figure_samples(run, proc, rule) is not None
    (run.path / "samples.npz").write_bytes(b"not a zip file")
    damaged = load_run("base", store)
    with pytest.raises(GateStorageError, match="samples.npz: stored samples unreadable"):
        _ = damaged.samples
    assert figure_samples(damaged, proc, rule) is None
    stored = proc["result"]["runs"][0]["metrics"]["distributions"]["ttft"]["percentiles"]["p99"]
    assert figure_value(damaged, proc, rule) == stored and with_samples["n"] == stored["n"]

    class Broken:
        @property
        def samples(self):
            raise TypeError("a bug")

    with pytest.raises(TypeError, match="a bug"):
        figure_samples(Broken(), proc, rule)  # type: ignore[arg-type]
