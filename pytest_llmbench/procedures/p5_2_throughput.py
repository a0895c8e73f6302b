"""§5.2 Output Token Throughput: the maximum sustainable load and the throughput it delivers.

Procedure (§5.2.3): configure, warm up (§4.5), then search the load: an iterative ascent from
``rate_min`` in ``rate_step`` increments up to the first saturated level (or ``rate_max``),
then a binary search between the highest sustainable and the lowest saturated level until they
are within ``tolerance`` of each other. Each level runs open-loop Poisson arrivals (default) for
``level_duration_s``, longer on a slow SUT so that at least ``min_level_requests`` arrive
(:func:`level_window_s`); ``load_model="closed"`` searches over concurrency instead. The level
count bounds the search; a time budget (``--llm-max-duration``) never cuts a level short.

A level is *saturated* (§5.2.3.1) when any of these holds:

1. the queue grows: OLS slope of the server's waiting-queue gauge (``/metrics``; the client's
   in-flight count when the server has none) over the steady window is > 0 with one-sided
   p < 0.05 *and* the fitted rise is at least ``max(2, 2%`` of the window's arrivals``)``
   (a bounded queue that happens to end on a burst is not growth);
2. the completion rate is below 90% of the arrival rate, both counted in the same window (the
   steady window, starting no earlier than one median E2E in) and significantly so (one-sided
   binomial test, p < 0.05; see :func:`completion_deficit`). Open loop only: in a closed loop
   arrivals equal completions by construction;
3. TTFT P99 exceeds 10x the TTFT P50 of the lowest load measured in the search (the draft names
   neither the metric nor the lower level; requirements note 28).

In a closed loop rule 1 reads "requests wait at the server for most of the window" (median
waiting > 0: the SUT holds more requests than it can batch). With SLOs (§5.2.2.3,
``ttft_p99_slo_s`` / ``tpot_p99_slo_s``) a level must also meet them. The reported level is the
highest sustainable one (requirements note 26). Steady state (§5.2.3.2): the first 10% of each
level is ramp-up and left out (throughput scalars already use that window, metrics.py); queue
stability and the throughput trend over the window are reported per level.

Without ``rate_min``/``rate_max``/``rate_step``, a short closed-loop probe at
``probe_concurrency`` (long enough to complete about ``PROBE_MIN_COMPLETIONS`` requests at the
warm-up's completion rate, ``budget.probe_window_s``) estimates the capacity and the range is derived from it (0.5x, 2x, step
0.25x); the derived values are reported (5.2.2-MUST-4). The result's ``capacity`` is what
procedures defined relative to capacity (5.3, 5.4, 5.6, 5.10) use.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..client import LLMClient
from ..common import draft
from ..common.seeds import Seeds
from ..compliance import Check, decide
from ..loadgen.load import ArrivalProcess, ClosedLoop, OpenLoop
from ..loadgen.warmup import WarmupResult
from ..measure.registry import METRICS
from ..measure.stats import Distribution, completion_rate_saturated, tail_blowup
from ..measure.summary import RunMetrics
from ..measure.units import Cell, CellValue, format_cell
from .base import CannotMeasure, ProcedureContext
from .budget import PROBE_FIT, probe_window_s, request_floor_s, retry_label, run_lengthening
from .capacity import FREE_OUTPUT
from .figures import MAX_OUTPUT_THROUGHPUT, THROUGHPUT
from .helpers import (
    RAMP_UP_FRACTION,
    QueueTrend,
    criteria_failures,
    fmt_ms,
    fmt_short,
    level_specs,
    parse_criteria,
    pvalue,
    queue_trend,
    steady_window_ns,
)
from .pipeline import Outcome, ProcedureRun
from .prompts import failure_cause
from .result import Capacity, KeyFigure, Sweep, Table
from .run import Measured, measure

DRAFT_MIN_DURATION_S = draft.value("throughput.level_min_s")  # §5.2.2.1


@dataclass
class ThroughputParams:
    """§5.2.2 setup parameters; defaults are the draft's minimums (the ``standard`` profile)."""

    workload: str = "synthetic-uniform"
    level_duration_s: float = DRAFT_MIN_DURATION_S  # per load level (§5.2.2.1)
    load_model: str = "open"  # "open" (search over arrival rate) | "closed" (over concurrency)
    arrival: str = "poisson"  # open loop: poisson | uniform
    rate_min: float | None = None  # req/s; None: derived from the probe
    rate_max: float | None = None
    rate_step: float | None = None
    concurrency_min: int = 1
    concurrency_max: int = 256
    concurrency_step: int | None = None  # None: doubling
    ttft_p99_slo_s: float | None = None  # §5.2.2.3 (optional)
    tpot_p99_slo_s: float | None = None
    tolerance: float = 0.05  # binary search stops when (hi - lo) / lo <= tolerance
    max_levels: int = 16
    probe_concurrency: int = 64
    probe_duration_s: float = 20.0
    min_level_requests: int = 30  # expected arrivals per open-loop level: longer levels on a slow SUT
    tail_factor: float = draft.value("throughput.tail_factor")  # §5.2.3.1 rule 3
    completion_threshold: float = draft.value("throughput.completion_threshold")  # §5.2.3.1 rule 2
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded
    criteria: list[str] = field(default_factory=list)  # extra SLOs (§5.2.2.3), e.g. "fluidity.p1 >= 0.9"

    def validate(self) -> None:
        parse_criteria(self.criteria)
        if self.load_model not in ("open", "closed"):
            raise ValueError(f"load_model must be 'open' or 'closed', got {self.load_model!r}")
        if self.arrival not in ("poisson", "uniform"):
            raise ValueError(f"arrival must be 'poisson' or 'uniform', got {self.arrival!r}")
        if not self.level_duration_s > 0:
            raise ValueError(f"level_duration_s must be > 0, got {self.level_duration_s}")
        for name in ("rate_min", "rate_max", "rate_step", "ttft_p99_slo_s", "tpot_p99_slo_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0, got {v}")
        if self.rate_min is not None and self.rate_max is not None and self.rate_max < self.rate_min:
            raise ValueError(f"rate_max ({self.rate_max}) is below rate_min ({self.rate_min})")
        if not 1 <= self.concurrency_min <= self.concurrency_max:
            raise ValueError(f"need 1 <= concurrency_min <= concurrency_max, got "
                             f"{self.concurrency_min}..{self.concurrency_max}")
        if self.concurrency_step is not None and self.concurrency_step < 1:
            raise ValueError(f"concurrency_step must be >= 1, got {self.concurrency_step}")
        if not 0 < self.tolerance < 1:
            raise ValueError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if self.max_levels < 2:
            raise ValueError(f"max_levels must be >= 2, got {self.max_levels}")
        if self.min_level_requests < 1:
            raise ValueError(f"min_level_requests must be >= 1, got {self.min_level_requests}")
        if self.probe_concurrency < 1 or not self.probe_duration_s > 0:
            raise ValueError("probe_concurrency must be >= 1 and probe_duration_s > 0")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.2')  # data/profiles.yaml


# --------------------------------------------------------------------------------------------
# one load level: workload, run, assessment (also used by 5.3 for its queue-growth indicator)
# --------------------------------------------------------------------------------------------


@dataclass
class LevelAssessment:
    """What one load level showed: rates, latencies, the saturation rules, SLO and steady state."""

    label: str
    load_model: str
    level: float  # offered req/s (open) or concurrency (closed)
    offered_rate: float | None
    arrival_rate: float  # sends/s in the steady window
    completion_rate: float  # successful completions/s in the steady window
    output_tps: float
    request_rate: float
    input_tps: float
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p99: float | None
    success_rate: float
    queue: QueueTrend
    throughput_cv: float | None
    throughput_trend: float | None  # relative change over the window from a linear fit
    steady: bool
    valid: bool
    rules: dict[str, bool] = field(default_factory=dict)
    slo_ok: bool | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def saturated(self) -> bool:
        return any(self.rules.values())

    @property
    def passed(self) -> bool:
        return not self.saturated and self.slo_ok is not False

    @property
    def verdict(self) -> str:
        return "sustainable" if self.passed else ("saturated" if self.saturated else "SLO not met")

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["saturated"], d["passed"], d["verdict"] = self.saturated, self.passed, self.verdict
        return d


def completion_vs_arrival(m: Measured) -> tuple[float, float, int, int]:
    """(arrival rate, completion rate, arrivals, completions) in one window of the send window (§5.2.3.1 rule 2).

    Completions lag their arrivals by the E2E latency, so the window starts after the ramp-up
    (10%) *and* after a median E2E (at most half the send window): otherwise the requests sent
    before the run started, which do not exist, would be "missing" completions.
    """
    start, end = m.load.start_ns, m.load.send_end_ns
    span_ns = end - start
    e2e = [r.end_ns - r.sent_ns for r in m.records if r.ok and r.end_ns is not None and r.sent_ns]
    shift = min(float(np.median(e2e)) if e2e else 0.0, 0.5 * span_ns)
    lo = start + int(max(RAMP_UP_FRACTION * span_ns, shift))
    span = max((end - lo) / 1e9, 1e-9)
    sent = sum(1 for r in m.records if r.sent_ns and lo <= r.sent_ns <= end)
    done = sum(1 for r in m.records if r.ok and r.end_ns is not None and lo <= r.end_ns <= end)
    return sent / span, done / span, sent, done


def completion_deficit(done: int, sent: int, threshold: float = 0.9, alpha: float = 0.05) -> bool:
    """§5.2.3.1 rule 2 with a significance test: completions < ``threshold`` x arrivals.

    Counts over a short window are noisy (a 3 s level at 40 req/s has ~120 arrivals), so the
    ratio must be below ``threshold`` *and* significantly so: given n = completions + arrivals,
    completions ~ Binomial(n, r / (1 + r)) with r = completion/arrival rate ratio; H0 r >= threshold
    is rejected at one-sided ``alpha`` (treating the two counts as independent Poisson counts,
    which overstates the noise because they share requests: conservative).
    """
    if sent <= 0 or not completion_rate_saturated(done, sent, threshold=threshold):
        return False
    from scipy.stats import binomtest  # type: ignore[import-untyped]

    return bool(binomtest(done, done + sent, threshold / (1 + threshold), alternative="less").pvalue < alpha)


def _throughput_bins(m: Measured, lo_ns: int, hi_ns: int) -> tuple[float | None, float | None]:
    """CV of output tok/s over bins of the steady window and the linear-trend relative change."""
    span = (hi_ns - lo_ns) / 1e9
    if span <= 0:
        return None, None
    nbins = int(min(10, max(4, span // 5)))
    edges = np.linspace(lo_ns, hi_ns, nbins + 1)
    counts = np.zeros(nbins)
    for r in m.records:
        if not r.ok:
            continue
        for t, k in zip(r.chunk_ns, r.chunk_tokens):
            if lo_ns <= t < hi_ns and k:
                counts[min(int(np.searchsorted(edges, t, side="right")) - 1, nbins - 1)] += k
    rates = counts / (span / nbins)
    mean = float(rates.mean())
    if mean <= 0:
        return None, None
    cv = float(rates.std(ddof=1) / mean)
    from scipy.stats import linregress  # type: ignore[import-untyped]

    fit = linregress(np.arange(nbins), rates)
    trend = float(fit.slope * (nbins - 1) / mean)
    return cv, (trend if fit.pvalue < 0.05 else 0.0)


def _window_row(d: Distribution, ps: Sequence[float] = (50, 95, 99)) -> list[CellValue]:
    """Percentiles of a steady-window distribution (seconds) for Table 4 ("n/a" when it is empty)."""
    return [Cell(d.percentile(p).value, "s") if d.n else "n/a" for p in ps]


def assess_level(m: Measured, *, level: float, offered_rate: float | None, closed: bool,
                 reference_ttft_p50: float | None, tail_factor: float = 10.0,
                 completion_threshold: float = 0.9, ttft_slo: float | None = None,
                 tpot_slo: float | None = None, criteria: Sequence[str] = ()) -> LevelAssessment:
    """Apply §5.2.3.1 (saturation), §5.2.2.3 (SLO) and §5.2.3.2 (steady state) to one level."""
    mt = m.metrics
    lo, hi = steady_window_ns(m)
    arrival_rate, completion_rate, sent, done = completion_vs_arrival(m)
    queue = queue_trend(m, closed=closed, arrivals=sent)
    cv, trend = _throughput_bins(m, lo, hi)
    ttft_p50, ttft_p99, tpot_p99 = pvalue(mt, "ttft", 50), pvalue(mt, "ttft", 99), pvalue(mt, "tpot", 99)
    rules: dict[str, bool] = {"queue_growth": queue.growing}
    reasons: list[str] = []
    if queue.growing:
        reasons.append("requests wait at the server for most of the window" if closed else
                       f"queue grows (+{queue.rise:.1f} over the window, {queue.source})")
    if not closed:
        rules["completion_rate"] = completion_deficit(done, sent, completion_threshold)
        if rules["completion_rate"]:
            reasons.append(f"completion rate {completion_rate:.2f}/s < {completion_threshold:.0%} of "
                           f"arrival rate {arrival_rate:.2f}/s")
    if reference_ttft_p50 is not None and ttft_p99 is not None:
        rules["tail_blowup"] = tail_blowup(ttft_p99, reference_ttft_p50, factor=tail_factor)
        if rules["tail_blowup"]:
            reasons.append(f"TTFT P99 {fmt_ms(ttft_p99)} > {tail_factor:g}x lower-load TTFT P50 "
                           f"{fmt_ms(reference_ttft_p50)}")
    if ttft_p99 is None and done == 0:
        rules["no_completions"] = True
        reasons.append("no request completed")
    slo_ok: bool | None = None
    if ttft_slo is not None or tpot_slo is not None:
        slo_ok = True
        if ttft_slo is not None and (ttft_p99 is None or ttft_p99 > ttft_slo):
            slo_ok = False
            reasons.append(f"TTFT P99 {fmt_ms(ttft_p99)} > SLO {fmt_ms(ttft_slo)}")
        if tpot_slo is not None and (tpot_p99 is None or tpot_p99 > tpot_slo):
            slo_ok = False
            reasons.append(f"TPOT P99 {fmt_ms(tpot_p99)} > SLO {fmt_ms(tpot_slo)}")
    if criteria:  # SLO expressions, e.g. Etalon's fluidity SLO bounding capacity
        failed = criteria_failures(criteria, mt)
        slo_ok = slo_ok is not False and not failed
        reasons += failed
    if not m.load.valid:
        reasons.append(f"judged despite the load generator self-check: {m.load.invalid_reason}")
    unstable_tput = trend is not None and abs(trend) > 0.2
    steady = not queue.growing and not unstable_tput
    success = mt.scalar("success_rate").value
    return LevelAssessment(
        label=m.summary.label, load_model="closed" if closed else "open", level=level, offered_rate=offered_rate,
        arrival_rate=arrival_rate, completion_rate=completion_rate,
        output_tps=_scalar(mt, "output_throughput"), request_rate=_scalar(mt, "request_throughput"),
        input_tps=_scalar(mt, "input_throughput"), ttft_p50=ttft_p50, ttft_p99=ttft_p99, tpot_p99=tpot_p99,
        success_rate=float(success) if math.isfinite(success) else 0.0, queue=queue, throughput_cv=cv,
        throughput_trend=trend, steady=steady, valid=m.load.valid, rules=rules, slo_ok=slo_ok, reasons=reasons)


def _scalar(mt: RunMetrics, name: str) -> float:
    v = mt.scalar(name).value
    return float(v) if v is not None and math.isfinite(v) else 0.0


# --------------------------------------------------------------------------------------------
# the search
# --------------------------------------------------------------------------------------------


@dataclass
class RateSearch:
    ctx: ProcedureContext
    p: ThroughputParams
    client: Any
    seeds: Seeds | None = None  # the procedure's seed streams (seeds.py); tests without runs pass none
    levels: list[tuple[Measured, LevelAssessment, str]] = field(default_factory=list)  # (run, assessment, phase)
    workloads: list[Any] = field(default_factory=list)  # each level's Workload (own seed)
    retried: list[str] = field(default_factory=list)  # levels repeated after an invalid run

    @property
    def closed(self) -> bool:
        return self.p.load_model == "closed"

    def reference_p50(self, level: float) -> float | None:
        lower = [(a.level, a.ttft_p50) for _, a, _ in self.levels if a.level < level and a.ttft_p50]
        return min(lower)[1] if lower else None

    async def run_level(self, level: float, phase: str) -> LevelAssessment:
        p, ctx, seeds = self.p, self.ctx, self.seeds
        assert seeds is not None
        idx = len(self.levels)
        closed = self.closed
        if closed:
            c = int(level)
            duration = p.level_duration_s
            n = int(c * 4 + 60 * duration) + 50  # plenty; the run stops by duration
            label = f"L{idx:02d}-c{c}"
            load: OpenLoop | ClosedLoop = ClosedLoop(c, duration_s=duration)
        else:
            duration = level_window_s(level, p)
            n = math.ceil(level * duration * 1.3) + 20
            label = f"L{idx:02d}-{level:.3g}rps"
            load = OpenLoop(ArrivalProcess(p.arrival, level, seed=seeds.derive("arrivals", idx)),
                            duration_s=duration)
        specs, wl = level_specs(ctx, p.workload, n, seeds.derive("level", idx), p.max_output_tokens)
        self.workloads.append(wl)
        ctx.progress(f"5.2 {phase} level {idx + 1}: {label}, {duration:.0f} s")
        # the level count bounds a search, not the time budget: a cut level measures nothing
        m = await measure(ctx, self.client, label, specs, load,
                          drain_timeout_s=max(10.0, duration / 2), sized=True,
                          extra={"search_phase": phase, "level": level, "duration_s": duration,
                                 "workload_seed": seeds.derive("level", idx)})
        if not m.load.valid:  # the load generator, not the SUT, failed: run the level once more
            self.retried.append(f"{label} ({m.load.invalid_reason})")
            ctx.progress(f"5.2 {label}: load generator self-check failed, repeating the level")
            specs, wl = level_specs(ctx, p.workload, n, seeds.derive("retry", idx), p.max_output_tokens)  # fresh
            m = await measure(ctx, self.client, label + "-retry", specs, load,
                              drain_timeout_s=max(10.0, duration / 2), sized=True,
                              extra={"search_phase": phase, "level": level, "retry": True,
                                     "workload_seed": seeds.derive("retry", idx)})
        a = assess_level(m, level=level, offered_rate=None if closed else level, closed=closed,
                         reference_ttft_p50=self.reference_p50(level), tail_factor=p.tail_factor,
                         completion_threshold=p.completion_threshold, ttft_slo=p.ttft_p99_slo_s,
                         tpot_slo=p.tpot_p99_slo_s, criteria=p.criteria)
        m.summary.extra["assessment"] = a.to_json()
        self.levels.append((m, a, phase))
        return a

    def converged(self, lo: float, hi: float) -> bool:
        if self.closed:
            return hi - lo <= max(1.0, self.p.tolerance * lo)
        return lo > 0 and (hi - lo) / lo <= self.p.tolerance

    def midpoint(self, lo: float, hi: float) -> float:
        return float((int(lo) + int(hi)) // 2) if self.closed else (lo + hi) / 2

    async def search(self, start: float, step: float | None, stop: float) -> tuple[float | None, float | None]:
        """Iterative ascent, then binary search; returns (highest passing, lowest failing) level."""
        p = self.p
        lo: float | None = None
        hi: float | None = None
        level = start
        while len(self.levels) < p.max_levels:  # 1. iterative ascent
            a = await self.run_level(level, "iterative")
            if not a.passed:
                hi = level
                break
            lo = level
            if level >= stop:
                return lo, None
            nxt = level + step if step is not None else level * 2
            level = min(float(int(nxt)) if self.closed else nxt, stop)
        while hi is not None and lo is None and len(self.levels) < p.max_levels:  # the start failed
            level = float(max(1, int(hi) // 2)) if self.closed else hi / 2
            if self.closed and level >= hi:
                break
            a = await self.run_level(level, "descent")
            if a.passed:
                lo = level
            else:
                hi = level
        while lo is not None and hi is not None and not self.converged(lo, hi) \
                and len(self.levels) < p.max_levels:  # 2. binary search
            mid = self.midpoint(lo, hi)
            if mid <= lo or mid >= hi:
                break
            a = await self.run_level(mid, "binary")
            if a.passed:
                lo = mid
            else:
                hi = mid
        return lo, hi


def level_window_s(rate: float, p: ThroughputParams) -> float:
    """An open-loop level's sending window: ``level_duration_s``, longer on a slow SUT so that the
    level expects at least ``min_level_requests`` arrivals (§5.2.2.1; a level of one or two requests
    cannot be judged sustainable or not)."""
    return request_floor_s(rate, p.level_duration_s, p.min_level_requests)


async def _probe_capacity(ctx: ProcedureContext, client: Any, p: ThroughputParams, seed: int,
                          duration_s: float, label: str) -> Measured:
    """A closed-loop run at ``probe_concurrency``: the preliminary capacity estimate."""
    c = p.probe_concurrency
    specs, _ = level_specs(ctx, p.workload, int(c * 4 + 80 * duration_s) + 50, seed, p.max_output_tokens)
    ctx.progress(f"5.2 capacity probe: closed loop, concurrency {c}, {duration_s:.0f} s")
    return await measure(ctx, client, label, specs, ClosedLoop(c, duration_s=duration_s),
                         drain_timeout_s=30.0, sized=True, extra={"search_phase": "probe"})


def _probe_estimate(m: Measured) -> float | None:
    """The probe's completion rate over its steady window (None: no request completed in it)."""
    rate = m.metrics.scalar("request_throughput").value
    return rate if rate and math.isfinite(rate) else None


def _gpu_count(ctx: ProcedureContext) -> int | None:
    from .facts import declarations

    try:
        hw = dict(declarations(ctx)).get("hardware")
    except Exception:  # noqa: BLE001 - a bad declaration file is reported by the compliance step
        return None
    count = hw.get("count") if isinstance(hw, dict) else None
    return int(count) if isinstance(count, (int, float)) and count > 0 else None


class Throughput(ProcedureRun[ThroughputParams]):
    """§5.2.3: warm-up, a capacity probe when no range is given, then the saturation search."""

    id, title, params_type, profiles = "5.2", "Output Token Throughput", ThroughputParams, PROFILES
    provides_capacity = "rate"  # the highest sustainable request rate (§5.2.4, §5.3.3)
    measurement_keys = (
        "load_model", "levels_tested", "slo_applied", "ttft_p99_slo_ms", "tpot_p99_slo_ms", "level_duration_s",
        "range_source", "search_start", "search_step", "search_stop", "capacity_estimate_req_s",
        "lowest_saturated_level", "max_output_throughput_tok_s", "max_request_throughput_req_s",
        "max_input_throughput_tok_s", "sustainable_rate_req_s", "sustainable_concurrency", "tokens_per_gpu_second",
        "batch_utilization")
    measurement_patterns = (r"(ttft|tpot|e2e)_p[0-9]+_ms",)

    @staticmethod
    def plan(p: ThroughputParams) -> dict[str, Any]:
        levels = min(p.max_levels, 8)
        return {"requests": p.warmup_requests, "min_duration_s": levels * p.level_duration_s + p.probe_duration_s}

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        return await self.warm_up_on_workload(client)

    async def run_loads(self, client: LLMClient) -> None:
        self.probe: Measured | None = None
        self.estimate: float | None = None
        self.start, self.step, self.stop, self.range_source = await self._range(client)
        self.search = RateSearch(self.ctx, self.p, client, self.seeds)
        self.lo, self.hi = await self.search.search(self.start, self.step, self.stop)

    async def _range(self, client: LLMClient) -> tuple[float, float | None, float, str]:
        """The search range: declared, or derived from a closed-loop probe (5.2.2-MUST-4)."""
        p = self.p
        if p.load_model == "closed":
            step = None if p.concurrency_step is None else float(p.concurrency_step)
            return float(p.concurrency_min), step, float(p.concurrency_max), "declared"
        if p.rate_min is None or p.rate_max is None or p.rate_step is None:
            label = f"probe-c{p.probe_concurrency}"

            async def probe(window_s: float, attempt: int) -> Measured:  # a retry on prompts of its own
                return await _probe_capacity(self.ctx, client, p, self.seeds.derive("probe", attempt), window_s,
                                             retry_label(label, attempt))

            self.probe, tried = await run_lengthening(
                self.ctx, "5.2 capacity probe", label, probe_window_s(p.probe_duration_s, self.warmup), probe,
                lambda m: _probe_estimate(m) is not None, PROBE_FIT)
            self.estimate = _probe_estimate(self.probe)
            if self.estimate is None:
                raise CannotMeasure("5.2: the capacity probe completed no request: "
                                    f"{failure_cause(self.probe.records)}{tried.history(PROBE_FIT)}. Without a "
                                    "completed request no rate range can be derived (or give rate_min, rate_max "
                                    "and rate_step)")
        est = self.estimate or 0.0  # set whenever one of the three is missing
        start = p.rate_min if p.rate_min is not None else 0.5 * est
        stop = p.rate_max if p.rate_max is not None else max(2.0 * est, start)
        step = p.rate_step if p.rate_step is not None else 0.25 * est
        source = "declared" if self.estimate is None else (
            f"derived from a closed-loop probe (concurrency {p.probe_concurrency}, {self.estimate:.2f} req/s completed)")
        return start, step, stop, source

    @property
    def best(self) -> tuple[Measured, LevelAssessment, str] | None:
        """The highest sustainable level (requirements note 26)."""
        if self.lo is None:
            return None
        return next(x for x in reversed(self.search.levels) if x[1].level == self.lo and x[1].passed)

    def summarize(self) -> Outcome:
        p, levels, best, closed = self.p, self.search.levels, self.best, self.p.load_model == "closed"
        unit = "concurrency" if closed else "req/s"
        self.slo_given = p.ttft_p99_slo_s is not None or p.tpot_p99_slo_s is not None or bool(p.criteria)
        self.gpus = _gpu_count(self.ctx)
        notes: list[str] = []
        self.measurements = measurements = {
            "load_model": p.load_model, "levels_tested": len(levels), "slo_applied": self.slo_given,
            "ttft_p99_slo_ms": None if p.ttft_p99_slo_s is None else p.ttft_p99_slo_s * 1000,
            "tpot_p99_slo_ms": None if p.tpot_p99_slo_s is None else p.tpot_p99_slo_s * 1000,
            "level_duration_s": p.level_duration_s, "range_source": self.range_source,
            "search_start": self.start, "search_step": self.step, "search_stop": self.stop,
            "capacity_estimate_req_s": self.estimate,
            "lowest_saturated_level": self.hi,
        }
        capacity: Capacity | None = None
        self.table3: Table | None = None
        self.table4: Table | None = None
        metrics = None
        if best is None:
            notes.append(f"no sustainable load level found in {len(levels)} levels (lowest tried "
                         f"{min(a.level for _, a, _ in levels):g} {unit}); no capacity determined")
        else:
            metrics, capacity = best[0].metrics, self._at_maximum(best, notes)
        tables = [t for t in (self.table3, self.table4) if t is not None] + [_search_table(levels, unit)]
        if self.search.retried:
            notes.append("load generator self-check failed, level repeated: " + "; ".join(self.search.retried))
        invalid = [a.label for _, a, _ in levels if not a.valid]
        if invalid:
            notes.append(f"load generator self-check failed again at {', '.join(invalid)}: judged on their "
                         "measurements, but the client (not only the SUT) may have set their latencies")
        search_plot = {"level_label": "offered load (req/s)" if not closed else "concurrency",
                       "value_label": "achieved output throughput (tok/s)",
                       "steps": [{"level": a.level, "passed": a.passed, "value": a.output_tps,
                                  "label": f"{phase}: {a.verdict}" + (f" ({'; '.join(a.reasons)})" if a.reasons
                                                                       else "")}
                                 for _, a, phase in levels]}
        decl = self.search.workloads[0].declaration.to_json() if self.search.workloads else {"name": p.workload}
        return Outcome(metrics=metrics, tables=tables, measurements=measurements, workload=decl, notes=notes,
                       plots={"search": search_plot}, capacity=capacity,
                       runs=[m for m, _, _ in levels] + ([self.probe] if self.probe is not None else []),
                       facts={"itl_reported": True, "exceeds_capacity": self.hi is not None},
                       key_figures=self._key_figures(), sweep=self._sweep())

    def _key_figures(self) -> list[KeyFigure]:
        """The sustainable rate and the maximum output throughput (§5.2.4): the headline's throughput."""
        m = self.measurements
        return [KeyFigure("sustainable_rate", "Sustainable request rate", m.get("sustainable_rate_req_s"), "req/s",
                          THROUGHPUT, 10, level="highest offered rate the SUT kept up with",
                          definition="highest offered request rate at which achieved throughput kept up with "
                                     "offered load and the queue stayed bounded (§5.2.4)"),
                KeyFigure(MAX_OUTPUT_THROUGHPUT, "Max output throughput", m.get("max_output_throughput_tok_s"),
                          "tok/s", THROUGHPUT, 11, level="best level of the 5.2 sweep", metric="output_throughput",
                          definition=METRICS["output_throughput"].definition)]

    def _sweep(self) -> Sweep | None:
        m = self.measurements
        if m.get("sustainable_rate_req_s") is None:
            return None
        return Sweep(f"sustainable {fmt_short(m['sustainable_rate_req_s'])} req/s; max output "
                     f"{fmt_short(m.get('max_output_throughput_tok_s') or 0)} tok/s")

    def _at_maximum(self, best: tuple[Measured, LevelAssessment, str], notes: list[str]) -> Capacity:
        """Tables 3 and 4 and the measurements at the maximum sustainable load (§5.2.4)."""
        p, ctx, closed, hi, stop = self.p, self.ctx, self.p.load_model == "closed", self.hi, self.stop
        unit = "concurrency" if closed else "req/s"
        measurements, gpus, slo_given, search, levels = (self.measurements, self.gpus, self.slo_given, self.search,
                                                         self.search.levels)
        bm, ba, _ = best
        metrics = bm.metrics
        sustained_rate = ba.level if not closed else ba.request_rate
        capacity = Capacity(rate=sustained_rate, output_throughput=ba.output_tps,
                            source="measured by 5.2 in this session", standing="measured" if hi is not None
                            else "lower-bound", workload=p.workload + (f" (output capped at {p.max_output_tokens})" if p.max_output_tokens
                                                      else ""), request_shape=FREE_OUTPUT)
        if hi is None:
            notes.append(f"no saturation up to the search's upper end ({stop:g} {unit}): the capacity is at least "
                         "this level (a lower bound: capacity-relative procedures say so in their verdict)")
        util = _batch_utilization(ctx, bm)
        tpg = ba.output_tps / gpus if gpus else None
        sustain: CellValue = (Cell(ba.level, "requests/s", 2, label=True) if not closed
                              else ["concurrency ", Cell(int(ba.level), "requests"), " (",
                                    Cell(ba.request_rate, "requests/s", 2, label=True), ")"])
        sustain_txt = format_cell(sustain)
        self.table3 = (Table(
            "Table 3: Throughput Summary", ["Metric", "Value"],
            [["Max Output Throughput", Cell(ba.output_tps, "tokens/s", 0, label=True)],
             ["Max Request Throughput", Cell(ba.request_rate, "requests/s", 1, label=True)],
             ["Max Input Throughput", Cell(ba.input_tps, "tokens/s", 0, label=True)],
             ["Sustainable Load", sustain],
             ["Tokens per GPU-second", Cell(tpg, "tokens/s/GPU", 0, label=True) if tpg is not None
              else "n/a (GPU count not declared or 0)"],
             ["Batch Utilization", [Cell(util[0], "fraction", 1), " (mean batch ", Cell(util[1], "requests", 1),
                                    " / max ", Cell(util[2], "requests"), ")"] if util
              else "not measurable (needs server batch metrics)"]],
            notes=[("latency constraint: " + ", ".join(
                        x for x in (f"TTFT P99 <= {fmt_ms(p.ttft_p99_slo_s)}" if p.ttft_p99_slo_s else "",
                                    f"TPOT P99 <= {fmt_ms(p.tpot_p99_slo_s)}" if p.tpot_p99_slo_s else "",
                                    *p.criteria) if x))
                   if slo_given else "no latency constraint: maximum load without saturation (§5.2.3 4a)",
                   "throughput over the level's steady-state window (first 10% excluded, §5.2.3.2)",
                   f"level duration {p.level_duration_s:g} s; search converged to within "
                   f"{p.tolerance:.0%}" if hi is not None and search.converged(ba.level, hi) else
                   f"level duration {p.level_duration_s:g} s; search stopped after {len(levels)} levels"]))
        window = {name: metrics.in_steady_window(name) for name in ("ttft", "tpot", "e2e")}
        self.table4 = (Table(
            "Table 4: Latency at Maximum Throughput", ["Metric", "P50", "P95", "P99"],
            [[label, *_window_row(window[name])] for label, name in (("TTFT", "ttft"), ("TPOT", "tpot"),
                                                                   ("End-to-End", "e2e"))],
            notes=[f"at the maximum sustainable load ({sustain_txt}), n={window['ttft'].n}: the requests sent in "
                   "the level's steady-state window, where its throughput was measured (ramp-up excluded, "
                   "§5.2.3.2)"]))
        measurements.update({
            "max_output_throughput_tok_s": round(ba.output_tps, 3),
            "max_request_throughput_req_s": round(ba.request_rate, 4),
            "max_input_throughput_tok_s": round(ba.input_tps, 3),
            "sustainable_rate_req_s": round(sustained_rate, 4),
            "sustainable_concurrency": int(ba.level) if closed else None,
            "tokens_per_gpu_second": None if tpg is None else round(tpg, 3),
            "batch_utilization": None if util is None else round(util[0], 4),
            # one "latency at maximum throughput" (§5.2.4.3): Table 4's, over the steady window (issue 48)
            **{f"{name}_p{q}_ms": _ms(window[name].percentile(q).value if window[name].n else None)
               for name in ("ttft", "tpot", "e2e") for q in (50, 95, 99)},
        })
        return capacity

    def checks(self, out: Outcome) -> dict[str, Check]:
        checks = item_checks(self.p, self.search.levels, self.best, self.warmup, self.slo_given, self.start, self.step,
                         self.stop, self.range_source)
        checks.update(report_checks(self.ctx, self.best, self.gpus, self.measurements,
                                     {"5.2.5-REPORT-1": self.table3, "5.2.5-REPORT-2": self.table4}, out.tables))
        return checks


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def _batch_utilization(ctx: ProcedureContext, m: Measured) -> tuple[float, float, int] | None:
    """Mean batch / max batch (§5.2.4.2): tokens emitted per engine iteration over the level."""
    tokens = m.server_delta("llmbench:generation_tokens_total")
    iters = m.server_delta("llmbench:iterations_total")
    max_batch = ctx.sut.server_info.get("max_num_seqs") if ctx.sut.embedded else None
    if not tokens or not iters or not max_batch:
        return None
    mean = tokens / iters
    return mean / float(max_batch), mean, int(max_batch)


def _search_table(levels: list[tuple[Measured, LevelAssessment, str]], unit: str) -> Table:
    rows = []
    for i, (_, a, phase) in enumerate(levels, start=1):
        rows.append([str(i), phase,
                     Cell(a.level, "requests/s", 2) if unit == "req/s" else Cell(int(a.level), "requests"),
                     Cell(a.output_tps, "tokens/s", 0),
                     [Cell(a.completion_rate, "requests/s", 2), "/", Cell(a.arrival_rate, "requests/s", 2)],
                     Cell(a.ttft_p50, "s"), Cell(a.ttft_p99, "s"), Cell(a.tpot_p99, "s"), a.queue.label,
                     "yes" if a.steady else "no",
                     a.verdict + (": " + "; ".join(a.reasons) if a.reasons else "")])
    return Table("Search steps (§5.2.3)",
                 ["Step", "Phase", f"Load ({unit})", "Achieved (tok/s)", "Completed/Arrived (r/s)", "TTFT P50",
                  "TTFT P99", "TPOT P99", "Queue", "Steady", "Verdict"], rows,
                 notes=[("saturated when the queue grows, completions < 90% of arrivals, or TTFT P99 > 10x the "
                         "lowest load's TTFT P50 (§5.2.3.1); rates over each level's steady window")])


def item_checks(p: ThroughputParams, levels: list[tuple[Measured, LevelAssessment, str]],
            best: tuple[Measured, LevelAssessment, str] | None, wu: Any, slo_given: bool,
            start: float, step: float | None, stop: float, range_source: str) -> dict[str, Check]:
    closed = p.load_model == "closed"
    windows = [m.load.send_window_s for m, _, _ in levels]
    c: dict[str, Check] = {}
    c["5.2.2-MUST-2"] = decide("5.2.2-MUST-2", level_duration_s=p.level_duration_s, send_windows_s=windows)
    c["5.2.2-PARAM-1"] = (decide("5.2.2-PARAM-1", ok=p.level_duration_s >= DRAFT_MIN_DURATION_S, met=f"every level ran >= {DRAFT_MIN_DURATION_S:g} s", unmet=f"levels ran {p.level_duration_s:g} s < the draft's minimum "
                                      f"{DRAFT_MIN_DURATION_S:g} s (profile {p.level_duration_s:g} s)"))
    c["5.2.2-SHOULD-1"] = decide("5.2.2-SHOULD-1", send_windows_s=windows)
    for rid in ("5.2.2-MUST-4", "5.2.2-MUST-5"):
        c[rid] = decide(rid, loop="closed" if closed else "open", start=start, stop=stop, step=step,
                        note="" if closed else range_source)
    c["5.2.2-PARAM-2"] = decide("5.2.2-PARAM-2", ok=True, met="SLOs recorded: TTFT P99 <= "
                                   f"{p.ttft_p99_slo_s}, TPOT P99 <= {p.tpot_p99_slo_s} s"
                                   + "".join(f", {x}" for x in p.criteria) if slo_given
                                   else "no latency constraint given (optional)")
    if slo_given:
        c["5.2.2-PARAM-3"] = (decide("5.2.2-PARAM-3", ok=bool(best is not None and best[1].slo_ok), met="the reported level meets every SLO", unmet="no level met the SLOs"))
    else:
        c["5.2.2-PARAM-3"] = decide("5.2.2-PARAM-3", ok=None, na="no latency constraint given")
    c["5.2.3-PARAM-1"] = decide("5.2.3-PARAM-1", ok=True, met=f"warm-up before the search: {wu.ok} requests, "
                                   f"{wu.output_tokens} output tokens")
    c["5.2.3-PARAM-2"] = decide("5.2.3-PARAM-2", ok=bool(levels), met=f"{len(levels)} levels, each sending for its duration; "
                                   "every record stored", unmet="no level ran")
    c["5.2.3-PARAM-5"] = decide("5.2.3-PARAM-5", ok=True, met="iterative then binary search; search log in the "
                                   "'Search steps' table", levels=[a.level for _, a, _ in levels])
    c["5.2.3-PARAM-6"] = decide("5.2.3-PARAM-6", ok=best is not None, unmet="no sustainable level found",
                                met=best and f"reported level {best[1].level:g} is the highest sustainable level tested")
    queue_src = {a.queue.source for _, a, _ in levels}
    c["5.2.3-PARAM-7"] = decide("5.2.3-PARAM-7", ok=True, met=f"queue growth tested per level from {', '.join(sorted(queue_src))}")
    c["5.2.3-PARAM-8"] = (decide("5.2.3-PARAM-8", ok=None if bool(closed) else True, na="closed loop: arrivals equal completions", met="completion vs arrival rate tested per level"))
    c["5.2.3-PARAM-9"] = decide("5.2.3-PARAM-9", ok=True, met="TTFT P99 vs the lowest load's TTFT P50 tested per level")
    unsteady = [a.label for _, a, _ in levels if a.passed and not a.steady]
    c["5.2.3-PARAM-10"] = decide("5.2.3-PARAM-10", ok=True, met="queue stable at every sustainable level")
    c["5.2.3-PARAM-11"] = (decide("5.2.3-PARAM-11", ok=not unsteady, met="throughput trend within 20% over each sustainable level", unmet=f"throughput not stable at {', '.join(unsteady)}"))
    c["5.2.3-PARAM-12"] = decide("5.2.3-PARAM-12", ok=True, met="first 10% of each level excluded as ramp-up")
    return c


def report_checks(ctx: ProcedureContext, best: tuple[Measured, LevelAssessment, str] | None, gpus: int | None,
                   meas: dict[str, Any], required: dict[str, Table | None], tables: list[Table]) -> dict[str, Check]:
    """5.2.3-PARAM-3/4 and the 5.2.4/5.2.5 REPORT items: what the result carries.

    ``required`` maps a REPORT item to the table that satisfies it; the item is met when that very
    table object is among the result's ``tables`` (identity, not title).
    """
    c: dict[str, Check] = {
        "5.2.3-PARAM-3": decide("5.2.3-PARAM-3", ok=True, met="throughput = output tokens arriving in the level's steady "
                                   "window / window length (first 10% excluded)"),
        "5.2.3-PARAM-4": decide("5.2.3-PARAM-4", ok=True, met="TTFT P50/P99, TPOT P99 and the SLO verdict per level in the "
                                   "'Search steps' table and each run's assessment"),
    }
    if best is None:
        for rid in ("5.2.4-REPORT-1", "5.2.4-REPORT-2", "5.2.4-REPORT-3", "5.2.4-REPORT-4", "5.2.4-REPORT-5",
                    "5.2.4-REPORT-6", "5.2.4-REPORT-7", "5.2.4-REPORT-8", "5.2.5-REPORT-1", "5.2.5-REPORT-2"):
            c[rid] = decide(rid, ok=False, unmet="no sustainable load level: nothing to report at maximum throughput")
        return c
    slo = "with" if meas.get("slo_applied") else "without"
    c["5.2.4-REPORT-1"] = decide("5.2.4-REPORT-1", ok=True, met=f"max output throughput {meas['max_output_throughput_tok_s']:.0f} "
                                    f"tok/s ({slo} latency constraint)")
    c["5.2.4-REPORT-2"] = decide("5.2.4-REPORT-2", ok=True, met=f"request throughput {meas['max_request_throughput_req_s']:.2f} req/s")
    c["5.2.4-REPORT-3"] = decide("5.2.4-REPORT-3", ok=True, met=f"input throughput {meas['max_input_throughput_tok_s']:.0f} tok/s")
    if gpus:
        c["5.2.4-REPORT-4"] = decide("5.2.4-REPORT-4", ok=True, met=f"{meas['tokens_per_gpu_second']:.1f} tok/s/GPU ({gpus} GPUs)")
    elif ctx.sut.embedded:
        c["5.2.4-REPORT-4"] = decide("5.2.4-REPORT-4", ok=None, na="the simulated engine has no GPU")
    else:
        c["5.2.4-REPORT-4"] = decide("5.2.4-REPORT-4", ok=False, unmet="GPU count not declared (declarations: hardware.count)")
    util = meas.get("batch_utilization")
    c["5.2.4-REPORT-5"] = decide("5.2.4-REPORT-5", ok=True, met=f"batch utilization {util:.1%}" if util is not None
                                    else "reported as not measurable (no server batch metrics)")
    for rid, name in (("5.2.4-REPORT-6", "ttft"), ("5.2.4-REPORT-7", "tpot"), ("5.2.4-REPORT-8", "e2e")):
        vals = [meas.get(f"{name}_p{q}_ms") for q in (50, 95, 99)]
        defined = all(v is not None for v in vals)
        c[rid] = decide(rid, ok=defined, unmet=f"{name.upper()} percentiles undefined",
                        met=defined and f"{name.upper()} P50/P95/P99 at max load (steady window, Table 4): "
                        + "/".join(f"{v:.1f}" for v in vals)
                        + " ms")
    for rid, table in required.items():
        name = rid.replace("5.2.5-REPORT-1", "Table 3").replace("5.2.5-REPORT-2", "Table 4")
        present = table is not None and bool(table.rows) and any(t is table for t in tables)
        c[rid] = decide(rid, ok=bool(present), met=f"{name} in the report", unmet=f"{name} missing")
    return c

