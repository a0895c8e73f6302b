"""requests.csv streamed record by record (issue 46, item 1): the same columns, the same rows in the same
order as the former whole-file export (every records.jsonl read whole, one dict per record, one StringIO)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.common.storage import RunWriter
from pytest_llmbench.document.exports import REQUESTS_CSV, write_exports


def _former_requests_csv(doc: dict[str, Any], out: Path) -> str:
    """The export as it was before it was streamed (document/exports.py at 002158a), kept as the reference."""
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
    return buf.getvalue()


def _record(i: int, *, usage: bool, error: bool = False) -> RequestRecord:
    r = RequestRecord(index=i, workload="w", spec_input_tokens=100 + i, max_tokens=20, prompt_hash=f"{i:016x}",
                      sent_ns=1_000 * i, first_token_ns=1_000 * i + 50, end_ns=1_000 * i + 90,
                      chunk_ns=[1_000 * i + 50, 1_000 * i + 90], chunk_text=["a,b", "\"q\"\n"], chunk_tokens=[1, 2])
    if usage:
        r.usage = {"completion_tokens": 3}
        r.output_tokens_server = 3
    if error:
        r.error_type, r.error_message, r.status = ErrorType.HTTP_5XX, "HTTP 500: boom, again", 500
    return r


def test_requests_csv_streamed_is_the_former_export(tmp_path: Path) -> None:
    # two runs: the first has a dict in 'usage' on every record (no column), the second a None on some (a
    # column that appears only then, after the first file's columns); a torn last line; a records file the
    # document lists that is missing; an entry of another kind
    with RunWriter(tmp_path / "runs" / "a") as w:
        for i in range(3):
            w.write(_record(i, usage=True))
    with RunWriter(tmp_path / "runs" / "b") as w:
        for i in range(4):
            w.write(_record(i, usage=i % 2 == 0, error=i == 3))
    with open(tmp_path / "runs" / "b" / "records.jsonl", "a", encoding="utf-8") as f:
        f.write('{"index": 99, "torn')
    doc = {"procedures": [], "records": [
        {"kind": "records", "path": "runs/a/records.jsonl"},
        {"kind": "telemetry", "path": "runs/a/telemetry.json"},
        {"kind": "records", "path": "runs/missing/records.jsonl"},
        {"kind": "records", "path": "runs/b/records.jsonl"},
    ]}
    expected = _former_requests_csv(doc, tmp_path)
    paths = write_exports(doc, tmp_path)
    got = paths["requests"].read_text(encoding="utf-8")
    assert paths["requests"] == tmp_path / REQUESTS_CSV
    assert got == expected
    header, *rows = list(csv.reader(io.StringIO(got)))
    assert len(rows) == 7 and header[0] == "run_file" and header[-1] == "usage"  # 'usage' first seen in run b
    assert [r[0] for r in rows] == ["runs/a/records.jsonl"] * 3 + ["runs/b/records.jsonl"] * 4
    assert not list(tmp_path.glob(".requests.csv.*"))  # written through a temporary file, renamed at the end


def test_requests_csv_of_no_records(tmp_path: Path) -> None:
    doc = {"procedures": [], "records": []}
    write_exports(doc, tmp_path)
    assert (tmp_path / REQUESTS_CSV).read_text(encoding="utf-8") == _former_requests_csv(doc, tmp_path) == "run_file\n"
