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


# ---- the definition rows (App. A, §4.3.2) that read "no evaluator" before (issue 48 B, finding 7)

SU_AS_DEFINED = {"name": "synthetic-uniform", "standard": True, "temperature": 0.0,
                 "input_length": {"type": "uniform", "params": {"min": 128, "max": 512}},
                 "output_length": {"type": "uniform", "params": {"min": 64, "max": 256}},
                 "content": {"system_prompt": False}, "prefix_sharing": {"fraction": 0.0},
                 "params": {"id_pool": "round-trip"}}
SU_CAPPED = {**SU_AS_DEFINED, **CAPPED, "output_length": {"type": "empirical (as sent)",
                                                          "params": {"min": 64, "max": 64, "mean": 64.0}}}


def test_synthetic_uniform_rows_as_defined_and_capped() -> None:
    ok = evaluate_test("5.2", {}, RunFacts(workload=SU_AS_DEFINED))
    assert ok["4.3.2-PARAM-2"].holds and ok["A.1.1-PARAM-1"].holds and ok["A.1.2-PARAM-1"].holds
    assert ok["A.1.3-PARAM-1"].holds
    a14 = ok["A.1.4-PARAM-1"]
    assert a14.status is Status.UNMET and a14.reason.split(": ", 1)[1].startswith("not implemented as written")
    capped = evaluate_test("5.2", {}, RunFacts(workload=SU_CAPPED))
    assert capped["A.1.1-PARAM-1"].holds  # the input is as defined
    assert capped["A.1.2-PARAM-1"].status is Status.UNMET and "mean 64" in capped["A.1.2-PARAM-1"].reason
    assert capped["A.1.2-PARAM-1"].source == "measured"
    assert capped["4.3.2-PARAM-2"].status is Status.UNMET  # a constant 64 is no Uniform(64, 256)


def test_a_stand_in_reads_not_implemented_and_other_workloads_do_not_apply() -> None:
    res = evaluate_test("5.10", {}, RunFacts(workload=STANDIN))
    assert "not implemented: the ShareGPT vicuna_cleaned dataset is not shipped" in res["A.3.1-PARAM-1"].reason
    assert res["A.3.1-PARAM-1"].status is Status.UNMET
    res = evaluate_test("5.1", {}, RunFacts(workload=STANDIN))
    assert all(res[r].status is Status.NOT_APPLICABLE for r in ("A.1.1-PARAM-1", "4.3.2-PARAM-2"))


def test_app_c_rows_are_decided() -> None:
    from pytest_llmbench.compliance import RecordAudit

    decl = {"model": {"name": "m", "version": "1"}, "hardware": {"accelerator": "H100", "count": 8},
            "guardrails": {"input_filter": "on", "output_filter": "on"}}
    facts = RunFacts(sut_boundary="model-engine", workload=STANDARD, records=RecordAudit(n=5, n_ok=5))
    res = evaluate_test("5.1", {}, facts, decl)
    assert res["C.1-REPORT-1"].status is Status.NEEDS_DECLARATION and "engine" in res["C.1-REPORT-1"].reason
    res = evaluate_test("5.1", {}, facts, {**decl, "engine": {"name": "vllm", "version": "0.6"}})
    assert res["C.1-REPORT-1"].holds and res["C.1-REPORT-4"].holds
    assert res["C.1-REPORT-3"].status is Status.UNMET and "no 5.2" in res["C.1-REPORT-3"].reason
    assert res["C.2-REPORT-1"].source == "construction"
    assert res["B.1.3-PARAM-1"].status is Status.NOT_APPLICABLE
