"""§5.6 Scheduling Fairness: per-class latency, inflation, Jain's index, starvation.

Procedure (§5.6.3): configure and warm up; baseline each class in isolation; run the mixed
Synthetic-Skewed workload (short/long classes, e.g. 80/20) at 70–90 % of saturation for
>= 300 s with >= 500 requests per class; every record carries its class, submission,
first-token and completion times; then per-class statistics and fairness metrics (§5.6.4).

How the draft's words are read (declared in the report):

* **Saturation of this mix (§5.6.2 "70-90% of saturation throughput").** With
  ``capacity="mix-probe"`` (default) and a ``capacity_fraction`` load, the saturation throughput
  is measured on the class mix itself: a closed-loop probe at ``probe_concurrency`` for
  ``probe_duration_s`` on requests of the same mix (own seed stream, never the measured prompts),
  its completion rate over the steady window. ``capacity="session"`` takes the session's
  request-rate capacity instead (declared, or 5.2 on its own workload: another request shape).
* **Isolation "at same total load" (§5.6.3 step 2).** ``isolation="total"`` (default) runs as
  many requests of the class as the mixed run has, alone, at the mixed run's total request rate.
  ``isolation="class-share"`` (not the draft's) runs them at the class's share of that rate.
  The isolated requests come from the class's own seed stream (``isolated``, one per class) with
  the same per-class length distributions, never the mixed run's prompts: a mixed run that replayed
  them could be served from the prefix cache the isolated runs filled, on any server whose cache
  cannot be flushed (issue 36).
* **Jain's index (§5.6.4).** Over requests, as the draft defines it: ``x_i`` = the normalised
  latency of request ``i`` of the mixed run = its TTFT / the TTFT P50 of its class in isolation,
  ``n`` = the successful requests, ``J = (sum x_i)^2 / (n * sum x_i^2)`` (Table 9's figure, the
  0.9 threshold). A per-class variant (``x_c`` = the class's TTFT P50 inflation, ``n`` = classes)
  is reported as ``jain_index_per_class``, secondary.
* **Starvation "wait".** The client-observed TTFT (available for every SUT): the fraction of a
  class's requests whose TTFT exceeds 5x the class median (Wilson interval).
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
from ..compliance import Check, decide
from ..loadgen.warmup import WarmupResult
from ..measure.registry import declare, figure
from ..measure.stats import jain_index, latency_inflation, slowdown, starvation_rate
from ..measure.summary import RunMetrics, summarize
from ..measure.units import Cell, CellValue
from ..workloads import FAIRNESS_CLASSES, build_workload
from ..workloads.standard import mix_counts  # the workload's own class-count rule
from .base import CannotMeasure
from .budget import PROBE_FIT, level_requests
from .capacity import search_saturation
from .helpers import cap_output, pvalue, queue_trend, reported
from .loads import LoadSpec, poisson, resolve_load
from .pipeline import Outcome, ProcedureRun
from .prompts import failure_cause
from .result import Finding, Overlays, RunSummary, Series, Table
from .run import Measured

MIN_PER_CLASS = draft.value("fairness.min_requests_per_class")  # §5.6.2
MIN_DURATION_S = draft.value("fairness.min_duration_s")  # §5.6.3 step 4
LOAD_BAND = draft.value("fairness.load_band")  # §5.6.2 RECOMMENDED fraction of saturation
ISOLATION_MODES = ("total", "class-share")
CAPACITY_MODES = ("mix-probe", "session")


@dataclass
class FairnessParams:
    """§5.6.2 setup parameters; defaults are the draft's minimums (the ``standard`` profile)."""

    workload: str = "synthetic-skewed"
    mix: dict[str, float] = field(default_factory=lambda: {"short": 0.8, "long": 0.2})
    load: LoadSpec = field(default_factory=lambda: poisson(capacity_fraction=0.8))
    requests_per_class: int = MIN_PER_CLASS
    duration_s: float = MIN_DURATION_S
    isolation: str = "total"  # §5.6.3 step 2: each class alone "at same total load"
    capacity: str = "mix-probe"  # saturation of this mix for capacity_fraction loads (module doc)
    probe_concurrency: int = 64  # closed-loop probe of the mix's saturation throughput
    probe_duration_s: float = 20.0
    starvation_factor: float = 5.0
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded

    def validate(self) -> None:
        if self.workload != "synthetic-skewed":
            raise ValueError(f"5.6 REQUIRES the Synthetic-Skewed workload with request classes (§5.6.2), "
                             f"got workload={self.workload!r}")
        if not isinstance(self.load, LoadSpec) or self.load.model != "open" or self.load.shape is not None:
            raise ValueError("load must be open loop at one rate: poisson(...), uniform(...) or bursty(...) "
                             "(§5.6 loads the SUT at a fraction of its saturation throughput; no rate shape)")
        if not isinstance(self.mix, dict) or len(self.mix) < 2:
            raise ValueError(f"mix must name >= 2 request classes (§5.6.2), got {self.mix!r}")
        unknown = sorted(set(self.mix) - set(FAIRNESS_CLASSES))
        if unknown:
            raise ValueError(f"mix names unknown classes {unknown}; defined: {sorted(FAIRNESS_CLASSES)}")
        if any(not (isinstance(w, (int, float)) and w > 0) for w in self.mix.values()):
            raise ValueError(f"mix weights must be > 0, got {self.mix!r}")
        if self.requests_per_class < 1:
            raise ValueError(f"requests_per_class must be >= 1, got {self.requests_per_class}")
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {self.duration_s}")
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {self.isolation!r}")
        if self.capacity not in CAPACITY_MODES:
            raise ValueError(f"capacity must be one of {CAPACITY_MODES}, got {self.capacity!r}")
        if self.probe_concurrency < 1 or not self.probe_duration_s > 0:
            raise ValueError("probe_concurrency must be >= 1 and probe_duration_s > 0")
        if not self.starvation_factor > 1:
            raise ValueError(f"starvation_factor must be > 1, got {self.starvation_factor}")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {self.max_output_tokens}")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.6')  # data/profiles.yaml

#: The figures of this procedure's result an SLO may name (§5.6.4), e.g. in ``assert_slo``; each reads
#: one of the result's measurements (scaled to the base unit), not a run's records.
declare(
    figure("jain_index", "Jain's fairness index", "ratio", "higher", "Jain's index over the requests' TTFT slowdowns "
           "in the mixed run: 1 = every request served alike", "§5.6.4", "jain_index", count="jain_index_n"),
    figure("short_class_ttft_p99", "Short-class TTFT P99", "s", "lower", "TTFT P99 of the short class in the mixed run",
           "§5.6.4", "short_ttft_p99_ms", 1e-3, count="short_count"),
    figure("short_class_starvation_rate", "Short-class starvation rate", "fraction", "lower", "share of the short "
           "class's requests whose TTFT exceeds 5x the class median in the mixed run", "§5.6.4", "short_starvation_rate",
           count="short_count"),
)


def _shares(mix: dict[str, float]) -> dict[str, float]:
    total = float(sum(mix.values()))
    return {k: v / total for k, v in mix.items()}


MIN_BUDGET_REQUESTS = 10  # a time budget never cuts the mixed run below this (about two long requests)


def mixed_count(p: FairnessParams, rate: float) -> int:
    """Requests for the mixed run: >= requests_per_class per class and a send window >= duration_s."""
    shares = _shares(p.mix)
    by_class = math.ceil(p.requests_per_class / min(shares.values()))
    while min(mix_counts(by_class, p.mix).values()) < p.requests_per_class:  # rounding of exact class counts
        by_class += 1
    expected = rate * p.duration_s
    spread = (p.load.cv or 1.0) if p.load.arrival != "uniform" else 0.0
    by_time = math.ceil(expected + 3.0 * spread * math.sqrt(expected)) + 1  # Poisson margin: window >= duration
    return max(by_class, by_time)


def _class_metrics(m: Measured, cls: str) -> RunMetrics | None:
    recs = [r for r in m.records if r.request_class == cls]
    if not recs:
        return None
    return summarize(recs, itl_option=m.metrics.itl_option)


def _ttft(metrics: RunMetrics | None) -> np.ndarray:
    if metrics is None:
        return np.array([])
    v = metrics.per_request_values("ttft")
    return v[np.isfinite(v)]


def _factor(x: float | None) -> CellValue:
    """An inflation factor for a table: ``1.25x`` (``n/a`` when undefined)."""
    return "n/a" if x is None or not math.isfinite(x) else [Cell(x, "ratio", 2), "x"]


#: Jain index per request below which the headline calls the run unfair (§5.6.4)
JAIN_WARN = 0.8
#: TTFT inflation (mixed / isolated P99) above which the headline names the class
INFLATION_WARN = 2.0


def warnings(meas: Mapping[str, Any]) -> list[Finding]:
    """Unfairness the reader must see next to the verdict: a low Jain index, a class's TTFT P99
    inflated by the mix, a queue that grew during the mixed run (§5.6.4)."""
    out = []
    jain = meas.get("jain_index_per_request")
    if isinstance(jain, (int, float)) and jain < JAIN_WARN:
        out.append(Finding("unfair", f"Jain index per request {jain:.2f}"))
    for cls in ("short", "long"):
        infl = meas.get(f"{cls}_inflation_p99")
        if isinstance(infl, (int, float)) and infl > INFLATION_WARN:
            out.append(Finding("unfair", f"{cls} requests' TTFT P99 inflated {infl:.1f}x by the mix"))
    if meas.get("mixed_queue_growing"):
        out.append(Finding("overloaded", "queue grew during the mixed run (above saturation)"))
    return out


def overlays(runs: Sequence[RunSummary]) -> Overlays:
    """Per class, its TTFT in the mixed run and run on its own (dashed), one colour per class (§5.6.4)."""
    mixed = next((r for r in runs if r.label == "mixed"), None)
    series = []
    for i, r in enumerate(r for r in runs if r.extra.get("class") is not None):
        cls = str(r.extra["class"])
        if mixed is not None:
            series.append(Series(f"{cls}, mixed", mixed.label, group=i, request_class=cls))
        series.append(Series(f"{cls}, isolated", r.label, group=i, dashed=True))
    return Overlays("request class", ["ttft"], "§5.6.4", series)


class Fairness(ProcedureRun[FairnessParams]):
    """§5.6.3: each class in isolation on its own prompts, then the mixed run; Tables 8, 9."""

    id, title, params_type, profiles = "5.6", "Scheduling Fairness", FairnessParams, PROFILES
    measurement_keys = (
        "mixed_rate_rps", "requests", "mixed_window_s", "isolation", "jain_index", "jain_index_per_request",
        "jain_index_n", "jain_index_per_class", "capacity_mode", "capacity_rate_rps", "capacity_source", "errors",
        "mixed_queue_growing")
    #: per request class of the mix (its names are parameters)
    measurement_patterns = (r".+_(count|isolated_rate_rps|inflation_p50|inflation_p99|starvation_rate)",
                            r".+_(isolated_)?ttft_p[0-9]+_ms", r".+_tpot_p[0-9]+_ms")

    @staticmethod
    def plan(p: FairnessParams) -> dict[str, Any]:
        shares = _shares(p.mix)
        n = math.ceil(p.requests_per_class / min(shares.values()))
        probe = p.probe_duration_s if p.load.rate is None and p.capacity == "mix-probe" else 0.0
        return {"requests": 2 * n + p.warmup_requests, "min_duration_s": 3 * p.duration_s + probe}

    async def prepare(self) -> None:
        p, ctx = self.p, self.ctx
        self.classes = sorted(p.mix, key=lambda c: (-p.mix[c], c))  # largest share first
        self.shares = _shares(p.mix)
        self.probe: Measured | None = None
        self.probes: list[Measured] = []  # the saturation search's runs (capacity='mix-probe')
        self.capacity_standing: str | None = None
        self.flushed: list[bool] = []
        self.isolated: dict[str, Measured] = {}
        self.rate: float | None = None
        self.load_desc: dict[str, Any] = p.load.to_json()
        if p.load.rate is not None or p.capacity == "session":
            load, self.load_desc = await resolve_load(ctx, p.load, max_requests=1, seed=self.seeds.derive("arrivals"))
            self.rate = load.arrival.rate  # type: ignore[union-attr]
            self._build()

    def _build(self) -> None:
        """The mixed run's requests and loads, once the rate is known."""
        p, ctx, rate = self.p, self.ctx, self.rate
        assert rate is not None
        # within a time budget, the isolated runs and the mixed run (twice the mixed run's requests at
        # this rate in all, isolation "total") get what the remaining budget holds, never fewer than
        # MIN_BUDGET_REQUESTS; the cut is a noted reduction below the per-class minimum
        n = level_requests(ctx, "5.6 mixed and isolated runs", rate, mixed_count(p, rate),
                           min_requests=MIN_BUDGET_REQUESTS, levels_left=2)
        self.wl = build_workload(p.workload, n=n, seed=self.seeds.derive("measure"),
                                 tokenizer=ctx.tokenizer, classes=FAIRNESS_CLASSES, mix=dict(p.mix))
        self.specs = cap_output(self.wl.specs, p.max_output_tokens)
        self.by_class = {c: [s for s in self.specs if s.request_class == c] for c in self.classes}
        # §5.6.3 step 2: each class's baseline on prompts of its own seed stream, as many as the mixed run
        # has of the class, from the same class distributions (a single-class mix of the same workload)
        self.iso_specs = {c: cap_output(build_workload(p.workload, n=len(self.by_class[c]),
                                                       seed=self.seeds.derive("isolated", k), tokenizer=ctx.tokenizer,
                                                       classes=FAIRNESS_CLASSES, mix={c: 1.0}).specs,
                                        p.max_output_tokens) if self.by_class[c] else []  # none mixed, none alone
                          for k, c in enumerate(self.classes, start=1)}
        self.fixed = dataclasses.replace(p.load, rate=rate, capacity_fraction=None)
        self.iso_rates = {c: rate * (self.shares[c] if p.isolation == "class-share" else 1.0) for c in self.classes}

    async def _probe_mix_capacity(self, client: LLMClient) -> None:
        """The saturation throughput of this class mix (§5.6.2): a short search of closed loops from
        ``probe_concurrency``, doubling while the completion rate still rises by 10 % (``search_saturation``),
        each for ``probe_duration_s`` on requests of the mix from their own seed stream; the best completion
        rate over the steady window (first 10 % excluded) is the capacity the load fraction applies to, a lower
        bound when the search found no plateau (5.6.2-SHOULD-1 then says so)."""
        p, ctx = self.p, self.ctx

        def specs_for(d: float, stream: int, c: int) -> list[Any]:  # d: the window, longer on a slow SUT
            wl = build_workload(p.workload, n=3 * c + math.ceil(30 * d), tokenizer=ctx.tokenizer,
                                seed=self.seeds.derive("capacity-probe", stream), classes=FAIRNESS_CLASSES,
                                mix=dict(p.mix))
            return cap_output(wl.specs, p.max_output_tokens)

        search = await search_saturation(functools.partial(self.measure, client), ctx, self.id, self.warmup,
                                         "capacity-probe", specs_for, p.probe_concurrency, p.probe_duration_s,
                                         {"mix": dict(p.mix)})
        probe = search.best
        self.probes = [pr.measured for pr in search.probes]
        self.probe, self.probe_repeats, cap = probe.measured, sum(pr.repeats for pr in search.probes), probe.rate
        self.capacity_standing = search.standing
        if not cap or not math.isfinite(cap):
            history = probe.lengthened.history(PROBE_FIT) if probe.lengthened else ""
            raise CannotMeasure("5.6: the capacity probe on the class mix completed no request: "
                                f"{failure_cause(self.probe.records)}{history}. Or declare the load as an absolute "
                                "rate or use capacity='session'")
        fraction = p.load.capacity_fraction
        assert fraction is not None
        self.rate = fraction * cap
        self.load_desc.update(resolved_rate=self.rate, capacity_rate=cap, capacity_standing=search.standing,
                              capacity_source=search.describe("this class mix"))

    async def _resolve_mixed_load(self) -> None:
        self.mixed_load, _ = await resolve_load(self.ctx, self.fixed, max_requests=len(self.specs),
                                                seed=self.seeds.derive("arrivals"))

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        """Step 1 (§4.5): requests of the same shape, other prompts (own stream): the measured prompts
        must not be in a prefix cache before their run."""
        p = self.p
        wu = build_workload(p.workload, n=max(p.warmup_requests, 10), seed=self.seeds.derive("warmup"),
                            tokenizer=self.ctx.tokenizer, classes=FAIRNESS_CLASSES, mix=dict(p.mix))
        return await self.warm_up_with(client, cap_output(wu.specs, p.max_output_tokens))

    async def run_loads(self, client: LLMClient) -> None:
        p, ctx = self.p, self.ctx
        if self.rate is None:  # capacity_fraction of this mix's own saturation throughput
            await self._probe_mix_capacity(client)
            self._build()
        await self._resolve_mixed_load()
        # step 2: each class in isolation (requests of the class from its own seed stream)
        for k, c in enumerate(self.classes, start=1):
            iso_load, _ = await resolve_load(ctx, dataclasses.replace(self.fixed, rate=self.iso_rates[c]),
                                             max_requests=len(self.iso_specs[c]),
                                             seed=self.seeds.derive("isolated-arrivals", k))
            self.flushed.append(ctx.configure_sut("flush_prefix_cache", True))
            self.isolated[c] = await self.measure(client, f"isolated-{c}", self.iso_specs[c], iso_load, sized=True,
                                                  extra={"class": c, "rate": self.iso_rates[c],
                                                         "isolation": p.isolation})
        # steps 3-5: the mixed run, on prompts no isolated run sent; a flush still empties what they cached
        self.flushed.append(ctx.configure_sut("flush_prefix_cache", True))
        self.mixed = await self.measure(client, "mixed", self.specs, self.mixed_load, sized=True,
                                        extra={"load_spec": self.load_desc, "rate": self.rate,
                                               "mix": dict(p.mix)})

    def summarize(self) -> Outcome:
        """Step 6: per-class statistics and fairness (§5.6.4)."""
        classes, mixed, isolated = self.classes, self.mixed, self.isolated
        self._fairness()
        meas = self._measurements()
        plots_cls = {c: {"ttft_p50_s": pvalue(mc, "ttft", 50) if mc else None,
                         "ttft_p99_s": pvalue(mc, "ttft", 99) if mc else None,
                         "isolated_ttft_p50_s": pvalue(ic, "ttft", 50),
                         "isolated_ttft_p99_s": pvalue(ic, "ttft", 99),
                         "tpot_p50_s": pvalue(mc, "tpot", 50) if mc else None}
                     for c in classes for mc, ic in [(self.mixed_cls[c], self.iso_cls[c])]}
        notes = self._notes(meas)
        self.t8, self.t9 = self._tables8_9()
        self.t_inflation = self._table_inflation()
        return Outcome(metrics=mixed.metrics, tables=[self.t8, self.t9, self.t_inflation],
                       measurements=meas, workload=self.wl.declaration.to_json(), notes=notes,
                       plots={"classes": plots_cls},
                       runs=list(self.probes) + [isolated[c] for c in classes] + [mixed],
                       fact_runs=[mixed, *isolated.values()], facts={"itl_reported": True},
                       warnings=warnings(meas), overlays=overlays([m.summary for m in (
                           list(self.probes) + [isolated[c] for c in classes] + [mixed])]))

    def _fairness(self) -> None:
        p, classes, mixed, isolated = self.p, self.classes, self.mixed, self.isolated
        self.mixed_cls = mixed_cls = {c: _class_metrics(mixed, c) for c in classes}
        self.iso_cls = iso_cls = {c: isolated[c].metrics for c in classes}
        mixed_ttft = {c: _ttft(mixed_cls[c]) for c in classes}
        iso_ttft = {c: _ttft(iso_cls[c]) for c in classes}
        have = [c for c in classes if mixed_ttft[c].size and iso_ttft[c].size]
        infl50 = latency_inflation({c: mixed_ttft[c] for c in have}, {c: iso_ttft[c] for c in have}, p=50) if have else {}
        infl99 = latency_inflation({c: mixed_ttft[c] for c in have}, {c: iso_ttft[c] for c in have}, p=99) if have else {}
        jain_cls = jain_index([infl50[c] for c in have]) if len(have) == len(classes) else math.nan
        ok_rows = mixed.metrics.per_request
        row_cls = ok_rows["request_class"]
        row_ttft = ok_rows["ttft"]
        sel = np.isfinite(row_ttft.astype(np.float64)) & np.isin(row_cls, have)
        base50 = {c: float(np.percentile(iso_ttft[c], 50)) for c in have}
        if sel.any() and all(v > 0 for v in base50.values()):
            jain_req = jain_index(slowdown(row_ttft[sel].astype(np.float64), list(row_cls[sel]), base50))
        else:
            jain_req = math.nan
        waits = [v for c in classes for v in mixed_ttft[c]]
        labels = [c for c in classes for _ in mixed_ttft[c]]
        starve = starvation_rate(waits, labels, factor=p.starvation_factor) if waits else {}
        # §5.6.4: J over the requests (x_i = normalised latency of request i); the class-level J is secondary
        self.infl50, self.infl99, self.jain, self.jain_cls, self.starve = infl50, infl99, jain_req, jain_cls, starve
        self.jain_n = int(sel.sum())

    def _tables8_9(self) -> list[Table]:
        p, classes, shares, mixed_cls = self.p, self.classes, self.shares, self.mixed_cls
        jain, jain_cls, starve = self.jain, self.jain_cls, self.starve
        t8_rows = []
        for c in classes:
            mc = mixed_cls[c]
            t8_rows.append([c.capitalize(), Cell(0 if mc is None else mc.distributions["ttft"].n, "requests"),
                            *(Cell(pvalue(mc, name, q) if mc else None, "s")
                              for name, q in (("ttft", 50), ("ttft", 99), ("tpot", 50), ("tpot", 99)))])
        table8 = Table("Table 8: Per-Class Results", ["Class", "Count", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99"],
                       t8_rows, notes=[
                           "mixed run; Count = successful requests of the class; TPOT = (E2E - TTFT) / (output tokens - 1)",
                           *(f"{c}: input [{FAIRNESS_CLASSES[c].input_min}, {FAIRNESS_CLASSES[c].input_max}], output "
                             f"[{FAIRNESS_CLASSES[c].output_min}, {FAIRNESS_CLASSES[c].output_max}] tokens, "
                             f"{shares[c]:.0%} of requests" for c in classes)])
        table9 = Table("Table 9: Fairness Metrics", ["Metric", "Value"],
                       [["Jain's Fairness Index", Cell(jain, "ratio", 2)]]
                       + [[f"{c.capitalize()} Class Starvation", Cell(starve[c].value if c in starve else None,
                                                                     "fraction", 1)]
                          for c in classes]
                       + [[f"Jain's index over the {len(classes)} classes (secondary)", Cell(jain_cls, "ratio", 2)]],
                       notes=[(f"Jain's Fairness Index over the n = {self.jain_n} successful requests of the mixed "
                               "run (§5.6.4): x_i = normalised latency = TTFT_i / the TTFT P50 of request i's class in "
                               "isolation; J = (sum x_i)^2 / (n * sum x_i^2); J < 0.9 = significant unfairness. Over "
                               "requests, J also falls with the spread of TTFT within a class"),
                              (f"secondary: Jain's index over the classes, x_c = the class's TTFT P50 inflation (mixed "
                               f"/ isolated), in [1/{len(classes)}, 1]: 1 when every class is slowed down alike"),
                              (f"starvation: fraction of a class's requests whose TTFT exceeds {p.starvation_factor:g}x "
                              "the class's median TTFT in the mixed run ('wait' read as TTFT)")])
        if not math.isnan(jain) and jain < 0.9:
            table9.notes.append(f"J = {jain:.2f} < 0.9: significant unfairness (§5.6.4)")
        return [table8, table9]

    def _table_inflation(self) -> Table:
        p, classes, rate, iso_rates = self.p, self.classes, self.rate, self.iso_rates
        mixed_cls, iso_cls, infl50, infl99 = self.mixed_cls, self.iso_cls, self.infl50, self.infl99
        iso_desc = ("each class alone at its share of the mixed request rate" if p.isolation == "class-share"
                    else "each class alone at the mixed run's total request rate")
        rows_inf = []
        for c in classes:
            mc, ic = mixed_cls[c], iso_cls[c]
            rows_inf.append([c.capitalize(),
                             *(Cell(pvalue(mc, "ttft", q) if mc else None, "s") for q in (50, 95, 99)),
                             *(Cell(pvalue(ic, "ttft", q), "s") for q in (50, 95, 99)),
                             _factor(infl50.get(c)), _factor(infl99.get(c))])
        return Table("Per-class TTFT, mixed vs isolated, and latency inflation (§5.6.4)",
                          ["Class", "Mixed P50", "Mixed P95", "Mixed P99", "Isolated P50", "Isolated P95",
                           "Isolated P99", "Inflation P50", "Inflation P99"], rows_inf,
                          notes=[(f"isolation baseline: {iso_desc} ({', '.join(f'{c} {iso_rates[c]:.2f} req/s' for c in classes)}"
                                 f"; mixed {rate:.2f} req/s), as many requests of the class as the mixed run has, drawn from the "
                                 "class's own seed stream (same length distributions, other prompts)"),
                                 "inflation = mixed-run TTFT / isolated TTFT at the same percentile"])

    def _measurements(self) -> dict[str, Any]:
        p, classes, mixed, rate, iso_rates = self.p, self.classes, self.mixed, self.rate, self.iso_rates
        mixed_cls, iso_cls, infl50, infl99 = self.mixed_cls, self.iso_cls, self.infl50, self.infl99
        jain, jain_cls, starve = self.jain, self.jain_cls, self.starve
        assert rate is not None
        meas: dict[str, Any] = {"mixed_rate_rps": round(rate, 4), "requests": len(mixed.records),
                                "mixed_window_s": round(mixed.load.send_window_s, 3), "isolation": p.isolation,
                                "jain_index": None if math.isnan(jain) else round(jain, 4),
                                "jain_index_per_request": None if math.isnan(jain) else round(jain, 4),
                                "jain_index_n": self.jain_n,
                                "jain_index_per_class": None if math.isnan(jain_cls) else round(jain_cls, 4),
                                "capacity_mode": p.capacity if p.load.rate is None else "absolute rate",
                                "capacity_rate_rps": self.load_desc.get("capacity_rate"),
                                "capacity_source": self.load_desc.get("capacity_source"),
                                "errors": sum(mixed.metrics.errors_by_type.values())}
        for c in classes:
            mc, ic = mixed_cls[c], iso_cls[c]
            meas[f"{c}_count"] = 0 if mc is None else mc.distributions["ttft"].n
            meas[f"{c}_isolated_rate_rps"] = round(iso_rates[c], 4)
            for q in (50, 95, 99):
                v, vi = (pvalue(mc, "ttft", q) if mc else None), pvalue(ic, "ttft", q)
                meas[f"{c}_ttft_p{q}_ms"] = None if v is None else round(v * 1000, 3)
                meas[f"{c}_isolated_ttft_p{q}_ms"] = None if vi is None else round(vi * 1000, 3)
            for q in (50, 99):
                v = pvalue(mc, "tpot", q) if mc else None
                meas[f"{c}_tpot_p{q}_ms"] = None if v is None else round(v * 1000, 3)
            meas[f"{c}_inflation_p50"] = round(infl50[c], 4) if c in infl50 else None
            meas[f"{c}_inflation_p99"] = round(infl99[c], 4) if c in infl99 else None
            meas[f"{c}_starvation_rate"] = round(starve[c].value, 5) if c in starve else None
        return meas

    def _notes(self, meas: dict[str, Any]) -> list[str]:
        p, mixed, isolated, load_desc = self.p, self.mixed, self.isolated, self.load_desc
        # §5.2.3.1 rule 1 as 5.2/5.3 apply it (helpers.queue_trend): a significant slope over the steady
        # window AND a material rise; slope significance alone flags a steady queue ~5 % of the time or
        # more (queue samples are autocorrelated). Only the server's waiting gauge counts here.
        trend = queue_trend(mixed, arrivals=len(mixed.records)) if mixed.queue_samples else None
        self.overloaded = overloaded = trend.growing if trend is not None and trend.samples >= 3 else None
        meas["mixed_queue_growing"] = overloaded
        notes: list[str] = []
        if overloaded:
            notes.append("the SUT's waiting queue grew during the mixed run: this class mix at this rate is above "
                         "the SUT's saturation, and the fairness figures include unbounded queueing (lower "
                         "capacity_fraction or declare the capacity of this mix)")
        if not all(self.flushed):
            notes.append("the prefix cache could not be flushed before each run (no hook for flush_prefix_cache): "
                         "the isolated and mixed runs send different prompts (own seed streams), so only prefixes "
                         "they share by chance (a few tokens of random text) can be served from the cache")
        for m in [*isolated.values(), mixed]:
            if not m.summary.valid:
                notes.append(f"run {m.summary.label} invalid: {m.summary.invalid_reason}")
        if p.max_output_tokens is not None:
            notes.append(f"output capped at {p.max_output_tokens} tokens by the profile: classes whose output range "
                         "exceeds it are shortened")
        if "capacity_rate" in load_desc and self.probe is not None:
            notes.append(f"load = {p.load.capacity_fraction:.0%} of this class mix's saturation throughput "
                         f"{load_desc['capacity_rate']:.2f} req/s, from a {load_desc['capacity_source']}"
                         + (f"; {self.probe_repeats} probe requests repeated a prompt" if self.probe_repeats else ""))
        elif "capacity_rate" in load_desc:
            notes.append(f"load = {p.load.capacity_fraction:.0%} of the request-rate capacity {load_desc['capacity_rate']:.2f} "
                         f"req/s ({load_desc.get('capacity_source', '')}): capacity='session' takes a capacity measured "
                         "on another request shape, not on this class mix (capacity='mix-probe' measures the mix)")
        for c, m in isolated.items():
            t = queue_trend(m, arrivals=len(m.records)) if m.queue_samples else None
            if t is not None and t.samples >= 3 and t.growing:
                notes.append(f"the SUT's waiting queue grew during the isolated {c} run: this class alone at "
                             f"{self.iso_rates[c]:.2f} req/s is above saturation, so its baseline includes queueing "
                             "(the draft's 'same total load' for a class heavier than the mix)")
        return notes

    def checks(self, out: Outcome) -> dict[str, Check]:
        p = self.p
        fraction = self.load_desc.get("capacity_fraction") if p.load.rate is None else None
        standing = self.capacity_standing or (self.load_desc.get("capacity_standing") if fraction is not None else None)
        return {**item_checks(p, self.classes, self.shares, self.mixed, self.isolated, self.mixed_cls,
                              (fraction, standing), self.warmup, self.wl.declaration.to_json(), self.overloaded),
                **report_checks(self.classes, self.t8, self.t9, self.t_inflation, out.tables)}


def item_checks(p: FairnessParams, classes: list[str], shares: dict[str, float], mixed: Measured,
            isolated: dict[str, Measured], mixed_cls: dict[str, RunMetrics | None],
            capacity: tuple[float | None, str | None], wu: Any, decl: dict[str, Any],
            overloaded: bool | None) -> dict[str, Check]:
    """``capacity``: the fraction of the saturation capacity the mix ran at and that capacity's standing."""
    fraction, standing = capacity
    c_load = decide("5.6.2-SHOULD-1", fraction=fraction, rate=p.load.rate, queue_growing=overloaded, standing=standing)
    counts = {c: sum(1 for r in mixed.records if r.request_class == c) for c in classes}
    ok_counts = {c: (0 if mixed_cls[c] is None else mixed_cls[c].distributions["ttft"].n) for c in classes}  # type: ignore[union-attr]
    n = sum(counts.values())
    untagged = sum(1 for r in mixed.records if r.request_class is None)
    complete = [r for r in mixed.records if r.ok]
    missing_times = sum(1 for r in complete if r.first_token_ns is None or r.end_ns is None or not r.sent_ns)
    window = mixed.load.send_window_s
    few = {c: k for c, k in ok_counts.items() if k < MIN_PER_CLASS}
    observed = {c: counts[c] / n if n else 0.0 for c in classes}
    mix_ok = n > 0 and all(abs(observed[c] - shares[c]) <= 1.0 / n + 1e-9 for c in classes)
    return {
        "5.6.2-PARAM-1": (decide("5.6.2-PARAM-1", ok=True, met=f"{len(classes)} classes declared ("
                                    + ", ".join(classes) + "); every request tagged", classes=decl.get("classes"))
                          if untagged == 0 else
                          decide("5.6.2-PARAM-1", ok=False, unmet=f"{untagged} requests carry no class")),
        "5.6.2-PARAM-2": (decide("5.6.2-PARAM-2", ok=bool(mix_ok), met="mix " + ", ".join(f"{c} {shares[c]:.0%}" for c in classes)
                                    + "; observed " + ", ".join(f"{c} {observed[c]:.1%}" for c in classes), unmet=f"observed mix {observed} differs from {shares}")),
        "5.6.2-SHOULD-1": c_load,
        "5.6.2-PARAM-3": (decide("5.6.2-PARAM-3", ok=True, met="successful requests per class: "
                                    + ", ".join(f"{c} {k}" for c, k in ok_counts.items()))
                          if not few else
                          decide("5.6.2-PARAM-3", ok=False, unmet=f"{min(few.values())} per class < {MIN_PER_CLASS} "
                                      "(successful requests: " + ", ".join(f"{c} {k}" for c, k in few.items()) + ")",
                                      counts=ok_counts)),
        "5.6.3-PARAM-1": decide("5.6.3-PARAM-1", ok=True, met=f"warm-up: {wu.ok} requests, {wu.output_tokens} output tokens"),
        "5.6.3-PARAM-2": (decide("5.6.3-PARAM-2", ok=p.isolation == "total", met="isolated runs for " + ", ".join(isolated)
                                    + ", each class alone at the mixed run's total request rate (same total load)", unmet="isolated runs for " + ", ".join(isolated) + " at each "
                                      "class's share of the mixed rate (isolation='class-share'), not at the same "
                                      "total load; use isolation='total'")),
        "5.6.3-PARAM-3": (decide("5.6.3-PARAM-3", ok=True, met=f"mixed run submitted requests over {window:.1f} s")
                          if window >= MIN_DURATION_S else
                          decide("5.6.3-PARAM-3", ok=False, unmet=f"mixed run lasted {window:.1f} s < {MIN_DURATION_S:.0f} s", window_s=window)),
        "5.6.3-PARAM-4": (decide("5.6.3-PARAM-4", ok=untagged == 0 and missing_times == 0, met="every record has class, submission, first-token and "
                                    "completion times", unmet=f"{untagged} untagged records, {missing_times} successful "
                                      "records without first-token/completion time")),
    }


def report_checks(classes: list[str], t8: Table, t9: Table, inflation: Table, tables: list[Table]) -> dict[str, Check]:
    """5.6.4/5.6.5 REPORT items, read back from Tables 8 and 9 and the inflation table."""
    starvation = [(t9, f"{c.capitalize()} Class Starvation") for c in classes]
    items = {
        "5.6.4-REPORT-1": ("per-class TTFT P50/P95/P99", [(inflation, f"Mixed P{q}") for q in (50, 95, 99)]),
        "5.6.4-REPORT-2": ("latency inflation per class", [(inflation, "Inflation P50"), (inflation, "Inflation P99")]),
        "5.6.4-REPORT-3": ("Jain's fairness index", [(t9, "Jain's Fairness Index")]),
        "5.6.4-REPORT-4": ("starvation rate per class", starvation),
        "5.6.5-REPORT-1": ("Table 8", [(t8, n) for n in ("Class", "Count", "TTFT P50", "TTFT P99", "TPOT P50",
                                                          "TPOT P99")]),
        "5.6.5-REPORT-2": ("Table 9", [(t9, "Jain's Fairness Index"), *starvation]),
    }
    return {rid: reported(rid, what, needs, tables) for rid, (what, needs) in items.items()}
