"""§5.6 Scheduling Fairness — run as is, or copy and adapt (README "Pointing the suites at a real endpoint").

Synthetic-Skewed with the short/long classes of §5.6.2 (80/20) at 80 % of this mix's saturation
throughput (a short closed-loop probe on the mix); each class is first measured alone at the same total
request rate. The profile (--llm-profile) sets counts and durations.
"""

import pytest

from pytest_llmbench import assert_slo, poisson

FAIRNESS = {"workload": "synthetic-skewed", "mix": {"short": 0.8, "long": 0.2},
            "load": poisson(capacity_fraction=0.8)}


@pytest.mark.llm_procedure("5.6", **FAIRNESS)
def test_fairness_tables(llm_result):
    """Tables 8 and 9 are complete; Jain's index over requests lies in (0, 1], over the classes in [1/n, 1]
    (§5.6.4, §5.6.5)."""
    table8, table9 = llm_result.tables[0], llm_result.tables[1]
    assert table8.columns == ["Class", "Count", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99"]
    assert [row[0] for row in table8.rows] == ["Short", "Long"]
    assert [row[0] for row in table9.rows] == ["Jain's Fairness Index", "Short Class Starvation",
                                               "Long Class Starvation", "Jain's index over the 2 classes (secondary)"]
    assert 0.0 < llm_result.measured("jain_index") <= 1.0
    assert 0.5 <= llm_result.measured("jain_index_per_class") <= 1.0


@pytest.mark.llm_procedure("5.6", **FAIRNESS)
def test_fairness_slo(llm_result):
    """Example fairness SLOs: short requests get their first token within 2 s behind long ones, and at most
    25 % of them wait more than 5x their class median. Adapt the thresholds to your service."""
    assert_slo(llm_result, "short_class_ttft_p99 <= 2s", "short_class_starvation_rate <= 25%")
