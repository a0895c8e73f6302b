"""The by-level-and-source table of docs/slo-and-compliance.md, generated from the registry.

Counts the MUST and SHOULD items that can bind a procedure (5.1–5.10; §6 belongs to the
comparison) by where their evidence comes from on a real endpoint: the source kind in
``data/compliance_items.yaml`` for the items an evaluator or declaration answers, ``procedure``
for the items a procedure answers from its own runs. tests/test_compliance_items.py keeps the
document's copy current.
"""

from __future__ import annotations

from collections import Counter

from .engine import DECLARATION_HOOKS, EVALUATORS, item_data
from .registry import TESTS, applicable_items, registry

__all__ = ["SOURCE_COLUMNS", "source_counts", "source_table"]

SOURCE_COLUMNS = ("measured", "runtime-check", "tool-verified", "parameter", "declared", "procedure")


def source_counts() -> dict[str, Counter[str]]:
    """``{level: Counter(source)}`` over the verdict items that can bind a procedure."""
    applies = {req.id for t in TESTS if t != "6" for req, _ in applicable_items(t)}
    data = item_data()["items"]
    out: dict[str, Counter[str]] = {"MUST": Counter(), "SHOULD": Counter()}
    for req in registry():
        if not req.in_verdict or req.id not in applies:
            continue
        if req.id in EVALUATORS:
            src = "declared" if req.id in DECLARATION_HOOKS else str(data.get(req.id, {}).get("source", "measured"))
        else:
            src = "procedure"
        out[req.level][src] += 1
    return out


def source_table() -> str:
    """The markdown table (level x source), one row per level and a total."""
    counts = source_counts()
    head = "| level | " + " | ".join(SOURCE_COLUMNS) + " | total |"
    lines = [head, "|" + "---|" * (len(SOURCE_COLUMNS) + 2)]
    for level, c in counts.items():
        lines.append(f"| {level} | " + " | ".join(str(c.get(s, 0)) for s in SOURCE_COLUMNS)
                     + f" | {sum(c.values())} |")
    return "\n".join(lines)
