"""Report building blocks: SVG charts, plot-data conventions, number formatting."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.metrics import summarize
from pytest_llmbench.records import RequestRecord
from pytest_llmbench.report.figures import figures_for
from pytest_llmbench.report.fmt import fmt_duration, fmt_est, fmt_num, fmt_time, fmt_value, md_cell
from pytest_llmbench.plotdata import CDF_POINTS, normalise, samples_summary
from pytest_llmbench.report.svg import Chart, Scale, grouped_bars, log_ticks, nice_ticks
from pytest_llmbench.stats import scaling_fit

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
    recs = []
    for i in range(6):
        r = RequestRecord(index=i, workload="w", spec_input_tokens=10, max_tokens=3)
        r.sent_ns = i * 10_000_000
        r.chunk_ns = [r.sent_ns + (50 + i) * 1_000_000 + k * 5_000_000 for k in range(3)]
        r.chunk_text, r.chunk_tokens, r.chunk_reasoning = ["a", "b", "c"], [1, 1, 1], [""] * 3
        r.first_chunk_ns = r.first_token_ns = r.chunk_ns[0]
        r.end_ns, r.status = r.chunk_ns[-1], 200
        recs.append(r)
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
