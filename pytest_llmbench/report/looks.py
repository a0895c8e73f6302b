"""The bound narrowing against the threshold, look by look, of a run that stops when decided (issue 47).

``--llm-stop-when-decided`` judges each percentile SLO at a fixed schedule of looks; the run's ``extra``
(``procedures[].result.runs[].extra.look_trace``, written by ``procedures/stopping.py``) keeps, per SLO and
look (and the look the run stopped at, ``run_stopped_at``), both one-sided bounds on the share of requests beyond the threshold and the limit the share must stay
under (``1 - q`` for ``P_q <= X``). :func:`look_figures` draws one small chart per SLO from it: the band
between the bounds narrows as requests arrive; PASS once the upper bound is below the limit, FAIL once the
lower bound is above it. Nothing but the document is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .figures import Figure
from .svg import FAIL_COLOUR, MUTED_COLOUR, PALETTE, PASS_COLOUR, SLO_COLOUR, Chart

__all__ = ["look_figures"]

_VERDICT_COLOUR = {"PASS": PASS_COLOUR, "FAIL": FAIL_COLOUR}


def _pct(v: float) -> float:
    return 100.0 * float(v)


def _chart(label: str, slo: str, points: Sequence[Mapping[str, Any]], stopped_at: int | None) -> Figure:
    xs = [float(p["look"]) for p in points]
    lo = [_pct(p["lower"]) for p in points]
    hi = [_pct(p["upper"]) for p in points]
    limit = _pct(points[-1]["limit"])
    chart = Chart.create(kind="slo-looks", title=f"{slo}: bound at each look", x_label="requests judged at the look",
                         y_label="share beyond the threshold (%)", xs=[0.0, *xs], ys=[0.0, limit, *lo, *hi],
                         x_zero=True, width=420, height=260)
    chart.line(xs, hi, series="upper bound", colour=PALETTE[0])
    chart.line(xs, lo, series="lower bound", colour=PALETTE[0], dashed=True)
    colours = [_VERDICT_COLOUR.get(str(p["verdict"]), MUTED_COLOUR) for p in points]
    data = [{"verdict": p["verdict"], "exceedances": p["exceedances"], "n": p["n"],
             "held-by-drift": str(bool(p.get("held_by_drift"))).lower()} for p in points]
    chart.points(xs, hi, series="verdict at the look", colour=colours, data=data, legend=False)
    chart.hline(limit, f"limit {limit:.3g}%", colour=SLO_COLOUR)
    if stopped_at is not None:
        chart.vline(float(stopped_at), f"stopped at {stopped_at:,}")
    last = points[-1]
    held = [f"{p['look']:,}" for p in points if p.get("held_by_drift")]
    conf = last.get("confidence")
    caption = (f"Run {label}: each look judged the first n requests sent, all finished; the band is the two "
               f"one-sided bounds on the share beyond the threshold"
               + (f" at the look's confidence ({100 * float(conf):.3g}%)" if conf else "")
               + f". PASS once the upper bound is below the limit ({limit:.3g}%), FAIL once the lower bound is "
               f"above it. Last look: {last['verdict']} at {last['look']:,} requests, {last['exceedances']:g} beyond"
               + (f"; stopped at {stopped_at:,}" if stopped_at is not None else "; the run went to its plan")
               + (f"; held back by drift at {', '.join(held)}" if held else "") + ".")
    return Figure(f"slo-looks-{label}-{slo}", f"{slo}: the bound narrowing look by look", caption, chart.render())


def look_figures(result: Mapping[str, Any]) -> list[Figure]:
    """One chart per percentile SLO of each run of ``result`` (a procedure's ``result`` in results.json)
    that was judged at looks (``extra.look_trace``)."""
    out = []
    for run in result.get("runs") or []:
        extra = run.get("extra") or {}
        for t in extra.get("look_trace") or []:
            if t.get("points"):
                out.append(_chart(str(run.get("label")), str(t.get("slo")), t["points"], t.get("run_stopped_at")))
    return out
