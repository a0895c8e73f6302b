"""CSV exports next to the reports (docs/reports.md): ``levels.csv``, one row per run (load level or
configuration) with its summary figures from the document, and ``requests.csv``, one row per request
(the scalar fields of every ``runs/*/records.jsonl`` the document lists).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..common.files import write_text_atomic

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
