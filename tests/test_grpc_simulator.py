"""The simulator's gRPC front (issue 51): ``python -m pytest_llmbench.simulator --grpc-port P`` and
``start_simulator(grpc_port=...)`` serve the ``VllmEngine`` service of smg-grpc-proto on the same engine as
the HTTP app; a gRPC record is the SSE record of the same request (App. B.1.2)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc
from test_grpc import MODEL, _send_all, _spec

from pytest_llmbench.client.transports.grpc import TTFT_RULE_IDS
from pytest_llmbench.common.records import TTFT_RULE, ErrorType
from pytest_llmbench.measure import tokencount
from pytest_llmbench.simulator.config import SimConfig
from pytest_llmbench.simulator.process import SimulatorProcess, start_simulator
from pytest_llmbench.sut.system import SUT


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with start_simulator(SimConfig(time_scale=0.1), grpc_port=0) as s:
        yield s


def test_simulator_serves_grpc_and_http_from_one_engine(sim: SimulatorProcess) -> None:
    assert sim.grpc_url is not None and sim.grpc_url.startswith("grpc://127.0.0.1:")
    before = sim.metrics()["llmbench:requests_finished_total"]
    [g] = asyncio.run(_send_all(sim.grpc_url, [_spec(0)]))
    [h] = asyncio.run(_send_all(sim.base_url, [_spec(1)]))
    assert g.ok and h.ok, (g.error_message, h.error_message)
    assert sim.metrics()["llmbench:requests_finished_total"] == before + 2  # both through the one engine
    with grpc.insecure_channel(sim.grpc_url[len("grpc://"):]) as ch:
        stub = pb_grpc.VllmEngineStub(ch)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
        assert (info.served_model_name, info.tokenizer_path, info.max_context_length) == (
            MODEL, "cl100k_base", sim.config.context_window)
        assert stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=5).server_type == "llmbench-sim-grpc"
        assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy


def test_grpc_record_is_the_sse_record(sim: SimulatorProcess) -> None:
    """T_submit < T_first, one chunk per message with its exact token count (server-token-ids), the text
    decoded with the ids' tokenizer, finish reason and usage; the same output as over SSE (same seed)."""
    assert sim.grpc_url is not None
    specs = [_spec(i, f"prompt number {i} about the printing press", max_tokens=12, ignore_eos=True)
             for i in range(6)]
    grpc_recs = asyncio.run(_send_all(sim.grpc_url, specs, output_tokenizer="cl100k_base"))
    sse_recs = asyncio.run(_send_all(sim.base_url, specs))
    for g, h in zip(grpc_recs, sse_recs):
        assert g.ok, g.error_message
        assert g.queued_ns is not None and g.queued_ns <= g.sent_ns < g.first_token_ns <= g.end_ns
        assert g.first_chunk_ns == g.chunk_ns[0] and g.chunk_ns == sorted(g.chunk_ns)
        assert g.chunk_tokens == [1] * 12 and g.output_tokens_client == g.output_tokens_server == 12
        assert g.token_count_method == tokencount.TOKEN_IDS and g.ttft_rule == TTFT_RULE
        assert g.finish_reason == h.finish_reason == "length"
        assert g.input_tokens_server == h.input_tokens_server
        assert g.output_text == h.output_text  # the same engine, the same seeded output
        assert len(g.chunk_text) == len(g.chunk_reasoning) == len(g.chunk_ns)
        assert g.status == 0 and g.usage == {"prompt_tokens": h.input_tokens_server, "completion_tokens": 12}


def test_without_a_decoder_records_count_and_time_the_ids(sim: SimulatorProcess) -> None:
    assert sim.grpc_url is not None
    [r] = asyncio.run(_send_all(sim.grpc_url, [_spec(0, max_tokens=5, ignore_eos=True)], tokenizer=None))
    assert r.ok and r.ttft_rule == TTFT_RULE_IDS and r.first_token_ns == r.chunk_ns[0]
    assert r.chunk_text == [""] * 5 and r.chunk_tokens == [1] * 5 and r.output_tokens == 5


def test_the_sut_names_its_protocol(sim: SimulatorProcess) -> None:
    assert sim.grpc_url is not None
    assert SUT(base_url=sim.grpc_url, model=MODEL).to_json()["protocol"] == "grpc"
    assert SUT(base_url=sim.base_url, model=MODEL).protocol == "sse"


def test_simulator_queue_full_is_rate_limited_over_grpc() -> None:
    """The simulator's 429 (waiting queue full) is RESOURCE_EXHAUSTED on its gRPC front: rate_limited."""
    cfg = SimConfig(time_scale=1.0, max_num_seqs=1, max_waiting=1)
    with start_simulator(cfg, grpc_port=0) as s:
        assert s.grpc_url is not None
        recs = asyncio.run(_send_all(s.grpc_url, [_spec(i, max_tokens=64, ignore_eos=True) for i in range(6)]))
    kinds = [r.error_type for r in recs]
    assert len(recs) == 6 and ErrorType.RATE_LIMITED in kinds and None in kinds
    assert all(k in (None, ErrorType.RATE_LIMITED) for k in kinds)
    assert all(r.error_message.startswith("gRPC RESOURCE_EXHAUSTED") for r in recs if r.error_type)


def test_simulator_cli_announces_its_grpc_port() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "pytest_llmbench.simulator", "--port", "0", "--grpc-port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().split(), proc.stdout.readline().split()]
        assert lines[0][0] == "LLMBENCH_SIMULATOR_LISTENING" and lines[1][0] == "LLMBENCH_SIMULATOR_GRPC_LISTENING"
        with grpc.insecure_channel(f"127.0.0.1:{lines[1][2]}") as ch:
            assert pb_grpc.VllmEngineStub(ch).HealthCheck(pb.HealthCheckRequest(), timeout=10).healthy
        with urllib.request.urlopen(f"http://127.0.0.1:{lines[0][2]}/health", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(20)




def test_a_grpc_endpoint_describes_itself_to_the_session(sim: SimulatorProcess) -> None:
    """A grpc:// SUT (the simulator started by hand): model, kind, window and the ids' tokenizer come from
    GetModelInfo / GetServerInfo; another model, or no answer, is an EndpointError before any request."""
    from pytest_llmbench.session import _grpc_endpoint
    from pytest_llmbench.sut.adapters.serving import free_port
    from pytest_llmbench.sut.system import EndpointError, identify_grpc_server

    assert sim.grpc_url is not None
    sut = SUT(base_url=sim.grpc_url, model="")
    identify_grpc_server(sut, _grpc_endpoint(sut, None))
    assert (sut.model, sut.models_listed, sut.server_kind) == (MODEL, [MODEL], "openai-compatible")
    assert sut.server_kind_source == "gRPC GetServerInfo server_type='llmbench-sim-grpc'"
    info = sut.server_info
    assert info["context_window"] == sim.config.context_window and info["output_tokenizer"] == "cl100k_base"
    with pytest.raises(EndpointError, match="it serves 'llmbench-sim'"):
        _grpc_endpoint(SUT(base_url=sim.grpc_url, model=""), "other-model")
    with pytest.raises(EndpointError, match="did not describe itself"):
        _grpc_endpoint(SUT(base_url=f"grpc://127.0.0.1:{free_port()}", model=""), None)
