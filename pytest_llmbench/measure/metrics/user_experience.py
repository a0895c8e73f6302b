"""What a reader experiences: Etalon's fluidity (§4.2) and the smooth-goodput paper's idle latency and
goodputs (eq. 4-8). Parameters: ``prefill_deadline`` (Etalon D_p; default a fit of this run's TTFTs),
``decode_deadline`` (D_d), ``reading_speed`` (V, tokens/s), ``ttft_allowance`` (A, s) and ``alpha``.
"""

from __future__ import annotations

import math

import numpy as np

from .. import experience as ux
from ..registry import PER_RUN, derived, metric
from ..stats import Estimate
from ._kit import NAN
from .itl import ItlData


@derived
def deadline_model(prefill_deadline: ux.PrefillDeadline | None, isl: np.ndarray, ttft: np.ndarray
                   ) -> ux.PrefillDeadline | None:
    """Etalon's prefill deadline D_p(input length): the one given, else a fit of this run's TTFTs."""
    ttft_ok = ~np.isnan(ttft)
    if prefill_deadline is None and ttft_ok.any():
        return ux.PrefillDeadline.fit(isl[ttft_ok], ttft[ttft_ok], source="non-negative quadratic fit of this run's TTFTs")
    return prefill_deadline


@metric("Fluidity index", "fraction", "higher", section="Etalon §4.2", slo=True, aliases=("fluidity_index",))
def fluidity(itl_data: ItlData, deadline_model: ux.PrefillDeadline | None, isl: np.ndarray, decode_deadline: float,
             ok: np.ndarray, n: int) -> np.ndarray:
    """Etalon fluidity-index: share of token deadlines met per request (Etalon §4.2, D_p from the run's TTFT fit,
    D_d = 1/decode rate)
    """
    fluid = np.full(n, NAN)
    if deadline_model is None:
        return fluid
    dp = deadline_model(isl)
    for tokens, rows in itl_data.tokens.blocks():  # per request: block by block
        fluid[rows] = ux.fluidity_index(tokens, dp[rows], decode_deadline)
    fluid[~ok] = NAN
    return fluid


@metric("User idle latency", "s", "lower", section="smooth goodput paper eq. 4, 6", aliases=("l_r", "idle_latency"),
        slo=True, over="all")
def user_idle_latency(itl_data: ItlData, reading_speed: float, ttft_allowance: float, end_ns: np.ndarray,
                      ok: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """l_r = max_i(t_i - (A + i/V)) clipped at 0: how long a reader at V tokens/s with a TTFT allowance A waits
    beyond the reading pace; failed requests included
    """
    idle = np.empty(ok.size)
    for tokens, rows in itl_data.tokens.blocks():  # per request: block by block
        idle[rows] = ux.user_idle_latency(tokens, reading_speed=reading_speed, ttft_allowance=ttft_allowance,
                                          end_ns=end_ns[rows], complete=ok[rows])
    idle[~(ok | failed)] = NAN
    return idle


@metric("Smooth goodput", "tokens/s", "higher", kind="scalar", section="smooth goodput paper eq. 7-8", slo=True)
def smooth_goodput(ok: np.ndarray, failed: np.ndarray, osl: np.ndarray, user_idle_latency: np.ndarray,
                   duration: float, alpha: float, reading_speed: float, ttft_allowance: float) -> Estimate | None:
    """Σ (n_r - α·f(l_r)) / T: output tokens of judged requests discounted by the user idle latency, over the
    whole run
    """
    judged = ok | failed
    if not (duration > 0 and judged.any()):
        return None
    return Estimate(ux.smooth_goodput(np.where(ok, osl, 0.0)[judged], user_idle_latency[judged], duration, alpha=alpha),
                    int(judged.sum()), "tokens/s", method=f"smooth goodput, alpha={alpha:g}, V={reading_speed:g} "
                    f"tokens/s, TTFT allowance {ttft_allowance:g} s, f(l)=max(l,0)")


@metric("Token-weighted goodput", "tokens/s", "higher", kind="scalar", section="smooth goodput paper eq. 5 "
        "(deadlines eq. 4)", aliases=("goodput_eq5", "token_goodput"), slo=True)
def token_weighted_goodput(ok: np.ndarray, failed: np.ndarray, osl: np.ndarray, user_idle_latency: np.ndarray,
                           duration: float, reading_speed: float, ttft_allowance: float) -> Estimate | None:
    """Σ 1(all deadlines d_i = A + i/V met)·OSL / T over the whole run; failed requests count 0 tokens"""
    judged = ok | failed
    if not (duration > 0 and judged.any()):
        return None
    value = ux.token_weighted_goodput(np.where(ok, np.nan_to_num(osl), 0.0), ok & (user_idle_latency == 0.0), duration)
    return Estimate(value, int(judged.sum()), "tokens/s", method=f"Σ OSL of requests meeting every deadline A + i/V "
                    f"(A = {ttft_allowance:g} s, V = {reading_speed:g} tokens/s) / whole run (smooth goodput paper eq. 5)")


@metric("Fluid token rate", "tokens/s", "higher", kind="scalar", section="Etalon §4.2; "
        "experience.fluid_token_generation_rate", aliases=("fluid_token_generation_rate",), slo=True,
        aggregation=PER_RUN)
def fluid_token_rate(itl_data: ItlData, deadline_model: ux.PrefillDeadline | None, isl: np.ndarray, ok: np.ndarray,
                     failed: np.ndarray) -> Estimate | None:
    """1 / smallest decode deadline D_d with >= 99% of requests (failed ones count as not fluid) at fluidity-index
    >= 0.9
    """
    if deadline_model is None or not ok.any():
        return None
    fr = ux.fluid_token_generation_rate(itl_data.tokens.select(ok), deadline_model(isl[ok]), failed=int(failed.sum()))
    return Estimate(fr.rate, fr.n, "tokens/s", undersampled=not math.isfinite(fr.rate),
                    method=f"{fr.method} (min fluidity {fr.min_fluidity:g}, {fr.request_fraction:.0%} of requests)")
