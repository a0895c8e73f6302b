"""Open-loop pacing: wake the dispatcher at each scheduled send time (§4.2.3, §4.2.5).

An open loop sends every request at its absolute scheduled time, so the dispatcher must wake
at that time, not "about then". Event-loop timers are millisecond-grained (uvloop rounds every
delay to whole ms; the selector's epoll timeout is in ms), so three pacers exist:

* :class:`TimerfdPacer` (Linux): a kernel ``timerfd`` armed at the absolute due time on
  ``CLOCK_MONOTONIC`` (the clock of ``time.perf_counter_ns``) and registered with the loop
  through ``add_reader``. The loop sleeps in its poll until the kernel timer fires: no CPU between
  sends, microsecond precision, never early. One ``timerfd_settime`` and one ``read`` per send.
* :class:`SleepPacer` (anywhere): sleep on a loop timer to the due time minus the measured
  wake-up error (the timer's own lateness, learned from its last wake-ups), then yield to the
  loop for the rest. It spins only for the timer's real error, not a fixed window.
* :class:`SpinPacer`: the previous behaviour, a timer to ``spin_ns`` before the send then
  yielding to the loop until due (``spin_ns = 0``: the timer alone).

:func:`make_pacer` picks ``"auto"``: the timerfd where the platform, the loop and the clock allow
it, else the sleep pacer. Every pacer returns no earlier than the due time on its clock, so the
schedule lag (hand-over − intended) is never negative.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import os
import sys
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["PACERS", "Pacer", "SleepPacer", "SpinPacer", "TimerfdPacer", "make_pacer", "timerfd_available"]

PACERS = ("auto", "timerfd", "sleep", "spin")

_perf_ns = time.perf_counter_ns  # the real clock, bound once (tests point the runner's at a virtual one)


class Pacer(Protocol):
    """Waits until a due time (``perf_counter_ns`` scale) and never returns before it.

    ``call_at`` runs a callback at the due time instead (one pending at a time; ``cancel`` drops
    it): the open-loop dispatcher uses it so that a request task is created as the timer fires,
    not one loop turn later in a task woken by it.
    """

    name: str

    async def wait_until(self, due_ns: int) -> None: ...

    def call_at(self, due_ns: int, callback: Callable[[], None]) -> None: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


class _CallAtByTask:
    """``call_at`` for the loop-timer pacers: a task waits, then calls."""

    _pending: asyncio.Future[None] | None = None

    async def wait_until(self, due_ns: int) -> None:
        raise NotImplementedError

    def call_at(self, due_ns: int, callback: Callable[[], None]) -> None:
        async def wait_then_call() -> None:
            await self.wait_until(due_ns)
            self._pending = None
            callback()

        self._pending = asyncio.ensure_future(wait_then_call())

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None


class SpinPacer(_CallAtByTask):
    """A loop timer to ``spin_ns`` before the due time, then yield to the loop until due."""

    def __init__(self, spin_ns: int, clock: Callable[[], int] = _perf_ns) -> None:
        self.name = "spin" if spin_ns > 0 else "timer"
        self.spin_ns = spin_ns
        self.clock = clock

    async def wait_until(self, due_ns: int) -> None:
        clock, spin, sleep = self.clock, self.spin_ns, asyncio.sleep
        while True:
            wait = due_ns - clock()
            if wait <= 0:
                return
            await sleep((wait - spin) / 1e9 if wait > spin else 0)

    def close(self) -> None:
        pass


class SleepPacer(_CallAtByTask):
    """Sleep to the due time minus the measured wake-up error, then yield to the loop until due.

    The error is a high quantile (``quantile``) of how late the loop's timer woke over the last
    ``window`` sleeps, at least ``floor_ns``: the yield phase lasts about as long as the timer is
    wrong, not a fixed window. The estimate starts at ``initial_ns``.
    """

    def __init__(self, clock: Callable[[], int] = _perf_ns, *, initial_ns: int = 1_500_000, floor_ns: int = 50_000,
                 window: int = 64, quantile: float = 0.9) -> None:
        self.name = "sleep"
        self.clock = clock
        self.error_ns = initial_ns
        self.floor_ns = floor_ns
        self.quantile = quantile
        self._late: collections.deque[int] = collections.deque(maxlen=window)
        self._since = 0

    def _learn(self, late_ns: int) -> None:
        self._late.append(late_ns)
        self._since += 1
        if self._since >= 8:  # re-estimate every 8 wake-ups: a sort of <= 64 ints
            self._since = 0
            s = sorted(self._late)
            self.error_ns = max(self.floor_ns, s[min(len(s) - 1, int(self.quantile * len(s)))])

    async def wait_until(self, due_ns: int) -> None:
        clock, sleep = self.clock, asyncio.sleep
        wait = due_ns - clock()
        if wait > self.error_ns:
            target = due_ns - self.error_ns
            await sleep((target - clock()) / 1e9)
            self._learn(max(0, clock() - target))
        now = clock()
        while now < due_ns:
            await sleep(0)
            before, now = now, clock()
            if now == before:  # the clock stands still while the loop runs (a virtual clock): a timer moves it
                await sleep((due_ns - now) / 1e9)
                now = clock()

    def close(self) -> None:
        pass


# -- timerfd (Linux) through libc: Python 3.13 has os.timerfd_*, 3.10-3.12 do not ---------------
_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0o2000000)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                         ctypes.POINTER(_Itimerspec)]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def timerfd_available() -> str | None:
    """None when a :class:`TimerfdPacer` can run here, else why not."""
    if _LIBC is None:
        return "no timerfd (Linux only, through libc)"
    impl = time.get_clock_info("perf_counter").implementation
    if "CLOCK_MONOTONIC" not in impl or "RAW" in impl:
        return f"perf_counter is {impl}, not CLOCK_MONOTONIC"
    return None


class TimerfdPacer:
    """A kernel timer at the absolute due time, read through the loop's poll (``add_reader``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        why = timerfd_available()
        if why is not None:
            raise RuntimeError(why)
        assert _LIBC is not None
        self.name = "timerfd"
        self._loop = loop or asyncio.get_running_loop()
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._settime = _LIBC.timerfd_settime
        self._waiter: asyncio.Future[None] | None = None
        self._callback: Callable[[], None] | None = None
        try:
            self._loop.add_reader(fd, self._on_ready)
        except (NotImplementedError, ValueError, OSError):
            os.close(fd)
            raise

    def _arm(self, due_ns: int) -> None:
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(due_ns, 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def _on_ready(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiry count; the fd is readable only after expiry
        except BlockingIOError:
            return
        cb = self._callback
        if cb is not None:  # call_at: run at once, inside the loop's poll callback
            self._callback = None
            cb()
            return
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait_until(self, due_ns: int) -> None:
        if due_ns <= _perf_ns():
            return
        fut = self._loop.create_future()
        self._waiter = fut
        self._arm(due_ns)
        try:
            await fut
        finally:
            self._waiter = None
            if not fut.done():  # cancelled: disarm so a stale expiry wakes nobody
                self._arm(0)

    def call_at(self, due_ns: int, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._arm(max(due_ns, 1))  # a time already past fires at once (0 would disarm)

    def cancel(self) -> None:
        if self._callback is not None and self._fd >= 0:
            self._callback = None
            self._arm(0)

    def close(self) -> None:
        self.cancel()
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1


def make_pacer(kind: str = "auto", *, spin_ms: float = 1.5, clock: Callable[[], int] = _perf_ns) -> Pacer:
    """The pacer ``kind`` (one of :data:`PACERS`) for the running loop.

    ``auto``: the timerfd when it can run here and ``clock`` is the real ``perf_counter_ns`` (a
    test's virtual clock has no kernel timer), else the sleep pacer. ``spin``: the previous
    spin pacer with ``spin_ms``.
    """
    if kind not in PACERS:
        raise ValueError(f"pacer must be one of {PACERS}, got {kind!r}")
    if kind == "spin":
        return SpinPacer(int(spin_ms * 1e6), clock)
    if kind == "sleep":
        return SleepPacer(clock)
    if kind == "timerfd":
        if clock is not _perf_ns:
            raise ValueError("the timerfd pacer runs on perf_counter_ns only")
        return TimerfdPacer()
    if clock is _perf_ns and timerfd_available() is None:
        try:
            return TimerfdPacer()
        except (OSError, RuntimeError, NotImplementedError, ValueError):
            pass
    return SleepPacer(clock)
