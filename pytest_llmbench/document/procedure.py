"""One procedure's entry of the results document (``procedures[]`` of ``results.json``).

An entry has two kinds of parts. The measured ones (the result as the procedure wrote it, plots in report
form, key, experience and HTTP-timing figures, the client's delay) are fixed once the procedure returned
its result: :class:`EntryCache` builds them once per result and hands every document its own copy. The
judged ones (measurements, facts, compliance: the session judges its items again at its end, §4.3.2) and
the entry's place in the document are read from the result each time.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..common.draft import VERDICTS
from ..common.jsonable import jsonable
from ..compliance import registry
from ..loadgen.selfcheck import procedure_check
from ..measure.registry import FIGURES, METRICS
from .plotdata import derived_plots, normalise

__all__ = ["DIST_FIGURES", "EXPERIENCE_FIGURES", "HTTP_PHASES", "SCALAR_FIGURES", "EntryCache", "all_metrics",
           "compliance_summary", "experience_figures", "http_timing", "key_figures", "procedure_entry",
           "repetitions"]

#: Key figures of a run (registry.FIGURES): (figure name, distribution, percentile) and scalar names.
DIST_FIGURES = tuple((f.name, f.metric, f.percentile) for f in FIGURES.values() if f.percentile is not None)
SCALAR_FIGURES = tuple(f.name for f in FIGURES.values() if f.statistic is None)
#: Goodput and experience figures shown per run (§5.2.2.3; smooth-goodput paper eq. 5-8; Etalon §4.2).
EXPERIENCE_FIGURES: tuple[tuple[str, str, float | None], ...] = (
    ("goodput", "goodput", None), ("token_weighted_goodput", "token_weighted_goodput", None),
    ("smooth_goodput", "smooth_goodput", None), ("user_idle_latency_p50", "user_idle_latency", 50.0),
    ("user_idle_latency_p99", "user_idle_latency", 99.0), ("fluid_token_rate", "fluid_token_rate", None),
)
#: HTTP-trace phases of the timing table (registry http_* columns, AIPerf http_req_*), percentiles shown.
HTTP_PHASES = ("http_blocked", "http_dns_lookup", "http_connecting", "http_sending", "http_waiting",
               "http_receiving", "http_duration", "http_connection_overhead", "http_total")
HTTP_PERCENTILES = (50.0, 90.0, 99.0)
#: The keys of a result's document the session judges again at its end: read from the result each time.
JUDGED = ("measurements", "facts", "compliance")


# --------------------------------------------------------------------------------------------
# figures of a result
# --------------------------------------------------------------------------------------------


def _est(e: Any) -> dict[str, Any] | None:
    return jsonable(e) if e is not None else None


def all_metrics(result: Any) -> list[tuple[str, Any]]:
    """(label, RunMetrics) of every run of a result, primary first, each object once."""
    seen: set[int] = set()
    out: list[tuple[str, Any]] = []
    if result.metrics is not None:
        out.append(("primary", result.metrics))
        seen.add(id(result.metrics))
    for run in result.runs:
        if id(run.metrics) not in seen:
            seen.add(id(run.metrics))
            out.append((run.label, run.metrics))
    return out


def key_figures(metrics: Any) -> dict[str, Any]:
    """The figures the terminal, C.1 and summary tables show, as Estimate dicts (seconds, tok/s)."""
    if metrics is None:
        return {}
    out: dict[str, Any] = {}
    dists = getattr(metrics, "distributions", {}) or {}
    for name, dist, p in DIST_FIGURES:
        d = dists.get(dist)
        if d is not None and d.n > 0 and p in d.percentiles:
            out[name] = _est(d.percentiles[p])
    scalars = getattr(metrics, "scalars", {}) or {}
    for name in SCALAR_FIGURES:
        if name in scalars:
            out[name] = _est(scalars[name])
    return out


def experience_figures(result: Any) -> list[dict[str, Any]]:
    """Per run (primary first): request goodput next to token-weighted goodput, smooth goodput, user idle
    latency P50/P99 and the fluid token rate, as Estimate dicts with units; runs with none are left out."""
    rows = []
    for label, m in all_metrics(result):
        values: dict[str, Any] = {}
        for name, metric, p in EXPERIENCE_FIGURES:
            if p is None:
                est = (getattr(m, "scalars", None) or {}).get(metric)
            else:
                d = (getattr(m, "distributions", None) or {}).get(metric)
                est = d.percentile(p) if d is not None and d.n > 0 else None
            if est is not None:
                values[name] = _est(est)
        if values:
            rows.append({"label": label, "values": values})
    return rows


def http_timing(result: Any) -> list[dict[str, Any]]:
    """HTTP phase percentiles (seconds) over every traced request of every run (--llm-http-trace);
    empty when no request was traced."""
    import numpy as np

    cols: dict[str, list[Any]] = {ph: [] for ph in HTTP_PHASES}
    for _, m in all_metrics(result):
        pr = getattr(m, "per_request", None)
        if pr is None or HTTP_PHASES[0] not in pr.columns:
            continue
        for ph in HTTP_PHASES:
            cols[ph].append(pr.columns[ph])
    rows = []
    for ph, parts in cols.items():
        v = np.concatenate(parts) if parts else np.empty(0)
        v = v[np.isfinite(v)]
        if v.size:
            rows.append({"metric": ph, "aiperf": METRICS[ph].aiperf, "unit": METRICS[ph].unit, "n": int(v.size),
                         "percentiles": {f"p{p:g}": float(np.percentile(v, p)) for p in HTTP_PERCENTILES},
                         "mean": float(v.mean())})
    return rows


def dataset_lengths(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The Conversation workload's drawn lengths beside App. A.3.2's reference (the workload's
    ``dataset.length_statistics``, workloads/datasets.py): one row per side and percentile, with the file,
    its SHA-256, whether it was identified as the draft's file and how. None for other workloads."""
    ds = (workload or {}).get("dataset")
    st = ds.get("length_statistics") if isinstance(ds, Mapping) else None
    if not isinstance(ds, Mapping) or not isinstance(st, Mapping):
        return None
    ident = ds.get("identification")
    rows = [{"side": side, "percentile": int(key[1:]),
             **{k: r.get(k) for k in ("drawn", "ci_low", "ci_high", "reference", "difference", "compared", "within")}}
            for side in ("input", "output") for key, r in (st.get(side) or {}).items()]
    return jsonable({
        "workload": (workload or {}).get("name"), "source": ds.get("source"), "sha256": ds.get("sha256"),
        "synthetic_standin": bool(ds.get("synthetic_standin")),
        "identification": ident if isinstance(ident, Mapping) else None,
        "n": st.get("n"), "unit": st.get("unit", "tokens"), "tolerance": st.get("tolerance"),
        "confidence": st.get("confidence"), "rule": st.get("rule"),
        "within_tolerance": bool(st.get("within_tolerance")), "rows": rows})


def _load_text(load: Mapping[str, Any] | None) -> str:
    if not load:
        return "not recorded"
    model = load.get("model")
    if model == "open":
        arrival = load.get("arrival") or "open-loop"
        rate = load.get("rate")
        return f"open-loop {arrival}" + (f" at {_g(rate)} req/s" if rate is not None else "")
    if model == "closed":
        c = load.get("concurrency")
        return "closed-loop" + (f" concurrency {c}" if c is not None else "")
    return str(model or "not recorded")


def _g(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


# --------------------------------------------------------------------------------------------
# the judged parts
# --------------------------------------------------------------------------------------------


def _verdict(result: Any) -> str:
    """The §2 verdict of a result; "not evaluated" when the procedure did not reach it."""
    c = getattr(result, "compliance", None)
    if c is not None:
        v = getattr(c, "verdict", None)
        text = str(getattr(v, "value", v))
    else:
        text = str(result.measurements.get("compliance_verdict") or "")
    return text if text in VERDICTS else "not evaluated"


def compliance_summary(result: Any) -> dict[str, Any]:
    """``procedures[].compliance``: the §2 verdict, unmet items with their level, notes, counts,
    deviations and every item with its title, evidence and source."""
    c = getattr(result, "compliance", None)
    if c is None:
        return {"verdict": _verdict(result), "unmet": [], "notes": [], "counts": {}}
    unmet = []
    for check in list(c.unmet_must) + list(c.unmet_should):
        unmet.append({"id": check.id, "level": c.verdict_level(check.id), "status": str(check.status.value),
                      "reason": check.reason, "source": check.source, "key": check.key, "fix": check.fix})
    items = [check.item(c.level(check.id), registry()[check.id].summary) for check in c.checks]
    return jsonable({"verdict": _verdict(result), "unmet": unmet, "notes": list(c.notes), "counts": c.counts(),
                     "deviations": list(c.deviations), "items": items})


def _judged(result: Any) -> dict[str, Any]:
    """The :data:`JUDGED` keys of ``result.to_json()``, as they are now."""
    return {"measurements": jsonable(result.measurements),
            "facts": jsonable(result.facts.to_json()) if result.facts is not None else None,
            "compliance": jsonable(result.compliance.to_json()) if result.compliance is not None else None}


# --------------------------------------------------------------------------------------------
# the measured parts, built once per result
# --------------------------------------------------------------------------------------------


def _relative(path: str | os.PathLike[str] | None, root: Path) -> str | None:
    if not path:
        return None
    p = Path(path)
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return p.as_posix()


def _measured(result: Any, report_dir: Path) -> dict[str, Any]:
    """The parts of a result's entry its procedure fixed: the result's document with the :data:`JUDGED`
    keys left empty, plots in report form, run directories relative to the report, figures."""
    data = jsonable(result.to_json())
    data.update(dict.fromkeys(JUDGED))
    plots, plot_notes = normalise(result.plots, result.metrics)
    derived, derived_notes = derived_plots(result)
    plots.update(derived)
    plot_notes.extend(derived_notes)
    data["plots"] = jsonable(plots)
    for run in data.get("runs") or []:  # run directories relative to the report, so it can be moved
        run["run_dir"] = _relative(run.get("run_dir"), report_dir) or ""
    requests = 0
    for _, m in all_metrics(result):
        rc = m.scalars.get("request_count") if getattr(m, "scalars", None) else None
        requests += int(rc.value) if rc is not None and math.isfinite(rc.value) else 0
    primary = next((i for i, r in enumerate(result.runs) if result.metrics is not None and r.metrics is result.metrics),
                   None)
    return {"data": data, "figures": key_figures(result.metrics), "requests": requests, "plot_notes": plot_notes,
            "experience": experience_figures(result), "http_timing": http_timing(result),
            # the client's own delay propagated to every latency percentile; option-C error (selfcheck.py)
            "client_delay": jsonable(procedure_check(data.get("runs") or [], data.get("metrics"), primary=primary,
                                                     per_request=getattr(result.metrics, "per_request", None)))}


class EntryCache:
    """The measured parts of each result's entry, built once per result (``--llm-compare`` assembles a
    document after every test) and kept as JSON, so every document gets its own copy to change.

    A result is known by its runs list: the session's judged copies of a result share it. A result is
    not changed once its procedure returned it (the session judges copies, ``session.Session.result``).
    """

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Any, bytes, bool]] = {}

    def measured(self, result: Any, report_dir: Path) -> dict[str, Any]:
        kept = self._kept.get(id(result.runs))
        if kept is None or kept[0] is not result.runs:
            parts = _measured(result, report_dir)
            try:
                kept = (result.runs, orjson.dumps(parts), True)
            except TypeError:  # an integer beyond 64 bits: the standard library keeps it exact
                kept = (result.runs, json.dumps(parts).encode("utf-8"), False)
            self._kept[id(result.runs)] = kept
        return orjson.loads(kept[1]) if kept[2] else json.loads(kept[1])


# --------------------------------------------------------------------------------------------
# the entry
# --------------------------------------------------------------------------------------------


def procedure_entry(index: int, key: str, result: Any, report_dir: Path, cache: EntryCache) -> dict[str, Any]:
    """The document's entry of ``result`` (result key ``key``), the ``index``-th in draft order."""
    parts = cache.measured(result, report_dir)
    data = parts["data"]
    data.update(_judged(result))
    facts = data.get("facts") or {}
    workload = (facts.get("workload") or {}).get("name") or result.params.get("workload")
    return {
        "key": key,
        "anchor": f"p{index:02d}-" + re.sub(r"[^0-9A-Za-z]+", "_", result.procedure),
        "procedure": result.procedure,
        "title": result.title,
        "profile": result.profile,
        "complete": bool(result.complete),
        "figures": parts["figures"],
        "configuration": {
            "workload": workload,
            "load": _load_text(facts.get("load")),
            "levels": len(result.runs),
            "requests": parts["requests"],
            "duration_s": jsonable(result.duration_s),
            "seed": facts.get("seed"),
            "sequence_hash": facts.get("sequence_hash"),
            "generator": facts.get("generator"),
        },
        "compliance": compliance_summary(result),
        "run_dirs": [r["run_dir"] for r in data.get("runs") or [] if r["run_dir"]],
        "plot_notes": parts["plot_notes"],
        "experience": parts["experience"],
        "http_timing": parts["http_timing"],
        "client_delay": parts["client_delay"],
        "cold_start": data.get("cold_start"),  # §4.5.3: labelled at the procedure level
        "dataset_lengths": dataset_lengths(facts.get("workload")),  # App. A.3.2 beside what was drawn
        "result": data,
    }


def repetitions(index: int, entry: Mapping[str, Any], reps: list[Any], isolation: str, report_dir: Path,
                cache: EntryCache) -> dict[str, Any]:
    """``--llm-runs N`` (§6.3): every repetition's result and, per key figure, the across-run mean,
    SD, CV and Student-t CI (``gate.summarize_runs``), read from each repetition's summaries."""
    from ..gate.compare import DEFAULT_FIGURES, summary_value
    from ..gate.repeated import summarize_runs
    from ..gate.rules import parse_rule
    from ..gate.storage import primary_label

    runs = []
    for rep in reps:
        e = procedure_entry(index, str(entry["key"]), rep, report_dir, cache)
        runs.append({"result": e["result"], "run_dirs": e["run_dirs"], "figures": e["figures"],
                     "sequence_hash": e["configuration"]["sequence_hash"]})
    across: dict[str, Any] = {}
    for fig in DEFAULT_FIGURES:
        rule = parse_rule(f"{fig}:0%")
        vals = []
        for r in runs:
            label = primary_label(r["result"])
            metrics = next((x.get("metrics") for x in r["result"].get("runs") or [] if str(x.get("label")) == label),
                           r["result"].get("metrics"))
            vals.append(summary_value(metrics, rule))
        if sum(v is not None for v in vals) >= 2:
            across[fig] = jsonable(summarize_runs(fig, vals).to_json())
    return {"n": len(runs), "isolation": isolation, "runs": runs, "across_runs": across,
            "note": "each repetition runs the whole procedure, its own warm-up included (§4.5, §6.3)"}
