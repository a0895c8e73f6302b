"""Is a change real? Confidence intervals of the change between a baseline and a new run (§6.3).

The regression gate's estimators (``gate/compare.py``), kept beside the other statistics; the
document's 5.7/5.10 differences (``document/plotdata.py``) use :func:`percentile_change` too.

Three estimators, one result type (:class:`Change`), all deterministic (fixed seed):

* :func:`percentile_change` — one run per side with per-request samples: a percentile bootstrap
  of the difference (and of the ratio) of the two sample percentiles. Each side is resampled
  independently. The resampled percentile is drawn *exactly* without materialising resamples:
  a resample of the empirical distribution is the inverse empirical CDF applied to uniforms, so
  its k-th order statistic is ``x_(⌈n·U_(k)⌉)`` with ``U_(k) ~ Beta(k, n-k+1)``, and the next
  one follows from ``U_(k+1) = U_(k) + (1-U_(k))·Beta(1, n-k)`` (numpy's "linear" percentile
  interpolates between the two). That is the ordinary bootstrap distribution, in O(B) per side.
* :func:`mean_change` — the same bootstrap for the mean (resamples drawn in chunks).
* :func:`scalar_change` — a run-level figure (throughput) with its own CI (batch means, t
  interval): the two CIs are read back as normal standard errors and the difference/ratio is
  simulated (parametric bootstrap).
* :func:`across_runs_change` — repeated runs on either side (§6.3 "multiple independent runs"):
  the across-run values; Student-t CI of the difference of the means with the *larger* of the two
  standard deviations when the run counts differ (pooled when equal), ``df = n_a + n_b - 2``;
  a side with one run borrows the other's variation.

A change is significant at level ``1 - confidence`` when its CI excludes the threshold; see
docs/regression-gate.md for why the gate requires the whole two-sided CI beyond the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "Change",
    "DEFAULT_SEED",
    "across_runs_change",
    "bootstrap_percentile_draws",
    "mean_change",
    "percentile_change",
    "scalar_change",
    "widen_by_history",
]

BOOTSTRAP_RESAMPLES = 4000
DEFAULT_SEED = 20260123
#: Above this many samples on a side, the mean's CI uses the normal approximation instead of resampling.
BOOTSTRAP_MEAN_MAX_N = 50_000
_Z_CACHE: dict[float, float] = {}


@dataclass(frozen=True)
class Change:
    """A change from ``baseline`` to ``new`` with its CI, absolute and relative.

    ``diff = new - baseline`` (base units), ``rel = new / baseline - 1``; the CIs are two-sided at
    ``confidence``. ``n_baseline``/``n_new`` count samples (or runs, for across-run methods).
    """

    baseline: float
    new: float
    diff: float
    diff_ci: tuple[float, float]
    rel: float
    rel_ci: tuple[float, float]
    n_baseline: int
    n_new: int
    confidence: float
    method: str
    p_value: float = math.nan  # two-sided test of "no change" by the same method (§6.3: name the test and p)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["diff_ci"], d["rel_ci"] = list(self.diff_ci), list(self.rel_ci)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def _clean_sorted(x: ArrayLike, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    a = np.sort(a[np.isfinite(a)])
    if a.size == 0:
        raise ValueError(f"{what}: no finite samples")
    return a


def _interp(x: np.ndarray, p: float) -> float:
    return float(np.percentile(x, p, method="linear"))


def bootstrap_percentile_draws(sorted_x: np.ndarray, p: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of the bootstrap distribution of the sample ``p``-th percentile (linear rule)."""
    x = sorted_x
    n = x.size
    if n == 1:
        return np.full(size, x[0])
    h = (n - 1) * p / 100.0
    lo = int(math.floor(h))
    frac = h - lo
    k = lo + 1  # 1-based rank of the lower order statistic
    u_k = rng.beta(k, n - k + 1, size=size)
    idx_k = np.clip(np.ceil(u_k * n).astype(np.int64) - 1, 0, n - 1)
    if frac == 0.0 or k >= n:
        return x[idx_k].astype(float)
    u_k1 = u_k + (1.0 - u_k) * rng.beta(1, n - k, size=size)
    idx_k1 = np.clip(np.ceil(u_k1 * n).astype(np.int64) - 1, 0, n - 1)
    return x[idx_k] + frac * (x[idx_k1] - x[idx_k])


def _from_draws(base: float, new: float, db: np.ndarray, dn: np.ndarray, nb: int, nn: int,
                confidence: float, method: str) -> Change:
    alpha = 1.0 - confidence
    diff = dn - db
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = dn / db - 1.0
    qs = [100 * alpha / 2, 100 * (1 - alpha / 2)]
    d_lo, d_hi = (float(v) for v in np.percentile(diff, qs))
    rel = rel[np.isfinite(rel)]
    r_lo, r_hi = (float(v) for v in np.percentile(rel, qs)) if rel.size else (math.nan, math.nan)
    r = new / base - 1.0 if base != 0 else math.nan
    # bootstrap p-value of "no change": twice the smaller tail of the difference's distribution at 0
    p = min(1.0, 2.0 * min(float(np.mean(diff <= 0)), float(np.mean(diff >= 0))) + 1.0 / diff.size)
    return Change(base, new, new - base, (d_lo, d_hi), r, (r_lo, r_hi), nb, nn, confidence, method, p)


def percentile_change(baseline: ArrayLike, new: ArrayLike, p: float, *, confidence: float = 0.95,
                      resamples: int = BOOTSTRAP_RESAMPLES, seed: int = DEFAULT_SEED) -> Change:
    """Change of the ``p``-th percentile between two sample sets, percentile-bootstrap CI."""
    xb, xn = _clean_sorted(baseline, "baseline samples"), _clean_sorted(new, "new samples")
    rng = np.random.default_rng(seed)
    db = bootstrap_percentile_draws(xb, p, resamples, rng)
    dn = bootstrap_percentile_draws(xn, p, resamples, rng)
    method = (f"percentile bootstrap of the P{p:g} difference ({resamples} resamples per side, "
              f"seed {seed}), {confidence:.0%} CI")
    return _from_draws(_interp(xb, p), _interp(xn, p), db, dn, xb.size, xn.size, confidence, method)


def _boot_means(x: np.ndarray, size: int, rng: np.random.Generator, chunk_elems: int = 4_000_000) -> np.ndarray:
    out = np.empty(size)
    step = max(1, chunk_elems // x.size)
    for i in range(0, size, step):
        m = min(step, size - i)
        out[i:i + m] = x[rng.integers(0, x.size, size=(m, x.size))].mean(axis=1)
    return out


def mean_change(baseline: ArrayLike, new: ArrayLike, *, confidence: float = 0.95,
                resamples: int = BOOTSTRAP_RESAMPLES, seed: int = DEFAULT_SEED) -> Change:
    """Change of the mean between two sample sets, percentile-bootstrap CI."""
    xb, xn = _clean_sorted(baseline, "baseline samples"), _clean_sorted(new, "new samples")
    rng = np.random.default_rng(seed)
    if max(xb.size, xn.size) > BOOTSTRAP_MEAN_MAX_N:  # resampling would cost B·n; the CLT is exact enough
        db = rng.normal(xb.mean(), xb.std(ddof=1) / math.sqrt(xb.size), resamples)
        dn = rng.normal(xn.mean(), xn.std(ddof=1) / math.sqrt(xn.size), resamples)
        method = (f"normal approximation of each mean (n > {BOOTSTRAP_MEAN_MAX_N}), simulated difference "
                  f"({resamples} draws, seed {seed}), {confidence:.0%} CI")
        return _from_draws(float(xb.mean()), float(xn.mean()), db, dn, xb.size, xn.size, confidence, method)
    db, dn = _boot_means(xb, resamples, rng), _boot_means(xn, resamples, rng)
    method = f"percentile bootstrap of the mean difference ({resamples} resamples per side, seed {seed}), {confidence:.0%} CI"
    return _from_draws(float(xb.mean()), float(xn.mean()), db, dn, xb.size, xn.size, confidence, method)


def _se_from_ci(value: float, lo: float | None, hi: float | None, confidence: float) -> float:
    from scipy import stats as sps  # imported when used (start-up of every session)
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        return max(hi - lo, 0.0) / (2 * z)
    bound = lo if lo is not None else hi
    if bound is not None and math.isfinite(bound):
        return abs(value - bound) / z
    return math.nan


def scalar_change(baseline: dict[str, Any], new: dict[str, Any], *, confidence: float = 0.95,
                  resamples: int = BOOTSTRAP_RESAMPLES, seed: int = DEFAULT_SEED) -> Change:
    """Change of a run-level figure given as two Estimate dicts (``value``, ``ci_low``, ``ci_high``,
    ``confidence``, ``n``): normal errors read from the CIs, parametric bootstrap of the difference."""
    vb, vn = float(baseline["value"]), float(new["value"])
    sb = _se_from_ci(vb, baseline.get("ci_low"), baseline.get("ci_high"), float(baseline.get("confidence") or 0.95))
    sn = _se_from_ci(vn, new.get("ci_low"), new.get("ci_high"), float(new.get("confidence") or 0.95))
    if not (math.isfinite(sb) and math.isfinite(sn)):
        raise ValueError("a run-level figure without a confidence interval cannot be tested for significance")
    rng = np.random.default_rng(seed)
    db, dn = rng.normal(vb, sb, resamples), rng.normal(vn, sn, resamples)
    method = (f"parametric bootstrap from each run's CI ({baseline.get('method') or 'normal'}; "
              f"{resamples} draws, seed {seed}), {confidence:.0%} CI")
    return _from_draws(vb, vn, db, dn, int(baseline.get("n") or 0), int(new.get("n") or 0), confidence, method)


def across_runs_change(baseline: Sequence[float], new: Sequence[float], *, confidence: float = 0.95) -> Change:
    """Change of the mean across repeated runs (§6.3), Student-t CI; the larger variation when the
    run counts differ; a single run on one side uses the other side's variation."""
    a = np.asarray([v for v in baseline if v is not None and math.isfinite(v)], dtype=float)
    b = np.asarray([v for v in new if v is not None and math.isfinite(v)], dtype=float)
    na, nb = a.size, b.size
    if na == 0 or nb == 0 or na + nb < 3:
        raise ValueError(f"across-run comparison needs >= 1 run per side and >= 3 in all (got {na} and {nb})")
    sa = float(a.std(ddof=1)) if na > 1 else math.nan
    sbv = float(b.std(ddof=1)) if nb > 1 else math.nan
    if na > 1 and nb > 1:
        if na == nb:
            s = math.sqrt((sa * sa + sbv * sbv) / 2)
            how = "pooled standard deviation"
        else:
            s = max(sa, sbv)
            how = "the larger standard deviation (run counts differ)"
    else:
        s = sa if na > 1 else sbv
        how = "the standard deviation of the side with repeated runs"
    df = max(na + nb - 2, 1)
    from scipy import stats as sps  # imported when used (start-up of every session)
    t = float(sps.t.ppf(0.5 + confidence / 2, df))
    half = t * s * math.sqrt(1 / na + 1 / nb)
    ma, mb = float(a.mean()), float(b.mean())
    d = mb - ma
    rel = d / ma if ma != 0 else math.nan
    rel_half = half / abs(ma) if ma != 0 else math.nan
    method = f"Student-t CI across runs ({na} vs {nb} runs, {how}, df={df}), {confidence:.0%} CI"
    se = s * math.sqrt(1 / na + 1 / nb)
    p = float(2 * sps.t.sf(abs(d) / se, df)) if se > 0 else (1.0 if d == 0 else 0.0)
    return Change(ma, mb, d, (d - half, d + half), rel, (rel - rel_half, rel + rel_half), na, nb, confidence,
                  method, p)


def widen_by_history(c: Change, values: Sequence[float]) -> Change:
    """Widen a single-run-per-side CI by the run-to-run variation seen in the stored history (§6.3).

    Two single runs differ by within-run sampling noise **and** by whatever moved between the runs
    (host load, scheduling, thermal state), which no within-run bootstrap can see. With ``k`` stored
    runs of the same test, ``s`` (their SD) estimates the whole per-run variation, so the difference
    of two runs has SD ``s·√2``; the CI becomes the wider of the bootstrap CI and
    ``diff ± t(k-1)·s·√2`` on each side, and the p-value the larger of the two.
    """
    x = np.asarray(values, dtype=float)
    k = x.size
    s = float(x.std(ddof=1))
    from scipy import stats as sps  # imported when used (start-up of every session)
    t = float(sps.t.ppf(0.5 + c.confidence / 2, k - 1))
    half = t * s * math.sqrt(2)
    d_lo, d_hi = min(c.diff_ci[0], c.diff - half), max(c.diff_ci[1], c.diff + half)
    base = c.baseline if c.baseline else math.nan
    r_lo, r_hi = min(c.rel_ci[0], c.rel - half / abs(base)), max(c.rel_ci[1], c.rel + half / abs(base))
    p_hist = float(2 * sps.t.sf(abs(c.diff) / (s * math.sqrt(2)), k - 1)) if s > 0 else c.p_value
    method = (f"{c.method}, widened by the between-run SD {s:.4g} of {k} stored runs of this test "
              f"(t, df={k - 1}: ±{half:.4g}): variance used = within-run bootstrap or between-run history, "
              f"whichever is wider")
    return Change(c.baseline, c.new, c.diff, (d_lo, d_hi), c.rel, (r_lo, r_hi), c.n_baseline, c.n_new,
                  c.confidence, method, max(c.p_value, p_hist))
