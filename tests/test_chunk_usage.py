"""Exact per-chunk counts from the server's running ``usage.completion_tokens`` on every chunk
(vLLM ``stream_options.continuous_usage_stats``, §4.4): a chunk's count is the step from the one
before, whatever its text. The vLLM adapter asks for it; the body merges it into ``stream_options``."""

from __future__ import annotations

import json
from typing import Any

from factories import make_record

from pytest_llmbench.client import ClientConfig, LLMClient, MockRequest, MockResponse, MockTransport
from pytest_llmbench.client.config import build_body
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.measure import tokencount
from pytest_llmbench.sut.adapters import LLAMACPP, VLLM

URL = "http://sut.invalid/v1"
SPEC = RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=7, prompt_text="x")


def _rec(texts: list[str], cum: list[int], total: int | None) -> RequestRecord:
    rec = make_record(chunks=(), spec_input_tokens=1, max_tokens=7)
    rec.chunk_text = list(texts)
    rec.chunk_ns = list(range(1, len(texts) + 1))
    rec.chunk_usage_tokens = list(cum)
    rec.output_tokens_server = total
    return rec


def test_steps_of_the_running_count_are_the_chunk_counts() -> None:
    # chat: role chunk (0), a byte token with empty text, a 3-token chunk, one token, finish chunk
    rec = _rec(["", "", "é", "ab", "c", ""], [0, 1, 2, 5, 6, 7], 7)
    assert tokencount.apply_chunk_usage(rec)
    assert rec.chunk_tokens == [0, 1, 1, 3, 1, 1] and rec.token_count_method == tokencount.USAGE_PER_CHUNK
    assert tokencount.USAGE_PER_CHUNK in tokencount.EXACT_METHODS and not tokencount.needs_server_count(rec)


def test_a_running_count_that_does_not_fit_is_not_used() -> None:
    assert not tokencount.apply_chunk_usage(_rec(["a", "b"], [1], 2))  # not on every chunk
    assert not tokencount.apply_chunk_usage(_rec(["a", "b"], [2, 1], 2))  # goes back
    assert not tokencount.apply_chunk_usage(_rec(["a", "b"], [1, 2], 3))  # last != the final total
    assert not tokencount.apply_chunk_usage(_rec(["a", "b"], [1, 2], None))  # no total
    rec = _rec(["a", "b"], [], 2)
    assert not tokencount.apply_chunk_usage(rec) and rec.token_count_method is None


def _continuous_stream(request: MockRequest) -> MockResponse:
    chunks: list[tuple[str, int, str | None]] = [("", 1, None), ("é", 2, None), ("abc", 5, None), ("", 6, "length")]
    events: list[Any] = [{"choices": [{"index": 0, "text": t, "finish_reason": fr}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
                         for t, n, fr in chunks]
    events.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}})
    return MockResponse.sse(events)


async def test_the_client_counts_from_the_running_usage() -> None:
    cfg = ClientConfig(base_url=URL, model="m", api="completions", tokenizer="cl100k_base")
    async with LLMClient(cfg, transport=MockTransport(_continuous_stream), adapter=VLLM) as c:
        rec = await c.send(SPEC)
    assert rec.ok and rec.output_tokens_server == 6 and rec.chunk_usage_tokens == [1, 2, 5, 6]
    assert rec.chunk_tokens == [1, 1, 3, 1] and rec.token_count_method == tokencount.USAGE_PER_CHUNK
    back = RequestRecord.from_json(json.loads(rec.dumps()))  # the raw running counts are kept in the record
    assert back.chunk_usage_tokens == [1, 2, 5, 6]


def test_the_vllm_adapter_asks_for_continuous_usage_and_the_body_merges_it() -> None:
    extra = dict(VLLM.request_fields)  # what identify_server adds to SUT.extra_body on a vLLM
    assert extra.get("stream_options") == {"continuous_usage_stats": True}
    cfg = ClientConfig(base_url=URL, model="m", api="completions", extra_body=extra)
    assert build_body(cfg, SPEC)["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    no_stream = ClientConfig(base_url=URL, model="m", api="completions", stream=False, extra_body=extra)
    assert "stream_options" not in build_body(no_stream, SPEC)  # vLLM refuses stream_options without stream
    assert "stream_options" not in LLAMACPP.request_fields
