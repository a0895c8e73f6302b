#!/usr/bin/env python3
"""Same server, both protocols (issue 51, item 5): 5.1's load against the project's vLLM CPU server over
SSE (its OpenAI server) and over gRPC (its gRPC server, ``VllmEngine``), one after the other, the same
seeded requests. Prints TTFT and ITL P50/P99 and the client's CPU per output token for each, with the
load average (figures on a shared machine are noisy; take the lock: ``flock /tmp/llmbench-heavy.lock``).

    python bench/grpc_vs_sse.py                     # 200 requests, Poisson 0.5 req/s, 64 output tokens
    python bench/grpc_vs_sse.py --requests 400 --rate 1 --tokens 128

What the difference is made of, per protocol (the client's side is what the CPU figure counts):

* SSE: the server detokenises every step and frames it as JSON in an SSE event; the client reads HTTP
  chunks, parses SSE and JSON, and counts tokens from the text (or the server's usage on each chunk).
* gRPC: the server sends the step's token ids in a protobuf message (no detokenisation); the client
  deserialises it (grpcio's asyncio API: a completion-queue round trip per message) and counts the ids;
  the text, when wanted, is decoded once after the stream.

Both servers run the same engine (AsyncLLM) on the same model; each is started, measured and stopped
before the other. Needs the ``grpc`` extra and the vLLM environment
(``python -m pytest_llmbench.sut.adapters.vllm.server install``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an installed copy

from pytest_llmbench.client import ClientConfig, LLMClient  # noqa: E402
from pytest_llmbench.common.records import RequestRecord, RequestSpec  # noqa: E402
from pytest_llmbench.loadgen.load import ArrivalProcess, run_open_loop  # noqa: E402
from pytest_llmbench.sut.adapters import VLLM  # noqa: E402
from pytest_llmbench.sut.adapters.vllm.server import MODEL_NAME, VllmServer, install  # noqa: E402
from pytest_llmbench.workloads import synthetic_uniform  # noqa: E402


def specs(n: int, tokens: int, seed: int) -> list[RequestSpec]:
    """Synthetic-Uniform prompts (§4.3.2.1) with a fixed output length (ignore_eos), seeded."""
    out = synthetic_uniform(n=n, seed=seed, output_tokens=tokens).specs
    return [RequestSpec(index=s.index, workload="grpc-vs-sse", input_tokens=s.input_tokens, max_tokens=tokens,
                        prompt_text=s.prompt_text, min_tokens=tokens, ignore_eos=True) for s in out]


def figures(records: list[RequestRecord], cpu_s: float) -> dict[str, float]:
    ok = [r for r in records if r.ok and r.first_token_ns is not None]
    ttft = np.array([(r.first_token_ns - r.sent_ns) / 1e6 for r in ok])  # type: ignore[operator]
    itl = []
    for r in ok:  # option B: a chunk's arrival for each of its tokens, gaps per token after the first
        stamps = [t for t, n in zip(r.chunk_ns, r.chunk_tokens or [1] * len(r.chunk_ns)) for _ in range(n)]
        itl.extend(np.diff(stamps) / 1e6)
    tokens = sum(r.output_tokens or 0 for r in ok)
    return {"ok": len(ok), "failed": len(records) - len(ok), "ttft_p50": float(np.percentile(ttft, 50)),
            "ttft_p99": float(np.percentile(ttft, 99)), "itl_p50": float(np.percentile(itl, 50)),
            "itl_p99": float(np.percentile(itl, 99)), "cpu_us_per_token": cpu_s / max(tokens, 1) * 1e6}


async def measure(cfg: ClientConfig, todo: list[RequestSpec], rate: float, seed: int) -> dict[str, float]:
    async with LLMClient(cfg, adapter=VLLM) as client:
        await run_open_loop(client, todo[:4], ArrivalProcess("poisson", rate, seed=seed + 1))  # warm
        cpu0 = time.process_time()
        res = await run_open_loop(client, todo, ArrivalProcess("poisson", rate, seed=seed))
        cpu = time.process_time() - cpu0
    return figures(list(res.records), cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate", type=float, default=0.5, help="Poisson rate, req/s")
    ap.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    inst = install(grpc=True)
    todo = specs(args.requests, args.tokens, args.seed)
    tok = f"hf:{inst.model}/tokenizer.json"
    rows = []
    for proto in ("sse", "grpc"):
        with VllmServer(inst, grpc=proto == "grpc") as server:
            cfg = (ClientConfig(base_url=server.endpoint, model=MODEL_NAME, api="completions", tokenizer=None,
                                output_tokenizer=tok) if proto == "grpc" else
                   ClientConfig(base_url=server.endpoint, model=MODEL_NAME, api="completions",
                                extra_body=dict(VLLM.request_fields), tokenizer=tok))
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            rows.append((proto, asyncio.run(measure(cfg, todo, args.rate, args.seed)), load))
    print(f"vLLM CPU ({MODEL_NAME}), {args.requests} requests, Poisson {args.rate} req/s, {args.tokens} output tokens")
    print(f"{'protocol':>8} {'ok':>5} {'failed':>6} {'TTFT P50':>9} {'TTFT P99':>9} {'ITL P50':>8} {'ITL P99':>8} "
          f"{'client CPU/token':>16}  load average (before)")
    for proto, f, load in rows:
        print(f"{proto:>8} {f['ok']:>5.0f} {f['failed']:>6.0f} {f['ttft_p50']:>7.1f}ms {f['ttft_p99']:>7.1f}ms "
              f"{f['itl_p50']:>6.1f}ms {f['itl_p99']:>6.1f}ms {f['cpu_us_per_token']:>13.1f} µs  {load}")


if __name__ == "__main__":
    main()
