"""Test-specific items a run's facts answer (a procedure may still supply its own check)."""

from __future__ import annotations

from .engine import _Ctx, _need, decide, evaluator
from .facts import LoadFacts
from .verdict import Check

# ============================================================================================
# Test-specific items a run's facts answer (procedures may still override with their own check)
# ============================================================================================


@evaluator("5.1.2-MUST-5", "5.2.2-MUST-3")
def _load_model(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.load.model
    return decide(rid, ok=m in ("open", "closed"), met=f"{m}-loop load", unmet=f"load model not defined ({m!r})")


def _open_only(ctx: _Ctx, rid: str) -> Check | None:
    """Unmet without a load model, not applicable to a closed loop; None: an open loop to judge."""
    ld = ctx.facts.load
    if ld.model is None:
        return decide(rid, ok=False, unmet="load model not defined (open or closed)")
    if ld.model != "open":
        return decide(rid, ok=None, na=f"{ld.model} loop: open-loop parameter")
    return None


def _shaped(rid: str, ld: LoadFacts, asked: str) -> Check | None:
    """Unmet for a rate shape (issue 50: a non-homogeneous Poisson process whose rate follows a schedule), which
    is not ``asked``; None for any other load."""
    if ld.arrival != "shaped":
        return None
    mean = f", mean {ld.rate:.4g} req/s" if ld.rate else ""
    return decide(rid, ok=False, unmet=f"rate shape {ld.schedule or '(schedule not recorded)'}{mean}: arrivals whose "
                                       f"rate changes over the run are a custom load, not {asked}")


@evaluator("5.1.2-MUST-6")
def _open_rate(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if (c := _open_only(ctx, rid) or _shaped(rid, ld, "one arrival rate in requests/second")) is not None:
        return c
    ok = ld.rate is not None and ld.rate > 0
    return decide(rid, ok=ok, met=f"arrival rate {ld.rate:g} req/s" if ok else "",
                  unmet=f"arrival rate not defined ({ld.rate!r})")


@evaluator("5.1.2-MUST-7")
def _open_distribution(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if (c := _open_only(ctx, rid) or _shaped(rid, ld, "Poisson, uniform or bursty arrivals at one rate")) is not None:
        return c
    if ld.arrival == "trace":  # send times replayed from a trace (issue 50): given, not a distribution
        return decide(rid, ok=False, unmet="send times replayed from a trace (custom load): not a Poisson, uniform "
                                           "or bursty distribution (§5.1.2.2)")
    return decide(rid, ok=ld.arrival in ("poisson", "uniform", "bursty"), met=f"{ld.arrival} arrivals",
                  unmet=f"arrival distribution not defined ({ld.arrival!r})")


@evaluator("5.1.2-MUST-8")
def _open_poisson(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if (c := _open_only(ctx, rid) or _shaped(rid, ld, "the Poisson arrivals at one rate §5.1.2.2 REQUIRES")) \
            is not None:
        return c
    return decide(rid, ok=ld.arrival == "poisson", met="Poisson arrivals",
                  unmet=f"open-loop TTFT run with {ld.arrival!r} arrivals; Poisson is REQUIRED")


@evaluator("5.1.2-MUST-9")
def _closed_params(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if ld.model is None:
        return decide(rid, ok=False, unmet="load model not defined (open or closed)")
    if ld.model != "closed":
        return decide(rid, ok=None, na=f"{ld.model} loop: closed-loop parameter")
    return decide(rid, ok=ld.concurrency is not None and ld.concurrency >= 1, met=f"concurrency {ld.concurrency}",
                  unmet=f"concurrency not defined ({ld.concurrency!r})")


@evaluator("5.1.2-MUST-13")
def _prefix_state(ctx: _Ctx, rid: str) -> Check:
    """Observed when the SUT reports it (the simulator's configuration, a procedure that switched
    it); otherwise a client cannot tell: the tester declares ``prefix_caching``."""
    f = ctx.facts
    declared = str(ctx.decl.get("prefix_caching") or "").strip().lower()
    if declared == "disabled" and f.prefix_caching == "enabled" and (f.prefix_caching_source or "").startswith(
            "measured"):  # the declaration held against the server's cached tokens (issue 32)
        return decide(rid, ok=False, key="prefix_caching", figure=f.prefix_caching, source="measured",
                      unmet=f"declared prefix_caching = disabled ({ctx.decl.source}), but {f.prefix_caching_source}: "
                            "the declaration contradicts the run", declared="disabled", observed=f.prefix_caching)
    if f.prefix_caching in ("enabled", "disabled"):
        return decide(rid, ok=True,
                      met=f"prefix caching {f.prefix_caching} ({f.prefix_caching_source or 'reported by the SUT'})",
                      source="declared" if "declar" in (f.prefix_caching_source or "") else "measured",
                      figure=f.prefix_caching, prefix_caching=f.prefix_caching)
    if "prefix_caching" in ctx.decl:
        v = str(ctx.decl["prefix_caching"]).strip().lower()
        if v not in ("enabled", "disabled"):
            return decide(rid, ok=False, key="prefix_caching",
                          unmet=f"declared prefix_caching = {v!r} ({ctx.decl.source}); use 'enabled' or 'disabled'")
        c = ctx.declared(rid, "prefix_caching")
        c.figure = v
        return c
    return ctx.needs(rid, "prefix_caching", "prefix caching state not observable by the client")


@evaluator("5.1.3-PARAM-2")
def _ttft_record(ctx: _Ctx, rid: str) -> Check:
    """§5.1.3 step 4: every successful record holds T_submit, T_first and the input count (RecordAudit)."""
    a = ctx.facts.records
    if a is None or not a.n:
        return _need(rid, "per-request record audit")
    gaps = {"T_submit": a.missing_submit, "T_first": a.missing_first_token, "input count": a.missing_input_tokens}
    bad = [f"{k} in {v}" for k, v in gaps.items() if v]
    return decide(rid, ok=not bad, met=f"all {a.n} records hold T_submit, T_first (TTFT) and the input count",
                  unmet=f"records lacking {', '.join(bad)} of {a.n}", source="measured", **gaps)


@evaluator("5.3.2-MUST-1")
def _open_required(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.load.model
    return decide(rid, ok=m == "open", met="open-loop load",
                  unmet=f"{m or 'unknown'}-loop load; 5.3 REQUIRES open loop")


_REQUIRED_WORKLOAD = {"4.3.2-MUST-2": ("long-context",), "5.9.2-MUST-1": ("long-context",),
                      "5.6.2-MUST-1": ("synthetic-skewed",)}
_RECOMMENDED_WORKLOAD = {"5.4.2-SHOULD-1": ("synthetic-uniform", "conversation"),
                         "5.5.2-SHOULD-1": ("synthetic-uniform",), "5.7.2-SHOULD-1": ("code-completion",),
                         "5.8.2-SHOULD-1": ("long-context",), "5.10.2-SHOULD-1": ("conversation",)}


@evaluator(*_REQUIRED_WORKLOAD, *_RECOMMENDED_WORKLOAD)
def _named_workload(ctx: _Ctx, rid: str) -> Check:
    """"Use workload X" asks the workload's standing as run (``RunFacts.workload_standing``): met only
    by X as App. A defines it, never by a custom variant (an output cap that bound, forced lengths) or
    a synthetic stand-in for X's dataset, as 4.3.2-MUST-1/SHOULD-1 read it (issue 48)."""
    want = _REQUIRED_WORKLOAD.get(rid) or _RECOMMENDED_WORKLOAD[rid]
    f = ctx.facts
    base, standing = f.workload_base, f.workload_standing
    if base is None:
        return _need(rid, "workload declaration")
    ident = (f.workload.get("dataset") or {}).get("identification") or {}
    why = "; ".join(map(str, f.workload.get("altered_by") or ())) or (
        ident.get("reason") if ident and not ident.get("standard") else f"declared {standing}")
    named = f"workload {f.workload.get('name')}"
    return decide(rid, ok=base in want and standing == "standard", met=f"workload {base} as defined (standing: standard)",
                  unmet=f"{named}: standing {standing} ({why}); expected {' or '.join(want)} as defined"
                  if base in want else f"{named}; expected {' or '.join(want)}",
                  source="measured", standing=standing, base=base)
