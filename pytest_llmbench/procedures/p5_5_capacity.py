"""§5.5 Concurrent Request Capacity: the largest closed-loop concurrency meeting the success criteria.

Procedure (§5.5.3): warm up (§4.5); start at the initial concurrency; per level submit
``concurrency`` requests together and replace each completion at once (closed loop, §4.2.4) for
at least 60 s *and* 100 completions per slot; record completion rate, latency percentiles and
errors; check the success criteria (§5.5.2): completion >= 99 %, TTFT P99 <= threshold, no
out-of-memory / capacity errors. Search: double from the initial level while levels pass (as
Table 7 does), halve while they fail, then bisect between the largest pass and the smallest
fail until the bracket is at most ``resolution`` wide (the draft gives no convergence rule,
requirements.md note 25; ``resolution=1`` is exact).

Measurements (§5.5.4): the maximum concurrency, the output throughput there and the tokens in
flight there (time-averaged Σ input + output so far over the requests in flight,
``metrics.tokens_in_flight``). The result's :class:`~.result.Capacity` is what 5.8 is defined
relative to (``ctx.get_capacity("concurrency")``).

TTFT threshold: the draft leaves it to the tester. Default :data:`DEFAULT_TTFT_P99_S` (2 s) for a
real endpoint; on the embedded simulator every modelled delay is multiplied by its
``time_scale``, so the default is 2 s × time_scale (0.5 s at the plugin's default 0.25), which
keeps the capacity found independent of the time scale. ``ttft_p99_threshold_s`` overrides it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import LLMClient
from ..common import draft
from ..compliance import Check, decide
from ..loadgen.load import ClosedLoop
from ..loadgen.warmup import WarmupResult
from ..measure.registry import declare, figure
from ..measure.units import Cell, CellValue
from .capacity import (DEFAULT_TTFT_P99_S, FORCED_OUTPUT, capacity_ttft_threshold, judge_search_level,
                       next_search_level)
from .figures import CAPACITY
from .helpers import (
    build_level_specs,
    capacity_error,
    closed_level_stream,
    criteria_failures,
    fmt_ms,
    fmt_short,
    parse_criteria,
    pvalue,
)
from .pipeline import Outcome, ProcedureRun
from .result import Capacity, KeyFigure, ServerView, Sweep, Table
from .run import Measured

__all__ = [
    "DEFAULT_TTFT_P99_S",
    "PROFILES",
    "CapacityParams",
    "LevelOutcome",
    "build_level_specs",
    "capacity_error",
    "closed_level_stream",
    "next_level",
    "ttft_threshold",
]

MIN_LEVEL_S = draft.value("capacity.level_min_s")  # §5.5.3 step 3c
MIN_COMPLETIONS_PER_SLOT = draft.value("capacity.min_completions_per_slot")
MIN_COMPLETION = draft.value("capacity.min_completion")  # §5.5.2


@dataclass
class CapacityParams:
    """§5.5.2 setup parameters; defaults are the draft's values (the ``standard`` profile)."""

    workload: str = "synthetic-uniform"  # RECOMMENDED (§5.5.2)
    workload_params: dict[str, Any] = field(default_factory=dict)  # extra build_workload arguments
    output_tokens: int = 256  # fixed output length (§5.5.2), forced (min_tokens = max_tokens, ignore_eos)
    initial_concurrency: int = 8
    max_concurrency: int = 512
    ttft_p99_threshold_s: float | None = None  # None: 2 s (× simulator time_scale), see module doc
    min_completion: float = MIN_COMPLETION
    resolution: int = 1  # stop when (smallest fail - largest pass) <= resolution
    min_level_s: float = MIN_LEVEL_S
    min_completions_per_slot: int = MIN_COMPLETIONS_PER_SLOT
    level_timeout_s: float = 3600.0  # safety cap on one level's submission window
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    criteria: list[str] = field(default_factory=list)  # extra SLOs a level must meet, e.g. "fluidity.p1 >= 0.9"

    def validate(self) -> None:
        parse_criteria(self.criteria)
        if self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")
        if not 1 <= self.initial_concurrency <= self.max_concurrency:
            raise ValueError(f"need 1 <= initial_concurrency ({self.initial_concurrency}) <= max_concurrency "
                             f"({self.max_concurrency})")
        if self.ttft_p99_threshold_s is not None and not self.ttft_p99_threshold_s > 0:
            raise ValueError(f"ttft_p99_threshold_s must be > 0 s, got {self.ttft_p99_threshold_s}")
        if not 0 < self.min_completion <= 1:
            raise ValueError(f"min_completion is a fraction in (0, 1], got {self.min_completion}")
        if self.resolution < 1:
            raise ValueError(f"resolution must be >= 1, got {self.resolution}")
        if self.min_level_s <= 0 or self.min_completions_per_slot < 1:
            raise ValueError("min_level_s must be > 0 and min_completions_per_slot >= 1")
        if self.level_timeout_s < self.min_level_s:
            raise ValueError(f"level_timeout_s ({self.level_timeout_s}) must be >= min_level_s ({self.min_level_s})")
        if not isinstance(self.workload_params, dict):
            raise ValueError("workload_params must be a dict of build_workload arguments")  # noqa: TRY004


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.5')  # data/profiles.yaml

#: The figures of this procedure's result an SLO may name (§5.5.4), e.g. in ``assert_slo``; each reads
#: one of the result's measurements (scaled to the base unit), not a run's records.
declare(
    figure("max_concurrency", "Maximum concurrency", "requests", "higher", "highest concurrency at which every "
           "§5.5.4 criterion held (completion, TTFT P99, no out-of-memory errors)", "§5.5.4", "max_concurrency"),
    figure("capacity_output_throughput", "Output throughput at maximum concurrency", "tokens/s", "higher",
           "output throughput of the §5.5 level at the maximum concurrency", "§5.5.4", "output_throughput_at_max_tps"),
)


# ---------------------------------------------------------------------------------------------
# helpers shared with 5.8
# ---------------------------------------------------------------------------------------------


#: §5.5.3's search steps, shared with 5.8's own search (capacity.py): one definition of each.
ttft_threshold = capacity_ttft_threshold
next_level = next_search_level


@dataclass
class LevelOutcome:
    """One concurrency level of the search and its verdict against the success criteria."""

    concurrency: int
    measured: Measured
    completion: float | None  # successful / (successful + failed)
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    errors: int
    capacity_errors: int
    passed: bool
    reasons: list[str]
    completions: int
    window_s: float
    repeats: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "completion": self.completion, "ttft_p99_s": self.ttft_p99_s,
                "tpot_p99_s": self.tpot_p99_s, "errors": self.errors, "capacity_errors": self.capacity_errors,
                "passed": self.passed, "reasons": self.reasons, "completions": self.completions,
                "window_s": self.window_s, "repeats": self.repeats}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


# ---------------------------------------------------------------------------------------------
# the procedure
# ---------------------------------------------------------------------------------------------


class ConcurrentCapacity(ProcedureRun[CapacityParams]):
    """§5.5.3: closed-loop levels searched for the highest concurrency meeting the criteria; Table 7."""

    id, title, params_type, profiles = "5.5", "Concurrent Request Capacity", CapacityParams, PROFILES
    provides_capacity = "concurrency"  # the highest concurrency meeting every criterion (§5.5.4)
    measurement_keys = (
        "max_concurrency", "ttft_p99_threshold_ms", "ttft_p99_threshold_source", "levels_tested", "search_converged",
        "search_bracket", "levels", "output_throughput_at_max_tps", "tokens_in_flight_at_max",
        "concurrency_held_at_max", "ttft_p99_at_max_ms", "server_preemptions_by_level",
        "server_kv_usage_peak_at_max", "server_kv_usage_mean_at_max")

    @staticmethod
    def plan(p: CapacityParams) -> dict[str, Any]:
        levels = max(1, math.ceil(math.log2(p.max_concurrency / p.initial_concurrency))) + \
            max(0, math.ceil(math.log2(max(p.max_concurrency / 2 / p.resolution, 1))))
        return {"requests": p.warmup_requests
                + p.min_completions_per_slot * p.initial_concurrency * (2 ** min(levels, 6)),
                "min_duration_s": levels * p.min_level_s}

    async def prepare(self) -> None:
        self.threshold, self.threshold_src = ttft_threshold(self.ctx, self.p.ttft_p99_threshold_s)
        self.outcomes: dict[int, LevelOutcome] = {}
        self.order: list[int] = []
        self.declaration: dict[str, Any] | None = None
        self.lo: int = 0
        self.hi: int | None = None

    def connections(self) -> int | None:
        return self.p.max_concurrency

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        p = self.p
        specs, _ = build_level_specs(self.ctx, p.workload, max(p.warmup_requests, 8), self.seeds.derive("warmup"),
                                     p.output_tokens, p.workload_params)
        # forced min_tokens would exceed the warm-up probe's capped max_tokens: warm-up needs no forcing
        specs = [dataclasses.replace(s, min_tokens=None) for s in specs]
        return await self.warm_up_with(client, specs, concurrency=min(p.initial_concurrency, 16))

    async def run_loads(self, client: LLMClient) -> None:
        p, ctx, threshold = self.p, self.ctx, self.threshold
        lo, hi = self.lo, self.hi
        c: int | None = p.initial_concurrency
        rate_per_slot: float | None = None  # completions/s per slot at the last level: sizes the next list
        while c is not None:
            need = p.min_completions_per_slot * c
            n = need if rate_per_slot is None else max(need, math.ceil(1.25 * rate_per_slot * c * p.min_level_s))
            level_seed = self.seeds.derive("level", c)
            specs, decl = build_level_specs(ctx, p.workload, n, level_seed, p.output_tokens, p.workload_params)
            self.declaration = self.declaration or decl
            stats: dict[str, int] = {}
            ctx.progress(f"level {c}: closed loop, >= {p.min_level_s:g} s and >= {need} completions")
            m = await self.measure(client, f"c{c:04d}", closed_level_stream(specs, need, p.min_level_s, stats),
                                   ClosedLoop(c, duration_s=p.level_timeout_s), drain_timeout_s=ctx.settings.timeout,
                                   sized=True,  # a level ends by its completions; the level count bounds the search
                                   extra={"concurrency": c, "level_seed": level_seed})
            out = _judge(c, m, threshold, p.min_completion, stats.get("repeats", 0), p.criteria)
            self.outcomes[c] = out
            if out.completions and m.load.duration_s > 0:
                rate_per_slot = out.completions / m.load.duration_s / c
            self.order.append(c)
            if out.passed:
                self.lo = lo = max(lo, c)
            else:
                self.hi = hi = c if hi is None else min(hi, c)
            c = next_level(lo, hi, p.max_concurrency, p.resolution)
            if c is not None and c in self.outcomes:  # cannot happen with a monotone bracket; never loop
                break

    def summarize(self) -> Outcome:
        p, threshold, threshold_src = self.p, self.threshold, self.threshold_src
        outcomes, order, lo, hi = self.outcomes, self.order, self.lo, self.hi
        best = outcomes.get(lo) if lo else None
        self.converged = converged = (hi is not None and lo and hi - lo <= p.resolution) or (hi is None and lo >= p.max_concurrency) \
            or (lo == 0 and hi == 1)
        tables = [self._table7(bool(converged))]
        measurements: dict[str, Any] = {
            "max_concurrency": lo or None,
            "ttft_p99_threshold_ms": round(threshold * 1000, 3),
            "ttft_p99_threshold_source": threshold_src,
            "levels_tested": order,
            "search_converged": bool(converged),
            "search_bracket": [lo, hi],
            "levels": {str(c): outcomes[c].to_json() for c in order},
        }
        capacity = None
        primary = best.measured if best is not None else outcomes[order[0]].measured
        if best is not None:
            table, capacity = _at_maximum(best, lo, measurements)
            # no failing level above it: the capacity is at least lo (issue 48); 5.5 forces its outputs
            capacity = dataclasses.replace(capacity, standing="lower-bound" if hi is None else "measured",
                                           workload=p.workload, request_shape=FORCED_OUTPUT)
            tables.append(table)
        notes = [f"Maximum concurrent requests meeting criteria: {lo}" if lo else
                 "no concurrency level met the success criteria: no capacity determined"]
        if any(o.repeats for o in outcomes.values()):
            notes.append("levels that outlasted their request list cycled it (see levels[*].repeats)")
        self.server_sampled = all(o.measured.server_before is not None for o in outcomes.values())
        self._server_evidence(measurements, notes)
        return Outcome(
            metrics=primary.metrics, tables=tables, measurements=measurements, workload=self.declaration or {},
            notes=notes, capacity=capacity, runs=[outcomes[c].measured for c in order],
            plots={"search": [{"level": c, "passed": outcomes[c].passed, "value": outcomes[c].ttft_p99_s,
                               "label": f"concurrency {c}: TTFT P99"} for c in order]},
            facts={"itl_reported": True, "exceeds_capacity": hi is not None},
            key_figures=[KeyFigure(
                "capacity_concurrency", "Capacity (concurrent requests)", None if capacity is None
                else capacity.concurrency, "requests", CAPACITY, 20,
                level=f"closed loop; {fmt_short(measurements.get('output_throughput_at_max_tps') or 0)} tok/s at that "
                      "concurrency",
                definition="highest concurrency at which every criterion held (TTFT P99 and errors, §5.5.4); "
                           "a capacity at this workload, not a throughput ceiling")],
            sweep=Sweep(notes[0]) if lo else None,
            server_view=ServerView(  # the server's side of the search: its queue and KV usage per concurrency
                runs=[outcomes[lo if lo in outcomes else order[-1]].measured.summary.label] if order else [],
                levels=[(str(c), outcomes[c].measured.summary.label) for c in sorted(set(order))],
                by="concurrency", section="§5.5"))

    def _table7(self, converged: bool) -> Table:
        """Table 7 (§5.5.5): one row per level tried, the maximum, the criteria, the search order, and each
        level's reasons for failing."""
        p, threshold, threshold_src = self.p, self.threshold, self.threshold_src
        outcomes, order, lo, hi = self.outcomes, self.order, self.lo, self.hi
        rows: list[list[CellValue]] = []
        for c in sorted(outcomes):
            o = outcomes[c]
            rows.append([Cell(c, "requests"), Cell(o.completion, "fraction", 1), Cell(o.ttft_p99_s, "s"),
                         Cell(o.tpot_p99_s, "s"), Cell(o.errors, "requests"), "Pass" if o.passed else "Fail"])
        table7 = Table(
            "Table 7: Capacity Search Results",
            ["Concurrency", "Completion", "TTFT P99", "TPOT P99", "Errors", "Status"], rows,
            notes=[f"Maximum concurrent requests meeting criteria: {lo if lo else 'none (no level passed)'}",
                   (f"criteria: completion >= {p.min_completion:.0%}, TTFT P99 <= {fmt_ms(threshold)} "
                   f"({threshold_src}), no out-of-memory/capacity errors (§5.5.2)"
                   + "".join(f", {c}" for c in p.criteria)),
                   f"search order: {', '.join(map(str, order))}; bracket [{lo}, {hi if hi is not None else '-'}] "
                   f"resolution {p.resolution}" + ("" if converged else " (NOT converged)"),
                   (f"fixed output {p.output_tokens} tokens (forced), closed loop, each level >= {p.min_level_s:g} s "
                   f"and >= {p.min_completions_per_slot} completions per slot")],
        )
        for c in order:
            o = outcomes[c]
            if o.reasons:
                table7.notes.append(f"{c}: Fail: {'; '.join(o.reasons)}")
            if not o.measured.summary.valid:
                table7.notes.append(f"{c}: load generator self-check: {o.measured.summary.invalid_reason}")
        return table7

    def _server_evidence(self, measurements: dict[str, Any], notes: list[str]) -> None:
        """The server's preemptions per level and its KV-cache usage at the capacity level, when it exposes
        them (supporting evidence, not a §5.5 criterion)."""
        outcomes, order, lo = self.outcomes, self.order, self.lo
        preempt = {str(c): outcomes[c].measured.server_increase("preemptions") for c in order}
        if any(v is not None for v in preempt.values()):
            measurements["server_preemptions_by_level"] = preempt
        kv = _kv_at_capacity(outcomes[lo].measured) if lo in outcomes else None
        if kv is not None:  # supporting evidence only: the draft does not ask for KV usage (§5.5.4)
            measurements["server_kv_usage_peak_at_max"], measurements["server_kv_usage_mean_at_max"] = kv
            notes.append(f"server KV-cache usage at the capacity level ({lo} concurrent): peak {kv[0]:.0%}, mean "
                         f"{kv[1]:.0%} over the steady window ({outcomes[lo].measured.telemetry.names['kv_usage']}; "
                         "supporting evidence, not a §5.5 criterion)")

    def checks(self, out: Outcome) -> dict[str, Check]:
        return item_checks(self.p, self.outcomes, self.order, self.lo, bool(self.converged), self.threshold,
                       self.threshold_src, self.server_sampled)


def _at_maximum(best: LevelOutcome, lo: int, measurements: dict[str, Any]) -> tuple[Table, Capacity]:
    """§5.5.4 at the maximum concurrency ``lo``: its output throughput, tokens and requests in flight (into
    ``measurements``), their table, and the capacity the result declares for 5.8."""
    met = best.measured.metrics
    tps = met.scalar("output_throughput").value
    tif = met.scalar("tokens_in_flight").value
    conc = met.scalar("concurrency").value
    measurements.update(output_throughput_at_max_tps=round(tps, 3), tokens_in_flight_at_max=round(tif, 1),
                        concurrency_held_at_max=round(conc, 3),
                        ttft_p99_at_max_ms=round(best.ttft_p99_s * 1000, 3) if best.ttft_p99_s else None)
    table = Table("Capacity at the maximum (§5.5.4)", ["Metric", "Value"], [
        ["Maximum concurrent requests", Cell(lo, "requests")],
        ["Output throughput at maximum", Cell(tps, "tokens/s", 1, label=True)],
        ["Tokens in flight at maximum", Cell(tif, "tokens", 0, label=True)],
        ["Requests in flight (time average)", Cell(conc, "requests", 2)],
    ], notes=[("tokens in flight: time average over the steady-state window of Σ (input + output "
              "received so far) over requests in flight (§5.5.4, approximate)")])
    return table, Capacity(concurrency=lo, output_throughput=tps, source="measured by 5.5 in this session")


def _kv_at_capacity(m: Measured) -> tuple[float, float] | None:
    """Peak and mean of the server's KV-cache usage gauge over the level's steady window (§5.2.3.2's
    window: the send window minus its first 10 %); None when the server exposes none."""
    t1 = m.load.send_window_s
    peak, mean = m.telemetry.peak("kv_usage", 0.1 * t1, t1), m.telemetry.mean("kv_usage", 0.1 * t1, t1)
    return None if peak is None or mean is None else (peak, mean)


def _judge(c: int, m: Measured, threshold: float, min_completion: float, repeats: int,
           criteria: Sequence[str] = ()) -> LevelOutcome:
    """§5.5.2's criteria on one level (capacity.judge_search_level, shared with 5.8), plus the tester's own."""
    lv = judge_search_level(c, m, threshold, min_completion)
    met = m.metrics
    reasons = lv.reasons + criteria_failures(criteria, met)  # e.g. Etalon's fluidity SLO bounding capacity
    n_ok = int(met.scalar("completed_count").value)
    n_failed = int(met.scalar("error_count").value)
    return LevelOutcome(c, m, lv.completion, lv.ttft_p99_s, pvalue(met, "tpot", 99), n_failed, lv.capacity_errors,
                        not reasons, reasons, n_ok, m.load.send_window_s, repeats)


def item_checks(p: CapacityParams, outcomes: dict[int, LevelOutcome], order: list[int], lo: int, converged: bool,
            threshold: float, threshold_src: str, server_sampled: bool) -> dict[str, Check]:
    short = [c for c in order if outcomes[c].window_s < MIN_LEVEL_S
             or outcomes[c].completions < MIN_COMPLETIONS_PER_SLOT * c]
    mism = sum(int(outcomes[c].measured.metrics.scalar("osl_mismatch_count").value) for c in order)
    checks = {
        "5.5.2-PARAM-1": (decide("5.5.2-PARAM-1", ok=True, met=f"max_tokens = min_tokens = {p.output_tokens} with ignore_eos "
                                    "on every request; every successful output reached it")
                          if not mism else
                          decide("5.5.2-PARAM-1", ok=False, unmet=f"{mism} successful requests stopped short of the fixed "
                                      f"{p.output_tokens}-token output (SUT ignored min_tokens/ignore_eos)", osl_mismatch=mism)),
        "5.5.2-PARAM-2": decide("5.5.2-PARAM-2", ok=True, met=f"initial concurrency {p.initial_concurrency}"),
        "5.5.2-PARAM-3": decide("5.5.2-PARAM-3", ok=True, met=f"maximum concurrency {p.max_concurrency}"),
        # "TTFT P99 <= declared threshold": a default is no declaration (issue 48, finding 10)
        "5.5.2-PARAM-4": decide("5.5.2-PARAM-4", ok=True if p.ttft_p99_threshold_s is not None else None,
                                met=f"completion >= {p.min_completion:.0%}, TTFT P99 <= "
                                   f"{fmt_ms(threshold)} ({threshold_src}), no OOM/capacity errors (HTTP 429/503/507 "
                                   "or error text naming memory/KV cache/capacity; a 429 only with such text)",
                                needs=f"the TTFT P99 threshold was not declared: the search used the {threshold_src} "
                                      f"({fmt_ms(threshold)}); declare ttft_p99_threshold_s (marker parameter)",
                                ttft_p99_threshold_s=threshold, source="parameter"),
        "5.5.3-PARAM-1": decide("5.5.3-PARAM-1", ok=True, met=f"warm-up, then first level = {order[0]}"),
        "5.5.3-PARAM-2": decide("5.5.3-PARAM-2", ok=True, met="closed loop: all slots start together, each completion "
                                   "replaced at once (§4.2.4)"),
        "5.5.3-PARAM-3": (decide("5.5.3-PARAM-3", ok=not short, met=f"every level ran >= {MIN_LEVEL_S:g} s and >= "
                                    f"{MIN_COMPLETIONS_PER_SLOT} completions per slot", unmet=f"levels {short} ran less than {MIN_LEVEL_S:g} s or "
                                      f"{MIN_COMPLETIONS_PER_SLOT} completions per slot (profile: >= "
                                      f"{p.min_level_s:g} s and >= {p.min_completions_per_slot} per slot)")),
        "5.5.3-PARAM-4": decide("5.5.3-PARAM-4", ok=True, met="per level: completion, TTFT/TPOT P99, errors, verdict"),
        "5.5.3-PARAM-5": (decide("5.5.3-PARAM-5", ok=bool(converged), met=f"search converged to resolution {p.resolution}", unmet="search did not converge")),
        "5.5.4-REPORT-1": (decide("5.5.4-REPORT-1", ok=bool(lo), met=f"maximum concurrency {lo}", unmet="no level met the criteria")),
        "5.5.4-REPORT-2": (decide("5.5.4-REPORT-2", ok=bool(lo), met="output tok/s at the maximum", unmet="no maximum")),
        "5.5.4-REPORT-3": (decide("5.5.4-REPORT-3", ok=bool(lo), met="tokens in flight at the maximum (client-side estimate)", unmet="no maximum")),
        "5.5.5-REPORT-1": decide("5.5.5-REPORT-1", ok=True, met="Table 7 and the maximum line"),
        "7.4-SHOULD-3": decide("7.4-SHOULD-3", sampled=server_sampled,
                               stop_rule="the search stops raising load at the first failing level"),
    }
    return checks

