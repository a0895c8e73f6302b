"""§5.10 Guardrail Overhead — run as is, or copy and adapt (README "Pointing the suites at a real endpoint").

Needs a pytest_llmbench_configure_sut hook that can switch the SUT's guardrails (the embedded
simulator has one); without it the test is skipped. Loads are fractions of the request-rate
capacity (declared with --llm-capacity rate=R, or measured by 5.2 in the session).
"""

import pytest

from pytest_llmbench import assert_slo

GUARDRAILS = {"workload": "conversation", "configurations": ("none", "input", "output", "full")}


@pytest.mark.llm_procedure("5.10", **GUARDRAILS)
def test_guardrail_tables(llm_result):
    """Tables 13 and 14 list every configuration (§5.10.5); refusals are counted, not hidden (§4.8.1)."""
    table13, table14 = llm_result.tables[0], llm_result.tables[1]
    assert table13.columns == ["Configuration", "TTFT P50", "TTFT P99", "E2E P50", "E2E P99"]
    assert table14.columns == ["Configuration", "Max Throughput", "Reduction"]
    names = ["Baseline", "Input Filter", "Output Filter", "Full Filter"]
    assert [row[0] for row in table13.rows] == names
    assert [row[0] for row in table14.rows] == names
    assert llm_result.measured("baseline_refusals") == 0


@pytest.mark.llm_procedure("5.10", **GUARDRAILS)
def test_guardrail_budget(llm_result):
    """Example budget: full guardrails add at most 250 ms to median E2E (at the report level) and cost at
    most 30 % of the Baseline's maximum throughput."""
    assert_slo(llm_result, "guardrail_e2e_overhead_p50 <= 250ms", "guardrail_throughput_loss <= 30%")
