"""Statistics: percentiles with confidence intervals, sample-size rules, fits (§5.1.4.3, §5.3.4, §5.9.4).

The result types here are shared contracts: metrics.py produces them, slo.py, compliance/ and
the reports consume them. Times are in seconds, throughputs in per-second units.

Definitions used throughout (see :data:`DEFINITIONS`):

* **Percentile value**: numpy's ``"linear"`` rule (Hyndman & Fan type 7): for sorted samples
  ``x[0..n-1]`` and ``q = p/100``, ``h = (n-1)q`` and the value is ``x[⌊h⌋] + (h-⌊h⌋)(x[⌊h⌋+1]-x[⌊h⌋])``.
* **Percentile CI**: distribution-free, from order statistics: the number of samples below the
  true quantile is Binomial(n, q), so ``[x_(r), x_(s)]`` (1-based ranks) with
  ``r = F⁻¹(α/2)`` and ``s = F⁻¹(1-α/2) + 1`` covers it with probability >= 1-α. A bound whose
  rank falls outside ``1..n`` cannot be computed and is ``None``.
* **Mean CI**: Student-t interval ``mean ± t(1-α/2, n-1)·s/√n``.
* **Sample-size rule**: P99 needs n >= 1000 and P99.9 n >= 10,000 (§5.1.4.3); any other
  percentile needs ``n >= 1/(1-q)`` and at least what the nearest lower rule in
  :data:`MIN_SAMPLES` asks. Below that the value is shown with ``undersampled=True``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ...common import draft

__all__ = [
    "DEFAULT_PERCENTILES",
    "DEFINITIONS",
    "Distribution",
    "Estimate",
    "MIN_SAMPLES",
    "Modality",
    "PERCENTILE_METHOD",
    "ScalingFit",
    "SortedSamples",
    "TailShape",
    "CensoredPercentile",
    "NoisyRule",
    "batch_means_mean",
    "censored_percentile",
    "completion_rate_saturated",
    "distribution",
    "distribution_of_sorted",
    "jain_index",
    "numpy_percentiles_sorted",
    "knee_point",
    "knee_point_ci",
    "latency_inflation",
    "mean_estimate",
    "modality",
    "optimal_operating_point",
    "percentile_estimate",
    "proportion_estimate",
    "rate_from_window_sums",
    "queue_growing",
    "required_samples",
    "saturation_point",
    "saturation_point_ci",
    "scaling_fit",
    "slowdown",
    "starvation_rate",
    "tail_blowup",
    "tail_shape",
    "window_sums",
]

#: Minimum sample counts for a percentile to be reported as adequately sampled (§5.1.4.3):
#: P99 needs >= 1000 samples, P99.9 >= 10,000. Other percentiles use the order-statistic rule
#: (at least one sample beyond the quantile on average: n >= 1 / (1 - q)).
MIN_SAMPLES: dict[float, int] = {99.0: draft.value("ttft.p99_min_requests"),
                                 99.9: draft.value("ttft.p999_min_requests")}

#: Percentiles every :class:`Distribution` carries (§5.1.4.1, §5.4.4.1).
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)

#: The percentile rule (numpy ``method=``), used everywhere in this package.
PERCENTILE_METHOD = "linear"

#: Human-readable definitions a report can print next to the figures.
DEFINITIONS: dict[str, str] = {
    "percentile": "numpy 'linear' interpolation (Hyndman & Fan type 7) on the sorted samples",
    "percentile_ci": "distribution-free order-statistic interval: ranks from Binomial(n, p/100) "
    "quantiles at (1-c)/2 and (1+c)/2, widened to contain the point value; None where the "
    "rank falls outside the sample",
    "mean_ci": "Student-t interval mean ± t(1-(1-c)/2, n-1)·s/sqrt(n)",
    "proportion_ci": "Wilson score interval",
    "rate_ci": "batch means: the window split into equal sub-windows, t interval over the "
    "sub-window rates",
    "sample_size_rule": f"P99 needs n >= {MIN_SAMPLES[99.0]}, P99.9 n >= {MIN_SAMPLES[99.9]} (§5.1.4.3); other "
    "percentiles n >= 1/(1-q) and at least the rule of the nearest lower listed percentile",
    "std": "sample standard deviation (ddof=1)",
    "jain": "J = (Σx)² / (n·Σx²) over per-request slowdown x_i = latency_i / P50 latency of the "
    "request's class in isolation (§5.6.4)",
    "starvation": "fraction of a class whose wait exceeds 5x that class's median wait (§5.6.4)",
    "knee": "first load level whose P99 exceeds 2x the minimum P99 over all levels (§5.3.4)",
    "saturation_point": "first load level whose achieved throughput is below the previous "
    "level's (§5.3.4)",
    "modality": "Hartigan's dip test (diptest package) on at most 72,000 evenly spaced order "
    "statistics; multimodal when p < 0.05 (§5.4.4.3)",
    "tail": "generalised Pareto shape xi of the excesses over P90, probability-weighted-moment "
    "estimator (Hosking & Wallis 1987); xi > 0.1 heavy-tailed, xi < -0.1 light/bounded, else "
    "exponential (§5.4.4.3)",
    "scaling": "TTFT = a·L^k: least squares on log-log; linear TTFT = a + b·L by least squares; "
    "'better' compares R² of both in linear space (§5.9.4)",
}


@dataclass(frozen=True)
class Estimate:
    """One figure with its uncertainty.

    ``ci_low``/``ci_high`` bound the ``confidence`` interval (None when it cannot be computed,
    e.g. too few samples). ``undersampled`` is True when the sample-size rule for this statistic
    is not met; the value is still shown, and the flag reaches compliance and SLO messages.
    """

    value: float
    n: int
    unit: str = ""
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = 0.95
    undersampled: bool = False
    method: str = ""  # how the value/CI was computed, e.g. "order-statistic CI", "t interval"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("value", "ci_low", "ci_high"):
            v = d[k]
            if v is not None and not math.isfinite(v):
                d[k] = None  # JSON has no NaN/inf
        return d


@dataclass(frozen=True)
class Distribution:
    """Summary of one sample set: P50, P90, P95, P99, P99.9, mean, min, max, std (§5.1.4.1).

    ``percentiles`` maps the percentile (50.0, 90.0, 95.0, 99.0, 99.9) to its :class:`Estimate`;
    :meth:`percentile` computes any other one from the kept samples when they were kept.
    ``samples`` holds the sorted, NaN-free samples (None when not kept): a float64 array, a compact
    :class:`SortedSamples` (pooled per-gap samples) or a :class:`LazySorted` view of a per-request
    column (sorted when read); ``np.asarray`` gives the float64 values of any of them.
    """

    name: str
    unit: str
    n: int
    mean: Estimate
    std: float
    min: float
    max: float
    percentiles: dict[float, Estimate] = field(default_factory=dict)
    samples: np.ndarray | SortedSamples | LazySorted | None = field(default=None, repr=False, compare=False)
    dropped: int = 0  # NaN (undefined) entries left out of the samples

    def percentile(self, p: float, *, confidence: float | None = None) -> Estimate:
        """Any percentile ``p`` in [0, 100], with its order-statistic CI."""
        conf = self.mean.confidence if confidence is None else confidence
        if confidence is None and float(p) in self.percentiles:
            return self.percentiles[float(p)]
        if self.samples is None:
            raise ValueError(f"distribution {self.name!r} did not keep its samples; "
                             f"only P{sorted(self.percentiles)} are available")
        if isinstance(self.samples, (SortedSamples, LazySorted)):
            if not 0.0 <= float(p) <= 100.0:
                raise ValueError(f"percentile must be in [0, 100], got {p}")
            x = self.samples if isinstance(self.samples, SortedSamples) else self.samples.sorted()
            return _percentiles_sorted(x, [float(p)], self.unit, conf)[0]
        return percentile_estimate(self.samples, p, unit=self.unit, confidence=conf,
                                   assume_sorted=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "n": self.n,
            "dropped": self.dropped,
            "mean": self.mean.to_json(),
            "std": _finite_or_none(self.std),
            "min": _finite_or_none(self.min),
            "max": _finite_or_none(self.max),
            "percentiles": {f"p{k:g}": v.to_json() for k, v in self.percentiles.items()},
        }


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


# --------------------------------------------------------------------------------------------
# percentiles, means, proportions
# --------------------------------------------------------------------------------------------


def required_samples(p: float) -> float:
    """Samples needed before percentile ``p`` counts as adequately sampled (§5.1.4.3)."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    q = p / 100.0
    need = math.inf if q >= 1.0 else math.ceil(1.0 / (1.0 - q) - 1e-9)
    for key, count in MIN_SAMPLES.items():
        if p >= key:
            need = max(need, count)
    return need


def _clean(samples: ArrayLike) -> tuple[np.ndarray, int]:
    x = np.asarray(samples, dtype=np.float64).ravel()
    keep = ~np.isnan(x)
    dropped = int(x.size - np.count_nonzero(keep))
    return (x[keep] if dropped else x), dropped


def _order_stat_ranks(n: int, qs: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks (r, s) of the distribution-free CI for each quantile in ``qs``."""
    from scipy.stats import binom

    a = (1.0 - confidence) / 2.0
    r = binom.ppf(a, n, qs)
    s = binom.ppf(1.0 - a, n, qs) + 1.0
    return r, s


def _interp_sorted(x: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """numpy 'linear' percentile on an already sorted array (vectorised over ``qs``)."""
    n = x.size
    h = (n - 1) * qs
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    return x[lo] + (h - lo) * (x[hi] - x[lo])


def numpy_percentiles_sorted(x: Any, ps: Sequence[float]) -> np.ndarray:
    """``np.percentile(x, ps)`` (method "linear") of sorted NaN-free samples ``x``, an array or
    :class:`SortedSamples`, bit for bit: numpy's virtual index, neighbours and lerp, read by index
    (so compact samples are never copied whole)."""
    n = x.size
    q = np.true_divide(np.asarray(ps, dtype=np.float64), 100)
    v = (n - 1) * q
    prev = np.floor(v)
    nxt = prev + 1
    above = v >= n - 1
    prev[above] = nxt[above] = -1
    prev[v < 0] = nxt[v < 0] = 0
    prev_i, nxt_i = prev.astype(np.intp), nxt.astype(np.intp)
    a, b = np.asarray(x[prev_i], dtype=np.float64), np.asarray(x[nxt_i], dtype=np.float64)
    t = v - prev_i
    diff = b - a
    out = np.add(a, diff * t)
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5)
    return out


def _percentiles_sorted(x: np.ndarray, ps: Sequence[float], unit: str,
                        confidence: float) -> list[Estimate]:
    n = x.size
    for p in ps:
        if not 0.0 <= p <= 100.0:
            raise ValueError(f"percentile must be in [0, 100], got {p}")
    if n == 0:
        return [Estimate(math.nan, 0, unit, None, None, confidence, True,
                         f"percentile ({PERCENTILE_METHOD}); no samples") for _ in ps]
    qs = np.asarray(ps, dtype=np.float64) / 100.0
    vals = _interp_sorted(x, qs)
    r, s = _order_stat_ranks(n, qs, confidence)
    out = []
    for p, v, ri, si in zip(ps, vals, r, s):
        # the interpolated value can sit just outside [x_(r), x_(s)] at extreme p and tiny n:
        # widen the interval to contain it (coverage only grows)
        lo = min(float(x[int(ri) - 1]), float(v)) if 1 <= ri <= n else None
        hi = max(float(x[int(si) - 1]), float(v)) if 1 <= si <= n else None
        out.append(Estimate(float(v), n, unit, lo, hi, confidence, n < required_samples(p),
                            f"percentile ({PERCENTILE_METHOD}), order-statistic CI"))
    return out


def percentile_estimate(samples: ArrayLike, p: float, *, unit: str = "",
                        confidence: float = 0.95, assume_sorted: bool = False) -> Estimate:
    """Percentile ``p`` (0-100) of ``samples`` (NaN dropped) with a distribution-free CI."""
    x, _ = _clean(samples)
    if not assume_sorted:
        x = np.sort(x)
    return _percentiles_sorted(x, [float(p)], unit, confidence)[0]


def mean_estimate(samples: ArrayLike, *, unit: str = "", confidence: float = 0.95) -> Estimate:
    """Arithmetic mean with a Student-t interval (NaN samples dropped)."""
    x, _ = _clean(samples)
    return _mean_of_clean(x, unit, confidence)


def _mean_of_clean(x: np.ndarray, unit: str, confidence: float) -> Estimate:
    n = x.size
    if n == 0:
        return Estimate(math.nan, 0, unit, None, None, confidence, True, "mean; no samples")
    m = float(x.mean())
    if n < 2:
        return Estimate(m, n, unit, None, None, confidence, True, "mean, t interval (n < 2)")
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2.0, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
    return Estimate(m, n, unit, m - half, m + half, confidence, False, "mean, t interval")


def proportion_estimate(k: int, n: int, *, unit: str = "fraction",
                        confidence: float = 0.95) -> Estimate:
    """``k / n`` with a Wilson score interval (value NaN when ``n == 0``)."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Estimate(math.nan, 0, unit, None, None, confidence, True, "proportion; n = 0")
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2.0))
    ph = k / n
    den = 1.0 + z * z / n
    centre = (ph + z * z / (2 * n)) / den
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return Estimate(ph, n, unit, max(0.0, centre - half), min(1.0, centre + half), confidence,
                    False, "proportion, Wilson interval")


def window_sums(times: ArrayLike, weights: ArrayLike | None, start: float, end: float,
                batches: int = 10) -> tuple[np.ndarray, int]:
    """Weighted event sums in ``batches`` equal sub-windows of ``[start, end]`` and the event count."""
    t = np.asarray(times, dtype=np.float64)
    if not end - start > 0 or batches < 1:
        return np.zeros(max(batches, 1)), 0
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if t.size and not (t.min() >= start and t.max() <= end):
        inside = (t >= start) & (t <= end)
        t = t[inside]
        w = None if w is None else w[inside]
    ti = t
    idx = np.minimum(((ti - start) * (batches / (end - start))).astype(np.int64), batches - 1)
    return np.bincount(idx, weights=w, minlength=batches).astype(np.float64), int(ti.size)


def rate_from_window_sums(sums: np.ndarray, n_events: int, length: float, *, unit: str,
                          confidence: float = 0.95) -> Estimate:
    """Rate = Σ sums / length; CI from batch means (t interval over the sub-window rates)."""
    batches = sums.size
    method = f"rate over the window, batch means ({batches} sub-windows), t interval"
    if not length > 0:
        return Estimate(math.nan, 0, unit, None, None, confidence, True, "rate; empty window")
    value = float(sums.sum()) / length
    if n_events < 2 or batches < 2:
        return Estimate(value, n_events, unit, None, None, confidence, True, method)
    per = sums / (length / batches)
    half = _batch_half_width(per, confidence)
    return Estimate(value, n_events, unit, value - half, value + half, confidence, False, method)


def _batch_half_width(per: np.ndarray, confidence: float) -> float:
    """Half-width of the batch-means t interval: ``t(1-(1-c)/2, b-1) · s_b / √b`` over ``b`` batch values."""
    from scipy.stats import t as student

    b = per.size
    return float(student.ppf(0.5 + confidence / 2.0, b - 1)) * float(per.std(ddof=1)) / math.sqrt(b)


def batch_means_mean(values: ArrayLike, *, weights: ArrayLike | None = None, unit: str = "", batches: int = 10,
                     confidence: float = 0.95) -> Estimate:
    """Mean of ``values`` taken in their order (requests in send order), with a batch-means interval.

    NaN values are dropped, the order kept. The sequence is cut into ``b = min(batches, n // 2)``
    consecutive batches of (nearly) equal size; the interval is ``x̄ ± t(1-(1-c)/2, b-1)·s_b/√b`` with
    ``s_b`` the standard deviation of the batch means. With ``weights`` (e.g. each request's gap count,
    ``values`` its mean gap) the mean and each batch's are weighted, ``Σw·x / Σw``: a pooled mean by
    batches of requests. Neighbouring requests may be correlated (a queue builds up, a burst of long
    prompts); means of long enough batches are nearly independent, so the interval survives the
    autocorrelation that the Student-t interval of single requests ignores, and their near-normality tames
    heavy tails. A one-sided bound at confidence ``c`` is an end of the interval at ``2c - 1``.
    Reference: A. M. Law, W. D. Kelton, Simulation Modeling and Analysis, 3rd ed. (2000), §9.5.3 (batch
    means); the same t interval as :func:`rate_from_window_sums`, over requests instead of time.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    keep = ~np.isnan(x) & (w > 0)
    x, w = x[keep], w[keep]
    n = x.size
    b = min(int(batches), n // 2)
    method = f"mean, batch means over requests in send order ({b} batches), t interval"
    if n == 0:
        return Estimate(math.nan, 0, unit, None, None, confidence, True, "mean; no samples")
    m = float(np.dot(w, x) / w.sum())
    if b < 2:
        return Estimate(m, n, unit, None, None, confidence, True, method)
    per = np.array([float(np.dot(pw, px) / pw.sum()) for px, pw in zip(np.array_split(x, b), np.array_split(w, b))])
    half = _batch_half_width(per, confidence)
    return Estimate(m, n, unit, m - half, m + half, confidence, False, method)


def distribution(name: str, samples: ArrayLike, unit: str,
                 percentiles: Sequence[float] = DEFAULT_PERCENTILES, *,
                 confidence: float = 0.95, keep_samples: bool = True) -> Distribution:
    """Summarise ``samples`` (NaN = undefined, dropped and counted in ``dropped``)."""
    x, dropped = _clean(samples)
    x = np.sort(x)
    return _of_sorted(name, x, unit, percentiles, confidence, x if keep_samples else None, dropped)


def _of_sorted(name: str, x: Any, unit: str, percentiles: Sequence[float], confidence: float, kept: Any,
               dropped: int) -> Distribution:
    """The distribution of sorted NaN-free samples ``x`` (an array or :class:`SortedSamples`)."""
    n = x.size
    ps = [float(p) for p in percentiles]
    ests = _percentiles_sorted(x, ps, unit, confidence)
    mean = _mean_of_clean(x, unit, confidence)
    std = float(x.std(ddof=1)) if n >= 2 else math.nan
    return Distribution(
        name=name, unit=unit, n=n, mean=mean, std=std,
        min=float(x[0]) if n else math.nan, max=float(x[-1]) if n else math.nan,
        percentiles=dict(zip(ps, ests)), samples=kept, dropped=dropped,
    )


# --------------------------------------------------------------------------------------------
# compact sorted samples (memory of long runs, issue 30)
# --------------------------------------------------------------------------------------------

_PAIRWISE_LEAF = 1 << 16  # numpy's pairwise summation evaluated on leaves of at most this many values


def _pairwise_sum(block: Any, n: int, lo: int = 0) -> float:
    """numpy's ``np.add.reduce`` of ``n`` float64 values, ``block(a, b)`` giving values ``a..b-1``,
    evaluated leaf by leaf: numpy's pairwise summation splits a length ``m`` > 128 at ``m//2`` rounded
    down to a multiple of 8, so a leaf of the same split tree summed by numpy gives the same partial
    sum, and the whole is bit for bit numpy's (without all values in memory at once)."""
    if n <= _PAIRWISE_LEAF:
        return float(np.add.reduce(block(lo, lo + n))) if n else 0.0
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(block, n2, lo) + _pairwise_sum(block, n - n2, lo + n2)


class _AsArray:
    """Arithmetic, comparisons and numpy functions on a sample view act on its float64 array (made for the
    occasion): code that treats ``Distribution.samples`` as an array keeps working."""

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise NotImplementedError

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        args = [np.asarray(x) if isinstance(x, _AsArray) else x for x in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    def __iter__(self) -> Any:
        return iter(np.asarray(self))

    def tolist(self) -> list[float]:
        return np.asarray(self).tolist()


def _delegate(op: str) -> Any:
    def method(self: Any, other: Any) -> Any:
        return getattr(np.asarray(self), op)(other)
    method.__name__ = op
    return method


for _op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__add__", "__radd__", "__sub__",
            "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__"):
    setattr(_AsArray, _op, _delegate(_op))
_AsArray.__hash__ = None  # type: ignore[assignment]


class SortedSamples(_AsArray):
    """Sorted samples kept compactly: integers ``values`` (ascending; with ``counts``, value ``i``
    repeated ``counts[i]`` times), sample ``k`` being ``float64(values[k]) * scale`` (``scale`` None:
    ``float64(values[k])``). Integer nanoseconds times 1e-9 are the seconds the float64 path computes,
    and the conversion is monotone, so the sorted floats are the converted sorted integers.

    Indexing (an int, a slice or an int array) gives float64 values; :meth:`mean` and :meth:`std` are
    numpy's (same pairwise summation) without a float64 copy of the samples; ``np.asarray`` gives the
    float64 array (for small sets and callers that need one).
    """

    dtype = np.dtype(np.float64)
    ndim = 1

    def __init__(self, values: np.ndarray, counts: np.ndarray | None = None, scale: float | None = None) -> None:
        self.values = values
        self.counts = counts
        self.scale = scale
        self._ends = None if counts is None else np.cumsum(counts, dtype=np.int64)
        self.size = int(values.size if counts is None else (self._ends[-1] if self._ends.size else 0))

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def __len__(self) -> int:
        return self.size

    def _convert(self, raw: np.ndarray) -> np.ndarray:
        f = raw.astype(np.float64)
        return f if self.scale is None else f * self.scale

    def _raw(self, idx: Any) -> Any:
        if self.counts is None:
            return self.values[idx]
        return self.values[np.searchsorted(self._ends, idx, side="right")]

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            lo, hi, step = idx.indices(self.size)
            if step != 1:
                return self._convert(self._raw(np.arange(lo, hi, step)))
            return self.floats(lo, hi)
        if isinstance(idx, (int, np.integer)):
            i = int(idx) + (self.size if idx < 0 else 0)
            if not 0 <= i < self.size:
                raise IndexError(f"index {idx} out of range for {self.size} samples")
            return self._convert(np.asarray([self._raw(i)]))[0]
        arr = np.asarray(idx)
        if arr.dtype == bool:
            raise TypeError("SortedSamples: boolean masks are not supported")
        return self._convert(np.asarray(self._raw(np.where(arr < 0, arr + self.size, arr))))

    def floats(self, lo: int, hi: int) -> np.ndarray:
        """Samples ``lo..hi-1`` as float64."""
        if self.counts is None:
            return self._convert(self.values[lo:hi])
        if hi <= lo:
            return np.empty(0, dtype=np.float64)
        a, b = np.searchsorted(self._ends, [lo, hi - 1], side="right")
        reps = self.counts[a:b + 1].copy()
        starts = np.concatenate(([0], self._ends[:-1]))
        reps[0] -= lo - starts[a]
        reps[-1] = hi - max(lo, int(starts[b])) if b > a else hi - lo
        return self._convert(np.repeat(self.values[a:b + 1], reps))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.floats(0, self.size)
        return out if dtype is None else out.astype(dtype, copy=False)

    def sum(self) -> float:
        return _pairwise_sum(self.floats, self.size)

    def mean(self) -> np.float64:
        """``np.mean`` of the float64 samples, bit for bit."""
        return np.float64(self.sum()) / self.size if self.size else np.float64(math.nan)

    def std(self, ddof: int = 0) -> np.float64:
        """``np.std(ddof=ddof)`` of the float64 samples, bit for bit (deviations squared leaf by leaf)."""
        m = self.mean()

        def squares(a: int, b: int) -> np.ndarray:
            d = self.floats(a, b) - m
            d *= d
            return d

        return np.sqrt(np.float64(_pairwise_sum(squares, self.size)) / (self.size - ddof))

    def take_evenly(self, k: int) -> np.ndarray:
        """``x[np.linspace(0, n - 1, k).round().astype(int64)]`` as float64."""
        return self[np.linspace(0, self.size - 1, k).round().astype(np.int64)]

    def searchsorted(self, edges: ArrayLike, side: str = "left") -> np.ndarray:
        """``np.searchsorted(float64 samples, edges, side)``: for each edge, how many samples are below
        it ("left") or at most it ("right"); a vectorised bisection over the sample index, no float64 copy."""
        e = np.asarray(edges, dtype=np.float64)
        lo, hi = np.zeros(e.shape, dtype=np.int64), np.full(e.shape, self.size, dtype=np.int64)
        below = np.less if side == "left" else np.less_equal
        while True:
            open_ = lo < hi
            if not open_.any():
                return lo
            mid = (lo + hi) // 2
            go_right = np.zeros(e.shape, dtype=bool)
            go_right[open_] = below(self[mid[open_]], e[open_])
            lo = np.where(open_ & go_right, mid + 1, lo)
            hi = np.where(open_ & ~go_right, mid, hi)

    def tail_above(self, u: float) -> np.ndarray:
        """``x[x > u]`` (float64, ascending): the samples after the last one <= ``u``."""
        return self.floats(int(self.searchsorted([u], side="right")[0]), self.size)


class LazySorted(_AsArray):
    """The sorted NaN-free values of ``column[rows]``, sorted when read (a distribution of per-request
    values keeps this view of the per-request column instead of a sorted copy)."""

    def __init__(self, column: np.ndarray, rows: np.ndarray | None) -> None:
        self.column, self.rows = column, rows
        self.size = int(np.count_nonzero(~np.isnan(column if rows is None else column[rows])))

    def __len__(self) -> int:
        return self.size

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def sorted(self) -> np.ndarray:
        x, _ = _clean(self.column if self.rows is None else self.column[self.rows])
        return np.sort(x)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.sorted()
        return out if dtype is None else out.astype(dtype, copy=False)


def distribution_of_sorted(name: str, x: SortedSamples, unit: str,
                           percentiles: Sequence[float] = DEFAULT_PERCENTILES, *,
                           confidence: float = 0.95) -> Distribution:
    """:func:`distribution` of compact sorted samples: the same figures, bit for bit, as of their
    float64 values, without a float64 copy (the samples are kept as they are)."""
    return _of_sorted(name, x, unit, percentiles, confidence, x, 0)


# --------------------------------------------------------------------------------------------
# distribution shape (§5.4.4.3)
# --------------------------------------------------------------------------------------------

_DIP_MAX_N = 72_000  # the diptest package's p-value table ends here


@dataclass(frozen=True)
class Modality:
    """Unimodal or multimodal, by Hartigan's dip test (§5.4.4.3)."""

    verdict: str  # "unimodal" | "multimodal" | "undetermined"
    dip: float
    p_value: float
    n: int
    method: str = DEFINITIONS["modality"]

    def to_json(self) -> dict[str, Any]:
        return {k: (_finite_or_none(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _sorted_view(samples: Any, assume_sorted: bool) -> Any:
    """Compact samples as they are, else the sorted NaN-free float64 array."""
    if isinstance(samples, SortedSamples):
        return samples
    x, _ = _clean(samples)
    return x if assume_sorted else np.sort(x)


def modality(samples: ArrayLike, *, alpha: float = 0.05, assume_sorted: bool = False) -> Modality:
    """Hartigan's dip test; above 72,000 samples, on 72,000 evenly spaced order statistics."""
    x = _sorted_view(samples, assume_sorted)
    n = x.size
    if n < 4 or x[0] == x[-1]:
        return Modality("undetermined" if n < 4 else "unimodal", 0.0, 1.0 if n >= 4 else math.nan, n)
    if n > _DIP_MAX_N:
        x = x[np.linspace(0, n - 1, _DIP_MAX_N).round().astype(np.int64)]
    elif isinstance(x, SortedSamples):
        x = np.asarray(x)
    import diptest

    dip, pval = diptest.diptest(x, sort_x=False)
    return Modality("multimodal" if pval < alpha else "unimodal", float(dip), float(pval), n)


@dataclass(frozen=True)
class TailShape:
    """Tail character (§5.4.4.3): GPD shape of the excesses over a high threshold, and P99/P50."""

    verdict: str  # "heavy-tailed" | "exponential" | "light" | "undetermined"
    xi: float
    threshold: float
    exceedances: int
    p99_p50_ratio: float
    method: str = DEFINITIONS["tail"]

    def to_json(self) -> dict[str, Any]:
        return {k: (_finite_or_none(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def tail_shape(samples: ArrayLike, *, threshold_percentile: float = 90.0, band: float = 0.1,
               min_exceedances: int = 50, assume_sorted: bool = False) -> TailShape:
    """Classify the tail by the generalised Pareto shape of excesses over P``threshold``."""
    x = _sorted_view(samples, assume_sorted)
    n = x.size
    if n == 0:
        return TailShape("undetermined", math.nan, math.nan, 0, math.nan)
    p50, p99, u = _interp_sorted(x, np.array([0.5, 0.99, threshold_percentile / 100.0]))
    ratio = float(p99 / p50) if p50 > 0 else math.nan
    y = (x.tail_above(u) if isinstance(x, SortedSamples) else x[x > u]) - u  # sorted ascending
    m = y.size
    if m < min_exceedances or not y.any():
        return TailShape("undetermined", math.nan, float(u), m, ratio)
    a0 = float(y.mean())
    a1 = float(np.dot((m - np.arange(1, m + 1)) / (m - 1), y) / m)  # E[Y(1-F(Y))]
    k = a0 / (a0 - 2.0 * a1) - 2.0  # Hosking & Wallis' k; xi = -k
    xi = -k
    verdict = "heavy-tailed" if xi > band else ("light" if xi < -band else "exponential")
    return TailShape(verdict, float(xi), float(u), m, ratio)


# --------------------------------------------------------------------------------------------
# fairness (§5.6.4)
# --------------------------------------------------------------------------------------------


def jain_index(x: ArrayLike) -> float:
    """Jain's fairness index ``(Σx)² / (n·Σx²)`` (§5.6.4); in [1/n, 1] for x >= 0, not all 0.

    NaN entries are dropped; negative values raise ``ValueError``; all-zero input gives 1.0
    (every request equally served).
    """
    v, _ = _clean(x)
    if v.size == 0:
        return math.nan
    if (v < 0).any():
        raise ValueError("Jain's index needs non-negative values (normalised latencies)")
    sq = float(np.dot(v, v))
    if sq == 0.0:
        return 1.0
    # scale first so huge or tiny values do not overflow/underflow
    s = v / v.max()
    return float(s.sum() ** 2 / (s.size * np.dot(s, s)))


def slowdown(latency: ArrayLike, classes: Sequence[Any],
             baseline: Mapping[Any, float]) -> np.ndarray:
    """Normalised latency for Jain's index: latency / the class's isolated P50 latency (§5.6.4)."""
    lat = np.asarray(latency, dtype=np.float64)
    if lat.size != len(classes):
        raise ValueError(f"{lat.size} latencies but {len(classes)} class labels")
    missing = {c for c in classes if c not in baseline}
    if missing:
        raise KeyError(f"no isolated baseline for classes {sorted(map(str, missing))}")
    base = np.array([baseline[c] for c in classes], dtype=np.float64)
    if (base <= 0).any():
        raise ValueError("isolated baseline latencies must be > 0")
    return lat / base


def latency_inflation(mixed: Mapping[Any, ArrayLike], isolated: Mapping[Any, ArrayLike], *,
                      p: float = 50.0) -> dict[Any, float]:
    """Per class: P``p`` latency in the mixed run / P``p`` in isolation (§5.6.4)."""
    out: dict[Any, float] = {}
    for cls, samples in mixed.items():
        if cls not in isolated:
            raise KeyError(f"class {cls!r} has no isolated run; known: {sorted(map(str, isolated))}")
        num = percentile_estimate(samples, p).value
        den = percentile_estimate(isolated[cls], p).value
        out[cls] = num / den if den > 0 else math.nan
    return out


def starvation_rate(wait: ArrayLike, classes: Sequence[Any], *, factor: float = 5.0) -> dict[Any, Estimate]:
    """Per class: fraction of requests waiting longer than ``factor`` x the class median (§5.6.4)."""
    w = np.asarray(wait, dtype=np.float64)
    labels = np.asarray([str(c) for c in classes]) if len(classes) else np.array([], dtype=str)
    if w.size != labels.size:
        raise ValueError(f"{w.size} waits but {labels.size} class labels")
    out: dict[Any, Estimate] = {}
    originals = {str(c): c for c in classes}
    for key in sorted(originals):
        sel = w[(labels == key) & ~np.isnan(w)]
        med = float(np.median(sel)) if sel.size else math.nan
        k = int(np.count_nonzero(sel > factor * med))
        est = proportion_estimate(k, int(sel.size))
        out[originals[key]] = Estimate(est.value, est.n, "fraction", est.ci_low, est.ci_high,
                                       est.confidence, est.undersampled,
                                       f"wait > {factor:g}x class median; Wilson interval")
    return out


# --------------------------------------------------------------------------------------------
# curves (§5.2.3.1, §5.3.4)
# --------------------------------------------------------------------------------------------


def _as_array(v: ArrayLike, what: str) -> np.ndarray:
    a = np.asarray([e.value if isinstance(e, Estimate) else e for e in np.atleast_1d(v)],
                   dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional")
    return a


def knee_point(loads: ArrayLike, p99: ArrayLike, *, factor: float = 2.0) -> int | None:
    """Index of the first level (in ascending load) whose P99 > ``factor`` x min P99 (§5.3.4)."""
    l, y = _as_array(loads, "loads"), _as_array(p99, "p99")
    if l.size != y.size:
        raise ValueError("loads and p99 differ in length")
    order = np.argsort(l, kind="stable")
    ymin = np.nanmin(y) if np.isfinite(y).any() else math.nan
    for i in order:
        if y[i] > factor * ymin:
            return int(i)
    return None


def saturation_point(loads: ArrayLike, throughput: ArrayLike) -> int | None:
    """Index of the first level whose achieved throughput is below the previous one's (§5.3.4)."""
    l, y = _as_array(loads, "loads"), _as_array(throughput, "throughput")
    if l.size != y.size:
        raise ValueError("loads and throughput differ in length")
    order = np.argsort(l, kind="stable")
    for prev, cur in zip(order[:-1], order[1:]):
        if y[cur] < y[prev]:
            return int(cur)
    return None


@dataclass(frozen=True)
class NoisyRule:
    """A §5.3.4 derived point with a noise tolerance.

    ``index`` is the first level where the rule holds outside the noise (the 95 % confidence
    intervals of the compared figures do not overlap); ``literal`` is where the draft's rule fires
    on the point values. ``within_noise`` is True when the literal rule fired at a level where the
    intervals overlap (``literal`` set and ``literal != index``); ``reason`` says why in words.
    """

    index: int | None
    literal: int | None
    reference: int | None = None  # the level compared against (minimum P99 / earlier peak), if any
    reason: str = ""

    @property
    def within_noise(self) -> bool:
        return self.literal is not None and self.literal != self.index

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "literal_index": self.literal, "reference_index": self.reference,
                "within_noise": self.within_noise, "reason": self.reason}


def _bound(v: Any, default: float) -> float:
    return default if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def knee_point_ci(loads: ArrayLike, p99: ArrayLike, ci_low: Sequence[float | None],
                  ci_high: Sequence[float | None], *, factor: float = 2.0) -> NoisyRule:
    """§5.3.4 knee (first level whose P99 > ``factor`` x the minimum P99) outside the noise.

    A level is the knee only when the lower end of its P99 interval exceeds ``factor`` times the
    upper end of the minimum-P99 level's interval, so the rule cannot fire on two P99s whose
    intervals allow the ratio to be below ``factor`` (under-sampled P99s, §5.1.4.3). An unbounded
    interval end (None: too few samples for the order-statistic bound) never separates levels.
    The draft's literal rule on point values is returned alongside (``literal``).
    """
    l, y = _as_array(loads, "loads"), _as_array(p99, "p99")
    if not (l.size == y.size == len(ci_low) == len(ci_high)):
        raise ValueError("loads, p99 and their intervals differ in length")
    literal = knee_point(l, y, factor=factor)
    finite = np.isfinite(y)
    if not finite.any():
        return NoisyRule(None, literal, None, "no finite P99")
    ref = int(np.flatnonzero(finite)[np.argmin(y[finite])])
    ref_hi = _bound(ci_high[ref], math.inf)
    index = next((int(i) for i in np.argsort(l, kind="stable") if _bound(ci_low[i], -math.inf) > factor * ref_hi),
                 None)
    why = ""
    if literal is not None and literal != index:
        lo = _bound(ci_low[literal], math.nan)
        why = ("the minimum level's P99 interval is unbounded above (too few samples)" if math.isinf(ref_hi)
               else f"the level's P99 95% CI starts at {lo * 1000:.1f} ms, not above {factor:g}x the minimum "
                    f"P99's upper bound {ref_hi * 1000:.1f} ms")
    return NoisyRule(index, literal, ref, why)


def saturation_point_ci(loads: ArrayLike, throughput: ArrayLike, ci_low: Sequence[float | None],
                        ci_high: Sequence[float | None]) -> NoisyRule:
    """§5.3.4 saturation (first level whose achieved throughput decreases) outside the noise.

    A level is the saturation point when the upper end of its throughput interval is below the
    lower end of the interval of the earlier level with the highest throughput (the previous
    level, or an earlier peak when the decline is spread over several levels, each step within
    the noise). Unbounded interval ends never separate levels. The draft's literal rule (first
    decrease of the point values from the previous level) is returned alongside.
    """
    l, y = _as_array(loads, "loads"), _as_array(throughput, "throughput")
    if not (l.size == y.size == len(ci_low) == len(ci_high)):
        raise ValueError("loads, throughput and their intervals differ in length")
    literal = saturation_point(l, y)
    order = [int(i) for i in np.argsort(l, kind="stable")]
    index = peak = None
    for k in range(1, len(order)):
        cur = order[k]
        best = max(order[:k], key=lambda i: (y[i] if np.isfinite(y[i]) else -math.inf))
        if _bound(ci_high[cur], math.inf) < _bound(ci_low[best], -math.inf):
            index, peak = cur, best
            break
    why = ""
    if literal is not None and literal != index:
        prev = order[order.index(literal) - 1]
        why = (f"throughput {y[literal]:.0f} < {y[prev]:.0f} at the previous level, but the 95% CIs overlap "
               f"(upper bound {_bound(ci_high[literal], math.inf):.0f} >= lower bound "
               f"{_bound(ci_low[prev], -math.inf):.0f})")
    return NoisyRule(index, literal, peak, why)


@dataclass(frozen=True)
class CensoredPercentile:
    """A latency percentile over completed and right-censored samples (§5.3.3: all requests).

    A request cancelled before it finished has a latency of *at least* its elapsed time. ``value``
    ranks every censored sample above every completed one (+inf for percentile purposes): it is an
    upper bound of the true percentile, ``inf`` when the percentile's rank falls among the
    censored samples. ``lower`` puts each censored sample at its elapsed time: a lower bound. The
    true percentile lies in ``[lower, value]``; both are equal when censoring does not reach the
    percentile's rank. ``ci_low`` / ``ci_high`` are the order-statistic 95 % interval computed the
    same two ways (None: unbounded).
    """

    p: float
    value: float
    lower: float
    ci_low: float | None
    ci_high: float | None
    n: int  # completed + censored
    censored: int
    undersampled: bool

    @property
    def bounded(self) -> bool:
        """True when the value is finite (censoring does not reach the percentile's rank)."""
        return math.isfinite(self.value)

    def to_json(self) -> dict[str, Any]:
        return {"p": self.p, "value": self.value if self.bounded else None, "lower": _finite_or_none(self.lower),
                "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n, "censored": self.censored,
                "undersampled": self.undersampled}


def censored_percentile(observed: ArrayLike, censored_at: ArrayLike, p: float, *,
                        confidence: float = 0.95) -> CensoredPercentile:
    """Percentile ``p`` of completed samples ``observed`` and right-censored ones (see
    :class:`CensoredPercentile`); NaN entries are dropped from both."""
    obs, _ = _clean(observed)
    cen, _ = _clean(censored_at)
    obs.sort()
    n, k = obs.size + cen.size, cen.size
    if n == 0:
        return CensoredPercentile(float(p), math.nan, math.nan, None, None, 0, 0, True)
    low_sample = np.sort(np.concatenate((obs, cen)))
    lo_est = _percentiles_sorted(low_sample, [float(p)], "", confidence)[0]
    q = float(p) / 100.0
    h = (n - 1) * q
    i = int(math.floor(h))
    j = min(i + 1, n - 1) if h > i else i
    if j >= obs.size:  # the rank reaches the censored samples (ranked above every completed one)
        value = math.inf
    else:
        value = float(obs[i] + (h - i) * (obs[j] - obs[i]))
    r, s = _order_stat_ranks(n, np.array([q]), confidence)
    ri, si = int(r[0]), int(s[0])
    ci_low = float(low_sample[ri - 1]) if 1 <= ri <= n else None
    ci_high = float(obs[si - 1]) if 1 <= si <= obs.size else None
    if ci_low is not None:
        ci_low = min(ci_low, lo_est.value)
    if ci_high is not None and math.isfinite(value):
        ci_high = max(ci_high, value)
    return CensoredPercentile(float(p), value, lo_est.value, ci_low, ci_high, n, k, n < required_samples(p))


def optimal_operating_point(throughput: ArrayLike, meets_slo: ArrayLike) -> int | None:
    """Index of the highest-throughput level that meets the SLO (§5.3.4), None if none does."""
    y = _as_array(throughput, "throughput")
    ok = np.asarray(meets_slo, dtype=bool).ravel()
    if ok.size != y.size:
        raise ValueError("throughput and meets_slo differ in length")
    if not ok.any():
        return None
    cand = np.where(ok, y, -np.inf)
    return int(np.argmax(cand))


def queue_growing(times: ArrayLike, depth: ArrayLike, *, alpha: float = 0.05) -> bool:
    """§5.2.3.1 rule 1: queue depth grows — OLS slope > 0 with one-sided p < ``alpha``."""
    t, d = _as_array(times, "times"), _as_array(depth, "depth")
    if t.size != d.size:
        raise ValueError("times and depth differ in length")
    if t.size < 3 or np.ptp(t) == 0:
        return False
    if np.ptp(d) == 0:
        return False
    from scipy.stats import linregress

    res = linregress(t, d, alternative="greater")
    return bool(res.slope > 0 and res.pvalue < alpha)


def completion_rate_saturated(completion_rate: float, arrival_rate: float, *,
                              threshold: float = 0.9) -> bool:
    """§5.2.3.1 rule 2: completion rate < 90% of the arrival rate (open loop only)."""
    return bool(completion_rate < threshold * arrival_rate)


def tail_blowup(p99_at_level: float, p50_at_lower_load: float, *, factor: float = 10.0) -> bool:
    """§5.2.3.1 rule 3: P99 latency > 10x the P50 latency seen at a lower load."""
    return bool(p99_at_level > factor * p50_at_lower_load)


# --------------------------------------------------------------------------------------------
# scaling (§5.9.4)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalingFit:
    """TTFT vs context length: time per token, power law ``a·L^k`` and linear ``a + b·L``."""

    lengths: tuple[float, ...]
    time_per_input_token: tuple[float, ...]  # mean TTFT / L per distinct length, s/token
    exponent: float  # k
    exponent_ci: tuple[float, float] | None
    power_coefficient: float  # a in a·L^k
    r2_loglog: float
    linear_intercept: float
    linear_slope: float  # s per token
    r2_linear: float
    r2_power_linear_space: float
    better: str  # "power" | "linear"
    n: int
    method: str = DEFINITIONS["scaling"]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else math.nan)


def scaling_fit(lengths: ArrayLike, ttft: ArrayLike, *, confidence: float = 0.95) -> ScalingFit:
    """Fit TTFT against context length (§5.9.4). Needs >= 2 distinct lengths, all > 0."""
    L, y = _as_array(lengths, "lengths"), _as_array(ttft, "ttft")
    if L.size != y.size:
        raise ValueError("lengths and ttft differ in length")
    keep = np.isfinite(L) & np.isfinite(y)
    L, y = L[keep], y[keep]
    if np.unique(L).size < 2:
        raise ValueError("scaling fit needs at least two distinct context lengths")
    if (L <= 0).any() or (y <= 0).any():
        raise ValueError("scaling fit needs positive lengths and TTFTs (log-log fit)")
    from scipy.stats import linregress, t

    ll = linregress(np.log(L), np.log(y))
    k, loga = float(ll.slope), float(ll.intercept)
    n = L.size
    ci = None
    if n > 2:
        half = float(t.ppf(0.5 + confidence / 2, n - 2)) * float(ll.stderr)
        ci = (k - half, k + half)
    lin = linregress(L, y)
    pred_pow = np.exp(loga) * L ** k
    pred_lin = lin.intercept + lin.slope * L
    r2_pow, r2_lin = _r2(y, pred_pow), _r2(y, pred_lin)
    uniq = np.unique(L)
    tpt = tuple(float(np.mean(y[L == u] / u)) for u in uniq)
    return ScalingFit(
        lengths=tuple(float(u) for u in uniq), time_per_input_token=tpt, exponent=k,
        exponent_ci=ci, power_coefficient=float(np.exp(loga)), r2_loglog=float(ll.rvalue ** 2),
        linear_intercept=float(lin.intercept), linear_slope=float(lin.slope), r2_linear=r2_lin,
        r2_power_linear_space=r2_pow, better="power" if r2_pow > r2_lin else "linear", n=n,
    )
