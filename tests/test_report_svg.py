"""Report building blocks: SVG charts, plot-data conventions, number formatting."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import numpy as np
import pytest
from factories import make_record
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.document.plotdata import (
    CDF_POINTS,
    configuration_differences,
    normalise,
    run_overlays,
    samples_summary,
)
from pytest_llmbench.measure.stats import scaling_fit
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.procedures import p5_4_itl, p5_6_fairness, p5_10_guardrails
from pytest_llmbench.report.figures import figures_for
from pytest_llmbench.report.fmt import fmt_duration, fmt_est, fmt_num, fmt_time, fmt_value, md_cell
from pytest_llmbench.report.svg import Chart, Scale, grouped_bars, log_ticks, nice_ticks

NS = "{http://www.w3.org/2000/svg}"
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


# ------------------------------------------------------------------------------------ ticks, scales


@settings(deadline=None, max_examples=200)
@given(finite, finite)
def test_nice_ticks_cover_the_range_with_a_round_step(a: float, b: float) -> None:
    lo, hi = min(a, b), max(a, b)
    t_lo, t_hi, ticks = nice_ticks(lo, hi)
    tol = 1e-9 * max(hi - lo, abs(lo), abs(hi), 1e-300)  # floating noise relative to the scale
    assert t_lo <= lo + tol and t_hi >= hi - tol
    assert ticks[0] == pytest.approx(t_lo) and ticks[-1] == pytest.approx(t_hi)
    assert 2 <= len(ticks) <= 12
    steps = np.diff(ticks)
    assert np.allclose(steps, steps[0], rtol=1e-6)
    mant = steps[0] / 10 ** math.floor(math.log10(steps[0]))
    assert any(math.isclose(mant, m, rel_tol=1e-6) for m in (1.0, 2.0, 2.5, 5.0, 10.0))


@settings(deadline=None, max_examples=200)
@given(st.floats(min_value=1e-6, max_value=1e6), st.floats(min_value=1.0, max_value=1e4))
def test_log_ticks_bound_the_data(lo: float, ratio: float) -> None:
    hi = lo * ratio
    b_lo, b_hi, ticks = log_ticks(lo, hi)
    assert b_lo <= lo * (1 + 1e-9) and b_hi >= hi * (1 - 1e-9)
    assert b_hi / b_lo <= max(ratio, 1.0) * 25 + 1e-9  # never more than one 1-2-5 step of slack each side
    assert all(b_lo * (1 - 1e-9) <= t <= b_hi * (1 + 1e-9) for t in ticks) and len(ticks) >= 2


def test_scale_maps_ends_and_is_monotone() -> None:
    s = Scale.fit([3.0, 17.0], 100.0, 500.0)
    assert (s.lo, s.hi) == (0.0, 20.0)
    assert s(s.lo) == 100.0 and s(s.hi) == 500.0 and s(10.0) == 300.0
    log = Scale.fit([20.0, 3000.0], 0.0, 300.0, log=True)
    assert (log.lo, log.hi) == (20.0, 5000.0)
    assert log(20.0) == 0.0 and log(5000.0) == pytest.approx(300.0)
    assert log(200.0) == pytest.approx(300.0 * math.log10(10) / math.log10(250))


# ------------------------------------------------------------------------------------ charts


def test_chart_has_axes_points_and_skips_undrawable_values() -> None:
    c = Chart.create(kind="t", title="T & <b>", x_label="load (req/s)", y_label="TTFT (ms, log)",
                     xs=[1, 2, 4], ys=[10, 0, 1000], y_log=True)
    c.points([1, 2, 4, None], [10, 0, 1000, 5], series="s", data=[{"i": 0}, {"i": 1}, {"i": 2}, {"i": 3}])
    c.line([1, 2, 4], [10, float("nan"), 1000], series="fit", dashed=True)
    svg = ET.fromstring(c.render())
    assert svg.find(f"{NS}title").text == "T & <b>"
    pts = [e for e in svg.iter(f"{NS}circle") if e.get("class") == "point"]
    assert [(p.get("data-x"), p.get("data-y"), p.get("data-i")) for p in pts] == [("1", "10", "0"), ("4", "1000", "2")]
    path = next(e for e in svg.iter(f"{NS}path") if e.get("class") == "series")
    assert path.get("data-points") == "2" and path.get("stroke-dasharray") == "6 4"
    y_axis = next(g for g in svg.iter(f"{NS}g") if g.get("class") == "axis y-axis")
    assert y_axis.get("data-scale") == "log" and y_axis.get("data-label") == "TTFT (ms, log)"
    ticks = [float(t.get("data-value")) for t in y_axis.findall(f"{NS}g[@class='tick']")]
    assert ticks == [10, 20, 50, 100, 200, 500, 1000]
    # legend appears once there are two series
    assert svg.find(f"{NS}g[@class='legend']") is not None


def test_grouped_bars_leave_gaps_for_missing_values() -> None:
    text = grouped_bars(kind="bars", title="x", groups=["a", "b"], series=["P50", "P99"],
                        values={"a": {"P50": 1.0, "P99": 2.0}, "b": {"P50": None}}, y_label="ms", x_label="g")
    svg = ET.fromstring(text)
    bars = [(r.get("data-group"), r.get("data-series"), r.get("data-y")) for r in svg.iter(f"{NS}rect")
            if r.get("class") == "bar"]
    assert bars == [("a", "P50", "1"), ("a", "P99", "2")]
    cats = [g.get("data-group") for g in svg.iter(f"{NS}g") if g.get("class") == "category"]
    assert cats == ["a", "b"]


def test_rendering_is_deterministic() -> None:
    plots, _ = normalise({"ttft_samples_s": list(np.linspace(0.05, 0.5, 300)),
                          "search": [{"level": 1, "passed": True, "value": 0.1}]})
    a = [f.svg for f in figures_for("5.1", plots)]
    b = [f.svg for f in figures_for("5.1", plots)]
    assert a == b and len(a) == 3  # histogram, CDF, search


# ------------------------------------------------------------------------------------ plot data


@settings(deadline=None, max_examples=60)
@given(st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=3000))
def test_samples_summary_keeps_exact_quantiles_and_counts(xs: list[float]) -> None:
    d = samples_summary(xs, "ttft")
    x = np.sort(np.asarray(xs))
    assert d["n"] == x.size
    assert sum(d["histogram"]["counts"]) == x.size
    for q in (50, 90, 95, 99, 99.9):
        assert d["stats"][f"p{q:g}"] == pytest.approx(float(np.percentile(x, q)), abs=1e-12)
    assert d["stats"]["min"] == x[0] and d["stats"]["max"] == x[-1]
    cx, cp = d["cdf"]["x"], d["cdf"]["p"]
    assert len(cx) <= CDF_POINTS and cx[0] == x[0] and cx[-1] == x[-1] and cp[-1] == 1.0
    assert all(a <= b for a, b in zip(cx, cx[1:])) and all(a < b for a, b in zip(cp, cp[1:]))
    # every CDF point is an exact order statistic: F(x_(i)) = i/n
    for v, p in zip(cx, cp):
        i = round(p * x.size)
        assert x[i - 1] == v


def test_large_sample_arrays_are_thinned() -> None:
    rng = np.random.default_rng(3)
    xs = rng.lognormal(-2.0, 0.5, 200_000)
    d = samples_summary(xs, "ttft")
    assert len(d["cdf"]["x"]) == CDF_POINTS
    assert d["stats"]["p99"] == pytest.approx(float(np.percentile(xs, 99)))
    assert sum(d["histogram"]["counts"]) == 200_000


def test_primary_metrics_supply_ttft_and_itl_samples() -> None:
    recs = [make_record(i, sent=10 * i, ttft=50 + i, itl=5, n_chunks=3, text=["a", "b", "c"], spec_input_tokens=10,
                        max_tokens=3) for i in range(6)]
    m = summarize(recs)
    plots, notes = normalise({}, m)
    assert notes == []
    assert plots["ttft_samples_s"]["n"] == 6 and plots["ttft_samples_s"]["source"] == "primary run metrics"
    assert plots["ttft_samples_s"]["stats"]["min"] == pytest.approx(0.050)
    assert plots["itl_samples_s"]["n"] == 12 and plots["itl_samples_s"]["stats"]["p50"] == pytest.approx(0.005)
    # a procedure's own samples win
    own, _ = normalise({"ttft_samples_s": [1.0, 2.0]}, m)
    assert own["ttft_samples_s"]["n"] == 2 and own["ttft_samples_s"]["source"] == "procedure"


def test_scaling_fit_is_computed_when_absent() -> None:
    L = [512, 1024, 4096, 16384]
    plots, _ = normalise({"scaling": {"length": L, "ttft_s": [2e-5 * x ** 1.5 for x in L]}})
    fit = plots["scaling"]["fit"]
    ref = scaling_fit(L, [2e-5 * x ** 1.5 for x in L])
    assert fit["k"] == pytest.approx(1.5) and fit["k"] == ref.exponent
    assert fit["c"] == pytest.approx(2e-5) and fit["r2"] == pytest.approx(1.0)


@pytest.mark.parametrize("plots, message", [
    ({"curve": {"offered": [1, 2], "achieved_tps": [1, 2], "ttft_p99_s": [0.1, 0.2], "knee_index": 2}},
     "curve.knee_index: expected an index in 0..1 or null, got 2"),
    ({"curve": {"offered": [1], "achieved_tps": [1]}}, "curve: missing 'ttft_p99_s'"),
    ({"search": [{"level": 1}]}, "search[0]: each step needs 'level' and 'passed'"),
    ({"scaling": {"length": [1, 2], "ttft_s": [0.1]}}, "scaling: length has 2 entries, ttft_s has 1"),
    ({"classes": {"short": 3}}, "classes.short: expected {metric: value}"),
    ({"ttft_samples_s": ["fast"]}, "ttft_samples_s[0]: expected a number, got 'fast'"),
    ({"ttft_samples_s": []}, "ttft: no finite samples"),
])
def test_bad_plot_data_names_the_problem(plots: dict, message: str) -> None:
    out, notes = normalise(plots)
    assert out == {}
    assert notes == [f"plot {next(iter(plots))!r} not drawn: {message}"]


def test_search_accepts_a_described_form_and_unknown_keys_are_kept() -> None:
    out, notes = normalise({"search": {"steps": [{"level": 8, "passed": False, "value": None, "label": "x"}],
                                       "level_label": "concurrency", "value_label": "TTFT P99 (s)"},
                            "custom": {"a": np.array([1.0, np.nan])}})
    assert notes == []
    assert out["search"] == {"kind": "search", "steps": [{"level": 8.0, "passed": False, "value": None, "label": "x"}],
                             "level_label": "concurrency", "value_label": "TTFT P99 (s)"}
    assert out["custom"] == {"kind": "other", "value": {"a": [1.0, None]}}


# ------------------------------------------------------------------------------------ formatting


def test_number_formatting() -> None:
    assert fmt_num(9.9999999) == "10.00"
    assert fmt_num(1234.5678) == "1,235"
    assert fmt_num(0.012345) == "0.01235"
    assert fmt_time(0.1234) == "123.4 ms" and fmt_time(12.345) == "12.35 s" and fmt_time(3e-18) == "0 ms"
    assert fmt_value(0.9667, "fraction") == "96.67%" and fmt_value(1234.0, "tokens/s") == "1,234 tok/s"
    assert fmt_value(12.0, "requests") == "12 requests"
    assert fmt_duration(75.0) == "75.00 s" and fmt_duration(3723.4) == "1 h 02 min 03 s"
    est = {"value": 0.5, "n": 10, "unit": "s", "ci_low": 0.4, "ci_high": 0.6, "confidence": 0.95,
           "undersampled": True}
    assert fmt_est(est, ci=True, n=True) == "500.0 ms† (95.0% CI 400.0 ms–600.0 ms, n=10)"
    assert md_cell("a|b\nc") == "a\\|b c"


# ------------------------------------------------------------- overlaid CDFs, differences, SLO lines


def _run(label: str, extra: dict, **samples: np.ndarray) -> SimpleNamespace:
    dists = {k: SimpleNamespace(samples=np.sort(v)) for k, v in samples.items()}
    return SimpleNamespace(label=label, extra=extra, metrics=SimpleNamespace(distributions=dists))


def _guardrail_result(overhead_s: float, n: int = 400) -> SimpleNamespace:
    rng = np.random.default_rng(7)
    runs = []
    for g, add in (("none", 0.0), ("input", overhead_s), ("full", 0.0)):
        ttft = 0.05 + rng.gamma(4.0, 0.005, n) + add
        runs.append(_run(f"{g}-50pct", {"guardrails": g, "capacity_fraction": 0.5}, ttft=ttft, e2e=ttft + 0.4))
    runs.append(_run("none-throughput-probe", {"guardrails": "none", "throughput_probe": True},
                     ttft=np.full(n, 9.0), e2e=np.full(n, 9.0)))
    return SimpleNamespace(procedure="5.10", runs=runs, overlays=p5_10_guardrails.overlays(runs, 0.5))


def test_overlay_has_one_cdf_per_configuration_at_the_report_level() -> None:
    overlays = run_overlays(_guardrail_result(0.03))
    assert set(overlays) == {"cdfs_ttft", "cdfs_e2e"}
    d = overlays["cdfs_ttft"]
    assert d["by"] == "configuration" and d["unit"] == "s" and d["title"] == "TTFT"
    # the throughput probe is not a configuration at the report level
    assert [s["label"] for s in d["series"]] == ["Baseline", "Input Filter", "Full Filter"]
    assert all(s["n"] == 400 and s["cdf"]["p"][-1] == 1.0 for s in d["series"])
    [fig] = [f for f in figures_for("5.10", overlays) if f.key == "cdfs_ttft"]
    root = ET.fromstring(fig.svg)
    paths = [p for p in root.iter(f"{NS}path") if p.get("class") == "series"]
    assert [p.get("data-series") for p in paths] == ["Baseline", "Input Filter", "Full Filter"]
    assert len({p.get("stroke") for p in paths}) == 3
    legend_g = root.find(f".//{NS}g[@class='legend']")
    legend = "".join(legend_g.itertext())
    assert min(float(t.get("y")) for t in legend_g.iter(f"{NS}text")) > 340 and float(root.get("height")) > 340
    assert "Input Filter" in legend and "Baseline" in legend
    x_axis = root.find(f".//{NS}g[@data-scale]")
    assert x_axis.get("data-label").startswith("TTFT (ms")
    assert all(float(t.get("font-size")) >= 11 for t in root.iter(f"{NS}text"))


def test_overlay_axis_is_log_for_a_wide_spread_and_cut_at_p999_otherwise() -> None:
    rng = np.random.default_rng(3)
    narrow = [_run(f"L{i}", {"capacity_fraction": f, "offered_rate": 10.0 * f},
                   itl=np.append(0.01 + rng.gamma(3.0, 0.001, 3000), 5.0)) for i, f in enumerate((0.25, 0.5))]
    d = run_overlays(SimpleNamespace(procedure="5.4", runs=narrow, overlays=p5_4_itl.overlays(narrow)))["cdfs_itl"]
    assert d["series"][0]["label"].startswith("25% of capacity (2.5 req/s")
    [fig] = figures_for("5.4", {"cdfs_itl": d})
    root = ET.fromstring(fig.svg)
    assert root.find(f".//{NS}g[@class='axis x-axis']").get("data-scale") == "linear"
    assert "Axis cut at the largest P99.9" in fig.caption and "5,000 ms" in fig.caption
    wide = [_run(f"c-{c}", {"class": c}, ttft=rng.lognormal(m, 0.3, 500)) for c, m in (("short", -4), ("long", 0))]
    wide.append(_run("mixed", {}, ttft=np.array([0.1])))
    wide[-1].metrics.per_request = {"ttft": np.r_[rng.lognormal(-3, 0.3, 300), rng.lognormal(0.5, 0.3, 100)],
                                    "request_class": np.array(["short"] * 300 + ["long"] * 100, dtype=object),
                                    "ok": np.ones(400, dtype=bool)}
    d = run_overlays(SimpleNamespace(procedure="5.6", runs=wide, overlays=p5_6_fairness.overlays(wide)))["cdfs_ttft"]
    assert [(s["label"], s["dashed"], s["n"]) for s in d["series"]] == [
        ("short, mixed", False, 300), ("short, isolated", True, 500), ("long, mixed", False, 100),
        ("long, isolated", True, 500)]
    [fig] = figures_for("5.6", {"cdfs_ttft": d})
    assert ET.fromstring(fig.svg).find(f".//{NS}g[@class='axis x-axis']").get("data-scale") == "log"
    assert 'stroke-dasharray="6 4"' in fig.svg and "Dashed: each class run on its own" in fig.caption


def test_overlays_replace_the_single_run_distributions() -> None:
    rng = np.random.default_rng(5)
    samples = {"ttft_samples_s": samples_summary(rng.gamma(3, 0.01, 200), "ttft"),
               "itl_samples_s": samples_summary(rng.gamma(3, 0.01, 200), "itl")}
    keys = [f.key for f in figures_for("5.10", {**samples, **run_overlays(_guardrail_result(0.0))})]
    assert keys == ["cdfs_ttft", "cdfs_e2e"]  # ttft first (the procedure's order), no single-run plots
    assert [f.key for f in figures_for("5.10", samples)] == ["ttft_samples_s-histogram", "ttft_samples_s-cdf",
                                                             "itl_samples_s-cdf"]


def test_configuration_differences_carry_a_ci_and_say_within_noise() -> None:
    real = configuration_differences(_guardrail_result(0.03))
    rows = {(r["series"], r["metric"], r["statistic"]): r for r in real["rows"]}
    assert real["baseline"] == "Baseline" and len(rows) == 2 * 2 * 2
    up = rows[("Input Filter", "ttft", "p50")]
    assert up["diff"] == pytest.approx(0.03, abs=0.006)
    assert 0 < up["ci_low"] < up["diff"] < up["ci_high"] and not up["within_noise"]
    same = rows[("Full Filter", "ttft", "p50")]  # another draw of the same distribution
    assert same["ci_low"] <= 0 <= same["ci_high"] and same["within_noise"]
    assert rows[("Input Filter", "ttft", "p99")]["undersampled"]  # 400 < 1,000 samples for P99
    [fig] = figures_for("5.10", {"differences": real})
    root = ET.fromstring(fig.svg)
    marks = {g.get("data-label"): g for g in root.iter(f"{NS}g") if g.get("class") == "interval"}
    assert marks["Full Filter: TTFT P50"].get("data-within-noise") == "true"
    assert "within noise" in "".join(marks["Full Filter: TTFT P50"].itertext())
    assert "higher" in "".join(marks["Input Filter: TTFT P50"].itertext())
    assert float(marks["Input Filter: TTFT P50"].get("data-ci-low")) > 0
    assert configuration_differences(SimpleNamespace(procedure="5.4", runs=[], measurements={})) is None


def test_slo_lines_on_the_latency_curve_and_on_cdfs() -> None:
    slos = [{"metric": "ttft", "statistic": "p99", "operator": "<=", "threshold": 0.2, "label": "TTFT P99",
             "threshold_text": "200 ms", "unit": "s", "percentile": 99.0, "text": "ttft.p99 <= 200ms"},
            {"metric": "ttft", "statistic": "p50", "operator": "<=", "threshold": 90.0, "label": "TTFT P50",
             "threshold_text": "90 s", "unit": "s", "percentile": 50.0, "text": "ttft.p50 <= 90s"}]
    curve = normalise({"curve": {"offered": [1, 2, 3], "achieved_tps": [100, 190, 250],
                                 "ttft_p99_s": [0.05, 0.08, 0.4], "ttft_p50_s": [0.02, 0.03, 0.1]}})[0]
    [fig] = figures_for("5.3", curve, slos)
    lat = ET.fromstring(fig.svg.split("\n")[1])
    lines = {g.get("data-label"): float(g.get("data-y")) for g in lat.iter(f"{NS}g") if g.get("class") == "marker slo"}
    assert lines == {"SLO TTFT P99 ≤ 200 ms": 200.0, "SLO TTFT P50 ≤ 90 s": 90000.0}
    assert "Dashed purple lines: the tests' SLOs" in fig.caption
    d = run_overlays(_guardrail_result(0.03))
    [cdf] = [f for f in figures_for("5.10", d, slos) if f.key == "cdfs_ttft"]
    root = ET.fromstring(cdf.svg)
    assert [g.get("data-label") for g in root.iter(f"{NS}g") if g.get("class") == "marker slo"] == \
        ["SLO TTFT P99 ≤ 200 ms"]
    assert "SLO TTFT P50 ≤ 90 s lies beyond the axis" in cdf.caption
    [e2e] = [f for f in figures_for("5.10", d, slos) if f.key == "cdfs_e2e"]
    assert "marker slo" not in e2e.svg  # no SLO on E2E
