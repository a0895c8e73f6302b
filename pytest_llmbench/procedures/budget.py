"""The time budget (``--llm-max-duration``) and the sizing of load levels against it (§4.2.3, §4.5).

A procedure sizes each level so that a slow SUT still gets its minimum of requests
(:func:`request_floor_s`, :func:`probe_window_s`) and, within a budget, so that the remaining time is
shared by the levels left (:func:`level_duration`, :func:`level_requests`); a measured run and the
warm-up are cut to what is left (:func:`budget_load`, :func:`warmup_cap_s`). Every cut is noted in
``ctx.budget_cuts`` (the procedure's notes), never silent.

A capacity probe or a drain whose requests outlast it is run again, longer, sized from the request
durations it observed (:func:`run_lengthening`, :func:`lengthen_window`); each lengthening is noted
in ``ctx.adapted`` (the procedure's notes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..common.records import ErrorType, RequestRecord
from ..measure.stats import censored_percentile

if TYPE_CHECKING:  # pragma: no cover
    from ..loadgen.load import ClosedLoop, OpenLoop
    from ..loadgen.warmup import WarmupResult
    from .base import ProcedureContext

__all__ = [
    "DRAIN_BUDGET_SHARE",
    "DRAIN_FIT",
    "PROBE_FIT",
    "PROBE_MAX_S",
    "PROBE_MIN_COMPLETIONS",
    "WARMUP_BUDGET_SHARE",
    "WINDOW_RETRIES",
    "Lengthened",
    "Lengthening",
    "RequestDuration",
    "WindowFit",
    "budget_load",
    "lengthen_window",
    "level_duration",
    "level_requests",
    "probe_window_s",
    "request_duration",
    "request_floor_s",
    "run_lengthening",
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
                *, sized: bool = False, drain_sized: bool = False
                ) -> tuple[OpenLoop | ClosedLoop, float | None, float | None]:
    """The load and drain cut to the remaining time budget: (load, drain, the cap applied or None).

    ``sized``: the caller already fitted the run to the budget (:func:`level_duration`,
    :func:`level_requests`, or a search level, which the level count bounds), so only the drain
    is limited; a run too short to measure anything is worse than a procedure over its budget.
    ``drain_sized``: the caller fitted the drain (:func:`lengthen_window`), which is kept.
    """
    left = ctx.remaining_s()
    if left is None:
        return load, drain_timeout_s, None
    default_drain = drain_timeout_s if drain_timeout_s is not None else 60.0
    if sized:
        return load, default_drain if drain_sized else min(default_drain, max(left * DRAIN_BUDGET_SHARE, 10.0)), None
    drain = default_drain if drain_sized else min(default_drain, max(left * DRAIN_BUDGET_SHARE, 2.0))
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


# --------------------------------------------------------------------------- windows that adapt
@dataclass(frozen=True)
class WindowFit:
    """How long a window (a probe's send window, or a drain) must be for requests lasting ``d`` each:
    ``factor`` x d, or ``censored_factor`` x d when d is only a lower bound (no request finished);
    a time budget trims it to its ``budget_share`` of the time left, never below ``floor`` x d (a
    shorter window measures nothing: as with a search level, the budget gives way, noted)."""

    name: str  # how the notes call it: "window" | "drain"
    factor: float
    censored_factor: float
    floor: float
    budget_share: float


#: a closed-loop probe's window holds three request durations, so that two rounds of the loop complete
#: in its steady part (the first 10 % excluded), and 1.5 at least (one round); its drain is left the rest
PROBE_FIT = WindowFit("window", 3.0, 6.0, 1.5, 1.0 - DRAIN_BUDGET_SHARE)
#: a drain holds two request durations, one at least: it ends with the last request, so a long drain
#: costs nothing when the requests are fast
DRAIN_FIT = WindowFit("drain", 2.0, 8.0, 1.0, 1.0)
WINDOW_RETRIES = 2  # a window is run again at most this many times


def _fmt_s(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.2g} s"


@dataclass(frozen=True)
class RequestDuration:
    """The median E2E of a run's requests, the cancelled ones as right-censored samples (each lasted
    at least its elapsed time): ``seconds``, a lower bound when ``lower_bound`` (the median's rank
    falls among requests cancelled before they finished)."""

    seconds: float
    lower_bound: bool
    completed: int
    cancelled: int

    def describe(self) -> str:
        """``requests took 4.6 s (E2E P50 of 64)`` or ``requests ran over 32 s without finishing (64 cancelled)``."""
        if self.lower_bound:
            return (f"requests ran over {_fmt_s(self.seconds)} without finishing ({self.cancelled} cancelled, "
                    f"{self.completed} completed)")
        return f"requests took {_fmt_s(self.seconds)} (E2E P50 of {self.completed} completed)"


def request_duration(records: Sequence[RequestRecord]) -> RequestDuration | None:
    """The median request duration of ``records`` (:class:`RequestDuration`): completed requests by
    their E2E, cancelled ones at least their elapsed time; None when no request completed or was
    cancelled (they failed: a longer window would not help)."""
    done: list[float] = []
    cut: list[float] = []
    for r in records:
        if r.end_ns is None or not r.sent_ns:
            continue
        if r.ok:
            done.append((r.end_ns - r.sent_ns) / 1e9)
        elif r.error_type is ErrorType.CANCELLED:
            cut.append((r.end_ns - r.sent_ns) / 1e9)
    if not done and not cut:
        return None
    cp = censored_percentile(done, cut, 50)
    bounded = math.isfinite(cp.value)
    return RequestDuration(cp.value if bounded else cp.lower, not bounded, len(done), len(cut))


@dataclass(frozen=True)
class Lengthening:
    """A window run again longer: from ``old_s`` to ``new_s`` (``factor`` x the request ``duration``),
    ``budget_s`` the time budget's share of the time left when it trimmed the window (None: it did
    not), ``over_budget`` when the floor kept the window above that share."""

    old_s: float
    new_s: float
    duration: RequestDuration
    factor: float
    budget_s: float | None
    over_budget: bool

    def describe(self, what: str, fit: WindowFit) -> str:
        """``5.2 capacity probe: window lengthened from 2 s to 14 s: requests took 4.6 s (E2E P50 of 64
        completed), the window holds 3 x that``."""
        text = (f"{what}: {fit.name} lengthened from {_fmt_s(self.old_s)} to {_fmt_s(self.new_s)}: "
                f"{self.duration.describe()}, the {fit.name} holds {self.new_s / self.duration.seconds:.2g} x that")
        if self.over_budget:
            text += (f" (over the time budget, which leaves {_fmt_s(self.budget_s or 0.0)} for it: a shorter "
                     f"{fit.name} measures nothing)")
        elif self.budget_s is not None:
            text += " (trimmed to the time budget)"
        return text


def lengthen_window(old_s: float, duration: RequestDuration, fit: WindowFit, *, left_s: float | None = None,
                    cap_s: float | None = None) -> Lengthening | None:
    """The window for requests lasting ``duration`` (:class:`WindowFit`): ``fit.factor`` x it
    (``censored_factor`` on a lower bound), at most ``cap_s``; trimmed to ``fit.budget_share`` of
    ``left_s`` (the time budget left; None: no budget) but not below ``fit.floor`` x it. None when
    that is not longer than ``old_s`` (running it again would not help)."""
    factor = fit.censored_factor if duration.lower_bound else fit.factor
    want = factor * duration.seconds
    if cap_s is not None:
        want = min(want, cap_s)
    new, budget_s, over = want, None, False
    if left_s is not None:
        avail = max(left_s, 0.0) * fit.budget_share
        if avail < want:
            new, budget_s = max(avail, min(fit.floor * duration.seconds, want)), avail
            over = new > avail
    if not new > old_s:
        return None
    return Lengthening(old_s, new, duration, new / duration.seconds, budget_s, over)


class _HasRecords(Protocol):
    @property
    def records(self) -> Sequence[RequestRecord]: ...


R = TypeVar("R", bound=_HasRecords)


def retry_label(label: str, attempt: int) -> str:
    """The run label of ``attempt`` (0: the first run, ``label`` itself; then ``label-retry1`` ...)."""
    return f"{label}-retry{attempt}" if attempt else label


@dataclass
class Lengthened:
    """What :func:`run_lengthening` ended with: the last ``run`` and its ``window_s``, whether it
    measured (``enough``), the lengthenings before it, and why a short run was not run again."""

    run: _HasRecords
    window_s: float
    enough: bool
    lengthenings: list[Lengthening]
    why_not: str = ""

    def history(self, fit: WindowFit) -> str:
        """`` (window lengthened to 14 s, then 28 s, from the requests' durations; …)`` for an error message."""
        if not self.lengthenings and not self.why_not:
            return ""
        steps = ", then ".join(_fmt_s(lg.new_s) for lg in self.lengthenings)
        done = f"{fit.name} lengthened to {steps} from the requests' durations" if steps else ""
        return " (" + "; ".join(x for x in (done, self.why_not) if x) + ")"


async def run_lengthening(ctx: ProcedureContext, what: str, label: str, window_s: float,
                          run: Callable[[float, int], Awaitable[R]], enough: Callable[[R], bool],
                          fit: WindowFit, *, cap_s: float | None = None,
                          retries: int = WINDOW_RETRIES) -> tuple[R, Lengthened]:
    """Run ``run(window_s, attempt)`` (a probe, or a level with its drain) until ``enough`` says it
    measured; a run whose requests outlasted its window (they completed or were cancelled, and
    :func:`lengthen_window` finds a longer window) is run again with that window, up to ``retries``
    times, each lengthening noted in ``ctx.adapted`` (``what`` names the run, ``label`` its first
    run: the next are :func:`retry_label`). A run whose requests failed is not run again. The caller
    decides what a run that never measured means (an error naming :meth:`Lengthened.history`, or a
    result that says so)."""
    attempt, done = 0, []
    while True:
        result = await run(window_s, attempt)
        if enough(result):
            return result, Lengthened(result, window_s, True, done)
        if attempt >= retries:
            return result, Lengthened(result, window_s, False, done, f"still too short after {retries} lengthenings")
        duration = request_duration(result.records)
        if duration is None:  # every request failed: the window is not the cause
            return result, Lengthened(result, window_s, False, done)
        lg = lengthen_window(window_s, duration, fit, left_s=ctx.remaining_s(), cap_s=cap_s)
        if lg is None:
            why = (f"not lengthened: {duration.describe()}, and the {fit.name} of {_fmt_s(window_s)} already "
                   f"holds what it may")
            return result, Lengthened(result, window_s, False, done, why)
        attempt += 1
        note = f"{lg.describe(what, fit)}; run again as {retry_label(label, attempt)}"
        ctx.adapted.append(note)
        ctx.progress(note)
        done.append(lg)
        window_s = lg.new_s
