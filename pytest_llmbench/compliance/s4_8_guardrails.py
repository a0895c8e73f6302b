"""§4.8 guardrail items, terminology and security declarations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .engine import _blank, _Ctx, _need, _short, decide, declaration_hook, evaluator, onoff
from .verdict import Check

# ---- 4.8 guardrails


def _guardrails(ctx: _Ctx) -> tuple[Mapping[str, Any] | None, str]:
    g = ctx.facts.guardrails
    if g:
        return g, "reported by the SUT configuration"
    d = ctx.decl.get("guardrails")
    if isinstance(d, Mapping):
        return d, f"declared ({ctx.decl.source})"
    return None, ""


_GUARD_KEYS = {"4.8.1-MUST-1": "input_filter", "4.8.1-MUST-2": "output_filter", "4.8.1-MUST-3": "systems"}


@evaluator(*_GUARD_KEYS)
def _guardrail_disclosure(ctx: _Ctx, rid: str) -> Check:
    g, src = _guardrails(ctx)
    key = _GUARD_KEYS[rid]
    if g is None:
        c = ctx.declared(rid, "guardrails")
        return c
    ev = {"declared": dict(g)} if src.startswith("declared") else {}
    v = onoff(g.get(key))
    contradiction = _filter_contradiction(ctx, g, key) if src.startswith("declared") else None
    if contradiction is not None:
        return decide(rid, ok=False, unmet=contradiction, **ev, refused_by_filter=ctx.facts.records.filter_signals)  # type: ignore[union-attr]
    if key == "systems":
        return decide(rid, ok=not _blank(v), met=f"safety systems: {_short(v)} ({src})",
                      unmet=f"guardrails.systems not disclosed ({src}); 'unknown' is allowed", **ev)
    return decide(rid, ok=v in ("on", "off", "unknown"), met=f"{key.replace('_', ' ')}: {v} ({src})",
                  unmet=f"guardrails.{key} = {v!r}; expected on, off or unknown ({src})", **ev)


def _filter_contradiction(ctx: _Ctx, g: Mapping[str, Any], key: str) -> str | None:
    """Declared guardrails held against the run (issue 32): ``key`` declared off, no filter declared on,
    and yet a content filter refused requests (a policy error code or ``finish_reason: content_filter``;
    a model's own refusal is reported by 4.8.1-MUST-4, not held against the declaration)."""
    audit = ctx.facts.records
    if audit is None or not audit.filter_refused or onoff(g.get(key)) != "off":
        return None
    if any(onoff(g.get(k)) == "on" for k in ("input_filter", "output_filter")):
        return None
    how = ", ".join(f"{n} by {sig}" for sig, n in sorted(audit.filter_signals.items()))
    return (f"declared guardrails.{key} = off ({ctx.decl.source}), but {audit.filter_refused} of {audit.n} requests "
            f"were refused by a content filter ({how}): the declaration contradicts the run")


declaration_hook("4.8.1-MUST-1", "guardrails")
declaration_hook("4.8.1-MUST-2", "guardrails")
declaration_hook("4.8.1-MUST-3", "guardrails")


@evaluator("4.8-MUST-1")
def _safety_accounted(ctx: _Ctx, rid: str) -> Check:
    parts = ["4.8.1-MUST-1", "4.8.1-MUST-2", "4.8.1-MUST-3", "4.8.1-MUST-4"]
    failing = [p for p in parts if ctx.check(p).fails]
    if not failing:
        return decide(rid, ok=True, met="safety systems disclosed and refusals counted (4.8.1)")
    declared = ctx.id_declaration(rid)
    if declared is not None:
        return declared
    return decide(rid, ok=False, unmet=f"safety systems not accounted for: {', '.join(failing)} unmet",
                  unmet_items=failing)


@evaluator("4.8.1-MUST-4")
def _refusals(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    if audit is None:
        return _need(rid, "per-request records (refusal count)")
    model = audit.refused - audit.filter_refused
    how = f" ({audit.filter_refused} by a content filter, {model} by the model)" if audit.refused else ""
    return decide(rid, ok=True, met=f"{audit.refused} of {audit.n} requests refused{how}", refused=audit.refused,
                  n=audit.n, refused_by_filter=audit.filter_refused)


@evaluator("4.8.2-SHOULD-1")
def _default_guardrails(ctx: _Ctx, rid: str) -> Check:
    g, _ = _guardrails(ctx)
    if g and any(onoff(g.get(k)) == "off" for k in ("input_filter", "output_filter")):
        return decide(rid, ok=False, unmet="safety systems were (partly) off in a production-representative run")
    return ctx.declared(rid, "guardrails_default")


declaration_hook("4.8.2-SHOULD-1", "guardrails_default")


@evaluator("4.8.2-MUST-1")
def _safety_disabled_note(ctx: _Ctx, rid: str) -> Check:
    g, src = _guardrails(ctx)
    if g is None:
        return decide(rid, ok=False, unmet="guardrail configuration unknown: cannot tell whether safety was disabled")
    off = [k for k in ("input_filter", "output_filter") if onoff(g.get(k)) == "off"]
    return decide(rid, ok=True if off else None, met=f"report notes: safety systems disabled ({', '.join(off)})",
                  na="no safety system was disabled: there is nothing to note", disabled=off)


@evaluator("4.8.2-SHOULD-2")
def _guardrail_comparison(ctx: _Ctx, rid: str) -> Check:
    return decide(rid, ok="5.10" in ctx.facts.session_tests,
                  met="a 5.10 guardrail-overhead result is part of this report",
                  unmet="no paired guardrails on/off runs (5.10) in this report")


# ---- terminology and security: tester declarations

for _rid, _fact in (("abstract-SHOULD-1", "terminology"), ("1-SHOULD-1", "terminology"),
                    ("7.1-SHOULD-1", "publication_review"), ("7.2-SHOULD-1", "production_cross_check"),
                    ("7.4-SHOULD-1", "isolated_system"), ("7.4-SHOULD-2", "recovery_procedure"),
                    ("5.1.2-MUST-11", "model"), ("5.1.2-MUST-12", "hardware")):
    declaration_hook(_rid, _fact)


