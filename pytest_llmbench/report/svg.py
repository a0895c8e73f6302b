"""Small, dependency-free SVG chart helpers for the HTML report (App. C.2 "visualizations").

Every chart is a plain ``<svg>`` string with labelled axes (units in the label), tick labels,
and its data as elements carrying ``data-*`` attributes (``<circle data-x data-y>``,
``<rect data-x0 data-x1 data-count>``, ``<path data-series>``), so a reader, a test or a script can
recover the numbers. Output is deterministic (fixed rounding, no ids from counters or clocks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

__all__ = ["PALETTE", "Chart", "Scale", "grouped_bars", "interval_rows", "nice_ticks", "log_ticks"]

#: Colour-blind-safe palette (Okabe–Ito), used in series order.
#: Okabe-Ito hues darkened where needed so every graphic colour has >= 3:1 contrast on white (WCAG 1.4.11).
PALETTE = ("#0072B2", "#A35C00", "#00785A", "#D55E00", "#A8467F", "#3F7FA8", "#7A6A00", "#000000")
PASS_COLOUR = "#009E73"
FAIL_COLOUR = "#D55E00"
MARK_COLOUR = "#CC0000"
#: Series colours for overlays and grouped bars: the palette reordered so neighbours differ in hue
#: (blue, vermillion, green, purple, brown, olive, steel, black).
SERIES_COLOURS = tuple(PALETTE[i] for i in (0, 3, 2, 4, 1, 6, 5, 7))
#: Text in the vermillion of a significant difference: darkened to 5.8:1, text needs 4.5:1 (WCAG 1.4.3).
SIGNIFICANT_TEXT = "#AD4500"
#: SLO thresholds: a dark purple, distinct from the series and markers (8.6:1 on white).
SLO_COLOUR = "#5B2A86"
#: Neutral grey for secondary lines and "within noise" (4.5:1 on white, WCAG 1.4.11 needs 3:1).
MUTED_COLOUR = "#767676"
GRID_COLOUR = "#e3e3e3"
AXIS_COLOUR = "#333333"
#: A white outline behind text drawn over data, so labels stay readable on bars and lines.
HALO = 'paint-order="stroke" stroke="#ffffff" stroke-width="3" stroke-linejoin="round"'
FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif\""


def _n(v: float) -> str:
    """A coordinate: 2 decimals, no trailing zeros."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _d(v: Any) -> str:
    """A data attribute value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    return escape(str(v), quote=True)


def _attrs(attrs: dict[str, Any] | None) -> str:
    if not attrs:
        return ""
    return "".join(f' {k}="{_d(v)}"' for k, v in attrs.items() if v is not None)


def _label(v: float, step: float) -> str:
    """Tick label with as many decimals as the tick step needs."""
    if v == 0:
        return "0"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if abs(v) >= 1e6 or (abs(v) < 1e-3 and decimals > 6):
        return f"{v:.3g}"
    return f"{v:,.{min(decimals, 6)}f}"


def _nice_step(raw: float) -> float:
    exp = math.floor(math.log10(raw))
    base = raw / 10 ** exp
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if base <= m + 1e-9:
            return m * 10 ** exp
    return 10.0 ** (exp + 1)  # pragma: no cover


def nice_ticks(lo: float, hi: float, target: int = 6) -> tuple[float, float, list[float]]:
    """Round the domain out to a 1-2-2.5-5 step and return (lo, hi, ticks)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= max(abs(lo), abs(hi)) * 1e-12 or hi - lo < 1e-300:  # one value (or float noise)
        pad = abs(lo) * 0.1 if abs(lo) >= 1e-300 else 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step((hi - lo) / max(target - 1, 1))
    start = math.floor(lo / step + 1e-12) * step
    end = math.ceil(hi / step - 1e-12) * step
    count = int(round((end - start) / step))
    ticks = [float(f"{start + i * step:.12g}") for i in range(count + 1)]  # drop float noise
    return start, end, ticks


def log_ticks(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """Bounds at the nearest 1-2-5 x 10^k around [lo, hi] (> 0); ticks at 1, 2, 5 x 10^k
    (only at 1 x 10^k when the range spans more than three decades)."""
    lo = lo if lo > 0 else 1e-9
    hi = hi if hi > lo else lo * 10
    d0, d1 = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    if d1 == d0:
        d1 += 1
    cands = [m * 10.0 ** d for d in range(d0, d1 + 1) for m in (1.0, 2.0, 5.0)]
    lo_b = max(c for c in cands if c <= lo * (1 + 1e-9))
    hi_b = min(c for c in cands if c >= hi * (1 - 1e-9))
    if hi_b <= lo_b:  # one value: widen to the next 1-2-5 step so the scale has a length
        hi_b = min(c for c in cands if c > lo_b)
    if d1 - d0 > 3:
        ticks = [10.0 ** d for d in range(d0, d1 + 1) if lo_b <= 10.0 ** d <= hi_b]
        ticks = sorted({lo_b, hi_b, *ticks})
    else:
        ticks = [c for c in cands if lo_b <= c <= hi_b]
    return lo_b, hi_b, ticks


@dataclass
class Scale:
    """Maps data values to pixels, linear or log10."""

    lo: float
    hi: float
    px0: float
    px1: float
    log: bool = False
    ticks: list[float] = field(default_factory=list)

    @classmethod
    def fit(cls, values: Iterable[float | None], px0: float, px1: float, *, log: bool = False,
            include_zero: bool = False, target: int = 6, pad: float = 0.0) -> Scale:
        """A scale covering ``values`` (plus 0 when asked), widened by ``pad`` x the span each side."""
        vals = [float(v) for v in values if v is not None and math.isfinite(v) and (not log or v > 0)]
        if include_zero and not log:
            vals.append(0.0)
        lo, hi = (min(vals), max(vals)) if vals else ((1.0, 10.0) if log else (0.0, 1.0))
        if pad and log:
            lo, hi = lo / (1 + pad * 4), hi * (1 + pad * 4)
        elif pad:
            span = (hi - lo) or abs(hi) or 1.0
            lo = max(lo - pad * span, 0.0) if lo >= 0 else lo - pad * span
            hi = hi + pad * span
        if log:
            lo_, hi_, ticks = log_ticks(lo, hi)
        else:
            lo_, hi_, ticks = nice_ticks(lo, hi, target)
        return cls(lo_, hi_, px0, px1, log, ticks)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.px0 + t * (self.px1 - self.px0)

    def tick_labels(self) -> list[tuple[float, str]]:
        if self.log:
            return [(t, f"{t:,g}" if t >= 1e-3 else f"{t:.0e}") for t in self.ticks]
        step = self.ticks[1] - self.ticks[0] if len(self.ticks) > 1 else 1.0
        return [(t, _label(t, step)) for t in self.ticks]


class Chart:
    """One x/y chart: axes with ticks and labels, then series added as lines/points/bars/marks."""

    LEFT, RIGHT, TOP, BOTTOM = 78, 24, 34, 56

    def __init__(self, *, kind: str, title: str, x_label: str, y_label: str, x: Scale, y: Scale,
                 width: int = 640, height: int = 340) -> None:
        self.kind = kind
        self.title = title
        self.x_label = x_label
        self.y_label = y_label
        self.x = x
        self.y = y
        self.width = width
        self.height = height
        self.parts: list[str] = []
        self.legend_items: list[tuple[str, str, str]] = []  # (label, colour, shape)
        #: "top": one row above the plot; "below": rows under the x axis label, the chart growing to
        #: hold them (overlays with many or long labels, which no corner of the plot leaves free)
        self.legend_at = "top"
        self._marks = 0

    @classmethod
    def create(cls, *, kind: str, title: str, x_label: str, y_label: str,
               xs: Iterable[float | None], ys: Iterable[float | None], x_log: bool = False,
               y_log: bool = False, x_zero: bool = False, y_zero: bool = True, pad: float = 0.0,
               width: int = 640, height: int = 340) -> Chart:
        x = Scale.fit(xs, cls.LEFT, width - cls.RIGHT, log=x_log, include_zero=x_zero, pad=pad)
        y = Scale.fit(ys, height - cls.BOTTOM, cls.TOP, log=y_log, include_zero=y_zero, pad=pad)
        return cls(kind=kind, title=title, x_label=x_label, y_label=y_label, x=x, y=y, width=width, height=height)

    # --- series -------------------------------------------------------------------------------
    def _drawable(self, xs: Sequence[float | None], ys: Sequence[float | None]) -> list[tuple[int, float, float]]:
        """(index, x, y) of the points that can be drawn: finite, and > 0 on a log axis."""
        out = []
        for i, (a, b) in enumerate(zip(xs, ys)):
            if a is None or b is None or not (_finite(a) and _finite(b)):
                continue
            if (self.x.log and a <= 0) or (self.y.log and b <= 0):
                continue
            out.append((i, float(a), float(b)))
        return out

    def line(self, xs: Sequence[float | None], ys: Sequence[float | None], *, series: str,
             colour: str = PALETTE[0], step: bool = False, dashed: bool = False, width: float = 2.0,
             legend: bool = True) -> None:
        """A polyline through the finite points (``step=True``: a right-continuous step, e.g. a CDF)."""
        pts = [(self.x(a), self.y(b)) for _, a, b in self._drawable(xs, ys)]
        if not pts:
            return
        cmds = [f"M{_n(pts[0][0])},{_n(pts[0][1])}"]
        for qx, qy in pts[1:]:
            if step:
                cmds.append(f"H{_n(qx)}V{_n(qy)}")
            else:
                cmds.append(f"L{_n(qx)},{_n(qy)}")
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        self.parts.append(f'<path class="series" data-series="{_d(series)}" data-points="{len(pts)}" '
                          f'd="{"".join(cmds)}" fill="none" stroke="{colour}" stroke-width="{_n(width)}"{dash}/>')
        if legend:
            self.legend_items.append((series, colour, "line-dashed" if dashed else "line"))

    def points(self, xs: Sequence[float | None], ys: Sequence[float | None], *, series: str,
               colour: str | Sequence[str] = PALETTE[0], r: float = 4.0,
               data: Sequence[dict[str, Any]] | None = None, legend: bool = True,
               labels: Sequence[str | None] | None = None, label_side: str = "auto") -> None:
        """One ``<circle class="point">`` per finite point, with data-x/data-y and extra data-*.

        Labels go right of the point (left near the right edge); ``label_side="left"`` puts them left
        and level with it where they fit (on a rising CDF the area up-left of a point is empty)."""
        out = []
        for i, a, b in self._drawable(xs, ys):
            fill = colour if isinstance(colour, str) else colour[i]
            extra = {f"data-{k}": v for k, v in (data[i] if data else {}).items()}
            cx, cy = self.x(a), self.y(b)
            out.append(f'<circle class="point" cx="{_n(cx)}" cy="{_n(cy)}" r="{_n(r)}" fill="{fill}" '
                       f'stroke="#fff" stroke-width="1" data-series="{_d(series)}" data-x="{_d(a)}" '
                       f'data-y="{_d(b)}"{_attrs(extra)}/>')
            if labels and labels[i]:
                text = str(labels[i])
                left = label_side == "left" and cx - 8 - 6.2 * len(text) > self.LEFT
                right = left or cx > self.width * 0.72
                ty = cy + 4 if left else cy - 7
                out.append(f'<text x="{_n(cx - 8 if right else cx + 6)}" y="{_n(ty)}" font-size="11" '
                           f'text-anchor="{"end" if right else "start"}" fill="{AXIS_COLOUR}" {HALO} '
                           f'{FONT}>{escape(text)}</text>')
        self.parts.extend(out)
        if legend and isinstance(colour, str):
            self.legend_items.append((series, colour, "point"))

    def bars(self, edges: Sequence[float], counts: Sequence[float], *, series: str,
             colour: str = PALETTE[0]) -> None:
        """Histogram bars: ``<rect class="bar" data-x0 data-x1 data-count>`` per bin."""
        base = self.y(max(self.y.lo, 0.0)) if not self.y.log else self.y(self.y.lo)
        for x0, x1, c in zip(edges[:-1], edges[1:], counts):
            px0, px1, py = self.x(x0), self.x(x1), self.y(c) if c > 0 else base
            self.parts.append(
                f'<rect class="bar" x="{_n(px0)}" y="{_n(min(py, base))}" width="{_n(max(px1 - px0 - 0.5, 0.5))}" '
                f'height="{_n(abs(base - py))}" fill="{colour}" fill-opacity="0.85" data-series="{_d(series)}" '
                f'data-x0="{_d(float(x0))}" data-x1="{_d(float(x1))}" data-count="{_d(c)}"/>')
        self.legend_items.append((series, colour, "bar"))

    def vline(self, x: float, label: str, *, colour: str = MARK_COLOUR, kind: str = "marker") -> None:
        """A labelled vertical dashed marker (percentile, knee, saturation)."""
        if not _finite(x) or (self.x.log and x <= 0):
            return
        px = self.x(x)
        top, bottom = self.TOP, self.height - self.BOTTOM
        anchor = "end" if px > self.width * 0.75 else "start"
        dx = -4 if anchor == "end" else 4
        ty = top + 12 + 13 * (self._marks % 3)
        self._marks += 1
        self.parts.append(
            f'<g class="{escape(kind)}" data-x="{_d(float(x))}" data-label="{_d(label)}">'
            f'<line x1="{_n(px)}" y1="{_n(top)}" x2="{_n(px)}" y2="{_n(bottom)}" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="4 3"/>'
            f'<text x="{_n(px + dx)}" y="{_n(ty)}" '
            f'font-size="11" fill="{colour}" text-anchor="{anchor}" {HALO} {FONT}>{escape(label)}</text></g>')

    def hline(self, y: float, label: str, *, colour: str = SLO_COLOUR, kind: str = "marker slo") -> None:
        """A labelled horizontal dashed line (an SLO threshold), labelled at its left end: the markers'
        labels sit at the top right, and a latency or throughput curve starts low on the left."""
        if not _finite(y) or (self.y.log and y <= 0) or not min(self.y.lo, self.y.hi) <= y <= max(self.y.lo, self.y.hi):
            return
        py = self.y(y)
        x0, x1 = self.LEFT, self.width - self.RIGHT
        self.parts.append(
            f'<g class="{escape(kind)}" data-y="{_d(float(y))}" data-label="{_d(label)}">'
            f'<line x1="{x0}" y1="{_n(py)}" x2="{x1}" y2="{_n(py)}" stroke="{colour}" stroke-width="1.5" '
            f'stroke-dasharray="8 4"/><text x="{x0 + 6}" y="{_n(py - 5)}" font-size="11" fill="{colour}" '
            f'{HALO} {FONT}>{escape(label)}</text></g>')

    # --- output -------------------------------------------------------------------------------
    def _axes(self) -> list[str]:
        x0, x1 = self.LEFT, self.width - self.RIGHT
        y0, y1 = self.height - self.BOTTOM, self.TOP
        out = [f'<g class="grid" stroke="{GRID_COLOUR}" stroke-width="1">']
        for t, _ in self.y.tick_labels():
            out.append(f'<line x1="{x0}" y1="{_n(self.y(t))}" x2="{x1}" y2="{_n(self.y(t))}"/>')
        out.append("</g>")
        scale = "log" if self.x.log else "linear"
        out.append(f'<g class="axis x-axis" data-label="{_d(self.x_label)}" data-scale="{scale}">')
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="{AXIS_COLOUR}"/>')
        for t, lab in self.x.tick_labels():
            px = self.x(t)
            out.append(f'<g class="tick" data-value="{_d(float(t))}"><line x1="{_n(px)}" y1="{y0}" x2="{_n(px)}" '
                       f'y2="{y0 + 5}" stroke="{AXIS_COLOUR}"/><text x="{_n(px)}" y="{y0 + 18}" font-size="11" '
                       f'text-anchor="middle" fill="{AXIS_COLOUR}" {FONT}>{escape(lab)}</text></g>')
        out.append(f'<text class="axis-label" x="{_n((x0 + x1) / 2)}" y="{self.height - 14}" font-size="12" '
                   f'text-anchor="middle" fill="{AXIS_COLOUR}" {FONT}>{escape(self.x_label)}</text></g>')
        scale = "log" if self.y.log else "linear"
        out.append(f'<g class="axis y-axis" data-label="{_d(self.y_label)}" data-scale="{scale}">')
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="{AXIS_COLOUR}"/>')
        for t, lab in self.y.tick_labels():
            py = self.y(t)
            out.append(f'<g class="tick" data-value="{_d(float(t))}"><line x1="{x0 - 5}" y1="{_n(py)}" x2="{x0}" '
                       f'y2="{_n(py)}" stroke="{AXIS_COLOUR}"/><text x="{x0 - 8}" y="{_n(py + 4)}" font-size="11" '
                       f'text-anchor="end" fill="{AXIS_COLOUR}" {FONT}>{escape(lab)}</text></g>')
        cy = (y0 + y1) / 2
        out.append(f'<text class="axis-label" x="16" y="{_n(cy)}" font-size="12" text-anchor="middle" '
                   f'transform="rotate(-90 16 {_n(cy)})" fill="{AXIS_COLOUR}" {FONT}>{escape(self.y_label)}</text></g>')
        return out

    def _legend(self) -> list[str]:
        if len(self.legend_items) < 2:
            return []
        if self.legend_at == "below":
            return self._legend_below()
        out = ['<g class="legend">']
        x = float(self.LEFT + 8)
        y = self.TOP - 14
        for label, colour, shape in self.legend_items:
            if shape.startswith("line"):
                dash = ' stroke-dasharray="6 4"' if shape == "line-dashed" else ""
                out.append(f'<line x1="{x}" y1="{y}" x2="{x + 18}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>')
            elif shape == "bar":
                out.append(f'<rect x="{x}" y="{y - 5}" width="18" height="10" fill="{colour}"/>')
            else:
                out.append(f'<circle cx="{x + 9}" cy="{y}" r="4" fill="{colour}"/>')
            out.append(f'<text x="{x + 22}" y="{y + 4}" font-size="11" fill="{AXIS_COLOUR}" '
                       f'{FONT}>{escape(label)}</text>')
            x += 30 + 6.5 * len(label)
        out.append("</g>")
        return out

    def _below_layout(self) -> tuple[int, float]:
        """(columns, extra height) of a legend under the chart: two columns when the labels fit."""
        if self.legend_at != "below" or len(self.legend_items) < 2:
            return 1, 0.0
        col_w = (self.width - self.LEFT - self.RIGHT) / 2
        cols = 2 if max(30 + 6.4 * len(label) for label, _, _ in self.legend_items) <= col_w else 1
        return cols, 6.0 + 17.0 * math.ceil(len(self.legend_items) / cols)

    def _legend_below(self) -> list[str]:
        cols, _ = self._below_layout()
        col_w = (self.width - self.LEFT - self.RIGHT) / cols
        out = ['<g class="legend">']
        for i, (label, colour, shape) in enumerate(self.legend_items):
            x = self.LEFT + col_w * (i % cols)
            y = self.height + 8 + 17 * (i // cols)
            dash = ' stroke-dasharray="6 4"' if shape == "line-dashed" else ""
            out.append(f'<line x1="{_n(x)}" y1="{_n(y)}" x2="{_n(x + 24)}" y2="{_n(y)}" stroke="{colour}" '
                       f'stroke-width="2.5"{dash}/><text x="{_n(x + 30)}" y="{_n(y + 4)}" font-size="11" '
                       f'fill="{AXIS_COLOUR}" {FONT}>{escape(label)}</text>')
        out.append("</g>")
        return out

    def render(self) -> str:
        _, extra = self._below_layout()
        return _svg(self.kind, self.title, self.width, int(self.height + extra),
                    self._axes() + self.parts + self._legend())


def _svg(kind: str, title: str, width: int, height: int, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-kind="{_d(kind)}" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">'
            f'<title>{escape(title)}</title>'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>'
            + "".join(body) + "</svg>")


def grouped_bars(*, kind: str, title: str, groups: Sequence[str], series: Sequence[str],
                 values: dict[str, dict[str, float | None]], y_label: str, x_label: str,
                 width: int = 640, height: int = 340) -> str:
    """Grouped vertical bars: one group per category (class, configuration), one bar per series.

    ``values[group][series]``; a missing or non-finite value leaves a gap (no bar).
    """
    all_vals = [v for g in groups for s in series if _finite(v := values.get(g, {}).get(s))]
    y = Scale.fit(all_vals, height - Chart.BOTTOM, Chart.TOP, include_zero=True, pad=0.06)  # room for value labels
    x = Scale(0.0, 1.0, Chart.LEFT, width - Chart.RIGHT, ticks=[])
    chart = Chart(kind=kind, title=title, x_label=x_label, y_label=y_label, x=x, y=y, width=width, height=height)
    axes = chart._axes()
    # replace the numeric x ticks by category labels
    plot_w = width - Chart.LEFT - Chart.RIGHT
    gw = plot_w / max(len(groups), 1)
    bw = min(48.0, gw * 0.8 / max(len(series), 1))
    base = y(0.0)
    body: list[str] = []
    y0 = height - Chart.BOTTOM
    for gi, g in enumerate(groups):
        gx = Chart.LEFT + gi * gw
        start = gx + (gw - bw * len(series)) / 2
        body.append(f'<g class="category" data-group="{_d(g)}"><text x="{_n(gx + gw / 2)}" y="{y0 + 18}" '
                    f'font-size="11" text-anchor="middle" fill="{AXIS_COLOUR}" {FONT}>{escape(g)}</text></g>')
        for si, s in enumerate(series):
            v = values.get(g, {}).get(s)
            if not _finite(v):
                continue
            py = y(float(v))  # type: ignore[arg-type]
            bx = start + si * bw
            body.append(f'<rect class="bar" x="{_n(bx)}" y="{_n(min(py, base))}" width="{_n(bw - 2)}" '
                        f'height="{_n(abs(base - py))}" fill="{SERIES_COLOURS[si % len(SERIES_COLOURS)]}" '
                        f'data-group="{_d(g)}" data-series="{_d(s)}" data-y="{_d(float(v))}"/>')  # type: ignore[arg-type]
            body.append(f'<text x="{_n(bx + (bw - 2) / 2)}" y="{_n(min(py, base) - 3)}" font-size="11" '
                        f'text-anchor="middle" fill="{AXIS_COLOUR}" {FONT}>{escape(_short(float(v)))}</text>')  # type: ignore[arg-type]
    chart.legend_items = [(s, SERIES_COLOURS[i % len(SERIES_COLOURS)], "bar") for i, s in enumerate(series)]
    return _svg(kind, title, width, height, axes + body + chart._legend())


def _short(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def interval_rows(*, kind: str, title: str, labels: Sequence[str], values: Sequence[float],
                  lows: Sequence[float], highs: Sequence[float], notes: Sequence[str], x_label: str,
                  flags: Sequence[bool], width: int = 640) -> str:
    """One row per difference: a point with its confidence interval as a whisker, a line at 0 and a note
    at the right (``"within noise"`` when ``flags[i]``; drawn muted). ``data-diff``/``data-ci-low``/
    ``data-ci-high``/``data-within-noise`` carry the numbers."""
    right, row_h = 96, 24
    left = int(min(max(16 + 6.2 * max((len(lab) for lab in labels), default=0), 120), 330))
    height = Chart.TOP + row_h * len(labels) + Chart.BOTTOM
    x = Scale.fit([*values, *lows, *highs, 0.0], left, width - right, pad=0.05)
    y = Scale(0.0, float(max(len(labels), 1)), Chart.TOP, height - Chart.BOTTOM, ticks=[])
    chart = Chart(kind=kind, title=title, x_label=x_label, y_label="", x=x, y=y, width=width, height=height)
    chart.LEFT, chart.RIGHT = left, right  # type: ignore[misc]
    body = chart._axes()
    zero = x(0.0)
    body.append(f'<line class="zero" x1="{_n(zero)}" y1="{Chart.TOP}" x2="{_n(zero)}" y2="{height - Chart.BOTTOM}" '
                f'stroke="{AXIS_COLOUR}" stroke-width="1.5"/>')
    for i, (lab, v, lo, hi, note, noise) in enumerate(zip(labels, values, lows, highs, notes, flags)):
        cy = Chart.TOP + row_h * (i + 0.5)
        colour, text_colour = (MUTED_COLOUR, MUTED_COLOUR) if noise else (PALETTE[3], SIGNIFICANT_TEXT)
        body.append(f'<g class="interval" data-label="{_d(lab)}" data-diff="{_d(float(v))}" '
                    f'data-ci-low="{_d(float(lo))}" data-ci-high="{_d(float(hi))}" data-within-noise="{_d(noise)}">'
                    f'<text x="{left - 8}" y="{_n(cy + 4)}" font-size="11" text-anchor="end" fill="{AXIS_COLOUR}" '
                    f'{FONT}>{escape(lab)}</text>'
                    f'<line x1="{_n(x(lo))}" y1="{_n(cy)}" x2="{_n(x(hi))}" y2="{_n(cy)}" stroke="{colour}" '
                    f'stroke-width="2"/><line x1="{_n(x(lo))}" y1="{_n(cy - 5)}" x2="{_n(x(lo))}" y2="{_n(cy + 5)}" '
                    f'stroke="{colour}" stroke-width="2"/><line x1="{_n(x(hi))}" y1="{_n(cy - 5)}" x2="{_n(x(hi))}" '
                    f'y2="{_n(cy + 5)}" stroke="{colour}" stroke-width="2"/>'
                    f'<circle cx="{_n(x(v))}" cy="{_n(cy)}" r="4.5" fill="{colour}" stroke="#fff" stroke-width="1"/>'
                    f'<text x="{width - right + 8}" y="{_n(cy + 4)}" font-size="11" fill="{text_colour}" '
                    f'{FONT}>{escape(note)}</text></g>')
    return _svg(kind, title, width, height, body)
