"""A test's stored runs over time for one figure, with change points (§6.3 across runs).

Change points come from :func:`pytest_llmbench.measure.stats.runs.change_points` (``ruptures`` PELT
with an L2 cost; an optional extra: ``pip install 'pytest-llmbench[history]'``), imported only when
history is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..measure.stats.runs import change_points
from .compare import _matches, figure_value
from .rules import parse_rule
from .storage import StoredRun

__all__ = ["HistoryPoint", "HistorySeries", "history"]


@dataclass(frozen=True)
class HistoryPoint:
    run: str
    commit: str
    saved: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int | None
    change_point: bool = False


@dataclass
class HistorySeries:
    """One test/procedure's values of ``figure`` over the stored runs, oldest first (rendered by
    ``report.comparison.render_history`` from :meth:`to_json`)."""

    procedure: str
    tests: list[str]
    figure: str
    points: list[HistoryPoint]
    method: str
    unit: str = ""  # the figure's unit family (gate.metricinfo)

    def to_json(self) -> dict[str, Any]:
        return {"procedure": self.procedure, "tests": self.tests, "figure": self.figure, "unit": self.unit,
                "method": self.method, "points": [p.__dict__ for p in self.points]}


def history(runs: Sequence[StoredRun], figure: str = "ttft.p99", *, test: str | None = None,
            detect: bool = True) -> list[HistorySeries]:
    """Per procedure of the newest run (or only those whose test id contains ``test``), the figure's
    value in every stored run that has the same test, with change points marked."""
    rule = parse_rule(f"{figure}:0%")
    if not runs:
        return []
    out = []
    newest = runs[-1]
    for proc in newest.document.get("procedures") or []:
        tests = list(proc.get("tests") or [])
        if test is not None and not any(test in t for t in tests) and test != proc.get("procedure"):
            continue
        pts = []
        for r in runs:
            m = _matches(proc, r.document.get("procedures") or [])
            if m is None:
                continue
            v = figure_value(r, m, rule)
            pts.append(HistoryPoint(r.id, r.commit, r.saved, None if not v else v.get("value"),
                                    None if not v else v.get("ci_low"), None if not v else v.get("ci_high"),
                                    None if not v else v.get("n")))
        method = "no change-point detection"
        if detect:
            idx = [i for i, p in enumerate(pts) if p.value is not None]
            cps = change_points([pts[i].value for i in idx])  # type: ignore[misc]
            marked = {idx[c] for c in cps}
            pts = [HistoryPoint(**{**p.__dict__, "change_point": i in marked}) for i, p in enumerate(pts)]
            method = "change points: ruptures PELT, L2 cost, penalty 3·σ²·ln(n), minimum segment 2 runs"
        out.append(HistorySeries(f"{proc.get('procedure')} {proc.get('title', '')}".strip(), tests, figure, pts, method,
                                 rule.info.unit))
    return out
