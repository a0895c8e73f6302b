"""The skeleton every procedure (§5.1–§5.10) runs, with the steps that differ left to subclasses.

``ProcedureRun.execute`` does, in order: the start stamp, the check that compliance knows the
procedure's items, ``prepare`` (workloads and loads, capacity look-ups), a client for the SUT
(``run.client_for``), ``warm_up`` (§4.5, ``run.warm_up``), ``run_loads`` (the procedure's load
levels or search; every run recorded through :meth:`ProcedureRun.measure`, ``run.measure``),
``restore`` (undo SUT configuration switches, always), ``summarize`` (tables, measurements, notes,
plots, and what the procedure shows: its primary run, headline key figures, sweep result, warnings
and the runs it overlays; ``document/`` only aggregates these), the sample's hygiene
(``sample.py``), the run facts (``facts.run_facts``), ``checks`` (each through ``compliance.decide``),
the result and its compliance verdict (``facts.finish``). A measurement key the procedure does not
declare (``measurement_keys``/``measurement_patterns``) fails the run: the keys are its contract with
the suites and SLO assertions. The shared step implementations live in their own modules:
``capacity.py`` (§5.5.3's search, the saturation probe), ``coldstart.py`` (§4.5.3), ``budget.py``
(the time budget), ``figures.py`` (headline figures and warnings).

A subclass that sets ``id`` registers itself (``__init_subclass__``), with its own compliance items
when it declares ``requirements`` (a procedure outside the draft's data files): parameters still come
from the dataclass defaults < profile < marker (``base.Procedure.make_params``). Seeds come from one
allocator (``self.seeds``, seeds.py), one named stream per purpose.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar, Generic, TypeVar

from ..client import LLMClient
from ..common.records import RequestSpec
from ..common.timing import timed
from ..compliance import Check, ColdStartFacts, RunFacts, decide
from ..compliance.registry import add_requirements, check_test
from ..loadgen.load import ClosedLoop, OpenLoop
from ..loadgen.warmup import WarmupResult
from ..measure.summary import RunMetrics
from ..workloads import SpecStream, Workload, reference_checks
from .base import Procedure, ProcedureContext, ProcedureError, SkipProcedure, get_procedure, params_json, register
from .capacity import CapacitySearch, SaturationProbe, SearchOptions, probe_saturation, search_capacity
from .coldstart import ColdStart
from .facts import finish, run_facts
from .figures import DEFAULT_LATENCY_RANK, LATENCY, latency_figures, low_success_warnings
from .helpers import level_specs
from .result import Capacity, Finding, KeyFigure, Overlays, ProcedureResult, ServerView, Sweep, Table
from .run import Measured, client_for, measure, warm_up
from .sample import as_run, prompt_hygiene
from .tally import SentLengths, tallies

__all__ = ["Outcome", "PIPELINE_KEYS", "ProcedureRun", "now_iso"]

P = TypeVar("P")


#: measurement keys every procedure's result may carry: the pipeline's prompt hygiene, the
#: cold-start figures (§4.5.3) and the verdict copied by facts.finish
PIPELINE_KEYS = ("token_counts_exact_share", "token_count_methods", "token_counting_option",
                 "token_counting_tokenizer", "measured_cache_hit_fraction",
                 "measured_requests_over_half_cached", "measured_prompts_seen_in_warmup", "measured_prompt_repeats",
                 "cold_start_first_ttft_ms", "cold_start_warm_ttft_p50_ms", "cold_start_ratio", "cold_start_restart_s",
                 "cold_start_requests", "compliance_verdict")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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
    # declared for the document (results.json 1.4); see result.ProcedureResult
    primary_run: str | None = None  # None: the reported run whose metrics are ``metrics``
    key_figures: list[KeyFigure] = field(default_factory=list)  # none in group "latency": latency_figures()
    sweep: Sweep | None = None
    warnings: list[Finding] = field(default_factory=list)  # after the runs' low-success warning
    overlays: Overlays | None = None
    server_view: ServerView | None = None  # the server telemetry it shows (result.ServerView)
    slo_verdicts: dict[str, Any] = field(default_factory=dict)  # a run stopped when decided (result.py)


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
    #: its own compliance items, for a procedure whose items the shipped ``data/requirements.yaml`` does
    #: not hold (one registered through the entry point): that file's fields (id, level, section, summary,
    #: check); empty for the draft's procedures
    requirements: ClassVar[Sequence[Mapping[str, Any]]] = ()
    #: its one measured run may stop once the SLOs known before it are settled (``ctx.stop``, issue 47)
    stops_when_decided: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" in cls.__dict__:
            register(Procedure(cls.id, cls.title, cls.params_type, cls.entry, dict(cls.profiles), cls.plan,
                               provides_capacity=cls.provides_capacity,
                               measurement_keys=tuple(cls.measurement_keys) + PIPELINE_KEYS,
                               measurement_patterns=tuple(cls.measurement_patterns), module=cls.__module__,
                               stops_when_decided=cls.stops_when_decided))
            if cls.requirements:
                add_requirements(cls.id, cls.requirements)

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
        check_test(self.id)  # its compliance items are known before anything is sent
        with timed(f"{self.id}: prepare (workloads, parameters)"):
            await self.prepare()
        try:
            async with client_for(self.ctx, max_connections=self.connections()) as client:
                with timed(f"{self.id}: warm-up"):
                    self.warmup = await self.warm_up(client)
                await self.run_loads(client)
        finally:
            self.restore()
        with timed(f"{self.id}: summaries, facts and checks after the runs"):
            return self.conclude()

    def conclude(self) -> ProcedureResult:
        """After the runs: the procedure's summaries, the sample's hygiene, the facts, checks and verdict."""
        out = self.summarize()
        runs = self.measured if out.runs is None else out.runs
        out.measurements.update(self.prompt_hygiene())
        out.notes.extend(self.ctx.adapted)  # probes and drains lengthened for a slow SUT
        if self.ctx.budget_cuts:
            out.notes.append(f"Time budget (--llm-max-duration {self.ctx.settings.max_duration:g} s): "
                             + "; ".join(self.ctx.budget_cuts)
                             + ". Request counts or durations below a draft minimum are listed as unmet.")
        fact_runs = runs if out.fact_runs is None else out.fact_runs
        workload = as_run(out.workload, getattr(self.p, "max_output_tokens", None),
                          SentLengths.merged(t.lengths for t in tallies(fact_runs)))
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
            slo_verdicts=out.slo_verdicts,
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
        """The prompt hashes among ``hashes`` that a measured run will send (:meth:`reserve`): a lazy
        workload's from the hashes noted when it was generated (``SpecStream.hashes_among``: no pass over
        it, issue 46), a list's from its specs."""
        out: set[str] = set()
        for specs in self.reserved:
            known = specs.hashes_among(hashes) if isinstance(specs, SpecStream) else None
            out |= known if known is not None else {h for s in specs if (h := s.prompt_hash) in hashes}
        return out

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
        """The measured sample's hygiene (``sample.prompt_hygiene``): measured prompts the warm-up sent,
        repeats, the measured cache-hit fraction, how per-chunk token counts were obtained (§4.4, §4.5.1)."""
        return prompt_hygiene(self.ctx, self.measured, self.warmup_prompts)

    async def search_capacity(self, client: LLMClient, label: str,
                              specs_for: Callable[[int, int], Sequence[RequestSpec]],
                              options: SearchOptions) -> CapacitySearch:
        """§5.5.3's search on the procedure's own requests (``capacity.search_capacity``), each level a
        run of :meth:`measure`."""
        return await search_capacity(functools.partial(self.measure, client), self.ctx, self.id, label, specs_for,
                                     options)

    async def probe_saturation(self, client: LLMClient, label: str,
                               specs_for: Callable[[float, int], Sequence[RequestSpec]], concurrency: int,
                               duration_s: float, *, extra: dict[str, Any] | None = None) -> SaturationProbe:
        """The saturation throughput of the procedure's own requests (``capacity.probe_saturation``): a
        closed loop at ``concurrency`` for about ``duration_s``, a run of :meth:`measure` labelled ``label``
        (run again longer, on ``specs_for(window_s, attempt)``, when its requests outlast the window)."""
        return await probe_saturation(functools.partial(self.measure, client), self.ctx, self.id, self.warmup, label,
                                      specs_for, concurrency, duration_s, extra)

    async def measure(self, client: LLMClient, label: str, specs: Iterable[RequestSpec],
                      load: OpenLoop | ClosedLoop, **kw: Any) -> Measured:
        """One measured run (``run.measure``), kept in ``self.measured`` in run order."""
        m = await measure(self.ctx, client, label, specs, load, **kw)
        self.measured.append(m)
        return m
