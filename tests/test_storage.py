"""Run storage: records.jsonl streamed per line, run.json atomic, loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from factories import make_record

from pytest_llmbench.common.records import ClockAnchor, ErrorType, RequestRecord
from pytest_llmbench.common.storage import (
    RECORDS_FILE,
    RUN_FILE,
    RunMetadata,
    RunWriter,
    StorageError,
    iter_records,
    load_run,
    write_json_atomic,
)


def _stored(i: int, *, error: ErrorType | None = None) -> RequestRecord:
    """One request with every kind of field filled (times in ns), non-ASCII text, and optionally an error."""
    return make_record(i, spec_input_tokens=10, max_tokens=5, request_class="short", unit=1, intended_ns=100, sent=105,
                       chunks=[200, 250, 300], text=["", " héllo", " wörld"], tokens=[0, 1, 1], end=400,
                       server_token_ns=[240, 290], server_timing={"queue_ns": 5, "prefill_ns": 7},
                       usage={"prompt_tokens": 10, "completion_tokens": 2}, status=200, error_type=error,
                       error_message="boom" if error else None)


def test_round_trip_records_and_metadata(tmp_path: Path) -> None:
    anchor = ClockAnchor.now()
    meta = RunMetadata(parameters={"rate": 2.0}, profile="smoke", workload="chatbot", seed=42,
                       tokenizer={"name": "cl100k_base"}, clock_anchor=anchor, warmup={"minimum_met": False},
                       switches={"prefix_cache": True}, cold_start=False)
    recs = [_stored(0), _stored(1, error=ErrorType.RATE_LIMITED)]
    with RunWriter(tmp_path / "run", metadata=meta, keep_in_memory=True) as w:
        for r in recs:
            w.write(r)
        assert w.records == recs
        meta.server_metrics.append({"llmbench:num_requests_waiting": 0.0})
        w.write_metadata()
    run = load_run(tmp_path / "run")
    assert run.records == recs and run.torn_lines == 0
    assert run.records[1].error_type is ErrorType.RATE_LIMITED
    assert run.metadata.clock_anchor == anchor and run.metadata.seed == 42
    assert run.metadata.server_metrics == [{"llmbench:num_requests_waiting": 0.0}]
    assert run.metadata.plugin_version and run.metadata.schema.startswith("pytest-llmbench/run/")
    assert list(iter_records(tmp_path / "run")) == recs


def test_drop_output_text(tmp_path: Path) -> None:
    with RunWriter(tmp_path, keep_text=False) as w:
        w.write(_stored(0))
    (rec,) = load_run(tmp_path).records
    assert rec.chunk_text == ["", "", ""] and rec.chunk_ns == [200, 250, 300] and rec.chunk_tokens == [0, 1, 1]
    assert "héllo" not in (tmp_path / RECORDS_FILE).read_text(encoding="utf-8")
    assert json.loads((tmp_path / RUN_FILE).read_text())["keep_text"] is False


def test_interrupted_run_keeps_every_written_record(tmp_path: Path) -> None:
    """A process that dies without closing the writer still leaves every record on disk."""
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_storage import _stored
        from pytest_llmbench.common.storage import RunWriter
        w = RunWriter({str(tmp_path)!r})
        for i in range(25):
            w.write(_stored(i))
        os._exit(3)  # no close(), no flush at exit
    """)
    assert subprocess.run([sys.executable, "-c", code]).returncode == 3
    assert [r.index for r in load_run(tmp_path).records] == list(range(25))


def test_torn_last_line_is_skipped_but_corruption_is_an_error(tmp_path: Path) -> None:
    with RunWriter(tmp_path) as w:
        w.write(_stored(0))
        w.write(_stored(1))
    with open(tmp_path / RECORDS_FILE, "a", encoding="utf-8") as f:
        f.write(_stored(2).dumps()[:40])  # died mid-write
    run = load_run(tmp_path)
    assert [r.index for r in run.records] == [0, 1] and run.torn_lines == 1
    lines = (tmp_path / RECORDS_FILE).read_text(encoding="utf-8").splitlines()
    (tmp_path / RECORDS_FILE).write_text(lines[0] + "\n{garbage\n" + lines[1] + "\n", encoding="utf-8")
    with pytest.raises(StorageError, match=r"records.jsonl:2"):
        load_run(tmp_path)


def test_run_json_is_written_atomically(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"v": 2, "bad": object()})  # fails half-way through dumping
    assert json.loads(target.read_text()) == {"v": 1}  # the old version is intact
    assert os.listdir(tmp_path) == ["run.json"]  # no temp file left behind


def test_missing_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no run.json"):
        load_run(tmp_path / "nope")
    (tmp_path / RUN_FILE).write_text("{}")
    with pytest.raises(StorageError, match="no such records file"):
        load_run(tmp_path)


def test_run_json_carries_the_records_format_and_older_files_are_read(tmp_path: Path) -> None:
    from pytest_llmbench.common.records import RECORDS_FORMAT

    with RunWriter(tmp_path / "run", metadata=RunMetadata(profile="smoke")) as w:
        w.write(_stored(0))
    meta_path = tmp_path / "run" / RUN_FILE
    stored = json.loads(meta_path.read_text(encoding="utf-8"))
    assert stored["records_format"] == RECORDS_FORMAT
    # an older run: no records_format in run.json, a record line missing later optional fields
    del stored["records_format"]
    meta_path.write_text(json.dumps(stored), encoding="utf-8")
    line = json.loads((tmp_path / "run" / RECORDS_FILE).read_text(encoding="utf-8").splitlines()[0])
    for optional in ("server_token_ns", "server_timing", "usage", "request_class", "http_trace",
                     "reasoning_tokens_client"):
        line.pop(optional, None)
    (tmp_path / "run" / RECORDS_FILE).write_text(json.dumps(line) + "\n", encoding="utf-8")
    run = load_run(tmp_path / "run")
    assert run.metadata.records_format == "1.0" and run.records[0].index == 0
    assert run.records[0].request_class is None
    # a future major version is named, not misread
    stored["records_format"] = "1.3"  # before T_submit moved to the last request byte: still read
    meta_path.write_text(json.dumps(stored), encoding="utf-8")
    assert load_run(tmp_path / "run").records[0].queued_ns is None
    stored["records_format"] = "3.0"
    meta_path.write_text(json.dumps(stored), encoding="utf-8")
    with pytest.raises(StorageError, match="records format 3.0 is not supported"):
        load_run(tmp_path / "run")


def test_a_run_read_back_through_its_view_is_re_iterable_and_holds_only_this_writers_records(tmp_path: Path) -> None:
    """RunWriter.view(): every pass reads the records from disk again (nothing kept in memory), in
    order, ``len()`` without reading; an index or a slice reads up to it. A directory written before
    (the same label measured twice) keeps its older lines, and the view reads only this writer's."""
    with RunWriter(tmp_path) as w:
        w.write(_stored(0, error=ErrorType.TIMEOUT))
    with RunWriter(tmp_path) as w:
        recs = [_stored(i) for i in range(1, 6)]
        for r in recs:
            w.write(r)
        live = w.view()
        assert list(live) == recs  # readable while the writer is open
    view = w.view()
    assert len(view) == 5 and list(view) == recs and list(view) == recs and bool(view)
    assert view[0] == recs[0] and view[-1] == recs[-1] and view[1:4:2] == [recs[1], recs[3]]
    assert view[::-1] == recs[::-1]
    with pytest.raises(IndexError, match="record 5 of a run of 5"):
        view[5]
    passes = [iter(view), iter(view)]  # two readers at once, each at its own place
    assert next(passes[0]) == next(passes[1]) == recs[0] and next(passes[1]) == recs[1]
    assert len(load_run(tmp_path).records) == 6  # the file itself holds both writers' records


def test_without_text_on_disk_the_view_still_reads_the_text_from_an_unnamed_spool(tmp_path: Path) -> None:
    """--llm-drop-text: records.jsonl holds no text, the run's view reads every record whole (what
    the facts and the recount read), from a spool that has no name in the run directory."""
    recs = [_stored(i) for i in range(3)]
    with RunWriter(tmp_path, keep_text=False, spool_text=True) as w:
        for r in recs:
            w.write(r)
    assert "héllo" not in (tmp_path / RECORDS_FILE).read_text(encoding="utf-8")
    assert sorted(os.listdir(tmp_path)) == [RECORDS_FILE, RUN_FILE]
    assert list(w.view()) == recs and w.view()[1].chunk_text == ["", " héllo", " wörld"]
    with RunWriter(tmp_path / "kept", spool_text=True) as kept:  # text on disk: no spool, the file is read
        kept.write(recs[0])
    assert list(kept.view()) == recs[:1]


def test_records_are_rewritten_atomically_record_by_record(tmp_path: Path) -> None:
    """rewriting(): the file (and the spool) change when the block ends, not at all on an exception;
    the view read inside the block is the old one, a view taken after reads the new records."""
    recs = [_stored(i) for i in range(4)]
    with RunWriter(tmp_path, keep_text=False, spool_text=True) as w:
        for r in recs:
            w.write(r)
        with pytest.raises(StorageError, match="still open"):
            w.rewrite(recs)
    before = (tmp_path / RECORDS_FILE).read_bytes()
    with pytest.raises(RuntimeError, match="halfway"):
        with w.rewriting() as out:
            out.write(recs[0])
            raise RuntimeError("halfway")
    assert (tmp_path / RECORDS_FILE).read_bytes() == before and list(w.view()) == recs
    assert sorted(os.listdir(tmp_path)) == [RECORDS_FILE, RUN_FILE]  # no temporary file left
    with w.rewriting() as out:
        for r in w.view():
            r.chunk_tokens = [0, 2, 2]
            out.write(r)
            assert len(w.view()) == 4 and next(iter(w.view())).chunk_tokens == [0, 1, 1]  # still the old ones
    assert [r.chunk_tokens for r in w.view()] == [[0, 2, 2]] * 4 and len(w.view()) == 4
    assert w.view()[2].chunk_text == ["", " héllo", " wörld"]  # the new spool has the text
    assert [r.chunk_tokens for r in load_run(tmp_path).records] == [[0, 2, 2]] * 4
    assert w.rewrite(recs[:2]) == 2 and list(w.view()) == recs[:2] and len(load_run(tmp_path).records) == 2


def test_a_record_line_with_nan_is_read_back(tmp_path: Path) -> None:
    """Records are parsed with orjson, which does not read NaN; json.dumps writes it for a float
    field, so such a line falls back to the standard parser."""
    rec = _stored(0)
    rec.server_timing = {"queue_ns": float("nan")}
    with RunWriter(tmp_path) as w:
        w.write(rec)
    (back,) = w.view()
    assert back.server_timing is not None and back.server_timing["queue_ns"] != back.server_timing["queue_ns"]
