#!/usr/bin/env python3
"""Python calls per request and per chunk that HTTP tracing adds (figures printed, never asserted).

    python bench/httptrace_calls.py [--requests 2000] [--tokens 50] [--itl-ms 0]

Runs the same closed loop (64 streams, the reference mock) twice under ``cProfile``, tracing off
and on, and prints the difference in function calls per request, split into functions called per
body read (the per-chunk path) and the rest, with the functions that differ most. Call counts do
not depend on how busy the machine is, so this answers "does tracing add work per chunk?" where
CPU-time ratios (``bench/loadgen.py --trace-compare``) carry the host's noise. Profiled times are
inflated by the profiler; read them as relative only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an installed copy
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402

from pytest_llmbench.client import ClientConfig, LLMClient  # noqa: E402
from pytest_llmbench.common.records import RequestSpec  # noqa: E402
from pytest_llmbench.loadgen.load import LoadResult, run_closed_loop  # noqa: E402

Key = str


def _name(k: tuple[str, int, str]) -> Key:
    path = k[0].split("site-packages/")[-1]
    path = path.split(str(Path(__file__).resolve().parents[1]) + "/")[-1]
    return f"{path}:{k[2]}"


async def _profile(url: str, specs: list[RequestSpec], traced: bool) -> tuple[dict[Key, tuple[int, float]], LoadResult]:
    prof = cProfile.Profile()
    cfg = ClientConfig(base_url=url, model="mock-model", transport="aiohttp", http_trace=traced)
    async with LLMClient(cfg, max_connections=64) as c:
        await run_closed_loop(c, specs[:300], 64)  # connections and caches warm
        prof.enable()
        res = await run_closed_loop(c, specs, 64)
        prof.disable()
    st = pstats.Stats(prof)
    out: dict[Key, tuple[int, float]] = {}
    for k, v in st.stats.items():  # type: ignore[attr-defined]
        n, t = out.get(_name(k), (0, 0.0))
        out[_name(k)] = (n + v[1], t + v[2])
    return out, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--itl-ms", type=float, default=0.0, help="the mock's delay between chunks (> 0: a read per chunk)")
    ap.add_argument("--mock", type=Path, default=None)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    proc, url = loadgen.start_mock(loadgen.find_mock(args.mock), args.tokens, args.itl_ms)
    specs = [RequestSpec(index=i, workload="bench", input_tokens=8, max_tokens=args.tokens,
                         prompt_text="benchmark the benchmarker please") for i in range(args.requests)]
    try:
        off, res_off = asyncio.run(_profile(url, specs, False))
        on, res_on = asyncio.run(_profile(url, specs, True))
    finally:
        proc.terminate()
        proc.wait(10)
    n = args.requests
    reads = {name: c for name, (c, _) in off.items() if name.endswith("stream.py:read_stream")}
    chunks_off = sum(len(r.chunk_ns) for r in res_off.records) / n
    calls_off = sum(c for c, _ in off.values()) / n
    calls_on = sum(c for c, _ in on.values()) / n
    # a Python function is on the per-chunk path when it is called at least once per chunk untraced
    # (builtins such as len() are called per chunk *and* per request: they cannot tell the two apart)
    per_chunk = {k for k, (c, _) in off.items() if c / n >= chunks_off and not k.startswith("~:")}
    d_chunk = sum(on.get(k, (0, 0.0))[0] - off.get(k, (0, 0.0))[0] for k in per_chunk) / n
    print(f"{n} requests, {args.tokens}-token streams, mock ITL {args.itl_ms:g} ms, {chunks_off:.1f} chunks/request, "
          f"{len(reads)} read loop(s)")
    print(f"calls per request: off {calls_off:.1f}, on {calls_on:.1f}: +{calls_on - calls_off:.1f} "
          f"({(calls_on / calls_off - 1) * 100:+.1f} %)")
    print(f"calls per chunk added, over the {len(per_chunk)} Python functions called at least once per chunk "
          f"({', '.join(sorted(k.rsplit(':', 1)[1] for k in per_chunk))}): {d_chunk / max(chunks_off, 1):+.3f}")
    rows = sorted(((on.get(k, (0, 0.0))[0] - off.get(k, (0, 0.0))[0]) / n, k) for k in set(off) | set(on))
    print(f"functions whose calls per request differ most (on − off), top {args.top}:")
    for d, k in sorted(rows, key=lambda r: -abs(r[0]))[: args.top]:
        if d:
            print(f"  {d:+8.2f}  {k}")


if __name__ == "__main__":
    main()
