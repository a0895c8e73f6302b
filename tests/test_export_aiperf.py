"""AIPerf-compatible export: record lines, summary JSON and CSV, values computed by hand."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
from factories import MS, S, make_record

from pytest_llmbench.common.records import ClockAnchor, ErrorType, RequestRecord
from pytest_llmbench.measure.export_aiperf import (
    STAT_KEYS,
    aiperf_csv,
    aiperf_record_lines,
    aiperf_summary,
    write_aiperf_export,
)
from pytest_llmbench.measure.summary import summarize

ANCHOR = ClockAnchor(perf_ns=0, unix_ns=1_700_000_000 * S)


def _counts(osl: int, isl: int = 10) -> dict[str, int]:
    """make_record fields: max_tokens and both output counts ``osl``, the server's input count ``isl``."""
    return {"max_tokens": osl, "output_tokens_server": osl, "output_tokens_client": osl, "input_tokens_server": isl}


def _records() -> list[RequestRecord]:
    trace = {"request_start_ns": 0, "reused_ns": 1 * MS, "headers_sent_ns": 2 * MS, "body_sent_ns": 3 * MS,
             "response_headers_ns": 50 * MS, "first_byte_ns": 60 * MS, "last_byte_ns": 300 * MS,
             "request_header_bytes": 100, "request_body_bytes": 50, "request_chunks": 1,
             "response_header_bytes": 70, "response_body_bytes": 500, "response_chunks": 3}
    # one token per chunk, times in s
    a = make_record(0, chunks=(0.1, 0.2, 0.3), unit=S, spec_input_tokens=10, **_counts(3), http_trace=trace,
                    usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})
    b = make_record(1, sent=0.5, chunks=(0.7, 0.8), unit=S, spec_input_tokens=10, **_counts(2))
    c = make_record(2, sent=1.0, chunks=(1.3, 1.5, 1.7, 1.9), unit=S, spec_input_tokens=10, **_counts(4))
    failed = make_record(3, sent=1.2, chunks=(), end=1.4, unit=S, spec_input_tokens=10, **_counts(0, isl=33),
                         error_type=ErrorType.HTTP_5XX, status=500, error_message="HTTP 500: boom")
    cancelled = make_record(4, sent=1.5, chunks=(), end=2.0, unit=S, spec_input_tokens=10, **_counts(0),
                            error_type=ErrorType.CANCELLED, error_message="cancelled")
    return [c, failed, a, cancelled, b]  # any order: exported in submission order


def test_record_lines_shape_and_values() -> None:
    lines = aiperf_record_lines(_records(), summarize(_records()), anchor=ANCHOR)
    assert [ln["metadata"]["llmbench_index"] for ln in lines] == [0, 1, 2, 3, 4]
    a = lines[0]
    assert set(a) == {"metadata", "metrics", "error"} and a["error"] is None
    m = a["metrics"]
    assert m["time_to_first_token"] == {"value": pytest.approx(100.0), "unit": "ms"}
    assert m["request_latency"]["value"] == pytest.approx(300.0)
    assert m["inter_token_latency"]["value"] == pytest.approx(100.0)  # (300 - 100) / (3 - 1)
    assert m["output_token_throughput_per_user"]["value"] == pytest.approx(10.0)
    assert m["inter_chunk_latency"]["value"] == pytest.approx([100.0, 100.0])
    assert m["output_sequence_length"] == {"value": 3, "unit": "tokens"}
    assert m["usage_total_tokens"]["value"] == 13
    assert m["http_req_waiting"]["value"] == pytest.approx(57.0) and m["http_req_connection_reused"]["value"] == 1
    assert m["http_req_data_received"] == {"value": 570, "unit": "bytes"}
    assert a["metadata"]["request_start_ns"] == 1_700_000_000 * S
    assert a["metadata"]["request_end_ns"] == 1_700_000_000 * S + int(0.3 * S)
    assert "http_req_waiting" not in lines[1]["metrics"]  # no trace recorded
    failed = lines[3]
    assert failed["metrics"] == {"error_isl": {"value": 33, "unit": "tokens"}}
    assert failed["error"] == {"code": 500, "type": "http_5xx", "message": "HTTP 500: boom"}
    assert lines[4]["metadata"]["was_cancelled"] and lines[4]["metrics"] == {}


def test_summary_statistics_by_hand() -> None:
    s = aiperf_summary(_records(), summarize(_records()), anchor=ANCHOR)
    json.dumps(s, allow_nan=False)
    lat = s["request_latency"]  # 300, 300, 900 ms
    assert lat["unit"] == "ms" and set(STAT_KEYS) <= set(lat)
    assert lat["avg"] == pytest.approx(500.0) and lat["min"] == pytest.approx(300.0)
    assert lat["max"] == pytest.approx(900.0) and lat["sum"] == pytest.approx(1500.0)
    assert lat["p50"] == pytest.approx(300.0)
    assert lat["std"] == pytest.approx((((200**2) * 2 + 400**2) / 3) ** 0.5)
    assert s["request_count"] == {"unit": "requests", "avg": 3}
    assert s["error_request_count"]["avg"] == 1
    assert s["benchmark_duration"]["avg"] == pytest.approx(2.0)  # 0 -> cancelled end at 2.0 s
    assert s["request_throughput"]["avg"] == pytest.approx(3 / 2.0)
    assert s["total_osl"]["avg"] == 9 and s["total_isl"]["avg"] == 30
    assert s["total_error_isl"]["avg"] == 33
    assert s["inter_chunk_latency"]["avg"] == pytest.approx((100 + 100 + 100 + 200 + 200 + 200) / 6)
    assert s["error_summary"] == [{"error_details": {"code": 500, "type": "http_5xx", "message": "HTTP 500: boom"},
                                   "count": 1}]
    assert s["start_time"] == ANCHOR.iso(0)


def test_csv_two_sections() -> None:
    text = aiperf_csv(aiperf_summary(_records(), summarize(_records()), anchor=ANCHOR))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["Metric", *STAT_KEYS]
    blank = rows.index([])
    stats = {r[0]: r for r in rows[1:blank]}
    values = {r[0]: r[1] for r in rows[blank + 2:]}
    assert rows[blank + 1] == ["Metric", "Value"]
    assert stats["Request Latency (ms)"][1] == "500.00"
    assert values["Request Count"] == "3" and values["Benchmark Duration (sec)"] == "2.00"


def test_write_files(tmp_path) -> None:
    paths = write_aiperf_export(tmp_path / "aiperf", _records(), summarize(_records()), anchor=ANCHOR)
    assert [p.name for p in paths] == ["profile_export.jsonl", "profile_export_aiperf.json",
                                      "profile_export_aiperf.csv"]
    lines = [json.loads(x) for x in paths[0].read_text().splitlines()]
    assert len(lines) == 5
    assert json.loads(paths[1].read_text())["request_count"]["avg"] == 3


def test_nothing_to_export() -> None:
    with pytest.raises(ValueError, match="no records to export"):
        aiperf_summary([], summarize(_records()))


def test_the_summary_given_must_be_of_the_exported_records() -> None:
    """The export takes the run's summary instead of summarising (issue 30): one of other records is refused."""
    recs = _records()
    with pytest.raises(ValueError, match=r"summary given \(4 rows\) is not of these 5 records"):
        aiperf_record_lines(recs, summarize(recs[1:]))
    other = [dataclasses.replace(r, index=r.index + 10) for r in recs]  # as many rows, other requests
    with pytest.raises(ValueError, match="pass summarize\\(\\) of the same records"):
        aiperf_summary(recs, summarize(other))
