"""The simulator thinks (issue 49) and the client splits its answers into phases, end to end: on both APIs
TTFT - ttfa is the simulator's thinking time per request (within the client's timing error), the reasoning
tokens are the simulator's count exactly, a tool-call stream keeps its arguments, and hidden reasoning is
caught (the run flagged, its thinking-time SLO not PASS)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.measure.slo import SLOVerdict, evaluate
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.simulator import SimConfig, start_simulator
from pytest_llmbench.simulator.process import SimulatorProcess
from pytest_llmbench.sut.adapters import SIMULATOR

# 4 ms per decode step (8 ms model x 0.5); about 12 thinking tokens then about 16 answer tokens
CFG = SimConfig(time_scale=0.5, step_ms=8.0, decode_per_seq_ms=0.0, reasoning="streamed", reasoning_mean_tokens=12.0,
                eos_mean_tokens=16.0, prefix_cache=False, seed=5)
#: the client's timing error on a shared 2-core host: delivery delay of one chunk relative to another
TOLERANCE_NS = 15_000_000


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with start_simulator(CFG) as s:
        yield s


def spec(i: int) -> RequestSpec:
    return RequestSpec(index=i, workload="w", input_tokens=8, max_tokens=64, prompt_text=f"question {i} please",
                       temperature=0.0)


def run(sim: SimulatorProcess, api: str, n: int = 4, **config: object) -> list[RequestRecord]:
    async def go() -> list[RequestRecord]:
        cfg = ClientConfig(base_url=sim.base_url, model="llmbench-sim", api=api, request_server_timing=True,
                           **config)  # type: ignore[arg-type]
        async with LLMClient(cfg, tokenizer=get_tokenizer(), adapter=SIMULATOR) as c:
            return [await c.send(spec(i)) for i in range(n)]
    return asyncio.run(go())


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streamed_thinking_on_both_apis(sim: SimulatorProcess, api: str) -> None:
    sim.set_config(reasoning="streamed", tool_call_tokens=0)
    recs = run(sim, api)
    for r in recs:
        assert r.ok, r.error_message
        think = r.server_timing["reasoning_tokens"]
        assert think >= 1 and r.reasoning_source == "field"
        # the simulator's count exactly: its usage, and the client's own count of what streamed
        assert r.reasoning_tokens_server == think and r.reasoning_tokens_client == think
        assert r.reasoning_standing == "streamed"
        if r.first_token_ns is None:  # max_tokens ended it while thinking
            continue
        # every token's emit time (same clock as the client's): thinking is tokens [0, think)
        emitted = r.server_token_ns
        sim_thinking = emitted[think] - emitted[0]
        assert r.first_any_ns >= emitted[0] and r.first_token_ns >= emitted[think]
        assert abs((r.first_token_ns - r.first_any_ns) - sim_thinking) <= TOLERANCE_NS
        assert r.reasoning_last_ns <= r.first_token_ns  # equal when both arrive in one read
    m = summarize(recs)
    assert list(m.per_request["reasoning_tokens"]) == [r.server_timing["reasoning_tokens"] for r in
                                                       sorted(recs, key=lambda r: r.sent_ns)]
    assert m.phase_unobserved is None and m.scalar("hidden_reasoning_requests").value == 0


def test_tags_split_as_streamed(sim: SimulatorProcess) -> None:
    sim.set_config(reasoning="tags", tool_call_tokens=0)
    recs = run(sim, "chat", think_tags=True)
    for r in recs:
        assert r.ok and r.reasoning_source == "tags" and "<think>" not in r.output_text
        assert r.reasoning_tokens_client == r.server_timing["reasoning_tokens"]


def test_a_tool_call_stream_keeps_its_arguments(sim: SimulatorProcess) -> None:
    sim.set_config(reasoning="streamed", tool_call_tokens=5)
    try:
        recs = run(sim, "chat", n=2)
    finally:
        sim.set_config(tool_call_tokens=0)
    for r in recs:
        assert r.ok and r.tool_calls and r.tool_calls[0]["name"] == "llmbench_tool"
        args = r.tool_calls[0]["arguments"]
        assert args and args == "".join(r.chunk_tool) and r.tool_tokens_client == 5
        # thinking, then the call; events that arrive in one read share its time (a busy host batches them)
        assert r.first_any_ns <= r.tool_first_ns <= r.tool_last_ns
        assert r.reasoning_last_ns <= r.tool_first_ns


def test_hidden_thinking_is_flagged(sim: SimulatorProcess) -> None:
    sim.set_config(reasoning="hidden", tool_call_tokens=0)
    try:
        recs = run(sim, "chat", n=6)
    finally:
        sim.set_config(reasoning="streamed")
    assert all(r.ok and r.reasoning_standing == "hidden" and r.reasoning_first_ns is None for r in recs)
    hidden = sum(r.reasoning_tokens_server for r in recs)
    m = summarize(recs)
    assert f"{len(recs)} requests had {hidden} reasoning tokens" in m.phase_unobserved
    assert m.reasoning_findings() and "hidden reasoning" in m.reasoning_findings()[0]
    verdict = evaluate("thinking_time.p50 <= 5s", m)
    assert verdict.verdict is SLOVerdict.INCONCLUSIVE and "hidden reasoning" in verdict.message
    # the thinking time passed all the same: TTFT includes it (every token was decoded, none streamed)
    for r in recs:
        assert r.first_token_ns >= r.server_timing["thinking_end_ns"]


def test_metrics_count_the_thinking(sim: SimulatorProcess) -> None:
    """/metrics: the thinking tokens of answered requests, a part of the generation tokens."""
    before = sim.metrics()
    sim.set_config(reasoning="streamed", tool_call_tokens=0)
    recs = run(sim, "completions", n=2)
    after = sim.metrics()
    think = sum(r.reasoning_tokens_server for r in recs)
    out = sum(r.output_tokens_server for r in recs)
    assert after["llmbench:reasoning_tokens_total"] - before.get("llmbench:reasoning_tokens_total", 0) == think
    assert after["llmbench:generation_tokens_total"] - before["llmbench:generation_tokens_total"] == out


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_whole_answer_carries_its_reasoning(sim: SimulatorProcess, api: str) -> None:
    """stream=false: chat's message.reasoning_content, completions' choices[0].reasoning_content, the same count."""
    sim.set_config(reasoning="streamed", tool_call_tokens=0)
    for r in run(sim, api, n=2, stream=False):
        assert r.ok and r.reasoning_source == "field"
        assert r.reasoning_tokens_server and r.reasoning_tokens_client == r.reasoning_tokens_server


def test_thinking_goes_ahead_of_a_filtered_answer(sim: SimulatorProcess) -> None:
    """With the output filter on, the answer's chunks are sent one at a time; the thinking before them
    still arrives first (the filter checks the answer only). At 0.01 of model time the steps (0.08 ms) outrun
    the handler, so thinking and answer tokens are ready in the same wake-up."""
    sim.set_config(reasoning="streamed", tool_call_tokens=0, guardrails="output", guardrail_refusal_rate=0.0,
                   time_scale=0.01)
    try:
        recs = run(sim, "chat", n=4)
    finally:
        sim.set_config(guardrails="none", time_scale=CFG.time_scale)
    for r in recs:
        assert r.ok and r.reasoning_last_ns is not None
        if r.first_token_ns is not None:
            assert r.reasoning_last_ns <= r.first_token_ns
            last_reasoning = max(i for i, t in enumerate(r.chunk_reasoning) if t)
            first_content = min(i for i, t in enumerate(r.chunk_text) if t.strip())
            assert last_reasoning < first_content
