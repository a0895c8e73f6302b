"""§5.5 Concurrent Request Capacity — run as is, or copy and adapt.

The profile (--llm-profile smoke|standard|full) sets level lengths and the search resolution; values
given in the marker win (e.g. ``ttft_p99_threshold_s=1.0``, ``max_concurrency=256``). Later tests
(5.8) reuse the capacity found here through ``ctx.get_capacity("concurrency")``.
"""

import pytest

from pytest_llmbench import assert_slo


@pytest.mark.llm_procedure("5.5")
def test_capacity_found(llm_result):
    """A capacity was found, and it meets the draft's criteria at the maximum (§5.5.4)."""
    cap = llm_result.capacity
    assert cap is not None and cap.concurrency >= 1, llm_result.notes
    table = llm_result.tables[0]
    assert table.columns == ["Concurrency", "Completion", "TTFT P99", "TPOT P99", "Errors", "Status"]
    at_max = next(row for row in table.rows if int(row[0]) == cap.concurrency)
    assert at_max[-1] == "Pass"
    assert f"Maximum concurrent requests meeting criteria: {cap.concurrency}" in table.notes


@pytest.mark.llm_procedure("5.5")
def test_capacity_slo(llm_result):
    """Example SLO for your service: it must hold at least 8 concurrent requests (and stream at that load)."""
    assert_slo(llm_result, "max_concurrency >= 8", "capacity_output_throughput > 0 tok/s")
