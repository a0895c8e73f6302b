"""The bounds behind SLO verdicts (measure/stats/bounds.py, sequential.py; issue 47): hand-computed values,
their properties, the look schedule, and the INCONCLUSIVE verdict with its "need N more" on stored records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from pytest_llmbench.measure.slo import StopCondition, SLOVerdict, evaluate, parse_slo
from pytest_llmbench.measure.stats import batch_means_mean
from pytest_llmbench.measure.stats.bounds import (
    burst_design_effect,
    clopper_pearson_lower,
    clopper_pearson_upper,
    design_effect,
    design_effect_from_sums,
    kl_lower,
    kl_upper,
    needed_more,
    share_bounds,
    share_verdict,
    smallest_n,
)
from pytest_llmbench.measure.stats.sequential import ShareLooks, look_schedule

# ------------------------------------------------------------------------------ hand-computed values


@pytest.mark.parametrize("confidence, counts", [(0.95, {0: 299, 1: 473, 10: 1693}), (0.99, {0: 459, 1: 662, 10: 2010})])
def test_the_worked_numbers_of_a_p99(confidence: float, counts: dict[int, int]) -> None:
    """P99 <= X: the smallest request counts that show it with 0, 1 and 10 exceedances (issue 47)."""
    for k, n in counts.items():
        assert smallest_n(k, 0.01, confidence) == n
        assert clopper_pearson_upper(k, n, confidence) < 0.01 <= clopper_pearson_upper(k, n - 1, confidence)
        assert share_verdict(k, n, 0.01, confidence).verdict is SLOVerdict.PASS
        assert share_verdict(k, n - 1, 0.01, confidence).verdict is SLOVerdict.INCONCLUSIVE


def test_zero_exceedances_in_closed_form() -> None:
    """U(0, n) = 1 - (1-c)^(1/n): the n for P99 with none beyond is the first with 0.99^n < 1 - c."""
    assert clopper_pearson_upper(0, 299, 0.95) == pytest.approx(1 - 0.05 ** (1 / 299), rel=1e-12)
    assert 0.99 ** 299 < 0.05 < 0.99 ** 298  # the same 299 by hand
    assert 0.99 ** 459 < 0.01 < 0.99 ** 458
    assert clopper_pearson_lower(50, 50, 0.95) == pytest.approx(0.05 ** (1 / 50), rel=1e-12)
    assert clopper_pearson_lower(0, 50, 0.95) == 0.0 and clopper_pearson_upper(50, 50, 0.95) == 1.0


@pytest.mark.parametrize("n, p0, confidence", [(300, 0.01, 0.95), (1000, 0.01, 0.99), (200, 0.5, 0.95), (2000, 0.001, 0.9)])
def test_both_bounds_are_the_binomial_tail_inverted(n: int, p0: float, confidence: float) -> None:
    """Duality, by the binomial tail (another formula than the beta quantile): U(k, n) < p0 exactly when
    P_p0(K <= k) < 1 - c (PASS), and L(k, n) > p0 exactly when P_p0(K >= k) < 1 - c (FAIL)."""
    alpha = 1 - confidence
    k = np.arange(n + 1)
    assert ((clopper_pearson_upper(k, n, confidence) < p0) == (binom.cdf(k, n, p0) < alpha)).all()
    assert ((clopper_pearson_lower(k, n, confidence) > p0) == (binom.sf(k - 1, n, p0) < alpha)).all()


def test_fail_side_worked_numbers() -> None:
    """FAIL for a P99 SLO: at 1000 requests at 95 % it takes 16 beyond (P(K >= 16 | 1 %) = 4.79 % < 5 %,
    P(K >= 15) = 8.24 %); a P1 lower bound (fluidity.p1 >= 0.9) the same with the share below."""
    assert binom.sf(15, 1000, 0.01) == pytest.approx(0.04787, abs=1e-5)
    assert binom.sf(14, 1000, 0.01) == pytest.approx(0.08241, abs=1e-5)
    first = next(k for k in range(1001) if clopper_pearson_lower(k, 1000, 0.95) > 0.01)
    assert first == 16
    assert share_verdict(first, 1000, 0.01, 0.95).verdict is SLOVerdict.FAIL
    assert share_verdict(first - 1, 1000, 0.01, 0.95).verdict is SLOVerdict.INCONCLUSIVE


def test_needed_more_examples() -> None:
    assert needed_more(100, 0, 0.01, 0.95) == 199  # 299 in all with none beyond
    assert needed_more(299, 0, 0.01, 0.95) == 0
    more = needed_more(300, 2, 0.01, 0.95)  # 0.67 % observed: PASS once the bound narrows below 1 %
    n2 = 300 + more
    assert clopper_pearson_upper(round(2 / 300 * n2), n2, 0.95) < 0.01
    assert clopper_pearson_upper(round(2 / 300 * (n2 - 1)), n2 - 1, 0.95) >= 0.01
    more = needed_more(300, 5, 0.01, 0.95)  # 1.67 % observed: FAIL once the lower bound passes 1 %
    n2 = 300 + more
    assert clopper_pearson_lower(round(5 / 300 * n2), n2, 0.95) > 0.01
    assert needed_more(300, 3, 0.01, 0.95) is None  # exactly at the limit: no count decides
    assert needed_more(300, 0, 0.0, 0.95) is None  # "none may ever fail" is never shown to hold


# ------------------------------------------------------------------------------ properties

_conf = st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99, 0.999])


@settings(deadline=None, max_examples=300)
@given(n=st.integers(1, 5000), data=st.data(), c=_conf)
def test_bounds_bracket_the_share_and_are_monotone(n: int, data: st.DataObject, c: float) -> None:
    k = data.draw(st.integers(0, n))
    lo, up = clopper_pearson_lower(k, n, c), clopper_pearson_upper(k, n, c)
    assert 0.0 <= lo <= k / n <= up <= 1.0
    if k < n:  # one more beyond raises both bounds; one more request within lowers them
        assert clopper_pearson_upper(k + 1, n, c) >= up and clopper_pearson_lower(k + 1, n, c) >= lo
        assert clopper_pearson_upper(k, n + 1, c) <= up and clopper_pearson_lower(k, n + 1, c) <= lo
    kl_lo, kl_up = kl_lower(k / n, n, c), kl_upper(k / n, n, c)
    assert kl_lo <= lo + 1e-9 and kl_up >= up - 1e-9  # Chernoff-Hoeffding is never tighter than the exact bound


@settings(deadline=None, max_examples=300)
@given(n=st.integers(1, 3000), data=st.data(), p0=st.floats(0.001, 0.999), c=_conf)
def test_verdicts_never_contradict_the_observed_share(n: int, data: st.DataObject, p0: float, c: float) -> None:
    k = data.draw(st.integers(0, n))
    d = share_verdict(k, n, p0, c)
    if d.verdict is SLOVerdict.PASS:
        assert k / n < p0 and d.bound == d.upper < p0
    if d.verdict is SLOVerdict.FAIL:
        assert k / n > p0 and d.bound == d.lower > p0
    if d.verdict is SLOVerdict.INCONCLUSIVE and d.needed_more is not None and k:
        n2 = n + d.needed_more  # after that many more at the observed share, a verdict
        assert share_verdict(round(k / n * n2), n2, p0, c).verdict is not SLOVerdict.INCONCLUSIVE


@settings(deadline=None, max_examples=200)
@given(n=st.integers(1, 2000), data=st.data(), c=_conf, effect=st.floats(1.0, 6.0))
def test_in_flight_requests_never_make_a_verdict_the_complete_look_would_not(n: int, data: st.DataObject,
                                                                             c: float, effect: float) -> None:
    """Counted beyond for PASS and within for FAIL: whatever the in-flight ones turn out to be, the
    complete look gives the same verdict (the bounds are monotone for a fixed design effect)."""
    f = data.draw(st.integers(0, 50))
    k = data.draw(st.integers(0, n))
    p0 = data.draw(st.floats(0.001, 0.5))
    early = share_verdict(k, n, p0, c, in_flight=f, design_effect=effect).verdict
    assume(early is not SLOVerdict.INCONCLUSIVE)
    for extra in {0, f // 2, f}:  # of the f in flight, `extra` turn out beyond
        assert share_verdict(k + extra, n + f, p0, c, design_effect=effect).verdict is early


@settings(deadline=None, max_examples=100)
@given(effect=st.floats(1.0, 10.0), n=st.integers(10, 3000), data=st.data())
def test_a_design_effect_only_widens(effect: float, n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n))
    lo1, up1 = share_bounds(k, n, 0.95)
    lo, up = share_bounds(k, n, 0.95, design_effect=effect)
    assert lo <= lo1 + 1e-12 and up >= up1 - 1e-12
    assert share_bounds(k, n, 0.95, design_effect=effect) == share_bounds(k / effect, n / effect, 0.95)


def test_design_effect_of_bursts() -> None:
    """The lag-1 autocorrelation in send order: independent exceedances ~1, a Markov chain with mean burst
    length m about 2m - 1, a negatively correlated sequence never below 1."""
    rng = np.random.default_rng(3)
    iid = (rng.random(200_000) < 0.01).astype(float)
    assert design_effect(iid) == pytest.approx(1.0, abs=0.05)
    burst = 3.0  # two-state chain, P(1) = 1 %, mean burst 3
    p10, p01 = 1 / burst, 0.01 / burst / 0.99
    s, x = False, np.empty(200_000)
    u = rng.random(x.size)
    for i in range(x.size):
        s = (u[i] >= p10) if s else (u[i] < p01)
        x[i] = s
    assert design_effect(x) == pytest.approx(2 * burst * 0.99 - 1, rel=0.1)
    assert design_effect(np.tile([1.0, 0.0], 500)) == 1.0  # alternating: rho < 0, taken as 1
    assert design_effect([1.0, 1.0]) == 1.0  # too short to tell
    assert burst_design_effect(1) == 1.0 and burst_design_effect(2) == 3.0
    with pytest.raises(ValueError):
        burst_design_effect(0.5)
    sums = design_effect_from_sums(x.size, x.sum(), (x * x).sum(), (x[:-1] * x[1:]).sum(), x[0], x[-1])
    assert sums == pytest.approx(design_effect(x), rel=1e-12)


def test_batch_means_mean_over_requests_in_send_order() -> None:
    """Batch means see what the t interval of single requests misses: a slow stretch of the run."""
    x = np.concatenate([np.full(500, 1.0), np.full(500, 2.0)]) + np.random.default_rng(0).normal(0, 0.05, 1000)
    bm = batch_means_mean(x, confidence=0.95)
    assert bm.value == pytest.approx(x.mean()) and bm.method.startswith("mean, batch means over requests")
    t_half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert (bm.ci_high - bm.ci_low) / 2 > 3 * t_half  # much wider than the independent-requests interval
    per = [part.mean() for part in np.array_split(x, 10)]
    from scipy.stats import t

    assert (bm.ci_high - bm.value) == pytest.approx(t.ppf(0.975, 9) * np.std(per, ddof=1) / math.sqrt(10))
    w = batch_means_mean([1.0, 3.0, 1.0, 3.0], weights=[3, 1, 3, 1])  # weighted: a pooled mean
    assert w.value == pytest.approx(1.5)
    assert batch_means_mean([1.0, np.nan, 2.0]).ci_low is None and batch_means_mean([]).n == 0


# ------------------------------------------------------------------------------ looks


def test_look_schedule_of_a_p99_on_the_standard_plan() -> None:
    s = look_schedule(10_000, 0.95, p0=0.01)
    assert s.looks == (477, 954, 1908, 3816, 7632, 10_000) and s.spent_over == 6
    assert s.look_confidence == pytest.approx(1 - 0.05 / 6)
    assert smallest_n(0, 0.01, s.look_confidence) == 477  # the first look is the first that can decide
    assert look_schedule(200, 0.95, p0=0.01).looks == (200,)  # too short: one look, the fixed-sample verdict
    assert look_schedule(200, 0.95, p0=0.01).look_confidence == pytest.approx(0.95)
    declared = look_schedule(10_000, 0.95, p0=0.01, design_effect=3.0)
    assert declared.looks[0] == smallest_n(0, 0.01, declared.look_confidence, 3.0)
    for planned in (1, 50, 300, 999, 5000, 100_000):
        sch = look_schedule(planned, 0.9, p0=0.05)
        assert len(sch.looks) <= sch.spent_over and sch.looks[-1] == planned


_P99_LOOKS = look_schedule(10_000, 0.95, p0=0.01)


@settings(deadline=None, max_examples=60)
@given(look=st.integers(0, 5), k=st.integers(0, 200), f=st.integers(0, 30), effect=st.floats(1.0, 5.0))
def test_vectorised_look_decisions_are_share_verdicts(look: int, k: int, f: int, effect: float) -> None:
    """The simulation's decisions (ShareLooks.decide) are the verdicts evaluate() takes at a look."""
    s = _P99_LOOKS
    n = s.looks[look]
    assume(k + f <= n)
    pass_, fail = ShareLooks(s, 0.01).decide(look, k, f, effect)
    v = share_verdict(k, n - f, 0.01, s.look_confidence, in_flight=f, design_effect=effect).verdict
    assert bool(pass_) == (v is SLOVerdict.PASS) and bool(fail) == (v is SLOVerdict.FAIL)


# ------------------------------------------------------------------------------ stored records


def _stored(tmp_path, ttfts_ms: list[float | None]):  # type: ignore[no-untyped-def]
    """Records written to a run directory and read back (no wall clock): TTFT per request in send order,
    None = a request that failed with a server error."""
    from factories import make_record

    from pytest_llmbench.common.records import ErrorType
    from pytest_llmbench.common.storage import RunWriter, iter_records
    from pytest_llmbench.measure.summary import summarize

    with RunWriter(tmp_path / "run") as w:
        for i, t in enumerate(ttfts_ms):
            if t is None:
                w.write(make_record(i, sent=100 * i, chunks=(), error_type=ErrorType.HTTP_5XX, status=500))
            else:
                w.write(make_record(i, sent=100 * i, ttft=t, itl=5, n_chunks=3, text=["a", "b", "c"]))
    return summarize(list(iter_records(tmp_path / "run")))


def test_inconclusive_with_need_n_more_on_stored_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """300 requests, 2 beyond 500 ms (0.67 %): P99 <= 500 ms is neither shown nor refuted at 95 %."""
    ttfts: list[float | None] = [100.0] * 300
    ttfts[57], ttfts[211] = 800.0, 900.0
    r = evaluate("ttft.p99 <= 500ms", _stored(tmp_path, ttfts))
    more = needed_more(300, 2, 0.01, 0.95)
    assert r.verdict is SLOVerdict.INCONCLUSIVE and (r.n, r.exceedances, r.needed_more) == (300, 2.0, more)
    assert r.bound == pytest.approx(clopper_pearson_upper(2, 300, 0.95)) and r.design_effect == 1.0
    assert (f"INCONCLUSIVE at 95% confidence: 2 of 300 requests above 500 ms (a failed request counts as beyond "
            f"the threshold); share above 500 ms <= 2.08%, not < 1% (exact binomial bound); need ~{more} more "
            "requests at the observed share (0.667%)") in r.message
    assert r.to_json()["verdict"] == "INCONCLUSIVE" and r.to_json()["needed_more"] == more


def test_a_failed_request_counts_beyond_on_stored_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ttfts: list[float | None] = [100.0] * 400
    for i in (30, 130, 230, 330, 390):
        ttfts[i] = None
    r = evaluate("ttft.p99 <= 500ms", _stored(tmp_path, ttfts))
    assert (r.n, r.exceedances) == (400, 5.0) and r.value.n == 395  # the percentile is of the successful ones
    assert "5 of 400 requests above 500 ms, 5 of them failed (a failed request counts as beyond the threshold)" in r.message
    assert r.verdict is SLOVerdict.INCONCLUSIVE


def test_stop_condition_settles_at_its_looks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The runner's interface: at a look with requests in flight no PASS yet; complete, PASS; the final
    verdict is the look's, on its requests."""
    ttfts: list[float | None] = [100.0] * 500
    run = _stored(tmp_path, ttfts)
    stop = StopCondition(["ttft.p99 <= 500ms", "success_rate >= 90%"], planned=10_000)
    assert stop.looks[:2] == (50, 100) and 477 in stop.looks  # success_rate (10 % allowed) looks earlier
    early = stop.should_stop(run, sent=400)  # a look of success_rate only
    assert not early.stop and early.results[0] is None and early.results[1].verdict is SLOVerdict.PASS
    assert stop.settled_at == {1: 400}
    first = stop.should_stop(run, sent=477, in_flight=5)
    assert not first.stop and first.results[0].verdict is SLOVerdict.INCONCLUSIVE
    assert "5 in flight (counted against the verdict)" in first.results[0].message
    decided = stop.should_stop(run, sent=477, in_flight=0)
    assert decided.stop and decided.reason == "decided: every SLO is settled"
    assert [r.verdict for r in decided.results] == [SLOVerdict.PASS, SLOVerdict.PASS]
    assert "[sequential: look 1 of 6 at 477 requests" in decided.results[0].message
    final = stop.final(lambda n: run, sent=500)
    assert final[0].verdict is SLOVerdict.PASS and final[0].confidence == pytest.approx(1 - 0.05 / 6)


def test_stop_condition_fails_and_keeps_to_the_plan_without_a_bound(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ttfts: list[float | None] = [900.0 if i % 10 == 0 else 100.0 for i in range(477)]  # 10 % beyond
    run = _stored(tmp_path, ttfts)
    stop = StopCondition(["ttft.p99 <= 500ms"], planned=10_000)
    d = stop.should_stop(run, sent=477)
    assert d.stop and d.results[0].verdict is SLOVerdict.FAIL
    assert stop.should_stop(run, sent=123).results == (d.results[0],)  # settled: not judged again
    keep = StopCondition(["ttft.p99 <= 500ms", "output_throughput >= 1 tok/s"], planned=10_000)
    d = keep.should_stop(run, sent=477)
    assert not d.stop and "output_throughput" in d.reason and keep.unsupported == [parse_slo("output_throughput >= 1 tok/s")]


def test_strict_sampling_does_not_settle_a_pass_below_the_sample_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--llm-strict-sampling with stopping: a P99 PASS at 477 requests (< 1000, §5.1.4.3) is not settled (the
    run goes on to the rule); a FAIL is; the final verdict of a run that ended below the rule is FAIL."""
    run = _stored(tmp_path, [100.0] * 477)
    stop = StopCondition(["ttft.p99 <= 500ms"], planned=10_000, strict=True)
    d = stop.should_stop(run, sent=477)
    assert not d.stop and d.results[0].verdict is SLOVerdict.PASS and stop.settled_at == {}
    assert stop.final(lambda n: run, sent=477)[0].verdict is SLOVerdict.FAIL
    assert "[strict sampling" in stop.final(lambda n: run, sent=477)[0].message
    lax = StopCondition(["ttft.p99 <= 500ms"], planned=10_000)
    assert lax.should_stop(run, sent=477).stop


# ------------------------------------------------------------------------------ drift (issue 47)


def test_the_halves_test_against_hand_computed_fisher_values() -> None:
    """Fisher's exact one-sided p of the halves: 0 of 250 then 6 of 250 beyond: C(250,6)/C(500,6) summed
    over the tables at least as extreme = P(all 6 in the second half) = C(250,6)/C(500,6) ~ 0.0151."""
    from pytest_llmbench.measure.stats.drift import halves_drift

    x = np.zeros(500)
    x[[260, 300, 340, 380, 420, 460]] = 1
    d = halves_drift(x, "PASS")
    assert (d.n1, d.k1, d.n2, d.k2) == (250, 0, 250, 6)
    assert d.share_p == pytest.approx(math.comb(250, 6) / math.comb(500, 6), rel=1e-9) and d.drifting
    assert halves_drift(x, "FAIL").share_p == pytest.approx(1.0) and not halves_drift(x, "FAIL").drifting
    even = np.zeros(500)
    even[[10, 100, 200, 300, 400, 490]] = 1  # 3 and 3: no drift either way
    assert not halves_drift(even, "PASS").drifting and not halves_drift(even, "FAIL").drifting
    assert halves_drift(np.full(10, 0.5), "PASS") is None  # a requests-share column: not a 0/1 share


def test_the_value_trend_counts_only_when_its_projection_crosses_the_threshold() -> None:
    from pytest_llmbench.measure.stats.drift import halves_drift

    x = np.zeros(400)
    rising = 0.1 + 0.001 * np.arange(400)  # 100 ms rising 1 ms per request: the halves' medians 200 ms apart
    d = halves_drift(x, "PASS", values=rising, percentile=0.497, threshold=0.5, remaining=600)
    assert d.shift == pytest.approx(0.2) and d.shift_p < 1e-6
    assert d.projected == pytest.approx(0.497 + 0.2 * 600 / 200) and d.trend_drifting and d.drifting
    loose = halves_drift(x, "PASS", values=rising, percentile=0.497, threshold=10.0, remaining=600)
    assert not loose.drifting  # a trend that stays far below a loose threshold by the plan's end
    assert not halves_drift(x, "PASS", values=rising[::-1], percentile=0.497, threshold=0.5, remaining=600).drifting


def _first_n(tmp_path, ttfts):  # type: ignore[no-untyped-def]
    """The metrics of the first n sent, read from stored records (as the runner gives a look)."""
    cache: dict[int, object] = {}

    def first(n: int):  # type: ignore[no-untyped-def]
        if n not in cache:
            cache[n] = _stored(tmp_path / f"first{n}", ttfts[:n])
        return cache[n]
    return first


def test_a_drifting_run_is_not_stopped_and_its_final_verdict_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 47 (h): early requests fastest. TTFT rises 0.5 ms per request from 100 ms; P99 <= 500 ms on a
    plan of 4,000. The first look (459 requests, none beyond) is a PASS at its bound, which main stopped on;
    the halves' medians lie ~115 ms apart and the trend reaches the threshold long before the plan's end, so
    the look is held back; the run goes on and FAILs at its next look. Stored records, no wall clock."""
    ttfts: list[float | None] = [100.0 + 0.5 * i for i in range(1000)]
    stop = StopCondition(["ttft.p99 <= 500ms"], planned=4000)
    first = _first_n(tmp_path / "drift", ttfts)
    d1 = stop.should_stop(first(459), sent=459)
    r = d1.results[0]
    assert not d1.stop and r.verdict is SLOVerdict.PASS and stop.settled_at == {}
    assert "drift held back ttft.p99 <= 500ms" in d1.reason and "[drift against PASS: first half 0 of 229" in r.message
    assert "median worse by" in r.message and "not settled at this look, the run goes on]" in r.message
    d2 = stop.should_stop(first(918), sent=918)
    assert d2.stop and d2.results[0].verdict is SLOVerdict.FAIL  # the later requests cross 500 ms
    assert stop.drift and stop.drift[0][0][0] == 459
    # the same run without the trend stops at its first look
    flat = StopCondition(["ttft.p99 <= 500ms"], planned=4000)
    same = _first_n(tmp_path / "flat", [100.0 + (i * 37 % 200) for i in range(459)])
    assert flat.should_stop(same(459), sent=459).stop and not flat.drift


def test_a_verdict_held_back_by_drift_says_so_when_it_settles(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Held back at its first look (rising TTFT), then the SUT recovers (100 ms flat): the next look settles
    a PASS, and the final verdict names the look held back and the halves it settled on."""
    ttfts: list[float | None] = [100.0 + 0.5 * i if i < 459 else 100.0 for i in range(918)]
    stop = StopCondition(["ttft.p99 <= 500ms"], planned=4000)
    first = _first_n(tmp_path, ttfts)
    assert not stop.should_stop(first(459), sent=459).stop
    assert stop.should_stop(first(918), sent=918).stop and stop.settled_at == {0: 918}
    final = stop.final(first, sent=918)[0]
    assert final.verdict is SLOVerdict.PASS
    assert "[drift: not stopped at the look(s) at 459 requests" in final.message
    assert "over the run: first half 0 of 459" in final.message and "still drifting" not in final.message


def test_each_look_keeps_both_bounds_and_the_report_draws_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 47 (g): the bound narrowing against the limit, look by look (StopCondition.trace ->
    run extra look_trace -> report/looks.py). 2 beyond 500 ms of the first 918: INCONCLUSIVE at 459 (one
    beyond), PASS at 918."""
    import re

    from pytest_llmbench.measure.stats.bounds import share_bounds
    from pytest_llmbench.report.looks import look_figures

    ttfts: list[float | None] = [100.0] * 918
    ttfts[100], ttfts[700] = 900.0, 900.0
    stop = StopCondition(["ttft.p99 <= 500ms"], planned=4000)
    first = _first_n(tmp_path, ttfts)
    assert not stop.should_stop(first(459), sent=459).stop and stop.should_stop(first(918), sent=918).stop
    pts = stop.trace[0]
    assert [(p["look"], p["exceedances"], p["verdict"]) for p in pts] == [(459, 1.0, "INCONCLUSIVE"), (918, 2.0, "PASS")]
    c = 1 - 0.05 / 5
    assert (pts[1]["lower"], pts[1]["upper"]) == pytest.approx(share_bounds(2, 918, c))
    assert pts[0]["limit"] == pytest.approx(0.01)
    assert pts[0]["upper"] > pts[0]["limit"] > pts[1]["upper"]  # the band narrowed below the limit
    result = {"runs": [{"label": "measure", "extra": {"stopped": "decided", "look_trace": [
                           {"slo": "ttft.p99 <= 500ms", "points": pts, "run_stopped_at": 918}]}},
                       {"label": "other", "extra": {}}]}
    (fig,) = look_figures(result)
    assert 'data-kind="slo-looks"' in fig.svg and 'data-label="limit 1%"' in fig.svg
    assert re.findall(r'data-verdict="(\w+)"', fig.svg) == ["INCONCLUSIVE", "PASS"]
    assert 'data-label="stopped at 918"' in fig.svg and "stopped at 918" in fig.caption
    assert "Last look: PASS at 918 requests, 2 beyond" in fig.caption
