"""Distribution-free one-sided bounds on a share, and the three-way SLO verdict they give (issue 47).

Whether ``P99 <= X`` holds is a question about a share: with ``q = 0.99`` the true P99 is at most
``X`` exactly when the share of requests beyond ``X`` is at most ``p0 = 1 - q`` (for a lower bound on a
higher-is-better figure, ``P1 >= X`` holds when the share *below* ``X`` is at most ``p0 = q``). Of
``n`` requests ``k`` were beyond, and the bounds below turn ``k`` of ``n`` into a statement about the
true share at a chosen confidence, whatever the latency distribution (only the requests' independence
is assumed; docs/slo-and-compliance.md "Three verdicts" says what bursts do to it).

* :func:`clopper_pearson_upper` / :func:`clopper_pearson_lower`: the exact one-sided binomial bounds
  (method ``"binomial"``);
* :func:`kl_upper` / :func:`kl_lower`: the Chernoff–Hoeffding bounds on the mean of independent
  variables in [0, 1] (method ``"requests-share"``: each request's share of its token gaps beyond
  the threshold; it equals the binomial bound when every share is 0 or 1 and ``k = 0``);
* :func:`share_verdict`: PASS when the upper bound is below ``p0``, FAIL when the lower bound is above
  it, INCONCLUSIVE otherwise (ties go to INCONCLUSIVE);
* :func:`smallest_n` and :func:`needed_more`: how many requests a verdict takes;
* :func:`design_effect`: how much neighbouring requests' dependence (exceedances in bursts, in send
  order) inflates the variance of the count; every bound takes it as ``design_effect`` and is then
  computed on the effective sample ``(k/d, n/d)`` (Kish's effective sample size). With ``d = 1`` the
  bounds are the exact ones above.

Every function accepts scalars; the bounds also accept numpy arrays (vectorised, for simulations).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = [
    "SHARE_METHODS",
    "ShareDecision",
    "SLOVerdict",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "burst_design_effect",
    "design_effect",
    "design_effect_from_sums",
    "kl_lower",
    "kl_upper",
    "needed_more",
    "MAX_DESIGN_EFFECT",
    "share_bounds",
    "share_verdict",
    "smallest_n",
]

ShareMethod = Literal["binomial", "requests-share"]
#: The bounds a share verdict can use (:func:`share_bounds`).
SHARE_METHODS: tuple[str, ...] = ("binomial", "requests-share")


class SLOVerdict(str, enum.Enum):
    """An SLO's verdict: shown to hold, shown not to hold, or neither at the chosen confidence."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"

    def __str__(self) -> str:
        return self.value


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def clopper_pearson_upper(k: Any, n: Any, confidence: float) -> Any:
    """One-sided upper bound ``U`` on a binomial share at ``confidence`` ``c`` (Clopper & Pearson 1934).

    ``U(k, n) = Beta⁻¹(c; k + 1, n - k)`` for ``k < n`` and ``1`` for ``k = n``: the largest ``p`` with
    ``P_p(K <= k) >= 1 - c``, so ``P_p(U < p) <= 1 - c`` for every true share ``p``. For ``k = 0`` it is
    ``1 - (1 - c)^(1/n)``. ``n = 0`` gives 1 (nothing known). Reference: C. J. Clopper, E. S. Pearson,
    Biometrika 26 (1934) 404–413; the beta form: Johnson, Kemp & Kotz, Univariate Discrete
    Distributions, 3rd ed., §3.8.3.
    """
    from scipy.stats import beta

    _check_confidence(confidence)
    k_arr, n_arr = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    inside = k_arr < n_arr
    with np.errstate(invalid="ignore"):
        u = beta.ppf(confidence, k_arr + 1.0, np.where(inside, n_arr - k_arr, 1.0))
    out = np.where(inside, u, 1.0)
    return float(out) if out.ndim == 0 else out


def clopper_pearson_lower(k: Any, n: Any, confidence: float) -> Any:
    """One-sided lower bound ``L`` on a binomial share at ``confidence`` ``c`` (Clopper & Pearson 1934).

    ``L(k, n) = Beta⁻¹(1 - c; k, n - k + 1)`` for ``k > 0`` and ``0`` for ``k = 0``: the smallest ``p``
    with ``P_p(K >= k) >= 1 - c``, so ``P_p(L > p) <= 1 - c``. For ``k = n`` it is ``(1 - c)^(1/n)``.
    Reference as :func:`clopper_pearson_upper`.
    """
    from scipy.stats import beta

    _check_confidence(confidence)
    k_arr, n_arr = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    inside = k_arr > 0
    with np.errstate(invalid="ignore"):
        lo = beta.ppf(1.0 - confidence, np.where(inside, k_arr, 1.0), n_arr - k_arr + 1.0)
    out = np.where(inside, lo, 0.0)
    return float(out) if out.ndim == 0 else out


def _kl(x: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Bernoulli Kullback–Leibler divergence ``kl(x, mu) = x ln(x/mu) + (1-x) ln((1-x)/(1-mu))``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(x > 0, x * np.log(x / mu), 0.0)
        b = np.where(x < 1, (1 - x) * np.log((1 - x) / (1 - mu)), 0.0)
    return a + b


def _kl_bound(mean: Any, n: Any, confidence: float, upper: bool) -> Any:
    _check_confidence(confidence)
    x = np.clip(np.asarray(mean, dtype=np.float64), 0.0, 1.0)
    nn = np.asarray(n, dtype=np.float64)
    x, nn = np.broadcast_arrays(x, nn)
    level = -math.log(1.0 - confidence)
    lo = np.array(x, dtype=np.float64) if upper else np.zeros_like(x)
    hi = np.ones_like(x) if upper else np.array(x, dtype=np.float64)
    for _ in range(64):  # bisection to ~1e-19: the divergence is monotone on each side of x
        mid = (lo + hi) / 2
        inside = nn * _kl(x, mid) <= level
        if upper:
            lo = np.where(inside, mid, lo)
            hi = np.where(inside, hi, mid)
        else:
            hi = np.where(inside, mid, hi)
            lo = np.where(inside, lo, mid)
    out = hi if upper else lo
    out = np.where(nn > 0, out, 1.0 if upper else 0.0)
    return float(out) if out.ndim == 0 else out


def kl_upper(mean: Any, n: Any, confidence: float) -> Any:
    """One-sided upper bound on the mean ``mu`` of ``n`` independent variables in [0, 1] (Chernoff–Hoeffding).

    ``U = max{mu >= x̄ : n·kl(x̄, mu) <= ln(1/(1-c))}`` with ``kl`` the Bernoulli divergence. Valid because
    ``P(X̄ <= x) <= exp(-n·kl(x, mu))`` for ``x < mu`` (Hoeffding 1963, Theorem 1; the variables need not be
    identically distributed, ``mu`` is their mean). Bernoulli variables are the extreme case, so for
    ``x̄ = 0`` it equals the binomial bound ``1 - (1-c)^(1/n)``. Reference: W. Hoeffding, "Probability
    inequalities for sums of bounded random variables", JASA 58 (1963) 13–30, eq. (2.1).
    """
    return _kl_bound(mean, n, confidence, True)


def kl_lower(mean: Any, n: Any, confidence: float) -> Any:
    """One-sided lower bound on the mean of ``n`` independent variables in [0, 1]: the mirror of
    :func:`kl_upper`, ``L = min{mu <= x̄ : n·kl(x̄, mu) <= ln(1/(1-c))}`` (Hoeffding 1963, Theorem 1)."""
    return _kl_bound(mean, n, confidence, False)


def share_bounds(k: Any, n: Any, confidence: float, method: str = "binomial",
                 design_effect: Any = 1.0) -> tuple[Any, Any]:
    """(lower, upper) one-sided bounds on the share at ``confidence`` each: ``k`` of ``n`` beyond
    (``"binomial"``: k an integer count) or ``k`` the sum of ``n`` per-request shares (``"requests-share"``).

    ``design_effect`` ``d >= 1`` (:func:`design_effect`) computes them on the effective sample
    ``(k/d, n/d)``: the count's variance is ``d`` times the independent one's, so the sample carries the
    information of ``n/d`` independent requests (Kish, Survey Sampling, 1965, §8.2). The binomial bounds
    take non-integer arguments through their beta form.
    """
    d = np.maximum(np.asarray(design_effect, dtype=np.float64), 1.0)
    ke = np.asarray(k, dtype=np.float64) / d
    ne = np.asarray(n, dtype=np.float64) / d
    if ke.ndim == 0:
        ke, ne = float(ke), float(ne)
    if method == "binomial":
        return clopper_pearson_lower(ke, ne, confidence), clopper_pearson_upper(ke, ne, confidence)
    if method == "requests-share":
        nn = np.asarray(ne, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(nn > 0, np.asarray(ke, dtype=np.float64) / np.where(nn > 0, nn, 1.0), 0.0)
        if mean.ndim == 0:
            mean = float(mean)
        return kl_lower(mean, ne, confidence), kl_upper(mean, ne, confidence)
    raise ValueError(f"unknown share method {method!r}; one of {SHARE_METHODS}")


#: The largest design effect :func:`design_effect` reports (lag-1 autocorrelation capped at 0.95).
MAX_DESIGN_EFFECT = 39.0


def design_effect_from_sums(n: Any, total: Any, squares: Any, pairs: Any, first: Any, last: Any) -> Any:
    """:func:`design_effect` from running sums (vectorised): ``Σx``, ``Σx²``, ``Σ x_i·x_(i+1)`` and the
    first and last value of ``n`` values in order."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.asarray(total, dtype=np.float64) / n
        num = (np.asarray(pairs, dtype=np.float64) - m * (2 * np.asarray(total, dtype=np.float64)
                                                          - np.asarray(first, dtype=np.float64)
                                                          - np.asarray(last, dtype=np.float64))
               + (n - 1) * m * m)
        den = np.asarray(squares, dtype=np.float64) - n * m * m
        rho = np.where((den > 0) & (n > 2), num / np.where(den > 0, den, 1.0), 0.0)
    rho = np.clip(rho, 0.0, 0.95)
    out = (1 + rho) / (1 - rho)
    return float(out) if out.ndim == 0 else out


def design_effect(values: Any) -> float:
    """Variance inflation of ``Σx`` from the lag-1 autocorrelation of ``values`` in send order: ``d = (1+ρ)/(1-ρ)``.

    ``ρ = Σ_(i<n) (x_i - x̄)(x_(i+1) - x̄) / Σ (x_i - x̄)²``, clipped to [0, 0.95] (a negative one is taken
    as independence: never a narrower bound). For a two-state Markov chain of exceedances (bursts with a mean
    length ``m``), ``ρ`` is its lag-1 correlation and ``d = (1+ρ)/(1-ρ)`` is exactly the variance inflation
    of the count for large ``n``, ``≈ 2m - 1`` for a rare exceedance (Cox & Miller, The Theory of Stochastic
    Processes, 1965, §3.2; the AR(1) variance of a mean). Independent requests give ``d ≈ 1``. A dependence
    that lasts longer than one lag (long bursts of varying length) is under-estimated: see
    docs/slo-and-compliance.md "Three verdicts".
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size < 3:
        return 1.0
    return float(design_effect_from_sums(x.size, x.sum(), float(np.dot(x, x)), float(np.dot(x[:-1], x[1:])),
                                         x[0], x[-1]))


def burst_design_effect(burst_length: float) -> float:
    """The design effect of exceedances in bursts of mean length ``m`` (two-state Markov chain, rare
    exceedances): ``2m - 1`` (1 for independent requests). What a declared burst allowance adds to the
    design effect a run shows (:func:`design_effect`), before it has seen any burst."""
    if burst_length < 1:
        raise ValueError(f"a mean burst length is at least 1 request, got {burst_length}")
    return 2.0 * float(burst_length) - 1.0


def _decide(lower: float, upper: float, p0: float) -> SLOVerdict:
    if upper < p0:
        return SLOVerdict.PASS
    if lower > p0:
        return SLOVerdict.FAIL
    return SLOVerdict.INCONCLUSIVE


@dataclass(frozen=True)
class ShareDecision:
    """The verdict on "the share beyond the threshold is at most ``p0``" from ``exceedances`` of ``n``.

    ``bound`` is the bound that decided (the upper one for PASS, the lower one for FAIL) or, when
    INCONCLUSIVE, the one on the side of the observed share (upper when ``k/n <= p0``). ``needed_more``:
    about how many more requests at the observed share would decide (INCONCLUSIVE only; None when no
    number would: the observed share equals ``p0``, or ``p0`` is 0 or 1).
    """

    verdict: SLOVerdict
    share: float  # observed share k / n (NaN when n = 0)
    lower: float
    upper: float
    bound: float
    p0: float
    n: int
    exceedances: float
    confidence: float
    method: str
    needed_more: int | None = None
    design_effect: float = 1.0


def share_verdict(k: float, n: int, p0: float, confidence: float, *, method: str = "binomial",
                  in_flight: int = 0, design_effect: float = 1.0) -> ShareDecision:
    """Is the share beyond the threshold at most ``p0``? PASS iff ``U < p0``, FAIL iff ``L > p0`` (strict).

    ``k`` requests of ``n`` finished ones were beyond (``method="requests-share"``: ``k`` is the sum of the
    requests' shares). ``in_flight`` requests not yet finished count as beyond for the PASS test
    (``U(k + f, n + f)``) and as within for the FAIL test (``L(k, n + f)``): both bounds are monotone in
    ``k``, so a verdict taken with them stands whatever the in-flight requests turn out to be.
    Tie rule: a bound exactly at ``p0`` decides nothing (INCONCLUSIVE); with a continuous bound this
    has probability zero, and it never raises an error rate (``P_p0(U <= p0) <= 1 - c`` as well).
    ``design_effect``: :func:`share_bounds` (the monotonicity above holds for a fixed one).
    """
    if not 0.0 <= p0 <= 1.0:
        raise ValueError(f"p0 must be in [0, 1], got {p0}")
    if n < 0 or k < 0 or k > n or in_flight < 0:
        raise ValueError(f"need 0 <= k <= n and in_flight >= 0, got k={k}, n={n}, in_flight={in_flight}")
    total = n + in_flight
    d = max(float(design_effect), 1.0)
    _, upper = share_bounds(k + in_flight, total, confidence, method, d)
    lower, _ = share_bounds(k, total, confidence, method, d)
    upper, lower = float(upper), float(lower)
    verdict = _decide(lower, upper, p0)
    share = k / n if n else math.nan
    if verdict is SLOVerdict.PASS:
        bound = upper
    elif verdict is SLOVerdict.FAIL:
        bound = lower
    else:
        bound = lower if n and share > p0 else upper
    more = None
    if verdict is SLOVerdict.INCONCLUSIVE:
        more = needed_more(n, k, p0, confidence, method=method, design_effect=d)  # the in-flight ones will finish
        if more is not None:
            more = max(more - in_flight, 0)
    return ShareDecision(verdict, share, lower, upper, bound, p0, int(n), float(k), confidence, method, more, d)


def smallest_n(k: int, p0: float, confidence: float, design_effect: float = 1.0) -> int:
    """The smallest ``n`` at which ``k`` exceedances still give PASS: ``min{n : U(k, n) < p0}``.

    ``U(k, n)`` falls as ``n`` grows with ``k`` fixed, so a bisection finds it exactly. For ``k = 0`` it is
    ``⌊ln(1-c) / ln(1-p0)⌋ + 1``: 299 for ``p0 = 1%`` at 95 % (473 for one exceedance, 1,693 for ten; at
    99 %: 459, 662 and 2,010). With a design effect ``d`` the bound is ``U(k/d, n/d)`` (about ``d`` times
    as many requests).
    """
    d = max(float(design_effect), 1.0)

    def upper(m: int) -> float:
        return float(share_bounds(k, m, confidence, "binomial", d)[1])

    if not 0.0 < p0 < 1.0:
        raise ValueError(f"p0 must be in (0, 1), got {p0}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    lo, hi = k, max(k + 1, 2)
    while upper(hi) >= p0:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # U(k, lo) >= p0 > U(k, hi)
        mid = (lo + hi) // 2
        if upper(mid) < p0:
            hi = mid
        else:
            lo = mid
    return hi


_NEEDED_CAP = 10**9


def needed_more(n: int, k: float, p0: float, confidence: float, *, method: str = "binomial",
                design_effect: float = 1.0) -> int | None:
    """About how many more requests at the observed share ``k/n`` would decide "share <= p0".

    The smallest ``n' >= n`` at which ``k' = round(k/n · n')`` (``"requests-share"``: ``k' = k/n · n'``) gives
    PASS (observed share below ``p0``) or FAIL (above), found by doubling then bisection on ``n'``; the
    answer is ``n' - n`` (0 when ``n`` already decides). ``k = 0`` is exact: :func:`smallest_n` ``(0, p0)``
    minus ``n``. None when the observed share equals ``p0`` (no count decides) or ``n = 0`` (nothing
    observed: the ``k = 0`` answer is given). The rounding makes the search "about": a few requests either way.
    ``design_effect`` as in :func:`share_bounds` (taken to stay what it is).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 < p0 < 1.0:
        return None  # "no request beyond" (p0 = 0) is never shown to hold; p0 = 1 always holds
    d = max(float(design_effect), 1.0)
    if k == 0:
        return max(smallest_n(0, p0, confidence, d) - n, 0)
    share = k / n
    if share == p0:
        return None
    target = SLOVerdict.PASS if share < p0 else SLOVerdict.FAIL

    def decides(m: int) -> bool:
        km = round(share * m) if method == "binomial" else share * m
        lo, up = share_bounds(km, m, confidence, method, d)
        return _decide(float(lo), float(up), p0) is target

    if decides(n):
        return 0
    lo, hi = n, max(2 * n, n + 1)
    while not decides(hi):
        lo, hi = hi, hi * 2
        if hi > _NEEDED_CAP:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if decides(mid):
            hi = mid
        else:
            lo = mid
    return hi - n
