"""Items judged over the whole session, at its end (§4.3.2, §4.8.2).

Which workloads and tests a report holds is known only when the session ends, so these items are
re-judged then for every procedure, whatever order the tests ran in: a Model Engine report needs a
Synthetic-Uniform run (4.3.2-MUST-1), an Application Gateway report should hold a Conversation
run (4.3.2-SHOULD-1), and production-representative gateway runs should be paired with a
guardrails on/off comparison (5.10, 4.8.2-SHOULD-2). Only workloads run as defined count: a capped
or stand-in workload is not standard (``RunFacts.workload_standing`` of ``procedures.sample.as_run``).

The results are read, never changed: :func:`rejudge_session` returns each one's facts and verdict
judged over the session, and the caller (``session.Session.result``) puts them into copies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .evaluate import evaluate_test
from .facts import RunFacts
from .verdict import ComplianceResult

__all__ = ["SESSION_ITEMS", "SessionJudgement", "rejudge_session"]

#: Items whose evidence is the whole session, not one procedure's runs.
SESSION_ITEMS = ("4.3.2-MUST-1", "4.3.2-SHOULD-1", "4.8.2-SHOULD-2")

K = TypeVar("K")


@dataclass(frozen=True)
class SessionJudgement:
    """One result judged over the session: its facts with the session's workloads and tests, the
    compliance judged with them, and the verdict it had before (from its own run alone)."""

    facts: RunFacts
    compliance: ComplianceResult
    before: ComplianceResult

    @property
    def changed(self) -> bool:
        """Whether the session's items changed the §2 verdict."""
        return self.before.verdict is not self.compliance.verdict


def rejudge_session(results: Mapping[K, Any]) -> dict[K, SessionJudgement]:
    """Every result's compliance judged with the session's workloads and tests.

    ``results`` map a key to a procedure result carrying ``procedure``, ``facts``, ``checks`` and
    ``compliance`` (procedures.result.ProcedureResult); those without compliance or facts (a procedure
    cut short) are left out of the answer. Nothing in ``results`` is changed.
    """
    done = {k: r for k, r in results.items()
            if getattr(r, "compliance", None) is not None and getattr(r, "facts", None)}
    facts = [r.facts for r in done.values()]
    workloads = sorted({f.workload_name for f in facts if f.workload_name and f.workload_standing == "standard"})
    altered = sorted({str(f.workload.get("name")) for f in facts if f.workload_standing in ("custom", "stand-in")})
    tests = sorted({r.procedure for r in done.values() if r.procedure != "5.10" or _compared_guardrails(r)})
    note = (f"session-level items ({', '.join(SESSION_ITEMS)}) judged at session end over: "
            f"workloads {', '.join(workloads) or 'none'}; tests {', '.join(tests)}")
    out: dict[K, SessionJudgement] = {}
    for key, r in done.items():
        judged = dataclasses.replace(r.facts, session_workloads=tuple(workloads), session_tests=tuple(tests),
                                     session_custom_workloads=tuple(altered))
        old = r.compliance
        new = evaluate_test(r.procedure, r.checks, judged, old.declarations)
        new.notes = list(dict.fromkeys([*old.notes, *new.notes, note]))
        out[key] = SessionJudgement(judged, new, old)
    return out


def _compared_guardrails(result: Any) -> bool:
    """A 5.10 result that measured guardrails on and off (its own 5.10.x checks say so)."""
    return "5.10" in (result.facts.session_tests or ())
