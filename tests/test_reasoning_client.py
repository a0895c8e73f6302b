"""Reasoning models on the client side (issue 49): each answer split into its phases (reasoning, tool-call
arguments, visible content), reasoning on both APIs and in ``<think>`` tags, tool-call arguments kept."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from factories import ScriptedReads as Reads
from factories import make_record
from factories import sse as sse_events
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_llmbench.client import ClientConfig, LLMClient, MockResponse, MockTransport
from pytest_llmbench.client import stream as stream_mod
from pytest_llmbench.client.phases import assign_phases, split_think_tags, think_spans
from pytest_llmbench.client.stream import ResponseReader, _chunk_decoder
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.sut.adapters import GENERIC

URL = "http://sut.invalid/v1"


def chat(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    d = dict(delta)
    if content is not None:
        d["content"] = content
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def completion(text: str, finish: str | None = None, **choice: Any) -> dict[str, Any]:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish, **choice}]}


def sse(*objs: dict[str, Any]) -> bytes:
    return sse_events(*objs, done=True)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's clock gives 1000, 2000, ...: one value per socket read."""
    ticks = itertools.count(1000, 1000)
    monkeypatch.setattr(stream_mod, "time", type("T", (), {"perf_counter_ns": staticmethod(lambda: next(ticks))}))


async def read(reads: list[bytes], api: str = "chat") -> RequestRecord:
    rec = make_record(chunks=(), end_ns=None)
    cfg = ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", api=api)
    await ResponseReader(cfg, GENERIC).read_stream(Reads(reads), rec)
    assert len(rec.chunk_reasoning) == len(rec.chunk_text) == len(rec.chunk_ns)
    assert not rec.chunk_tool or len(rec.chunk_tool) == len(rec.chunk_text)
    assign_phases(rec)
    return rec


def tool_delta(index: int, args: str, *, id: str | None = None, name: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": args}
    if name:
        fn["name"] = name
    d: dict[str, Any] = {"index": index, "function": fn}
    if id:
        d.update(id=id, type="function")
    return d


async def test_a_tool_call_stream_keeps_its_arguments(clock: None) -> None:
    """tool_calls deltas were decoded as empty content before (their arguments dropped): now each chunk keeps
    its arguments beside its text, the calls are assembled, and the tool phase has its first and last time."""
    reads = [sse(chat("", role="assistant"))[:-14],
             b"data: " + json.dumps(chat(None, tool_calls=[tool_delta(0, "", id="call_1", name="get_weather")])).encode()
             + b"\n\n",
             b"data: " + json.dumps(chat(None, tool_calls=[tool_delta(0, '{"city": ')])).encode() + b"\n\n",
             b"data: " + json.dumps(chat(None, tool_calls=[tool_delta(0, '"Paris"}')])).encode() + b"\n\n",
             sse(chat("Done.", finish="tool_calls"))]
    rec = await read(reads)
    assert rec.tool_calls == [{"index": 0, "id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert rec.chunk_tool == ["", "", '{"city": ', '"Paris"}', ""]
    assert rec.chunk_text == ["", "", "", "", "Done."]
    assert (rec.tool_first_ns, rec.tool_last_ns) == (3000, 4000)
    assert rec.first_token_ns == rec.content_last_ns == 5000  # TTFT: content only (§5.1.3.1)
    assert rec.first_any_ns == 3000  # ttfa: the first non-whitespace fragment of any kind


async def test_reasoning_on_completions_is_read(clock: None) -> None:
    """/v1/completions: choices[0].reasoning_content (the client read only text before)."""
    reads = [sse(completion("", reasoning_content="Let me"))[:-14],
             sse(completion("", reasoning_content=" think."))[:-14],
             sse(completion("Answer", finish="stop"))]
    rec = await read(reads, api="completions")
    assert rec.chunk_reasoning == ["Let me", " think.", ""] and rec.chunk_text == ["", "", "Answer"]
    assert (rec.reasoning_first_ns, rec.reasoning_last_ns, rec.first_token_ns) == (1000, 2000, 3000)
    assert rec.first_any_ns == 1000 and rec.reasoning_source == "field"


async def test_the_common_object_still_decodes_typed() -> None:
    """A delta with ``"tool_calls": []`` or null, and a completions choice with ``"reasoning_content": null``
    are the common shape (typed decode); one that carries a call or reasoning is not (read as a dict)."""
    decode, *_ = _chunk_decoder(frozenset({"error"}))
    assert decode(json.dumps(chat("a", tool_calls=[])).encode()).choices[0].delta.content == "a"
    assert decode(json.dumps(completion("a", reasoning_content=None)).encode()).choices[0].text == "a"
    for obj in (chat(None, tool_calls=[tool_delta(0, "{}")]), completion("", reasoning_content="x")):
        with pytest.raises(stream_mod._msgspec.DecodeError):
            decode(json.dumps(obj).encode())


def test_no_reasoning_no_tool_leaves_the_phases_to_the_content() -> None:
    rec = make_record(chunks=[(100, "", "", 0), (110, "a", "", 1), (120, " b", "", 1), (130, " ", "", 0)])
    assign_phases(rec)
    assert rec.first_any_ns == rec.first_token_ns == 110_000_000 and rec.content_last_ns == 120_000_000
    assert rec.reasoning_first_ns is None and rec.tool_first_ns is None and rec.reasoning_source is None


def test_think_tags_split_over_chunks() -> None:
    """<think> text moves to the reasoning, chunk by chunk, a tag cut across chunks included; TTFT's first
    content token is found again among what is left (§5.1.3.1)."""
    texts = ["<thi", "nk>\nI should", " add.", "</th", "ink>\n\n", "4", "."]
    rec = make_record(chunks=[(10 * (i + 1), t, "", 1) for i, t in enumerate(texts)])
    assert rec.first_token_ns == 10_000_000  # as the hot path saw it: "<thi" is content
    assert split_think_tags(rec)
    assign_phases(rec)
    assert rec.chunk_text == ["", "", "", "", "\n\n", "4", "."]
    assert rec.chunk_reasoning == ["", "\nI should", " add.", "", "", "", ""]
    assert rec.first_token_ns == 60_000_000 and rec.reasoning_first_ns == 20_000_000
    assert rec.reasoning_last_ns == 30_000_000 and rec.first_any_ns == 20_000_000 and rec.reasoning_source == "tags"


def test_a_close_tag_alone_closes_reasoning_from_the_start() -> None:
    """Chat templates that put <think> in the prompt: the output starts inside the reasoning."""
    rec = make_record(chunks=[(10, "hmm", "", 1), (20, "</think>", "", 1), (30, "Yes", "", 1)])
    split_think_tags(rec)
    assert rec.chunk_reasoning == ["hmm", "", ""] and rec.chunk_text == ["", "", "Yes"]


def test_an_unclosed_think_tag_ended_while_thinking() -> None:
    rec = make_record(chunks=[(10, "<think>a", "", 1), (20, " b", "", 1)])
    split_think_tags(rec)
    assign_phases(rec)
    assert rec.first_token_ns is None and rec.chunk_reasoning == ["a", " b"] and rec.first_any_ns == 10_000_000


words = st.text(alphabet="ab <>/thinkx\n", max_size=12)


@given(before=words, thought=words, after=words, cuts=st.lists(st.integers(0, 60), max_size=6))
@example(before="", thought="x", after="y", cuts=[3, 9])
def test_think_split_is_the_same_however_the_text_is_chunked(before: str, thought: str, after: str,
                                                            cuts: list[int]) -> None:
    """The split depends on the text, not on where chunks end: joined reasoning and content are those of
    the whole text, for any cut of it into chunks."""
    if "<think>" in before + thought + after or "</think>" in before + thought + after:
        return
    text = f"{before}<think>{thought}</think>{after}"
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    parts = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    rec = make_record(chunks=[(i + 1, p, "", 1) for i, p in enumerate(parts)])
    split_think_tags(rec)
    assert "".join(rec.chunk_reasoning) == thought and "".join(rec.chunk_text) == before + after
    assert [s for s in think_spans(text) if s[2]] == ([(len(before) + 7, len(before) + 7 + len(thought), True)]
                                                      if thought else [])


async def send(events: list[dict[str, Any]], **config: Any) -> RequestRecord:
    cfg = ClientConfig(base_url=URL, model="m", api=config.pop("api", "chat"), **config)
    async with LLMClient(cfg, transport=MockTransport(lambda request: MockResponse.sse(events))) as c:
        return await c.send(RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=64, prompt_text="hi"))


async def test_think_tags_when_the_user_says_so_and_token_counts_per_phase() -> None:
    events = [chat("<think>"), chat("one two"), chat(" three"), chat("</think>"), chat("Hello"), chat(" world", "stop"),
              {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 9,
                                        "completion_tokens_details": {"reasoning_tokens": 5}}}]
    plain = await send(events)
    assert plain.ok and plain.reasoning_first_ns is None and plain.output_text.startswith("<think>")
    assert plain.reasoning_standing == "hidden"  # the server counts reasoning the client did not see apart
    rec = await send(events, think_tags=True)
    assert rec.ok and rec.output_text == "Hello world" and rec.reasoning_source == "tags"
    assert "".join(rec.chunk_reasoning) == "one two three" and rec.reasoning_tokens_client == 3
    assert rec.reasoning_tokens == 5 and rec.reasoning_token_method.startswith("server usage")
    assert rec.reasoning_standing == "streamed" and rec.first_token_ns == rec.chunk_ns[4]
    assert rec.output_tokens_client == 3 + 2  # reasoning and content; the tags counted in neither


async def test_tool_call_tokens_and_request_fields_pass_through() -> None:
    events = [chat(None, tool_calls=[tool_delta(0, '{"a": 1}', id="c", name="f")]), chat(None, finish="tool_calls")]
    seen: list[dict[str, Any]] = []

    def answer(request: Any) -> MockResponse:
        seen.append(request.json())
        return MockResponse.sse(events)

    cfg = ClientConfig(base_url=URL, model="m", api="chat")
    spec = RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=8, prompt_text="hi",
                       request_fields=(("reasoning_effort", "high"),))
    async with LLMClient(cfg, transport=MockTransport(answer)) as c:
        rec = await c.send(spec)
    assert seen[0]["reasoning_effort"] == "high"
    assert rec.ok and rec.tool_tokens_client and rec.tool_tokens_client > 0 and rec.first_token_ns is None
    assert rec.output_tokens_client == rec.tool_tokens_client and rec.tool_calls[0]["arguments"] == '{"a": 1}'
    assert RequestSpec.from_json(spec.to_json()) == spec


def test_hidden_and_undetermined_standings() -> None:
    hidden = make_record(usage={"completion_tokens": 40, "completion_tokens_details": {"reasoning_tokens": 30}})
    assert hidden.reasoning_standing == "hidden" and hidden.reasoning_tokens == 30
    unknown = make_record(output_tokens_server=400, output_tokens_client=10)
    assert unknown.reasoning_standing == "undetermined"
    close = make_record(output_tokens_server=12, output_tokens_client=10)
    assert close.reasoning_standing == "none"


def test_a_custom_workload_passes_request_fields_through() -> None:
    """reasoning_effort and the like, from the workload spec to every request body (issue 49)."""
    from pytest_llmbench.client.config import build_body
    from pytest_llmbench.workloads.core import WorkloadError, dumps_requests
    from pytest_llmbench.workloads.custom import build_custom

    spec = {"input_length": {"type": "fixed", "value": 40, "unit": "tokens", "tokenizer": "cl100k_base"},
            "output_length": {"type": "fixed", "value": 8, "unit": "tokens", "control": "max_tokens"},
            "content": {"domain": "conversation", "language": "English", "system_prompt": False,
                        "system_prompt_tokens": 0},
            "prefix_sharing": {"fraction": 0, "length": "none"}}
    plain = build_custom(spec, n=2, seed=1)
    wl = build_custom({**spec, "request_fields": {"reasoning_effort": "high"}}, n=2, seed=1)
    body = build_body(ClientConfig(base_url=URL, model="m", api="chat"), wl.specs[0])
    assert body["reasoning_effort"] == "high" and "reasoning_effort" not in build_body(
        ClientConfig(base_url=URL, model="m", api="chat"), plain.specs[0])
    assert b"request_fields" not in dumps_requests(plain.specs)  # a workload without them hashes as before
    with pytest.raises(WorkloadError, match="request_fields may not set max_tokens"):
        build_custom({**spec, "request_fields": {"max_tokens": 5}}, n=1, seed=1)
