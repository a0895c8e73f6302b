"""gRPC streaming transport (§4.6.1: RECOMMENDED for Model Engine testing; App. B.1.2), on grpcio's
asyncio API and the ``VllmEngine`` service of ``smg-grpc-proto``'s ``vllm_engine.proto`` (the proto
vLLM's own gRPC server speaks, shared with SGLang, TRT-LLM and others; the simulator serves it too).

Only the ``grpc`` extra (``pip install pytest-llmbench[grpc]``) brings ``grpcio`` and
``smg-grpc-proto``; this module imports them, so nothing on the SSE path imports it
(:func:`pytest_llmbench.settings.grpc_missing` tells whether it can be).

One request is one ``Generate`` call, server-streaming (``GenerateRequest`` with ``stream=true``):

- **T_submit** is the moment the request message has been sent (App. B.1.2), after any connection
  set-up: the call is made as a stream-stream call of the same method (on the wire the same: one
  request message, then the half-close), whose ``write`` returns when the batch that sends the
  message has completed. (grpcio's unary-stream call gives no such moment: its
  ``wait_for_connection`` returns only once the server's response headers are in, which a gRPC
  server sends with its first message: a T_submit that late would take the whole TTFT away.) The
  half-close goes out while the responses are read.
- Each response message is stamped with ``time.perf_counter_ns()`` as its read returns. A
  ``GenerateStreamChunk`` carrying token ids is one chunk of the record; its token count is the
  number of ids it carries (exact, §4.6.3): the record's counting method is
  :data:`~pytest_llmbench.measure.tokencount.TOKEN_IDS`. ``GenerateComplete`` carries the finish
  reason and the usage (prompt and cached tokens); in a stream its ``output_ids`` repeat the last
  chunk's and are not counted again. A server that answers with ``GenerateComplete`` alone (not
  streaming) gives one chunk of its ``output_ids``.
- **T_first** is the first message with a content token (§5.1.3.1): with a decoder of the server's
  ids (``decode``) the first chunk whose text holds a non-whitespace character (``records.TTFT_RULE``);
  without one, the first message with a token id (:data:`TTFT_RULE_IDS`, App. B.1.2's own words).
  The text of each chunk is decoded once, when the stream has ended (prefixes of the joined ids, so
  a character split across chunks goes to the chunk that completes it); "" without a decoder.
- A status other than OK is classified by :data:`~pytest_llmbench.client.errors.GRPC_STATUS_MAP`
  (before the first response message / after it), the one error map.

The model, the server's kind and its facts come from the service's own calls (:func:`describe_server`:
``GetModelInfo``, ``GetServerInfo``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import grpc
from smg_grpc_proto import vllm_engine_pb2 as pb
from smg_grpc_proto import vllm_engine_pb2_grpc as pb_grpc

from ...common.records import TTFT_RULE, ErrorType, RequestRecord
from ...measure.tokencount import TOKEN_IDS
from ..errors import TransportError, classify_grpc_status

if TYPE_CHECKING:
    from ..config import ClientConfig
    from .base import SubmitStamp
    from .httptrace import HttpTraceData

__all__ = ["GrpcTransport", "TTFT_RULE_IDS", "describe_server", "generate_request", "grpc_target", "split_text"]

#: T_first over gRPC without a decoder of the server's ids: the first message that carries a token id
TTFT_RULE_IDS = "first-message-with-token-id"
_EOF = grpc.aio.EOF
_clock = time.perf_counter_ns
#: no size limit on a message (a long prompt of token ids; the server's own default is 4 MiB)
_OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1))
#: the service's Generate method (vllm_engine.proto: ``rpc Generate(GenerateRequest) returns (stream ...)``)
GENERATE = "/vllm.grpc.engine.VllmEngine/Generate"


def grpc_target(url: str) -> tuple[str, bool]:
    """``grpc://host:port`` -> (``host:port``, TLS?): ``grpcs://`` is TLS with the system's roots."""
    parts = urlsplit(url)
    if parts.scheme not in ("grpc", "grpcs") or not parts.hostname or parts.port is None:
        raise ValueError(f"a gRPC endpoint is grpc://host:port or grpcs://host:port, got {url!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port}", parts.scheme == "grpcs"


def _channel(url: str, options: Sequence[tuple[str, Any]] = _OPTIONS) -> grpc.aio.Channel:
    target, tls = grpc_target(url)
    if tls:
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(), options=options)
    return grpc.aio.insecure_channel(target, options=options)


def generate_request(body: Mapping[str, Any], request_id: str) -> pb.GenerateRequest:
    """The ``GenerateRequest`` of one OpenAI completions body (what the client built and its body hook
    shaped): a prompt of token ids goes as ``tokenized.input_ids`` (no tokenize round trip), a text
    prompt as ``text``; ``max_tokens``, ``temperature``, ``stop``, ``min_tokens`` and ``ignore_eos``
    as their sampling parameters; ``stream`` as asked."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        inputs: dict[str, Any] = {"tokenized": pb.TokenizedInput(input_ids=prompt)}
    elif isinstance(prompt, str):
        inputs = {"text": prompt}
    else:
        raise TransportError(ErrorType.PROTOCOL, "gRPC Generate takes a completions prompt (text or token ids), "
                                                 "not chat messages")
    params = pb.SamplingParams(temperature=float(body.get("temperature", 1.0)), n=1)
    if body.get("max_tokens") is not None:
        params.max_tokens = int(body["max_tokens"])
    if body.get("min_tokens"):
        params.min_tokens = int(body["min_tokens"])
    if body.get("ignore_eos"):
        params.ignore_eos = True
    if body.get("stop"):
        params.stop.extend(body["stop"] if isinstance(body["stop"], list) else [body["stop"]])
    return pb.GenerateRequest(request_id=request_id, sampling_params=params, stream=bool(body.get("stream", True)),
                              **inputs)


def _retrieve(task: asyncio.Task[None]) -> None:
    """The half-close's outcome, taken (a call that failed or was cancelled fails it too: not an error here)."""
    if not task.cancelled():
        task.exception()


#: ids of already emitted text a chunk is decoded after (the context a tokenizer needs for a word's leading
#: space, as vLLM's incremental detokenizer keeps): past this many, the decode window slides forward
DECODE_WINDOW = 32


def split_text(decode: Callable[[list[int]], str], ids: list[int], bounds: Sequence[int]) -> list[str]:
    """The text of each chunk of ``ids`` (chunk ``i`` ends at ``bounds[i]``): the growth of the decoded
    text, so a multi-byte character split across chunks (a replacement character at the text's end) goes
    to the chunk that completes it. Each chunk is decoded with at most :data:`DECODE_WINDOW` ids of text
    already emitted before it (a sliding window, restarted at a chunk end on a whole character), not
    with the whole prefix: the work grows with the answer, not with its square. After the stream."""
    out: list[str] = []
    ctx = done = clean = 0  # window start; chars of the window's text emitted; last chunk end on a whole character
    last = len(ids)
    for b in bounds:
        raw = decode(ids[ctx:b]) if b > ctx else ""
        text = raw.rstrip("\ufffd") if b < last else raw
        out.append(text[done:] if len(text) > done else "")
        done = max(done, len(text))
        if text == raw:
            if clean > ctx and b - ctx > DECODE_WINDOW:  # slide: the text from the last clean end is the context
                ctx = clean
                done = len(decode(ids[ctx:b]))
            clean = b
    return out


class GrpcTransport:
    """A channel to one gRPC endpoint and the ``Generate`` exchange (see the module's text).

    ``decode``: turns the server's output ids into text (its own tokenizer, or the reference one when
    they are the same ids); None: records carry token counts and times but no text.
    """

    name = "grpc"

    def __init__(self, config: ClientConfig, max_connections: int | None = None,
                 *, decode: Callable[[list[int]], str] | None = None) -> None:
        self._url = config.base_url
        self._deadline = config.total_timeout_s
        self._channel = _channel(config.base_url)
        # stream-stream on the client side, for T_submit at the request message's send (see the module's text)
        self._generate = self._channel.stream_stream(GENERATE, request_serializer=pb.GenerateRequest.SerializeToString,
                                                     response_deserializer=pb.GenerateResponse.FromString)
        self.decode = decode
        self._count = 0

    async def stream(self, body: Mapping[str, Any], headers: Mapping[str, str], rec: RequestRecord,
                     submit: SubmitStamp) -> None:
        """One ``Generate`` call into ``rec``: T_submit in ``submit``, messages timed as they arrive;
        a failure raises a classified :class:`TransportError`."""
        self._count += 1
        request = generate_request(body, f"llmbench-{rec.phase}-{rec.index}-{self._count}")
        key = headers.get("Authorization")
        metadata = (("authorization", key),) if key else None
        call = self._generate(timeout=self._deadline, metadata=metadata)
        chunk_ns, chunk_tokens = rec.chunk_ns, rec.chunk_tokens
        ids: list[int] = []
        bounds: list[int] = []
        complete = None
        answered = False
        served = 0  # the server's own count: completion_tokens of each chunk (of the complete message unstreamed)
        closing: asyncio.Task[None] | None = None
        try:
            await call.write(request)  # returns once the request message is sent (App. B.1.2)
            submit.ns = _clock()
            closing = asyncio.ensure_future(call.done_writing())  # the half-close, while reading
            closing.add_done_callback(_retrieve)
            read = call.read
            while True:
                msg = await read()
                now = _clock()
                if msg is _EOF:
                    break
                if not answered:
                    answered = True
                    rec.first_chunk_ns = now
                kind = msg.WhichOneof("response")
                if kind == "chunk":
                    got = msg.chunk.token_ids
                    n = len(got)
                    if n and rec.first_token_ns is None:
                        rec.first_token_ns = now
                    ids.extend(got)
                    bounds.append(len(ids))
                    chunk_ns.append(now)
                    chunk_tokens.append(n)
                    last = msg.chunk
                    served += last.completion_tokens
                elif kind == "complete":
                    complete = msg.complete
                    rec.end_ns = now
                    if not chunk_ns:  # not streamed: the whole output in one message
                        got = complete.output_ids
                        ids.extend(got)
                        bounds.append(len(ids))
                        chunk_ns.append(now)
                        chunk_tokens.append(len(got))
                        if got:
                            rec.first_token_ns = now
                        served = complete.completion_tokens
                    last = complete
                else:
                    raise TransportError(ErrorType.PROTOCOL, "gRPC GenerateResponse with neither chunk nor complete")
        except BaseException as exc:
            call.cancel()  # no-op when it ended; else (cancelled, failed while reading) the server stops it
            if closing is not None:
                closing.cancel()
            if not isinstance(exc, grpc.aio.AioRpcError):
                raise
            code = exc.code()
            rec.status = code.value[0]  # the gRPC status code (2 UNKNOWN, 4 DEADLINE_EXCEEDED, 14 UNAVAILABLE, ...)
            raise classify_grpc_status(code.name, exc.details() or "", mid_stream=answered) from None
        finally:
            n = len(chunk_ns)
            rec.chunk_text[:] = (split_text(self.decode, ids, bounds) if self.decode is not None and ids
                                 else [""] * n)
            rec.chunk_reasoning[:] = [""] * n
            rec.output_tokens_client = len(ids)
            rec.token_count_method = TOKEN_IDS
            if self.decode is not None:
                rec.first_token_ns = next((t for t, s in zip(chunk_ns, rec.chunk_text) if s and not s.isspace()), None)
            else:
                rec.ttft_rule = TTFT_RULE_IDS
        if closing is not None and not closing.done():
            await closing
        if complete is None:
            raise TransportError(ErrorType.PROTOCOL, "gRPC stream ended without GenerateComplete"
                                 if answered else "gRPC stream ended without a response message")
        rec.status = 0  # grpc.StatusCode.OK
        rec.finish_reason = complete.finish_reason or None
        usage: dict[str, Any] = {"prompt_tokens": last.prompt_tokens or complete.prompt_tokens,
                                 "completion_tokens": served or len(ids)}
        cached = complete.cached_tokens or getattr(last, "cached_tokens", 0)
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        rec.usage = usage

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        raise TransportError(ErrorType.PROTOCOL, f"GET {url}: the gRPC transport has no HTTP requests")

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: HttpTraceData | None = None) -> Any:
        raise TransportError(ErrorType.PROTOCOL, f"POST {url}: the gRPC transport sends Generate calls only")

    async def aclose(self) -> None:
        await self._channel.close()


def describe_server(url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    """What the service says of itself, before a run (blocking): ``GetModelInfo`` (served model name,
    vocabulary, context, tokenizer path) and ``GetServerInfo`` (``server_type``, e.g. ``vllm-grpc``).
    Raises a classified :class:`TransportError` when the endpoint does not answer."""
    target, tls = grpc_target(url)
    key = (headers or {}).get("Authorization")
    metadata = (("authorization", key),) if key else None
    channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials()) if tls
               else grpc.insecure_channel(target))
    with channel:
        stub = pb_grpc.VllmEngineStub(channel)
        try:
            model = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=timeout_s, metadata=metadata)
            server = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            raise classify_grpc_status(code.name, exc.details() or "", mid_stream=False) from None  # type: ignore[attr-defined]
    return {
        "served_model_name": model.served_model_name or model.model_path,
        "model_path": model.model_path,
        "tokenizer_path": model.tokenizer_path,
        "vocab_size": model.vocab_size or None,
        "context_window": model.max_context_length or None,
        "model_type": model.model_type,
        "server_type": server.server_type,
        "max_num_seqs": server.max_num_seqs or None,
    }
