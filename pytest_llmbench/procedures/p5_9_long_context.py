"""§5.9 Long Context Scaling: TTFT against context length, and the scaling law it follows.

Procedure (§5.9.3): warm up with short-context requests (§4.5); for each context length in
ascending order send that length's Long Context requests (REQUIRED, §5.9.2) in a closed loop at
low concurrency (1-4) with a fixed 256-token output; record TTFT and total latency per request;
fit scaling models.

Measurements (§5.9.4), per length: TTFT mean, P50, P95; prefill scaling = TTFT / input length
(Table 12's "ms/1K tokens" = mean TTFT in ms / (length / 1000)); the scaling exponent k of
TTFT ∝ L^k (least squares of log TTFT on log L over every successful request,
:func:`~pytest_llmbench.measure.stats.scaling_fit`) next to a linear fit a + b·L; the better one by R²
in linear space is the "best fit" line (§5.9.5).

Lengths. The draft defines three sets: §5.9.2's example sequence (1K, 2K, 4K … 128K), App. A.5.1's
target lengths {8K, 16K, 32K, 64K, 128K} and §4.3.2.5's Uniform(8K, 32K) (draft ambiguity 5). By
default (``lengths=None``) 5.9 runs §5.9.2's sequence up to the context window: the lengths whose
prompt and output fit, then the window's own top (window − output) when a longer one was cut; a
window the client cannot discover stops the sequence at 32K (4.3.2.5's top; declare
``context_window`` to go further). Explicit ``lengths`` that do not fit are lowered to
``window - output_tokens`` and noted. Our reading of "Long Context workload REQUIRED" (5.9.2-MUST-1,
4.3.2-PARAM-6): the run is the standard Long Context workload when it includes at least one A.5
length (>= 8192 input tokens) and the fixed 256-token output; otherwise it is a custom workload
derived from it, with the reason (e.g. "context window 4096 < 8192"), and both items are unmet.

"Throughput at length: maximum throughput achievable at each context length" (§5.9.4) needs more
than the low-concurrency runs of 5.9.3. After them, each length (ascending) gets a concurrency
sweep: closed loops at ``throughput_concurrencies`` (ascending), ``throughput_waves`` (>= 2) × c
requests each (fresh prompts of the length, own seed stream). A level's throughput is taken over
its steady window, as every throughput figure is (§5.2.3.2: the send window less its first 10 %,
the drain after the last submission excluded): with two waves or more the loop is full throughout
it. The sweep stops at a plateau (a level gains under ``plateau_gain`` over the best so far: the
best is the maximum), at a level where more than ``max_error_rate`` of the requests failed, or
when the next level's estimated duration does not fit the remaining time budget shared by the
lengths still to sweep (``--llm-max-duration``); then the best level is a lower bound, labelled so.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..client import LLMClient
from ..common import draft
from ..compliance import Check, decide
from ..loadgen.load import ClosedLoop
from ..loadgen.warmup import WarmupResult
from ..measure.stats import ScalingFit, scaling_fit
from ..measure.units import Cell, CellValue
from ..workloads import A5_TARGET_LENGTHS, build_workload
from .base import CannotMeasure
from .helpers import pvalue
from .pipeline import Outcome, ProcedureRun
from .result import Sweep, Table
from .run import Measured

__all__ = ["PROFILES", "LengthThroughput", "LongContextParams", "SweepLevel", "best_fit_statement",
           "default_lengths", "effective_lengths", "level_ends_sweep", "long_context_standing"]

MIN_REQUESTS_PER_LENGTH = draft.value("long_context.min_requests_per_length")  # §5.9.2
DRAFT_OUTPUT_TOKENS = draft.value("long_context.output_tokens")  # §5.9.2
MAX_CONCURRENCY = draft.value("long_context.max_concurrency")  # §5.9.2 "low concurrency (1-4)"
#: §5.9.2's example sequence of context lengths ("1K, 2K, 4K, 8K, 16K, 32K, 64K, 128K tokens")
DRAFT_SEQUENCE = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
A5_MIN = min(A5_TARGET_LENGTHS)  # 8192: the shortest App. A.5.1 target length
UNKNOWN_WINDOW_MAX = 32768  # the sequence's end when the context window is unknown (4.3.2.5's upper bound)


@dataclass
class LongContextParams:
    """§5.9.2 setup parameters; defaults are the draft's values (the ``standard`` profile)."""

    lengths: tuple[int, ...] | None = None  # None: §5.9.2's sequence up to the context window (module doc)
    requests_per_length: int = MIN_REQUESTS_PER_LENGTH
    concurrency: int = 1
    output_tokens: int = DRAFT_OUTPUT_TOKENS
    max_output_tokens: int | None = None  # cap on the output (shorter runs); recorded as unmet 5.9.2-PARAM-2
    context_window: int | None = None  # None: the simulator's, else no clamping
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    warmup_input_tokens: int = 256  # short-context warm-up (§5.9.3 step 1)
    throughput_concurrencies: tuple[int, ...] = (2, 4, 8, 16, 32, 64)  # max-throughput sweep (§5.9.4); () = none
    throughput_waves: int = 3  # requests per sweep level = waves x concurrency (>= 2: a steady window)
    plateau_gain: float = 0.1  # a level gaining less than this over the best so far ends the sweep
    max_error_rate: float = 0.01  # a sweep level with a larger share of failed requests ends the sweep

    def validate(self) -> None:
        if self.lengths is not None:
            self.lengths = tuple(int(x) for x in self.lengths)
            if len(set(self.lengths)) < 2:
                raise ValueError(f"lengths needs at least two distinct context lengths to fit scaling, got "
                                 f"{self.lengths}")
            if min(self.lengths) < 128:
                raise ValueError(f"context lengths must be >= 128 tokens (the Long Context question alone is ~100), "
                                 f"got {min(self.lengths)}")
        if self.requests_per_length < 1:
            raise ValueError(f"requests_per_length must be >= 1, got {self.requests_per_length}")
        if not 1 <= self.concurrency:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.output_tokens < 1 or (self.max_output_tokens is not None and self.max_output_tokens < 1):
            raise ValueError("output_tokens and max_output_tokens must be >= 1")
        self.throughput_concurrencies = tuple(sorted({int(c) for c in self.throughput_concurrencies}))
        if any(c < 1 for c in self.throughput_concurrencies):
            raise ValueError(f"throughput_concurrencies must be >= 1, got {self.throughput_concurrencies}")
        if self.throughput_waves < 2 or not self.plateau_gain > 0:
            raise ValueError(f"throughput_waves must be >= 2 (one wave has no steady window: every request is sent "
                             f"at once) and plateau_gain > 0, got {self.throughput_waves} and {self.plateau_gain}")
        if not 0 <= self.max_error_rate < 1:
            raise ValueError(f"max_error_rate is a fraction in [0, 1), got {self.max_error_rate}")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.9')  # data/profiles.yaml


def effective_lengths(lengths: tuple[int, ...], window: int | None, output_tokens: int) -> tuple[list[int], list[str]]:
    """Ascending distinct lengths, each lowered to fit ``window`` with ``output_tokens``; notes on changes."""
    out: list[int] = []
    notes: list[str] = []
    for L in sorted(set(lengths)):
        if window is not None and L + output_tokens > window:
            fitted = window - output_tokens
            notes.append(f"{L} tokens + {output_tokens} output exceed the {window}-token context window: "
                         f"tested at {fitted}")
            L = fitted
        if L not in out:
            out.append(L)
    return out, notes


def default_lengths(window: int | None, output_tokens: int) -> tuple[list[int], list[str]]:
    """§5.9.2's sequence up to the context window: the lengths that fit with ``output_tokens``, then
    ``window - output_tokens`` when a longer one was cut; up to 32K when the window is unknown."""
    if window is None:
        kept = [L for L in DRAFT_SEQUENCE if L <= UNKNOWN_WINDOW_MAX]
        return kept, [f"context window unknown: §5.9.2's sequence up to {UNKNOWN_WINDOW_MAX} (4.3.2.5's upper bound); "
                      "declare context_window to test longer contexts"]
    kept = [L for L in DRAFT_SEQUENCE if L + output_tokens <= window]
    cut = [L for L in DRAFT_SEQUENCE if L + output_tokens > window]
    top = window - output_tokens
    if cut and top > (kept[-1] if kept else 0) and top >= 128:
        kept.append(top)
    note = (f"§5.9.2's sequence up to the {window}-token context window: {', '.join(map(str, kept))}"
            + (f" ({', '.join(map(str, cut))} + {output_tokens} output do not fit; the window's top, {top}, tested)"
               if cut and kept and kept[-1] == top else ""))
    return kept, [note]


def long_context_standing(lengths: list[int], window: int | None, output_tokens: int,
                          capped: bool = False) -> list[str]:
    """Why the run is not the standard Long Context workload (our reading, module doc): no length >= 8192
    (the context window's or the lengths' fault), an output other than 256 (``capped``: by
    ``max_output_tokens``). Empty: it is."""
    why = []
    if not any(L >= A5_MIN for L in lengths):
        if window is not None and window - output_tokens < A5_MIN:
            why.append(f"context window {window} < {A5_MIN}" if window < A5_MIN else
                       f"context window {window} leaves {window - output_tokens} input tokens beside {output_tokens} "
                       f"output, < {A5_MIN}")
        else:
            why.append(f"no App. A.5 length (>= {A5_MIN}) among the lengths {', '.join(map(str, lengths))}")
    if output_tokens != DRAFT_OUTPUT_TOKENS:
        why.append(f"output capped at {output_tokens} tokens" if capped else
                   f"output fixed at {output_tokens} tokens, not {DRAFT_OUTPUT_TOKENS}")
    return why


@dataclass(frozen=True)
class SweepLevel:
    """One closed-loop level of a length's throughput sweep (§5.9.4 "throughput at length")."""

    concurrency: int
    output_tps: float | None  # output tokens arriving in the steady window / its length (§5.2.3.2)
    request_rate: float | None  # successful requests completing in the same window, per second
    total_tps: float | None  # input + output tokens per second, same window
    requests: int
    failed: int

    @property
    def error_rate(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    @classmethod
    def of(cls, concurrency: int, m: Measured) -> SweepLevel:
        """The level's figures over its steady window (the metrics' window: the send window less its first
        10 %, no drain tail), so a closed loop's ramp-up and drain do not lower them."""
        met = m.metrics

        def val(name: str) -> float | None:
            v = met.scalar(name).value
            return None if v is None or math.isnan(v) else float(v)

        return cls(concurrency, val("output_throughput"), val("request_throughput"),
                   val("total_token_throughput"), len(m.records), sum(1 for r in m.records if r.failed))


@dataclass
class LengthThroughput:
    """The maximum throughput at one context length: the sweep's levels and why it ended (§5.9.4)."""

    length: int
    levels: list[SweepLevel]
    max_error_rate: float = 0.01  # a level with more failed requests than this is not a candidate
    stopped: str = ""
    is_maximum: bool = False  # False: the best level is a lower bound (budget, or still rising)

    @property
    def best(self) -> SweepLevel | None:
        ok = [lv for lv in self.levels if lv.error_rate <= self.max_error_rate and lv.output_tps is not None]
        return max(ok, key=lambda lv: lv.output_tps or 0.0, default=None)

    def to_json(self) -> dict[str, Any]:
        b = self.best
        return {"max_output_tps": None if b is None else b.output_tps,
                "max_throughput_concurrency": None if b is None else b.concurrency,
                "max_request_rate": None if b is None else b.request_rate,
                "max_total_tps": None if b is None else b.total_tps,
                "max_throughput_is_maximum": self.is_maximum, "throughput_sweep_stopped": self.stopped,
                "throughput_sweep": [dataclasses.asdict(lv) for lv in self.levels]}


def level_ends_sweep(level: SweepLevel, best: SweepLevel | None, plateau_gain: float,
                     max_error_rate: float) -> str | None:
    """Why a length's sweep ends at ``level`` (the best level so far is then the maximum), or None to go
    on: more than ``max_error_rate`` of its requests failed, or it gained less than ``plateau_gain``
    over ``best`` (the best acceptable level before it)."""
    if level.error_rate > max_error_rate:
        return (f"{level.failed} of {level.requests} requests failed at concurrency {level.concurrency} "
                f"({level.error_rate:.1%} > max_error_rate {max_error_rate:.1%})")
    if best is None or level.output_tps is None or best.output_tps is None:
        return None
    if level.output_tps < best.output_tps * (1 + plateau_gain):
        return f"plateau: concurrency {level.concurrency} gained < {plateau_gain:.0%} over the best"
    return None


def level_fits(est_s: float | None, remaining_s: float | None, lengths_left: int) -> bool:
    """A sweep level runs when its estimated duration fits this length's share of the remaining budget."""
    if remaining_s is None:
        return True
    return est_s is not None and est_s <= remaining_s / max(lengths_left, 1)


def best_fit_statement(fit: ScalingFit) -> str:
    """§5.9.5's "Best fit" line: the better model by R² (linear space), the exponent, per-token cost."""
    per_token_us = fit.linear_slope * 1e6
    if fit.better == "linear":
        head = f"Best fit: Linear (R^2 = {fit.r2_linear:.4f}), ~{per_token_us:.1f} microseconds per input token"
        tail = f"power law TTFT ∝ L^{fit.exponent:.3f} (R^2 = {fit.r2_power_linear_space:.4f})"
    else:
        head = (f"Best fit: Power law TTFT = {fit.power_coefficient:.3g}·L^{fit.exponent:.3f} "
                f"(R^2 = {fit.r2_power_linear_space:.4f})")
        tail = f"linear {per_token_us:.1f} microseconds per input token (R^2 = {fit.r2_linear:.4f})"
    ci = f", 95% CI [{fit.exponent_ci[0]:.3f}, {fit.exponent_ci[1]:.3f}]" if fit.exponent_ci else ""
    return f"{head}; scaling exponent k = {fit.exponent:.3f}{ci} (log-log R^2 = {fit.r2_loglog:.4f}); {tail}"


class LongContext(ProcedureRun[LongContextParams]):
    """§5.9.3: short-context warm-up, then each length ascending at low concurrency; Table 12."""

    id, title, params_type, profiles = "5.9", "Long Context Scaling", LongContextParams, PROFILES
    measurement_keys = (
        "lengths", "per_length", "best_fit", "output_tokens", "concurrency", "scaling_exponent", "scaling_exponent_ci",
        "r2_loglog", "r2_linear", "r2_power", "best_model", "per_token_cost_us", "linear_intercept_ms",
        "power_coefficient")
    measurement_patterns = (r"(ttft_mean_ms|max_output_tps)_[0-9]+",)  # per context length

    @staticmethod
    def plan(p: LongContextParams) -> dict[str, Any]:
        sweep = sum(p.throughput_waves * c for c in p.throughput_concurrencies if c > p.concurrency)
        n_lengths = len(set(p.lengths)) if p.lengths is not None else len(DRAFT_SEQUENCE)  # at most
        return {"requests": p.warmup_requests + (p.requests_per_length + sweep) * n_lengths,
                "min_duration_s": 0.0}

    async def prepare(self) -> None:
        p, ctx = self.p, self.ctx
        window = p.context_window
        if window is None:  # the simulator's, or what the server adapter read (llama.cpp: per-slot n_ctx)
            window = int(ctx.sut.server_info.get("context_window") or 0) or None
        self.window = window
        self.out_tokens = p.output_tokens if p.max_output_tokens is None else min(p.output_tokens, p.max_output_tokens)
        if p.lengths is None:
            self.lengths, self.length_notes = default_lengths(window, p.output_tokens)
        else:
            self.lengths, self.length_notes = effective_lengths(p.lengths, window, p.output_tokens)
        if len(self.lengths) < 2:
            raise CannotMeasure(f"5.9 needs two context lengths or more to fit scaling, and the {window}-token "
                                f"context window holds only {self.lengths} with {p.output_tokens} output tokens: "
                                "lower output_tokens or give lengths that fit")
        wl = build_workload("long-context", n=p.requests_per_length * len(self.lengths),
                            seed=self.seeds.derive("measure"), tokenizer=ctx.tokenizer, lengths=self.lengths,
                            order="ascending", output_tokens=self.out_tokens, force_output=True)
        self.custom_why = long_context_standing(self.lengths, window, self.out_tokens,
                                                capped=self.out_tokens < p.output_tokens)
        self.declaration = _as_standing(wl.declaration.to_json(), self.lengths, self.custom_why)
        self.by_length: dict[int, list[Any]] = {L: [] for L in self.lengths}
        for s in wl.specs:
            self.by_length[s.input_tokens].append(s)
        self.runs: dict[int, Measured] = {}

    def connections(self) -> int | None:
        return max(self.p.concurrency, 8, *self.p.throughput_concurrencies)

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        """Short-context warm-up (§5.9.3 step 1), on prompts of its own stream."""
        p = self.p
        out_tokens = max(16, min(256, math.ceil(p.warmup_tokens / max(p.warmup_requests, 1))))
        wl = build_workload("fixed", n=max(p.warmup_requests, 8), seed=self.seeds.derive("warmup"),
                            tokenizer=self.ctx.tokenizer, input_tokens=p.warmup_input_tokens,
                            output_tokens=out_tokens, force_output=True)
        # a forced min_tokens would exceed the warm-up probe's capped max_tokens
        specs = [dataclasses.replace(s, min_tokens=None) for s in wl.specs]
        return await self.warm_up_with(client, specs, concurrency=max(p.concurrency, 8))

    async def run_loads(self, client: LLMClient) -> None:
        p = self.p
        for L in self.lengths:  # ascending (§5.9.3 step 2)
            specs = self.by_length[L]
            self.ctx.progress(f"context {L}: {len(specs)} requests at concurrency {p.concurrency}")
            # sized: requests_per_length bounds the run; a time budget cuts the sweeps below, not these
            self.runs[L] = await self.measure(client, f"ctx{L:06d}", specs,
                                              ClosedLoop(p.concurrency, max_requests=len(specs)),
                                              drain_timeout_s=self.ctx.settings.timeout, sized=True,
                                              extra={"context_length": L})
        self.sweeps: dict[int, LengthThroughput] = {}
        self.sweep_runs: list[Measured] = []
        for i, L in enumerate(self.lengths):  # maximum throughput per length (§5.9.4), ascending
            self.sweeps[L] = await self._sweep(client, L, len(self.lengths) - i)

    async def _sweep(self, client: LLMClient, L: int, lengths_left: int) -> LengthThroughput:
        """Closed loops at rising concurrency until a plateau, failures or the time budget (§5.9.4)."""
        p, ctx = self.p, self.ctx
        res = LengthThroughput(L, [SweepLevel.of(p.concurrency, self.runs[L])], p.max_error_rate)
        todo = [c for c in p.throughput_concurrencies if c > p.concurrency]
        if not todo:
            res.stopped = "no sweep: no throughput concurrency above the latency runs'"
            return res
        for k, c in enumerate(todo):
            best = res.best
            n = p.throughput_waves * c
            est = n * self.out_tokens / best.output_tps if best is not None and best.output_tps else None
            if not level_fits(est, ctx.remaining_s(), lengths_left):
                res.stopped = f"time budget: concurrency {c} not run" + (f" (~{est:.0f} s)" if est else "")
                ctx.budget_cuts.append(f"context {L}: throughput sweep stopped before concurrency {c}")
                return res
            wl = build_workload("long-context", n=n, seed=self.seeds.derive(f"throughput-{L}", k),
                                tokenizer=ctx.tokenizer, lengths=[L], order="ascending",
                                output_tokens=self.out_tokens, force_output=True)
            ctx.progress(f"context {L}: throughput at concurrency {c}, {n} requests")
            m = await self.measure(client, f"ctx{L:06d}-throughput-c{c:03d}", wl.specs, ClosedLoop(c, max_requests=n),
                                   drain_timeout_s=ctx.settings.timeout,
                                   extra={"context_length": L, "throughput_sweep": True, "concurrency": c})
            self.sweep_runs.append(m)
            level = SweepLevel.of(c, m)
            res.levels.append(level)
            why = level_ends_sweep(level, best, p.plateau_gain, p.max_error_rate)
            if why is not None:
                res.stopped, res.is_maximum = why, True
                return res
        res.stopped = f"still rising at the largest sweep concurrency {todo[-1]}"
        return res

    def summarize(self) -> Outcome:
        p, lengths, runs = self.p, self.lengths, self.runs
        rows12, rows_detail = [], []
        pts_L: list[float] = []
        pts_t: list[float] = []
        per_length: dict[str, Any] = {}
        for L in lengths:
            met = runs[L].metrics
            d = met.distributions.get("ttft")
            n = d.n if d is not None else 0
            mean = float(d.mean.value) if d is not None and n else None
            p50, p95 = pvalue(met, "ttft", 50), pvalue(met, "ttft", 95)
            e2e = met.distributions.get("e2e")
            e2e_mean = float(e2e.mean.value) if e2e is not None and e2e.n else None
            per_1k = mean * 1000 / (L / 1000) if mean is not None else None
            tps = met.scalar("output_throughput").value
            # ms/1K tokens: a plain number, its unit in the column header (units has no ms-per-token unit)
            rows12.append([str(L), Cell(mean, "s"), Cell(p95, "s"), Cell(per_1k, "", 1)])
            rows_detail.append([str(L), Cell(n, "requests"), Cell(mean, "s"), Cell(p50, "s"), Cell(p95, "s"),
                                Cell(e2e_mean, "s"), Cell(tps, "tokens/s", 1),
                                Cell(sum(met.errors_by_type.values()), "requests")])
            per_length[str(L)] = {"n": n, "ttft_mean_s": mean, "ttft_p50_s": p50, "ttft_p95_s": p95,
                                  "e2e_mean_s": e2e_mean, "ms_per_1k_tokens": per_1k,
                                  "output_tps_at_concurrency": tps, "errors": dict(met.errors_by_type),
                                  **self.sweeps[L].to_json()}
            pr = met.per_request
            ok = np.asarray(pr["ok"], dtype=bool)
            ttft = np.asarray(pr["ttft"], dtype=float)[ok]
            isl = np.asarray(pr["isl"], dtype=float)[ok]
            keep = np.isfinite(ttft) & np.isfinite(isl) & (ttft > 0) & (isl > 0)
            pts_L.extend(isl[keep].tolist())
            pts_t.extend(ttft[keep].tolist())
        fit: ScalingFit | None = None
        fit_line = "no fit: fewer than two context lengths with successful requests"
        if len(set(pts_L)) >= 2:
            fit = scaling_fit(pts_L, pts_t)
            fit_line = best_fit_statement(fit)
        table12 = Table("Table 12: Long Context Scaling", ["Context (tokens)", "TTFT Mean", "TTFT P95", "ms/1K tokens"],
                        rows12, notes=[fit_line, "ms/1K tokens = mean TTFT (ms) / (context length / 1000) (§5.9.4)"]
                        + self.length_notes)
        detail = Table("Per-length latency (§5.9.4)",
                       ["Context (tokens)", "n", "TTFT Mean", "TTFT P50", "TTFT P95", "E2E Mean",
                        f"Output tok/s at concurrency {p.concurrency}", "Errors"], rows_detail,
                       notes=["output throughput at the latency runs' concurrency; the maximum per length is in "
                              "the next table"])
        n_min = min((per_length[str(L)]["n"] for L in lengths), default=0)
        measurements: dict[str, Any] = {
            "lengths": lengths, "per_length": per_length, "best_fit": fit_line,
            "output_tokens": self.out_tokens, "concurrency": p.concurrency,
        }
        if fit is not None:
            measurements.update(scaling_exponent=fit.exponent, scaling_exponent_ci=fit.exponent_ci,
                                r2_loglog=fit.r2_loglog, r2_linear=fit.r2_linear,
                                r2_power=fit.r2_power_linear_space, best_model=fit.better,
                                per_token_cost_us=fit.linear_slope * 1e6, linear_intercept_ms=fit.linear_intercept * 1e3,
                                power_coefficient=fit.power_coefficient)
        for L in lengths:
            v = per_length[str(L)]
            if v["ttft_mean_s"] is not None:
                measurements[f"ttft_mean_ms_{L}"] = round(v["ttft_mean_s"] * 1000, 3)
            if v["max_output_tps"] is not None:
                measurements[f"max_output_tps_{L}"] = round(v["max_output_tps"], 2)
        self.n_min, self.fit = n_min, fit
        return Outcome(
            metrics=runs[lengths[-1]].metrics, tables=[table12, detail, self._throughput_table()],
            measurements=measurements, workload=self.declaration,
            runs=[runs[L] for L in lengths] + self.sweep_runs, fact_runs=[runs[L] for L in lengths],
            notes=[fit_line, "primary metrics (SLO assertions) = the longest context"] + self.length_notes,
            plots={"scaling": {"length": pts_L, "ttft_s": pts_t,
                               "fit": None if fit is None else {"k": fit.exponent, "c": fit.power_coefficient,
                                                                "r2": fit.r2_loglog}}},
            sweep=Sweep(f"TTFT ∝ L^{fit.exponent:.2f}") if fit is not None and math.isfinite(fit.exponent) else None,
        )

    def _throughput_table(self) -> Table:
        """Maximum throughput achievable at each context length (§5.9.4), from the concurrency sweeps."""
        rows: list[list[CellValue]] = []
        for L in self.lengths:
            sw = self.sweeps[L]
            b = sw.best
            best_tps = Cell(None if b is None else b.output_tps, "tokens/s", 1)
            sweep: list[str | Cell] = []
            for lv in sw.levels:  # "4: 812.5, 8: 1500.2"
                sweep += [", "] if sweep else []
                sweep += [Cell(lv.concurrency, "requests"), ": ", Cell(lv.output_tps, "tokens/s", 1)]
            rows.append([str(L), best_tps if sw.is_maximum or best_tps.value is None else [">= ", best_tps],
                         "n/a" if b is None else Cell(b.concurrency, "requests"),
                         Cell(None if b is None else b.request_rate, "requests/s", 2),
                         Cell(None if b is None else b.total_tps, "tokens/s", 0), sweep,
                         ("maximum" if sw.is_maximum else "lower bound") + f" ({sw.stopped})"])
        p = self.p
        return Table("Maximum throughput per context length (§5.9.4)",
                     ["Context (tokens)", "Max Output tok/s", "At Concurrency", "Requests/s", "Total tok/s",
                      "Sweep (concurrency: output tok/s)", "Result"], rows,
                     notes=[f"closed loops at concurrency {p.concurrency} (the latency runs) then "
                            f"{', '.join(map(str, p.throughput_concurrencies))}, {p.throughput_waves} x concurrency "
                            f"requests each, {self.out_tokens} output tokens; throughput over each level's steady "
                            "window (§5.2.3.2: the send window less its first 10 %, the drain after the last "
                            "submission excluded): output tokens arriving in it / its length",
                            f"the sweep ends at a plateau (gain < {p.plateau_gain:.0%} over the best level), at a level "
                            f"where more than {p.max_error_rate:.1%} of the requests failed (max_error_rate; such a "
                            "level is never the maximum), or at the time budget; '>=' marks a lower bound"])

    def checks(self, out: Outcome) -> dict[str, Check]:
        checks = item_checks(self.p, self.lengths, self.out_tokens, self.n_min, self.fit, self.declaration)
        checks.update(_standing_checks(self.lengths, self.custom_why))
        short = [f"{L} ({sw.stopped})" for L, sw in self.sweeps.items() if not sw.is_maximum]
        checks["5.9.4-REPORT-4"] = (
            decide("5.9.4-REPORT-4", ok=not (bool(short)), unmet="maximum throughput not reached at " + "; ".join(short)
                        + ": lower bounds reported", met="maximum throughput per length from a concurrency sweep to a plateau or "
                      "to failures"))
        return checks


def _as_standing(decl: dict[str, Any], lengths: list[int], why: list[str]) -> dict[str, Any]:
    """The workload declaration as 5.9 runs it: the standard Long Context workload (no reason), else a
    custom one derived from it, named with its reasons (as ``sample.as_run`` names an altered one)."""
    w = dict(decl)
    if not why:
        a5 = [L for L in lengths if L >= A5_MIN]
        w.update(standard=True, custom=False, notes=[*w.get("notes", []), (
            f"counts as the standard Long Context workload (5.9.2-MUST-1, our reading): it includes the App. A.5 "
            f"length(s) {', '.join(map(str, a5))}; §5.9.2's sequence extends A.5 below 8K")])
        return w
    w.update(name=f"long-context (custom: {'; '.join(why)})", custom=True, standard=False, base="long-context",
             altered_by=list(why))
    return w


def _standing_checks(lengths: list[int], why: list[str]) -> dict[str, Check]:
    """5.9.2-MUST-1 and 4.3.2-MUST-2 (the Long Context workload REQUIRED) and 4.3.2-PARAM-6 (its
    definition), decided alike from the run's standing (module doc), so that they never disagree."""
    a5 = [L for L in lengths if L >= A5_MIN]
    met = (f"Long Context workload ([document][question], output 256 forced) including the App. A.5 length(s) "
           f"{', '.join(map(str, a5))}")
    unmet = f"Long Context structure, but a custom workload: {'; '.join(why)}"
    checks = {rid: decide(rid, ok=not why, met=met, unmet=unmet, lengths=list(lengths))
              for rid in ("5.9.2-MUST-1", "4.3.2-MUST-2")}
    # the workload's definition, from the requests sent (as pipeline.reference_checks decides the others)
    checks["4.3.2-PARAM-6"] = decide("4.3.2-PARAM-6", ok=not why, met=met, unmet=unmet, lengths=list(lengths),
                                     source="measured")
    return checks


def item_checks(p: LongContextParams, lengths: list[int], out_tokens: int, n_min: int, fit: ScalingFit | None,
            declaration: dict[str, Any]) -> dict[str, Check]:
    return {
        "5.9.2-PARAM-1": decide("5.9.2-PARAM-1", ok=True, met=f"context lengths {lengths}"),
        "5.9.2-PARAM-2": (decide("5.9.2-PARAM-2", ok=out_tokens == DRAFT_OUTPUT_TOKENS, met=f"fixed output {out_tokens} tokens (forced)", unmet=f"output fixed at {out_tokens} tokens, not "
                                      f"{DRAFT_OUTPUT_TOKENS} (profile/parameter cap)")),
        "5.9.2-PARAM-3": (decide("5.9.2-PARAM-3", ok=p.concurrency <= MAX_CONCURRENCY, met=f"closed loop at concurrency {p.concurrency}", unmet=f"concurrency {p.concurrency} > {MAX_CONCURRENCY}")),
        "5.9.2-PARAM-4": (decide("5.9.2-PARAM-4", ok=n_min >= MIN_REQUESTS_PER_LENGTH, met=f">= {MIN_REQUESTS_PER_LENGTH} successful requests per length "
                                    f"(min {n_min})", unmet=f"only {n_min} successful requests at some length "
                                      f"(< {MIN_REQUESTS_PER_LENGTH}; profile requests_per_length = "
                                      f"{p.requests_per_length})")),
        "5.9.3-PARAM-1": decide("5.9.3-PARAM-1", ok=True, met=f"warm-up with {p.warmup_input_tokens}-token prompts"),
        "5.9.3-PARAM-2": decide("5.9.3-PARAM-2", ok=True, met="lengths run in ascending order at low concurrency; TTFT and "
                                   "E2E recorded per request"),
        "5.9.3-PARAM-3": (decide("5.9.3-PARAM-3", ok=fit is not None, met="power-law (log-log) and linear fits", unmet="no fit: fewer than two lengths with data")),
        "5.9.4-REPORT-1": decide("5.9.4-REPORT-1", ok=True, met="TTFT mean, P50, P95 per length"),
        "5.9.4-REPORT-2": decide("5.9.4-REPORT-2", ok=True, met="ms per 1K input tokens per length"),
        "5.9.4-REPORT-3": decide("5.9.4-REPORT-3", ok=fit is not None, unmet="no fit",
                                 met=fit and f"k = {fit.exponent:.3f}, R^2 = {fit.r2_loglog:.4f}"),
        "5.9.5-REPORT-1": decide("5.9.5-REPORT-1", ok=True, met="Table 12 and the best-fit statement"),
    }


