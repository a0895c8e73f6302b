"""Drift within a run that stops when decided (issue 47): do the later requests of a look lie on the other
side of its verdict than the earlier ones?

A run stopped early judges its first ``n`` requests only. If the SUT drifts (a queue building up, a cache
filling, thermal throttling) the early requests are not a sample of the later ones: on a run whose early
requests are the fastest a stop favours PASS. :func:`halves_drift` splits a look's judged requests in send
order into halves and asks two questions against the verdict (a PASS: is the later half worse? a FAIL: is
it better?):

* **exceedances**: Fisher's exact test, one-sided, on ``[[k2, n2 - k2], [k1, n1 - k1]]`` (Fisher 1935;
  conditional on the total of exceedances: exact for any n and k, conservative for small k), drift when
  its p-value is below :data:`SHARE_ALPHA`;
* **values** (a percentile of a per-request figure): the shift of the median from the first half to the
  second, one-sided Mann–Whitney U (Mann & Whitney 1947), and its projection to the plan's end as a linear
  trend in send order (the halves' centres lie ``n/2`` requests apart: ``q + shift · remaining / (n/2)``
  for the look's percentile ``q``). Drift when the shift is significant (p below :data:`TREND_ALPHA`) *and*
  the projection crosses the threshold: a trend that stays on the verdict's side by the plan's end does
  not matter to it (a warm-up trend far below a loose threshold).

Every look at ``n`` requests of a doubling schedule compares the previous look's requests with the new
ones; the exceedance test alone could not hold back a PASS at the first look, which needs zero
exceedances: the value trend can.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["SHARE_ALPHA", "TREND_ALPHA", "Drift", "halves_drift"]

#: the one-sided level of the exceedance test (Fisher exact)
SHARE_ALPHA = 0.05
#: the one-sided level of the value-shift test (Mann–Whitney U)
TREND_ALPHA = 0.01


@dataclass(frozen=True)
class Drift:
    """The halves of one look (send order) against its verdict (``against``: PASS or FAIL)."""

    against: str
    n1: int
    k1: int
    n2: int
    k2: int
    share_p: float  # Fisher exact one-sided p-value of the exceedances
    shift: float | None = None  # median(second half) - median(first half), in the figure's base unit
    shift_p: float | None = None  # Mann-Whitney U one-sided p-value of the shift
    projected: float | None = None  # the look's percentile moved by the trend to the plan's end
    threshold: float | None = None
    remaining: int = 0  # requests of the plan after the look

    @property
    def share_drifting(self) -> bool:
        return self.share_p < SHARE_ALPHA

    @property
    def trend_drifting(self) -> bool:
        if self.shift_p is None or self.projected is None or self.threshold is None or self.shift_p >= TREND_ALPHA:
            return False
        worse = self.against == "PASS"
        # ``projected`` and ``threshold`` are oriented: larger is worse
        return self.projected > self.threshold if worse else self.projected <= self.threshold

    @property
    def drifting(self) -> bool:
        return self.share_drifting or self.trend_drifting

    def text(self, fmt: Callable[[float], str] = lambda v: f"{v:.4g}") -> str:
        """``first half 0 of 240 beyond (0%), second half 6 of 240 (2.5%), Fisher exact one-sided p=0.015; ...``
        (``fmt`` formats a value of the figure; values are shown unoriented)."""
        s1 = 100.0 * self.k1 / self.n1 if self.n1 else 0.0
        s2 = 100.0 * self.k2 / self.n2 if self.n2 else 0.0
        out = (f"first half {self.k1} of {self.n1} beyond ({s1:.3g}%), second half {self.k2} of {self.n2} "
               f"({s2:.3g}%), Fisher exact one-sided p={self.share_p:.3g}")
        if self.shift is not None and self.shift_p is not None:
            out += (f"; median {'worse' if self.shift > 0 else 'better'} by {fmt(abs(self.shift))} in the second "
                    f"half (Mann-Whitney one-sided p={self.shift_p:.3g})")
            if self.projected is not None and self.remaining:
                out += f", a trend reaching {fmt(abs(self.projected))} by the plan's end ({self.remaining:,} more)"
        return out

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "drifting": self.drifting}


def halves_drift(x: Any, against: str, *, values: Any = None, percentile: float | None = None,
                 threshold: float | None = None, remaining: int = 0) -> Drift | None:
    """The halves tests of one look against its verdict ``against`` (``"PASS"`` or ``"FAIL"``).

    ``x``: 0/1 per judged request in send order (1: beyond the threshold). ``values`` (optional): the
    figure per judged request, same order, NaN where none (a failed request), oriented so that larger is
    worse (negate for a ``>=`` SLO), with the look's ``percentile`` and the ``threshold`` in the same
    orientation, and ``remaining`` requests of the plan after the look. None when ``x`` is not 0/1 or
    holds fewer than 2 requests. The first half is the first ``n // 2`` requests.
    """
    from scipy.stats import fisher_exact, mannwhitneyu  # imported when used (start-up of every session)

    a = np.asarray(x, dtype=float)
    if a.size < 2 or not np.isin(a, (0.0, 1.0)).all() or against not in ("PASS", "FAIL"):
        return None
    worse = against == "PASS"
    h = a.size // 2
    n1, n2 = h, a.size - h
    k1, k2 = int(a[:h].sum()), int(a[h:].sum())
    p = float(fisher_exact([[k2, n2 - k2], [k1, n1 - k1]], alternative="greater" if worse else "less")[1])
    shift = shift_p = projected = None
    if values is not None and percentile is not None and threshold is not None:
        v = np.asarray(values, dtype=float)
        if v.shape == a.shape:
            v1, v2 = v[:h][~np.isnan(v[:h])], v[h:][~np.isnan(v[h:])]
            if v1.size >= 2 and v2.size >= 2:
                shift = float(np.median(v2) - np.median(v1))
                shift_p = float(mannwhitneyu(v2, v1, alternative="greater" if worse else "less").pvalue)
                projected = float(percentile + shift * max(int(remaining), 0) / (a.size / 2.0))
    return Drift(against, n1, k1, n2, k2, p, shift, shift_p, projected, threshold, max(int(remaining), 0))
