"""The results document: one JSON-ready dict built from a :class:`~.session.SessionResult` (App. C).

This is the one boundary between measuring and showing (docs/architecture.md). Every figure a
report, the terminal table, the JUnit properties or the step summary shows is computed here or
before (key results, throughput at TTFT P99 < 500 ms, plot quantiles, histograms and fits) and
stored with its unit; ``report/`` only renders the dict, which is what ``results.json`` holds, so
a report can be rebuilt from disk byte for byte (``python -m pytest_llmbench report``). The layout
is versioned (:data:`~.schema.SCHEMA_VERSION`) and described by ``document/schema.json``.

A document is written in three steps, as pytest-benchmark writes its JSON: :func:`generate_document`
builds it (the plugin's ``pytest_llmbench_generate_document``), update hooks add to it in a declared
order (``pytest_llmbench_update_document``: the headline first, :func:`.headline.annotate`; the
comparison with a baseline last), and :func:`finish_document` puts its keys in their order, scrubs
secrets from every string (§7, :mod:`.redact`) and makes it equal to what ``results.json`` reloads to.
:func:`build_document` is the three steps without pytest (the headline the only update). The parts live
beside this module: one procedure's entry (:mod:`.procedure`), the tests (:mod:`.outcomes`), App. C.1
(:mod:`.mvr`), the headline (:mod:`.headline`), plot data (:mod:`.plotdata`), the CSV exports
(:mod:`.exports`).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..common.jsonable import jsonable
from ..compliance import effective_declarations
from ..measure.registry import FIGURES, METRICS, lookup
from ..session import SessionResult
from ..sut.system import self_declarations
from .exports import LEVELS_CSV, REQUESTS_CSV
from .headline import annotate, draft_order, item_titles
from .mvr import minimum_viable_report
from .outcomes import outcome_entries
from .procedure import EXPERIENCE_FIGURES, EntryCache, procedure_entry, repetitions
from .redact import command_line, scrub, secret_values
from .schema import SCHEMA_VERSION

__all__ = ["DRAFT", "KEY_ORDER", "SCHEMA_VERSION", "build_document", "finish_document", "generate_document",
           "iso_ms"]

DRAFT = "draft-gaikwad-llm-benchmarking-methodology-00"
#: The top-level keys of ``results.json`` in the order they are written, whichever step added them; keys
#: an update hook of a user adds follow, in the order they were added.
KEY_ORDER = ("schema_version", "tool", "command_line", "started", "finished", "duration_s", "complete",
             "interrupted", "report_dir", "settings", "sut", "declarations", "capacity", "procedures", "tests",
             "summary", "metrics", "records", "headline", "compliance_overview", "exports", "load_generation",
             "reproduction", "comparison")


def iso_ms(unix_s: float) -> str:
    """ISO 8601 UTC with milliseconds, ``2026-01-24T06:52:18.123Z`` (§4.7.4)."""
    dt = datetime.fromtimestamp(unix_s, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _plugin_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-llmbench")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0.0.0+unknown"


def _declarations(result: SessionResult, notes: list[str]) -> dict[str, Any]:
    try:
        decl = effective_declarations(result.settings, self_declarations(result.sut))
    except Exception as exc:  # a bad file must not lose the report
        notes.append(f"declarations could not be read: {exc}")
        return {}
    return {"source": decl.source, "values": jsonable(dict(decl))}


def _record_files(report_dir: Path) -> list[dict[str, Any]]:
    """Every record, metadata and request-sequence file under ``report_dir/runs`` with its size."""
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


def _procedures(result: SessionResult, report_dir: Path, cache: EntryCache) -> list[tuple[dict[str, Any], Any]]:
    """(entry, result) of every procedure result in draft order (stable), repetitions included, each with
    its tests and their SLOs (drawn on its plots)."""
    ordered = sorted(result.results.items(), key=lambda kv: draft_order(kv[1].procedure))
    procs = [(procedure_entry(i, str(key), r, report_dir, cache), r) for i, (key, r) in enumerate(ordered)]
    for i, (p, _) in enumerate(procs):
        reps = result.repetitions.get(p["key"])
        if reps and len(reps) > 1:
            p["repetitions"] = repetitions(i, p, reps, result.repetition_isolation.get(p["key"], ""), report_dir,
                                           cache)
    return procs


def _attach_tests(procs: list[tuple[dict[str, Any], Any]], tests: list[dict[str, Any]]) -> None:
    for p, _ in procs:
        p["tests"] = [t["nodeid"] for t in tests if t["result_key"] == p["key"]]
        slos: dict[str, dict[str, Any]] = {}  # SLOs of its tests, each once (drawn on its plots)
        for t in tests:
            if t["result_key"] == p["key"]:
                slos.update({f"{o['label']} {o['operator']} {o['threshold']!r}": o for o in t["objectives"]})
        p["slos"] = list(slos.values())


def _metrics_shown(procs: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    """The registry's entry (name, unit, definition ...) of every metric the document shows."""
    shown = {FIGURES[name].metric for p, _ in procs for name in p["figures"]}
    shown.update(lookup(f).name for f in ("ttft", "tpot", "output_throughput"))  # the key results
    exp_metric = {name: metric for name, metric, _ in EXPERIENCE_FIGURES}
    for p, _ in procs:
        shown.update(v["metric"] for v in p["result"]["plots"].values() if v.get("kind") == "cdfs")
        shown.update(exp_metric[k] for row in p["experience"] for k in row["values"])
        shown.update(row["metric"] for row in p["http_timing"])
    return jsonable({name: METRICS[name].to_json() for name in sorted(shown)})


def _reproduction(doc: Mapping[str, Any], settings: Any, procs: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    return jsonable({
        "seed": settings.seed,
        "plugin_version": doc["tool"]["version"],
        "command_line": doc["command_line"],
        "workloads": sorted({str(p["configuration"]["workload"]) for p, _ in procs if p["configuration"]["workload"]}),
        "sequence_hashes": {p["key"]: p["configuration"]["sequence_hash"] for p, _ in procs
                            if p["configuration"]["sequence_hash"]},
        "request_sequence_files": [r["path"] for r in doc["records"] if r["kind"] == "request-sequence"],
        "tokenizer": settings.tokenizer,
    })


def generate_document(result: SessionResult, cache: EntryCache | None = None) -> dict[str, Any]:
    """The document of ``result`` before its updates (headline, comparison) and finish, as plain JSON.

    ``cache`` keeps each procedure's measured parts between documents of one session (a new one: none kept).
    """
    settings = result.settings
    report_dir = Path(settings.report)
    started = float(result.started)
    finished = time.time() if result.finished is None else float(result.finished)
    interrupted, complete = bool(result.interrupted), bool(result.complete)
    notes: list[str] = []
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "pytest-llmbench", "version": _plugin_version(), "draft": DRAFT,
                 "python": platform.python_version(), "platform": platform.platform(terse=True)},
        "command_line": command_line(result.command_line),
        "started": iso_ms(started),
        "finished": iso_ms(finished),
        "duration_s": round(finished - started, 3),
        "complete": bool(complete and not interrupted),
        "interrupted": interrupted or not complete,
        "report_dir": report_dir.as_posix(),
        "settings": jsonable(settings.to_json()),
        "sut": jsonable(result.sut.to_json()) if result.sut is not None else None,
        "declarations": _declarations(result, notes),
        "capacity": {str(k): jsonable(v) for k, v in result.capacity.items()},
    }
    procs = _procedures(result, report_dir, cache or EntryCache())
    doc["procedures"] = [p for p, _ in procs]
    doc["tests"] = jsonable(outcome_entries(result, {p["key"]: p for p, _ in procs}))
    _attach_tests(procs, doc["tests"])
    decl = (doc["declarations"] or {}).get("values", {})
    doc["summary"] = jsonable(minimum_viable_report(doc, procs, decl, notes))
    doc["metrics"] = _metrics_shown(procs)
    doc["records"] = _record_files(report_dir)
    doc["exports"] = {"levels_csv": LEVELS_CSV, "requests_csv": REQUESTS_CSV}
    doc["load_generation"] = jsonable(_load_generation(settings, procs))
    doc["reproduction"] = _reproduction(doc, settings, procs)
    return doc


def finish_document(doc: Mapping[str, Any], secrets: list[str]) -> dict[str, Any]:
    """The document as written: keys in :data:`KEY_ORDER`, every string scrubbed of ``secrets`` (§7), and
    a JSON round trip, so the in-memory document equals what results.json reloads to."""
    ordered = {k: doc[k] for k in KEY_ORDER if k in doc}
    ordered.update((k, v) for k, v in doc.items() if k not in ordered)
    return json.loads(json.dumps(scrub(jsonable(ordered), secrets), allow_nan=False))


def build_document(result: SessionResult, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything the reports show, as plain JSON (see ``document/schema.json``), without pytest: the
    document generated, its headline added (the one update that is not the plugin's comparison), finished."""
    doc = generate_document(result)
    annotate(doc, item_titles())
    return finish_document(doc, secret_values(result, environ))
