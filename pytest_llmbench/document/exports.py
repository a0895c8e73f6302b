"""CSV exports next to the reports (docs/reports.md): ``levels.csv``, one row per run (load level or
configuration) with its summary figures from the document, and ``requests.csv``, one row per request
(the scalar fields of every ``runs/*/records.jsonl`` the document lists).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..common.files import atomic_text_file, write_text_atomic
from ..common.timing import timed

__all__ = ["LEVELS_CSV", "LEVEL_COLUMNS", "REQUESTS_CSV", "write_exports"]

LEVELS_CSV = "levels.csv"
REQUESTS_CSV = "requests.csv"
#: per-level summary columns: (header with unit, figure path in a run's metrics, scale)
LEVEL_COLUMNS = (("ttft_p50_ms", ("distributions", "ttft", "percentiles", "p50"), 1000.0),
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
    out = Path(out_dir)
    with timed("export: levels.csv"):
        paths = _levels_csv(doc, out)
    with timed("export: requests.csv"):
        paths["requests"] = _requests_csv(doc, out)
    return paths


def _levels_csv(doc: Mapping[str, Any], out: Path) -> dict[str, Path]:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["procedure", "run", "valid", "load_model", "offered_rate_req_s", "concurrency", "sent", "ok",
                *(c for c, _, _ in LEVEL_COLUMNS), "run_dir"])
    for p in doc["procedures"]:
        for r in (p.get("result") or {}).get("runs") or []:
            load = r.get("load") or {}
            vals = []
            for _, path, scale in LEVEL_COLUMNS:
                v = _dig(r.get("metrics") or {}, path)
                vals.append("" if v is None else round(float(v) * scale, 6))
            w.writerow([p["procedure"], r.get("label"), r.get("valid", True), load.get("model", ""),
                        load.get("rate", ""), load.get("concurrency", ""), load.get("sent", ""), load.get("ok", ""),
                        *vals, r.get("run_dir", "")])
    paths = {"levels": out / LEVELS_CSV}
    write_text_atomic(paths["levels"], buf.getvalue())
    return paths


def _requests_csv(doc: Mapping[str, Any], out: Path) -> Path:
    path = out / REQUESTS_CSV
    files = [(rec["path"], out / rec["path"]) for rec in doc.get("records") or []
             if rec.get("kind") == "records" and (out / rec["path"]).is_file()]
    # two passes over the records files, one record at a time: the columns (every scalar field, in the order
    # they first appear), then the rows, written as they are read (issue 46: no list of rows, no text held)
    fields: dict[str, None] = {"run_file": None}
    for _, obj in _records(files):
        fields.update((k, None) for k, v in obj.items() if k not in fields and _scalar(v))
    with atomic_text_file(path) as f:
        dw = csv.DictWriter(f, fieldnames=list(fields), lineterminator="\n", extrasaction="ignore")
        dw.writeheader()
        for name, obj in _records(files):
            row = {"run_file": name}
            row.update((k, v) for k, v in obj.items() if _scalar(v))
            dw.writerow(row)
    return path


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


def _records(files: list[tuple[str, Path]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each records file's JSON objects with the file's name as the document lists it, line by line (a line
    that is not JSON, e.g. a torn last line, is left out)."""
    for name, path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    yield name, obj
