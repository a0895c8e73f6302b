"""The time budget (``--llm-max-duration``) and the sizing of load levels against it (§4.2.3, §4.5).

A procedure sizes each level so that a slow SUT still gets its minimum of requests
(:func:`request_floor_s`, :func:`probe_window_s`) and, within a budget, so that the remaining time is
shared by the levels left (:func:`level_duration`, :func:`level_requests`); a measured run and the
warm-up are cut to what is left (:func:`budget_load`, :func:`warmup_cap_s`). Every cut is noted in
``ctx.budget_cuts`` (the procedure's notes), never silent.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..loadgen.load import ClosedLoop, OpenLoop
    from ..loadgen.warmup import WarmupResult
    from .base import ProcedureContext

__all__ = [
    "DRAIN_BUDGET_SHARE",
    "PROBE_MAX_S",
    "PROBE_MIN_COMPLETIONS",
    "WARMUP_BUDGET_SHARE",
    "budget_load",
    "level_duration",
    "level_requests",
    "probe_window_s",
    "request_floor_s",
    "warmup_cap_s",
]


WARMUP_BUDGET_SHARE = 1 / 3  # of the remaining time budget, at most, for the warm-up


def warmup_cap_s(ctx: ProcedureContext) -> float:
    """The warm-up's time cap: the usual bound, cut to a third of the remaining time budget."""
    cap = max(60.0, ctx.settings.timeout)
    left = ctx.remaining_s()
    if left is not None and left * WARMUP_BUDGET_SHARE < cap:
        cap = max(left * WARMUP_BUDGET_SHARE, 1.0)
        ctx.budget_cuts.append(f"warm-up capped at {cap:.0f} s by the time budget")
    return cap


DRAIN_BUDGET_SHARE = 0.2  # of the remaining time budget, at most, for a run's drain


def budget_load(ctx: ProcedureContext, load: OpenLoop | ClosedLoop, drain_timeout_s: float | None,
                *, sized: bool = False) -> tuple[OpenLoop | ClosedLoop, float | None, float | None]:
    """The load and drain cut to the remaining time budget: (load, drain, the cap applied or None).

    ``sized``: the caller already fitted the run to the budget (:func:`level_duration`,
    :func:`level_requests`, or a search level, which the level count bounds), so only the drain
    is limited; a run too short to measure anything is worse than a procedure over its budget.
    """
    left = ctx.remaining_s()
    if left is None:
        return load, drain_timeout_s, None
    default_drain = drain_timeout_s if drain_timeout_s is not None else 60.0
    if sized:
        return load, min(default_drain, max(left * DRAIN_BUDGET_SHARE, 10.0)), None
    drain = min(default_drain, max(left * DRAIN_BUDGET_SHARE, 2.0))
    cap = max(left - drain, 1.0)  # a run past the budget still measures for 1 s
    if load.duration_s is not None and load.duration_s <= cap:
        return load, drain, None
    return dataclasses.replace(load, duration_s=cap), drain, cap


def _level_share_s(ctx: ProcedureContext, levels_left: int) -> float | None:
    """The measuring time each of the ``levels_left`` load levels gets of the remaining budget."""
    left = ctx.remaining_s()
    if left is None:
        return None
    return max(left, 0.0) * (1.0 - DRAIN_BUDGET_SHARE) / max(levels_left, 1)


def request_floor_s(rate: float, duration_s: float, min_requests: int) -> float:
    """``duration_s``, or longer on a slow SUT: long enough to expect ``min_requests`` arrivals at
    ``rate`` (a level of one or two requests measures nothing)."""
    return max(duration_s, min_requests / rate) if rate > 0 else duration_s


PROBE_MIN_COMPLETIONS = 10  # a closed-loop capacity probe runs long enough to complete about this many
PROBE_MAX_S = 120.0  # ... but no longer than this


def probe_window_s(duration_s: float, warmup: WarmupResult | None) -> float:
    """A closed-loop capacity probe's length: ``duration_s``, longer when the warm-up's completion
    rate (at a lower concurrency, so a lower bound on the probe's) says fewer than
    ``PROBE_MIN_COMPLETIONS`` requests would complete; at most ``PROBE_MAX_S`` (or ``duration_s``)."""
    if warmup is None or not warmup.ok or not warmup.duration_s > 0:
        return duration_s
    rate = warmup.ok / warmup.duration_s
    return min(max(duration_s, PROBE_MIN_COMPLETIONS / rate), max(PROBE_MAX_S, duration_s))


def level_duration(ctx: ProcedureContext, label: str, rate: float, duration_s: float, *,
                   min_requests: int, levels_left: int = 1) -> float:
    """An open-loop level's length (§4.2.3): ``duration_s``, longer when a slow SUT would get fewer
    than ``min_requests`` arrivals at ``rate``; within a time budget the remaining time is shared
    by the ``levels_left`` levels, never below the ``min_requests`` floor (the cut is noted)."""
    d = request_floor_s(rate, duration_s, min_requests)
    floor = min_requests / rate if rate > 0 else duration_s  # what a budget cut keeps
    share = _level_share_s(ctx, levels_left)
    if share is not None and share < d:
        fitted = max(share, floor)
        if fitted < d:
            ctx.budget_cuts.append(f"{label}: level cut to {fitted:.0f} s by the time budget "
                                   f"(>= {min_requests} arrivals kept)")
        d = fitted
    return d


def level_requests(ctx: ProcedureContext, label: str, rate: float, requests: int, *,
                   min_requests: int, levels_left: int = 1) -> int:
    """A request-count level's size: ``requests``, capped within a time budget to what the
    level's share of the remaining time holds at ``rate`` (capacity-relative, known up front),
    never below ``min_requests`` (the cut is noted)."""
    share = _level_share_s(ctx, levels_left)
    if share is None or rate <= 0 or requests <= min_requests:
        return requests
    fits = max(int(share * rate), min_requests)
    if fits < requests:
        ctx.budget_cuts.append(f"{label}: {fits} of {requests} requests, capped from the capacity by the "
                               f"time budget")
        return fits
    return requests
