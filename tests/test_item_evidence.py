"""No item decided by a constant outside its label (issue 48, fidelity-audit-3 finding 3).

Every MUST/SHOULD item either has an observation that could have failed, or carries the label of how
the tool holds it (``construction``, ``precondition`` enforced by refusing to start, ``self_audit``
of the tool's own recording) with its reason. This walks the evaluators and deciders of the
compliance package and every ``decide("<id>", ok=True, ...)`` a procedure writes.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pytest_llmbench.procedures as procedures_pkg
from pytest_llmbench.compliance import Status, decide
from pytest_llmbench.compliance.engine import DECIDERS, EVALUATORS, finalize, item
from pytest_llmbench.compliance.registry import registry
from pytest_llmbench.compliance.verdict import LABELS, SOURCES, Check

#: fidelity-audit-3 §3: MUST/SHOULD items no completed run could make unmet, not labelled
AUDIT_3 = {
    # ok=True whenever a record exists: now an observation (4.4.2-MUST-1) or construction (4.6.2-MUST-2)
    "4.4.2-MUST-1": None, "4.6.2-MUST-2": "construction",
    # enforced by refusing to start
    "4.1-MUST-1": "precondition", "5.1.2-MUST-10": "precondition", "4.3-MUST-1": "precondition",
    "4.3.1-MUST-1": "precondition", "4.3.1-MUST-2": "precondition", "4.3.1-MUST-3": "precondition",
    "4.3.1-MUST-4": "precondition", "5.1.2-MUST-1": "precondition", "5.2.2-MUST-1": "precondition",
    # the tool audits its own recording
    "5.4.3-MUST-1": "self_audit", "4.2.2-MUST-2": "self_audit", "4.2.6-MUST-1": "self_audit",
    "4.2.6-MUST-2": "self_audit", "4.2.6-MUST-3": "self_audit", "4.2.6-MUST-4": "self_audit",
    "4.2.6-MUST-6": "self_audit", "4.2.6-MUST-7": "self_audit",
    # the engine writes the note whenever a guardrail is off; not applicable when none is
    "4.8.2-MUST-1": "construction",
}

_LABELLED = tuple(LABELS)
_OBSERVED_SOURCES = ("measured", "parameter")


def _labelled(rid: str) -> bool:
    return any(item(rid).get(k) for k in _LABELLED)


@pytest.mark.parametrize("rid", sorted(AUDIT_3))
def test_each_audit_item_is_labelled_with_a_reason_or_observed(rid: str) -> None:
    label = AUDIT_3[rid]
    data = item(rid)
    if label is None:
        assert not _labelled(rid), rid
    else:
        assert len(str(data.get(label, ""))) > 30, f"{rid}: {label} needs its reason"


def test_every_label_maps_to_a_source_kind_the_docs_explain() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "slo-and-compliance.md").read_text(encoding="utf-8")
    for label, kind in LABELS.items():
        assert kind in SOURCES
        assert f"| `{kind}` |" in docs, f"docs/slo-and-compliance.md does not explain the source {kind!r}"


def test_a_met_precondition_item_says_so_and_an_unmet_one_keeps_its_kind() -> None:
    met = finalize(Check("4.1-MUST-1", Status.MET, "SUT boundary: model-engine"))
    assert met.source == "precondition" and "refuses to start" in met.evidence["precondition"]
    unmet = finalize(Check("4.1-MUST-1", Status.UNMET, "SUT boundary not declared"))
    assert unmet.source == "parameter" and "precondition" not in unmet.evidence
    audit = finalize(Check("4.2.6-MUST-1", Status.MET, "all 10 records"))
    assert audit.source == "self-audit"


def test_4_4_2_must_1_fails_when_successful_records_carry_no_count() -> None:
    """The old evaluator was ``ok=True`` whenever any record was counted."""
    from pytest_llmbench.compliance import RecordAudit, RunFacts, evaluate_test

    facts = RunFacts(counting_used={"B": 8}, records=RecordAudit(n=10, n_ok=10))
    c = evaluate_test("5.1", {}, facts)["4.4.2-MUST-1"]
    assert c.status is Status.UNMET and "2 of 10" in c.reason and c.source == "measured"
    facts = RunFacts(counting_used={"B": 10}, records=RecordAudit(n=10, n_ok=10))
    assert evaluate_test("5.1", {}, facts)["4.4.2-MUST-1"].status is Status.MET


# ---------------------------------------------------------------------------------- the walk

def _module_functions(fn: Callable[..., Any]) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(Path(inspect.getsourcefile(fn) or "").read_text(encoding="utf-8"))
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _ok_keyword(call: ast.Call) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == "ok"), None)


def _fails(node: ast.AST, funcs: dict[str, ast.FunctionDef], depth: int = 0) -> bool:
    """Whether a function body has an outcome that an observation decides: ``Check.unmet``, a
    ``Check(...)`` with a computed status, a ``decide``/``row`` whose ``ok`` is not the constant
    True/None, or such a call in a module function it calls (two levels deep). A bare
    "not recorded" (``_need``) or needs-declaration does not count: it fails only on nothing."""
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        if owner == "Check" and name == "unmet":
            return True
        if isinstance(f, ast.Name) and name == "Check" and len(n.args) > 1 and not isinstance(n.args[1], ast.Attribute):
            return True
        if name in ("decide", "row"):
            ok = _ok_keyword(n) if _ok_keyword(n) is not None else (n.args[1] if len(n.args) > 1 else None)
            if ok is not None and not (isinstance(ok, ast.Constant) and ok.value in (True, None)):
                return True
        if owner == "ctx" and name == "check":  # decided by another item's check
            return True
        if isinstance(f, ast.Name) and name in funcs and name != getattr(node, "name", "") and depth < 2:
            if _fails(funcs[name], funcs, depth + 1):
                return True
    return False


def _evaluated() -> Iterator[tuple[str, Callable[..., Any]]]:
    for table in (EVALUATORS, DECIDERS):
        for rid, fn in table.items():
            yield rid, fn


def test_no_observed_must_or_should_is_decided_by_a_constant() -> None:
    """Every MUST/SHOULD item an evaluator or decider answers with source measured or parameter can
    come out unmet on some observation; otherwise it carries its label."""
    constant = []
    for rid, fn in _evaluated():
        req = registry()[rid]
        data = item(rid)
        if not req.in_verdict or _labelled(rid) or data.get("source") not in _OBSERVED_SOURCES:
            continue
        src = textwrap.dedent(inspect.getsource(fn))
        if getattr(fn, "__name__", "") == "<lambda>":
            continue  # declaration hooks
        if not _fails(ast.parse(src), _module_functions(fn)):
            constant.append(f"{rid} ({fn.__module__}.{fn.__name__})")
    assert not constant, "decided by a constant, not labelled: " + ", ".join(constant)


def _unconditional_literal_decides(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """``decide("<id>", ok=True, ...)`` calls outside any ``if`` / conditional expression of their function."""

    def visit(node: ast.AST, conditional: bool) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            cond = conditional or isinstance(node, (ast.If, ast.IfExp)) and child is not getattr(node, "test", None)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                cond = False
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "decide" \
                    and child.args and isinstance(child.args[0], ast.Constant):
                ok = _ok_keyword(child)
                if isinstance(ok, ast.Constant) and ok.value is True and not cond:
                    yield str(child.args[0].value), child.lineno
            yield from visit(child, cond)

    yield from visit(tree, False)


def test_no_procedure_item_is_met_by_a_constant_outside_its_label() -> None:
    """No item's verdict (any level) is a literal ``ok=True`` a procedure writes whatever it observed,
    unless the item is labelled (construction, precondition, self-audit) with its reason."""
    root = Path(procedures_pkg.__file__).parent
    bad = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for rid, line in _unconditional_literal_decides(tree):
            if not _labelled(rid):
                bad.append(f"{path.name}:{line} {rid}")
    assert not bad, "met by a constant, not labelled: " + ", ".join(bad)


def test_the_walk_catches_a_constant() -> None:
    """The walk itself can fail: a constant evaluator and an unconditional literal are found."""
    src = "def f(ctx, rid):\n    if x:\n        return _need(rid, 'y')\n    return decide(rid, ok=True, met='m')\n"
    assert not _fails(ast.parse(src), {})
    assert _fails(ast.parse(src.replace("ok=True", "ok=n > 0")), {})
    proc = "def g():\n    a = decide('5.3.2-PARAM-2', ok=True, met='m')\n    b = decide('5.3.2-PARAM-3', ok=True, met='m') if c else None\n"
    assert [r for r, _ in _unconditional_literal_decides(ast.parse(proc))] == ["5.3.2-PARAM-2"]
    assert decide("5.3.2-PARAM-2", ok=True, met="m").status is Status.MET


def test_a_needs_declaration_row_carries_no_observed_source() -> None:
    """5.8.3-PARAM-6 read ``source: measured`` and ``status: needs-declaration`` at once (issue 48)."""
    c = decide("5.8.3-PARAM-6", ok=None, needs="automatic summary: none")
    assert c.status is Status.NEEDS_DECLARATION and c.source == "none" and c.key == "5.8.3-PARAM-6"
