"""The simulator's HTTP surface, through a real subprocess: OpenAI chunk shapes, the official
``openai`` client, usage and token counts, the timing extension, errors, /metrics, /admin."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.measure.telemetry import read_samples
from pytest_llmbench.simulator import SimConfig, SimulatorError, start_simulator
from pytest_llmbench.simulator.app import Simulator
from pytest_llmbench.simulator.process import SimulatorProcess

MODEL = "llmbench-sim"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with start_simulator(SimConfig(time_scale=0.05, eos_mean_tokens=40, seed=11)) as s:
        yield s


def sse_events(r: httpx.Response) -> list[Any]:
    out: list[Any] = []
    for line in r.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return out


def post_stream(sim: SimulatorProcess, path: str, body: dict[str, Any]) -> tuple[list[Any], list[int]]:
    """Events and the client perf_counter_ns arrival time of each."""
    events, times = [], []
    with httpx.Client(timeout=30) as c, c.stream("POST", sim.base_url + path, json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                times.append(time.perf_counter_ns())
                events.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return events, times


# ----------------------------------------------------------------------------- shapes
def test_chat_stream_chunk_shapes_and_usage(sim: SimulatorProcess) -> None:
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something long."}]
    ev, _ = post_stream(sim, "/chat/completions", {
        "model": MODEL, "messages": msgs, "max_tokens": 30, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}})
    assert ev[-1] == "[DONE]"
    first, *content, finish, usage = ev[:-1]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    for e in [first, *content, finish, usage]:
        assert e["object"] == "chat.completion.chunk" and e["model"] == MODEL and e["id"] == first["id"]
    assert all(e["choices"][0]["finish_reason"] is None and set(e["choices"][0]["delta"]) == {"content"}
               for e in content)
    assert finish["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    assert usage["choices"] == []
    tok = get_tokenizer()
    text = "".join(e["choices"][0]["delta"]["content"] for e in content)
    n_prompt = sum(len(tok.encode(m["content"])) for m in msgs)  # no chat-template overhead
    assert usage["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 30, "total_tokens": n_prompt + 30}
    assert len(content) == 30 and len(tok.encode(text)) == 30


def test_completions_stream_with_token_ids_and_eos(sim: SimulatorProcess) -> None:
    finishes = []
    for i in range(12):
        ev, _ = post_stream(sim, "/completions", {
            "model": MODEL, "prompt": [100 + i, 200, 300, 400, 500], "max_tokens": 60, "stream": True,
            "temperature": 0.0, "stream_options": {"include_usage": True}})
        *content, finish, usage, done = ev
        assert done == "[DONE]"
        assert all(e["object"] == "text_completion" and e["choices"][0]["finish_reason"] is None for e in content)
        text = "".join(e["choices"][0]["text"] for e in content)
        u = usage["usage"]
        assert u["prompt_tokens"] == 5 and u["completion_tokens"] == len(content)
        assert len(get_tokenizer().encode(text)) == u["completion_tokens"]
        reason = finish["choices"][0]["finish_reason"]
        assert (reason == "length") == (u["completion_tokens"] == 60)
        finishes.append(reason)
    assert "stop" in finishes  # the EOS draw (mean 40) ends some requests before max_tokens


def test_non_streaming_and_greedy_determinism(sim: SimulatorProcess) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_completion_tokens": 25,
            "temperature": 0}
    a = httpx.post(sim.base_url + "/chat/completions", json=body, timeout=30).json()
    b = httpx.post(sim.base_url + "/chat/completions", json=body, timeout=30).json()
    assert a["object"] == "chat.completion"
    assert a["choices"][0]["message"]["role"] == "assistant"
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["usage"]["completion_tokens"] == len(get_tokenizer().encode(a["choices"][0]["message"]["content"]))
    c = httpx.post(sim.base_url + "/completions", json={"model": MODEL, "prompt": "hi there", "max_tokens": 5,
                                                        "ignore_eos": True, "seed": 4, "temperature": 1.0}).json()
    assert c["object"] == "text_completion" and c["usage"] == {"prompt_tokens": 2, "completion_tokens": 5,
                                                                  "total_tokens": 7}


def test_min_tokens_and_stop(sim: SimulatorProcess) -> None:
    r = httpx.post(sim.base_url + "/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 80,
                                                        "min_tokens": 70, "seed": 1}).json()
    assert r["usage"]["completion_tokens"] >= 70
    full = httpx.post(sim.base_url + "/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 40,
                                                           "ignore_eos": True, "seed": 2}).json()
    word = full["choices"][0]["text"].split(" ")[5]
    s = httpx.post(sim.base_url + "/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 40,
                                                        "ignore_eos": True, "seed": 2, "stop": [" " + word]}).json()
    assert s["choices"][0]["finish_reason"] == "stop"
    assert s["choices"][0]["text"] == full["choices"][0]["text"].split(" " + word)[0]


def test_openai_client_streams_chat_and_completions(sim: SimulatorProcess) -> None:
    client = openai.OpenAI(base_url=sim.base_url, api_key="not-needed", max_retries=0)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count"}], max_tokens=12, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    assert len(get_tokenizer().encode(text)) == 12
    comp = list(client.completions.create(model=MODEL, prompt="count", max_tokens=7, stream=True,
                                          extra_body={"ignore_eos": True}))
    assert comp[-1].choices[0].finish_reason == "length"
    assert len("".join(c.choices[0].text for c in comp).split()) == 7
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


async def test_openai_async_client_concurrent_streams(sim: SimulatorProcess) -> None:
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0)

    async def one(i: int) -> int:
        n = 0
        stream = await client.completions.create(model=MODEL, prompt=[i + 1] * 20, max_tokens=20, stream=True,
                                                 extra_body={"ignore_eos": True})
        async for c in stream:
            n += bool(c.choices and c.choices[0].text)
        return n

    assert await asyncio.gather(*(one(i) for i in range(16))) == [20] * 16
    await client.close()


# ----------------------------------------------------------------------------- timing extension
def test_timing_extension_uses_the_clients_clock(sim: SimulatorProcess) -> None:
    t_send = time.perf_counter_ns()
    ev, arrivals = post_stream(sim, "/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "time me"}], "max_tokens": 10,
        "ignore_eos": True, "stream": True, "llmbench_timing": True})
    content = [(e, t) for e, t in zip(ev, arrivals) if e != "[DONE]" and e["choices"][0]["delta"].get("content")]
    assert len(content) == 10
    prev = t_send
    for e, t_arrive in content:
        lt = e["llmbench_timing"]
        assert len(lt["token_ns"]) == len(lt["token_unix_ns"]) == 1
        # CLOCK_MONOTONIC on both sides: emitted after the send, before the client saw it
        assert prev <= lt["token_ns"][0] <= t_arrive
        assert abs(lt["token_unix_ns"][0] - time.time_ns()) < 60e9
        prev = lt["token_ns"][0]
    fin = ev[-2]["llmbench_timing"]
    assert set(fin) >= {"queue_ns", "prefill_ns", "preemptions", "preempted_tokens", "cached_tokens"}
    first_token_ns = content[0][0]["llmbench_timing"]["token_ns"][0]
    assert t_send <= first_token_ns - fin["prefill_ns"] - fin["queue_ns"]
    assert fin["preemptions"] == 0
    # without the opt-in there is no timing field
    ev2, _ = post_stream(sim, "/completions", {"model": MODEL, "prompt": "x", "max_tokens": 3, "stream": True})
    assert all("llmbench_timing" not in e for e in ev2 if e != "[DONE]")


def test_tokens_per_chunk_runtime_switch(sim: SimulatorProcess) -> None:
    sim.set_config(tokens_per_chunk=4)
    try:
        ev, _ = post_stream(sim, "/completions", {"model": MODEL, "prompt": "x", "max_tokens": 10, "ignore_eos": True,
                                                  "stream": True, "llmbench_timing": True})
    finally:
        sim.set_config(tokens_per_chunk=1)
    content = [e for e in ev if e != "[DONE]" and e["choices"][0]["text"]]
    assert [len(e["llmbench_timing"]["token_ns"]) for e in content] == [4, 4, 2]
    assert [len(get_tokenizer().encode(e["choices"][0]["text"])) for e in content] == [4, 4, 2]


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("path,body,status,code", [
    ("/chat/completions", b"{not json", 400, "invalid_json"),
    ("/chat/completions", b"[1, 2]", 400, "invalid_json"),
    ("/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, 404, "model_not_found"),
    ("/chat/completions", {"messages": [{"role": "user", "content": "x"}]}, 400, "missing_required_parameter"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": -5},
     400, "invalid_value"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": "7"},
     400, "invalid_type"),
    ("/chat/completions", {"model": MODEL, "messages": []}, 400, "invalid_value"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "invalid_value"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": 9},
     400, "invalid_value"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 3},
     400, "invalid_value"),
    ("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                           "stream_options": {"include_usage": True}}, 400, "invalid_value"),
    ("/completions", {"model": MODEL, "prompt": [1] * 32000, "max_tokens": 1000}, 400, "context_length_exceeded"),
    ("/completions", {"model": MODEL, "prompt": "word " * 40000}, 400, "context_length_exceeded"),
    ("/completions", {"model": MODEL, "prompt": [1, -2]}, 400, "invalid_value"),
    ("/completions", {"model": MODEL, "prompt": ""}, 400, "invalid_value"),
    ("/completions", {"model": MODEL, "prompt": ["a", "b"]}, 400, "invalid_value"),
    ("/completions", {"model": MODEL, "prompt": "x", "min_tokens": 9, "max_tokens": 3}, 400, "invalid_value"),
    ("/nowhere", {}, 404, "not_found"),
])
def test_bad_input_gets_openai_error(sim: SimulatorProcess, path: str, body: Any, status: int, code: str) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(sim.base_url + path if path != "/nowhere" else sim.url + path, content=content,
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["code"] == code
    assert httpx.get(sim.url + "/health").status_code == 200  # still alive


def test_openai_client_sees_typed_errors(sim: SimulatorProcess) -> None:
    client = openai.OpenAI(base_url=sim.base_url, api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=MODEL, prompt=[5] * 32768, max_tokens=10)
    assert ei.value.code == "context_length_exceeded" and "maximum context length" in ei.value.message


def test_queue_overflow_gets_429_and_is_counted() -> None:
    cfg = SimConfig(time_scale=1.0, step_ms=100.0, max_num_seqs=1, max_waiting=2)
    with start_simulator(cfg) as s:
        async def go() -> list[int]:
            async with httpx.AsyncClient(timeout=30) as c:
                async def one() -> int:
                    r = await c.post(s.base_url + "/completions",
                                     json={"model": MODEL, "prompt": "x", "max_tokens": 3, "ignore_eos": True})
                    if r.status_code == 429:
                        assert r.json()["error"]["type"] == "rate_limit_error"
                    return r.status_code
                return await asyncio.gather(*(one() for _ in range(8)))
        codes = asyncio.run(go())
        # 2 waiting (+1 running once the engine has admitted one) fit; the rest overflow
        assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) == {200, 429}, codes
        m = s.metrics()
        assert m["llmbench:requests_rejected_queue_full_total"] == codes.count(429)
        assert m["llmbench:requests_finished_total"] == codes.count(200)


async def test_shutting_down_answers_503() -> None:
    app = Simulator(SimConfig(time_scale=0))
    await app.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as c:
            r = await c.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
            app.begin_shutdown()
            r = await c.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
            assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
            assert (await c.get("/health")).status_code == 503
    finally:
        await app.stop()


def test_client_disconnect_aborts_and_frees_kv() -> None:
    with start_simulator(SimConfig(time_scale=1.0, step_ms=5.0)) as s:
        with httpx.Client(timeout=30) as c, c.stream("POST", s.base_url + "/completions", json={
                "model": MODEL, "prompt": "x" * 100, "max_tokens": 500, "ignore_eos": True, "stream": True}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 6:
                    break
        for _ in range(200):
            m = s.metrics()
            if m["llmbench:requests_aborted_total"] == 1:
                break
            time.sleep(0.02)
        assert m["llmbench:requests_aborted_total"] == 1
        assert m["llmbench:num_requests_running"] == 0 and m["llmbench:kv_cache_blocks_used"] == 0


# ----------------------------------------------------------------------------- metrics / admin / process
def test_metrics_and_admin(sim: SimulatorProcess) -> None:
    r = httpx.get(sim.url + "/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    m = read_samples(r.text)
    for name in ("num_requests_waiting", "num_requests_running", "kv_cache_blocks_used", "kv_cache_blocks_total",
                 "num_preemptions_total", "requests_preempted_total", "preempted_tokens_total",
                 "prefix_cache_hit_tokens_total", "prefix_cache_queried_tokens_total", "requests_finished_total",
                 "requests_failed_total", "requests_refused_total"):
        assert f"llmbench:{name}" in m
    assert m["llmbench:kv_cache_blocks_total"] == SimConfig().kv_blocks_total
    cfg = httpx.get(sim.admin_url).json()
    assert cfg["seed"] == 11 and cfg["time_scale"] == 0.05
    new = httpx.post(sim.admin_url, json={"prefix_cache": False, "flush_prefix_cache": True,
                                          "guardrails": "input"}).json()
    assert new["prefix_cache"] is False and new["guardrails"] == "input"
    new = sim.set_config(prefix_cache=True, guardrails="none")
    assert new["prefix_cache"] is True and sim.config.guardrails == "none"
    for bad in ({"guardrails": "maybe"}, {"kv_capacity_tokens": 5}, {"prefix_cache": "yes"}):
        r = httpx.post(sim.admin_url, json=bad)
        assert r.status_code == 400 and r.json()["error"]["message"], bad


def test_read_samples() -> None:
    text = ('# HELP a A.\n# TYPE a counter\na_total 3\nb{z="1",a="x y"} 2.5 1700000000\n'
            'c +Inf\nvllm:num_requests_running{model_name="m"} 4\n\n')
    assert read_samples(text) == {"a_total": 3.0, 'b{a="x y",z="1"}': 2.5, "c": float("inf"),
                                  'vllm:num_requests_running{model_name="m"}': 4.0}
    with pytest.raises(ValueError, match="not Prometheus text exposition"):
        read_samples("what is this")


def test_start_failure_raises_with_stderr_tail() -> None:
    with pytest.raises(SimulatorError, match="(?s)exited.*(error|Error)"):
        start_simulator(SimConfig(), host="203.0.113.77", startup_timeout=30)  # TEST-NET: cannot bind


def test_cli_flags_and_config_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pytest_llmbench.simulator.server import build_parser, config_from_args

    f = tmp_path / "c.toml"
    f.write_text("step_ms = 3.5\nseed = 9\n")
    ns = build_parser().parse_args(["--config", str(f), "--time-scale", "0.2", "--chunked-prefill", "--seed", "4"])
    c = config_from_args(ns)
    assert (c.step_ms, c.seed, c.time_scale, c.chunked_prefill) == (3.5, 4, 0.2, True)
