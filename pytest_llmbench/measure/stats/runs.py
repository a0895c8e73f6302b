"""Figures over a series of runs (§6.3: "multiple independent runs (at least 3)", CIs for key metrics).

* :func:`summarize_runs` — mean, standard deviation, CV and Student-t CI of one figure over repeated
  runs (``--llm-runs N``, or stored runs joined with ``+``);
* :func:`change_points` — where a figure's series over stored runs shifts (``ruptures`` PELT with an
  L2 cost; an optional extra: ``pip install 'pytest-llmbench[history]'``, imported only when asked).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["MIN_RUNS", "RunsSummary", "change_points", "summarize_runs"]

#: §6.3: "Conduct multiple independent runs (at least 3)".
MIN_RUNS = 3


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
        from scipy import stats as sps  # imported when used (start-up of every session)
        half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        lo = hi = None
    return RunsSummary(figure, n, mean, std, cv, lo, hi, confidence, tuple(float(v) for v in x),
                       f"Student-t CI across {n} runs (df={n - 1})" if n > 1 else "single run: no across-run CI")


def _ruptures() -> Any:
    try:
        import ruptures
    except ImportError:
        raise ImportError("history change points need the 'ruptures' package: "
                          "pip install 'pytest-llmbench[history]' (or pip install ruptures)") from None
    return ruptures


def change_points(values: Sequence[float], *, min_size: int = 2, penalty: float | None = None) -> list[int]:
    """Indices where a new segment starts (PELT, L2 cost). The default penalty is
    ``3·σ²·ln(n)`` with σ estimated robustly from successive differences (MAD/0.6745/√2)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2 * min_size:
        return []
    rpt = _ruptures()
    if penalty is None:
        d = np.diff(x)
        sigma = float(np.median(np.abs(d - np.median(d)))) / 0.6745 / math.sqrt(2)
        if sigma <= 0:
            sigma = float(np.std(x)) or 1.0
        penalty = 3.0 * sigma * sigma * math.log(n)
    ends = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1)).predict(pen=penalty)
    return [int(e) for e in ends[:-1]]
