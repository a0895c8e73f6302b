#!/usr/bin/env python3
"""Trace replay against the reference mock server (issue 50 item 3; figures printed, never asserted).

    python bench/trace_replay.py                      # 2,000 requests at ~50 req/s with shared hash_ids
    python bench/trace_replay.py --requests 500 --rate 200 --keep-trace /tmp/trace.jsonl
    python bench/trace_replay.py --url http://127.0.0.1:8000/v1   # a server already running

Generates a Mooncake trace (JSON Lines: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``):
Poisson send times with bursts, prompts that start with one of 20 shared "documents" of 1-6 blocks of
``--block-size`` tokens, then 1-3 blocks of their own, the last one cut. It is read back through
``workloads.trace.read_trace`` (the checks every trace gets), its prompts synthesised per block
(``trace_workload``), and replayed by the open loop at its send times (``loadgen.replay.TraceArrival``) against
``shared/tools/mock_openai_server.py`` (``--ttft-ms 0 --itl-ms 0 --tokens 20 --no-stats``) over token-id
prompts on the completions endpoint, after a warm-up of 64 requests whose blocks are disjoint from the
trace's (``trace_warmup``, as 5.1 does; it also opens the connections the replay reuses). Printed, with ``uptime``'s load average beside them:

* send lag: T_submit − trace time (the run's start plus the request's offset), P50/P99/max;
* send-gap error: |gap between consecutive sends − the trace's gap|, P50/P99/max (target: P99 <= 5 ms on a
  quiet machine);
* input length: the server's count (usage.prompt_tokens) against the trace's, median relative error (target:
  <= 5 %);
* prefix sharing: requests whose first block equals another request's first block, and the check that equal
  leading hash ids sent identical leading token blocks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/loadgen.py: the mock's finder and starter
from loadgen import find_mock, start_mock  # noqa: E402

from pytest_llmbench.client import ClientConfig, LLMClient  # noqa: E402
from pytest_llmbench.loadgen.load import ClosedLoop, LoadOptions, OpenLoop, run_load  # noqa: E402
from pytest_llmbench.loadgen.replay import TraceArrival, replay_fidelity  # noqa: E402
from pytest_llmbench.workloads.trace import read_trace, trace_warmup, trace_workload  # noqa: E402


def make_trace(path: Path, n: int, rate: float, block: int, seed: int) -> None:
    """``n`` requests: Poisson gaps at ``rate`` with a burst of 20 every 400 requests, 20 shared documents."""
    rng = np.random.default_rng(seed)
    docs = [list(range(d * 100, d * 100 + int(rng.integers(1, 7)))) for d in range(20)]
    t = 1_700_000_000_000.0  # absolute ms: normalised to the first by the reader
    own = 10_000
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            t += 0.2 if i % 400 < 20 else float(rng.exponential(1000.0 / rate))
            ids = list(docs[int(rng.zipf(1.5)) % 20])
            k = int(rng.integers(1, 4))
            ids += list(range(own, own + k))
            own += k
            inp = (len(ids) - 1) * block + int(rng.integers(1, block + 1))
            fh.write(json.dumps({"timestamp": round(t, 3), "input_length": inp,
                                 "output_length": int(rng.integers(8, 64)), "hash_ids": ids}) + "\n")


async def replay(url: str, path: Path, block: int, seed: int) -> None:
    trace = read_trace(path, block_size=block)
    t0 = time.perf_counter()
    wl = trace_workload(trace, seed=seed)  # drawn ahead into a spool, read back one request at a time (as 5.1)
    built = time.perf_counter() - t0
    _check_blocks(trace, wl.specs, block)
    warm = trace_warmup(trace, n=64, seed=seed + 1, trace_seed=seed)
    cfg = ClientConfig(base_url=url, model="mock-model", api="completions", token_id_prompts=True)
    load = OpenLoop(TraceArrival.of(trace.offsets_ns(), seed=seed), max_requests=len(trace))
    async with LLMClient(cfg, max_connections=None) as client:
        # the warm-up (as 5.1's, its blocks disjoint from the trace's) opens the connections the replay reuses
        await run_load(client, warm, ClosedLoop(32, max_requests=len(warm)), LoadOptions(phase="warmup"))
        res = await run_load(client, wl.specs, load, LoadOptions(phase="measure", drain_timeout_s=60.0))
    f = replay_fidelity(res.records, trace.offsets_ns(), [r.input_length for r in trace.requests], res.start_ns)
    uptime = os.popen("uptime").read().strip()
    print(f"trace: {len(trace)} requests over {trace.duration_s:.1f} s (mean {trace.mean_rate:.1f} req/s), "
          f"{block}-token blocks, sha256 {trace.sha256[:16]}; prompts built in {built:.2f} s; "
          f"sequence sha256 {wl.declaration.request_sequence_sha256[:16]}")
    print(f"sent {f.sent}/{f.planned}, ok {res.ok}, errors {res.errors or 'none'}, pacer {res.pacer}, "
          f"schedule mismatches {f.schedule_mismatches}")
    for name, s in (("send lag (T_submit - trace time)", f.send_lag), ("send-gap error |gap - trace gap|", f.gap_error)):
        print(f"{name}: P50 {s.p50_ms:.3f} ms, P99 {s.p99_ms:.3f} ms, max {s.max_ms:.3f} ms (n={s.n})")
    print(f"input length ({f.input_counted_by}) vs trace: median relative error {f.input_median_rel_error:.2%}, "
          f"max {f.input_max_rel_error:.2%}")
    print(f"schedule lag (hand-over - intended) P99 {res.send_lag.p99_ms:.3f} ms; uptime: {uptime}")


def _check_blocks(trace, specs, block: int) -> None:  # type: ignore[no-untyped-def]
    """Equal leading hash ids -> identical leading blocks, distinct -> distinct (what the issue asks to show)."""
    first: dict[int, tuple[int, ...]] = {}
    shared = 0
    for r, s in zip(trace.requests, specs):
        blk = tuple(s.prompt_ids[:block])
        if len(blk) < block:
            continue
        h = r.hash_ids[0]
        if h in first:
            assert first[h] == blk, f"line {r.line}: hash id {h} sent another first block"
            shared += 1
        else:
            assert blk not in first.values(), f"line {r.line}: hash id {h} sent another id's first block"
            first[h] = blk
    print(f"prefix blocks: {shared} requests sent a first block equal to an earlier one's (equal hash ids), "
          f"{len(first)} distinct first blocks for {len(first)} distinct first ids")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=50.0, help="mean request rate of the generated trace (req/s)")
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--mock", type=Path, default=None, help="path of mock_openai_server.py")
    ap.add_argument("--url", default=None, help="a server already running (…/v1)")
    ap.add_argument("--keep-trace", type=Path, default=None, help="write the generated trace here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep_trace or Path(tmp) / "trace.jsonl"
        make_trace(path, args.requests, args.rate, args.block_size, args.seed)
        proc = None
        url = args.url
        if url is None:
            proc, url = start_mock(find_mock(args.mock), tokens=20)
        try:
            asyncio.run(replay(url, path, args.block_size, args.seed))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)


if __name__ == "__main__":
    main()
