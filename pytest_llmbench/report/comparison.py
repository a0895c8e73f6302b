"""Render the regression gate's comparison documents (§6): the one renderer of a live comparison
(the plugin's terminal section and JUnit properties) and of ``python -m pytest_llmbench compare``.

The gate builds the documents and renders nothing; this module reads them only, like the rest of
``report/`` reads ``results.json``:

* a comparison with a baseline: ``gate.compare.Comparison.to_json()`` (also ``results.json``
  ``comparison``) → :func:`render_comparison` (text), :func:`render_comparison_markdown`,
  :func:`junit_properties`;
* systems side by side (§6.1–§6.4): ``gate.systems.SystemComparison.to_json()`` →
  :func:`render_systems_text`, :func:`render_systems_markdown`, :func:`render_systems_html` (with SVG
  plots), :func:`section6_lines` for its §2 verdict (test "6");
* a figure over stored runs: ``gate.history.HistorySeries.to_json()`` → :func:`render_history`;
* runs recounted in the reference tokenizer (``compare --recount``, §4.4.2):
  ``gate.recount.recount_comparison`` → :func:`render_recount`.

Figures are formatted by :func:`pytest_llmbench.measure.units.format_value` (compact style), in
the unit family each document names.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

from ..measure.units import format_value
from .svg import grouped_bars

__all__ = [
    "junit_properties",
    "render_comparison",
    "render_comparison_markdown",
    "render_history",
    "render_recount",
    "render_systems_html",
    "render_systems_markdown",
    "render_systems_text",
    "section6_lines",
]

Doc = Mapping[str, Any]


def _quantity(value: float, unit_family: str, *, like: float | None = None) -> str:
    """``612.3 ms``, ``2000 tok/s``, ``99.5%``: a value in base units, as the gate's messages print it."""
    return format_value(value, unit_family, style="compact", like=like)


def _num(v: float | None) -> float:
    """A document's number; JSON's null for a non-finite one reads back as NaN."""
    return math.nan if v is None else float(v)


def _ids(refs: Sequence[Doc]) -> str:
    return "+".join(str(r["id"]) for r in refs)


# --------------------------------------------------------------------------------------------
# compared with a baseline (Comparison.to_json())
# --------------------------------------------------------------------------------------------


def render_comparison(comp: Doc) -> str:
    """The "compared with baseline" section as plain text (one line per figure; messages for verdicts)."""
    pairs = comp.get("pairs") or []
    out = [f"compared with baseline {_ids(comp['baseline'])}; new {_ids(comp['new'])}"
           + (" (FORCED: incomparable differences overridden)" if any(p["forced"] for p in pairs) else "")]
    for p in pairs:
        rates = lambda rs: ", ".join("n/a" if r is None else f"{r:g} req/s" for r in rs)  # noqa: E731
        out.append(f"- {p['title']}: load {p['load']} (resolved: baseline {rates(p['rate_baseline'])}; "
                   f"new {rates(p['rate_new'])})")
        if p.get("note"):
            out.append(f"    {p['note']}")
        if p["forced"]:
            out.append("    forced despite: " + "; ".join(d["text"] for d in p["differences"]))
        for o in p["outcomes"]:
            out.append(f"    [{o['verdict']}] {o['message']}")
        for v in p.get("slo_verdicts") or []:  # each run's own SLO verdict; INCONCLUSIVE is never a pass
            out.append(f"    [SLO {v['new']}] {v['message']}")
    for u in comp.get("unmatched") or []:
        out.append(f"- {u}")
    n_fail = sum(o["verdict"] == "FAIL" for p in pairs for o in p["outcomes"])
    n_refused = sum(bool(p["refused"]) for p in pairs)
    out.append(f"result: {n_fail} rule violation(s), {n_refused} refused comparison(s)"
               if comp.get("rules") else "result: no --fail rules given (report only)")
    return "\n".join(out)


def _cells(o: Doc) -> list[str]:
    c = o.get("change")
    if c is None:
        return [o["figure"], "n/a", "n/a", "n/a", "n/a", "n/a", o.get("rule") or "", o["verdict"]]
    unit = o["unit"]
    rel, (lo, hi) = _num(c["rel"]), (_num(v) for v in c["rel_ci"])
    return [o["figure"] + (f"@{o['level']}" if o.get("level") else ""),
            f"{_quantity(_num(c['baseline']), unit)} (n={c['n_baseline']})",
            f"{_quantity(_num(c['new']), unit)} (n={c['n_new']})", f"{rel * 100:+.1f}%",
            f"{lo * 100:+.1f}% … {hi * 100:+.1f}%", f"{_num(c['p_value']):.3g}", o.get("rule") or "", o["verdict"]]


def render_comparison_markdown(comp: Doc) -> str:
    """Markdown: one table per compared procedure (baseline, new, change, CI, p, rule, verdict)."""
    lines = [f"Baseline `{_ids(comp['baseline'])}`, new `{_ids(comp['new'])}`; a rule fails only when the whole "
             f"{comp['confidence']:.0%} CI of the change lies beyond its threshold."]
    for p in comp.get("pairs") or []:
        lines += ["", f"**{p['title']}** — load {p['load']}"]
        if p.get("note"):
            lines.append(f"> {p['note']}")
            continue
        if p["forced"]:
            lines.append("> FORCED despite: " + "; ".join(d["text"] for d in p["differences"]))
        lines += ["", "| figure | baseline | new | change | CI | p(no change) | rule | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_cells(o)) + " |" for o in p["outcomes"]]
        methods = sorted({o["change"]["method"] for o in p["outcomes"] if o.get("change")})
        lines += ["", "Methods: " + "; ".join(methods)] if methods else []
        if p.get("slo_verdicts"):  # each run's own SLO verdicts (PASS, FAIL, INCONCLUSIVE), not a rule
            lines += ["", "| SLO | test | baseline | new |", "|---|---|---|---|"]
            lines += [f"| {v['slo']} | {v['test']} | {v['baseline'] or 'not judged'} | {v['new']} |"
                      for v in p["slo_verdicts"]]
    lines += [f"- {u}" for u in comp.get("unmatched") or []]
    return "\n".join(lines) + "\n"


def junit_properties(comp: Doc, nodeid: str) -> list[tuple[str, str]]:
    """``(name, value)`` pairs for one test's JUnit ``<properties>``: the baseline, per figure the change
    with its CI and verdict, and the differences a forced comparison overrode."""
    pairs = [p for p in comp.get("pairs") or [] if nodeid in (p.get("tests") or [])]
    props = [("llmbench_baseline", _ids(comp["baseline"]))]
    for o in (o for p in pairs for o in p["outcomes"]):
        c = o.get("change")
        if c is not None:
            lo, hi = (_num(v) for v in c["rel_ci"])
            props.append((f"llmbench_change_{o['figure']}",
                          f"{_num(c['rel']) * 100:+.2f}% [{lo * 100:+.2f}%, {hi * 100:+.2f}%] {o['verdict']}"))
    props += [("llmbench_compare_forced", "; ".join(d["text"] for d in p["differences"])) for p in pairs if p["forced"]]
    return props


# --------------------------------------------------------------------------------------------
# systems side by side (SystemComparison.to_json())
# --------------------------------------------------------------------------------------------


def section6_lines(verdict: Doc) -> list[str]:
    """The comparison's §2 verdict (test "6") and one line per MUST/SHOULD item that fails, from
    ``Section6Verdict.to_json()`` (the terminal and compare.md)."""
    items = {i["id"]: i for i in verdict["items"]}
    out = [f"§6 verdict (§2, test 6): {verdict['summary']}"]
    for rid in [*verdict["unmet_must"], *verdict["unmet_should"]]:
        i = items[rid]
        out.append(f"  {i['id']} {i['status']}: {i['text']} ({i['detail']})")
    return out


def _items(c: Doc) -> list[Doc]:
    return [*c["equivalence"], *c["reporting"], *c["checklist"]]


def render_systems_text(c: Doc) -> str:
    """A plain side-by-side table for the terminal, the items not met and the §2 verdict."""
    head = ["procedure", "figure", *c["labels"]]
    rows = [[row["procedure"], row["figure"], *row["values"]] for row in c["table"]]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(x).ljust(w) for x, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    bad = [i for i in _items(c) if i["status"] == "not met"]
    out.append("§6.1-§6.4: " + ("all checked items met" if not bad else
                                "not met: " + "; ".join(f"{i['id']} {i['text']} ({i['detail']})" for i in bad)))
    out += section6_lines(c["section6"])
    return "\n".join(out)


def _n(v: Any, fmt: str = "{:,.4g}") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _system_plots(c: Doc) -> list[str]:
    """Latency by run (every time figure) and output throughput by run (per procedure), as inline SVG."""
    labels = list(c["labels"])
    out = []
    lat = [row for row in c["table"] if row["unit"] == "time"]
    if lat:
        groups = [f"{row['procedure'].split(' ')[0]} {row['figure']}" for row in lat]
        values = {g: {lab: (v * 1000 if v is not None else None) for lab, v in zip(labels, row["raw"])}
                  for g, row in zip(groups, lat)}
        out.append(grouped_bars(kind="system-latency", title="Latency by run (ms)", groups=groups,
                                series=labels, values=values, y_label="ms", x_label="figure",
                                width=max(640, 90 * len(groups))))
    tp = [row for row in c["table"] if row["figure"] == "output_throughput"]
    if tp:
        groups = [row["procedure"].split(" ")[0] for row in tp]
        values = {g: dict(zip(labels, row["raw"])) for g, row in zip(groups, tp)}
        out.append(grouped_bars(kind="system-throughput", title="Output throughput by run (tok/s)", groups=groups,
                                series=labels, values=values, y_label="tok/s", x_label="procedure"))
    return out


@functools.cache
def _env(autoescape: bool) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("pytest_llmbench.report", "templates"),
                              autoescape=autoescape, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def render_systems_markdown(c: Doc) -> str:
    """The systems comparison as Markdown (``templates/systems.md.j2``; the plots are in the HTML)."""
    return _env(False).get_template("systems.md.j2").render(c=c, fmt=_n)


def render_systems_html(c: Doc) -> str:
    """The systems comparison as one self-contained HTML page with inline SVG plots (``systems.html.j2``)."""
    return _env(True).get_template("systems.html.j2").render(c=c, fmt=_n, plots=_system_plots(c))


# --------------------------------------------------------------------------------------------
# history (HistorySeries.to_json())
# --------------------------------------------------------------------------------------------


def render_history(series: Sequence[Doc]) -> str:
    """A plain table per series; ``◆`` marks a run that starts a new segment (a change point)."""
    lines = []
    for s in series:
        unit = s["unit"]
        lines.append(f"{s['procedure']} — {s['figure']} ({', '.join(s['tests']) or 'no test ids'})")
        rows = [("run", "commit", "saved", s["figure"], "CI", "n", "")]
        for p in s["points"]:
            ci = (f"{_quantity(p['ci_low'], unit)} – {_quantity(p['ci_high'], unit)}"
                  if p["ci_low"] is not None and p["ci_high"] is not None else "")
            rows.append((p["run"], p["commit"], p["saved"],
                         _quantity(p["value"], unit) if p["value"] is not None else "n/a",
                         ci, str(p["n"] or ""), "◆ change point" if p["change_point"] else ""))
        w = [max(len(r[i]) for r in rows) for i in range(7)]
        lines += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
        lines.append(f"  ({s['method']})")
    return "\n".join(lines)


def render_recount(doc: Doc) -> str:
    """``compare --recount`` as text lines: per procedure the output rate of both runs in the reference
    tokenizer and its change, the tokens and the server's own counts, or why it could not be recounted."""
    tok = doc["tokenizer"]
    lines = [f"recount in the reference tokenizer {tok} (§4.4.2 option B, 4.4.2-SHOULD-1): "
             f"baseline {doc['baseline']}, new {doc['new']}"]
    for p in doc["procedures"]:
        if "refused" in p:
            lines.append(f"  {p['procedure']}: refused: {p['refused']}")
            continue
        b, n = p["baseline"], p["new"]
        lines.append(f"  {p['procedure']} run {p['run']}: output {b['output_rate_tok_s']:.1f} -> "
                     f"{n['output_rate_tok_s']:.1f} tok/s ({p['output_rate_change_pct']:+.1f}%) in {tok} tokens; "
                     f"{b['output_tokens']} / {n['output_tokens']} tokens (server usage: "
                     f"{b['server_output_tokens']} / {n['server_output_tokens']})")
    return "\n".join(lines)
