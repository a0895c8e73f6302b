"""What a wake-up costs on this host: the same work, back to back and one piece per wake-up (issue 38).

    python bench/wakeups.py                    # 100, 250, 500 and 1000 wake-ups per second
    python bench/wakeups.py --hz 1000 --seconds 5

The work is the client's own per-response pass: ``ResponseReader.read_stream`` over one 50-event
answer shaped as the reference mock sends it (one read, chat chunks, a usage chunk, ``[DONE]``).
It runs (1) back to back, without sleeping, and (2) once per wake-up of an event loop that sleeps
``1/hz`` between pieces (``asyncio.sleep`` on uvloop, as the open loop's client sleeps between
requests), and (3) with no work, the wake-up alone. Printed per rate: the process CPU of a wake-up
alone and of a wake-up with one piece, against the piece back to back; the voluntary context
switches per wake-up.

Why: the open loop's CPU per chunk falls as its rate rises, with the same code and the same reads
per request (``bench/loadgen.py --rates``); a process that sleeps between requests pays on each
wake-up (the kernel's wake-up and switch, and caches and predictors the other processes of the
host used meanwhile). This measures that cost apart from the load generator, on whatever host runs
it. Figures are printed, never asserted; take them on a quiet host (the load average is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time

from pytest_llmbench.client import ClientConfig
from pytest_llmbench.client.stream import ResponseReader
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.sut.adapters import GENERIC


def mock_answer(tokens: int = 50) -> bytes:
    """One streamed chat answer as the reference mock sends it (role chunk, content chunks, finish
    chunk, usage chunk, ``[DONE]``)."""
    head = {"id": "chatcmpl-0123456789abcdef01234567", "object": "chat.completion.chunk", "created": 1795817800,
            "model": "mock-model", "system_fingerprint": "fp_mock"}

    def chunk(delta: dict, finish: str | None = None, usage: dict | None = None, choices: bool = True) -> bytes:
        obj = dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
                   if choices else [], usage=usage)
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    parts = [chunk({"role": "assistant", "content": " tok"})]
    parts += [chunk({"content": " tok"}) for _ in range(tokens - 1)]
    parts.append(chunk({}, "stop"))
    parts.append(chunk({}, usage={"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": tokens + 4},
                       choices=False))
    return b"".join(parts) + b"data: [DONE]\n\n"


class _OneRead:
    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read_chunk(self) -> bytes:
        data, self.data = self.data, b""
        return data


async def measure(hz: float | None, seconds: float, answer: bytes | None) -> dict[str, float]:
    """Pieces of work for ``seconds``: back to back (``hz`` None) or one per wake-up at ``hz``;
    ``answer`` None: no work, the wake-up alone."""
    reader = ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC)
    spec = RequestSpec(index=0, workload="bench", input_tokens=4, max_tokens=50, prompt_text="x")
    period = 1.0 / hz if hz else 0.0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0, t0 = time.process_time(), time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds:
        if period:
            await asyncio.sleep(period)
        if answer is not None:
            await reader.read_stream(_OneRead(answer), RequestRecord.from_spec(spec))
        n += 1
    cpu = time.process_time() - cpu0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"pieces": n, "cpu_us_per_piece": cpu / n * 1e6,
            "vol_switches_per_piece": (ru1.ru_nvcsw - ru0.ru_nvcsw) / n,
            "kernel_share": (ru1.ru_stime - ru0.ru_stime) / max(cpu, 1e-9)}


async def main_async(args: argparse.Namespace) -> None:
    answer = mock_answer()
    await measure(None, 0.5, answer)  # imports, caches and the interpreter's specialisations warm
    hot = await measure(None, args.seconds, answer)
    print(f"back to back: {hot['cpu_us_per_piece']:.1f} us CPU per 50-event answer "
          f"({hot['pieces']} pieces, kernel share {hot['kernel_share']:.0%})")
    for hz in args.hz:
        idle = await measure(hz, args.seconds / 2, None)
        r = await measure(hz, args.seconds, answer)
        extra = r["cpu_us_per_piece"] - hot["cpu_us_per_piece"]
        print(f"at {hz:6.0f} wake-ups/s: the wake-up alone {idle['cpu_us_per_piece']:6.1f} us CPU; with one answer "
              f"{r['cpu_us_per_piece']:6.1f} us ({r['cpu_us_per_piece'] / hot['cpu_us_per_piece']:.2f}x the answer "
              f"back to back, +{extra:.0f} us, of which the answer itself ran "
              f"+{r['cpu_us_per_piece'] - idle['cpu_us_per_piece'] - hot['cpu_us_per_piece']:.0f} us slower); "
              f"{r['vol_switches_per_piece']:.2f} voluntary switches per wake-up, kernel share {r['kernel_share']:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hz", type=lambda s: [float(x) for x in s.split(",")], default=[100.0, 250.0, 500.0, 1000.0],
                    help="wake-up rates, comma-separated (default 100,250,500,1000)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = ap.parse_args()
    print(f"wake-up cost: {os.cpu_count()} CPUs, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"event loop {args.loop}")
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(main_async(args))
    else:
        asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
