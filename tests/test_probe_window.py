"""Probes and drains that adapt to a slow server (issue 46 item 3): the window-lengthening rule of
``procedures/budget.py`` on hand-computed cases, and the retry loop every probe and drain runs through.

A closed-loop capacity probe (5.2, 5.6, 5.10) whose requests outlast its window, or a 5.8 level whose
requests outlast its drain, is run again with a window sized from the request durations it observed
(the median E2E of the completed requests, the cancelled ones counted as lasting at least their
elapsed time), trimmed to the time budget but never below what can measure, and noted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from factories import S, make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.procedures.budget import (
    DRAIN_FIT,
    PROBE_FIT,
    WINDOW_RETRIES,
    RequestDuration,
    lengthen_window,
    request_duration,
    retry_label,
    run_lengthening,
)


def _done(e2e_s: float, i: int = 0) -> RequestRecord:
    """A request sent at 1 s that completed ``e2e_s`` later."""
    return make_record(i, sent=1.0, ttft=0.1, n_chunks=1, end=1.0 + e2e_s, unit=S)


def _cancelled(after_s: float, i: int = 0) -> RequestRecord:
    """A request sent at 1 s and cancelled at the drain ``after_s`` later."""
    return make_record(i, sent=1.0, chunks=(), end=1.0 + after_s, unit=S, error_type=ErrorType.CANCELLED,
                       error_message="cancelled by the load generator")


def _failed(i: int = 0) -> RequestRecord:
    return make_record(i, sent=1.0, chunks=(), end=1.1, unit=S, error_type=ErrorType.HTTP_4XX, error_message="HTTP 400")


# ---- the request duration a window is sized from ----------------------------------------------------------
def test_median_e2e_of_completed_requests() -> None:
    d = request_duration([_done(4.0), _done(6.0), _done(5.0)])
    assert d == RequestDuration(5.0, lower_bound=False, completed=3, cancelled=0)
    # one cancelled at 10 s ranks above the completed ones: the median (rank 1.5 of 0..3) is 5 + 0.5 x (6 - 5)
    assert request_duration([_done(4.0), _done(5.0), _done(6.0), _cancelled(10.0)]) == \
        RequestDuration(5.5, lower_bound=False, completed=3, cancelled=1)


def test_median_among_cancelled_requests_is_a_lower_bound() -> None:
    """Two completed (4 s, 5 s), three cancelled after 32 s: the median's rank falls among the cancelled
    ones, so the requests lasted at least 32 s, no more is known."""
    d = request_duration([_done(4.0), _done(5.0), _cancelled(32.0), _cancelled(32.0), _cancelled(32.0)])
    assert d == RequestDuration(32.0, lower_bound=True, completed=2, cancelled=3)
    assert d.describe() == "requests ran over 32 s without finishing (3 cancelled, 2 completed)"


def test_no_duration_when_every_request_failed() -> None:
    """Failed requests say nothing of the window: a longer one would fail the same way."""
    assert request_duration([_failed(i) for i in range(5)]) is None
    assert request_duration([]) is None


# ---- the lengthened window --------------------------------------------------------------------------------
TOOK = RequestDuration(4.6, lower_bound=False, completed=64, cancelled=0)
RAN_OVER = RequestDuration(32.0, lower_bound=True, completed=0, cancelled=64)


def test_probe_window_holds_three_request_durations() -> None:
    lg = lengthen_window(2.0, TOOK, PROBE_FIT)
    assert lg is not None
    assert (lg.old_s, lg.new_s, lg.factor, lg.budget_s, lg.over_budget) == (2.0, pytest.approx(13.8), 3.0, None,
                                                                           False)
    assert lg.describe("5.2 capacity probe", PROBE_FIT) == (
        "5.2 capacity probe: window lengthened from 2 s to 14 s: requests took 4.6 s (E2E P50 of 64 completed), "
        "the window holds 3 x that")


def test_a_lower_bound_grows_the_window_twice_as_fast() -> None:
    assert lengthen_window(2.0, RAN_OVER, PROBE_FIT).new_s == pytest.approx(192.0)  # type: ignore[union-attr]
    assert lengthen_window(2.0, RAN_OVER, PROBE_FIT, cap_s=100.0).new_s == pytest.approx(100.0)  # type: ignore[union-attr]
    # a drain: 8 x a lower bound of 4.5 s (a 2.5 s level and its 2 s drain), 2 x an exact duration
    lower = RequestDuration(4.5, lower_bound=True, completed=0, cancelled=18)
    assert lengthen_window(2.0, lower, DRAIN_FIT, cap_s=300.0).new_s == pytest.approx(36.0)  # type: ignore[union-attr]
    exact = RequestDuration(21.0, lower_bound=False, completed=18, cancelled=30)
    assert lengthen_window(36.0, exact, DRAIN_FIT, cap_s=300.0).new_s == pytest.approx(42.0)  # type: ignore[union-attr]


def test_the_time_budget_trims_the_window_but_not_below_its_floor() -> None:
    # 20 s left: 80 % (16 s) for the probe's window holds the 13.8 s wanted
    assert lengthen_window(2.0, TOOK, PROBE_FIT, left_s=20.0).new_s == pytest.approx(13.8)  # type: ignore[union-attr]
    # 10 s left: 8 s for the window, above the floor of 1.5 x 4.6 = 6.9 s: trimmed to 8 s
    lg = lengthen_window(2.0, TOOK, PROBE_FIT, left_s=10.0)
    assert lg is not None and (lg.new_s, lg.budget_s, lg.over_budget) == (pytest.approx(8.0), pytest.approx(8.0), False)
    assert lg.describe("p", PROBE_FIT).endswith("(trimmed to the time budget)")
    # 5 s left: 4 s for the window, below the floor: the floor wins, over the budget, and the note says so
    lg = lengthen_window(2.0, TOOK, PROBE_FIT, left_s=5.0)
    assert lg is not None and (lg.new_s, lg.budget_s, lg.over_budget) == (pytest.approx(6.9), pytest.approx(4.0), True)
    assert "over the time budget, which leaves 4 s for it: a shorter window measures nothing" in lg.describe(
        "p", PROBE_FIT)
    # the budget spent already: the floor still
    assert lengthen_window(2.0, TOOK, PROBE_FIT, left_s=-3.0).new_s == pytest.approx(6.9)  # type: ignore[union-attr]


def test_no_lengthening_when_the_window_already_holds_it() -> None:
    assert lengthen_window(20.0, TOOK, PROBE_FIT) is None  # 13.8 s wanted < 20 s
    # a drain already at the request timeout: requests end by then anyway
    assert lengthen_window(300.0, RAN_OVER, DRAIN_FIT, cap_s=300.0) is None


# ---- the retry loop -------------------------------------------------------------------------------------
@dataclass
class _Ctx:
    """What run_lengthening reads and writes of a ProcedureContext."""

    left: float | None = None
    adapted: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def remaining_s(self) -> float | None:
        return self.left

    def progress(self, line: str) -> None:
        self.lines.append(line)


@dataclass
class _Run:
    window_s: float
    attempt: int
    records: list[RequestRecord]


def _server(e2e_s: float | None) -> tuple[list[tuple[float, int]], object]:
    """A stand-in SUT whose requests take ``e2e_s`` (None: every request fails); a run measures when its
    window holds ``e2e_s``."""
    calls: list[tuple[float, int]] = []

    async def run(window_s: float, attempt: int) -> _Run:
        calls.append((window_s, attempt))
        recs = [_failed(i) for i in range(4)] if e2e_s is None else [_done(e2e_s, i) for i in range(4)]
        return _Run(window_s, attempt, recs)

    return calls, run


def _measured(e2e_s: float) -> object:
    return lambda r: r.window_s > e2e_s


def test_a_probe_too_short_for_its_requests_is_run_again_longer_and_noted() -> None:
    ctx = _Ctx()
    calls, run = _server(4.6)
    result, how = asyncio.run(run_lengthening(ctx, "5.2 capacity probe", "probe-c64", 2.0, run,  # type: ignore[arg-type]
                                              _measured(4.6), PROBE_FIT))  # type: ignore[arg-type]
    assert calls == [(2.0, 0), (pytest.approx(13.8), 1)]
    assert how.enough and result.attempt == 1 and how.window_s == pytest.approx(13.8)
    assert ctx.adapted == [
        "5.2 capacity probe: window lengthened from 2 s to 14 s: requests took 4.6 s (E2E P50 of 4 completed), the "
        "window holds 3 x that; run again as probe-c64-retry1"]
    assert ctx.lines == ctx.adapted  # the progress line says it too


def test_a_window_that_suffices_runs_once_and_notes_nothing() -> None:
    ctx = _Ctx()
    calls, run = _server(0.5)
    _, how = asyncio.run(run_lengthening(ctx, "p", "probe", 2.0, run, _measured(0.5), PROBE_FIT))  # type: ignore[arg-type]
    assert calls == [(2.0, 0)] and how.enough and not how.lengthenings and ctx.adapted == []
    assert how.history(PROBE_FIT) == ""


def test_failed_requests_are_not_run_again() -> None:
    ctx = _Ctx()
    calls, run = _server(None)
    _, how = asyncio.run(run_lengthening(ctx, "p", "probe", 2.0, run, lambda r: False, PROBE_FIT))  # type: ignore[arg-type]
    assert calls == [(2.0, 0)] and not how.enough and ctx.adapted == []


def test_retries_are_bounded_and_the_history_says_what_was_tried() -> None:
    ctx = _Ctx()
    calls, run = _server(4.6)
    _, how = asyncio.run(run_lengthening(ctx, "p", "probe", 2.0, run, lambda r: False, DRAIN_FIT,  # type: ignore[arg-type]
                                         cap_s=300.0))
    # 2 s, then 2 x 4.6 = 9.2 s; 9.2 s already holds 2 x 4.6: nothing longer to try
    assert calls == [(2.0, 0), (pytest.approx(9.2), 1)] and not how.enough
    assert how.history(DRAIN_FIT) == (" (drain lengthened to 9.2 s from the requests' durations; not lengthened: "
                                      "requests took 4.6 s (E2E P50 of 4 completed), and the drain of 9.2 s already "
                                      "holds what it may)")
    ctx = _Ctx()
    grows: list[float] = []

    async def slower(window_s: float, attempt: int) -> _Run:  # each run's requests outlast its window
        grows.append(window_s)
        return _Run(window_s, attempt, [_cancelled(window_s + 1.0, i) for i in range(4)])

    _, how = asyncio.run(run_lengthening(ctx, "p", "probe", 2.0, slower, lambda r: False, PROBE_FIT))  # type: ignore[arg-type]
    assert grows == [2.0, pytest.approx(18.0), pytest.approx(114.0)]  # 6 x 3 s, then 6 x 19 s: WINDOW_RETRIES runs more
    assert len(grows) == WINDOW_RETRIES + 1 and len(ctx.adapted) == WINDOW_RETRIES
    assert how.why_not == f"still too short after {WINDOW_RETRIES} lengthenings"
    assert "window lengthened to 18 s, then 114 s" in how.history(PROBE_FIT)


def test_retry_labels() -> None:
    assert [retry_label("probe-c64", k) for k in range(3)] == ["probe-c64", "probe-c64-retry1", "probe-c64-retry2"]
