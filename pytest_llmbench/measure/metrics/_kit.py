"""Shared array helpers of the metric modules (not metrics; ``_`` keeps discovery away)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..stats import Distribution, Estimate, distribution, proportion_estimate, rate_from_window_sums, window_sums

NAN = math.nan
NS = 1e-9  # nanoseconds -> seconds


def segment_sum(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of consecutive segments of ``values`` with lengths ``counts`` (0 for empty ones)."""
    out = np.zeros(counts.size, dtype=np.float64)
    has = counts > 0
    if values.size:
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[has]
        out[has] = np.add.reduceat(values.astype(np.float64, copy=False), starts)
    return out


def pairs_diff(times: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between consecutive entries of the same owner (owner non-decreasing)."""
    if times.size < 2:
        return np.empty(0, dtype=times.dtype), np.empty(0, dtype=owner.dtype)
    same = owner[1:] == owner[:-1]
    return (times[1:] - times[:-1])[same], owner[1:][same]


def per_owner_stats(values: np.ndarray, owner: np.ndarray, n: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """count, mean, sample std (ddof=1, NaN below 2), max of samples grouped by owner."""
    icount = np.bincount(owner, minlength=n)
    count = icount.astype(np.float64)
    mean = np.full(n, NAN)
    std = np.full(n, NAN)
    mx = np.full(n, NAN)
    has = count > 0
    if values.size:
        s = segment_sum(values, icount)
        mean[has] = s[has] / count[has]
        dev = values - mean[owner]
        ss = segment_sum(dev * dev, icount)
        two = count >= 2
        std[two] = np.sqrt(ss[two] / (count[two] - 1))
        starts = np.concatenate(([0], np.cumsum(count[has]).astype(np.int64)[:-1]))
        mx[has] = np.maximum.reduceat(values, starts)
    return count, mean, std, mx


def count(k: int, unit: str = "requests") -> Estimate:
    """A count over the run."""
    return Estimate(float(k), int(k), unit, method="count")


def proportion(k: int, n: int, confidence: float) -> Estimate:
    """A proportion with its Wilson interval."""
    return proportion_estimate(k, n, confidence=confidence)


@dataclass(frozen=True)
class Windows:
    """The run's rate windows: ``""`` the §5.2.3.2 steady state, ``"_full"`` the whole run (seconds after
    the first submission), cut into ``batches`` sub-windows for the batch-means interval."""

    windows: dict[str, tuple[float, float]]
    batches: int
    confidence: float

    def sums(self, t: np.ndarray, w: np.ndarray | None) -> dict[str, tuple[np.ndarray, int]]:
        """Per-batch event sums of each window (events at times ``t`` s, weights ``w``)."""
        return {suf: window_sums(t, w, a, b, self.batches) for suf, (a, b) in self.windows.items()}

    def fold(self) -> WindowFold:
        """Per-batch sums of events added in parts (:class:`WindowFold`)."""
        return WindowFold(self)

    def rate(self, s: dict[str, tuple[np.ndarray, int]], unit: str) -> dict[str, Estimate]:
        """The rate over the steady-state window (suffix ``""``) and over the whole run (``_full``)."""
        return {suf: rate_from_window_sums(s[suf][0], s[suf][1], b - a, unit=unit, confidence=self.confidence)
                for suf, (a, b) in self.windows.items()}


def dist(name: str, values: np.ndarray, unit: str, percentiles: Sequence[float], confidence: float) -> Distribution:
    """The distribution of ``values`` with the run's percentiles and confidence (§5.1.4.3)."""
    return distribution(name, values, unit, percentiles, confidence=confidence)


class WindowFold:
    """:meth:`Windows.sums` of events given in consecutive parts (``add``), bit for bit: each batch's
    weighted sum continues from the previous parts' (``np.bincount`` adds weights in order, so the
    previous sums go in first), so the parts of a run's chunks give the sums of the whole run."""

    def __init__(self, windows: Windows) -> None:
        self.windows = windows
        self.state: dict[str, tuple[np.ndarray, int]] = {
            suf: (np.zeros(max(windows.batches, 1)), 0) for suf in windows.windows}

    def add(self, t: np.ndarray, w: np.ndarray | None) -> None:
        batches = self.windows.batches
        t = np.asarray(t, dtype=np.float64)
        w = None if w is None else np.asarray(w, dtype=np.float64)
        for suf, (start, end) in self.windows.windows.items():
            if not end - start > 0 or batches < 1:
                continue
            wi = w
            if t.size and not (t.min() >= start and t.max() <= end):
                inside = (t >= start) & (t <= end)
                ti = t[inside]
                wi = None if wi is None else wi[inside]
            else:
                ti = t
            idx = np.minimum(((ti - start) * (batches / (end - start))).astype(np.int64), batches - 1)
            sums, k = self.state[suf]
            if wi is None:
                sums = sums + np.bincount(idx, minlength=batches)
            else:
                sums = np.bincount(np.concatenate((np.arange(batches), idx)), weights=np.concatenate((sums, wi)),
                                   minlength=batches).astype(np.float64)
            self.state[suf] = (sums, k + int(ti.size))

    def sums(self) -> dict[str, tuple[np.ndarray, int]]:
        return dict(self.state)
