"""A rate-shaped run over time (issue 50): offered against achieved rate, and the latency beside it.

A run whose arrivals followed a rate schedule keeps, per window (5 s), the schedule's offered rate, the rate
its drawn arrivals were scheduled at, the rate it achieved (sends by T_submit) and TTFT P50/P99 of the
requests sent in the window (``procedures[].result.runs[].extra.rate_shape``, written by
``procedures/rateshape.py``). :func:`rate_figures` draws, per such run, the rate function with the scheduled
and achieved rates per window, and under it the TTFT series on the same time axis. Nothing but the document
is read. Drawn by ``templates/_rate_shape.html.j2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .figures import Figure
from .svg import MUTED_COLOUR, PALETTE, SERIES_COLOURS, Chart

__all__ = ["rate_figures"]


def _mid(w: Mapping[str, Any]) -> float:
    return 0.5 * (float(w["t0_s"]) + float(w["t1_s"]))


def _ms(v: float | None) -> float | None:
    return None if v is None else 1000.0 * float(v)


def _figure(label: str, d: Mapping[str, Any]) -> Figure:
    wins = d["windows"]
    pts = d.get("rate_points") or []
    sched = d.get("schedule") or {}
    xs = [0.0, *(float(p[0]) for p in pts), *(float(w["t1_s"]) for w in wins)]
    mids = [_mid(w) for w in wins]
    rates = [float(p[1]) for p in pts] + [float(w[k]) for w in wins for k in ("achieved", "scheduled")]
    top = Chart.create(kind="rate-shape", title=f"Offered and achieved rate ({label})",
                       x_label="time since the run's start (s)", y_label="requests/s", xs=xs, ys=rates,
                       x_zero=True, height=280)
    top.legend_at = "below"  # three long labels: no row above the plot holds them
    top.line([float(p[0]) for p in pts], [float(p[1]) for p in pts], series="offered (the schedule)",
             colour=MUTED_COLOUR)
    top.line(mids, [w["scheduled"] for w in wins], series="scheduled (drawn arrivals)", colour=PALETTE[0],
             dashed=True)
    top.points(mids, [w["achieved"] for w in wins], series="achieved (sends by T_submit)", colour=PALETTE[1],
               data=[{"window": f"{w['t0_s']:g}-{w['t1_s']:g}", "sent": w["sent"], "offered": round(w["offered"], 4)}
                     for w in wins])
    p50, p99 = [_ms(w.get("ttft_p50_s")) for w in wins], [_ms(w.get("ttft_p99_s")) for w in wins]
    low = Chart.create(kind="rate-shape-ttft", title=f"TTFT per window ({label})",
                       x_label="time since the run's start (s) (requests by their send time)", y_label="TTFT (ms)",
                       xs=xs, ys=p50 + p99, x_zero=True, height=240)
    low.line(mids, p50, series="TTFT P50", colour=SERIES_COLOURS[0])
    low.line(mids, p99, series="TTFT P99", colour=SERIES_COLOURS[1 % len(SERIES_COLOURS)], dashed=True)
    sent, expected = d.get("sent"), d.get("expected")

    def span(w: Mapping[str, Any]) -> float:
        return float(w["t1_s"]) - float(w["t0_s"])

    worst = max(wins, key=lambda w: abs(w["achieved"] - w["offered"]) * span(w))
    gap, spread = (worst["achieved"] - worst["offered"]) * span(worst), (worst["offered"] * span(worst)) ** 0.5
    caption = (f"Run {label}: arrivals drawn as a non-homogeneous Poisson process (thinning) from the rate shape "
               f"{sched.get('expression', '?')}, seed {d.get('seed')}: the grey line is the offered rate, per "
               f"{d.get('window_s', 5):g}-s window the dashed line the rate the drawn arrivals were scheduled at and "
               f"the points the rate achieved (sends by T_submit). {sent:,} requests sent, {expected:,.0f} "
               f"expected from the schedule; the largest gap between achieved and offered is {gap:+.0f} requests "
               f"in {worst['t0_s']:g}–{worst['t1_s']:g} s, where a Poisson draw's own spread is ±{spread:.0f} "
               "(one standard deviation). Below: TTFT P50 and P99 of the requests sent in each window (successful "
               "ones with a content token).")
    return Figure(f"rate-shape-{label}", f"Rate shape over time ({label})", caption,
                  "\n".join((top.render(), low.render())))


def rate_figures(result: Mapping[str, Any]) -> list[Figure]:
    """One figure per run of ``result`` (a procedure's ``result`` in results.json) whose arrivals followed a
    rate schedule (``extra.rate_shape``)."""
    out = []
    for run in result.get("runs") or []:
        d = (run.get("extra") or {}).get("rate_shape")
        if d and d.get("windows"):
            out.append(_figure(str(run.get("label")), d))
    return out
