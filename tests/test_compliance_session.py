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


def _judge(*results: SimpleNamespace) -> list[SimpleNamespace]:
    """The results as the session hands them on: copies carrying the facts and verdict judged over all."""
    judged = rejudge_session(dict(enumerate(results)))
    return [SimpleNamespace(**{**vars(r), "facts": judged[i].facts, "compliance": judged[i].compliance})
            if i in judged else r for i, r in enumerate(results)]


def test_a_later_synthetic_uniform_run_meets_4_3_2_must_1_for_an_earlier_test() -> None:
    first, second = _engine_pair()
    assert first.compliance["4.3.2-MUST-1"].status is Status.UNMET  # judged alone, before 5.2 ran
    assert first.compliance.verdict is Verdict.NOT_COMPLIANT

    judged = rejudge_session({"5.1": first, "5.2": second})

    now = judged["5.1"]
    assert now.compliance["4.3.2-MUST-1"].status is Status.MET
    assert now.facts.session_workloads == ("conversation", "synthetic-uniform")
    assert now.facts.session_tests == ("5.1", "5.2")
    assert now.changed and now.before is first.compliance and now.compliance.verdict is not Verdict.NOT_COMPLIANT
    note = [n for n in now.compliance.notes if n.startswith("session-level items")]
    assert note == [f"session-level items ({', '.join(SESSION_ITEMS)}) judged at session end over: "
                    "workloads conversation, synthetic-uniform; tests 5.1, 5.2"]
    assert not judged["5.2"].changed  # already met: its own run was Synthetic-Uniform


def test_the_results_are_not_changed() -> None:
    """The cached results keep what their own run gave: facts, verdict, notes (no verdict stored twice)."""
    first, second = _engine_pair()
    facts, compliance, notes = first.facts, first.compliance, list(first.compliance.notes)
    rejudge_session({"5.1": first, "5.2": second})
    assert first.facts is facts and first.compliance is compliance and first.compliance.notes == notes
    assert first.compliance["4.3.2-MUST-1"].status is Status.UNMET and first.measurements == {}


def test_the_verdicts_do_not_depend_on_the_order_the_tests_ran_in() -> None:
    a1, b1 = _judge(*_engine_pair())
    b2, a2 = _judge(*reversed(_engine_pair()))
    for x, y in ((a1, a2), (b1, b2)):
        assert x.compliance.verdict is y.compliance.verdict
        assert x.compliance.rows() == y.compliance.rows()


def test_judging_again_over_a_grown_session_keeps_one_session_note() -> None:
    """Judged after each test (--llm-compare) and at the end: the verdict and the one note are the end's."""
    first, second = _engine_pair()
    rejudge_session({"5.1": first})
    judged = rejudge_session({"5.1": first, "5.2": second})["5.1"].compliance
    assert [n for n in judged.notes if n.startswith("session-level items")] == [
        f"session-level items ({', '.join(SESSION_ITEMS)}) judged at session end over: "
        "workloads conversation, synthetic-uniform; tests 5.1, 5.2"]
    again = rejudge_session({"5.1": first, "5.2": second})["5.1"].compliance
    assert again.rows() == judged.rows() and again.notes == judged.notes


def test_a_custom_synthetic_uniform_run_does_not_count() -> None:
    first = _result("5.1", {"name": "conversation"}, sut_boundary="model-engine")
    capped = _result("5.2", {"name": "synthetic-uniform", "custom": True}, sut_boundary="model-engine")
    first, _ = _judge(first, capped)
    assert first.facts.session_workloads == ("conversation",)
    assert first.compliance["4.3.2-MUST-1"].status is Status.UNMET
    assert "workloads conversation;" in first.compliance.notes[-1]


def test_only_a_5_10_that_compared_guardrails_counts_for_4_8_2_should_2() -> None:
    def session(compared: bool) -> SimpleNamespace:
        run = _result("5.1", {"name": "conversation"})
        guard = _result("5.10", {"name": "conversation"}, session_tests=("5.10",) if compared else ())
        return _judge(run, guard)[0]

    assert session(compared=True).compliance["4.8.2-SHOULD-2"].status is Status.MET
    without = session(compared=False)
    assert without.compliance["4.8.2-SHOULD-2"].status is Status.UNMET
    assert without.facts.session_tests == ("5.1",)


def test_results_without_compliance_are_left_alone() -> None:
    crashed = SimpleNamespace(procedure="5.3", facts=None, checks={}, compliance=None, measurements={})
    first, second = _engine_pair()
    judged = rejudge_session({"5.3": crashed, "5.1": first, "5.2": second})
    assert crashed.compliance is None and set(judged) == {"5.1", "5.2"}


def test_the_session_hands_out_judged_copies_and_keeps_its_cache() -> None:
    """``Session.result``: the results and the first repetition judged over the session, as copies; the
    cached result (what a later test's ``llm_result`` is) keeps its own run's verdict (§4.3.2)."""
    from pytest_llmbench.procedures.result import ProcedureResult
    from pytest_llmbench.session import Session
    from pytest_llmbench.settings import Settings

    def proc(ns: SimpleNamespace) -> ProcedureResult:
        return ProcedureResult(procedure=ns.procedure, title=ns.procedure, params={}, profile="smoke", metrics=None,
                               measurements={"requests": 1, "compliance_verdict": ns.compliance.verdict.value},
                               checks=ns.checks, facts=ns.facts, compliance=ns.compliance)

    first, second = (proc(r) for r in _engine_pair())
    session = Session(Settings(profile="smoke"))
    session.results = {"a": first, "b": second}
    session.repetitions = {"a": [first, proc(_engine_pair()[0])]}
    for _ in range(2):  # once per test under --llm-compare, then at the end: the same answer
        out = session.result(complete=True)
    judged = out.results["a"]
    assert judged is not first and judged.compliance["4.3.2-MUST-1"].status is Status.MET
    assert judged.measurements == {"requests": 1, "compliance_verdict": judged.compliance.verdict.value}
    assert sum(n.startswith("session-level items") for n in judged.compliance.notes) == 1
    assert first.compliance["4.3.2-MUST-1"].status is Status.UNMET
    assert first.measurements["compliance_verdict"] == Verdict.NOT_COMPLIANT.value
    assert out.repetitions["a"][0] is judged and out.repetitions["a"][1] is session.repetitions["a"][1]
    assert session.results == {"a": first, "b": second}
