"""Statistics across repeated runs (§6.3: at least 3 independent runs, CIs for key metrics)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from .compare import DEFAULT_FIGURES, _matches, figure_value
from .rules import parse_rule
from .significance import MIN_RUNS

__all__ = ["MIN_RUNS", "RunsSummary", "across_runs", "summarize_runs"]



@dataclass(frozen=True)
class RunsSummary:
    """Mean, standard deviation, coefficient of variation and Student-t CI of one figure over runs."""

    figure: str
    n: int
    mean: float
    std: float
    cv: float
    ci_low: float | None
    ci_high: float | None
    confidence: float
    values: tuple[float, ...]
    method: str

    @property
    def enough_runs(self) -> bool:
        """True when §6.3's minimum of 3 independent runs is met."""
        return self.n >= MIN_RUNS

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["values"] = list(self.values)
        d["enough_runs"] = self.enough_runs
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def summarize_runs(figure: str, values: Sequence[float | None], *, confidence: float = 0.95) -> RunsSummary:
    """Across-run statistics of ``values`` (one per run; None/NaN left out).

    ``std`` is the sample standard deviation (ddof=1), ``cv = std / |mean|``, the CI is
    ``mean ± t(1-α/2, n-1)·std/√n``; with one run std, CV and the CI are undefined (NaN/None).
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(x.size)
    if n == 0:
        raise ValueError(f"{figure}: no finite values to summarise across runs")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else math.nan
    cv = std / abs(mean) if n > 1 and mean != 0 else math.nan
    if n > 1:
        half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = None
    return RunsSummary(figure, n, mean, std, cv, lo, hi, confidence, tuple(float(v) for v in x),
                       f"Student-t CI across {n} runs (df={n - 1})" if n > 1 else "single run: no across-run CI")


def across_runs(runs: Sequence[Any], figures: Sequence[str] | None = None, *,
                confidence: float = 0.95) -> dict[str, dict[str, RunsSummary]]:
    """Per procedure title and figure, the across-run summary of stored runs (same tests matched).

    ``runs`` are :class:`~.storage.StoredRun`; ``figures`` default to :data:`~.compare.DEFAULT_FIGURES`.
    """
    figs = list(figures or DEFAULT_FIGURES)
    out: dict[str, dict[str, RunsSummary]] = {}
    if not runs:
        return out
    for proc in runs[0].document.get("procedures") or []:
        side = [(runs[0], proc)] + [(r, m) for r in runs[1:] if (m := _matches(proc, r.document.get("procedures") or []))]
        title = f"{proc.get('procedure')} {proc.get('title', '')}".strip()
        per: dict[str, RunsSummary] = {}
        for f in figs:
            rule = parse_rule(f"{f}:0%")
            vals = [v.get("value") for r, p in side if (v := figure_value(r, p, rule))]
            vals = [v for v in vals if v is not None]
            if vals:
                per[f] = summarize_runs(f, vals, confidence=confidence)
        out[title] = per
    return out
