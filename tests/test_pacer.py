"""Open-loop pacers (loadgen/pacer.py): each returns at its due time, never before, in order.

The loop-timer pacers run on a virtual clock (``looptime``), where a timer fires exactly when
asked, so a pacer that waits correctly returns exactly at each due time. The timerfd pacer reads
a kernel timer on the real clock: it is checked for order and for never returning early (the
kernel never fires an absolute timer before its time), with no figure asserted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
import types

import numpy as np
import pytest

from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.loadgen import load as load_mod
from pytest_llmbench.loadgen.load import ArrivalProcess, LoadOptions, OpenLoop, run_load
from pytest_llmbench.loadgen.pacer import (
    SleepPacer,
    SpinPacer,
    TimerfdPacer,
    make_pacer,
    timerfd_available,
)


class Client:
    """Answers every request after ``service_s`` of the (virtual) loop clock."""

    transport_name = "virtual"
    max_connections = None

    def __init__(self, service_s: float) -> None:
        self.service_s = service_s

    async def send(self, spec: RequestSpec, *, record: RequestRecord, intended_ns: int, **_: object) -> RequestRecord:
        record.intended_ns = intended_ns
        record.queued_ns = record.sent_ns = loop_ns()
        if self.service_s:
            await asyncio.sleep(self.service_s)
        record.first_chunk_ns = record.first_token_ns = record.end_ns = loop_ns()
        return record

    def finalize(self, record: RequestRecord) -> RequestRecord:
        return record


def loop_ns() -> int:
    return round(asyncio.get_running_loop().time() * 1e9)


def due_times(start: int, n: int = 200, rate: float = 1000.0) -> list[int]:
    return [start + int(o) for o in ArrivalProcess("poisson", rate, seed=3).schedule_ns(n)]


async def pace(pacer, dues: list[int], clock) -> list[int]:
    woke = []
    for due in dues:
        await pacer.wait_until(due)
        woke.append(clock())
    return woke


@pytest.mark.looptime
@pytest.mark.parametrize("make", [lambda: SleepPacer(loop_ns), lambda: SpinPacer(0, loop_ns)], ids=["sleep", "timer"])
async def test_loop_timer_pacers_wake_exactly_at_each_due_time_virtual_clock(make) -> None:
    pacer = make()
    dues = due_times(loop_ns() + 1_000_000)
    woke = await pace(pacer, dues, loop_ns)
    # a virtual timer is exact: a correct pacer is neither early nor late (the loop clock ticks in µs)
    lateness = np.array(woke) - np.array(dues)
    assert lateness.min() >= 0 and lateness.max() < 2000  # a timer is rounded to the next tick
    pacer.close()


@pytest.mark.looptime
@pytest.mark.parametrize("make", [lambda: SleepPacer(loop_ns), lambda: SpinPacer(0, loop_ns)], ids=["sleep", "timer"])
async def test_call_at_runs_the_callback_at_the_due_time_and_cancel_drops_it_virtual_clock(make) -> None:
    pacer = make()
    dues = due_times(loop_ns() + 1_000_000, n=50)
    called: list[int] = []
    finished = asyncio.get_running_loop().create_future()

    def fire() -> None:  # as the dispatcher does: from the callback, arm the next one
        called.append(loop_ns())
        if len(called) < len(dues):
            pacer.call_at(dues[len(called)], fire)
        else:
            finished.set_result(None)

    pacer.call_at(dues[0], fire)
    await finished
    lateness = np.array(called) - np.array(dues)
    assert lateness.min() >= 0 and lateness.max() < 2000
    pacer.call_at(loop_ns() + 1_000_000, lambda: called.append(-1))
    pacer.cancel()
    await asyncio.sleep(0.01)
    assert -1 not in called


@pytest.mark.looptime
async def test_sleep_pacer_learns_the_timer_error_and_sleeps_that_much_short_virtual_clock() -> None:
    """A timer that fires 300 µs late: the pacer learns it and from then on sleeps to 300 µs before
    the due time and yields the rest, so it still returns at the due time, not 300 µs after."""
    late_ns = 300_000
    pacer = SleepPacer(loop_ns, initial_ns=50_000, floor_ns=10_000)
    real_sleep = asyncio.sleep

    async def late_sleep(delay: float) -> None:  # late by 300 µs, except the virtual clock's sub-tick remainders
        await real_sleep(delay + late_ns / 1e9 if delay > 10e-6 else delay)

    from pytest_llmbench.loadgen import pacer as pacer_mod
    saved = pacer_mod.asyncio
    pacer_mod.asyncio = types.SimpleNamespace(sleep=late_sleep)
    try:
        start = loop_ns() + 5_000_000
        dues = [start + int(o) for o in ArrivalProcess("uniform", 200.0).schedule_ns(60)]  # gaps > the error
        woke = await pace(pacer, dues, loop_ns)
    finally:
        pacer_mod.asyncio = saved
    assert late_ns <= pacer.error_ns < late_ns + 2000  # learned (to the clock tick)
    lateness = np.array(woke) - np.array(dues)
    assert lateness.min() >= 0  # never early
    assert lateness[16:].max() < 2000  # once learned: on time (the first wake-ups were late by the error)


def test_sleep_pacer_error_estimate_is_a_high_quantile_of_recent_wakeups() -> None:
    pacer = SleepPacer(lambda: 0, initial_ns=1_000_000, floor_ns=50_000, window=64, quantile=0.9)
    for late in [100_000] * 56 + [900_000] * 8:
        pacer._learn(late)
    assert pacer.error_ns == 900_000  # 8 of 64 above 100 µs: the 0.9 quantile is the high group
    for late in [10_000] * 64:
        pacer._learn(late)
    assert pacer.error_ns == 50_000  # never below the floor


@pytest.mark.looptime
async def test_run_load_with_the_sleep_pacer_sends_on_schedule_virtual_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_mod, "time", types.SimpleNamespace(perf_counter_ns=loop_ns))

    specs = itertools.cycle([RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=1, prompt_text="x")])
    res = await run_load(Client(0.004), specs, OpenLoop(ArrivalProcess("poisson", 500.0, seed=2), max_requests=300),
                         LoadOptions(pacer="auto"))
    assert res.pacer == "sleep"  # a virtual clock has no kernel timer: auto falls back
    # the virtual clock starts at 0, so the first send reads sent_ns = 0 ("never sent") and has no lag
    assert res.ok == 300 and res.schedule_lag.n == 299 and res.submit_lag is not None and res.submit_lag.n == 299
    assert res.schedule_lag.max_ms is not None and res.schedule_lag.max_ms < 2e-3  # the loop clock's µs ticks only
    doc = res.to_json()
    assert doc["schedule_lag"] == doc["send_lag"] and doc["submit_lag"]["n"] == 299 and doc["pacer"] == "sleep"


def test_make_pacer_auto_and_names() -> None:
    with pytest.raises(ValueError, match="pacer must be one of"):
        make_pacer("busy")
    assert make_pacer("spin", spin_ms=1.5).name == "spin"
    assert make_pacer("spin", spin_ms=0).name == "timer"
    assert make_pacer("auto", clock=lambda: 0).name == "sleep"  # not the real clock: no kernel timer
    with pytest.raises(ValueError, match="perf_counter_ns"):
        make_pacer("timerfd", clock=lambda: 0)


needs_timerfd = pytest.mark.skipif(timerfd_available() is not None, reason=str(timerfd_available()))


@needs_timerfd
async def test_timerfd_pacer_never_wakes_before_due_and_keeps_order() -> None:
    auto = make_pacer("auto")
    assert auto.name == "timerfd"
    auto.close()
    pacer = TimerfdPacer()
    try:
        clock = time.perf_counter_ns
        dues = due_times(clock() + 2_000_000, n=60, rate=2000.0)
        woke = await pace(pacer, dues, clock)
        assert all(w >= d for w, d in zip(woke, dues))  # an absolute kernel timer never fires early
        assert woke == sorted(woke)
        past = clock() - 1_000_000
        await pacer.wait_until(past)  # already due: returns at once, no timer armed
        # a cancelled wait disarms the timer: the next wait still returns at its own time
        task = asyncio.ensure_future(pacer.wait_until(clock() + 50_000_000))
        await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        due = clock() + 1_000_000
        await pacer.wait_until(due)
        assert clock() >= due
        # call_at: the callback runs from the loop's poll, at or after its due time; cancel drops it
        fired: list[tuple[int, int]] = []
        done = asyncio.get_running_loop().create_future()
        dues = due_times(clock() + 2_000_000, n=30, rate=2000.0)

        def fire() -> None:
            fired.append((dues[len(fired)], clock()))
            if len(fired) < len(dues):
                pacer.call_at(dues[len(fired)], fire)
            else:
                done.set_result(None)

        pacer.call_at(dues[0], fire)
        await done
        assert [d for d, _ in fired] == dues and all(w >= d for d, w in fired)
        pacer.call_at(clock() + 1_000_000, lambda: fired.append((0, 0)))
        pacer.cancel()
        await asyncio.sleep(0.005)
        assert len(fired) == len(dues)
    finally:
        pacer.close()
    pacer.close()  # idempotent


@dataclasses.dataclass(frozen=True)
class FiniteSchedule(ArrivalProcess):
    """A schedule that ends (as a shard's share of the global one does, shards/core.py)."""

    def offsets_ns(self):  # type: ignore[override]
        yield from (0, 2_000_000, 4_000_000, 9_000_000, 10_000_000)


@pytest.mark.looptime
async def test_a_finite_schedule_ends_the_open_loop_when_it_runs_out_virtual_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_mod, "time", types.SimpleNamespace(perf_counter_ns=loop_ns))

    specs = [RequestSpec(index=i, workload="w", input_tokens=1, max_tokens=1, prompt_text="x") for i in range(10)]
    res = await asyncio.wait_for(run_load(Client(0.0), specs, OpenLoop(FiniteSchedule("uniform", 1.0))), timeout=5)
    assert res.sent == 5 == res.ok
    assert sorted(r.intended_ns - res.start_ns for r in res.records) == [0, 2_000_000, 4_000_000, 9_000_000, 10_000_000]
