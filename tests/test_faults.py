"""Faults the load generator meets (§4.2.6, §4.8.1): every request accounted for, nothing lost.

The fault server (tests/faultserver.py) runs in its own process, so stalls, silence and resets
are real socket behaviour. Each fault is checked one request at a time (error type, status,
chunks timed before the fault, message), then mixed into open- and closed-loop runs where every
record is checked against the fault it was sent with and the totals against what the server saw.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultserver import (
    COMPLETION_MARK,
    EXPECTED,
    FAST_FAULTS,
    HUGE_TEXT,
    MODEL,
    FaultServer,
    free_port,
    normal_chunks,
    start_fault_server,
)

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import FAILURE_TYPES, ErrorType, RequestRecord, RequestSpec
from pytest_llmbench.common.storage import RECORDS_FILE, RunWriter, load_run
from pytest_llmbench.loadgen.load import (
    ArrivalProcess,
    ClosedLoop,
    LoadOptions,
    LoadResult,
    OpenLoop,
    run_load,
)

READ_TIMEOUT_S = 0.4
CAP = 6  # tokens per normal completion (server --cap)


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    srv = start_fault_server(cap=CAP, stall_s=20.0)
    yield srv
    srv.stop()


def spec(fault: str, index: int = 0, max_tokens: int = 4) -> RequestSpec:
    return RequestSpec(index=index, workload="faults", input_tokens=8, max_tokens=max_tokens,
                       prompt_text=f"[fault:{fault}] tell me something")


def config(url: str, **kw: object) -> ClientConfig:
    kw.setdefault("read_timeout_s", READ_TIMEOUT_S)
    return ClientConfig(base_url=url, model=MODEL, **kw)  # type: ignore[arg-type]


def check_record(r: RequestRecord, fault: str, *, max_tokens: int = 4, exact_chunks: bool = True) -> None:
    """The record matches what :data:`EXPECTED` says ``fault`` must give."""
    exp = EXPECTED[fault]
    got = r.error_type.value if r.error_type is not None else None
    assert got == exp.error_type, (fault, got, r.error_message)
    assert r.status == exp.status, (fault, r.status)
    chunks = normal_chunks(max_tokens, CAP) if fault == "none" else exp.chunks
    if exact_chunks:
        assert len(r.chunk_ns) == chunks, (fault, len(r.chunk_ns), r.error_message)
    else:  # a reset under load may discard bytes the client had not read yet: never more
        assert len(r.chunk_ns) <= chunks, (fault, len(r.chunk_ns))
    assert len(r.chunk_text) == len(r.chunk_ns) == len(r.chunk_reasoning) == len(r.chunk_tokens)
    assert exp.message in (r.error_message or ""), (fault, r.error_message)
    assert r.sent_ns > 0 and r.end_ns is not None and r.end_ns >= r.sent_ns
    # chunks timed before the fault are kept, in order, and before the record's end
    assert r.chunk_ns == sorted(r.chunk_ns) and all(r.sent_ns < t <= r.end_ns for t in r.chunk_ns)
    if r.chunk_ns and r.first_token_ns is not None:
        assert r.first_token_ns == r.chunk_ns[next(i for i, t in enumerate(r.chunk_text) if t.strip())]
    if exp.error_type is None:
        assert r.ok and r.error_message is None
    else:
        assert r.error_message and len(r.error_message) <= 500


# -------------------------------------------------------------------------------------------
# one fault at a time
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["aiohttp", "httpx-aiohttp", "httpx"])
@pytest.mark.parametrize("fault", sorted(EXPECTED))
async def test_each_fault_is_classified(server: FaultServer, fault: str, transport: str) -> None:
    if fault == "huge_chunk" and transport != "aiohttp":
        pytest.skip("one transport is enough for the 5 MB event (tokenizing it takes a second)")
    before = server.stats()["requests"]
    async with LLMClient(config(server.url, transport=transport)) as c:
        r = await c.send(spec(fault))
    check_record(r, fault)
    assert server.stats()["requests"] == before + 1  # sent once: no silent retry
    if fault == "huge_chunk":
        assert r.chunk_text == [HUGE_TEXT, ""] and r.chunk_tokens == [r.output_tokens_client, 0]
        assert r.output_tokens_client >= len(HUGE_TEXT.split())  # every word at least one token
    if fault == "utf8_split_ok":
        assert r.output_text.endswith(" \u20ac")
    if fault in ("stall", "never_answer"):
        # the read timeout, not the 20 s the server stays silent, ended it
        elapsed = r.end_ns - (r.chunk_ns[-1] if r.chunk_ns else r.sent_ns)
        assert elapsed < 10 * READ_TIMEOUT_S * 1e9


@pytest.mark.parametrize("fault", ["http_400", "http_429", "http_503", "malformed_json", "not_object", "drop",
                                   "wrong_ct", "none"])
async def test_non_streaming_faults(server: FaultServer, fault: str) -> None:
    async with LLMClient(config(server.url, stream=False)) as c:
        r = await c.send(spec(fault))
    want = {"http_400": "http_4xx", "http_429": "rate_limited", "http_503": "http_5xx", "malformed_json": "parse",
            "not_object": "parse", "drop": "protocol", "wrong_ct": "parse", "none": None}[fault]
    assert (r.error_type.value if r.error_type else None) == want, r.error_message
    if fault.startswith("http_"):
        assert EXPECTED[fault].message in r.error_message and r.status == int(fault[5:])
    if fault == "none":
        assert r.ok and r.output_tokens_server == 4 and len(r.chunk_ns) == 1


async def test_connection_refused_is_connect_and_quick() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    for transport in ("aiohttp", "httpx-aiohttp", "httpx"):
        async with LLMClient(config(url, transport=transport)) as c:
            r = await c.send(spec("none"))
        assert r.error_type is ErrorType.CONNECT and r.status is None and not r.chunk_ns, r.error_message
        assert r.error_message and r.end_ns >= r.sent_ns
    # a whole run against nothing: every request is a record, nothing escapes
    async with LLMClient(config(url)) as c:
        res = await run_load(c, [spec("none", i) for i in range(40)], ClosedLoop(4))
    assert res.sent == len(res.records) == 40 and res.errors == {"connect": 40} and res.ok == 0


async def test_rate_limited_is_counted_not_retried(server: FaultServer) -> None:
    server.reset()
    async with LLMClient(config(server.url), max_connections=4) as c:
        res = await run_load(c, [spec("http_429", i) for i in range(30)], ClosedLoop(4))
    assert res.errors == {"rate_limited": 30} and res.ok == 0
    assert server.stats()["by_fault"] == {"http_429": 30}  # 30 sent, 30 received: no retry behind our back
    assert all(r.status == 429 and "rate limit reached" in r.error_message for r in res.records)


# -------------------------------------------------------------------------------------------
# mixed runs: per-record and total accounting
# -------------------------------------------------------------------------------------------
def mixed_specs(n: int, seed: int) -> tuple[list[RequestSpec], list[str]]:
    """``n`` specs, each sent with a fault: 50 % normal, the rest spread over every fault."""
    rng = random.Random(seed)
    pool = [f for f in EXPECTED if f != "huge_chunk"]
    faults = ["none" if rng.random() < 0.5 else rng.choice(pool) for _ in range(n)]
    return [spec(f, i) for i, f in enumerate(faults)], faults


def check_accounting(res: LoadResult, faults: list[str], server_counts: dict[str, int]) -> None:
    n = len(faults)
    assert res.sent == n == len(res.records) and res.cancelled == 0
    by_index = {r.index: r for r in res.records}
    assert sorted(by_index) == list(range(n))  # one record per spec sent, none twice
    for i, fault in enumerate(faults):
        check_record(by_index[i], fault, exact_chunks=fault != "reset")
    want = Counter(EXPECTED[f].error_type for f in faults if EXPECTED[f].error_type is not None)
    assert res.errors == dict(want)
    assert res.ok + sum(res.errors.values()) == res.sent
    assert res.ok == sum(1 for f in faults if EXPECTED[f].error_type is None)
    assert res.completed == res.sent
    assert server_counts == dict(Counter(faults))  # every request arrived exactly once


@pytest.mark.parametrize("model", ["open", "closed"])
async def test_mixed_faults_every_request_accounted_for(server: FaultServer, model: str, tmp_path: Path) -> None:
    specs, faults = mixed_specs(240, seed=7 if model == "open" else 8)
    load = (OpenLoop(ArrivalProcess("poisson", rate=250.0, seed=3)) if model == "open"
            else ClosedLoop(12))
    server.reset()
    async with LLMClient(config(server.url), max_connections=None if model == "open" else 12) as c:
        with RunWriter(tmp_path, keep_text=False) as w:
            res = await run_load(c, specs, load, LoadOptions(drain_timeout_s=30), sink=w)
    check_accounting(res, faults, server.stats()["by_fault"])
    run = load_run(tmp_path)  # what is on disk says the same
    assert len(run.records) == res.sent and run.torn_lines == 0
    assert Counter(r.error_type.value for r in run.records if r.error_type) == Counter(res.errors)
    assert Counter(r.failed for r in run.records)[True] == sum(
        v for k, v in res.errors.items() if ErrorType(k) in FAILURE_TYPES)


async def test_server_side_seeded_mix_counts_match(fault_server) -> None:
    mix = {f: 0.02 for f in FAST_FAULTS}  # 40 % failures of 20 kinds, drawn by the server
    srv = fault_server(mix=mix, seed=5, cap=CAP)
    n = 300
    plain = [RequestSpec(index=i, workload="mix", input_tokens=8, max_tokens=4, prompt_text="hello there")
             for i in range(n)]
    async with LLMClient(config(srv.url, api="completions"), max_connections=16) as c:
        res = await run_load(c, plain, ClosedLoop(16))
    counts = srv.stats()["by_fault"]
    assert sum(counts.values()) == res.sent == n
    want = Counter()
    for f, k in counts.items():
        if EXPECTED[f].error_type is not None:
            want[EXPECTED[f].error_type] += k
    assert res.errors == dict(want) and res.ok == counts.get("none", 0)
    assert 0.25 < sum(want.values()) / n < 0.55  # the fractions were honoured (binomial, n=300)


async def test_drain_timeout_cancels_and_keeps_what_arrived(server: FaultServer) -> None:
    """Requests still running when the drain ends are ``cancelled`` (not SUT failures), chunks kept."""
    specs = [spec("stall" if i % 4 == 0 else "none", i) for i in range(40)]
    async with LLMClient(config(server.url, read_timeout_s=30.0)) as c:
        res = await run_load(c, specs, OpenLoop(ArrivalProcess("uniform", rate=400.0)), LoadOptions(drain_timeout_s=0.5))
    assert res.sent == len(res.records) == 40
    assert res.cancelled == 10 and res.errors == {"cancelled": 10} and res.ok == 30
    for r in res.records:
        if r.index % 4 == 0:
            assert r.error_type is ErrorType.CANCELLED and not r.failed
            assert r.chunk_text == [COMPLETION_MARK] and r.chunk_tokens == [1] and r.end_ns > r.chunk_ns[0]
    assert res.ok + res.cancelled + sum(v for k, v in res.errors.items() if k != "cancelled") == res.sent


async def test_records_stream_to_disk_memory_bounded(server: FaultServer, tmp_path: Path) -> None:
    """``keep_records=False`` + a sink: nothing kept in memory, each record on disk as it completes."""
    specs, faults = mixed_specs(120, seed=11)
    lines_seen: list[int] = []
    path = tmp_path / RECORDS_FILE

    def on_record(rec: RequestRecord) -> None:  # called after the sink wrote the record
        with open(path, encoding="utf-8") as f:
            lines_seen.append(sum(1 for _ in f))

    async with LLMClient(config(server.url)) as c:
        with RunWriter(tmp_path) as w:
            res = await run_load(c, itertools.islice(specs, None), ClosedLoop(8, max_requests=120),
                                 sink=w, keep_records=False, on_record=on_record)
    assert res.records == [] and res.sent == 120
    assert lines_seen == list(range(1, 121))  # record k was on disk when the k-th callback ran
    on_disk = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(d["index"] for d in on_disk) == list(range(120))
    got = Counter(d["error_type"] for d in on_disk if d["error_type"])
    assert got == Counter(EXPECTED[f].error_type for f in faults if EXPECTED[f].error_type)


async def test_client_survives_a_server_that_dies_mid_run(fault_server) -> None:
    """The SUT process is killed during an open-loop run: the run completes, every request is a record."""
    srv = fault_server(cap=CAP, itl_ms=20.0)
    specs = [spec("none", i, max_tokens=6) for i in range(120)]
    async with LLMClient(config(srv.url)) as c:
        progress = {"n": 0}

        def on_record(rec: RequestRecord) -> None:
            progress["n"] += 1
            if progress["n"] == 20:
                srv.proc.kill()

        res = await run_load(c, specs, OpenLoop(ArrivalProcess("uniform", rate=100.0)), LoadOptions(drain_timeout_s=10),
                             on_record=on_record)
    assert res.sent == len(res.records) == 120
    assert res.ok + sum(res.errors.values()) == 120
    assert res.ok >= 20 and set(res.errors) <= {"connect", "protocol", "timeout"} and res.errors.get("connect", 0) > 0
    # what arrived before the kill is kept on the cut-off streams
    cut = [r for r in res.records if r.error_type is ErrorType.PROTOCOL]
    assert all(r.chunk_ns == sorted(r.chunk_ns) for r in cut)


async def test_every_fault_at_once_on_one_pool(server: FaultServer) -> None:
    """Every fault at once, concurrently, on one pool: send() returns a record for each."""
    faults = [f for f in EXPECTED if f != "huge_chunk"] * 3
    async with LLMClient(config(server.url)) as c:
        recs = await asyncio.gather(*(c.send(spec(f, i)) for i, f in enumerate(faults)))
    for r, f in zip(recs, faults):
        check_record(r, f, exact_chunks=f != "reset")


# -------------------------------------------------------------------------------------------
# through the real plugin: a 20 % failing gateway
# -------------------------------------------------------------------------------------------
PLUGIN_SUITE = '''
import pytest
from pytest_llmbench.procedures.loads import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=40), requests=80, warmup_requests=10, warmup_tokens=40,
                           slo=["success_rate >= 99%"])
def test_ttft(llm_result):
    pass
'''
MIX_20 = {"http_500": 0.05, "http_429": 0.04, "reset": 0.03, "malformed_json": 0.03, "no_done": 0.03, "drop": 0.02}


def test_plugin_run_against_a_failing_gateway_reports_errors_by_type(pytester: pytest.Pytester,
                                                                     fault_server) -> None:
    srv = fault_server(mix=MIX_20, seed=1, cap=8)
    pytester.makepyfile(test_suite=PLUGIN_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", srv.url,
                                           "--llm-boundary", "gateway", "--llm-report", "rep")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Traceback" not in out
    # the SLO failure is one readable line: value, threshold, sample count, CI
    (line,) = [ln for ln in out.splitlines() if "SLOViolation: Success rate" in ln and ln.startswith("E")]
    assert "< 99% (n=80, 95% CI" in line

    report = pytester.path / "rep"
    measured = load_run(next(report.glob("runs/*/measure"))).records
    assert len(measured) == 80
    want = Counter(r.error_type.value for r in measured if r.error_type is not None)
    assert sum(want.values()) > 0
    doc = json.loads((report / "results.json").read_text(encoding="utf-8"))
    (p,) = doc["procedures"]
    assert p["result"]["metrics"]["errors_by_type"] == dict(want)
    assert p["figures"]["success_rate"]["value"] == pytest.approx((80 - sum(want.values())) / 80)
    assert doc["tests"][0]["outcome"] == "failed" and "Success rate" in doc["tests"][0]["message"]
    md = (report / "report.md").read_text(encoding="utf-8")
    assert "**Errors by type**: " + ", ".join(f"{k} {n}" for k, n in sorted(want.items())) in md

    # every request the plugin sent (probes, warm-up, measurement) reached the server exactly once,
    # and the faults the server injected are exactly the failures on disk
    on_disk = [r for f in report.glob("runs/*/*/records.jsonl") for r in load_run(f.parent).records]
    stats = srv.stats()
    assert stats["requests"] == len(on_disk)
    injected = Counter()
    for fault, n in stats["by_fault"].items():
        if EXPECTED[fault].error_type is not None:
            injected[EXPECTED[fault].error_type] += n
    assert injected == Counter(r.error_type.value for r in on_disk if r.error_type is not None)


async def test_cancelling_the_run_itself_loses_no_record(server: FaultServer, tmp_path: Path) -> None:
    """Ctrl-C cancels the whole run: every request already handed to the client is on disk."""
    pulled: list[int] = []

    def specs() -> Iterator[RequestSpec]:
        for i in itertools.count():
            pulled.append(i)
            yield spec("stall" if i % 2 else "none", i)

    async with LLMClient(config(server.url, read_timeout_s=30.0), max_connections=8) as c:
        live: list[RequestRecord] = []
        send = c.send

        async def watched_send(sp: RequestSpec, **kw: Any) -> RequestRecord:
            live.append(kw["record"])
            return await send(sp, **kw)

        c.send = watched_send  # type: ignore[method-assign]
        with RunWriter(tmp_path) as w:
            task = asyncio.create_task(run_load(c, specs(), ClosedLoop(8, max_requests=10_000), sink=w))
            # some finished (the "none" ones) and eight stalled in flight, each with its first chunk
            while w.count < 4 or sum(1 for r in live if r.end_ns is None and r.chunk_ns) < 8:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    run = load_run(tmp_path)
    assert sorted(r.index for r in run.records) == pulled  # one record per request sent, none lost
    cancelled = [r for r in run.records if r.error_type is ErrorType.CANCELLED]
    assert len(cancelled) == 8 and all(r.index % 2 and r.chunk_text == [COMPLETION_MARK] for r in cancelled)
    assert all(r.ok for r in run.records if r.index % 2 == 0)
