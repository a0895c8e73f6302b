"""A run's records -> per-request and aggregate metrics, summarised once (§4.6.3, §5.1.4, §5.2.4, §5.4.3-4, §5.5.4, §5.8.4).

:func:`summarize` turns a run's records (a :class:`~pytest_llmbench.measure.frame.RunFrame`, or the
:class:`~pytest_llmbench.common.records.RequestRecord` list it is built from) into a :class:`RunMetrics`:
one :class:`PerRequest` table (numpy arrays, one entry per record, NaN where undefined), pooled ITL
samples, :class:`~pytest_llmbench.measure.stats.Distribution` summaries with confidence intervals and
throughput scalars. It runs every metric of ``measure/metrics/`` in the order their declarations give
(:func:`registry.evaluation_order`) and aggregates each as its declaration says: a distribution over
the successful (or every sent) request, a pooled distribution, a scalar. Record times are
``perf_counter_ns``; every figure is reported in seconds or per-second rates. Every definition chosen
where sources differ is in :data:`DEFINITIONS` (printed by the report) and in ``docs/metrics.md``.

Conventions (named in :data:`DEFINITIONS`):

* Latency metrics are defined for successful requests only (``record.ok``); failed requests
  count in error/success rates and goodput denominators, ``cancelled`` ones in neither.
* TTFT follows §5.1.3.1 (``record.first_token_ns``: first non-whitespace *content*; reasoning
  excluded). ``ttft_any_chunk`` uses the first SSE chunk of any kind, ``ttfa`` the first non-whitespace
  fragment of any kind (reasoning, tool call, content; the phases, ``metrics/phases.py``).
* ITL per §5.4.3 from the first content token on, under one of the §4.6.3 options:
  ``A`` inter-chunk time (reported as "time between chunks"), ``B`` every token of a chunk gets
  the chunk's arrival time (the draft's literal text: an N-token chunk adds N-1 zero samples),
  ``C`` server per-token timestamps (``record.server_token_ns``).
* Throughput uses the steady-state window (§5.2.3 step 3c, §5.2.3.2): of the send window D (the
  load's start, or the first submission, to the last submission), the first 10% is ramp-up and
  the drain after the last send is left out: [start + 0.1·D, start + D]; events (tokens at their chunk's arrival, requests at completion, input
  tokens at the first token) are counted inside the window and divided by its length.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..common.records import FAILURE_TYPES, ErrorType, RequestRecord
from . import experience as ux
from . import registry
from .frame import FrameBuilder, RunFrame
from .metrics._kit import Windows
from .metrics.itl import ItlSamples, RunTokens
from .metrics.latency import INPUT_LENGTH_BUCKETS
from .metrics.sessions import SessionFigures
from .stats import DEFAULT_PERCENTILES, Distribution, Estimate, Modality, TailShape, distribution, modality, tail_shape
from .stats import DEFINITIONS as STATS_DEFINITIONS
from .stats.core import LazySorted

__all__ = [
    "DEFINITIONS",
    "INPUT_LENGTH_BUCKETS",
    "ITL_OPTIONS",
    "ItlSamples",
    "PerRequest",
    "RequestSLO",
    "RunMetrics",
    "SummaryOptions",
    "DEFINITIONS_VERSION",
    "steady_state_window",
    "summarize",
    "throughput_at_ttft_p99",
]

#: §4.6.3 options and their report labels.
ITL_OPTIONS: dict[str, str] = {
    "A": "time between chunks (option A: inter-chunk time)",
    "B": "ITL, option B: every token of a chunk gets the chunk's arrival time",
    "C": "ITL, option C: server-reported per-token timestamps",
}

#: §5.2.3.2: the first 10% of the test duration is ramp-up, excluded from steady-state figures.
STEADY_STATE_FRACTION = 0.1

#: The version of the metric definitions: a stored run summarised under another version is not compared
#: with this one as it is (gate comparability key). 2: throughput over [start + 0.1·D, start + D] with D
#: the send duration and every request's streamed tokens (issue 36); 1: the run's span to the last response.
DEFINITIONS_VERSION = 2


def steady_state_window(start: float, end: float, fraction: float = STEADY_STATE_FRACTION) -> tuple[float, float]:
    """The §5.2.3.2 steady-state window of a test running from ``start`` to ``end`` (any one time unit).

    Throughput is the tokens in the window divided by its length (§5.2.3 step 3c, §5.2.4); the
    first ``fraction`` of the test duration is ramp-up. The one definition: ``summarize`` applies
    it to the load's send window (else the run's span), procedure 5.2 to the send window too.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"steady_state_fraction must be in [0, 1), got {fraction}")
    return start + fraction * (end - start), end


@dataclass(frozen=True)
class SummaryOptions:
    """How :func:`summarize` summarises a run, beside what it summarises (the records, their phase, the
    send window, the §4.6.3 ITL option decided from them and the test's SLOs); the same for every run
    of a session.

    * ``steady_state_fraction``: the ramp-up share of the send window left out of the steady-state
      window (§5.2.3.2, 10 %).
    * ``gpu_count``: divides the throughputs per GPU (§5.2.4); None: not reported.
    * ``percentiles``, ``confidence``: the percentiles every distribution carries (§5.1.4.1) and the
      confidence of every interval; ``batches``: the sub-windows of a rate's batch-means interval.
    * The experience metrics (:mod:`pytest_llmbench.measure.experience`): ``prefill_deadline``
      (Etalon ``D_p``; None: a fit of the run's TTFTs), ``decode_deadline`` (``D_d``, s),
      ``reading_speed`` (V, tokens/s), ``ttft_allowance`` (s) and ``alpha``.
    """

    steady_state_fraction: float = STEADY_STATE_FRACTION
    gpu_count: int | None = None
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    confidence: float = 0.95
    batches: int = 10
    prefill_deadline: ux.PrefillDeadline | None = None
    decode_deadline: float = ux.DEFAULT_DECODE_DEADLINE
    reading_speed: float = ux.DEFAULT_READING_SPEED
    ttft_allowance: float = ux.DEFAULT_TTFT_ALLOWANCE
    alpha: float = ux.DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if not 0.0 <= self.steady_state_fraction < 1.0:
            raise ValueError(f"steady_state_fraction must be in [0, 1), got {self.steady_state_fraction}")
        if self.gpu_count is not None and self.gpu_count <= 0:
            raise ValueError(f"gpu_count must be a positive integer, got {self.gpu_count}")
        object.__setattr__(self, "percentiles", tuple(self.percentiles))


#: Definitions of every metric (from the metric declarations, registry.py) and of the statistics used.
DEFINITIONS: dict[str, str] = {
    **registry.definitions(),
    **{f"ux_{k}": v for k, v in ux.DEFINITIONS.items()},
    **{f"stats_{k}": v for k, v in STATS_DEFINITIONS.items()},
}

#: Units of the per-request columns and distributions (the declarations).
UNITS: dict[str, str] = {m.name: m.unit for m in registry.METRICS.values() if m.kind != "scalar"}



def _canonical(name: str) -> str | None:
    """The metric an alias names (None: no metric)."""
    try:
        return registry.lookup(name).name
    except KeyError:
        return None


def _per_request_metrics() -> tuple[str, ...]:
    """The per-request table's metrics: every computed one not summarised as pooled samples or a scalar."""
    return tuple(m.name for m in registry.METRICS.values()
                 if m.compute is not None and m.kind != "scalar" and m.aggregation != registry.POOLED)


@runtime_checkable
class RequestSLO(Protocol):
    """A per-request SLO (slo.py builds them): the metric it reads and a vectorised check."""

    metric: str

    def ok(self, values: np.ndarray) -> np.ndarray:
        """One bool per request: True where ``values`` meets the objective."""
        ...


@dataclass
class PerRequest:
    """One entry per record (sorted by submission time), NaN where a metric is undefined.

    Columns: see :data:`UNITS` plus ``index``, ``request_class``, ``error_type`` (object
    arrays), ``ok``, ``failed``, ``cancelled`` (bool). ``itl`` holds the pooled samples of each
    §4.6.3 option that could be computed.
    """

    columns: dict[str, np.ndarray]
    itl: dict[str, ItlSamples] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.columns["ok"].size)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            alias = _canonical(name)  # an alias (e.g. ttft_incl_reasoning: ttfa)
            if alias in self.columns:
                return self.columns[alias]
            raise KeyError(f"unknown per-request metric {name!r}; known: {sorted(self.columns)}") from None

    def names(self) -> list[str]:
        return sorted(self.columns)

    def to_json(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for k, v in self.columns.items():
            if v.dtype.kind == "f":
                out[k] = [None if not math.isfinite(x) else x for x in v.tolist()]
            else:
                out[k] = [str(x) if isinstance(x, ErrorType) else x for x in v.tolist()]
        return out


@dataclass
class RunMetrics:
    """Everything :func:`summarize` measured for one run (one load level)."""

    distributions: dict[str, Distribution]
    scalars: dict[str, Estimate]
    errors_by_type: dict[str, int]
    per_request: PerRequest
    windows: dict[str, str]
    ttft_by_input_length: dict[str, Distribution] = field(default_factory=dict)
    #: a multi-turn session run's figures by turn and per session (metrics/sessions.py, issue 50); None: none
    sessions: SessionFigures | None = None
    itl_option: str = "B"
    itl_modality: Modality | None = None
    itl_tail: TailShape | None = None
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    steady_window: tuple[float, float] = (math.nan, math.nan)  # seconds after first submission
    definitions_version: int = DEFINITIONS_VERSION
    prefill_deadline: ux.PrefillDeadline | None = None
    #: option-B token times (``RunTokens``, read block by block); None for a run whose chunks were spilled to
    #: disk during the run (more than ``frame.SPILL_AT`` of them): the files go when the summary is made
    tokens: RunTokens | None = field(default=None, repr=False)

    def percentile(self, name: str, p: float) -> Estimate:
        """Any percentile of a distribution, computed from its kept samples, with its CI."""
        return self._dist(name).percentile(p)

    def _dist(self, name: str) -> Distribution:
        try:
            return self.distributions[name]
        except KeyError:
            alias = _canonical(name)
            if alias in self.distributions:
                return self.distributions[alias]
            raise KeyError(f"unknown distribution {name!r}; known: {sorted(self.distributions)}") from None

    def in_steady_window(self, name: str) -> Distribution:
        """``name`` over the successful requests *sent* inside the steady-state window (§5.2.3.2): the
        latencies of the load the throughput figures measured, without the ramp-up's requests (5.2's
        Table 4). Computed from the per-request column, with the run's percentiles and confidence."""
        d = self._dist(name)
        pr = self.per_request
        sent = pr["sent"]
        w0, w1 = self.steady_window
        rows = pr["ok"] & (sent >= w0) & (sent <= w1)
        return distribution(f"{name} (sent in the steady-state window)", pr[name][rows], d.unit,
                            tuple(sorted(d.percentiles)) or DEFAULT_PERCENTILES, confidence=d.mean.confidence)

    def _count(self, name: str) -> int:
        e = self.scalars.get(name)
        return int(e.value) if e is not None and e.value == e.value else 0

    @property
    def phase_unobserved(self) -> str | None:
        """Why this run's reasoning-phase figures (``registry.PHASE_METRICS``) cannot be observed: the server
        hid reasoning (usage counts reasoning tokens, no fragment arrived) or may have (not determinable);
        None when they can (issue 49). An SLO on such a figure is INCONCLUSIVE with this reason (slo.py)."""
        hidden, unknown = self._count("hidden_reasoning_requests"), self._count("reasoning_undetermined_requests")
        if hidden:
            tokens = self._count("hidden_reasoning_tokens")
            return (f"hidden reasoning: {hidden} requests had {tokens} reasoning tokens (usage) and no reasoning "
                    "streamed; the thinking phase was not observed")
        if unknown:
            return (f"hidden reasoning not determinable: {unknown} requests had far more completion tokens than "
                    "arrived and the server sent no reasoning count")
        return None

    def reasoning_findings(self) -> list[str]:
        """What a reader must know about this run's reasoning (issue 49): hidden or undeterminable reasoning
        and what it does to TTFT, ITL and output tok/s, and the requests that ended while thinking."""
        out: list[str] = []
        why = self.phase_unobserved
        if why is not None:
            out.append(f"{why}: TTFT and ITL include unobserved thinking, output tok/s counts tokens the client "
                       "never saw (compare visible_output_throughput)")
        ended = self._count("ended_while_thinking")
        if ended:
            out.append(f"{ended} requests ended while thinking (no content: counted, not in TTFT)")
        return out

    def scalar(self, name: str) -> Estimate:
        try:
            return self.scalars[name]
        except KeyError:
            raise KeyError(f"unknown scalar {name!r}; known: {sorted(self.scalars)}") from None

    def per_request_values(self, name: str) -> np.ndarray:
        """A per-request metric column (for per-request SLOs); NaN where undefined."""
        return self.per_request[name]

    def fluid_token_generation_rate(self, *, min_fluidity: float = 0.9,
                                    request_fraction: float = 0.99) -> ux.FluidRate:
        """Etalon's fluid token generation rate over this run's successful + failed requests."""
        if self.tokens is None or self.prefill_deadline is None:
            raise ValueError("this run has no token timing / TTFT to derive a prefill deadline from (a run of "
                             "more chunks than frame.SPILL_AT keeps no token times after its summary: its "
                             "fluid_token_rate is in its scalars)")
        pr = self.per_request
        ok = pr["ok"]
        sub = self.tokens.select(ok)
        dp = self.prefill_deadline(pr["isl"][ok])
        return ux.fluid_token_generation_rate(sub, dp, failed=int(pr["failed"].sum()),
                                              min_fluidity=min_fluidity,
                                              request_fraction=request_fraction)

    def to_json(self, *, per_request: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "itl_option": self.itl_option,
            "itl_method": ITL_OPTIONS[self.itl_option],
            "distributions": {k: v.to_json() for k, v in self.distributions.items()},
            "scalars": {k: v.to_json() for k, v in self.scalars.items()},
            "errors_by_type": dict(self.errors_by_type),
            "windows": dict(self.windows),
            "steady_window_s": list(self.steady_window),
            "definitions_version": self.definitions_version,
            "ttft_by_input_length": {k: v.to_json() for k, v in self.ttft_by_input_length.items()},
            "itl_modality": self.itl_modality.to_json() if self.itl_modality else None,
            "itl_tail": self.itl_tail.to_json() if self.itl_tail else None,
            "prefill_deadline": self.prefill_deadline.to_json() if self.prefill_deadline else None,
            "definitions": dict(self.definitions),
        }
        if self.sessions is not None:  # only a session run has them: other documents are as before
            d["sessions"] = self.sessions.to_json()
        findings = self.reasoning_findings()
        if findings:  # the phases (issue 49): hidden reasoning, requests that ended while thinking
            d["reasoning_findings"] = findings
        if per_request:
            d["per_request"] = self.per_request.to_json()
        return d


# --------------------------------------------------------------------------------------------
# summarise
# --------------------------------------------------------------------------------------------

_NS = 1e-9  # nanoseconds -> seconds


def _check_itl_option(itl_option: str) -> str:
    opt = itl_option.upper() if isinstance(itl_option, str) else itl_option
    if opt not in ("A", "B", "C", "AUTO"):
        raise ValueError(f"itl_option must be 'A', 'B', 'C' or 'auto' (§4.6.3), got {itl_option!r}")
    return opt


def _inputs(frame: RunFrame) -> dict[str, Any]:
    """What the metrics read of a frame: its columns, the request outcome masks and the run's span."""
    error = frame.error
    ok = np.fromiter((e is None for e in error), dtype=bool, count=frame.n)
    failed = np.fromiter((e is not None and e in FAILURE_TYPES for e in error), dtype=bool, count=frame.n)
    return {
        "n": frame.n, "index": frame.index, "request_class": frame.request_class, "error": error,
        "ok": ok, "failed": failed, "cancelled": ~ok & ~failed, "okf": np.where(ok, 1.0, math.nan),
        "sent_ns": frame.sent, "end_ns": frame.end, "has_end": frame.has_end,
        "duration": (frame.t_end - frame.t0) * _NS, **frame.times, **frame.numbers,
        "reasoning_streamed": frame.reasoning_streamed, "chunk_counts": frame.chunk_counts,
        "chunk_token_sum": frame.chunk_token_sum, "chunks": frame.chunks,
        "server_token_counts": frame.server_token_counts,
    }


#: Values the summary keeps besides the metrics: everything else goes after its last reader.
_KEPT = frozenset({"per_request", "itl_data", "good", "deadline_model", "ttft_by_input_length", "session_figures",
                   "n", "ok", "failed",
                   "error", "duration"})


def _evaluate(values: dict[str, Any]) -> None:
    """Run every metric and derived value into ``values``, each after what it reads; ``per_request``
    (the table the per-request SLOs read) is assembled once its columns exist. An input or derived
    value is dropped after its last reader, so that the per-chunk arrays do not all live at once."""
    per_request = ("index", "request_class", "error", "ok", "failed", "cancelled", *_per_request_metrics())
    order = registry.evaluation_order(values, extra={"per_request": per_request})
    reads = {name: per_request if name == "per_request" else registry.needs(name) for name in order}
    last: dict[str, int] = {}
    for step, name in enumerate(order):
        for p in reads[name]:
            last[p] = step
    drop: dict[int, list[str]] = {}
    for name, step in last.items():
        if name not in _KEPT and name not in registry.METRICS:
            drop.setdefault(step, []).append(name)
    with np.errstate(divide="ignore", invalid="ignore"):
        for step, name in enumerate(order):
            if name == "per_request":
                values[name] = PerRequest(_table(values))
            else:
                values[name] = registry.compute(name)(**{p: values[p] for p in reads[name]})
            for gone in drop.get(step, ()):
                values.pop(gone, None)


def _table(values: dict[str, Any]) -> dict[str, np.ndarray]:
    """The per-request table: identity and outcome columns, then every per-request metric."""
    return {
        "index": values["index"], "request_class": values["request_class"],
        "error_type": np.array([None if e is None else e.value for e in values["error"]], dtype=object),
        "ok": values["ok"], "failed": values["failed"], "cancelled": values["cancelled"],
        **{name: values[name] for name in _per_request_metrics()},
    }


def _aggregate(values: dict[str, Any], percentiles: Sequence[float], confidence: float
               ) -> tuple[dict[str, Distribution], dict[str, Estimate]]:
    """Each metric's figures as its declaration says: distributions and scalars (None: not defined here)."""
    ok = values["ok"]
    dists: dict[str, Distribution] = {}
    scalars: dict[str, Estimate] = {}
    for m in registry.METRICS.values():
        if m.compute is None or m.kind == "column":
            continue
        v = values[m.name]
        if m.kind == "scalar":
            if isinstance(v, dict):
                scalars.update({m.name + suffix: e for suffix, e in v.items()})
            elif v is not None:
                scalars[m.name] = v
        elif m.aggregation == registry.POOLED:
            if v is not None:
                dists[m.name] = v
        else:
            rows = ok if m.over == "ok" else None
            vals = v if rows is None else v[rows]
            if m.always or np.count_nonzero(~np.isnan(vals)):
                d = distribution(m.name, vals, m.unit, percentiles, confidence=confidence, keep_samples=False)
                dists[m.name] = replace(d, samples=LazySorted(v, rows))  # sorted when read: no second copy
    return dists, scalars


def _compact(columns: dict[str, np.ndarray]) -> None:
    """A float column holding one value in every row (NaN where the server sent no such field) becomes a
    read-only ``np.broadcast_to`` of that value: the same figures and JSON, no memory per request."""
    for k, v in columns.items():
        if v.dtype.kind != "f" or v.ndim != 1 or not v.size or v.strides == (0,):
            continue
        first = v[0]
        same = bool(np.isnan(v).all()) if first != first else bool((v == first).all())
        if same:
            columns[k] = np.broadcast_to(first, v.shape)


def _steady(values: dict[str, Any], send_window_ns: tuple[int, int] | None, t0: int, duration: float,
            fraction: float) -> tuple[float, float, str]:
    """The §5.2.3.2 steady-state window in s after the first submission, and its label: the send window
    (the load's start to its last send, else first to last submission) less its first ``fraction``; a
    run whose requests all left at once has no send window, and the whole run stands in."""
    if send_window_ns is not None:
        s0, s1 = (send_window_ns[0] - t0) * _NS, (send_window_ns[1] - t0) * _NS
    else:
        s0, s1 = 0.0, float(values["sent_ns"].max()) * _NS
    if s1 > s0:
        w0, w1 = steady_state_window(s0, s1, fraction)
        return w0, w1, (f"steady state: [{w0:.3f}, {w1:.3f}] s after the first submission (first {fraction:.0%} "
                        f"of the {s1 - s0:.3f} s send window and the drain after the last send excluded, §5.2.3.2)")
    w0, w1 = steady_state_window(0.0, duration, fraction)
    return w0, w1, (f"steady state: [{w0:.3f}, {w1:.3f}] s after the first submission (every request sent at "
                    f"once: first {fraction:.0%} of the {duration:.3f} s run excluded, §5.2.3.2)")


def _window_labels(scalars: dict[str, Estimate], steady: str, duration: float) -> dict[str, str]:
    """The window each scalar covers, as the report prints it (§5.2.3.2), from its declaration."""
    whole = f"whole run: [0, {duration:.3f}] s (first submission to last response)"
    windows: dict[str, str] = {}
    for k in scalars:
        window = registry.lookup(k).window
        if k.endswith(registry.WHOLE_RUN_SUFFIX) or window == "whole":
            windows[k] = whole
        elif window == "steady":
            windows[k] = steady
        else:
            windows[k] = "all measured requests (no time window)"
    return windows


def summarize(
    records: Iterable[RequestRecord] | RunFrame | FrameBuilder,
    options: SummaryOptions | None = None,
    *,
    slos: Sequence[RequestSLO] = (),
    itl_option: str = "B",
    phase: str | None = "measure",
    send_window_ns: tuple[int, int] | None = None,
) -> RunMetrics:
    """Summarise one run (§5.x.4 measurements) as ``options`` say (:class:`SummaryOptions`, default: its
    defaults); see the module docstring.

    ``records``: a :class:`FrameBuilder` that collected the run (its columns are handed over and
    released), a :class:`RunFrame`, or records, of which ``phase`` keeps only that phase's (None keeps
    all). ``slos``: the per-request SLOs goodput counts against. ``itl_option`` is ``"A"``, ``"B"``,
    ``"C"`` or ``"auto"`` (C when every successful multi-token request carries server token
    timestamps, else B). ``send_window_ns``: the load's start and last send (``LoadResult.start_ns``,
    ``send_end_ns``), whose last 90% is the steady-state window; by default the first to the last
    submission.
    """
    options = options if options is not None else SummaryOptions()
    opt = _check_itl_option(itl_option)
    for slo in slos:
        if not isinstance(getattr(slo, "metric", None), str) or not callable(getattr(slo, "ok", None)):
            raise TypeError(f"SLO {slo!r} needs a 'metric' str attribute and an ok(values) method")
    if isinstance(records, FrameBuilder):
        try:
            frame = records.build(release=True)
        except BaseException:
            records.close()
            raise
    else:
        frame = records if isinstance(records, RunFrame) else RunFrame.from_records(records, phase)
    chunks = frame.chunks
    try:
        return _summarize(frame, slos, opt, options, send_window_ns)
    finally:
        chunks.close()  # spilled chunk files go now; chunks kept in memory stay for RunMetrics.tokens


def _summarize(frame: RunFrame, slos: Sequence[RequestSLO], opt: str, options: SummaryOptions,
               send_window_ns: tuple[int, int] | None) -> RunMetrics:
    o = options
    values = _inputs(frame)
    t0 = frame.t0
    del frame  # the values hold its columns, each dropped after its last reader
    duration = values["duration"]
    w0, w1, steady_label = _steady(values, send_window_ns, t0, duration, o.steady_state_fraction)
    values.update(slos=slos, itl_option=opt, gpu_count=o.gpu_count, percentiles=o.percentiles,
                  confidence=o.confidence, batches=o.batches, prefill_deadline=o.prefill_deadline,
                  decode_deadline=o.decode_deadline, reading_speed=o.reading_speed, ttft_allowance=o.ttft_allowance,
                  alpha=o.alpha, steady=(w0, w1),
                  windows=Windows({"": (w0, w1), "_full": (0.0, duration)}, o.batches, o.confidence))
    _evaluate(values)
    per_request: PerRequest = values["per_request"]
    itl_data = values["itl_data"]
    per_request.itl = itl_data.samples
    if values["good"] is not None:
        per_request.columns["good"] = values["good"]
    _compact(per_request.columns)
    values.update({k: v for k, v in per_request.columns.items() if k in registry.METRICS})
    dists, scalars = _aggregate(values, o.percentiles, o.confidence)
    itl_d = dists["itl"]
    dp_model = values["deadline_model"]

    definitions = {**registry.definitions(), **DEFINITIONS}  # with any metric declared since import
    definitions["itl_option"] = f"{itl_data.option}: {ITL_OPTIONS[itl_data.option]}"
    definitions["fluidity_parameters"] = (
        f"D_d = {o.decode_deadline:g} s; D_p = {dp_model.source if dp_model else 'n/a'}"
        f"{'' if dp_model is None else f' + {dp_model.slack:g} s slack'}")
    error = values["error"]
    return RunMetrics(
        distributions=dists, scalars=scalars,
        errors_by_type=dict(sorted(Counter(e.value for e in error[values["failed"]]).items())),
        per_request=per_request, windows=_window_labels(scalars, steady_label, duration),
        ttft_by_input_length=values["ttft_by_input_length"], sessions=values["session_figures"],
        itl_option=itl_data.option, itl_modality=(
            modality(itl_d.samples, assume_sorted=True) if itl_d.samples is not None else None),
        itl_tail=tail_shape(itl_d.samples, assume_sorted=True) if itl_d.samples is not None else None,
        definitions=definitions, steady_window=(w0, w1), prefill_deadline=dp_model,
        tokens=None if itl_data.tokens.chunks.spilled else itl_data.tokens,
    )


def throughput_at_ttft_p99(levels: Iterable[Any], threshold: float = 0.5) -> float | None:
    """Highest measured throughput among load levels whose TTFT P99 < ``threshold`` s (App. C.1).

    ``levels``: ``(throughput, ttft_p99)`` pairs (floats or :class:`Estimate`) or
    :class:`RunMetrics` (output throughput, steady-state window). No interpolation between
    levels: the figure is a measured one. None when no level meets the bound.
    """
    best: float | None = None
    for lv in levels:
        if isinstance(lv, RunMetrics):
            thr, p99 = lv.scalar("output_throughput").value, lv.percentile("ttft", 99).value
        else:
            try:
                thr, p99 = lv
            except (TypeError, ValueError):
                raise TypeError(f"expected (throughput, ttft_p99) pairs or RunMetrics, got {lv!r}") from None
            thr = thr.value if isinstance(thr, Estimate) else float(thr)
            p99 = p99.value if isinstance(p99, Estimate) else float(p99)
        if p99 < threshold and math.isfinite(thr) and (best is None or thr > best):
            best = thr
    return best
