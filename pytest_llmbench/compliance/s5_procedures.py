"""Test-specific items a run's facts answer (a procedure may still supply its own check)."""

from __future__ import annotations

from .engine import _Ctx, _need, evaluator
from .verdict import Check

# ============================================================================================
# Test-specific items a run's facts answer (procedures may still override with their own check)
# ============================================================================================


@evaluator("5.1.2-MUST-5", "5.2.2-MUST-3")
def _load_model(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.load.model
    if m in ("open", "closed"):
        return Check.met(rid, f"{m}-loop load")
    return Check.unmet(rid, f"load model not defined ({m!r})")


def _open_only(ctx: _Ctx, rid: str) -> Check | None:
    """Unmet without a load model, not applicable to a closed loop; None: an open loop to judge."""
    ld = ctx.facts.load
    if ld.model is None:
        return Check.unmet(rid, "load model not defined (open or closed)")
    if ld.model != "open":
        return Check.not_applicable(rid, f"{ld.model} loop: open-loop parameter")
    return None


@evaluator("5.1.2-MUST-6")
def _open_rate(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if (c := _open_only(ctx, rid)) is not None:
        return c
    if ld.rate is not None and ld.rate > 0:
        return Check.met(rid, f"arrival rate {ld.rate:g} req/s")
    return Check.unmet(rid, f"arrival rate not defined ({ld.rate!r})")


@evaluator("5.1.2-MUST-7")
def _open_distribution(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if (c := _open_only(ctx, rid)) is not None:
        return c
    if ld.arrival in ("poisson", "uniform", "bursty"):
        return Check.met(rid, f"{ld.arrival} arrivals")
    return Check.unmet(rid, f"arrival distribution not defined ({ld.arrival!r})")


@evaluator("5.1.2-MUST-8")
def _open_poisson(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if (c := _open_only(ctx, rid)) is not None:
        return c
    if ld.arrival == "poisson":
        return Check.met(rid, "Poisson arrivals")
    return Check.unmet(rid, f"open-loop TTFT run with {ld.arrival!r} arrivals; Poisson is REQUIRED")


@evaluator("5.1.2-MUST-9")
def _closed_params(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if ld.model is None:
        return Check.unmet(rid, "load model not defined (open or closed)")
    if ld.model != "closed":
        return Check.not_applicable(rid, f"{ld.model} loop: closed-loop parameter")
    if ld.concurrency is not None and ld.concurrency >= 1:
        return Check.met(rid, f"concurrency {ld.concurrency}")
    return Check.unmet(rid, f"concurrency not defined ({ld.concurrency!r})")


@evaluator("5.1.2-MUST-13")
def _prefix_state(ctx: _Ctx, rid: str) -> Check:
    """Observed when the SUT reports it (the simulator's configuration, a procedure that switched
    it); otherwise a client cannot tell: the tester declares ``prefix_caching``."""
    f = ctx.facts
    if f.prefix_caching in ("enabled", "disabled"):
        c = Check.met(rid, f"prefix caching {f.prefix_caching} ({f.prefix_caching_source or 'reported by the SUT'})",
                      prefix_caching=f.prefix_caching)
        c.source, c.figure = "declared" if "declar" in (f.prefix_caching_source or "") else "measured", f.prefix_caching
        return c
    if "prefix_caching" in ctx.decl:
        v = str(ctx.decl["prefix_caching"]).strip().lower()
        if v not in ("enabled", "disabled"):
            c = Check.unmet(rid, f"declared prefix_caching = {v!r} ({ctx.decl.source}); use 'enabled' or 'disabled'")
            c.key = "prefix_caching"
            return c
        c = ctx.declared(rid, "prefix_caching")
        c.figure = v
        return c
    return ctx.needs(rid, "prefix_caching", "prefix caching state not observable by the client")


@evaluator("5.3.2-MUST-1")
def _open_required(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.load.model
    if m == "open":
        return Check.met(rid, "open-loop load")
    return Check.unmet(rid, f"{m or 'unknown'}-loop load; 5.3 REQUIRES open loop")


_REQUIRED_WORKLOAD = {"4.3.2-MUST-2": ("long-context",), "5.9.2-MUST-1": ("long-context",),
                      "5.6.2-MUST-1": ("synthetic-skewed",)}
_RECOMMENDED_WORKLOAD = {"5.4.2-SHOULD-1": ("synthetic-uniform", "conversation"),
                         "5.5.2-SHOULD-1": ("synthetic-uniform",), "5.7.2-SHOULD-1": ("code-completion",),
                         "5.8.2-SHOULD-1": ("long-context",), "5.10.2-SHOULD-1": ("conversation",)}


@evaluator(*_REQUIRED_WORKLOAD, *_RECOMMENDED_WORKLOAD)
def _named_workload(ctx: _Ctx, rid: str) -> Check:
    want = _REQUIRED_WORKLOAD.get(rid) or _RECOMMENDED_WORKLOAD[rid]
    base = ctx.facts.workload_base
    if base is None:
        return _need(rid, "workload declaration")
    if base in want:
        derived = f" (derived: {ctx.facts.workload_name})" if ctx.facts.workload_name != base else ""
        return Check.met(rid, f"workload {base}{derived}")
    return Check.unmet(rid, f"workload {base}; expected {' or '.join(want)}")


