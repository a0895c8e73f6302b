"""The compact terminal table: one row per procedure run (plugin's ``pytest_terminal_summary``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .fmt import fmt_est

__all__ = ["SHORT_VERDICT", "TERMINAL_COLUMNS", "headline_lines", "rows_from_document", "slo_cell"]

SHORT_VERDICT = {
    "unconditionally compliant": "compliant",
    "conditionally compliant": "conditional",
    "not compliant": "NOT compliant",
}
#: The figure columns, between the request count and the verdicts: (header, figure name of the
#: document's ``figures``, i.e. a ``measure.registry.FIGURES`` name).
TERMINAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("TTFT P50", "ttft_p50"), ("TTFT P99", "ttft_p99"), ("TPOT P99", "tpot_p99"),
    ("output tok/s", "output_throughput"),
)
HEADER = ("procedure", "requests", *(title for title, _ in TERMINAL_COLUMNS), "SLO", "compliance (§2)")


def _fig(p: Mapping[str, Any], name: str) -> str:
    e = p["figures"].get(name)
    return fmt_est(e) if e else "n/a"


def _throughput(p: Mapping[str, Any]) -> str:
    e = p["figures"].get("output_throughput")
    if not e or e.get("value") is None:
        return "n/a"
    return f"{e['value']:,.1f}" + ("†" if e.get("undersampled") else "")


def slo_cell(tests: list[Mapping[str, Any]]) -> str:
    """The SLO verdicts of a procedure's tests: one per test that had SLOs (PASS, FAIL, INCONCLUSIVE, SKIP,
    NOT RUN), counted when several share one (``2 PASS, 1 INCONCLUSIVE``); ``-`` when none had SLOs (tests
    without SLOs are informational and carry no verdict)."""
    counts: dict[str, int] = {}
    for t in tests:
        if t.get("slos"):
            label = str(t.get("label", t["verdict"]))
            counts[label] = counts.get(label, 0) + 1
    if len(counts) == 1 and sum(counts.values()) == 1:
        return next(iter(counts))
    return ", ".join(f"{n} {label}" for label, n in counts.items()) or "-"


def headline_lines(doc: Mapping[str, Any]) -> list[str]:
    """The headline (headline.py) in a few lines: SUT, tests, compliance, key figures with their source."""
    from .render import headline_view

    h = headline_view(doc)
    if h is None:
        return []
    lines = [f"SUT: {h['sut']} | profile {h['profile']}", f"tests: {h['tests']}",
             f"compliance (§2): {h['compliance']}; main reason: {h['main_reason']}"]
    for f in h["figures"]:
        lines.append(f"  {f['title']}: {f['value']} ({f['procedure']}, {f['level']}, workload {f['workload']})")
    if h["findings"]:  # each kind once, most severe first
        for f in h["findings"]:
            lines.append(f"  ⚠ {f['title']}: " + "; ".join(f"{w['procedure']}: {w['text']}" for w in f["items"]))
    else:
        for w in h["warnings"]:
            lines.append(f"  ⚠ {w['procedure']}: {w['text']}")
    lines.append("")
    return lines


def rows_from_document(doc: Mapping[str, Any], report_path: str | None = None) -> list[str]:
    """Aligned text lines: a header, a row per procedure, the report path."""
    table: list[tuple[str, ...]] = [HEADER]
    for p in doc["procedures"]:
        tests = [t for t in doc["tests"] if t["result_key"] == p["key"]]
        slo = slo_cell(tests) + (" ⚠" if p.get("warnings") else "")
        name = f"{p['procedure']} {p['title']}"
        if len(name) > 34:
            name = name[:33] + "…"
        if not p["complete"]:
            name += " (INCOMPLETE)"
        figures = [_throughput(p) if fig == "output_throughput" else _fig(p, fig) for _, fig in TERMINAL_COLUMNS]
        table.append((name, f"{p['configuration']['requests']:,}", *figures, slo,
                      SHORT_VERDICT.get(p["compliance"]["verdict"], p["compliance"]["verdict"])))
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    right = set(range(1, 2 + len(TERMINAL_COLUMNS)))
    lines = []
    if not doc["complete"]:
        lines.append("INCOMPLETE: the session was interrupted; the reports cover only what finished")
    lines.extend(headline_lines(doc))
    for n, r in enumerate(table):
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if any("†" in c for r in table[1:] for c in r):
        lines.append("† under-sampled percentile (§5.1.4.3)")
    if report_path:
        lines.append(f"report: {report_path} (also report.md, results.json)")
    return lines
