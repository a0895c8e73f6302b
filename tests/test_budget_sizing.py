"""Sizing load levels to a time budget on a slow SUT (issue: smoke profile against llama-server).

Pure logic on a stand-in context: level lengths grow on a slow SUT so that each level expects a
minimum number of requests, a budget is shared by the levels left but never cuts below that
floor, and the 5.2 capacity probe is lengthened from the warm-up's completion rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_llmbench.loadgen.load import ClosedLoop
from pytest_llmbench.loadgen.warmup import WarmupPolicy, WarmupResult
from pytest_llmbench.procedures.budget import (
    PROBE_MAX_S,
    PROBE_MIN_COMPLETIONS,
    budget_load,
    level_duration,
    level_requests,
    probe_window_s,
)
from pytest_llmbench.procedures.p5_2_throughput import ThroughputParams, level_window_s


@dataclass
class _Ctx:
    """The two members of ProcedureContext that budget sizing reads."""

    left: float | None
    budget_cuts: list[str] = field(default_factory=list)

    def remaining_s(self) -> float | None:
        return self.left


def test_level_duration_without_budget_grows_to_the_request_floor() -> None:
    ctx = _Ctx(left=None)
    assert level_duration(ctx, "L0", rate=100.0, duration_s=2.0, min_requests=6) == 2.0  # fast SUT: as asked
    assert level_duration(ctx, "L0", rate=0.1, duration_s=2.0, min_requests=6) == pytest.approx(60.0)  # slow SUT
    assert ctx.budget_cuts == []


def test_level_duration_shares_the_budget_but_keeps_the_floor() -> None:
    ctx = _Ctx(left=100.0)
    # 80 s of measuring time (20 % kept for drains) over 4 levels: 20 s each
    assert level_duration(ctx, "L0", rate=10.0, duration_s=60.0, min_requests=6, levels_left=4) == pytest.approx(20.0)
    assert ctx.budget_cuts and "L0" in ctx.budget_cuts[0]
    # a slow level keeps its floor of 6 arrivals (60 s) although its share is 20 s
    assert level_duration(ctx, "L1", rate=0.1, duration_s=2.0, min_requests=6, levels_left=4) == pytest.approx(60.0)
    # budget spent: the floor still holds
    assert level_duration(_Ctx(left=-5.0), "L2", rate=1.0, duration_s=30.0, min_requests=6) == pytest.approx(6.0)


def test_level_requests_capped_from_capacity_within_budget() -> None:
    assert level_requests(_Ctx(left=None), "L0", rate=0.5, requests=100, min_requests=5) == 100
    ctx = _Ctx(left=50.0)  # 40 s measuring time over 2 levels: 20 s at 0.5 req/s = 10 requests
    assert level_requests(ctx, "L0", rate=0.5, requests=100, min_requests=5, levels_left=2) == 10
    assert "10 of 100 requests" in ctx.budget_cuts[0]
    assert level_requests(_Ctx(left=1.0), "L0", rate=0.5, requests=100, min_requests=5) == 5  # floor
    assert level_requests(_Ctx(left=1000.0), "L0", rate=50.0, requests=100, min_requests=5) == 100  # fits


def test_sized_runs_are_not_cut_by_the_budget_only_their_drain() -> None:
    load = ClosedLoop(4, duration_s=300.0)
    cut, drain, cap = budget_load(_Ctx(left=10.0), load, 60.0)
    assert cut.duration_s == pytest.approx(8.0) and cap == pytest.approx(8.0)  # ordinary run: cut
    kept, drain, cap = budget_load(_Ctx(left=10.0), load, 60.0, sized=True)
    assert kept.duration_s == 300.0 and cap is None and drain == pytest.approx(10.0)


def _warmup(ok: int, duration_s: float) -> WarmupResult:
    return WarmupResult(policy=WarmupPolicy(), requests=ok, ok=ok, duration_s=duration_s)


def test_probe_window_from_the_warmup_completion_rate() -> None:
    assert probe_window_s(2.0, None) == 2.0
    assert probe_window_s(2.0, _warmup(400, 4.0)) == 2.0  # fast SUT: 100 req/s completes plenty in 2 s
    slow = probe_window_s(2.0, _warmup(20, 40.0))  # 0.5 req/s
    assert slow == pytest.approx(PROBE_MIN_COMPLETIONS / 0.5)
    assert probe_window_s(2.0, _warmup(1, 1000.0)) == PROBE_MAX_S  # bounded


def test_search_level_window_expects_min_requests() -> None:
    p = ThroughputParams(level_duration_s=3.0, min_level_requests=12)
    assert level_window_s(80.0, p) == 3.0
    assert level_window_s(0.4, p) == pytest.approx(30.0)
    with pytest.raises(ValueError, match="min_level_requests"):
        ThroughputParams(min_level_requests=0).validate()



async def test_capacity_lookup_does_not_spend_the_dependent_procedures_budget() -> None:
    """A 5.2 search run for 5.10's capacity has its own budget: 5.10's deadline moves by its length."""
    import asyncio
    import types

    from pytest_llmbench.procedures.result import Capacity
    from pytest_llmbench.session import Session

    class _Owner:
        async def get_capacity(self, kind: str) -> Capacity:
            await asyncio.sleep(0.05)
            return Capacity(rate=1.0)

    ctx = types.SimpleNamespace(deadline=1000.0)
    get = Session._capacity_outside_budget(_Owner(), ctx)  # type: ignore[arg-type]
    cap = await get("rate")
    assert cap.rate == 1.0 and ctx.deadline >= 1000.05  # one-sided: a slow host only moves it further
    no_budget = types.SimpleNamespace(deadline=None)
    await Session._capacity_outside_budget(_Owner(), no_budget)("rate")  # type: ignore[arg-type]
    assert no_budget.deadline is None


def test_fairness_runs_fit_the_budget_on_a_slow_sut() -> None:
    """5.6 smoke on a SUT of 0.2 req/s: 150 mixed requests (30 long at 20 %) would take 25 min for the
    isolated and mixed runs; a 60 s budget caps the mixed run to what half of it holds, never below 10."""
    from types import SimpleNamespace

    from pytest_llmbench.common.seeds import Seeds
    from pytest_llmbench.common.tokenizer import get_tokenizer
    from pytest_llmbench.procedures.p5_6_fairness import MIN_BUDGET_REQUESTS, Fairness, FairnessParams

    p = FairnessParams(requests_per_class=30, max_output_tokens=96)
    for left, rate, expect in ((60.0, 0.2, MIN_BUDGET_REQUESTS), (600.0, 0.2, 48), (None, 0.2, 150)):
        run = object.__new__(Fairness)
        run.p, run.rate = p, rate
        run.ctx = SimpleNamespace(remaining_s=lambda left=left: left, budget_cuts=[], tokenizer=get_tokenizer())
        run.seeds = Seeds(42, "5.6")
        run.classes, run.shares = ["short", "long"], {"short": 0.8, "long": 0.2}
        run._build()
        assert len(run.specs) == expect, (left, len(run.specs))
        assert bool(run.ctx.budget_cuts) == (expect < 150)
