"""The engine: every applicable item of a test as a Check, and the §2 verdict."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..common import draft
from .declarations import Declarations, _as_declarations
from .engine import DECLARATION_HOOKS, EVALUATORS, _condition, _Ctx
from .facts import RunFacts
from .registry import _check_test_id, applicable_items, registry
from .verdict import Check, ComplianceResult, Status, verdict_of

# ============================================================================================
# The engine
# ============================================================================================


def evaluate_test(test_id: str, procedure_checks: Mapping[str, Check] | None = None,
                  facts: RunFacts | None = None,
                  declarations: Declarations | Mapping[str, Any] | None = None) -> ComplianceResult:
    """Every applicable item of ``test_id`` as a :class:`Check`, and the §2 verdict.

    ``procedure_checks`` (id -> Check) win over evaluators; evaluators answer from ``facts``;
    declarations fill what neither can observe. Unknown ids in ``procedure_checks`` are an error.
    """
    test_id = _check_test_id(test_id)
    reg = registry()
    procedure_checks = dict(procedure_checks or {})
    for rid in procedure_checks:
        reg[rid]  # raises ComplianceError on an invented id
    facts = facts or RunFacts()
    decl = _as_declarations(declarations)
    ctx = _Ctx(facts, decl, procedure_checks)
    checks: list[Check] = []
    notes: list[str] = []
    for req, cond_name in applicable_items(test_id):
        if cond_name is not None:
            cond, desc = _condition(cond_name)  # type: ignore[misc]
            holds = cond(facts, decl)
            if holds is False and req.id not in procedure_checks:
                checks.append(Check(req.id, Status.NOT_APPLICABLE, f"applies only when {desc}", {}, "not-applicable"))
                continue
            c = ctx.check(req.id)
            if holds is None:
                c = dataclasses.replace(c, reason=f"{c.reason} [applied: unknown whether {desc}]")
            checks.append(c)
        else:
            checks.append(ctx.check(req.id))
    for c in checks:
        if c.id == "4.8.2-MUST-1" and c.evidence.get("disabled"):
            notes.append(f"Safety systems disabled during the test: {', '.join(c.evidence['disabled'])} (§4.8.2)")
        if c.id == "4.5.3-MUST-2" and c.holds:
            notes.append("Cold-start measurement (§4.5.3)")
    if facts.warmup.reduced:
        notes.append("Warm-up reduced below the §4.5.1 minimum by the profile")
    result = ComplianceResult(test_id, verdict_of(checks), checks, notes, declarations=decl)
    # a draft minimum counts as a SHOULD (data/draft.yaml items:): the deviation is named with the verdict
    notes[:0] = [f"Deviation (below the draft's minimum, counted as a SHOULD): {d}" for d in result.deviations]
    return result


def coverage(test_id: str) -> dict[str, list[str]]:
    """Which applicable items of ``test_id`` have which kind of evidence source.

    Keys: ``evaluator`` (general evaluator over RunFacts), ``declaration`` (declaration hook),
    ``procedure`` (MUST/SHOULD, and rows of the draft's minimums, nobody else answers: the procedure must
    supply them),
    ``informational`` (MAY/PARAM/REPORT with no evaluator).
    """
    out: dict[str, list[str]] = {"evaluator": [], "declaration": [], "procedure": [], "informational": []}
    for req, _ in applicable_items(test_id):
        if req.id in DECLARATION_HOOKS:
            out["declaration"].append(req.id)
        elif req.id in EVALUATORS:
            out["evaluator"].append(req.id)
        elif req.in_verdict or req.id in draft.minimums():  # a draft minimum counts as a SHOULD
            out["procedure"].append(req.id)
        else:
            out["informational"].append(req.id)
    return out


def procedure_items(test_id: str, *, include_informational: bool = False) -> list[str]:
    """The IDs the procedure of ``test_id`` must evaluate itself (no evaluator, no declaration hook).

    MUST/SHOULD only by default; ``include_informational`` adds the test's PARAM/REPORT/MAY rows
    that nothing else answers. §6 items appear here only for test "6" (the comparison supplies
    them for every compared test); items borrowed from another test (7.4-SHOULD-3 for 5.5) do appear.
    """
    test_id = _check_test_id(test_id)
    reg = registry()
    cov = coverage(test_id)

    def mine(rid: str) -> bool:
        scope = reg[rid].applies_to
        return scope != "general" and (scope != "6" or test_id == "6")

    ids = [i for i in cov["procedure"] if mine(i)]
    if include_informational:
        ids += [i for i in cov["informational"] if mine(i)]
    order = list(reg.items)
    return sorted(ids, key=order.index)
