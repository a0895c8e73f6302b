#!/usr/bin/env python3
"""A gRPC mock of vLLM's ``VllmEngine`` service (smg-grpc-proto's ``vllm_engine.proto``), the gRPC
counterpart of the reference mock ``shared/tools/mock_openai_server.py`` for ``bench/loadgen.py
--transport grpc``: every ``Generate`` streams ``--tokens`` messages of one token id each, ``--itl-ms``
apart after ``--ttft-ms``, then ``GenerateComplete`` (finish reason ``length``, usage).

    python bench/grpc_mock.py --port 50051 --tokens 50 --ttft-ms 0 --itl-ms 0

Prints ``GRPC_MOCK_LISTENING <port>`` once it serves. Needs the ``grpc`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import grpc
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc


class Mock(pb_grpc.VllmEngineServicer):
    def __init__(self, tokens: int, ttft_s: float, itl_s: float) -> None:
        self.tokens, self.ttft_s, self.itl_s = tokens, ttft_s, itl_s

    async def Generate(self, request: pb.GenerateRequest,  # noqa: N802 (the service's names)
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        sp = request.sampling_params
        n = min(self.tokens, sp.max_tokens) if sp.HasField("max_tokens") else self.tokens
        prompt = len(request.tokenized.input_ids) or len(request.text.split())
        if self.ttft_s:
            await asyncio.sleep(self.ttft_s)
        for i in range(n):
            if i and self.itl_s:
                await asyncio.sleep(self.itl_s)
            yield pb.GenerateResponse(chunk=pb.GenerateStreamChunk(token_ids=[1000 + i % 1000], prompt_tokens=prompt,
                                                                   completion_tokens=1))
        yield pb.GenerateResponse(complete=pb.GenerateComplete(output_ids=[1000 + (n - 1) % 1000] if n else [],
                                                               finish_reason="length", prompt_tokens=prompt,
                                                               completion_tokens=1 if n else 0))

    async def GetModelInfo(self, request: pb.GetModelInfoRequest,  # noqa: N802
                           context: grpc.aio.ServicerContext) -> pb.GetModelInfoResponse:
        return pb.GetModelInfoResponse(served_model_name="mock-model", model_path="mock-model", is_generation=True,
                                       vocab_size=100277, max_context_length=32768, tokenizer_path="cl100k_base")

    async def GetServerInfo(self, request: pb.GetServerInfoRequest,  # noqa: N802
                            context: grpc.aio.ServicerContext) -> pb.GetServerInfoResponse:
        return pb.GetServerInfoResponse(server_type="grpc-mock")


async def serve(port: int, tokens: int, ttft_ms: float, itl_ms: float) -> None:
    server = grpc.aio.server()
    pb_grpc.add_VllmEngineServicer_to_server(Mock(tokens, ttft_ms / 1000, itl_ms / 1000), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"GRPC_MOCK_LISTENING {bound}", flush=True)
    await server.wait_for_termination()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    args = ap.parse_args()
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        uvloop = None
    (uvloop.run if uvloop is not None else asyncio.run)(serve(args.port, args.tokens, args.ttft_ms, args.itl_ms))


if __name__ == "__main__":
    main()
