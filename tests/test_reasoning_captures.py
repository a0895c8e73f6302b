"""Reasoning streams in each server's documented shape (tests/data/sse-captures, made by
make_reasoning_captures.py from the simulator's output: not live captures) parse into the right phases:
vLLM with and without a reasoning parser, llama.cpp with --reasoning-format deepseek and none, and an
OpenAI reasoning model whose thinking is hidden (issue 49)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.client import ClientConfig, LLMClient, MockResponse, MockTransport
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.sut.adapters import GENERIC, LLAMACPP, OPENAI, VLLM

DIR = Path(__file__).parent / "data" / "sse-captures"
EXPECTED: dict[str, dict[str, Any]] = json.loads((DIR / "reasoning-captures.json").read_text())
ADAPTERS = {"vllm": VLLM, "llama-server": LLAMACPP, "openai": OPENAI}


async def read(name: str, *, think_tags: bool) -> RequestRecord:
    """The capture through the client, one event per read 10 ms apart (MockResponse), with its server's adapter."""
    events = [e[len("data: "):] for e in (DIR / name).read_text().split("\n\n") if e.startswith("data: ")]
    objs = [json.loads(e) for e in events if e != "[DONE]"]
    cfg = ClientConfig(base_url="http://sut.invalid/v1", model="m", api="chat", think_tags=think_tags)
    adapter = next((a for k, a in ADAPTERS.items() if name.startswith(k)), GENERIC)
    async with LLMClient(cfg, transport=MockTransport(lambda request: MockResponse.sse(objs, gap_s=0.01)),
                         tokenizer=get_tokenizer(), adapter=adapter) as c:
        return await c.send(RequestSpec(index=0, workload="w", input_tokens=8, max_tokens=64, prompt_text="q"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_each_capture_parses_into_its_phases(name: str) -> None:
    want = EXPECTED[name]
    rec = await read(name, think_tags=want["reasoning"] == "tags")
    assert rec.ok, rec.error_message
    assert rec.output_text.strip() == want["answer"].strip()  # the visible content alone
    if want["reasoning"] == "hidden":
        assert rec.reasoning_first_ns is None and rec.reasoning_standing == "hidden"
        assert rec.reasoning_tokens == want["reasoning_tokens"] and rec.reasoning_token_method.startswith("server")
        assert rec.first_any_ns == rec.first_token_ns  # nothing before the content arrived
        return
    assert rec.reasoning_source == want["reasoning"] and rec.reasoning_standing == "streamed"
    assert "".join(rec.chunk_reasoning) == want["thinking"]
    assert rec.reasoning_tokens_client == want["reasoning_tokens"]  # the reference tokenizer, per phase
    assert rec.first_any_ns == rec.reasoning_first_ns < rec.first_token_ns  # ttfa < TTFT
    assert rec.reasoning_last_ns <= rec.first_token_ns <= rec.content_last_ns
    assert rec.reasoning_tokens_server is None  # neither vLLM nor llama.cpp counts reasoning in usage


async def test_without_think_tags_a_tags_stream_is_all_content() -> None:
    """The user did not say the model writes <think>: the thinking counts as content (TTFT at <think>), and
    nothing marks the run: the server sends no reasoning count (vLLM without a parser)."""
    rec = await read("vllm-0.11_chat_no_parser.sse", think_tags=False)
    assert rec.output_text.startswith("<think>") and rec.reasoning_first_ns is None
    assert rec.reasoning_standing == "none"


async def test_vllm_parser_delta_with_both_reasoning_and_content() -> None:
    """The delta that crosses </think> carries the last thought and the first answer token: one chunk in
    both phases, its time the end of the thinking and TTFT's first content token."""
    rec = await read("vllm-0.11_chat_reasoning_parser.sse", think_tags=False)
    both = [i for i, (t, r) in enumerate(zip(rec.chunk_text, rec.chunk_reasoning)) if t and r]
    assert len(both) == 1 and rec.chunk_ns[both[0]] == rec.reasoning_last_ns == rec.first_token_ns


def test_adapters_name_where_their_server_puts_reasoning() -> None:
    assert "--reasoning-parser" in VLLM.reasoning and "reasoning_content" in VLLM.reasoning
    assert "--reasoning-format" in LLAMACPP.reasoning and "reasoning_content" in LLAMACPP.reasoning
    assert "hidden" in OPENAI.reasoning and OPENAI.summary()["reasoning"] == OPENAI.reasoning
