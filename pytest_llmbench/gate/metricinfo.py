"""The one adapter between the gate and the metric catalogue (§6: direction of a change).

Everything in :mod:`pytest_llmbench.gate` asks :func:`metric_info` what a metric is; switching
to the metric registry later means changing this one function.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GateMetric", "UnknownMetricError", "metric_info"]


class UnknownMetricError(ValueError):
    """A metric name the catalogue does not know (the message lists the known ones)."""


@dataclass(frozen=True)
class GateMetric:
    """What the gate needs to know about a metric."""

    name: str
    kind: str  # "distribution" (per-request samples) | "scalar" (one figure per run)
    unit: str  # unit family: time, token_rate, request_rate, fraction, ratio, tokens
    higher_is_better: bool
    title: str

    @property
    def worse(self) -> str:
        """``"higher"`` or ``"lower"``: which way a regression moves the value."""
        return "lower" if self.higher_is_better else "higher"


def metric_info(name: str) -> GateMetric:
    """The definition of metric ``name`` (today from :data:`pytest_llmbench.slo.METRICS`)."""
    from ..slo import METRICS

    info = METRICS.get(name)
    if info is None:
        raise UnknownMetricError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}")
    return GateMetric(info.name, info.kind, info.unit, info.higher_is_better, info.title)
