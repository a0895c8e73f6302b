"""§5.3 Throughput-Latency Tradeoff: the throughput-latency curve across the operating range.

Procedure (§5.3.3): estimate capacity first (``ctx.get_capacity("rate")``: a declared value or
a 5.2 run in this session), warm up (§4.5; 5.3.3 lists no warm-up step but §4.5.1 binds), then
run open-loop Poisson load (REQUIRED, §5.3.2) at 10%, 20%, ..., 120% of the capacity in
ascending order, ``level_duration_s`` each; every level's arrivals use the same seed (common random
numbers: one unit-rate sequence scaled by 1/rate), so levels differ by their rate rather than by
chance. Each level gets prompts of its own (no prefix-cache reuse). Per level (§5.3.4): offered rate, achieved output
throughput (steady window, §5.2.3.2), TTFT/TPOT/E2E P50/P95/P99, success rate and the
queue-growth indicator (server waiting gauge, else client in-flight count; the test of 5.2's
§5.2.3.1 rule 1).

All request timings (§5.3.3 step 3b): a request still running when the level's drain time runs
out is cancelled by the harness; it counts against the success rate (successful / sent) and enters
the TTFT and E2E percentiles as a right-censored sample (latency at least its elapsed time, ranked
above every completed request; ``helpers.all_requests``), so overloaded levels do not report the
survivors' latency only. A percentile whose rank falls among censored samples is shown as a lower
bound (">= x").

Derived (§5.3.4), each with a noise tolerance: knee point = first level whose TTFT P99 exceeds 2x
the minimum TTFT P99 with the intervals apart (lower end of the level's P99 95% CI above 2x the
upper end of the minimum's, ``stats.knee_point_ci``; the draft leaves the latency metric open,
its example uses TTFT P99); saturation point = first level whose achieved throughput is below the
previous level's (or an earlier peak's) with the throughput intervals apart
(``stats.saturation_point_ci``; "not reached" when throughput never drops, requirements note 32).
When the draft's literal rule fires on point values within the noise, the result says so
(``knee_literal_index`` / ``knee_within_noise`` and the saturation pair in the measurements, a
note under Table 5). Optimal operating
point = the highest-throughput level meeting the SLO (``ttft_p99_slo_s`` / ``tpot_p99_slo_s``;
censored P99s do not meet it; "no SLO given" without one, note 33).

``result.metrics`` is the optimal operating point's run when an SLO is given, else the last level
before the knee (the highest load whose TTFT P99 is still within 2x the minimum), else the first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..client import LLMClient
from ..common import draft
from ..compliance import Check, decide
from ..loadgen.load import ArrivalProcess, OpenLoop
from ..loadgen.warmup import WarmupResult
from ..measure.registry import METRICS
from ..measure.stats import NoisyRule, knee_point_ci, optimal_operating_point, saturation_point_ci
from ..measure.units import Cell
from .base import CannotMeasure
from .budget import level_duration
from .capacity import FREE_OUTPUT
from .figures import THROUGHPUT
from .helpers import (
    CENSORED_NOTE,
    FLUID_RATE_NOTE,
    AllRequests,
    all_requests,
    cancelled_warning,
    censored_cell,
    count_cancelled_as_unsuccessful,
    fluid_rate,
    fmt_censored,
    fmt_ms,
    fmt_short,
    level_specs,
    pvalue,
    queue_trend,
    reported,
    reported_line,
)
from .pipeline import Outcome, ProcedureRun
from .result import KeyFigure, ServerView, Sweep, Table
from .run import Measured

DRAFT_MIN_DURATION_S = draft.value("tradeoff.level_min_s")  # §5.3.2
DRAFT_LEVELS = draft.value("tradeoff.levels")  # §5.3.3 step 2: 10% ... 120%


@dataclass
class TradeoffParams:
    """§5.3.2 setup parameters; defaults are the draft's (the ``standard`` profile)."""

    workload: str = "synthetic-uniform"
    level_duration_s: float = DRAFT_MIN_DURATION_S
    levels: tuple[float, ...] = DRAFT_LEVELS  # fractions of the estimated capacity, run ascending
    arrival: str = "poisson"  # open loop is REQUIRED (§5.3.2); poisson or uniform arrivals
    ttft_p99_slo_s: float | None = None  # for the optimal operating point (§5.3.4)
    tpot_p99_slo_s: float | None = None
    knee_factor: float = draft.value("tradeoff.knee_factor")  # §5.3.4: P99 > 2x the minimum P99
    min_level_requests: int = 30  # expected arrivals per level: a slow SUT gets longer levels
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded

    def __post_init__(self) -> None:
        if isinstance(self.levels, list):
            self.levels = tuple(self.levels)

    def validate(self) -> None:
        if not self.level_duration_s > 0:
            raise ValueError(f"level_duration_s must be > 0, got {self.level_duration_s}")
        if not self.levels or any(not (isinstance(x, (int, float)) and x > 0) for x in self.levels):
            raise ValueError(f"levels must be positive fractions of capacity, got {self.levels!r}")
        if self.arrival not in ("poisson", "uniform"):
            raise ValueError(f"arrival must be 'poisson' or 'uniform' (open loop is REQUIRED), got {self.arrival!r}")
        for name in ("ttft_p99_slo_s", "tpot_p99_slo_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 s, got {v}")
        if self.min_level_requests < 1:
            raise ValueError(f"min_level_requests must be >= 1, got {self.min_level_requests}")
        if not self.knee_factor > 1:
            raise ValueError(f"knee_factor must be > 1, got {self.knee_factor}")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.3')  # data/profiles.yaml


@dataclass
class LevelPoint:
    """One point of the curve (§5.3.4); latencies and success over every request sent (cancelled included)."""

    fraction: float
    offered: float  # req/s
    achieved_tps: float
    request_rate: float
    ttft: tuple[float | None, float | None, float | None]  # P50, P95, P99 (s); inf = censored rank
    tpot: tuple[float | None, float | None, float | None]  # completed requests only
    e2e: tuple[float | None, float | None, float | None]
    success: float  # successful / sent
    queue: str  # "stable" | "growing" | "n/a"
    everyone: AllRequests | None = None
    tps_ci: tuple[float | None, float | None] = (None, None)  # achieved throughput 95% CI
    meets_slo: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cancelled(self) -> int:
        return 0 if self.everyone is None else self.everyone.cancelled

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"fraction": self.fraction, "offered_req_s": self.offered,
                             "achieved_tok_s": self.achieved_tps, "achieved_tok_s_ci": list(self.tps_ci),
                             "request_rate_req_s": self.request_rate}
        for name, vals in (("ttft", self.ttft), ("tpot", self.tpot), ("e2e", self.e2e)):
            cens = getattr(self.everyone, name, None) if name != "tpot" else None
            for q, v in zip((50, 95, 99), vals):
                cp = cens.get(float(q)) if cens else None
                at_least = cp is not None and not cp.bounded and cp.n > 0
                shown = cp.lower if at_least else v  # a lower bound where censoring reaches the rank
                d[f"{name}_p{q}_ms"] = None if shown is None or not math.isfinite(shown) else round(shown * 1000, 3)
                if cens is not None:
                    d[f"{name}_p{q}_at_least"] = at_least
        ev = self.everyone
        d.update(success_rate=self.success, queue=self.queue, meets_slo=self.meets_slo,
                 sent=ev.sent if ev else None, ok=ev.ok if ev else None, failed=ev.failed if ev else None,
                 cancelled=self.cancelled)
        return d


def level_point(m: Measured, fraction: float, offered: float, p: TradeoffParams) -> LevelPoint:
    mt = m.metrics
    sent = sum(1 for r in m.records if r.sent_ns)
    q = queue_trend(m, arrivals=sent)
    ev = all_requests(m)
    count_cancelled_as_unsuccessful(m, ev)

    def three(name: str) -> tuple[float | None, float | None, float | None]:
        return pvalue(mt, name, 50), pvalue(mt, name, 95), pvalue(mt, name, 99)

    def cens(d: dict[float, Any]) -> tuple[float | None, float | None, float | None]:
        vals = [None if cp.n == 0 else cp.value for cp in (d[50.0], d[95.0], d[99.0])]
        return vals[0], vals[1], vals[2]

    tps_est = mt.scalar("output_throughput")
    tps = tps_est.value
    rps = mt.scalar("request_throughput").value
    pt = LevelPoint(fraction, offered, float(tps) if math.isfinite(tps) else 0.0,
                    float(rps) if math.isfinite(rps) else 0.0, cens(ev.ttft), three("tpot"), cens(ev.e2e),
                    ev.success, q.label, everyone=ev, tps_ci=(tps_est.ci_low, tps_est.ci_high),
                    extra={"queue_source": q.source, "queue_rise": q.rise})
    if p.ttft_p99_slo_s is not None or p.tpot_p99_slo_s is not None:
        ok = pt.success > 0
        if p.ttft_p99_slo_s is not None:
            ok = ok and pt.ttft[2] is not None and pt.ttft[2] <= p.ttft_p99_slo_s
        if p.tpot_p99_slo_s is not None:
            ok = ok and pt.tpot[2] is not None and pt.tpot[2] <= p.tpot_p99_slo_s
        pt.meets_slo = ok
    return pt


def rule_note(name: str, rule: NoisyRule, points: list[LevelPoint]) -> str | None:
    """A sentence when the draft's literal rule fired within the noise (§5.3.4), else None."""
    if not rule.within_noise or rule.literal is None:
        return None
    at = points[rule.literal]
    then = ("not reached outside the noise" if rule.index is None
            else f"outside the noise at {points[rule.index].offered:.2f} req/s")
    return (f"{name}: the draft's rule fired at {at.offered:.2f} req/s ({at.fraction:.0%}) within the noise "
            f"({rule.reason}); {then}")


def _sweep(m: dict[str, Any]) -> Sweep | None:
    """The curve's knee, saturation and optimal point in one sentence (§5.3.4); None without an optimum."""
    if m.get("optimal_rate_req_s") is None:
        return None
    knee, sat = m.get("knee_rate_req_s"), m.get("saturation_rate_req_s")
    return Sweep(f"knee {fmt_short(knee) + ' req/s' if knee is not None else 'not reached'}; saturation "
                 f"{fmt_short(sat) + ' req/s' if sat is not None else 'not reached'}; highest throughput meeting the "
                 f"SLO {fmt_short(m.get('optimal_output_tok_s') or 0)} tok/s at {fmt_short(m['optimal_rate_req_s'])} req/s")


class Tradeoff(ProcedureRun[TradeoffParams]):
    """§5.3.3: open-loop levels as fractions of capacity, ascending; the curve, knee and saturation."""

    id, title, params_type, profiles = "5.3", "Throughput-Latency Tradeoff", TradeoffParams, PROFILES
    measurement_keys = (
        "capacity_rate_req_s", "capacity_source", "levels", "level_count", "level_duration_s", "knee_index",
        "knee_rate_req_s", "saturation_index", "saturation_rate_req_s", "knee_literal_index", "knee_within_noise",
        "saturation_literal_index", "saturation_within_noise", "cancelled_requests", "sent_requests", "optimal_index",
        "optimal_rate_req_s", "optimal_output_tok_s", "max_achieved_tok_s", "min_ttft_p99_ms", "queue_growing_levels",
        "slo_applied", "fluid_token_rate_tok_s")

    @staticmethod
    def plan(p: TradeoffParams) -> dict[str, Any]:
        return {"requests": p.warmup_requests, "min_duration_s": len(p.levels) * p.level_duration_s}

    async def prepare(self) -> None:
        self.cap = await self.ctx.get_capacity("rate")
        if not self.cap.rate or not self.cap.rate > 0:
            raise CannotMeasure("5.3 needs a request-rate capacity estimate (§5.3.3 step 1); none is available")
        self.fractions = sorted(self.p.levels)
        self.points: list[LevelPoint] = []
        self.declaration: dict[str, Any] | None = None

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        return await self.warm_up_on_workload(client)

    async def run_loads(self, client: LLMClient) -> None:
        p, ctx, fractions = self.p, self.ctx, self.fractions
        assert self.cap.rate is not None
        # common random numbers: every level uses the same arrival stream, so its arrival times are
        # one unit-rate sequence scaled by 1/rate and levels differ by their rate, not by chance
        arrival_seed = self.seeds.derive("arrivals")
        for k, frac in enumerate(fractions):
            rate = frac * self.cap.rate
            label = f"L{k:02d}-{frac:.0%}-{rate:.3g}rps"
            duration = level_duration(ctx, label, rate, p.level_duration_s, min_requests=p.min_level_requests,
                                      levels_left=len(fractions) - k)
            n = math.ceil(rate * duration * 1.3) + 20
            workload_seed = self.seeds.derive("level", k)
            specs, wl = level_specs(ctx, p.workload, n, workload_seed, p.max_output_tokens)
            self.declaration = self.declaration or wl.declaration.to_json()
            ctx.progress(f"5.3 level {k + 1}/{len(fractions)}: {frac:.0%} of capacity = {rate:.2f} req/s, "
                         f"{duration:.0f} s")
            load = OpenLoop(ArrivalProcess(p.arrival, rate, seed=arrival_seed), duration_s=duration)
            m = await self.measure(client, label, specs, load, drain_timeout_s=max(10.0, duration), sized=True,
                                   extra={"capacity_fraction": frac, "offered_rate": rate,
                                          "workload_seed": workload_seed, "arrival_seed": arrival_seed})
            self.points.append(level_point(m, frac, rate, p))

    def summarize(self) -> Outcome:
        p, points, cap, runs = self.p, self.points, self.cap, self.measured
        offered = [pt.offered for pt in points]
        achieved = [pt.achieved_tps for pt in points]
        p99 = [pt.ttft[2] if pt.ttft[2] is not None else math.nan for pt in points]
        p99_cp = [pt.everyone.ttft[99.0] if pt.everyone else None for pt in points]
        self.knee_rule = knee_rule = knee_point_ci(offered, p99, [c.ci_low if c else None for c in p99_cp],
                                                   [c.ci_high if c else None for c in p99_cp], factor=p.knee_factor)
        self.sat_rule = sat_rule = saturation_point_ci(offered, achieved, [pt.tps_ci[0] for pt in points],
                                                       [pt.tps_ci[1] for pt in points])
        self.knee = knee = knee_rule.index
        self.sat = sat = sat_rule.index
        self.slo_given = slo_given = p.ttft_p99_slo_s is not None or p.tpot_p99_slo_s is not None
        self.opt = opt = optimal_operating_point(achieved, [bool(pt.meets_slo) for pt in points]) if slo_given else None
        if opt is not None:
            primary = opt
        elif knee is None:
            primary = len(points) - 1
        else:
            primary = max(knee - 1, 0)
        min_p99 = min((x for x in p99 if math.isfinite(x)), default=None)
        cancelled = sum(pt.cancelled for pt in points)
        growing = [pt for pt in points if pt.queue == "growing"]
        tables = self._tables(self._point_lines(achieved, p99_cp, min_p99), cancelled)
        measurements: dict[str, Any] = {
            "capacity_rate_req_s": cap.rate, "capacity_source": cap.source, "levels": [pt.to_json() for pt in points],
            "level_count": len(points), "level_duration_s": p.level_duration_s,
            "knee_index": knee, "knee_rate_req_s": None if knee is None else points[knee].offered,
            "saturation_index": sat, "saturation_rate_req_s": None if sat is None else points[sat].offered,
            # the draft's literal rules on point values, and whether they fired within the noise (Table 5 notes say why)
            "knee_literal_index": knee_rule.literal, "knee_within_noise": knee_rule.within_noise,
            "saturation_literal_index": sat_rule.literal, "saturation_within_noise": sat_rule.within_noise,
            "cancelled_requests": cancelled, "sent_requests": sum(pt.everyone.sent for pt in points if pt.everyone),
            "optimal_index": opt, "optimal_rate_req_s": None if opt is None else points[opt].offered,
            "optimal_output_tok_s": None if opt is None else achieved[opt],
            "max_achieved_tok_s": max(achieved) if achieved else None,
            "min_ttft_p99_ms": None if min_p99 is None else round(min_p99 * 1000, 3),
            "queue_growing_levels": [pt.offered for pt in growing], "slo_applied": slo_given,
            "fluid_token_rate_tok_s": [fluid_rate(m.metrics) for m in runs],
        }
        curve: dict[str, Any] = {
            "offered": offered, "achieved_tps": achieved,
            # a censored P99 is drawn at its lower bound (the table shows '>= x')
            "ttft_p99_s": [c.lower if c is not None and not c.bounded else v for c, v in zip(p99_cp, p99)],
            "tpot_p99_s": [pt.tpot[2] if pt.tpot[2] is not None else math.nan for pt in points],
            "knee_index": knee, "saturation_index": sat, "offered_unit": "req/s",
            "knee_literal_index": knee_rule.literal, "saturation_literal_index": sat_rule.literal}
        if knee is None and knee_rule.within_noise:  # no marker: say where the literal rule fired
            curve["knee_note"] = rule_note("knee", knee_rule, points)
        p50 = [lv.get("ttft_p50_ms") for lv in measurements["levels"]]
        if all(isinstance(v, (int, float)) for v in p50):  # the P50 line beside the P99 (as Table 5 rounds it)
            curve["ttft_p50_s"] = [float(v) / 1000.0 for v in p50]
        return Outcome(metrics=runs[primary].metrics, tables=tables, measurements=measurements,
                       workload=self.declaration or {"name": p.workload}, plots={"curve": curve},
                       facts={"itl_reported": True, "exceeds_capacity": max(self.fractions) > 1.0},
                       key_figures=[KeyFigure(
                           "optimal_throughput", "Throughput at the optimal point", measurements["optimal_output_tok_s"],
                           "tok/s", THROUGHPUT, 30, level=f"{fmt_short(measurements['optimal_rate_req_s'] or 0)} req/s "
                           "offered", metric="output_throughput", definition=METRICS["output_throughput"].definition)],
                       sweep=_sweep(measurements), warnings=cancelled_warning(cancelled, runs),
                       server_view=server_view(runs, primary))

    def _point_lines(self, achieved: list[float], p99_cp: list[Any], min_p99: float | None) -> list[str]:
        """Table 5's knee, saturation and optimal-point statements with their noise notes (§5.3.4)."""
        p, points = self.p, self.points
        knee, sat, opt, knee_rule, sat_rule = self.knee, self.sat, self.opt, self.knee_rule, self.sat_rule
        slo_given = self.slo_given

        def rate_txt(i: int | None) -> str:
            return "not reached" if i is None else f"{points[i].offered:.2f} req/s ({points[i].fraction:.0%} of capacity)"

        knee_line = (f"Knee point: {rate_txt(knee)} (TTFT P99 {fmt_censored(p99_cp[knee])} exceeds "
                     f"{p.knee_factor:g}x the minimum {fmt_ms(min_p99)}, intervals apart)" if knee is not None else
                     f"Knee point: not reached outside the noise (TTFT P99 stays within {p.knee_factor:g}x the "
                     f"minimum {fmt_ms(min_p99)}, or the P99 intervals overlap)")
        peak = sat_rule.reference
        sat_line = (f"Saturation point: {rate_txt(sat)} (achieved throughput {achieved[sat]:.0f} tok/s < "
                    f"{achieved[peak]:.0f} tok/s at {points[peak].offered:.2f} req/s, intervals apart)"
                    if sat is not None and peak is not None else
                    "Saturation point: not reached outside the noise (achieved throughput never decreased "
                    "significantly from an earlier level)")
        noise_notes = [x for x in (rule_note("Knee point", knee_rule, points),
                                   rule_note("Saturation point", sat_rule, points)) if x]
        if slo_given:
            slo_txt = ", ".join(x for x in (f"TTFT P99 <= {fmt_ms(p.ttft_p99_slo_s)}" if p.ttft_p99_slo_s else "",
                                            f"TPOT P99 <= {fmt_ms(p.tpot_p99_slo_s)}" if p.tpot_p99_slo_s else "") if x)
            opt_line = (f"Optimal operating point: {rate_txt(opt)}, {achieved[opt]:.0f} tok/s ({slo_txt})"
                        if opt is not None else f"Optimal operating point: none (no level meets {slo_txt})")
        else:
            opt_line = "Optimal operating point: no SLO given (set ttft_p99_slo_s / tpot_p99_slo_s)"
        return [knee_line, sat_line, opt_line, *noise_notes]

    def _tables(self, lines: list[str], cancelled: int) -> list[Table]:
        """Table 5 and the per-level detail (§5.3.4)."""
        p, points, cap, runs = self.p, self.points, self.cap, self.measured
        table5 = Table(
            "Table 5: Throughput-Latency Table",
            ["Offered (r/s)", "Achieved (tok/s)", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "Success"],
            [[Cell(pt.offered, "requests/s", 2), Cell(pt.achieved_tps, "tokens/s", 0),
              censored_cell(pt.everyone.ttft[50.0]), censored_cell(pt.everyone.ttft[99.0]), Cell(pt.tpot[0], "s"),
              Cell(pt.tpot[2], "s"), Cell(pt.success, "fraction", 1)]
             for pt in points if pt.everyone is not None],
            notes=[*lines,
                   (f"capacity estimate {cap.rate:.2f} req/s ({cap.source or 'unknown source'}); open-loop "
                    f"{p.arrival} arrivals, {p.level_duration_s:g} s per level, ascending"),
                   "achieved throughput over each level's steady window (first 10% excluded, §5.2.3.2)",
                   (f"Success = successful / sent; {cancelled} request(s) cancelled at the end of a level's drain "
                    "count against it" if cancelled else "Success = successful / sent (no request cancelled)"),
                   CENSORED_NOTE,
                   (f"noise tolerance: the knee needs the level's TTFT P99 95% CI above {p.knee_factor:g}x the upper "
                    "end of the minimum P99's CI; saturation needs the level's throughput 95% CI below the lower end "
                    "of an earlier level's (order-statistic and batch-means intervals)")])
        detail = Table(
            "Per-level detail (§5.3.4)",
            ["Load", "Offered (r/s)", "TTFT P95", "TPOT P95", "E2E P50", "E2E P95", "E2E P99", "Success",
             "Sent", "Failed", "Cancelled", "Queue", "Fluid rate"],
            [[Cell(pt.fraction, "fraction", 0), Cell(pt.offered, "requests/s", 2),
              censored_cell(pt.everyone.ttft[95.0]), Cell(pt.tpot[1], "s"),
              *(censored_cell(pt.everyone.e2e[q]) for q in (50.0, 95.0, 99.0)), Cell(pt.success, "fraction", 1),
              Cell(pt.everyone.sent, "requests"), Cell(pt.everyone.failed, "requests"),
              Cell(pt.everyone.cancelled, "requests"), pt.queue, Cell(fluid_rate(m.metrics), "tokens/s", 0, label=True)]
             for pt, m in zip(points, runs) if pt.everyone is not None],
            notes=[("queue growth: OLS slope of the server's waiting gauge (client in-flight count without /metrics) "
                    "significant and >= max(2, 2% of arrivals) over the steady window"), FLUID_RATE_NOTE])
        self.table5, self.detail = table5, detail
        return [table5, detail]

    def checks(self, out: Outcome) -> dict[str, Check]:
        return {**item_checks(self.p, self.points, self.cap, self.sat, self.measured),
                **report_checks(self.table5, self.detail, out.tables)}


def report_checks(t5: Table, detail: Table, tables: list[Table]) -> dict[str, Check]:
    """5.3.4/5.3.5 REPORT items, read back from the written Table 5 and per-level detail."""
    per_level = {
        "5.3.4-REPORT-1": ("offered load per level", [(t5, "Offered (r/s)")]),
        "5.3.4-REPORT-2": ("achieved output throughput per level", [(t5, "Achieved (tok/s)")]),
        "5.3.4-REPORT-3": ("TTFT P50/P95/P99 per level", [(t5, "TTFT P50"), (detail, "TTFT P95"), (t5, "TTFT P99")]),
        "5.3.4-REPORT-4": ("TPOT P50/P95/P99 per level", [(t5, "TPOT P50"), (detail, "TPOT P95"), (t5, "TPOT P99")]),
        "5.3.4-REPORT-5": ("E2E P50/P95/P99 per level", [(detail, "E2E P50"), (detail, "E2E P95"), (detail, "E2E P99")]),
        "5.3.4-REPORT-6": ("success rate per level (successful / sent)", [(t5, "Success")]),
        "5.3.4-REPORT-7": ("queue growth indicator per level", [(detail, "Queue")]),
        "5.3.5-REPORT-1": ("Table 5", [(t5, name) for name in t5.columns[:1]]),
    }
    c = {rid: reported(rid, what, needs, tables) for rid, (what, needs) in per_level.items()}
    for rid, prefix in (("5.3.4-REPORT-8", "Optimal operating point:"), ("5.3.4-REPORT-9", "Knee point:"),
                        ("5.3.4-REPORT-10", "Saturation point:")):
        c[rid] = reported_line(rid, t5, prefix, tables)
    return c


def item_checks(p: TradeoffParams, points: list[LevelPoint], cap: Any, sat: int | None,
            runs: list[Measured]) -> dict[str, Check]:
    fr = [pt.fraction for pt in points]
    c: dict[str, Check] = {}
    c["5.3.2-PARAM-1"] = decide("5.3.2-PARAM-1", ok=True, met=f"workload {p.workload}")
    # judged on the levels as run (a time budget can cut them below the parameter), as 5.2.2-SHOULD-1 is
    windows = [m.load.send_window_s for m in runs]
    shortest = min(windows, default=0.0)
    c["5.3.2-PARAM-2"] = decide("5.3.2-PARAM-2", ok=bool(windows) and shortest >= DRAFT_MIN_DURATION_S,
                                met=f"every level sent for >= {shortest:.4g} s (parameter {p.level_duration_s:g} s)",
                                unmet=f"shortest level sent for {shortest:.4g} s < the draft's minimum "
                                      f"{DRAFT_MIN_DURATION_S:g} s (parameter {p.level_duration_s:g} s)",
                                figure=shortest, send_windows_s=[round(w, 3) for w in windows], source="measured")
    reached = any(pt.queue == "growing" for pt in points) or sat is not None
    if len(points) >= 10 and min(fr) <= 0.1 + 1e-9 and reached:
        c["5.3.2-PARAM-3"] = decide("5.3.2-PARAM-3", ok=True, met=f"{len(points)} levels from {min(fr):.0%} to {max(fr):.0%} "
                                       "of capacity; saturation reached")
    else:
        why = [f"only {len(points)} levels" if len(points) < 10 else "",
               f"lowest level {min(fr):.0%} > 10%" if min(fr) > 0.1 + 1e-9 else "",
               "saturation not reached (no growing queue, throughput never dropped)" if not reached else ""]
        c["5.3.2-PARAM-3"] = decide("5.3.2-PARAM-3", ok=False, unmet="; ".join(x for x in why if x))
    c["5.3.3-PARAM-1"] = decide("5.3.3-PARAM-1", rate=cap.rate, source=cap.source or "unknown",
                                standing=getattr(cap, "standing", None), shape=getattr(cap, "request_shape", None),
                                own_shape=FREE_OUTPUT)
    grid = tuple(round(x, 6) for x in fr) == tuple(round(x, 6) for x in DRAFT_LEVELS)
    c["5.3.3-PARAM-2"] = (decide("5.3.3-PARAM-2", ok=bool(grid), met="levels 10%, 20%, ..., 120% of capacity", unmet="levels " + ", ".join(f"{x:.0%}" for x in fr)
                                      + " differ from the draft's 10%..120% grid"))
    starts = [m.load.start_ns for m in runs]
    c["5.3.3-PARAM-3"] = (decide("5.3.3-PARAM-3", ok=starts == sorted(starts), met="levels run in ascending order of offered load", unmet="levels not run in order"))
    c["5.3.3-PARAM-4"] = decide("5.3.3-PARAM-4", ok=True, met="throughput-latency curve in report.html (plots['curve'])")
    return c


def server_view(runs: list[Measured], primary: int) -> ServerView:
    """The server's queue, KV usage and preemptions per load level (§5.3.4's curve from the server's side),
    and over time at the optimal point and at the highest level."""
    shown = list(dict.fromkeys([runs[primary].summary.label, runs[-1].summary.label])) if runs else []
    return ServerView(runs=shown, by="load level (fraction of capacity)", section="§5.3",
                      levels=[(f"{m.summary.extra.get('capacity_fraction', 0):.0%}", m.summary.label) for m in runs])
