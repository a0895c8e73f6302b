"""§5.8 Memory Pressure Behavior: completion, preemption and latency above the capacity of its workload.

Procedure (§5.8.3): determine the maximum concurrency (step 1, below); warm up (§4.5); for each
oversubscription level run a closed loop at ``level × capacity`` concurrent requests for at least
120 s while the server's ``/metrics`` are sampled; record completions, preemptions, latency, OOM
and other failures; summarise the degradation. Levels are ratios ("110 %" = 1.1 × capacity,
requirements.md note 42); 1.0 is Table 11's "100 % (base)" row.

Capacity (§5.8.3 step 1, "determine maximum concurrent capacity from Section 5.5"). Our reading:
§5.5's *method* on the load that 5.8 oversubscribes. With ``capacity="search"`` (default) 5.8 runs
§5.5.3's search itself, on its own workload (the long-context requests of its levels, own seed
stream, output fixed and forced as in 5.5): closed-loop levels of ``search_min_level_s`` and
``search_min_completions_per_slot`` per slot, doubled from ``search_initial_concurrency`` while
§5.5.2's criteria hold (completion >= ``min_completion``, TTFT P99 <= ``ttft_p99_threshold_s``,
default 2 s × the simulator's time_scale, no OOM), halved while they fail, bisected to
``search_resolution``. Its levels are runs ``capacity-search-c0008`` … in the report. A declared
capacity wins and is named "declared": ``capacity_concurrency``, or ``--llm-capacity
concurrency=N``. ``capacity="session"`` borrows the session's 5.5 capacity, measured on 5.5's own
workload (Synthetic-Uniform, 576 tokens a request on average): "110 %" is then 110 % of another
request shape's capacity, so 5.8.3-PARAM-3 is unmet and a note names the deviation.

Measurements (§5.8.4), per level: completion rate (successful / sent: a request failed *or*
cancelled because it was still running when the level's drain time ran out did not complete);
fail rate (failed / sent) and the cancelled count and share beside it, so Complete + Fail +
Cancelled = 100 %; TTFT P99 over every request sent, cancelled ones as right-censored samples
(``helpers.all_requests``); preemption rate (requests preempted at least once / requests),
preemption recovery rate (preempted requests that complete / preempted requests) and preemption
loss (tokens discarded per preemption event).
Preemptions are server-side events: they come from the server's per-request timing
(``server_timing.preemptions`` / ``preempted_tokens``, the embedded simulator's §4.6.3 option C
extension) and ``/metrics`` counter deltas (``llmbench:num_preemptions_total``,
``llmbench:requests_preempted_total``, ``llmbench:preempted_tokens_total``, or vLLM's
``vllm:num_preemptions_total``). A SUT exposing neither gets "not measurable client-side".

Workload: Long Context (RECOMMENDED by 5.8.2) at target lengths 1K, 2K and 4K by default: the
short end of 5.9's list, so prompts fit any context window of 4.4K tokens or more (A.5.1's
8K-128K would not fit the embedded simulator's 32K window or many real ones), while each request
holds 2-8x the KV of a 5.5 request. The capacity search runs on the same lengths, so the levels
are true ratios to the capacity of the requests they send.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..client import LLMClient
from ..common import draft
from ..common.records import ErrorType
from ..compliance import Check, decide
from ..loadgen.load import ClosedLoop
from ..loadgen.warmup import WarmupResult
from ..measure.registry import declare, figure
from ..measure.units import Cell, CellValue
from ..settings import parse_capacity
from .base import CannotMeasure
from .budget import DRAIN_FIT, retry_label, run_lengthening
from .capacity import CapacitySearch, SearchOptions, capacity_ttft_threshold
from .helpers import (
    CENSORED_NOTE,
    AllRequests,
    all_requests,
    build_level_specs,
    cancelled_warning,
    capacity_error,
    censored_cell,
    closed_level_stream,
    count_cancelled_as_unsuccessful,
    fmt_ms,
)
from .pipeline import Outcome, ProcedureRun
from .result import ServerView, Sweep, Table
from .run import Measured

__all__ = ["PROFILES", "LevelPressure", "MemoryPressureParams", "level_concurrency"]

MIN_LEVEL_S = draft.value("memory_pressure.level_min_s")  # §5.8.3 step 3b

#: /metrics counter of preempted tokens (the simulator's); events and requests are adapter roles
#: (``preemptions``, ``requests_preempted``) read from the run's telemetry.
PREEMPTED_TOKENS = ("llmbench:preempted_tokens_total",)
NOT_MEASURABLE = "not measurable client-side"
MAX_LEVEL_SPECS = 20_000  # distinct requests built per level at most
CAPACITY_MODES = ("search", "session")
#: how the capacity was obtained (measurement ``capacity_kind``)
DECLARED, SEARCHED, BORROWED = "declared", "own search", "borrowed"


@dataclass
class MemoryPressureParams:
    """§5.8.2 setup parameters; defaults are the draft's values (the ``standard`` profile)."""

    levels: tuple[float, ...] = (1.0, 1.1, 1.25, 1.5)  # ratios to the 5.5 capacity; 1.0 = base row
    level_s: float = MIN_LEVEL_S
    workload: str = "long-context"  # RECOMMENDED (§5.8.2); see the module doc
    workload_params: dict[str, Any] = field(default_factory=lambda: {"lengths": [1024, 2048, 4096]})
    output_tokens: int = 256  # fixed and forced, as in 5.5
    capacity_concurrency: int | None = None  # declared capacity (wins over capacity=...)
    capacity: str = "search"  # "search": §5.5.3 on this workload; "session": borrow 5.5's (module doc)
    # §5.5.3's search on this workload (capacity="search"); defaults are 5.5's (the draft's values)
    search_initial_concurrency: int = 8
    search_max_concurrency: int = 512
    search_resolution: int = 1
    search_min_level_s: float = draft.value("capacity.level_min_s")
    search_min_completions_per_slot: int = draft.value("capacity.min_completions_per_slot")
    ttft_p99_threshold_s: float | None = None  # §5.5.2 criterion; None: 2 s (x simulator time_scale)
    min_completion: float = draft.value("capacity.min_completion")
    drain_s: float | None = None  # wait for in-flight requests after a level; None: the session timeout
    abort_fail_rate: float = 0.5  # cascade guard (§7.4): stop raising the level above this failure rate
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")

    def validate(self) -> None:
        self.levels = tuple(float(x) for x in self.levels)
        if not self.levels or any(not x > 0 for x in self.levels):
            raise ValueError(f"levels must be positive ratios to capacity (1.1 = 110 %), got {self.levels}")
        if not self.level_s > 0:
            raise ValueError(f"level_s must be > 0 s, got {self.level_s}")
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")
        if self.capacity_concurrency is not None and self.capacity_concurrency < 1:
            raise ValueError(f"capacity_concurrency must be >= 1, got {self.capacity_concurrency}")
        if self.capacity not in CAPACITY_MODES:
            raise ValueError(f"capacity must be one of {CAPACITY_MODES}, got {self.capacity!r}")
        if not 1 <= self.search_initial_concurrency <= self.search_max_concurrency:
            raise ValueError(f"need 1 <= search_initial_concurrency ({self.search_initial_concurrency}) <= "
                             f"search_max_concurrency ({self.search_max_concurrency})")
        if self.search_resolution < 1 or self.search_min_completions_per_slot < 1 or not self.search_min_level_s > 0:
            raise ValueError("search_resolution and search_min_completions_per_slot must be >= 1 and "
                             "search_min_level_s > 0")
        if self.ttft_p99_threshold_s is not None and not self.ttft_p99_threshold_s > 0:
            raise ValueError(f"ttft_p99_threshold_s must be > 0 s, got {self.ttft_p99_threshold_s}")
        if not 0 < self.min_completion <= 1:
            raise ValueError(f"min_completion is a fraction in (0, 1], got {self.min_completion}")
        if self.drain_s is not None and self.drain_s < 0:
            raise ValueError(f"drain_s must be >= 0 s, got {self.drain_s}")
        if not 0 < self.abort_fail_rate <= 1:
            raise ValueError(f"abort_fail_rate is a fraction in (0, 1], got {self.abort_fail_rate}")
        if not isinstance(self.workload_params, dict):
            raise ValueError("workload_params must be a dict of build_workload arguments")  # noqa: TRY004


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.8')  # data/profiles.yaml

#: The figures of this procedure's result an SLO may name (§5.8.4), e.g. in ``assert_slo``; each reads
#: one of the result's measurements (scaled to the base unit), not a run's records.
declare(
    figure("oversubscription_fail_rate", "Failure rate under oversubscription", "fraction", "lower",
           "highest failure rate (failed / sent; a cancelled request is not a failure) of any §5.8 level", "§5.8.4",
           "max_fail_rate"),
    figure("oversubscription_capacity_errors", "Capacity errors under oversubscription", "requests", "lower",
           "requests that failed with an out-of-memory or capacity error, over every §5.8 level", "§5.8.4",
           "capacity_errors"),
)


def level_concurrency(level: float, capacity: int) -> int:
    """Concurrency for an oversubscription ratio: rounded, and strictly above capacity when level > 1."""
    c = max(1, round(level * capacity))
    if level > 1 and c <= capacity:
        c = capacity + 1
    return c


def _label(level: float) -> str:
    return f"{level * 100:g}% (base)" if level == 1.0 else f"{level * 100:g}%"


def _first(m: Measured, names: tuple[str, ...]) -> tuple[float | None, str | None]:
    for n in names:
        v = m.server_delta(n)
        if v is not None:
            return v, n
    return None, None


@dataclass
class LevelPressure:
    """One oversubscription level: what §5.8.4 asks for, and where each figure came from."""

    level: float
    concurrency: int
    measured: Measured
    requests: int  # successful + failed + cancelled: every request sent
    cancelled: int  # still in flight when the drain time ran out: not completed
    completion: float | None  # successful / sent
    fail_rate: float | None  # failed / sent
    ttft_p99_s: float | None  # over every request sent; a lower bound when censoring reaches the P99
    capacity_errors: int
    preemption_rate: float | None
    recovery_rate: float | None
    tokens_lost_per_preemption: float | None
    preempted_requests: float | None
    preemption_events: float | None
    source: str  # "server per-request timing", "server /metrics", NOT_MEASURABLE
    server_sampled: bool
    everyone: AllRequests | None = None
    repeats: int = 0

    @property
    def cancelled_rate(self) -> float | None:
        return self.cancelled / self.requests if self.requests else None

    @property
    def ttft_p99_at_least(self) -> bool:
        """True when the TTFT P99's rank falls among cancelled requests (the value is a lower bound)."""
        return self.everyone is not None and not self.everyone.ttft[99.0].bounded

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in (
            "level", "concurrency", "requests", "cancelled", "completion", "fail_rate", "cancelled_rate", "ttft_p99_s",
            "ttft_p99_at_least", "capacity_errors", "preemption_rate", "recovery_rate", "tokens_lost_per_preemption",
            "preempted_requests", "preemption_events", "source", "server_sampled", "repeats")}
        d["duration_s"] = self.measured.load.duration_s
        return d


def assess_pressure(level: float, c: int, m: Measured, repeats: int) -> LevelPressure:
    met = m.metrics
    ev = all_requests(m, (99.0,))
    count_cancelled_as_unsuccessful(m, ev)
    n_ok, n_failed = ev.ok, ev.failed
    judged = n_ok + n_failed  # the requests the server answered (preemption-rate denominator)
    pr = met.per_request
    pre = np.asarray(pr["preemptions"], dtype=float)
    ptok = np.asarray(pr["preempted_tokens"], dtype=float)
    ok = np.asarray(pr["ok"], dtype=bool)
    reported = ~np.isnan(pre)
    hit = reported & (np.nan_to_num(pre) > 0)
    srv_events = m.server_increase("preemptions")  # events: an upper bound on requests preempted
    srv_requests = m.server_increase("requests_preempted")
    srv_tokens, _ = _first(m, PREEMPTED_TOKENS)
    rate = recovery = lost = None
    pre_requests: float | None = None
    cancelled = ev.cancelled
    if reported.any():
        # the server reports timing only for requests it finished; its counter also counts the
        # preempted requests that later failed, so it is the better denominator, unless requests
        # were cancelled at the end of the level (preempted ones among them are not failures)
        pre_requests = float(hit.sum()) if cancelled or srv_requests is None else max(float(hit.sum()), srv_requests)
        rate = pre_requests / judged if judged else None
        recovery = float((hit & ok).sum()) / pre_requests if pre_requests else None
        source = "server per-request timing" + (" + /metrics" if srv_requests is not None else "")
    elif srv_requests is not None:
        pre_requests = srv_requests
        rate = srv_requests / judged if judged else None
        source = "server /metrics"
    else:
        source = NOT_MEASURABLE if srv_events is None else "server /metrics (events only)"
    events = srv_events if srv_events is not None else (float(pre[hit].sum()) if reported.any() else None)
    if srv_events is not None and srv_tokens is not None:
        lost = srv_tokens / srv_events if srv_events else None
    elif reported.any() and hit.any():
        lost = float(ptok[hit].sum()) / float(pre[hit].sum())
    p99 = ev.ttft[99.0]
    return LevelPressure(
        level=level, concurrency=c, measured=m, requests=ev.sent,
        cancelled=cancelled,
        completion=n_ok / ev.sent if ev.sent else None, fail_rate=n_failed / ev.sent if ev.sent else None,
        ttft_p99_s=None if p99.n == 0 else (p99.value if p99.bounded else p99.lower),
        capacity_errors=sum(1 for r in m.records if capacity_error(r)),
        preemption_rate=rate, recovery_rate=recovery, tokens_lost_per_preemption=lost,
        preempted_requests=pre_requests, preemption_events=events, source=source,
        server_sampled=bool(m.queue_samples), everyone=ev, repeats=repeats,
    )


def _pct(x: float | None, na: str = "n/a") -> str:
    return na if x is None else f"{x * 100:.1f}%"


def _share(x: float | None, na: str = "n/a") -> CellValue:
    """A fraction for a table (``12.5%``), or ``na`` when there is none."""
    return na if x is None else Cell(x, "fraction", 1)


class MemoryPressure(ProcedureRun[MemoryPressureParams]):
    """§5.8.3: closed-loop levels beyond 5.5's capacity; preemption, recovery and failures; Table 11."""

    id, title, params_type, profiles = "5.8", "Memory Pressure Behavior", MemoryPressureParams, PROFILES
    oversubscribes = True  # levels above capacity: their low completion is what §5.8 measures
    measurement_keys = ("capacity_concurrency", "capacity_source", "capacity_kind", "capacity_search", "levels",
                        "degradation", "aborted", "cancelled_requests", "sent_requests", "capacity_errors",
                        "max_fail_rate")
    #: per oversubscription level, l100 = 100% of capacity
    measurement_patterns = (r"l[0-9]+_(cancelled|completion_pct|preemption_rate_pct|fail_rate_pct|ttft_p99_ms)",)

    @staticmethod
    def plan(p: MemoryPressureParams) -> dict[str, Any]:
        search = 0.0 if p.capacity_concurrency is not None or p.capacity == "session" else (
            math.ceil(math.log2(p.search_max_concurrency / p.search_initial_concurrency)) + 1) * p.search_min_level_s
        return {"requests": p.warmup_requests, "min_duration_s": len(p.levels) * p.level_s + search}

    async def prepare(self) -> None:
        p, ctx = self.p, self.ctx
        self.search: CapacitySearch | None = None
        self.cap_n: int | None = None
        self.cap_tps: float | None = None
        if p.capacity_concurrency is not None:
            self.cap_n, self.cap_src, self.cap_kind = p.capacity_concurrency, "declared (capacity_concurrency)", DECLARED
        elif p.capacity == "session" or _declared_concurrency(ctx.settings.capacity):
            cap = await ctx.get_capacity("concurrency")
            if not cap.concurrency:
                raise CannotMeasure("5.8 needs a maximum concurrency (§5.8.3 step 1) and the session has none: use "
                                    "capacity='search' (5.5's method on this workload) or declare "
                                    "--llm-capacity concurrency=N")
            declared = (cap.source or "").startswith("declared")
            self.cap_n, self.cap_tps = int(cap.concurrency), cap.output_throughput
            self.cap_kind = DECLARED if declared else BORROWED
            self.cap_src = cap.source or "5.5 in this session"
        else:  # capacity="search": §5.5.3 on this workload, in run_loads (after the warm-up, as 5.5 does)
            self.cap_kind, self.cap_src = SEARCHED, ""
            self.threshold, self.threshold_src = capacity_ttft_threshold(ctx, p.ttft_p99_threshold_s)
        self.levels = sorted(p.levels)
        self.declaration: dict[str, Any] = {}
        self.outcomes: list[LevelPressure] = []
        self.aborted: str | None = None
        self.drain = ctx.settings.timeout if p.drain_s is None else p.drain_s  # lengthened on a slow SUT
        self.drain_notes: list[str] = []

    def connections(self) -> int | None:
        cap = self.cap_n if self.cap_n is not None else self.p.search_max_concurrency
        return max(cap, *(level_concurrency(x, cap) for x in self.levels))

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        p = self.p
        specs, _ = build_level_specs(self.ctx, p.workload, max(p.warmup_requests, 8), self.seeds.derive("warmup"),
                                     p.output_tokens, p.workload_params)
        specs = [dataclasses.replace(s, min_tokens=None) for s in specs]
        return await self.warm_up_with(client, specs, concurrency=min(self.cap_n or p.search_initial_concurrency, 16))

    async def _search_capacity(self, client: LLMClient) -> None:
        """§5.8.3 step 1 as read here: §5.5.3's search on this procedure's own workload (module doc)."""
        p, ctx = self.p, self.ctx

        def specs_for(c: int, n: int) -> list[Any]:
            specs, decl = build_level_specs(ctx, p.workload, min(max(n, 2 * c), MAX_LEVEL_SPECS),
                                            self.seeds.derive("capacity-search", c), p.output_tokens,
                                            p.workload_params)
            self.declaration = self.declaration or decl
            return specs

        self.search = search = await self.search_capacity(client, "capacity-search", specs_for, SearchOptions(
            initial=p.search_initial_concurrency, maximum=p.search_max_concurrency, resolution=p.search_resolution,
            min_level_s=p.search_min_level_s, min_completions_per_slot=p.search_min_completions_per_slot,
            threshold_s=self.threshold, threshold_source=self.threshold_src, min_completion=p.min_completion,
            extra={"workload": p.workload, "workload_params": dict(p.workload_params)}))
        if search.capacity is None:
            raise CannotMeasure(f"5.8: the capacity search (§5.5.3) on its own {p.workload} workload found no "
                                f"concurrency meeting §5.5.2's criteria: {search.describe()}. Raise "
                                "ttft_p99_threshold_s, shorten the workload's lengths, or declare the capacity "
                                "(capacity_concurrency=N or --llm-capacity concurrency=N)")
        best = next(lv for lv in search.levels if lv.concurrency == search.lo)
        self.cap_n, self.cap_tps = search.lo, best.measured.metrics.scalar("output_throughput").value
        self.cap_src = (f"§5.5.3 search on this {p.workload} workload ({len(search.levels)} levels, TTFT P99 <= "
                        f"{fmt_ms(search.threshold_s)}, {search.threshold_source})")

    async def run_loads(self, client: LLMClient) -> None:
        if self.cap_n is None:
            await self._search_capacity(client)
        p, ctx, levels, cap_n, cap_tps = self.p, self.ctx, self.levels, self.cap_n, self.cap_tps
        assert cap_n is not None
        rate = (cap_tps / p.output_tokens) if cap_tps else None  # req/s; refined by every level
        for i, level in enumerate(levels):
            c = level_concurrency(level, cap_n)
            # enough distinct requests for the level (cycled beyond that, counted as repeats)
            n = min(MAX_LEVEL_SPECS, math.ceil(1.2 * rate * p.level_s) + c if rate else 30 * c)
            stats: dict[str, int] = {}
            label = f"oversub_{round(level * 100)}"
            # a drain the level's requests outlast is lengthened from their durations and the level run
            # again; the later levels keep the longer drain
            m, tried = await run_lengthening(
                ctx, f"5.8 level {_label(level)}", label, self.drain,
                functools.partial(self._run_level, client, i, level, c, max(n, 2 * c), stats), drain_held,
                DRAIN_FIT, cap_s=ctx.settings.timeout)
            self.drain = tried.window_s
            if not tried.enough and tried.lengthenings:
                self.drain_notes.append(f"{label}: more requests cancelled at the drain than completed even after "
                                        f"it was lengthened{tried.history(DRAIN_FIT)}: raise drain_s, or lower "
                                        "output_tokens")
            lp = assess_pressure(level, c, m, stats.get("repeats", 0))
            self.outcomes.append(lp)
            if lp.requests and m.load.duration_s > 0:
                rate = lp.requests / m.load.duration_s * 1.25  # next level: more in flight, maybe faster
            if lp.fail_rate is not None and lp.fail_rate > p.abort_fail_rate and i + 1 < len(levels):
                self.aborted = (f"stopped after {_label(level)}: failure rate {_pct(lp.fail_rate)} > "
                                f"{p.abort_fail_rate:.0%} (cascading-failure guard, §7.4); levels "
                                f"{', '.join(_label(x) for x in levels[i + 1:])} not run")
                break

    async def _run_level(self, client: LLMClient, i: int, level: float, c: int, n: int, stats: dict[str, int],
                         drain_s: float, attempt: int) -> Measured:
        """Level ``i`` (``level`` x capacity, ``c`` concurrent) on ``n`` requests, drained for ``drain_s``;
        ``attempt`` > 0: run again with a lengthened drain, on requests of its own."""
        p, ctx = self.p, self.ctx
        seed = self.seeds.derive("level", i) if not attempt else self.seeds.derive(f"level-retry{attempt}", i)
        specs, decl = build_level_specs(ctx, p.workload, n, seed, p.output_tokens, p.workload_params)
        self.declaration = self.declaration or decl
        stats.clear()
        ctx.progress(f"{_label(level)} of capacity {self.cap_n}: {c} concurrent for {p.level_s:g} s")
        return await self.measure(client, retry_label(f"oversub_{round(level * 100)}", attempt),
                                  closed_level_stream(specs, 0, p.level_s, stats),
                                  ClosedLoop(c, duration_s=p.level_s), drain_timeout_s=drain_s,
                                  sized="drain" if attempt > 0 else False,
                                  extra={"level": level, "concurrency": c, "capacity": self.cap_n})

    def summarize(self) -> Outcome:
        p, cap_n, cap_src, levels = self.p, self.cap_n, self.cap_src, self.levels
        outcomes, aborted = self.outcomes, self.aborted
        rows: list[list[CellValue]] = []
        for o in outcomes:
            rows.append([_label(o.level), _share(o.completion), _share(o.preemption_rate, NOT_MEASURABLE),
                         _share(o.fail_rate), [Cell(o.cancelled, "requests"), " of ", Cell(o.requests, "requests"),
                                               " (", _share(o.cancelled_rate), ")"],
                         censored_cell(o.everyone.ttft[99.0]) if o.everyone else Cell(o.ttft_p99_s, "s")])
        for x in levels[len(outcomes):]:
            rows.append([_label(x), "not run", "not run", "not run", "not run", "not run"])
        drain = self.drain
        notes11 = [f"capacity {cap_n} concurrent requests ({cap_src}); level = concurrency / capacity",
                   ("Complete = successful / sent; Fail Rate = failed / sent; Cancelled = requests still running "
                    f"when the {drain:g} s drain after the level ran out, cancelled by the harness: they did not "
                    "complete, so Complete + Fail Rate + Cancelled = 100%; Preempt = requests preempted at least "
                    "once / requests answered (§5.8.4)"),
                   "TTFT P99 over every request sent: " + CENSORED_NOTE]
        notes11 += [aborted] if aborted else []
        table11 = Table("Table 11: Memory Pressure Degradation",
                        ["Oversub Level", "Complete", "Preempt", "Fail Rate", "Cancelled", "TTFT P99"], rows,
                        notes=notes11)
        detail = Table(
            "Preemption detail (§5.8.4)",
            ["Oversub Level", "Concurrency", "Requests", "Preempted requests", "Recovery rate",
             "Tokens lost / preemption", "Preemption events", "OOM/capacity errors", "Source"],
            [[_label(o.level), Cell(o.concurrency, "requests"), Cell(o.requests, "requests"),
              NOT_MEASURABLE if o.preempted_requests is None else Cell(o.preempted_requests, "requests", 0),
              _share(o.recovery_rate, "n/a (none preempted)" if o.preempted_requests == 0 else NOT_MEASURABLE),
              Cell(o.tokens_lost_per_preemption, "tokens/preemption", 1),
              NOT_MEASURABLE if o.preemption_events is None else Cell(o.preemption_events, "events", 0),
              Cell(o.capacity_errors, "requests"), o.source] for o in outcomes],
            notes=[("recovery rate = preempted requests that completed / preempted requests; tokens lost = "
                   "discarded (to be recomputed) tokens per preemption event"),
                   ("preemption events: the increase of the server's preemption counter over the level (its /metrics, "
                    "sampled during the run): a request may be preempted more than once, so events are an upper "
                    "bound on requests preempted, not §5.8.4's per-request rate")],
        )
        self.degradation = degradation = describe_degradation(outcomes)
        tables = [table11, detail] + ([] if self.search is None else [self._search_table()])
        measurements: dict[str, Any] = {
            "capacity_concurrency": cap_n, "capacity_source": cap_src, "capacity_kind": self.cap_kind,
            "capacity_search": None if self.search is None else self.search.to_json(),
            "levels": [o.to_json() for o in outcomes],
            "degradation": degradation,
            "aborted": aborted,
        }
        measurements["cancelled_requests"] = sum(o.cancelled for o in outcomes)
        measurements["sent_requests"] = sum(o.requests for o in outcomes)
        # procedure figures an SLO can name (declared at the top of this module): the worst level's failure
        # rate and the capacity (out-of-memory) errors over every level
        rates = [o.fail_rate for o in outcomes if o.fail_rate is not None]
        measurements["max_fail_rate"] = round(max(rates), 5) if rates else None
        measurements["capacity_errors"] = sum(o.capacity_errors for o in outcomes)
        for o in outcomes:
            key = f"l{round(o.level * 100)}"
            measurements[f"{key}_cancelled"] = o.cancelled
            for name, value, scale in (("completion_pct", o.completion, 100),
                                       ("preemption_rate_pct", o.preemption_rate, 100),
                                       ("fail_rate_pct", o.fail_rate, 100), ("ttft_p99_ms", o.ttft_p99_s, 1000)):
                measurements[f"{key}_{name}"] = None if value is None else round(value * scale, 3)
        search_runs = [] if self.search is None else [lv.measured for lv in self.search.levels]
        return Outcome(
            metrics=outcomes[-1].measured.metrics, tables=tables, measurements=measurements,
            workload=self.declaration,
            notes=[degradation] + ([aborted] if aborted else []) + self._capacity_notes() + self.drain_notes
            + [f"primary metrics (SLO assertions) = the highest level run, {_label(outcomes[-1].level)}"],
            plots={"curve": {
                "offered": [o.concurrency for o in outcomes], "offered_unit": "concurrent requests",
                "achieved_tps": [o.measured.metrics.scalar("output_throughput").value for o in outcomes],
                "ttft_p99_s": [o.ttft_p99_s for o in outcomes], "knee_index": None, "saturation_index": None,
            }},
            runs=search_runs + [o.measured for o in outcomes], fact_runs=[o.measured for o in outcomes],
            facts={"exceeds_capacity": True},
            sweep=Sweep(str(degradation).split(";")[-1].strip()) if degradation else None,
            warnings=cancelled_warning(measurements["cancelled_requests"], [o.measured for o in outcomes]),
            # the server's side of the pressure: preemption events (not §5.8.4's per-request rate), KV usage
            server_view=ServerView(runs=[outcomes[-1].measured.summary.label],
                                   levels=[(_label(o.level), o.measured.summary.label) for o in outcomes],
                                   by="oversubscription level", section="§5.8"))

    def _search_table(self) -> Table:
        """§5.8.3 step 1: the §5.5.3 search on this workload, one row per level in run order."""
        search = self.search
        assert search is not None
        return Table("Capacity search on this workload (§5.8.3 step 1, §5.5.3)",
                     ["Concurrency", "Completion", "TTFT P99", "Errors", "Status"],
                     [[Cell(lv.concurrency, "requests"), _share(lv.completion), Cell(lv.ttft_p99_s, "s"),
                       Cell(lv.capacity_errors, "requests"), "Pass" if lv.passed else "Fail"] for lv in search.levels],
                     notes=[f"Maximum concurrent requests meeting criteria: {search.lo}",
                            (f"criteria (§5.5.2): completion >= {self.p.min_completion:.0%}, TTFT P99 <= "
                             f"{fmt_ms(search.threshold_s)} ({search.threshold_source}), no out-of-memory/capacity "
                             f"errors; search: {search.describe()}"),
                            (f"{self.p.workload} requests of the oversubscription levels' shape (own seed stream), "
                             f"output {self.p.output_tokens} tokens forced; each level >= {self.p.search_min_level_s:g} "
                             f"s and >= {self.p.search_min_completions_per_slot} completions per slot")])

    def _capacity_notes(self) -> list[str]:
        if self.cap_kind == BORROWED:
            return [f"deviation: the capacity {self.cap_n} is borrowed ({self.cap_src}), measured on another "
                    f"workload than this {self.p.workload} one, so the levels are ratios to another request "
                    "shape's capacity (capacity='session'; capacity='search' measures this workload's)"]
        if self.cap_kind == DECLARED:
            return [f"capacity {self.cap_n} concurrent requests declared ({self.cap_src}), not measured"]
        return []

    def checks(self, out: Outcome) -> dict[str, Check]:
        return item_checks(self.p, self.cap_n or 0, self.cap_src, self.cap_kind, self.outcomes, self.levels,
                       self.degradation)


def drain_held(m: Measured) -> bool:
    """Whether a level's drain held its requests: no more of them cancelled at the drain than completed
    (otherwise the drain, not the SUT, decided the level: ``budget.run_lengthening`` runs it again)."""
    ok = cancelled = 0
    for r in m.records:
        ok += r.ok
        cancelled += r.error_type is ErrorType.CANCELLED
    return cancelled <= ok


def describe_degradation(outcomes: list[LevelPressure]) -> str:
    """A one-line account of how the SUT degrades from the lowest to the highest level (§5.8.3 step 4)."""
    if len(outcomes) < 2:
        return "one level only: no degradation pattern"
    a, b = outcomes[0], outcomes[-1]
    parts = [f"from {_label(a.level)} to {_label(b.level)}: completion {_pct(a.completion)} -> {_pct(b.completion)}"]
    if a.ttft_p99_s and b.ttft_p99_s:
        parts.append(f"TTFT P99 {fmt_ms(a.ttft_p99_s)} -> {fmt_ms(b.ttft_p99_s)} (x{b.ttft_p99_s / a.ttft_p99_s:.2f})")
    if a.preemption_rate is not None and b.preemption_rate is not None:
        parts.append(f"preemption rate {_pct(a.preemption_rate)} -> {_pct(b.preemption_rate)}")
    parts.append(f"failures {_pct(a.fail_rate)} -> {_pct(b.fail_rate)}")
    cancelled = sum(o.cancelled for o in outcomes)
    if cancelled:
        parts.append(f"{cancelled} of {sum(o.requests for o in outcomes)} requests cancelled (not completed "
                     "within the drain time): " + ", ".join(f"{_label(o.level)} {o.cancelled}"
                                                            for o in outcomes if o.cancelled))
    fails = [o for o in outcomes if o.capacity_errors]
    parts.append("OOM/capacity errors at " + ", ".join(_label(o.level) for o in fails) if fails
                 else "no OOM/capacity errors")
    if any((o.fail_rate or 0) > 0 for o in outcomes):
        mode = "with failures" + (" and cancelled requests" if cancelled else "")
    elif cancelled:
        mode = "incomplete (no failures, but cancelled requests did not complete)"
    else:
        mode = "graceful (preemption and queueing, every request completed)"
    return "; ".join(parts) + f"; degradation {mode}"


def _declared_concurrency(capacity: str | None) -> bool:
    """Whether ``--llm-capacity`` declares a concurrency (``concurrency=N``)."""
    return capacity is not None and parse_capacity(capacity, "--llm-capacity")[0] == "concurrency"


def item_checks(p: MemoryPressureParams, cap_n: int, cap_src: str, cap_kind: str, outcomes: list[LevelPressure],
            levels: list[float], degradation: str) -> dict[str, Check]:
    short = [_label(o.level) for o in outcomes if o.measured.load.send_window_s < MIN_LEVEL_S]
    measurable = all(o.source != NOT_MEASURABLE for o in outcomes)
    sampled = all(o.server_sampled for o in outcomes)
    above = [o for o in outcomes if o.level > 1]
    # a server counting preemption events, not preempted requests (vLLM): events are no §5.8.4 rate
    events_only = [f"{_label(o.level)}: {o.preemption_events:g} events" for o in outcomes
                   if o.preemption_rate is None and o.preemption_events is not None and o.preemption_events > 0]
    # 5.8.2-SHOULD-1 (Long Context RECOMMENDED) is the compliance evaluator's: the workload's standing as run
    return {
        "5.8.2-PARAM-1": decide("5.8.2-PARAM-1", ok=True, met="levels " + ", ".join(_label(x) for x in levels)
                                   + f" of capacity {cap_n}"),
        # its own §5.5.3 search judges TTFT P99 against a threshold: a default is no declaration (issue 48)
        "5.8.3-PARAM-1": decide("5.8.3-PARAM-1", ok=True if cap_kind != SEARCHED or p.ttft_p99_threshold_s is not None
                                else None, met=f"capacity {cap_n} concurrent requests ({cap_kind}): {cap_src}",
                                needs=f"capacity {cap_n} concurrent requests ({cap_kind}: {cap_src}), whose TTFT P99 "
                                      "threshold was not declared (a default applied): declare ttft_p99_threshold_s",
                                source="measured"),
        "5.8.3-PARAM-2": decide("5.8.3-PARAM-2", ok=True, met="SUT configured, warm-up completed (§4.5)"),
        "5.8.3-PARAM-3": (decide("5.8.3-PARAM-3", ok=bool(above) and cap_kind != BORROWED,
                                 met="; ".join(f"{_label(o.level)} -> {o.concurrency} concurrent" for o in outcomes),
                                 unmet="no level above capacity was run" if not above else
                                 f"levels are ratios to a borrowed capacity ({cap_src}) measured on another workload: "
                                 f"whether they exceed this {p.workload} workload's capacity is unknown (deviation; "
                                 "capacity='search' measures it)")),
        "5.8.3-PARAM-4": (decide("5.8.3-PARAM-4", ok=not short, met=f"every level ran >= {MIN_LEVEL_S:g} s", unmet=f"levels {', '.join(short)} ran < {MIN_LEVEL_S:g} s "
                                      f"(profile level_s = {p.level_s:g} s)")),
        "5.8.3-PARAM-5": (decide("5.8.3-PARAM-5", ok=bool(measurable), met="completions, latency, errors by type (OOM/capacity "
                                    "classified) and server-side preemptions recorded", unmet="completions, latency and errors recorded; preemptions "
                                      f"{NOT_MEASURABLE} (no server timing or /metrics counters)")),
        "5.8.3-PARAM-6": decide("5.8.3-PARAM-6", ok=None, needs=f"automatic summary: {degradation}"),
        "5.8.4-REPORT-1": decide("5.8.4-REPORT-1", ok=True, met="completion rate per level"),
        "5.8.4-REPORT-2": (decide("5.8.4-REPORT-2", ok=bool(measurable and not events_only), met="preemption rate per level",
                                  unmet=f"preemption rate {NOT_MEASURABLE}" if not measurable else
                                  "the server reports preemption events only (" + ", ".join(events_only) + "): an upper "
                                  "bound on requests preempted, not the per-request rate")),
        "5.8.4-REPORT-3": (decide("5.8.4-REPORT-3", ok=bool(all("per-request" in o.source for o in outcomes)), met="recovery rate per level (n/a where nothing was preempted)", unmet="recovery rate needs per-request preemption data "
                                       "from the server")),
        "5.8.4-REPORT-4": (decide("5.8.4-REPORT-4", ok=bool(all(o.tokens_lost_per_preemption is not None or o.preemption_events == 0
                                  for o in outcomes)), met="tokens lost per preemption per level", unmet="preemption loss needs preempted-token counts from "
                                       "the server")),
        "5.8.5-REPORT-1": decide("5.8.5-REPORT-1", ok=True, met="Table 11 with a 100 % base row" if 1.0 in levels
                                    else "Table 11 (no 100 % base level requested)"),
        "7.4-SHOULD-3": decide("7.4-SHOULD-3", sampled=sampled,
                               stop_rule=f"levels stop above a {p.abort_fail_rate:.0%} failure rate"),
    }


