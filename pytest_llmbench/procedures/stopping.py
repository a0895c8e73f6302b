"""Stop a measured run once its SLOs are settled (``--llm-stop-when-decided``, issue 47 item 3).

:class:`StopWhenDecided` is the runner of :class:`~..measure.slo.StopCondition` for one measured run of
:func:`.run.measure`: the load generator asks it before each send (``LoadOptions.stop``) and hands it
each finished record (``on_record``). It judges the SLOs at the condition's fixed looks only: the look
at ``n`` requests is taken once the first ``n`` requests sent have all finished, on exactly those
(none in flight, so a verdict counts every request of the look; the bound's design effect then
becomes the next look's). The look's summary is computed in a worker thread so that the event loop
keeps reading the requests in flight. Once every SLO is settled no request is sent; those in flight
finish and are recorded (the drain, never a cancellation). Searches and sweeps never stop
(``Procedure.stops_when_decided``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable, Iterator
from typing import Any

from ..common.records import RequestRecord, RequestSpec
from ..measure.chunking import ItlTally
from ..measure.frame import FrameBuilder
from ..measure.slo import SLOResult, StopCondition, StopDecision
from ..measure.summary import RunMetrics, summarize
from ..workloads import SessionSource
from .base import StopRequest

__all__ = ["StopWhenDecided"]


class StopWhenDecided:
    """One measured run's stop rule: ``LoadOptions.stop`` (:meth:`__call__`) and ``on_record``.

    ``planned``: the run's request count. ``progress``: the procedure's progress line. After the run,
    :meth:`finish` waits for the looks still being judged and :meth:`verdicts` gives each SLO's verdict.
    """

    def __init__(self, request: StopRequest, planned: int, progress: Any = None) -> None:
        self.request = request
        self.condition = StopCondition(request.slos, planned, confidence=request.confidence, strict=request.strict)
        self.planned = int(planned)
        self.progress = progress or (lambda line: None)
        self.looks = [n for n in self.condition.looks if n <= self.planned]
        self._order: dict[int, int] = {}  # a spec's index -> its place in send order
        self._sent = 0
        # per look not yet taken: the finished records among its first n sent, and how many finished
        self._frames: dict[int, FrameBuilder] = {} if self.condition.unsupported else \
            {n: FrameBuilder() for n in self.looks}
        self._finished = dict.fromkeys(self._frames, 0)
        self._itl = ItlTally()  # App. B.2.1 over the records so far: a look's ITL option
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[asyncio.Future[None]] = []
        self._metrics: dict[int, RunMetrics] = {}  # the looks an SLO settled at
        self.decision: StopDecision | None = None  # the last look's
        self.stopped_at: int | None = None  # the look at which every SLO was settled
        self._stop = False  # read before each send (the worker thread sets it)
        self._told = False
        self.error: BaseException | None = None

    # -- the load generator's side ----------------------------------------------------------------
    def specs(self, specs: Iterable[RequestSpec]) -> Iterator[RequestSpec]:
        """``specs`` as sent, each one's place in send order noted (the runner draws one per send). Not for a
        multi-turn session run, whose later turns are made from the answers, not drawn from ``specs``."""
        if isinstance(specs, SessionSource):
            raise ValueError("--llm-stop-when-decided does not apply to multi-turn sessions (conversation-sessions): "
                             "their later turns are sent after each answer, not in a send order known ahead")
        return self._noted(specs)

    def _noted(self, specs: Iterable[RequestSpec]) -> Iterator[RequestSpec]:
        for spec in specs:
            self._order[spec.index] = self._sent
            self._sent += 1
            yield spec

    def __call__(self, progress: Any) -> bool:
        """``LoadOptions.stop``: True once every SLO is settled (no further send)."""
        if self._stop and not self._told:  # the progress line from the loop's thread, once
            self._told = True
            reason = self.decision.reason if self.decision is not None else "decided"
            self.progress(f"measure: stopped when decided at {self.stopped_at:,} requests ({reason}); "
                          f"{progress.in_flight} in flight finish and are recorded")
        return self._stop

    def on_record(self, rec: RequestRecord) -> None:
        """A finished record: into every open look it belongs to; a look whose requests have all
        finished is judged (in the worker thread)."""
        if rec.phase != "measure" or not self._frames:
            return
        k = self._order.get(rec.index)
        if k is None:
            return
        self._itl.add(rec)
        for n in list(self._frames):
            if k < n:
                self._frames[n].add(rec)
                self._finished[n] += 1
                if self._finished[n] == n:
                    self._take(n)

    def _take(self, n: int) -> None:
        frame = self._frames.pop(n)
        del self._finished[n]
        option = self._itl.decision().option
        if self._stop:  # settled at an earlier look: no later look is needed
            frame.close()
            return
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llmbench-stop")
        loop = asyncio.get_running_loop()
        self._pending.append(loop.run_in_executor(self._executor, self._judge, n, frame, option))

    def _judge(self, n: int, frame: FrameBuilder, itl_option: str) -> None:
        """One look (worker thread; looks are judged one at a time, in order)."""
        try:
            if self._stop:
                frame.close()
                return
            metrics = summarize(frame, itl_option=itl_option)
            before = set(self.condition.settled)
            decision = self.condition.should_stop(metrics, n, 0)
            self.decision = decision
            if set(self.condition.settled) - before:
                self._metrics[n] = metrics
            if decision.stop:
                self.stopped_at = n
                self._stop = True
        except BaseException as exc:  # noqa: BLE001 - kept, raised by finish() in the run's task
            self.error = exc
            self._stop = False

    # -- after the run ---------------------------------------------------------------------------
    async def finish(self) -> None:
        """Wait for the looks being judged; close the looks never reached (their requests were not all
        sent or finished)."""
        try:
            for f in self._pending:
                await f
        finally:
            self._pending.clear()
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            for frame in self._frames.values():
                frame.close()
            self._frames.clear()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Release the worker and the open looks without waiting (a run that failed)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        for frame in self._frames.values():
            frame.close()
        self._frames.clear()

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    def run_info(self) -> dict[str, Any]:
        """What the run's ``run.json`` and its summary's ``extra`` say (``stopped``: ``decided`` with the look,
        or ``plan`` when it went to its plan)."""
        info: dict[str, Any] = {"stopped": "decided" if self.stopped else "plan",
                                "stop_slos": list(self.request.slos), "looks": list(self.looks)}
        if self.stopped_at is not None:
            info["stopped_at_look"] = self.stopped_at
        if self.condition.trace:  # each look's bounds of a percentile SLO (the report's plot)
            info["look_trace"] = [{"slo": self.condition.slos[i].text or str(self.condition.slos[i]),
                                   "points": pts, "run_stopped_at": self.stopped_at}
                                  for i, pts in sorted(self.condition.trace.items())]
        if self.condition.drift:  # looks whose PASS/FAIL drift held back (measure/stats/drift.py)
            info["drift"] = [{"slo": self.condition.slos[i].text or str(self.condition.slos[i]), "look": n,
                              **d.to_json()} for i, held in sorted(self.condition.drift.items()) for n, d in held]
        if self.condition.unsupported:
            info["reason"] = ("no bound at a look for " + ", ".join(s.text or str(s) for s in self.condition.unsupported)
                              + ": the run goes to its plan")
        return info

    def verdicts(self, run: RunMetrics, sent: int) -> dict[str, tuple[SLOResult, int]]:
        """Each SLO's final verdict (``StopCondition.final``) and the requests it was judged on: a settled
        SLO on its look's requests, another on all ``sent`` (``run``: the whole run's metrics)."""
        settled = self.condition.settled_at

        def metrics_for(n: int) -> Any:
            return run if n == sent or n not in self._metrics else self._metrics[n]

        results = self.condition.final(metrics_for, sent)
        return {slo.text or str(slo): (r, settled.get(i, sent))
                for i, (slo, r) in enumerate(zip(self.condition.slos, results))}
