"""Run facts: what a run knows about itself, each one an observation with its source."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..common.jsonable import jsonable
from ..common.records import ErrorType, RequestRecord
from .registry import BOUNDARY_ALIASES, LOAD_CAPABILITIES, STANDARD_WORKLOADS, ComplianceError

# ============================================================================================
# Run facts: what a run knows about itself
# ============================================================================================


@dataclass
class RunLoad:
    """The §4.2.3–§4.2.5 figures of one measured run (a load level, a configuration): each run is
    judged against its own rate and schedule, never pooled with runs at other rates."""

    label: str
    model: str | None = None  # "open" | "closed"
    arrival: str | None = None
    rate: float | None = None  # open loop: this run's req/s
    concurrency: int | None = None
    send_lag_p99_s: float | None = None
    send_lag_n: int = 0
    mean_gap_s: float | None = None  # mean planned inter-arrival gap of this run
    lag_inflight_rho: float | None = None
    lag_oldest_rho: float | None = None
    arrival_fit_p: float | None = None  # KS p of this run's send gaps against its own rate
    resubmit_gap_p99_s: float | None = None  # closed loop: resubmissions only (not the initial fill)
    resubmit_n: int = 0
    schedule: str | None = None  # arrival "shaped": the rate schedule's expression (``rate`` is its mean)


@dataclass
class LoadFacts:
    """Load model of the run and the load generator's capabilities (§4.2.3–§4.2.5).

    ``runs`` holds each measured run's figures (the items are decided per run, the worst named);
    the top-level figures are then the worst over the runs. Without ``runs`` the top-level figures
    are one run's.
    """

    model: str | None = None  # "open" | "closed"
    arrival: str | None = None  # open loop: "poisson" | "uniform" | "bursty" | "shaped" (a rate schedule)
    rate: float | None = None  # open loop: req/s (shaped: the schedule's mean)
    schedule: str | None = None  # open loop, arrival "shaped": the rate schedule's expression (issue 50)
    concurrency: int | None = None  # closed loop
    send_lag_p99_s: float | None = None  # open loop: P99 of actual - planned send time
    send_lag_n: int = 0  # open-loop sends with a planned and an actual time
    mean_gap_s: float | None = None  # open loop: mean planned inter-arrival gap
    #: Spearman rho of send lag vs in-flight count / vs age of the oldest outstanding response at send
    lag_inflight_rho: float | None = None
    lag_oldest_rho: float | None = None
    send_lag_inflight_corr: float | None = None  # legacy alias of lag_inflight_rho (read if set)
    resubmit_gap_p99_s: float | None = None  # closed loop: P99 completion-to-resubmit gap
    resubmit_n: int = 0
    #: goodness of fit of the real send gaps to the arrival process used (KS p-value, §4.2.3)
    arrival_fit_p: float | None = None
    max_inflight: int | None = None  # most requests outstanding at a send (observed overlap, §4.2.5-MUST-2)
    runs: tuple[RunLoad, ...] = ()  # per measured run (see the class docstring)
    #: capabilities this run exercised (observed on its records), from :data:`LOAD_CAPABILITIES`;
    #: a capability not exercised is answered by the plugin test that exercises it (tool-verified)
    capabilities: tuple[str, ...] = ()

    def per_run(self) -> tuple[RunLoad, ...]:
        """The runs to judge: ``runs``, or the top-level figures as one unnamed run."""
        if self.runs:
            return self.runs
        return (RunLoad("", self.model, self.arrival, self.rate, self.concurrency, self.send_lag_p99_s,
                        self.send_lag_n, self.mean_gap_s,
                        self.lag_inflight_rho if self.lag_inflight_rho is not None else self.send_lag_inflight_corr,
                        self.lag_oldest_rho, self.arrival_fit_p, self.resubmit_gap_p99_s, self.resubmit_n,
                        self.schedule),)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.capabilities) - set(LOAD_CAPABILITIES))
        if unknown:
            raise ComplianceError(f"unknown load capabilities {unknown}; known: {', '.join(LOAD_CAPABILITIES)}")


@dataclass
class ClockFacts:
    """Timing resolution, clock synchronisation and timestamp format (§4.2.1, §4.7)."""

    resolution_ns: float | None = None  # of the interval clock (time.get_clock_info("perf_counter"))
    single_host: bool | None = None  # load generator and SUT on one machine (loopback endpoint)
    sync_method: str | None = None  # "single-host" | "ntp" | "ptp" | "chrony" ...
    sync_accuracy_s: float | None = None  # measured offset/accuracy when not single host
    cross_host_intervals: bool | None = None  # intervals combine timestamps of two hosts (sub-ms sync)
    load_hosts: tuple[str, ...] = ()  # hosts whose clocks timed the run's records (shards/: more than one)
    timestamp_format: str | None = None  # "iso8601_ms" | "iso8601_us" | "unix_ms" | "unix_us" | "unix_ns"
    timestamp_sample: str | None = None  # one serialized timestamp, checked against the format

    @classmethod
    def local(cls, **kw: Any) -> ClockFacts:
        """This process's interval clock (``perf_counter``, §4.2.1) plus any other fields given."""
        info = time.get_clock_info("perf_counter")
        kw.setdefault("resolution_ns", info.resolution * 1e9)
        return cls(**kw)


@dataclass
class WarmupFacts:
    """What the warm-up did (§4.5)."""

    requests: int = 0  # completed warm-up requests
    output_tokens: int = 0  # output tokens of the warm-up
    drained: bool | None = None  # client in-flight count 0 before the first measured request
    server_queue_drained: bool | None = None  # server queue depth 0 (needs server metrics)
    server_queue_evidence: str | None = None  # the server gauge read and its value (measure/telemetry.py)
    probes_before: tuple[float, ...] = ()  # probe latencies (s) before warm-up (§4.5.2)
    probes_after: tuple[float, ...] = ()  # consecutive probe latencies (s) after warm-up
    reduced: bool = False  # the profile set the warm-up below the §4.5.1 minimum
    cold_start: bool = False  # run measures cold start: warm-up skipped on purpose (§4.5.3)
    prefix_populated: bool | None = None  # warm-up sent the workload's shared prefixes (§4.5.1)


@dataclass
class ColdStartFacts:
    """A cold-start measurement (§4.5.3): the SUT restarted, the first requests sent before any warm-up."""

    restarted: bool = False  # the SUT was restarted through the configure hook's ``restart`` setting
    requests: int = 0  # cold requests measured (sent one at a time, first after the restart)
    warmup_requests_before: int = 0  # warm-up requests the client sent between the restart and them
    server_requests_before: float | None = None  # requests the server had finished by then (/metrics)
    labelled: bool = False  # the result carries the cold-start section, table and heading label


def content_filter_signal(r: RequestRecord) -> str | None:
    """How a content filter signalled ``r``'s refusal (§4.8.1), else None: a policy error code (an HTTP
    answer or an error event in the stream, client/stream.py) or ``finish_reason: content_filter``.
    A model refusing by itself (OpenAI ``refusal`` field, the declared refusal text) is not a filter."""
    if r.error_type is not ErrorType.REFUSED:
        return None
    if r.finish_reason == "content_filter":
        return "finish_reason content_filter"
    if "policy refusal" in (r.error_message or ""):
        return "policy error code"
    return None


@dataclass
class RecordAudit:
    """Per-request record completeness and consistency (§4.2.2, §4.2.6, §4.8.1) over the measured records.

    A field counts as present only when its value is consistent with the others: a first-token
    time after the submission, chunk times in order and after the submission, a final time not
    before the last chunk, an input count the server or the client actually counted (not the
    spec's intended length), an output count matching the content received.
    """

    n: int = 0
    n_ok: int = 0
    n_failed: int = 0
    refused: int = 0
    #: refusals a content filter signalled: a policy error code (HTTP or in-stream) or
    #: ``finish_reason: content_filter``; a model's own refusal (refusal field, declared text) is not one
    filter_refused: int = 0
    filter_signals: dict[str, int] = field(default_factory=dict)  # {"policy error code": n, "finish_reason ...": n}
    missing_submit: int = 0
    missing_first_token: int = 0
    missing_chunk_times: int = 0
    missing_final: int = 0
    missing_input_tokens: int = 0
    missing_output_tokens: int = 0
    missing_status: int = 0

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord], *, phase: str = "measure") -> RecordAudit:
        a = cls()
        for r in records:
            if not phase or r.phase == phase:
                a.add(r)
        return a

    def add(self, r: RequestRecord) -> None:
        """One record into the audit (whatever its phase: :meth:`from_records` filters)."""
        self.n += 1
        self.n_ok += r.ok
        self.n_failed += r.failed
        self.refused += r.error_type is ErrorType.REFUSED
        signal = content_filter_signal(r)
        if signal is not None:
            self.filter_refused += 1
            self.filter_signals[signal] = self.filter_signals.get(signal, 0) + 1
        self.missing_submit += not r.sent_ns
        has_content = any(t.strip() for t in r.chunk_text)
        ft = r.first_token_ns
        self.missing_first_token += bool(r.ok and has_content and (ft is None or (r.sent_ns and ft < r.sent_ns)))
        ordered = all(b >= c for b, c in zip(r.chunk_ns[1:], r.chunk_ns)) and \
            (not r.chunk_ns or not r.sent_ns or r.chunk_ns[0] >= r.sent_ns)
        self.missing_chunk_times += bool(len(r.chunk_ns) != len(r.chunk_text) or (has_content and not r.chunk_ns)
                                         or not ordered)
        self.missing_final += r.end_ns is None or bool(r.chunk_ns and r.end_ns < r.chunk_ns[-1])
        self.missing_input_tokens += bool(r.ok and r.input_tokens_server is None and r.input_tokens_client is None)
        out = r.output_tokens
        self.missing_output_tokens += bool(r.ok and (out is None or (has_content and out <= 0)))
        self.missing_status += bool(r.ok and r.status is None) or bool(r.failed and r.error_type is None)

    @classmethod
    def merged(cls, audits: Iterable[RecordAudit]) -> RecordAudit:
        """The audit of several runs' records, run after run (what :meth:`from_records` gives over them all)."""
        out = cls()
        for a in audits:
            for f in fields(cls):
                if f.name == "filter_signals":
                    for k, v in a.filter_signals.items():
                        out.filter_signals[k] = out.filter_signals.get(k, 0) + v
                else:
                    setattr(out, f.name, getattr(out, f.name) + getattr(a, f.name))
        return out


@dataclass
class RunFacts:
    """The general facts a run knows about itself, evaluated against the general items.

    Everything defaults to "unknown"; an unknown fact never makes an item pass.
    """

    sut_boundary: str | None = None  # model-engine | gateway | compound (§4.1)
    boundary_declared_before_start: bool | None = None
    #: where the boundary was set before the session's first request (option, ini, the embedded simulator)
    boundary_source: str | None = None
    load: LoadFacts = field(default_factory=LoadFacts)
    clock: ClockFacts = field(default_factory=ClockFacts)
    streaming: bool | None = None
    protocol: str | None = None  # sse | websocket | grpc
    streamed_records: int | None = None  # records whose response arrived as a timed event stream
    single_token_chunk_fraction: float | None = None  # measured share of one-token chunks (§4.6.2)
    itl_method: str | None = None  # chunk | distributed | server (§4.6.3 A/B/C)
    #: per run, App. B.2.1's decision and its evidence (measure.chunking.ItlDecision.to_json + "run")
    itl_decisions: tuple[dict[str, Any], ...] | None = None
    itl_reported: bool | None = None  # the test reports ITL/TPOT from token timestamps
    server_token_timestamps: bool | None = None  # server sent per-token timestamps (option C possible)
    warmup: WarmupFacts = field(default_factory=WarmupFacts)
    cold_start: ColdStartFacts | None = None  # set when the procedure measured cold start (§4.5.3)
    tokenizer: Any = None  # tokenizer.TokenizerDeclaration or a mapping with the same keys
    special_tokens: Any = None  # {"bos_eos", "system_prompt", "tool_call_format"} or one statement
    #: records whose token counts came from each counting option (§4.4.2): {"A": n, "B": n}
    counting_used: dict[str, int] | None = None
    workload: dict[str, Any] = field(default_factory=dict)  # name, custom, base, 4.3.1 fields, dataset
    session_workloads: tuple[str, ...] = ()  # workloads of every run in the report (§4.3.2.1)
    #: standard workloads the report ran altered (capped, stand-in: custom, so they do not count), by name
    session_custom_workloads: tuple[str, ...] = ()
    seed: int | None = None
    sequence_hash: str | None = None  # hash of the request sequence (§4.3.3)
    generator: str | None = None  # generator name + version that rebuilds the sequence from the seed
    records: RecordAudit | None = None
    guardrails: dict[str, Any] | None = None  # input_filter, output_filter (on/off/unknown), systems
    production_representative: bool | None = None  # run meant to represent production (§4.8.2)
    prefix_caching: str | None = None  # enabled | disabled (§5.1.2)
    prefix_caching_source: str | None = None  # where prefix_caching came from (simulator config, procedure)
    prefix_cache_under_test: bool = False
    network_rtt_s: float | None = None  # measured separately (§4.7.3)
    network_rtt_method: str | None = None  # how (sut.system.probe_rtt: TCP connects before the runs)
    latency_adjustment: dict[str, Any] | None = None  # {"method", "value"} when TTFT was adjusted
    endpoint_scheme: str | None = None  # http | https
    endpoint_host: str | None = None  # the SUT endpoint's host (name or address), held against clock_sync
    tls_verified: bool | None = None
    compared: bool = False  # results are compared across SUTs (§6)
    exceeds_capacity: bool = False  # the test drives load beyond capacity (§7.4)
    session_tests: tuple[str, ...] = ()  # tests run in the same session/report

    def to_json(self) -> dict[str, Any]:
        return jsonable(dataclasses.asdict(self))

    @property
    def boundary(self) -> str | None:
        if self.sut_boundary is None:
            return None
        return BOUNDARY_ALIASES.get(str(self.sut_boundary).lower())

    @property
    def workload_name(self) -> str | None:
        name = self.workload.get("name") if self.workload else None
        return _norm_workload(name) if name else None

    @property
    def workload_standing(self) -> str | None:
        """:func:`workload_standing` of the workload as run."""
        return workload_standing(self.workload)

    @property
    def workload_base(self) -> str | None:
        base = self.workload.get("base") if self.workload else None
        return _norm_workload(base) if base else self.workload_name


#: a workload's standing as run (§4.3, §4.3.2): the one rule every workload item asks
WORKLOAD_STANDINGS = ("standard", "custom", "stand-in")


def workload_standing(w: Mapping[str, Any] | None) -> str | None:
    """How a workload ran (``procedures.sample.as_run``'s declaration), the one reading of "workload X":

    ``stand-in``: a synthetic stand-in for a dataset workload (App. A.3/A.4 datasets not loaded);
    ``custom``: altered from its definition (an output cap that bound a request, forced lengths, a
    procedure's own lengths), or not one of the five standard names; ``standard``: as App. A defines
    it. None: no workload known.
    """
    if not w or not w.get("name"):
        return None
    if w.get("synthetic_standin") or (w.get("dataset") or {}).get("synthetic_standin"):
        return "stand-in"
    base = _norm_workload(w.get("base") or w.get("name"))
    if w.get("custom") or w.get("standard") is False or base not in STANDARD_WORKLOADS \
            or _norm_workload(w.get("name")) not in STANDARD_WORKLOADS:
        return "custom"
    return "standard"


def _norm_workload(name: Any) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")




