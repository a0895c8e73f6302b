"""§4.1 boundary and §4.2 load generator items."""

from __future__ import annotations

import re
import sys

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass
from .engine import _Ctx, _need, evaluator
from .facts import RunFacts
from .registry import BOUNDARIES, LAG_LIMIT_S, PROTOCOLS, registry
from .verdict import Check

# ============================================================================================
# General evaluators (§4, §7): one per general MUST/SHOULD a client can evaluate from RunFacts
# ============================================================================================


@evaluator("4.1-MUST-1", "5.1.2-MUST-10")
def _boundary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.sut_boundary is None:
        return Check.unmet(rid, "SUT boundary not declared (--llm-boundary: model-engine, gateway or compound)")
    if f.boundary is None:
        return Check.unmet(rid, f"SUT boundary {f.sut_boundary!r} is not one of {', '.join(BOUNDARIES)}")
    if rid == "4.1-MUST-1" and f.boundary_declared_before_start is not True:
        why = "after" if f.boundary_declared_before_start is False else "not known to be before"
        return Check.unmet(rid, f"SUT boundary {f.boundary} declared {why} the first request", boundary=f.boundary)
    return Check.met(rid, f"SUT boundary: {f.boundary}", boundary=f.boundary)


@evaluator("4.2-MUST-1")
def _load_generator_umbrella(ctx: _Ctx, rid: str) -> Check:
    parts = [r.id for r in registry() if r.level == "MUST" and re.match(r"^4\.2\.[1-6]-", r.id)]
    failing = [p for p in parts if ctx.check(p).fails]
    if failing:
        return Check.unmet(rid, f"load generator requirements unmet: {', '.join(failing)}", unmet=failing)
    return Check.met(rid, f"all {len(parts)} MUSTs of 4.2.1-4.2.6 met", items=parts)


@evaluator("4.2.1-MUST-1", "4.2.1-SHOULD-1")
def _resolution(ctx: _Ctx, rid: str) -> Check:
    res = ctx.facts.clock.resolution_ns
    if res is None:
        return _need(rid, "timer resolution")
    limit = 1e6 if rid == "4.2.1-MUST-1" else 1e3
    label = "1 ms" if rid == "4.2.1-MUST-1" else "1 µs"
    if res <= limit:
        return Check.met(rid, f"timer resolution {res:g} ns <= {label}", resolution_ns=res)
    return Check.unmet(rid, f"timer resolution {res:g} ns > {label}", resolution_ns=res)


@evaluator("4.2.2-MUST-1")
def _streaming(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.streaming is False:
        return Check.unmet(rid, "responses were not streamed")
    if f.protocol is None or f.streaming is None:
        return _need(rid, "streaming protocol")
    if f.protocol.lower() not in PROTOCOLS:
        return Check.unmet(rid, f"protocol {f.protocol!r} is not one of {', '.join(PROTOCOLS)}")
    return Check.met(rid, f"streaming over {f.protocol.lower()}", protocol=f.protocol.lower())


_AUDIT_FIELDS = {
    "4.2.2-MUST-2": ("missing_chunk_times", "per-chunk arrival times"),
    "4.2.6-MUST-1": ("missing_submit", "submission timestamp"),
    "4.2.6-MUST-2": ("missing_first_token", "first-token timestamp"),
    "4.2.6-MUST-3": ("missing_chunk_times", "arrival time of every later token/chunk"),
    "4.2.6-MUST-4": ("missing_final", "final-token timestamp"),
    "4.2.6-MUST-5": ("missing_input_tokens", "input token count"),
    "4.2.6-MUST-6": ("missing_output_tokens", "output token count"),
    "4.2.6-MUST-7": ("missing_status", "success/failure status"),
}


@evaluator(*_AUDIT_FIELDS)
def _record_field(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    attr, what = _AUDIT_FIELDS[rid]
    if audit is None:
        return _need(rid, "per-request record audit (RecordAudit.from_records)")
    if audit.n == 0:
        return Check.unmet(rid, "no measured requests were recorded")
    missing = getattr(audit, attr)
    if missing:
        return Check.unmet(rid, f"{missing} of {audit.n} records lack the {what}", missing=missing, n=audit.n)
    return Check.met(rid, f"all {audit.n} records hold the {what}", n=audit.n)


def _has_cap(f: RunFacts, cap: str) -> bool:
    return cap in f.load.capabilities


@evaluator("4.2.3-MUST-1")
def _open_loop(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not _has_cap(f, "open_loop") or not _has_cap(f, "absolute_schedule"):
        return Check.unmet(rid, "load generator does not declare an open-loop schedule independent of responses")
    if f.load.model == "open" and f.load.send_lag_p99_s is None:
        return Check.unmet(rid, "open-loop run did not record planned vs actual send times")
    return Check.met(rid, "open-loop schedule computed from (distribution, rate, seed) against absolute times")


@evaluator("4.2.3-MUST-2", "4.2.3-SHOULD-1")
def _arrivals(ctx: _Ctx, rid: str) -> Check:
    want = ("poisson",) if rid == "4.2.3-MUST-2" else ("uniform", "bursty")
    missing = [w for w in want if not _has_cap(ctx.facts, w)]
    if missing:
        return Check.unmet(rid, f"arrival pattern(s) not offered: {', '.join(missing)}")
    return Check.met(rid, f"arrival pattern(s) offered: {', '.join(want)}")


@evaluator("4.2.4-MUST-1")
def _closed_loop(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not _has_cap(f, "closed_loop"):
        return Check.unmet(rid, "load generator does not offer closed-loop load")
    gap = f.load.resubmit_gap_p99_s
    if f.load.model == "closed" and gap is not None and gap > LAG_LIMIT_S:
        return Check.unmet(rid, f"completion-to-resubmit gap P99 {gap * 1e3:.2f} ms > {LAG_LIMIT_S * 1e3:g} ms",
                           resubmit_gap_p99_s=gap)
    if f.load.model == "closed" and gap is not None:
        return Check.met(rid, f"closed loop held; resubmit gap P99 {gap * 1e3:.3f} ms", resubmit_gap_p99_s=gap)
    return Check.met(rid, "closed-loop load offered (each finished request replaced at once)")


@evaluator("4.2.5-MUST-1")
def _isolation(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.load.model != "open":
        if _has_cap(f, "absolute_schedule"):
            return Check.met(rid, "not exercised (closed loop); open-loop sends are scheduled on absolute times")
        return Check.unmet(rid, "load generator does not declare absolute-time open-loop scheduling")
    lag = f.load.send_lag_p99_s
    if lag is None:
        return _need(rid, "open-loop send lag")
    if lag <= LAG_LIMIT_S:
        return Check.met(rid, f"send lag P99 {lag * 1e3:.3f} ms <= {LAG_LIMIT_S * 1e3:g} ms", send_lag_p99_s=lag)
    corr = f.load.send_lag_inflight_corr
    if corr is not None and abs(corr) < 0.2:
        return Check.met(rid, f"send lag P99 {lag * 1e3:.2f} ms but uncorrelated with in-flight count (r={corr:.2f})",
                         send_lag_p99_s=lag, corr=corr)
    return Check.unmet(rid, f"send lag P99 {lag * 1e3:.2f} ms > {LAG_LIMIT_S * 1e3:g} ms: sends were delayed",
                       send_lag_p99_s=lag, corr=corr)


@evaluator("4.2.5-MUST-2")
def _async(ctx: _Ctx, rid: str) -> Check:
    if _has_cap(ctx.facts, "async"):
        return Check.met(rid, "asynchronous load generator (asyncio)")
    return Check.unmet(rid, "load generator does not declare an asynchronous implementation")


