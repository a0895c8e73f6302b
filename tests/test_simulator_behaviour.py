"""What the simulator must show through HTTP (subprocess, scaled time), compared with what its
configuration predicts: prefill scaling (§5.1/§5.9), KV-limited throughput plateau with
preemption (§5.2/§5.5/§5.8), prefix-cache savings (§5.7), guardrail delays and refusals (§5.10),
and the chunked-prefill bound on decode stalls (§5.4).

No two-sided wall-clock bound and no retry: on a shared machine CPU contention only ever *adds*
latency (and only lowers throughput), so a time is checked against the configuration's prediction
from below only (a one-sided bound noise cannot break), and anything else is a ratio between
measurements taken together in one run. The exact predicted times are checked on the engine's
virtual clock in tests/test_simulator_engine.py (``run_virtual``). The engine may make up an
iteration that woke < 2 ms late by shortening the next one (docs/simulator.md "Driver"), so lower
bounds allow that catch-up.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import pytest

from pytest_llmbench.simulator import SimConfig, start_simulator
from pytest_llmbench.simulator.generation import input_refused, plan_output, request_seed
from pytest_llmbench.simulator.predict import simulate_closed_loop
from pytest_llmbench.simulator.process import SimulatorProcess

MODEL = "llmbench-sim"

# Model milliseconds x time_scale 0.25: step 2 ms, 0.1 ms/sequence, 0.05 ms/token, b = 1e-5 ms/token^2.
CFG = SimConfig(time_scale=0.25, step_ms=8.0, decode_per_seq_ms=0.4, prefill_per_token_ms=0.2,
                prefill_per_token2_ms=4e-5, prefix_cache=False, max_num_batched_tokens=256,
                guardrail_input_base_ms=40.0, guardrail_input_per_token_ms=0.08,
                guardrail_output_per_chunk_ms=24.0, guardrail_refusal_rate=0.0, seed=3)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with start_simulator(CFG) as s:
        yield s


@dataclass
class Stream:
    t_send: int
    chunk_ns: list[int] = field(default_factory=list)  # client arrival of each content chunk
    server_ns: list[int] = field(default_factory=list)  # server emit time of each token
    finish_reason: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def ttft_s(self) -> float:
        return (self.chunk_ns[0] - self.t_send) / 1e9

    def gaps_s(self, server: bool = False) -> list[float]:
        xs = self.server_ns if server else self.chunk_ns
        return [(b - a) / 1e9 for a, b in zip(xs, xs[1:])]


async def stream(client: httpx.AsyncClient, sim: SimulatorProcess, body: dict[str, Any],
                 on_chunk: Any = None) -> Stream:
    body = {"model": MODEL, "stream": True, "stream_options": {"include_usage": True}, "llmbench_timing": True,
            **body}
    path = "/chat/completions" if "messages" in body else "/completions"
    s = Stream(time.perf_counter_ns())
    async with client.stream("POST", sim.base_url + path, json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            now = time.perf_counter_ns()
            ev = json.loads(line[6:])
            if ev.get("usage"):
                s.usage = ev["usage"]
            if not ev["choices"]:
                continue
            ch = ev["choices"][0]
            text = ch.get("text") if "text" in ch else ch["delta"].get("content")
            if text:
                s.chunk_ns.append(now)
                s.server_ns.extend(ev["llmbench_timing"]["token_ns"])
                if on_chunk is not None:
                    on_chunk(len(s.chunk_ns))
            if ch["finish_reason"]:
                s.finish_reason = ch["finish_reason"]
                s.timing = ev["llmbench_timing"]
    return s


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def ids(n: int, base: int) -> list[int]:
    return [(base + i) % 90_000 + 1 for i in range(n)]


# ----------------------------------------------------------------------------- §5.1 / §5.9
def test_ttft_grows_with_prompt_length_as_prefill_model_predicts(sim: SimulatorProcess) -> None:
    lengths = [256, 1024, 2048, 4096]

    async def go() -> dict[int, list[Stream]]:
        out: dict[int, list[Stream]] = {}
        async with httpx.AsyncClient(timeout=60) as c:
            for rep in range(3):
                for L in lengths:
                    out.setdefault(L, []).append(await stream(c, sim, {
                        "prompt": ids(L, 1000 * rep + L), "max_tokens": 2, "ignore_eos": True}))
        return out

    res = run(go())
    # the minimum over repetitions: CPU contention on a shared machine only ever adds latency
    client = {L: min(s.ttft_s for s in ss) for L, ss in res.items()}
    server = {L: min((s.timing["queue_ns"] + s.timing["prefill_ns"]) / 1e9 for s in ss) for L, ss in res.items()}
    pred = {L: CFG.predicted_ttft_s(L) for L in lengths}
    for L in lengths:  # one-sided: never faster than the model (less the 2 ms catch-up)
        assert server[L] >= pred[L] * 0.97 - 0.0025, (L, server[L], pred[L])
        assert client[L] >= pred[L] * 0.95 - 0.001, (L, client[L], pred[L])
        assert all(s.ttft_s >= (s.timing["queue_ns"] + s.timing["prefill_ns"]) / 1e9 for s in res[L])  # causal
    # super-linear shape, a ratio within this run (on the server's stamps, which carry no network
    # noise): the growth from 2k to 4k vs 1k to 2k matches a*L + b*L^2
    shape = (server[4096] - server[2048]) / (server[2048] - server[1024])
    pred_shape = (pred[4096] - pred[2048]) / (pred[2048] - pred[1024])
    assert shape == pytest.approx(pred_shape, rel=0.2)
    assert pred_shape > 2.3  # more than linear (2.0)


# ----------------------------------------------------------------------------- §5.7
def test_prefix_cache_lowers_ttft_by_the_predicted_amount(sim: SimulatorProcess) -> None:
    prefix = ids(3000, 50_000)
    cached = 3000 // CFG.block_size * CFG.block_size

    async def batch(tag: int) -> list[Stream]:
        async with httpx.AsyncClient(timeout=60) as c:
            return [await stream(c, sim, {"prompt": prefix + ids(64, 7000 * tag + 100 * i), "max_tokens": 2,
                                          "ignore_eos": True}) for i in range(3)]

    sim.set_config(prefix_cache=True, flush_prefix_cache=True)
    try:
        m0 = sim.metrics()
        run(batch(0))  # the first request populates the cache
        on = run(batch(1))
        m1 = sim.metrics()
        sim.set_config(prefix_cache=False)
        off = run(batch(2))
    finally:
        sim.set_config(prefix_cache=False, flush_prefix_cache=True)
    assert [s.usage["prompt_tokens_details"]["cached_tokens"] for s in on] == [cached] * 3
    assert all("prompt_tokens_details" not in s.usage for s in off)
    assert [s.timing["cached_tokens"] for s in on] == [cached] * 3
    assert m1["llmbench:prefix_cache_hit_tokens_total"] - m0["llmbench:prefix_cache_hit_tokens_total"] >= 3 * cached
    # uncached prefill is never faster than the model; cached prefill is a small fraction of it,
    # a ratio within this run on the server's own stamps (the exact saving: tests/test_simulator_engine.py)
    prefill = {k: statistics.median(s.timing["prefill_ns"] / 1e9 for s in ss) for k, ss in (("on", on), ("off", off))}
    assert min(s.timing["queue_ns"] + s.timing["prefill_ns"] for s in off) / 1e9 >= 0.97 * CFG.predicted_ttft_s(3064) - 0.0025
    assert CFG.predicted_ttft_s(3064, cached) < 0.05 * CFG.predicted_ttft_s(3064)
    assert prefill["on"] < 0.2 * prefill["off"], prefill


# ----------------------------------------------------------------------------- §5.10
def test_guardrail_modes_add_their_configured_delays(sim: SimulatorProcess) -> None:
    prompt_len = 1000
    in_pred = CFG.replace(guardrails="input").predicted_input_guardrail_s(prompt_len)
    out_pred = CFG.replace(guardrails="output").predicted_output_guardrail_s(1)
    assert in_pred == pytest.approx(0.030)
    assert out_pred > CFG.predicted_itl_s(1)  # the filter, not decode, paces the stream

    async def one(i: int) -> Stream:
        async with httpx.AsyncClient(timeout=60) as c:
            return await stream(c, sim, {"prompt": ids(prompt_len, 300 * i), "max_tokens": 30, "ignore_eos": True})

    def measure() -> dict[str, list[Stream]]:
        res: dict[str, list[Stream]] = {}
        try:
            for mode in ("none", "input", "output", "full"):
                sim.set_config(guardrails=mode)
                res[mode] = [run(one(i)) for i in range(3)]
        finally:
            sim.set_config(guardrails="none")
        return res

    res = measure()
    slack = 0.0005  # timer wake-up granularity
    for mode in ("input", "full"):  # the filter's sleep precedes everything: one-sided bounds
        # the input filter is one timer sleep, which an event loop whose cached time is stale (a long
        # iteration on a busy machine) can end early: the longest of the three is checked, with the
        # driver's 2 ms catch-up allowance. The TTFT has the prefill (~60 ms) on top of the filter.
        assert max(s.timing["input_filter_ns"] for s in res[mode]) / 1e9 >= in_pred - 0.002, mode
        assert all(s.ttft_s >= in_pred - slack for s in res[mode]), mode
    # no input filter: nothing awaited between the server's two stamps (µs, not ms)
    assert all(s.timing["input_filter_ns"] < 1e6 for s in res["none"] + res["output"])
    for mode in ("output", "full"):  # each content chunk waits out_pred: the last one comes no sooner
        for s in res[mode]:
            assert (s.chunk_ns[-1] - s.t_send) / 1e9 >= (len(s.chunk_ns) - 1) * out_pred - slack, mode
    # without a filter, decode sets the pace: gaps shorter than the model only by the catch-up,
    # so the median gap on the server's stamps stays above half the model's ITL
    itl_none = statistics.median(statistics.median(s.gaps_s(server=True)) for s in res["none"])
    assert itl_none >= 0.5 * CFG.predicted_itl_s(1), itl_none
    # the filters' delays are ratios within this run: the output filter, not decode, paces output
    itl = {m: statistics.median(statistics.median(s.gaps_s()) for s in res[m]) for m in ("none", "output")}
    assert itl["output"] > 1.5 * itl["none"], itl


def test_guardrail_refusals_are_the_seeded_ones(sim: SimulatorProcess) -> None:
    full = CFG.replace(guardrails="full", guardrail_refusal_rate=0.4)
    prompts = [ids(20, 11 * i + 5) for i in range(20)]
    expected = set()
    for i, p in enumerate(prompts):  # temperature 0: each request's seed comes from its prompt
        rs = request_seed(full, p, None, 0.0, 0)
        if input_refused(full, rs) or plan_output(full, rs, 8).finish_reason == "content_filter":
            expected.add(i)
    assert 0 < len(expected) < len(prompts)

    async def go() -> list[Stream]:
        async with httpx.AsyncClient(timeout=60) as c:
            return await asyncio.gather(*(stream(c, sim, {"prompt": p, "max_tokens": 8, "temperature": 0})
                                          for p in prompts))

    sim.set_config(guardrails="full", guardrail_refusal_rate=0.4)
    try:
        m0 = sim.metrics()
        res = run(go())
        m1 = sim.metrics()
    finally:
        sim.set_config(guardrails="none", guardrail_refusal_rate=0.0)
    refused = {i for i, s in enumerate(res) if s.finish_reason == "content_filter"}
    assert refused == expected
    assert m1["llmbench:requests_refused_total"] - m0["llmbench:requests_refused_total"] == len(expected)


# ----------------------------------------------------------------------------- §5.4
def test_chunked_prefill_bounds_the_decode_stall_of_running_requests(sim: SimulatorProcess) -> None:
    long_len = 4000

    async def scenario() -> Stream:
        async with httpx.AsyncClient(timeout=60) as c:
            started = asyncio.Event()
            runner = asyncio.ensure_future(stream(c, sim, {"prompt": ids(16, 1), "max_tokens": 150, "ignore_eos": True},
                                                  on_chunk=lambda n: n == 20 and started.set()))
            await started.wait()
            r = await c.post(sim.base_url + "/completions", json={
                "model": MODEL, "prompt": ids(long_len, 20_000), "max_tokens": 2, "ignore_eos": True})
            assert r.status_code == 200
            return await runner

    worst: dict[bool, float] = {}  # the longest gap between the running request's server stamps
    try:
        for chunked in (False, True):
            sim.set_config(chunked_prefill=chunked)
            worst[chunked] = max(run(scenario()).gaps_s(server=True))
    finally:
        sim.set_config(chunked_prefill=False)
    pred = {chunked: CFG.replace(chunked_prefill=chunked).predicted_max_itl_s(long_len, 1) for chunked in worst}
    # without chunking the long prefill stalls decode at least as long as the model says (one-sided:
    # an overrunning sleep only lengthens it); with chunking the stall is split (exact figures on
    # the virtual clock: tests/test_simulator_engine.py), a ratio within this run
    assert worst[False] >= 0.97 * pred[False] - 0.0025, (worst, pred)
    assert pred[True] < pred[False] / 10
    assert worst[True] < worst[False] / 2, (worst, pred)


# ----------------------------------------------------------------------------- §5.2 / §5.5 / §5.8
def test_beyond_kv_capacity_preemptions_appear_and_throughput_plateaus() -> None:
    cfg = SimConfig(time_scale=0.25, step_ms=16.0, decode_per_seq_ms=2.0, prefill_per_token_ms=0.2,
                    prefill_per_token2_ms=0.0, kv_capacity_tokens=1024, block_size=16, prefix_cache=False)
    n_in, n_out = 64, 64
    cap = cfg.kv_capacity_requests(n_in, n_out)
    assert cap == 8
    levels = [cap // 2, cap, 3 * cap]

    async def closed_loop(sim: SimulatorProcess, conc: int, warm: float = 0.4, window: float = 1.6
                          ) -> tuple[float, float]:
        """Closed loop with a lean aiohttp client; output tokens/s from the server's counter over
        the window, and preemptions counted in it."""
        t_end = time.monotonic() + warm + window + 0.3
        url = sim.base_url + "/completions"
        k = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as c:
            async def client(j: int) -> None:
                nonlocal k
                while time.monotonic() < t_end:
                    k += 1
                    body = {"model": MODEL, "prompt": ids(n_in, 977 * k + j), "max_tokens": n_out,
                            "ignore_eos": True, "stream": True}
                    async with c.post(url, json=body) as r:
                        assert r.status == 200
                        async for _ in r.content.iter_any():
                            pass

            async def window_probe() -> tuple[float, float]:
                await asyncio.sleep(warm)
                t0, m0 = time.monotonic(), sim.metrics()
                await asyncio.sleep(window)
                t1, m1 = time.monotonic(), sim.metrics()
                tok = m1["llmbench:generation_tokens_total"] - m0["llmbench:generation_tokens_total"]
                pre = m1["llmbench:num_preemptions_total"] - m0["llmbench:num_preemptions_total"]
                assert m1["llmbench:preempted_tokens_total"] >= m0["llmbench:preempted_tokens_total"]
                return tok / (t1 - t0), pre

            *_, res = await asyncio.gather(*(client(j) for j in range(conc)), window_probe())
        return res

    pred = {conc: simulate_closed_loop(cfg, conc, n_in, n_out) for conc in levels}
    runs: dict[int, list[tuple[float, float]]] = {conc: [] for conc in levels}
    with start_simulator(cfg) as sim:
        for _ in range(2):  # levels interleaved, so that the machine's noise falls on all of them
            for conc in levels:
                runs[conc].append(run(closed_loop(sim, conc)))
    # the engine is clock-driven: contention only lowers throughput, so the best repetition is the
    # estimate and the model's prediction an upper bound noise cannot break
    measured = {conc: max(tok for tok, _ in rs) for conc, rs in runs.items()}
    for conc in levels:
        assert measured[conc] <= 1.15 * pred[conc].output_tokens_per_s, (conc, measured, pred)
    assert all(pre == 0 for conc in (cap // 2, cap) for _, pre in runs[conc])
    assert all(pre > 0 for _, pre in runs[3 * cap]) and pred[3 * cap].num_preemptions > 0
    # plateau: past capacity the simulator stays under the model's plateau (one-sided, as above),
    # well below what an unbounded batch of 3*cap would decode. Ratios between measured levels
    # are not asserted: a busy machine depresses one level and not another (seen: 869 vs 723
    # tokens/s); the model's shape is checked exactly on the virtual clock (test_simulator_engine)
    assert measured[3 * cap] <= 1.15 * pred[3 * cap].output_tokens_per_s < 0.8 * cfg.predicted_output_throughput(3 * cap)
    assert pred[3 * cap].output_tokens_per_s < 1.2 * pred[cap].output_tokens_per_s
    assert pred[cap].output_tokens_per_s > 1.2 * pred[cap // 2].output_tokens_per_s
