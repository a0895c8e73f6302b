#!/usr/bin/env python3
"""What sampling the server's /metrics costs the load generator (measure/telemetry.py; printed, never asserted).

    python bench/telemetry.py                       # a vLLM-sized page, every 0.25 s for 20 s
    python bench/telemetry.py --interval 0.1 --seconds 30 --histograms 40
    python bench/telemetry.py --simulator           # the embedded simulator's own page

A page shaped like vLLM 0.11's /metrics (its six role series plus ``--histograms`` labelled histograms of
30 buckets, the bulk of a real page) is served from a child process, so only the sampler's own work is
counted here: the CPU seconds this process spends per second of sampling (``time.process_time`` over the
wall time, minus the same event loop idle for as long), CPU ms per scrape, and the parse alone
(prometheus_client's parser plus the role lookup) per page: of the named series only, as the sampling
loop does (``select_lines``), and of the whole page, as its first and last scrapes do. The 1/5/15-minute load averages are printed
beside the figures: on a shared machine the figures move with the other jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import time
import timeit

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.loadgen.warmup import scrape_for
from pytest_llmbench.measure.telemetry import TelemetrySampler, read_exposition, read_roles, select_lines
from pytest_llmbench.sut.adapters import SIMULATOR, VLLM, telemetry_names


def vllm_like_page(histograms: int) -> str:
    """A /metrics page of vLLM 0.11's shape: gauges and counters by role, then labelled histograms."""
    lab = 'engine="0",model_name="Qwen/Qwen3-8B"'
    out = []
    for name, typ, v in (("vllm:num_requests_running", "gauge", 12), ("vllm:num_requests_waiting", "gauge", 3),
                         ("vllm:kv_cache_usage_perc", "gauge", 0.72), ("vllm:num_preemptions_total", "counter", 5),
                         ("vllm:prefix_cache_queries_total", "counter", 40960),
                         ("vllm:prefix_cache_hits_total", "counter", 10240),
                         ("vllm:request_success_total", "counter", 1500)):
        out += [f"# HELP {name} {name}.", f"# TYPE {name} {typ}", f"{name}{{{lab}}} {v}"]
    buckets = [0.001 * 2 ** (i / 2) for i in range(29)]
    for h in range(histograms):
        name = f"vllm:histogram_{h}_seconds"
        out += [f"# HELP {name} A latency histogram.", f"# TYPE {name} histogram"]
        for i, le in enumerate(buckets):
            out.append(f'{name}_bucket{{{lab},le="{le:.6g}"}} {float(10 * i)}')
        out += [f'{name}_bucket{{{lab},le="+Inf"}} 300.0', f"{name}_count{{{lab}}} 300.0",
                f"{name}_sum{{{lab}}} 123.4"]
    return "\n".join(out) + "\n"


def _serve(page: str, port: int) -> None:
    from aiohttp import web

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _measure(root: str, names: dict[str, tuple[str, ...]], interval: float, seconds: float) -> dict[str, float]:
    async with LLMClient(ClientConfig(base_url=root + "/v1", model="m")) as c:
        w0, c0 = time.perf_counter(), time.process_time()
        await asyncio.sleep(seconds)  # the same loop, idle: what the process costs without sampling
        idle = (time.process_time() - c0) / (time.perf_counter() - w0)
        sampler = TelemetrySampler(scrape_for(c), names, interval_s=interval)
        w0, c0 = time.perf_counter(), time.process_time()
        await sampler.start()
        await asyncio.sleep(seconds)
        await sampler.stop()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    s = sampler.series
    assert s.status == "sampled", (s.status, s.detail)
    return {"scrapes": len(s.t_ns), "failed": s.failed, "wall": wall, "cpu_per_s": cpu / wall - idle,
            "idle_per_s": idle, "cpu_ms_per_scrape": (cpu - idle * wall) / len(s.t_ns) * 1e3,
            "scrape_p50_ms": sorted(s.scrape_ns)[len(s.scrape_ns) // 2] / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between scrapes (default 0.25)")
    ap.add_argument("--seconds", type=float, default=20.0, help="sampling time (default 20)")
    ap.add_argument("--histograms", type=int, default=24, help="histograms on the vLLM-shaped page (default 24)")
    ap.add_argument("--simulator", action="store_true", help="sample the embedded simulator instead")
    args = ap.parse_args()
    if args.simulator:
        from pytest_llmbench.simulator import SimConfig, start_simulator

        with start_simulator(SimConfig(seed=1)) as sim:
            import httpx

            page = httpx.get(sim.metrics_url).text
            res = asyncio.run(_measure(sim.url, telemetry_names(SIMULATOR), args.interval, args.seconds))
        names = telemetry_names(SIMULATOR)
    else:
        page = vllm_like_page(args.histograms)
        port = _free_port()
        child = multiprocessing.Process(target=_serve, args=(page, port), daemon=True)
        child.start()
        try:
            root = f"http://127.0.0.1:{port}"
            for _ in range(100):  # until it listens
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            names = telemetry_names(VLLM)
            res = asyncio.run(_measure(root, names, args.interval, args.seconds))
        finally:
            child.terminate()
            child.join(5)
    n = 200
    parse_ms = timeit.timeit(lambda: read_roles(read_exposition(page), names), number=n) / n * 1e3
    wanted = frozenset(x for ns in names.values() for x in ns)
    select_ms = timeit.timeit(lambda: read_roles(read_exposition(select_lines(page, wanted)), names),
                              number=n) / n * 1e3
    load = os.getloadavg()
    print(f"page: {len(page):,} bytes, {page.count(chr(10)):,} lines ({'simulator' if args.simulator else 'vLLM-shaped'})")
    print(f"sampling every {args.interval:g} s for {res['wall']:.1f} s: {res['scrapes']} scrapes "
          f"({res['failed']} failed), scrape p50 {res['scrape_p50_ms']:.2f} ms")
    print(f"CPU: {res['cpu_per_s'] * 1e3:.2f} ms per s of sampling ({res['cpu_per_s']:.4f} CPU s/s; idle loop "
          f"{res['idle_per_s'] * 1e3:.2f} ms/s subtracted), {res['cpu_ms_per_scrape']:.2f} ms per scrape; "
          f"parse alone: {select_ms:.2f} ms per page (the named series, as the loop does), {parse_ms:.2f} ms for "
          "the whole page (first and last scrape)")
    print(f"load average (1/5/15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
