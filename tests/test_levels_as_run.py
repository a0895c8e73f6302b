"""§5.2 and §5.3 as run (issue 48 F, fidelity-audit-3 findings 4 and 5)."""

from __future__ import annotations

from pytest_llmbench.compliance import Status
from pytest_llmbench.procedures.capacity import FREE_OUTPUT
from pytest_llmbench.procedures.result import Capacity



def test_5_3_minimum_level_duration_is_judged_on_the_levels_as_run() -> None:
    """Finding 5: 5.3.2-PARAM-2 read the duration parameter, so levels a budget cut below 60 s met it."""
    from types import SimpleNamespace

    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.procedures.p5_3_tradeoff import item_checks

    p = get_procedure("5.3").make_params("standard", {})
    assert p.level_duration_s >= 60
    points = [SimpleNamespace(fraction=f / 10, queue="stable") for f in range(1, 13)]
    cap = Capacity(rate=10.0, source="5.2", request_shape=FREE_OUTPUT)

    def runs(window_s: float) -> list[object]:
        return [SimpleNamespace(load=SimpleNamespace(send_window_s=window_s, start_ns=i)) for i in range(12)]

    cut = item_checks(p, points, cap, 5, runs(30.0))["5.3.2-PARAM-2"]  # type: ignore[arg-type]
    assert cut.status is Status.UNMET and "30 s" in cut.reason and cut.figure == 30.0
    assert item_checks(p, points, cap, 5, runs(60.5))["5.3.2-PARAM-2"].holds  # type: ignore[arg-type]


def test_table_14_reduction_needs_saturated_runs() -> None:
    """Finding 10: 5.10.4-REPORT-4 was met when no configuration saturated."""
    from pytest_llmbench.procedures.p5_10_guardrails import SaturationResult, _throughput_reduction

    sat, unsat = SaturationResult(100.0, 150.0, True), SaturationResult(90.0, 90.0, False)
    assert _throughput_reduction(["none", "full"], {"none": sat, "full": sat}, True).holds
    c = _throughput_reduction(["none", "full"], {"none": sat, "full": unsat}, True)
    assert c.status is Status.UNMET and "no saturation in Full" in c.reason
    assert _throughput_reduction(["full"], {"full": sat}, True).status is Status.UNMET


def test_5_8_capacity_search_on_a_default_threshold_needs_a_declaration() -> None:
    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.procedures.p5_8_memory_pressure import SEARCHED, item_checks

    proc = get_procedure("5.8")
    for declared, status in ((None, "needs-declaration"), (2.0, "met")):
        p = proc.make_params("smoke", {"ttft_p99_threshold_s": declared})
        c = item_checks(p, 8, "search", SEARCHED, [], [1.0], "none")["5.8.3-PARAM-1"]
        assert c.status.value == status, c.reason


def test_5_10_repeats_without_a_flush_are_unmet_when_prompts_were_cached() -> None:
    """Finding 10: 5.10 sends the same prompts in every run; without a flush a cached prompt favours later
    configurations (before: a literal ok=True)."""
    from types import SimpleNamespace

    from pytest_llmbench.procedures.p5_10_guardrails import _repeated_fairly

    def runs(cached: int | None) -> dict[tuple[str, float], object]:
        rec = SimpleNamespace(ok=True, cached_tokens=cached)
        return {("none", 0.25): SimpleNamespace(records=[rec]), ("full", 0.25): SimpleNamespace(records=[rec])}

    assert _repeated_fairly(runs(50), [True, True]).holds  # type: ignore[arg-type]
    hit = _repeated_fairly(runs(50), [False, False])  # type: ignore[arg-type]
    assert hit.status is Status.UNMET and "100 prompt tokens were served from cache" in hit.reason
    assert _repeated_fairly(runs(0), [False, False]).holds  # type: ignore[arg-type]
    assert _repeated_fairly(runs(None), [False, False]).status is Status.UNMET  # type: ignore[arg-type]
