"""The simulator's gRPC front: the ``VllmEngine`` service of ``smg-grpc-proto``'s ``vllm_engine.proto``
(the proto vLLM's gRPC server speaks; §4.6.1, App. B.1.2) on the same :class:`~.app.Simulator`, so one
engine serves both protocols (``python -m pytest_llmbench.simulator --grpc-port P``; needs the ``grpc``
extra).

``Generate`` turns its ``GenerateRequest`` into the completions body the HTTP app takes and admits it
the same way (:meth:`~.app.Simulator.admit`: validation, input filter, output plan, engine); it then
streams one ``GenerateStreamChunk`` per ``tokens_per_chunk`` tokens as the engine emits them (the
token ids, their count, the prompt and cached tokens), paced by the output filter as the SSE stream
is, and a ``GenerateComplete`` with the finish reason. A request the HTTP app answers with an error
status ends with the gRPC status of that HTTP status (:data:`STATUS_FOR_HTTP`: 429 RESOURCE_EXHAUSTED,
503 UNAVAILABLE, ...). A call the client cancels aborts its sequence. ``GetModelInfo`` names the model,
its vocabulary and context and the tokenizer (``cl100k_base``: the ids are the reference tokenizer's);
``GetServerInfo`` says ``llmbench-sim-grpc``; ``HealthCheck`` and ``Abort`` as the service defines them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from .app import Simulator
from .engine import ABORTED, Sequence
from .generation import OutputPlan
from .protocol import APIError

__all__ = ["GrpcFront", "SERVER_TYPE", "STATUS_FOR_HTTP", "completions_body"]

SERVER_TYPE = "llmbench-sim-grpc"
#: the gRPC status of each HTTP status the simulator answers an unaccepted request with
STATUS_FOR_HTTP = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


def completions_body(request: pb.GenerateRequest, model: str) -> dict[str, Any]:
    """The OpenAI completions body of a ``GenerateRequest`` (what :meth:`Simulator.admit` validates)."""
    sp = request.sampling_params
    body: dict[str, Any] = {"model": model, "stream": request.stream}
    kind = request.WhichOneof("input")
    body["prompt"] = list(request.tokenized.input_ids) if kind == "tokenized" else request.text
    if sp.HasField("max_tokens"):
        body["max_tokens"] = sp.max_tokens
    if sp.HasField("temperature"):
        body["temperature"] = sp.temperature
    if sp.min_tokens:
        body["min_tokens"] = sp.min_tokens
    if sp.ignore_eos:
        body["ignore_eos"] = True
    if sp.stop:
        body["stop"] = list(sp.stop)
    if sp.HasField("seed"):
        body["seed"] = sp.seed
    if sp.n > 1:
        body["n"] = sp.n
    return body


class _Servicer(pb_grpc.VllmEngineServicer):
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.started = time.time()
        self.running: dict[str, Sequence] = {}

    async def Generate(self, request: pb.GenerateRequest,  # noqa: N802 (the service's method names)
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        sim = self.sim
        raw = json.dumps(completions_body(request, sim.config.model_name)).encode()
        try:
            _, seq, plan, _, _ = await sim.admit("completion", raw)
        except APIError as exc:
            await context.abort(STATUS_FOR_HTTP.get(exc.status, grpc.StatusCode.INTERNAL), exc.message)
            return
        self.running[request.request_id] = seq
        try:
            if request.stream:
                async for msg in self._stream(seq, plan):
                    yield msg
            else:
                while not seq.done:
                    await sim.wait(seq)
                if seq.status != ABORTED:
                    yield self._complete(seq, plan.output_ids[:seq.num_emitted])
        except asyncio.CancelledError:  # the client cancelled the call, or went away
            sim.abort(seq)
            raise
        finally:
            self.running.pop(request.request_id, None)
        if seq.status == ABORTED:
            await context.abort(grpc.StatusCode.ABORTED, "request aborted")

    async def _stream(self, seq: Sequence, plan: OutputPlan) -> AsyncIterator[pb.GenerateResponse]:
        """Chunks of ``tokens_per_chunk`` ids as the engine emits them (the output filter's pacing as
        in the SSE stream), then the complete message."""
        sim = self.sim
        cfg = sim.config
        per_chunk = cfg.tokens_per_chunk
        guard_ns = round(cfg.predicted_output_guardrail_s(1) * 1e9)
        mono = time.monotonic_ns
        ids = plan.output_ids
        cursor = 0
        next_out = 0
        last: list[int] = []
        while True:
            n = seq.num_emitted
            done = seq.done
            if seq.status == ABORTED:
                return
            while n - cursor >= per_chunk or (done and cursor < n):
                k = min(per_chunk, n - cursor)
                last = ids[cursor:cursor + k]
                cursor += k
                if guard_ns:  # output filter: one chunk at a time
                    next_out = max(seq.emit_ns[cursor - 1], next_out) + guard_ns  # type: ignore[index]
                    while (rem := next_out - mono()) > 50_000:
                        await asyncio.sleep(rem / 1e9)
                yield pb.GenerateResponse(chunk=pb.GenerateStreamChunk(
                    token_ids=last, prompt_tokens=seq.n_prompt, completion_tokens=k, cached_tokens=seq.cached_tokens))
            if done:
                if seq.finish_reason == "content_filter" and not plan.refused_at_input:
                    sim.requests_refused += 1
                yield self._complete(seq, last)
                return
            if seq.num_emitted == n:
                await sim.wait(seq)

    @staticmethod
    def _complete(seq: Sequence, ids: list[int]) -> pb.GenerateResponse:
        return pb.GenerateResponse(complete=pb.GenerateComplete(
            output_ids=ids, finish_reason=seq.finish_reason or "stop", prompt_tokens=seq.n_prompt,
            completion_tokens=len(ids), cached_tokens=seq.cached_tokens))

    async def HealthCheck(self, request: pb.HealthCheckRequest,  # noqa: N802
                          context: grpc.aio.ServicerContext) -> pb.HealthCheckResponse:
        ok = not self.sim.shutting_down
        return pb.HealthCheckResponse(healthy=ok, message="Health" if ok else "shutting down")

    async def Abort(self, request: pb.AbortRequest, context: grpc.aio.ServicerContext) -> pb.AbortResponse:  # noqa: N802
        for rid in request.request_ids:
            seq = self.running.get(rid)
            if seq is not None:
                self.sim.abort(seq)
        return pb.AbortResponse()

    async def GetModelInfo(self, request: pb.GetModelInfoRequest,  # noqa: N802
                           context: grpc.aio.ServicerContext) -> pb.GetModelInfoResponse:
        cfg = self.sim.config
        tok = self.sim.tokenizer.declaration
        return pb.GetModelInfoResponse(
            model_path=cfg.model_name, served_model_name=cfg.model_name, is_generation=True,
            max_context_length=cfg.context_window, max_req_input_len=cfg.context_window,
            vocab_size=tok.vocab_size or 0, tokenizer_path=tok.name, model_type="llmbench-sim")

    async def GetServerInfo(self, request: pb.GetServerInfoRequest,  # noqa: N802
                            context: grpc.aio.ServicerContext) -> pb.GetServerInfoResponse:
        eng = self.sim.engine
        return pb.GetServerInfoResponse(
            active_requests=len(eng.running) + len(eng.waiting), is_paused=False,
            uptime_seconds=time.time() - self.started, server_type=SERVER_TYPE, data_parallel_size=1)


class GrpcFront:
    """The gRPC server of one :class:`Simulator`, on the simulator's event loop."""

    def __init__(self, sim: Simulator, host: str, port: int) -> None:
        self.sim = sim
        self.host = host
        self.port = port
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        """Bind and start; returns the port (``port`` 0: a free one)."""
        server = grpc.aio.server(options=[("grpc.max_send_message_length", -1),
                                          ("grpc.max_receive_message_length", -1)])
        pb_grpc.add_VllmEngineServicer_to_server(_Servicer(self.sim), server)
        h = f"[{self.host}]" if ":" in self.host else self.host
        self.port = server.add_insecure_port(f"{h}:{self.port}")
        if not self.port:
            raise OSError(f"gRPC: cannot bind {self.host}:{self.port}")
        await server.start()
        self._server = server
        return self.port

    async def stop(self, grace_s: float) -> None:
        """Stop taking calls; running ones get ``grace_s`` to finish."""
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
