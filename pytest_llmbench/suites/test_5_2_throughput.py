"""§5.2 Output Token Throughput — run as is, or copy and adapt (README "Pointing the suites at a real endpoint").

The profile (--llm-profile smoke|standard|full) sets the level duration and search tolerance; values given
in the marker win. With the default parameters this is the same run the plugin uses as the SUT's
request-rate capacity for 5.3, 5.4, 5.6 and 5.10 (one run per session).
"""

import pytest

from pytest_llmbench import assert_slo


@pytest.mark.llm_procedure("5.2", workload="synthetic-uniform")
def test_max_sustainable_throughput(llm_result):
    """Example SLOs at the maximum sustainable load: adapt the thresholds to your service."""
    assert llm_result.capacity is not None and llm_result.capacity.rate > 0, llm_result.notes
    assert llm_result.measured("max_output_throughput_tok_s") >= 100  # tok/s
    # the level's requests (about 100-200 in the smoke profile's 3 s) can show 95 % success at 95 % confidence
    # (>= 59 requests with no failure); 99 % needs >= 299 and would stay INCONCLUSIVE
    assert_slo(llm_result, "success_rate >= 95%", "ttft.p50 <= 2s")


@pytest.mark.llm_procedure("5.2", workload="synthetic-uniform")
def test_throughput_tables_complete(llm_result):
    """The same run (cached): Table 3 and Table 4 carry every row of §5.2.5."""
    tables = {t.title: t for t in llm_result.tables}
    summary = {row[0] for row in tables["Table 3: Throughput Summary"].rows}
    assert {"Max Output Throughput", "Max Request Throughput", "Max Input Throughput", "Sustainable Load",
            "Tokens per GPU-second"} <= summary
    latency = tables["Table 4: Latency at Maximum Throughput"]
    assert latency.columns == ["Metric", "P50", "P95", "P99"]
    assert [row[0] for row in latency.rows] == ["TTFT", "TPOT", "End-to-End"]
