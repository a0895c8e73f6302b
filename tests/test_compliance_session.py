"""Session-level items re-judged at session end (compliance.session, §4.3.2, §4.8.2).

Which workloads and tests a session holds is known only at its end: whatever order the tests ran
in, every procedure's verdict is re-judged over the whole session; capped or stand-in (custom)
workloads do not count, nor does a 5.10 run that did not measure guardrails on and off.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from factories import GOOD_DECLARATIONS, all_procedure_checks, good_facts

from pytest_llmbench.compliance import SESSION_ITEMS, Status, Verdict, evaluate_test, rejudge_session


def _result(test_id: str, workload: dict[str, Any], **facts: Any) -> SimpleNamespace:
    """A procedure result judged as the procedure leaves it: the session so far is itself."""
    facts = {"session_workloads": (workload["name"],), "session_tests": (test_id,), **facts}
    f = dataclasses.replace(good_facts(test_id), workload=workload, **facts)
    checks = all_procedure_checks(test_id)
    return SimpleNamespace(procedure=test_id, facts=f, checks=checks, measurements={},
                           compliance=evaluate_test(test_id, checks, f, GOOD_DECLARATIONS))


def _engine_pair() -> tuple[SimpleNamespace, SimpleNamespace]:
    """A Model Engine 5.1 on Conversation, then a 5.2 on Synthetic-Uniform (4.3.2-MUST-1 needs the latter)."""
    return (_result("5.1", {"name": "conversation"}, sut_boundary="model-engine"),
            _result("5.2", {"name": "synthetic-uniform"}, sut_boundary="model-engine"))


def test_a_later_synthetic_uniform_run_meets_4_3_2_must_1_for_an_earlier_test() -> None:
    first, second = _engine_pair()
    assert first.compliance["4.3.2-MUST-1"].status is Status.UNMET  # judged alone, before 5.2 ran
    assert first.compliance.verdict is Verdict.NOT_COMPLIANT

    changed = rejudge_session([first, second])

    assert first.compliance["4.3.2-MUST-1"].status is Status.MET
    assert first.facts.session_workloads == ("conversation", "synthetic-uniform")
    assert first.facts.session_tests == ("5.1", "5.2")
    assert changed["5.1"] == (Verdict.NOT_COMPLIANT.value, first.compliance.verdict.value)
    assert first.compliance.verdict is not Verdict.NOT_COMPLIANT
    assert first.measurements["compliance_verdict"] == first.compliance.verdict.value
    note = [n for n in first.compliance.notes if n.startswith("session-level items")]
    assert note == [f"session-level items ({', '.join(SESSION_ITEMS)}) judged at session end over: "
                    "workloads conversation, synthetic-uniform; tests 5.1, 5.2"]
    assert "5.2" not in changed  # already met: its own run was Synthetic-Uniform


def test_the_verdicts_do_not_depend_on_the_order_the_tests_ran_in() -> None:
    a1, b1 = _engine_pair()
    b2, a2 = reversed(_engine_pair())
    rejudge_session([a1, b1])
    rejudge_session([b2, a2])
    for x, y in ((a1, a2), (b1, b2)):
        assert x.compliance.verdict is y.compliance.verdict
        assert x.compliance.rows() == y.compliance.rows()


def test_rejudging_twice_changes_nothing() -> None:
    first, second = _engine_pair()
    rejudge_session([first, second])
    rows = first.compliance.rows()
    assert rejudge_session([first, second]) == {}
    assert first.compliance.rows() == rows
    assert sum(n.startswith("session-level items") for n in first.compliance.notes) == 1


def test_a_custom_synthetic_uniform_run_does_not_count() -> None:
    first = _result("5.1", {"name": "conversation"}, sut_boundary="model-engine")
    capped = _result("5.2", {"name": "synthetic-uniform", "custom": True}, sut_boundary="model-engine")
    rejudge_session([first, capped])
    assert first.facts.session_workloads == ("conversation",)
    assert first.compliance["4.3.2-MUST-1"].status is Status.UNMET
    assert "workloads conversation;" in first.compliance.notes[-1]


def test_only_a_5_10_that_compared_guardrails_counts_for_4_8_2_should_2() -> None:
    def session(compared: bool) -> SimpleNamespace:
        run = _result("5.1", {"name": "conversation"})
        guard = _result("5.10", {"name": "conversation"}, session_tests=("5.10",) if compared else ())
        rejudge_session([run, guard])
        return run

    assert session(compared=True).compliance["4.8.2-SHOULD-2"].status is Status.MET
    without = session(compared=False)
    assert without.compliance["4.8.2-SHOULD-2"].status is Status.UNMET
    assert without.facts.session_tests == ("5.1",)


def test_results_without_compliance_are_left_alone() -> None:
    crashed = SimpleNamespace(procedure="5.3", facts=None, checks={}, compliance=None, measurements={})
    first, second = _engine_pair()
    changed = rejudge_session([crashed, first, second])
    assert crashed.compliance is None and "5.3" not in changed
