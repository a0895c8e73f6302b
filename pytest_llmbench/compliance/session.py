"""Items judged over the whole session, at its end (§4.3.2, §4.8.2).

Which workloads and tests a report holds is known only when the session ends, so these items are
re-judged then for every procedure, whatever order the tests ran in: a Model Engine report needs a
Synthetic-Uniform run (4.3.2-MUST-1), an Application Gateway report should hold a Conversation
run (4.3.2-SHOULD-1), and production-representative gateway runs should be paired with a
guardrails on/off comparison (5.10, 4.8.2-SHOULD-2). Only workloads run as defined count: a capped
or stand-in workload is custom (``procedures.sample.as_run``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from .evaluate import evaluate_test

__all__ = ["SESSION_ITEMS", "rejudge_session"]

#: Items whose evidence is the whole session, not one procedure's runs.
SESSION_ITEMS = ("4.3.2-MUST-1", "4.3.2-SHOULD-1", "4.8.2-SHOULD-2")


def rejudge_session(results: Iterable[Any]) -> dict[str, tuple[str, str]]:
    """Re-judge every result's compliance with the session's workloads and tests.

    ``results`` are procedure results carrying ``procedure``, ``facts``, ``checks`` and
    ``compliance`` (procedures.result.ProcedureResult). Returns ``{procedure: (old, new)}`` for the
    results whose verdict changed; each result's ``compliance`` and ``measurements`` are updated.
    """
    done = [r for r in results if getattr(r, "compliance", None) is not None and getattr(r, "facts", None)]
    workloads = sorted({r.facts.workload_name for r in done if r.facts.workload_name and not r.facts.workload.get("custom")})
    altered = sorted({str(r.facts.workload.get("name")) for r in done if r.facts.workload.get("custom")})
    tests = sorted({r.procedure for r in done if r.procedure != "5.10" or _compared_guardrails(r)})
    changed: dict[str, tuple[str, str]] = {}
    for r in done:
        facts = dataclasses.replace(r.facts, session_workloads=tuple(workloads), session_tests=tuple(tests),
                                    session_custom_workloads=tuple(altered))
        old = r.compliance
        new = evaluate_test(r.procedure, r.checks, facts, old.declarations)
        note = (f"session-level items ({', '.join(SESSION_ITEMS)}) judged at session end over: "
                f"workloads {', '.join(workloads) or 'none'}; tests {', '.join(tests)}")
        new.notes = list(dict.fromkeys([*old.notes, *new.notes, note]))
        r.facts, r.compliance = facts, new
        if hasattr(r, "measurements"):
            r.measurements["compliance_verdict"] = new.verdict.value
        if old.verdict is not new.verdict:
            changed[r.procedure] = (old.verdict.value, new.verdict.value)
    return changed


def _compared_guardrails(result: Any) -> bool:
    """A 5.10 result that measured guardrails on and off (its own 5.10.x checks say so)."""
    return "5.10" in (result.facts.session_tests or ())
