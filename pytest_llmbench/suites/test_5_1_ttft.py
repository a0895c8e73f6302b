"""§5.1 Time to First Token — run as is, or copy and adapt (README "Pointing the suites at a real endpoint").

The profile (--llm-profile smoke|standard|full) sets request counts; values given in the marker win.
"""

import pytest

from pytest_llmbench import assert_slo, poisson


@pytest.mark.llm_procedure("5.1", workload="synthetic-uniform", load=poisson(capacity_fraction=0.5))
def test_ttft_slo(llm_result):
    """Example SLOs: adapt the thresholds to your service. Each is PASS only when a 95 % bound shows it
    (docs/slo-and-compliance.md "Three verdicts"): 99 % success needs >= 299 requests with no failure,
    which the smoke profile's 300 just give; a P99 SLO would need the same 299 with no request beyond."""
    assert_slo(llm_result, "ttft.p50 <= 2s", "success_rate >= 99%")


@pytest.mark.llm_procedure("5.1", workload="synthetic-uniform", load=poisson(capacity_fraction=0.5))
def test_ttft_table_complete(llm_result):
    """The same run (cached): every percentile of Table 1 is present (§5.1.4.1)."""
    rows = {row[0] for row in llm_result.tables[0].rows}
    assert {"TTFT P50", "TTFT P90", "TTFT P95", "TTFT P99", "TTFT P99.9"} <= rows
