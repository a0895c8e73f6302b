"""§5.3 Throughput-Latency Tradeoff — run as is, or copy and adapt (README "Pointing the suites at a real endpoint").

Levels are 10%..120% of the SUT's request-rate capacity (declared with --llm-capacity, else measured by 5.2
in this session). The SLO here only selects the optimal operating point; it does not fail the test.
"""

import pytest

from pytest_llmbench import assert_slo


@pytest.mark.llm_procedure("5.3", workload="synthetic-uniform", ttft_p99_slo_s=0.5)
def test_curve_and_operating_point(llm_result):
    """Example checks a user would write on the curve: an operating point exists and serves well."""
    assert llm_result.measured("level_count") >= 10
    assert llm_result.measurements["optimal_index"] is not None, "no load level meets TTFT P99 <= 500 ms"
    assert llm_result.measured("optimal_output_tok_s") >= 0.5 * llm_result.measured("max_achieved_tok_s")
    # at the optimal operating point: a smoke level of 2 s holds about 100 requests, enough to show 95 %
    # success (>= 59 with no failure), not 99 % (>= 299)
    assert_slo(llm_result, "success_rate >= 95%")


@pytest.mark.llm_procedure("5.3", workload="synthetic-uniform", ttft_p99_slo_s=0.5)
def test_table5_shape(llm_result):
    """The same run (cached): Table 5 has the draft's columns, one row per level, knee/saturation lines."""
    t5 = llm_result.tables[0]
    assert t5.columns == ["Offered (r/s)", "Achieved (tok/s)", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99",
                          "Success"]
    assert len(t5.rows) == llm_result.measured("level_count")
    assert any(n.startswith("Knee point:") for n in t5.notes)
    assert any(n.startswith("Saturation point:") for n in t5.notes)
