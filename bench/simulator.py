"""How many streamed chunks per second the simulator emits at ``time_scale=0`` on one core.

Starts the simulator in its own process (pinned to CPU 0 when there are 2+ cores) and a lean
aiohttp client in another process (CPU 1) that keeps ``--concurrency`` streams open, each asking
for ``--tokens`` tokens with ``ignore_eos``, and counts ``data:`` content events for
``--seconds``. Goal: >= 20,000 chunks/s.

    python bench/simulator.py [--concurrency 64] [--tokens 1000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time


async def _client(base_url: str, concurrency: int, tokens: int, seconds: float, chat: bool) -> None:
    import aiohttp

    url = base_url + ("/chat/completions" if chat else "/completions")
    body = {"model": "llmbench-sim", "max_tokens": tokens, "ignore_eos": True, "stream": True}
    if chat:
        body["messages"] = [{"role": "user", "content": "benchmark the simulator"}]
    else:
        body["prompt"] = [1, 2, 3, 4, 5, 6, 7, 8]
    payload = json.dumps(body).encode()
    chunks = 0
    requests = 0
    t_end = time.perf_counter() + seconds
    marker = b'"finish_reason":null'

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal chunks, requests
        while time.perf_counter() < t_end:
            async with session.post(url, data=payload, headers={"content-type": "application/json"}) as r:
                buf = b""
                async for data in r.content.iter_any():
                    buf += data
                    *events, buf = buf.split(b"\n\n")
                    for ev in events:
                        if ev.startswith(b"data: {") and marker in ev and b'"role"' not in ev:
                            chunks += 1
                    if time.perf_counter() >= t_end:
                        break
            requests += 1

    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
        dt = time.perf_counter() - t0
    print(json.dumps({"chunks": chunks, "seconds": dt, "chunks_per_s": chunks / dt, "requests": requests}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions (default /v1/completions)")
    ap.add_argument("--client", metavar="BASE_URL", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:
        if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:
            os.sched_setaffinity(0, {1})
        asyncio.run(_client(a.client, a.concurrency, a.tokens, a.seconds, a.chat))
        return

    from pytest_llmbench.simulator import SimConfig, start_simulator

    cfg = SimConfig(time_scale=0.0, max_num_seqs=max(64, a.concurrency), tokens_per_chunk=a.tokens_per_chunk,
                    kv_capacity_tokens=1 << 20, max_waiting=100_000)
    with start_simulator(cfg) as sim:
        if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(sim.pid, {0})
        t0 = os.times()
        out = subprocess.run([sys.executable, __file__, "--client", sim.base_url, "--concurrency",
                              str(a.concurrency), "--tokens", str(a.tokens), "--seconds", str(a.seconds)]
                             + (["--chat"] if a.chat else []),
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            sys.exit(f"client failed:\n{out.stderr}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        m = sim.metrics()
        try:
            with open(f"/proc/{sim.pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            cpu_s = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            cpu_s = float("nan")
        del t0
    endpoint = "chat" if a.chat else "completions"
    print(f"simulator streaming ceiling ({endpoint}, concurrency {a.concurrency}, {a.tokens} tokens/request, "
          f"{a.tokens_per_chunk} token(s)/chunk, time_scale 0):")
    print(f"  {res['chunks_per_s']:,.0f} chunks/s over {res['seconds']:.1f} s "
          f"({res['chunks']:,} chunks, {res['requests']} requests completed)")
    print(f"  server CPU time {cpu_s:.1f} s in total (incl. start-up); goal >= 20,000 chunks/s")
    print(f"  server generation_tokens_total {m.get('llmbench:generation_tokens_total', 0):,.0f}")


if __name__ == "__main__":
    main()
