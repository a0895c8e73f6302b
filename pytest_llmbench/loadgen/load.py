"""Load models: open loop (Poisson, uniform, bursty) and closed loop (§4.2.3–§4.2.5).

Open loop: arrival times are computed ahead from (distribution, rate, seed) and every request is
sent at its absolute scheduled time; a request is never sent "after the previous one", so a slow
response cannot delay a later submission (§4.2.5). Each record carries ``intended_ns`` (the
schedule), ``queued_ns`` (the hand-over to the transport) and ``sent_ns`` (T_submit, the last
request byte written, App. B.1.1). Two lags are kept apart: the *schedule lag* = queued − intended
(the client's own pacing and loop) and the *submit lag* = sent − intended (that plus connection
set-up and the request write). Service latency starts at ``sent_ns`` and schedule-relative
latency at ``intended_ns`` (coordinated omission stays visible). The dispatcher waits on a
:mod:`pacer` (a kernel timer where there is one) that costs no CPU between sends.

Closed loop: exactly N requests are held in flight; each completion is replaced at once
(§4.2.4). ``intended_ns`` is then the moment the slot became free, so queued − intended is the
resubmission gap. The concurrency actually held is recorded (time-weighted mean and samples).

The run stops by request count, by duration, when the specs run out or when a predicate says
so; running requests are drained for at most ``drain_timeout_s`` and then cancelled (their
records get ``error_type = cancelled``). A self-check marks the result invalid when the client
itself was saturated (send lag or event-loop delay above :class:`SelfCheck` thresholds).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import socket
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from ..client import LLMClient
from ..common.records import ClockAnchor, ErrorType, RequestRecord, RequestSpec
from ..measure.stats import numpy_percentiles_sorted
from .pacer import PACERS, Pacer, make_pacer
from .selfcheck import ClientDelay
from .sessions import SessionDriver, SessionSource

__all__ = [
    "ARRIVAL_KINDS",
    "SCHEDULED_KINDS",
    "ArrivalProcess",
    "ClosedLoop",
    "LagStats",
    "LoadOptions",
    "LoadProgress",
    "LoadResult",
    "OpenLoop",
    "RecordSink",
    "SelfCheck",
    "SendSpan",
    "check_arrival",
    "load_parameters",
    "run_closed_loop",
    "run_load",
    "run_open_loop",
    "saturation_reasons",
]

ARRIVAL_KINDS = ("poisson", "uniform", "bursty")
#: kinds whose send times a subclass of :class:`ArrivalProcess` supplies itself (``offsets_ns``), given or drawn
#: by it, never by :meth:`ArrivalProcess.gaps_s`: ``shaped``, a rate schedule's non-homogeneous Poisson process
#: (shapes.ShapedArrival), and ``trace``, a replayed trace's send times (replay.TraceArrival); ``rate`` is then
#: their mean rate (informative)
SCHEDULED_KINDS = ("shaped", "trace")
_ALIASES = {"constant": "uniform"}
_BLOCK = 4096
_LAG_PERCENTILES = (50.0, 90.0, 99.0)
_cpu_time = time.process_time  # bound once: the client's CPU seconds (selfcheck.py)


# --------------------------------------------------------------------------------------------
# Arrival processes (§4.2.3)
# --------------------------------------------------------------------------------------------


def check_arrival(kind: str | None, rate: float | None, cv: float | None, *, scheduled: bool = False) -> str:
    """The one check of an arrival process's parameters (§4.2.3), for :class:`ArrivalProcess` and a
    marker's ``LoadSpec`` alike: ``kind`` one of :data:`ARRIVAL_KINDS` (or the alias ``constant``), or of
    :data:`SCHEDULED_KINDS` when ``scheduled`` (a process that supplies its own send times),
    ``rate`` a positive finite number of requests/s (None: not known yet, a fraction of a capacity
    measured later), ``cv`` > 1 for bursty arrivals and for them only. Returns the kind, its alias
    resolved; raises ValueError naming what is wrong."""
    resolved = _ALIASES.get(kind, kind) if kind is not None else None
    if resolved in SCHEDULED_KINDS and not scheduled:
        raise ValueError(f"{kind!r} arrivals follow a schedule: build them with their own process (a marker's "
                         "load=shaped(...) for a rate shape, --llm-trace or trace= for a replayed trace)")
    if resolved not in ARRIVAL_KINDS + SCHEDULED_KINDS:
        raise ValueError(f"arrival kind must be one of {ARRIVAL_KINDS} (or 'constant'), got {kind!r}")
    if rate is not None and not (rate > 0 and np.isfinite(rate)):
        raise ValueError(f"arrival rate must be a positive number of requests/s, got {rate!r}")
    if resolved == "bursty":
        if cv is None or not cv > 1:
            raise ValueError(f"bursty arrivals need cv > 1 (gap coefficient of variation), got {cv!r}")
    elif cv is not None:
        raise ValueError(f"cv applies to bursty arrivals only, not {resolved!r}")
    return str(resolved)


@dataclass(frozen=True)
class ArrivalProcess:
    """Inter-arrival distribution with mean ``1 / rate`` seconds.

    * ``poisson``: exponential gaps (the required model, §4.2.3).
    * ``uniform`` (alias ``constant``): evenly spaced, every gap exactly ``1 / rate``.
    * ``bursty``: gamma gaps with coefficient of variation ``cv`` > 1 (shape ``1/cv²``); the
      draft defines no burst model, so ``cv`` is a declared parameter.

    The first request is scheduled at offset 0. The same (kind, rate, seed, cv) always gives
    the same schedule.
    """

    kind: str
    rate: float
    seed: int = 0
    cv: float | None = None

    def __post_init__(self) -> None:
        scheduled = type(self).offsets_ns is not ArrivalProcess.offsets_ns  # a subclass supplies its send times
        object.__setattr__(self, "kind", check_arrival(self.kind, self.rate, self.cv, scheduled=scheduled))

    def gaps_s(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """``n`` inter-arrival gaps in seconds."""
        if self.kind in SCHEDULED_KINDS:
            raise ValueError(f"{self.kind!r} send times are given (offsets_ns of its subclass), not drawn")
        rng = rng if rng is not None else np.random.default_rng(self.seed)
        mean = 1.0 / self.rate
        if self.kind == "poisson":
            return rng.exponential(mean, size=n)
        if self.kind == "uniform":
            return np.full(n, mean)
        shape = 1.0 / (self.cv * self.cv)  # type: ignore[operator]
        return rng.gamma(shape, mean / shape, size=n)

    def offsets_ns(self) -> Iterator[int]:
        """Scheduled send offsets from the run start, in ns (0 first), generated in blocks."""
        rng = np.random.default_rng(self.seed)
        t = 0.0
        yield 0
        while True:
            for g in self.gaps_s(_BLOCK, rng):
                t += float(g)
                yield int(t * 1e9)

    def schedule_ns(self, n: int) -> np.ndarray:
        """The first ``n`` offsets as an array (what :meth:`offsets_ns` yields)."""
        return np.fromiter(itertools.islice(self.offsets_ns(), n), dtype=np.int64, count=n)


@dataclass(frozen=True)
class OpenLoop:
    """Open-loop load: send at the arrival process's times (§4.2.3, §4.2.5)."""

    arrival: ArrivalProcess
    max_requests: int | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class ClosedLoop:
    """Closed-loop load: hold ``concurrency`` requests in flight (§4.2.4)."""

    concurrency: int
    max_requests: int | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"closed-loop concurrency must be >= 1, got {self.concurrency}")


@dataclass(frozen=True)
class SelfCheck:
    """Thresholds above which the client is taken to be saturated and the run invalid.

    ``max_send_lag_p99_ms``: open-loop p99 of the schedule lag (hand-over − intended). ``max_loop_delay_p99_ms``: p99
    of the event-loop delay, measured by a task that sleeps ``probe_interval_ms`` and records
    how late it wakes (a busy loop reads chunks late and inflates every latency). Checks need
    at least ``min_samples`` samples.
    """

    max_send_lag_p99_ms: float = 10.0
    max_loop_delay_p99_ms: float = 20.0
    probe_interval_ms: float = 10.0
    concurrency_sample_ms: float = 100.0
    min_samples: int = 20
    receive_probe: bool = True  # time socket readability -> task clock read each probe (selfcheck.py)


@dataclass(frozen=True)
class LoadOptions:
    """How one load run is driven, beside what it sends (the specs) and the load it holds
    (:class:`OpenLoop` / :class:`ClosedLoop`). Frozen and picklable: :func:`run_load` reads it and
    ``shards.run_sharded`` hands it unchanged to every shard.

    * ``phase``: the records' phase (``measure``, ``warmup``, ...).
    * ``drain_timeout_s``: how long requests still running when sending stops may take before they
      are cancelled (their records get ``error_type = cancelled``); None: no limit.
    * ``self_check``: the thresholds above which the client is taken to be saturated (§4.2.5).
    * ``pacer``: how the open loop waits for each send time (pacer.py: ``"auto"`` picks a kernel
      timerfd where there is one, else a loop timer to the due time minus its measured wake-up
      error; ``"spin"`` is the previous yield-spin for the last ``spin_ms``), or a :class:`Pacer`
      (in process only: it cannot be sent to a shard). A given ``spin_ms`` alone selects ``"spin"``
      (``spin_ms=0``: the loop timer alone).
    * ``sends_first`` (open loop): a response read or a finished record whose processing would
      still run when the next send falls due waits for that send's hand-over first (its stamp is
      taken before; :class:`_SendsFirst`).
    * ``gc_freeze``: keep the cyclic garbage collector from walking the growing set of live
      records during the run (full collections otherwise stall the loop for tens of ms and show up
      as send lag); cyclic garbage made during the run is collected after it.
    * ``achieved_from_sends``: the achieved rate over the first to the last T_submit (what a run
      that keeps its records reports); None: so when records are kept, else sends over the send
      window (the warm-up's figure; a shard reports its own so, shards/core.py).
    * ``stop``: asked with the live :class:`LoadProgress` before each send; True ends the sending
      (the warm-up's "enough requests and tokens", §4.5.1). In process only: a shard would judge
      its own share of the progress, so ``run_sharded`` raises ``NotShardable``.

    Room for what comes next:

    * **Stopping when an SLO verdict is settled** (issue 47) is a ``stop``: an object whose
      ``__call__(progress)`` answers True once every SLO is decided. It reads each finished
      record through the caller's ``on_record`` and decides only at its look points (a fixed
      schedule of completion counts, read off ``progress.completed``); once it answers True no
      request is sent and those in flight finish and are recorded (the drain, not a
      cancellation), and the result's ``parameters["stop_predicate"]`` is True.
    * **A request schedule** from a trace or a rate shape (issue 50) is not an option but the load
      and the specs: its send times are an :class:`ArrivalProcess` whose ``offsets_ns()`` yields
      them (``shards.core.DealtArrival`` does so for a shard's share of a schedule, ``shapes.ShapedArrival``
      for a rate shape, and ``plan_shards`` deals any finite one), given as ``OpenLoop.arrival``, with the trace's
      requests as the specs. A **session source** (a conversation's turn k+1 sent after turn k's
      answer, ``workloads.sessions.SessionSource``) is the specs iterable; the runner hands each
      finished record to its driver (``loadgen/sessions.py``, ``_Runner.finished``), and
      only session starts follow the arrival process (a closed loop of N holds N sessions).
    """

    phase: str = "measure"
    drain_timeout_s: float | None = 120.0
    self_check: SelfCheck = SelfCheck()
    pacer: str | Pacer = "auto"
    spin_ms: float | None = None
    sends_first: bool = True
    gc_freeze: bool = True
    achieved_from_sends: bool | None = None
    stop: Callable[[LoadProgress], bool] | None = None

    def __post_init__(self) -> None:
        if self.drain_timeout_s is not None and self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s}")
        if isinstance(self.pacer, str) and self.pacer not in PACERS:
            raise ValueError(f"pacer must be one of {PACERS}, got {self.pacer!r}")

    def make_pacer(self) -> tuple[Pacer, bool]:
        """The open loop's pacer and whether it was made here (then the run closes it)."""
        if not isinstance(self.pacer, str):
            return self.pacer, False
        kind = "spin" if self.spin_ms is not None and self.pacer == "auto" else self.pacer
        spin = 1.5 if self.spin_ms is None else self.spin_ms
        return make_pacer(kind, spin_ms=spin, clock=time.perf_counter_ns), True


@dataclass(frozen=True)
class LagStats:
    """A latency-like sample summary in milliseconds."""

    n: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @classmethod
    def of_ns(cls, values: Iterable[int | float]) -> LagStats:
        """The summary of ``values`` in ns: mean, max and the package's percentile rule
        (``measure.stats``: numpy's linear interpolation)."""
        a = np.fromiter(values, dtype=np.float64)
        if a.size == 0:
            return cls(0, None, None, None, None, None)
        a = a / 1e6
        mean = float(a.mean())  # before the sort: the same summation order as the samples came
        a.sort()
        p50, p90, p99 = numpy_percentiles_sorted(a, _LAG_PERCENTILES)
        return cls(int(a.size), mean, float(p50), float(p90), float(p99), float(a[-1]))


@dataclass
class LoadProgress:
    """Live counters (read by ``until`` predicates and progress hooks)."""

    sent: int = 0
    completed: int = 0
    ok: int = 0
    failed: int = 0
    cancelled: int = 0
    output_tokens: int = 0
    in_flight: int = 0


@dataclass
class SendSpan:
    """The first and last T_submit of a run and how many requests were submitted (§4.2.3's achieved
    rate), tallied per record instead of kept per record."""

    count: int = 0
    first_ns: int = 0
    last_ns: int = 0

    def add(self, sent_ns: int) -> None:
        """One record's ``sent_ns`` (0: never submitted, not counted)."""
        if not sent_ns:
            return
        if not self.count or sent_ns < self.first_ns:
            self.first_ns = sent_ns
        if not self.count or sent_ns > self.last_ns:
            self.last_ns = sent_ns
        self.count += 1

    def rate(self) -> float | None:
        """Sends per second from the first to the last submission; None below two distinct times."""
        if self.count >= 2 and self.last_ns > self.first_ns:
            return (self.count - 1) / ((self.last_ns - self.first_ns) / 1e9)
        return None


class RecordSink(Protocol):
    """Where finished records go as they complete (e.g. ``storage.RunWriter``)."""

    def write(self, record: RequestRecord) -> None: ...


@dataclass
class LoadResult:
    """Outcome of one load run (one load level / phase)."""

    phase: str
    load_model: str  # "open" | "closed"
    parameters: dict[str, Any]
    records: Sequence[RequestRecord]  # empty unless kept (run_load keep_records); a measured run's: on disk
    transport: str
    clock_anchor: ClockAnchor
    start_ns: int
    send_end_ns: int  # when the last request was submitted (stop condition reached)
    end_ns: int  # when the last request finished (after the drain)
    sent: int
    completed: int  # finished, cancelled ones excluded
    ok: int
    cancelled: int
    errors: dict[str, int]
    output_tokens: int
    requested_rate: float | None
    achieved_rate: float | None  # sends per second over the send window
    completion_rate: float | None  # successful completions per second over start..end
    concurrency_target: int | None
    concurrency_mean: float  # time-weighted mean in flight over the send window
    concurrency_max: int
    concurrency_samples: list[tuple[int, int]]  # (ns since start, in flight)
    send_lag: LagStats  # the schedule lag, hand-over − intended (stored as "send_lag"; see schedule_lag)
    loop_delay: LagStats
    valid: bool
    invalid_reason: str | None
    self_check: SelfCheck = field(default_factory=SelfCheck)
    client_delay: ClientDelay | None = None  # the client's own delay while receiving (selfcheck.py)
    submit_lag: LagStats | None = None  # sent (T_submit) − intended; None where not computed
    pacer: str | None = None  # the open loop's pacer (pacer.py)
    collector_backlog_max: int | None = None  # most finished records waiting at once to be finalised; None: not kept (shards)
    sessions: dict[str, Any] | None = None  # a session run's tally (loadgen/sessions.py); None: not a session run

    @property
    def schedule_lag(self) -> LagStats:
        """Hand-over to the transport − intended send time: the client's own pacing (§4.2.5)."""
        return self.send_lag

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def send_window_s(self) -> float:
        return (self.send_end_ns - self.start_ns) / 1e9

    def to_json(self, *, include_records: bool = False, keep_text: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "phase", "load_model", "parameters", "transport", "start_ns", "send_end_ns",
                "end_ns", "sent", "completed", "ok", "cancelled", "errors", "output_tokens",
                "requested_rate", "achieved_rate", "completion_rate", "concurrency_target",
                "concurrency_mean", "concurrency_max", "valid", "invalid_reason", "pacer",
                "collector_backlog_max",
            )
        }
        if self.sessions is not None:  # only a session run says it: other runs' documents are as before
            d["sessions"] = self.sessions
        d["clock_anchor"] = asdict(self.clock_anchor)
        d["start_iso"] = self.clock_anchor.iso(self.start_ns)
        d["end_iso"] = self.clock_anchor.iso(self.end_ns)
        d["duration_s"] = self.duration_s
        d["concurrency_samples"] = [list(s) for s in self.concurrency_samples]
        d["send_lag"] = asdict(self.send_lag)  # the name stored documents read: the schedule lag
        d["schedule_lag"] = d["send_lag"]
        d["submit_lag"] = asdict(self.submit_lag) if self.submit_lag is not None else None
        d["loop_delay"] = asdict(self.loop_delay)
        d["self_check"] = asdict(self.self_check)
        d["client_delay"] = self.client_delay.to_json() if self.client_delay is not None else None
        if include_records:
            d["records"] = [r.to_json(keep_text=keep_text) for r in self.records]
        return d


# --------------------------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------------------------


class _ReceiveProbe(asyncio.Protocol):
    """Socket readability → clock read in a waiting task, over a local socket pair: the path of a
    response chunk (selector → transport → protocol → waiter → task), so the delay it measures is
    the one a chunk timestamp carries (selfcheck.py). It waits for the loop's current turn to end,
    so it reads one turn high rather than low."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.BaseTransport | None = None
        self.out: socket.socket | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    @classmethod
    async def open(cls) -> _ReceiveProbe | None:
        """A probe, or None where the loop cannot take a socket pair."""
        try:
            out, inp = socket.socketpair()
            out.setblocking(False)
            _, probe = await asyncio.get_running_loop().connect_accepted_socket(cls, inp)
        except (OSError, NotImplementedError, ValueError):
            return None
        probe.out = out
        return probe

    async def measure(self) -> int:
        assert self.out is not None
        self.waiter = asyncio.get_running_loop().create_future()
        t0 = time.perf_counter_ns()
        self.out.send(b"x")
        await self.waiter
        return time.perf_counter_ns() - t0

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.out is not None:
            self.out.close()


class _SendsFirst:
    """The open loop's send priority: work that would still run when a send falls due waits for
    that send's hand-over (issue 38: a due send waited behind a batch of response parsing; §4.2.5).

    :meth:`hold` is the client's :data:`~pytest_llmbench.client.stream.Hold`: before a reader parses
    a read of ``n`` events (or the collector finalises a record of ``n`` chunks), estimated to take
    ``base_ns + n × per_event_ns``, it gets a future to wait on when the next send is due before that
    work would end, or a send was made and has not been handed over yet. The send's own first step
    releases the waiters (:meth:`handed_over`), after its transport has queued the request write, so
    the readers resume behind both. A released reader asks again (the next send may be due within
    its work too); work that has waited ``max_hold_ns`` since it first asked runs regardless, so a
    saturated client still reads. A read's stamp is taken before the wait (App. B.1.1).
    """

    __slots__ = ("due", "unsent", "waiter", "base_ns", "per_event_ns", "max_hold_ns", "_loop")

    def __init__(self, base_ns: int = 15_000, per_event_ns: int = 2_500, max_hold_ns: int = 500_000) -> None:
        self.due = 0  # the next send's intended time (0: none armed)
        self.unsent = 0  # sends made (task created) whose first step has not run yet
        self.waiter: asyncio.Future[None] | None = None
        self.base_ns = base_ns
        self.per_event_ns = per_event_ns
        self.max_hold_ns = max_hold_ns
        self._loop = asyncio.get_running_loop()

    def hold(self, now_ns: int, n: int, since_ns: int) -> asyncio.Future[None] | None:
        """What work of ``n`` events that first asked at ``since_ns`` waits for at ``now_ns``, or None."""
        if now_ns - since_ns >= self.max_hold_ns:  # held long enough: it runs, whatever is due
            return None
        if self.unsent or (self.due and self.due - now_ns < self.base_ns + n * self.per_event_ns):
            w = self.waiter
            if w is None:
                w = self.waiter = self._loop.create_future()
            return w
        return None

    async def give_way(self, n: int) -> None:
        """Wait while :meth:`hold` says a send goes first for work of ``n`` events, asking again after
        each release (bounded by ``max_hold_ns``; a removed gate, its ``due`` and ``unsent`` zeroed,
        holds nothing)."""
        since = now = time.perf_counter_ns()
        while (wait := self.hold(now, n, since)) is not None:
            await wait
            now = time.perf_counter_ns()

    def handed_over(self) -> None:
        """A send's first step: one fewer unsent; the waiters resume behind its request write."""
        self.unsent -= 1
        if self.waiter is not None and not self.unsent:
            self._loop.call_soon(self.release)

    def release(self) -> None:
        w, self.waiter = self.waiter, None
        if w is not None and not w.done():
            w.set_result(None)


class _Runner:
    """One run of ``load`` over ``specs``: the senders (:meth:`_dispatch_open`, :meth:`_worker`), the
    collector that finalises and hands on finished records, the self-check monitor, and the result."""

    def __init__(
        self,
        client: LLMClient,
        specs: Iterable[RequestSpec],
        load: OpenLoop | ClosedLoop,
        options: LoadOptions,
        *,
        sink: RecordSink | None,
        on_record: Callable[[RequestRecord], None] | None,
        keep_records: bool,
    ) -> None:
        max_requests, duration_s = load.max_requests, load.duration_s
        if max_requests is not None and max_requests < 0:
            raise ValueError(f"max_requests must be >= 0, got {max_requests}")
        if duration_s is not None and not duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {duration_s}")
        if max_requests is None and duration_s is None and options.stop is None and not isinstance(specs, Sized):
            raise ValueError("an unbounded spec iterator needs max_requests, duration_s or a stop predicate "
                             "(LoadOptions.stop)")
        self.client = client
        self.specs = iter(specs)
        #: where each finished record goes: the runner's ``_finish`` (tallies, sink, ``on_record``), or in a
        #: session run (issue 50) its driver's, which calls that one and then sends the session's next turn
        #: (only the sessions' starts come from ``specs``)
        self.finished: Callable[[RequestRecord], None] = self._finish
        self.sessions: SessionDriver | None = None
        if isinstance(specs, SessionSource):
            self.sessions = SessionDriver(specs, self)
            self.specs = self.sessions.starts()
            self.finished = self.sessions.finish
        self.load = load
        self.options = options
        self.phase = options.phase
        self.max_requests = max_requests
        self.duration_ns = int(duration_s * 1e9) if duration_s is not None else None
        self.until = options.stop
        self.drain_timeout_s = options.drain_timeout_s
        self.check = options.self_check
        self.on_record = on_record
        self.sink = sink
        self.keep = keep_records
        self.sends_first = options.sends_first
        self.from_sends = keep_records if options.achieved_from_sends is None else options.achieved_from_sends
        self.progress = LoadProgress()
        self.records: list[RequestRecord] = []
        self.errors: collections.Counter[str] = collections.Counter()
        # per request and per probe: 8 bytes each (array), never a Python object per value
        self.lags = array("q")  # schedule lag: hand-over − intended
        self.submit_lags = array("q")  # submit lag: sent (T_submit) − intended
        self.loop_delays = array("q")
        self.receive_delays = array("q")
        self.sends = SendSpan()  # first and last T_submit and their count: the achieved rate
        self.cpu_start_s = 0.0
        self.samples: list[tuple[int, int]] = []
        # concurrency integral
        self.inflight = 0
        self.inflight_max = 0
        self.outstanding: dict[int, int] = {}  # id(record) -> hand-over time, oldest first (§4.2.5 evidence)
        self.area = 0  # in-flight × ns
        self.last_change = 0
        # collector
        self.queue: collections.deque[RequestRecord] = collections.deque()
        self.backlog_max = 0  # the queue's largest length (LoadResult.collector_backlog_max)
        self.wake = asyncio.Event()
        self.callback_error: BaseException | None = None
        self.start_ns = 0
        self.stopped = False
        self.pacer_name: str | None = None
        self.gate: _SendsFirst | None = None  # the open loop's send priority, while it sends

    # -- bookkeeping (hot path: counters and a deque append only) --------------------------
    def _change(self, delta: int) -> None:
        now = time.perf_counter_ns()
        self.area += self.inflight * (now - self.last_change)
        self.last_change = now
        self.inflight += delta
        if self.inflight > self.inflight_max:
            self.inflight_max = self.inflight
        self.progress.in_flight = self.inflight

    def _next_spec(self, scheduled_ns: int | None = None) -> RequestSpec | None:
        """The next spec, or None when the run stops. The duration window is judged at
        ``scheduled_ns`` (an open loop's intended send time: a send due inside the window is made
        even if the loop wakes after it closed), else at the wall clock (closed loop)."""
        p = self.progress
        if self.max_requests is not None and p.sent >= self.max_requests:
            return None
        at = time.perf_counter_ns() if scheduled_ns is None else scheduled_ns
        if self.duration_ns is not None and at - self.start_ns >= self.duration_ns:
            return None
        if self.until is not None and self.until(p):
            return None
        return next(self.specs, None)

    async def _one(self, spec: RequestSpec, intended_ns: int, record: RequestRecord | None = None) -> None:
        """One request, its record handed to the collector; ``record``: made ahead (the open loop's)."""
        gate = self.gate
        if gate is not None:  # this step hands the request over (client.send runs to its first wait)
            gate.handed_over()
        rec = record if record is not None else RequestRecord.from_spec(spec, phase=self.phase)
        now = time.perf_counter_ns()
        rec.inflight_at_send = self.inflight
        rec.oldest_outstanding_ns = now - next(iter(self.outstanding.values())) if self.outstanding else 0
        self.outstanding[id(rec)] = now
        self._change(+1)
        try:
            await self.client.send(spec, record=rec, intended_ns=intended_ns, finalize=False)
        finally:
            self._change(-1)
            self.outstanding.pop(id(rec), None)
            queue = self.queue
            queue.append(rec)
            if len(queue) > self.backlog_max:
                self.backlog_max = len(queue)
            self.wake.set()

    # -- collector: token counting, storage, callbacks, off the submission path ------------
    async def _collect(self) -> None:
        """Finalise, store and hand on finished records, off the submission path.

        Each loop turn takes the records that finished before it, one at a time (the open loop's
        gate lets a due send go first before each), then yields. So the backlog never outgrows
        what the readers finish in one turn: a client that finishes several records per turn
        (a closed loop at its limit) still finalises them during the run, its CPU counted there,
        and memory does not grow with the run (issue 30: one record per turn let a closed loop's
        backlog, every waiting record with its parsed chunks, grow by the thousands).
        """
        queue = self.queue
        while True:
            await self.wake.wait()
            self.wake.clear()
            while queue:
                for _ in range(len(queue)):  # the records this turn starts with
                    gate = self.gate
                    if gate is not None:  # a send due before this record's finalising would end goes first
                        await gate.give_way(len(queue[0].chunk_ns))
                    self.finished(queue.popleft())
                if queue:  # the readers' turn (finalize tokenizes, the sink writes to disk); none left: wait
                    await asyncio.sleep(0)
            if self.stopped and not queue:
                return

    def _finish(self, rec: RequestRecord) -> None:
        """One finished record: finalised, tallied, stored and handed to ``on_record``."""
        p = self.progress
        self.client.finalize(rec)
        p.completed += 1
        if rec.error_type is None:
            p.ok += 1
        elif rec.error_type is ErrorType.CANCELLED:
            p.cancelled += 1
        else:
            p.failed += 1
        if rec.error_type is not None:
            self.errors[rec.error_type.value] += 1
        out = rec.output_tokens
        if out:
            p.output_tokens += out
        if rec.intended_ns is not None and rec.sent_ns:
            self.lags.append(rec.handoff_ns - rec.intended_ns)
            self.submit_lags.append(rec.sent_ns - rec.intended_ns)
        self.sends.add(rec.sent_ns)
        if self.sink is not None:
            self.sink.write(rec)
        if self.keep:
            self.records.append(rec)
        if self.on_record is not None and self.callback_error is None:
            try:
                self.on_record(rec)
            except Exception as exc:  # reported after the run; measuring continues
                self.callback_error = exc

    async def _monitor(self, gc_freeze: bool) -> None:
        interval_ns = int(self.check.probe_interval_ms * 1e6)
        every = max(1, round(self.check.concurrency_sample_ms / self.check.probe_interval_ms))
        sleep_s = interval_ns / 1e9
        clock = time.perf_counter_ns
        probe = await _ReceiveProbe.open() if self.check.receive_probe else None
        try:
            await self._sample(probe, interval_ns, every, sleep_s, clock, gc_freeze)
        finally:
            if probe is not None:
                probe.close()

    async def _sample(self, probe: _ReceiveProbe | None, interval_ns: int, every: int, sleep_s: float,
                      clock: Callable[[], int], gc_freeze: bool) -> None:
        for i in itertools.count():
            t0 = clock()
            await asyncio.sleep(sleep_s)
            t1 = clock()
            self.loop_delays.append(max(0, t1 - t0 - interval_ns))
            if probe is not None:
                self.receive_delays.append(await probe.measure())
            if gc_freeze:
                # O(1): move surviving objects (kept records, connections) out of the collected
                # generations so that a full collection never walks the growing record list
                gc.freeze()
            if i % every == 0:
                self.samples.append((t1 - self.start_ns, self.inflight))

    # -- the two load models ----------------------------------------------------------------
    async def _dispatch_open(self, arrival: ArrivalProcess, pacer: Pacer, tasks: set[asyncio.Task[None]]) -> None:
        clock = time.perf_counter_ns
        offsets = arrival.offsets_ns()
        start, duration = self.start_ns, self.duration_ns
        progress, one, next_spec = self.progress, self._one, self._next_spec
        create_task = asyncio.create_task
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()  # True: ended by the duration
        pending: list[Any] = []  # [intended ns, spec, its record made ahead or None] of the next send
        gate = self.gate
        phase, call_soon = self.phase, asyncio.get_running_loop().call_soon

        def prepare(spec: RequestSpec) -> None:
            """The next send's record, made while the loop waits for its due time (after the send
            just made has taken its first step), so that its own first step does not."""
            if pending and pending[1] is spec and pending[2] is None:
                pending[2] = RequestRecord.from_spec(spec, phase=phase)

        def step() -> None:
            """Send what is due, then arm the pacer for the next send. It runs in the pacer's own
            callback (a timerfd's: in the loop's poll), so a request task is created as the timer
            fires, not a loop turn later in a dispatcher task woken by it."""
            try:
                while True:
                    if pending:
                        t, spec, rec = pending
                        if t > clock():
                            if gate is not None:
                                gate.due = t
                            pacer.call_at(t, step)
                            if rec is None:
                                call_soon(prepare, spec)
                            return
                        pending.clear()
                        if gate is not None:
                            gate.unsent += 1
                        task = create_task(one(spec, t, rec))
                        progress.sent += 1
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                    off = next(offsets, None)
                    if off is None:  # a finite schedule (a shard's share of one) ran out
                        done.set_result(False)
                        return
                    if duration is not None and off >= duration:
                        done.set_result(True)
                        return
                    t = start + off
                    spec = next_spec(t)
                    if spec is None:
                        done.set_result(False)
                        return
                    pending[:] = (t, spec, None)
            except Exception as exc:  # a bug, or the specs iterator failed: end the run with it
                if not done.done():
                    done.set_exception(exc if not isinstance(exc, StopIteration) else RuntimeError(repr(exc)))

        step()
        try:
            by_duration = await done
        finally:
            pacer.cancel()
            if gate is not None:  # nothing more to send: nothing waits for a send
                gate.due = 0
                gate.release()
        if by_duration and duration is not None:
            # the send window is the whole duration, even if the next arrival falls after it
            rest = start + duration - clock()
            if rest > 0:
                await asyncio.sleep(rest / 1e9)

    async def _worker(self) -> None:
        free_ns = self.start_ns
        while True:
            spec = self._next_spec()
            if spec is None:
                return
            self.progress.sent += 1
            await self._one(spec, free_ns)
            free_ns = time.perf_counter_ns()

    async def run(self, start_ns: int | None = None) -> LoadResult:
        """The run from ``start_ns`` (a ``perf_counter_ns`` reading; default now), then its result."""
        load, gc_freeze = self.load, self.options.gc_freeze
        anchor = ClockAnchor.now()
        self.cpu_start_s = _cpu_time()
        self.start_ns = self.last_change = start_ns if start_ns is not None else time.perf_counter_ns()
        collector = asyncio.create_task(self._collect())
        if gc_freeze:
            gc.freeze()
        monitor = asyncio.create_task(self._monitor(gc_freeze))
        running: set[asyncio.Task[None]] = set()
        try:
            if self.sessions is not None:  # starts by the load model, later turns after each answer
                open_loop = (lambda: self._run_open(load, running)) if isinstance(load, OpenLoop) else None
                await self.sessions.drive(running, open_loop, getattr(load, "concurrency", 0))
            elif isinstance(load, OpenLoop):
                await self._run_open(load, running)
            else:
                running.update(asyncio.create_task(self._worker()) for _ in range(load.concurrency))
                # the send window ends when the first worker finds no more work, or at the
                # duration even if every worker is still waiting on a slow response
                window = None
                if self.duration_ns is not None:
                    window = max(0.0, (self.start_ns + self.duration_ns - time.perf_counter_ns()) / 1e9)
                await asyncio.wait(running, timeout=window, return_when=asyncio.FIRST_COMPLETED)
            send_end = time.perf_counter_ns()
            area_at_send_end = self.area + self.inflight * (send_end - self.last_change)
            end = await self._drain(running)
        finally:
            leftover = [t for t in running if not t.done()]
            for t in leftover:  # the run itself was cancelled (Ctrl-C): stop its requests too ...
                t.cancel()
            if leftover:  # ... and let each hand its record (marked cancelled) to the collector
                await asyncio.gather(*leftover, return_exceptions=True)
            monitor.cancel()
            self.stopped = True
            self.wake.set()
            await asyncio.gather(monitor, return_exceptions=True)
            await collector
            if gc_freeze:
                gc.unfreeze()
        result = self._result(anchor, send_end, end, area_at_send_end)
        if self.sessions is not None:
            result.sessions = self.sessions.stats()
        return result

    async def _run_open(self, load: OpenLoop, tasks: set[asyncio.Task[None]]) -> None:
        """The open loop's sending, on its pacer, with the send priority while it sends."""
        pacer, made_here = self.options.make_pacer()
        self.pacer_name = pacer.name
        set_hold = getattr(self.client, "set_hold", None)  # a stand-in client may have none
        if self.sends_first:
            self.gate = _SendsFirst()
            if set_hold is not None:
                set_hold(self.gate.hold)
        try:
            await self._dispatch_open(load.arrival, pacer, tasks)
        finally:
            if made_here:  # made here: closed here (a timerfd)
                pacer.close()
            if self.gate is not None:  # the drain runs without: no send is left to wait for
                if set_hold is not None:
                    set_hold(None)
                gate, self.gate = self.gate, None
                gate.due = gate.unsent = 0
                gate.release()

    async def _drain(self, running: set[asyncio.Task[None]]) -> int:
        """Wait for the requests still running for at most ``drain_timeout_s``, then cancel the rest;
        returns the run's end (``perf_counter_ns``)."""
        if running:
            _, pending = await asyncio.wait(set(running), timeout=self.drain_timeout_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        end = time.perf_counter_ns()
        for t in running:  # a bug in the runner itself must not pass silently
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        return end

    # -- the result -------------------------------------------------------------------------
    def _result(self, anchor: ClockAnchor, send_end: int, end: int, area: int) -> LoadResult:
        load, p = self.load, self.progress
        window = send_end - self.start_ns
        achieved = self.sends.rate() if self.from_sends else p.sent / (window / 1e9) if window > 0 else None
        send_lag = LagStats.of_ns(self.lags)
        loop_delay = LagStats.of_ns(self.loop_delays)
        client_delay = ClientDelay.of_samples(self.receive_delays, self.loop_delays,
                                              _cpu_time() - self.cpu_start_s, (end - self.start_ns) / 1e9)
        reasons = saturation_reasons(self.check, send_lag if isinstance(load, OpenLoop) else None, loop_delay)
        params, requested_rate, target = load_parameters(load, self.drain_timeout_s, stop=self.until is not None)
        return LoadResult(
            phase=self.phase,
            load_model="open" if isinstance(load, OpenLoop) else "closed",
            parameters=params,
            records=self.records,
            transport=self.client.transport_name,
            clock_anchor=anchor,
            start_ns=self.start_ns,
            send_end_ns=send_end,
            end_ns=end,
            sent=p.sent,
            completed=p.completed - p.cancelled,
            ok=p.ok,
            cancelled=p.cancelled,
            errors=dict(self.errors),
            output_tokens=p.output_tokens,
            requested_rate=requested_rate,
            achieved_rate=achieved,
            completion_rate=p.ok / ((end - self.start_ns) / 1e9) if end > self.start_ns else None,
            concurrency_target=target,
            concurrency_mean=area / window if window > 0 else 0.0,
            concurrency_max=self.inflight_max,
            concurrency_samples=self.samples,
            send_lag=send_lag,
            loop_delay=loop_delay,
            valid=not reasons,
            invalid_reason="; ".join(reasons) or None,
            self_check=self.check,
            client_delay=client_delay,
            submit_lag=LagStats.of_ns(self.submit_lags),
            pacer=self.pacer_name,
            collector_backlog_max=self.backlog_max,
        )


def saturation_reasons(check: SelfCheck, send_lag: LagStats | None, loop_delay: LagStats | None,
                       send_lag_name: str = "send-lag (schedule lag)") -> list[str]:
    """Why the client was saturated (§4.2.5), by ``check``'s thresholds: the open loop's schedule lag
    (``send_lag``; None: a closed loop, not judged) and the event-loop delay (None: not judged here),
    each with at least ``check.min_samples`` samples; empty: valid."""
    reasons = []
    if send_lag is not None and send_lag.n >= check.min_samples:
        if send_lag.p99_ms is not None and send_lag.p99_ms > check.max_send_lag_p99_ms:
            reasons.append(
                f"client saturated: {send_lag_name} p99 {send_lag.p99_ms:.2f} ms > "
                f"{check.max_send_lag_p99_ms} ms (§4.2.5)"
            )
    if loop_delay is not None and loop_delay.n >= check.min_samples and loop_delay.p99_ms is not None:
        if loop_delay.p99_ms > check.max_loop_delay_p99_ms:
            reasons.append(
                f"client saturated: event-loop delay p99 {loop_delay.p99_ms:.2f} ms > "
                f"{check.max_loop_delay_p99_ms} ms"
            )
    return reasons


def load_parameters(load: OpenLoop | ClosedLoop, drain_timeout_s: float | None, *, stop: bool
                    ) -> tuple[dict[str, Any], float | None, int | None]:
    """A run's ``LoadResult.parameters`` (the load model's, then its stop rules), its requested rate
    (open loop) and its concurrency target (closed loop)."""
    if isinstance(load, OpenLoop):
        a = load.arrival
        params: dict[str, Any] = {"arrival": {"kind": a.kind, "rate": a.rate, "seed": a.seed, "cv": a.cv}}
        schedule = getattr(a, "schedule", None)  # a rate shape (shapes.ShapedArrival): its expression and segments
        if schedule is not None:
            params["arrival"]["schedule"] = schedule.to_json()
        requested_rate: float | None = a.rate
        target = None
    else:
        params = {"concurrency": load.concurrency}
        requested_rate = None
        target = load.concurrency
    params.update(
        max_requests=load.max_requests,
        duration_s=load.duration_s,
        drain_timeout_s=drain_timeout_s,
        stop_predicate=stop,
    )
    return params, requested_rate, target


async def run_load(
    client: LLMClient,
    specs: Iterable[RequestSpec],
    load: OpenLoop | ClosedLoop,
    options: LoadOptions | None = None,
    *,
    sink: RecordSink | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    keep_records: bool = True,
    start_ns: int | None = None,
) -> LoadResult:
    """Run ``load`` over ``specs`` through ``client``, driven as ``options`` say (:class:`LoadOptions`,
    default: its defaults), and return the :class:`LoadResult`.

    ``specs`` may be a list or any iterator (e.g. ``itertools.cycle(specs)`` with a duration).
    ``on_record`` is called once per finished record, from a collector task, off the submission
    path (use it for live progress); if it raises, the run still completes and the exception is
    raised at the end. ``sink.write`` receives every record as it completes (``storage.RunWriter``);
    ``keep_records=False`` keeps no record in ``LoadResult.records``, so memory stays bounded (per
    request only the two lags, 8 bytes each, are kept for their percentiles). ``start_ns`` (a
    ``perf_counter_ns`` reading, default now): the time the open-loop schedule is anchored to, so
    that load-generator shards (shards/) started at one common moment send on one schedule.
    """
    if isinstance(load, ClosedLoop) and client.max_connections is not None and client.max_connections < load.concurrency:
        raise ValueError(
            f"client pool of {client.max_connections} connections cannot hold concurrency {load.concurrency}: "
            "requests would queue inside the client (size the pool with LLMClient(..., max_connections=N))"
        )
    runner = _Runner(client, specs, load, options if options is not None else LoadOptions(),
                     sink=sink, on_record=on_record, keep_records=keep_records)
    result = await runner.run(start_ns)
    if runner.callback_error is not None:
        raise runner.callback_error
    return result


async def run_open_loop(
    client: LLMClient,
    specs: Iterable[RequestSpec],
    arrival: ArrivalProcess,
    options: LoadOptions | None = None,
    *,
    max_requests: int | None = None,
    duration_s: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> LoadResult:
    """Open-loop run (§4.2.3), its records kept; as :func:`run_load`."""
    return await run_load(client, specs, OpenLoop(arrival, max_requests, duration_s), options, on_record=on_record)


async def run_closed_loop(
    client: LLMClient,
    specs: Iterable[RequestSpec],
    concurrency: int,
    options: LoadOptions | None = None,
    *,
    max_requests: int | None = None,
    duration_s: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> LoadResult:
    """Closed-loop run holding ``concurrency`` in flight (§4.2.4), its records kept; as :func:`run_load`."""
    return await run_load(client, specs, ClosedLoop(concurrency, max_requests, duration_s), options,
                          on_record=on_record)
