"""§5.1 Time to First Token: TTFT distribution under a declared load.

Procedure (§5.1.3): configure, warm up (§4.5), generate load until the request count is reached,
TTFT = T_first − T_submit per request (first *content* token, §5.1.3.1), then P50–P99.9, mean,
min, max (§5.1.4.1), TTFT by input-length bucket and its queue-wait/prefill parts when the
server reports them (§5.1.4.2). Sample-size rules (§5.1.4.3): P99 >= 1000, P99.9 >= 10,000.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..compliance import Check
from ..workloads import build_workload
from .base import params_json, LoadSpec, Procedure, ProcedureContext, ProcedureResult, Table, poisson, register
from .common import (
    client_for,
    finish,
    fmt_ms,
    measure,
    percentile_row,
    resolve_load,
    run_facts,
    sample_list,
    warm_up,
)

P99_MIN, P999_MIN = 1000, 10_000  # §5.1.2 / §5.1.4.3


@dataclass
class TTFTParams:
    """§5.1.2 setup parameters; defaults are the draft's minimums (the ``standard`` profile)."""

    workload: str = "synthetic-uniform"
    requests: int = P999_MIN  # P99.9 is a required 5.1 measurement, so 10,000
    load: LoadSpec = field(default_factory=lambda: poisson(capacity_fraction=0.5))
    warmup_requests: int = 100
    warmup_tokens: int = 10_000
    warmup_probes: int = 3  # probe requests before/after warm-up (§4.5.2); 0 = no verification
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded

    def validate(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.requests}")
        if not isinstance(self.load, LoadSpec):
            raise ValueError("load must be poisson(...), uniform(...), bursty(...) or closed(...)")


PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {"requests": 300, "warmup_requests": 20, "warmup_tokens": 1500, "max_output_tokens": 64},
    "standard": {},
    "full": {},
}


def plan(p: TTFTParams) -> dict[str, Any]:
    return {"requests": p.requests + p.warmup_requests, "min_duration_s": 0.0}


def _cap_output(specs: list[Any], cap: int | None) -> list[Any]:
    if cap is None:
        return specs
    return [dataclasses.replace(s, max_tokens=min(s.max_tokens, cap),
                                min_tokens=None if s.min_tokens is None else min(s.min_tokens, cap))
            for s in specs]


async def run(ctx: ProcedureContext, p: TTFTParams) -> ProcedureResult:
    started = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    wl = build_workload(p.workload, n=p.requests, seed=ctx.settings.seed, tokenizer=ctx.tokenizer)
    specs = _cap_output(wl.specs, p.max_output_tokens)
    load, load_desc = await resolve_load(ctx, p.load, max_requests=len(specs))
    # closed loop: a pool of at least N connections (and of the warm-up's concurrency, 8)
    conc = max(p.load.concurrency, 8) if p.load.model == "closed" and p.load.concurrency else None
    async with client_for(ctx, max_connections=conc) as client:
        wu = await warm_up(ctx, client, wl.specs, min_requests=p.warmup_requests, min_output_tokens=p.warmup_tokens,
                           probes=p.warmup_probes)
        m = await measure(ctx, client, "measure", specs, load, extra={"load_spec": load_desc})
    metrics = m.metrics
    ttft = metrics.distributions["ttft"]
    n_ok = ttft.n

    def pct(q: float) -> str:
        return fmt_ms(metrics.percentile("ttft", q).value) if n_ok else "n/a"

    table1 = Table(
        "Table 1: TTFT Results",
        ["Metric", "Value"],
        [["Requests", str(n_ok)]]
        + [[f"TTFT P{q:g}", pct(q)] for q in (50, 90, 95, 99, 99.9)]
        + [["TTFT Mean", fmt_ms(ttft.mean.value if n_ok else None)],
           ["TTFT Min", fmt_ms(ttft.min if n_ok else None)], ["TTFT Max", fmt_ms(ttft.max if n_ok else None)]],
        notes=[f"sample count n={n_ok} successful measured requests of {len(m.records)} sent (§5.1.4.3)",
               "TTFT = first content token (non-whitespace), §5.1.3.1"],
    )
    undersampled = [f"P{q:g} under-sampled: needs >= {need} samples, have {n_ok}"
                    for q, need in ((99, P99_MIN), (99.9, P999_MIN)) if n_ok < need]
    table1.notes.extend(undersampled)
    rows2 = []
    for label, dist in metrics.ttft_by_input_length.items():
        rows2.append([label.strip("[)").replace(",", "-").replace("-inf", "+"),
                      *(fmt_ms(dist.percentile(q).value) for q in (50, 95, 99)), str(dist.n)])
    table2 = Table("Table 2: TTFT by Input Length", ["Input Tokens", "P50 (ms)", "P95 (ms)", "P99 (ms)", "n"], rows2)
    tables = [table1, table2]
    parts = [name for name in ("queue_wait", "prefill") if name in metrics.distributions
             and metrics.distributions[name].n]
    if parts:
        tables.append(Table("TTFT components (server-reported, §5.1.4.2)", ["Component", "P50", "P95", "P99"],
                            [[name, *percentile_row(metrics, name)] for name in parts]))
    pre_content = sum(1 for r in m.records if r.first_chunk_ns is not None and r.first_token_ns is not None
                      and r.first_chunk_ns < r.first_token_ns)
    info = ctx.sut.server_info
    config_summary = {
        "SUT configuration and boundary": f"{ctx.sut.boundary} at {ctx.sut.base_url}",
        "model identifier and hardware": f"model {ctx.sut.model}; hardware per declarations",
        "workload name or full specification": wl.declaration.name,
        "load model and its parameters": p.load.describe() + (f" = {load_desc['resolved_rate']:.2f} req/s"
                                                              if "resolved_rate" in load_desc else ""),
        "request count and test duration": f"{len(m.records)} requests in {m.load.duration_s:.1f} s",
        "warm-up procedure followed": f"{wu.ok} requests, {wu.output_tokens} output tokens, "
                                      f"drained={wu.drained}, probes stable={wu.stable}",
        "prefix caching state": ("enabled" if info.get("prefix_cache") else "disabled") if ctx.sut.embedded
        else "per declarations",
        "guardrail configuration": str(info.get("guardrails", "per declarations")),
    }
    checks = {
        "5.1.2-MUST-2": Check.met("5.1.2-MUST-2", f"request count {p.requests} defined"),
        "5.1.2-MUST-3": (Check.met("5.1.2-MUST-3", f"{n_ok} >= {P99_MIN} successful requests for P99")
                         if n_ok >= P99_MIN else
                         Check.unmet("5.1.2-MUST-3", f"{n_ok} requests < {P99_MIN} required for P99")),
        "5.1.2-MUST-4": (Check.met("5.1.2-MUST-4", f"{n_ok} >= {P999_MIN} successful requests for P99.9")
                         if n_ok >= P999_MIN else
                         Check.unmet("5.1.2-MUST-4", f"{n_ok} requests < {P999_MIN} required for P99.9")),
        "5.1.3-MUST-1": Check.met("5.1.3-MUST-1", f"{pre_content} requests had non-content chunks before the "
                                  "first content token; TTFT measures time to first content token",
                                  pre_content_requests=pre_content, ttft_definition="first_content"),
        "5.1.4-MUST-1": (Check.met("5.1.4-MUST-1", "P50, P90, P95, P99 and P99.9 reported") if n_ok
                         else Check.unmet("5.1.4-MUST-1", "no successful request: no percentile")),
        "5.1.4-MUST-2": Check.met("5.1.4-MUST-2", f"sample count stated: n={n_ok}"),
        "5.1.4-SHOULD-1": Check.met("5.1.4-SHOULD-1", "buckets [0,256) ... [4096,inf) as recommended"),
        "5.1.5-SHOULD-1": Check.met("5.1.5-SHOULD-1", "Table 1 in the report"),
        "5.1.5-SHOULD-2": (Check.met("5.1.5-SHOULD-2", "TTFT histogram and CDF in report.html") if n_ok
                           else Check.unmet("5.1.5-SHOULD-2", "no TTFT samples to plot")),
    }
    for i, (key, value) in enumerate(config_summary.items(), start=1):
        rid = f"5.1.5-MUST-{i}"
        checks[rid] = (Check.met(rid, f"{key}: {value}") if value else Check.unmet(rid, f"{key} missing"))
    facts = run_facts(ctx, workload=wl.declaration.to_json(), warmup=wu, measured=[m])
    result = ProcedureResult(
        procedure="5.1", title="Time to First Token", params=params_json(p), profile=ctx.settings.profile,
        metrics=metrics, runs=[m.summary], tables=tables,
        measurements={
            "requests": len(m.records), "ttft_n": n_ok,
            **{f"ttft_p{q:g}_ms": round(metrics.percentile("ttft", q).value * 1000, 3)
               for q in (50, 90, 95, 99, 99.9) if n_ok},
            "ttft_mean_ms": round(ttft.mean.value * 1000, 3) if n_ok else None,
            "errors": sum(metrics.errors_by_type.values()),
            "config_summary": config_summary,
        },
        notes=undersampled + ([f"{pre_content} requests sent non-content chunks (e.g. role-only) before the "
                               "first content token; TTFT is time to first content token (§5.1.3.1)"]
                              if pre_content else []),
        plots={"ttft_samples_s": sample_list(metrics.per_request_values("ttft"))},
        started=started,
        finished=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    )
    finish(ctx, result, facts, checks)
    return result



register(Procedure("5.1", "Time to First Token", TTFTParams, run, PROFILES, plan))
