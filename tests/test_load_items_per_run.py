"""Load-generator items per run (procedures/sendlag.load_facts, compliance/s4_2_load.py): 4.2.3-MUST-2
fits each run's send gaps against that run's own rate, 4.2.5-MUST-1 judges each run's send lag
against its own mean gap and load state, 4.2.4-MUST-1 each closed-loop run's resubmissions (the
initial fill is not a resubmission); every item takes the worst run and names it.

The runs come from the real load generator on a virtual clock (``looptime``: the loop's time moves
only when every task waits on a timer), so the schedule is exact and every figure is exact.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import numpy as np
import pytest

from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.compliance import RunFacts, Status, evaluate_test
from pytest_llmbench.loadgen import load as load_mod
from pytest_llmbench.loadgen.load import ArrivalProcess, ClosedLoop, LoadOptions, OpenLoop, run_load
from pytest_llmbench.procedures.result import RunSummary
from pytest_llmbench.procedures.run import Measured
from pytest_llmbench.procedures.sendlag import arrival_fit_p, load_facts


def loop_ns() -> int:
    return round(asyncio.get_running_loop().time() * 1e9)


@pytest.fixture
def virtual_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load generator reads ``time.perf_counter_ns``; point it at the (looptime) loop clock."""
    monkeypatch.setattr(load_mod, "time", types.SimpleNamespace(perf_counter_ns=loop_ns))


class VirtualClient:
    """What the load generator uses of LLMClient. Each request takes ``service_s`` of loop time; the
    hand-off to the transport takes ``handoff_s(record)`` (0: on time)."""

    transport_name = "virtual"
    max_connections = None

    def __init__(self, service_s: float, handoff_s: Any = lambda rec: 0.0) -> None:
        self.service_s, self.handoff_s = service_s, handoff_s

    async def send(self, spec: RequestSpec, *, record: RequestRecord, intended_ns: int | None = None,
                   finalize: bool = True) -> RequestRecord:
        record.intended_ns = intended_ns
        delay = self.handoff_s(record)
        if delay:
            await asyncio.sleep(delay)
        record.queued_ns = record.sent_ns = loop_ns()
        await asyncio.sleep(self.service_s)
        record.first_chunk_ns = record.first_token_ns = record.end_ns = loop_ns()
        return record

    def finalize(self, record: RequestRecord) -> RequestRecord:
        return record


def _specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(index=i, workload="t", input_tokens=3, max_tokens=8, prompt_text="x") for i in range(n)]


async def _run(label: str, client: VirtualClient, load: OpenLoop | ClosedLoop, n: int) -> Measured:
    res = await run_load(client, _specs(n), load, LoadOptions(spin_ms=0, drain_timeout_s=30))
    await asyncio.sleep(2.0)  # the pause between levels
    return Measured(load=res, summary=RunSummary(label, "", {}, None))  # type: ignore[arg-type]


def _items(measured: list[Measured]) -> dict[str, Any]:
    res = evaluate_test("5.2", {}, RunFacts(load=load_facts(measured)))
    return {rid: res[rid] for rid in ("4.2.3-MUST-2", "4.2.4-MUST-1", "4.2.5-MUST-1")}


@pytest.mark.looptime(start=100)
async def test_two_poisson_levels_at_10_and_40_rps_meet_the_arrival_and_isolation_items(virtual_clock: None) -> None:
    """An exact scheduler at 10 and 40 req/s: each level is a Poisson process at its own rate, so
    both items are met; the levels pooled against the first rate (the old reading) fit nothing."""
    slow = await _run("level-1", VirtualClient(0.3), OpenLoop(ArrivalProcess("poisson", 10.0, seed=3)), 200)
    fast = await _run("level-2", VirtualClient(0.3), OpenLoop(ArrivalProcess("poisson", 40.0, seed=4)), 400)
    facts = load_facts([slow, fast])
    assert [(r.label, r.rate, r.send_lag_n) for r in facts.runs] == [("level-1", 10.0, 200), ("level-2", 40.0, 400)]
    assert all(r.send_lag_p99_s < 2e-6 for r in facts.runs)  # on schedule: the loop clock's ns rounding only
    assert facts.runs[1].mean_gap_s == pytest.approx(1 / 40, rel=0.15)
    items = _items([slow, fast])
    arrivals, isolation = items["4.2.3-MUST-2"], items["4.2.5-MUST-1"]
    assert arrivals.status is Status.MET and arrivals.source == "runtime-check", arrivals.reason
    assert "2 run(s) each fitted against its own rate" in arrivals.reason and arrivals.figure >= 1e-6
    assert isolation.status is Status.MET and "of 2 open-loop runs fail" in isolation.reason, isolation.reason
    # pooled, as before: every gap of both levels (and the pause between them) against 10 req/s
    pooled = [r for m in (slow, fast) for r in m.records]
    handoff = np.array([r.handoff_ns for r in pooled if r.intended_ns is not None and r.sent_ns], dtype=np.int64)
    assert arrival_fit_p(handoff, "poisson", 10.0) < 1e-6


@pytest.mark.looptime(start=100)
async def test_a_run_whose_sends_wait_on_responses_fails_isolation_and_is_named(virtual_clock: None) -> None:
    """The 40 req/s level hands each request over 5 ms late per request in flight: its send lag
    follows the load and its P99 exceeds 10 % of its 25 ms mean gap. The item is unmet and names it."""
    def waits(rec: RequestRecord) -> float:
        return 0.005 * (rec.inflight_at_send or 0)

    slow = await _run("level-1", VirtualClient(0.3), OpenLoop(ArrivalProcess("poisson", 10.0, seed=3)), 200)
    fast = await _run("level-2", VirtualClient(0.3, waits), OpenLoop(ArrivalProcess("poisson", 40.0, seed=4)), 400)
    isolation = _items([slow, fast])["4.2.5-MUST-1"]
    assert isolation.status is Status.UNMET, isolation.reason
    assert "run 'level-2' (40 req/s)" in isolation.reason and "1 of 2 open-loop runs fail" in isolation.reason
    assert "|rho(lag, in-flight count)|" in isolation.reason and isolation.figure > 0.0025


@pytest.mark.looptime(start=100)
async def test_closed_loop_resubmissions_per_run_without_the_initial_fill(virtual_clock: None) -> None:
    """Opening 8 connections costs 30 ms once, before each slot's first request: that fill is not a
    completion-to-resubmit gap. Resubmitted at once: met. A run that resubmits 20 ms late: unmet, named."""

    def first_of_slot(rec: RequestRecord) -> float:
        return 0.030 if rec.index < 8 else 0.0

    on_time = await _run("c8", VirtualClient(0.1, first_of_slot), ClosedLoop(8), 80)
    gaps_ms = sorted((r.handoff_ns - r.intended_ns) / 1e6 for r in on_time.records)
    assert gaps_ms[-8:] == pytest.approx([30.0] * 8, abs=1e-3) and gaps_ms[-9] < 1e-3
    item = _items([on_time])["4.2.4-MUST-1"]
    assert item.status is Status.MET and item.figure < 1e-6 and "over 72 resubmissions" in item.reason, item.reason
    late = await _run("c16", VirtualClient(0.1, lambda rec: 0.020 if rec.index >= 16 else 0.0), ClosedLoop(16), 160)
    item = _items([on_time, late])["4.2.4-MUST-1"]
    assert item.status is Status.UNMET and item.figure == pytest.approx(0.020), item.reason
    assert "run 'c16' (concurrency 16)" in item.reason and "worst of 2 closed-loop runs" in item.reason
