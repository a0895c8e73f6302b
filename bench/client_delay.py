#!/usr/bin/env python3
"""Client-delay self-check figures on the embedded simulator (printed, never asserted).

    python bench/client_delay.py                      # closed loop, 64 streams, server timestamps
    python bench/client_delay.py --concurrency 8 --requests 400 --time-scale 0.2

Runs a closed loop against the simulator with per-token server timestamps (``llmbench_timing``,
§4.6.3 option C) and prints what the self-check reports (selfcheck.py): the client's receive delay
and event-loop lag at P50/P99, its CPU share, the client-vs-server first-token error at P50/P99,
each TTFT/E2E percentile next to the client delay at that percentile, and whether the run is
flagged. On a shared machine the figures move with the other jobs; that is what they are for.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools

import numpy as np

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.loadgen.load import ClosedLoop, run_load
from pytest_llmbench.loadgen.selfcheck import assess, option_c_error
from pytest_llmbench.simulator import SimConfig, start_simulator
from pytest_llmbench.workloads import build_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    specs = build_workload("synthetic-uniform", n=200, seed=1).specs
    specs = [s.__class__(**{**s.to_json(), "max_tokens": args.max_tokens, "prompt_ids": None}) for s in specs]
    with start_simulator(SimConfig(time_scale=args.time_scale, seed=1)) as sim:
        res = asyncio.run(_run(sim.base_url, specs, args.concurrency, args.requests))
    ok = [r for r in res.records if r.ok]
    figs = []
    for name, f in (("ttft", lambda r: r.first_token_ns - r.sent_ns), ("e2e", lambda r: r.end_ns - r.sent_ns)):
        v = np.array([f(r) for r in ok if r.first_token_ns is not None and r.end_ns is not None]) / 1e9
        figs += [(f"{name}_p{p:g}", p, float(np.percentile(v, p))) for p in (50.0, 99.0)]
    doc = assess(figs, res.client_delay, option_c_error(res.records))
    c = doc["client"]
    print(f"closed loop c={args.concurrency}: {res.ok} ok of {res.sent}, {res.duration_s:.1f} s, "
          f"{res.completion_rate:.0f} req/s, valid={res.valid}")
    print(f"client receive delay P50 {c['receive_delay_ms'].get('p50', float('nan')):.3f} ms, "
          f"P99 {c['receive_delay_ms'].get('p99', float('nan')):.3f} ms (n={c['receive_n']}); "
          f"event-loop lag P99 {c['loop_lag_ms'].get('p99', float('nan')):.3f} ms; CPU share {c['cpu_share']:.2f}")
    e = doc["option_c_error"]
    if e:
        print(f"client - server first token: P50 {e['p50_ms']:.3f} ms, P99 {e['p99_ms']:.3f} ms, "
              f"max {e['max_ms']:.3f} ms (n={e['n']})")
    for f in doc["figures"]:
        print(f"  {f['figure']:>9} {f['value_s'] * 1e3:9.2f} ms   client delay {f['client_delay_ms']:.3f} ms "
              f"({f['share']:.2%}){'  FLAGGED' if f['flagged'] else ''}")
    print("run flagged:", doc["flagged"])
    for r in doc["reasons"]:
        print("  -", r)


async def _run(url: str, specs: list, concurrency: int, n: int):  # type: ignore[no-untyped-def]
    cfg = ClientConfig(base_url=url, model="llmbench-sim", request_server_timing=True)
    async with LLMClient(cfg, max_connections=concurrency) as client:
        return await run_load(client, itertools.cycle(specs), ClosedLoop(concurrency, max_requests=n))


if __name__ == "__main__":
    main()
