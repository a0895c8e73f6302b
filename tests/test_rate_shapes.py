"""Rate shapes over time (issue 50 item 4): piecewise rate schedules, their expression form, the arrivals drawn
by thinning (a non-homogeneous Poisson process, seeded), the marker's ``shaped(...)`` load, the compliance
consequence, and a short ramp against the embedded simulator with offered against achieved rate per 5-s window
in results.json and report.html.

The issue's check: a ramp 10→100 req/s over 60 s, generated on a virtual clock (the schedule alone, no wall
time), passes one χ² goodness-of-fit test against the rate function, seeded; the same test rejects a constant
rate of the same mean (it can fail).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from factories import GOOD_DECLARATIONS, all_procedure_checks, good_facts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from pytest_llmbench import shaped
from pytest_llmbench.compliance import Status, evaluate_test
from pytest_llmbench.loadgen.load import ArrivalProcess, OpenLoop, check_arrival, load_parameters
from pytest_llmbench.loadgen.shapes import (
    SINE_PIECES,
    RateSchedule,
    Segment,
    ShapedArrival,
    burst_drain,
    hold,
    parse_shape,
    ramp,
    schedule_of,
    sine,
    spike,
    steps,
)
from pytest_llmbench.loadgen.shards import plan_shards
from pytest_llmbench.procedures.loads import LoadSpec, poisson, resolve_load

SEED = 20261128
RAMP = "ramp(10,100,60s)"


# --------------------------------------------------------------------------------------------
# χ² goodness of fit of the drawn arrivals against the rate function (the check)
# --------------------------------------------------------------------------------------------


def _chi2_p(times_s: np.ndarray, against: RateSchedule, bins: int = 12) -> float:
    """χ² p-value of the arrivals' counts in ``bins`` equal bins of ``against``'s span, the expected counts from
    the rate's integral per bin, scaled to the observed total (given N, the arrivals are iid with density
    λ(t)/Λ(T): k − 1 degrees of freedom)."""
    edges = np.linspace(0.0, against.duration_s, bins + 1)
    observed, _ = np.histogram(times_s, bins=edges)
    expected = against.expected_between(edges[:-1], edges[1:])
    expected = expected * observed.sum() / expected.sum()
    assert expected.min() >= 5  # χ²'s own condition
    return float(chisquare(observed, expected).pvalue)


def test_the_ramp_10_to_100_over_60s_passes_one_chi_square_test_against_its_rate() -> None:
    arrival = ShapedArrival.of(RAMP, seed=SEED)
    times = arrival.times_s()  # the schedule alone: a virtual clock, no wall time
    assert 3000 < times.size < 3600  # Λ(60 s) = 3,300
    assert _chi2_p(times, arrival.schedule) > 0.01  # type: ignore[arg-type]


def test_the_same_chi_square_test_rejects_a_constant_rate_of_the_same_mean() -> None:
    """It can fail: the ramp's arrivals against hold(55,60s), the same mean and the same total."""
    arrival = ShapedArrival.of(RAMP, seed=SEED)
    flat = hold(55, 60)
    assert flat.expected == arrival.schedule.expected  # type: ignore[union-attr]
    assert _chi2_p(arrival.times_s(), flat) < 1e-9
    # and the other way round: a constant rate's arrivals are rejected against the ramp
    assert _chi2_p(ShapedArrival.of(flat, seed=SEED).times_s(), ramp(10, 100, 60)) < 1e-9


# --------------------------------------------------------------------------------------------
# the schedule, computed by hand
# --------------------------------------------------------------------------------------------


def test_a_ramp_s_rate_and_integral_by_hand() -> None:
    s = parse_shape(RAMP)
    assert (s.duration_s, s.expected, s.mean_rate, s.max_rate) == (60.0, 3300.0, 55.0, 100.0)
    assert s.rate_at(np.array([0.0, 30.0, 59.0])).tolist() == [10.0, 55.0, 98.5]
    assert float(s.rate_at(60.0)) == 0.0 and float(s.rate_at(-1.0)) == 0.0  # outside the schedule
    # Λ(30) = 10·30 + ½·(90/60)·30² = 300 + 675
    assert float(s.cumulative(30.0)) == pytest.approx(975.0)
    assert float(s.expected_between(30.0, 60.0)) == pytest.approx(3300 - 975)
    assert float(s.cumulative(1e9)) == pytest.approx(3300.0)  # clamped at the end


def test_segment_boundaries_are_right_continuous_and_the_integral_adds_up() -> None:
    s = parse_shape("hold(10,30s) + ramp(10,100,60s) + steps(20@10s,0@5s,40@5s)")
    assert s.edges_s == (0.0, 30.0, 90.0, 100.0, 105.0, 110.0)
    assert s.expected == 10 * 30 + 3300 + 20 * 10 + 0 + 40 * 5
    at = s.rate_at(np.array([29.999, 30.0, 60.0, 75.0, 90.0, 100.0, 104.9, 105.0, 109.99, 110.0]))
    assert at.tolist() == pytest.approx([10.0, 10.0, 55.0, 77.5, 20.0, 0.0, 0.0, 40.0, 40.0, 0.0])
    assert float(s.cumulative(100.0)) == pytest.approx(300 + 3300 + 200)


def test_named_shapes_build_their_segments() -> None:
    assert steps([(10, 30), (50, 30)]).segments == (Segment(30, 10, 10), Segment(30, 50, 50))
    sp = spike(20, 200, at_s=30, width_s=5, duration_s=60)
    assert [(g.duration_s, g.start_rate) for g in sp.segments] == [(30, 20), (5, 200), (25, 20)]
    assert sp.expected == 20 * 55 + 200 * 5
    assert spike(20, 200, 0, 5, 5).segments == (Segment(5, 200, 200),)  # no empty base pieces
    bd = burst_drain(80, 0, 10, 20, 3)
    assert len(bd.segments) == 6 and bd.expected == 3 * 800 and bd.duration_s == 90
    sn = sine(50, 40, 60, 300)
    assert len(sn.segments) == 5 * SINE_PIECES
    assert sn.expected == pytest.approx(50 * 300, rel=1e-12)  # whole periods: the chords' sine parts cancel
    assert sn.max_rate == pytest.approx(90) and min(g.start_rate for g in sn.segments) == pytest.approx(10)
    assert float(sn.rate_at(15.0)) == pytest.approx(90.0)  # a vertex at the peak (period/4 = 12 pieces)
    worst = max(abs(float(sn.rate_at(t)) - (50 + 40 * math.sin(2 * math.pi * t / 60))) for t in np.linspace(0, 60, 997))
    assert worst <= 40 * (1 - math.cos(math.pi / SINE_PIECES)) + 1e-9  # the documented chord error
    assert sine(50, 40, 60, 70).duration_s == pytest.approx(70)  # a last partial piece


@pytest.mark.parametrize("expr, same_as", [
    ("ramp(10,100,60s)", ramp(10, 100, 60)),
    ("ramp(from=10, to=100, for=1m)", ramp(10, 100, 60)),
    (" RAMP( 10 , 100 , 60000ms ) ", ramp(10, 100, 60)),
    ("hold(5,0.5h)", hold(5, 1800)),
    ("steps(10@30s,50@30s)", steps([(10, 30), (50, 30)])),
    ("spike(20,200,at=30s,width=5s,for=60s)", spike(20, 200, 30, 5, 60)),
    ("burst(80,5,on=10s,off=20s,cycles=4)", burst_drain(80, 5, 10, 20, 4)),
    ("sine(mean=50,amp=40,period=60s,for=300s)", sine(50, 40, 60, 300)),
    ("hold(0,10s) + ramp(0,10,10s)", RateSchedule((Segment(10, 0, 0), Segment(10, 0, 10)))),
])
def test_the_expression_form(expr: str, same_as: RateSchedule) -> None:
    s = parse_shape(expr)
    assert s.segments == same_as.segments and s.expression == expr.strip()
    assert parse_shape(s.canonical()).segments == s.segments  # the canonical text parses back


@pytest.mark.parametrize("expr, says", [
    ("ramp(10,100,60)", "'60' is not a duration: a number and a unit ms, s, m or h (write 60s)"),
    ("ramp(10,100)", "missing for; write ramp(from, to, for)"),
    ("ramp(10,100,60s,5)", "too many arguments; write ramp(from, to, for)"),
    ("ramp(to=100,10,60s)", "a positional argument after a keyword one"),
    ("hold(rate=1,rate=2,for=1s)", "argument 'rate' given twice"),
    ("hold(1,for=2s,speed=3)", "unknown argument 'speed'; write hold(rate, for)"),
    ("wave(1,2s)", "unknown shape 'wave'; known: burst(high, low, on, off, cycles)"),
    ("ramp(10,100,60s", "unclosed '('; write e.g. ramp(10,100,60s)"),
    ("ramp)10,100,60s(", "unbalanced ')'"),
    ("ramp 10 100 60s", "is not name(arguments)"),
    ("hold(-1,3s)", "'-1' is not a number of requests/s >= 0"),
    ("hold(ten,3s)", "'ten' is not a number of requests/s"),
    ("hold(1,0s)", "a segment's duration must be a positive number of seconds"),
    ("hold(0,3s)", "rate is 0 throughout sends nothing"),
    ("hold(1,2s) ++ hold(1,2s)", "an empty term around '+'"),
    ("hold(1,)", "an empty argument; write hold(rate, for)"),
    ("steps(10,20)", "step '10' is not rate@duration (write e.g. steps(10@30s,50@30s))"),
    ("steps(10@3)", "'3' is not a duration"),
    ("burst(1,2,on=1s,off=1s,cycles=2.5)", "cycles '2.5' is not a whole number"),
    ("burst(1,2,on=1s,off=1s,cycles=0)", "burst cycles must be a whole number from 1"),
    ("sine(10,20,5s,10s)", "a sine rate needs 0 <= amp <= mean"),
    ("sine(10,5,1ms,1h)", "more than 100000: give a longer period or a shorter duration"),
    ("spike(1,2,at=5s,width=10s,for=10s)", "a spike needs 0 <= at (5 s) and at + width (10 s) <= for (10 s)"),
    ("", "must be a non-empty string"),
])
def test_every_bad_expression_is_a_value_error_naming_the_problem(expr: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_shape(expr)
    assert says in str(err.value), str(err.value)


def test_segments_given_as_tuples() -> None:
    s = schedule_of([(30, 10), (60, 10, 100)])
    assert s.segments == (Segment(30, 10, 10), Segment(60, 10, 100))
    assert s.text() == "hold(10,30s) + ramp(10,100,60s)" and s.expression is None
    for bad, says in (([(30,)], "segment 1 (30,) is not (duration_s, rate)"), ([(0, 1)], "segment 1 (0, 1): a segment"),
                      (5, "a rate shape is an expression, a RateSchedule or a list"), ([], "at least one segment"),
                      ([(1, float("nan"))], "start rate must be a number of requests/s >= 0")):
        with pytest.raises(ValueError) as err:
            schedule_of(bad)  # type: ignore[arg-type]
        assert says in str(err.value), str(err.value)


def test_the_schedule_records_its_expression_segments_and_figures() -> None:
    j = parse_shape("hold(10,30s) + ramp(10,100,60s)").to_json()
    assert j == {"expression": "hold(10,30s) + ramp(10,100,60s)", "segments": [[30.0, 10.0, 10.0], [60.0, 10.0, 100.0]],
                 "duration_s": 90.0, "mean_rate": 40.0, "max_rate": 100.0, "expected_requests": 3600.0}


# --------------------------------------------------------------------------------------------
# the arrivals: seeded, finite, lazy, thinning
# --------------------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_offsets_byte_for_byte() -> None:
    a = np.array(list(ShapedArrival.of(RAMP, seed=7).offsets_ns()), dtype=np.int64)
    b = np.array(list(ShapedArrival.of(parse_shape(RAMP), seed=7).offsets_ns()), dtype=np.int64)
    assert a.tobytes() == b.tobytes()
    c = np.array(list(ShapedArrival.of(RAMP, seed=8).offsets_ns()), dtype=np.int64)
    assert a.size != c.size or a.tobytes() != c.tobytes()
    assert (np.diff(a) >= 0).all() and a[0] >= 0 and a[-1] < 60 * 10**9  # in order, inside the schedule
    assert a.tolist() == (ShapedArrival.of(RAMP, seed=7).times_s() * 1e9).astype(np.int64).tolist()


def test_offsets_are_drawn_lazily_and_end_with_the_schedule() -> None:
    long = ShapedArrival.of("hold(1000,10h)", seed=1)  # 36 million arrivals: never drawn at once
    first = list(itertools.islice(long.offsets_ns(), 5))
    assert len(first) == 5 and first == sorted(first)
    assert len(list(ShapedArrival.of("hold(20,2s)", seed=1).offsets_ns())) < 80  # finite
    assert list(ShapedArrival.of("hold(0,5s) + hold(10,1s)", seed=3).offsets_ns())[0] >= 5 * 10**9  # 0 rate: none


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0.5, 20), st.floats(0, 40), st.floats(0, 40)), min_size=1, max_size=4)
       .filter(lambda segs: max(max(r0, r1) for _, r0, r1 in segs) > 1))
def test_thinning_counts_per_segment_follow_the_rate_integral(segs: list[tuple[float, float, float]]) -> None:
    """Over 30 seeds, each segment's arrivals sum to a Poisson count of 30·∫λ: within 5 standard deviations
    (a wrong acceptance probability, e.g. the global instead of the segment's own maximum, is far outside)."""
    sched = schedule_of(segs)
    edges = np.array(sched.edges_s)
    totals = np.zeros(len(segs))
    for seed in range(30):
        t = ShapedArrival.of(sched, seed=seed).times_s()
        assert ((t >= 0) & (t < sched.duration_s)).all()
        totals += np.histogram(t, bins=edges)[0]
    for got, seg in zip(totals, sched.segments):
        mu = 30 * seg.expected
        assert abs(got - mu) <= 5 * math.sqrt(mu) + 1, (got, mu, seg)
        if seg.max_rate == 0:
            assert got == 0


def test_within_a_ramp_segment_the_arrivals_follow_the_slope() -> None:
    """Thinning inside one segment: the first and the second half of ramp(0,100,20s) hold 1/4 and 3/4."""
    halves = np.zeros(2)
    for seed in range(20):
        halves += np.histogram(ShapedArrival.of("ramp(0,100,20s)", seed=seed).times_s(), bins=[0, 10, 20])[0]
    assert halves[0] / halves.sum() == pytest.approx(0.25, abs=0.02)


def test_a_shaped_process_is_an_arrival_process_of_its_own_kind() -> None:
    a = ShapedArrival.of(RAMP, seed=1)
    assert isinstance(a, ArrivalProcess) and (a.kind, a.rate, a.cv) == ("shaped", 55.0, None)
    with pytest.raises(ValueError, match="'shaped' arrivals follow a schedule"):
        ArrivalProcess("shaped", 55.0)  # the base class has no schedule to draw from
    with pytest.raises(ValueError, match="needs its RateSchedule"):
        ShapedArrival("shaped", 55.0)
    with pytest.raises(TypeError, match="no stationary gap distribution"):
        a.gaps_s(3)
    assert check_arrival("shaped", 55.0, None, scheduled=True) == "shaped"
    params, requested, _ = load_parameters(OpenLoop(a, duration_s=60.0), 5.0, stop=False)
    assert requested == 55.0 and params["arrival"]["kind"] == "shaped" and params["arrival"]["seed"] == 1
    assert params["arrival"]["schedule"]["expression"] == RAMP and params["duration_s"] == 60.0


def test_a_shaped_run_is_dealt_out_to_shards_as_one_schedule() -> None:
    a = ShapedArrival.of("ramp(5,50,10s)", seed=4)
    specs = [object()] * 1000
    parts = plan_shards(specs, OpenLoop(a, max_requests=1000, duration_s=10.0), 3)  # type: ignore[arg-type]
    dealt = sorted(off for _, load in parts for off in load.arrival.offsets_ns())  # type: ignore[union-attr]
    assert dealt == list(a.offsets_ns())
    assert {load.arrival.kind for _, load in parts} == {"shaped"}  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------
# the marker's load, the compliance consequence
# --------------------------------------------------------------------------------------------


def test_the_marker_load_spec() -> None:
    spec = shaped(RAMP)
    assert (spec.model, spec.arrival, spec.shape, spec.rate) == ("open", "shaped", RAMP, None)
    assert spec.describe() == ("open loop, shaped arrivals (non-homogeneous Poisson) by ramp(10,100,60s): "
                               "10–100 req/s over 60 s, mean 55 req/s")
    assert shaped([(30, 10), (60, 10, 100)]).shape == "hold(10,30s) + ramp(10,100,60s)"
    assert spec.to_json()["shape"] == RAMP
    with pytest.raises(ValueError, match="unknown shape 'wave'"):
        shaped("wave(1,2s)")  # at the marker, before any request
    with pytest.raises(ValueError, match="carries its own rates"):
        LoadSpec("open", "shaped", rate=4.0, shape=RAMP)
    with pytest.raises(ValueError, match="written shaped"):
        LoadSpec("open", "poisson", rate=4.0, shape=RAMP)
    with pytest.raises(ValueError, match="has no rate schedule"):
        poisson(4.0).schedule()


async def test_a_shaped_load_resolves_to_its_schedule_and_length() -> None:
    load, desc = await resolve_load(None, shaped(RAMP), max_requests=5000, seed=11)  # type: ignore[arg-type]
    assert isinstance(load, OpenLoop) and isinstance(load.arrival, ShapedArrival)
    assert (load.duration_s, load.max_requests, load.arrival.seed) == (60.0, 5000, 11)
    assert desc["schedule"]["expected_requests"] == 3300.0 and desc["shape"] == RAMP
    cut, _ = await resolve_load(None, shaped(RAMP), duration_s=20.0, seed=11)  # type: ignore[arg-type]
    assert cut.duration_s == 20.0  # a shorter duration (a time budget) cuts the schedule


@pytest.mark.parametrize("rid, says", [
    ("5.1.2-MUST-6", "not one arrival rate in requests/second"),
    ("5.1.2-MUST-7", "not Poisson, uniform or bursty arrivals at one rate"),
    ("5.1.2-MUST-8", "not the Poisson arrivals at one rate §5.1.2.2 REQUIRES"),
])
def test_a_rate_shape_is_unmet_on_5_1_s_single_rate_poisson_items(rid: str, says: str) -> None:
    facts = good_facts("5.1")
    facts.load.arrival, facts.load.rate, facts.load.schedule = "shaped", 55.0, RAMP
    check = evaluate_test("5.1", all_procedure_checks("5.1"), facts, dict(GOOD_DECLARATIONS))[rid]
    assert check.status is Status.UNMET, check
    assert f"rate shape {RAMP}, mean 55 req/s: arrivals whose rate changes over the run are a custom load" in \
        check.reason and says in check.reason
    facts.load.arrival, facts.load.schedule = "poisson", None  # the same facts at one rate: met
    assert evaluate_test("5.1", all_procedure_checks("5.1"), facts, dict(GOOD_DECLARATIONS))[rid].status is Status.MET


# --------------------------------------------------------------------------------------------
# a short ramp through the marker against the embedded simulator
# --------------------------------------------------------------------------------------------

SHORT = "ramp(4,40,6s)"  # 132 requests expected
TESTS = f'''
import pytest
from pytest_llmbench import shaped

@pytest.mark.llm_procedure("5.1", workload="synthetic-uniform", requests=400, load=shaped("{SHORT}"),
                           max_output_tokens=8, warmup_requests=20, warmup_tokens=100)
def test_ramp(llm_result):
    pass
'''


def test_a_short_ramp_against_the_simulator_reports_offered_against_achieved_per_window(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ramp=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--llm-max-duration", "0")
    result.assert_outcomes(passed=1)
    doc: dict[str, Any] = json.loads((pytester.path / "rep" / "results.json").read_text())
    (p,) = doc["procedures"]
    (run,) = [r for r in p["result"]["runs"] if r["label"] == "measure"]
    rs = run["extra"]["rate_shape"]
    assert rs["schedule"]["expression"] == SHORT and rs["window_s"] == 5.0
    assert [(w["t0_s"], w["t1_s"]) for w in rs["windows"]][0] == (0.0, 5.0) and len(rs["windows"]) == 2
    first, second = rs["windows"]
    assert first["offered"] == pytest.approx((4 * 5 + 0.5 * 6 * 25) / 5)  # Λ(5) / 5 = 19 req/s
    assert second["offered"] == pytest.approx((132 - 95) / 1)  # the last second: 37 req/s
    assert rs["sent"] == sum(w["sent"] for w in rs["windows"]) == p["result"]["measurements"]["requests"]
    assert 80 < rs["sent"] < 190  # Poisson(132)
    for w in rs["windows"]:  # a quiet simulator sends on time: achieved is the drawn schedule's rate
        assert w["achieved"] == pytest.approx(w["scheduled"], abs=2 / (w["t1_s"] - w["t0_s"]))
        assert w["ttft_n"] > 0 and 0 < w["ttft_p50_s"] <= w["ttft_p99_s"]
    assert rs["rate_points"] == [[0.0, 4.0], [6.0, 40.0]]
    load = json.loads((pytester.path / "rep" / run["run_dir"] / "run.json").read_text())["loads"][0]
    assert load["parameters"]["arrival"]["kind"] == "shaped"
    assert load["parameters"]["arrival"]["schedule"]["expression"] == SHORT
    assert load["parameters"]["arrival"]["seed"] == rs["seed"] and load["parameters"]["duration_s"] == 6.0
    unmet = {u["id"]: u["reason"] for u in p["compliance"]["unmet"]}
    assert "custom load" in unmet["5.1.2-MUST-8"] and SHORT in unmet["5.1.2-MUST-8"]
    html = (pytester.path / "rep" / "report.html").read_text()
    assert 'data-kind="rate-shape"' in html and 'data-kind="rate-shape-ttft"' in html
    assert "Rate shape over time" in html and f"from the rate shape {SHORT}" in html
    assert html.count('data-series="achieved (sends by T_submit)"') == 2  # one point per window
    import jsonschema

    from pytest_llmbench.document.schema import schema

    jsonschema.validate(doc, schema())


# --------------------------------------------------------------------------------------------
# the ramp 10→100 req/s over 60 s against the reference mock (slow: a 60-s run)
# --------------------------------------------------------------------------------------------

from test_user_path_memory import mock_url  # noqa: E402,F401  (the reference mock, started as bench/ starts it)

MOCK_TESTS = f'''
import pytest
from pytest_llmbench import shaped

@pytest.mark.llm_procedure("5.1", workload="synthetic-uniform", requests=5000, load=shaped("{RAMP}"),
                           max_output_tokens=16)
def test_ramp(llm_result):
    pass
'''


@pytest.mark.slow
def test_the_ramp_against_the_mock_achieves_the_offered_rate_per_window(pytester: pytest.Pytester,
                                                                        mock_url: str) -> None:
    pytester.makepyfile(test_ramp=MOCK_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--llm-max-duration", "0",
                                           "--llm-endpoint", mock_url, "--llm-boundary", "model-engine")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    (run,) = [r for r in doc["procedures"][0]["result"]["runs"] if r["label"] == "measure"]
    rs = run["extra"]["rate_shape"]
    wins = rs["windows"]
    assert len(wins) == 12
    print(f"\n{RAMP}, seed {rs['seed']}: {rs['sent']} sent, {rs['expected']:.0f} expected")
    print("window (s)  offered  scheduled  achieved  TTFT P50 (ms)  TTFT P99 (ms)")
    for w in wins:
        print(f"{w['t0_s']:4.0f}-{w['t1_s']:<4.0f}  {w['offered']:7.1f}  {w['scheduled']:9.1f}  {w['achieved']:8.1f}  "
              f"{w['ttft_p50_s'] * 1e3:13.2f}  {w['ttft_p99_s'] * 1e3:13.2f}")
        assert w["offered"] == pytest.approx((10 + 1.5 * (w["t0_s"] + w["t1_s"]) / 2))  # the ramp's mean in the window
        assert abs(w["achieved"] - w["scheduled"]) * 5 <= 3  # every drawn arrival sent in its window (± 3 at edges)
    counts = np.array([w["scheduled"] * 5 for w in wins])
    offered = np.array([w["offered"] * 5 for w in wins])
    assert chisquare(counts, offered * counts.sum() / offered.sum()).pvalue > 0.001
    html = (pytester.path / "rep" / "report.html").read_text()
    assert html.count('data-series="achieved (sends by T_submit)"') == 12
