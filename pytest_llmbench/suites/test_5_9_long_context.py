"""§5.9 Long Context Scaling — run as is, or copy and adapt.

Pass ``lengths=(...)`` (and ``context_window=`` for a real endpoint) to match your model's window;
lengths that do not fit with the 256-token output are lowered to fit and noted.
"""

import pytest

from pytest_llmbench import assert_slo


@pytest.mark.llm_procedure("5.9")
def test_long_context_table(llm_result):
    """Table 12 has one row per length, ascending, and the best-fit statement (§5.9.5)."""
    table = llm_result.tables[0]
    assert table.columns == ["Context (tokens)", "TTFT Mean", "TTFT P95", "ms/1K tokens"]
    lengths = [int(row[0]) for row in table.rows]
    assert lengths == sorted(lengths) and len(lengths) >= 2
    assert table.notes[0].startswith("Best fit:")


@pytest.mark.llm_procedure("5.9")
def test_long_context_slo(llm_result):
    """Example SLOs: prefill at most quadratic-ish, and the longest context's first token within 30 s.

    The smoke profile sends 3 requests per length: too few for any bound (a mean or a success rate stays
    INCONCLUSIVE), so the SLO is the run's maximum, judged on its value (method point), which a failed
    request fails (it lies beyond the threshold)."""
    assert llm_result.measured("scaling_exponent") < 2.0
    assert_slo(llm_result, "ttft.max <= 30s")
