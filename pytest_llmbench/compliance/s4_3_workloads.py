"""§4.3 workload items."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .declarations import DECLARATION_FACTS
from .engine import _blank, _Ctx, _is_custom, _need, _short, decide, evaluator, item
from .facts import RunFacts, _norm_workload, workload_standing
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




# ---- §4.3.2 and App. A: the definition rows, from the workload as run (issue 48)
#
# Each row asks whether the run's workload is the one App. A defines, on the declaration as run
# (``procedures.sample.as_run``: a standard workload altered by a cap or a procedure is described
# by the lengths actually sent, a stand-in names the dataset it replaces). A row about another
# workload than the run's is not applicable; a procedure that checks the requests it sent
# (``workloads.reference_checks``) supplies its own check, which wins.


def _bounds(d: Any) -> tuple[float | None, float | None, float | None]:
    """(min, max, mean) of a length distribution as declared or as sent (None where not stated)."""
    if not isinstance(d, Mapping):
        return None, None, None
    p = d.get("params") if isinstance(d.get("params"), Mapping) else {}
    if "value" in p:
        v = float(p["value"])
        return v, v, v
    if "values" in p and p["values"]:
        vals = [float(x) for x in p["values"]]
        return min(vals), max(vals), None
    lo, hi, mean = p.get("min"), p.get("max"), p.get("mean")
    if mean is None and str(d.get("type")) == "uniform" and lo is not None and hi is not None:
        mean = (float(lo) + float(hi)) / 2
    return (None if lo is None else float(lo), None if hi is None else float(hi),
            None if mean is None else float(mean))


def _within(what: str, d: Any, lo: float, hi: float, mean: float | None = None) -> list[str]:
    """Deviations of ``d`` from [lo, hi] (and a mean within 15 % of ``mean``)."""
    a, b, m = _bounds(d)
    if a is None or b is None:
        return [f"{what} range not stated"]
    out = [] if lo <= a and b <= hi else [f"{what} {a:g}-{b:g} outside {lo:g}-{hi:g}"]
    if mean is not None and m is not None and abs(m - mean) > 0.15 * mean:
        out.append(f"{what} mean {m:g}, defined {mean:g}")
    return out


def _params(w: Mapping[str, Any]) -> Mapping[str, Any]:
    p = w.get("params")
    return p if isinstance(p, Mapping) else {}


def _no_sharing(w: Mapping[str, Any]) -> list[str]:
    ps = w.get("prefix_sharing")
    frac = ps.get("fraction") if isinstance(ps, Mapping) else None
    return [] if frac in (0, 0.0) else [f"prefix sharing fraction {frac!r}, defined 0"]


def _a13(w: Mapping[str, Any]) -> list[str]:
    content = w.get("content") if isinstance(w.get("content"), Mapping) else {}
    out = _no_sharing(w)
    if content.get("system_prompt"):
        out.append("system prompt present")
    if w.get("temperature") not in (0, 0.0):
        out.append(f"temperature {w.get('temperature')!r}, defined 0.0")
    return out


def _a14(w: Mapping[str, Any]) -> list[str]:
    pool = _params(w).get("id_pool")
    return [] if pool == "full" else [
        f"not implemented as written: token ids are drawn from a round-trip-safe subset of the vocabulary "
        f"(id_pool={pool!r}), not uniformly from 0..100255; id_pool='full' draws from the whole range"]


def _dataset(name: str) -> Callable[[Mapping[str, Any]], list[str]]:
    def check(w: Mapping[str, Any]) -> list[str]:
        if workload_standing(w) == "stand-in":
            return [f"not implemented: the {name} dataset is not shipped; a synthetic stand-in ran (pass the "
                    "dataset file to the workload)"]
        ds = w.get("dataset") if isinstance(w.get("dataset"), Mapping) else {}
        ident = ds.get("identification") if isinstance(ds.get("identification"), Mapping) else {}
        if ident:  # the user's file, identified as the draft's or not (workloads.datasets.identify_*)
            return [] if ident.get("standard") else [f"custom dataset {ds.get('source')}: {ident.get('reason')}"]
        return [] if ds.get("name") else [f"no dataset named (the {name} dataset is defined)"]
    return check


def _drawn_statistics(w: Mapping[str, Any]) -> list[str] | None:
    """A.3.2 on a dataset's drawn lengths (``dataset.length_statistics``), or None without them: each
    compared percentile within the stated tolerance (workloads.datasets.length_statistics)."""
    ds = w.get("dataset") if isinstance(w.get("dataset"), Mapping) else {}
    st = ds.get("length_statistics") if isinstance(ds.get("length_statistics"), Mapping) else None
    if st is None or ds.get("synthetic_standin"):
        return None
    off = [f"{side} P{p[1:]} {r['drawn']:g}, defined {r['reference']}" for side in ("input", "output")
           for p, r in (st.get(side) or {}).items() if r.get("compared") and not r.get("within")]
    if off:
        return [f"drawn lengths outside ±{float(st['tolerance']):.0%}: {', '.join(off)}"]
    if not st.get("compared"):
        return [f"{st.get('n')} prompts drawn: too few to compare any percentile with A.3.2"]
    return []


def _quantiles(which: str, want: Mapping[float, float]) -> Callable[[Mapping[str, Any]], list[str]]:
    def check(w: Mapping[str, Any]) -> list[str]:
        d = w.get(which) if isinstance(w.get(which), Mapping) else {}
        q = _params(d).get("quantiles") if isinstance(d, Mapping) else None
        if isinstance(q, Mapping):
            got = {float(k): float(v) for k, v in q.items()}
            bad = [f"P{k * 100:g} {got.get(k)!r}, defined {v:g}" for k, v in want.items() if got.get(k) != v]
            return [f"{which}: {', '.join(bad)}"] if bad else []
        p50 = _params(d).get("p50") if isinstance(d, Mapping) else None
        return [f"{which} as sent: P50 {p50!r}, defined {want[0.5]:g}"]
    return check


def _a32(w: Mapping[str, Any]) -> list[str]:
    """A.3.2 on the drawn lengths of a dataset, else on the declared (stand-in) quantiles."""
    drawn = _drawn_statistics(w)
    if drawn is not None:
        return drawn
    return (_quantiles("input_length", {0.5: 156, 0.95: 892, 0.99: 2134})(w)
            + _quantiles("output_length", {0.5: 234, 0.95: 789, 0.99: 1567})(w))


def _prefix_pattern(w: Mapping[str, Any]) -> list[str]:
    ps = w.get("prefix_sharing") if isinstance(w.get("prefix_sharing"), Mapping) else {}
    out = []
    if ps.get("prefixes") != 10:
        out.append(f"{ps.get('prefixes')!r} repository contexts, defined 10")
    if ps.get("fraction") != 0.8:
        out.append(f"shared fraction {ps.get('fraction')!r}, defined 0.8")
    out += _within("context length", ps.get("length"), 512, 1024)
    if "Zipf(s=1.5)" not in str(ps.get("selection")):
        out.append(f"selection {ps.get('selection')!r}, defined Zipf(s=1.5)")
    return out


_A5_LENGTHS = (8192, 16384, 32768, 65536, 131072)


def _a5_inputs(w: Mapping[str, Any]) -> list[str]:
    d = w.get("input_length")
    p = _params(d) if isinstance(d, Mapping) else {}
    vals = p.get("values") or [v for v in (p.get("min"), p.get("max")) if v is not None]
    off = sorted({int(v) for v in vals} - set(_A5_LENGTHS))
    return [f"input lengths {off} not among the App. A.5 targets {list(_A5_LENGTHS)}"] if off or not vals else []


def _fixed_256(w: Mapping[str, Any]) -> list[str]:
    a, b, _ = _bounds(w.get("output_length"))
    return [] if a == b == 256 else [f"output {a!r}-{b!r} tokens, defined fixed 256"]


#: row -> (the workload it defines, what it defines, the check over the as-run declaration)
_DEFINITIONS: dict[str, tuple[str, str, Callable[[Mapping[str, Any]], list[str]]]] = {
    "4.3.2-PARAM-2": ("synthetic-uniform", "input Uniform(128, 512), output Uniform(64, 256), no prefix sharing",
                      lambda w: _within("input", w.get("input_length"), 128, 512, 320)
                      + _within("output", w.get("output_length"), 64, 256, 160) + _no_sharing(w)),
    "4.3.2-PARAM-6": ("long-context", "input Uniform(8192, 32768), output fixed 256, no prefix sharing",
                      lambda w: _within("input", w.get("input_length"), 8192, 32768) + _fixed_256(w)
                      + _no_sharing(w)),
    "A.1.1-PARAM-1": ("synthetic-uniform", "input Uniform(128, 512), mean 320",
                      lambda w: _within("input", w.get("input_length"), 128, 512, 320)),
    "A.1.2-PARAM-1": ("synthetic-uniform", "output Uniform(64, 256), mean 160, by max_tokens",
                      lambda w: _within("output", w.get("output_length"), 64, 256, 160)),
    "A.1.3-PARAM-1": ("synthetic-uniform", "no system prompt, no prefix sharing, temperature 0.0", _a13),
    "A.1.4-PARAM-1": ("synthetic-uniform", "token ids uniform over 0..100255 from random.Random(seed)", _a14),
    "A.2.1-PARAM-1": ("synthetic-skewed", "input LogNormal(5.5, 1.0) in [32, 4096]",
                      lambda w: _within("input", w.get("input_length"), 32, 4096)),
    "A.2.2-PARAM-1": ("synthetic-skewed", "output LogNormal(4.5, 1.2) in [16, 2048]",
                      lambda w: _within("output", w.get("output_length"), 16, 2048)),
    "A.3.1-PARAM-1": ("conversation", "ShareGPT vicuna_cleaned 2023-04-12", _dataset("ShareGPT vicuna_cleaned")),
    "A.3.2-PARAM-1": ("conversation", "input P50/P95/P99 156/892/2134, output 234/789/1567 tokens",
                      _a32),
    "A.4.1-PARAM-1": ("code-completion", "The Stack (Python/JavaScript/TypeScript)", _dataset("The Stack")),
    "A.4.2-PARAM-1": ("code-completion", "10 contexts of 512-1024 tokens, 80 % shared, Zipf(s=1.5)", _prefix_pattern),
    "A.5.1-PARAM-1": ("long-context", "input lengths {8K, 16K, 32K, 64K, 128K}", _a5_inputs),
    "A.5.2-PARAM-1": ("long-context", "output fixed 256 tokens", _fixed_256),
}


@evaluator(*_DEFINITIONS)
def _definition(ctx: _Ctx, rid: str) -> Check:
    """A §4.3.2 / App. A definition row on the workload as run: met when it matches the definition."""
    want, what, deviations = _DEFINITIONS[rid]
    f = ctx.facts
    if f.workload_base is None:
        return _need(rid, "workload declaration")
    if f.workload_base != want:
        return decide(rid, ok=None, na=f"the run's workload is {f.workload_base}, not {want}")
    gaps = deviations(f.workload)
    sent = "as sent" in str((f.workload.get("input_length") or {}).get("type")) or \
        "as sent" in str((f.workload.get("output_length") or {}).get("type"))
    return decide(rid, ok=not gaps, met=f"{want} ({f.workload_standing}): {what}",
                  unmet=f"{f.workload.get('name')}: {'; '.join(gaps)} (defined: {what})",
                  source="measured" if sent else "parameter", standing=f.workload_standing, deviations=gaps)
