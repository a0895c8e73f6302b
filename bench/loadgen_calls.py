#!/usr/bin/env python3
"""Python calls per request and per chunk of the load generator, closed and open loop (figures
printed, never asserted; issue 38).

    python bench/loadgen_calls.py [--requests 3000] [--rate 1000] [--repo ../other-checkout]

Runs the closed loop (64 streams) and the open loop (Poisson at ``--rate``) against the reference
mock under ``cProfile`` and prints the function calls per request and per chunk, and the functions
with the most calls per request (and their profiled time). Call counts do not depend on how busy
the machine is (bench/httptrace_calls.py's method); ``--repo`` measures another checkout (A/B).
Profiled times are inflated by the profiler: read them as relative only.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import argparse  # noqa: E402
import asyncio  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402

import loadgen  # noqa: E402  (puts the checkout, or --repo, on sys.path)
from httptrace_calls import _name  # noqa: E402

from pytest_llmbench.client import ClientConfig, LLMClient  # noqa: E402
from pytest_llmbench.common.records import RequestSpec  # noqa: E402
from pytest_llmbench.loadgen.load import ArrivalProcess, LoadResult, run_closed_loop, run_open_loop  # noqa: E402


async def _profile(url: str, specs: list[RequestSpec], rate: float | None) -> tuple[dict[str, tuple[int, float]], LoadResult]:
    prof = cProfile.Profile()
    cfg = ClientConfig(base_url=url, model="mock-model", transport="aiohttp")
    async with LLMClient(cfg, max_connections=None if rate else 64) as c:
        await run_closed_loop(c, specs[:300], 4 if rate else 64)  # connections, tokenizer and caches warm
        prof.enable()
        if rate:
            res = await run_open_loop(c, specs, ArrivalProcess("poisson", rate, seed=1))
        else:
            res = await run_closed_loop(c, specs, 64)
        prof.disable()
    out: dict[str, tuple[int, float]] = {}
    for k, v in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        n, t = out.get(_name(k), (0, 0.0))
        out[_name(k)] = (n + v[1], t + v[2])
    return out, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--mock", type=Path, default=None)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--repo", type=Path, default=None, help="measure this checkout (read before the imports)")
    args = ap.parse_args()
    proc, url = loadgen.start_mock(loadgen.find_mock(args.mock), args.tokens)
    specs = [RequestSpec(index=i, workload="bench", input_tokens=8, max_tokens=args.tokens,
                         prompt_text="benchmark the benchmarker please") for i in range(args.requests)]
    try:
        runs = {"closed c=64": asyncio.run(_profile(url, specs, None)),
                f"open {args.rate:.0f} req/s": asyncio.run(_profile(url, specs, args.rate))}
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"checkout {loadgen.REPO}: {args.requests} requests, {args.tokens}-token streams")
    for label, (calls, res) in runs.items():
        n = len(res.records)
        n_chunks = sum(len(r.chunk_ns) for r in res.records)
        total = sum(c for c, _ in calls.values())
        print(f"  {label}: {total / n:.1f} calls per request, {total / n_chunks:.2f} per chunk "
              f"({n_chunks / n:.1f} chunks per request); most calls per request:")
        for k, (c, t) in sorted(calls.items(), key=lambda kv: -kv[1][0])[: args.top]:
            print(f"    {c / n:9.2f}  {t / n * 1e6:8.1f} µs  {k}")


if __name__ == "__main__":
    main()
