"""Repeated runs side by side (§6.3: at least 3 independent runs, CIs for key metrics): each matched
test's figures over the runs, summarised by :func:`pytest_llmbench.measure.stats.runs.summarize_runs`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..measure.stats.runs import MIN_RUNS, RunsSummary, summarize_runs
from .compare import DEFAULT_FIGURES, _matches, figure_value
from .rules import parse_rule

__all__ = ["MIN_RUNS", "RunsSummary", "across_runs", "summarize_runs"]


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
