"""Warm-up (§4.5) against an in-process server with a request-queue gauge and scripted probe latency."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from factories import serve_app, sse_response

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.common.storage import RunWriter, load_run
from pytest_llmbench.loadgen.warmup import WarmupPolicy, run_warmup

TOKENS = 50


@dataclass
class Server:
    url: str = ""
    metrics: bool = True
    tokens: int = TOKENS
    busy_after_s: float = 0.3  # the "engine" stays busy this long after the last response
    probe_ms: list[float] = field(default_factory=lambda: [20.0])  # latency per probe, cycling
    prompts: list[str] = field(default_factory=list)
    idle_at: float = 0.0  # perf_counter_ns when the gauge reaches 0
    metrics_calls: int = 0
    probes: int = 0


def _app(state: Server) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        state.prompts.append(prompt)
        if prompt == "probe":
            await asyncio.sleep(state.probe_ms[state.probes % len(state.probe_ms)] / 1000)
            state.probes += 1
        resp = await sse_response(request)
        ch = b'data: {"choices":[{"index":0,"delta":{"content":" tok"}}]}\n\n'
        await resp.write(ch * min(state.tokens, body["max_tokens"]) + b"data: [DONE]\n\n")
        if prompt != "probe":
            state.idle_at = time.perf_counter_ns() + int(state.busy_after_s * 1e9)
        return resp

    async def metrics(_r: web.Request) -> web.Response:
        if not state.metrics:
            raise web.HTTPNotFound()
        state.metrics_calls += 1
        busy = 1 if time.perf_counter_ns() < state.idle_at else 0
        return web.Response(text=f"# TYPE g gauge\nllmbench:num_requests_waiting {busy}\n"
                                 f"llmbench:num_requests_running{{model=\"m\"}} {busy}\n")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    return app


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    async with serve_app(_app(state)) as url:
        state.url = url
        yield state


def specs(n: int = 5, prompt: str = "work") -> list[RequestSpec]:
    return [RequestSpec(index=i, workload="w", input_tokens=3, max_tokens=100, prompt_text=prompt) for i in range(n)]


PROBE = RequestSpec(index=-1, workload="probe", input_tokens=1, max_tokens=4, prompt_text="probe")


async def test_full_warmup_meets_the_draft_minimum_and_waits_for_the_queue(server: Server, tmp_path: Path) -> None:
    async with LLMClient(ClientConfig(base_url=server.url, model="m")) as c:
        with RunWriter(tmp_path) as w:
            res = await run_warmup(c, specs(), probe_spec=PROBE, sink=w)
    # 100 requests AND 10,000 tokens: at 50 tokens per request that takes >= 200 requests
    assert res.ok >= 200 and res.output_tokens >= 10_000 and res.output_tokens == res.ok * TOKENS
    assert res.minimum_met and res.minimum_reason is None and not res.cold_start
    assert res.drained and res.drain_method == "server-metrics"
    assert res.queue_at_end == {"waiting": 0.0, "running": 0.0} and server.metrics_calls > 1
    # probes after warm-up only started once the server said its queue was empty
    records = load_run(tmp_path).records
    last_warmup = max(r.end_ns for r in records if r.phase == "warmup")
    after = [r.sent_ns for r in records if r.phase == "probe" and r.sent_ns > last_warmup]
    assert len(after) == len(res.probes_after) and min(after) >= server.idle_at
    assert {r.phase for r in records} == {"probe", "warmup"}
    assert len([r for r in records if r.phase == "warmup"]) == res.requests
    assert len(res.probes_before) == 3 and len(res.probes_after) >= 3
    # §4.5.2 stability, as logic (whether 20 ms probes agree within 10 % is the machine's business):
    # the verdict is the last three probes' variation against the tolerance, and probing stops at
    # the first stable three or at probe_max
    policy = WarmupPolicy()
    e2e = [p.e2e_s for p in res.probes_after]
    k = policy.probe_count
    variation = [max(abs(b - a) / a for a, b in itertools.pairwise(w)) for w in (e2e[i:i + k] for i in range(len(e2e) - k + 1))]
    assert res.max_variation == variation[-1]
    assert res.stable is (variation[-1] < policy.probe_tolerance)
    assert all(v >= policy.probe_tolerance for v in variation[:-1])  # no earlier stable window
    assert res.stable or len(e2e) == policy.probe_max
    assert all(p.ok and p.e2e_s >= 0.02 for p in res.probes_before + res.probes_after)
    assert res.to_json()["policy"]["min_requests"] == 100


async def test_unstable_probes_are_reported(server: Server) -> None:
    server.probe_ms = [20.0, 60.0]  # alternating: consecutive probes differ by 200 % / 67 %
    async with LLMClient(ClientConfig(base_url=server.url, model="m")) as c:
        res = await run_warmup(c, specs(), WarmupPolicy(min_requests=5, min_output_tokens=10, probe_max=5),
                               probe_spec=PROBE)
    assert res.stable is False and res.max_variation is not None and res.max_variation > 0.5
    assert len(res.probes_after) == 5


async def test_reduced_warmup_is_flagged_not_met(server: Server) -> None:
    policy = WarmupPolicy(min_requests=10, min_output_tokens=100, concurrency=2, probe_count=0, probe_max=0)
    async with LLMClient(ClientConfig(base_url=server.url, model="m")) as c:
        res = await run_warmup(c, specs(), policy)
    assert res.ok >= 10 and res.requests < 100
    assert not res.minimum_met and "below the §4.5.1 minimum" in (res.minimum_reason or "")
    assert res.stable is None and res.probes_before == [] == res.probes_after


async def test_cold_start_skips_warmup(server: Server) -> None:
    async with LLMClient(ClientConfig(base_url=server.url, model="m")) as c:
        res = await run_warmup(c, specs(), WarmupPolicy(cold_start=True))
    assert res.cold_start and res.requests == 0 and server.prompts == []
    assert "§4.5.3" in (res.minimum_reason or "")


async def test_prefix_population_and_no_metrics_endpoint(server: Server) -> None:
    server.metrics = False
    prefixes = [RequestSpec(index=i, workload="w", input_tokens=3, max_tokens=1, prompt_text=f"prefix{i}",
                            prefix_id=f"p{i}") for i in range(3)]
    policy = WarmupPolicy(min_requests=5, min_output_tokens=10, probe_count=0, probe_max=0)
    async with LLMClient(ClientConfig(base_url=server.url, model="m")) as c:
        res = await run_warmup(c, specs(), policy, prefix_specs=prefixes)
    assert res.prefix_requests == 3
    assert sorted(p for p in server.prompts if p.startswith("prefix")) == ["prefix0", "prefix1", "prefix2"]
    assert server.prompts.index("prefix2") < server.prompts.index("work")  # cache filled first
    assert res.drain_method == "client" and res.drained


async def test_warmup_that_cannot_reach_its_token_target_stops_at_the_cap(server: Server) -> None:
    server.tokens = 0
    policy = WarmupPolicy(min_requests=5, min_output_tokens=100, max_requests=40, probe_count=0, probe_max=0)
    async with LLMClient(ClientConfig(base_url=server.url, model="m")) as c:
        res = await run_warmup(c, specs(), policy)
    assert res.requests == 40 and res.output_tokens == 0 and not res.minimum_met


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="probe_count"):
        WarmupPolicy(probe_count=1)
    with pytest.raises(ValueError, match="concurrency"):
        WarmupPolicy(concurrency=0)
