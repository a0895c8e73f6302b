"""The by-level-and-source table of docs/slo-and-compliance.md, generated from the registry.

Counts the MUST and SHOULD items that can bind a procedure (5.1–5.10) by where their evidence
comes from on a real endpoint: the source kind in ``data/compliance_items.yaml`` for the items an
evaluator or a decider answers (a decider decides an item from what a procedure observed), and
``declared`` for declaration hooks. The §6 items that bind a compared run belong to the comparison
(issue 14), which does not exist yet: they are counted as ``§6 comparison`` and are unmet in any
compared run. An item with no source in the data file is an error, never a default.
tests/test_compliance_items.py keeps the document's copy current.
"""

from __future__ import annotations

from collections import Counter

from .engine import DECIDERS, DECLARATION_HOOKS, EVALUATORS, item_data
from .registry import TESTS, ComplianceError, applicable_items, registry

__all__ = ["SOURCE_COLUMNS", "source_counts", "source_table"]

SOURCE_COLUMNS = ("measured", "runtime-check", "tool-verified", "parameter", "declared", "§6 comparison")


def source_counts() -> dict[str, Counter[str]]:
    """``{level: Counter(source)}`` over the verdict items that can bind a procedure."""
    applies = {req.id for t in TESTS if t != "6" for req, _ in applicable_items(t)}
    data = item_data()["items"]
    out: dict[str, Counter[str]] = {"MUST": Counter(), "SHOULD": Counter()}
    for req in registry():
        if not req.in_verdict or req.id not in applies:
            continue
        if req.id in DECLARATION_HOOKS:
            src = "declared"
        elif req.id in EVALUATORS or req.id in DECIDERS:
            if "source" not in data.get(req.id, {}):
                raise ComplianceError(f"compliance_items.yaml: {req.id} has no source")
            src = str(data[req.id]["source"])
        elif req.applies_to == "6":
            src = "§6 comparison"
        else:
            raise ComplianceError(f"{req.id} can bind a procedure but nothing decides it")
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
