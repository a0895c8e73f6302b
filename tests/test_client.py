"""Streaming client against small scripted aiohttp servers (in-process, and a subprocess for timing).

The server below picks its behaviour from the prompt text (``"<scenario>[:arg]"``). Run this file
as a script (``python tests/test_client.py``) to start it on a free port in its own process; it
prints ``PORT <n>``. tests/test_load.py uses it the same way.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from factories import DONE, delta_chunk, serve_app, sse, sse_response
from hypothesis import given
from hypothesis import strategies as st

from pytest_llmbench.client import ClientConfig, LLMClient, assign_chunk_tokens, build_body
from pytest_llmbench.common.records import ErrorType, RequestSpec
from pytest_llmbench.common.tokenizer import get_tokenizer

CAPTURES = Path(__file__).parent / "data" / "sse-captures"  # copies of shared/reference/sse-captures
SECRET = "sk-test-very-secret-0123456789"


# ================================== the scripted server ========================================
def _delta(content: str | None = None, *, role: bool = False, reasoning: str | None = None,
           key: str = "reasoning_content", finish: str | None = None, timing: dict | None = None) -> bytes:
    d: dict = {}
    if role:
        d["role"] = "assistant"
    if content is not None:
        d["content"] = content
    if reasoning is not None:
        d[key] = reasoning
    obj = delta_chunk(d, finish, id="x", object="chat.completion.chunk")
    if timing is not None:
        obj["llmbench_timing"] = timing
    return sse(obj)


def _usage(prompt: int, completion: int, cached: int | None = None) -> bytes:
    u: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return sse({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": u})


async def handle(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    chat = request.path.endswith("/chat/completions")
    prompt = body["messages"][-1]["content"] if chat else body["prompt"]
    scenario, _, arg = (prompt if isinstance(prompt, str) else "ids").partition(":")
    stream = body.get("stream", False)
    timing = bool(body.get("llmbench_timing"))

    if scenario == "auth":  # echo the header back in an error body (a badly behaved server)
        return web.json_response({"error": {"message": f"bad key {request.headers.get('Authorization')}"}}, status=401)
    if scenario in ("http400", "http429", "http500", "http503"):
        return web.json_response({"error": {"message": f"scripted {scenario}", "type": "x"}}, status=int(scenario[4:]))
    if scenario == "wrong_ct":
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})
    if scenario == "echo":  # the request body as the content
        resp = await sse_response(request)
        await resp.write(_delta(json.dumps(body, sort_keys=True)) + DONE)
        return resp
    if not stream:
        if scenario == "badjson":
            return web.Response(body=b"{not json", content_type="application/json")
        text = " hello world"
        if chat:
            payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                            "reasoning_content": "think"}, "finish_reason": "stop"}]}
        else:
            payload = {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}
        payload["usage"] = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        return web.json_response(payload)

    resp = await sse_response(request)
    w = resp.write
    if scenario == "capture":
        await w((CAPTURES / arg).read_bytes())
        return resp
    if scenario == "normal":
        if chat:
            await w(_delta("", role=True) + _delta(" one") + _delta(" two") + _delta(None, finish="stop")
                    + _usage(5, 2, cached=3) + DONE)
        else:
            for t in (" one", " two"):
                await w(sse({"choices": [{"index": 0, "text": t, "finish_reason": None}]}))
            await w(sse({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                         "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}) + DONE)
    elif scenario == "ttft":  # role-only, empty, whitespace-only chunks before the first real token
        d = float(arg or 0.03)
        await w(_delta("", role=True))
        await asyncio.sleep(d)
        await w(_delta(""))
        await asyncio.sleep(d)
        await w(_delta("  "))
        await asyncio.sleep(d)
        await w(_delta("\n"))
        await asyncio.sleep(d)
        await w(_delta(" real"))
        await asyncio.sleep(d)
        await w(_delta(" more") + _delta(None, finish="stop") + DONE)
    elif scenario == "multi":
        await w(_delta("", role=True) + _delta(" hello world") + _delta(" the capital of France") + _delta(" is")
                + _delta(None, finish="length") + DONE)
    elif scenario in ("reasoning", "reasoning_alt"):
        key = "reasoning_content" if scenario == "reasoning" else "reasoning"
        await w(_delta("", role=True) + _delta(reasoning=" let me think", key=key))
        await asyncio.sleep(0.02)
        await w(_delta(reasoning=" hard", key=key))
        await asyncio.sleep(0.02)
        await w(_delta(" answer") + _delta(None, finish="stop") + DONE)
    elif scenario == "content_filter":
        await w(_delta(" partial") + _delta(None, finish="content_filter") + DONE)
    elif scenario == "malformed":
        await w(_delta(" one") + _delta(" two"))
        await asyncio.sleep(0.01)
        await w(b'data: {"choices": [{"delta": \n\n' + DONE)
    elif scenario == "not_object":
        await w(_delta(" one") + b"data: [1, 2]\n\n" + DONE)
    elif scenario == "bad_utf8":
        await w(_delta(" one"))
        await asyncio.sleep(0.01)
        await w(b"data: {\"x\": \"\xff\xfe\"}\n\n" + DONE)
    elif scenario == "no_done":
        await w(_delta(" one") + _delta(" two") + _delta(None, finish="stop"))
    elif scenario == "cut_mid_event":
        await w(_delta(" one") + b'data: {"choices": [{"delta": {"con')
    elif scenario == "empty":
        pass
    elif scenario == "reset":
        await w(_delta(" one") + _delta(" two"))
        await asyncio.sleep(0.02)
        assert request.transport is not None
        request.transport.abort()
        return resp
    elif scenario == "error_event":
        await w(_delta(" one") + sse({"error": {"message": "engine died", "code": 500}}))
    elif scenario == "stall":  # one token then silence for arg seconds
        await w(_delta(" one"))
        await asyncio.sleep(float(arg))
        await w(_delta(" two") + DONE)
    elif scenario == "trickle":  # a token every 50 ms, arg tokens
        for _ in range(int(arg)):
            await w(_delta(" tok"))
            await asyncio.sleep(0.05)
        await w(DONE)
    elif scenario == "stamped":  # server send time (CLOCK_MONOTONIC) in every chunk
        n, _, gap = arg.partition(",")
        await w(_delta("", role=True))
        for i in range(int(n)):
            t = time.monotonic_ns()
            tm = {"token_ns": [t], "token_unix_ns": [time.time_ns()]}
            fin = i == int(n) - 1
            if fin:
                tm.update(queue_ns=1000, prefill_ns=2000, preemptions=0, preempted_tokens=0, cached_tokens=0)
            ch = _delta(" tok", timing=tm if timing else None)
            if fin:
                ch += _delta(None, finish="length")
            await w(ch)
            if gap:
                await asyncio.sleep(float(gap))
        await w(_usage(3, int(n)) + DONE)
    elif scenario == "fast":  # load tests: a few tokens, no delay
        await w(_delta("", role=True) + _delta(" a") + _delta(" b") + _delta(None, finish="stop") + DONE)
    elif scenario == "slow":  # load tests: stall arg seconds before finishing
        await w(_delta("", role=True) + _delta(" a"))
        await asyncio.sleep(float(arg))
        await w(_delta(" b") + _delta(None, finish="stop") + DONE)
    else:
        raise web.HTTPBadRequest(text=f"unknown scenario {scenario!r}")
    try:
        await resp.write_eof()
    except ConnectionError:
        pass
    return resp


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_post("/v1/completions", handle)

    async def metrics(_r: web.Request) -> web.Response:
        return web.Response(text="# HELP x\nllmbench:num_requests_waiting 0\nllmbench:num_requests_running{a=\"b\"} 0\n")

    app.router.add_get("/metrics", metrics)
    return app


def serve_forever() -> None:  # python tests/test_client.py
    async def main() -> None:
        runner = web.AppRunner(make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:  # pragma: no cover
        asyncio.run(main())


# ==================================== fixtures ===================================================
@pytest.fixture
async def server() -> AsyncIterator[str]:
    async with serve_app(make_app()) as url:
        yield url


def start_server_process() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1"


@pytest.fixture(scope="module")
def server_process() -> Iterator[str]:
    proc, url = start_server_process()
    yield url
    proc.terminate()
    proc.wait(10)


def spec(prompt: str, max_tokens: int = 16, **kw: object) -> RequestSpec:
    return RequestSpec(index=0, workload="test", input_tokens=3, max_tokens=max_tokens, prompt_text=prompt, **kw)  # type: ignore[arg-type]


async def send(url: str, prompt: str, **cfg: object) -> object:
    config = ClientConfig(base_url=url, model="m", **cfg)  # type: ignore[arg-type]
    async with LLMClient(config) as c:
        return await c.send(spec(prompt))


# ================================ functional tests ===============================================
@pytest.mark.parametrize("transport", ["aiohttp", "httpx-aiohttp", "httpx"])
async def test_normal_chat_stream_all_transports(server: str, transport: str) -> None:
    r = await send(server, "normal", transport=transport)
    assert r.ok, r.error_message
    assert r.status == 200 and r.finish_reason == "stop"
    assert r.chunk_text == ["", " one", " two", ""]  # role chunk and finish chunk are chunks too
    assert r.chunk_tokens == [0, 1, 1, 0] and r.output_tokens_client == 2
    assert r.input_tokens_server == 5 and r.output_tokens_server == 2 and r.cached_tokens == 3
    assert r.usage["total_tokens"] == 7
    assert r.first_chunk_ns == r.chunk_ns[0] and r.first_token_ns == r.chunk_ns[1]
    assert r.sent_ns < r.first_chunk_ns <= r.end_ns and r.tokenizer == "cl100k_base"


async def test_completions_stream_and_usage_on_finish_chunk(server: str) -> None:
    r = await send(server, "normal", api="completions")
    assert r.ok and r.chunk_text == [" one", " two", ""] and r.output_tokens_server == 2
    assert r.finish_reason == "length" and r.input_tokens_server == 4


async def test_first_token_rule_skips_role_empty_and_whitespace_chunks(server: str) -> None:
    r = await send(server, "ttft:0.03")
    assert r.ok
    assert r.chunk_text[:5] == ["", "", "  ", "\n", " real"]
    # TTFT is the time of the " real" chunk, not of the role-only/empty/whitespace chunks
    assert r.first_token_ns == r.chunk_ns[4]
    assert r.first_chunk_ns == r.chunk_ns[0] < r.chunk_ns[2] < r.first_token_ns
    # the whitespace chunks were 30 ms apart on the server: they really arrived earlier
    assert r.first_token_ns - r.chunk_ns[2] > (r.chunk_ns[2] - r.chunk_ns[0]) / 4


async def test_multi_token_chunks_get_their_token_counts(server: str) -> None:
    r = await send(server, "multi")
    tok = get_tokenizer()
    assert r.chunk_text == ["", " hello world", " the capital of France", " is", ""]
    assert r.chunk_tokens == [0, 2, 4, 1, 0]
    assert r.output_tokens_client == len(tok.encode("".join(r.chunk_text))) == 7


@given(texts=st.lists(st.text(alphabet="ab ", max_size=3), max_size=8), data=st.data())
def test_assign_chunk_tokens_gives_each_token_to_the_chunk_holding_its_first_character(
        texts: list[str], data: st.DataObject) -> None:
    """§4.6.3 by its definition, character by character, for any token starts (ascending, repeats
    allowed: a tokenizer that splits a character gives its start twice), empty chunks anywhere."""
    joined = "".join(texts)
    starts = sorted(data.draw(st.lists(st.integers(0, max(len(joined) - 1, 0)), max_size=12))) if joined else []
    owner = [i for i, t in enumerate(texts) for _ in t]  # the chunk of each character
    expected = [0] * len(texts)
    for s in starts:
        expected[owner[s]] += 1
    tok = type("Starts", (), {"token_starts": staticmethod(lambda text: list(starts))})()
    assert assign_chunk_tokens(tok, texts) == expected


def test_assign_chunk_tokens_token_straddling_chunks() -> None:
    tok = get_tokenizer()
    # "hello" split over two chunks is one token: it belongs to the chunk holding its first char
    assert assign_chunk_tokens(tok, ["hel", "lo", " world"]) == [1, 0, 1]
    assert assign_chunk_tokens(tok, ["", "", ""]) == [0, 0, 0]
    assert assign_chunk_tokens(tok, []) == []


@pytest.mark.parametrize("scenario", ["reasoning", "reasoning_alt"])
async def test_reasoning_chunks(server: str, scenario: str) -> None:
    r = await send(server, scenario)
    assert r.ok
    assert r.chunk_reasoning[1:3] == [" let me think", " hard"]
    assert r.chunk_text[1:4] == ["", "", " answer"]
    # reasoning-only chunks do not count as the first token (§5.1.3.1)
    assert r.first_token_ns == r.chunk_ns[3] > r.chunk_ns[1]
    assert r.chunk_tokens[1:4] == [3, 1, 1] and r.output_tokens_client == 5


async def test_non_streaming_chat_and_completions(server: str) -> None:
    r = await send(server, "plain", stream=False)
    assert r.ok and r.chunk_text == [" hello world"] and r.chunk_reasoning == ["think"]
    assert r.chunk_tokens == [3] and r.output_tokens_server == 2 and r.first_token_ns == r.end_ns
    r = await send(server, "plain", stream=False, api="completions")
    assert r.ok and r.chunk_text == [" hello world"] and r.chunk_tokens == [2]
    r = await send(server, "badjson", stream=False)
    assert r.error_type is ErrorType.PARSE


async def test_server_timing_collected(server: str) -> None:
    r = await send(server, "stamped:4", request_server_timing=True)
    assert r.ok and r.server_token_ns is not None and len(r.server_token_ns) == 4
    assert r.server_timing is not None
    assert {k: r.server_timing[k] for k in ("queue_ns", "prefill_ns", "preemptions")} == {
        "queue_ns": 1000, "prefill_ns": 2000, "preemptions": 0}
    assert "unix_minus_monotonic_ns" in r.server_timing
    r = await send(server, "stamped:4")  # not requested: the server sends none
    assert r.ok and r.server_token_ns is None


@pytest.mark.parametrize(
    ("scenario", "error_type", "chunks_kept", "message"),
    [
        ("http400", ErrorType.HTTP_4XX, 0, "scripted http400"),
        ("http429", ErrorType.RATE_LIMITED, 0, "scripted http429"),
        ("http500", ErrorType.HTTP_5XX, 0, "scripted http500"),
        ("http503", ErrorType.HTTP_5XX, 0, "HTTP 503"),
        ("malformed", ErrorType.PARSE, 2, "malformed JSON"),
        ("not_object", ErrorType.PARSE, 1, "not a JSON object"),
        ("bad_utf8", ErrorType.PARSE, 1, "invalid UTF-8"),
        ("no_done", ErrorType.PROTOCOL, 3, "without data: [DONE]"),
        ("cut_mid_event", ErrorType.PROTOCOL, 1, "inside an SSE event"),
        ("empty", ErrorType.PROTOCOL, 0, "empty stream"),
        ("wrong_ct", ErrorType.PROTOCOL, 0, "not text/event-stream"),
        ("reset", ErrorType.PROTOCOL, 2, ""),
        ("content_filter", ErrorType.REFUSED, 2, "content_filter"),
        ("error_event", ErrorType.HTTP_5XX, 1, "engine died"),
    ],
)
@pytest.mark.parametrize("transport", ["aiohttp", "httpx-aiohttp", "httpx"])
async def test_error_classes(server: str, transport: str, scenario: str, error_type: ErrorType,
                             chunks_kept: int, message: str) -> None:
    r = await send(server, scenario, transport=transport)
    assert r.error_type is error_type, (r.error_type, r.error_message)
    assert len(r.chunk_ns) == chunks_kept and len(r.chunk_tokens) == chunks_kept
    assert message in (r.error_message or "")
    assert r.end_ns is not None and r.end_ns >= r.sent_ns
    if chunks_kept:
        assert r.first_token_ns == r.chunk_ns[0]  # timed chunks survive the failure


async def test_read_and_total_timeouts(server: str) -> None:
    r = await send(server, "stall:5", read_timeout_s=0.2)
    assert r.error_type is ErrorType.TIMEOUT and r.chunk_text == [" one"]
    assert (r.end_ns - r.chunk_ns[0]) < 4e9
    r = await send(server, "trickle:100", total_timeout_s=0.3)  # reads never stall, total expires
    assert r.error_type is ErrorType.TIMEOUT and "total timeout" in r.error_message
    assert 2 <= len(r.chunk_ns) < 100


async def test_connect_error() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    for transport in ("aiohttp", "httpx-aiohttp", "httpx"):
        r = await send(f"http://127.0.0.1:{port}/v1", "normal", transport=transport)
        assert r.error_type is ErrorType.CONNECT, (transport, r.error_message)
        assert r.status is None


async def test_cancelled_request_keeps_its_chunks(server: str) -> None:
    config = ClientConfig(base_url=server, model="m")
    async with LLMClient(config) as c:
        from pytest_llmbench.common.records import RequestRecord

        sp = spec("stall:5")
        rec = RequestRecord.from_spec(sp)
        task = asyncio.create_task(c.send(sp, record=rec))
        while not rec.chunk_ns:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rec.error_type is ErrorType.CANCELLED and not rec.failed
    assert rec.chunk_text == [" one"] and rec.chunk_tokens == [1] and rec.end_ns is not None


async def test_api_key_from_env_never_leaks(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMB_TEST_KEY", SECRET)
    config = ClientConfig(base_url=server, model="m", api_key_env="LLMB_TEST_KEY")
    assert SECRET not in repr(config) and SECRET not in json.dumps(config.describe())
    async with LLMClient(config) as c:
        assert SECRET not in repr(c) and SECRET not in json.dumps(c.describe())
        r = await c.send(spec("auth"))
    assert r.error_type is ErrorType.HTTP_4XX
    assert "Bearer ***" in r.error_message and SECRET not in r.dumps()
    monkeypatch.delenv("LLMB_TEST_KEY")
    with pytest.raises(ValueError, match="LLMB_TEST_KEY") as ei:
        LLMClient(config)
    assert SECRET not in str(ei.value)
    with pytest.raises(ValueError, match="api_key_env"):
        ClientConfig(base_url=server, model="m", headers={"Authorization": "Bearer x"})


def test_build_body() -> None:
    cfg = ClientConfig(base_url="http://h/v1", model="m", request_server_timing=True)
    s = spec("hi", max_tokens=7, system_prompt="sys", min_tokens=7, ignore_eos=True, stop=("\n",), temperature=0.5)
    b = build_body(cfg, s)
    assert b["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    assert b["max_tokens"] == 7 and b["min_tokens"] == 7 and b["ignore_eos"] is True
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
    assert b["llmbench_timing"] is True and b["stop"] == ["\n"] and b["temperature"] == 0.5
    b = build_body(ClientConfig(base_url="http://h/v1", model="m", send_extra_fields=False, stream=False), s)
    assert "min_tokens" not in b and "ignore_eos" not in b and "stream_options" not in b
    assert "llmbench_timing" not in b
    comp = ClientConfig(base_url="http://h/v1", model="m", api="completions", token_id_prompts=True)
    assert build_body(comp, spec("hi", prompt_ids=(1, 2, 3)))["prompt"] == [1, 2, 3]
    assert build_body(comp, spec("hi"))["prompt"] == "hi"  # no ids: text
    assert build_body(comp, spec("hi", prompt_ids=(1,), system_prompt="S"), system_ids=[9])["prompt"] == [9, 1]
    text = ClientConfig(base_url="http://h/v1", model="m", api="completions")
    assert build_body(text, spec("hi", prompt_ids=(1,), system_prompt="S: "))["prompt"] == "S: hi"
    with pytest.raises(ValueError, match="api must be"):
        ClientConfig(base_url="http://h", model="m", api="embeddings")
    with pytest.raises(ValueError, match="transport must be"):
        ClientConfig(base_url="http://h", model="m", transport="requests")


async def test_body_on_the_wire(server: str) -> None:
    r = await send(server, "echo", extra_body={"top_p": 0.9})
    wire = json.loads(r.chunk_text[0])
    assert wire["model"] == "m" and wire["top_p"] == 0.9 and wire["stream_options"] == {"include_usage": True}


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="llama.cpp SSE captures not available")
async def test_llama_cpp_captures_through_the_client(server: str) -> None:
    r = await send(server, "capture:llama-server_chat_stream.sse")
    assert r.ok and r.chunk_text[0] == "" and r.usage and r.output_tokens_server == r.usage["completion_tokens"]
    assert r.first_token_ns == r.chunk_ns[1]
    r = await send(server, "capture:llama-server_completions_stream.sse", api="completions")
    assert r.ok and r.cached_tokens == 1 and r.server_timing["timings"]["predicted_n"] == 4
    assert r.chunk_text == [" the", " capital", " of", " the", ""]
    r = await send(server, "capture:llama-server_stop_string_stream.sse", api="completions")
    i = r.chunk_text.index(" capital of")
    assert r.ok and r.chunk_tokens[i] == 2 and r.chunk_tokens[i - 1] == 0  # held-back tokens together


# ================================ timing (server in its own process) ============================
async def test_arrival_after_server_send_time(server_process: str) -> None:
    """Every chunk arrives (client perf_counter_ns) after the server stamped it (monotonic_ns):
    both are CLOCK_MONOTONIC on Linux, so they compare directly (§4.7.1)."""
    config = ClientConfig(base_url=server_process, model="m", request_server_timing=True)
    async with LLMClient(config) as c:
        for gap in ("", "0.005"):
            r = await c.send(spec(f"stamped:40,{gap}" if gap else "stamped:40"))
            assert r.ok, r.error_message
            tok_chunks = [i for i, t in enumerate(r.chunk_text) if t]
            assert len(tok_chunks) == 40 == len(r.server_token_ns)
            for i, server_ns in zip(tok_chunks, r.server_token_ns):
                assert r.chunk_ns[i] > server_ns
            assert r.sent_ns < r.server_token_ns[0]
            if gap:  # with gaps between writes, chunks are timed as they arrive, not at the end:
                # by order, not by duration, some arrive before the server wrote its last one
                # (a client that read the whole body first would time none of them before it)
                early = sum(r.chunk_ns[i] < r.server_token_ns[-1] for i in tok_chunks)
                assert early >= 1, early


if __name__ == "__main__":
    serve_forever()


def test_procedure_client_waits_for_the_first_byte_as_long_as_llm_timeout(tmp_path: Path) -> None:
    """A saturated server may send nothing until it starts the prefill: ``--llm-timeout`` bounds that wait.

    A fixed 120 s cap on the silence made 2 requests of a 5.1 run against llama-server (1000 requests,
    Poisson 0.3 req/s, 2 cores, TTFT P99 above 100 s) time out although the tester allowed 300 s.
    """
    from pytest_llmbench.procedures.base import ProcedureContext
    from pytest_llmbench.procedures.run import client_for
    from pytest_llmbench.settings import Settings
    from pytest_llmbench.sut.system import SUT

    async def no_capacity(kind: str) -> Any:
        raise AssertionError(kind)

    for timeout in (30.0, 300.0, 900.0):
        ctx = ProcedureContext(sut=SUT(base_url="http://127.0.0.1:9/v1", model="m", api="completions"),
                               settings=Settings(report=tmp_path, timeout=timeout), tokenizer=get_tokenizer(),
                               run_root=tmp_path, get_capacity=no_capacity, configure_sut=lambda s, v: False)
        config = client_for(ctx).config
        assert config.read_timeout_s == config.total_timeout_s == timeout
