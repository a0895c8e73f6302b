"""Ray backend: shards as Ray actors placed across the cluster's nodes (``--llm-ray-address``).

``auto`` joins a running cluster, ``local`` starts one on this host, anything else is a cluster
address for ``ray.init``. One shard per alive node unless ``--llm-workers`` asks for more. The
driver measures each node's wall-clock offset (best of a few round trips) and reports it; start
times are aligned by wall clock, every interval is measured on one host's monotonic clock (§4.7.2).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ...common.records import RequestRecord
from .core import ShardHello, ShardReport, ShardTask, hello, make_client, run_shard

__all__ = ["RayBackend"]

START_LEAD_S = 0.5
STOP_GRACE_S = 30.0
CLOCK_PROBES = 5


class _ShardActor:
    """One shard on a Ray node (an async actor: its event loop runs the load generator)."""

    def __init__(self, task: ShardTask) -> None:
        self.task = task
        self.stop = False
        self.client: Any = None
        self.me: ShardHello | None = None

    async def clock(self) -> int:
        return time.time_ns()

    async def prepare(self) -> ShardHello:
        import ray

        self.me = hello(self.task.index, node=ray.get_runtime_context().get_node_id())
        self.client = make_client(self.task)
        await self.client.__aenter__()
        return self.me

    async def run(self, start_unix_ns: int, out: Any) -> ShardReport:
        assert self.me is not None
        try:
            return await run_shard(self.task, self.client, start_unix_ns,
                                   lambda b: out.put_async((self.task.index, b)), lambda: self.stop, self.me)
        finally:
            await self.client.__aexit__(None, None, None)

    async def request_stop(self) -> None:
        self.stop = True


class RayBackend:
    """Shards as Ray actors, one per node (or ``workers``), spread across the cluster."""

    name = "ray"

    def __init__(self, address: str, workers: int | None = None) -> None:
        self.address = address
        self.workers = workers
        self.info: dict[str, Any] = {}

    def _ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise RuntimeError('--llm-ray-address needs Ray: pip install "pytest-llmbench[ray]"') from None
        if not ray.is_initialized():
            ray.init(address=None if self.address == "local" else self.address, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        return ray

    def nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._ray().nodes() if n.get("Alive")]

    def shard_count(self) -> int:
        return self.workers if self.workers and self.workers > 1 else max(1, len(self.nodes()))

    async def run(self, tasks: list[ShardTask], on_hello: Callable[[ShardHello], None],
                  on_records: Callable[[int, list[RequestRecord]], None]) -> tuple[int, list[ShardReport]]:
        ray = self._ray()
        from ray.util.queue import Empty, Queue

        cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in self.nodes())
        per_node = len(tasks) <= cpus  # one CPU each: the scheduler puts them on separate nodes when it must
        actor_cls = ray.remote(num_cpus=1 if per_node else 0, scheduling_strategy="SPREAD")(_ShardActor)
        actors = [actor_cls.remote(t) for t in tasks]
        out = Queue(actor_options={"num_cpus": 0})
        try:
            hellos: list[ShardHello] = await asyncio.gather(*[a.prepare.remote() for a in actors])
            offsets = [await self._clock_offset(a) for a in actors]
            for h in hellos:
                on_hello(h)
            self.info = {"address": self.address, "nodes": [
                {"shard": h.index, "node": h.node, "host": h.host, "clock_offset_ms": off, "clock_rtt_ms": rtt}
                for h, (off, rtt) in zip(hellos, offsets)]}
            start = time.time_ns() + int(START_LEAD_S * 1e9)
            runs = [asyncio.wrap_future(a.run.remote(start, out).future()) for a in actors]

            async def pump(deadline: float | None = None) -> None:
                while True:
                    try:
                        idx, batch = await out.get_async(block=True, timeout=0.1)
                        on_records(idx, batch)
                    except Empty:
                        if all(r.done() for r in runs) and out.empty():
                            return
                        if deadline is not None and time.monotonic() > deadline:
                            return

            try:
                await pump()
            except BaseException:
                await asyncio.shield(asyncio.gather(*[a.request_stop.remote() for a in actors]))
                await asyncio.shield(pump(time.monotonic() + STOP_GRACE_S))
                raise
            reports: list[ShardReport] = [r.result() for r in runs]
            for rep, (off, rtt) in zip(reports, offsets):
                rep.clock_offset_ms, rep.clock_rtt_ms = off, rtt
            return start, reports
        finally:
            for a in actors:
                ray.kill(a)
            ray.kill(out.actor)

    @staticmethod
    async def _clock_offset(actor: Any) -> tuple[float, float]:
        """(node wall clock − driver wall clock, round trip) in ms, from the fastest of a few probes."""
        best: tuple[float, float] | None = None
        for _ in range(CLOCK_PROBES):
            t0 = time.time_ns()
            remote = await actor.clock.remote()
            t1 = time.time_ns()
            probe = ((remote - (t0 + t1) / 2) / 1e6, (t1 - t0) / 1e6)
            if best is None or probe[1] < best[1]:
                best = probe
        assert best is not None
        return best
