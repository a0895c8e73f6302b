"""experience.py: Etalon fluidity-index, fluid token rate, user idle latency, smooth goodput."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.measure import experience as ux
from pytest_llmbench.measure.experience import PrefillDeadline, TokenTimes

MS = 1_000_000


def tokens_from_gaps(ttft_ms: float, gaps_ms: list[float], start_ms: float = 0.0) -> TokenTimes:
    t = start_ms + ttft_ms
    times = [t]
    for g in gaps_ms:
        t += g
        times.append(t)
    return TokenTimes.from_lists([[int(round(v * MS)) for v in times]], [int(start_ms * MS)])


# ------------------------------------------------------------------------------ fluidity-index


def test_algorithm_1_by_hand() -> None:
    # D_p = 100, D_d = 10; T = [90, 5, 30, 10, 10]
    #  t0 = 90 <= 100       met, slack 10
    #  t1 = 5  <= 10 + 10   met, slack 15
    #  t2 = 30 >  10 + 15   miss: (30 - 15 - 10) // 10 + 1 = 1 miss, slack 0
    #  t3 = 10 <= 10        met, slack 0;  t4 met
    # index = 4 met / (4 + 1) = 0.8
    assert ux.fluidity_index_reference([90, 5, 30, 10, 10], 100, 10) == pytest.approx(0.8)
    tt = tokens_from_gaps(90, [5, 30, 10, 10])
    assert ux.fluidity_index(tt, 0.100, 0.010) == pytest.approx([0.8])
    # one 100 ms stall after a 50 ms head start: 100 > 10 + 50 -> (100 - 50 - 10)//10 + 1 = 5
    # misses: 1 met / (1 + 5) — one stall counts several deadlines, not one per later token
    assert ux.fluidity_index_reference([50, 100], 100, 10) == pytest.approx(1 / 6)
    assert ux.fluidity_index(tokens_from_gaps(50, [100, 10, 10]), 0.1, 0.01) == pytest.approx([3 / 8])
    # late first token: TTFT 250 vs D_p 100: (250 - 100)//10 + 1 = 16 misses, then reset
    assert ux.fluidity_index(tokens_from_gaps(250, [10]), 0.1, 0.01) == pytest.approx([1 / 17])


def test_slack_carries_early_tokens() -> None:
    # Etalon's speculative-decoding example: 3 tokens at once, then a 3x gap: all deadlines met
    assert ux.fluidity_index(tokens_from_gaps(10, [0, 0, 30]), 0.010, 0.010) == pytest.approx([1.0])
    # the same gaps one by one (10, 10, 10, 30) miss once
    assert ux.fluidity_index(tokens_from_gaps(10, [10, 10, 30]), 0.010, 0.010)[0] < 1.0


@settings(deadline=None, max_examples=60)
@given(st.lists(st.lists(st.integers(0, 200), min_size=0, max_size=12), min_size=1, max_size=6),
       st.integers(1, 300), st.integers(1, 60))
def test_vectorised_equals_algorithm_1(gap_lists: list[list[int]], dp: int, dd: int) -> None:
    times, starts, expected = [], [], []
    start = 0
    for gaps in gap_lists:
        start += 17
        ts, t = [], start
        for g in gaps:
            t += g
            ts.append(t * MS)
        times.append(ts)
        starts.append(start * MS)
        inter = ([ts[0] - start * MS] + [b - a for a, b in zip(ts, ts[1:])]) if ts else []
        expected.append(ux.fluidity_index_reference(inter, dp * MS, dd * MS) if ts else math.nan)
    got = ux.fluidity_index(TokenTimes.from_lists(times, starts), dp / 1000, dd / 1000)
    assert got == pytest.approx(expected, nan_ok=True)
    fin = got[~np.isnan(got)]
    assert ((fin >= 0) & (fin <= 1)).all()


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 500), st.integers(1, 100), st.lists(st.floats(0, 1), min_size=0, max_size=30),
       st.floats(0, 1))
def test_stream_meeting_every_deadline_scores_one(dp: int, dd: int, fractions: list[float], f0: float) -> None:
    # TTFT <= D_p and every gap <= D_d: every deadline is met
    tt = tokens_from_gaps(f0 * dp, [f * dd for f in fractions])
    assert ux.fluidity_index(tt, dp / 1000, dd / 1000) == pytest.approx([1.0])


def test_prefill_deadline_fit() -> None:
    p = np.array([100, 500, 1000, 2000, 4000, 8000], dtype=float)
    y = 0.02 + 1e-5 * p + 1e-9 * p ** 2
    dp = PrefillDeadline.fit(p, y, slack=0.05)
    assert dp.coefficients == pytest.approx((0.02, 1e-5, 1e-9), rel=1e-6)
    assert dp(1000) == pytest.approx(0.02 + 0.01 + 0.001 + 0.05)
    assert PrefillDeadline.constant(0.3)(np.array([1, 10])) == pytest.approx([0.3, 0.3])
    with pytest.raises(ValueError, match="TTFT"):
        PrefillDeadline.fit([], [])


def test_fluid_token_generation_rate() -> None:
    # 100 requests, TTFT 100 ms, then 20 tokens 20 ms apart; D_p = TTFT exactly (no slack carried)
    lists = [[(100 + 20 * k) * MS for k in range(21)] for _ in range(100)]
    tt = TokenTimes.from_lists(lists, [0] * 100)
    r = ux.fluid_token_generation_rate(tt, 0.100)
    # below D_d = 20 ms every decode token misses -> index 1/21; from 20 ms on all are met
    assert r.decode_deadline == pytest.approx(0.020, rel=2e-3)
    assert r.rate == pytest.approx(50.0, rel=2e-3)
    # 2 failed requests of 102: at most 98% can be fluid -> no rate meets the 99% target
    assert math.isnan(ux.fluid_token_generation_rate(tt, 0.100, failed=2).rate)


# ------------------------------------------------------------------- idle latency, smooth goodput


def test_user_idle_latency_by_hand() -> None:
    # tokens at 0.30, 0.35, 0.40, 1.00 s; V = 0.1 s/token (10 tok/s), allowance 0.2 s:
    # deadlines 0.3, 0.4, 0.5, 0.6 -> lateness 0, -0.05, -0.1, 0.4 -> idle 0.4 s
    tt = tokens_from_gaps(300, [50, 50, 600])
    assert ux.user_idle_latency(tt, reading_speed=10, ttft_allowance=0.2) == pytest.approx([0.4])
    # an early stream has no idle time (clipped at 0)
    assert ux.user_idle_latency(tokens_from_gaps(10, [10]), reading_speed=10) == pytest.approx([0.0])
    # incomplete request with one token at 0.1 s that failed at 2.0 s: virtual token 2 due at
    # 0.2 s -> idle 1.8 s
    tt2 = tokens_from_gaps(100, [])
    got = ux.user_idle_latency(tt2, reading_speed=10, end_ns=[2000 * MS], complete=[False])
    assert got == pytest.approx([1.8])


def test_smooth_goodput_by_hand() -> None:
    # two requests: 100 tokens with 0.4 s idle, 50 tokens with 0 idle; alpha 5; T = 10 s
    # (100 - 5 x 0.4 + 50 - 0) / 10 = 14.8 tokens/s
    assert ux.smooth_goodput([100, 50], [0.4, 0.0], 10.0) == pytest.approx(14.8)
    assert ux.smooth_goodput([100], [1.0], 2.0, alpha=10, f=lambda l: l ** 2) == pytest.approx(45.0)
    assert ux.DEFAULT_ALPHA == 5.0 and ux.DEFAULT_READING_SPEED == 20.0


def _max_gap(t: np.ndarray) -> float:
    return float(np.max(np.diff(t)))


def test_output_delay_trick_does_not_improve_idle_latency() -> None:
    # 10 tokens every 10 ms from 0.1 s, a 400 ms stall, then 10 more every 10 ms
    gen = np.concatenate((0.1 + 0.01 * np.arange(10), 0.59 + 0.01 * np.arange(10)))
    held = ux.output_delay_trick(gen, pace=0.05)  # release at most one token per 50 ms
    # the trick "improves" the TBT tail: max gap 400 ms -> 50 ms ...
    assert _max_gap(gen) == pytest.approx(0.4)
    assert _max_gap(held) == pytest.approx(0.05)
    assert (held >= gen - 1e-12).all()

    def idle(t: np.ndarray) -> float:
        tt = TokenTimes.from_lists([np.rint(t * 1e9).astype(np.int64).tolist()], [0])
        return float(ux.user_idle_latency(tt, reading_speed=20)[0])

    # ... but the user is not better off: idle latency 0.1 - 0.05 = 0.05 s before, not lower after
    assert idle(gen) == pytest.approx(0.05)
    assert idle(held) >= idle(gen)


@settings(deadline=None, max_examples=80)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=40), st.integers(1, 200), st.integers(1, 50))
def test_output_delay_never_lowers_idle_latency(gaps: list[int], pace_ms: int, speed: int) -> None:
    gen = np.cumsum(np.array(gaps, dtype=float)) / 1000
    held = ux.output_delay_trick(gen, pace_ms / 1000)

    def idle(t: np.ndarray) -> float:
        tt = TokenTimes.from_lists([np.rint(t * 1e9).astype(np.int64).tolist()], [0])
        return float(ux.user_idle_latency(tt, reading_speed=speed)[0])

    assert idle(held) >= idle(gen) - 1e-9


def test_token_times_validation() -> None:
    with pytest.raises(ValueError, match="offsets"):
        TokenTimes(np.array([1, 2]), np.array([0, 1]), np.array([0]))
    with pytest.raises(ValueError, match="D_d"):
        ux.fluidity_index(tokens_from_gaps(10, []), 0.1, 0.0)
    with pytest.raises(ValueError, match="non-decreasing"):
        ux.fluidity_index(TokenTimes.from_lists([[5, 3]], [0]), 0.1, 0.01)
