"""gRPC streaming (§4.6.1, App. B.1.2; issue 51): the ``grpc`` extra, and the gRPC transport's records
and error map against a gRPC server of this file (on the test's event loop) that aborts, times out,
returns RESOURCE_EXHAUSTED and UNAVAILABLE, ... (the simulator's gRPC front: test_grpc_simulator.py; the
compliance items: test_grpc_compliance.py).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.client.errors import GRPC_STATUS_MAP, classify_grpc_status
from pytest_llmbench.client.transports.grpc import DECODE_WINDOW, TTFT_RULE_IDS, generate_request, split_text
from pytest_llmbench.common.records import ErrorType, RequestRecord, RequestSpec
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.measure import tokencount
from pytest_llmbench.settings import LLMBenchConfigError, grpc_missing

MODEL = "llmbench-sim"


def _spec(i: int, text: str = "hello there my friend", max_tokens: int = 8, **kw: Any) -> RequestSpec:
    return RequestSpec(index=i, workload="grpc", input_tokens=5, max_tokens=max_tokens, prompt_text=text, **kw)


async def _send_all(url: str, specs: list[RequestSpec], **cfg: Any) -> list[RequestRecord]:
    config = ClientConfig(base_url=url, model=MODEL, api="completions", **cfg)
    async with LLMClient(config) as client:
        return list(await asyncio.gather(*(client.send(s) for s in specs)))


# --- the extra ------------------------------------------------------------------------------------
def test_grpc_endpoint_without_the_extra_is_a_usage_error_naming_it(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "smg_grpc_proto", None)  # importlib.util.find_spec -> None: not installed
    assert grpc_missing() == "the grpc extra (smg-grpc-proto not installed): pip install 'pytest-llmbench[grpc]'"
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--llm-endpoint", "grpc://127.0.0.1:50051", "--llm-boundary", "model-engine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("a gRPC endpoint (grpc://127.0.0.1:50051) needs the grpc extra (smg-grpc-proto not installed): "
            "pip install 'pytest-llmbench[grpc]'") in result.stderr.str()


def test_grpc_endpoint_needs_completions_and_host_port() -> None:
    from pytest_llmbench.settings import resolve

    def settings(**cli: Any) -> Any:
        return resolve(lambda dest: cli.get(dest), lambda ini: None, environ={})

    assert settings(llm_endpoint="grpc://127.0.0.1:50051").grpc
    assert settings(llm_endpoint="grpc://embedded").embedded
    with pytest.raises(LLMBenchConfigError, match="takes completions prompts"):
        settings(llm_endpoint="grpc://127.0.0.1:50051", llm_api="chat")
    with pytest.raises(LLMBenchConfigError, match="grpc://host:port"):
        settings(llm_endpoint="grpc://127.0.0.1/v1")
    with pytest.raises(LLMBenchConfigError, match="has no HTTP phases"):
        settings(llm_endpoint="grpc://embedded", llm_http_trace=True)
    with pytest.raises(ValueError, match="not chat messages"):
        ClientConfig(base_url="grpc://127.0.0.1:1", model=MODEL, api="chat")


def test_the_sse_path_never_imports_grpc() -> None:
    """A whole SSE request (client, transports, reader, the simulator's HTTP app) without grpc in sys.modules."""
    code = """
import asyncio, sys
from pytest_llmbench import plugin, session  # the plugin as pytest loads it
from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.simulator.process import start_simulator
with start_simulator() as sim:
    async def go():
        async with LLMClient(ClientConfig(base_url=sim.base_url, model="llmbench-sim", api="completions")) as c:
            return await c.send(RequestSpec(index=0, workload="w", input_tokens=3, max_tokens=4, prompt_text="a b c"))
    rec = asyncio.run(go())
assert rec.ok, rec.error_message
print(sorted(m for m in sys.modules if m.split(".")[0] in ("grpc", "smg_grpc_proto")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --- the error map against a gRPC server that fails -------------------------------------------------
class _Faulty(pb_grpc.VllmEngineServicer):
    """Generate fails as the prompt text says: ``<fault>`` or ``<fault>-after`` (after one chunk)."""

    async def Generate(self, request: pb.GenerateRequest,  # noqa: N802
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        fault, _, when = request.text.partition("-")
        if when == "after":
            yield pb.GenerateResponse(chunk=pb.GenerateStreamChunk(token_ids=[11], prompt_tokens=3,
                                                                   completion_tokens=1))
        if fault == "ok":
            yield pb.GenerateResponse(complete=pb.GenerateComplete(output_ids=[11], finish_reason="stop",
                                                                   prompt_tokens=3, completion_tokens=1))
        elif fault == "slow":
            await asyncio.sleep(30)  # cancelled with the call
        elif fault == "raise":
            raise RuntimeError("boom")  # grpc: UNKNOWN
        elif fault == "empty":
            yield pb.GenerateResponse()  # neither chunk nor complete
        elif fault == "nocomplete":
            return
        else:
            await context.abort(getattr(grpc.StatusCode, fault), f"{fault} by the test server")


@pytest.fixture
async def faulty() -> AsyncIterator[str]:
    server = grpc.aio.server()
    pb_grpc.add_VllmEngineServicer_to_server(_Faulty(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        await server.stop(0)


#: prompt -> (error type, start of the message) of the record
FAULTS = {
    "ok": (None, None),
    "ok-after": (None, None),
    # past the total timeout: the client's own timer or the call's deadline (the same time), whichever first
    "slow": (ErrorType.TIMEOUT, None),
    "slow-after": (ErrorType.TIMEOUT, None),
    "DEADLINE_EXCEEDED": (ErrorType.TIMEOUT, "gRPC deadline exceeded: gRPC DEADLINE_EXCEEDED"),
    "DEADLINE_EXCEEDED-after": (ErrorType.TIMEOUT, "gRPC deadline exceeded mid-stream: gRPC DEADLINE_EXCEEDED"),
    "RESOURCE_EXHAUSTED": (ErrorType.RATE_LIMITED, "gRPC RESOURCE_EXHAUSTED: RESOURCE_EXHAUSTED by the test server"),
    "UNAVAILABLE": (ErrorType.CONNECT, "gRPC server unavailable: gRPC UNAVAILABLE"),
    "UNAVAILABLE-after": (ErrorType.PROTOCOL, "server closed the connection mid-stream: gRPC UNAVAILABLE"),
    "INTERNAL": (ErrorType.HTTP_5XX, "gRPC INTERNAL: INTERNAL by the test server"),
    "INTERNAL-after": (ErrorType.HTTP_5XX, "gRPC INTERNAL"),
    "raise": (ErrorType.HTTP_5XX, "gRPC UNKNOWN"),
    "ABORTED": (ErrorType.HTTP_5XX, "the server aborted the request: gRPC ABORTED"),
    "CANCELLED": (ErrorType.CANCELLED, "gRPC CANCELLED"),
    "INVALID_ARGUMENT": (ErrorType.HTTP_4XX, "gRPC INVALID_ARGUMENT"),
    "DATA_LOSS": (ErrorType.HTTP_5XX, "gRPC DATA_LOSS"),
    "empty": (ErrorType.PROTOCOL, "gRPC GenerateResponse with neither chunk nor complete"),
    "nocomplete-after": (ErrorType.PROTOCOL, "gRPC stream ended without GenerateComplete"),
    "nocomplete": (ErrorType.PROTOCOL, "gRPC stream ended without a response message"),
}


async def test_each_grpc_failure_gives_its_error_type_and_every_request_a_record(faulty: str) -> None:
    copies = 3  # each fault sent three times, all at once (not a retry: every copy is asserted)
    prompts = [p for p in FAULTS for _copy in range(copies)]
    specs = [_spec(i, p) for i, p in enumerate(prompts)]
    recs = await _send_all(faulty, specs, total_timeout_s=3.0, tokenizer=None)  # room for a busy host
    assert len(recs) == len(specs) and sorted(r.index for r in recs) == list(range(len(specs)))
    for p, r in zip(prompts, recs):
        want, message = FAULTS[p]
        assert r.error_type is want, (p, r.error_type, r.error_message)
        if message is not None:
            assert r.error_message is not None and r.error_message.startswith(message), (p, r.error_message)
        assert r.sent_ns and r.end_ns is not None and r.end_ns >= r.sent_ns
        if p.endswith("-after"):  # the chunk before the failure is kept, timed
            assert r.chunk_tokens == [1] and r.first_token_ns == r.chunk_ns[0]


async def test_an_unreachable_grpc_endpoint_is_connect() -> None:
    from pytest_llmbench.sut.adapters.serving import free_port

    recs = await _send_all(f"grpc://127.0.0.1:{free_port()}", [_spec(0), _spec(1)], tokenizer=None)
    assert [r.error_type for r in recs] == [ErrorType.CONNECT] * 2
    assert all(r.status == grpc.StatusCode.UNAVAILABLE.value[0] for r in recs)


def test_status_map_covers_the_brief() -> None:
    assert {c.name for c in grpc.StatusCode} - {"OK"} == set(GRPC_STATUS_MAP)
    assert classify_grpc_status("NEW_CODE", "x", mid_stream=False).error_type is ErrorType.PROTOCOL




async def test_a_record_from_messages(faulty: str) -> None:
    """T_submit before T_first, a chunk per message with its id count, the complete message's finish reason
    and usage; without a decoder the first message with a token id is T_first (App. B.1.2)."""
    [r] = await _send_all(faulty, [_spec(0, "ok-after")], tokenizer=None)
    assert r.ok and r.queued_ns is not None and r.queued_ns <= r.sent_ns < r.first_token_ns <= r.end_ns
    assert r.chunk_tokens == [1] and r.chunk_text == [""] and r.ttft_rule == TTFT_RULE_IDS
    assert r.finish_reason == "stop" and r.usage == {"prompt_tokens": 3, "completion_tokens": 1}
    assert r.token_count_method == tokencount.TOKEN_IDS and r.output_tokens == 1 and r.status == 0


def test_client_describes_the_protocol() -> None:
    client = LLMClient(ClientConfig(base_url="grpc://127.0.0.1:1", model=MODEL, api="completions"))
    assert client.describe()["protocol"] == "grpc" and client.transport_name == "grpc"
    assert LLMClient(ClientConfig(base_url="http://127.0.0.1:1/v1", model=MODEL)).describe()["protocol"] == "sse"


# --- pieces ---------------------------------------------------------------------------------------
def test_generate_request_from_a_completions_body() -> None:
    ids = generate_request({"prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0.0, "min_tokens": 2,
                            "ignore_eos": True, "stop": ["\n"], "stream": True}, "r1")
    assert list(ids.tokenized.input_ids) == [1, 2, 3] and ids.WhichOneof("input") == "tokenized"
    sp = ids.sampling_params
    assert (sp.max_tokens, sp.temperature, sp.min_tokens, sp.ignore_eos, list(sp.stop), ids.stream) == (
        7, 0.0, 2, True, ["\n"], True)
    text = generate_request({"prompt": "hi", "stream": False}, "r2")
    assert text.text == "hi" and not text.sampling_params.HasField("max_tokens") and not text.stream


def test_split_text_gives_a_split_character_to_the_chunk_that_completes_it() -> None:
    tok = get_tokenizer()
    ids = tok.encode("naïve café ☕ done")
    bounds = list(range(1, len(ids) + 1))
    parts = split_text(tok.decode, ids, bounds)
    assert "".join(parts) == "naïve café ☕ done" and "\ufffd" not in "".join(parts)
    assert len(parts) == len(ids)


def _prefix_split(decode: Any, ids: list[int], bounds: list[int]) -> list[str]:
    """Each chunk's text as the growth of the whole prefix's decode (the definition split_text keeps)."""
    out, done = [], 0
    for b in bounds:
        text = decode(ids[:b]) if b else ""
        text = text.rstrip("\ufffd") if b < len(ids) else text
        out.append(text[done:] if len(text) > done else "")
        done = max(done, len(text))
    return out


@pytest.mark.parametrize("step", [1, 2, 5])
def test_split_text_in_a_sliding_window_is_the_prefix_growth(step: int) -> None:
    """Past DECODE_WINDOW ids the window slides; each chunk's text stays the whole prefix's growth."""
    tok = get_tokenizer()
    text = " ".join(["naïve café ☕ 東京 done,", "émoji 👩‍💻 and   spaces\n"] * 12)
    ids = tok.encode(text)
    assert len(ids) > 4 * DECODE_WINDOW
    bounds = list(range(step, len(ids), step)) + [len(ids)]
    parts = split_text(tok.decode, ids, bounds)
    assert parts == _prefix_split(tok.decode, ids, bounds) and "".join(parts) == text




def test_the_http_root_beside_a_grpc_endpoint() -> None:
    """/metrics of a server with an HTTP side beside its gRPC one (the embedded simulator's)."""
    cfg = ClientConfig(base_url="grpc://127.0.0.1:1", model=MODEL, api="completions", http_root="http://127.0.0.1:2")
    assert LLMClient(cfg).server_root == "http://127.0.0.1:2"
    assert LLMClient(ClientConfig(base_url="grpc://127.0.0.1:1", model=MODEL, api="completions")).server_root == \
        "grpc://127.0.0.1:1"


def test_vllm_grpc_server_command_and_endpoint(tmp_path: Path) -> None:
    """``serve --grpc``: vLLM's gRPC launcher with the engine's arguments only, a grpc:// endpoint."""
    from pytest_llmbench.sut.adapters.vllm.server import GRPC_PACKAGES, Installation, VllmServer

    server = VllmServer(Installation(python=tmp_path / "python", model=tmp_path / "model"), port=50051, grpc=True)
    cmd = server.command()
    assert cmd[1:3] == ["-m", "vllm.entrypoints.launchers.grpc_server"] and "--enable-prompt-tokens-details" not in cmd
    assert cmd[cmd.index("--port") + 1] == "50051" and server.endpoint == "grpc://127.0.0.1:50051"
    assert "smg-grpc-servicer==0.14.1" in GRPC_PACKAGES and "smg-grpc-proto==0.4.28" in GRPC_PACKAGES
