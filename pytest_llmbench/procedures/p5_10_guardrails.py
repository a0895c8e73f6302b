"""§5.10 Guardrail Overhead: latency and throughput cost of input/output content filtering.

Procedure (§5.10.3): baseline (guardrails off) → warm-up → run at 25/50/75 % of capacity → each
guardrail configuration in turn (input only, output only, full) at the same levels → compare.
Measurements (§5.10.4): per configuration TTFT P50/P95/P99 and E2E; input filter overhead =
TTFT(input) − TTFT(baseline); total overhead = E2E(full) − E2E(baseline); throughput reduction.
Refusals are counted per configuration (§4.8.1) and are failures, never successes.

Step 2 ("complete warm-up and run workload at each load level") and step 3 ("enable each
guardrail configuration and repeat") are followed to the letter: after every switch the new
configuration is warmed up again (§4.5, own prompts) before its first measured run, so a filter
that loads a classifier model or fills its own caches on first use is not charged to the
measurement.

Capacity ("25 %, 50 %, 75 % of capacity", §5.10.2). With ``capacity="probe"`` (default) it is
measured by 5.10 itself, in the Baseline configuration (after the switch to it and its warm-up;
the first configuration when Baseline is not run) and on its own workload: a closed-loop probe at
``probe_concurrency`` for ``probe_duration_s`` on requests of the workload from their own seed
stream, its completions over the steady window (first 10 % excluded) / the window, in requests/s
(how 5.2 estimates its range and 5.6 the saturation of its mix). A declared request rate wins and
is named "declared" (``--llm-capacity rate=R``). ``capacity="session"`` borrows the session's rate
(5.2 on its own Synthetic-Uniform workload, resolved before any switch): a deviation, named in a
note and by 5.10.2-PARAM-3 unmet.

"Max throughput" (Table 14) is not measured by the draft's 25–75 % levels (requirements.md
ambiguity 44). It comes from the measured (or declared) request-rate capacity: each
configuration gets a saturation run of the same request sequence at
``throughput_probe_fraction`` (default 1.5) times the capacity rate, open loop; max throughput =
output tokens/s of successful requests delivered over the submission window minus its first
10 %. A server that keeps up delivers what is offered; one that is saturated delivers its maximum.
The run counts as saturated when it delivered under 95 % of the offered output tokens/s (arrival
rate × mean output tokens); an unsaturated configuration's figure is a lower bound and is labelled
so. ``throughput_probe_fraction=None`` skips the run and reports the highest level's achieved
throughput instead, labelled as such.

Multi-turn sessions (issue 50; ``workload="conversation-sessions"``, its file from ``workload_params`` or
``--llm-dataset conversation=PATH``): every configuration's runs are session runs of the same seeded
sessions, the history carrying the dataset's recorded answers (``recorded_answers`` defaults to True here;
``False`` is a usage error: the server's answers, which an output filter changes, would make each
configuration's later turns differ). Only session starts follow a level's arrival process, so a level's start
rate is its fraction of the request-rate capacity divided by the mean turns per session (the offered request
rate is then the fraction); the saturation run's offered load counts the starts in its window times the mean
turns. The capacity probe holds ``probe_concurrency`` sessions at once (session traffic, history served by
the prefix cache). A turn that fails (a refusal) ends its session, so a configuration that refuses sends
fewer turns: the refusal table counts them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..client import LLMClient
from ..common import draft
from ..common.records import ErrorType
from ..compliance import Check, RunFacts, decide
from ..loadgen.warmup import WarmupResult
from ..measure.registry import declare, figure
from ..measure.units import Cell, CellValue
from ..settings import parse_capacity
from ..sut.system import simulator_guardrails
from ..workloads import SESSIONS_WORKLOAD, build_workload
from .base import CannotMeasure
from .budget import PROBE_FIT
from .capacity import SaturationProbe, SaturationSearch, search_saturation
from .facts import declarations
from .helpers import cap_output, pvalue, session_comparison_params, skip_with_compliance, turns_per_session
from .loads import LoadSpec, resolve_load
from .pipeline import Outcome, ProcedureRun
from .prompts import failure_cause
from .result import Overlays, RunSummary, Series, Table
from .run import Measured, refusal_policy

GUARDRAIL_CONFIGS = ("none", "input", "output", "full")
LABELS = {"none": "Baseline", "input": "Input Filter", "output": "Output Filter", "full": "Full Filter"}
KEYS = {"none": "baseline", "input": "input", "output": "output", "full": "full"}
DRAFT_LEVELS = draft.value("guardrails.levels")  # §5.10.2
REFUSED_COUNTERS = ("llmbench:requests_refused_total",)
CAPACITY_MODES = ("probe", "session")
#: how the request-rate capacity was obtained (measurement ``capacity_kind``)
DECLARED, PROBED, BORROWED = "declared", "own probe", "borrowed"


@dataclass
class GuardrailParams:
    """§5.10.2 setup parameters; defaults are the draft's values (the ``standard`` profile)."""

    workload: str = "conversation"
    workload_params: dict[str, Any] = field(default_factory=dict)  # e.g. {"dataset": "sharegpt.json"}
    configurations: tuple[str, ...] = GUARDRAIL_CONFIGS
    load_fractions: tuple[float, ...] = DRAFT_LEVELS
    arrival: str = "poisson"
    requests_per_level: int = draft.value("ttft.p99_min_requests")  # the draft sets none: enough for P99 (§5.1.4.3)
    report_level: float = 0.5  # the load level shown in Table 13 (every level is in the detail table)
    throughput_probe_fraction: float | None = 1.5  # saturation run at this multiple of the capacity rate
    throughput_probe_requests: int = 500
    capacity: str = "probe"  # "probe": measured in Baseline on this workload; "session": borrowed (module doc)
    probe_concurrency: int = 64  # the capacity probe's closed loop
    probe_duration_s: float = 20.0
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded

    def validate(self) -> None:
        self.configurations = tuple(self.configurations)
        self.load_fractions = tuple(float(f) for f in self.load_fractions)
        bad = [c for c in self.configurations if c not in GUARDRAIL_CONFIGS]
        if bad or not self.configurations:
            raise ValueError(f"configurations must be a non-empty subset of {GUARDRAIL_CONFIGS}, got "
                             f"{self.configurations!r}")
        if len(set(self.configurations)) != len(self.configurations):
            raise ValueError(f"configurations repeat: {self.configurations!r}")
        if not self.load_fractions or any(not f > 0 for f in self.load_fractions):
            raise ValueError(f"load_fractions must be > 0 fractions of capacity, got {self.load_fractions!r}")
        if self.report_level not in self.load_fractions:
            raise ValueError(f"report_level {self.report_level} must be one of load_fractions {self.load_fractions}")
        if self.arrival not in ("poisson", "uniform"):
            raise ValueError(f"arrival must be 'poisson' or 'uniform', got {self.arrival!r}")
        if self.requests_per_level < 1:
            raise ValueError(f"requests_per_level must be >= 1, got {self.requests_per_level}")
        if self.throughput_probe_fraction is not None and not self.throughput_probe_fraction >= 1:
            raise ValueError(f"throughput_probe_fraction must be >= 1 (a multiple of the capacity rate) or None, "
                             f"got {self.throughput_probe_fraction}")
        if self.capacity not in CAPACITY_MODES:
            raise ValueError(f"capacity must be one of {CAPACITY_MODES}, got {self.capacity!r}")
        if self.probe_concurrency < 1 or not self.probe_duration_s > 0:
            raise ValueError("probe_concurrency must be >= 1 and probe_duration_s > 0")
        if self.throughput_probe_requests < 1:
            raise ValueError(f"throughput_probe_requests must be >= 1, got {self.throughput_probe_requests}")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {self.max_output_tokens}")
        if not isinstance(self.workload_params, dict):
            raise ValueError(  # noqa: TRY004  (make_params turns ValueError into ProcedureError)
                f"workload_params must be a dict, got {type(self.workload_params).__name__}")
        self.workload_params = session_comparison_params(self.workload, self.workload_params, "5.10")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.10')  # data/profiles.yaml

#: The figures of this procedure's result an SLO may name (§5.10.4), e.g. in ``assert_slo``; each reads
#: one of the result's measurements (scaled to the base unit), not a run's records.
declare(
    figure("guardrail_e2e_overhead_p50", "Total guardrail overhead at E2E P50", "s", "lower", "E2E P50 (Full "
           "Filter) - E2E P50 (Baseline) at the report level", "§5.10.4", "total_overhead_e2e_p50_ms", 1e-3),
    figure("guardrail_throughput_loss", "Throughput lost to full guardrails", "fraction", "lower",
           "(max throughput Baseline - max throughput Full Filter) / Baseline (Table 14's reduction, sign reversed)",
           "§5.10.4", "full_throughput_loss"),
)


SATURATED_SHARE = 0.95  # delivered below this share of the offered output tok/s: the server fell behind


@dataclass(frozen=True)
class SaturationResult:
    """Table 14's max throughput of one configuration (§5.10.4 "throughput reduction")."""

    delivered_tps: float  # output tok/s of successful requests over the window
    offered_tps: float  # arrival rate in the window × mean output tokens per successful request
    saturated: bool  # delivered < SATURATED_SHARE × offered: the figure is the server's maximum

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def saturation_throughput(m: Measured, turns: float = 1.0) -> SaturationResult | None:
    """Output tok/s delivered over an overload run's steady window, and whether it saturated.

    Delivered: the run's ``output_throughput`` (the one definition: the send window less its first 10 %,
    every request's streamed tokens, §5.2.3.2; measure/metrics/throughput.py). A server that keeps up
    delivers the offered tokens (arrivals in the window × the mean output of a successful request); one
    that falls behind (saturated) delivers its maximum. None: no window or no success. A session run
    (``turns``: mean turns per session): the offered requests are the sessions started in the window times
    ``turns`` (a later turn waits for the previous answer, so the turns sent follow what was delivered).
    """
    mt = m.metrics
    ok = mt.per_request["ok"]
    delivered = mt.scalar("output_throughput").value if "output_throughput" in mt.scalars else math.nan
    w0, w1 = mt.steady_window
    if not ok.any() or not w1 > w0 or not math.isfinite(delivered):
        return None
    sent = mt.per_request["sent"]
    inside = (sent >= w0) & (sent <= w1)
    if turns != 1.0:  # the sessions' first turns (their starts)
        inside &= np.isin(mt.per_request["index"], [r.index for r in m.records if r.turn == 1])
    arrivals = int(inside.sum()) * turns / (w1 - w0)
    offered = arrivals * float(np.nanmean(mt.per_request["osl"][ok]))
    return SaturationResult(delivered, offered, delivered < SATURATED_SHARE * offered)


def _refused(m: Measured) -> int:
    return sum(1 for r in m.records if r.error_type is ErrorType.REFUSED)


def _server_refused(m: Measured) -> float | None:
    for name in REFUSED_COUNTERS:
        d = m.server_delta(name)
        if d is not None:
            return d
    return None


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _switch(run: Guardrails, mode: str) -> None:
    if not run.ctx.configure_sut("guardrails", mode):
        skip_with_compliance(run, f"5.10 needs to set guardrails={mode!r}: no pytest_llmbench_configure_sut "
                             "implementation can switch the SUT's guardrails (see docs/guardrails.md)",
                             {"5.10.2-PARAM-2": f"the guardrail configurations {', '.join(run.p.configurations)} "
                                                "could not be set"},
                             declarations(run.ctx), getattr(run, "wl", None) and run.wl.declaration.to_json())


def overlays(runs: Sequence[RunSummary], report_level: float | None) -> Overlays:
    """TTFT and E2E per guardrail configuration at the report level (§5.10.4), named as Table 13
    names them, and their P50/P99 differences from the first (the baseline when it ran)."""
    sel = [r for r in runs if r.extra.get("guardrails") is not None and not r.extra.get("throughput_probe")
           and (report_level is None or r.extra.get("capacity_fraction") == report_level)]
    series = [Series(LABELS.get(str(r.extra["guardrails"]), str(r.extra["guardrails"])), r.label, group=i)
              for i, r in enumerate(sel)]
    return Overlays("configuration", ["ttft", "e2e"], "§5.10.4", series,
                    differences=[("ttft", [50.0, 99.0]), ("e2e", [50.0, 99.0])])


class Guardrails(ProcedureRun[GuardrailParams]):
    """§5.10.3: every guardrail configuration at every load level, same requests and schedule."""

    id, title, params_type, profiles = "5.10", "Guardrail Overhead", GuardrailParams, PROFILES
    measurement_keys = ("requests_per_level", "capacity_rate_rps", "capacity_kind", "capacity_source",
                        "capacity_configuration", "report_level", "levels")
    #: per configuration (KEYS) and load level ("50pct")
    measurement_patterns = (
        r"(baseline|input|output|full)_[0-9.]+pct_(ttft_p[0-9]+_ms|e2e_p[0-9]+_ms|refused|successful)",
        r"(input_filter_overhead_ttft|total_overhead_e2e|output_filter_overhead_e2e)_p[0-9]+_ms(_[0-9.]+pct)?",
        r"(baseline|input|output|full)_(throughput_saturated|offered_output_tps|max_throughput_tps"
        r"|throughput_reduction_pct|throughput_loss|refusals|refusals_server|requests)")

    @staticmethod
    def plan(p: GuardrailParams) -> dict[str, Any]:
        probe = p.throughput_probe_requests if p.throughput_probe_fraction else 0
        n = len(p.configurations) * (len(p.load_fractions) * p.requests_per_level + probe + p.warmup_requests)
        return {"requests": n, "min_duration_s": p.probe_duration_s if p.capacity == "probe" else 0.0}

    async def prepare(self) -> None:
        p, ctx = self.p, self.ctx
        self.wl = build_workload(p.workload, n=p.requests_per_level, seed=self.seeds.derive("measure"),
                                 tokenizer=ctx.tokenizer, **p.workload_params)
        self.specs = cap_output(self.wl.specs, p.max_output_tokens)
        #: a session run (issue 50): each level's load starts sessions of this many turns on average
        self.turns = turns_per_session(self.specs)
        self.warmup_standin = False  # on sessions: the warm-up fell back to Synthetic-Uniform (every first turn measured)
        self.probe_specs: list[Any] = []
        if p.throughput_probe_fraction:  # beyond the measured capacity: every configuration saturates
            self.probe_specs = cap_output(build_workload(
                p.workload, n=p.throughput_probe_requests, seed=self.seeds.derive("probe"),
                tokenizer=ctx.tokenizer, **p.workload_params).specs, p.max_output_tokens)
        self.loads: list[tuple[Any, dict[str, Any]]] = []
        self.probe_load: tuple[Any, dict[str, Any]] | None = None
        self.capacity_probe: SaturationProbe | None = None
        self.capacity_search: SaturationSearch | None = None
        #: the capacity probe's configuration: Baseline, or the first one when Baseline is not run
        self.capacity_cfg = "none" if "none" in p.configurations else p.configurations[0]
        declared = ctx.settings.capacity is not None and parse_capacity(ctx.settings.capacity,
                                                                        "--llm-capacity")[0] == "rate"
        if p.capacity == "session" or declared:  # a rate from the session: declared, or 5.2's (borrowed)
            await self._resolve_loads(None)
            src = str(self.loads[0][1].get("capacity_source", ""))
            self.cap_kind = DECLARED if src.startswith("declared") else BORROWED
        else:
            self.cap_kind = PROBED  # measured in run_loads, in the capacity configuration
        #: the capacity probe's requests: its own seed stream, drawn (and reserved) before any warm-up
        self.capacity_probe_specs: list[Any] = []
        if self.cap_kind == PROBED:
            c = p.probe_concurrency
            self.capacity_probe_specs = cap_output(build_workload(
                p.workload, n=3 * c + math.ceil(30 * p.probe_duration_s), seed=self.seeds.derive("capacity-probe"),
                tokenizer=ctx.tokenizer, **p.workload_params).specs, p.max_output_tokens)
        for measured in (self.specs, self.probe_specs, self.capacity_probe_specs):  # never sent by a warm-up
            self.reserve(measured)
        info = ctx.sut.server_info
        self.original = info.get("guardrails") if "guardrails" in info else None
        self.runs: dict[tuple[str, float], Measured] = {}
        self.probes: dict[str, Measured] = {}
        self.saturation: dict[str, SaturationResult | None] = {}
        self.rewarm: dict[str, WarmupResult] = {}  # the warm-up after each switch (§5.10.3 steps 2–3)
        self.states: dict[str, Any] = {}
        self.flushed: list[bool] = []
        # step 1: baseline (or the first configuration asked for); the capacity probe's configuration first
        self.current = self.capacity_cfg if self.cap_kind == PROBED else p.configurations[0]
        _switch(self, self.current)

    async def _resolve_loads(self, rate: float | None) -> None:
        """The levels' and the saturation run's open loops: fractions of ``rate`` (None: the session's rate).
        On sessions each open loop starts sessions: its rate is divided by the mean turns per session (for the
        session's rate, by ``resolve_load``'s ``turns``)."""
        p, ctx = self.p, self.ctx
        per = {id(self.specs): self.turns, id(self.probe_specs): turns_per_session(self.probe_specs)}

        def spec(f: float, specs: Any) -> LoadSpec:
            return (LoadSpec("open", p.arrival, capacity_fraction=f) if rate is None
                    else LoadSpec("open", p.arrival, rate=f * rate / per[id(specs)]))

        self.loads = [await resolve_load(ctx, spec(f, self.specs), max_requests=len(self.specs),
                                         seed=self.seeds.derive("arrivals", i), turns=self.turns)
                      for i, f in enumerate(p.load_fractions)]
        if p.throughput_probe_fraction:
            self.probe_load = await resolve_load(ctx, spec(p.throughput_probe_fraction, self.probe_specs),
                                                 max_requests=len(self.probe_specs),
                                                 seed=self.seeds.derive("arrivals", len(p.load_fractions)),
                                                 turns=per[id(self.probe_specs)])
        if rate is not None:  # name the capacity in every load description, as resolve_load does
            search = self.capacity_search
            src = search.describe(f"this {p.workload} workload in the {LABELS[self.capacity_cfg]} configuration") \
                if search is not None else ""
            for f, (_, desc), specs in zip([*p.load_fractions, p.throughput_probe_fraction],
                                           [*self.loads, *([self.probe_load] if self.probe_load else [])],
                                           [*([self.specs] * len(p.load_fractions)), self.probe_specs]):
                desc.update(resolved_rate=(f or 0.0) * rate, capacity_rate=rate, capacity_source=src)
                if per[id(specs)] != 1.0:  # the load starts sessions: the request rate is the fraction's
                    desc.update(session_start_rate=(f or 0.0) * rate / per[id(specs)],
                                turns_per_session=round(per[id(specs)], 4))

    async def _probe_capacity(self, client: LLMClient) -> None:
        """The request-rate capacity of this workload in the capacity configuration (module doc)."""
        p, ctx = self.p, self.ctx
        c = p.probe_concurrency
        self.flushed.append(ctx.configure_sut("flush_prefix_cache", True))

        def specs_for(d: float, stream: int, conc: int) -> list[Any]:  # other runs: requests of their own, drawn now
            if not stream:
                return self.capacity_probe_specs  # drawn and reserved in prepare
            return cap_output(build_workload(
                p.workload, n=3 * conc + math.ceil(30 * d), seed=self.seeds.derive("capacity-probe", stream),
                tokenizer=ctx.tokenizer, **p.workload_params).specs, p.max_output_tokens)

        # a short search (issue 48): c, then doubling while the completion rate still rises by 10 %
        search = await search_saturation(
            functools.partial(self.measure, client), ctx, self.id, self.warmup,
            f"capacity-probe-{KEYS[self.capacity_cfg]}", specs_for, c, p.probe_duration_s,
            {"capacity_configuration": self.capacity_cfg, "guardrails_state": ctx.sut.server_info.get("guardrails")})
        probe = search.best
        self.capacity_probe, self.capacity_search = probe, search
        if not probe.rate > 0:
            history = probe.lengthened.history(PROBE_FIT) if probe.lengthened else ""
            raise CannotMeasure(f"5.10: the capacity probe in the {LABELS[self.capacity_cfg]} configuration "
                                f"completed no request in its steady window ({probe.describe(p.workload)}): "
                                f"{failure_cause(probe.measured.records)}{history}; or declare the capacity with "
                                "--llm-capacity rate=R")
        await self._resolve_loads(probe.rate)

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        return await self._warm_up(client, self.current)

    async def _warm_up(self, client: LLMClient, cfg: str) -> WarmupResult:
        """§4.5 warm-up of configuration ``cfg`` (after its switch), on prompts of the warm-up stream.

        Other prompts of the same workload (own stream); a flushed prefix cache before every run:
        each configuration replays the same requests, which must not find the previous run's prompts cached.
        """
        p = self.p
        wu = build_workload(p.workload, n=max(p.warmup_requests, 10), seed=self.seeds.derive("warmup"),
                            tokenizer=self.ctx.tokenizer, **p.workload_params)
        specs = list(cap_output(wu.specs, p.max_output_tokens))  # on sessions: first turns of its own sessions
        if self.turns != 1.0 and not {s.prompt_hash for s in specs} - self.reserved_among(
                {s.prompt_hash for s in specs}):  # a small file: every first turn is measured; other prompts then
            specs = cap_output(build_workload("synthetic-uniform", n=max(p.warmup_requests, 10),
                                              seed=self.seeds.derive("warmup"), tokenizer=self.ctx.tokenizer).specs,
                               p.max_output_tokens)
            self.warmup_standin = True
        self.rewarm[cfg] = await self.warm_up_with(client, specs, label=f"warmup-{KEYS[cfg]}")
        return self.rewarm[cfg]

    async def run_loads(self, client: LLMClient) -> None:
        p, ctx, specs = self.p, self.ctx, self.specs
        if self.cap_kind == PROBED:  # in the capacity configuration, warmed up by the pipeline's warm-up
            await self._probe_capacity(client)
        for cfg in p.configurations:
            if cfg != self.current:
                _switch(self, cfg)  # step 3: enable the next configuration ...
                self.current = cfg
                await self._warm_up(client, cfg)  # ... and repeat step 2: warm-up, then every level
            self.states[cfg] = ctx.sut.server_info.get("guardrails")
            for frac, (load, desc) in zip(p.load_fractions, self.loads):  # step 2
                self.flushed.append(ctx.configure_sut("flush_prefix_cache", True))
                self.runs[(cfg, frac)] = await self.measure(
                    client, f"{KEYS[cfg]}-{frac * 100:g}pct", specs, load,
                    extra={"guardrails": cfg, "capacity_fraction": frac, "load_spec": desc})
            if self.probe_load is not None:
                load, desc = self.probe_load
                self.flushed.append(ctx.configure_sut("flush_prefix_cache", True))
                self.probes[cfg] = await self.measure(
                    client, f"{KEYS[cfg]}-throughput-probe", self.probe_specs, load,
                    extra={"guardrails": cfg, "throughput_probe": True, "load_spec": desc})
                self.saturation[cfg] = saturation_throughput(self.probes[cfg], turns_per_session(self.probe_specs))

    def restore(self) -> None:
        self.ctx.configure_sut("guardrails", "none" if self.original is None else self.original)

    def q(self, cfg: str, frac: float, name: str, pq: float) -> float | None:
        m = self.runs.get((cfg, frac))
        return None if m is None else pvalue(m.metrics, name, pq)

    def summarize(self) -> Outcome:
        p, runs, probes = self.p, self.runs, self.probes
        cfgs, levels, rl, q = p.configurations, p.load_fractions, p.report_level, self.q
        meas: dict[str, Any] = {"requests_per_level": len(self.specs), "capacity_rate_rps": self.cap_rate,
                                "capacity_kind": self.cap_kind,
                                "capacity_source": self.loads[0][1].get("capacity_source"),
                                "capacity_configuration": self.capacity_cfg if self.cap_kind == PROBED else None,
                                "report_level": rl, "levels": list(levels)}
        table13, by_level = self._table13(), self._level_tables(meas)  # measurement keys in report order
        tables = [table13, self._table14(meas), *by_level, self._refusals(meas)]
        plots = {"configs": {LABELS[c]: {"ttft_p50_s": q(c, rl, "ttft", 50), "ttft_p99_s": q(c, rl, "ttft", 99),
                                         "e2e_p50_s": q(c, rl, "e2e", 50), "e2e_p99_s": q(c, rl, "e2e", 99)}
                             for c in cfgs}}
        measured = ([] if self.capacity_search is None else [pr.measured for pr in self.capacity_search.probes]) \
            + [runs[(c, f)] for c in cfgs for f in levels] + [probes[c] for c in cfgs if c in probes]
        return Outcome(metrics=runs[(cfgs[-1], rl)].metrics, tables=tables, measurements=meas,
                       workload=self.wl.declaration.to_json(), notes=self._notes(), plots=plots, runs=measured,
                       overlays=overlays([m.summary for m in measured], rl))

    @property
    def cap_rate(self) -> float | None:
        return self.loads[0][1].get("capacity_rate")

    def _notes(self) -> list[str]:
        p, cfgs = self.p, self.p.configurations
        notes: list[str] = []
        if self.original is None:
            notes.append("the SUT's original guardrail setting is unknown; guardrails were left at 'none'")
        if "none" not in cfgs:
            notes.append("no Baseline configuration ('none') was run: overheads and reductions are not defined")
        if "none" in cfgs:
            notes.append("safety systems were disabled in the Baseline configuration (§4.8.2)")
        src = self.loads[0][1].get("capacity_source", "")
        if self.cap_kind == BORROWED:
            notes.append(f"deviation: the load levels are fractions of a borrowed request-rate capacity ({src}), "
                         f"measured on another workload than this {p.workload} one and with the SUT's guardrails as "
                         "they were before the switch to Baseline (capacity='session'; capacity='probe' measures "
                         "this workload in Baseline)")
        elif self.cap_kind == DECLARED:
            notes.append(f"load levels are fractions of the declared request-rate capacity ({src})")
        elif self.capacity_cfg != "none":
            notes.append(f"no Baseline configuration: the capacity was measured in the {LABELS[self.capacity_cfg]} "
                         "configuration")
        if p.max_output_tokens is not None:
            notes.append(f"output capped at {p.max_output_tokens} tokens by the profile")
        if self.turns != 1.0:
            notes.append(f"multi-turn sessions (custom workload, issue 50): {len(self.specs.sessions)} sessions of "
                         f"{self.turns:.2f} turns on average per level, the history carrying the recorded answers in "
                         "every configuration; each level's arrivals start sessions at its fraction of the "
                         f"request-rate capacity / {self.turns:.2f} turns"
                         + ("; the warm-up sent Synthetic-Uniform prompts (every first turn of the dataset's "
                            "conversations is a measured one)" if self.warmup_standin else ""))
        if not all(self.flushed):
            notes.append("the prefix cache could not be flushed before each run (no hook for flush_prefix_cache): "
                         "later configurations may find the prompts of earlier runs cached, which favours them")
        notes.append("warm-up after every configuration switch, before the configuration's first measured run "
                     "(§5.10.3 steps 2–3): " + "; ".join(
                         f"{LABELS[c]} {w.ok} requests, {w.output_tokens} output tokens"
                         + ("" if w.stable is None else f", probes stable={w.stable}")
                         for c, w in self.rewarm.items()))
        for (cfg, frac), m in self.runs.items():
            if not m.summary.valid:
                notes.append(f"{LABELS[cfg]} at {frac:.0%}: run invalid: {m.summary.invalid_reason}")
        return notes

    def _table13(self) -> Table:
        cfgs, rl, q, cap_rate = self.p.configurations, self.p.report_level, self.q, self.cap_rate
        return Table("Table 13: Guardrail Overhead", ["Configuration", "TTFT P50", "TTFT P99", "E2E P50", "E2E P99"],
                     [[LABELS[c], Cell(q(c, rl, "ttft", 50), "s"), Cell(q(c, rl, "ttft", 99), "s"),
                       Cell(q(c, rl, "e2e", 50), "s"), Cell(q(c, rl, "e2e", 99), "s")] for c in cfgs],
                     notes=[f"at {rl:.0%} of capacity ({rl * cap_rate:.2f} req/s)" if cap_rate
                            else f"at {rl:.0%} of capacity",
                            "successful requests only: refused requests are failures (see the refusal table)",
                            (f"identical request sequence ({len(self.specs)} requests, {self.wl.declaration.name}) "
                             "and arrival schedule in every configuration"
                             + (" (the same sessions, recorded answers in the history; their starts follow the "
                                "arrivals)" if self.turns != 1.0 else ""))])

    def _level_tables(self, meas: dict[str, Any]) -> list[Table]:
        """Overheads per level (when a Baseline ran) and every configuration at every level (§5.10.4)."""
        cfgs, levels, q, cap_rate = self.p.configurations, self.p.load_fractions, self.q, self.cap_rate
        detail_rows, over_rows = [], []
        for frac in levels:
            pct = f"{frac * 100:g}pct"
            for c in cfgs:
                m = self.runs[(c, frac)]
                mt = m.metrics
                detail_rows.append([LABELS[c], Cell(frac, "fraction", 0), Cell(len(m.records), "requests"),
                                    Cell(_refused(m), "requests"),
                                    *(Cell(pvalue(mt, "ttft", x), "s") for x in (50, 95, 99)),
                                    Cell(pvalue(mt, "e2e", 50), "s"), Cell(pvalue(mt, "e2e", 99), "s")])
                for x in (50, 95, 99):
                    meas[f"{KEYS[c]}_{pct}_ttft_p{x}_ms"] = _ms(pvalue(mt, "ttft", x))
                for x in (50, 99):
                    meas[f"{KEYS[c]}_{pct}_e2e_p{x}_ms"] = _ms(pvalue(mt, "e2e", x))
                meas[f"{KEYS[c]}_{pct}_refused"] = _refused(m)
                meas[f"{KEYS[c]}_{pct}_successful"] = mt.distributions["ttft"].n
            if "none" in cfgs:
                row: list[CellValue] = [Cell(frac, "fraction", 0)]
                for cfg, name in (("input", "ttft"), ("full", "e2e"), ("output", "e2e")):
                    for x in (50, 99):
                        d = _diff(q(cfg, frac, name, x), q("none", frac, name, x)) if cfg in cfgs else None
                        row.append(Cell(d, "s", signed=True))
                        label = {"input": "input_filter_overhead_ttft", "full": "total_overhead_e2e",
                                 "output": "output_filter_overhead_e2e"}[cfg]
                        meas[f"{label}_p{x}_ms_{pct}"] = _ms(d)
                        if frac == self.p.report_level:  # at the report level: a procedure figure (registry)
                            meas[f"{label}_p{x}_ms"] = _ms(d)
                over_rows.append(row)
        table_detail = Table("Guardrail latency by configuration and load (§5.10.4)",
                             ["Configuration", "Load", "Requests", "Refused", "TTFT P50", "TTFT P95", "TTFT P99",
                              "E2E P50", "E2E P99"], detail_rows,
                             notes=["Load = fraction of the request-rate capacity"
                                    + (f" {cap_rate:.2f} req/s ({self.loads[0][1].get('capacity_source', '')})"
                                       if cap_rate else "")])
        tables = []
        if "none" in cfgs:
            tables.append(Table("Guardrail overhead (§5.10.4)",
                                ["Load", "Input Filter Overhead P50", "Input Filter Overhead P99", "Total Overhead P50",
                                 "Total Overhead P99", "Output Filter Overhead P50", "Output Filter Overhead P99"],
                                over_rows,
                                notes=[("input filter overhead = TTFT(Input Filter) - TTFT(Baseline); total overhead = "
                                       "E2E(Full Filter) - E2E(Baseline); output filter overhead = E2E(Output Filter) - "
                                       "E2E(Baseline) (not defined by the draft; added for completeness)"),
                                       "differences of percentiles of two runs, not percentiles of differences"]))
        tables.append(table_detail)
        return tables

    def _table14(self, meas: dict[str, Any]) -> Table:
        """Max throughput per configuration: the saturation probe, or the top level's (Table 14)."""
        p, cfgs, levels = self.p, self.p.configurations, self.p.load_fractions
        tput: dict[str, float | None] = {}
        unsat: list[str] = []
        if self.probes:
            _, desc = self.probe_load or (None, {})
            for c in cfgs:
                sat = self.saturation.get(c)
                tput[c] = None if sat is None else sat.delivered_tps
                meas[f"{KEYS[c]}_throughput_saturated"] = None if sat is None else sat.saturated
                meas[f"{KEYS[c]}_offered_output_tps"] = None if sat is None else round(sat.offered_tps, 2)
                if sat is not None and not sat.saturated:
                    unsat.append(LABELS[c])
            rate = desc.get("resolved_rate")
            how = (f"saturation run per configuration at {p.throughput_probe_fraction:g} x the request-rate capacity"
                   + (f" ({rate:.2f} req/s; capacity {desc.get('capacity_rate'):.2f} req/s, "
                      f"{desc.get('capacity_source', '')})" if rate else "")
                   + f", {len(self.probe_specs)} requests, {p.arrival} arrivals: output tok/s of successful requests "
                   "over the submission window after its first 10 %")
        else:
            top = max(levels)
            for c in cfgs:
                v = self.runs[(c, top)].metrics.scalar("output_throughput").value
                tput[c] = None if v is None or math.isnan(v) else float(v)
            how = (f"no saturation probe: achieved output tok/s at the highest level ({top:.0%} of capacity), which "
                   "is the offered load, not a maximum")
        rows14 = []
        base_t = tput.get("none") if "none" in cfgs else None
        for c in cfgs:
            t = tput[c]
            red = None if t is None or not base_t or c == "none" else (t - base_t) / base_t * 100.0
            best = Cell(t, "tokens/s", 0, label=True)
            rows14.append([LABELS[c], [">= ", best] if LABELS[c] in unsat and t is not None else best,
                           "-" if c == "none" else Cell(red, "%", 1, signed=True)])
            meas[f"{KEYS[c]}_max_throughput_tps"] = None if t is None else round(t, 2)
            if c != "none":
                meas[f"{KEYS[c]}_throughput_reduction_pct"] = None if red is None else round(red, 2)
                # the share of the Baseline's throughput lost (a procedure figure, registry)
                meas[f"{KEYS[c]}_throughput_loss"] = None if red is None else round(-red / 100.0, 5)
        notes = [how, "Reduction = (throughput_config - throughput_baseline) / throughput_baseline"]
        if unsat:
            notes.append(f"not saturated ({', '.join(unsat)}): delivered >= {SATURATED_SHARE:.0%} of the offered "
                         "output tok/s, so the figure is a lower bound of the maximum (raise throughput_probe_fraction)")
        return Table("Table 14: Throughput Impact", ["Configuration", "Max Throughput", "Reduction"], rows14,
                     notes=notes)

    def _refusals(self, meas: dict[str, Any]) -> Table:
        """Refusals per configuration (§4.8.1): failures, never successes."""
        cfgs, levels = self.p.configurations, self.p.load_fractions
        ref_rows = []
        for c in cfgs:
            ms = [self.runs[(c, f)] for f in levels] + ([self.probes[c]] if c in self.probes else [])
            n = sum(len(m.records) for m in ms)
            refused = sum(_refused(m) for m in ms)
            server = [_server_refused(m) for m in ms]
            srv = None if any(s is None for s in server) else int(sum(server))  # type: ignore[arg-type]
            ref_rows.append([LABELS[c], Cell(n, "requests"), Cell(refused, "requests"),
                             Cell(refused / n if n else None, "fraction", 1), Cell(srv, "requests")])
            meas[f"{KEYS[c]}_refusals"] = refused
            meas[f"{KEYS[c]}_refusals_server"] = srv
            meas[f"{KEYS[c]}_requests"] = n
        return Table("Refusals by configuration (§4.8.1)",
                     ["Configuration", "Requests", "Refused", "Refusal Rate", "Refused (server count)"], ref_rows,
                     notes=[f"refused = {refusal_policy(self.ctx.settings).describe()} (§4.8.1); counted as "
                            "failures, excluded from the latency distributions"])

    def checks(self, out: Outcome) -> dict[str, Check]:
        return item_checks(self.p, self.runs, self.probes, self.wl.declaration.to_json(), self.states,
                       self.loads[0][1].get("capacity_source", "") if self.cap_kind == BORROWED else None,
                       self.saturation, self.flushed,
                       None if self.capacity_search is None else self.capacity_search.standing)

    def adjust_facts(self, facts: RunFacts) -> None:
        cfgs = self.p.configurations
        if self.ctx.sut.embedded:  # the filters on in any compared configuration, and the systems that ran
            facts.guardrails = simulator_guardrails(*cfgs)
        measured = {c for c, _ in self.runs}
        if "none" in measured and measured - {"none"}:  # guardrails measured off and on: the §4.8.2 comparison
            facts.session_tests = tuple(sorted(set(facts.session_tests) | {"5.10"}))


def _repeated_fairly(runs: Mapping[tuple[str, float], Measured], flushed: Sequence[bool] | None) -> Check:
    """5.10.3-PARAM-2 (issue 48, finding 10): every configuration repeats the same request sequence, so a
    later configuration must not find an earlier run's prompts cached: met when the prefix cache was flushed
    before every run, or when no run's successful requests reported cached tokens."""
    what = f"{len(runs)} runs: every configuration at every level, the same request sequence"
    if flushed is None or (flushed and all(flushed)):
        return decide("5.10.3-PARAM-2", ok=bool(runs), met=f"{what}, the prefix cache flushed before each",
                      unmet="no run", source="measured")
    reported = [r.cached_tokens for m in runs.values() for r in m.records if r.ok and r.cached_tokens is not None]
    cached = sum(reported)
    return decide("5.10.3-PARAM-2", ok=bool(reported) and cached == 0,
                  met=f"{what}; no flush hook, and no request reported cached tokens",
                  unmet=f"{what}, without a flush before each (no hook for flush_prefix_cache): "
                        + (f"{cached} prompt tokens were served from cache, which favours later configurations"
                           if reported else "the server reports no cached tokens, so a cache hit cannot be ruled out"),
                  source="measured", cached_tokens=cached if reported else None)


def _throughput_reduction(cfgs: Sequence[str], saturation: Mapping[str, SaturationResult | None],
                          probed: bool) -> Check:
    """5.10.4-REPORT-4 (issue 48): a reduction of maximum throughput needs the Baseline and configurations
    whose saturation runs saturated; without a saturation run it is the reduction at the highest level."""
    if "none" not in cfgs:
        return decide("5.10.4-REPORT-4", ok=False, unmet="needs the Baseline configuration")
    if not probed:
        return decide("5.10.4-REPORT-4", ok=True, met="throughput reduction at the highest level (no saturation run)",
                      source="measured")
    unsaturated = [LABELS.get(c, c) for c in cfgs if not (saturation.get(c) and saturation[c].saturated)]
    return decide("5.10.4-REPORT-4", ok=not unsaturated,
                  met="throughput reduction between saturated runs of every configuration (each its maximum)",
                  unmet=f"no saturation in {', '.join(unsaturated)}: its run delivered what it was offered, so Table 14's "
                        "'max throughput' there is a lower bound and the reduction is not a reduction of maxima",
                  source="measured", unsaturated=unsaturated)


def item_checks(p: GuardrailParams, runs: dict[tuple[str, float], Measured], probes: dict[str, Measured],
            decl: dict[str, Any], states: dict[str, Any], borrowed: str | None = None,
            saturation: dict[str, SaturationResult | None] | None = None,
            flushed: Sequence[bool] | None = None, standing: str | None = None) -> dict[str, Check]:
    """The 5.10 items; ``borrowed``: the source of a capacity borrowed from another workload (a deviation);
    ``saturation``: each configuration's saturation run (Table 14 is a throughput reduction only between
    configurations that saturated: an unsaturated run delivers what it was offered)."""
    cfgs, levels = p.configurations, p.load_fractions
    missing = [LABELS[c] for c in GUARDRAIL_CONFIGS if c not in cfgs]
    synthetic = bool(decl.get("synthetic_standin")) or str(decl.get("name", "")).startswith("synthetic") or (
        decl.get("name") == SESSIONS_WORKLOAD and decl.get("dataset") is None)  # generated sessions: random words
    level_ok = sorted(levels) == sorted(DRAFT_LEVELS)
    mismatched = {c: s for c, s in states.items() if s is not None and s != c}
    return {
        "5.10.2-PARAM-1": decide("5.10.2-PARAM-1", ok=True if synthetic else None,
                                 met="benign content: synthetic random-word prompts",
                                 needs="dataset content: the tester must declare that it is benign"),
        "5.10.2-PARAM-2": (decide("5.10.2-PARAM-2", ok=not missing and not mismatched, met="configurations: " + ", ".join(LABELS[c] for c in cfgs)
                                     + ("" if not mismatched else f" (SUT reported {mismatched})"), unmet="not run: " + ", ".join(missing) if missing
                                       else f"SUT reported other guardrail states: {mismatched}")),
        "5.10.2-PARAM-3": decide("5.10.2-PARAM-3", ok=bool(level_ok) and borrowed is None and standing != "lower-bound",
                                 met="levels 25/50/75 % of capacity",
                                 unmet=("levels " + "/".join(f"{f:.0%}" for f in levels)
                                        + " of capacity instead of 25/50/75 %") if not level_ok else
                                 f"levels are fractions of a capacity borrowed from another workload and configuration "
                                 f"({borrowed}), not of this workload's in Baseline (deviation; capacity='probe')"
                                 if borrowed is not None else
                                 "levels are fractions of a lower bound (the capacity search found no plateau): each "
                                 "level's real fraction of capacity is below its nominal one", standing=standing),
        "5.10.3-PARAM-1": (decide("5.10.3-PARAM-1", ok="none" in cfgs, met="baseline warmed up and run at every level; every other "
                                     "configuration warmed up again after its switch", unmet="no baseline configuration")),
        "5.10.3-PARAM-2": _repeated_fairly(runs, flushed),
        "5.10.4-REPORT-1": decide("5.10.4-REPORT-1", ok=True, met="TTFT P50/P95/P99 and E2E per configuration and level"),
        "5.10.4-REPORT-2": (decide("5.10.4-REPORT-2", ok={"none", "input"} <= set(cfgs), met="input filter overhead at P50 and P99 per level", unmet="needs the Baseline and Input Filter configurations")),
        "5.10.4-REPORT-3": (decide("5.10.4-REPORT-3", ok={"none", "full"} <= set(cfgs), met="total overhead at P50 and P99 per level", unmet="needs the Baseline and Full Filter configurations")),
        "5.10.4-REPORT-4": _throughput_reduction(cfgs, saturation or {}, bool(probes)),
        "5.10.5-REPORT-1": decide("5.10.5-REPORT-1", ok=True, met="Table 13"),
        "5.10.5-REPORT-2": decide("5.10.5-REPORT-2", ok=True, met="Table 14"),
    }


