"""The one adapter between the gate and the metric registry (§6: direction of a change).

Everything in :mod:`pytest_llmbench.gate` asks :func:`metric_info` what a metric is; the answer
comes from :mod:`pytest_llmbench.measure.registry` (kind, unit family, direction, title).
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
    """The definition of metric ``name`` (or an alias) from :func:`pytest_llmbench.measure.registry.lookup`.

    A metric without a direction (``neutral``) or a per-request column cannot be gated.
    """
    from ..measure.registry import METRICS, lookup

    try:
        m = lookup(name)
    except KeyError:
        gated = sorted(k for k, v in METRICS.items() if v.kind != "column" and v.direction != "neutral")
        raise UnknownMetricError(f"unknown metric {name!r}; known: {', '.join(gated)}") from None
    if m.kind == "column" or m.direction == "neutral":
        raise UnknownMetricError(f"metric {name!r} has no better direction (registry: {m.direction}, {m.kind}); "
                                 "a regression cannot be defined on it")
    return GateMetric(m.name, m.kind, m.family, m.higher_is_better, m.title)
