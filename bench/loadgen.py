#!/usr/bin/env python3
"""Load-generator speed against the reference mock server (figures printed, never asserted).

    python bench/loadgen.py                       # aiohttp transport, uvloop if installed
    python bench/loadgen.py --transport all       # compare every transport (gRPC included)
    python bench/loadgen.py --transport grpc      # the gRPC transport against bench/grpc_mock.py (issue 51)
    python bench/loadgen.py --http-trace          # with per-request HTTP-trace timings
    python bench/loadgen.py --trace-compare 6 --requests 5000   # tracing off/on interleaved, pairwise ratios
    python bench/loadgen.py --trace-compare 6 --itl-ms 2        # ... chunks spread over more reads
    python bench/loadgen.py --trace-compare 6 --only open --rate 150 --open-seconds 7   # ... open loop
    python bench/loadgen.py --url http://127.0.0.1:8000/v1   # use a server already running
    python bench/loadgen.py --workers 1,2         # closed loop over 1 and 2 load-generator processes
    python bench/loadgen.py --only open --pacer spin --spin-ms 1.5   # the open loop with the previous pacer
    python bench/loadgen.py --pacers              # open loop: each pacer (and no send priority) in turn, interleaved
    python bench/loadgen.py --rates 250,500,1000,2000 --rounds 2   # open loop CPU per chunk by rate, and closed
    python bench/loadgen.py --targets --against ../base --rounds 3   # issue 38's figures, A/B against a checkout
    python bench/loadgen.py --late-profile --rate 1000   # what ran between a late send's due time and its hand-over
    python bench/loadgen.py --cprofile --only open       # cProfile of the open loop (else the closed loop), top entries

Starts the reference mock ``shared/tools/mock_openai_server.py`` in its own process
(``--ttft-ms 0 --itl-ms 0 --tokens 50 --no-stats``; ``--itl-ms`` sets its ITL) unless ``--url`` is
given (``--transport grpc``: the gRPC mock ``bench/grpc_mock.py``, the same streams as gRPC messages of
one token id each, or ``--url grpc://host:port``), then measures:

* closed loop, concurrency 64, 50-token streams: sustained req/s, chunks/s, concurrency held;
* open loop, Poisson at ``--rate`` (1000 req/s): achieved rate, the two lags apart: schedule lag
  (hand-over to the transport − intended, the client's pacing) and submit lag (T_submit − intended),
  p50/p99/max, and the pacer (``--pacer``, loadgen/pacer.py);
* client CPU seconds per 1000 chunks (process CPU time of this process);
* which transport and event loop ran.

Issue 38's targets (``--targets``): closed loop <= 5 ms CPU per 1000 chunks, req/s not lower than before;
open loop 1000 req/s schedule-lag P99 <= 0.2 ms (<= 0.5 ms at 2000), CPU per chunk within 1.2x the closed loop's.

The mock is found relative to the checkout: ``../shared/tools/mock_openai_server.py`` beside the
repository (looked for beside the repository root, then beside each directory above it, so a git
worktree nested one level deeper finds it too), or given with ``--mock PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _repo() -> Path:
    """The checkout to measure: ``--repo PATH`` (another checkout, for A/B runs), else this one."""
    if "--repo" in sys.argv:
        return Path(sys.argv[sys.argv.index("--repo") + 1]).resolve()
    return Path(__file__).resolve().parents[1]


REPO = _repo()
sys.path.insert(0, str(REPO))  # the checkout, not an installed copy

from pytest_llmbench.client import TRANSPORTS, ClientConfig, LLMClient  # noqa: E402
from pytest_llmbench.common.records import RequestSpec  # noqa: E402
from pytest_llmbench.loadgen.load import (  # noqa: E402
    ArrivalProcess,
    ClosedLoop,  # noqa: E402
    LoadResult,
    run_closed_loop,
    run_load,
    run_open_loop,
)
from pytest_llmbench.loadgen.shards import run_sharded  # noqa: E402

try:  # the options object (issue 45); a checkout before it (--repo, A/B runs) takes keywords
    from pytest_llmbench.loadgen.load import LoadOptions  # noqa: E402
except ImportError:
    LoadOptions = None  # type: ignore[assignment,misc]
from pytest_llmbench.loadgen.shards.local import LocalBackend  # noqa: E402

MOCK_RELATIVE = Path("shared/tools/mock_openai_server.py")


def find_mock(explicit: Path | None) -> Path:
    """The reference mock: ``explicit`` if given, else ``<dir>/shared/tools/mock_openai_server.py``
    for the repository root's parent and each directory above it. Exits with a clear message
    naming every place looked at when it is not there."""
    if explicit is not None:
        if not explicit.is_file():
            raise SystemExit(f"--mock {explicit}: no such file")
        return explicit
    looked = [d / MOCK_RELATIVE for d in REPO.parents]
    for candidate in looked:
        if candidate.is_file():
            return candidate
    raise SystemExit(
        "reference mock server not found; looked for ../" + str(MOCK_RELATIVE) + " beside the checkout:\n  "
        + "\n  ".join(map(str, looked))
        + "\npass --mock PATH/TO/mock_openai_server.py, or --url URL of a server already running"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mock(script: Path, tokens: int, itl_ms: float = 0.0, cpus: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """The mock in its own process; ``cpus`` (e.g. ``"1"``) pins it there (``taskset``) so that it
    does not share the client's core."""
    port = free_port()
    pin = ["taskset", "-c", cpus] if cpus else []
    proc = subprocess.Popen(
        [*pin, sys.executable, str(script), "--port", str(port), "--ttft-ms", "0", "--itl-ms", str(itl_ms),
         "--tokens", str(tokens), "--no-stats"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"mock server did not start on port {port}")


def start_grpc_mock(tokens: int, itl_ms: float = 0.0, cpus: str | None = None) -> tuple[subprocess.Popen[str], str]:
    """bench/grpc_mock.py in its own process (the grpc extra): ``--tokens`` one-token messages a stream."""
    pin = ["taskset", "-c", cpus] if cpus else []
    proc = subprocess.Popen([*pin, sys.executable, str(Path(__file__).with_name("grpc_mock.py")), "--port", "0",
                             "--tokens", str(tokens), "--itl-ms", str(itl_ms)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != "GRPC_MOCK_LISTENING":
        proc.kill()
        raise SystemExit("the gRPC mock did not start (is the grpc extra installed? pip install -e '.[grpc]')")
    return proc, f"grpc://127.0.0.1:{line[1]}"


def config(url: str, transport: str, args: argparse.Namespace, *, traced: bool | None = None) -> ClientConfig:
    """The client configuration of ``transport``: ``grpc`` is a grpc:// URL (completions, counts from the
    messages' token ids), any other an HTTP transport over SSE."""
    if transport == "grpc":
        return ClientConfig(base_url=url, model="mock-model", api="completions")
    return ClientConfig(base_url=url, model="mock-model", transport=transport,
                        http_trace=args.http_trace if traced is None else traced)


def chunks(res: LoadResult) -> int:
    return sum(len(r.chunk_ns) for r in res.records)


def reads_per_request(res: LoadResult) -> float:
    """Socket reads that carried events, per answered request: its distinct chunk stamps (one clock
    read per read, App. B.1.1). CPU per chunk depends on it: each read costs a loop wake-up, aiohttp's
    callback and a parse, whatever it carries."""
    ok = [r for r in res.records if r.ok]
    return sum(len(set(r.chunk_ns)) for r in ok) / max(len(ok), 1)


async def bench(url: str, transport: str, args: argparse.Namespace) -> None:
    specs = [RequestSpec(index=i, workload="bench", input_tokens=8, max_tokens=args.tokens,
                         prompt_text="benchmark the benchmarker please") for i in range(args.requests)]
    cfg = config(url, transport, args)

    if args.only in (None, "closed"):
        await closed(cfg, specs, args)
    if args.only in (None, "open"):
        await open_loop(cfg, specs, args)


async def _closed_measure(cfg: ClientConfig, specs: list[RequestSpec], args: argparse.Namespace) -> tuple[LoadResult, float]:
    """One closed-loop run, connections warmed first: the result and the client's CPU seconds."""
    async with LLMClient(cfg, max_connections=args.concurrency) as c:
        await run_closed_loop(c, specs[:500], args.concurrency)  # connections + caches warm
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        cpu0 = time.process_time()
        res = await run_closed_loop(c, specs, args.concurrency)
        cpu = time.process_time() - cpu0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    args._sys_share = (ru1.ru_stime - ru0.ru_stime) / max(cpu, 1e-9)  # the kernel's part (socket writes, polls)
    return res, cpu


async def closed_run(cfg: ClientConfig, specs: list[RequestSpec], args: argparse.Namespace) -> dict[str, float]:
    """req/s seen and CPU per 1000 chunks of one closed-loop run."""
    res, cpu = await _closed_measure(cfg, specs, args)
    n = chunks(res)
    return {"rps": res.ok / res.duration_s, "cpu_ms_per_1000_chunks": cpu / max(n, 1) * 1e6,
            "sys_share": args._sys_share, "loop_p99": res.loop_delay.p99_ms or 0.0, "errors": sum(res.errors.values()),
            "reads_per_request": reads_per_request(res), "cpu_us_per_request": cpu / max(res.sent, 1) * 1e6}


async def closed(cfg: ClientConfig, specs: list[RequestSpec], args: argparse.Namespace) -> None:
    res, cpu = await _closed_measure(cfg, specs, args)
    n_chunks = chunks(res)
    bad = {k: v for k, v in res.errors.items()}
    print(f"  closed loop c={args.concurrency}: {res.ok / res.duration_s:8.0f} req/s  "
          f"{n_chunks / res.duration_s:9.0f} chunks/s  held {res.concurrency_mean:5.1f} in flight "
          f"(max {res.concurrency_max})  {res.ok} ok in {res.duration_s:.2f} s  errors {bad or 0}")
    print(f"    client CPU {cpu:.2f} s = {cpu / n_chunks * 1000 * 1000:.2f} ms per 1000 chunks "
          f"({cpu / res.duration_s * 100:.0f} % of one core)  loop-delay p99 {res.loop_delay.p99_ms:.1f} ms  "
          f"valid={res.valid}  reads per request {reads_per_request(res):.1f}")
    # how soon a completion is replaced (tests/test_load.py checks the logic on a virtual clock)
    gaps = np.array([r.sent_ns - r.intended_ns for r in res.records[args.concurrency:]]) / 1e6
    if gaps.size:
        print(f"    resubmit gap p50 {np.percentile(gaps, 50):.3f} ms  p99 {np.percentile(gaps, 99):.3f} ms  "
              f"max {gaps.max():.2f} ms")


async def trace_compare(url: str, transport: str, args: argparse.Namespace) -> None:
    """Closed-loop rounds with HTTP tracing off and on, interleaved in pairs (off, on / on, off ...) so
    machine drift hits both alike; prints each pair, the medians and the pairwise on/off ratios (median,
    quartiles, range): on a shared machine the ratio within a pair is the figure, not absolute times."""
    specs = [RequestSpec(index=i, workload="bench", input_tokens=8, max_tokens=args.tokens,
                         prompt_text="benchmark the benchmarker please") for i in range(args.requests)]
    cpu_k: dict[bool, list[float]] = {False: [], True: []}  # CPU ms per 1000 chunks, per round
    rps: dict[bool, list[float]] = {False: [], True: []}
    reads = []  # body reads per response, traced rounds
    open_rate = args.rate if args.only == "open" else 0.0
    if open_rate:
        specs = specs[:int(args.rate * args.open_seconds)]
    for rnd in range(args.trace_compare):
        for traced in (False, True) if rnd % 2 == 0 else (True, False):
            cfg = ClientConfig(base_url=url, model="mock-model", transport=transport, http_trace=traced)
            async with LLMClient(cfg, max_connections=None if open_rate else args.concurrency) as c:
                await run_closed_loop(c, specs[:300], args.concurrency)  # connections + caches warm
                cpu0 = time.process_time()
                if open_rate:  # below saturation: the client's batching per loop pass does not shift
                    res = await run_open_loop(c, specs, ArrivalProcess("poisson", open_rate, seed=rnd))
                else:
                    res = await run_closed_loop(c, specs, args.concurrency)
                cpu = time.process_time() - cpu0
            n_chunks = chunks(res)
            cpu_k[traced].append(cpu / n_chunks * 1e6)
            rps[traced].append(res.ok / res.duration_s)
            assert all((r.http_trace is not None) == traced for r in res.records if r.ok)
            if traced:
                reads.append(float(np.mean([r.http_trace["response_chunks"] for r in res.records if r.ok])))
        ratio = cpu_k[True][-1] / cpu_k[False][-1]
        print(f"  pair {rnd + 1} ({'off, on' if rnd % 2 == 0 else 'on, off'}): CPU ms/1000 chunks off "
              f"{cpu_k[False][-1]:.3f}  on {cpu_k[True][-1]:.3f}  ratio {ratio:.3f}   req/s off "
              f"{rps[False][-1]:.0f}  on {rps[True][-1]:.0f}  errors {res.errors or 0}")
    n_chunk = len(specs) * args.tokens
    load = f"open loop Poisson {open_rate:.0f} req/s" if open_rate else f"closed loop c={args.concurrency}"
    print(f"  {args.trace_compare} pairs of {len(specs)} requests, {load}, {args.tokens}-token streams, mock ITL "
          f"{args.itl_ms} ms: {np.mean(reads):.1f} body reads per response ({np.mean(reads) / args.tokens:.2f} "
          f"per chunk), ~{n_chunk} chunks per round")
    print(f"  median CPU ms/1000 chunks: off {np.median(cpu_k[False]):.3f}, on {np.median(cpu_k[True]):.3f}")
    ratios = np.array(cpu_k[True]) / np.array(cpu_k[False])
    q1, q3 = np.percentile(ratios, [25, 75])
    print(f"  CPU per chunk on/off, pairwise: median {np.median(ratios):.3f}  quartiles {q1:.3f}-{q3:.3f}  "
          f"range {ratios.min():.3f}-{ratios.max():.3f}  ({int((ratios > 1).sum())} of {ratios.size} pairs above 1)")
    tr = np.array(rps[True]) / np.array(rps[False])
    print(f"  throughput on/off, pairwise: median {np.median(tr):.3f}  range {tr.min():.3f}-{tr.max():.3f}")


def lags_ms(res: LoadResult) -> dict[str, np.ndarray]:
    """The two lags apart, from the records (any version of the records): schedule lag = hand-over to
    the transport − intended; submit lag = sent (T_submit) − intended."""
    recs = [r for r in res.records if r.intended_ns is not None and r.sent_ns]
    return {"schedule": np.array([r.handoff_ns - r.intended_ns for r in recs], dtype=np.float64) / 1e6,
            "submit": np.array([r.sent_ns - r.intended_ns for r in recs], dtype=np.float64) / 1e6}


def _pacer_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """``pacer=`` where the measured checkout has pacers, else its only knob, ``spin_ms``."""
    params = ({f.name for f in dataclasses.fields(LoadOptions)} if LoadOptions is not None
              else inspect.signature(run_load).parameters)
    extra: dict[str, object] = {"sends_first": not args.no_sends_first} if "sends_first" in params else {}
    if "pacer" in params:
        if args.pacer == "spin":
            return {"pacer": "spin", "spin_ms": 1.5 if args.spin_ms is None else args.spin_ms, **extra}
        return {"pacer": args.pacer, **extra}
    return {"spin_ms": 1.5 if args.spin_ms is None else args.spin_ms}


def _open_kwargs(knobs: dict[str, object]) -> dict[str, object]:
    """The pacing knobs as the measured checkout's ``run_open_loop`` takes them: one ``LoadOptions``,
    or (a checkout before it) keywords."""
    return {"options": LoadOptions(**knobs)} if LoadOptions is not None else knobs  # type: ignore[arg-type]


class WakeLag:
    """A pacer that notes how late each wait returned (the pacer's own share of the schedule lag;
    the rest is the loop's hop to the new request task and the work before the hand-over)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[attr-defined]
        self.late_ns: list[int] = []

    async def wait_until(self, due_ns: int) -> None:
        await self.inner.wait_until(due_ns)  # type: ignore[attr-defined]
        self.late_ns.append(time.perf_counter_ns() - due_ns)

    def call_at(self, due_ns: int, callback: Callable[[], None]) -> None:
        def noted() -> None:
            self.late_ns.append(time.perf_counter_ns() - due_ns)
            callback()

        self.inner.call_at(due_ns, noted)  # type: ignore[attr-defined]

    def cancel(self) -> None:
        self.inner.cancel()  # type: ignore[attr-defined]

    def close(self) -> None:
        self.inner.close()  # type: ignore[attr-defined]


async def open_run(cfg: ClientConfig, specs: list[RequestSpec], rate: float, seconds: float,
                   args: argparse.Namespace, seed: int = 1) -> dict[str, float | str | None]:
    """One open-loop run: achieved rate, both lags (p50, p99, max), the pacer's wake-up lag where the
    checkout has pacers, CPU per 1000 chunks."""
    n_open = int(rate * seconds)
    open_specs = (specs * (n_open // len(specs) + 1))[:n_open]
    kw = _pacer_kwargs(args)
    wake = None
    if "pacer" in kw:
        from pytest_llmbench.loadgen.pacer import make_pacer

        wake = WakeLag(make_pacer(str(kw["pacer"]), spin_ms=float(kw.get("spin_ms", 1.5))))  # type: ignore[arg-type]
        kw = {"pacer": wake, **{k: v for k, v in kw.items() if k == "sends_first"}}
    async with LLMClient(cfg) as c:
        await run_closed_loop(c, specs[:200], 4)  # connections, tokenizer and caches warm, as in the closed loop
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        cpu0 = time.process_time()
        try:
            res = await run_open_loop(c, open_specs, ArrivalProcess("poisson", rate, seed=seed), **_open_kwargs(kw))
        finally:
            if wake is not None:
                wake.close()
        cpu = time.process_time() - cpu0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    lag = lags_ms(res)
    if wake is not None and wake.late_ns:
        lag["wake"] = np.array(wake.late_ns, dtype=np.float64) / 1e6
    out: dict[str, float | str | None] = {
        "rate": rate, "achieved": res.achieved_rate, "ok": res.ok, "sent": res.sent,
        "cpu_ms_per_1000_chunks": cpu / max(chunks(res), 1) * 1e6, "in_flight": res.concurrency_mean,
        "sys_share": (ru1.ru_stime - ru0.ru_stime) / max(cpu, 1e-9),
        "ctx_switches_per_request": ((ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)) / max(res.sent, 1),
        "pacer": getattr(res, "pacer", None) or f"spin {_pacer_kwargs(args).get('spin_ms')} ms", "valid": res.valid,
        "errors": sum(res.errors.values()), "reads_per_request": reads_per_request(res),
        "cpu_us_per_request": cpu / max(res.sent, 1) * 1e6,
    }
    for name, a in lag.items():
        out.update({f"{name}_p50": float(np.percentile(a, 50)), f"{name}_p99": float(np.percentile(a, 99)),
                    f"{name}_max": float(a.max())})
    return out


def print_open(o: dict[str, float | str | None]) -> None:
    print(f"  open loop Poisson {o['rate']:.0f} req/s, pacer {o['pacer']}: achieved {o['achieved']:7.1f} req/s  "
          f"schedule lag p50 {o['schedule_p50']:.3f} ms  p99 {o['schedule_p99']:.3f} ms  max {o['schedule_max']:.2f} ms  "
          f"submit lag p50 {o['submit_p50']:.3f} ms  p99 {o['submit_p99']:.3f} ms  max {o['submit_max']:.2f} ms  "
          + (f"pacer wake-up lag p50 {o['wake_p50']:.3f} ms  p99 {o['wake_p99']:.3f} ms  " if "wake_p99" in o else "")
          + f"in flight mean {o['in_flight']:.1f}  ok {o['ok']}/{o['sent']}  "
          f"CPU {o['cpu_ms_per_1000_chunks']:.2f} ms/1000 chunks  errors {o['errors']}  valid={o['valid']}  "
          f"reads per request {o['reads_per_request']:.1f}")


async def open_loop(cfg: ClientConfig, specs: list[RequestSpec], args: argparse.Namespace) -> None:
    print_open(await open_run(cfg, specs, args.rate, args.open_seconds, args))


async def late_profile(url: str, args: argparse.Namespace) -> None:
    """The open loop at --rate on the asyncio loop with every callback timed (late_sends.py): for each
    send whose schedule lag exceeded --late-ms, the callbacks that ran between its due time and its
    hand-over, tallied by name."""
    from late_sends import CallbackLog, late_send_table

    specs = bench_specs(args)
    cfg = ClientConfig(base_url=url, model="mock-model", transport=args.transport)
    n_open = int(args.rate * args.open_seconds)
    open_specs = (specs * (n_open // len(specs) + 1))[:n_open]
    log = CallbackLog()
    async with LLMClient(cfg) as c:
        await run_closed_loop(c, specs[:200], 4)  # connections, tokenizer and caches warm
        log.install(asyncio.get_running_loop())
        try:
            res = await run_open_loop(c, open_specs, ArrivalProcess("poisson", args.rate, seed=1),
                                      **_open_kwargs(_pacer_kwargs(args)))
        finally:
            log.uninstall()
    lag = lags_ms(res)
    print(f"  open loop Poisson {args.rate:.0f} req/s, asyncio loop with every callback timed, pacer {res.pacer}: "
          f"schedule lag p50 {np.percentile(lag['schedule'], 50):.3f} ms  p99 {np.percentile(lag['schedule'], 99):.3f} ms"
          f"  submit lag p99 {np.percentile(lag['submit'], 99):.3f} ms  ({len(log.start)} callbacks and polls timed)")
    sends = [(r.intended_ns, r.handoff_ns) for r in res.records if r.intended_ns is not None and r.sent_ns]
    for line in late_send_table(log, sends, int(args.late_ms * 1e6), top=args.top):
        print("  " + line)


async def cprofile_run(url: str, args: argparse.Namespace) -> None:
    """cProfile of one run (--only open: the open loop at --rate; else the closed loop); top --top by own time."""
    import cProfile
    import pstats

    specs = bench_specs(args)
    cfg = ClientConfig(base_url=url, model="mock-model", transport=args.transport)
    prof = cProfile.Profile()
    open_rate = args.rate if args.only == "open" else 0.0
    async with LLMClient(cfg, max_connections=None if open_rate else args.concurrency) as c:
        await run_closed_loop(c, specs[:300], 4 if open_rate else args.concurrency)
        prof.enable()
        if open_rate:
            n_open = int(open_rate * args.open_seconds)
            res = await run_open_loop(c, (specs * (n_open // len(specs) + 1))[:n_open],
                                      ArrivalProcess("poisson", open_rate, seed=1), **_open_kwargs(_pacer_kwargs(args)))
        else:
            res = await run_closed_loop(c, specs, args.concurrency)
        prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    n = max(len(res.records), 1)
    print(f"  cProfile, {'open loop Poisson %.0f req/s' % open_rate if open_rate else 'closed loop c=%d' % args.concurrency}"
          f", {n} requests: {total / n * 1e6:.1f} µs profiled per request; top {args.top} by own time "
          "(µs per request, own / cumulative):")
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[: args.top]  # type: ignore[attr-defined]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in rows:
        where = f"{Path(file).name}:{line}({func})" if file != "~" else func
        print(f"    {tt / n * 1e6:8.1f} {ct / n * 1e6:9.1f}  {nc / n:8.2f} calls  {where}")


def wait_for_quiet(args: argparse.Namespace) -> float:
    """With ``--max-load L``: wait (up to ``--max-wait`` s) until the 1-minute load average is below L;
    returns the load average at the start."""
    deadline = time.monotonic() + args.max_wait
    while args.max_load is not None and os.getloadavg()[0] >= args.max_load and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def bench_specs(args: argparse.Namespace) -> list[RequestSpec]:
    return [RequestSpec(index=i, workload="bench", input_tokens=8, max_tokens=args.tokens,
                        prompt_text="benchmark the benchmarker please") for i in range(args.requests)]


async def rates_bench(url: str, args: argparse.Namespace) -> None:
    """The open loop at each of --rates, rounds interleaved, then the closed loop: CPU per chunk and per
    request, context switches and reads per request. The code per request is the same at every rate;
    what changes is how often the client sleeps between requests (bench/wakeups.py: the cost of that)."""
    specs = bench_specs(args)
    cfg = ClientConfig(base_url=url, model="mock-model", transport=args.transport)
    rows: dict[float, list[dict[str, float | str | None]]] = {}
    closed_runs: list[dict[str, float]] = []
    for rnd in range(args.rounds):
        for rate in (args.rates if rnd % 2 == 0 else args.rates[::-1]):
            load = wait_for_quiet(args)
            o = await open_run(cfg, specs, rate, args.open_seconds, args, seed=rnd)
            o["load"] = load
            rows.setdefault(rate, []).append(o)
        load = wait_for_quiet(args)
        closed_runs.append(await closed_run(cfg, specs, args))
    closed = float(np.median([r["cpu_ms_per_1000_chunks"] for r in closed_runs]))
    closed_req = float(np.median([r["cpu_us_per_request"] for r in closed_runs]))
    loads = [float(o["load"]) for rs in rows.values() for o in rs]
    print(f"  medians over {args.rounds} interleaved round(s); load average at each start {min(loads):.2f}-{max(loads):.2f}")
    print(f"  {'rate':>6} {'achieved':>9} {'CPU ms/1000 chunks':>19} {'x closed':>9} {'CPU us/request':>15} "
          f"{'switches/request':>17} {'reads/request':>14}")
    for rate, rs in rows.items():
        med = {k: float(np.median([float(r[k]) for r in rs]))  # type: ignore[arg-type]
               for k in ("achieved", "cpu_ms_per_1000_chunks", "ctx_switches_per_request", "reads_per_request",
                         "cpu_us_per_request")}
        per_req = med["cpu_us_per_request"]
        print(f"  {rate:6.0f} {med['achieved']:9.1f} {med['cpu_ms_per_1000_chunks']:19.2f} "
              f"{med['cpu_ms_per_1000_chunks'] / closed:9.2f} {per_req:15.0f} {med['ctx_switches_per_request']:17.2f} "
              f"{med['reads_per_request']:14.1f}")
    print(f"  closed c={args.concurrency}: {closed:.2f} ms/1000 chunks, {closed_req:.0f} us/request")


async def pacers_bench(url: str, args: argparse.Namespace) -> None:
    """The open loop with each pacer in turn, rounds interleaved (order rotated each round), at --rate."""
    specs = bench_specs(args)
    cfg = ClientConfig(base_url=url, model="mock-model", transport=args.transport)
    kinds = [("spin", 1.5, False), ("spin", 0.0, False), ("auto", None, False), ("auto", None, True)]
    rows: dict[str, list[dict[str, float | str | None]]] = {}
    for rnd in range(args.rounds):
        order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
        for kind, spin, no_first in order:
            a = argparse.Namespace(**{**vars(args), "pacer": kind, "spin_ms": spin, "no_sends_first": no_first})
            load = wait_for_quiet(args)
            o = await open_run(cfg, specs, args.rate, args.open_seconds, a, seed=rnd)
            o["load"] = load
            print(f"  load average {load:.2f} at the start{', no sends-first' if no_first else ''}:", end="")
            print_open(o)
            rows.setdefault(str(o["pacer"]) + (", no sends-first" if no_first else ""), []).append(o)
    print(f"  medians over {args.rounds} interleaved rounds, open loop Poisson {args.rate:.0f} req/s:")
    for name, rs in rows.items():
        med = {k: float(np.median([r[k] for r in rs])) for k in ("schedule_p99", "submit_p99", "cpu_ms_per_1000_chunks")}
        print(f"    {name:>32}: schedule lag p99 {med['schedule_p99']:.3f} ms  submit lag p99 {med['submit_p99']:.3f} ms  "
              f"CPU {med['cpu_ms_per_1000_chunks']:.2f} ms/1000 chunks")


async def targets_run(url: str, args: argparse.Namespace) -> dict[str, float | str | None]:
    """Issue 38's figures from one process: open loop at 1000 and 2000 req/s, closed loop c=64."""
    specs = bench_specs(args)
    cfg = ClientConfig(base_url=url, model="mock-model", transport=args.transport)
    out: dict[str, float | str | None] = {}
    c = await closed_run(cfg, specs, args)
    out.update({f"closed_{k}": v for k, v in c.items()})
    for rate in (1000.0, 2000.0):
        o = await open_run(cfg, specs, rate, args.open_seconds, args)
        out.update({f"open{rate:.0f}_{k}": v for k, v in o.items()})
    return out


#: (key, label, target) of issue 38's "What it must show"
TARGET_ROWS = (
    ("open1000_schedule_p99", "open 1000 req/s: schedule lag P99, ms", "<= 0.2"),
    ("open2000_schedule_p99", "open 2000 req/s: schedule lag P99, ms", "<= 0.5"),
    ("open1000_submit_p99", "open 1000 req/s: submit lag P99, ms", ""),
    ("open2000_submit_p99", "open 2000 req/s: submit lag P99, ms", ""),
    ("open1000_wake_p99", "open 1000 req/s: pacer wake-up lag P99, ms", ""),
    ("open2000_wake_p99", "open 2000 req/s: pacer wake-up lag P99, ms", ""),
    ("open1000_cpu_ms_per_1000_chunks", "open 1000 req/s: CPU ms per 1000 chunks", "<= 1.2 x closed"),
    ("closed_cpu_ms_per_1000_chunks", "closed c=64: CPU ms per 1000 chunks", "<= 5"),
    ("open1000_sys_share", "open 1000 req/s: kernel (sys) share of its CPU", ""),
    ("open1000_ctx_switches_per_request", "open 1000 req/s: context switches per request", ""),
    ("closed_sys_share", "closed c=64: kernel (sys) share of its CPU", ""),
    ("closed_rps", "closed c=64: req/s", ">= before"),
    ("open1000_achieved", "open 1000 req/s: achieved req/s", ""),
    ("open2000_achieved", "open 2000 req/s: achieved req/s", ""),
)


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _host_busy_s() -> float:
    """CPU seconds the whole host has been busy (every core; /proc/stat), 0 where there is none."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return 0.0
    return (sum(v) - v[3] - v[4]) / _HZ


def _pid_cpu_s(pid: int | None) -> float:
    """CPU seconds of one process (/proc/PID/stat utime + stime), 0 where unknown."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _HZ


def wait_for_idle(args: argparse.Namespace) -> float:
    """With ``--max-others C``: wait (up to ``--max-wait`` s) until the host's busy CPU over one second
    is below C cores (nothing else running); returns the last sample."""
    deadline = time.monotonic() + args.max_wait
    while True:
        b0 = _host_busy_s()
        time.sleep(1.0)
        busy = _host_busy_s() - b0
        if args.max_others is None or busy < args.max_others or time.monotonic() > deadline:
            return busy


def targets(url: str, args: argparse.Namespace, mock_pid: int | None = None) -> None:
    """Each round runs this checkout (A) and, with --against, another one (B) in fresh processes, in
    turn (A B, then B A, ...), against the same mock; prints every run, then medians and A/B ratios.

    Each run also measures the *others'* CPU: the host's busy CPU during the run less the run's own
    process and the mock's, in cores. With ``--max-others C`` a run where others used more than C
    cores is printed, discarded and run again (up to ``--retries`` times), after waiting for an idle
    host: figures from a host where another job took a core are not the client's."""
    sides = [("A", REPO)] + ([("B", args.against.resolve())] if args.against else [])
    runs: dict[str, list[dict[str, float | str | None]]] = {name: [] for name, _ in sides}
    for rnd in range(args.rounds):
        for name, repo in (sides if rnd % 2 == 0 else sides[::-1]):
            for attempt in range(args.retries + 1):
                r = _target_child(url, args, repo, mock_pid)
                others = float(r["others_cores"])  # type: ignore[arg-type]
                if args.max_others is None or others <= args.max_others or attempt == args.retries:
                    break
                print(f"  round {rnd + 1} {name}: discarded, others used {others:.2f} cores "
                      f"(load average {r['load1']:.2f}); again", flush=True)
            runs[name].append(r)
            print(f"  round {rnd + 1} {name} ({repo}), load average {r['load1']:.2f}, others {others:.2f} cores: "
                  f"closed {r['closed_rps']:.0f} req/s "
                  f"{r['closed_cpu_ms_per_1000_chunks']:.2f} ms/1000 chunks | open 1000: schedule p99 "
                  f"{r['open1000_schedule_p99']:.3f} ms, submit p99 {r['open1000_submit_p99']:.3f} ms, "
                  f"{r['open1000_cpu_ms_per_1000_chunks']:.2f} ms/1000 chunks, pacer {r['open1000_pacer']} | open 2000: "
                  f"schedule p99 {r['open2000_schedule_p99']:.3f} ms, submit p99 {r['open2000_submit_p99']:.3f} ms, "
                  f"achieved {r['open2000_achieved']:.0f}", flush=True)
    _targets_table(runs, args)


def _target_child(url: str, args: argparse.Namespace, repo: Path, mock_pid: int | None) -> dict[str, float | str | None]:
    """One --targets run of ``repo`` in a fresh process: its figures, the load average at its start and
    the others' CPU during it (host busy − the run − the mock, in cores)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--repo", str(repo), "--url", url, "--child-json",
           "--requests", str(args.requests), "--open-seconds", str(args.open_seconds),
           "--tokens", str(args.tokens), "--concurrency", str(args.concurrency), "--pacer", args.pacer,
           "--transport", args.transport, "--loop", args.loop]
    if args.spin_ms is not None:
        cmd += ["--spin-ms", str(args.spin_ms)]
    if args.no_sends_first:
        cmd += ["--no-sends-first"]
    load = wait_for_quiet(args)
    wait_for_idle(args)
    ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    host0, mock0, me0, t0 = _host_busy_s(), _pid_cpu_s(mock_pid), time.process_time(), time.monotonic()
    line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    host1, mock1, me1, t1 = _host_busy_s(), _pid_cpu_s(mock_pid), time.process_time(), time.monotonic()
    ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (ch1.ru_utime - ch0.ru_utime) + (ch1.ru_stime - ch0.ru_stime)
    r = json.loads(line)
    r["load1"] = load
    r["others_cores"] = max(0.0, (host1 - host0) - child - (mock1 - mock0) - (me1 - me0)) / (t1 - t0)
    return r


def _targets_table(runs: dict[str, list[dict[str, float | str | None]]], args: argparse.Namespace) -> None:
    loads = [float(r["load1"]) for rs in runs.values() for r in rs]  # type: ignore[arg-type]
    others = [float(r["others_cores"]) for rs in runs.values() for r in rs]  # type: ignore[arg-type]
    print(f"  medians over {args.rounds} round(s); 1-minute load average at each start {min(loads):.2f}-{max(loads):.2f}; "
          f"others' CPU during the runs {min(others):.2f}-{max(others):.2f} cores")
    head = f"  {'figure':<44} {'target':>16} {'A (this)':>10}"
    if args.against:
        head += f" {'B (against)':>12} {'A/B pairwise median':>20}"
    print(head)
    for key, label, target in TARGET_ROWS:
        a = [float(r.get(key, "nan")) for r in runs["A"]]
        row = f"  {label:<44} {target:>16} {np.median(a):10.3f}"
        if args.against:
            b = [float(r.get(key, "nan")) for r in runs["B"]]
            row += f" {np.median(b):12.3f} {np.median(np.array(a) / np.array(b)):20.3f}"
        print(row)
    for name, rs in runs.items():
        ratio = np.median([float(r["open1000_cpu_ms_per_1000_chunks"]) / float(r["closed_cpu_ms_per_1000_chunks"])
                           for r in rs])
        print(f"  {name}: open 1000 / closed CPU per chunk, median of rounds: {ratio:.2f} (target <= 1.2)")


def _cpu_s() -> float:
    """CPU seconds of this process plus its reaped children (the shard processes, once joined)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


async def workers_bench(url: str, args: argparse.Namespace) -> None:
    """Closed loop at ``--concurrency`` over 1, 2, ... load-generator processes, side by side.

    One worker is today's in-process path; N > 1 splits the concurrency over N spawned shard
    processes (shards/local.py) and merges their records. CPU is every load-generator process's
    (parent + shards, start-up included), per 1000 chunks received.
    """
    specs = [RequestSpec(index=i, workload="bench", input_tokens=8, max_tokens=args.tokens,
                         prompt_text="benchmark the benchmarker please") for i in range(args.requests)]
    cfg = ClientConfig(base_url=url, model="mock-model", transport=args.transport)
    rows = []
    for w in args.workers:
        async with LLMClient(cfg, max_connections=args.concurrency) as c:
            if w == 1:
                await run_closed_loop(c, specs[:500], args.concurrency)  # connections + caches warm
            cpu0 = _cpu_s()
            if w == 1:
                res = await run_closed_loop(c, specs, args.concurrency)
            else:
                res = await run_sharded(LocalBackend(w), c, specs, ClosedLoop(args.concurrency),
                                        tokenizer=cfg.tokenizer or "cl100k_base")
            cpu = _cpu_s() - cpu0
        n = chunks(res)
        shards = res.parameters.get("sharding", {}).get("shards", [])
        lag = max((s["loop_delay"]["p99_ms"] or 0.0 for s in shards), default=res.loop_delay.p99_ms or 0.0)
        if shards:  # each shard's own CPU over its run, per 1000 of the chunks it received
            per = [s.get("cpu_s", 0.0) / max(sum(len(r.chunk_ns) for r in res.records if r.shard == s["index"]), 1)
                   * 1e6 for s in shards]
        else:
            per = [res.client_delay.cpu_s / max(n, 1) * 1e6] if res.client_delay is not None else []
        rows.append((w, res.ok / res.duration_s, n / res.duration_s, cpu / max(n, 1) * 1e6, lag, res.valid,
                     res.ok, res.sent, per))
    print(f"  closed loop c={args.concurrency}, {args.requests} requests, {args.tokens}-token streams:")
    print(f"  {'workers':>7} {'req/s':>8} {'chunks/s':>9} {'CPU ms/1000 chunks':>19} {'per worker (its run)':>22} "
          f"{'loop p99 ms':>12} {'valid':>6} {'ok/sent':>12}")
    for w, rps, cps, cpu_k, lag, valid, ok, sent, per in rows:
        each = ", ".join(f"{x:.2f}" for x in per)
        print(f"  {w:>7} {rps:8.0f} {cps:9.0f} {cpu_k:19.2f} {each:>22} {lag:12.1f} {str(valid):>6} {ok:>6}/{sent:<6}")
    print("  CPU ms/1000 chunks: every load-generator process (parent + shards, start-up included); per worker: "
          "each process's CPU over its own run per 1000 of its chunks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an OpenAI-compatible base URL already running (skips the mock)")
    ap.add_argument("--mock", type=Path, default=None,
                    help="path of mock_openai_server.py (default: ../shared/tools/ beside the checkout)")
    ap.add_argument("--transport", default="aiohttp", choices=[*TRANSPORTS, "grpc", "all"],
                    help="grpc: the gRPC transport against bench/grpc_mock.py (or --url grpc://host:port)")
    ap.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=20000, help="closed-loop requests")
    ap.add_argument("--rate", type=float, default=1000.0, help="open-loop rate, req/s")
    ap.add_argument("--open-seconds", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--itl-ms", type=float, default=0.0,
                    help="the mock's delay between chunks (0: a stream arrives in one read; > 0: a read per chunk)")
    ap.add_argument("--only", choices=["closed", "open"], help="run one of the two measurements")
    ap.add_argument("--pacer", default="auto", choices=["auto", "timerfd", "sleep", "spin"],
                    help="open loop: how the dispatcher waits for a send time (loadgen/pacer.py)")
    ap.add_argument("--spin-ms", type=float, default=None,
                    help="open loop, --pacer spin: yield-spin this close to a send (default 1.5)")
    ap.add_argument("--no-sends-first", action="store_true",
                    help="open loop: no send priority (a due send may wait behind response parsing; load.py)")
    ap.add_argument("--rates", type=lambda v: [float(x) for x in v.split(",")], default=None,
                    help="open loop at each of these rates (comma-separated), interleaved, then the closed loop: "
                         "CPU per chunk and per request, switches and reads per request")
    ap.add_argument("--pacers", action="store_true",
                    help="open loop at --rate with the spin (1.5 ms), timer (spin 0) and auto pacers, interleaved")
    ap.add_argument("--targets", action="store_true",
                    help="issue 38's figures: open loop 1000 and 2000 req/s (schedule and submit lag P99, CPU per "
                         "1000 chunks), closed loop c=64 (req/s, CPU per 1000 chunks), each round in fresh processes")
    ap.add_argument("--against", type=Path, default=None,
                    help="--targets: also run another checkout (e.g. main's) the same way, interleaved; A/B ratios")
    ap.add_argument("--rounds", type=int, default=3, help="--targets / --pacers: rounds")
    ap.add_argument("--max-load", type=float, default=None,
                    help="--targets / --pacers: before each run wait until the 1-minute load average is below this")
    ap.add_argument("--max-wait", type=float, default=300.0, help="--max-load: wait at most this many seconds")
    ap.add_argument("--max-others", type=float, default=None,
                    help="--targets: wait until the host is idle (busy < this many cores) before each run, and "
                         "run again one where other processes used more than this many cores")
    ap.add_argument("--retries", type=int, default=3, help="--max-others: runs again at most this many times")
    ap.add_argument("--mock-cpus", default=None, help="pin the mock to these CPUs (taskset -c), e.g. 1")
    ap.add_argument("--late-profile", action="store_true",
                    help="open loop at --rate on the asyncio loop with every callback timed: what ran between "
                         "each late send's due time and its hand-over (bench/late_sends.py)")
    ap.add_argument("--late-ms", type=float, default=0.2, help="--late-profile: a send later than this is late")
    ap.add_argument("--cprofile", action="store_true",
                    help="cProfile one run (--only open: the open loop at --rate, else the closed loop)")
    ap.add_argument("--top", type=int, default=15, help="--late-profile / --cprofile: entries printed")
    ap.add_argument("--repo", type=Path, default=None, help="measure this checkout's package (A/B child runs)")
    ap.add_argument("--child-json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--http-trace", action="store_true", help="record per-request HTTP timings (httptrace.py)")
    ap.add_argument("--workers", type=lambda t: [int(x) for x in t.split(",")], default=None,
                    help="comma-separated load-generator process counts to compare, e.g. 1,2 (closed loop)")
    ap.add_argument("--trace-compare", type=int, default=0, metavar="ROUNDS",
                    help="ROUNDS pairs of rounds with HTTP tracing off and on, interleaved; prints the pairwise "
                         "on/off ratios (median, quartiles, range); closed loop, or open loop at --rate "
                         "for --open-seconds with --only open")
    args = ap.parse_args()

    loop = args.loop
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            loop = "asyncio"
    run = uvloop.run if loop == "uvloop" else asyncio.run
    if args.child_json:  # one --targets run in this process, against --url: one JSON line
        print(json.dumps(run(targets_run(args.url, args))))
        return
    proc = grpc_proc = None
    url = args.url
    grpc_url = url if url is not None and url.startswith("grpc") else None
    if args.transport in ("grpc", "all") and grpc_url is None:
        grpc_proc, grpc_url = start_grpc_mock(args.tokens, args.itl_ms, args.mock_cpus)
    if url is None and args.transport != "grpc":
        proc, url = start_mock(find_mock(args.mock), args.tokens, args.itl_ms, args.mock_cpus)
    url = url or grpc_url
    print(f"pytest-llmbench load generator bench: server {url} ({'mock, own process' if proc or grpc_proc else 'external'}), "
          f"event loop {loop}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (shared machine: figures are noisy)")
    try:
        if args.workers:
            run(workers_bench(url, args))
            return
        if args.late_profile:
            asyncio.run(late_profile(url, args))  # the asyncio loop: uvloop's callbacks cannot be timed
            return
        if args.cprofile:
            run(cprofile_run(url, args))
            return
        if args.targets:
            targets(url, args, proc.pid if proc is not None else None)
            return
        if args.pacers:
            run(pacers_bench(url, args))
            return
        if args.rates:
            run(rates_bench(url, args))
            return
        for t in ((*TRANSPORTS, "grpc") if args.transport == "all" else (args.transport,)):
            print(f"transport: {t}" + (f" ({grpc_url}, messages of one token id)" if t == "grpc" else ""))
            if t == "grpc":
                coro = bench(grpc_url, t, args)  # type: ignore[arg-type]
            else:
                coro = trace_compare(url, t, args) if args.trace_compare else bench(url, t, args)
            if loop == "uvloop":
                uvloop.run(coro)
            else:
                asyncio.run(coro)
    finally:
        for p in (proc, grpc_proc):
            if p is not None:
                p.terminate()
                p.wait(10)


if __name__ == "__main__":
    main()
