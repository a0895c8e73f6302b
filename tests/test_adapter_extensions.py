"""Adapters own each server's protocol on the response side: ``parse_extensions`` (the simulator's
``llmbench_timing``, llama.cpp's ``timings``) called by the client with no server-kind test, and
``recount_tokens`` (llama.cpp ``/tokenize``, §4.4) called after a run; ``--llm-server-kind``'s
choices are the adapters' kinds."""

from __future__ import annotations

import json
import pickle
from typing import Any

import httpx
import pytest
from factories import make_record

from pytest_llmbench.client import ClientConfig, LLMClient, MockResponse, MockTransport
from pytest_llmbench.common.records import ErrorType, RequestRecord, RequestSpec
from pytest_llmbench.loadgen.load import ClosedLoop
from pytest_llmbench.loadgen.shards.core import ShardTask, make_client
from pytest_llmbench.measure import tokencount
from pytest_llmbench.options import CHOICES
from pytest_llmbench.settings import LLMBenchConfigError, resolve
from pytest_llmbench.sut import adapters
from pytest_llmbench.sut.adapters import GENERIC, LLAMACPP, OPENAI, SIMULATOR, VLLM, ServerAdapter
from pytest_llmbench.sut.system import SUT

URL = "http://sut.invalid/v1"
SIM_TIMING = {"token_ns": [100, 200], "token_unix_ns": [1_000_100, 1_000_200], "queue_ns": 5, "prefill_ns": 7,
              "preemptions": 0, "unknown": 1}
TIMINGS = {"prompt_n": 3, "prompt_ms": 1.5, "predicted_n": 2, "predicted_ms": 4.0}


def record(texts: list[str] | None = None, server_total: int | None = None) -> RequestRecord:
    r = make_record(chunks=(), spec_input_tokens=1, max_tokens=8, status=200)
    r.chunk_text = list(texts or [])
    r.chunk_ns = list(range(len(r.chunk_text)))
    r.chunk_reasoning = [""] * len(r.chunk_text)
    r.chunk_tokens = [9] * len(r.chunk_text)
    r.output_tokens_server = server_total
    r.token_count_method = tokencount.REFERENCE
    return r


# ------------------------------------------- parse_extensions ------------------------------------
def test_simulator_reads_llmbench_timing() -> None:
    rec = record()
    SIMULATOR.parse_extensions({"llmbench_timing": SIM_TIMING}, rec)
    SIMULATOR.parse_extensions({"llmbench_timing": {"token_ns": [300], "token_unix_ns": [9]}}, rec)
    assert rec.server_token_ns == [100, 200, 300]  # appended chunk by chunk
    assert rec.server_timing == {"unix_minus_monotonic_ns": 1_000_000, "queue_ns": 5, "prefill_ns": 7,
                                 "preemptions": 0}  # the first offset kept, unknown fields not
    SIMULATOR.parse_extensions({"timings": TIMINGS}, rec)  # not its extension
    assert "timings" not in rec.server_timing and SIMULATOR.extension_keys == {"llmbench_timing"}


def test_llamacpp_reads_timings() -> None:
    rec = record()
    LLAMACPP.parse_extensions({"timings": TIMINGS, "llmbench_timing": SIM_TIMING}, rec)
    # prompt_ms is the prefill part of TTFT, its source named (issue 48)
    read = {"timings": TIMINGS, "prefill_ns": 1_500_000, "prefill_source": "llama.cpp timings.prompt_ms"}
    assert rec.server_timing == read and rec.server_token_ns is None
    LLAMACPP.parse_extensions({"timings": "not an object"}, rec)
    assert rec.server_timing == read and LLAMACPP.extension_keys == {"timings"}


def test_generic_reads_every_known_extension_and_engines_without_any_read_none() -> None:
    both = {"llmbench_timing": SIM_TIMING, "timings": TIMINGS}
    rec = record()
    GENERIC.parse_extensions(both, rec)
    assert rec.server_token_ns == [100, 200] and rec.server_timing["timings"] == TIMINGS
    assert GENERIC.extension_keys == {"llmbench_timing", "timings"}
    for adapter in (VLLM, OPENAI):
        rec = record()
        adapter.parse_extensions(both, rec)
        assert rec.server_timing is None and rec.server_token_ns is None and not adapter.extension_keys


def _stream_with_both_extensions() -> MockResponse:
    finish = {"choices": [{"index": 0, "text": "!", "finish_reason": "stop"}], "timings": TIMINGS}
    return MockResponse.sse([{"choices": [{"index": 0, "text": "Hi", "finish_reason": None}]}, finish,
                             {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2},
                              "llmbench_timing": SIM_TIMING}])


@pytest.mark.parametrize("adapter,timings,token_ns", [
    (LLAMACPP, True, False), (SIMULATOR, False, True), (GENERIC, True, True), (VLLM, False, False),
    (None, True, True),  # a client given no adapter reads with the generic one
])
async def test_the_client_reads_with_its_adapter(adapter: ServerAdapter | None, timings: bool,
                                                 token_ns: bool) -> None:
    cfg = ClientConfig(base_url=URL, model="m", api="completions", tokenizer=None)
    async with LLMClient(cfg, transport=MockTransport(lambda r: _stream_with_both_extensions()),
                         adapter=adapter) as c:
        rec = await c.send(RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=2, prompt_text="x"))
    assert rec.ok and rec.chunk_text == ["Hi", "!"] and rec.output_tokens_server == 2
    assert ("timings" in (rec.server_timing or {})) is timings  # from a chunk that also has choices
    assert (rec.server_token_ns == [100, 200]) is token_ns
    assert c.adapter is (adapter or GENERIC)


def test_a_sut_has_its_adapter() -> None:
    assert SUT(base_url=URL, model="m", embedded=True).adapter is SIMULATOR
    assert SUT(base_url=URL, model="m", server_kind="llama.cpp").adapter is LLAMACPP
    assert SUT(base_url=URL, model="m", server_kind="vllm").adapter is VLLM
    assert SUT(base_url=URL, model="m").adapter is GENERIC  # not identified yet
    assert adapters.adapter_for(object()) is GENERIC


def test_shards_read_with_the_same_adapter() -> None:
    cfg = ClientConfig(base_url=URL, model="m", tokenizer=None)
    task = ShardTask(index=0, count=1, config=cfg, max_connections=None, tokenizer="cl100k_base", specs=[],
                     load=ClosedLoop(concurrency=1), adapter=LLAMACPP)
    again = pickle.loads(pickle.dumps(task))  # as sent to a process or a Ray actor
    assert make_client(again).adapter == LLAMACPP


# ------------------------------------------- recount_tokens --------------------------------------
@pytest.fixture
def tokenize_server(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """httpx clients answered by a ``/tokenize`` that splits text into characters (``"404"``: no endpoint)."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        content = json.loads(request.content)["content"]
        if content.startswith("404"):
            return httpx.Response(404, json={"error": "no such endpoint"})
        return httpx.Response(200, json={"tokens": [{"id": i, "piece": ch} for i, ch in enumerate(content)]})

    real = httpx.AsyncClient
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: real(transport=httpx.MockTransport(handler),
                                                                 timeout=kw.get("timeout")))
    return seen


async def test_llamacpp_recounts_in_its_own_tokens(tokenize_server: list[httpx.Request],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMB_ADAPTER_KEY", "sk-adapter")
    todo = record(["ab", "c"], 3)
    exact = record(["x"], 1)
    exact.token_count_method = tokencount.ONE_PER_CHUNK
    failed = record(["y"], 1)
    failed.error_type = ErrorType.HTTP_5XX
    cfg = ClientConfig(base_url=URL, model="m", tokenizer=None, api_key_env="LLMB_ADAPTER_KEY")
    async with LLMClient(cfg, adapter=LLAMACPP) as client:
        assert await LLAMACPP.recount_tokens([todo, exact, failed], client) == 1
    assert todo.chunk_tokens == [2, 1] and todo.token_count_method == tokencount.TOKENIZE
    assert exact.chunk_tokens == [9]
    (request,) = tokenize_server
    assert str(request.url) == "http://sut.invalid/tokenize"
    assert json.loads(request.content) == {"content": "abc", "with_pieces": True, "add_special": False}
    assert request.headers["authorization"] == "Bearer sk-adapter"  # the client's headers


async def test_a_server_without_tokenize_keeps_the_reference_counts(tokenize_server: list[httpx.Request]) -> None:
    recs = [record(["404", "x"], 2), record(["y"], 1)]
    async with LLMClient(ClientConfig(base_url=URL, model="m", tokenizer=None)) as client:
        assert await LLAMACPP.recount_tokens(recs, client) == 0
    assert len(tokenize_server) == 1  # the first answer decides: no endpoint, no more requests
    assert [r.token_count_method for r in recs] == [tokencount.REFERENCE] * 2


async def test_other_servers_recount_nothing(tokenize_server: list[httpx.Request]) -> None:
    async with LLMClient(ClientConfig(base_url=URL, model="m", tokenizer=None)) as client:
        for adapter in (GENERIC, SIMULATOR, VLLM):
            assert await adapter.recount_tokens([record(["a"], 1)], client) == 0
    assert tokenize_server == []


# ------------------------------------------- --llm-server-kind ----------------------------------
def test_server_kind_choices_come_from_the_adapters() -> None:
    assert CHOICES["server-kind"] == adapters.KINDS

    def cli(value: Any) -> Any:
        return lambda dest: value if dest == "llm_server_kind" else None

    s = resolve(cli("vLLM"), lambda k: None, environ={}, choices=CHOICES)
    assert s.server_kind == "vllm"
    with pytest.raises(LLMBenchConfigError, match=r"--llm-server-kind: .*'tgi' is not one of llama\.cpp, "):
        resolve(cli("tgi"), lambda k: None, environ={}, choices=CHOICES)
