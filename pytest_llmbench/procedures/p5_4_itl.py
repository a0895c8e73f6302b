"""§5.4 Inter-Token Latency Distribution: how smoothly tokens stream during decode.

Procedure (§5.4.3): warm up (§4.5), then for each load level (default 25/50/75/90% of the
request-rate capacity, ``ctx.get_capacity("rate")``, §5.4.2 RECOMMENDED) run ``requests``
open-loop Poisson requests, each forced to at least ``min_output_tokens`` = 50 output tokens
(``min_tokens`` = ``max_tokens`` and ``ignore_eos``; §5.4.2 MUST). Per request the ITL samples are
the gaps between consecutive tokens *from the first content token on*; the submission-to-first-
token interval is never a sample (§5.4.3 MUST NOT). The §4.6.3 option is declared: C (server
per-token timestamps) when the server sends them for every request (the embedded simulator
does), else B (every token of a chunk gets the chunk's arrival time).

Measurements (§5.4.4): ITL P50/P90/P95/P99/P99.9, mean and standard deviation over all samples
(Table 6, one per level); per-request jitter (std dev of its ITLs) and maximum pause, P50/P95/P99;
modality (Hartigan's dip test) and tail type (GPD shape of the excesses over P90) with P99/P50.

Verified, not assumed: the number of successful requests with fewer than ``min_output_tokens``
tokens (a server that ignores ``min_tokens``/``ignore_eos``) is counted and reported, and each
request's ITL samples are checked to span exactly its first to last token (so no sample can
contain the TTFT). ``result.metrics`` is the level nearest 50% of capacity.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..client import LLMClient
from ..common import draft
from ..common.records import RequestRecord, RequestSpec
from ..compliance import Check, decide
from ..loadgen.load import ArrivalProcess, OpenLoop
from ..loadgen.warmup import WarmupResult
from ..measure.summary import ITL_OPTIONS, RunMetrics
from ..measure.units import Cell, CellValue, format_value
from ..workloads import build_workload
from .base import CannotMeasure
from .budget import level_requests
from .capacity import FORCED_OUTPUT, search_saturation
from .figures import latency_figures
from .helpers import FLUID_RATE_NOTE, cap_output, fluid_rate, pvalue, reported, sample_list
from .pipeline import Outcome, ProcedureRun
from .prompts import failure_cause
from .result import Capacity, Overlays, RunSummary, Series, Table
from .run import Measured

DRAFT_MIN_OUTPUT = draft.value("itl.min_output_tokens")  # §5.4.2 MUST
DRAFT_MIN_REQUESTS = draft.value("itl.min_requests")  # §5.4.2
DRAFT_MIN_SAMPLES = draft.value("itl.min_samples")  # §5.4.2 "yielding 5000+ ITL samples"
DRAFT_LEVELS = draft.value("itl.levels")  # §5.4.2 RECOMMENDED, fractions of saturation
MIN_LEVEL_REQUESTS = 3  # a time budget never cuts a level below this many requests (~190 gaps smoke)


@dataclass
class ITLParams:
    """§5.4.2 setup parameters; defaults are the draft's (the ``standard`` profile)."""

    workload: str = "synthetic-uniform"
    requests: int = DRAFT_MIN_REQUESTS  # per load level
    levels: tuple[float, ...] = DRAFT_LEVELS  # fractions of the request-rate capacity (saturation)
    min_output_tokens: int = DRAFT_MIN_OUTPUT
    arrival: str = "poisson"
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    max_output_tokens: int | None = None  # cap on max_tokens (never below min_output_tokens); recorded
    #: "own" (default): the saturation throughput of 5.4's own forced-output requests, by a short closed-loop
    #: search after the warm-up (issue 48: 5.2's rate is measured on outputs that may stop at EOS);
    #: "session": the session's request-rate capacity (declared, or 5.2's), a deviation 5.4.2-PARAM-2 names
    capacity: str = "own"
    probe_concurrency: int = 16  # the search's first closed loop; doubled while the rate still rises by 10 %
    probe_duration_s: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.levels, list):
            self.levels = tuple(self.levels)

    def validate(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.requests}")
        if not self.levels or any(not (isinstance(x, (int, float)) and x > 0) for x in self.levels):
            raise ValueError(f"levels must be positive fractions of capacity, got {self.levels!r}")
        if self.min_output_tokens < 2:
            raise ValueError(f"min_output_tokens must be >= 2 (an ITL needs two tokens), got {self.min_output_tokens}")
        if self.max_output_tokens is not None and self.max_output_tokens < self.min_output_tokens:
            raise ValueError(f"max_output_tokens ({self.max_output_tokens}) is below min_output_tokens "
                             f"({self.min_output_tokens})")
        if self.arrival not in ("poisson", "uniform"):
            raise ValueError(f"arrival must be 'poisson' or 'uniform', got {self.arrival!r}")
        if self.capacity not in ("own", "session"):
            raise ValueError(f"capacity must be 'own' or 'session', got {self.capacity!r}")
        if self.probe_concurrency < 1 or not self.probe_duration_s > 0:
            raise ValueError("probe_concurrency must be >= 1 and probe_duration_s > 0")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.4')  # data/profiles.yaml


def force_min_output(specs: list[RequestSpec], min_tokens: int, cap: int | None) -> tuple[list[RequestSpec], int]:
    """Every request asks for >= ``min_tokens`` and forces its length (min_tokens = max_tokens,
    ignore_eos), capped at ``cap``; returns the specs and how many had to be raised."""
    specs = cap_output(specs, cap)
    raised = sum(1 for s in specs if s.max_tokens < min_tokens)
    out = []
    for s in specs:
        n = max(s.max_tokens, min_tokens)
        out.append(dataclasses.replace(s, max_tokens=n, min_tokens=n, ignore_eos=True))
    return out, raised


@dataclass
class ItlAudit:
    """What the records show about the ITL samples of one level (§5.4.2 MUST, §5.4.3 MUST NOT)."""

    ok_requests: int
    short_requests: int  # successful requests with fewer than min_output_tokens output tokens
    shortest: int | None
    spans_checked: int
    span_mismatches: int  # requests whose ITL samples do not add up to first->last token
    count_mismatches: int  # requests whose sample count != tokens after the first
    samples: int


def audit_itl(metrics: RunMetrics, records: list[RequestRecord], min_tokens: int) -> ItlAudit:
    """Check, from the raw records, every request's ITL samples against its own token times.

    The samples of a request must sum to (last token time - first token time) on the option's
    clock: a sample holding the TTFT would add (first token - submission) on top.
    """
    recs = sorted((r for r in records if r.phase == "measure"), key=lambda r: (r.sent_ns, r.index))
    pr = metrics.per_request
    counts, means = pr["itl_count"], pr["itl_mean"]
    opt = metrics.itl_option
    ok = [r for r in recs if r.ok]
    outs = [r.output_tokens for r in ok]
    short = [o for o in outs if o is None or o < min_tokens]
    checked = span_bad = count_bad = 0
    for row, r in enumerate(recs):
        if not r.ok or not counts[row] or np.isnan(means[row]):
            continue
        total = float(means[row] * counts[row])
        if opt == "C" and r.server_token_ns:
            span = (r.server_token_ns[-1] - r.server_token_ns[0]) / 1e9
            tokens = len(r.server_token_ns)
        elif r.first_token_ns is not None:
            times = [t for t, k in zip(r.chunk_ns, r.chunk_tokens) if k and t >= r.first_token_ns]
            span = (times[-1] - r.first_token_ns) / 1e9 if times else 0.0
            tokens = sum(k for t, k in zip(r.chunk_ns, r.chunk_tokens) if k and t >= r.first_token_ns) \
                if opt != "A" else len(times)
        else:
            continue
        checked += 1
        if abs(total - span) > 1e-6 + 1e-6 * span:
            span_bad += 1
        if int(counts[row]) != tokens - 1:
            count_bad += 1
    return ItlAudit(len(ok), len(short), min((o for o in outs if o is not None), default=None), checked,
                    span_bad, count_bad, int(metrics.distributions["itl"].n))


def _table6(metrics: RunMetrics, title: str, decision: dict[str, Any] | None = None) -> Table:
    """Table 6 of one level; under option A (App. B.2.1: multi-token chunks, no server times) the
    figures are "Time Between Chunks" (TBC rows), with the chunk-size distribution (§4.6.3)."""
    d = metrics.distributions["itl"]
    n = d.n
    chunked = metrics.itl_option == "A"
    what = "TBC" if chunked else "ITL"

    def pct(q: float) -> Cell:
        return Cell(metrics.percentile("itl", q).value if n else None, "s")

    ratio = metrics.scalar("itl_tail_ratio").value
    rows: list[list[CellValue]] = [
        [f"{what} Samples", Cell(n, "samples")], *([f"{what} P{q:g}", pct(q)] for q in (50, 90, 95, 99, 99.9)),
        [f"{what} Mean", Cell(d.mean.value if n else None, "s")], [f"{what} Std Dev", Cell(d.std if n else None, "s")],
        ["P99/P50 Ratio", Cell(ratio, "ratio", 2)]]
    notes = [f"method: {ITL_OPTIONS[metrics.itl_option]} (§4.6.3)",
             "the submission-to-first-token interval is never an ITL sample (§5.4.3)"]
    if decision:
        notes.append(f"App. B.2.1: {decision.get('reason')}")
    if chunked:
        cs = metrics.distributions.get("chunk_size")
        if cs is not None and cs.n:
            rows += [["Chunk Size Mean", Cell(cs.mean.value, "tokens", 2)],
                     *([f"Chunk Size P{q:g}", Cell(metrics.percentile("chunk_size", q).value, "tokens", 0)]
                       for q in (50, 90, 99))]
        share = (decision or {}).get("single_token_share")
        rows.append(["Single-Token Chunk Share", Cell(share, "fraction")])
        notes.append("ITL is not measurable on this server: these are gaps between content chunks "
                     "(Time Between Chunks, metric tbc), with the chunk-size distribution (§4.6.3 option A)")
        title = title.replace("Table 6: ITL Results", "Table 6: Time Between Chunks")
    return Table(title, ["Metric", "Value"], rows, notes=notes)


def overlays(runs: Sequence[RunSummary]) -> Overlays:
    """The ITL distribution per load level, one CDF each (§5.4.5), labelled by capacity fraction and rate."""
    series = []
    for i, r in enumerate(r for r in runs if r.extra.get("capacity_fraction") is not None):
        e = r.extra
        rate = e.get("offered_rate")
        rate_text = format_value(rate, "requests/s", style="compact") if isinstance(rate, (int, float)) else ""
        label = f"{e['capacity_fraction'] * 100:g}% of capacity" + (f" ({rate_text})" if rate_text else "")
        series.append(Series(label, r.label, group=i))
    return Overlays("load level", ["itl"], "§5.4.5", series)


class ITL(ProcedureRun[ITLParams]):
    """§5.4.3: each load level's requests with a forced minimum output; Table 6 per level."""

    id, title, params_type, profiles = "5.4", "Inter-Token Latency Distribution", ITLParams, PROFILES
    measurement_keys = (
        "capacity_rate_req_s", "capacity_source", "itl_option", "itl_method", "primary_level_fraction", "levels",
        "requests_below_min_output", "requests_ok", "min_output_tokens", "itl_samples", "itl_mean_ms", "itl_std_ms",
        "p99_p50_ratio", "modality", "dip_p_value", "tail", "tail_xi", "short_requests", "ok_requests",
        "concurrency_mean", "fluid_token_rate_tok_s", "itl_decision")
    measurement_patterns = (r"(itl|jitter|max_pause)_p[0-9.]+_ms",)

    @staticmethod
    def plan(p: ITLParams) -> dict[str, Any]:
        return {"requests": p.warmup_requests + p.requests * len(p.levels), "min_duration_s": 0.0}

    async def prepare(self) -> None:
        self.cap = await self.ctx.get_capacity("rate") if self.p.capacity == "session" else Capacity()
        if self.p.capacity == "session" and not (self.cap.rate and self.cap.rate > 0):
            raise CannotMeasure("5.4 needs a request-rate capacity (§5.4.2: load as a percentage of maximum "
                                "throughput); none is available")
        self.level_runs: list[Measured] = []
        self.fractions = sorted(self.p.levels)
        self.audits: list[ItlAudit] = []
        self.raised_total = 0
        self.declaration: dict[str, Any] | None = None

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        p = self.p
        wl = build_workload(p.workload, n=max(p.warmup_requests, 1), seed=self.seeds.derive("warmup"),
                            tokenizer=self.ctx.tokenizer, force_output=True)
        specs, _ = force_min_output(list(wl.specs), p.min_output_tokens, p.max_output_tokens)
        return await self.warm_up_with(client, specs)

    async def _own_capacity(self, client: LLMClient) -> None:
        """§5.4.2 "% of maximum throughput" on 5.4's own request shape: the saturation throughput of its
        forced-output requests (``capacity.search_saturation``, each probe on prompts of its own stream)."""
        p, ctx = self.p, self.ctx

        def specs_for(d: float, stream: int, c: int) -> list[RequestSpec]:
            wl = build_workload(p.workload, n=3 * c + math.ceil(20 * d), seed=self.seeds.derive("capacity-probe", stream),
                                tokenizer=ctx.tokenizer, force_output=True)
            return force_min_output(list(wl.specs), p.min_output_tokens, p.max_output_tokens)[0]

        search = await search_saturation(functools.partial(self.measure, client), ctx, self.id, self.warmup,
                                         "capacity-probe", specs_for, p.probe_concurrency, p.probe_duration_s)
        best = search.best
        if not best.rate > 0:
            raise CannotMeasure(f"5.4: the saturation search on its forced-output requests completed no request "
                                f"({failure_cause(best.measured.records)}); or use capacity='session'")
        self.cap = Capacity(rate=best.rate, output_throughput=None, source=search.describe("5.4's forced-output requests"),
                            standing=search.standing, workload=p.workload, request_shape=FORCED_OUTPUT)

    async def run_loads(self, client: LLMClient) -> None:
        p, ctx, fractions = self.p, self.ctx, self.fractions
        if p.capacity == "own":
            await self._own_capacity(client)
        assert self.cap.rate is not None
        for k, frac in enumerate(fractions):
            rate = frac * self.cap.rate
            label = f"L{k:02d}-{frac:.0%}-{rate:.3g}rps"
            n = level_requests(ctx, label, rate, p.requests, min_requests=MIN_LEVEL_REQUESTS,
                               levels_left=len(fractions) - k)
            workload_seed = self.seeds.derive("level", k)
            wl = build_workload(p.workload, n=n, seed=workload_seed, tokenizer=ctx.tokenizer,
                                force_output=True)
            self.declaration = self.declaration or wl.declaration.to_json()
            specs, raised = force_min_output(list(wl.specs), p.min_output_tokens, p.max_output_tokens)
            self.raised_total += raised
            ctx.progress(f"5.4 level {k + 1}/{len(fractions)}: {frac:.0%} of capacity = {rate:.2f} req/s, "
                         f"{n} requests")
            load = OpenLoop(ArrivalProcess(p.arrival, rate, seed=self.seeds.derive("arrivals", k)),
                            max_requests=len(specs))
            m = await self.measure(client, label, specs, load, sized=True,
                                   extra={"capacity_fraction": frac, "offered_rate": rate,
                                          "workload_seed": workload_seed})
            self.level_runs.append(m)
            self.audits.append(audit_itl(m.metrics, m.records, p.min_output_tokens))

    def summarize(self) -> Outcome:
        p, fractions, runs, audits, cap = self.p, self.fractions, self.level_runs, self.audits, self.cap
        assert cap.rate is not None
        primary = int(np.argmin([abs(f - 0.5) for f in fractions]))
        tables = [_table6(m.metrics, f"Table 6: ITL Results ({frac:.0%} of capacity, {frac * cap.rate:.2f} req/s)",
                          m.summary.extra.get("itl_decision")) for frac, m in zip(fractions, runs)]
        self.table6s = list(tables)
        level_meas = self._shape(tables)
        self.shape_table = tables[-1]
        raised_total = self.raised_total
        short = sum(a.short_requests for a in audits)
        ok_reqs = sum(a.ok_requests for a in audits)
        notes = []
        if short:
            notes.append(f"{short} of {ok_reqs} successful requests produced fewer than {p.min_output_tokens} output "
                         "tokens: the server did not honour min_tokens/ignore_eos (§5.4.2)")
        if raised_total:
            notes.append(f"{raised_total} requests' max_tokens raised to {p.min_output_tokens} (§5.4.2 minimum)")
        pm = runs[primary].metrics
        measurements: dict[str, Any] = {
            "capacity_rate_req_s": cap.rate, "capacity_source": cap.source,
            "itl_option": pm.itl_option, "itl_method": ITL_OPTIONS[pm.itl_option],
            "itl_decision": (runs[primary].summary.extra.get("itl_decision") or {}).get("reason"),
            "primary_level_fraction": fractions[primary], "levels": level_meas,
            "requests_below_min_output": short, "requests_ok": ok_reqs, "min_output_tokens": p.min_output_tokens,
            **{k: v for k, v in level_meas[primary].items() if k not in ("fraction", "offered_req_s")},
        }
        return Outcome(metrics=pm, tables=tables, measurements=measurements,
                       workload=self.declaration or {"name": p.workload}, notes=notes,
                       plots={"itl_samples_s": sample_list(pm.distributions["itl"].samples
                                                           if pm.distributions["itl"].samples is not None else [])},
                       facts={"itl_reported": True, "exceeds_capacity": max(fractions) > 1.0},
                       fact_runs=runs,  # the levels (the capacity search's closed loops are reported, not judged here)
                       key_figures=latency_figures(pm, 3), overlays=overlays([m.summary for m in runs]))

    def _shape(self, tables: list[Table]) -> list[dict[str, Any]]:
        """Per-request ITL statistics and distribution shape per level (§5.4.4.2, §5.4.4.3)."""
        p, fractions, runs, audits, cap = self.p, self.fractions, self.level_runs, self.audits, self.cap
        assert cap.rate is not None
        per_req_rows = []
        level_meas = []
        for frac, m, a in zip(fractions, runs, audits):
            mt = m.metrics
            mod, tail = mt.itl_modality, mt.itl_tail
            row = [Cell(frac, "fraction", 0), Cell(frac * cap.rate, "requests/s", 2),
                   *(Cell(pvalue(mt, "jitter", q), "s") for q in (50, 95, 99)),
                   *(Cell(pvalue(mt, "max_pause", q), "s") for q in (50, 95, 99)),
                   mod.verdict if mod else "n/a", tail.verdict if tail else "n/a",
                   Cell(mt.scalar("itl_tail_ratio").value, "ratio", 2),
                   [Cell(a.short_requests, "requests"), "/", Cell(a.ok_requests, "requests")],
                   Cell(fluid_rate(mt), "tokens/s", 0, label=True)]
            per_req_rows.append(row)
            level_meas.append({
                "fraction": frac, "offered_req_s": frac * cap.rate, "itl_samples": a.samples,
                **{f"itl_p{q:g}_ms": _ms(pvalue(mt, "itl", q)) for q in (50, 90, 95, 99, 99.9)},
                "itl_mean_ms": _ms(mt.distributions["itl"].mean.value if a.samples else None),
                "itl_std_ms": _ms(mt.distributions["itl"].std if a.samples else None),
                **{f"jitter_p{q}_ms": _ms(pvalue(mt, "jitter", q)) for q in (50, 95, 99)},
                **{f"max_pause_p{q}_ms": _ms(pvalue(mt, "max_pause", q)) for q in (50, 95, 99)},
                "p99_p50_ratio": _num(mt.scalar("itl_tail_ratio").value),
                "modality": mod.verdict if mod else None, "dip_p_value": _num(mod.p_value) if mod else None,
                "tail": tail.verdict if tail else None, "tail_xi": _num(tail.xi) if tail else None,
                "short_requests": a.short_requests, "ok_requests": a.ok_requests,
                "concurrency_mean": _num(mt.scalar("concurrency").value),
                "fluid_token_rate_tok_s": fluid_rate(mt),
            })
        tables.append(Table(
            "Per-request ITL statistics and distribution shape (§5.4.4.2, §5.4.4.3)",
            ["Load", "Offered (r/s)", "Jitter P50", "Jitter P95", "Jitter P99", "Max Pause P50", "Max Pause P95",
             "Max Pause P99", "Modality", "Tail", "P99/P50", f"< {p.min_output_tokens} tokens", "Fluid rate"],
            per_req_rows,
            notes=["jitter = per-request standard deviation of its ITLs; max pause = its largest ITL",
                   ("modality: Hartigan's dip test (p < 0.05 = multimodal); tail: GPD shape xi of the excesses over "
                    "P90 (xi > 0.1 heavy-tailed, |xi| <= 0.1 exponential, xi < -0.1 light)"), FLUID_RATE_NOTE]))
        return level_meas

    def checks(self, out: Outcome) -> dict[str, Check]:
        return {**item_checks(self.p, self.fractions, self.audits, self.level_runs, self.declaration or {}, self.cap),
                **report_checks(self.table6s, self.shape_table, out.tables)}


def _ms(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v * 1000, 4)


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def item_checks(p: ITLParams, fractions: list[float], audits: list[ItlAudit], runs: list[Measured],
            declaration: dict[str, Any], cap: Capacity) -> dict[str, Check]:
    c: dict[str, Check] = {}
    short = sum(a.short_requests for a in audits)
    ok_reqs = sum(a.ok_requests for a in audits)
    shortest = min((a.shortest for a in audits if a.shortest is not None), default=None)
    c["5.4.2-MUST-1"] = decide("5.4.2-MUST-1", min_output_tokens=p.min_output_tokens, ok_requests=ok_reqs,
                               short_requests=short, shortest=shortest)
    c["5.4.2-SHOULD-2"] = decide("5.4.2-SHOULD-2", fractions=fractions)
    c["5.4.3-MUST-1"] = decide("5.4.3-MUST-1", checked=sum(a.spans_checked for a in audits),
                               mismatched=sum(a.span_mismatches for a in audits))
    n_min = min(len([r for r in m.records if r.ok]) for m in runs)
    samples_min = min(a.samples for a in audits)
    c["5.4.2-PARAM-1"] = (decide("5.4.2-PARAM-1", ok=n_min >= DRAFT_MIN_REQUESTS and samples_min >= DRAFT_MIN_SAMPLES, met=f">= {DRAFT_MIN_REQUESTS} requests and {samples_min} ITL samples "
                                    "per level", unmet=f"per level: >= {n_min} successful requests, >= "
                                           f"{samples_min} ITL samples (draft: {DRAFT_MIN_REQUESTS} requests, "
                                           f"{DRAFT_MIN_SAMPLES}+ samples)"))
    c["5.4.2-PARAM-2"] = decide("5.4.2-PARAM-2", rate=cap.rate, source=cap.source or "unknown", standing=cap.standing,
                                shape=cap.request_shape, own_shape=FORCED_OUTPUT, what="levels as % of the request-rate ")
    c["5.4.2-PARAM-3"] = decide("5.4.2-PARAM-3", ok=True, met=f"ITL option {runs[0].metrics.itl_option}: "
                                   f"{ITL_OPTIONS[runs[0].metrics.itl_option]}")
    c["5.4.3-PARAM-1"] = decide("5.4.3-PARAM-1", ok=True, met="warm-up before the first level")
    bad_count = sum(a.count_mismatches for a in audits)
    c["5.4.3-PARAM-2"] = (decide("5.4.3-PARAM-2", ok=not bad_count, met="per request: one ITL sample per token after the first", unmet=f"{bad_count} requests' sample count != tokens - 1"))
    c["5.4.3-PARAM-3"] = decide("5.4.3-PARAM-3", ok=True, met="samples pooled over every request of a level")
    c["5.4.3-PARAM-4"] = decide("5.4.3-PARAM-4", ok=True, met="per-request jitter = std dev of its ITLs")
    c["5.4.3-PARAM-5"] = decide("5.4.3-PARAM-5", ok=True, met="per-request maximum pause = its largest ITL")
    c["B.2.1-PARAM-1"] = _b21(runs)
    return c


def _b21(runs: list[Measured]) -> Check:
    """App. B.2.1 per level: the option each level's ITL used is the one the rule gives for its records
    (single-token share > 90 % direct, else server timestamps, else chunk timing)."""
    parts, bad = [], []
    for m in runs:
        d = m.summary.extra.get("itl_decision") or {}
        share = d.get("single_token_share")
        pattern = "tokens per chunk unknown (reference-tokenizer counts)" if share is None else \
            f"single-token share {share:.1%} of {d.get('content_chunks')} chunks"
        extra = f", {d.get('tokens_at_chunk_time')} tokens at their chunk's time" if d.get("tokens_at_chunk_time") \
            and d.get("option") == "B" else ""
        parts.append(f"{m.summary.label}: {pattern}{extra} -> option {m.metrics.itl_option}")
        if d.get("option") != m.metrics.itl_option:
            bad.append(f"{m.summary.label} used option {m.metrics.itl_option}, App. B.2.1 gives {d.get('option')}")
    return decide("B.2.1-PARAM-1", ok=not bad, met="; ".join(parts), unmet="; ".join(bad) or "no decision recorded",
                  options=[m.metrics.itl_option for m in runs])


def report_checks(table6s: list[Table], shape: Table, tables: list[Table]) -> dict[str, Check]:
    """5.4.4/5.4.5 REPORT items, read back from each level's Table 6 and the per-request shape table."""
    def each(*names: str) -> list[tuple[Table, str]]:  # a level under option A reports TBC rows (§4.6.3)
        return [(t, n.replace("ITL ", "TBC ") if "Time Between Chunks" in t.title else n)
                for t in table6s for n in names]

    items = {
        "5.4.4-REPORT-1": ("ITL P50/P90/P95/P99/P99.9 per level",
                           each("ITL P50", "ITL P90", "ITL P95", "ITL P99", "ITL P99.9")),
        "5.4.4-REPORT-2": ("ITL mean per level", each("ITL Mean")),
        "5.4.4-REPORT-3": ("ITL standard deviation per level", each("ITL Std Dev")),
        "5.4.4-REPORT-4": ("jitter P50/P95/P99 per level", [(shape, f"Jitter P{q}") for q in (50, 95, 99)]),
        "5.4.4-REPORT-5": ("max pause P50/P95/P99 per level", [(shape, f"Max Pause P{q}") for q in (50, 95, 99)]),
        "5.4.4-REPORT-6": ("modality (dip test) per level", [(shape, "Modality")]),
        "5.4.4-REPORT-7": ("tail type and P99/P50 ratio per level", [(shape, "Tail"), (shape, "P99/P50")]),
        "5.4.5-REPORT-1": (f"Table 6 for each of the {len(table6s)} levels", each("ITL Samples")),
    }
    return {rid: reported(rid, what, needs, tables) for rid, (what, needs) in items.items()}
