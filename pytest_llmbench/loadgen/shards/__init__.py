"""Load generation beyond one core and one host: a measured run split into shards.

``--llm-workers N`` (local processes) or ``--llm-ray-address`` (Ray actors across nodes) makes
:func:`run_sharded` take the place of ``load.run_load`` for each measured run; warm-up stays in
the parent. Records stream back as they finish, into the one records file, each with its
``shard``; the merged :class:`~..load.LoadResult` keeps per-shard figures (send lag, loop delay,
self-check, host, clock offset) in ``parameters["sharding"]``. See core.py for the dealing rules.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from ...client import LLMClient
from ...common.records import ClockAnchor, RequestRecord, RequestSpec
from ..load import ClosedLoop, LoadOptions, LoadResult, OpenLoop, RecordSink
from ..sessions import SessionSource
from .core import (
    MergeTally,
    NotShardable,
    ShardHello,
    ShardReport,
    ShardTask,
    clock_shift_ns,
    merge,
    plan_shards,
    shift_record,
)

if TYPE_CHECKING:
    from ...settings import Settings

__all__ = ["Backend", "NotShardable", "ShardError", "backend_for", "parse_workers", "run_sharded"]


class ShardError(RuntimeError):
    """A shard failed (its traceback is in the message)."""


class Backend(Protocol):
    name: str
    info: dict[str, Any]

    def shard_count(self) -> int: ...

    async def run(self, tasks: list[ShardTask], on_hello: Callable[[ShardHello], None],
                  on_records: Callable[[int, list[RequestRecord]], None]) -> tuple[int, list[ShardReport]]: ...


def parse_workers(value: str | int | None) -> int:
    """``--llm-workers``: a positive integer, or ``auto`` (cores − 1, at least 1)."""
    if value is None:
        return 1
    text = str(value).strip().lower()
    if text == "auto":
        return max(1, (os.cpu_count() or 2) - 1)
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"workers must be a positive integer or 'auto', got {value!r}")
    return n


def backend_for(settings: Settings) -> Backend | None:
    """The backend the settings ask for (``--llm-workers``, ``--llm-ray-address``); None: the
    in-process load generator (``load.run_load``)."""
    n = parse_workers(settings.workers)
    if settings.ray_address:
        from .ray_backend import RayBackend

        return RayBackend(settings.ray_address, n if n > 1 else None)
    if n > 1:
        from .local import LocalBackend

        return LocalBackend(n)
    return None


async def run_sharded(
    backend: Backend,
    client: LLMClient,
    specs: Iterable[RequestSpec],
    load: OpenLoop | ClosedLoop,
    options: LoadOptions | None = None,
    *,
    tokenizer: str,
    sink: RecordSink | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    keep_records: bool = True,
) -> LoadResult:
    """:func:`~..load.run_load` over the backend's shards; same contract (records to ``sink`` and
    ``on_record`` as they finish, cancellation stops every shard and keeps what finished;
    ``keep_records=False``: the parent keeps no record, only the tally the merged figures need).
    ``options`` go to every shard unchanged; a stop predicate or a pacer object cannot
    (:class:`NotShardable`)."""
    options = options if options is not None else LoadOptions()
    if options.stop is not None:
        raise NotShardable("a stop predicate judges the whole run's progress, which no shard sees")
    if not isinstance(options.pacer, str):
        raise NotShardable(f"a pacer object ({options.pacer.name}) cannot be sent to a shard")
    if isinstance(specs, SessionSource):  # turn k+1 needs turn k's record, in the process that sent it
        raise NotShardable("multi-turn sessions make each turn from the previous answer in process")
    parts = plan_shards(specs, load, backend.shard_count())
    tasks = [
        ShardTask(index=i, count=len(parts), config=client.config,
                  max_connections=part_load.concurrency if isinstance(part_load, ClosedLoop) else client.max_connections,
                  tokenizer=tokenizer, specs=part_specs, load=part_load, options=options, adapter=client.adapter)
        for i, (part_specs, part_load) in enumerate(parts)
    ]
    anchor, host = ClockAnchor.now(), socket.gethostname()
    shifts: dict[int, int] = {}
    hellos: dict[int, ShardHello] = {}
    records: list[RequestRecord] | None = [] if keep_records else None
    tally = MergeTally()
    callback_error: list[BaseException] = []

    def on_hello(h: ShardHello) -> None:
        hellos[h.index] = h
        shifts[h.index] = clock_shift_ns(h, anchor, host)

    def on_records(idx: int, batch: list[RequestRecord]) -> None:
        for rec in batch:
            shift_record(rec, shifts.get(idx, 0))
            if sink is not None:
                sink.write(rec)
            tally.add(rec)
            if records is not None:
                records.append(rec)
            if on_record is not None and not callback_error:
                try:
                    on_record(rec)
                except Exception as exc:  # reported after the run, as run_load does
                    callback_error.append(exc)

    start_unix, reports = await backend.run(tasks, on_hello, on_records)
    failed = [r for r in reports if r.error]
    if failed:
        raise ShardError(f"load-generator shard {failed[0].index} failed:\n{failed[0].error}")
    for rep in reports:
        s = shifts.get(rep.index, 0)
        rep.start_ns, rep.send_end_ns, rep.end_ns = rep.start_ns + s, rep.send_end_ns + s, rep.end_ns + s
    absorb = getattr(specs, "absorb", None)
    if callable(absorb):
        absorb([r.spec_stats for r in reports])
    start_ns = anchor.perf_ns + (start_unix - anchor.unix_ns)
    sharding = {"backend": backend.name, "workers": len(tasks),
                "hosts": sorted({h.host for h in hellos.values()}), "parent_host": host,
                "start_iso": anchor.iso(start_ns), **backend.info}
    result = merge(load, options, reports, tally, anchor=anchor, start_ns=start_ns, transport=client.transport_name,
                   sharding=sharding, records=records)
    if callback_error:
        raise callback_error[0]
    return result
