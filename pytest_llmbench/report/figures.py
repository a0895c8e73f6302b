"""Figures for the HTML report, drawn from the report form of the plot data (pytest_llmbench/plotdata.py).

One function per plot kind; each returns :class:`Figure` objects (title, caption, SVG text).
Times are plotted in ms. Nothing here reads anything but the document, so a report rebuilt from
``results.json`` draws the same figures byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..measure.units import UNITS, format_value, unit_family
from .fmt import fmt_num, fmt_time
from .svg import (
    FAIL_COLOUR,
    MARK_COLOUR,
    MUTED_COLOUR,
    PALETTE,
    PASS_COLOUR,
    SERIES_COLOURS,
    SLO_COLOUR,
    Chart,
    grouped_bars,
    interval_rows,
)

__all__ = ["Figure", "diff_reading", "figures_for", "metric_name"]

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


def metric_name(name: str) -> str:
    """A metric's display name: ``TTFT``, ``E2E latency``, ``isolated TTFT`` (known words upper-cased)."""
    if name in _NAMES:
        return _NAMES[name]
    return " ".join(_NAMES.get(w, w) for w in name.split("_"))


def _axis_unit(unit: str) -> tuple[str, float]:
    """How a value in a registry unit (units.UNITS) is plotted: times in ms, others in their label."""
    if unit_family(unit) == "time":
        return "ms", 1000.0
    u = UNITS.get(unit)
    return (u.label if u is not None else unit), 1.0


def _slo_text(o: Mapping[str, Any]) -> str:
    op = {"<=": "≤", ">=": "≥"}.get(o["operator"], o["operator"])
    return f"SLO {o['label']} {op} {o['threshold_text']}"


def _slos_for(metric: str, slos: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The SLOs set on ``metric`` (any statistic or per request), in the order the tests name them."""
    return [o for o in slos if o.get("metric") == metric and o.get("threshold") is not None]


def _slo_vlines(chart: Chart, metric: str, slos: Sequence[Mapping[str, Any]], factor: float) -> list[str]:
    """SLO thresholds on ``metric`` as vertical lines of an x axis in that metric; the text of those
    that fall outside the axis, for the caption."""
    off = []
    for o in _slos_for(metric, slos):
        x = o["threshold"] * factor
        if min(chart.x.lo, chart.x.hi) <= x <= max(chart.x.lo, chart.x.hi):
            chart.vline(x, _slo_text(o), colour=SLO_COLOUR, kind="marker slo")
        else:
            off.append(f"{_slo_text(o)} lies beyond the axis")
    return off


def _samples(key: str, d: Mapping[str, Any], proc: str, slos: Sequence[Mapping[str, Any]] = ()) -> list[Figure]:
    metric = str(d.get("name", key))
    name = metric_name(metric)
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
    off = _slo_vlines(chart, metric, slos, 1000.0)
    if off:
        summary += " " + "; ".join(off) + "."
    pts = [(label, v, q) for label, v, q in (("P50", stats.get("p50"), 0.5), ("P90", stats.get("p90"), 0.9),
                                             ("P99", stats.get("p99"), 0.99)) if v is not None]
    chart.points([v * 1000.0 for _, v, _ in pts], [q for _, _, q in pts], series="percentiles",
                 colour=MARK_COLOUR, data=[{"percentile": lab} for lab, _, _ in pts],
                 labels=[f"{lab} {fmt_time(v)}" for lab, v, _ in pts], legend=False, label_side="left")
    out.append(Figure(f"{key}-cdf", f"{name} cumulative distribution",
                      f"Empirical CDF drawn through {len(xs):,} exact order statistics. " + summary, chart.render()))
    return out


def _curve(d: Mapping[str, Any], proc: str, slos: Sequence[Mapping[str, Any]] = ()) -> list[Figure]:
    """Throughput vs offered load, and latency (log y) vs achieved throughput with knee, capacity and the
    tests' SLO thresholds (§5.3.4)."""
    offered, tps, p99 = d["offered"], d["achieved_tps"], d["ttft_p99_s"]
    p50 = d.get("ttft_p50_s")
    unit = d.get("offered_unit", "req/s")
    label = d.get("offered_label") or f"offered load ({unit})"
    knee, sat = d.get("knee_index"), d.get("saturation_index")
    knee_note = d.get("knee_note")
    figs = []
    tput_slos = _slos_for("output_throughput", slos)
    chart = Chart.create(kind="curve-throughput", title=f"{proc} achieved throughput vs offered load", x_label=label,
                         y_label="achieved output throughput (tok/s)", xs=offered,
                         ys=[*tps, *(o["threshold"] for o in tput_slos)], x_zero=True, pad=0.05)
    for o in tput_slos:
        chart.hline(o["threshold"], _slo_text(o))
    chart.line(offered, tps, series="achieved throughput", colour=PALETTE[0], legend=False)
    chart.points(offered, tps, series="achieved throughput", colour=PALETTE[0], legend=False,
                 data=[{"level": i} for i in range(len(offered))])
    if sat is not None and offered[sat] is not None:
        chart.vline(offered[sat], f"saturation @ {_g(offered[sat])} {unit}", kind="marker saturation")
    figs.append(chart.render())
    # latency against what the SUT delivered: the layout guidellm/AIPerf users read
    ttft_slos = _slos_for("ttft", slos)
    ys_all = [v for v in [*(p99 or []), *(p50 or []), *(o["threshold"] for o in ttft_slos)] if v is not None and v > 0]
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
    for o in ttft_slos:
        lat.hline(o["threshold"] * 1000.0, _slo_text(o))
    figs.append(lat.render())
    notes = []
    for idx, name in ((knee, "Knee (first level with P99 > 2x the minimum P99, §5.3.4)"),
                      (sat, "Saturation (first level whose throughput falls, §5.3.4)")):
        notes.append(f"{name}: " + (f"{_g(offered[idx])} {unit}" if idx is not None else "not reached") + ".")
    if knee_note:
        notes.append(f"Note: {knee_note}.")
    if ttft_slos or tput_slos:
        notes.append("Dashed purple lines: the tests' SLOs (" + "; ".join(_slo_text(o) for o in [*ttft_slos, *tput_slos])
                     + ").")
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
    chart.line(xs, levels, series="level tried", colour=MUTED_COLOUR, legend=False)
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
            name = f"{metric_name(m.group(1))} P{m.group(2)}" if m else metric_name(base)
            return name, unit, factor
    return metric_name(metric), "", 1.0


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


#: below this ratio of the largest P99.9 to the smallest P1 a linear axis shows every series' shape
LOG_AXIS_RATIO = 20.0


def _cdfs(key: str, d: Mapping[str, Any], proc: str, slos: Sequence[Mapping[str, Any]]) -> list[Figure]:
    """One CDF per load level / request class / configuration on one plot (§5.4.5, §5.6.4, §5.7.4,
    §5.10.4): a log x axis when the series span more than :data:`LOG_AXIS_RATIO`, else a linear one cut
    at the largest P99.9 so the bodies are not squeezed against the left edge by the maxima."""
    series = d["series"]
    unit, factor = _axis_unit(d["unit"])
    title = d.get("title") or metric_name(d["metric"])
    lo = min(s["stats"]["p1"] for s in series)
    hi = max(s["stats"]["p99.9"] for s in series)
    top = max(s["stats"]["max"] for s in series)
    log = lo > 0 and hi / lo >= LOG_AXIS_RATIO
    cut = None if log or top <= hi else hi
    x_max = top if cut is None else cut
    xs_range = [min(s["stats"]["min"] for s in series) * factor, x_max * factor]
    # an SLO threshold near the data widens the axis to show it (any on a log axis, within 2x on a linear one)
    xs_range += [o["threshold"] * factor for o in _slos_for(d["metric"], slos)
                 if (log and o["threshold"] > 0) or 0 < o["threshold"] <= 2 * x_max]
    x_label = f"{title} ({unit}{', log scale' if log else ''})"
    chart = Chart.create(kind="cdfs", title=f"{proc} {title} CDF per {d['by']}", x_label=x_label,
                         y_label="cumulative fraction", xs=xs_range, ys=[0.0, 1.0], x_log=log, x_zero=False)
    chart.legend_at = "below"
    for s in series:
        xs, ps = [x * factor for x in s["cdf"]["x"]], list(s["cdf"]["p"])
        if cut is not None:
            keep = [i for i, x in enumerate(s["cdf"]["x"]) if x <= cut]
            xs, ps = [xs[i] for i in keep], [ps[i] for i in keep]
        chart.line(xs, ps, series=s["label"], colour=SERIES_COLOURS[s["group"] % len(SERIES_COLOURS)], step=True,
                   dashed=bool(s.get("dashed")))
    off = _slo_vlines(chart, d["metric"], slos, factor)
    parts = [f"{s['label']}: n = {s['n']:,}, P50 {format_value(s['stats']['p50'], d['unit'])}, "
             f"P99 {format_value(s['stats']['p99'], d['unit'])}" for s in series]
    defined = f"; {title} as defined in {d['definition']}" if d.get("definition") else ""
    caption = f"Empirical CDF of {title} per {d['by']} ({d.get('section', '')}{defined}). " + "; ".join(parts) + "."
    if log:
        caption += " Log x axis: the series span more than a factor of " + f"{LOG_AXIS_RATIO:g} from P1 to P99.9."
    elif cut is not None:
        caption += (f" Axis cut at the largest P99.9 ({format_value(cut, d['unit'])}); the largest value is "
                    f"{format_value(top, d['unit'])}.")
    if any(s.get("dashed") for s in series):
        caption += " Dashed: each class run on its own (isolated); solid: the same class in the mixed run."
    if off:
        caption += " " + "; ".join(off) + "."
    return [Figure(key, f"{title} CDF per {d['by']}", caption, chart.render())]


def _diff_label(r: Mapping[str, Any]) -> str:
    return f"{r['series']}: {metric_name(r['metric'])} {r['statistic'].upper()}"


def diff_reading(r: Mapping[str, Any]) -> str:
    """``within noise`` when the CI of the difference includes 0, else the direction."""
    if r["within_noise"]:
        return "within noise"
    return "higher" if r["diff"] > 0 else "lower"


def _differences(d: Mapping[str, Any], proc: str) -> list[Figure]:
    """Each configuration's percentile difference from the baseline with its CI (noise band)."""
    rows = d["rows"]
    unit, factor = _axis_unit(rows[0]["unit"])
    conf = f"{d['confidence'] * 100:g}%"
    svg = interval_rows(kind="differences", title=f"{proc} difference from {d['baseline']} with {conf} CI",
                        labels=[_diff_label(r) for r in rows], values=[r["diff"] * factor for r in rows],
                        lows=[r["ci_low"] * factor for r in rows], highs=[r["ci_high"] * factor for r in rows],
                        notes=[diff_reading(r) for r in rows], flags=[r["within_noise"] for r in rows],
                        x_label=f"difference from {d['baseline']} ({unit}), {conf} CI")
    noise = sum(1 for r in rows if r["within_noise"])
    caption = (f"Point: the configuration's percentile minus {d['baseline']}'s; whisker: its {conf} confidence "
               f"interval ({d['method']}). {noise} of {len(rows)} differences are within noise (the interval "
               f"includes 0): those are no measured difference, whatever their sign.")
    return [Figure("differences", f"Difference from {d['baseline']} (noise band)", caption, svg)]


def _timeline(key: str, d: Mapping[str, Any], proc: str) -> list[Figure]:
    """One run's server telemetry on one time axis: requests (the client's in flight, the server's running
    and waiting), then KV-cache usage and preemptions per second when the server exposes them."""
    t = list(d["t_s"])
    if not t:
        return []
    xs = [min(t), max(t)]
    names = d.get("names") or {}
    panels: list[str] = []
    quiet = ""  # a counter that never moved: said in the caption, not drawn as a flat line
    req = d.get("requests") or {}
    if req:
        chart = Chart.create(kind="timeline-requests", title=f"{proc} requests over time ({d['run']})",
                             x_label="time since the run's start (s)", y_label="requests", xs=xs,
                             ys=[v for vs in req.values() for v in vs], x_zero=False, height=260)
        for i, (label, vs) in enumerate(req.items()):
            chart.line(t, vs, series=label, colour=SERIES_COLOURS[i % len(SERIES_COLOURS)], step=True)
        panels.append(chart.render())
    for field, label, unit, factor, colour in (("kv_usage", "KV-cache usage", "%", 100.0, SERIES_COLOURS[3]),
                                               ("preemptions_per_s", "preemptions", "events/s", 1.0, FAIL_COLOUR)):
        vs = d.get(field)
        if not vs or not any(v is not None for v in vs):
            continue
        if field == "preemptions_per_s" and not any(vs):
            quiet = " No preemption event during the run."
            continue
        ys = [None if v is None else v * factor for v in vs]
        chart = Chart.create(kind=f"timeline-{field}", title=f"{proc} {label} over time ({d['run']})",
                             x_label="time since the run's start (s)", y_label=f"{label} ({unit})", xs=xs, ys=ys,
                             x_zero=False, height=220)
        chart.line(t, ys, series=f"{label} ({unit})", colour=colour, step=True, legend=False)
        panels.append(chart.render())
    src = ", ".join(f"{r}: {n}" for r, n in names.items() if r in ("running", "waiting", "kv_usage", "preemptions"))
    bucket = d.get("bucket") or 1
    thinned = (f" Each point is the largest value (rates: the mean) over {bucket} consecutive scrapes."
               if bucket > 1 else "")
    caption = (f"The server's own /metrics, scraped every {_g(d.get('interval_s'))} s during run {d['run']} "
               f"({d.get('scrapes', len(t))} scrapes, {d.get('failed', 0)} failed), on the run's clock (0: the "
               f"load's start; before 0: the scrape before its first request), beside the client's requests in "
               f"flight. Series: {src or 'none'}.{thinned} Preemptions are events (a request may be preempted "
               "more than once), not §5.8.4's per-request rate." + quiet)
    return [Figure(key, f"Server telemetry over time ({d['run']})", caption, "\n".join(panels))]


def _server_levels(d: Mapping[str, Any], proc: str) -> list[Figure]:
    """Per level of a sweep (§5.3, §5.5, §5.8): the server's peak waiting and mean running requests, peak KV
    usage and preemption events, one bar group per level."""
    levels, rows = list(d["levels"]), d["rows"]
    figs = []
    for title, series, ylab in (("server queue per level", ["peak waiting", "mean running"], "requests"),
                                ("server KV-cache usage per level", ["peak KV usage (%)"], "KV usage (%)"),
                                ("server preemption events per level", ["preemption events"], "events")):
        if not any(rows[lv].get(s) is not None for lv in levels for s in series):
            continue
        figs.append(grouped_bars(kind="bars-server-levels", title=f"{proc} {title}", groups=levels, series=series,
                                 values={lv: {s: rows[lv].get(s) for s in series} for lv in levels},
                                 y_label=ylab, x_label=d["by"]))
    if not figs:
        return []
    names = ", ".join(f"{r}: {n}" for r, n in (d.get("names") or {}).items()
                      if r in ("running", "waiting", "kv_usage", "preemptions"))
    caption = (f"The server's /metrics over each {d['by']} ({d.get('section') or 'this procedure'}): peak of the "
               f"waiting gauge, mean of the running gauge, peak KV-cache usage, and the preemption counter's "
               f"increase (events, an upper bound on requests preempted). Series: {names or 'none'}.")
    return [Figure("server_levels", f"Server telemetry per {d['by']}", caption, "\n".join(figs))]


def figures_for(proc: str, plots: Mapping[str, Any], slos: Sequence[Mapping[str, Any]] = ()) -> list[Figure]:
    """All figures of one procedure: the plot that answers its question first (curve, search, scaling,
    overlaid CDFs, classes/configurations and their differences), then, for a procedure without
    overlaid CDFs, the sample distributions of the run behind its summary row. ``slos``: the
    tests' SLO objectives (results.slo_objectives), drawn on plots of their metric."""
    order = {"ttft_samples_s": 0, "itl_samples_s": 1}
    out: list[Figure] = []
    if "curve" in plots:
        out.extend(_curve(plots["curve"], proc, slos))
    for k, fn in (("search", _search), ("scaling", _scaling)):
        if k in plots:
            out.extend(fn(plots[k], proc))
    overlaid = [k for k, v in plots.items() if v.get("kind") == "cdfs"]  # in the procedure's metric order
    for k in overlaid:
        out.extend(_cdfs(k, plots[k], proc, slos))
    for k in ("classes", "configs"):
        if k in plots and plots[k]["groups"]:
            out.extend(_groups(k, plots[k], proc))
    if plots.get("differences", {}).get("rows"):
        out.extend(_differences(plots["differences"], proc))
    # one run's distributions repeat what the overlays show per run: drawn only without overlays
    sample_keys = [] if overlaid else sorted((k for k, v in plots.items() if v.get("kind") == "samples"),
                                             key=lambda k: (order.get(k, 2), k))
    for k in sample_keys:
        out.extend(_samples(k, plots[k], proc, slos))
    # the server's own telemetry under the latency plots, on the run's clock (measure/telemetry.py)
    for k in sorted((k for k, v in plots.items() if v.get("kind") == "timeline"), key=lambda k: (len(k), k)):
        out.extend(_timeline(k, plots[k], proc))
    if plots.get("server_levels", {}).get("kind") == "server_levels":
        out.extend(_server_levels(plots["server_levels"], proc))
    return out
