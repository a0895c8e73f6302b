"""What delayed a due send: every callback the event loop ran, timed, and for each open-loop send
whose schedule lag (hand-over − intended) exceeded a threshold, the callbacks that ran between its
due time and its hand-over (issue 38; figures printed by ``bench/loadgen.py --late-profile``).

Only the standard asyncio loop can be instrumented (uvloop runs its callbacks in C):
:meth:`CallbackLog.install` wraps ``asyncio.events.Handle._run`` (every ``call_soon``, timer and
I/O callback) and times the selector's ``select`` (the loop asleep in its poll, ``<poll>``); a task
step is named by its coroutine and by where it was suspended (``task _Runner._one @
ResponseReader.read_stream:212``: the step that resumed ``read_stream`` at line 212). The
instrumentation costs a few µs per callback: read the durations as relative, the names as exact.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import asyncio.tasks
import bisect
import collections
import inspect
import time
from array import array
from collections.abc import Iterable
from typing import Any

__all__ = ["CallbackLog", "late_send_table"]

_clock = time.perf_counter_ns
_TASKS = (asyncio.Task, asyncio.tasks._PyTask)  # type: ignore[attr-defined]


def _where(coro: Any) -> str:
    """The innermost coroutine a task is suspended in, as ``qualname:line`` (``start`` if not started)."""
    inner = None
    depth = 0
    while coro is not None and depth < 32:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        inner = (getattr(coro, "__qualname__", "?"), frame.f_lineno)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
        depth += 1
    if inner is None:
        return "start"
    return f"{inner[0]}:{inner[1]}"


def _name(handle: asyncio.events.Handle) -> str:
    cb = handle._callback  # type: ignore[attr-defined]
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, _TASKS):  # a task's step or wake-up (C tasks expose theirs as __self__)
        coro = owner.get_coro()
        state = "start" if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == "CORO_CREATED" \
            else _where(coro)
        return f"task {getattr(coro, '__qualname__', '?')} @ {state}"
    if owner is not None:
        what = type(owner).__qualname__
        proto = getattr(owner, "_protocol", None)
        if proto is not None:
            what += f"({type(proto).__qualname__})"
        return f"{what}.{getattr(cb, '__name__', '?')}"
    return getattr(cb, "__qualname__", None) or repr(cb)


class CallbackLog:
    """Start, end and name of every callback the loop ran (and of its polls)."""

    POLL = "<poll> (asleep in epoll)"

    def __init__(self) -> None:
        self.start = array("q")
        self.end = array("q")
        self.kind: list[int] = []
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._undo: list[Any] = []

    def _id(self, name: str) -> int:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.names)
            self.names.append(name)
        return i

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        log = self
        orig_run = asyncio.events.Handle._run

        def _run(handle: asyncio.events.Handle) -> None:
            name = _name(handle)
            t0 = _clock()
            try:
                orig_run(handle)
            finally:
                t1 = _clock()
                log.start.append(t0)
                log.end.append(t1)
                log.kind.append(log._id(name))

        asyncio.events.Handle._run = _run  # type: ignore[method-assign]
        self._undo.append(lambda: setattr(asyncio.events.Handle, "_run", orig_run))
        sel = loop._selector  # type: ignore[attr-defined]
        orig_select = sel.select
        poll = self._id(self.POLL)

        def select(timeout: float | None = None) -> Any:
            t0 = _clock()
            try:
                return orig_select(timeout)
            finally:
                log.start.append(t0)
                log.end.append(_clock())
                log.kind.append(poll)

        sel.select = select
        self._undo.append(lambda: setattr(sel, "select", orig_select))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()


def late_send_table(log: CallbackLog, sends: Iterable[tuple[int, int]], threshold_ns: int = 200_000,
                    top: int = 15) -> list[str]:
    """Lines to print: for each (intended, hand-over) with hand-over − intended > ``threshold_ns``,
    the callbacks that ran between the two (clipped to that window), tallied by name: in how many
    late sends, total and longest time inside the windows, and how often it was the longest one."""
    order = sorted(range(len(log.start)), key=log.start.__getitem__)
    starts = [log.start[i] for i in order]
    ends = [log.end[i] for i in order]
    kinds = [log.kind[i] for i in order]
    sends = list(sends)
    late = [(t, h) for t, h in sends if h - t > threshold_ns]
    seen: collections.Counter[int] = collections.Counter()
    total: collections.Counter[int] = collections.Counter()
    longest: dict[int, int] = {}
    top_of: collections.Counter[int] = collections.Counter()
    window_sum = gap_sum = 0
    for t, h in late:
        # callbacks overlapping (t, h): every one starting before h whose end is after t; callbacks
        # are short, so look back from the first start >= h over those that could still overlap
        j = bisect.bisect_left(starts, h)
        i = bisect.bisect_left(starts, t - 50_000_000)  # no callback runs 50 ms
        covered = 0
        best, best_k = -1, -1
        names_here = set()
        for k in range(i, j):
            if ends[k] <= t:
                continue
            d = min(ends[k], h) - max(starts[k], t)
            if d <= 0:
                continue
            kk = kinds[k]
            if ends[k] > h and starts[k] < h:
                kk = log._id("the send's own step (up to its hand-over)")
            covered += d
            total[kk] += d
            longest[kk] = max(longest.get(kk, 0), d)
            names_here.add(kk)
            if d > best:
                best, best_k = d, kk
        for kk in names_here:
            seen[kk] += 1
        if best_k >= 0:
            top_of[best_k] += 1
        window_sum += h - t
        gap_sum += max(0, (h - t) - covered)
    lines = [f"late sends (schedule lag > {threshold_ns / 1e6:.2f} ms): {len(late)} of {len(sends)}; "
             f"their lag adds up to {window_sum / 1e6:.1f} ms, of which {gap_sum / 1e6:.1f} ms outside any "
             "callback or poll (the loop's own bookkeeping between callbacks)"]
    if not late:
        return lines
    lines.append(f"  {'callback (qualified name; task: coroutine @ where it resumed)':<86} {'in late':>7} "
                 f"{'share':>6} {'total ms':>9} {'max ms':>7} {'longest':>7}")
    for kk, tot in total.most_common(top):
        lines.append(f"  {log.names[kk][:86]:<86} {seen[kk]:7d} {tot / window_sum:6.1%} {tot / 1e6:9.2f} "
                     f"{longest[kk] / 1e6:7.3f} {top_of[kk]:7d}")
    return lines
