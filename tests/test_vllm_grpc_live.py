"""Against vLLM's own gRPC server (issue 51: ``python -m vllm.entrypoints.launchers.grpc_server``, the
``VllmEngine`` service of smg-grpc-proto) on the project's CPU vLLM and local model. Marked ``real_sut`` and
``vllm``; the ``vllm_grpc_server`` fixture skips with the reason when the environment, the model or the gRPC
packages cannot be had. Structure and consistency only, never speed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.client.transports.grpc import describe_server
from pytest_llmbench.common.records import TTFT_RULE, RequestRecord, RequestSpec
from pytest_llmbench.measure import tokencount
from pytest_llmbench.sut.adapters.vllm.server import MODEL_NAME, VllmServer
from pytest_llmbench.sut.system import output_tokenizer

pytestmark = [pytest.mark.real_sut, pytest.mark.vllm]

SUITE = Path(__file__).resolve().parents[1] / "pytest_llmbench" / "suites" / "test_5_1_ttft.py"


def test_the_grpc_service_describes_itself(vllm_grpc_server: VllmServer) -> None:
    info = describe_server(vllm_grpc_server.endpoint)
    print(f"\nstart-up {vllm_grpc_server.startup_seconds:.0f} s; {json.dumps(info)}")
    assert info["served_model_name"] == MODEL_NAME  # server_type: "" from vLLM 0.32 + smg-grpc-servicer 0.14.1
    assert info["vocab_size"] == 32000 and info["context_window"] == vllm_grpc_server.max_model_len
    assert output_tokenizer(info["tokenizer_path"])[0] == f"hf:{vllm_grpc_server.installation.model}/tokenizer.json"


def _send(endpoint: str, specs: list[RequestSpec], **cfg: Any) -> list[RequestRecord]:
    config = ClientConfig(base_url=endpoint, model=MODEL_NAME, api="completions", **cfg)

    async def go() -> list[RequestRecord]:
        async with LLMClient(config) as c:
            return [await c.send(s) for s in specs]
    return asyncio.run(go())


def test_generate_over_grpc_gives_exact_counts_and_app_b12_times(vllm_grpc_server: VllmServer) -> None:
    tok = f"hf:{vllm_grpc_server.installation.model}/tokenizer.json"
    specs = [RequestSpec(index=i, workload="vllm-grpc", input_tokens=0, max_tokens=24, ignore_eos=True,
                         prompt_text=f"The history of the printing press, part {i}.") for i in range(3)]
    for rec in _send(vllm_grpc_server.endpoint, specs, output_tokenizer=tok, tokenizer=None):
        print(f"  TTFT {(rec.first_token_ns - rec.sent_ns) / 1e6:.1f} ms, {len(rec.chunk_ns)} messages, "
              f"tokens per message {rec.chunk_tokens}")
        assert rec.ok, rec.error_message
        assert rec.sent_ns < rec.first_token_ns <= rec.end_ns and rec.ttft_rule == TTFT_RULE
        assert sum(rec.chunk_tokens) == rec.output_tokens_server == 24 and rec.finish_reason == "length"
        assert rec.token_count_method == tokencount.TOKEN_IDS and rec.input_tokens_server
        assert rec.output_text  # decoded with the model's own tokenizer


def test_smoke_5_1_over_grpc_measures_every_request(pytester: pytest.Pytester, vllm_grpc_server: VllmServer) -> None:
    """``pytest suites/test_5_1_ttft.py --llm-endpoint grpc://127.0.0.1:P --llm-boundary model-engine``:
    every request measured, results.json names the protocol grpc, 4.6.1-SHOULD-2 met."""
    pytester.makepyfile(test_5_1_ttft=SUITE.read_text(encoding="utf-8"))
    res = pytester.runpytest_subprocess("--llm-endpoint", vllm_grpc_server.endpoint, "--llm-boundary", "model-engine",
                                        "--llm-capacity", "rate=0.6", "-p", "no:randomly", "-p", "no:cacheprovider",
                                        "-rs", timeout=1800)
    root = Path(str(pytester.path)) / "llmbench-report"
    doc = json.loads((root / "results.json").read_text())
    records = [json.loads(line) for f in sorted(root.rglob("records.jsonl")) for line in f.read_text().splitlines()
               if line.strip()]
    measured = [r for r in records if r["phase"] == "measure"]
    print(f"\n{len(records)} records ({len(measured)} measured); sut {json.dumps(doc['sut'])[:400]}")
    assert doc["sut"]["protocol"] == "grpc" and doc["sut"]["server_kind"] == "vllm"
    assert measured and not [r for r in records if r.get("error_type")]
    assert all(r["token_count_method"] == tokencount.TOKEN_IDS for r in measured)
    for proc in doc["procedures"]:
        items = {i["id"]: i for i in proc["compliance"]["items"]}
        assert items["4.6.1-SHOULD-2"]["status"] == "met", items["4.6.1-SHOULD-2"]
        assert items["4.6.2-MUST-1"]["data"]["protocol"] == "grpc"
    outcomes = res.parseoutcomes()  # the suite's example SLO (TTFT P50 <= 2 s) is the user's to adapt
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2, outcomes
