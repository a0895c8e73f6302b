"""The "compared with baseline" section: plain text, Markdown rows and JUnit properties."""

from __future__ import annotations

from typing import Any

from ..measure.slo import format_quantity
from .compare import Comparison, FigureOutcome

__all__ = ["junit_properties", "render_comparison", "render_comparison_markdown"]


def render_comparison(comp: Comparison) -> str:
    """The "compared with baseline" section as plain text (one line per figure; messages for verdicts)."""
    out = [f"compared with baseline {'+'.join(r.id for r in comp.baseline)}; new {'+'.join(r.id for r in comp.new)}"
           + (" (FORCED: incomparable differences overridden)" if any(p.forced for p in comp.pairs) else "")]
    for p in comp.pairs:
        rates = lambda rs: ", ".join("n/a" if r is None else f"{r:g} req/s" for r in rs)  # noqa: E731
        out.append(f"- {p.title}: load {p.load} (resolved: baseline {rates(p.rate_baseline)}; new {rates(p.rate_new)})")
        if p.note:
            out.append(f"    {p.note}")
        if p.forced:
            out.append("    forced despite: " + "; ".join(str(d) for d in p.differences))
        for o in p.outcomes:
            out.append(f"    [{o.verdict}] {o.message}")
    for u in comp.unmatched:
        out.append(f"- {u}")
    n_fail = len(comp.violations)
    out.append(f"result: {n_fail} rule violation(s), {len(comp.refused)} refused comparison(s)"
               if comp.rules else "result: no --fail rules given (report only)")
    return "\n".join(out)


def _cells(o: FigureOutcome) -> list[str]:
    c = o.change
    if c is None:
        return [o.figure, "n/a", "n/a", "n/a", "n/a", "n/a", o.rule.text if o.rule else "", o.verdict]
    unit = (o.rule.info if o.rule else _info(o.figure)).unit
    return [o.figure + (f"@{o.level}" if o.level else ""), f"{format_quantity(c.baseline, unit)} (n={c.n_baseline})",
            f"{format_quantity(c.new, unit)} (n={c.n_new})", f"{c.rel * 100:+.1f}%",
            f"{c.rel_ci[0] * 100:+.1f}% … {c.rel_ci[1] * 100:+.1f}%", f"{c.p_value:.3g}",
            o.rule.text if o.rule else "", o.verdict]


def _info(figure: str) -> Any:
    from .metricinfo import metric_info

    return metric_info(figure.split(".")[0].split("@")[0])


def render_comparison_markdown(comp: Comparison) -> str:
    """Markdown: one table per compared procedure (baseline, new, change, CI, p, rule, verdict)."""
    lines = [f"Baseline `{'+'.join(r.id for r in comp.baseline)}`, new `{'+'.join(r.id for r in comp.new)}`; "
             f"a rule fails only when the whole {comp.confidence:.0%} CI of the change lies beyond its threshold."]
    for p in comp.pairs:
        lines += ["", f"**{p.title}** — load {p.load}"]
        if p.note:
            lines.append(f"> {p.note}")
            continue
        if p.forced:
            lines.append("> FORCED despite: " + "; ".join(str(d) for d in p.differences))
        lines += ["", "| figure | baseline | new | change | CI | p(no change) | rule | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_cells(o)) + " |" for o in p.outcomes]
        methods = sorted({o.change.method for o in p.outcomes if o.change})
        lines += ["", "Methods: " + "; ".join(methods)] if methods else []
    lines += [f"- {u}" for u in comp.unmatched]
    return "\n".join(lines) + "\n"


def junit_properties(comp: Comparison, nodeid: str) -> list[tuple[str, str]]:
    """``(name, value)`` pairs for one test's JUnit ``<properties>``: baseline, and per figure the change."""
    props = [("llmbench_baseline", "+".join(r.id for r in comp.baseline))]
    for o in comp.outcomes_for_test(nodeid):
        if o.change is not None:
            props.append((f"llmbench_change_{o.figure}", f"{o.change.rel * 100:+.2f}% "
                          f"[{o.change.rel_ci[0] * 100:+.2f}%, {o.change.rel_ci[1] * 100:+.2f}%] {o.verdict}"))
    return props
