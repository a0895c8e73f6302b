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
    SLOUndersampledWarning,
    SLOViolation,
    assert_slo,
    evaluate,
    format_quantity,
    good_mask,
    parse_slo,
    parse_slo_list,
    required_samples,
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
            "output_throughput": Estimate(2500.0, 1000, "tok/s"),
        },
        distributions={"e2e": _dist("e2e", [2.0, 2.5, 3.0])},
        per_request={"ttft": np.array([0.1, np.nan, 0.6, 0.3]), "e2e": np.array([1.0, 2.0, 3.0, 4.0])},
    )


def test_failure_message_exact_text() -> None:
    r = evaluate("ttft.p99 <= 500ms", _run())
    assert not r.passed
    assert r.message == "TTFT P99 612.3 ms > 500 ms (n=1000, 95% CI 580.1–640.7 ms)"
    assert r.value is not None and r.value.value == 0.6123


def test_pass_message_and_other_units() -> None:
    run = _run()
    assert evaluate("tpot.p50 <= 40ms", run).message == "TPOT P50 35.1 ms <= 40 ms (n=1000, 95% CI 34.9–35.3 ms)"
    r = evaluate("e2e.mean < 2s", run)
    assert not r.passed and r.message == "E2E mean 2.5 s >= 2 s (n=3)"
    r = evaluate("e2e.max < 3.5s", run)
    assert r.passed and r.value.value == 3.0
    assert evaluate("e2e.min < 1s", run).message == "E2E min 2 s >= 1 s (n=3)"
    r = evaluate("success_rate >= 99%", run)
    assert r.message == "Success rate 98.7% < 99% (n=1000, 95% CI 97.9–99.2%)"
    assert evaluate("output_throughput >= 2000 tok/s", run).message == "Output throughput 2500 tok/s >= 2000 tok/s (n=1000)"


def test_undersampled_message_warning_and_strict() -> None:
    run = _run()
    r = evaluate("itl.p99.9 <= 200ms", run)
    assert r.passed and r.undersampled
    assert r.message == ("ITL P99.9 150 ms <= 200 ms (n=412); under-sampled: P99.9 needs >= 10000 samples, have 412")
    with pytest.warns(SLOUndersampledWarning, match="under-sampled"):
        assert_slo(run, "itl.p99.9 <= 200ms")
    with pytest.raises(SLOViolation, match="strict sampling"):
        assert_slo(run, "itl.p99.9 <= 200ms", strict=True)
    assert not evaluate("itl.p99.9 <= 200ms", run, strict=True).passed


def test_assert_slo_lists_every_failure() -> None:
    run = _run()
    with pytest.raises(SLOViolation) as exc:
        assert_slo(run, "ttft.p99 <= 500ms", "tpot.p50 <= 40ms", "success_rate >= 99%", "ttft.p99.9 <= 1s")
    msg = str(exc.value)
    assert msg.splitlines()[0] == "2 of 4 SLOs failed:"
    assert "  TTFT P99 612.3 ms > 500 ms (n=1000, 95% CI 580.1–640.7 ms)" in msg.splitlines()
    assert "  Success rate 98.7% < 99% (n=1000, 95% CI 97.9–99.2%)" in msg.splitlines()
    assert "TPOT" not in msg
    assert len(exc.value.results) == 4 and isinstance(exc.value, AssertionError)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = assert_slo(run, "tpot.p50 <= 40ms", parse_slo("output_throughput >= 2000 tok/s"))
    assert all(r.passed for r in results)
    with pytest.raises(SLOError):
        assert_slo(run)


def test_missing_metric_and_undefined_value_fail() -> None:
    run = _run()
    r = evaluate("queue_wait.p99 <= 1s", run)
    assert not r.passed and "not measured in this run" in r.message
    run.estimates[("ttft", 95.0)] = Estimate(float("nan"), 0, "s")
    r = evaluate("ttft.p95 <= 1s", run)
    assert not r.passed and "undefined (n=0)" in r.message


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
    r = evaluate("ttft <= 500ms", run)
    assert not r.passed
    assert r.message == "TTFT <= 500 ms per request: 2 of 4 requests violate it (50% met, 1 undefined)"
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

    # sent every 20 ms, TTFT 10 + i ms, then 3 more tokens 5 ms apart
    records = [make_record(i, sent=20 * i, ttft=10 + i, itl=5, text=["a", "b", "c", "d"], max_tokens=4,
                           input_tokens_client=100, output_tokens_client=4) for i in range(50)]
    run = metrics.summarize(records, slos=[parse_slo("ttft <= 40ms")])
    r = evaluate("ttft.p50 <= 40ms", run)
    assert r.passed and r.value.value == pytest.approx(0.0345)  # median of 10..59 ms
    assert evaluate("ttft.max < 60ms", run).message == "TTFT max 59 ms < 60 ms (n=50)"
    r = evaluate("ttft.p99 <= 50ms", run)
    assert not r.passed and r.message.endswith("under-sampled: P99 needs >= 1000 samples, have 50")
    r = evaluate("ttft <= 40ms", run)  # 41..59 ms violate
    assert r.message == "TTFT <= 40 ms per request: 19 of 50 requests violate it (62% met)"
    assert evaluate("good_fraction >= 62%", run).passed and not evaluate("good_fraction >= 63%", run).passed
    assert evaluate("tpot.p50 <= 5ms", run).passed  # 15 ms over 3 gaps
