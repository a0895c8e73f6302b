"""Records -> per-request and aggregate metrics (§4.6.3, §5.1.4, §5.2.4, §5.4.3-4, §5.5.4, §5.8.4).

:func:`summarize` turns a run's :class:`~pytest_llmbench.common.records.RequestRecord` list into a
:class:`RunMetrics`: one :class:`PerRequest` table (numpy arrays, one entry per record, NaN where
undefined), pooled ITL samples, :class:`~pytest_llmbench.measure.stats.Distribution` summaries with
confidence intervals and throughput scalars. Record times are ``perf_counter_ns``; every figure
is reported in seconds or per-second rates. Every definition chosen where sources differ is in
:data:`DEFINITIONS` (printed by the report) and in ``docs/metrics.md``.

Conventions (named in :data:`DEFINITIONS`):

* Latency metrics are defined for successful requests only (``record.ok``); failed requests
  count in error/success rates and goodput denominators, ``cancelled`` ones in neither.
* TTFT follows §5.1.3.1 (``record.first_token_ns``: first non-whitespace *content*; reasoning
  excluded). ``ttft_any_chunk`` uses the first SSE chunk of any kind.
* ITL per §5.4.3 from the first content token on, under one of the §4.6.3 options:
  ``A`` inter-chunk time (reported as "time between chunks"), ``B`` every token of a chunk gets
  the chunk's arrival time (the draft's literal text: an N-token chunk adds N-1 zero samples),
  ``C`` server per-token timestamps (``record.server_token_ns``).
* Throughput uses the steady-state window (§5.2.3.2): the first 10% of [first submission, last
  response] is excluded; events (tokens at their chunk's arrival, requests at completion, input
  tokens at the first token) are counted inside the window and divided by its length.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..common.records import ErrorType, RequestRecord
from . import experience as ux
from . import metrics_extra as mx
from . import registry
from .stats import (
    DEFAULT_PERCENTILES,
    Distribution,
    Estimate,
    Modality,
    TailShape,
    distribution,
    modality,
    proportion_estimate,
    rate_from_window_sums,
    tail_shape,
    window_sums,
)
from .stats import (
    DEFINITIONS as STATS_DEFINITIONS,
)

__all__ = [
    "DEFINITIONS",
    "INPUT_LENGTH_BUCKETS",
    "ITL_OPTIONS",
    "ItlSamples",
    "PerRequest",
    "RequestSLO",
    "RunMetrics",
    "summarize",
    "throughput_at_ttft_p99",
]

#: §4.6.3 options and their report labels.
ITL_OPTIONS: dict[str, str] = {
    "A": "time between chunks (option A: inter-chunk time)",
    "B": "ITL, option B: every token of a chunk gets the chunk's arrival time",
    "C": "ITL, option C: server-reported per-token timestamps",
}

#: §5.1.4.2 RECOMMENDED input-length buckets, [low, high) tokens.
INPUT_LENGTH_BUCKETS: tuple[tuple[int, float], ...] = (
    (0, 256), (256, 512), (512, 1024), (1024, 2048), (2048, 4096), (4096, math.inf))

#: §5.2.3.2: the first 10% of the test duration is ramp-up, excluded from steady-state figures.
STEADY_STATE_FRACTION = 0.1


def steady_state_window(start: float, end: float, fraction: float = STEADY_STATE_FRACTION) -> tuple[float, float]:
    """The §5.2.3.2 steady-state window of a test running from ``start`` to ``end`` (any one time unit).

    Throughput is the tokens in the window divided by its length (§5.2.3 step 3c, §5.2.4); the
    first ``fraction`` of the test duration is ramp-up. The one definition: ``summarize`` applies
    it to the run's span, ``load.steady_state_window`` and procedure 5.2 to the send window.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"steady_state_fraction must be in [0, 1), got {fraction}")
    return start + fraction * (end - start), end


#: Definitions of every metric (from the metric registry, registry.py) and of the statistics used.
DEFINITIONS: dict[str, str] = {
    **registry.definitions(),
    **{f"ux_{k}": v for k, v in ux.DEFINITIONS.items()},
    **{f"stats_{k}": v for k, v in STATS_DEFINITIONS.items()},
}

#: Units of the per-request columns (registry.py).
UNITS: dict[str, str] = {m.name: m.unit for m in registry.METRICS.values() if m.kind != "scalar"}

#: Scalars measured over the steady-state window (§5.2.3.2); the rest cover the whole run or no window.
_STEADY_SCALARS = frozenset({m.name for m in registry.METRICS.values()
                             if m.aggregation in (registry.WINDOW_RATE, registry.TIME_AVERAGE)}
                            | {"steady_state_duration"})

# per-request columns summarised as distributions: always present / present when defined
_CORE = ("ttft", "ttft_any_chunk", "ttst", "e2e", "tpot", "jitter", "max_pause",
         "output_tps_per_request", "normalized_latency", "isl", "osl")
_OPTIONAL = ("ttft_incl_reasoning", "ttfo", "prefill_tps_per_request", "send_lag", "schedule_lag",
             "schedule_latency", "queue_wait", "prefill", "fluidity", "user_idle_latency",
             "input_usage_diff_pct", "output_usage_diff_pct", "osl_mismatch_pct", "aiperf_itl",
             "output_tps_per_user")


@runtime_checkable
class RequestSLO(Protocol):
    """A per-request SLO (slo.py builds them): the metric it reads and a vectorised check."""

    metric: str

    def ok(self, values: np.ndarray) -> np.ndarray:
        """One bool per request: True where ``values`` meets the objective."""
        ...


@dataclass(frozen=True)
class ItlSamples:
    """Pooled ITL samples (seconds) with the per-request row each one belongs to."""

    option: str  # "A" | "B" | "C"
    values: np.ndarray
    owner: np.ndarray  # row index into PerRequest, non-decreasing

    def for_request(self, row: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.owner, [row, row + 1])
        return self.values[lo:hi]


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
    itl_option: str = "B"
    itl_modality: Modality | None = None
    itl_tail: TailShape | None = None
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))
    steady_window: tuple[float, float] = (math.nan, math.nan)  # seconds after first submission
    prefill_deadline: ux.PrefillDeadline | None = None
    tokens: ux.TokenTimes | None = field(default=None, repr=False)

    def percentile(self, name: str, p: float) -> Estimate:
        """Any percentile of a distribution, computed from its kept samples, with its CI."""
        return self._dist(name).percentile(p)

    def _dist(self, name: str) -> Distribution:
        try:
            return self.distributions[name]
        except KeyError:
            raise KeyError(f"unknown distribution {name!r}; known: {sorted(self.distributions)}") from None

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
            raise ValueError("this run has no token timing / TTFT to derive a prefill deadline from")
        pr = self.per_request
        ok = pr["ok"]
        sub = _subset_tokens(self.tokens, ok)
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
            "ttft_by_input_length": {k: v.to_json() for k, v in self.ttft_by_input_length.items()},
            "itl_modality": self.itl_modality.to_json() if self.itl_modality else None,
            "itl_tail": self.itl_tail.to_json() if self.itl_tail else None,
            "prefill_deadline": self.prefill_deadline.to_json() if self.prefill_deadline else None,
            "definitions": dict(self.definitions),
        }
        if per_request:
            d["per_request"] = self.per_request.to_json()
        return d


def _subset_tokens(tokens: ux.TokenTimes, keep: np.ndarray) -> ux.TokenTimes:
    counts = tokens.counts
    sel = np.repeat(keep, counts)
    offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(counts[keep], out=offsets[1:])
    return ux.TokenTimes(tokens.times_ns[sel], offsets, tokens.start_ns[keep])


# --------------------------------------------------------------------------------------------
# building arrays
# --------------------------------------------------------------------------------------------

_NAN = math.nan


def _f(v: Any) -> float:
    return _NAN if v is None else float(v)


def _segment_sum(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of consecutive segments of ``values`` with lengths ``counts`` (0 for empty ones)."""
    out = np.zeros(counts.size, dtype=np.float64)
    has = counts > 0
    if values.size:
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[has]
        out[has] = np.add.reduceat(values.astype(np.float64, copy=False), starts)
    return out


def _pairs_diff(times: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between consecutive entries of the same owner (owner non-decreasing)."""
    if times.size < 2:
        return np.empty(0, dtype=times.dtype), np.empty(0, dtype=owner.dtype)
    same = owner[1:] == owner[:-1]
    return (times[1:] - times[:-1])[same], owner[1:][same]


def _per_request_stats(values: np.ndarray, owner: np.ndarray, n: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """count, mean, sample std (ddof=1, NaN below 2), max of samples grouped by owner."""
    icount = np.bincount(owner, minlength=n)
    count = icount.astype(np.float64)
    mean = np.full(n, _NAN)
    std = np.full(n, _NAN)
    mx = np.full(n, _NAN)
    has = count > 0
    if values.size:
        s = _segment_sum(values, icount)
        mean[has] = s[has] / count[has]
        dev = values - mean[owner]
        ss = _segment_sum(dev * dev, icount)
        two = count >= 2
        std[two] = np.sqrt(ss[two] / (count[two] - 1))
        starts = np.concatenate(([0], np.cumsum(count[has]).astype(np.int64)[:-1]))
        mx[has] = np.maximum.reduceat(values, starts)
    return count, mean, std, mx


def _check_itl_option(itl_option: str) -> str:
    opt = itl_option.upper() if isinstance(itl_option, str) else itl_option
    if opt not in ("A", "B", "C", "AUTO"):
        raise ValueError(f"itl_option must be 'A', 'B', 'C' or 'auto' (§4.6.3), got {itl_option!r}")
    return opt


_NS = 1e-9  # nanoseconds -> seconds


@dataclass
class _Rows:
    """The records' fields as arrays, one entry per record sorted by submission; times in ns after ``t0``."""

    recs: list[RequestRecord]
    t0: int
    t_end: int  # last response (or last submission when no record ended)
    sent: np.ndarray  # int64
    end: np.ndarray  # int64; ``t_end`` where the record has no end
    has_end: np.ndarray
    first_tok: np.ndarray
    first_chunk: np.ndarray
    intended: np.ndarray
    handoff: np.ndarray  # queued_ns (hand-over to the transport), sent_ns in records without it
    isl: np.ndarray
    max_tokens: np.ndarray
    in_client: np.ndarray
    in_server: np.ndarray
    out_client: np.ndarray
    out_server: np.ndarray
    err: np.ndarray  # ErrorType | None
    ok: np.ndarray
    failed: np.ndarray
    cancelled: np.ndarray
    server: dict[str, np.ndarray]  # server_timing: queue_ns, prefill_ns, preemptions, preempted_tokens

    @property
    def n(self) -> int:
        return len(self.recs)

    @property
    def duration(self) -> float:
        """First submission to last response, seconds."""
        return (self.t_end - self.t0) * _NS

    @property
    def okf(self) -> np.ndarray:
        """1.0 for successful rows, NaN for the others (multiplying hides a metric of a failed request)."""
        return np.where(self.ok, 1.0, _NAN)

    @classmethod
    def of(cls, recs: list[RequestRecord]) -> _Rows:
        t0 = min(r.sent_ns for r in recs)
        ends = [r.end_ns for r in recs if r.end_ns is not None]
        t_end = max(ends) if ends else max(r.sent_ns for r in recs)

        def rel(v: int | None) -> float:
            return _NAN if v is None else float(v - t0)

        ok = np.array([r.error_type is None for r in recs])
        failed = np.array([r.failed for r in recs])
        timing = [r.server_timing or {} for r in recs]
        return cls(
            recs=recs, t0=t0, t_end=t_end,
            sent=np.array([r.sent_ns - t0 for r in recs], dtype=np.int64),
            end=np.array([(r.end_ns if r.end_ns is not None else t_end) - t0 for r in recs], dtype=np.int64),
            has_end=np.array([r.end_ns is not None for r in recs]),
            first_tok=np.array([rel(r.first_token_ns) for r in recs]),
            first_chunk=np.array([rel(r.first_chunk_ns) for r in recs]),
            intended=np.array([rel(r.intended_ns) for r in recs]),
            handoff=np.array([rel(r.handoff_ns) for r in recs]),
            isl=np.array([r.input_tokens for r in recs], dtype=np.float64),
            max_tokens=np.array([r.max_tokens for r in recs], dtype=np.float64),
            in_client=np.array([_f(r.input_tokens_client) for r in recs]),
            in_server=np.array([_f(r.input_tokens_server) for r in recs]),
            out_client=np.array([_f(r.output_tokens_client) for r in recs]),
            out_server=np.array([_f(r.output_tokens_server) for r in recs]),
            err=np.array([r.error_type for r in recs], dtype=object),
            ok=ok, failed=failed, cancelled=~ok & ~failed,
            server={k: np.array([_f(s.get(k)) for s in timing])
                    for k in ("queue_ns", "prefill_ns", "preemptions", "preempted_tokens")},
        )


def _chunk_tokens_of(r: RequestRecord) -> list[int]:
    """Tokens per chunk: the tokenizer's counts, else 1 per non-whitespace text chunk."""
    if len(r.chunk_tokens) == len(r.chunk_ns):
        return r.chunk_tokens
    if r.chunk_tokens:
        raise ValueError(f"record {r.index}: {len(r.chunk_tokens)} chunk_tokens for {len(r.chunk_ns)} chunks")
    return [1 if t.strip() else 0 for t in r.chunk_text]


def _first_reasoning(r: RequestRecord, t0: int) -> float:
    """Arrival (ns after ``t0``) of the first non-whitespace reasoning chunk, NaN when none streamed."""
    cr = r.chunk_reasoning
    if cr and cr.count("") != len(cr):
        for t, txt in zip(r.chunk_ns, cr):
            if txt and txt.strip():
                return float(t - t0)
    return _NAN


@dataclass
class _Chunks:
    """Every streamed chunk of the run, flattened in record order."""

    counts: np.ndarray  # chunks per record
    ns: np.ndarray  # arrival, ns after t0
    tokens: np.ndarray  # tokens per chunk
    owner: np.ndarray  # row of the record
    token_sum: np.ndarray  # tokens per record, summed over its chunks
    first_reasoning: np.ndarray  # per record, see _first_reasoning

    @classmethod
    def of(cls, recs: list[RequestRecord], t0: int) -> _Chunks:
        n = len(recs)
        counts = np.fromiter((len(r.chunk_ns) for r in recs), dtype=np.int64, count=n)
        total = int(counts.sum())
        c_ns = np.fromiter(itertools.chain.from_iterable(r.chunk_ns for r in recs), dtype=np.int64,
                           count=total) - t0
        c_tok = np.fromiter(itertools.chain.from_iterable(_chunk_tokens_of(r) for r in recs), dtype=np.int64,
                            count=total)
        owner = np.repeat(np.arange(n), counts)
        if total > 1:
            bad = (np.diff(c_ns) < 0) & (owner[1:] == owner[:-1])
            if bad.any():
                raise ValueError(f"record {recs[int(owner[1:][bad][0])].index}: chunk_ns is not non-decreasing")
        return cls(counts, c_ns, c_tok, owner, _segment_sum(c_tok, counts),
                   np.array([_first_reasoning(r, t0) for r in recs], dtype=np.float64))


def _output_lengths(rows: _Rows, ch: _Chunks) -> np.ndarray:
    """OSL per record: the server's usage, else the client's count, else the chunks' tokens (§4.4)."""
    return np.where(~np.isnan(rows.out_server), rows.out_server,
                    np.where(~np.isnan(rows.out_client), rows.out_client, ch.token_sum))


def _latency_columns(rows: _Rows, ch: _Chunks, osl: np.ndarray) -> dict[str, np.ndarray]:
    """Per-request latency and size-ratio columns, seconds (§5.1.3.1, §5.4.3, §4.4.2); successful rows only."""
    sent_f = rows.sent.astype(np.float64)
    okf = rows.okf
    first_tok, first_reason = rows.first_tok, ch.first_reasoning
    ttft = (first_tok - sent_f) * _NS * okf
    incl_reason = np.fmin(first_reason, first_tok)
    e2e = np.where(rows.has_end, (rows.end - rows.sent) * _NS, _NAN) * okf
    isl, mt = rows.isl, rows.max_tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        cols = {
            "ttft": ttft,
            "ttft_any_chunk": (rows.first_chunk - sent_f) * _NS * okf,
            "ttft_incl_reasoning": np.where(~np.isnan(first_reason), (incl_reason - sent_f) * _NS, _NAN) * okf,
            "ttfo": np.where(first_reason < first_tok, ttft, _NAN),
            "e2e": e2e,
            "tpot": np.where(osl >= 2, (e2e - ttft) / (osl - 1), _NAN),
            "output_tps_per_request": np.where((osl > 0) & (e2e > 0), osl / e2e, _NAN),
            "prefill_tps_per_request": np.where(ttft > 0, isl / ttft, _NAN),
            "normalized_latency": np.where(osl > 0, e2e / osl, _NAN),
            "send_lag": (sent_f - rows.intended) * _NS,  # the submit lag (registry alias submit_lag)
            "schedule_lag": (rows.handoff - rows.intended) * _NS,
            "schedule_latency": np.where(rows.has_end, (rows.end - rows.intended) * _NS, _NAN) * okf,
            "input_usage_diff_pct": np.where(rows.in_client > 0, (rows.in_server - rows.in_client)
                                             / rows.in_client * 100.0, _NAN),
            "output_usage_diff_pct": np.where(rows.out_client > 0, (rows.out_server - rows.out_client)
                                              / rows.out_client * 100.0, _NAN),
            "osl_mismatch_pct": np.where(mt > 0, (osl - mt) / mt * 100.0, _NAN) * okf,
        }
    return cols


@dataclass
class _Itl:
    """Token times and the pooled ITL samples of every §4.6.3 option this run supports."""

    samples: dict[str, ItlSamples]
    option: str  # the option reported as "itl" (``auto`` resolved)
    ttst: np.ndarray  # time to second token, per record (s)
    tokens: ux.TokenTimes  # option-B token times of every record (failed ones feed user idle latency)
    content: np.ndarray  # chunk mask: content chunks from the first content token on
    sizes: np.ndarray  # tokens of each content chunk
    single_token_chunks: bool
    per_request: dict[str, np.ndarray]  # itl_mean, jitter, max_pause, itl_count of the chosen option


def _server_itl(rows: _Rows) -> ItlSamples | None:
    """Option C: gaps between server per-token timestamps of successful records that carry them."""
    has_c = np.array([bool(r.server_token_ns) for r in rows.recs]) & rows.ok
    if not has_c.any():
        return None
    lists = [rows.recs[i].server_token_ns for i in np.flatnonzero(has_c)]
    counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    s_ns = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(counts.sum()))
    s_vals, s_owner = _pairs_diff(s_ns, np.repeat(np.flatnonzero(has_c), counts))
    if (s_vals < 0).any():
        raise ValueError(f"record {rows.recs[int(s_owner[s_vals < 0][0])].index}: "
                         f"server_token_ns is not non-decreasing")
    return ItlSamples("C", s_vals * _NS, s_owner)


def _resolve_itl_option(opt: str, rows: _Rows, osl: np.ndarray) -> str:
    """``auto`` -> C when every successful multi-token record has server timestamps, else B; C checked."""
    has_c = np.array([bool(r.server_token_ns) for r in rows.recs]) & rows.ok
    need_c = rows.ok & (osl >= 2)
    complete = bool(has_c[need_c].all()) if need_c.any() else bool(has_c.any())
    if opt == "AUTO":
        return "C" if complete else "B"
    if opt == "C" and not complete:
        missing = int((need_c & ~has_c).sum())
        raise ValueError(f"itl_option 'C' needs server_token_ns on every successful multi-token "
                         f"request; {missing} lack it (use 'B' or 'auto', §4.6.3)")
    return opt


def _itl(rows: _Rows, ch: _Chunks, osl: np.ndarray, opt: str) -> _Itl:
    """ITL per §5.4.3 from the first content token on, under options A, B and C (§4.6.3)."""
    n, ok = rows.n, rows.ok
    ft_chunk = rows.first_tok[ch.owner]
    content = (ch.tokens > 0) & (ch.ns >= np.where(np.isnan(ft_chunk), np.inf, ft_chunk))
    content_ok = content & ok[ch.owner]
    a_vals, a_owner = _pairs_diff(ch.ns[content_ok], ch.owner[content_ok])
    samples = {"A": ItlSamples("A", a_vals * _NS, a_owner)}
    ttst = np.full(n, _NAN)
    if a_owner.size:
        u, first_idx = np.unique(a_owner, return_index=True)
        ttst[u] = a_vals[first_idx] * _NS
    sizes = ch.tokens[content]
    b_ns_all = np.repeat(ch.ns[content], sizes)
    b_own_all = np.repeat(ch.owner[content], sizes)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(b_own_all, minlength=n), out=offsets[1:])
    sel_b = ok[b_own_all]
    b_vals, b_owner = _pairs_diff(b_ns_all[sel_b], b_own_all[sel_b])
    single = bool((sizes == 1).all())
    samples["B"] = ItlSamples("B", a_vals * _NS if single else b_vals * _NS, a_owner if single else b_owner)
    server = _server_itl(rows)
    if server is not None:
        samples["C"] = server
    opt = _resolve_itl_option(opt, rows, osl)
    chosen = samples[opt]
    itl_count, itl_mean, jitter, max_pause = _per_request_stats(chosen.values, chosen.owner, n)
    for arr in (itl_mean, jitter, max_pause):
        arr[~ok] = _NAN
    return _Itl(samples, opt, ttst, ux.TokenTimes(b_ns_all, offsets, rows.sent), content, sizes, single,
                {"itl_mean": itl_mean, "jitter": jitter, "max_pause": max_pause, "itl_count": itl_count})


def _experience(rows: _Rows, ttft: np.ndarray, tokens: ux.TokenTimes, prefill_deadline: ux.PrefillDeadline | None,
                decode_deadline: float, reading_speed: float, ttft_allowance: float
                ) -> tuple[np.ndarray, np.ndarray, ux.PrefillDeadline | None]:
    """Fluidity index and user idle latency per record, and the prefill deadline used (experience.py)."""
    fluid = np.full(rows.n, _NAN)
    ttft_ok = ~np.isnan(ttft)
    if prefill_deadline is None and ttft_ok.any():
        prefill_deadline = ux.PrefillDeadline.fit(rows.isl[ttft_ok], ttft[ttft_ok],
                                                  source="non-negative quadratic fit of this run's TTFTs")
    if prefill_deadline is not None:
        fluid = ux.fluidity_index(tokens, prefill_deadline(rows.isl), decode_deadline)
        fluid[~rows.ok] = _NAN
    idle = ux.user_idle_latency(tokens, reading_speed=reading_speed, ttft_allowance=ttft_allowance,
                                end_ns=rows.end, complete=rows.ok)
    idle[~(rows.ok | rows.failed)] = _NAN
    return fluid, idle, prefill_deadline


def _columns(rows: _Rows, osl: np.ndarray, lat: dict[str, np.ndarray], itl: _Itl, fluid: np.ndarray,
             idle: np.ndarray) -> dict[str, np.ndarray]:
    """The per-request table (registry.py names the units)."""
    srv = rows.server
    return {
        "index": np.array([r.index for r in rows.recs], dtype=np.int64),
        "request_class": np.array([r.request_class for r in rows.recs], dtype=object),
        "error_type": np.array([None if e is None else e.value for e in rows.err], dtype=object),
        "ok": rows.ok, "failed": rows.failed, "cancelled": rows.cancelled,
        "sent": rows.sent.astype(np.float64) * _NS, "end": np.where(rows.has_end, rows.end * _NS, _NAN),
        **{k: lat[k] for k in ("ttft", "ttft_any_chunk", "ttft_incl_reasoning", "ttfo")},
        "ttst": itl.ttst * rows.okf, "e2e": lat["e2e"], "tpot": lat["tpot"],
        **itl.per_request,
        "isl": rows.isl, "osl": osl, "max_tokens": rows.max_tokens,
        **{k: lat[k] for k in ("output_tps_per_request", "prefill_tps_per_request", "normalized_latency",
                               "send_lag", "schedule_lag", "schedule_latency", "input_usage_diff_pct", "output_usage_diff_pct",
                               "osl_mismatch_pct")},
        "queue_wait": srv["queue_ns"] * _NS, "prefill": srv["prefill_ns"] * _NS,
        "preemptions": srv["preemptions"], "preempted_tokens": srv["preempted_tokens"],
        "fluidity": fluid, "user_idle_latency": idle,
    }


def _distributions(columns: dict[str, np.ndarray], rows: _Rows, ch: _Chunks, itl: _Itl,
                   percentiles: Sequence[float], confidence: float
                   ) -> tuple[dict[str, Distribution], dict[str, Distribution]]:
    """Distributions of the per-request columns and ITL samples, and TTFT by input length (§5.1.4.2)."""
    ok, n = rows.ok, rows.n

    def dist(name: str, values: np.ndarray, unit: str) -> Distribution:
        return distribution(name, values, unit, percentiles, confidence=confidence)

    dists: dict[str, Distribution] = {name: dist(name, columns[name][ok], UNITS[name]) for name in _CORE}
    for name in _OPTIONAL:
        vals = columns[name][np.ones(n, dtype=bool) if name in ("send_lag", "schedule_lag", "user_idle_latency") else ok]
        if np.count_nonzero(~np.isnan(vals)):
            dists[name] = dist(name, vals, UNITS[name])
    samples = itl.samples
    dists["inter_chunk"] = dist("time_between_chunks", samples["A"].values, "s")
    dists["itl_distributed"] = (replace(dists["inter_chunk"], name="itl_distributed") if itl.single_token_chunks
                                else dist("itl_distributed", samples["B"].values, "s"))
    if "C" in samples:
        dists["itl_server"] = dist("itl_server", samples["C"].values, "s")
    dists["itl"] = replace({"A": dists["inter_chunk"], "B": dists["itl_distributed"],
                            "C": dists.get("itl_server")}[itl.option],
                           name="time_between_chunks" if itl.option == "A" else "itl")
    dists["chunk_size"] = dist("chunk_size", itl.sizes[ok[ch.owner[itl.content]]].astype(np.float64), "tokens")

    ttft, isl = columns["ttft"], rows.isl
    by_length: dict[str, Distribution] = {}
    for lo, hi in INPUT_LENGTH_BUCKETS:
        sel = ok & (isl >= lo) & (isl < hi)
        if sel.any():
            label = f"[{lo},{'inf' if math.isinf(hi) else int(hi)})"
            by_length[label] = dist(f"ttft{label}", ttft[sel], "s")
    return dists, by_length


@dataclass
class _Scalars:
    """Collects a run's scalar estimates; ``windows`` maps a name suffix to a (start, end) window in seconds."""

    windows: dict[str, tuple[float, float]]
    batches: int
    confidence: float
    out: dict[str, Estimate] = field(default_factory=dict)

    def count(self, name: str, k: int, unit: str = "requests") -> None:
        self.out[name] = Estimate(float(k), int(k), unit, method="count")

    def proportion(self, name: str, k: int, n: int) -> None:
        self.out[name] = proportion_estimate(k, n, confidence=self.confidence)

    def sums(self, t: np.ndarray, w: np.ndarray | None) -> dict[str, tuple[np.ndarray, int]]:
        """Per-batch event sums of each window (events at times ``t`` s, weights ``w``)."""
        return {suf: window_sums(t, w, a, b, self.batches) for suf, (a, b) in self.windows.items()}

    def rate(self, name: str, s: dict[str, tuple[np.ndarray, int]], unit: str) -> None:
        """``name`` over the steady-state window and ``name_full`` over the whole run (§5.2.3.2)."""
        for suf, (a, b) in self.windows.items():
            self.out[name + suf] = rate_from_window_sums(s[suf][0], s[suf][1], b - a, unit=unit,
                                                         confidence=self.confidence)


def _count_scalars(sc: _Scalars, rows: _Rows) -> None:
    """Request counts and the success, error and refusal rates (failed + successful = judged)."""
    ok, failed = rows.ok, rows.failed
    n_ok, judged = int(ok.sum()), int(ok.sum()) + int(failed.sum())
    n_refused = int(sum(1 for e in rows.err if e is ErrorType.REFUSED))
    sc.count("request_count", rows.n)
    sc.count("completed_count", n_ok)
    sc.count("error_count", int(failed.sum()))
    sc.count("cancelled_count", int(rows.cancelled.sum()))
    sc.count("refusals", n_refused)
    sc.proportion("success_rate", n_ok, judged)
    sc.proportion("error_rate", int(failed.sum()), judged)
    sc.proportion("refusal_rate", n_refused, judged)
    w0, w1 = sc.windows[""]
    sc.out["benchmark_duration"] = Estimate(rows.duration, rows.n, "s", method="first submission to last response")
    sc.out["steady_state_duration"] = Estimate(w1 - w0, rows.n, "s", method="steady-state window length")


def _throughput_scalars(sc: _Scalars, rows: _Rows, ch: _Chunks, osl: np.ndarray, gpu_count: int | None
                        ) -> np.ndarray:
    """Request, output, input and total token throughput (§5.2.4); returns each chunk's OSL-scaled tokens.

    Output tokens count at their chunk's arrival (scaled so a record's chunks add up to its OSL; a
    non-streamed response's tokens at its end), input tokens at the first token, requests at completion.
    """
    ok, has_end, end, n = rows.ok, rows.has_end, rows.end, rows.n
    chunk_ok = ok[ch.owner] & (ch.tokens > 0)
    scale = np.divide(osl, ch.token_sum, out=np.zeros(n), where=ch.token_sum > 0)
    no_chunks = ok & (ch.token_sum == 0) & (osl > 0) & has_end
    out_t = np.concatenate((ch.ns[chunk_ok] * _NS, end[no_chunks] * _NS))
    out_w = np.concatenate((ch.tokens[chunk_ok] * scale[ch.owner[chunk_ok]], osl[no_chunks]))
    in_at = np.where(np.isnan(rows.first_tok), end.astype(np.float64), rows.first_tok)
    in_sel = ok & has_end
    out_s, in_s = sc.sums(out_t, out_w), sc.sums(in_at[in_sel] * _NS, rows.isl[in_sel])
    sc.rate("request_throughput", sc.sums(end[ok & has_end] * _NS, None), "requests/s")
    sc.rate("output_throughput", out_s, "tokens/s")
    sc.rate("input_throughput", in_s, "tokens/s")
    sc.rate("total_token_throughput", {k: (out_s[k][0] + in_s[k][0], out_s[k][1] + in_s[k][1]) for k in out_s},
            "tokens/s")
    if gpu_count:
        o = sc.out["output_throughput"]
        sc.out["tokens_per_gpu_second"] = Estimate(
            o.value / gpu_count, o.n, "tokens/s/GPU",
            None if o.ci_low is None else o.ci_low / gpu_count,
            None if o.ci_high is None else o.ci_high / gpu_count, o.confidence, o.undersampled,
            f"output throughput / {gpu_count} GPUs")
    return np.where(ok[ch.owner], ch.tokens * scale[ch.owner], ch.tokens)


def _slo_scalars(sc: _Scalars, rows: _Rows, per_request: PerRequest, slos: Sequence[RequestSLO]) -> None:
    """Requests meeting every per-request SLO: the ``good`` column, good fraction and goodput (§5.3.4)."""
    good = rows.ok.copy()
    for slo in slos:
        vals = per_request[slo.metric]
        res = np.asarray(slo.ok(vals), dtype=bool)
        if res.shape != vals.shape:
            raise ValueError(f"SLO on {slo.metric!r} returned shape {res.shape}, expected {vals.shape}")
        good &= res | np.isnan(vals.astype(np.float64))
    per_request.columns["good"] = good
    sc.count("good_count", int(good.sum()))
    sc.proportion("good_fraction", int(good.sum()), int(rows.ok.sum()) + int(rows.failed.sum()))
    sc.rate("goodput", sc.sums(rows.end[good & rows.has_end] * _NS, None), "requests/s")


def _preemption_scalars(sc: _Scalars, rows: _Rows) -> None:
    """Preemption rate, recovery rate and tokens lost per preemption, where the server reports them (§5.8.4)."""
    preemptions, lost_tokens = rows.server["preemptions"], rows.server["preempted_tokens"]
    reported = ~np.isnan(preemptions)
    if not reported.any():
        return
    pre = reported & (preemptions > 0)
    sc.proportion("preemption_rate", int(pre.sum()), int(reported.sum()))
    sc.proportion("preemption_recovery_rate", int((pre & rows.ok).sum()), int(pre.sum()))
    events = float(np.nansum(preemptions[pre]))
    lost = np.nansum(lost_tokens[pre])
    sc.out["tokens_lost_per_preemption"] = Estimate(
        float(lost / events) if events else _NAN, int(events), "tokens/preemption",
        undersampled=events == 0, method="Σ preempted_tokens / Σ preemptions")


def _shape_scalars(sc: _Scalars, rows: _Rows, osl: np.ndarray, lat: dict[str, np.ndarray], itl: _Itl,
                   itl_d: Distribution) -> None:
    """ITL tail ratio, single-token chunk fraction, OSL mismatches and usage discrepancies (§4.4, §5.4.4)."""
    p50, p99 = itl_d.percentiles.get(50.0), itl_d.percentiles.get(99.0)
    if p50 is None or p99 is None:
        p50, p99 = itl_d.percentile(50.0), itl_d.percentile(99.0)
    sc.out["itl_tail_ratio"] = Estimate(p99.value / p50.value if p50.value > 0 else _NAN, itl_d.n, "ratio",
                                        undersampled=p99.undersampled, method="P99 / P50 of ITL samples")
    if itl.sizes.size:
        sc.proportion("single_token_chunk_fraction", int((itl.sizes == 1).sum()), int(itl.sizes.size))
    mt = rows.max_tokens
    mm = rows.ok & (mt > 0) & (np.abs(osl - mt) > np.minimum(0.05 * mt, 50))
    sc.count("osl_mismatch_count", int(mm.sum()))
    disc = ((np.abs(np.nan_to_num(lat["input_usage_diff_pct"])) > 10)
            | (np.abs(np.nan_to_num(lat["output_usage_diff_pct"])) > 10))
    sc.count("usage_discrepancy_count", int(disc.sum()))


def _experience_scalars(sc: _Scalars, rows: _Rows, osl: np.ndarray, idle: np.ndarray, tokens: ux.TokenTimes,
                        dp_model: ux.PrefillDeadline | None, *, alpha: float, reading_speed: float,
                        ttft_allowance: float) -> None:
    """Smooth goodput, AIPerf's run totals, token-weighted goodput (eq. 5) and the fluid token rate."""
    ok, duration = rows.ok, rows.duration
    judged = ok | rows.failed
    if duration > 0 and judged.any():
        sc.out["smooth_goodput"] = Estimate(
            ux.smooth_goodput(np.where(ok, osl, 0.0)[judged], idle[judged], duration, alpha=alpha),
            int(judged.sum()), "tokens/s", method=f"smooth goodput, alpha={alpha:g}, V=1/{reading_speed:g} "
            f"s/token, TTFT allowance {ttft_allowance:g} s, f(l)=max(l,0)")
    for name, v in mx.run_values(rows.recs).items():
        if v is not None:
            sc.out[name] = Estimate(float(v), rows.n, registry.METRICS[name].unit,
                                    method=registry.METRICS[name].definition)
    if duration > 0 and judged.any():
        sc.out["token_weighted_goodput"] = Estimate(
            mx.token_weighted_goodput_of(np.where(ok, np.nan_to_num(osl), 0.0), ok & (idle == 0.0), duration),
            int(judged.sum()), "tokens/s", method=f"Σ OSL of requests meeting every deadline A + i/V (A = "
            f"{ttft_allowance:g} s, V = {reading_speed:g} s/token) / whole run (smooth goodput paper eq. 5)")
    if dp_model is not None and ok.any():
        fr = ux.fluid_token_generation_rate(_subset_tokens(tokens, ok), dp_model(rows.isl[ok]),
                                            failed=int(rows.failed.sum()))
        sc.out["fluid_token_rate"] = Estimate(fr.rate, fr.n, "tokens/s", undersampled=not math.isfinite(fr.rate),
                                              method=f"{fr.method} (min fluidity {fr.min_fluidity:g}, "
                                              f"{fr.request_fraction:.0%} of requests)")


def _window_labels(scalars: dict[str, Estimate], w0: float, w1: float, duration: float,
                   steady_state_fraction: float) -> dict[str, str]:
    """The window each scalar covers, as the report prints it (§5.2.3.2)."""
    steady = (f"steady state: [{w0:.3f}, {w1:.3f}] s after the first submission (first "
              f"{steady_state_fraction:.0%} of {duration:.3f} s excluded, §5.2.3.2)")
    whole = f"whole run: [0, {duration:.3f}] s (first submission to last response)"
    windows: dict[str, str] = {}
    for k in scalars:
        if k.endswith("_full") or k in ("benchmark_duration", "smooth_goodput", "token_weighted_goodput"):
            windows[k] = whole
        elif k in _STEADY_SCALARS:
            windows[k] = steady
        else:
            windows[k] = "all measured requests (no time window)"
    return windows


def summarize(
    records: Iterable[RequestRecord],
    *,
    slos: Sequence[RequestSLO] = (),
    itl_option: str = "B",
    steady_state_fraction: float = STEADY_STATE_FRACTION,
    gpu_count: int | None = None,
    phase: str | None = "measure",
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    confidence: float = 0.95,
    batches: int = 10,
    prefill_deadline: ux.PrefillDeadline | None = None,
    decode_deadline: float = ux.DEFAULT_DECODE_DEADLINE,
    reading_speed: float = ux.DEFAULT_READING_SPEED,
    ttft_allowance: float = ux.DEFAULT_TTFT_ALLOWANCE,
    alpha: float = ux.DEFAULT_ALPHA,
) -> RunMetrics:
    """Summarise one run's records (§5.x.4 measurements); see the module docstring.

    ``phase`` keeps only records of that phase (None keeps all). ``itl_option`` is ``"A"``,
    ``"B"``, ``"C"`` or ``"auto"`` (C when every successful multi-token request carries server
    token timestamps, else B). ``prefill_deadline`` (Etalon ``D_p``) defaults to a fit of this
    run's TTFTs; ``decode_deadline``/``reading_speed``/``ttft_allowance``/``alpha`` parametrise
    the experience metrics (:mod:`pytest_llmbench.measure.experience`).
    """
    opt = _check_itl_option(itl_option)
    if not 0.0 <= steady_state_fraction < 1.0:
        raise ValueError(f"steady_state_fraction must be in [0, 1), got {steady_state_fraction}")
    if gpu_count is not None and gpu_count <= 0:
        raise ValueError(f"gpu_count must be a positive integer, got {gpu_count}")
    for slo in slos:
        if not isinstance(getattr(slo, "metric", None), str) or not callable(getattr(slo, "ok", None)):
            raise TypeError(f"SLO {slo!r} needs a 'metric' str attribute and an ok(values) method")
    recs = [r for r in records if phase is None or r.phase == phase]
    if not recs:
        raise ValueError(f"no records to summarise (phase filter: {phase!r})")
    recs.sort(key=lambda r: (r.sent_ns, r.index))

    rows = _Rows.of(recs)
    ch = _Chunks.of(recs, rows.t0)
    osl = _output_lengths(rows, ch)
    lat = _latency_columns(rows, ch, osl)
    itl = _itl(rows, ch, osl, opt)
    fluid, idle, dp_model = _experience(rows, lat["ttft"], itl.tokens, prefill_deadline, decode_deadline,
                                        reading_speed, ttft_allowance)
    columns = _columns(rows, osl, lat, itl, fluid, idle)
    columns.update(mx.per_request_table(recs))  # AIPerf per-request metrics and HTTP phases (metrics_extra)
    per_request = PerRequest(columns, itl.samples)
    dists, ttft_buckets = _distributions(columns, rows, ch, itl, percentiles, confidence)
    itl_d = dists["itl"]

    duration = rows.duration
    w0, w1 = steady_state_window(0.0, duration, steady_state_fraction)
    sc = _Scalars({"": (w0, w1), "_full": (0.0, duration)}, batches, confidence)
    _count_scalars(sc, rows)
    held_w = _throughput_scalars(sc, rows, ch, osl, gpu_count)
    if slos:
        _slo_scalars(sc, rows, per_request, slos)
    sc.out["tokens_in_flight"], sc.out["concurrency"] = _in_flight(
        rows.sent * _NS, rows.end * _NS, rows.isl, ch.ns * _NS, held_w, ch.counts, w0, w1, batches, confidence)
    _preemption_scalars(sc, rows)
    _shape_scalars(sc, rows, osl, lat, itl, itl_d)
    _experience_scalars(sc, rows, osl, idle, itl.tokens, dp_model, alpha=alpha, reading_speed=reading_speed,
                        ttft_allowance=ttft_allowance)

    definitions = dict(DEFINITIONS)
    definitions["itl_option"] = f"{itl.option}: {ITL_OPTIONS[itl.option]}"
    definitions["fluidity_parameters"] = (
        f"D_d = {decode_deadline:g} s; D_p = {dp_model.source if dp_model else 'n/a'}"
        f"{'' if dp_model is None else f' + {dp_model.slack:g} s slack'}")
    return RunMetrics(
        distributions=dists, scalars=sc.out,
        errors_by_type=dict(sorted(Counter(e.value for e in rows.err[rows.failed]).items())),
        per_request=per_request, windows=_window_labels(sc.out, w0, w1, duration, steady_state_fraction),
        ttft_by_input_length=ttft_buckets, itl_option=itl.option, itl_modality=(
            modality(itl_d.samples, assume_sorted=True) if itl_d.samples is not None else None),
        itl_tail=tail_shape(itl_d.samples, assume_sorted=True) if itl_d.samples is not None else None,
        definitions=definitions, steady_window=(w0, w1), prefill_deadline=dp_model, tokens=itl.tokens,
    )


def _in_flight(start: np.ndarray, end: np.ndarray, isl: np.ndarray, chunk_t: np.ndarray,
               chunk_w: np.ndarray, chunk_counts: np.ndarray, w0: float, w1: float, batches: int,
               confidence: float) -> tuple[Estimate, Estimate]:
    """Time-averaged tokens in flight and requests in flight over [w0, w1] (§5.5.4).

    A request holds its input tokens from submission to end, and each output token from its
    arrival to the request's end. The integral up to x is evaluated at the batch boundaries
    (requests already ended contribute a precomputed constant; only requests straddling x
    are evaluated chunk by chunk); the per-batch averages give a t interval (batch means).
    """
    length = w1 - w0
    method = f"time average over the window, batch means ({max(batches, 1)} sub-windows), t interval"
    if not length > 0:
        nan = Estimate(_NAN, 0, "tokens", undersampled=True, method=method)
        return nan, replace(nan, unit="requests")
    n = start.size
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(chunk_counts, out=offsets[1:])
    w_sum = _segment_sum(chunk_w, chunk_counts)
    wt_sum = _segment_sum(chunk_w * chunk_t, chunk_counts)
    ended_const = end * w_sum - wt_sum  # Σ w_k (end - t_k): the whole output contribution
    has = chunk_counts > 0
    first_t = np.full(n, np.inf)
    first_t[has] = chunk_t[offsets[:-1][has]]
    bounds = np.linspace(w0, w1, max(batches, 1) + 1)
    tok_int = np.empty(bounds.size)
    req_int = np.empty(bounds.size)
    for j, x in enumerate(bounds):
        held = np.clip(np.minimum(end, x) - start, 0.0, None)
        req_int[j] = held.sum()
        out_part = float(ended_const[end <= x].sum())
        mid = np.flatnonzero((first_t < x) & (end > x))
        if mid.size:
            lens = chunk_counts[mid]
            idx = np.repeat(offsets[mid] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
            out_part += float(np.dot(chunk_w[idx], np.clip(x - chunk_t[idx], 0.0, None)))
        tok_int[j] = float(np.dot(isl, held)) + out_part
    out = []
    for integral, unit in ((tok_int, "tokens"), (req_int, "requests")):
        sums = np.diff(integral)
        est = rate_from_window_sums(sums, n, length, unit=unit, confidence=confidence)
        out.append(replace(est, undersampled=False, method=method))
    return out[0], out[1]


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
