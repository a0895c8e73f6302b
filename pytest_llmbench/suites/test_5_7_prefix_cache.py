"""§5.7 Prefix Cache Effectiveness — run as is, or copy and adapt (README "Pointing the suites at a real endpoint").

Needs a pytest_llmbench_configure_sut hook that can switch the SUT's prefix cache (the embedded
simulator has one); without it the test is skipped. The profile (--llm-profile) sets counts.
"""

import pytest

from pytest_llmbench import assert_slo, closed

CACHE = {"workload": "code-completion", "load": closed(4)}


@pytest.mark.llm_procedure("5.7", **CACHE)
def test_prefix_cache_table(llm_result):
    """Table 10 has the three configurations of §5.7.5, the cache was really used when enabled."""
    table10 = llm_result.tables[0]
    assert table10.columns == ["Configuration", "TTFT P50", "TTFT P95", "TTFT P99"]
    assert [row[0] for row in table10.rows] == ["Cache Disabled", "Cache (Cold)", "Cache (Warm)"]
    assert llm_result.measurements["disabled_prefix_hit_rate"] in (0, None), "cache hits while the cache was disabled"
    assert llm_result.measured("warm_prefix_hit_rate") > 0.5, \
        "warm cache served less than half of the shared-prefix tokens"


@pytest.mark.llm_procedure("5.7", **CACHE)
def test_prefix_cache_pays_off(llm_result):
    """Example goal: a warm prefix cache cuts median TTFT by at least 20 % on this workload."""
    assert_slo(llm_result, "warm_cache_ttft_reduction_p50 >= 20%")
