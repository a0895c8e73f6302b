"""§4.3 workload items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .declarations import DECLARATION_FACTS
from .engine import _blank, _Ctx, _is_custom, _need, _short, decide, evaluator, item
from .facts import RunFacts, _norm_workload
from .verdict import Check

# ---- 4.3 workloads

_WORKLOAD_FIELDS = {
    "4.3.1-MUST-1": ("input_length", ("type", "params", "unit", "tokenizer")),
    "4.3.1-MUST-2": ("output_length", ("type", "params", "control", "unit")),
    "4.3.1-MUST-3": ("content", ("domain", "language", "system_prompt", "system_prompt_len")),
    "4.3.1-MUST-4": ("prefix_sharing", ("fraction", "length_distribution")),
}


def _workload_gaps(w: Mapping[str, Any], rid: str) -> list[str]:
    section, keys = _WORKLOAD_FIELDS[rid]
    block = w.get(section)
    if not isinstance(block, Mapping):
        return [section]
    return [f"{section}.{k}" for k in keys if k not in block or block[k] is None or block[k] == ""]


@evaluator(*_WORKLOAD_FIELDS)
def _workload_field(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not f.workload or not f.workload.get("name"):
        return _need(rid, "workload declaration")
    gaps = _workload_gaps(f.workload, rid)
    if not gaps:
        return decide(rid, ok=True, met=f"workload {f.workload['name']} states {_WORKLOAD_FIELDS[rid][0]}")
    return decide(rid, ok=not _is_custom(f), met=f"standard workload {f.workload_name}: specified in App. A",
                  unmet=f"custom workload {f.workload['name']} lacks {', '.join(gaps)}", missing=gaps)


@evaluator("4.3-MUST-1", "5.1.2-MUST-1", "5.2.2-MUST-1")
def _workload_complete(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not f.workload or not f.workload.get("name"):
        return _need(rid, "workload declaration")
    if not _is_custom(f):
        return decide(rid, ok=True, met=f"standard workload {f.workload_name} (App. A)")
    gaps = [g for r in _WORKLOAD_FIELDS for g in _workload_gaps(f.workload, r)]
    return decide(rid, ok=not gaps, met=f"custom workload {f.workload['name']} fully specified (4.3.1)",
                  unmet=f"custom workload {f.workload['name']} not fully specified: lacks {', '.join(gaps)}",
                  missing=gaps)


@evaluator("4.3-MAY-1")
def _custom_permission(ctx: _Ctx, rid: str) -> Check:
    if _is_custom(ctx.facts):
        return decide(rid, ok=True, met=f"permission used: custom workload {ctx.facts.workload.get('name')}")
    return decide(rid, ok=None, na="permission not used: standard workload")


def _session_has(f: RunFacts, name: str) -> bool:
    """The session ran ``name`` as defined: a standard-standing run of it (this one or another)."""
    names = {_norm_workload(w) for w in f.session_workloads}
    return name in names or (f.workload_base == name and f.workload_standing == "standard")


@evaluator("4.3.2-MUST-1", "4.3.2-SHOULD-1")
def _boundary_workload(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    want = item(rid)["workload"]  # the standard workload this boundary's report must include (§4.3.2)
    if f.workload_base is None and not f.session_workloads:
        return _need(rid, "workload declaration")
    if _session_has(f, want):
        return decide(rid, ok=True, met=f"the report includes a {want} run")
    altered = [w for w in f.session_custom_workloads if _norm_workload(w).startswith(want)]
    if altered:  # e.g. the smoke profile's output cap: run, but not as defined
        return decide(rid, ok=False, unmet=f"no {want} run as defined in this report (workload: {f.workload_base}); "
                                           f"{len(altered)} altered by the profile or the marker, so custom: "
                                           f"{'; '.join(altered)}", altered=altered)
    return decide(rid, ok=False, unmet=f"no {want} run in this report (workload: {f.workload_base})")


@evaluator("4.3.2-PARAM-1")
def _standard_or_custom(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.workload_name is None:
        return _need(rid, "workload declaration")
    if _is_custom(f):
        c = ctx.check("4.3-MUST-1")
        return Check(rid, c.status, f"custom workload: {c.reason}")
    return decide(rid, ok=True, met=f"standard workload {f.workload_name}")


@evaluator("4.3.3-MUST-1", "4.3.3-MUST-2")
def _seed(ctx: _Ctx, rid: str) -> Check:
    seed = ctx.facts.seed
    ok = isinstance(seed, int) and not isinstance(seed, bool)
    return decide(rid, ok=ok, met=f"workload seed {seed}", unmet="no integer workload seed recorded", seed=seed)


@evaluator("4.3.3-SHOULD-1")
def _sequence_published(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    missing = [n for n, v in (("seed", f.seed), ("sequence hash", f.sequence_hash), ("generator", f.generator)) if not v
               and v != 0]
    return decide(rid, ok=not missing, met=f"generator {f.generator} + seed {f.seed}; sequence hash "
                  f"{(f.sequence_hash or '')[:16]}",
                  unmet=f"request sequence not reproducible from the report: lacks {', '.join(missing)}",
                  sequence_hash=f.sequence_hash)


@evaluator("4.3.3-MUST-3")
def _dataset(ctx: _Ctx, rid: str) -> Check:
    ds = dict(ctx.facts.workload.get("dataset") or {}) if ctx.facts.workload else {}
    declared = ctx.decl.get("dataset")
    if isinstance(declared, Mapping):
        ds.update({k: v for k, v in declared.items() if not _blank(v)})
    keys = DECLARATION_FACTS["dataset"]["keys"]
    missing = [k for k in keys if _blank(ds.get(k))]
    if missing and not ds:
        return ctx.declared(rid, "dataset")
    return decide(rid, ok=True if not missing else None, met=f"dataset {_short(ds)}",
                  needs=f"dataset lacks {', '.join(missing)}: declare 'dataset' in [tool.llmbench.declarations]",
                  dataset=ds)


