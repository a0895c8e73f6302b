"""User-experience metrics beyond the draft: Etalon's fluidity-index and smooth goodput.

* **fluidity-index** (Agrawal et al., *Etalon*, §4.1, Algorithm 1): every token gets a deadline
  (prefill deadline ``D_p`` for the first, decode deadline ``D_d`` for each next one); time a
  token arrives early is carried forward as slack; a late token counts
  ``(t - slack - D) // D_d + 1`` missed deadlines and resets the slack (the deadlines restart
  from the late token). ``fluidity-index = met / (met + missed)``. ``D_p`` is a function of the
  prompt length (:class:`PrefillDeadline`: a non-negative quadratic fit of measured TTFTs plus a
  scheduling slack). **fluid token generation rate** = 1 / the smallest ``D_d`` for which 99%
  of requests have fluidity-index >= 0.9.
* **user idle latency** (Wang et al., *Revisiting SLO and Goodput Metrics in LLM Serving*, eq. 4
  and 6): deadlines ``d_i = A + i·V`` (``A`` a TTFT allowance, ``V`` seconds per token from the
  reader's speed), ``l_r = max_i(t_i - d_i)`` clipped at 0. **smooth goodput** (eq. 7-8)
  ``= Σ_r (n_r - α·f(l_r)) / T``.

Token times are client-side arrival times (what the user sees): every token of a chunk gets
the chunk's arrival time (§4.6.3 option B), starting at the first content token. All
functions take a :class:`TokenTimes` (one flat array with offsets), vectorised with numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_DECODE_DEADLINE",
    "DEFAULT_READING_SPEED",
    "DEFAULT_SCHEDULING_SLACK",
    "DEFAULT_TTFT_ALLOWANCE",
    "DEFINITIONS",
    "FluidRate",
    "PrefillDeadline",
    "TokenTimes",
    "fluid_token_generation_rate",
    "fluidity_index",
    "fluidity_index_reference",
    "idle_penalty",
    "output_delay_trick",
    "smooth_goodput",
    "token_weighted_goodput",
    "user_idle_latency",
]

#: Etalon's strict decode target for interactive chat (25 ms; 50 ms "medium", 100 ms "relaxed").
DEFAULT_DECODE_DEADLINE = 0.025
#: Scheduling slack SD added to the fitted prefill time. Etalon picks it empirically and gives
#: no number; this default is ours and is declared in the report.
DEFAULT_SCHEDULING_SLACK = 0.05
#: Smooth-goodput paper, §5.1 experiments: "α = 5 ... information consumption speed of 20
#: tokens per second" (its §5.2 also uses 5 tok/s with α = 10).
DEFAULT_READING_SPEED = 20.0
DEFAULT_ALPHA = 5.0
#: The paper's eq. (4) has no TTFT allowance (d_i = V·i): the wait for the first token is idle.
DEFAULT_TTFT_ALLOWANCE = 0.0

DEFINITIONS: dict[str, str] = {
    "fluidity": "Etalon Algorithm 1 per request on client token arrival times (option B, "
    "from the first content token): D_p for the first token, D_d for each next one, early "
    "time carried as slack, a late token counts (t - slack - D)//D_d + 1 misses and resets "
    "slack; index = met / (met + missed)",
    "prefill_deadline": "D_p(P) = c0 + c1·P + c2·P² (non-negative least squares on measured "
    "TTFT vs prompt tokens) + scheduling slack",
    "fluid_token_rate": "1 / the smallest D_d (bisection in log space, rel. tol. 1e-3) for "
    "which >= 99% of requests (failed requests count as not fluid) have fluidity-index >= 0.9",
    "user_idle_latency": "max over tokens of (t_i - d_i), d_i = A + i/V (i = 1..n, times from "
    "submission), clipped at 0; an incomplete or empty response adds a virtual token n+1 at "
    "its end time (the user waited until then)",
    "smooth_goodput": "Σ_r (n_r - α·f(l_r)) / T over completed and failed requests (failed: "
    "n_r = 0), T = first submission to last response, f(l) = max(l, 0) in seconds (the "
    "paper gives no closed form for f)",
}


# --------------------------------------------------------------------------------------------
# token times
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenTimes:
    """Per-request token arrival times, flattened: request ``r`` owns
    ``times_ns[offsets[r]:offsets[r+1]]``; ``start_ns[r]`` is its submission time."""

    times_ns: np.ndarray  # int64
    offsets: np.ndarray  # int64, n_requests + 1
    start_ns: np.ndarray  # int64, n_requests

    def __post_init__(self) -> None:
        if self.offsets.ndim != 1 or self.offsets.size != self.start_ns.size + 1:
            raise ValueError("offsets must have one entry more than start_ns")
        if self.offsets[0] != 0 or self.offsets[-1] != self.times_ns.size or (np.diff(self.offsets) < 0).any():
            raise ValueError("offsets must start at 0, be non-decreasing and end at len(times_ns)")

    @classmethod
    def from_lists(cls, times_ns: Sequence[Sequence[int]], start_ns: Sequence[int]) -> TokenTimes:
        if len(times_ns) != len(start_ns):
            raise ValueError(f"{len(times_ns)} token lists but {len(start_ns)} start times")
        counts = np.fromiter((len(t) for t in times_ns), dtype=np.int64, count=len(times_ns))
        offsets = np.zeros(len(times_ns) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = np.fromiter((v for t in times_ns for v in t), dtype=np.int64, count=int(offsets[-1]))
        return cls(flat, offsets, np.asarray(start_ns, dtype=np.int64))

    @property
    def n_requests(self) -> int:
        return int(self.start_ns.size)

    def select(self, keep: np.ndarray) -> TokenTimes:
        """The token times of the requests where ``keep`` (one bool per request) is True."""
        if keep.all():
            return self
        counts = self.counts
        offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
        np.cumsum(counts[keep], out=offsets[1:])
        return TokenTimes(self.times_ns[np.repeat(keep, counts)], offsets, self.start_ns[keep])

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def owner(self) -> np.ndarray:
        """Request index of every token."""
        return np.repeat(np.arange(self.n_requests), self.counts)


# --------------------------------------------------------------------------------------------
# fluidity-index (Etalon)
# --------------------------------------------------------------------------------------------


def fluidity_index_reference(inter_token_times: Sequence[float], prefill_deadline: float,
                             decode_deadline: float) -> float:
    """Etalon Algorithm 1, line by line (one request; ``T[0]`` is the TTFT). Pure Python.

    Units are free (seconds or integer ns) but must agree. Kept as the readable reference
    that :func:`fluidity_index` is tested against.
    """
    if decode_deadline <= 0:
        raise ValueError("decode deadline D_d must be > 0")
    total = missed = 0
    slack = 0
    for i, t in enumerate(inter_token_times):
        d = prefill_deadline if i == 0 else decode_deadline
        if t <= d + slack:
            slack = slack + d - t
            total += 1
        else:
            misses = (t - slack - d) // decode_deadline + 1
            missed += misses
            total += misses
            slack = 0
    return (total - missed) / total if total else math.nan


def _to_ns(seconds: ArrayLike) -> np.ndarray:
    return np.rint(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


def fluidity_index(tokens: TokenTimes, prefill_deadline: ArrayLike | float,
                   decode_deadline: float) -> np.ndarray:
    """Fluidity-index of every request (NaN for a request without tokens), vectorised.

    ``prefill_deadline`` (seconds) is one value or one per request; ``decode_deadline`` in
    seconds. Computed in integer ns: the slack recursion ``s_i = max(0, s_{i-1} + D_i - T_i)``
    has the closed form ``s_i = S_i - min(0, min_{j<=i} S_j)`` with ``S`` the running sum of
    ``D - T``, so a segmented running minimum replaces the loop.
    """
    if not decode_deadline > 0:
        raise ValueError(f"decode deadline D_d must be > 0 s, got {decode_deadline}")
    n = tokens.n_requests
    out = np.full(n, np.nan)
    counts = tokens.counts
    has = counts > 0
    if not has.any():
        return out
    dp = np.broadcast_to(_to_ns(prefill_deadline), (n,))
    dd = max(int(_to_ns(decode_deadline)), 1)
    times = tokens.times_ns
    total = times.size
    seg_counts = counts[has]
    starts = tokens.offsets[:-1][has]
    req = np.flatnonzero(has)
    # x_i = D_i - T_i: deadline minus inter-token time (T_0 = TTFT, D_0 = D_p)
    x = np.empty(total, dtype=np.int64)
    x[0] = 0
    np.subtract(times[:-1], times[1:], out=x[1:])
    x[starts] = tokens.start_ns[req] - times[starts]
    if (x > 0).any():
        raise ValueError("token times must be non-decreasing and not before submission")
    x += dd
    x[starts] += dp[req] - dd
    s_local = np.cumsum(x)
    s_local -= np.repeat(s_local[starts] - x[starts], seg_counts)
    span = int(s_local.max()) - min(int(s_local.min()), 0) + 1
    if span * (req.size + 1) < 2**62:
        shift = np.repeat(np.arange(req.size, dtype=np.int64) * span, seg_counts)
        runmin = np.minimum.accumulate(s_local - shift)
        runmin += shift
    else:  # pathological ranges: per-request running minimum
        runmin = np.empty_like(s_local)
        ends = np.append(starts[1:], total)
        for a, b in zip(starts, ends):
            runmin[a:b] = np.minimum.accumulate(s_local[a:b])
    # slack after token i = s_i - min(0, running min); before token i = after token i-1
    np.minimum(runmin, 0, out=runmin)
    slack_before = np.empty_like(s_local)
    np.subtract(s_local[:-1], runmin[:-1], out=slack_before[1:])
    slack_before[starts] = 0
    slack_before += x  # slack before + D_i - T_i: negative means the deadline was missed
    late = np.flatnonzero(slack_before < 0)
    seg_of_late = np.searchsorted(starts, late, side="right") - 1
    misses = (-slack_before[late]) // dd + 1
    n_late = np.bincount(seg_of_late, minlength=req.size)
    met = (seg_counts - n_late).astype(np.float64)
    missed = np.bincount(seg_of_late, weights=misses.astype(np.float64), minlength=req.size)
    out[req] = met / (met + missed)
    return out


@dataclass(frozen=True)
class PrefillDeadline:
    """``D_p(P) = c0 + c1·P + c2·P² + slack`` seconds for a prompt of ``P`` tokens (Etalon §4.1)."""

    coefficients: tuple[float, ...]
    slack: float = DEFAULT_SCHEDULING_SLACK
    source: str = ""

    def __call__(self, prompt_tokens: ArrayLike) -> np.ndarray:
        p = np.asarray(prompt_tokens, dtype=np.float64)
        return np.polynomial.polynomial.polyval(p, np.asarray(self.coefficients)) + self.slack

    @classmethod
    def constant(cls, seconds: float, *, slack: float = 0.0) -> PrefillDeadline:
        return cls((float(seconds),), slack, "constant")

    @classmethod
    def fit(cls, prompt_tokens: ArrayLike, ttft: ArrayLike, *,
            slack: float = DEFAULT_SCHEDULING_SLACK, degree: int = 2,
            source: str = "fit") -> PrefillDeadline:
        """Non-negative least-squares polynomial fit of TTFT (s) on prompt length (tokens).

        Etalon fits TTFTs profiled in isolation; fitting a loaded run's TTFTs gives a laxer
        ``D_p`` (queueing included) and is declared through ``source``.
        """
        from scipy.optimize import nnls

        p = np.asarray(prompt_tokens, dtype=np.float64).ravel()
        y = np.asarray(ttft, dtype=np.float64).ravel()
        if p.size != y.size:
            raise ValueError(f"{p.size} prompt lengths but {y.size} TTFTs")
        keep = np.isfinite(p) & np.isfinite(y)
        p, y = p[keep], y[keep]
        if y.size == 0:
            raise ValueError("cannot fit a prefill deadline without any measured TTFT")
        deg = min(degree, max(np.unique(p).size - 1, 0))
        scale = max(float(p.max()), 1.0)
        a = np.vander(p / scale, deg + 1, increasing=True)
        coef, _ = nnls(a, y)
        coef = coef / scale ** np.arange(deg + 1)
        return cls(tuple(float(c) for c in coef), float(slack), source)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FluidRate:
    """Fluid token generation rate (Etalon §4.2): 1 / minimal decode deadline meeting the SLO."""

    rate: float  # tokens/s; NaN when no D_d up to ``hi`` meets the target
    decode_deadline: float  # seconds
    min_fluidity: float
    request_fraction: float
    n: int  # requests in the denominator (failed included)
    method: str = DEFINITIONS["fluid_token_rate"]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("rate", "decode_deadline"):
            if not math.isfinite(d[k]):
                d[k] = None
        return d


def token_weighted_goodput(n_tokens: ArrayLike, met: ArrayLike, duration: float) -> float:
    """Smooth-goodput paper eq. 5: ``Σ_r 1(∀i t_i <= d_i)·n_r / T`` tokens/s."""
    n = np.asarray(n_tokens, dtype=np.float64)
    m = np.asarray(met, dtype=bool)
    if n.shape != m.shape:
        raise ValueError(f"n_tokens {n.shape} and met {m.shape} must have the same shape")
    if not duration > 0:
        raise ValueError(f"duration must be > 0 s, got {duration}")
    return float(np.sum(np.where(m, n, 0.0)) / duration)


def fluid_token_generation_rate(tokens: TokenTimes, prefill_deadline: ArrayLike | float, *,
                                failed: int = 0, min_fluidity: float = 0.9,
                                request_fraction: float = 0.99, lo: float = 1e-5,
                                hi: float = 60.0, rel_tol: float = 1e-3) -> FluidRate:
    """Smallest ``D_d`` with >= ``request_fraction`` of requests at fluidity >= ``min_fluidity``.

    ``tokens``: a :class:`TokenTimes`, or an object whose ``blocks()`` yields ``(TokenTimes, slice)``
    pairs (the token times of consecutive requests and their positions), counted block by block.
    Requests without tokens and ``failed`` requests count in the denominator as not fluid.
    Bisection in log space assumes the fraction is non-decreasing in ``D_d`` (a later deadline
    never turns a met deadline into a miss).
    """
    denom = tokens.n_requests + int(failed)
    if denom == 0:
        raise ValueError("no requests to compute a fluid token generation rate from")
    blocks = getattr(tokens, "blocks", None)  # a run's token times made block by block (summary.RunTokens)
    dp = np.asarray(prefill_deadline, dtype=np.float64)

    def fraction(dd: float) -> float:
        if blocks is None:
            fi = fluidity_index(tokens, prefill_deadline, dd)
            return float(np.count_nonzero(fi >= min_fluidity)) / denom
        met = 0
        for part, rows in blocks():
            fi = fluidity_index(part, dp if dp.ndim == 0 else dp[rows], dd)
            met += int(np.count_nonzero(fi >= min_fluidity))
        return float(met) / denom

    if fraction(hi) < request_fraction:
        return FluidRate(math.nan, math.nan, min_fluidity, request_fraction, denom)
    if fraction(lo) >= request_fraction:
        return FluidRate(1.0 / lo, lo, min_fluidity, request_fraction, denom)
    a, b = math.log(lo), math.log(hi)  # fraction(a) fails, fraction(b) passes
    while b - a > rel_tol:
        mid = 0.5 * (a + b)
        if fraction(math.exp(mid)) >= request_fraction:
            b = mid
        else:
            a = mid
    dd = math.exp(b)
    return FluidRate(1.0 / dd, dd, min_fluidity, request_fraction, denom)


# --------------------------------------------------------------------------------------------
# user idle latency and smooth goodput
# --------------------------------------------------------------------------------------------


def user_idle_latency(tokens: TokenTimes, *, reading_speed: float = DEFAULT_READING_SPEED,
                      ttft_allowance: float = DEFAULT_TTFT_ALLOWANCE,
                      end_ns: ArrayLike | None = None,
                      complete: ArrayLike | None = None) -> np.ndarray:
    """Per request ``max(0, max_i(t_i - d_i))`` seconds with ``d_i = A + i/V`` (i from 1).

    ``end_ns``/``complete``: a request that is not complete, or has no tokens, also gets a
    virtual token ``n+1`` at its end time (NaN when no end time is known).
    """
    if not reading_speed > 0:
        raise ValueError(f"reading speed must be > 0 tokens/s, got {reading_speed}")
    v = 1.0 / reading_speed
    n = tokens.n_requests
    counts = tokens.counts
    out = np.full(n, -np.inf)
    if tokens.times_ns.size:
        owner = tokens.owner()
        pos = np.arange(tokens.times_ns.size) - np.repeat(tokens.offsets[:-1], counts) + 1
        late = (tokens.times_ns - tokens.start_ns[owner]) / 1e9 - (ttft_allowance + pos * v)
        has = counts > 0
        out[has] = np.maximum.reduceat(late, tokens.offsets[:-1][has])
    comp = np.ones(n, dtype=bool) if complete is None else np.asarray(complete, dtype=bool)
    virtual = ~comp | (counts == 0)
    if virtual.any():
        if end_ns is None:
            out[virtual & (counts == 0)] = np.nan
        else:
            end = np.asarray(end_ns, dtype=np.float64)
            extra = (end - tokens.start_ns) / 1e9 - (ttft_allowance + (counts + 1) * v)
            out = np.where(virtual, np.fmax(out, extra), out)
    return np.where(np.isnan(out), np.nan, np.maximum(out, 0.0))


def idle_penalty(idle_latency: np.ndarray) -> np.ndarray:
    """Default ``f``: idle seconds, ``max(l, 0)``."""
    return np.maximum(idle_latency, 0.0)


def smooth_goodput(n_tokens: ArrayLike, idle_latency: ArrayLike, duration: float, *,
                   alpha: float = DEFAULT_ALPHA,
                   f: Callable[[np.ndarray], np.ndarray] = idle_penalty) -> float:
    """``Σ (n_r - α·f(l_r)) / T`` (smooth-goodput paper eq. 7-8), tokens per second."""
    n = np.asarray(n_tokens, dtype=np.float64)
    l = np.asarray(idle_latency, dtype=np.float64)
    if n.shape != l.shape:
        raise ValueError("n_tokens and idle_latency must have the same shape")
    if not duration > 0:
        raise ValueError(f"duration must be > 0 s, got {duration}")
    keep = ~np.isnan(l)
    return float(np.sum(n[keep] - alpha * f(l[keep])) / duration)


def output_delay_trick(token_times: ArrayLike, pace: float) -> np.ndarray:
    """The smooth-goodput paper's output-delay trick (§3.4): a buffer releases tokens no faster
    than one per ``pace`` seconds and never before they exist: ``r_i = max(t_i, r_{i-1} + pace)``.
    """
    t = np.asarray(token_times, dtype=np.float64)
    i = np.arange(t.size)
    return i * pace + np.maximum.accumulate(t - i * pace)
