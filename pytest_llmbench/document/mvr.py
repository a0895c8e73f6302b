"""The Minimum Viable Report of App. C.1: the document's ``summary``.

System identification from the SUT and the declarations, the test configuration over every
procedure, the key results (TTFT/TPOT P50/P99 from the procedure that ranks its latency figures first,
the maximum output throughput, the throughput at TTFT P99 under the App. C.1 bound) and the notes
(deviations from the methodology, the guardrail configuration).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..common import draft
from ..procedures.figures import LATENCY, MAX_OUTPUT_THROUGHPUT
from .headline import busy_time
from .procedure import all_metrics

__all__ = ["C1_TTFT_P99_BOUND_S", "KEY_RESULT_UNITS", "minimum_viable_report"]

#: The App. C.1 latency bound for "Throughput at P99 TTFT < 500ms" (data/draft.yaml).
C1_TTFT_P99_BOUND_S: float = draft.value("report.c1_ttft_p99_bound_s")
#: Units of the App. C.1 key results that are plain numbers (the rest are Estimates with their unit).
KEY_RESULT_UNITS = {"max_throughput_tps": "tokens/s", "throughput_at_ttft_p99_500ms_tps": "tokens/s"}

#: (procedure entry of the document, the procedure's result) in draft order
Procs = list[tuple[dict[str, Any], Any]]


def minimum_viable_report(doc: Mapping[str, Any], procs: Procs, decl: Mapping[str, Any],
                          notes: list[str]) -> dict[str, Any]:
    """App. C.1 from the document so far (tool, SUT, settings, completeness), its procedure entries and
    results, the declarations and the builder's own notes (listed among the deviations)."""
    return {"system": system(doc.get("sut"), decl, doc["tool"]["version"]), "configuration": configuration(procs),
            "key_results": key_results(procs),
            "notes": {"deviations": deviations(doc, procs, notes), "guardrails": guardrails_text(procs, decl)}}


# --------------------------------------------------------------------------------------------
# system identification
# --------------------------------------------------------------------------------------------


def system(sut: Mapping[str, Any] | None, decl: Mapping[str, Any], version: str) -> dict[str, str]:
    """Model, hardware, software and SUT boundary: declared, else what the SUT says, else "not declared"."""
    return {
        "model": _describe_model(sut, decl),
        "hardware": _describe_hardware(sut, decl),
        "software": _describe_engine(sut, decl, version),
        "sut_boundary": (sut or {}).get("boundary_name") or (sut or {}).get("boundary") or "not declared",
    }


def _describe_model(sut: Mapping[str, Any] | None, decl: Mapping[str, Any]) -> str:
    m = decl.get("model")
    if isinstance(m, Mapping):
        text = " ".join(str(m[k]) for k in ("name", "version") if m.get(k))
        if m.get("quantization"):
            text += f" (quantization: {m['quantization']})"
        return text or "not declared"
    name = (sut or {}).get("model") or "unknown"
    return f"{name} (version not declared)"


def _describe_hardware(sut: Mapping[str, Any] | None, decl: Mapping[str, Any]) -> str:
    h = decl.get("hardware")
    if isinstance(h, Mapping):
        text = str(h.get("accelerator") or "accelerator not declared")
        if h.get("count"):
            text += f" x {h['count']}"
        if h.get("memory"):
            text += f" ({h['memory']})"
        return text
    if (sut or {}).get("embedded_simulator"):
        return "none (embedded simulator: a modelled engine on this host's CPU)"
    return "not declared"


def _describe_engine(sut: Mapping[str, Any] | None, decl: Mapping[str, Any], version: str) -> str:
    e = decl.get("engine")
    if isinstance(e, Mapping):
        vals = [version if (k == "version" and "plugin's version" in str(e.get(k))) else e.get(k)
                for k in ("name", "version")]  # sut.py's default names the plugin version in words
        return " ".join(str(v) for v in vals if v) or "not declared"
    if (sut or {}).get("embedded_simulator"):
        return f"pytest-llmbench embedded simulator {version}"
    return "not declared"


# --------------------------------------------------------------------------------------------
# configuration and key results
# --------------------------------------------------------------------------------------------


def configuration(procs: Procs) -> dict[str, Any]:
    """Workloads, load models, requests, and the test duration: the wall time covered by at least one
    procedure (procedures run inside one another, 5.2 inside 5.10: counted once)."""
    workloads: list[str] = []
    loads: list[str] = []
    total_requests = 0
    for p, _ in procs:
        cfg = p["configuration"]
        if cfg["workload"] and str(cfg["workload"]) not in workloads:
            workloads.append(str(cfg["workload"]))
        runs_note = f", {cfg['levels']} runs" if cfg["levels"] > 1 else ""
        loads.append(f"{p['procedure']}: {cfg['load']}{runs_note}")
        total_requests += cfg["requests"]
    return {"workload": ", ".join(workloads) or "not recorded", "load_model": "; ".join(loads),
            "request_count": total_requests, "test_duration_s": busy_time([p for p, _ in procs])[0]}


def _pick_primary(procs: Procs) -> tuple[dict[str, Any], Any] | None:
    """C.1's latency source: the procedure that ranks its latency figures first (the headline's
    latency figures), else the first with metrics."""
    with_metrics = [(p, r) for p, r in procs if r.metrics is not None]
    ranked = [(min(f.rank for f in figs), i) for i, (_, r) in enumerate(with_metrics)
              if (figs := [f for f in getattr(r, "key_figures", None) or [] if f.group == LATENCY])]
    if ranked:
        return with_metrics[min(ranked)[1]]
    return with_metrics[0] if with_metrics else None


def key_results(procs: Procs) -> dict[str, Any]:
    """TTFT/TPOT P50/P99 (Estimate dicts), the maximum output throughput and the throughput at TTFT P99
    under :data:`C1_TTFT_P99_BOUND_S`, each with the procedure and run it came from."""
    key: dict[str, Any] = {"source": None}
    prim = _pick_primary(procs)
    if prim is not None:
        p, _ = prim
        key["source"] = f"{p['procedure']} {p['title']}"
        for name in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
            key[name] = p["figures"].get(name)
    levels = [(f"{p['procedure']} {label}", m) for p, r in procs for label, m in all_metrics(r)]
    best = _max_throughput(procs, levels)
    key["units"] = dict(KEY_RESULT_UNITS)
    key["max_throughput_tps"] = best[0] if best else None
    key["max_throughput_source"] = best[1] if best else None
    at, source = _throughput_at_bound(levels)
    key["throughput_at_ttft_p99_500ms_tps"] = at
    key["throughput_at_ttft_p99_500ms_source"] = source
    return key


def _max_throughput(procs: Procs, levels: list[tuple[str, Any]]) -> tuple[float, str] | None:
    """A declared maximum (5.2's sustainable one, one definition), else the best run's output throughput."""
    best: tuple[float, str] | None = None
    for label, m in levels:
        thr = m.scalars.get("output_throughput")
        if thr is not None and math.isfinite(thr.value) and (best is None or thr.value > best[0]):
            best = (float(thr.value), label)
    for p, r in procs:  # one definition: a declared maximum (5.2's sustainable one), not a capacity probe
        for f in getattr(r, "key_figures", None) or []:
            if f.name == MAX_OUTPUT_THROUGHPUT and isinstance(f.value, (int, float)) and math.isfinite(f.value):
                best = (float(f.value), f"{p['procedure']} {p['title']}, {f.level}")
    return best


def _throughput_at_bound(levels: list[tuple[str, Any]]) -> tuple[float | None, str | None]:
    """The highest output throughput of a run whose TTFT P99 is under the bound, and that run."""
    from ..measure.summary import throughput_at_ttft_p99

    usable = []
    for label, m in levels:
        try:
            usable.append((label, m, m.percentile("ttft", 99).value))
        except (KeyError, ValueError):
            continue
    at = throughput_at_ttft_p99([m for _, m, _ in usable], C1_TTFT_P99_BOUND_S) if usable else None
    if at is not None:
        for label, m, p99 in usable:
            if p99 < C1_TTFT_P99_BOUND_S and m.scalars["output_throughput"].value == at:
                return at, label
    return at, None


# --------------------------------------------------------------------------------------------
# notes
# --------------------------------------------------------------------------------------------


def deviations(doc: Mapping[str, Any], procs: Procs, notes: list[str]) -> list[str]:
    """Deviations from the methodology: an incomplete session first, then per procedure its unmet items and
    an incomplete run, each shared note once with the procedures it concerns, the smoke profile, ``notes``."""
    out: list[str] = []
    shared: dict[str, list[str]] = {}  # the same note from several procedures is listed once
    for p, _ in procs:
        c = p["compliance"]
        must = sum(1 for u in c["unmet"] if u["level"] == "MUST")
        should = sum(1 for u in c["unmet"] if u["level"] == "SHOULD")
        if must or should:
            out.append(f"{p['procedure']}: {c['verdict']} ({must} MUST and {should} SHOULD items unmet; "
                       f"see Compliance with the draft)")
        for n in c["notes"]:
            shared.setdefault(n, []).append(p["procedure"])
        if not p["complete"]:
            out.append(f"{p['procedure']}: run incomplete")
    out.extend(f"{', '.join(ids)}: {n}" for n, ids in shared.items())
    if (doc.get("settings") or {}).get("profile") == "smoke":
        out.append("profile 'smoke' scales parameters below the draft's minimums (every reduction below "
                   "a MUST is listed as an unmet item)")
    if not doc["complete"]:
        out.insert(0, "INCOMPLETE: the session was interrupted; results cover only what finished")
    out.extend(notes)
    return out


def guardrails_text(procs: Procs, decl: Mapping[str, Any]) -> str:
    """The guardrail configuration (§4.8.1): what the SUT reported, else what was declared."""
    guard = next((g for _, r in procs if (g := getattr(getattr(r, "facts", None), "guardrails", None))), None)
    if guard is None and isinstance(decl.get("guardrails"), Mapping):
        guard = decl["guardrails"]
    if not guard:
        return "not declared (§4.8.1: declare input_filter, output_filter and systems)"
    return "; ".join(f"{k.replace('_', ' ')}: {', '.join(map(str, v)) or 'none' if isinstance(v, (list, tuple)) else v}"
                     for k, v in guard.items())
