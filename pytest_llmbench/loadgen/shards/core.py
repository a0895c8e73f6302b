"""One measured run split into shards: the plan, the shard's own run, and the merge.

The parent deals the run out (:func:`plan_shards`); each shard runs the unchanged load generator
(``load.run_load``) in its own process with its own event loop and connection pool
(:func:`run_shard`), and the parent merges the shards' records and reports into one
:class:`~..load.LoadResult` (:func:`merge`).

* Open loop: the global arrival schedule is generated once from the run's (kind, rate, seed)
  (§4.3.3) and dealt round-robin (request ``k`` to shard ``k mod N``) with its spec, so the
  union of the shards' schedules is exactly the unsharded schedule.
* Closed loop: the concurrency is split (``c // N``, the remainder to the first shards) and the
  spec list dealt the same way; a level stream (``procedures.helpers.LevelStream``) splits its
  completion target in proportion.
* Every shard starts at one absolute wall-clock time chosen by the parent once all shards are
  ready; from there each measures on its own host's monotonic clock (§4.7.2). Records from a
  shard on another host are moved onto the parent's clock by the two wall-clock anchors (a
  constant shift: every interval inside a record stays one host's monotonic difference).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import socket
import time
import traceback
from array import array
from collections.abc import Awaitable, Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Any


from ...client import ClientConfig, LLMClient
from ...common.records import ClockAnchor, ErrorType, RequestRecord, RequestSpec
from ...sut.adapters import ServerAdapter
from ..load import (
    ArrivalProcess,
    ClosedLoop,
    LagStats,
    LoadOptions,
    LoadResult,
    OpenLoop,
    SendSpan,
    load_parameters,
    run_load,
    saturation_reasons,
)

__all__ = [
    "DealtArrival",
    "MergeTally",
    "NotShardable",
    "ShardHello",
    "ShardReport",
    "ShardTask",
    "merge",
    "plan_shards",
    "run_shard",
    "shift_record",
]

#: Record fields on the sending host's monotonic clock (``server_token_ns`` is the server's).
_CLIENT_TIME_FIELDS = ("intended_ns", "queued_ns", "sent_ns", "first_chunk_ns", "first_token_ns", "end_ns")


class NotShardable(ValueError):
    """The run cannot be dealt out (e.g. a stop predicate over the whole run's progress)."""


@dataclass(frozen=True)
class DealtArrival(ArrivalProcess):
    """A shard's share of a global arrival schedule: ``offsets`` (ns from the common start).

    ``kind``/``rate``/``seed`` describe the global process the offsets were dealt from.
    """

    offsets: tuple[int, ...] = ()

    def offsets_ns(self) -> Any:
        return iter(self.offsets)


@dataclass
class ShardTask:
    """Everything one shard needs, picklable (sent to a process or a Ray actor)."""

    index: int
    count: int
    config: ClientConfig
    max_connections: int | None
    tokenizer: str
    specs: Any  # list[RequestSpec] or a splittable level stream
    load: OpenLoop | ClosedLoop
    options: LoadOptions = field(default_factory=LoadOptions)  # the parent's, unchanged
    adapter: ServerAdapter | None = None  # reads the server's response extensions (None: the generic one)


@dataclass
class ShardHello:
    """A shard ready to start: where it runs and its clock anchor (perf <-> wall)."""

    index: int
    host: str
    pid: int
    anchor: ClockAnchor
    node: str | None = None


@dataclass
class ShardReport:
    """One shard's own load figures (§4.2.5 self-check per shard)."""

    index: int
    host: str
    pid: int
    node: str | None
    start_ns: int
    send_end_ns: int
    end_ns: int
    sent: int
    ok: int
    cancelled: int
    errors: dict[str, int]
    output_tokens: int
    achieved_rate: float | None
    concurrency_target: int | None
    concurrency_mean: float
    concurrency_max: int
    concurrency_samples: list[tuple[int, int]]
    send_lag: LagStats
    loop_delay: LagStats
    valid: bool
    invalid_reason: str | None
    interrupted: bool = False
    error: str | None = None
    spec_stats: dict[str, int] = field(default_factory=dict)
    clock_offset_ms: float | None = None  # node wall clock - driver wall clock (Ray backend)
    clock_rtt_ms: float | None = None
    cpu_s: float = 0.0  # the shard process's CPU seconds over its run (start-up and record hand-over excluded)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("concurrency_samples")
        return d


# --------------------------------------------------------------------------------------------
# planning (parent)
# --------------------------------------------------------------------------------------------


def _global_offsets(arrival: ArrivalProcess, max_requests: int | None, duration_s: float | None,
                    cap: int | None) -> list[int]:
    limits = [x for x in (max_requests, cap) if x is not None]
    n_max = min(limits) if limits else None
    duration_ns = int(duration_s * 1e9) if duration_s is not None else None
    if n_max is None and duration_ns is None:
        raise NotShardable("an open-loop run without a request count or duration cannot be dealt out")
    out: list[int] = []
    for off in arrival.offsets_ns():
        if (n_max is not None and len(out) >= n_max) or (duration_ns is not None and off >= duration_ns):
            break
        out.append(off)
    return out


def plan_shards(specs: Iterable[RequestSpec], load: OpenLoop | ClosedLoop, n: int
                ) -> list[tuple[Any, OpenLoop | ClosedLoop]]:
    """Deal one run over ``n`` shards: a (specs, load) pair per shard (fewer if there is less work).

    Raises :class:`NotShardable` when the run's stop rule depends on the whole run in a way
    that cannot be split (an unbounded iterator with no count, duration or split method).
    """
    if n < 1:
        raise ValueError(f"shard count must be >= 1, got {n}")
    if isinstance(load, OpenLoop):
        cap = len(specs) if isinstance(specs, Sized) else None
        offsets = _global_offsets(load.arrival, load.max_requests, load.duration_s, cap)
        spec_list = list(itertools.islice(iter(specs), len(offsets)))
        offsets = offsets[: len(spec_list)]
        n = max(1, min(n, len(spec_list)))
        a = load.arrival
        out: list[tuple[Any, OpenLoop | ClosedLoop]] = []
        for i in range(n):
            dealt = DealtArrival(a.kind, a.rate, a.seed, a.cv, offsets=tuple(offsets[i::n]))
            out.append((spec_list[i::n], OpenLoop(dealt, max_requests=None, duration_s=load.duration_s)))
        return out
    n = max(1, min(n, load.concurrency))
    conc = [load.concurrency // n + (1 if i < load.concurrency % n else 0) for i in range(n)]
    split = getattr(specs, "split", None)
    if callable(split):  # a level stream: split its completion target with the concurrency
        parts = split(conc)
        return [(parts[i], ClosedLoop(conc[i], max_requests=None, duration_s=load.duration_s)) for i in range(n)]
    if isinstance(specs, Sized):
        spec_list = list(itertools.islice(iter(specs), load.max_requests)) if load.max_requests is not None \
            else list(specs)
    elif load.max_requests is not None:
        spec_list = list(itertools.islice(iter(specs), load.max_requests))
    else:
        raise NotShardable("a closed-loop run over an unbounded spec iterator cannot be dealt out")
    return [(spec_list[i::n], ClosedLoop(conc[i], max_requests=len(spec_list[i::n]), duration_s=load.duration_s))
            for i in range(n)]


# --------------------------------------------------------------------------------------------
# one shard (child process or Ray actor)
# --------------------------------------------------------------------------------------------


def hello(index: int, node: str | None = None) -> ShardHello:
    return ShardHello(index=index, host=socket.gethostname(), pid=os.getpid(), anchor=ClockAnchor.now(), node=node)


async def _sleep_until_unix(start_unix_ns: int) -> int:
    """Sleep until the wall clock reads ``start_unix_ns``; the wait itself runs on the monotonic clock.
    Returns that moment as a ``perf_counter_ns`` reading (this host's monotonic clock)."""
    target = time.perf_counter_ns() + (start_unix_ns - time.time_ns())
    while True:
        wait = target - time.perf_counter_ns()
        if wait <= 0:
            return target
        await asyncio.sleep((wait - 2_000_000) / 1e9 if wait > 2_000_000 else 0)


class _BatchSink:
    """Collects finished records (tagged with the shard) for the flusher to send back in batches."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.batch: list[RequestRecord] = []
        self.n = 0
        self.ok = 0
        self.cancelled = 0

    def write(self, record: RequestRecord) -> None:
        record.shard = self.index
        self.n += 1
        if record.error_type is None:
            self.ok += 1
        elif record.error_type is ErrorType.CANCELLED:
            self.cancelled += 1
        self.batch.append(record)

    def take(self) -> list[RequestRecord]:
        b, self.batch = self.batch, []
        return b


Emit = Callable[[list[RequestRecord]], "Awaitable[None] | None"]


async def run_shard(task: ShardTask, client: LLMClient, start_unix_ns: int, emit: Emit,
                    should_stop: Callable[[], bool], me: ShardHello, flush_s: float = 0.02) -> ShardReport:
    """Run this shard's load at the common start; stream records through ``emit`` as they finish.

    ``should_stop`` is polled; when it turns true the run is cancelled and its in-flight requests
    come back marked ``cancelled`` (as in an unsharded interrupted run).
    """
    sink = _BatchSink(task.index)

    async def flush() -> None:
        b = sink.take()
        if b:
            r = emit(b)
            if r is not None:
                await r

    async def flusher() -> None:
        while True:
            await asyncio.sleep(flush_s)
            await flush()

    async def go() -> LoadResult:
        start = await _sleep_until_unix(start_unix_ns)
        return await run_load(client, task.specs, task.load, task.options, sink=sink, keep_records=False,
                              start_ns=start)

    fl = asyncio.create_task(flusher())
    runner = asyncio.create_task(go())
    interrupted = False
    error = None
    result: LoadResult | None = None
    try:
        while not runner.done():
            if should_stop():
                runner.cancel()
                break
            await asyncio.wait({runner}, timeout=0.05)
        try:
            result = await runner
        except asyncio.CancelledError:
            interrupted = True
        except Exception:  # reported to the parent, which raises it
            error = traceback.format_exc()
    finally:
        fl.cancel()
        await asyncio.gather(fl, return_exceptions=True)
        await flush()
    stats = dict(getattr(task.specs, "stats", None) or {})
    if result is None:
        now = time.perf_counter_ns()
        return ShardReport(task.index, me.host, me.pid, me.node, now, now, now, sink.n, sink.ok, sink.cancelled, {},
                           0, None, None, 0.0, 0, [], LagStats.of_ns([]), LagStats.of_ns([]), False,
                           "interrupted" if interrupted else "shard failed", interrupted=interrupted, error=error,
                           spec_stats=stats)
    r = result
    window = r.send_end_ns - r.start_ns  # a shard's own figure: its sends over its send window
    achieved = r.sent / (window / 1e9) if window > 0 else None
    return ShardReport(task.index, me.host, me.pid, me.node, r.start_ns, r.send_end_ns, r.end_ns, r.sent, r.ok,
                       r.cancelled, dict(r.errors), r.output_tokens, achieved, r.concurrency_target,
                       r.concurrency_mean, r.concurrency_max, list(r.concurrency_samples), r.send_lag, r.loop_delay,
                       r.valid, r.invalid_reason, spec_stats=stats,
                       cpu_s=r.client_delay.cpu_s if r.client_delay is not None else 0.0)


def make_client(task: ShardTask) -> LLMClient:
    from ...common.tokenizer import get_tokenizer

    return LLMClient(task.config, max_connections=task.max_connections, tokenizer=get_tokenizer(task.tokenizer),
                     adapter=task.adapter)


# --------------------------------------------------------------------------------------------
# merging (parent)
# --------------------------------------------------------------------------------------------


def clock_shift_ns(shard: ShardHello, parent: ClockAnchor, parent_host: str) -> int:
    """ns to add to a shard's monotonic readings to place them on the parent's clock (0 on one host:
    CLOCK_MONOTONIC is shared by every process of a host)."""
    if shard.host == parent_host:
        return 0
    return (shard.anchor.unix_ns - shard.anchor.perf_ns) - (parent.unix_ns - parent.perf_ns)


def shift_record(rec: RequestRecord, shift: int) -> None:
    """Move a record's client-side times by a constant (intervals inside it are unchanged)."""
    if not shift:
        return
    for name in _CLIENT_TIME_FIELDS:
        v = getattr(rec, name)
        if v:
            setattr(rec, name, v + shift)
    rec.chunk_ns = [t + shift for t in rec.chunk_ns]


@dataclass
class MergeTally:
    """What :func:`merge` needs of the shards' records, tallied as each arrives (no record kept):
    count, outcomes, output tokens, the latest end, the send span and every record's send lag
    (8 bytes each, for its exact percentiles)."""

    count: int = 0
    ok: int = 0
    output_tokens: int = 0
    end_ns: int = 0
    phase: str | None = None  # the first record's
    errors: dict[str, int] = field(default_factory=dict)  # by error type, in order of first occurrence
    sends: SendSpan = field(default_factory=SendSpan)
    lags: array[int] = field(default_factory=lambda: array("q"))  # hand-over − intended (schedule lag)
    submit_lags: array[int] = field(default_factory=lambda: array("q"))  # sent (T_submit) − intended

    def add(self, r: RequestRecord) -> None:
        if self.phase is None:
            self.phase = r.phase
        self.count += 1
        self.sends.add(r.sent_ns)
        self.end_ns = max(self.end_ns, r.end_ns or 0)
        if r.error_type is None:
            self.ok += 1
        else:
            self.errors[r.error_type.value] = self.errors.get(r.error_type.value, 0) + 1
        self.output_tokens += r.output_tokens or 0
        if r.intended_ns is not None and r.sent_ns:
            self.lags.append(r.handoff_ns - r.intended_ns)
            self.submit_lags.append(r.sent_ns - r.intended_ns)


def merge(load: OpenLoop | ClosedLoop, options: LoadOptions, reports: list[ShardReport], tally: MergeTally, *,
          anchor: ClockAnchor, start_ns: int, transport: str, sharding: dict[str, Any],
          records: list[RequestRecord] | None = None) -> LoadResult:
    """One :class:`LoadResult` for the whole run from the shards' reports and the tally of the merged
    records (``records``: the records themselves, when the caller kept them).

    Schedule and submit lag are pooled over every record (exact); loop delay is the worst shard's (each event loop
    is checked on its own); the run is valid only when every shard is. Concurrency mean is the sum
    of the shards' means; concurrency max the sum of their maxima (an upper bound). Per-shard figures go to
    ``parameters["sharding"]["shards"]``.
    """
    check = options.self_check
    achieved = tally.sends.rate()
    send_end = max((r.send_end_ns for r in reports), default=start_ns)
    if load.duration_s is not None and isinstance(load, OpenLoop):
        send_end = max(send_end, start_ns + int(load.duration_s * 1e9))
    end = max((r.end_ns for r in reports), default=start_ns)
    end = max(end, tally.end_ns)
    errors = dict(tally.errors)
    ok = tally.ok
    cancelled = errors.get(ErrorType.CANCELLED.value, 0)
    send_lag = LagStats.of_ns(tally.lags)
    worst = max(reports, key=lambda r: r.loop_delay.p99_ms or 0.0) if reports else None
    loop_delay = worst.loop_delay if worst is not None else LagStats.of_ns([])
    reasons = [f"shard {r.index}: {r.invalid_reason}" for r in reports if not r.valid and r.invalid_reason]
    reasons += saturation_reasons(check, send_lag if isinstance(load, OpenLoop) else None, None, "merged send-lag")
    params, requested, target = load_parameters(load, options.drain_timeout_s, stop=False)
    params["sharding"] = {**sharding, "shards": [r.to_json() for r in reports]}
    return LoadResult(
        phase=tally.phase or "measure",
        load_model="open" if isinstance(load, OpenLoop) else "closed",
        parameters=params, records=records if records is not None else [], transport=transport, clock_anchor=anchor,
        start_ns=start_ns, send_end_ns=send_end, end_ns=max(end, send_end),
        sent=tally.count, completed=tally.count - cancelled, ok=ok, cancelled=cancelled, errors=errors,
        output_tokens=tally.output_tokens, requested_rate=requested,
        achieved_rate=achieved, completion_rate=ok / ((end - start_ns) / 1e9) if end > start_ns else None,
        concurrency_target=target, concurrency_mean=float(sum(r.concurrency_mean for r in reports)),
        concurrency_max=int(sum(r.concurrency_max for r in reports)), concurrency_samples=_pooled_samples(reports),
        send_lag=send_lag, loop_delay=loop_delay, valid=not reasons, invalid_reason="; ".join(reasons) or None,
        self_check=check, submit_lag=LagStats.of_ns(tally.submit_lags),
    )


def _pooled_samples(reports: list[ShardReport]) -> list[tuple[int, int]]:
    """The shards' concurrency samples added up, sample by sample (the latest time of each)."""
    n_samples = max((len(r.concurrency_samples) for r in reports), default=0)
    samples = []
    for i in range(n_samples):
        at = [r.concurrency_samples[i] for r in reports if i < len(r.concurrency_samples)]
        samples.append((max(t for t, _ in at), sum(c for _, c in at)))
    return samples
