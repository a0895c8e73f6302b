"""SLO parsing, evaluation and failure messages (slo.py) against a hand-built fake RunMetrics."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.measure.slo import (
    METRICS,
    SLO,
    SLOError,
    SLOInconclusive,
    SLOUndersampledWarning,
    SLOViolation,
    SLOVerdict,
    assert_slo,
    evaluate,
    format_quantity,
    good_mask,
    parse_slo,
    parse_slo_list,
    required_samples,
    set_default_confidence,
)
from pytest_llmbench.measure.stats import Distribution, Estimate


@dataclass
class FakeRunMetrics:
    """Implements the RunMetrics protocol slo.py codes against, from hand-made figures."""

    estimates: dict[tuple[str, float], Estimate] = field(default_factory=dict)
    scalars: dict[str, Estimate] = field(default_factory=dict)
    distributions: dict[str, Distribution] = field(default_factory=dict)
    per_request: dict[str, np.ndarray] = field(default_factory=dict)

    def percentile(self, name: str, p: float) -> Estimate:
        return self.estimates[(name, p)]

    def scalar(self, name: str) -> Estimate:
        return self.scalars[name]

    def per_request_values(self, name: str) -> np.ndarray:
        return self.per_request[name]


def _dist(name: str, values: list[float]) -> Distribution:
    a = np.asarray(values)
    return Distribution(name=name, unit="s", n=a.size, mean=Estimate(float(a.mean()), a.size, "s"),
                        std=float(a.std()), min=float(a.min()), max=float(a.max()))


# ---------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, metric, stat, op, threshold",
    [
        ("ttft.p99 <= 500ms", "ttft", "p99", "<=", 0.5),
        ("tpot.p50 <= 40ms", "tpot", "p50", "<=", 0.04),
        ("itl.p99.9 <= 200ms", "itl", "p99.9", "<=", 0.2),
        ("success_rate >= 99%", "success_rate", None, ">=", 0.99),
        ("output_throughput >= 2000 tok/s", "output_throughput", None, ">=", 2000.0),
        ("goodput >= 10 req/s", "goodput", None, ">=", 10.0),
        ("fluidity.p1 >= 0.9", "fluidity", "p1", ">=", 0.9),
        ("e2e.mean < 2s", "e2e", "mean", "<", 2.0),
        ("ttft<=500ms", "ttft", None, "<=", 0.5),
        ("TTFT.P99 ≤ 0.5 s", "ttft", "p99", "<=", 0.5),
        ("itl.max < 750us", "itl", "max", "<", 750e-6),
        ("itl.p95 <= 300µs", "itl", "p95", "<=", 300e-6),
        ("ttft.median <= 1.5s", "ttft", "p50", "<=", 1.5),
        ("normalized_latency.p50 <= 20ms/tok", "normalized_latency", "p50", "<=", 0.02),
        ("request_throughput > 3.5", "request_throughput", None, ">", 3.5),
        ("error_rate < 0.5%", "error_rate", None, "<", 0.005),
        ("good_fraction >= 0.95", "good_fraction", None, ">=", 0.95),
        ("tokens_in_flight >= 100000 tokens", "tokens_in_flight", None, ">=", 100000.0),
        ("output_tps_per_request.p10 >= 20 tok/s", "output_tps_per_request", "p10", ">=", 20.0),
    ],
)
def test_parse_examples(text: str, metric: str, stat: str | None, op: str, threshold: float) -> None:
    slo = parse_slo(text)
    assert (slo.metric, slo.statistic, slo.operator) == (metric, stat, op)
    assert slo.threshold == pytest.approx(threshold, rel=1e-12)
    assert slo.text == text.strip()


def test_percentile_property_and_labels() -> None:
    assert parse_slo("itl.p99.9 <= 200ms").percentile == 99.9
    assert parse_slo("itl.p99.9 <= 200ms").label == "ITL P99.9"
    assert parse_slo("ttft.p99 <= 500ms").label == "TTFT P99"
    assert parse_slo("e2e.mean < 2s").label == "E2E mean"
    assert parse_slo("e2e.mean < 2s").percentile is None
    assert str(parse_slo("success_rate >= 99%")) == "Success rate >= 99%"
    assert str(parse_slo("ttft.p99 <= 0.5s")) == "TTFT P99 <= 500 ms"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("ttfx.p99 <= 5ms", "unknown metric 'ttfx'"),
        ("ttft.p99 <= 500", "give a unit"),
        ("output_throughput >= 5ms", "time unit 'ms' does not fit"),
        ("goodput >= 10 tok/s", "unit 'tok/s' does not fit goodput"),
        ("ttft.p99 <= 5 tok/s", "does not fit ttft, a time"),
        ("success_rate >= 99", "did you mean 99%?"),
        ("success_rate >= 120%", "out of range"),
        ("ttft.p99 >= 5ms", "looks reversed"),
        ("success_rate <= 99%", "looks reversed"),
        ("error_rate >= 1%", "looks reversed"),
        ("ttft.p100 <= 1s", "percentile p100 out of range"),
        ("ttft.p0 <= 1s", "out of range"),
        ("success_rate.p99 >= 0.9", "takes no statistic"),
        ("ttft.foo <= 1s", "unknown statistic 'foo'"),
        ("ttft == 1s", "cannot parse"),
        ("ttft <= fast", "cannot parse"),
        ("", "empty SLO"),
    ],
)
def test_parse_errors(text: str, fragment: str) -> None:
    with pytest.raises(SLOError) as exc:
        parse_slo(text)
    assert fragment in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_unknown_metric_lists_known_ones() -> None:
    with pytest.raises(SLOError) as exc:
        parse_slo("latency.p99 <= 1s")
    msg = str(exc.value)
    for name in METRICS:
        assert name in msg


@pytest.mark.parametrize("name", sorted(METRICS))
def test_direction_sanity_for_every_metric(name: str) -> None:
    info = METRICS[name]
    stat = ".p50" if info.kind == "distribution" else ""
    value = {"time": "10ms", "token_rate": "10 tok/s", "request_rate": "1 req/s", "fraction": "50%",
             "ratio": "0.5", "tokens": "100", "count": "8"}[info.unit]
    good_op, bad_op = (">=", "<=") if info.higher_is_better else ("<=", ">=")
    assert parse_slo(f"{name}{stat} {good_op} {value}").operator == good_op
    with pytest.raises(SLOError, match="looks reversed"):
        parse_slo(f"{name}{stat} {bad_op} {value}")
    assert parse_slo(f"{name}{stat} {bad_op} {value}", allow_reversed=True).operator == bad_op


def test_parse_list_names_source_and_splits() -> None:
    slos = parse_slo_list(["ttft.p99<=500ms; tpot.p50 <= 40ms", "# comment", "success_rate >= 99%\ne2e.mean < 2s"],
                          source="ini llm_slo")
    assert [s.metric for s in slos] == ["ttft", "tpot", "success_rate", "e2e"]
    assert parse_slo_list(None, source="x") == []
    with pytest.raises(SLOError, match=r"^--llm-slo: 'ttft\.p99 <= 500': ttft is a time"):
        parse_slo_list("ttft.p99 <= 500", source="--llm-slo")
    with pytest.raises(SLOError, match=r"^ini llm_slo: .*unknown metric"):
        parse_slo_list(["ttft.p99 <= 1s", "ttfb.p99 <= 1s"], source="ini llm_slo")


@settings(deadline=None, max_examples=200)
@given(x=st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
       p=st.sampled_from([1, 10, 50, 90, 95, 99, 99.9, 99.99]),
       unit=st.sampled_from([("ms", 1e-3), ("s", 1.0), ("us", 1e-6)]))
def test_parse_round_trip_thresholds(x: float, p: float, unit: tuple[str, float]) -> None:
    slo = parse_slo(f"e2e.p{p:g} <= {x!r}{unit[0]}")
    assert slo.threshold == pytest.approx(x * unit[1], rel=1e-12)
    assert slo.percentile == pytest.approx(p)
    # the printed threshold parses back to the same value within print precision
    back = parse_slo(f"e2e.p{p:g} <= {slo.threshold_text().replace(' ', '')}")
    assert back.threshold == pytest.approx(slo.threshold, rel=1e-3)


# ---------------------------------------------------------------------------------- formatting


def test_format_quantity_units() -> None:
    assert format_quantity(0.6123, "time") == "612.3 ms"
    assert format_quantity(2.5, "time") == "2.5 s"
    assert format_quantity(0.0005, "time") == "500 µs"
    assert format_quantity(2000.0, "token_rate") == "2000 tok/s"
    assert format_quantity(12.25, "request_rate") == "12.25 req/s"
    assert format_quantity(0.987, "fraction") == "98.7%"
    assert format_quantity(0.9, "ratio") == "0.9"
    assert format_quantity(float("nan"), "time") == "n/a"


# ---------------------------------------------------------------------------------- evaluation


def _run() -> FakeRunMetrics:
    """1000 requests: TTFT 200 ms, but the 40th, 80th, ... 1000th (25) at 700 ms; TPOT 35.1 ms."""
    ttft = np.full(1000, 0.2)
    ttft[39::40] = 0.7
    return FakeRunMetrics(
        estimates={
            ("ttft", 99.0): Estimate(0.6123, 1000, "s", 0.5801, 0.6407),
            ("ttft", 50.0): Estimate(0.2, 1000, "s", 0.19, 0.21),
            ("tpot", 50.0): Estimate(0.0351, 1000, "s", 0.0349, 0.0353),
            ("itl", 99.9): Estimate(0.150, 412, "s", None, None, undersampled=True),
            ("ttft", 99.9): Estimate(0.9, 412, "s", 0.7, 1.2, undersampled=True),
        },
        scalars={
            "success_rate": Estimate(0.987, 1000, "fraction", 0.979, 0.992),
            "output_throughput": Estimate(2500.0, 1000, "tok/s", 2400.0, 2600.0, method="rate over the window, "
                                          "batch means (10 sub-windows), t interval"),
        },
        distributions={"e2e": _dist("e2e", [2.0, 2.5, 3.0])},
        per_request={"ttft": ttft, "tpot": np.full(1000, 0.0351), "e2e": np.array([1.0, 2.0, 3.0, 4.0])},
    )


def test_failure_message_exact_text() -> None:
    """25 of 1000 beyond 500 ms: the exact lower bound on the share is above 1 %, so P99 > 500 ms (FAIL)."""
    from scipy.stats import beta

    r = evaluate("ttft.p99 <= 500ms", _run())
    assert r.verdict is SLOVerdict.FAIL and not r.passed and r.method == "binomial"
    lower = beta.ppf(0.05, 25, 976)  # Clopper-Pearson one-sided 95 % lower bound on 25/1000
    assert r.bound == pytest.approx(lower) and r.bound > 0.01 and r.limit == pytest.approx(0.01)
    assert (r.n, r.exceedances, r.needed_more, r.confidence) == (1000, 25.0, None, 0.95)
    assert r.message == ("TTFT P99 612.3 ms > 500 ms (n=1000, 95% CI 580.1–640.7 ms): FAIL at 95% confidence: "
                         "25 of 1000 requests above 500 ms (a failed request counts as beyond the threshold); "
                         f"share above 500 ms >= {float(f'{lower * 100:.3g}'):g}%, > 1% (exact binomial bound)")
    assert r.value is not None and r.value.value == 0.6123


def test_pass_message_and_other_kinds() -> None:
    run = _run()
    r = evaluate("tpot.p50 <= 40ms", run)  # none of 1000 above: share <= 1 - 0.05^(1/1000) < 50 %
    assert r.passed and r.bound == pytest.approx(1 - 0.05 ** (1 / 1000))
    assert r.message.startswith("TPOT P50 35.1 ms <= 40 ms (n=1000, 95% CI 34.9–35.3 ms): PASS at 95% confidence: "
                                "0 of 1000 requests above 40 ms")
    r = evaluate("e2e.mean < 2s", run)  # 4 requests, 2 batches of 2: means 1.5 and 3.5
    assert r.verdict is SLOVerdict.INCONCLUSIVE and r.method == "batch-means"
    assert r.message.startswith("E2E mean 2.5 s >= 2 s (n=4, 95% CI ")
    r = evaluate("e2e.max < 3.5s", run)
    assert r.passed and r.value.value == 3.0 and r.method == "point"
    assert evaluate("e2e.min < 1s", run).message == ("E2E min 2 s >= 1 s (n=3): FAIL (method point: the run's min "
                                                     "has no bound; judged on its value)")
    r = evaluate("success_rate >= 99%", run)  # 13 of 1000 failed: the share's bounds straddle 1 %
    assert r.verdict is SLOVerdict.INCONCLUSIVE and (r.n, r.exceedances) == (1000, 13.0)
    assert r.message.startswith("Success rate 98.7% < 99% (n=1000, 95% CI 97.9–99.2%): INCONCLUSIVE at 95% "
                                "confidence: Success rate <= ")
    assert "need ~" in r.message and r.needed_more is not None and r.needed_more > 0
    r = evaluate("output_throughput >= 2000 tok/s", run)  # batch means over 10 windows: far above
    assert r.passed and r.method == "batch-means" and 2000 < r.bound < 2500
    assert r.message.startswith("Output throughput 2500 tok/s >= 2000 tok/s (n=1000, 95% CI 2400–2600 tok/s): "
                                "PASS at 95% confidence: Output throughput >= ")


def test_window_rate_bound_is_the_batch_means_interval_one_sided() -> None:
    """The two-sided 95 % interval 2400–2600 over 10 sub-windows, read back as one-sided 95 %."""
    from scipy.stats import t

    r = evaluate("output_throughput >= 2000 tok/s", _run())
    se = 100 / t.ppf(0.975, 9)
    assert r.bound == pytest.approx(2500 - t.ppf(0.95, 9) * se)
    assert evaluate("output_throughput >= 2450 tok/s", _run()).verdict is SLOVerdict.INCONCLUSIVE
    assert evaluate("output_throughput >= 2700 tok/s", _run()).verdict is SLOVerdict.FAIL


def test_undersampled_message_warning_and_strict() -> None:
    """A PASS on fewer samples than §5.1.4.3 asks warns; strict sampling turns it into FAIL."""
    run = _run()
    run.per_request["ttft"] = np.full(412, 0.1)
    run.estimates[("ttft", 99.0)] = Estimate(0.1, 412, "s", 0.1, 0.1, undersampled=True)
    r = evaluate("ttft.p99.9 <= 1s", run)
    assert r.verdict is SLOVerdict.INCONCLUSIVE  # 0 of 412: P99.9 needs >= 2995 requests to PASS at 95 %
    assert r.needed_more == 2995 - 412 and "need ~2583 more requests at the observed share (0%)" in r.message
    r = evaluate("ttft.p99 <= 1s", run)
    assert r.passed and r.undersampled  # 0 of 412 >= 299 shows it, but §5.1.4.3 asks for 1000
    assert r.message.endswith("; under-sampled: P99 needs >= 1000 samples, have 412")
    with pytest.warns(SLOUndersampledWarning, match="under-sampled"):
        assert_slo(run, "ttft.p99 <= 1s")
    with pytest.raises(SLOViolation, match="strict sampling"):
        assert_slo(run, "ttft.p99 <= 1s", strict=True)
    assert evaluate("ttft.p99 <= 1s", run, strict=True).verdict is SLOVerdict.FAIL


def test_assert_slo_lists_every_failure_and_inconclusive() -> None:
    run = _run()
    with pytest.raises(SLOViolation) as exc:
        assert_slo(run, "ttft.p99 <= 500ms", "tpot.p50 <= 40ms", "success_rate >= 99%", "ttft.p99.9 <= 1s")
    lines = str(exc.value).splitlines()
    assert lines[0] == "1 of 4 SLOs failed, 2 inconclusive:"
    assert lines[1].startswith("  TTFT P99 612.3 ms > 500 ms (n=1000, 95% CI 580.1–640.7 ms): FAIL")
    assert lines[2].startswith("  Success rate 98.7% < 99% (n=1000, 95% CI 97.9–99.2%): INCONCLUSIVE")
    assert "TPOT" not in str(exc.value)
    assert len(exc.value.results) == 4 and isinstance(exc.value, AssertionError)
    assert not isinstance(exc.value, SLOInconclusive)
    with pytest.raises(SLOInconclusive) as inc:  # no FAIL, one INCONCLUSIVE: its own exception
        assert_slo(run, "tpot.p50 <= 40ms", "success_rate >= 99%")
    assert isinstance(inc.value, SLOViolation) and str(inc.value).startswith("Success rate 98.7% < 99%")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = assert_slo(run, "tpot.p50 <= 40ms", parse_slo("output_throughput >= 2000 tok/s"))
    assert all(r.passed for r in results)
    with pytest.raises(SLOError):
        assert_slo(run)


def test_confidence_per_slo_per_call_and_default() -> None:
    run = _run()
    run.per_request["ttft"] = np.full(400, 0.1)  # 0 of 400 beyond: PASS at 95 % (>= 299), not at 99 % (>= 459)
    assert evaluate("ttft.p99 <= 1s", run).passed
    r = evaluate("ttft.p99 <= 1s confidence=99%", run)
    assert r.verdict is SLOVerdict.INCONCLUSIVE and r.confidence == 0.99 and r.needed_more == 59
    assert evaluate("ttft.p99 <= 1s", run, confidence=0.99).confidence == 0.99
    assert evaluate("ttft.p99 <= 1s confidence=0.95", run, confidence=0.99).passed  # the SLO's own wins
    previous = set_default_confidence(0.99)
    try:
        assert evaluate("ttft.p99 <= 1s", run).verdict is SLOVerdict.INCONCLUSIVE
    finally:
        set_default_confidence(previous)
    slo = parse_slo("ttft.p99 <= 500ms confidence=99%")
    assert (slo.threshold, slo.confidence, slo.text) == (0.5, 0.99, "ttft.p99 <= 500ms confidence=99%")
    assert slo.to_json()["confidence"] == 0.99 and "confidence" not in parse_slo("ttft.p99 <= 500ms").to_json()
    assert parse_slo_list("ttft.p99 <= 1s confidence=0.99, e2e.p90 <= 2s", source="x")[0].confidence == 0.99
    assert parse_slo("success_rate >= 99% confidence=99.9%").confidence == pytest.approx(0.999)
    for bad in ("ttft.p99 <= 1s confidence=40%", "ttft.p99 <= 1s confidence=100%", "ttft.p99 <= 1s confidence=2"):
        with pytest.raises(SLOError, match="confidence"):
            parse_slo(bad)


def test_missing_metric_and_undefined_value_fail() -> None:
    run = _run()
    r = evaluate("queue_wait.p99 <= 1s", run)
    assert not r.passed and "not measured in this run" in r.message
    run.estimates[("ttft", 95.0)] = Estimate(float("nan"), 0, "s")
    r = evaluate("ttft.p95 <= 1s", run)
    assert not r.passed and "undefined (n=0)" in r.message


def test_failed_requests_count_beyond_a_latency_threshold() -> None:
    """A server that times out its slow requests must not pass: a failed request has no TTFT, and counts."""
    run = _run()
    ttft = np.full(600, 0.1)
    failed = np.zeros(600, dtype=bool)
    failed[::100] = True  # 6 of 600 failed (1 %): the successful ones are all fast
    ttft[failed] = np.nan
    run.per_request.update(ttft=ttft, failed=failed)
    r = evaluate("ttft.p99 <= 1s", run)
    assert (r.n, r.exceedances) == (600, 6.0) and r.verdict is SLOVerdict.INCONCLUSIVE
    assert "6 of 600 requests above 1 s, 6 of them failed (a failed request counts as beyond the threshold)" in r.message
    run.per_request["failed"] = np.zeros(600, dtype=bool)  # the same NaNs, not failed (e.g. cancelled): not judged
    r = evaluate("ttft.p99 <= 1s", run)
    assert (r.n, r.exceedances, r.verdict) == (594, 0.0, SLOVerdict.PASS)
    run.per_request["failed"] = failed
    assert evaluate("ttft.max <= 1s", run).verdict is SLOVerdict.FAIL  # the maximum too


def test_bursts_widen_the_bound_by_their_design_effect() -> None:
    """The same 6 exceedances of 1000: spread out they are the binomial's; in 2 bursts of 3 the lag-1
    autocorrelation makes the count vary more, and the bound is taken on fewer effective requests."""
    run = _run()
    spread = np.full(1000, 0.1)
    spread[50::160] = 2.0  # 6 isolated
    bursty = np.full(1000, 0.1)
    bursty[[100, 101, 102, 700, 701, 702]] = 2.0
    run.per_request["ttft"] = spread
    a = evaluate("ttft.p99 <= 1s", run)
    run.per_request["ttft"] = bursty
    b = evaluate("ttft.p99 <= 1s", run)
    assert a.design_effect == 1.0 and a.verdict is SLOVerdict.INCONCLUSIVE
    assert b.design_effect > 3 and b.bound > a.bound and "design effect" in b.message
    run.per_request["ttft"] = spread
    c = evaluate("ttft.p99 <= 1s", run, burst_length=2)  # a declared allowance: 2·2 - 1 = 3
    assert c.design_effect == 3.0 and "declared burst allowance" in c.message


# ---------------------------------------------------------------------------------- per-request


def test_ok_with_nan() -> None:
    slo = parse_slo("ttft <= 500ms")
    assert slo.per_request
    assert slo.ok(np.array([0.1, np.nan, 0.6, 0.5])).tolist() == [True, False, False, True]
    assert parse_slo("ttft < 500ms").ok([0.5]).tolist() == [False]
    flu = parse_slo("fluidity >= 0.9")
    assert flu.ok([0.95, np.nan, 0.89]).tolist() == [True, False, False]
    assert slo.ok(np.array([])).dtype == bool
    with pytest.raises(SLOError, match="per-request"):
        parse_slo("ttft.p99 <= 500ms").ok([0.1])


@settings(deadline=None, max_examples=200)
@given(values=st.lists(st.one_of(st.floats(0, 10, allow_nan=False), st.just(float("nan"))), max_size=50),
       thr=st.floats(0.001, 10), op=st.sampled_from(["<=", "<"]))
def test_ok_matches_scalar_compare(values: list[float], thr: float, op: str) -> None:
    slo = parse_slo(f"e2e {op} {thr!r}s")
    mask = slo.ok(values)
    assert mask.tolist() == [slo.compare(v) for v in values]
    assert mask.tolist() == [(not math.isnan(v)) and (v <= thr if op == "<=" else v < thr) for v in values]


def test_per_request_evaluation_and_goodput_mask() -> None:
    run = _run()
    run.per_request["ttft"] = np.array([0.1, np.nan, 0.6, 0.3])
    r = evaluate("ttft <= 500ms", run)
    assert not r.passed and r.method == "point" and (r.n, r.exceedances) == (4, 2.0)
    assert r.message == ("TTFT <= 500 ms per request: 2 of 4 requests violate it (50% met, 1 undefined): FAIL "
                         "(method point: every request of the run, judged on the requests seen)")
    assert r.value is not None and r.value.value == 0.5 and r.value.n == 4
    assert evaluate("e2e <= 4s", run).passed
    mask = good_mask(["ttft <= 500ms", "e2e <= 2.5s"], run.per_request_values)
    assert mask.tolist() == [True, False, False, False]
    mask = good_mask([parse_slo("e2e <= 3s")], run.per_request)
    assert mask.tolist() == [True, True, True, False]
    with pytest.raises(SLOError):
        good_mask([], run.per_request)


def test_required_samples_rule() -> None:
    assert required_samples(99.0) == 1000 and required_samples(99.9) == 10_000
    assert required_samples(95.0) == 20 and required_samples(50.0) == 2


def test_slo_type_validates_and_serialises() -> None:
    with pytest.raises(SLOError):
        SLO("nope", None, "<=", 1.0)
    d = parse_slo("ttft.p99 <= 500ms").to_json()
    assert d == {"metric": "ttft", "statistic": "p99", "operator": "<=", "threshold": 0.5,
                 "text": "ttft.p99 <= 500ms"}


def test_against_real_run_metrics() -> None:
    """The Protocol matches metrics.RunMetrics: hand-computed TTFTs 10..59 ms, one per request."""
    metrics = pytest.importorskip("pytest_llmbench.measure.summary")
    from factories import make_record

    # sent every 20 ms, TTFT 10 + i ms in a shuffled order, then 3 more tokens 5 ms apart
    order = np.random.default_rng(0).permutation(50)
    records = [make_record(i, sent=20 * i, ttft=10 + int(order[i]), itl=5, text=["a", "b", "c", "d"], max_tokens=4,
                           input_tokens_client=100, output_tokens_client=4) for i in range(50)]
    run = metrics.summarize(records, slos=[parse_slo("ttft <= 40ms")])
    r = evaluate("ttft.p50 <= 50ms", run)  # 9 of 50 above 50 ms
    assert r.passed and r.value.value == pytest.approx(0.0345)  # median of 10..59 ms
    assert (r.n, r.exceedances) == (50, 9.0) and r.design_effect == pytest.approx(1.0, abs=0.3)
    assert evaluate("ttft.max < 60ms", run).message.startswith("TTFT max 59 ms < 60 ms (n=50): PASS (method point")
    r = evaluate("ttft.p99 <= 50ms", run)
    assert r.verdict is SLOVerdict.FAIL and r.message.endswith("under-sampled: P99 needs >= 1000 samples, have 50")
    r = evaluate("ttft <= 40ms", run)  # 41..59 ms violate
    assert r.message.startswith("TTFT <= 40 ms per request: 19 of 50 requests violate it (62% met)")
    assert evaluate("good_fraction >= 45%", run).passed  # 31 of 50 good: lower bound 49.4%
    assert evaluate("good_fraction >= 80%", run).verdict is SLOVerdict.FAIL
    assert evaluate("tpot.p50 <= 5ms", run).passed  # 15 ms over 3 gaps
    assert evaluate("itl.p50 <= 5ms", run).passed  # every gap is 5 ms: a pooled percentile, bounded by request
    # the same TTFTs rising with time: the exceedances are one burst at the end, and their design effect
    # (lag-1 autocorrelation in send order) leaves the share undecided
    rising = [make_record(i, sent=20 * i, ttft=10 + i, itl=5, text=["a", "b", "c", "d"], max_tokens=4,
                          input_tokens_client=100, output_tokens_client=4) for i in range(50)]
    r = evaluate("ttft.p50 <= 50ms", metrics.summarize(rising))
    assert r.verdict is SLOVerdict.INCONCLUSIVE and r.design_effect > 10 and "design effect" in r.message


def test_point_verdict_for_search_criteria() -> None:
    """point=True: the value against the threshold, two-way (a search level's criterion, §5.2.2.3)."""
    run = _run()
    run.per_request["ttft"] = np.full(50, 0.1)
    assert evaluate("ttft.p50 <= 1s", run).passed  # 0 of 50: 50 % shown
    assert evaluate("ttft.p99 <= 1s", run).verdict is SLOVerdict.INCONCLUSIVE  # 0 of 50: 1 % not shown
    r = evaluate("ttft.p99 <= 1s", run, point=True)  # the estimate (612.3 ms) against 1 s
    assert r.passed and r.method == "point" and "method point: a point verdict was asked for" in r.message


def test_search_criteria_are_judged_on_their_value() -> None:
    """procedures/helpers.criteria_failures judges each criterion two-way on the level's estimate: 50 requests
    cannot show a P99 at 95 % (INCONCLUSIVE), yet a level whose P99 is well inside its criterion meets it."""
    metrics = pytest.importorskip("pytest_llmbench.measure.summary")
    from factories import make_record

    from pytest_llmbench.procedures.helpers import criteria_failures

    records = [make_record(i, sent=20 * i, ttft=10 + i, itl=5, text=["a", "b", "c", "d"], max_tokens=4,
                           input_tokens_client=100, output_tokens_client=4) for i in range(50)]  # TTFT 10..59 ms
    run = metrics.summarize(records)
    assert evaluate("ttft.p99 <= 1s", run).verdict is SLOVerdict.INCONCLUSIVE
    assert criteria_failures(["ttft.p99 <= 1s", "success_rate >= 99%"], run) == []
    (reason,) = criteria_failures(["ttft.p99 <= 1s", "ttft.p50 <= 20ms"], run)
    assert reason.startswith("criterion TTFT P50 <= 20 ms: TTFT P50 34.5 ms > 20 ms") and "method point" in reason
