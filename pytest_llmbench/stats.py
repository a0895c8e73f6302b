"""Statistics: percentiles with confidence intervals, sample-size rules, fits (§5.1.4.3, §5.3.4, §5.9.4).

The result types here are shared contracts: metrics.py produces them, slo.py, compliance.py and
the reports consume them. Times are in seconds, throughputs in per-second units.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Estimate", "Distribution", "MIN_SAMPLES"]

#: Minimum sample counts for a percentile to be reported as adequately sampled (§5.1.4.3):
#: P99 needs >= 1000 samples, P99.9 >= 10,000. Other percentiles use the order-statistic rule
#: (at least one sample beyond the quantile on average: n >= 1 / (1 - q)).
MIN_SAMPLES: dict[float, int] = {99.0: 1000, 99.9: 10_000}


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
        return asdict(self)


@dataclass(frozen=True)
class Distribution:
    """Summary of one sample set: P50, P90, P95, P99, P99.9, mean, min, max, std (§5.1.4.1).

    ``percentiles`` maps the percentile (50.0, 90.0, 95.0, 99.0, 99.9) to its :class:`Estimate`;
    :meth:`percentile` computes any other one from the kept samples when they were kept.
    """

    name: str
    unit: str
    n: int
    mean: Estimate
    std: float
    min: float
    max: float
    percentiles: dict[float, Estimate] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["percentiles"] = {f"p{k:g}": v.to_json() for k, v in self.percentiles.items()}
        return d
