"""The results document: one JSON-ready dict built from a :class:`~.session.SessionResult` (App. C).

This is the one boundary between measuring and showing (docs/architecture.md). Every figure a
report, the terminal table, the JUnit properties or the step summary shows is computed here or
before (key results, throughput at TTFT P99 < 500 ms, plot quantiles, histograms and fits) and
stored with its unit; ``report/`` only renders the dict, which is what ``results.json`` holds, so
a report can be rebuilt from disk byte for byte (``python -m pytest_llmbench report``). The layout
is versioned (:data:`~.schema.SCHEMA_VERSION`) and described by ``document/schema.json``.

Secrets never reach the document: the API key is only named (``sut.api_key_env``), and as a
second line of defence every string is scrubbed of the values of that variable and of any
environment variable whose name says it holds a key, token, secret or password (§7).
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..common import draft
from ..common.draft import VERDICTS
from ..common.jsonable import jsonable
from ..compliance import effective_declarations, registry
from ..loadgen.selfcheck import procedure_check
from ..measure.registry import FIGURES, METRICS, lookup
from ..procedures.pipeline import LATENCY, MAX_OUTPUT_THROUGHPUT
from ..session import SessionResult
from ..sut.system import self_declarations
from .headline import annotate, draft_order
from .plotdata import derived_plots, normalise
from .schema import SCHEMA_VERSION

__all__ = ["DRAFT", "SCHEMA_VERSION", "build_document", "iso_ms", "jsonable", "secret_values", "write_exports"]

DRAFT = "draft-gaikwad-llm-benchmarking-methodology-00"
#: The App. C.1 latency bound for "Throughput at P99 TTFT < 500ms" (data/draft.yaml).
C1_TTFT_P99_BOUND_S: float = draft.value("report.c1_ttft_p99_bound_s")
#: Environment variable names whose values are treated as secrets.
SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL)", re.IGNORECASE)
MIN_SECRET_LEN = 6
REDACTED = "***REDACTED***"

#: Key figures of a run (registry.FIGURES): (figure name, distribution, percentile) and scalar names.
DIST_FIGURES = tuple((f.name, f.metric, f.percentile) for f in FIGURES.values() if f.percentile is not None)
SCALAR_FIGURES = tuple(f.name for f in FIGURES.values() if f.statistic is None)
#: Units of the App. C.1 key results that are plain numbers (the rest are Estimates with their unit).
KEY_RESULT_UNITS = {"max_throughput_tps": "tokens/s", "throughput_at_ttft_p99_500ms_tps": "tokens/s"}


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def iso_ms(unix_s: float) -> str:
    """ISO 8601 UTC with milliseconds, ``2026-01-24T06:52:18.123Z`` (§4.7.4)."""
    dt = datetime.fromtimestamp(unix_s, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def secret_values(result: SessionResult, environ: Mapping[str, str] | None = None) -> list[str]:
    """Values that must not appear in any report: the named API key variable and key-like variables."""
    env = os.environ if environ is None else environ
    names: set[str] = set()
    for obj in (result.sut, result.settings):
        name = getattr(obj, "api_key_env", None)
        if name:
            names.add(str(name))
    names.update(k for k in env if SECRET_NAME.search(k))
    values = {env[k] for k in names if k in env and len(env[k]) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _scrub(x: Any, secrets: list[str]) -> Any:
    if not secrets:
        return x
    if isinstance(x, str):
        for s in secrets:
            if s in x:
                x = x.replace(s, REDACTED)
        return x
    if isinstance(x, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in x.items()}
    if isinstance(x, list):
        return [_scrub(v, secrets) for v in x]
    return x


_URL_USERINFO = re.compile(r"(https?://)([^/@\s:]+):([^/@\s]+)@")
_SECRET_ARG = re.compile(r"^(--?[\w-]*(key|token|secret|passw(or)?d)[\w-]*)=(.+)$", re.IGNORECASE)


def _redact_arg(arg: str) -> str:
    arg = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", arg)
    m = _SECRET_ARG.match(arg)
    if m and not m.group(1).lower().endswith("-env"):
        return f"{m.group(1)}={REDACTED}"
    return arg


def command_line(args: list[str]) -> list[str]:
    """The pytest command line with anything secret-looking redacted (§7)."""
    out = ["pytest"]
    redact_next = False
    for a in (str(x) for x in args):
        if redact_next:
            out.append(REDACTED)
            redact_next = False
            continue
        if re.match(r"^--?[\w-]*(key|token|secret|passw(or)?d)[\w-]*$", a, re.IGNORECASE) and not a.endswith("-env"):
            out.append(a)
            redact_next = True
            continue
        out.append(_redact_arg(a))
    return out


def _plugin_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-llmbench")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0.0.0+unknown"


# --------------------------------------------------------------------------------------------
# declarations -> system identification (App. C.1)
# --------------------------------------------------------------------------------------------


def _declarations(result: SessionResult, notes: list[str]) -> dict[str, Any]:
    try:
        decl = effective_declarations(result.settings, self_declarations(result.sut))
    except Exception as exc:  # a bad file must not lose the report
        notes.append(f"declarations could not be read: {exc}")
        return {}
    return {"source": decl.source, "values": jsonable(dict(decl))}


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
# per procedure
# --------------------------------------------------------------------------------------------


def _est(e: Any) -> dict[str, Any] | None:
    return jsonable(e) if e is not None else None


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


def experience_figures(result: Any) -> list[dict[str, Any]]:
    """Per run (primary first): request goodput next to token-weighted goodput, smooth goodput, user idle
    latency P50/P99 and the fluid token rate, as Estimate dicts with units; runs with none are left out."""
    rows = []
    for label, m in _all_metrics(result):
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
    for _, m in _all_metrics(result):
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


def _all_metrics(result: Any) -> list[tuple[str, Any]]:
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


def _verdict(result: Any) -> str:
    """The §2 verdict of a result; "not evaluated" when the procedure did not reach it."""
    c = getattr(result, "compliance", None)
    if c is not None:
        v = getattr(c, "verdict", None)
        text = str(getattr(v, "value", v))
    else:
        text = str(result.measurements.get("compliance_verdict") or "")
    return text if text in VERDICTS else "not evaluated"


def _compliance_summary(result: Any) -> dict[str, Any]:
    c = getattr(result, "compliance", None)
    if c is None:
        return {"verdict": _verdict(result), "unmet": [], "notes": [], "counts": {}}
    unmet = []
    for check in list(c.unmet_must) + list(c.unmet_should):
        unmet.append({"id": check.id, "level": c.verdict_level(check.id), "status": str(check.status.value),
                      "reason": check.reason, "source": check.source, "key": check.key, "fix": check.fix})
    items = [check.item(c.level(check.id), registry()[check.id].summary) for check in c.checks]
    return {"verdict": _verdict(result), "unmet": unmet, "notes": list(c.notes), "counts": jsonable(c.counts()),
            "deviations": list(c.deviations), "items": jsonable(items)}


def _relative(path: str | os.PathLike[str] | None, root: Path) -> str | None:
    if not path:
        return None
    p = Path(path)
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return p.as_posix()


def _procedure(index: int, key: str, result: Any, report_dir: Path) -> dict[str, Any]:
    data = jsonable(result.to_json())
    plots, plot_notes = normalise(result.plots, result.metrics)
    derived, derived_notes = derived_plots(result)
    plots.update(derived)
    plot_notes.extend(derived_notes)
    data["plots"] = jsonable(plots)
    for run in data.get("runs") or []:  # run directories relative to the report, so it can be moved
        run["run_dir"] = _relative(run.get("run_dir"), report_dir) or ""
    facts = data.get("facts") or {}
    workload = (facts.get("workload") or {}).get("name") or result.params.get("workload")
    runs = _all_metrics(result)
    requests = 0
    for _, m in runs:
        rc = m.scalars.get("request_count") if getattr(m, "scalars", None) else None
        requests += int(rc.value) if rc is not None and math.isfinite(rc.value) else 0
    anchor = f"p{index:02d}-" + re.sub(r"[^0-9A-Za-z]+", "_", result.procedure)
    return {
        "key": key,
        "anchor": anchor,
        "procedure": result.procedure,
        "title": result.title,
        "profile": result.profile,
        "complete": bool(result.complete),
        "figures": key_figures(result.metrics),
        "configuration": {
            "workload": workload,
            "load": _load_text(facts.get("load")),
            "levels": len(result.runs),
            "requests": requests,
            "duration_s": jsonable(result.duration_s),
            "seed": facts.get("seed"),
            "sequence_hash": facts.get("sequence_hash"),
            "generator": facts.get("generator"),
        },
        "compliance": _compliance_summary(result),
        "run_dirs": [r["run_dir"] for r in data.get("runs") or [] if r["run_dir"]],
        "plot_notes": plot_notes,
        "experience": experience_figures(result),
        "http_timing": http_timing(result),
        # the client's own delay propagated to every latency percentile; option-C error (selfcheck.py)
        "client_delay": procedure_check(
            data.get("runs") or [], data.get("metrics"),
            primary=next((i for i, r in enumerate(result.runs) if result.metrics is not None
                          and r.metrics is result.metrics), None),
            per_request=getattr(result.metrics, "per_request", None)),
        "cold_start": data.get("cold_start"),  # §4.5.3: labelled at the procedure level
        "result": data,
    }


# --------------------------------------------------------------------------------------------
# Minimum Viable Report (App. C.1)
# --------------------------------------------------------------------------------------------


def _declared(result: Any, group: str) -> list[Any]:
    """The key figures of ``group`` a procedure result declares (base.KeyFigure)."""
    return [f for f in getattr(result, "key_figures", None) or [] if f.group == group]


def _pick_primary(procs: list[tuple[dict[str, Any], Any]]) -> tuple[dict[str, Any], Any] | None:
    """C.1's latency source: the procedure that ranks its latency figures first (the headline's
    latency figures), else the first with metrics."""
    with_metrics = [(p, r) for p, r in procs if r.metrics is not None]
    ranked = [(min(f.rank for f in figs), i) for i, (_, r) in enumerate(with_metrics)
              if (figs := _declared(r, LATENCY))]
    if ranked:
        return with_metrics[min(ranked)[1]]
    return with_metrics[0] if with_metrics else None


def _mvr(doc: dict[str, Any], procs: list[tuple[dict[str, Any], Any]], decl: Mapping[str, Any],
         notes: list[str]) -> dict[str, Any]:
    from ..measure.summary import throughput_at_ttft_p99

    sut = doc.get("sut")
    version = doc["tool"]["version"]
    system = {
        "model": _describe_model(sut, decl),
        "hardware": _describe_hardware(sut, decl),
        "software": _describe_engine(sut, decl, version),
        "sut_boundary": (sut or {}).get("boundary_name") or (sut or {}).get("boundary") or "not declared",
    }
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
    configuration = {
        "workload": ", ".join(workloads) or "not recorded",
        "load_model": "; ".join(loads),
        "request_count": total_requests,
        "test_duration_s": round(sum(float(p["configuration"]["duration_s"] or 0.0) for p, _ in procs), 3),
    }
    key: dict[str, Any] = {"source": None}
    prim = _pick_primary(procs)
    if prim is not None:
        p, _ = prim
        key["source"] = f"{p['procedure']} {p['title']}"
        for name in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):
            key[name] = p["figures"].get(name)
    best: tuple[float, str] | None = None
    levels: list[tuple[str, Any]] = []
    for p, r in procs:
        for label, m in _all_metrics(r):
            levels.append((f"{p['procedure']} {label}", m))
            thr = m.scalars.get("output_throughput")
            if thr is not None and math.isfinite(thr.value) and (best is None or thr.value > best[0]):
                best = (float(thr.value), f"{p['procedure']} {label}")
    for p, r in procs:  # one definition: a declared maximum (5.2's sustainable one), not a capacity probe
        for f in getattr(r, "key_figures", None) or []:
            if f.name == MAX_OUTPUT_THROUGHPUT and isinstance(f.value, (int, float)) and math.isfinite(f.value):
                best = (float(f.value), f"{p['procedure']} {p['title']}, {f.level}")
    key["units"] = dict(KEY_RESULT_UNITS)
    key["max_throughput_tps"] = best[0] if best else None
    key["max_throughput_source"] = best[1] if best else None
    usable = []
    for label, m in levels:
        try:
            usable.append((label, m, m.percentile("ttft", 99).value))
        except (KeyError, ValueError):
            continue
    at = throughput_at_ttft_p99([m for _, m, _ in usable], C1_TTFT_P99_BOUND_S) if usable else None
    key["throughput_at_ttft_p99_500ms_tps"] = at
    key["throughput_at_ttft_p99_500ms_source"] = None
    if at is not None:
        for label, m, p99 in usable:
            if p99 < C1_TTFT_P99_BOUND_S and m.scalars["output_throughput"].value == at:
                key["throughput_at_ttft_p99_500ms_source"] = label
                break
    deviations: list[str] = []
    shared: dict[str, list[str]] = {}  # the same note from several procedures is listed once
    for p, _ in procs:
        c = p["compliance"]
        must = sum(1 for u in c["unmet"] if u["level"] == "MUST")
        should = sum(1 for u in c["unmet"] if u["level"] == "SHOULD")
        if must or should:
            deviations.append(f"{p['procedure']}: {c['verdict']} ({must} MUST and {should} SHOULD items unmet; "
                              f"see Compliance with the draft)")
        for n in c["notes"]:
            shared.setdefault(n, []).append(p["procedure"])
        if not p["complete"]:
            deviations.append(f"{p['procedure']}: run incomplete")
    deviations.extend(f"{', '.join(ids)}: {n}" for n, ids in shared.items())
    profile = (doc.get("settings") or {}).get("profile")
    if profile == "smoke":
        deviations.append("profile 'smoke' scales parameters below the draft's minimums (every reduction below "
                          "a MUST is listed as an unmet item)")
    if not doc["complete"]:
        deviations.insert(0, "INCOMPLETE: the session was interrupted; results cover only what finished")
    deviations.extend(notes)
    guard = None
    for _, r in procs:
        facts = getattr(r, "facts", None)
        g = getattr(facts, "guardrails", None)
        if g:
            guard = g
            break
    if guard is None and isinstance(decl.get("guardrails"), Mapping):
        guard = decl["guardrails"]
    if guard:
        parts = [f"{k.replace('_', ' ')}: {v if not isinstance(v, (list, tuple)) else ', '.join(map(str, v)) or 'none'}"
                 for k, v in guard.items()]
        guard_text = "; ".join(parts)
    else:
        guard_text = "not declared (§4.8.1: declare input_filter, output_filter and systems)"
    return {"system": system, "configuration": configuration, "key_results": jsonable(key),
            "notes": {"deviations": deviations, "guardrails": guard_text}}


def _item_titles() -> dict[str, tuple[str, str]]:
    """id -> (readable title, applies_to) of every compliance item (data/requirements.yaml)."""
    from ..compliance import registry

    return {r.id: (r.summary, r.applies_to) for r in registry()}


# --------------------------------------------------------------------------------------------
# tests, record files
# --------------------------------------------------------------------------------------------


_VERDICTS = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def slo_objectives(texts: list[str]) -> list[dict[str, Any]]:
    """The SLO expressions of a test parsed for plotting: metric, statistic, operator, threshold in the
    metric's base unit (registry), label and threshold text; an expression that does not parse is left out
    (the test itself reports it)."""
    from ..measure.slo import SLOError, parse_slo

    out = []
    for text in texts:
        try:
            s = parse_slo(text)
        except SLOError:
            continue
        out.append({**s.to_json(), "unit": s.info.unit, "label": s.label, "percentile": s.percentile,
                    "threshold_text": s.threshold_text()})
    return out


def slo_result(r: Mapping[str, Any]) -> dict[str, Any]:
    """One judged SLO of a test (``SLOResult.to_json`` + origin) as the document keeps it: the
    expression, where it was written (marker, --llm-slo, body), outcome, value, threshold, n, CI."""
    slo, value = r.get("slo") or {}, r.get("value") or {}
    return {"text": str(slo.get("text") or ""), "origin": r.get("origin") or "body",
            "outcome": "PASS" if r.get("passed") else "FAIL", "metric": slo.get("metric"),
            "statistic": slo.get("statistic"), "operator": slo.get("operator"), "threshold": slo.get("threshold"),
            "value": value.get("value"), "unit": value.get("unit") or "", "n": value.get("n"),
            "ci_low": value.get("ci_low"), "ci_high": value.get("ci_high"), "confidence": value.get("confidence"),
            "undersampled": bool(r.get("undersampled")), "client_error": r.get("client_error"),
            "within_client_error": bool(r.get("within_client_error")), "message": str(r.get("message") or "")}


def _tests(result: SessionResult, procs_by_key: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for nodeid, entry in result.test_outcomes.items():
        outcome = entry.get("outcome") if entry.get("outcome") in _VERDICTS else None
        proc = procs_by_key.get(entry.get("result_key", ""))
        judged = [slo_result(r) for r in entry.get("slo_results") or []]
        # every SLO of the test once, in order: marker and --llm-slo (declared), then those of its body
        texts = list(dict.fromkeys([str(s).strip() for s in entry.get("slos") or []] + [r["text"] for r in judged]))
        out.append({
            "nodeid": str(nodeid),
            "procedure": entry.get("procedure"),
            "result_key": entry.get("result_key"),
            "slos": texts,
            "slo_results": judged,
            "objectives": slo_objectives(texts),
            "outcome": outcome or "not run",
            "when": entry.get("when"),
            "message": entry.get("message") or "",
            "verdict": _VERDICTS.get(str(outcome), "NOT RUN"),
            "compliance_verdict": proc["compliance"]["verdict"] if proc else "no result",
            "anchor": proc["anchor"] if proc else None,
        })
    return out


def _repetitions(index: int, entry: Mapping[str, Any], reps: list[Any], isolation: str,
                 report_dir: Path) -> dict[str, Any]:
    """``--llm-runs N`` (§6.3): every repetition's result and, per key figure, the across-run mean,
    SD, CV and Student-t CI (``gate.summarize_runs``), read from each repetition's summaries."""
    from ..gate.compare import DEFAULT_FIGURES, summary_value
    from ..gate.repeated import summarize_runs
    from ..gate.rules import parse_rule
    from ..gate.storage import primary_label

    runs = []
    for rep in reps:
        e = _procedure(index, str(entry["key"]), rep, report_dir)
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
            vals.append(summary_value(jsonable(metrics), rule))
        if sum(v is not None for v in vals) >= 2:
            across[fig] = summarize_runs(fig, vals).to_json()
    return {"n": len(runs), "isolation": isolation, "runs": runs, "across_runs": across,
            "note": "each repetition runs the whole procedure, its own warm-up included (§4.5, §6.3)"}


def _record_files(report_dir: Path) -> list[dict[str, Any]]:
    runs = report_dir / "runs"
    if not runs.is_dir():
        return []
    out = []
    for f in sorted(p for p in runs.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json")):
        name = f.name
        if name == "records.jsonl":
            kind = "records"
        elif name == "run.json":
            kind = "metadata"
        elif name.endswith(".jsonl") and ("request" in name or "sequence" in name):
            kind = "request-sequence"
        else:
            kind = "other"
        try:
            size = f.stat().st_size
        except OSError:  # pragma: no cover - removed while listing
            continue
        out.append({"path": f.relative_to(report_dir).as_posix(), "kind": kind, "bytes": size})
    return out


# --------------------------------------------------------------------------------------------
# the document
# --------------------------------------------------------------------------------------------


LEVELS_CSV = "levels.csv"
REQUESTS_CSV = "requests.csv"
#: per-level summary columns: (header with unit, figure path in a run's metrics, scale)
_LEVEL_COLUMNS = (("ttft_p50_ms", ("distributions", "ttft", "percentiles", "p50"), 1000.0),
                  ("ttft_p99_ms", ("distributions", "ttft", "percentiles", "p99"), 1000.0),
                  ("tpot_p50_ms", ("distributions", "tpot", "percentiles", "p50"), 1000.0),
                  ("tpot_p99_ms", ("distributions", "tpot", "percentiles", "p99"), 1000.0),
                  ("e2e_p99_ms", ("distributions", "e2e", "percentiles", "p99"), 1000.0),
                  ("output_throughput_tok_s", ("scalars", "output_throughput"), 1.0),
                  ("request_throughput_req_s", ("scalars", "request_throughput"), 1.0),
                  ("success_rate", ("scalars", "success_rate"), 1.0),
                  ("request_count", ("scalars", "request_count"), 1.0))


def _dig(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        d = d.get(k) if isinstance(d, Mapping) else None
    return d.get("value") if isinstance(d, Mapping) else d


def write_exports(doc: Mapping[str, Any], out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """CSV exports next to the reports: one row per run (load level / configuration) and one per request.

    ``levels.csv`` comes from the document; ``requests.csv`` flattens the scalar fields of every
    ``runs/*/records.jsonl`` (times in ns as recorded; lists such as chunk times are left out).
    """
    import csv
    import io

    from ..common.files import write_text_atomic

    out = Path(out_dir)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["procedure", "run", "valid", "load_model", "offered_rate_req_s", "concurrency", "sent", "ok",
                *(c for c, _, _ in _LEVEL_COLUMNS), "run_dir"])
    for p in doc["procedures"]:
        for r in (p.get("result") or {}).get("runs") or []:
            load = r.get("load") or {}
            vals = []
            for _, path, scale in _LEVEL_COLUMNS:
                v = _dig(r.get("metrics") or {}, path)
                vals.append("" if v is None else round(float(v) * scale, 6))
            w.writerow([p["procedure"], r.get("label"), r.get("valid", True), load.get("model", ""),
                        load.get("rate", ""), load.get("concurrency", ""), load.get("sent", ""), load.get("ok", ""),
                        *vals, r.get("run_dir", "")])
    paths = {"levels": out / LEVELS_CSV, "requests": out / REQUESTS_CSV}
    write_text_atomic(paths["levels"], buf.getvalue())
    rows: list[dict[str, Any]] = []
    fields: list[str] = ["run_file"]
    for rec in doc.get("records") or []:
        if rec.get("kind") != "records":
            continue
        f = out / rec["path"]
        if not f.is_file():
            continue
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            row = {"run_file": rec["path"]}
            for k, v in obj.items():
                if isinstance(v, (str, int, float, bool)) or v is None:
                    row[k] = v
                    if k not in fields:
                        fields.append(k)
            rows.append(row)
    buf = io.StringIO()
    dw = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    dw.writeheader()
    dw.writerows(rows)
    write_text_atomic(paths["requests"], buf.getvalue())
    return paths


def _load_generation(settings: Any, procs: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    """How the load was generated: in process, or sharded (shards/) with per-shard figures per run
    (host, requests, send lag, event-loop delay, self-check) and, for Ray, each node's clock offset."""
    runs: list[dict[str, Any]] = []
    backend, nodes, hosts = "in-process", [], set()
    for p, _ in procs:
        for run in p["result"].get("runs") or []:
            sh = (run.get("load") or {}).get("sharding")
            if not sh:
                continue
            backend = sh.get("backend", backend)
            hosts.update(sh.get("hosts") or [])
            nodes = sh.get("nodes") or nodes
            runs.append({"procedure": p["key"], "run": run.get("label"), "workers": sh.get("workers"),
                         "shards": [{"shard": s["index"], "host": s["host"], "node": s.get("node"),
                                     "sent": s["sent"], "ok": s["ok"], "cancelled": s["cancelled"],
                                     "send_lag_p99_ms": (s.get("send_lag") or {}).get("p99_ms"),
                                     "loop_delay_p99_ms": (s.get("loop_delay") or {}).get("p99_ms"),
                                     "valid": s["valid"], "invalid_reason": s.get("invalid_reason"),
                                     "clock_offset_ms": s.get("clock_offset_ms")}
                                    for s in sh.get("shards") or []]})
    return {"backend": backend, "workers": str(getattr(settings, "workers", "1")),
            "ray_address": getattr(settings, "ray_address", None), "hosts": sorted(hosts), "nodes": nodes,
            "runs": runs,
            "clock_note": "intervals are measured on each host's monotonic clock and never combined across "
                          "hosts (§4.7.2); shards start at one wall-clock time"}


def build_document(result: SessionResult, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything the reports show, as plain JSON (see ``document/schema.json``)."""
    settings = result.settings
    report_dir = Path(settings.report)
    started = float(result.started)
    finished = time.time() if result.finished is None else float(result.finished)
    interrupted = bool(result.interrupted)
    complete = bool(result.complete)
    notes: list[str] = []
    sut = result.sut
    version = _plugin_version()
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "pytest-llmbench", "version": version, "draft": DRAFT,
                 "python": platform.python_version(), "platform": platform.platform(terse=True)},
        "command_line": command_line(result.command_line),
        "started": iso_ms(started),
        "finished": iso_ms(finished),
        "duration_s": round(finished - started, 3),
        "complete": bool(complete and not interrupted),
        "interrupted": interrupted or not complete,
        "report_dir": report_dir.as_posix(),
        "settings": jsonable(settings.to_json()),
        "sut": jsonable(sut.to_json()) if sut is not None else None,
    }
    decl_doc = _declarations(result, notes)
    doc["declarations"] = decl_doc
    decl = decl_doc.get("values", {}) if decl_doc else {}
    doc["capacity"] = {str(k): jsonable(v) for k, v in result.capacity.items()}
    procs: list[tuple[dict[str, Any], Any]] = []
    ordered = sorted(result.results.items(), key=lambda kv: draft_order(kv[1].procedure))  # draft order, stable
    for i, (key, proc_result) in enumerate(ordered):
        procs.append((_procedure(i, str(key), proc_result, report_dir), proc_result))
    doc["procedures"] = [p for p, _ in procs]
    for i, (p, _) in enumerate(procs):
        reps = result.repetitions.get(p["key"])
        if reps and len(reps) > 1:
            p["repetitions"] = _repetitions(i, p, reps, result.repetition_isolation.get(p["key"], ""), report_dir)
    by_key = {p["key"]: p for p, _ in procs}
    doc["tests"] = _tests(result, by_key)
    for p, _ in procs:
        p["tests"] = [t["nodeid"] for t in doc["tests"] if t["result_key"] == p["key"]]
        slos: dict[str, dict[str, Any]] = {}  # SLOs of its tests, each once (drawn on its plots)
        for t in doc["tests"]:
            if t["result_key"] == p["key"]:
                slos.update({f"{o['label']} {o['operator']} {o['threshold']!r}": o for o in t["objectives"]})
        p["slos"] = list(slos.values())
    doc["summary"] = _mvr(doc, procs, decl, notes)
    shown = {FIGURES[name].metric for p, _ in procs for name in p["figures"]}
    shown.update(lookup(f).name for f in ("ttft", "tpot", "output_throughput"))  # the key results
    exp_metric = {name: metric for name, metric, _ in EXPERIENCE_FIGURES}
    for p, _ in procs:
        shown.update(v["metric"] for v in p["result"]["plots"].values() if v.get("kind") == "cdfs")
        shown.update(exp_metric[k] for row in p["experience"] for k in row["values"])
        shown.update(row["metric"] for row in p["http_timing"])
    doc["metrics"] = {name: METRICS[name].to_json() for name in sorted(shown)}
    doc["records"] = _record_files(report_dir)
    annotate(doc, _item_titles())
    doc["exports"] = {"levels_csv": LEVELS_CSV, "requests_csv": REQUESTS_CSV}
    # procedures can run inside one another (5.2 inside 5.10): the test duration is their wall time
    doc["summary"]["configuration"]["test_duration_s"] = doc["headline"]["durations"]["procedures_s"]
    doc["load_generation"] = _load_generation(settings, procs)
    doc["reproduction"] = {
        "seed": settings.seed,
        "plugin_version": version,
        "command_line": doc["command_line"],
        "workloads": sorted({str(p["configuration"]["workload"]) for p, _ in procs if p["configuration"]["workload"]}),
        "sequence_hashes": {p["key"]: p["configuration"]["sequence_hash"] for p, _ in procs
                            if p["configuration"]["sequence_hash"]},
        "request_sequence_files": [r["path"] for r in doc["records"] if r["kind"] == "request-sequence"],
        "tokenizer": settings.tokenizer,
    }
    doc = _scrub(jsonable(doc), secret_values(result, environ))
    # a JSON round trip so the in-memory document equals what results.json reloads to
    return json.loads(json.dumps(doc, allow_nan=False))

