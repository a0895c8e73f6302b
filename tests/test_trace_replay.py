"""Trace replay (issue 50 item 3): traces read in each format, prompts synthesised per block, errors named
before any request, the schedule as an arrival process, fidelity, and 5.1 replaying a trace end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.loadgen.load import OpenLoop
from pytest_llmbench.loadgen.replay import TraceArrival, replay_fidelity
from pytest_llmbench.loadgen.shards import plan_shards
from pytest_llmbench.workloads.trace import TraceError, read_trace, trace_warmup, trace_workload


def write(path: Path, rows: list[Any]) -> Path:
    """A trace file: one JSON value per line (a str row is written as is: a malformed line)."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def mooncake_rows(n: int, *, t0: int = 1_700_000_000_000, step_ms: int = 7, bs: int = 512) -> list[dict[str, Any]]:
    """``n`` requests with shared leading hash ids: every third starts with [0, 1], others with [0] or their own."""
    rows = []
    for i in range(n):
        lead = [0, 1] if i % 3 == 0 else [0] if i % 3 == 1 else [100 + i]
        ids = lead + [1000 + i]
        rows.append({"timestamp": t0 + i * step_ms + (i % 2), "input_length": (len(ids) - 1) * bs + 1 + i % 50,
                     "output_length": 5 + i % 4, "hash_ids": ids})
    return rows


# ------------------------------------------------------------------------------------------ reading
def test_mooncake_absolute_timestamps_normalised_scaled_and_cut(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", mooncake_rows(10))
    t = read_trace(path)
    assert t.format == "mooncake" and t.block_size == 512 and len(t) == 10 and t.lines == 10
    assert t.offsets_ns()[:3] == (0, 8_000_000, 14_000_000)  # ms from the first line's 1.7e12 ms
    fast = read_trace(path, speedup=2.0, limit=4)
    assert len(fast) == 4 and fast.lines == 10
    assert fast.offsets_ns() == tuple(round(x / 2) for x in t.offsets_ns()[:4])
    assert fast.sha256 == t.sha256  # the file's identity, whatever is replayed of it


def test_aiperf_variants_float_times_delay_and_no_hash_ids(tmp_path: Path) -> None:
    path = write(tmp_path / "aiperf.jsonl", [
        {"timestamp": 10.5, "input_length": 600, "output_length": 8, "hash_ids": [3, 4]},
        {"delay": 2.25, "input_length": 40, "output_length": 4},  # AIPerf: ms after the previous request
        {"timestamp": 20, "input_length": 30, "output_length": 4}])
    t = read_trace(path)
    assert t.offsets_ns() == (0, 2_250_000, 9_500_000)
    assert [r.hash_ids for r in t.requests] == [(3, 4), (), ()]
    specs = list(trace_workload(t, seed=1).specs)
    assert [s.input_tokens for s in specs] == [600, 40, 30]
    assert specs[1].prompt_ids[:30] != specs[2].prompt_ids  # lines without hash ids: blocks of their own


def test_bailian_format_detected_seconds_and_16_token_blocks(tmp_path: Path) -> None:
    path = write(tmp_path / "bailian.jsonl", [
        {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 40, "output_length": 13,
         "type": "text", "turn": 1, "hash_ids": [1089, 1090, 1091]},
        {"chat_id": 160, "parent_chat_id": 159, "timestamp": 62.5, "input_length": 30, "output_length": 8,
         "type": "text", "turn": 2, "hash_ids": [1089, 1090]}])
    t = read_trace(path)
    assert (t.format, t.block_size) == ("bailian", 16)
    assert t.offsets_ns() == (0, 1_386_000_000)  # seconds
    a, b = trace_workload(t, seed=5).specs
    assert a.prompt_ids[:30] == b.prompt_ids  # [1089, 1090] shared: 32 tokens, b cut to its 30
    with pytest.raises(TraceError, match="hash_ids of 512 tokens"):
        read_trace(path, fmt="mooncake")  # 40 tokens cannot fill 3 blocks of 512


@pytest.mark.parametrize(("line", "field"), [
    ('{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [1]', "not a JSON object"),
    ('[1, 2, 3]', "not a JSON object"),
    ('{"timestamp": 5, "output_length": 2, "hash_ids": [1]}', "field 'input_length' is missing"),
    ('{"timestamp": 5, "input_length": 10, "output_length": -2, "hash_ids": [1]}', "field 'output_length' must be >= 1"),
    ('{"timestamp": 5, "input_length": 10.5, "output_length": 2, "hash_ids": [1]}', "field 'input_length' must be an integer"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 2, "hash_ids": [1]}', "field 'timestamp' must be >= 0"),
    ('{"timestamp": 0.5, "input_length": 10, "output_length": 2, "hash_ids": [1]}', "field 'timestamp' 0.5 is before"),
    ('{"timestamp": 5, "input_length": 600, "output_length": 2, "hash_ids": [1]}', "field 'input_length' 600 does not match 1 hash_ids"),
    ('{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}', "field 'input_length' 10 does not match 2 hash_ids"),
    ('{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": "1"}', "field 'hash_ids' must be a non-empty list"),
    ('{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [true]}', "field 'hash_ids' must hold integers"),
    ('{"input_length": 10, "output_length": 2, "hash_ids": [1]}', "field 'timestamp' is missing"),
    ('{"timestamp": 5, "delay": 1, "input_length": 10, "output_length": 2}', "'timestamp' and 'delay' cannot both"),
    ('{"timestamp": 5, "text_input": "hi", "output_length": 2}', "field 'text_input'"),
])
def test_a_bad_line_names_file_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [9]}\n\n' + line + "\n",
                    encoding="utf-8")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}:3: ") and field in str(err.value)


def test_missing_file_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        read_trace(tmp_path / "nope.jsonl")
    path = write(tmp_path / "t.jsonl", mooncake_rows(2))
    for kw, what in (({"speedup": 0}, "speedup"), ({"limit": 0}, "limit"), ({"block_size": 0}, "block size"),
                     ({"fmt": "csv"}, "unknown trace format")):
        with pytest.raises(TraceError, match=what):
            read_trace(path, **kw)
    with pytest.raises(TraceError, match="holds no request"):
        read_trace(write(tmp_path / "empty.jsonl", []))


# ------------------------------------------------------------------------------------------ prompts
def test_equal_hash_ids_give_identical_blocks_distinct_ones_distinct(tmp_path: Path) -> None:
    """The issue's check: prompts compared block by block, for every pair of requests of the trace."""
    bs = 64
    t = read_trace(write(tmp_path / "t.jsonl", mooncake_rows(30, bs=bs)), block_size=bs)
    specs = list(trace_workload(t, seed=11).specs)
    assert [s.input_tokens for s in specs] == [r.input_length for r in t.requests]
    blocks: dict[int, tuple[int, ...]] = {}
    cut: dict[int, tuple[int, ...]] = {}  # last blocks cut to input_length, of ids seen only so
    equal = distinct = 0
    for r, s in zip(t.requests, specs):
        for k, h in enumerate(r.hash_ids):
            blk = s.prompt_ids[k * bs:(k + 1) * bs]
            if len(blk) < bs:  # the last block, cut to input_length: a prefix of the id's block
                if h in blocks:
                    assert blocks[h][:len(blk)] == blk
                elif len(blk) >= 8:
                    cut[h] = blk
                continue
            if h in blocks:
                assert blocks[h] == blk
                equal += 1
            else:
                assert blk not in blocks.values()
                blocks[h] = blk
                distinct += 1
    assert equal >= 25 and distinct >= 12  # both cases were exercised
    heads = [b[:8] for b in cut.values()] + [b[:8] for b in blocks.values()]
    assert len(cut) >= 15 and len(set(heads)) == len(heads)  # distinct ids: distinct blocks, cut ones too
    first = [s for r, s in zip(t.requests, specs) if r.hash_ids[:2] == (0, 1)]
    other = [s for r, s in zip(t.requests, specs) if r.hash_ids[0] != 0]
    assert first[0].prompt_ids[:2 * bs] == first[1].prompt_ids[:2 * bs]
    assert first[0].prompt_ids[:bs] != other[0].prompt_ids[:bs]
    assert first[0].prefix_tokens == 2 * bs and other[0].prefix_tokens == 0


def test_same_seed_and_file_same_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", mooncake_rows(12))
    a = trace_workload(read_trace(path), seed=3)
    b = trace_workload(read_trace(path), seed=3)
    c = trace_workload(read_trace(path), seed=4)
    assert a.declaration.request_sequence_sha256 == b.declaration.request_sequence_sha256
    assert a.declaration.request_sequence_sha256 != c.declaration.request_sequence_sha256
    assert [s.prompt_ids for s in a.specs] == [s.prompt_ids for s in b.specs]
    decl = a.declaration.to_json()
    assert decl["custom"] and decl["dataset"]["sha256"] == read_trace(path).sha256
    assert decl["retokenization"]["mismatched"] == 0  # the text re-encodes to the ids (round-trip pool)
    assert all(s.ignore_eos and s.min_tokens == s.max_tokens for s in a.specs)  # output held at the trace's


def test_warmup_blocks_are_disjoint_from_the_traces(tmp_path: Path) -> None:
    bs = 32
    t = read_trace(write(tmp_path / "t.jsonl", mooncake_rows(20, bs=bs)), block_size=bs)
    measured = list(trace_workload(t, seed=7).specs)
    warm = trace_warmup(t, n=15, seed=8, trace_seed=7)
    assert len(warm) == 15 and {s.input_tokens for s in warm} <= {r.input_length for r in t.requests}

    def blocks(specs: list[Any]) -> set[tuple[int, ...]]:
        return {tuple(s.prompt_ids[k:k + bs]) for s in specs for k in range(0, len(s.prompt_ids) - bs + 1, bs)}

    assert not blocks(warm) & blocks(measured)
    assert not {s.prompt_hash for s in warm} & {s.prompt_hash for s in measured}


# ------------------------------------------------------------------------------------------ schedule
def test_trace_arrival_yields_the_offsets_and_deals_over_shards(tmp_path: Path) -> None:
    t = read_trace(write(tmp_path / "t.jsonl", mooncake_rows(9)))
    a = TraceArrival.of(t.offsets_ns())
    assert a.kind == "trace" and list(a.offsets_ns()) == list(t.offsets_ns())
    assert a.rate == pytest.approx(8 / (t.offsets_ns()[-1] / 1e9))
    assert list(a.schedule_ns(100)) == list(t.offsets_ns())  # finite: nothing after the last
    parts = plan_shards(list(range(9)), OpenLoop(a, max_requests=9), 2)
    assert sorted(off for _, load in parts for off in load.arrival.offsets_ns()) == list(t.offsets_ns())
    with pytest.raises(ValueError, match="start at 0"):
        TraceArrival.of([5, 10])
    with pytest.raises(ValueError, match="given"):
        a.gaps_s(3)  # a given schedule draws no gaps


def _record(i: int, intended: int, sent: int, inp: int) -> RequestRecord:
    return RequestRecord(index=i, workload="trace", spec_input_tokens=inp, max_tokens=4, intended_ns=intended,
                         sent_ns=sent, input_tokens_server=inp)


def test_replay_fidelity_against_the_trace() -> None:
    offs = [0, 10_000_000, 20_000_000, 35_000_000]
    start = 1_000_000_000
    lags = [100_000, 300_000, 200_000, 1_000_000]
    recs = [_record(i, start + o, start + o + lag, inp) for i, (o, lag, inp) in
            enumerate(zip(offs, lags, [100, 200, 290, 400]))]
    f = replay_fidelity(reversed(recs), offs, [100, 200, 300, 400], start)
    assert (f.planned, f.sent, f.schedule_mismatches, f.input_counted_by) == (4, 4, 0, "server usage")
    assert f.send_lag.max_ms == pytest.approx(1.0) and f.send_lag.p50_ms == pytest.approx(0.25)
    assert f.gap_error.max_ms == pytest.approx(0.8) and f.gap_error.n == 3
    assert f.input_median_rel_error == 0.0 and f.input_max_rel_error == pytest.approx(10 / 300)
    late = replay_fidelity(recs[:2], offs, [100, 200, 300, 400], start - 5)
    assert late.sent == 2 and late.schedule_mismatches == 2 and late.gap_error.n == 1


# ------------------------------------------------------------------------------------------ 5.1 end to end
SUITE = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(capacity_fraction=0.5), requests=500, warmup_requests=4,
                           warmup_tokens=10)
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


READS_COUNTED = '''
import pytest_llmbench.procedures.p5_1_ttft as p5_1
import pytest_llmbench.workloads.trace as trace_module

_read = trace_module.read_trace


def counted(path, **kw):
    with open("reads.txt", "a") as fh:
        fh.write(f"{path}\\n")
    return _read(path, **kw)


trace_module.read_trace = p5_1.read_trace = counted
'''


def test_5_1_replays_exactly_the_trace_without_a_capacity_search(pytester: pytest.Pytester) -> None:
    bs = 64
    rows = mooncake_rows(24, step_ms=40, bs=bs)
    trace = write(pytester.path / "trace.jsonl", rows)
    pytester.makepyfile(test_trace_5_1=SUITE)
    pytester.makeconftest(READS_COUNTED)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--llm-report", "rep",
                                        "--llm-trace", str(trace), "--llm-trace-block-size", str(bs))
    res.assert_outcomes(passed=1)
    # read once, at configure: 5.1 replays the trace the session checked, not the file read again
    assert (pytester.path / "reads.txt").read_text().splitlines() == [str(trace)]
    doc = json.loads((pytester.path / "rep" / "results.json").read_text(encoding="utf-8"))
    (proc,) = doc["procedures"]  # 5.1 alone: no 5.2 capacity search ran for its capacity_fraction
    runs = proc["result"]["runs"]
    assert [r["label"] for r in runs] == ["measure"]
    records = [json.loads(line) for line in
               (pytester.path / "rep" / runs[0]["run_dir"] / "records.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["phase"] == "measure"]
    assert sorted(r["index"] for r in measured) == list(range(24))  # one request per line, nothing else
    assert all(r["workload"] == "trace" for r in measured)
    t = read_trace(trace, block_size=bs)
    assert [r["spec_input_tokens"] for r in sorted(measured, key=lambda r: r["index"])] == \
        [r.input_length for r in t.requests]
    start = min(r["intended_ns"] for r in measured)
    assert sorted(r["intended_ns"] - start for r in measured) == list(t.offsets_ns())
    m = proc["result"]["measurements"]
    assert m["trace_requests"] == m["trace_sent"] == 24 and m["trace_send_lag_p99_ms"] is not None
    assert m["trace_input_median_rel_error"] == 0.0
    assert len(proc["configuration"]["sequence_hash"]) == 64  # the trace's requests as sent, hashed (§4.3.3)
    items = {c["id"]: c for c in proc["compliance"]["items"]}  # the verdict says the load is custom (§5.1.2.2)
    assert items["5.1.2-MUST-8"]["status"] == "unmet" and "trace" in items["5.1.2-MUST-8"]["evidence"]
    assert items["5.1.2-MUST-7"]["status"] == "unmet" and "custom load" in items["5.1.2-MUST-7"]["evidence"]
    assert items["5.1.2-MUST-6"]["status"] == "met" and "mean arrival rate" in items["5.1.2-MUST-6"]["evidence"]
    assert items["5.1.2-MUST-2"]["status"] == "met" and proc["configuration"]["requests"] == 24
    assert any(tb["title"] == "Trace replay fidelity" for tb in proc["result"]["tables"])
    assert "Trace replay fidelity" in (pytester.path / "rep" / "report.md").read_text(encoding="utf-8")


def test_the_dry_run_plans_the_traces_requests(pytester: pytest.Pytester) -> None:
    """``--llm-dry-run`` with ``--llm-trace``: 5.1 plans the trace's requests (24 lines, 0.92 s of send times)
    and its 4 warm-up requests, not the marker's 500; the trace is read once, at configure."""
    trace = write(pytester.path / "trace.jsonl", mooncake_rows(24, step_ms=40, bs=64))
    pytester.makepyfile(test_trace_5_1=SUITE)
    pytester.makeconftest(READS_COUNTED)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-dry-run", "--llm-trace", str(trace),
                                        "--llm-trace-block-size", "64")
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED, res.stdout.str()  # planned, deselected: nothing sent
    res.stdout.fnmatch_lines(["*test_ttft: 5.1 Time to First Token: ~28 requests, planned >= 1 s*"])
    assert (pytester.path / "reads.txt").read_text().splitlines() == [str(trace)]


def test_a_malformed_trace_line_is_a_usage_error_before_any_request(pytester: pytest.Pytester) -> None:
    rows: list[Any] = mooncake_rows(3)
    rows.insert(2, '{"timestamp": 1700000000020, "input_length": 10, "hash_ids": [5]}')
    trace = write(pytester.path / "trace.jsonl", rows)
    pytester.makepyfile(test_trace_5_1=SUITE)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--llm-trace", str(trace))
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*--llm-trace: {trace}:3: field 'output_length' is missing*"])
    assert not (pytester.path / "rep").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--llm-trace", "missing.jsonl"], "*--llm-trace: trace file missing.jsonl not found*"),
    (["--llm-trace-speedup", "0"], "*--llm-trace-speedup: invalid value 0.0 for trace-speedup: must be > 0*"),
    (["--llm-trace-limit", "0"], "*--llm-trace-limit: invalid value 0 for trace-limit: must be >= 1*"),
    (["--llm-trace-format", "csv"], "*--llm-trace-format: invalid value 'csv'*mooncake, bailian*"),
])
def test_bad_trace_options_are_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    pytester.makepyfile(test_trace_5_1=SUITE)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])


def test_a_markers_trace_is_read_at_collection(pytester: pytest.Pytester) -> None:
    """5.1's marker parameter ``trace=`` (one test's trace) is checked like --llm-trace, before any request."""
    trace = write(pytester.path / "marker.jsonl", [*mooncake_rows(2), '{"timestamp": 1700000000100}'])
    pytester.makepyfile(test_marker_trace=f'''
import pytest

@pytest.mark.llm_procedure("5.1", trace={str(trace)!r})
def test_ttft(llm_result):
    pass
''')
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*test_ttft: @llm_procedure(trace=...): {trace}:3: field 'input_length' is missing*"])


def test_the_format_option_offers_exactly_the_formats_read() -> None:
    """settings.py (the bottom layer, which cannot import workloads/) keeps its own copy of the format names for
    ``--llm-trace-format``'s choices: it must be the reader's."""
    from pytest_llmbench import settings
    from pytest_llmbench.workloads import trace as trace_module

    assert tuple(settings.TRACE_FORMATS) == tuple(trace_module.TRACE_FORMATS)
