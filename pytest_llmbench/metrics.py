"""Records -> per-request and aggregate metrics (§4.6.3, §5.1.4, §5.2.4, §5.4.3-4, §5.5.4, §5.8.4).

:func:`summarize` turns a run's :class:`~pytest_llmbench.records.RequestRecord` list into a
:class:`RunMetrics`: one :class:`PerRequest` table (numpy arrays, one entry per record, NaN where
undefined), pooled ITL samples, :class:`~pytest_llmbench.stats.Distribution` summaries with
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

from . import experience as ux
from . import metrics_extra as mx
from . import registry
from .records import ErrorType, RequestRecord
from .stats import (
    DEFAULT_PERCENTILES,
    DEFINITIONS as STATS_DEFINITIONS,
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
_OPTIONAL = ("ttft_incl_reasoning", "ttfo", "prefill_tps_per_request", "send_lag",
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
    the experience metrics (:mod:`pytest_llmbench.experience`).
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
    n = len(recs)

    # ---- one pass over the records for the scalar fields -------------------------------------
    t0 = min(r.sent_ns for r in recs)
    ends = [r.end_ns for r in recs if r.end_ns is not None]
    t_end = max(ends) if ends else max(r.sent_ns for r in recs)
    sent = np.array([r.sent_ns - t0 for r in recs], dtype=np.int64)
    end_i = np.array([(r.end_ns if r.end_ns is not None else t_end) - t0 for r in recs], dtype=np.int64)
    has_end = np.array([r.end_ns is not None for r in recs])
    first_tok = np.array([_f(None if r.first_token_ns is None else r.first_token_ns - t0) for r in recs])
    first_chunk = np.array([_f(None if r.first_chunk_ns is None else r.first_chunk_ns - t0) for r in recs])
    intended = np.array([_f(None if r.intended_ns is None else r.intended_ns - t0) for r in recs])
    isl = np.array([r.input_tokens for r in recs], dtype=np.float64)
    max_tokens = np.array([r.max_tokens for r in recs], dtype=np.float64)
    in_client = np.array([_f(r.input_tokens_client) for r in recs])
    in_server = np.array([_f(r.input_tokens_server) for r in recs])
    out_client = np.array([_f(r.output_tokens_client) for r in recs])
    out_server = np.array([_f(r.output_tokens_server) for r in recs])
    err = np.array([r.error_type for r in recs], dtype=object)
    ok = np.array([r.error_type is None for r in recs])
    failed = np.array([r.failed for r in recs])
    cancelled = ~ok & ~failed
    st = [r.server_timing or {} for r in recs]
    queue_ns = np.array([_f(s.get("queue_ns")) for s in st])
    prefill_ns = np.array([_f(s.get("prefill_ns")) for s in st])
    preemptions = np.array([_f(s.get("preemptions")) for s in st])
    preempted_tokens = np.array([_f(s.get("preempted_tokens")) for s in st])

    # ---- chunks, flattened ----------------------------------------------------------------
    n_chunks = np.fromiter((len(r.chunk_ns) for r in recs), dtype=np.int64, count=n)
    total_chunks = int(n_chunks.sum())
    c_ns = np.fromiter(itertools.chain.from_iterable(r.chunk_ns for r in recs), dtype=np.int64,
                       count=total_chunks) - t0

    def _tokens_of(r: RequestRecord) -> list[int]:
        if len(r.chunk_tokens) == len(r.chunk_ns):
            return r.chunk_tokens
        if r.chunk_tokens:
            raise ValueError(f"record {r.index}: {len(r.chunk_tokens)} chunk_tokens for "
                             f"{len(r.chunk_ns)} chunks")
        return [1 if t.strip() else 0 for t in r.chunk_text]  # no tokenizer counts: 1 per text chunk

    c_tok = np.fromiter(itertools.chain.from_iterable(_tokens_of(r) for r in recs), dtype=np.int64,
                        count=total_chunks)
    c_own = np.repeat(np.arange(n), n_chunks)
    if total_chunks > 1:
        bad = (np.diff(c_ns) < 0) & (c_own[1:] == c_own[:-1])
        if bad.any():
            r = recs[int(c_own[1:][bad][0])]
            raise ValueError(f"record {r.index}: chunk_ns is not non-decreasing")
    osl_chunks = _segment_sum(c_tok, n_chunks)
    osl = np.where(~np.isnan(out_server), out_server, np.where(~np.isnan(out_client), out_client, osl_chunks))

    # reasoning: first chunk with non-whitespace reasoning (only records that streamed any)
    first_reason = np.full(n, _NAN)
    for i, r in enumerate(recs):
        cr = r.chunk_reasoning
        if cr and cr.count("") != len(cr):
            for t, txt in zip(r.chunk_ns, r.chunk_reasoning):
                if txt and txt.strip():
                    first_reason[i] = t - t0
                    break

    # ---- per-request latency metrics (seconds; successful requests only) ------------------------
    ns = 1e-9
    sent_f = sent.astype(np.float64)
    okf = np.where(ok, 1.0, _NAN)  # multiplies to NaN for unsuccessful rows
    ttft = (first_tok - sent_f) * ns * okf
    ttft_any = (first_chunk - sent_f) * ns * okf
    incl_reason = np.fmin(first_reason, first_tok)
    ttft_incl_reasoning = np.where(~np.isnan(first_reason), (incl_reason - sent_f) * ns, _NAN) * okf
    ttfo = np.where(first_reason < first_tok, ttft, _NAN)
    e2e = np.where(has_end, (end_i - sent) * ns, _NAN) * okf
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(osl >= 2, (e2e - ttft) / (osl - 1), _NAN)
        output_tps = np.where((osl > 0) & (e2e > 0), osl / e2e, _NAN)
        prefill_tps = np.where(ttft > 0, isl / ttft, _NAN)
        norm_lat = np.where(osl > 0, e2e / osl, _NAN)
        in_diff = np.where(in_client > 0, (in_server - in_client) / in_client * 100.0, _NAN)
        out_diff = np.where(out_client > 0, (out_server - out_client) / out_client * 100.0, _NAN)
        osl_mm = np.where(max_tokens > 0, (osl - max_tokens) / max_tokens * 100.0, _NAN) * okf
    send_lag = (sent_f - intended) * ns
    schedule_latency = np.where(has_end, (end_i - intended) * ns, _NAN) * okf

    # ---- content chunks and token times (§5.4.3: from the first content token on) --------------
    ft_chunk = first_tok[c_own]
    content = (c_tok > 0) & (c_ns >= np.where(np.isnan(ft_chunk), np.inf, ft_chunk))
    content_ok = content & ok[c_own]
    a_ns, a_own = c_ns[content_ok], c_own[content_ok]
    a_vals, a_owner = _pairs_diff(a_ns, a_own)
    itl = {"A": ItlSamples("A", a_vals * ns, a_owner)}
    ttst = np.full(n, _NAN)
    if a_owner.size:
        u, first_idx = np.unique(a_owner, return_index=True)
        ttst[u] = a_vals[first_idx] * ns
    # option B token times of every request (failed ones too: they feed user idle latency)
    tok_rep = c_tok[content]
    b_ns_all = np.repeat(c_ns[content], tok_rep)
    b_own_all = np.repeat(c_own[content], tok_rep)
    tok_counts = np.bincount(b_own_all, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(tok_counts, out=offsets[1:])
    tokens = ux.TokenTimes(b_ns_all, offsets, sent)
    sel_b = ok[b_own_all]
    b_vals, b_owner = _pairs_diff(b_ns_all[sel_b], b_own_all[sel_b])
    single_token_chunks = bool((tok_rep == 1).all())
    itl["B"] = ItlSamples("B", a_vals * ns if single_token_chunks else b_vals * ns,
                          a_owner if single_token_chunks else b_owner)
    # option C: server per-token timestamps
    has_c = np.array([bool(r.server_token_ns) for r in recs]) & ok
    if has_c.any():
        c_lists = [recs[i].server_token_ns for i in np.flatnonzero(has_c)]
        c_counts = np.fromiter((len(x) for x in c_lists), dtype=np.int64, count=len(c_lists))
        s_ns = np.fromiter(itertools.chain.from_iterable(c_lists), dtype=np.int64, count=int(c_counts.sum()))
        s_own = np.repeat(np.flatnonzero(has_c), c_counts)
        s_vals, s_owner = _pairs_diff(s_ns, s_own)
        if (s_vals < 0).any():
            r = recs[int(s_owner[s_vals < 0][0])]
            raise ValueError(f"record {r.index}: server_token_ns is not non-decreasing")
        itl["C"] = ItlSamples("C", s_vals * ns, s_owner)
    need_c = ok & (osl >= 2)
    c_complete = bool(has_c[need_c].all()) if need_c.any() else bool(has_c.any())
    if opt == "AUTO":
        opt = "C" if ("C" in itl and c_complete) else "B"
    if opt == "C" and not ("C" in itl and c_complete):
        missing = int((need_c & ~has_c).sum())
        raise ValueError(f"itl_option 'C' needs server_token_ns on every successful multi-token "
                         f"request; {missing} lack it (use 'B' or 'auto', §4.6.3)")
    chosen = itl[opt]
    itl_count, itl_mean, jitter, max_pause = _per_request_stats(chosen.values, chosen.owner, n)
    for arr in (itl_mean, jitter, max_pause):
        arr[~ok] = _NAN

    # ---- experience metrics -------------------------------------------------------------
    fluid = np.full(n, _NAN)
    dp_model = prefill_deadline
    ttft_ok = ~np.isnan(ttft)
    if dp_model is None and ttft_ok.any():
        dp_model = ux.PrefillDeadline.fit(isl[ttft_ok], ttft[ttft_ok],
                                          source="non-negative quadratic fit of this run's TTFTs")
    if dp_model is not None:
        fluid = ux.fluidity_index(tokens, dp_model(isl), decode_deadline)
        fluid[~ok] = _NAN
    judged = ok | failed
    idle = ux.user_idle_latency(tokens, reading_speed=reading_speed, ttft_allowance=ttft_allowance,
                                end_ns=end_i, complete=ok)
    idle[~judged] = _NAN

    columns: dict[str, np.ndarray] = {
        "index": np.array([r.index for r in recs], dtype=np.int64),
        "request_class": np.array([r.request_class for r in recs], dtype=object),
        "error_type": np.array([None if e is None else e.value for e in err], dtype=object),
        "ok": ok, "failed": failed, "cancelled": cancelled,
        "sent": sent_f * ns, "end": np.where(has_end, end_i * ns, _NAN),
        "ttft": ttft, "ttft_any_chunk": ttft_any, "ttft_incl_reasoning": ttft_incl_reasoning,
        "ttfo": ttfo, "ttst": ttst * okf, "e2e": e2e, "tpot": tpot,
        "itl_mean": itl_mean, "jitter": jitter, "max_pause": max_pause, "itl_count": itl_count,
        "isl": isl, "osl": osl, "max_tokens": max_tokens,
        "output_tps_per_request": output_tps, "prefill_tps_per_request": prefill_tps,
        "normalized_latency": norm_lat, "send_lag": send_lag, "schedule_latency": schedule_latency,
        "input_usage_diff_pct": in_diff, "output_usage_diff_pct": out_diff,
        "osl_mismatch_pct": osl_mm, "queue_wait": queue_ns * ns, "prefill": prefill_ns * ns,
        "preemptions": preemptions, "preempted_tokens": preempted_tokens,
        "fluidity": fluid, "user_idle_latency": idle,
    }
    columns.update(mx.per_request_table(recs))  # AIPerf per-request metrics and HTTP phases (metrics_extra)
    per_request = PerRequest(columns, itl)

    # ---- distributions ------------------------------------------------------------------
    def dist(name: str, values: np.ndarray, unit: str) -> Distribution:
        return distribution(name, values, unit, percentiles, confidence=confidence)

    dists: dict[str, Distribution] = {}
    for name in _CORE:
        dists[name] = dist(name, columns[name][ok], UNITS[name])
    for name in _OPTIONAL:
        rows = np.ones(n, dtype=bool) if name in ("send_lag", "user_idle_latency") else ok
        vals = columns[name][rows]
        if np.count_nonzero(~np.isnan(vals)):
            dists[name] = dist(name, vals, UNITS[name])
    dists["inter_chunk"] = dist("time_between_chunks", itl["A"].values, "s")
    dists["itl_distributed"] = (replace(dists["inter_chunk"], name="itl_distributed")
                                if single_token_chunks else dist("itl_distributed", itl["B"].values, "s"))
    if "C" in itl:
        dists["itl_server"] = dist("itl_server", itl["C"].values, "s")
    dists["itl"] = replace({"A": dists["inter_chunk"], "B": dists["itl_distributed"],
                            "C": dists.get("itl_server")}[opt],
                           name="time_between_chunks" if opt == "A" else "itl")
    sizes = tok_rep[ok[c_own[content]]].astype(np.float64)
    dists["chunk_size"] = dist("chunk_size", sizes, "tokens")

    ttft_buckets: dict[str, Distribution] = {}
    for lo, hi in INPUT_LENGTH_BUCKETS:
        sel = ok & (isl >= lo) & (isl < hi)
        if sel.any():
            label = f"[{lo},{'inf' if math.isinf(hi) else int(hi)})"
            ttft_buckets[label] = dist(f"ttft{label}", ttft[sel], "s")

    itl_d = dists["itl"]
    mod = modality(itl_d.samples, assume_sorted=True) if itl_d.samples is not None else None
    tail = tail_shape(itl_d.samples, assume_sorted=True) if itl_d.samples is not None else None

    # ---- scalars ---------------------------------------------------------------------------
    duration = (t_end - t0) * ns
    w0, w1 = steady_state_window(0.0, duration, steady_state_fraction)
    scalars: dict[str, Estimate] = {}

    def count(name: str, k: int, unit: str = "requests") -> None:
        scalars[name] = Estimate(float(k), int(k), unit, method="count")

    n_ok, n_failed = int(ok.sum()), int(failed.sum())
    judged_n = n_ok + n_failed
    count("request_count", n)
    count("completed_count", n_ok)
    count("error_count", n_failed)
    count("cancelled_count", int(cancelled.sum()))
    n_refused = int(sum(1 for e in err if e is ErrorType.REFUSED))
    count("refusals", n_refused)
    scalars["success_rate"] = proportion_estimate(n_ok, judged_n, confidence=confidence)
    scalars["error_rate"] = proportion_estimate(n_failed, judged_n, confidence=confidence)
    scalars["refusal_rate"] = proportion_estimate(n_refused, judged_n, confidence=confidence)
    scalars["benchmark_duration"] = Estimate(duration, n, "s", method="first submission to last response")
    scalars["steady_state_duration"] = Estimate(w1 - w0, n, "s", method="steady-state window length")

    # events for throughput
    req_t = end_i[ok & has_end] * ns
    chunk_ok = ok[c_own] & (c_tok > 0)
    scale = np.divide(osl, osl_chunks, out=np.zeros(n), where=osl_chunks > 0)
    out_t = c_ns[chunk_ok] * ns
    out_w = c_tok[chunk_ok] * scale[c_own[chunk_ok]]
    no_chunks = ok & (osl_chunks == 0) & (osl > 0) & has_end  # non-streamed: tokens at the end
    out_t = np.concatenate((out_t, end_i[no_chunks] * ns))
    out_w = np.concatenate((out_w, osl[no_chunks]))
    in_at = np.where(np.isnan(first_tok), end_i.astype(np.float64), first_tok)
    in_sel = ok & has_end
    in_t, in_w = in_at[in_sel] * ns, isl[in_sel]

    windows_s = {"": (w0, w1), "_full": (0.0, duration)}

    def sums(t: np.ndarray, w: np.ndarray | None) -> dict[str, tuple[np.ndarray, int]]:
        return {suf: window_sums(t, w, a, b, batches) for suf, (a, b) in windows_s.items()}

    def rate(name: str, s: dict[str, tuple[np.ndarray, int]], unit: str) -> None:
        for suf, (a, b) in windows_s.items():
            scalars[name + suf] = rate_from_window_sums(s[suf][0], s[suf][1], b - a, unit=unit,
                                                        confidence=confidence)

    out_s, in_s = sums(out_t, out_w), sums(in_t, in_w)
    rate("request_throughput", sums(req_t, None), "requests/s")
    rate("output_throughput", out_s, "tokens/s")
    rate("input_throughput", in_s, "tokens/s")
    rate("total_token_throughput", {k: (out_s[k][0] + in_s[k][0], out_s[k][1] + in_s[k][1]) for k in out_s},
         "tokens/s")
    if gpu_count:
        o = scalars["output_throughput"]
        scalars["tokens_per_gpu_second"] = Estimate(
            o.value / gpu_count, o.n, "tokens/s/GPU",
            None if o.ci_low is None else o.ci_low / gpu_count,
            None if o.ci_high is None else o.ci_high / gpu_count, o.confidence, o.undersampled,
            f"output throughput / {gpu_count} GPUs")

    if slos:
        good = ok.copy()
        for slo in slos:
            vals = per_request[slo.metric]
            res = np.asarray(slo.ok(vals), dtype=bool)
            if res.shape != vals.shape:
                raise ValueError(f"SLO on {slo.metric!r} returned shape {res.shape}, expected {vals.shape}")
            good &= res | np.isnan(vals.astype(np.float64))
        columns["good"] = good
        count("good_count", int(good.sum()))
        scalars["good_fraction"] = proportion_estimate(int(good.sum()), judged_n, confidence=confidence)
        rate("goodput", sums(end_i[good & has_end] * ns, None), "requests/s")

    held_w = np.where(ok[c_own], c_tok * scale[c_own], c_tok)  # OSL-scaled for successful rows
    tif, conc = _in_flight(sent * ns, end_i * ns, isl, c_ns * ns, held_w, n_chunks, w0, w1, batches,
                           confidence)
    scalars["tokens_in_flight"], scalars["concurrency"] = tif, conc

    reported = ~np.isnan(preemptions)
    if reported.any():
        pre = reported & (preemptions > 0)
        scalars["preemption_rate"] = proportion_estimate(int(pre.sum()), int(reported.sum()), confidence=confidence)
        scalars["preemption_recovery_rate"] = proportion_estimate(int((pre & ok).sum()), int(pre.sum()),
                                                                  confidence=confidence)
        events = float(np.nansum(preemptions[pre]))
        lost = np.nansum(preempted_tokens[pre])
        scalars["tokens_lost_per_preemption"] = Estimate(
            float(lost / events) if events else _NAN, int(events), "tokens/preemption",
            undersampled=events == 0, method="Σ preempted_tokens / Σ preemptions")

    p50, p99 = itl_d.percentiles.get(50.0), itl_d.percentiles.get(99.0)
    if p50 is None or p99 is None:
        p50, p99 = itl_d.percentile(50.0), itl_d.percentile(99.0)
    scalars["itl_tail_ratio"] = Estimate(p99.value / p50.value if p50.value > 0 else _NAN, itl_d.n, "ratio",
                                         undersampled=p99.undersampled, method="P99 / P50 of ITL samples")
    n_content = int(tok_rep.size)
    if n_content:
        scalars["single_token_chunk_fraction"] = proportion_estimate(int((tok_rep == 1).sum()), n_content,
                                                                     confidence=confidence)
    mm = ok & (max_tokens > 0) & (np.abs(osl - max_tokens) > np.minimum(0.05 * max_tokens, 50))
    count("osl_mismatch_count", int(mm.sum()))
    disc = (np.abs(np.nan_to_num(in_diff)) > 10) | (np.abs(np.nan_to_num(out_diff)) > 10)
    count("usage_discrepancy_count", int(disc.sum()))
    n_tokens = np.where(ok, osl, 0.0)[judged]
    if duration > 0 and judged.any():
        scalars["smooth_goodput"] = Estimate(
            ux.smooth_goodput(n_tokens, idle[judged], duration, alpha=alpha), int(judged.sum()),
            "tokens/s", method=f"smooth goodput, alpha={alpha:g}, V=1/{reading_speed:g} s/token, "
            f"TTFT allowance {ttft_allowance:g} s, f(l)=max(l,0)")

    # ---- AIPerf run totals, token-weighted goodput (eq. 5), fluid token rate (metrics_extra) -----
    for name, v in mx.run_values(recs).items():
        if v is not None:
            scalars[name] = Estimate(float(v), n, registry.METRICS[name].unit, method=registry.METRICS[name].definition)
    if duration > 0 and judged.any():
        scalars["token_weighted_goodput"] = Estimate(
            mx.token_weighted_goodput_of(np.where(ok, np.nan_to_num(osl), 0.0), ok & (idle == 0.0), duration),
            int(judged.sum()), "tokens/s", method=f"Σ OSL of requests meeting every deadline A + i/V (A = "
            f"{ttft_allowance:g} s, V = {reading_speed:g} s/token) / whole run (smooth goodput paper eq. 5)")
    if dp_model is not None and ok.any():
        fr = ux.fluid_token_generation_rate(_subset_tokens(tokens, ok), dp_model(isl[ok]), failed=n_failed)
        scalars["fluid_token_rate"] = Estimate(fr.rate, fr.n, "tokens/s", undersampled=not math.isfinite(fr.rate),
                                               method=f"{fr.method} (min fluidity {fr.min_fluidity:g}, "
                                               f"{fr.request_fraction:.0%} of requests)")

    # ---- windows ------------------------------------------------------------------------
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

    definitions = dict(DEFINITIONS)
    definitions["itl_option"] = f"{opt}: {ITL_OPTIONS[opt]}"
    definitions["fluidity_parameters"] = (
        f"D_d = {decode_deadline:g} s; D_p = {dp_model.source if dp_model else 'n/a'}"
        f"{'' if dp_model is None else f' + {dp_model.slack:g} s slack'}")
    return RunMetrics(
        distributions=dists, scalars=scalars,
        errors_by_type=dict(sorted(Counter(e.value for e in err[failed]).items())),
        per_request=per_request, windows=windows, ttft_by_input_length=ttft_buckets,
        itl_option=opt, itl_modality=mod, itl_tail=tail, definitions=definitions,
        steady_window=(w0, w1), prefill_deadline=dp_model, tokens=tokens,
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
