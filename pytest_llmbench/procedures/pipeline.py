"""The pipeline every procedure (§5.1–§5.10) runs, with the steps that differ left to subclasses.

``ProcedureRun.execute`` does, in order: the start stamp, ``prepare`` (workloads and loads,
capacity look-ups), a client for the SUT, ``warm_up`` (§4.5), ``run_loads`` (the procedure's
load levels or search; every run recorded through :meth:`ProcedureRun.measure`), ``restore``
(undo SUT configuration switches, always), ``summarize`` (tables, measurements, notes, plots, and
what the procedure shows: its primary run, headline key figures, sweep result, warnings and the
runs it overlays; ``document/`` only aggregates these), the run facts, ``checks`` (each through
``compliance.decide``), the result and its compliance verdict (``common.finish``). A
measurement key the procedure does not declare (``measurement_keys``/``measurement_patterns``)
fails the run: the keys are its contract with the suites and SLO assertions.

A subclass that sets ``id`` registers itself (``__init_subclass__``): parameters still come from
the dataclass defaults < profile < marker (``base.Procedure.make_params``). Seeds come from one
allocator (``self.seeds``, seeds.py), one named stream per purpose.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from ..client import LLMClient
from ..common.records import RequestRecord, RequestSpec
from ..compliance import Check, ColdStartFacts, RunFacts, decide
from ..loadgen.load import ClosedLoop, OpenLoop
from ..loadgen.warmup import WarmupResult
from ..measure import tokencount
from ..measure.registry import METRICS
from ..measure.summary import RunMetrics
from ..measure.units import Cell, CellValue
from ..sut.adapters import metric_names
from ..workloads import SpecStream, Workload, reference_checks
from .base import (
    Capacity,
    Finding,
    KeyFigure,
    Overlays,
    Procedure,
    ProcedureContext,
    ProcedureError,
    ProcedureResult,
    ServerView,
    SkipProcedure,
    Sweep,
    Table,
    get_procedure,
    params_json,
    register,
)
from .common import (
    CountingTally,
    Measured,
    RunRecords,
    client_for,
    finish,
    measure,
    probe_window_s,
    run_facts,
    tokenizer_facts,
    warm_up,
)
from .helpers import (
    CacheHits,
    capacity_error,
    closed_level_stream,
    fmt_ms,
    level_specs,
    pvalue,
    steady_window_ns,
)

__all__ = ["CapacitySearch", "ColdStart", "Outcome", "CAPACITY", "SaturationProbe", "SearchLevel",
           "capacity_ttft_threshold", "judge_search_level", "next_search_level", "LATENCY", "MAX_OUTPUT_THROUGHPUT", "PIPELINE_KEYS", "ProcedureRun", "THROUGHPUT", "as_run", "latency_figures", "low_success_warnings",
           "now_iso"]

P = TypeVar("P")


def as_run(workload: Mapping[str, Any], cap: int | None, records: Iterable[RequestRecord]) -> dict[str, Any]:
    """The workload as run (§4.3-MUST-1, §4.3.2-PARAM-1): a standard workload the profile or the
    tester altered (output cap that bound some request, synthetic stand-in for a dataset workload)
    is a custom workload, described by the distributions actually sent. ``records``: re-iterable
    (read at most twice)."""
    w = dict(workload)
    if not w:
        return w
    sent = array("q"), array("q")  # input and output lengths as sent, one pass
    for r in records:
        sent[0].append(r.spec_input_tokens)
        sent[1].append(r.max_tokens)
    ins, outs = np.frombuffer(sent[0], dtype=np.int64), np.frombuffer(sent[1], dtype=np.int64)
    if not ins.size:
        return w
    capped = cap is not None and bool((outs >= cap).any())
    standin = bool(w.get("synthetic_standin") or (w.get("dataset") or {}).get("synthetic_standin"))
    if not (capped or standin):
        return w
    why = []
    if capped:
        why.append(f"output capped at {cap} tokens")
    if standin:
        why.append(f"synthetic stand-in for the {w.get('name')} dataset")

    def dist(a: np.ndarray) -> dict[str, Any]:
        return {"type": "empirical (as sent)", "params": {"min": int(a.min()), "p50": float(np.median(a)),
                                                          "mean": round(float(a.mean()), 2), "max": int(a.max())}}

    base = w.get("base") or w.get("name")
    prior = list(w.get("altered_by") or [])  # a procedure's own reasons (5.9's lengths) come first
    why = prior + [x for x in why if x not in prior]
    w.update(name=f"{base} (custom: {'; '.join(why)})", custom=True, standard=False, base=base, altered_by=why)
    w["input_length"] = {**(w.get("input_length") or {}), **dist(ins), "unit": "tokens",
                         "tokenizer": (w.get("input_length") or {}).get("tokenizer") or "reference"}
    w["output_length"] = {**(w.get("output_length") or {}), **dist(outs), "unit": "tokens",
                          "control": "max_tokens" + (f" (capped at {cap})" if capped else "")}
    return w


@dataclass
class ColdStart:
    """§4.5.3 cold start: the SUT restarted through the configure hook's ``restart`` setting, the first
    requests sent one at a time before any warm-up, and as many requests of the same workload
    sent the same way after the warm-up (the warm reference)."""

    restart_s: float  # the restart call until it returned (stop, start, the server answering)
    cold: Measured
    warm: Measured | None = None

    @staticmethod
    def ttfts(m: Measured | None) -> list[float | None]:
        """TTFT (s) per request in send order; None for a request that failed."""
        if m is None:
            return []
        recs = sorted(m.records, key=lambda r: r.sent_ns)
        return [(r.first_token_ns - r.sent_ns) / 1e9 if r.ok and r.first_token_ns is not None else None
                for r in recs]

    @property
    def server_requests_before(self) -> float | None:
        """The server's finished-requests counter at the cold run's first scrape (adapter role
        ``requests_finished``; else the known names in its first snapshot)."""
        first = self.cold.telemetry.first("requests_finished")
        if first is not None:
            return first
        before = self.cold.server_before or {}  # 0 right after a restart: nothing was served before
        return next((before[n] for n in metric_names("requests_finished") if n in before), None)

    def to_json(self) -> dict[str, Any]:
        cold, warm = self.ttfts(self.cold), [t for t in self.ttfts(self.warm) if t is not None]
        first = cold[0] if cold else None
        warm_p50 = float(np.median(warm)) if warm else None
        first_rec = min(self.cold.records, key=lambda r: r.sent_ns) if self.cold.records else None
        return {
            "restart_s": round(self.restart_s, 3),
            "requests": len(cold),
            "first_ttft_s": first,
            "first_e2e_s": (first_rec.end_ns - first_rec.sent_ns) / 1e9
            if first_rec is not None and first_rec.ok and first_rec.end_ns else None,
            "first_error": None if first_rec is None or first_rec.ok else first_rec.error_message,
            "cold_ttft_s": cold,
            "warm_ttft_s": self.ttfts(self.warm),
            "warm_ttft_p50_s": warm_p50,
            "first_over_warm_p50": first / warm_p50 if first is not None and warm_p50 else None,
            "server_requests_before": self.server_requests_before,
            "warmup_requests_before": 0,  # the cold requests are the first the client sends after the restart
            "cold_run": self.cold.summary.label,
            "warm_run": None if self.warm is None else self.warm.summary.label,
        }

    def table(self) -> Table:
        d = self.to_json()
        rows: list[list[CellValue]] = [
            [f"cold #{i + 1}" + (" (first after restart)" if i == 0 else ""), Cell(t, "s") if t is not None
             else "failed"] for i, t in enumerate(d["cold_ttft_s"])]
        rows += [[f"warm #{i + 1}", Cell(t, "s") if t is not None else "failed"] for i, t in enumerate(d["warm_ttft_s"])]
        ratio = d["first_over_warm_p50"]
        return Table("Cold start (§4.5.3)", ["Request", "TTFT"], rows, notes=[
            f"COLD START measurement: the SUT was restarted ({d['restart_s']:.1f} s until it answered) and the first "
            f"{d['requests']} requests were sent one at a time before any warm-up; the warm rows are as many "
            "requests of the same workload sent the same way after the warm-up",
            f"first request TTFT {fmt_ms(d['first_ttft_s'])} vs warm P50 {fmt_ms(d['warm_ttft_p50_s'])}"
            + (f" ({ratio:.2f}x)" if ratio is not None else ""),
            "server requests finished before the first cold request: "
            + ("not reported (no /metrics counter)" if d["server_requests_before"] is None
               else f"{d['server_requests_before']:g}")])

    def measurements(self) -> dict[str, Any]:
        d = self.to_json()

        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 3)

        return {"cold_start_first_ttft_ms": ms(d["first_ttft_s"]), "cold_start_warm_ttft_p50_ms":
                ms(d["warm_ttft_p50_s"]), "cold_start_ratio": d["first_over_warm_p50"],
                "cold_start_restart_s": d["restart_s"], "cold_start_requests": d["requests"]}


#: measurement keys every procedure's result may carry: the pipeline's prompt hygiene, the
#: cold-start figures (§4.5.3) and the verdict copied by common.finish
PIPELINE_KEYS = ("token_counts_exact_share", "token_count_methods", "token_counting_option",
                 "token_counting_tokenizer", "measured_cache_hit_fraction",
                 "measured_requests_over_half_cached", "measured_prompts_seen_in_warmup", "measured_prompt_repeats",
                 "cold_start_first_ttft_ms", "cold_start_warm_ttft_p50_ms", "cold_start_ratio", "cold_start_restart_s",
                 "cold_start_requests", "compliance_verdict")
#: success rate below which a run is named in the procedure's warnings (§5.10: refusals, errors)
SUCCESS_WARN = 0.99
#: the key-figure group of the headline's latency figures, and the rank of a procedure that does not
#: declare its own (ties go to draft order)
LATENCY = "latency"
THROUGHPUT = "throughput"  # 5.2's sustainable maximum, else 5.3's optimal point
CAPACITY = "capacity"  # 5.5's concurrency
#: the declared figure that is App. C.1's "Max Throughput" (the sustainable maximum, not a capacity probe)
MAX_OUTPUT_THROUGHPUT = "max_output_throughput"
DEFAULT_LATENCY_RANK = 6  # 5.1 ranks its own 0, 5.4 3; every other group ranks 10 and up
LATENCY_FIGURES = (("ttft_p50", "TTFT P50", "ttft", 50.0), ("ttft_p99", "TTFT P99", "ttft", 99.0),
                   ("tpot_p99", "TPOT P99", "tpot", 99.0))


def latency_figures(metrics: RunMetrics | None, rank: int) -> list[KeyFigure]:
    """TTFT P50/P99 and TPOT P99 of the primary run as headline figures (§5.1.4, §5.4), group
    :data:`LATENCY`; none without TTFT samples, a figure without samples left out."""
    dists = getattr(metrics, "distributions", None) or {}
    ttft = dists.get("ttft")
    if ttft is None or ttft.n == 0:
        return []
    out = []
    for i, (name, title, metric, q) in enumerate(LATENCY_FIGURES):
        d = dists.get(metric)
        if d is None or d.n == 0 or q not in d.percentiles:
            continue
        est = d.percentiles[q]
        out.append(KeyFigure(name, title, est.value, "s", LATENCY, rank + i, metric=metric,
                             definition=METRICS[metric].definition, undersampled=bool(est.undersampled)))
    return out


def low_success_warnings(runs: Sequence[Measured]) -> list[Finding]:
    """The runs whose success (ok / sent) fell below :data:`SUCCESS_WARN`, the lowest named."""
    low = []
    for m in runs:
        load = m.summary.load or {}
        s, ok = load.get("sent"), load.get("ok")
        if isinstance(s, int) and isinstance(ok, int) and s and ok / s < SUCCESS_WARN:
            low.append((ok / s, f"{m.summary.label} {ok} of {s}"))
    return [Finding("failed_requests", f"{len(low)} run(s) below {SUCCESS_WARN:.0%} success (lowest: {min(low)[1]})")] \
        if low else []


_HEX16 = re.compile(r"[0-9a-f]{16}")  # RequestSpec.prompt_hash


class _Prompts:
    """The measured records' prompt hashes, one record at a time: how many the warm-up sent too,
    and each kept as an 8-byte integer (a hash that is not 16 hex digits is kept as it is)."""

    def __init__(self, warmup: set[str]) -> None:
        self.warmup = warmup
        self.seen = 0
        self.keys = array("Q")
        self.other: list[str] = []

    def add(self, r: RequestRecord) -> None:
        h = r.prompt_hash
        if h is None:
            return
        self.seen += h in self.warmup
        if _HEX16.fullmatch(h):
            self.keys.append(int(h, 16))
        else:
            self.other.append(h)

    def repeats(self) -> int:
        """Measured prompts that repeat an earlier measured one."""
        distinct = int(np.unique(np.frombuffer(self.keys, dtype=np.uint64)).size) + len(set(self.other))
        return len(self.keys) + len(self.other) - distinct


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# ---- capacity on a procedure's own workload (§5.5.3's search; a closed-loop saturation probe) ----------

#: §5.5.2's TTFT P99 criterion when the tester gives none, at time_scale 1; × time_scale on the simulator
DEFAULT_TTFT_P99_S = 2.0
#: a search level's safety cap on its submission window (a level ends by its completions and min_level_s)
SEARCH_LEVEL_TIMEOUT_S = 3600.0


def capacity_ttft_threshold(ctx: ProcedureContext, declared: float | None) -> tuple[float, str]:
    """§5.5.2's TTFT P99 criterion in seconds and where it came from: ``declared``, else 2 s (× the
    embedded simulator's time_scale, so the capacity found does not depend on the time scale)."""
    if declared is not None:
        return float(declared), "declared (ttft_p99_threshold_s)"
    if ctx.sut.embedded:
        scale = float(ctx.sut.server_info.get("time_scale", 1.0) or 1.0)
        return DEFAULT_TTFT_P99_S * scale, f"default {DEFAULT_TTFT_P99_S:g} s x simulator time_scale {scale:g}"
    return DEFAULT_TTFT_P99_S, f"default {DEFAULT_TTFT_P99_S:g} s"


def next_search_level(lo: int, hi: int | None, maximum: int, resolution: int) -> int | None:
    """§5.5.3's next concurrency, or None once converged: double from the largest pass ``lo`` while
    levels pass (up to ``maximum``), halve while they fail (``lo`` 0), then bisect [lo, hi]."""
    if hi is None:
        return None if lo >= maximum else min(2 * lo, maximum)
    if lo == 0:
        return None if hi <= 1 else hi // 2
    return None if hi - lo <= resolution else (lo + hi) // 2


@dataclass
class SearchLevel:
    """One closed-loop level of a §5.5.3 search and its verdict against §5.5.2's criteria."""

    concurrency: int
    measured: Measured
    completion: float | None  # successful / (successful + failed)
    ttft_p99_s: float | None
    capacity_errors: int  # out-of-memory / capacity errors (helpers.capacity_error)
    reasons: list[str]  # the criteria it failed; empty: it passed

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "label": self.measured.summary.label, "completion": self.completion,
                "ttft_p99_s": self.ttft_p99_s, "capacity_errors": self.capacity_errors, "passed": self.passed,
                "reasons": list(self.reasons)}


@dataclass
class CapacitySearch:
    """A §5.5.3 search run by a procedure on its own workload: its levels in run order, the largest
    passing concurrency ``lo`` (0: none) and the smallest failing one ``hi``."""

    levels: list[SearchLevel]
    lo: int
    hi: int | None
    threshold_s: float
    threshold_source: str
    resolution: int
    maximum: int

    @property
    def capacity(self) -> int | None:
        return self.lo or None

    @property
    def converged(self) -> bool:
        lo, hi = self.lo, self.hi
        return (hi is not None and lo > 0 and hi - lo <= self.resolution) or (hi is None and lo >= self.maximum) \
            or (lo == 0 and hi == 1)

    def describe(self) -> str:
        """``levels 8 pass, 16 pass, 32 fail (TTFT P99 ...), 24 pass: capacity 24 (bracket [24, 32])``."""
        steps = ", ".join(f"{lv.concurrency} " + ("pass" if lv.passed else f"fail ({'; '.join(lv.reasons)})")
                          for lv in self.levels)
        found = f"capacity {self.lo}" if self.lo else "no level passed"
        return (f"levels {steps}: {found} (bracket [{self.lo}, {self.hi if self.hi is not None else '-'}], resolution "
                f"{self.resolution}{'' if self.converged else ', NOT converged'})")

    def to_json(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "bracket": [self.lo, self.hi], "converged": self.converged,
                "ttft_p99_threshold_s": self.threshold_s, "ttft_p99_threshold_source": self.threshold_source,
                "levels": [lv.to_json() for lv in self.levels]}


def judge_search_level(c: int, m: Measured, threshold_s: float, min_completion: float) -> SearchLevel:
    """§5.5.2's success criteria on one level: completion >= ``min_completion``, TTFT P99 <=
    ``threshold_s``, no out-of-memory / capacity error."""
    met = m.metrics
    n_ok, n_failed = int(met.scalar("completed_count").value), int(met.scalar("error_count").value)
    completion = n_ok / (n_ok + n_failed) if n_ok + n_failed else None
    ttft99 = pvalue(met, "ttft", 99)
    cap_err = sum(1 for r in m.records if capacity_error(r))
    reasons = []
    if completion is None or completion < min_completion:
        reasons.append("completion " + ("n/a" if completion is None else f"{completion:.1%}")
                       + f" < {min_completion:.0%}")
    if ttft99 is None or ttft99 > threshold_s:
        reasons.append(f"TTFT P99 {fmt_ms(ttft99)} > {fmt_ms(threshold_s)}")
    if cap_err:
        reasons.append(f"{cap_err} out-of-memory/capacity errors")
    return SearchLevel(c, m, completion, ttft99, cap_err, reasons)


@dataclass
class SaturationProbe:
    """A closed-loop saturation probe on a procedure's own requests: completions inside the steady part
    of its send window (first 10 % excluded, no drain tail) / that window's length, in requests/s."""

    measured: Measured
    concurrency: int
    duration_s: float
    completions: int  # successful completions inside the window
    window_s: float
    repeats: int  # requests past the end of the probe's list (a prompt sent again)

    @property
    def rate(self) -> float:
        return self.completions / self.window_s if self.window_s > 0 else 0.0

    def describe(self, on: str) -> str:
        """``closed-loop probe on <on> (concurrency 64, 20 s, 812 requests completed)``."""
        return (f"closed-loop probe on {on} (concurrency {self.concurrency}, {self.duration_s:g} s, "
                f"{self.measured.load.ok} requests completed)")


@dataclass
class Outcome:
    """What a procedure's summaries produced; the pipeline adds parameters, runs, facts, verdict."""

    metrics: RunMetrics | None  # the primary run's metrics (what SLO assertions evaluate)
    tables: list[Table]
    measurements: dict[str, Any]
    workload: dict[str, Any]  # the workload declaration the facts describe (§4.3)
    notes: list[str] = field(default_factory=list)
    plots: dict[str, Any] = field(default_factory=dict)
    capacity: Capacity | None = None
    runs: list[Measured] | None = None  # the runs reported, in order; None = every measured run
    fact_runs: list[Measured] | None = None  # the runs the facts describe, primary first; None = runs
    facts: dict[str, Any] = field(default_factory=dict)  # run_facts options (itl_reported=..., ...)
    # declared for the document (results.json 1.4); see base.ProcedureResult
    primary_run: str | None = None  # None: the reported run whose metrics are ``metrics``
    key_figures: list[KeyFigure] = field(default_factory=list)  # none in group "latency": latency_figures()
    sweep: Sweep | None = None
    warnings: list[Finding] = field(default_factory=list)  # after the runs' low-success warning
    overlays: Overlays | None = None
    server_view: ServerView | None = None  # the server telemetry it shows (base.ServerView)


class ProcedureRun(Generic[P]):
    """One execution of a procedure. Subclasses set the class attributes and the step methods."""

    id: ClassVar[str]
    title: ClassVar[str]
    params_type: ClassVar[type]
    profiles: ClassVar[Mapping[str, dict[str, Any]]]
    #: the capacity this procedure's result declares for others (§5.3.3): "rate" | "concurrency" | None
    provides_capacity: ClassVar[str | None] = None
    #: its measurement keys (names, and regular expressions for per-level/class/configuration families);
    #: the pipeline's own keys (PIPELINE_KEYS) are declared here
    measurement_keys: ClassVar[tuple[str, ...]] = ()
    measurement_patterns: ClassVar[tuple[str, ...]] = ()
    #: its runs are meant to exceed the SUT's capacity, so a run's low success is the measurement,
    #: not a warning (§5.8)
    oversubscribes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" in cls.__dict__:
            register(Procedure(cls.id, cls.title, cls.params_type, cls.entry, dict(cls.profiles), cls.plan,
                               provides_capacity=cls.provides_capacity,
                               measurement_keys=tuple(cls.measurement_keys) + PIPELINE_KEYS,
                               measurement_patterns=tuple(cls.measurement_patterns)))

    @classmethod
    async def entry(cls, ctx: ProcedureContext, p: Any) -> ProcedureResult:
        return await cls(ctx, p).execute()

    @staticmethod
    def plan(p: Any) -> dict[str, Any]:  # pragma: no cover - every procedure overrides it
        """params -> {"requests": int, "min_duration_s": float} for --collect-only / dry runs."""
        raise NotImplementedError

    def __init__(self, ctx: ProcedureContext, p: P) -> None:
        self.ctx = ctx
        self.p = p
        self.seeds = ctx.seeds(self.id)
        self.started = now_iso()
        self.warmup: WarmupResult | None = None
        self.measured: list[Measured] = []
        self.reserved: list[Iterable[RequestSpec]] = []  # planned measured prompts (see reserve)
        self.warmup_prompts: set[str] = set()  # hashes of the prompts the warm-up sent
        self.cold_start: ColdStart | None = None  # set by measure_cold_start (§4.5.3)

    # ---- the pipeline -------------------------------------------------------------------------

    async def execute(self) -> ProcedureResult:
        await self.prepare()
        try:
            async with client_for(self.ctx, max_connections=self.connections()) as client:
                self.warmup = await self.warm_up(client)
                await self.run_loads(client)
        finally:
            self.restore()
        out = self.summarize()
        runs = self.measured if out.runs is None else out.runs
        out.measurements.update(self.prompt_hygiene())
        if self.ctx.budget_cuts:
            out.notes.append(f"Time budget (--llm-max-duration {self.ctx.settings.max_duration:g} s): "
                             + "; ".join(self.ctx.budget_cuts)
                             + ". Request counts or durations below a draft minimum are listed as unmet.")
        fact_runs = runs if out.fact_runs is None else out.fact_runs
        workload = as_run(out.workload, getattr(self.p, "max_output_tokens", None),
                          (r for m in fact_runs for r in m.records))
        facts = run_facts(self.ctx, workload=workload, warmup=self.warmup, measured=fact_runs, **out.facts)
        cold = self.cold_start
        if cold is not None:  # labelled in the result: table, notes, measurements, heading (§4.5.3-MUST-2)
            out.tables.append(cold.table())
            out.measurements.update(cold.measurements())
            out.notes.insert(0, cold.table().notes[0])
            facts.cold_start = ColdStartFacts(restarted=True, requests=len(cold.cold.records),
                                              server_requests_before=cold.server_requests_before, labelled=True)
        self.adjust_facts(facts)
        checks = self.checks(out)
        checks.update({rid: c for rid, c in self.reference_checks(workload).items() if rid not in checks})
        undeclared = get_procedure(self.id).undeclared(out.measurements)
        if undeclared:
            raise ProcedureError(f"procedure {self.id} wrote measurements it does not declare "
                                 f"(measurement_keys / measurement_patterns): {', '.join(sorted(undeclared))}")
        primary = out.primary_run or next((m.summary.label for m in runs if m.metrics is out.metrics), None)
        figures = list(out.key_figures)
        if not any(f.group == LATENCY for f in figures):
            figures += latency_figures(out.metrics, DEFAULT_LATENCY_RANK)
        result = ProcedureResult(
            procedure=self.id, title=self.title, params=params_json(self.p), profile=self.ctx.settings.profile,
            metrics=out.metrics, runs=[m.summary for m in runs],
            measurements=out.measurements, tables=out.tables, notes=out.notes, plots=out.plots,
            capacity=out.capacity, started=self.started, finished=now_iso(),
            cold_start=None if cold is None else cold.to_json(),
            primary_run=primary, key_figures=figures, sweep=out.sweep,
            warnings=([] if self.oversubscribes else low_success_warnings(runs)) + out.warnings,
            overlays=out.overlays,
            server_view=out.server_view,
        )
        finish(self.ctx, result, facts, checks)
        return result

    def reference_checks(self, workload: Mapping[str, Any]) -> dict[str, Check]:
        """4.3.2 PARAM items from the requests actually sent (workloads.reference_checks, §4.3.2)."""
        wl, specs = getattr(self, "wl", None), getattr(self, "specs", None)
        if not isinstance(wl, Workload):
            return {}
        sent = dataclasses.replace(wl, specs=specs if isinstance(specs, SpecStream) else list(specs)) if specs else wl
        out = {}
        for rid, (ok, why) in reference_checks(sent).items():
            out[rid] = decide(rid, ok=bool(ok), met=why, unmet=f"{why} (workload {workload.get('name')})",
                              source="measured")
        return out

    # ---- steps a procedure supplies -----------------------------------------------------------

    async def prepare(self) -> None:
        """Build workloads and loads (may resolve capacity, switch the SUT or raise SkipProcedure)."""

    def connections(self) -> int | None:
        """The client's connection pool size (None: the client's default)."""
        return None

    async def warm_up(self, client: LLMClient) -> WarmupResult | None:
        """§4.5 warm-up before the measured runs (None: the procedure warms up inside run_loads)."""
        return None

    async def warm_up_on_workload(self, client: LLMClient) -> WarmupResult:
        """§4.5 warm-up on the procedure's own workload, prompts from its ``warmup`` seed stream."""
        p = self.p
        specs, _ = level_specs(self.ctx, p.workload, max(p.warmup_requests, 1), self.seeds.derive("warmup"),
                               p.max_output_tokens)
        return await self.warm_up_with(client, specs)

    async def run_loads(self, client: LLMClient) -> None:
        """The measured runs: fixed levels, a search or configurations, each via :meth:`measure`."""
        raise NotImplementedError

    def restore(self) -> None:
        """Undo configuration switches (runs even when a load run failed)."""

    def summarize(self) -> Outcome:
        """Summaries and tables from ``self.measured`` and what run_loads kept."""
        raise NotImplementedError

    def checks(self, out: Outcome) -> dict[str, Check]:
        """The procedure's requirement checks, each built by ``compliance.decide`` (a decider or a row)."""
        raise NotImplementedError

    def adjust_facts(self, facts: RunFacts) -> None:
        """Facts only this procedure knows (e.g. the guardrail states it compared)."""

    # ---- shared step implementations ----------------------------------------------------------

    async def restart_sut(self) -> float:
        """§4.5.3: restart the SUT through the configure hook's ``restart`` setting (same flags, empty
        caches; a thread, so a slow model load does not hold the event loop). Seconds it took."""
        t0 = time.perf_counter()
        if not await asyncio.to_thread(self.ctx.configure_sut, "restart", True):
            raise SkipProcedure(f"{self.id}: a cold-start measurement (§4.5.3) restarts the SUT through the "
                                "'restart' setting of pytest_llmbench_configure_sut; no implementation can restart "
                                "this server (the plugin restarts servers it started: the embedded simulator and "
                                "the llama-server fixture)")
        return time.perf_counter() - t0

    async def measure_cold_start(self, client: LLMClient, specs: Sequence[RequestSpec], restart_s: float) -> None:
        """The cold requests: the first the client sends after the restart, one at a time (§4.5.3)."""
        self.ctx.progress(f"cold start: {len(specs)} requests right after the restart, before any warm-up")
        cold = await self.measure(client, "cold-start", specs, ClosedLoop(1, max_requests=len(specs)),
                                  drain_timeout_s=self.ctx.settings.timeout, extra={"cold_start": True})
        self.cold_start = ColdStart(restart_s, cold)

    async def measure_warm_reference(self, client: LLMClient, specs: Sequence[RequestSpec]) -> None:
        """As many requests as the cold ones, sent the same way after the warm-up (§4.5.3 comparison)."""
        assert self.cold_start is not None
        self.cold_start.warm = await self.measure(client, "warm-reference", specs, ClosedLoop(1, max_requests=len(specs)),
                                                  drain_timeout_s=self.ctx.settings.timeout,
                                                  extra={"cold_start_reference": True})

    def reserve(self, specs: Iterable[RequestSpec]) -> None:
        """Declare prompts the measured runs will send, so the warm-up never sends them (§4.5.1).
        Kept as given (a list, or a lazy workload's stream, never copied) and read when the warm-up's
        prompts are known; a one-pass iterator is kept as a list."""
        self.reserved.append(specs if isinstance(specs, (Sequence, SpecStream)) else list(specs))

    def reserved_among(self, hashes: set[str]) -> set[str]:
        """The prompt hashes among ``hashes`` that a measured run will send (:meth:`reserve`)."""
        return {h for specs in self.reserved for s in specs if (h := s.prompt_hash) in hashes}

    async def warm_up_with(self, client: LLMClient, specs: Iterable[RequestSpec], **kw: Any) -> WarmupResult:
        """§4.5 warm-up with the procedure's ``warmup_requests`` / ``warmup_tokens`` parameters.

        Warm-up prompts come from their own seed stream (same distribution, §4.5.1-MUST-4); any
        that equals a reserved measured prompt is dropped, so a prefix cache warmed here cannot
        serve a measured request (5.7 populates its cache with prefixes, not measured prompts).
        """
        kw.setdefault("min_requests", getattr(self.p, "warmup_requests"))
        kw.setdefault("min_output_tokens", getattr(self.p, "warmup_tokens"))
        specs = list(specs)
        reserved = self.reserved_among({s.prompt_hash for s in specs})
        pool = [s for s in specs if s.prompt_hash not in reserved]
        if not pool:
            raise ValueError(f"{self.id}: every warm-up prompt is also a measured prompt; "
                             "warm-up prompts must come from their own seed stream (§4.5.1)")
        self.warmup_prompts.update(s.prompt_hash for s in pool)
        self.warmup_prompts.update(s.prompt_hash for s in kw.get("prefix_specs", ()))
        return await warm_up(self.ctx, client, pool, **kw)

    def prompt_hygiene(self) -> dict[str, Any]:
        """Measured prompts that the warm-up sent, measured repeats, the measured cache-hit fraction,
        and how per-chunk token counts were obtained (share exact in server tokens, §4.4, §4.6).

        Values for the results document (measurements), so contamination of the measured sample
        by a prefix cache is visible in every procedure's report (§4.5.1, §5.7).
        """
        hits, methods, used = CacheHits(), tokencount.MethodTally(), CountingTally()
        prompts = _Prompts(self.warmup_prompts)
        for r in RunRecords(self.measured, phase="measure"):  # one pass; nothing held per request
            hits.add(r)
            methods.add(r)
            used.add(r)
            prompts.add(r)
        hit, counting, tok = hits.summary(), methods.shares(), tokenizer_facts(self.ctx, used.used())
        repeats, seen = prompts.repeats(), prompts.seen
        return {
            "token_counts_exact_share": counting["exact_share"],
            "token_count_methods": ", ".join(f"{k} {n}" for k, n in sorted(counting["methods"].items())) or "n/a",
            # §4.4.2 option and the tokenizer the counts are in: part of the gate's comparability key (§6.1)
            "token_counting_option": tok["counting_option"],
            "token_counting_tokenizer": tok["name"] or f"server-native:{self.ctx.sut.model}",
            "measured_cache_hit_fraction": hit["fraction"],
            "measured_requests_over_half_cached": (
                f"{hit['requests_over_half_cached']} of {hit['requests_reporting']}"
                if hit["requests_reporting"] else "not reported by the server"),
            "measured_prompts_seen_in_warmup": seen,
            "measured_prompt_repeats": repeats,
        }

    async def search_capacity(self, client: LLMClient, label: str,
                              specs_for: Callable[[int, int], Sequence[RequestSpec]], *, initial: int, maximum: int,
                              resolution: int, min_level_s: float, min_completions_per_slot: int,
                              threshold_s: float, threshold_source: str, min_completion: float,
                              extra: dict[str, Any] | None = None) -> CapacitySearch:
        """§5.5.3's search on the procedure's own requests: closed-loop levels of at least ``min_level_s``
        and ``min_completions_per_slot`` completions per slot, doubled from ``initial`` while they meet
        §5.5.2's criteria, halved while they fail, then bisected to ``resolution``.

        ``specs_for(concurrency, n)``: ``n`` requests for the level (its own seed stream). Each level is a
        run ``{label}-c0008`` with ``extra["phase_role"] = "capacity search"``."""
        levels: list[SearchLevel] = []
        lo, hi = 0, None
        c: int | None = initial
        per_slot: float | None = None  # completions/s per slot at the last level: sizes the next list
        while c is not None and all(lv.concurrency != c for lv in levels):
            need = min_completions_per_slot * c
            n = need if per_slot is None else max(need, math.ceil(1.25 * per_slot * c * min_level_s))
            stats: dict[str, int] = {}
            self.ctx.progress(f"{self.id} capacity search (§5.5.3) level {c}: closed loop, >= {min_level_s:g} s "
                              f"and >= {need} completions")
            m = await self.measure(client, f"{label}-c{c:04d}", closed_level_stream(specs_for(c, n), need,
                                                                                    min_level_s, stats),
                                   ClosedLoop(c, duration_s=max(SEARCH_LEVEL_TIMEOUT_S, min_level_s)),
                                   drain_timeout_s=self.ctx.settings.timeout, sized=True,
                                   extra={**(extra or {}), "phase_role": "capacity search", "concurrency": c})
            lv = judge_search_level(c, m, threshold_s, min_completion)
            levels.append(lv)
            ok = lv.completion is not None and m.load.duration_s > 0
            per_slot = int(m.metrics.scalar("completed_count").value) / m.load.duration_s / c if ok else per_slot
            if lv.passed:
                lo = max(lo, c)
            else:
                hi = c if hi is None else min(hi, c)
            c = next_search_level(lo, hi, maximum, resolution)
        return CapacitySearch(levels, lo, hi, threshold_s, threshold_source, resolution, maximum)

    async def probe_saturation(self, client: LLMClient, label: str, specs: Sequence[RequestSpec], concurrency: int,
                               duration_s: float, *, extra: dict[str, Any] | None = None) -> SaturationProbe:
        """The saturation throughput of the procedure's own requests (how 5.2 estimates its range): a
        closed loop at ``concurrency`` for ``duration_s`` (longer on a slow SUT, ``common.probe_window_s``);
        its completions inside the steady window / the window, in requests/s. Run label ``label``."""
        d = probe_window_s(duration_s, self.warmup)
        stats: dict[str, int] = {}
        self.ctx.progress(f"{self.id} capacity probe: closed loop, concurrency {concurrency}, {d:g} s")
        m = await self.measure(client, label, closed_level_stream(specs, 0, d, stats),
                               ClosedLoop(concurrency, duration_s=d), drain_timeout_s=max(30.0, d), sized=True,
                               extra={**(extra or {}), "phase_role": "capacity probe", "concurrency": concurrency})
        lo, hi = steady_window_ns(m)  # completions while the loop was full: no drain tail
        done = sum(1 for r in m.records if r.ok and r.end_ns is not None and lo <= r.end_ns <= hi)
        return SaturationProbe(m, concurrency, d, done, max(hi - lo, 0) / 1e9, stats.get("repeats", 0))

    async def measure(self, client: LLMClient, label: str, specs: Iterable[RequestSpec],
                      load: OpenLoop | ClosedLoop, **kw: Any) -> Measured:
        """One measured run (common.measure), kept in ``self.measured`` in run order."""
        m = await measure(self.ctx, client, label, specs, load, **kw)
        self.measured.append(m)
        return m
