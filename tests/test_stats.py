"""stats.py: percentiles and their CIs, sample-size rules, fairness, curves, scaling, shape."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from windows import batch_means_rate

from pytest_llmbench.measure import stats as S
from pytest_llmbench.measure.stats import Distribution, Estimate

# ---------------------------------------------------------------------------------- percentiles


def test_percentile_linear_rule_and_order_statistic_ci() -> None:
    x = np.arange(1.0, 11.0)  # 1..10, shuffled input must not matter
    e = S.percentile_estimate(x[::-1], 50)
    # linear rule: h = 9 x 0.5 = 4.5 -> 5 + 0.5 x (6 - 5) = 5.5
    assert e.value == 5.5
    # Binomial(10, .5): ppf(.025) = 2 -> rank 2; ppf(.975) = 8 -> rank 9: CI [x_(2), x_(9)] = [2, 9]
    # (coverage 1 - 2 P(B <= 1) = 1 - 22/1024 = 0.9785 >= 0.95)
    assert (e.ci_low, e.ci_high) == (2.0, 9.0)
    assert not e.undersampled and "order-statistic" in e.method
    # P90 of 1..10: h = 8.1 -> 9.1; upper rank beyond n -> None (cannot be bounded)
    e90 = S.percentile_estimate(x, 90)
    assert e90.value == pytest.approx(9.1) and e90.ci_high is None
    assert np.isclose(S.percentile_estimate(x, 37).value, np.percentile(x, 37, method="linear"))


def test_sample_size_rules() -> None:
    assert S.required_samples(99) == 1000 and S.required_samples(99.9) == 10_000
    assert S.required_samples(50) == 2 and S.required_samples(95) == 20
    assert S.required_samples(99.5) == 1000  # never below the P99 rule
    rng = np.random.default_rng(0)
    assert S.percentile_estimate(rng.random(999), 99).undersampled
    assert not S.percentile_estimate(rng.random(1000), 99).undersampled
    assert S.percentile_estimate(rng.random(9999), 99.9).undersampled
    assert not S.percentile_estimate(rng.random(10_000), 99.9).undersampled
    with pytest.raises(ValueError, match="percentile"):
        S.required_samples(101)


def test_mean_t_interval_by_hand() -> None:
    e = S.mean_estimate([1, 2, 3, 4, 5])
    # s = sqrt(2.5) = 1.5811; t(0.975, 4) = 2.7764 -> half = 2.7764 x 1.5811 / sqrt(5) = 1.9632
    assert e.value == 3.0
    assert e.ci_low == pytest.approx(3 - 1.9632, abs=1e-4) and e.ci_high == pytest.approx(3 + 1.9632, abs=1e-4)
    assert S.mean_estimate([4.0]).ci_low is None


def test_wilson_interval_by_hand() -> None:
    e = S.proportion_estimate(5, 10)
    # Wilson 95%: centre 0.5, half = 1.96 sqrt(.025 + .0096)/1.384 = 0.2634
    assert e.ci_low == pytest.approx(0.2366, abs=1e-4) and e.ci_high == pytest.approx(0.7634, abs=1e-4)
    assert math.isnan(S.proportion_estimate(0, 0).value)
    with pytest.raises(ValueError):
        S.proportion_estimate(3, 2)


def test_batch_means_rate() -> None:
    # 100 events evenly in [0, 10) s -> 10/s, every sub-window equal -> zero-width CI
    e = batch_means_rate(np.arange(100) / 10, None, 0.0, 10.0, unit="req/s")
    assert e.value == pytest.approx(10.0) and e.ci_low == pytest.approx(10.0) and e.n == 100
    w = batch_means_rate([1.0, 2.0, 11.0], [2.0, 3.0, 100.0], 0.0, 10.0, unit="tok/s")
    assert w.value == pytest.approx(0.5)  # the event at 11 s is outside the window


def test_distribution_fields_and_any_percentile() -> None:
    d = S.distribution("ttft", [0.3, 0.1, math.nan, 0.2], "s")
    assert isinstance(d, Distribution) and d.n == 3 and d.dropped == 1
    assert (d.min, d.max) == (0.1, 0.3) and d.std == pytest.approx(0.1)
    assert set(d.percentiles) == {50.0, 90.0, 95.0, 99.0, 99.9}
    assert d.percentile(25).value == pytest.approx(0.15)
    assert d.percentiles[99.0].undersampled
    assert "samples" not in d.to_json() and d.to_json()["percentiles"]["p50"]["value"] == pytest.approx(0.2)
    empty = S.distribution("x", [], "s")
    assert empty.n == 0 and math.isnan(empty.mean.value) and empty.percentiles[50.0].undersampled
    assert empty.to_json()["min"] is None


@settings(deadline=None, max_examples=60)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=200),
       st.lists(st.floats(0, 100), min_size=2, max_size=8))
def test_percentiles_monotone_in_p(xs: list[float], ps: list[float]) -> None:
    ps = sorted(ps)
    vals = [S.percentile_estimate(xs, p).value for p in ps]
    assert all(a <= b + 1e-9 * max(1.0, abs(b)) for a, b in zip(vals, vals[1:]))
    d = S.distribution("x", xs, "s", percentiles=ps)
    for p, v in zip(ps, vals):
        est = d.percentiles[p]
        assert est.value == pytest.approx(v)
        assert min(xs) - 1e-9 <= est.value <= max(xs) + 1e-9
        if est.ci_low is not None:
            assert est.ci_low <= est.value + 1e-9 * max(1.0, abs(est.value))
        if est.ci_high is not None:
            assert est.ci_high >= est.value - 1e-9 * max(1.0, abs(est.value))


def test_order_statistic_ci_covers_true_quantile() -> None:
    # empirical coverage of the P90 CI on Exp(1) samples: true P90 = ln 10
    rng = np.random.default_rng(1)
    truth = math.log(10)
    hits = 0
    for _ in range(400):
        e = S.percentile_estimate(rng.exponential(size=200), 90)
        hits += e.ci_low <= truth <= e.ci_high
    assert hits / 400 >= 0.92  # nominal >= 0.95; allow Monte Carlo noise


# ------------------------------------------------------------------------------------- fairness


def test_jain_by_hand() -> None:
    assert S.jain_index([1, 1, 1]) == pytest.approx(1.0)
    assert S.jain_index([1, 0, 0]) == pytest.approx(1 / 3)
    assert S.jain_index([1, 2, 3]) == pytest.approx(36 / 42)  # 6² / (3 x 14)
    with pytest.raises(ValueError, match="non-negative"):
        S.jain_index([-1, 1])


@settings(deadline=None, max_examples=80)
@given(st.lists(st.floats(0, 1e9, allow_nan=False), min_size=1, max_size=100))
def test_jain_bounds(xs: list[float]) -> None:
    j = S.jain_index(xs)
    n = len(xs)
    assert 1 / n - 1e-9 <= j <= 1 + 1e-9


@settings(deadline=None, max_examples=40)
@given(st.floats(1e-6, 1e6), st.integers(1, 50))
def test_jain_equal_values_is_one(v: float, n: int) -> None:
    assert S.jain_index([v] * n) == pytest.approx(1.0)


def test_slowdown_inflation_starvation() -> None:
    x = S.slowdown([0.2, 0.4, 2.0], ["short", "short", "long"], {"short": 0.2, "long": 1.0})
    assert x.tolist() == pytest.approx([1.0, 2.0, 2.0])
    infl = S.latency_inflation({"short": [0.2, 0.4, 0.6]}, {"short": [0.1, 0.2, 0.3]}, p=50)
    assert infl["short"] == pytest.approx(2.0)
    with pytest.raises(KeyError, match="isolated"):
        S.latency_inflation({"long": [1.0]}, {"short": [1.0]})
    starv = S.starvation_rate([1, 1, 1, 1, 10, 2, 2], ["a"] * 5 + ["b"] * 2)
    # class a: median 1, one wait (10) > 5 -> 1/5; class b: none
    assert starv["a"].value == pytest.approx(0.2) and starv["b"].value == 0.0


# --------------------------------------------------------------------------------------- curves


def test_knee_saturation_optimal() -> None:
    loads = [1, 2, 3, 4, 5]
    p99 = [0.10, 0.15, 0.25, 0.5, 0.9]
    assert S.knee_point(loads, p99) == 2  # first P99 > 2 x 0.10
    assert S.knee_point(loads, [0.1] * 5) is None
    assert S.saturation_point(loads, [10, 20, 25, 24, 30]) == 3
    assert S.saturation_point(loads, [10, 20, 30, 40, 50]) is None
    assert S.optimal_operating_point([10, 20, 25, 24, 30], [True, True, True, True, False]) == 2
    assert S.optimal_operating_point([1, 2], [False, False]) is None
    # unsorted loads are handled in ascending order
    assert S.saturation_point([3, 1, 2], [25, 10, 20]) is None
    assert S.knee_point([2, 1], [Estimate(0.5, 1), Estimate(0.1, 1)]) == 0


def test_saturation_rules() -> None:
    t = np.arange(20.0)
    assert S.queue_growing(t, 3 * t + 1)
    assert not S.queue_growing(t, np.full(20, 4.0))
    assert not S.queue_growing(t, np.random.default_rng(0).normal(5, 1, 20))
    assert S.completion_rate_saturated(8.9, 10.0) and not S.completion_rate_saturated(9.0, 10.0)
    assert S.tail_blowup(1.01, 0.1) and not S.tail_blowup(1.0, 0.1)


# -------------------------------------------------------------------------------------- scaling


def test_scaling_fit_power_and_linear() -> None:
    L = np.array([1000, 2000, 4000, 8000, 16000] * 3, dtype=float)
    fit = S.scaling_fit(L, 1e-8 * L ** 2)
    assert fit.exponent == pytest.approx(2.0) and fit.r2_loglog == pytest.approx(1.0)
    assert fit.better == "power"
    assert fit.time_per_input_token[0] == pytest.approx(1e-8 * 1000)
    lin = S.scaling_fit(L, 0.05 + 1e-4 * L)
    assert lin.better == "linear" and lin.linear_slope == pytest.approx(1e-4)
    assert lin.exponent < 1.0
    with pytest.raises(ValueError, match="two distinct"):
        S.scaling_fit([100, 100], [1.0, 2.0])


# ---------------------------------------------------------------------------------------- shape


def test_modality_and_tail_on_known_distributions() -> None:
    rng = np.random.default_rng(2)
    assert S.modality(rng.normal(0.02, 0.002, 5000)).verdict == "unimodal"
    two = np.concatenate((rng.normal(0.02, 0.002, 5000), rng.normal(0.06, 0.002, 5000)))
    assert S.modality(two).verdict == "multimodal"
    assert S.modality([1.0, 2.0]).verdict == "undetermined"
    assert S.tail_shape(rng.exponential(0.02, 20000)).verdict == "exponential"
    heavy = S.tail_shape(rng.pareto(1.5, 20000) + 1)
    assert heavy.verdict == "heavy-tailed" and heavy.xi == pytest.approx(1 / 1.5, abs=0.15)
    assert S.tail_shape(rng.uniform(0, 1, 20000)).verdict == "light"


# ----------------------------------------------------------------------------------------------
# §5.3.4 derived points with a noise tolerance; censored percentiles (§5.3.3 all requests)
# ----------------------------------------------------------------------------------------------


def test_knee_does_not_fire_within_the_noise() -> None:
    loads, p99 = [1, 2, 3], [0.010, 0.025, 0.100]
    lo, hi = [0.008, 0.012, 0.050], [0.015, 0.060, 0.200]
    assert S.knee_point(loads, p99) == 1  # the literal rule: 25 ms > 2 x 10 ms
    rule = S.knee_point_ci(loads, p99, lo, hi)
    # level 1's interval starts at 12 ms, below 2 x 15 ms: within the noise; level 2 starts at 50 ms > 30 ms
    assert (rule.index, rule.literal, rule.reference) == (2, 1, 0)
    assert rule.within_noise and "12.0 ms" in rule.reason and "15.0 ms" in rule.reason
    # an unbounded upper end at the minimum (too few samples) never separates the levels
    unbounded = S.knee_point_ci(loads, p99, lo, [None, 0.06, 0.2])
    assert unbounded.index is None and unbounded.literal == 1 and "unbounded" in unbounded.reason
    # clear separation: both rules agree, nothing within the noise
    clear = S.knee_point_ci(loads, p99, [0.009, 0.021, 0.09], [0.0101, 0.03, 0.11])
    assert clear.index == clear.literal == 1 and not clear.within_noise
    # a censored P99 (inf) with a finite lower end fires when that end is above 2x the minimum's upper end
    assert S.knee_point_ci(loads, [0.010, 0.012, math.inf], lo, [0.015, 0.02, None]).index == 2


def test_saturation_does_not_fire_within_the_noise() -> None:
    loads = [1, 2, 3, 4]
    tput = [100.0, 200.0, 190.0, 150.0]
    lo, hi = [90.0, 180.0, 170.0, 140.0], [110.0, 220.0, 210.0, 160.0]
    assert S.saturation_point(loads, tput) == 2
    rule = S.saturation_point_ci(loads, tput, lo, hi)
    assert (rule.index, rule.literal, rule.reference) == (3, 2, 1) and rule.within_noise
    # a decline spread over levels, each step within the noise, fires against the earlier peak
    slow = S.saturation_point_ci(loads, [200.0, 190.0, 180.0, 170.0], [188.0, 178.0, 168.0, 158.0],
                                 [212.0, 202.0, 192.0, 182.0])
    assert (slow.index, slow.literal, slow.reference) == (3, 1, 0)
    # no interval: never significant
    assert S.saturation_point_ci(loads, tput, [None] * 4, [None] * 4).index is None


def test_censored_percentile_bounds() -> None:
    x = np.linspace(0.01, 1.0, 200)
    plain = S.percentile_estimate(x, 95)
    c = S.censored_percentile(x, [], 95)  # no censoring: the ordinary estimate, exactly
    assert (c.value, c.lower, c.ci_low, c.ci_high) == (plain.value, plain.value, plain.ci_low, plain.ci_high)
    # 20 requests cancelled at 0.5 s: P50 of 220 is still among completed ones, but shifts up (they rank last)
    c50 = S.censored_percentile(x, [0.5] * 20, 50)
    assert c50.bounded and c50.value > S.percentile_estimate(x, 50).value
    assert c50.lower <= c50.value
    # P95's rank (208.95 of 220) falls among the censored: unbounded above; below, the percentile with each
    # censored sample at its elapsed 0.5 s
    c95 = S.censored_percentile(x, [0.5] * 20, 95)
    assert not c95.bounded and c95.censored == 20 and c95.n == 220
    assert c95.lower == pytest.approx(float(np.percentile(np.concatenate((x, [0.5] * 20)), 95)), rel=1e-12)
    assert c95.to_json()["value"] is None and c95.ci_high is None
