"""Figures for the HTML report, drawn from the report form of the plot data (pytest_llmbench/plotdata.py).

One function per plot kind; each returns :class:`Figure` objects (title, caption, SVG text).
Times are plotted in ms. Nothing here reads anything but the document, so a report rebuilt from
``results.json`` draws the same figures byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .fmt import fmt_num, fmt_time
from .svg import FAIL_COLOUR, MARK_COLOUR, PALETTE, PASS_COLOUR, Chart, grouped_bars

__all__ = ["Figure", "figures_for"]

#: below this many samples a histogram shows noise, not a shape: only the CDF is drawn
MIN_HISTOGRAM_SAMPLES = 30
_NAMES = {"ttft": "TTFT", "itl": "ITL", "time_between_chunks": "Time between chunks", "e2e": "E2E latency",
          "tpot": "TPOT", "ttst": "TTST", "queue_wait": "queue wait", "prefill": "prefill"}


def _g(v: float | None) -> str:
    """Compact number for labels: ``8``, ``0.09``, ``1,234.5``."""
    return "n/a" if v is None else f"{v:,.4g}"


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    caption: str
    svg: str


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _metric_name(name: str) -> str:
    return _NAMES.get(name, name.replace("_", " "))


def _samples(key: str, d: Mapping[str, Any], proc: str) -> list[Figure]:
    name = _metric_name(str(d.get("name", key)))
    stats = d["stats"]
    n = d["n"]
    out: list[Figure] = []
    marks = [("P50", stats.get("p50")), ("P99", stats.get("p99"))]
    src = f" Samples: {d.get('source')}." if d.get("source") else ""
    summary = (f"n = {n:,}; P50 {fmt_time(stats.get('p50'))}, P90 {fmt_time(stats.get('p90'))}, "
               f"P99 {fmt_time(stats.get('p99'))}, max {fmt_time(stats.get('max'))}.{src}")
    if n < MIN_HISTOGRAM_SAMPLES:
        summary += f" No histogram: {n} samples are too few to show a shape (needs {MIN_HISTOGRAM_SAMPLES})."
    if key != "itl_samples_s" and n >= MIN_HISTOGRAM_SAMPLES:  # ITL: CDF only (§5.4.5)
        h = d["histogram"]
        edges = [e * 1000.0 for e in h["edges"]]
        chart = Chart.create(kind="histogram", title=f"{proc} {name} histogram", x_label=f"{name} (ms)",
                             y_label="requests", xs=edges, ys=h["counts"], x_zero=False)
        chart.bars(edges, h["counts"], series=f"{name} samples")
        for label, v in marks:
            if v is not None:
                chart.vline(v * 1000.0, f"{label} {fmt_time(v)}", kind="marker percentile")
        out.append(Figure(f"{key}-histogram", f"{name} distribution (histogram)",
                          f"Exact bin counts over all {n:,} samples. " + summary, chart.render()))
    cdf = d["cdf"]
    xs = [x * 1000.0 for x in cdf["x"]]
    ps = list(cdf["p"])
    cut = stats.get("p99.9")
    if key == "itl_samples_s" and cut is not None and stats.get("max") is not None and stats["max"] > cut:
        # a linear axis to the maximum squeezes the data into its left edge: cut at P99.9 (§5.4.5)
        keep = [i for i, x in enumerate(xs) if x <= cut * 1000.0]
        xs, ps = [xs[i] for i in keep], [ps[i] for i in keep]
        summary += f" Axis cut at P99.9 ({fmt_time(cut)}); the maximum is {fmt_time(stats['max'])}."
    unit_noun = "requests" if key == "ttft_samples_s" else "samples"
    chart = Chart.create(kind="cdf", title=f"{proc} {name} CDF", x_label=f"{name} (ms)",
                         y_label=f"cumulative fraction of {unit_noun}", xs=xs, ys=[0.0, 1.0], x_zero=False)
    chart.line(xs, ps, series=f"{name} empirical CDF", step=True, legend=False)
    pts = [(label, v, q) for label, v, q in (("P50", stats.get("p50"), 0.5), ("P90", stats.get("p90"), 0.9),
                                             ("P99", stats.get("p99"), 0.99)) if v is not None]
    chart.points([v * 1000.0 for _, v, _ in pts], [q for _, _, q in pts], series="percentiles",
                 colour=MARK_COLOUR, data=[{"percentile": lab} for lab, _, _ in pts],
                 labels=[f"{lab} {fmt_time(v)}" for lab, v, _ in pts], legend=False)
    out.append(Figure(f"{key}-cdf", f"{name} cumulative distribution",
                      f"Empirical CDF drawn through {len(xs):,} exact order statistics. " + summary, chart.render()))
    return out


def _curve(d: Mapping[str, Any], proc: str) -> list[Figure]:
    """Throughput vs offered load, and latency (log y) vs achieved throughput with knee/capacity (§5.3.4)."""
    offered, tps, p99 = d["offered"], d["achieved_tps"], d["ttft_p99_s"]
    p50 = d.get("ttft_p50_s")
    unit = d.get("offered_unit", "req/s")
    label = d.get("offered_label") or f"offered load ({unit})"
    knee, sat = d.get("knee_index"), d.get("saturation_index")
    knee_note = d.get("knee_note")
    figs = []
    chart = Chart.create(kind="curve-throughput", title=f"{proc} achieved throughput vs offered load", x_label=label,
                         y_label="achieved output throughput (tok/s)", xs=offered, ys=tps, x_zero=True, pad=0.05)
    chart.line(offered, tps, series="achieved throughput", colour=PALETTE[0], legend=False)
    chart.points(offered, tps, series="achieved throughput", colour=PALETTE[0], legend=False,
                 data=[{"level": i} for i in range(len(offered))])
    if sat is not None and offered[sat] is not None:
        chart.vline(offered[sat], f"saturation @ {_g(offered[sat])} {unit}", kind="marker saturation")
    figs.append(chart.render())
    # latency against what the SUT delivered: the layout guidellm/AIPerf users read
    ys_all = [v for v in [*(p99 or []), *(p50 or [])] if v is not None and v > 0]
    lat = Chart.create(kind="curve-latency", title=f"{proc} TTFT vs achieved throughput",
                       x_label="achieved output throughput (tok/s)", y_label="TTFT (ms, log scale)",
                       xs=[*tps, d.get("capacity_tps")], ys=[_ms(v) for v in ys_all], y_log=True, y_zero=False,
                       x_zero=True, pad=0.05)
    for series, ys, colour in (("TTFT P99", p99, PALETTE[1]), ("TTFT P50", p50, PALETTE[0])):
        if ys:
            lat.line(tps, [_ms(v) for v in ys], series=series, colour=colour)
            lat.points(tps, [_ms(v) for v in ys], series=series, colour=colour, legend=False,
                       data=[{"level": i} for i in range(len(tps))])
    if knee is not None and tps[knee] is not None:
        lat.vline(tps[knee], f"knee{' (within noise)' if knee_note else ''} @ {_g(offered[knee])} {unit}",
                  kind="marker knee")
    if d.get("capacity_tps") is not None:
        lat.vline(d["capacity_tps"], f"capacity {_g(d['capacity_tps'])} tok/s", colour=PALETTE[2],
                  kind="marker capacity")
    figs.append(lat.render())
    notes = []
    for idx, name in ((knee, "Knee (first level with P99 > 2x the minimum P99, §5.3.4)"),
                      (sat, "Saturation (first level whose throughput falls, §5.3.4)")):
        notes.append(f"{name}: " + (f"{_g(offered[idx])} {unit}" if idx is not None else "not reached") + ".")
    if knee_note:
        notes.append(f"Note: {knee_note}.")
    return [Figure("curve", "Throughput–latency curve", " ".join(notes), "\n".join(figs))]


def _search(d: Mapping[str, Any], proc: str) -> list[Figure]:
    steps = d["steps"]
    xs = list(range(1, len(steps) + 1))
    value_label = str(d.get("value_label", "value"))
    seconds = value_label.endswith("(s)")  # one unit vocabulary: times in the report's ms/s format
    vfmt = fmt_time if seconds else _g
    if seconds:
        value_label = value_label[: -len("(s)")].strip()
    levels = [s["level"] for s in steps]
    chart = Chart.create(kind="search", title=f"{proc} capacity search", x_label="search step",
                         y_label=d.get("level_label", "load level"), xs=xs, ys=levels, x_zero=True, pad=0.08)
    chart.line(xs, levels, series="level tried", colour="#999999", legend=False)
    colours = [PASS_COLOUR if s["passed"] else FAIL_COLOUR for s in steps]
    chart.points(xs, levels, series="step", colour=colours, r=5.5, legend=False,
                 data=[{"passed": s["passed"], "value": s.get("value"), "level": s["level"]} for s in steps],
                 labels=[("pass" if s["passed"] else "fail") + (f" {vfmt(s['value'])}" if s.get("value") is not None
                                                                else "") for s in steps])
    chart.legend_items = [("passed", PASS_COLOUR, "point"), ("failed", FAIL_COLOUR, "point")]
    passed = [s["level"] for s in steps if s["passed"]]
    best = f"highest passing level {_g(max(passed))}" if passed else "no level passed"
    return [Figure("search", "Capacity search steps",
                   f"{len(steps)} steps; {best}. Point labels: {value_label}.", chart.render())]


def _scaling(d: Mapping[str, Any], proc: str) -> list[Figure]:
    L, t = d["length"], [_ms(v) for v in d["ttft_s"]]
    chart = Chart.create(kind="scaling", title=f"{proc} TTFT vs context length (log-log)",
                         x_label="context length (tokens, log scale)", y_label="TTFT (ms, log scale)",
                         xs=L, ys=t, x_log=True, y_log=True, y_zero=False, pad=0.02)
    chart.points(L, t, series="measured TTFT", colour=PALETTE[0])
    fit = d.get("fit")
    caption = "No fit (fewer than two distinct lengths)."
    if fit and fit.get("k") is not None and fit.get("c") is not None:
        k, c = fit["k"], fit["c"]
        lo, hi = chart.x.lo, chart.x.hi
        xs = [lo * (hi / lo) ** (i / 40) for i in range(41)]
        chart.line(xs, [c * x ** k * 1000.0 for x in xs], series=f"fit TTFT = c·L^k, k = {fmt_num(k, 3)}",
                   colour=PALETTE[3], dashed=True)
        caption = (f"Least-squares fit on log-log axes: TTFT = {fmt_num(c, 3)} s · L^{fmt_num(k, 3)}, "
                   f"R² = {fmt_num(fit.get('r2'), 3)} ({fit.get('source', 'procedure')}).")
    return [Figure("scaling", "Long-context scaling (§5.9.4)", caption, chart.render())]


_SUFFIX_UNITS = (("_s", "ms", 1000.0), ("_tps", "tok/s", 1.0), ("_rps", "req/s", 1.0), ("_pct", "%", 1.0))


def _series_label(metric: str) -> tuple[str, str, float]:
    for suffix, unit, factor in _SUFFIX_UNITS:
        if metric.endswith(suffix):
            base = metric[: -len(suffix)]
            m = re.match(r"^(.*)_p(\d+(?:\.\d+)?)$", base)
            name = f"{_metric_name(m.group(1))} P{m.group(2)}" if m else _metric_name(base)
            return name, unit, factor
    return _metric_name(metric), "", 1.0


def _groups(key: str, d: Mapping[str, Any], proc: str) -> list[Figure]:
    groups = list(d["groups"])
    metrics: list[str] = []
    for g in groups:
        metrics.extend(m for m in d["groups"][g] if m not in metrics)
    by_unit: dict[str, list[str]] = {}
    for m in metrics:
        by_unit.setdefault(_series_label(m)[1], []).append(m)
    what = "request class" if key == "classes" else "configuration"
    title = "Per-class latency (fairness, §5.6)" if key == "classes" else "Configuration comparison (§5.7/§5.10)"
    figs = []
    for unit, ms in by_unit.items():
        labels = [_series_label(m)[0] for m in ms]
        factor = _series_label(ms[0])[2]
        values = {g: {lab: (None if (v := d["groups"][g].get(m)) is None else v * factor)
                      for lab, m in zip(labels, ms)} for g in groups}
        ylab = f"value ({unit})" if unit else "value"
        if unit == "ms":
            ylab = "latency (ms)"
        figs.append(grouped_bars(kind=f"bars-{key}", title=f"{proc} {title}", groups=groups, series=labels,
                                 values=values, y_label=ylab, x_label=what))
    plural = what + ("es" if what.endswith("s") else "s") if len(groups) != 1 else what
    return [Figure(key, title, f"{len(groups)} {plural}: {', '.join(groups)}.", "\n".join(figs))]


def figures_for(proc: str, plots: Mapping[str, Any]) -> list[Figure]:
    """All figures of one procedure: the plot that answers its question first (curve, search, scaling,
    classes/configurations), then the sample distributions of the run behind its summary row."""
    order = {"ttft_samples_s": 0, "itl_samples_s": 1}
    out: list[Figure] = []
    for k, fn in (("curve", _curve), ("search", _search), ("scaling", _scaling)):
        if k in plots:
            out.extend(fn(plots[k], proc))
    for k in ("classes", "configs"):
        if k in plots and plots[k]["groups"]:
            out.extend(_groups(k, plots[k], proc))
    sample_keys = sorted((k for k, v in plots.items() if v.get("kind") == "samples"),
                         key=lambda k: (order.get(k, 2), k))
    for k in sample_keys:
        out.extend(_samples(k, plots[k], proc))
    return out
