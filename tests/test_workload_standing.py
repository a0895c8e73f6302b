"""One reading of "workload X": the workload's standing as run (issue 48 D, fidelity-audit-3 finding 2).

Before, 5.7.2-, 5.8.2- and 5.10.2-SHOULD-1 were met by synthetic stand-ins and custom variants (5.8
on a parameter's name) while 4.3.2-SHOULD-1 and 5.9.2-MUST-1 rejected the same cases.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmbench.compliance import RunFacts, Status, evaluate_test
from pytest_llmbench.compliance.facts import workload_standing
from pytest_llmbench.compliance.session import rejudge_session

STANDIN = {"name": "conversation (custom: synthetic stand-in for the conversation dataset)", "custom": True,
           "standard": False, "base": "conversation", "synthetic_standin": True,
           "altered_by": ["synthetic stand-in for the conversation dataset"]}
CAPPED = {"name": "synthetic-uniform (custom: output capped at 64 tokens)", "custom": True, "standard": False,
          "base": "synthetic-uniform", "altered_by": ["output capped at 64 tokens"]}
FORCED = {"name": "synthetic-uniform", "custom": True, "standard": False}  # 5.5's forced output: same name
STANDARD = {"name": "synthetic-uniform", "standard": True}


@pytest.mark.parametrize("w, standing", [(STANDIN, "stand-in"), (CAPPED, "custom"), (FORCED, "custom"),
                                         (STANDARD, "standard"), ({"name": "my-file"}, "custom"), ({}, None)])
def test_standing(w: dict[str, Any], standing: str | None) -> None:
    assert workload_standing(w) == standing


@pytest.mark.parametrize("test_id, rid, workload", [
    ("5.10", "5.10.2-SHOULD-1", STANDIN),
    ("5.7", "5.7.2-SHOULD-1", {**STANDIN, "name": "code-completion (custom: stand-in)", "base": "code-completion"}),
    ("5.8", "5.8.2-SHOULD-1", {"name": "long-context (custom: output capped at 16 tokens)", "custom": True,
                               "base": "long-context", "altered_by": ["output capped at 16 tokens"]}),
    ("5.5", "5.5.2-SHOULD-1", FORCED),
    ("5.4", "5.4.2-SHOULD-1", CAPPED),
])
def test_a_recommended_workload_is_not_met_by_a_variant(test_id: str, rid: str, workload: dict[str, Any]) -> None:
    c = evaluate_test(test_id, {}, RunFacts(workload=workload))[rid]
    assert c.status is Status.UNMET and "standing" in c.reason, c.reason
    assert c.evidence["standing"] in ("custom", "stand-in")


def test_the_standard_workload_meets_it() -> None:
    c = evaluate_test("5.5", {}, RunFacts(workload=STANDARD))["5.5.2-SHOULD-1"]
    assert c.status is Status.MET and c.evidence["standing"] == "standard"


def test_a_capped_synthetic_uniform_run_does_not_count_for_4_3_2_must_1() -> None:
    """The old rule met 4.3.2-MUST-1 on the run's own base name even when the run was custom."""
    facts = RunFacts(sut_boundary="model-engine", workload=CAPPED)
    c = evaluate_test("5.1", {}, facts)["4.3.2-MUST-1"]
    assert c.status is Status.UNMET
    assert evaluate_test("5.1", {}, RunFacts(sut_boundary="model-engine", workload=STANDARD))["4.3.2-MUST-1"].holds


class _R:
    def __init__(self, procedure: str, workload: dict[str, Any]) -> None:
        self.procedure = procedure
        self.facts = RunFacts(sut_boundary="model-engine", workload=workload)
        self.checks: dict[str, Any] = {}
        self.compliance = evaluate_test(procedure, {}, self.facts)


def test_the_session_counts_only_standard_runs() -> None:
    """A forced-output run keeps the name synthetic-uniform but is custom: it is not the session's Synthetic-Uniform."""
    judged = rejudge_session({"a": _R("5.5", FORCED), "b": _R("5.7", STANDIN)})
    assert judged["b"].facts.session_workloads == ()
    assert judged["b"].compliance["4.3.2-MUST-1"].status is Status.UNMET
    judged = rejudge_session({"a": _R("5.1", STANDARD), "b": _R("5.7", STANDIN)})
    assert judged["b"].compliance["4.3.2-MUST-1"].holds
