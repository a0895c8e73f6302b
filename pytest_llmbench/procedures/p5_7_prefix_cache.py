"""§5.7 Prefix Cache Effectiveness: TTFT and throughput with the prefix cache off, cold and warm.

Procedure (§5.7.3): cache disabled → warm-up that does not populate the cache (a workload with
no prefix in common with the measured one) → run the workload → enable the cache → (flush) cold
run → flush, pre-populate with one request per shared prefix → warm run of the identical
request sequence → compare. Measurements (§5.7.4): TTFT P50/P95/P99 per configuration, TTFT
reduction ``(no_cache − cache) / no_cache``, cache hit rate (prefix tokens served from cache,
from ``usage.prompt_tokens_details.cached_tokens`` and from the server's counters when it
exposes them), and the throughput change. Table 10 has the three rows the draft shows.

The draft gives no load model or request count for 5.7 (requirements.md ambiguity 41): the
default is a closed loop of 4 (so "throughput improvement" means something: below saturation an
open loop's throughput is just its offered rate) and 1000 requests (enough for P99, §5.1.4.3).
The cold run does not pre-populate the cache, which 4.5.1 item 4 asks for (ambiguity 12); the
warm run does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..compliance import Check
from ..records import RequestSpec
from ..workloads import build_workload, completion_prompt_ids, sequence_sha256
from .base import params_json, LoadSpec, Procedure, ProcedureContext, ProcedureResult, SkipProcedure, Table, closed, register
from .common import Measured, client_for, finish, fmt_ms, measure, pvalue, resolve_load, run_facts, warm_up

P99_MIN = 1000  # §5.1.4.3
#: (hit tokens, queried tokens) counter pairs of known servers, first match wins.
HIT_COUNTERS = (
    ("llmbench:prefix_cache_hit_tokens_total", "llmbench:prefix_cache_queried_tokens_total"),
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
)
CONFIGS = ("disabled", "cold", "warm")
ROW_NAMES = {"disabled": "Cache Disabled", "cold": "Cache (Cold)", "warm": "Cache (Warm)"}


@dataclass
class PrefixCacheParams:
    """§5.7.2 setup parameters; the draft sets no count or load, so these are declared choices."""

    workload: str = "code-completion"
    workload_params: dict[str, Any] = field(default_factory=dict)  # e.g. {"dataset": "repo/"} (A.4)
    requests: int = P99_MIN
    load: LoadSpec = field(default_factory=lambda: closed(4))
    warm_run: bool = True  # Table 10's "Cache (Warm)" row: pre-populate the shared prefixes first
    warmup_requests: int = 100
    warmup_tokens: int = 10_000
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded

    def validate(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.requests}")
        if not isinstance(self.load, LoadSpec):
            raise ValueError("load must be poisson(...), uniform(...), bursty(...) or closed(...)")  # noqa: TRY004
        if not isinstance(self.workload_params, dict):
            raise ValueError(  # noqa: TRY004  (make_params turns ValueError into ProcedureError)
                f"workload_params must be a dict, got {type(self.workload_params).__name__}")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {self.max_output_tokens}")


PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {"requests": 120, "warmup_requests": 20, "warmup_tokens": 1500, "max_output_tokens": 16},
    "standard": {},
    "full": {},  # the draft RECOMMENDS only the workload (Code Completion), already the default
}


def plan(p: PrefixCacheParams) -> dict[str, Any]:
    runs = 3 if p.warm_run else 2
    return {"requests": runs * p.requests + p.warmup_requests, "min_duration_s": 0.0}


def _cap_output(specs: list[RequestSpec], cap: int | None) -> list[RequestSpec]:
    if cap is None:
        return specs
    return [dataclasses.replace(s, max_tokens=min(s.max_tokens, cap),
                                min_tokens=None if s.min_tokens is None else min(s.min_tokens, cap))
            for s in specs]


def prefix_specs(specs: list[RequestSpec], tokenizer: Any) -> list[RequestSpec]:
    """One request per distinct shared prefix: exactly the prefix's tokens, 1 output token (§5.7.3 step 5)."""
    out: list[RequestSpec] = []
    seen: set[str] = set()
    for s in specs:
        if s.prefix_id is None or s.prefix_id in seen or s.prefix_tokens < 1:
            continue
        seen.add(s.prefix_id)
        ids = completion_prompt_ids(s, tokenizer)[: s.prefix_tokens]
        out.append(RequestSpec(index=-(len(out) + 1), workload=f"{s.workload}-prefix", input_tokens=len(ids),
                               max_tokens=1, prompt_text=tokenizer.decode(ids), prompt_ids=tuple(ids),
                               prefix_id=s.prefix_id, prefix_tokens=len(ids)))
    return out


@dataclass
class CacheStats:
    """Hit rates of one run: client view (usage.cached_tokens) and server view (/metrics counters)."""

    prefix_tokens: int  # Σ shared-prefix tokens of successful requests that carry a prefix
    cached_prefix_tokens: int  # Σ min(cached_tokens, prefix_tokens) of those requests
    cached_tokens: int  # Σ cached_tokens over successful requests
    prompt_tokens: int  # Σ input tokens over successful requests
    reported: int  # successful requests whose usage carried cached_tokens
    server_hit: float | None
    server_queried: float | None

    @property
    def prefix_hit_rate(self) -> float | None:
        return self.cached_prefix_tokens / self.prefix_tokens if self.prefix_tokens else None

    @property
    def prompt_cached_fraction(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def server_hit_rate(self) -> float | None:
        if self.server_hit is None or not self.server_queried:
            return None
        return self.server_hit / self.server_queried


def cache_stats(m: Measured, prefix_len: dict[int, int]) -> CacheStats:
    ok = [r for r in m.records if r.ok]
    shared = [r for r in ok if prefix_len.get(r.index, 0) > 0]
    hit = queried = None
    for h, q in HIT_COUNTERS:
        dh, dq = m.server_delta(h), m.server_delta(q)
        if dh is not None and dq is not None:
            hit, queried = dh, dq
            break
    return CacheStats(
        prefix_tokens=sum(prefix_len[r.index] for r in shared),
        cached_prefix_tokens=sum(min(r.cached_tokens or 0, prefix_len[r.index]) for r in shared),
        cached_tokens=sum(r.cached_tokens or 0 for r in ok),
        prompt_tokens=sum(r.input_tokens for r in ok),
        reported=sum(1 for r in ok if r.cached_tokens is not None),
        server_hit=hit, server_queried=queried,
    )


def _reduction(base: float | None, new: float | None) -> float | None:
    return None if base is None or new is None or base <= 0 else (base - new) / base * 100.0


def _fmt_pct(v: float | None, signed: bool = False) -> str:
    if v is None or math.isnan(v):
        return "n/a"
    return f"{v:+.1f}%" if signed else f"{v:.1f}%"


def _switch(ctx: ProcedureContext, setting: str, value: Any) -> None:
    if not ctx.configure_sut(setting, value):
        raise SkipProcedure(f"5.7 needs to set {setting}={value!r}: no pytest_llmbench_configure_sut "
                            "implementation can switch the SUT's prefix cache (see docs/prefix-cache.md)")


async def run(ctx: ProcedureContext, p: PrefixCacheParams) -> ProcedureResult:
    started = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    wl = build_workload(p.workload, n=p.requests, seed=ctx.settings.seed, tokenizer=ctx.tokenizer,
                        **p.workload_params)
    specs = _cap_output(wl.specs, p.max_output_tokens)
    prefix_len = {s.index: s.prefix_tokens if s.prefix_id is not None else 0 for s in specs}
    populate = prefix_specs(specs, ctx.tokenizer)
    # warm-up without the workload's prefixes (§5.7.3 step 2): another workload, another seed
    wu_specs = build_workload("synthetic-uniform", n=max(p.warmup_requests, 1), seed=ctx.settings.seed + 7919,
                              tokenizer=ctx.tokenizer).specs
    wu_specs = _cap_output(wu_specs, p.max_output_tokens)
    load, load_desc = await resolve_load(ctx, p.load, max_requests=len(specs))
    # the pool must hold the closed loop and the warm-up's 8 concurrent requests
    conc = max(p.load.concurrency or 1, 8) if p.load.model == "closed" else None
    info = ctx.sut.server_info
    original = info.get("prefix_cache") if "prefix_cache" in info else None
    runs: dict[str, Measured] = {}
    flushed: dict[str, bool] = {}
    notes: list[str] = []
    _switch(ctx, "prefix_cache", False)  # step 1
    try:
        state_off = ctx.sut.server_info.get("prefix_cache")
        async with client_for(ctx, max_connections=conc) as client:
            wu = await warm_up(ctx, client, wu_specs, min_requests=p.warmup_requests,
                               min_output_tokens=p.warmup_tokens)
            runs["disabled"] = await measure(ctx, client, "cache-disabled", specs, load,  # step 3
                                             extra={"prefix_cache": "disabled", "load_spec": load_desc})
            _switch(ctx, "prefix_cache", True)  # step 4
            state_on = ctx.sut.server_info.get("prefix_cache")
            flushed["cold"] = ctx.configure_sut("flush_prefix_cache", True)
            runs["cold"] = await measure(ctx, client, "cache-cold", specs, load,
                                         extra={"prefix_cache": "enabled", "prepopulated": False,
                                                "flushed": flushed["cold"], "load_spec": load_desc})
            population = None
            if p.warm_run:
                flushed["warm"] = ctx.configure_sut("flush_prefix_cache", True)
                if populate:  # step 5: one request per shared prefix, nothing else of the workload
                    population = await warm_up(ctx, client, populate, min_requests=0, min_output_tokens=0,
                                               prefix_specs=populate, label="prefix-population")
                runs["warm"] = await measure(ctx, client, "cache-warm", specs, load,  # step 6
                                             extra={"prefix_cache": "enabled", "prepopulated": bool(populate),
                                                    "flushed": flushed["warm"], "load_spec": load_desc})
    finally:
        ctx.configure_sut("prefix_cache", True if original is None else bool(original))
    if original is None:
        notes.append("the SUT's original prefix-cache setting is unknown; it was left enabled")
    for k, f in flushed.items():
        if not f:
            notes.append(f"the cache could not be flushed before the {k} run (no hook for flush_prefix_cache): "
                         "it may hold prefixes from the previous run")
    if p.warm_run and not populate:
        notes.append("the workload has no shared prefix: nothing to pre-populate for the warm run")
    if p.max_output_tokens is not None:
        notes.append(f"output capped at {p.max_output_tokens} tokens by the profile")
    notes.append("Cache (Cold): cache enabled and flushed, not pre-populated (departs from §4.5.1 item 4 on "
                 "purpose, as Table 10 asks); Cache (Warm): flushed, then one request per shared prefix")
    for k, m in runs.items():
        if not m.summary.valid:
            notes.append(f"{ROW_NAMES[k]} run invalid: {m.summary.invalid_reason}")

    # measurements
    base = runs["disabled"].metrics
    stats = {k: cache_stats(m, prefix_len) for k, m in runs.items()}
    rows10, rows_fx = [], []
    meas: dict[str, Any] = {"requests": len(specs), "shared_prefixes": len(populate),
                            "load": p.load.describe(), "request_sequence_sha256": sequence_sha256(specs)}
    configs_plot: dict[str, dict[str, float | None]] = {}
    tps_base = _tps(base)
    for k, m in runs.items():
        mt = m.metrics
        q = {pq: pvalue(mt, "ttft", pq) for pq in (50, 95, 99)}
        rows10.append([ROW_NAMES[k], *(fmt_ms(q[pq]) for pq in (50, 95, 99))])
        for pq, v in q.items():
            meas[f"{k}_ttft_p{pq}_ms"] = None if v is None else round(v * 1000, 3)
        st = stats[k]
        tps = _tps(mt)
        rps = _rps(mt)
        meas[f"{k}_output_throughput_tps"] = None if tps is None else round(tps, 3)
        meas[f"{k}_request_throughput_rps"] = None if rps is None else round(rps, 4)
        meas[f"{k}_prefix_hit_rate"] = _round(st.prefix_hit_rate)
        meas[f"{k}_prompt_cached_fraction"] = _round(st.prompt_cached_fraction)
        meas[f"{k}_server_hit_rate"] = _round(st.server_hit_rate)
        meas[f"{k}_cached_tokens"] = st.cached_tokens
        meas[f"{k}_server_hit_tokens"] = st.server_hit
        configs_plot[ROW_NAMES[k]] = {f"ttft_p{pq}_s": q[pq] for pq in (50, 95, 99)}
        if k == "disabled":
            continue
        red = {pq: _reduction(pvalue(base, "ttft", pq), q[pq]) for pq in (50, 95, 99)}
        for pq in (50, 95, 99):
            meas[f"{k}_ttft_reduction_p{pq}_pct"] = _round(red[pq], 2)
        thr = _reduction(tps_base, tps)
        meas[f"{k}_throughput_improvement_pct"] = None if thr is None else round(-thr, 2)
        rps_b = _rps(base)
        rthr = _reduction(rps_b, rps)
        meas[f"{k}_request_throughput_improvement_pct"] = None if rthr is None else round(-rthr, 2)
        rows_fx.append([ROW_NAMES[k], *(_fmt_pct(red[pq]) for pq in (50, 95, 99)),
                        _fmt_pct(None if st.prefix_hit_rate is None else st.prefix_hit_rate * 100),
                        _fmt_pct(None if st.server_hit_rate is None else st.server_hit_rate * 100),
                        "n/a" if tps is None else f"{tps:.1f} tok/s",
                        _fmt_pct(None if thr is None else -thr, signed=True)])
    table10 = Table("Table 10: Cache Effectiveness", ["Configuration", "TTFT P50", "TTFT P95", "TTFT P99"], rows10,
                    notes=[(f"identical request sequence in every configuration (sha256 {meas['request_sequence_sha256'][:16]}…), "
                           f"{len(specs)} requests, {p.load.describe()}"),
                           *(f"{ROW_NAMES[k]}: n={m.metrics.distributions['ttft'].n} successful of {len(m.records)}"
                             for k, m in runs.items())])
    decl = wl.declaration.to_json()
    share = decl.get("prefix_sharing") or {}
    table_fx = Table("Prefix cache effect (§5.7.4)",
                     ["Configuration", "TTFT Reduction P50", "TTFT Reduction P95", "TTFT Reduction P99",
                      "Prefix Hit Rate (usage)", "Hit Rate (server)", "Output Throughput", "Throughput Change"],
                     rows_fx,
                     notes=["TTFT reduction = (TTFT_disabled - TTFT_cache) / TTFT_disabled at each percentile",
                            ("prefix hit rate = sum(min(cached_tokens, prefix tokens)) / sum(prefix tokens) over "
                            "successful requests that carry a shared prefix (usage.prompt_tokens_details.cached_tokens)"),
                            "server hit rate = hit tokens / queried tokens counter deltas over the run (all prompts)",
                            f"throughput = steady-state output tok/s of the run ({p.load.describe()}); Cache Disabled: "
                            + ("n/a" if tps_base is None else f"{tps_base:.1f} tok/s"),
                            (f"shared prefixes: {len(populate)} ({share.get('selection', 'n/a')}), lengths "
                            f"{share.get('prefix_lengths', 'n/a')} tokens, sharing fraction "
                            f"{share.get('fraction', 'n/a')}")])
    checks = _checks(p, runs, stats, state_off, state_on, bool(population), specs, decl, wu)
    facts = run_facts(ctx, workload=decl, warmup=wu, measured=list(runs.values()), prefix_caching="enabled",
                      prefix_cache_under_test=True)
    facts.warmup = dataclasses.replace(facts.warmup, prefix_populated=bool(population and population.prefix_requests))
    primary = runs.get("warm") or runs["cold"]
    result = ProcedureResult(
        procedure="5.7", title="Prefix Cache Effectiveness", params=params_json(p), profile=ctx.settings.profile,
        metrics=primary.metrics, runs=[m.summary for m in runs.values()], tables=[table10, table_fx],
        measurements=meas, notes=notes, plots={"configs": configs_plot},
        started=started, finished=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    )
    finish(ctx, result, facts, checks)
    return result


def _tps(m: Any) -> float | None:
    v = m.scalar("output_throughput").value if "output_throughput" in m.scalars else None
    return None if v is None or math.isnan(v) else float(v)


def _rps(m: Any) -> float | None:
    v = m.scalar("request_throughput").value if "request_throughput" in m.scalars else None
    return None if v is None or math.isnan(v) else float(v)


def _round(v: float | None, digits: int = 5) -> float | None:
    return None if v is None or math.isnan(v) else round(v, digits)


def _checks(p: PrefixCacheParams, runs: dict[str, Measured], stats: dict[str, CacheStats], state_off: Any,
            state_on: Any, populated: bool, specs: list[RequestSpec], decl: dict[str, Any], wu: Any) -> dict[str, Check]:
    share = decl.get("prefix_sharing") or {}
    n_shared = sum(1 for s in specs if s.prefix_id is not None)
    observed = n_shared / len(specs) if specs else 0.0
    confirmed = state_off is False and state_on is True
    both = "disabled" in runs and "cold" in runs
    base = runs["disabled"]
    base_ok = base.metrics.distributions["ttft"].n
    digest = sequence_sha256(specs)
    sent_same = len({tuple(sorted(r.index for r in m.records)) for m in runs.values()}) == 1
    reported = any(st.reported or st.server_hit is not None for k, st in stats.items() if k != "disabled")
    return {
        "5.7.2-PARAM-1": (Check.met("5.7.2-PARAM-1", f"{share.get('prefixes', 0)} shared prefixes declared "
                                    f"({share.get('selection', '')})")
                          if n_shared else Check.unmet("5.7.2-PARAM-1", "the workload has no shared prefix")),
        "5.7.2-PARAM-2": (Check.met("5.7.2-PARAM-2", f"prefix lengths {share.get('prefix_lengths')} tokens")
                          if share.get("prefix_lengths") or share.get("length") not in (None, "none") else
                          Check.unmet("5.7.2-PARAM-2", "prefix length not declared")),
        "5.7.2-PARAM-3": Check.met("5.7.2-PARAM-3", f"sharing fraction {share.get('fraction')} declared, "
                                   f"{observed:.1%} observed"),
        "5.7.2-MUST-1": (Check.met("5.7.2-MUST-1", "runs with the prefix cache disabled and enabled"
                                   + ("" if confirmed else " (switched through the configuration hook; the SUT did "
                                      "not report its state)"), disabled_state=state_off, enabled_state=state_on)
                         if both else Check.unmet("5.7.2-MUST-1", "missing the disabled or enabled run")),
        "5.7.3-PARAM-1": Check.met("5.7.3-PARAM-1", f"cache disabled; warm-up on synthetic-uniform ({wu.ok} requests) "
                                   "shares no prefix with the measured workload"),
        "5.7.3-PARAM-2": (Check.met("5.7.3-PARAM-2", f"TTFT recorded for all {base_ok} baseline requests")
                          if base_ok == len(base.records) else
                          Check.unmet("5.7.3-PARAM-2", f"TTFT for {base_ok} of {len(base.records)} baseline requests")),
        "5.7.3-PARAM-3": Check.met("5.7.3-PARAM-3", "cold run: not pre-populated; warm run: "
                                   + ("pre-populated with every shared prefix" if populated else "not run/not populated")),
        "5.7.3-PARAM-4": (Check.met("5.7.3-PARAM-4", f"identical request sequence (sha256 {digest[:16]}…)")
                          if sent_same else
                          Check.unmet("5.7.3-PARAM-4", "the runs did not send the same requests")),
        "5.7.4-REPORT-1": Check.met("5.7.4-REPORT-1", "TTFT P50/P95/P99 with the cache disabled (Table 10)"),
        "5.7.4-REPORT-2": Check.met("5.7.4-REPORT-2", "TTFT P50/P95/P99 with the cache enabled (Table 10)"),
        "5.7.4-REPORT-3": Check.met("5.7.4-REPORT-3", "TTFT reduction per percentile"),
        "5.7.4-REPORT-4": (Check.met("5.7.4-REPORT-4", "hit rate from usage.cached_tokens and/or server counters")
                           if reported else
                           Check.unmet("5.7.4-REPORT-4", "not measurable: the SUT reports neither cached_tokens nor "
                                       "prefix-cache counters")),
        "5.7.4-REPORT-5": Check.met("5.7.4-REPORT-5", f"output throughput change at {p.load.describe()}"),
        "5.7.5-REPORT-1": Check.met("5.7.5-REPORT-1", "Table 10 with rows " + ", ".join(ROW_NAMES[k] for k in runs)),
    }



register(Procedure("5.7", "Prefix Cache Effectiveness", PrefixCacheParams, run, PROFILES, plan))
