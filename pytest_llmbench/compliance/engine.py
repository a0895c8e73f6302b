"""Evaluation context, evaluator registration, applicability conditions and resolution order."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from .declarations import DECLARATION_FACTS, Declarations, declared_flag
from .facts import RunFacts
from .registry import VALIDATORS, ComplianceError, registry
from .verdict import LABELS, SOURCES, Check, Status

# ============================================================================================
# Evaluation context, evaluators, conditions
# ============================================================================================


class _Ctx:
    """What an evaluator sees: the facts, the declarations and (memoised) other items' checks."""

    def __init__(self, facts: RunFacts, decl: Declarations, procedure_checks: Mapping[str, Check]) -> None:
        self.facts = facts
        self.decl = decl
        self.procedure_checks = procedure_checks
        self._memo: dict[str, Check] = {}

    def check(self, rid: str) -> Check:
        """The check of any item (procedure > evaluator > declaration), ignoring applicability."""
        if rid not in self._memo:
            self._memo[rid] = _resolve(rid, self)
        return self._memo[rid]

    def declared(self, rid: str, fact: str | None = None) -> Check:
        """Answer ``rid`` from a named fact or an ID declaration; needs-declaration otherwise."""
        if fact is not None and fact in self.decl:
            value = self.decl[fact]
            keys = DECLARATION_FACTS[fact]["keys"]
            if keys:
                missing = [k for k in keys if _blank(value.get(k))]
                if missing:
                    return declared_check(rid, Status.UNMET, f"declaration {fact!r} ({self.decl.source}) lacks "
                                          f"{', '.join(missing)}", fact, dict(value))
                return declared_check(rid, Status.MET, f"declared: {fact} = {_short(value)} ({self.decl.source})",
                                      fact, dict(value))
            if DECLARATION_FACTS[fact]["type"] == "boolean":
                met, note = declared_flag(value)
                text = f"{fact} = {'true' if met else 'false'}{': ' + note if note else ''} ({self.decl.source})"
                return declared_check(rid, Status.MET if met else Status.UNMET,
                                      f"declared: {text}" if met else f"declared {text}", fact, value)
            return declared_check(rid, Status.MET, f"declared: {fact} = {_short(value)} ({self.decl.source})",
                                  fact, value)
        id_check = self.id_declaration(rid)
        if id_check is not None:
            return id_check
        return self.needs(rid, fact)

    def needs(self, rid: str, fact: str | None = None, what: str = "") -> Check:
        """Needs-declaration, naming the key that would answer ``rid``."""
        key = fact or rid
        alt = f" (or '{rid}')" if fact else ""
        lead = f"{what}: " if what else ""
        c = Check.needs_declaration(rid, f"{lead}needs declaration: set '{key}'{alt} in the declarations file "
                                         f"(--llm-declarations) or [tool.llmbench.declarations]")
        c.key, c.source = key, "none"
        return c

    def id_declaration(self, rid: str) -> Check | None:
        if rid not in self.decl:
            return None
        v = self.decl[rid]
        met, note = declared_flag(v)  # the type was checked when the declarations were read
        text = f"declared ({self.decl.source}: {rid}){': ' + note if note else ''}"
        return declared_check(rid, Status.MET if met else Status.UNMET,
                              text if met else f"declared not met ({self.decl.source}){': ' + note if note else ''}",
                              rid, v)


def declared_check(rid: str, status: Status, reason: str, key: str, value: Any) -> Check:
    """A check answered by a declaration: source ``declared``, the key as evidence."""
    return Check(rid, status, reason, {"declared": value}, "declared", figure=None, key=key)


@functools.cache
def item_data() -> dict[str, Any]:
    """``data/compliance_items.yaml``: thresholds, per-item source and fix, tool tests."""
    from .registry import _load_yaml

    return _load_yaml("compliance_items.yaml")


def item(rid: str) -> dict[str, Any]:
    """One item's data of ``data/compliance_items.yaml`` (``{}`` when it has none)."""
    return dict(item_data()["items"].get(rid) or {})


def threshold(name: str) -> float:
    """One threshold of ``data/compliance_items.yaml`` (KeyError names a missing one)."""
    return float(item_data()["thresholds"][name])


def tool_test(capability: str) -> str:
    """The plugin test that exercises a load-generator capability in CI (tool-verified)."""
    return str(item_data()["tool_tests"][capability])


def finalize(c: Check) -> Check:
    """Fill the source kind and the fix of a check from the item data (never its status).

    An item a completed run holds by how the tool is built carries its label in
    ``data/compliance_items.yaml`` (:data:`~.verdict.LABELS`: ``construction``, ``precondition`` enforced by
    refusing to start, ``self_audit`` of the tool's own recording), with its reason; whenever it is met
    by anything but a declaration or a named plugin test, its source is that kind and the reason is in
    its evidence. There is no default: a check whose decider, row or item data names no source is an
    error.
    """
    data = item_data()["items"].get(c.id, {})
    label = next((k for k in LABELS if data.get(k)), None)
    if c.status is Status.NEEDS_DECLARATION and c.source != "declared":  # needs a declaration: nothing answered
        c.source, c.key = "none", c.key or c.id
    if c.source in LABELS.values() and c.status is not Status.MET:  # a label holds only for a met outcome
        c.source = ""
        for k in LABELS:
            c.evidence.pop(k, None)
    if c.status is Status.NOT_APPLICABLE:
        c.source = "not-applicable"
    elif c.status is Status.MET and label and c.source not in ("declared", "tool-verified", "construction"):
        c.source = LABELS[label]
        c.evidence.setdefault(label, str(data[label]))
    elif c.source not in SOURCES:
        if "source" not in data:
            raise ComplianceError(f"{c.id}: the check names no source kind and data/compliance_items.yaml gives "
                                  "the item none (no default: measured, declared, parameter, runtime-check, "
                                  "tool-verified or construction)")
        c.source = str(data["source"])
    if c.fails and not c.fix:
        if c.status is Status.NEEDS_DECLARATION and c.key:
            c.fix = f"declare {c.key}"
        else:
            c.fix = str(data.get("fix") or "")
    return c


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, (list, tuple, dict)) and not v)


def onoff(v: Any) -> Any:
    """A guardrail switch as written (``on``/``off``): YAML 1.1 reads ``off``/``on`` as booleans, so map them
    back; strings lower-cased (§4.8.1)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return v.lower() if isinstance(v, str) else v


def _short(v: Any, n: int = 80) -> str:
    if isinstance(v, Mapping):
        s = ", ".join(f"{k}={_short(v2, n)}" for k, v2 in v.items())
    elif isinstance(v, (list, tuple)):
        s = "; ".join(map(str, v))
    else:
        s = str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


Evaluator = Callable[[_Ctx, str], Check]
#: requirement id -> evaluator over RunFacts (+ declarations, + other items' checks)
EVALUATORS: dict[str, Evaluator] = {}
#: requirement id -> named declaration fact (or the id itself) that answers it
DECLARATION_HOOKS: dict[str, str] = {}


def _register(table: dict[str, Any], what: str, *ids: str) -> Callable[[Any], Any]:
    """A decorator putting one function in ``table`` under each of ``ids`` (twice is an error)."""

    def deco(fn: Any) -> Any:
        for rid in ids:
            if rid in table:
                raise ComplianceError(f"two {what} for {rid}")
            table[rid] = fn
        return fn

    return deco


def evaluator(*ids: str) -> Callable[[Evaluator], Evaluator]:
    """Register a general evaluator for one or more requirement ids."""
    return _register(EVALUATORS, "evaluators", *ids)


Decider = Callable[..., Check]
#: requirement id -> decider of an item only a procedure can observe (its runs, tables, plots):
#: the procedure passes its observations, the decision and its thresholds live here (issue 13)
DECIDERS: dict[str, Decider] = {}


def decides(*ids: str) -> Callable[[Decider], Decider]:
    """Register the decider of one or more procedure items (called as ``fn(rid, **observations)``)."""
    return _register(DECIDERS, "deciders", *ids)


def decide(rid: str, **observations: Any) -> Check:
    """The one way a procedure builds a check: ``rid`` decided from what the procedure observed.

    An item with a registered decider (``@decides``, ``s5_decide.py``) is decided there from the
    named observations. Any other item is a row: ``ok`` is the observation (True: met, False: unmet,
    None: not applicable), ``met`` / ``unmet`` / ``na`` the wording of each outcome, optional
    ``figure``, ``source`` and ``key``, and every other keyword is evidence (``needs``: the wording when
    only a declaration can answer). The source kind comes
    from the decider or row, else from ``data/compliance_items.yaml`` (:func:`finalize`); an
    unknown id is an error (a procedure cannot invent an item).
    """
    if rid not in registry():
        raise ComplianceError(f"no requirement {rid}: a procedure cannot invent an item")
    c = DECIDERS[rid](rid, **observations) if rid in DECIDERS else row(rid, **observations)
    if c.id != rid:
        raise ComplianceError(f"decider for {rid} returned a check for {c.id}")
    return finalize(c)


def row(rid: str, ok: bool | None, met: str = "", unmet: str = "", na: str = "", *, needs: str = "",
        figure: Any = None, source: str = "", key: str | None = None, **evidence: Any) -> Check:
    """One decision as data: the observation ``ok`` and the wording of each outcome (see :func:`decide`).

    ``ok`` None with a ``needs`` wording: only the tester can answer (needs-declaration), else not applicable.
    """
    if ok is not None and not isinstance(ok, bool):
        if type(ok).__name__ != "bool_":  # numpy's bool is one; a count or a value is a mistake
            raise ComplianceError(f"{rid}: the observation ok must be True, False or None, got {ok!r}")
        ok = bool(ok)
    status, reason = ((Status.MET, met) if ok is True else (Status.UNMET, unmet) if ok is False
                      else (Status.NEEDS_DECLARATION, needs) if needs else (Status.NOT_APPLICABLE, na))
    if not reason:
        raise ComplianceError(f"{rid}: no wording for the outcome {status.value}")
    return Check(rid, status, reason, evidence, source, figure=figure, key=key)


def declaration_hook(rid: str, fact: str | None = None) -> None:
    """``rid`` is answered by a tester declaration (named ``fact``, or the id itself)."""
    DECLARATION_HOOKS[rid] = fact or rid
    EVALUATORS.setdefault(rid, lambda ctx, r, _f=fact: ctx.declared(r, _f))


def _resolve(rid: str, ctx: _Ctx) -> Check:
    """Procedure check > evaluator > ID declaration; a needs-declaration answer yields to a declaration."""
    return finalize(_answer(rid, ctx))


def _answer(rid: str, ctx: _Ctx) -> Check:
    c: Check | None = None
    if rid in ctx.procedure_checks:
        c = ctx.procedure_checks[rid]
        if c.id != rid:
            raise ComplianceError(f"procedure check for {rid} carries id {c.id}")
        c = dataclasses.replace(c)
    elif rid in EVALUATORS:
        c = EVALUATORS[rid](ctx, rid)
    if c is not None and c.status is not Status.NEEDS_DECLARATION:
        return c
    declared = ctx.id_declaration(rid)
    if declared is not None:
        return declared
    if c is not None:
        if not c.key:
            c.key = rid
        return c
    req = registry()[rid]
    who = "the procedure did not supply this check" if req.applies_to != "general" else \
        "no general evaluator; the procedure or workload generator did not supply this check"
    return Check(rid, Status.UNMET, f"no evaluator: {who}", {}, "none")


# -------------------------------------------------------------------------------- conditions

Condition = Callable[[RunFacts, Declarations], "bool | None"]


def _bool_decl(decl: Declarations, key: str) -> bool | None:
    return decl.flag(key) if isinstance(decl, Declarations) else None


def _prefix_cache_tested(f: RunFacts, decl: Declarations) -> bool | None:
    """§4.5.1: false when the procedure does not test the prefix cache, whatever its state; else
    whether it is enabled, as the SUT reported it or, failing that, as declared (``prefix_caching``)."""
    if not f.prefix_cache_under_test:
        return False
    state = f.prefix_caching if f.prefix_caching is not None else decl.get("prefix_caching")
    return None if state is None else str(state).strip().lower() == "enabled"


def _is_custom(f: RunFacts) -> bool | None:
    """Not a standard workload as run (custom or a stand-in: ``RunFacts.workload_standing``)."""
    standing = f.workload_standing
    return None if standing is None else standing != "standard"


def _is_dataset(f: RunFacts) -> bool | None:
    if not f.workload:
        return None
    return bool(f.workload.get("dataset")) or f.workload_base in ("conversation", "code-completion")


def _remote(f: RunFacts) -> bool | None:
    return None if f.clock.single_host is None else not f.clock.single_host


def _and(*vals: bool | None) -> bool | None:
    if any(v is False for v in vals):
        return False
    return None if any(v is None for v in vals) else True


def _boundary_is(name: str) -> Condition:
    return lambda f, d: None if f.boundary is None else f.boundary == name


CONDITIONS: dict[str, tuple[Condition, str]] = {
    "itl_reported": (lambda f, d: f.itl_reported, "ITL/TPOT is reported from token timestamps"),
    "custom_workload": (lambda f, d: _is_custom(f), "the workload is custom (not a standard one as defined)"),
    "dataset_workload": (lambda f, d: _is_dataset(f), "the workload is built from a dataset"),
    "model_engine": (_boundary_is("model-engine"), "the SUT boundary is Model Engine"),
    "application_gateway": (_boundary_is("gateway"), "the SUT boundary is Application Gateway"),
    "compound_system": (_boundary_is("compound"), "the SUT boundary is Compound System"),
    "prefix_cache_tested": (_prefix_cache_tested, "prefix caching is enabled and under test"),
    "cold_start": (lambda f, d: f.warmup.cold_start or f.cold_start is not None, "the run measures cold start"),
    "remote_sut": (lambda f, d: _remote(f), "load generator and SUT are on different machines"),
    "single_host": (lambda f, d: f.clock.single_host, "load generator and SUT share one machine"),
    "gateway_network": (lambda f, d: _and(_boundary_is("gateway")(f, d), _remote(f)),
                        "Application Gateway reached over a network"),
    "production_gateway": (lambda f, d: _and(_boundary_is("gateway")(f, d),
                                             f.production_representative if f.production_representative is not None
                                             else _bool_decl(d, "production_representative")),
                           "an Application Gateway run meant to represent production"),
    "server_timing": (lambda f, d: f.itl_method == "server" if f.itl_method else f.server_token_timestamps,
                      "server-side timestamps are used"),
    "compared": (lambda f, d: f.compared, "results are compared across SUTs"),
    "beyond_capacity": (lambda f, d: f.exceeds_capacity, "the test drives load beyond capacity"),
}

_FACT_GETTERS: dict[str, Callable[[RunFacts], Any]] = {
    "workload": lambda f: f.workload_base,
    "boundary": lambda f: f.boundary,
    "protocol": lambda f: (f.protocol or "").lower() or None,
    "itl_method": lambda f: f.itl_method,
    "counting": lambda f: _tok(f, "counting_option"),
    "clock": lambda f: (f.clock.sync_method or "").lower() or None,
}


def _condition(name: str) -> tuple[Condition, str] | None:
    if name in CONDITIONS:
        return CONDITIONS[name]
    if "=" in name:
        key, _, want = name.partition("=")
        getter = _FACT_GETTERS.get(key)
        if getter is None:
            return None

        def cond(f: RunFacts, d: Declarations, _g: Callable[[RunFacts], Any] = getter, _w: str = want) -> bool | None:
            v = _g(f)
            return None if v is None else str(v) == _w

        return cond, f"{key} is {want}"
    return None


# -------------------------------------------------------------------------------- helpers


def _tok(f: RunFacts, key: str) -> Any:
    t = f.tokenizer
    if t is None:
        return None
    if isinstance(t, Mapping):
        return t.get(key)
    return getattr(t, key, None)


def _need(rid: str, what: str) -> Check:
    """Unmet: the run did not record what the item is decided from."""
    return row(rid, False, unmet=f"not recorded: {what}")




def _validate(reg: Any) -> None:
    """The registry knows every condition of applicability.yaml and every item id registered here."""
    for n, row in enumerate(reg.rows):
        for cond in row.cells.values():
            if cond is not None and _condition(cond) is None:
                raise ComplianceError(f"applicability.yaml row {n}: unknown condition {cond!r}")
    for rid in list(EVALUATORS) + list(DECLARATION_HOOKS) + list(DECIDERS):
        if rid not in reg.items:
            raise ComplianceError(f"the compliance package registers {rid!r}, which is not a requirement id")


VALIDATORS.append(_validate)
