"""The client against ``MockTransport`` (no socket): scripted SSE streams give the chunk times of
App. B.1.1, the token counts of §4.6.3 and the error types of §4.2.6."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pytest_llmbench.client import CLOSED_AFTER_SEND, ClientConfig, LLMClient, MockRequest, MockResponse, MockTransport
from pytest_llmbench.common.records import ErrorType, RequestRecord, RequestSpec

URL = "http://sut.invalid/v1"


def spec(prompt: str = "hi", **kw: Any) -> RequestSpec:
    return RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=8, prompt_text=prompt, **kw)


def text(t: str, finish: str | None = None) -> dict[str, Any]:
    """A completions chunk."""
    return {"object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": finish}]}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


async def send(answer: MockResponse | Any, *, client_spec: RequestSpec | None = None,
               **config: Any) -> tuple[RequestRecord, MockTransport]:
    """One request through a client whose transport answers with ``answer`` (or calls it)."""
    handler = answer if callable(answer) else (lambda request: answer)
    transport = MockTransport(handler)
    cfg = ClientConfig(base_url=URL, model="m", api=config.pop("api", "completions"), **config)
    async with LLMClient(cfg, transport=transport) as c:
        assert c.transport_name == "mock" and c.describe()["transport"] == "mock"
        return await c.send(client_spec or spec()), transport


async def test_scripted_stream_gives_chunk_times_tokens_and_usage() -> None:
    events = [text(""), text(" "), text("Hello"), text(" world"), text("!", "stop"), usage(3, 3)]
    rec, transport = await send(MockResponse.sse(events, gap_s=0.02))
    assert rec.ok, rec.error_message
    assert rec.chunk_text == ["", " ", "Hello", " world", "!"]
    assert len(rec.chunk_ns) == 5 and all(b - a >= 15_000_000 for a, b in zip(rec.chunk_ns, rec.chunk_ns[1:]))
    assert rec.first_chunk_ns == rec.chunk_ns[0]
    assert rec.first_token_ns == rec.chunk_ns[2]  # the first non-whitespace content (§5.1.3.1)
    assert rec.end_ns > rec.chunk_ns[-1]  # [DONE] came one gap after the usage chunk
    assert rec.finish_reason == "stop" and (rec.input_tokens_server, rec.output_tokens_server) == (3, 3)
    # cl100k_base over the joined text: " Hello" is one token, counted where its first character came (§4.6.3)
    assert rec.chunk_tokens == [0, 1, 0, 1, 1] and rec.output_tokens_client == 3
    assert rec.queued_ns <= rec.sent_ns < rec.first_chunk_ns  # T_submit stamped at the last body byte
    (request,) = transport.requests
    assert request.method == "POST" and request.url == URL + "/completions"
    assert request.headers["Accept"] == "text/event-stream" and request.headers["Content-Length"] == str(
        len(request.body))
    body = request.json()
    assert body["model"] == "m" and body["prompt"] == "hi" and body["stream_options"] == {"include_usage": True}


async def test_events_are_timed_at_the_read_that_completes_them() -> None:
    """Two events in one read share its time; an event cut across two reads takes the second's (App. B.1.1)."""
    a, b, c = (f"data: {json.dumps(text(t))}\n\n".encode() for t in ("a", "b", "c"))

    async def reads() -> AsyncIterator[bytes]:
        for chunk in (a + b, c[:7], c[7:] + b"data: [DONE]\n\n"):
            yield chunk
            await asyncio.sleep(0.01)

    rec, _ = await send(MockResponse(200, {"content-type": "text/event-stream"}, reads()))
    assert rec.ok and rec.chunk_text == ["a", "b", "c"]
    assert rec.chunk_ns[0] == rec.chunk_ns[1] < rec.chunk_ns[2] == rec.end_ns


async def test_chat_deltas_reasoning_and_refusal() -> None:
    def delta(**d: Any) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}

    events = [delta(role="assistant"), delta(reasoning_content="think"), delta(content="Hi"),
              delta(refusal="I can't")]
    rec, _ = await send(MockResponse.sse(events), api="chat")
    assert rec.chunk_text == ["", "", "Hi", ""] and rec.chunk_reasoning == ["", "think", "", ""]
    assert rec.refusal == "I can't" and rec.error_type is ErrorType.REFUSED  # the refusal field (§4.8.1)
    assert rec.reasoning_tokens_client == 1


async def test_non_streaming_json_answer() -> None:
    answer = MockResponse.json({"choices": [{"index": 0, "text": "Hello", "finish_reason": "length"}],
                                "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
    rec, transport = await send(answer, stream=False)
    assert rec.ok and rec.chunk_text == ["Hello"] and rec.first_token_ns == rec.chunk_ns[0] == rec.end_ns
    assert rec.output_tokens_server == 1 and transport.requests[0].json()["stream"] is False


@pytest.mark.parametrize("answer,error_type,message", [
    (MockResponse.json({"error": {"message": "slow down"}}, status=429), ErrorType.RATE_LIMITED,
     "HTTP 429: slow down"),
    (MockResponse.json({"error": {"message": "bad", "code": "content_policy_violation"}}, status=400),
     ErrorType.REFUSED, "HTTP 400 policy refusal (content_policy_violation): bad"),
    (MockResponse.json({"error": "boom"}, status=503), ErrorType.HTTP_5XX, "HTTP 503: boom"),
    (MockResponse(200, {"Content-Type": "application/json"}, b"{}"), ErrorType.PROTOCOL,
     "not text/event-stream"),
    (MockResponse.sse([text("a")], done=False), ErrorType.PROTOCOL, "stream closed without data: [DONE]"),
    (MockResponse.sse([b"data: {not json\n\n"]), ErrorType.PARSE, "malformed JSON"),
    (MockResponse.sse([b"data: [1, 2]\n\n"]), ErrorType.PARSE, "SSE data is not a JSON object"),
    (MockResponse.sse([{"error": {"message": "overloaded", "code": 503}}]), ErrorType.HTTP_5XX,
     "error event in stream: overloaded"),
    (MockResponse.sse([b"data: {\"choices\": []}"], done=False), ErrorType.PROTOCOL,
     "stream ended inside an SSE event"),
    (MockResponse(200, {"Content-Type": "text/event-stream"}, []), ErrorType.PROTOCOL, "empty stream"),
    (MockResponse.sse([b"data: \xff\n\n"]), ErrorType.PARSE, "UTF-8"),
])
async def test_failures_found_in_the_response(answer: MockResponse, error_type: ErrorType, message: str) -> None:
    rec, _ = await send(answer)
    assert rec.error_type is error_type and message in (rec.error_message or ""), rec.error_message
    assert rec.end_ns is not None and rec.sent_ns


async def test_failures_raised_by_the_library_go_through_the_error_map() -> None:
    def refuse(request: MockRequest) -> MockResponse:
        raise ConnectionRefusedError(111, "refused")

    rec, _ = await send(refuse)
    assert rec.error_type is ErrorType.CONNECT and "ConnectionRefusedError" in (rec.error_message or "")

    def reset_after_send(request: MockRequest) -> MockResponse:  # a server that crashed with the request read
        raise ConnectionResetError(104, "reset")

    rec, _ = await send(reset_after_send)
    assert rec.error_type is ErrorType.PROTOCOL and (rec.error_message or "").startswith(CLOSED_AFTER_SEND)

    def reset_mid_stream() -> Iterator[bytes]:
        yield f"data: {json.dumps(text('kept'))}\n\n".encode()
        raise ConnectionResetError(104, "reset")

    rec, _ = await send(MockResponse(200, {"content-type": "text/event-stream"}, reset_mid_stream()))
    assert rec.error_type is ErrorType.PROTOCOL and "ConnectionResetError" in (rec.error_message or "")
    assert rec.chunk_text == ["kept"] and rec.first_token_ns == rec.chunk_ns[0]  # what arrived is kept


async def test_total_timeout_and_cancellation_keep_the_record() -> None:
    rec, _ = await send(MockResponse.sse([text("a"), text("b")], gap_s=5.0), total_timeout_s=0.05)
    assert rec.error_type is ErrorType.TIMEOUT and rec.chunk_text == ["a"]

    async def slow(request: MockRequest) -> MockResponse:
        await asyncio.sleep(5)
        raise AssertionError("cancelled before")

    cfg = ClientConfig(base_url=URL, model="m", api="completions", tokenizer=None)
    record = RequestRecord.from_spec(spec(), phase="measure")
    async with LLMClient(cfg, transport=MockTransport(slow)) as c:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.send(spec(), record=record), 0.05)
    assert record.error_type is ErrorType.CANCELLED and record.end_ns is not None


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the per-request deadline needs Task.uncancel (3.11)")
async def test_the_total_timeout_is_one_timer_per_request_and_leaves_other_cancellations_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline of :meth:`LLMClient.send` (issue 38: one ``call_at`` per request, not
    ``asyncio.timeout``): its expiry is a TIMEOUT record; after a request that ended in time it
    cancels nothing; a cancellation of the caller's own still propagates, even when the deadline
    fires with it, and the record says cancelled."""
    import pytest_llmbench.client as client_mod

    def no_asyncio_timeout(delay: float | None) -> Any:
        raise AssertionError("the lean deadline was not taken")

    monkeypatch.setattr(client_mod, "_timeout", no_asyncio_timeout)
    rec, _ = await send(MockResponse.sse([text("a"), text("b")], gap_s=5.0), total_timeout_s=0.05)
    assert rec.error_type is ErrorType.TIMEOUT and "total timeout" in (rec.error_message or "")

    cfg = ClientConfig(base_url=URL, model="m", api="completions", tokenizer=None, total_timeout_s=0.05)
    fast = MockTransport(lambda request: MockResponse.sse([text("a", "stop")]))
    async with LLMClient(cfg, transport=fast) as c:
        rec = await c.send(spec())
        assert rec.ok, rec.error_message
        await asyncio.sleep(0.1)  # past the deadline: its timer was cancelled with the request
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    async def slow(request: MockRequest) -> MockResponse:
        await asyncio.sleep(5)
        raise AssertionError("cancelled before")

    async with LLMClient(cfg, transport=MockTransport(slow)) as c:
        record = RequestRecord.from_spec(spec(), phase="measure")
        task = asyncio.ensure_future(c.send(spec(), record=record))
        await asyncio.sleep(0.01)
        task.cancel()  # the caller's own cancellation ...
        with pytest.raises(asyncio.CancelledError):
            await task
        assert record.error_type is ErrorType.CANCELLED

        expire = client_mod._expire

        def expire_and_cancelled_too(task: asyncio.Task[Any], expired: list[bool]) -> None:
            expire(task, expired)
            task.cancel()  # ... also when it comes in the deadline's own loop turn

        monkeypatch.setattr(client_mod, "_expire", expire_and_cancelled_too)
        record = RequestRecord.from_spec(spec(), phase="measure")
        with pytest.raises(asyncio.CancelledError):
            await asyncio.ensure_future(c.send(spec(), record=record))
        assert record.error_type is ErrorType.CANCELLED


async def test_get_through_the_transport() -> None:
    seen: list[MockRequest] = []

    def handler(request: MockRequest) -> MockResponse:
        seen.append(request)
        return MockResponse(200, {"content-type": "text/plain"}, [b"llamacpp:requests_deferred ", b"2\n"])

    cfg = ClientConfig(base_url=URL, model="m", tokenizer=None)
    async with LLMClient(cfg, transport=MockTransport(handler)) as c:
        assert await c.get("/metrics") == (200, "llamacpp:requests_deferred 2\n")
    assert seen[0].method == "GET" and seen[0].url == "http://sut.invalid/metrics"
    assert "Content-Type" not in seen[0].headers
