"""Methodology compliance per test (draft §2): unconditionally / conditionally / not compliant.

The verdict judges the *run* (the benchmark implementation, its configuration and report), not
the SUT's speed; the user's SLO verdict (slo.py) is a separate thing and never mixes with it.

* The registry holds the draft's items from the shipped ``data/requirements.yaml`` (the IDs are the
  contract; see shared/spec/requirements.md).
* ``data/applicability.yaml`` encodes the matrix of requirements.md §2: which items bind which test
  (5.1–5.10, 6), some only under a condition on the run.
* Each applicable item becomes a :class:`Check`: from the procedure (its own measurements), else
  from an evaluator registered here against :class:`RunFacts` (what any run knows), else from the
  tester's :class:`Declarations` (what a client cannot observe). Nothing is assumed: an item with
  no evidence is unmet ("needs tester declaration" / "no evaluator").
* :func:`evaluate_test` applies §2: any unmet MUST -> not compliant; all MUSTs met but a SHOULD
  unmet -> conditionally compliant; all met -> unconditionally compliant. MAY, PARAM and REPORT
  rows are shown but never change the verdict.

Package layout: ``registry`` (items and applicability), ``facts`` (RunFacts, each fact with its
source), ``declarations``, ``engine`` (resolution order, conditions), evaluators grouped by draft
section (``s4_2_load`` ... ``s5_procedures``), per-item data in ``data/items.yaml``, ``evaluate``
(the verdict of one test) and ``session`` (items judged at session end).
"""

from __future__ import annotations

from . import (  # noqa: F401  (register their evaluators)
    appendix_bc,
    s4_2_load,
    s4_3_workloads,
    s4_4_tokens,
    s4_5_warmup,
    s4_6_streaming,
    s4_7_clocks,
    s4_8_guardrails,
    s5_decide,
    s5_procedures,
)
from .declarations import DECLARATION_FACTS, Declarations, effective_declarations
from .engine import CONDITIONS, DECIDERS, decide
from .evaluate import coverage, evaluate_test, procedure_items
from .facts import ClockFacts, ColdStartFacts, LoadFacts, RecordAudit, RunFacts, RunLoad, WarmupFacts
from .registry import (
    LOAD_CAPABILITIES,
    STANDARD_WORKLOADS,
    ComplianceError,
    DeclarationError,
    Requirement,
    applicable_items,
    draft_tests,
    registry,
)
from .s4_7_clocks import timestamp_format_of
from .session import SESSION_ITEMS, rejudge_session
from .verdict import Check, ComplianceResult, Status, Verdict, verdict_of

__all__ = [
    "CONDITIONS",
    "DECIDERS",
    "DECLARATION_FACTS",
    "LOAD_CAPABILITIES",
    "SESSION_ITEMS",
    "STANDARD_WORKLOADS",
    "Check",
    "ClockFacts",
    "ColdStartFacts",
    "ComplianceError",
    "ComplianceResult",
    "DeclarationError",
    "Declarations",
    "effective_declarations",
    "LoadFacts",
    "RunLoad",
    "RecordAudit",
    "Requirement",
    "RunFacts",
    "Status",
    "Verdict",
    "WarmupFacts",
    "applicable_items",
    "coverage",
    "decide",
    "draft_tests",
    "evaluate_test",
    "procedure_items",
    "registry",
    "rejudge_session",
    "timestamp_format_of",
    "verdict_of",
]
