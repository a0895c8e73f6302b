"""The level x source table of docs/slo-and-compliance.md, generated from the checks of stored runs.

``python tools/compliance_table.py [RESULTS_JSON ...] [--write]``: reads stored
``results.json`` documents (gzipped or not; default ``tests/data/results-smoke.json.gz``, the smoke
run the report tests render), prints the generated blocks, and with ``--write`` puts them into
``docs/slo-and-compliance.md`` between their markers. ``tests/test_source_table.py`` fails when the
docs differ. A tool of this repository, not of the plugin: nothing at run time uses it.

Two blocks:

* ``source-table``: every MUST and SHOULD item that can bind a procedure (5.1–5.10, the registry and
  ``data/applicability.yaml``) counted once, under the source its checks carry in the stored
  documents' procedures (``procedures[].compliance.items[]``). An item decided with different kinds
  in different procedures (e.g. ``runtime-check`` where the procedure exercised a loop,
  ``tool-verified`` where it did not) is counted under the first of :data:`SOURCE_COLUMNS` it
  carries. ``needs declaration``: the stored runs had no declaration that answers it; ``not
  exercised``: not applicable in every stored procedure (the condition that binds it did not hold).
* ``construction-items``: the items ``data/compliance_items.yaml`` labels ``construction`` (no run
  can make them unmet), grouped by reason; the source kind of a met one is ``construction`` with its
  reason in the evidence.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_llmbench.compliance.engine import item_data
from pytest_llmbench.compliance.registry import VERDICT_LEVELS, applicable_items, draft_tests, registry
from pytest_llmbench.compliance.verdict import LABELS

__all__ = ["BLOCKS", "SOURCE_COLUMNS", "construction_items", "construction_summary", "construction_table", "doc_block",
           "item_sources", "labelled_items", "load_document", "main", "render_blocks", "source_counts", "source_table", "update_doc"]

#: the columns, in the order an item decided with several kinds is counted: the run's own evidence first
SOURCE_COLUMNS = ("measured", "runtime-check", "declared", "parameter", "tool-verified", "construction",
                  "precondition", "self-audit", "needs declaration", "not exercised")
#: the source kinds that answer an item (the rest: "none", i.e. nothing answered it, or not-applicable)
_DECIDED = SOURCE_COLUMNS[:8]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DOCUMENTS = (ROOT / "tests" / "data" / "results-smoke.json.gz",)
DOC = ROOT / "docs" / "slo-and-compliance.md"
#: the marker names of the generated blocks (``<!-- name:start -->`` … ``<!-- name:end -->``)
BLOCKS = ("source-table", "construction-items")


def load_document(path: str | Path) -> dict[str, Any]:
    """A stored ``results.json`` (``.gz`` by its magic bytes)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw.decode("utf-8"))


def _binding_items() -> list[str]:
    """MUST/SHOULD ids that can bind a procedure 5.1–5.10, in registry order."""
    applies = {req.id for t in draft_tests() if t != "6" for req, _ in applicable_items(t)}
    return [rid for rid, req in registry().items.items() if req.in_verdict and rid in applies]


def item_sources(docs: Iterable[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """``{item id: Counter(source)}`` over the checks of every procedure of ``docs`` (not-applicable
    ones left out; an item nothing answered counts as ``none``)."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for doc in docs:
        for proc in doc.get("procedures") or []:
            for it in (proc.get("compliance") or {}).get("items") or []:
                if it.get("status") != "not-applicable":
                    out[str(it["id"])][str(it.get("source") or "none")] += 1
    return dict(out)


def _column(sources: Counter[str]) -> str:
    for s in _DECIDED:
        if sources.get(s):
            return s
    return "needs declaration" if sources else "not exercised"


def source_counts(docs: Iterable[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """``{level: Counter(column)}``: each binding MUST/SHOULD item once (see the module docstring)."""
    seen = item_sources(docs)
    out: dict[str, Counter[str]] = {level: Counter() for level in VERDICT_LEVELS}
    for rid in _binding_items():
        out[registry()[rid].level][_column(seen.get(rid, Counter()))] += 1
    return out


def source_table(docs: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table (level x source), one row per level and a total."""
    counts = source_counts(docs)
    lines = ["| level | " + " | ".join(SOURCE_COLUMNS) + " | total |", "|" + "---|" * (len(SOURCE_COLUMNS) + 2)]
    for level, c in counts.items():
        lines.append(f"| {level} | " + " | ".join(str(c.get(s, 0)) for s in SOURCE_COLUMNS)
                     + f" | {sum(c.values())} |")
    seen = item_sources(docs)
    mixed = [rid for rid in _binding_items() if len({s for s in seen.get(rid, ()) if s in _DECIDED}) > 1]
    if mixed:
        lines += ["", f"{len(mixed)} items carry different kinds in different procedures, each counted under "
                      "the first column it carries: "
                  + "; ".join(f"{rid} ({', '.join(s for s in _DECIDED if seen[rid].get(s))})" for rid in mixed)
                  + "."]
    return "\n".join(lines)


def construction_items() -> dict[str, str]:
    """``{item id: reason}`` of the items ``data/compliance_items.yaml`` labels construction, in registry order."""
    data = item_data()["items"]
    return {rid: str(data[rid]["construction"]) for rid in registry().items if data.get(rid, {}).get("construction")}


def labelled_items() -> dict[str, tuple[str, str]]:
    """``{item id: (source kind, reason)}`` of the items labelled ``precondition`` or ``self_audit``
    (enforced by refusing to start; the tool's audit of its own recording), in registry order."""
    data = item_data()["items"]
    out: dict[str, tuple[str, str]] = {}
    for rid in registry().items:
        d = data.get(rid, {})
        for label, kind in LABELS.items():
            if label != "construction" and d.get(label):
                out[rid] = (kind, str(d[label]))
    return out


def construction_summary(docs: Sequence[Mapping[str, Any]]) -> str:
    """One sentence: how many items per level the data labels construction, and how many of the
    binding MUST/SHOULD ones carry it in the stored documents (the rest: where they were not exercised)."""
    labelled = Counter(registry()[rid].level for rid in construction_items())
    seen = item_sources(docs)
    binding = [rid for rid in _binding_items() if rid in construction_items()]
    carried = Counter(registry()[rid].level for rid in binding if _column(seen.get(rid, Counter())) == "construction")
    other = [f"{rid} ({_column(seen.get(rid, Counter()))})" for rid in binding
             if _column(seen.get(rid, Counter())) != "construction"]
    rest = labelled["PARAM"] + labelled["REPORT"] + labelled["MAY"]
    text = (f"{labelled['MUST']} MUST, {labelled['SHOULD']} SHOULD and {rest} PARAM/REPORT items hold by construction. "
            f"In the stored runs {carried['MUST']} of those MUSTs and {carried['SHOULD']} of those SHOULDs carry "
            "`construction`")
    return text + (f"; the others: {', '.join(other)}." if other else ".")


def construction_table(docs: Sequence[Mapping[str, Any]]) -> str:
    """The count sentence, then the construction items grouped by reason: one row per reason, verdict levels first."""
    order = {level: n for n, level in enumerate(("MUST", "SHOULD", "PARAM", "REPORT", "MAY"))}
    groups: dict[str, list[str]] = defaultdict(list)
    for rid, reason in construction_items().items():
        groups[reason].append(rid)
    rows = sorted(groups.items(), key=lambda kv: min(order[registry()[r].level] for r in kv[1]))
    lines = [construction_summary(docs), "", "| items | holds because |", "|---|---|"]
    for reason, ids in rows:
        ids = sorted(ids, key=lambda r: order[registry()[r].level])
        lines.append(f"| {', '.join(ids)} | {reason.replace('|', '/')} |")
    other: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rid, key in labelled_items().items():
        other[key].append(rid)
    if other:
        lines += ["", "Items a completed run holds because the tool refuses to start without them (`precondition`) "
                      "or because they audit the tool's own recording (`self-audit`):", "",
                  "| items | source | holds because |", "|---|---|---|"]
        lines += [f"| {', '.join(ids)} | {kind} | {reason.replace('|', '/')} |" for (kind, reason), ids in other.items()]
    return "\n".join(lines)


def render_blocks(docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{marker: block}`` for every generated block of the docs."""
    blocks = {"source-table": source_table(docs), "construction-items": construction_table(docs)}
    assert tuple(blocks) == BLOCKS
    return blocks


def doc_block(text: str, name: str) -> str:
    """The text between ``<!-- name:start -->`` and ``<!-- name:end -->`` (without the marker lines)."""
    start, end = f"<!-- {name}:start -->\n", f"\n<!-- {name}:end -->"
    if start not in text or end not in text:
        raise ValueError(f"no {name} block in the document")
    return text.split(start, 1)[1].split(end, 1)[0]


def update_doc(text: str, blocks: Mapping[str, str]) -> str:
    """``text`` with each block between its markers replaced."""
    for name, block in blocks.items():
        old = doc_block(text, name)
        text = text.replace(f"<!-- {name}:start -->\n{old}\n<!-- {name}:end -->",
                            f"<!-- {name}:start -->\n{block}\n<!-- {name}:end -->", 1)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/compliance_table.py",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("documents", nargs="*", metavar="RESULTS_JSON", help="stored results.json (.gz) documents "
                        f"(default: {', '.join(p.relative_to(ROOT).as_posix() for p in DEFAULT_DOCUMENTS)})")
    parser.add_argument("--write", action="store_true", help=f"write the blocks into {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    docs = [load_document(p) for p in (args.documents or DEFAULT_DOCUMENTS)]
    blocks = render_blocks(docs)
    if args.write:
        DOC.write_text(update_doc(DOC.read_text(encoding="utf-8"), blocks), encoding="utf-8")
        print(DOC.as_posix())
    else:
        for name, block in blocks.items():
            print(f"<!-- {name}:start -->\n{block}\n<!-- {name}:end -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
