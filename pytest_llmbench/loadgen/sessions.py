"""Driving multi-turn sessions through the load generator (issue 50; the sessions: workloads/sessions.py).

A session run's specs are a :class:`~..workloads.sessions.SessionSource`: iterating it yields each session's
first turn, and only those follow the load: an open loop starts a session at each arrival of its process
(§4.2.3), a closed loop of N holds N sessions at once (§4.2.4; a session that ends is replaced by the next).
Every later turn waits for the previous turn's answer: the runner hands each finished record here (where it
hands them to ``on_record``, ``_Runner._finish``), the source makes the next turn from it, and it is sent
after the session's think time by a loop timer, never by a blocking call on the sending path. Its intended
send time is the previous answer's end plus the think time, so its schedule lag shows the client's own delay.

A turn that failed ends its session (``failed``; a cancelled one, cut by the drain, ``cut``); a turn due when
the run no longer sends (its request count or duration reached, its stop predicate true) is not sent and its
session is ``cut``. Every request sent has its record; :meth:`SessionDriver.stats` accounts for every session
(started = completed + failed + cut) and every turn (sent, and planned but not sent).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from ..common.records import RequestRecord, RequestSpec
from ..workloads.sessions import SessionSource

__all__ = ["SessionDriver", "SessionSource"]


class SessionDriver:
    """One run's sessions: their starts (the runner's specs iterator), each later turn after the previous
    answer, and the tally of how every session ended. Made by the runner for a :class:`SessionSource`."""

    def __init__(self, source: SessionSource, runner: Any) -> None:  # runner: load._Runner (load.py imports this)
        self.source = source
        self.runner = runner
        self.runner_finish = runner._finish  # the runner's own: tallies, sink, on_record
        self.inflight: dict[int, RequestSpec] = {}  # spec index -> the turn sent, until its record finishes
        self.timers: dict[int, tuple[asyncio.TimerHandle, RequestSpec]] = {}  # turns waiting out a think time
        self.tasks: set[asyncio.Task[None]] | None = None
        self.closed_loop = False
        self.closed = False  # no turn is sent any more (the send window ended)
        self.starts_done = False
        self.changed: asyncio.Event | None = None
        self.started = self.completed = self.failed = self.cut = 0
        self.turns_sent = 0
        self.turns_not_sent = 0  # planned turns of sessions that ended early (failed or cut)
        self.failed_turns: dict[str, int] = {}  # error type -> sessions it ended

    # -- the starts --------------------------------------------------------------------------
    def starts(self) -> Iterator[RequestSpec]:
        """The session starts, each registered as it is taken (the runner's specs iterator)."""
        for spec in self.source:
            self.started += 1
            self.turns_sent += 1
            self.inflight[spec.index] = spec
            yield spec
        self.starts_done = True
        self._note()

    # -- each finished turn ---------------------------------------------------------------------
    def finish(self, rec: RequestRecord) -> None:
        """A finished record: its session fields set, the runner's ``_finish`` (tallies, sink, ``on_record``),
        then the session's next turn, or its end."""
        spec = self.inflight.pop(rec.index, None)
        if spec is None:  # not a turn of ours (cannot happen: every spec sent comes from the source)
            self.runner_finish(rec)
            return
        rec.session_id, rec.turn = spec.session_id, spec.turn
        self.runner_finish(rec)
        session = self.source.by_id[spec.session_id]  # type: ignore[index]
        left = session.turns - (spec.turn or 1)
        if rec.error_type is not None:  # a failed turn ends its session; a cancelled one was cut by the drain
            kind = rec.error_type.value
            if kind == "cancelled":
                self.cut += 1
            else:
                self.failed += 1
                self.failed_turns[kind] = self.failed_turns.get(kind, 0) + 1
            self.turns_not_sent += left
            self._ended()
            return
        nxt = self.source.next_turn(spec, rec)
        if nxt is None:
            self.completed += 1
            self._ended()
            return
        follow, think_s = nxt
        due = (rec.end_ns or time.perf_counter_ns()) + int(think_s * 1e9)
        if not self._may_send(due):
            self._cut(left)
            return
        wait_ns = due - time.perf_counter_ns()
        if wait_ns <= 0:
            self._send(follow, due)
            return
        loop = asyncio.get_running_loop()
        handle = loop.call_at(loop.time() + wait_ns / 1e9, self._due, follow, due)
        self.timers[follow.index] = (handle, follow)

    def _due(self, spec: RequestSpec, due: int) -> None:
        """A think time has passed: the turn is sent, unless the run no longer sends."""
        self.timers.pop(spec.index, None)
        if not self._may_send(due):
            self._cut(self.source.by_id[spec.session_id].turns - (spec.turn or 1) + 1)  # type: ignore[index]
            return
        self._send(spec, due)

    def _send(self, spec: RequestSpec, intended_ns: int, *, start: bool = False) -> None:
        """One turn handed to the runner's request task (as its dispatcher does: counted, gated, tracked); a
        ``start`` was registered when :meth:`starts` gave it."""
        r = self.runner
        if not start:
            self.inflight[spec.index] = spec
            self.turns_sent += 1
        r.progress.sent += 1
        if r.gate is not None:
            r.gate.unsent += 1
        task = asyncio.get_running_loop().create_task(r._one(spec, intended_ns))
        tasks = self.tasks
        if tasks is not None:
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        self._note()

    def _may_send(self, at_ns: int) -> bool:
        """Whether a turn due at ``at_ns`` is sent: the window open, the request count and the stop predicate
        not reached (the runner's own rules, ``_Runner._next_spec``)."""
        r = self.runner
        if self.closed:
            return False
        if r.max_requests is not None and r.progress.sent >= r.max_requests:
            return False
        if r.duration_ns is not None and at_ns - r.start_ns >= r.duration_ns:
            return False
        return r.until is None or not r.until(r.progress)

    def _cut(self, turns_left: int) -> None:
        self.cut += 1
        self.turns_not_sent += turns_left
        self._ended()

    def _ended(self) -> None:
        """A session ended: in a closed loop the next one starts in its slot (§4.2.4)."""
        if self.closed_loop and not self.closed and not self.starts_done:
            self._start_next()
        self._note()

    def _start_next(self) -> bool:
        """Closed loop: the next session's first turn sent now; False when none is left to start."""
        spec = self.runner._next_spec()
        if spec is None:
            self.starts_done = True
            return False
        self._send(spec, time.perf_counter_ns(), start=True)
        return True

    def _note(self) -> None:
        if self.changed is not None:
            self.changed.set()

    @property
    def open_sessions(self) -> int:
        return self.started - self.completed - self.failed - self.cut

    # -- the run ---------------------------------------------------------------------------------------
    async def drive(self, running: set[asyncio.Task[None]], open_loop: Callable[[], Awaitable[None]] | None,
                    concurrency: int) -> None:
        """The sending part of the run: the starts by the load model (``open_loop``: the runner's open-loop
        dispatch of the starts; None: a closed loop of ``concurrency`` sessions), then the later turns until every
        session has ended or nothing more may be sent; turns still waiting out a think time then are cut."""
        self.tasks = running
        self.changed = asyncio.Event()
        if open_loop is not None:
            await open_loop()
            self.starts_done = True  # the arrivals ended: by the count, the duration or the starts running out
        else:
            self.closed_loop = True
            for _ in range(concurrency):
                if not self._start_next():
                    break
        await self._until_ended()
        self.closed = True
        for handle, spec in list(self.timers.values()):
            handle.cancel()
            self._cut(self.source.by_id[spec.session_id].turns - (spec.turn or 1) + 1)  # type: ignore[index]
        self.timers.clear()

    async def _until_ended(self) -> None:
        r = self.runner
        changed = self.changed
        assert changed is not None
        while True:
            now = time.perf_counter_ns()
            if not self._may_send(now):
                return
            if self.open_sessions == 0 and self.starts_done:
                return
            changed.clear()
            timeout = None
            if r.duration_ns is not None:
                timeout = max(0.0, (r.start_ns + r.duration_ns - now) / 1e9)
            try:
                await asyncio.wait_for(changed.wait(), timeout)
            except TimeoutError:
                return

    def stats(self) -> dict[str, Any]:
        """How every session ended and every turn went (``LoadResult.sessions``)."""
        return {
            "sessions": len(self.source.sessions), "started": self.started, "completed": self.completed,
            "failed": self.failed, "cut": self.cut, "turns_sent": self.turns_sent,
            "turns_not_sent": self.turns_not_sent, "failed_by_error": dict(self.failed_turns),
            "recorded_answers": self.source.recorded_answers, "header": self.source.header,
        }
