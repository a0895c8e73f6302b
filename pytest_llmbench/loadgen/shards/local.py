"""Local backend: one standard-library process per shard (``--llm-workers N``), spawn start method.

Each child ignores SIGINT (a terminal Ctrl-C reaches the whole process group); the parent stops
shards through an event, and their in-flight requests come back as ``cancelled`` records. A
child whose parent has died stops by itself.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from ...common.records import RequestRecord
from .core import ShardHello, ShardReport, ShardTask, hello, make_client, run_shard

__all__ = ["LocalBackend"]

START_LEAD_S = 0.2  # the common start is this far after the last shard reported ready
STOP_GRACE_S = 30.0  # after a stop, how long shards may take to hand back their records


def _child(task: ShardTask, q: Any, go: Any, stop: Any, start: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            import uvloop

            uvloop.run(_child_async(task, q, go, stop, start))
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
            asyncio.run(_child_async(task, q, go, stop, start))
    except BaseException:
        q.put(("error", task.index, traceback.format_exc()))


async def _child_async(task: ShardTask, q: Any, go: Any, stop: Any, start: Any) -> None:
    me = hello(task.index)
    parent = os.getppid()

    def should_stop() -> bool:  # stopped by the parent, or the parent is gone (killed by SIGKILL/SIGTERM)
        return stop.is_set() or os.getppid() != parent

    async with make_client(task) as client:
        q.put(("hello", task.index, me))
        loop = asyncio.get_running_loop()
        while not await loop.run_in_executor(None, go.wait, 0.1):
            if should_stop():
                q.put(("report", task.index, None))
                return
        report = await run_shard(task, client, start.value, lambda b: q.put(("records", task.index, b)),
                                 should_stop, me)
        q.put(("report", task.index, report))


class LocalBackend:
    """Shards as processes on this host (``multiprocessing`` with ``spawn`` or ``forkserver``)."""

    name = "local"

    def __init__(self, workers: int, start_method: str = "spawn") -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.start_method = start_method
        self.info: dict[str, Any] = {}

    def shard_count(self) -> int:
        return self.workers

    async def run(self, tasks: list[ShardTask], on_hello: Callable[[ShardHello], None],
                  on_records: Callable[[int, list[RequestRecord]], None]) -> tuple[int, list[ShardReport]]:
        """Start the shards, align their start, stream their records; returns (start unix ns, reports)."""
        ctx = mp.get_context(self.start_method)
        q = ctx.Queue()
        go, stop, start = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
        procs = [ctx.Process(target=_child, args=(t, q, go, stop, start), daemon=True,
                             name=f"llmbench-shard-{t.index}") for t in tasks]
        for p in procs:
            p.start()
        loop = asyncio.get_running_loop()
        ready: set[int] = set()
        reports: dict[int, ShardReport | None] = {}
        errors: list[str] = []

        def handle(msg: tuple[str, int, Any]) -> None:
            kind, idx, body = msg
            if kind == "hello":
                ready.add(idx)
                on_hello(body)
            elif kind == "records":
                on_records(idx, body)
            elif kind == "report":
                reports[idx] = body
            else:
                errors.append(f"shard {idx}:\n{body}")
                reports.setdefault(idx, None)

        async def pump(done: Callable[[], bool], deadline: float | None = None) -> None:
            while not done() and not errors:
                try:
                    handle(await loop.run_in_executor(None, q.get, True, 0.1))
                except queue.Empty:
                    if deadline is not None and time.monotonic() > deadline:
                        return
                    dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                    if dead and q.empty():
                        errors.append(f"shard process {dead[0].name} exited with code {dead[0].exitcode}")

        try:
            await pump(lambda: len(ready) + len(reports) >= len(tasks))
            if errors:
                raise RuntimeError("a load-generator shard failed to start: " + errors[0])
            start.value = time.time_ns() + int(START_LEAD_S * 1e9)
            go.set()
            await pump(lambda: len(reports) >= len(tasks))
            if errors:
                raise RuntimeError("a load-generator shard failed: " + errors[0])
        except BaseException:  # Ctrl-C / SIGTERM (cancellation) or a failure: stop every shard, keep records
            stop.set()
            go.set()
            await asyncio.shield(pump(lambda: len(reports) >= len(tasks), time.monotonic() + STOP_GRACE_S))
            raise
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=5)
            q.close()
        return start.value, [r for _, r in sorted(reports.items()) if r is not None]
