"""§4.5 warm-up items."""

from __future__ import annotations

from ..common import draft
from .engine import _Ctx, decide, declaration_hook, evaluator
from .verdict import Check, Status

# ---- 4.5 warm-up


@evaluator("4.5.1-MUST-1")
def _model_loaded(ctx: _Ctx, rid: str) -> Check:
    return ctx.declared(rid, "model_loaded")


declaration_hook("4.5.1-MUST-1", "model_loaded")


@evaluator("4.5.1-MUST-2")
def _warmup_size(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return decide(rid, ok=None, na="cold-start measurement: warm-up skipped on purpose (4.5.3)")
    ev = {"requests": w.requests, "output_tokens": w.output_tokens}
    short = []
    # §4.5.1, conservative reading: both minimums (requirements.md ambiguity 11)
    min_requests, min_tokens = draft.value("warmup.min_requests"), draft.value("warmup.min_output_tokens")
    if w.requests < min_requests:
        short.append(f"{w.requests} requests < {min_requests}")
    if w.output_tokens < min_tokens:
        short.append(f"{w.output_tokens} output tokens < {min_tokens}")
    why = " (reduced by the profile)" if w.reduced else ""
    return decide(rid, ok=not short, met=f"warm-up: {w.requests} requests, {w.output_tokens} output tokens",
                  unmet=f"warm-up too small{why}: {'; '.join(short)}", **ev)


@evaluator("4.5.1-MUST-3")
def _drained(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return decide(rid, ok=None, na="cold-start measurement: no warm-up to drain")
    if w.drained is not True:
        return decide(rid, ok=False, unmet="client in-flight count not confirmed 0 before the first measured request")
    if w.server_queue_drained is not None:
        seen = f" ({w.server_queue_evidence})" if w.server_queue_evidence else ""
        return decide(rid, ok=w.server_queue_drained is True, met="client in-flight 0 and server queue empty before "
                      "measuring" + seen, unmet="server queue not empty when measuring started" + seen)
    d = ctx.declared(rid, "server_queue_drained")
    if d.status is Status.NEEDS_DECLARATION:
        d.reason = "client in-flight was 0; server queue depth not observable: " + d.reason
    elif d.holds:
        d.reason = "client in-flight 0; server queue " + d.reason
    return d


declaration_hook("4.5.1-MUST-3", "server_queue_drained")


@evaluator("4.5.1-MUST-4")
def _prefix_warm(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.prefix_populated is None:
        return decide(rid, ok=False, unmet="not recorded whether warm-up populated the prefix cache")
    d = ctx.declared(rid, "prefix_cache_populated")
    return decide(rid, ok=w.prefix_populated is True, unmet="warm-up did not send the workload's shared prefixes",
                  met="warm-up sent the shared prefixes; cache state " + d.reason if d.holds else
                  "warm-up sent the workload's shared prefixes (cache state itself needs server metrics)")


def _probe_variation(probes: tuple[float, ...], window: int = 3) -> float | None:
    """Largest relative change between the last ``window`` consecutive probes (§4.5.2).

    The warm-up keeps probing until ``window`` consecutive probes agree; earlier probes are the
    ones that had not stabilised yet, so only the final window is judged.
    """
    if len(probes) < window:
        return None
    last = probes[-window:]
    return max(abs(b - a) / a for a, b in zip(last, last[1:]) if a > 0)


@evaluator("4.5.2-SHOULD-1")
def _probes(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return decide(rid, ok=None, na="cold-start measurement: no warm-up")
    ok = bool(w.probes_before and w.probes_after)
    return decide(rid, ok=ok, unmet="no probe latency recorded before and after warm-up",
                  met=f"probe latency before {w.probes_before[0] * 1e3:.1f} ms, after {w.probes_after[-1] * 1e3:.1f} ms"
                  if ok else "")


@evaluator("4.5.2-SHOULD-2")
def _probe_stability(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return decide(rid, ok=None, na="cold-start measurement: no warm-up")
    var = _probe_variation(tuple(w.probes_after))
    if var is None:
        return decide(rid, ok=False, unmet=f"{len(w.probes_after)} post-warm-up probes; need >= 3 consecutive probes")
    limit = draft.value("warmup.probe_max_variation")  # §4.5.2
    return decide(rid, ok=var < limit, met=f"consecutive probes vary by at most {var:.1%} (< {limit:.0%})",
                  unmet=f"consecutive probes vary by up to {var:.1%} (>= {limit:.0%}): not stabilised", variation=var)


@evaluator("4.5.3-MUST-1")
def _cold_no_warmup(ctx: _Ctx, rid: str) -> Check:
    cs = ctx.facts.cold_start
    if cs is not None:  # a cold-start measurement next to a warm run (procedures/coldstart.ColdStart)
        ev = {"warmup_requests_before": cs.warmup_requests_before, "server_requests_before": cs.server_requests_before}
        if not cs.restarted:
            return decide(rid, ok=False, unmet="the SUT was not restarted before the cold-start requests", **ev)
        n = cs.warmup_requests_before or int(cs.server_requests_before or 0)
        seen = " (server /metrics: 0 requests finished before them)" if cs.server_requests_before == 0 else ""
        served = bool(cs.warmup_requests_before or cs.server_requests_before)
        return decide(rid, ok=not served, unmet=f"{n} requests served between the restart and the cold-start requests",
                      met=f"SUT restarted; the first {cs.requests} requests were measured before any warm-up" + seen,
                      **ev)
    w = ctx.facts.warmup
    return decide(rid, ok=w.requests == 0, met="cold start: no warm-up requests sent",
                  unmet=f"cold-start run sent {w.requests} warm-up requests")


@evaluator("4.5.3-MUST-2")
def _cold_label(ctx: _Ctx, rid: str) -> Check:
    cs = ctx.facts.cold_start
    if cs is not None:
        return decide(rid, ok=bool(cs.labelled), met="cold-start measurement labelled: heading, 'Cold start (§4.5.3)' "
                      "table, notes and results.json cold_start",
                      unmet="cold-start requests measured but not labelled in the result")
    w = ctx.facts.warmup
    if not w.cold_start:
        return decide(rid, ok=False, unmet="cold-start run not labelled")
    return decide(rid, ok=w.requests == 0,
                  met="run labelled cold start (no warm-up request sent) in the notes and header",
                  unmet=f"labelled cold start although {w.requests} warm-up requests were sent")


