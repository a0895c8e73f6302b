"""The simulator's ASGI application (raw ASGI on uvicorn, for a lean per-chunk path) and the
real-time driver of the :class:`~.engine.Engine`.

One asyncio task runs the engine: it plans an iteration, sleeps until the iteration's absolute
deadline (so scheduling overheads do not accumulate), commits it and wakes the request handlers
whose sequences emitted. Handlers drain their sequence's emitted tokens and write pre-encoded SSE
events; several ready events are written in one ``send``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..common.tokenizer import get_tokenizer
from .config import GUARDRAIL_MODES, RUNTIME_FIELDS, SimConfig, SimConfigError, guardrail_defaults
from .engine import ABORTED, Engine, EngineError, KVCapacityError, QueueFullError, Sequence, ShuttingDownError
from .generation import OutputPlan, input_refused, plan_output, request_seed
from .metrics import render_metrics
from .protocol import APIError, ChunkEncoder, ParsedRequest, join_pieces, parse_request
from .vocab import get_vocabulary

__all__ = ["Simulator", "create_app"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_MAX_BODY = 64 * 1024 * 1024
_CATCH_UP_NS = 2_000_000  # an iteration may start at the previous deadline if we are < 2 ms late
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_OPEN, _CLOSE = json.dumps("<think>").encode(), json.dumps("</think>").encode()  # tags mode (issue 49)
_NO_END = 1 << 62  # the last phase (content) has no end but the output's


class Simulator:
    """Engine + driver loop + request accounting; :meth:`asgi` is the ASGI callable."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config if config is not None else SimConfig()
        self.engine = Engine(self.config)
        self.tokenizer = get_tokenizer()
        get_vocabulary()  # build once at start-up, not on the first request
        self._counter = itertools.count()
        self._rid_prefix = os.urandom(4).hex()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.shutting_down = False
        self.requests_failed = 0  # error responses to generation requests (4xx/5xx)
        self.requests_refused = 0  # finish_reason content_filter
        self.requests_rejected_queue = 0  # 429
        self.in_guardrail = 0
        self.reasoning_tokens = 0  # thinking tokens of finished requests (issue 49; /metrics)
        #: run after the engine starts / before it stops, on its loop (the gRPC front: server.py)
        self.on_start: list[Callable[[], Awaitable[None]]] = []
        self.on_stop: list[Callable[[], Awaitable[None]]] = []

    # ------------------------------------------------------------------ engine driver
    async def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="llmbench-sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def begin_shutdown(self) -> None:
        """Refuse new generation requests with 503; running ones finish."""
        self.shutting_down = True
        self.engine.draining = True

    async def _run(self) -> None:
        eng = self.engine
        wake = self._wake
        assert wake is not None
        mono = time.monotonic_ns
        sleep = asyncio.sleep
        prev_deadline = 0
        while True:
            if not eng.has_work():
                wake.clear()
                await wake.wait()
            now = mono()
            it = eng.plan(now)
            if it is None:  # only possible transiently (e.g. everything aborted)
                await sleep(0)
                continue
            start = prev_deadline if 0 <= now - prev_deadline < _CATCH_UP_NS else now
            deadline = start + it.duration_ns
            prev_deadline = deadline
            if it.duration_ns <= 0:
                await sleep(0)
            else:
                while True:
                    remaining = deadline - mono()
                    if remaining <= 50_000:
                        break
                    await sleep(remaining / 1e9)
            touched = eng.commit(it, mono(), time.time_ns())
            for seq in touched:
                w = seq.waiter
                if w is not None:
                    seq.waiter = None
                    if not w.done():
                        w.set_result(None)

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ ASGI
    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        typ = scope["type"]
        if typ == "lifespan":
            await self._lifespan(receive, send)
            return
        if typ != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        try:
            if path in ("/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions"):
                if method != "POST":
                    raise APIError(405, f"method {method} not allowed on {path}; use POST")
                await self._generate("chat" if path.endswith("chat/completions") else "completion",
                                     receive, send)
            elif path in ("/v1/models", "/models"):
                await _respond_json(send, 200, self._models())
            elif path == "/health":
                if self.shutting_down:
                    raise APIError(503, "server is shutting down", type="server_error", code="shutting_down")
                await _respond(send, 200, b"{}", _JSON_HEADERS)
            elif path == "/metrics":
                await _respond(send, 200, render_metrics(self.metrics()).encode(),
                               [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")])
            elif path == "/admin/config":
                if method == "GET":
                    await _respond_json(send, 200, self.admin_config())
                elif method == "POST":
                    raw = await _read_body(receive)
                    await _respond_json(send, 200, self.apply_admin(raw))
                else:
                    raise APIError(405, f"method {method} not allowed on {path}; use GET or POST")
            else:
                raise APIError(404, f"no route {method} {path}", code="not_found")
        except APIError as e:
            await _respond(send, e.status, e.body(), _JSON_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.asgi(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await self.start()
                for hook in self.on_start:
                    await hook()
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                self.begin_shutdown()
                for hook in self.on_stop:
                    await hook()
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------ admin / metrics
    def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": self.config.model_name, "object": "model", "created": 0, "owned_by": "llmbench",
            "max_model_len": self.config.context_window}]}

    def admin_config(self) -> dict[str, Any]:
        d = self.config.to_json()
        d["runtime_fields"] = sorted(RUNTIME_FIELDS)
        d["guardrail_defaults"] = guardrail_defaults()  # what "default safety configuration" is here (§4.8.2)
        return d

    def apply_admin(self, raw: bytes) -> dict[str, Any]:
        """``POST /admin/config``: change runtime fields, ``flush_prefix_cache``; 400 on bad input."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
        if not isinstance(body, dict):
            raise APIError(400, "request body must be a JSON object", code="invalid_json")
        flush = body.pop("flush_prefix_cache", False)
        if not isinstance(flush, bool):
            raise APIError(400, "'flush_prefix_cache' must be a boolean", param="flush_prefix_cache")
        bad = sorted(set(body) - RUNTIME_FIELDS)
        if bad:
            raise APIError(400, f"cannot change {', '.join(bad)} at run time (runtime fields: "
                           f"{', '.join(sorted(RUNTIME_FIELDS))}); restart the simulator instead",
                           param=bad[0])
        if "guardrails" in body and body["guardrails"] not in GUARDRAIL_MODES:
            raise APIError(400, f"'guardrails' must be one of {', '.join(GUARDRAIL_MODES)}, "
                           f"got {body['guardrails']!r}", param="guardrails")
        try:
            new = self.config.replace(**body)
        except SimConfigError as exc:
            raise APIError(400, str(exc)) from None
        for k in body:
            setattr(self.config, k, getattr(new, k))
        if "prefix_cache" in body:
            self.engine.set_prefix_cache(self.config.prefix_cache)
        if flush:
            self.engine.flush_prefix_cache()
        return self.admin_config()

    def metrics(self) -> list[tuple[str, str, str, float]]:
        e = self.engine
        c = e.counters
        kv = e.kv
        g, k = "gauge", "counter"
        return [
            ("llmbench:num_requests_running", g, "Requests in the running batch.", len(e.running)),
            ("llmbench:num_requests_waiting", g, "Requests waiting to be scheduled.", len(e.waiting)),
            ("llmbench:num_requests_in_guardrail", g, "Requests in the input filter.", self.in_guardrail),
            ("llmbench:kv_cache_blocks_used", g, "KV blocks referenced by running requests.", kv.num_used),
            ("llmbench:kv_cache_blocks_cached", g, "Unreferenced KV blocks kept by the prefix cache.",
             len(kv.evictable)),
            ("llmbench:kv_cache_blocks_total", g, "KV blocks in the cache.", kv.num_blocks),
            ("llmbench:kv_cache_usage_perc", g, "Fraction of KV blocks in use.", kv.num_used / kv.num_blocks),
            ("llmbench:iterations_total", k, "Engine iterations.", c.iterations),
            ("llmbench:num_preemptions_total", k, "Preemption events.", c.num_preemptions),
            ("llmbench:requests_preempted_total", k, "Requests preempted at least once.", c.requests_preempted),
            ("llmbench:preempted_tokens_total", k, "Computed tokens discarded by preemption.", c.preempted_tokens),
            ("llmbench:prefix_cache_hit_tokens_total", k, "Prompt tokens served by the prefix cache.",
             c.prefix_cache_hit_tokens),
            ("llmbench:prefix_cache_queried_tokens_total", k, "Prompt tokens looked up in the prefix cache.",
             c.prefix_cache_queried_tokens),
            ("llmbench:prompt_tokens_total", k, "Prompt tokens of accepted requests.", c.prompt_tokens),
            ("llmbench:generation_tokens_total", k, "Output tokens emitted.", c.generation_tokens),
            ("llmbench:requests_finished_total", k, "Requests that finished generating.", c.requests_finished),
            ("llmbench:requests_aborted_total", k, "Requests dropped because the client went away.",
             c.requests_aborted),
            ("llmbench:requests_failed_total", k, "Generation requests answered with an error status.",
             self.requests_failed),
            ("llmbench:requests_rejected_queue_full_total", k, "Requests refused with 429 (queue full).",
             self.requests_rejected_queue),
            ("llmbench:requests_refused_total", k, "Requests ended by a guardrail (content_filter).",
             self.requests_refused),
            ("llmbench:reasoning_tokens_total", k, "Thinking tokens of answered requests (part of the generation "
             "tokens; --reasoning).", self.reasoning_tokens),
        ]

    # ------------------------------------------------------------------ generation
    async def _generate(self, kind: str, receive: Receive, send: Send) -> None:
        try:
            raw = await _read_body(receive)
        except APIError:
            self.requests_failed += 1
            raise
        req, seq, plan, input_filter_ns, n = await self.admit(kind, raw)
        watcher = asyncio.ensure_future(self._watch_disconnect(receive, seq))
        try:
            prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
            rid = f"{prefix}{self._rid_prefix}{n:08x}"
            if req.stream:
                await self._stream(req, seq, plan, rid, input_filter_ns, send)
            else:
                await self._complete(req, seq, plan, rid, input_filter_ns, send)
        finally:
            watcher.cancel()

    async def admit(self, kind: str, raw: bytes) -> tuple[ParsedRequest, Sequence, OutputPlan, int, int]:
        """One request body (OpenAI JSON) into the engine, whatever protocol it came in (the HTTP app,
        the gRPC front ``grpcfront.py``): validated, through the input filter, its output planned and
        its sequence added; returns (request, sequence, plan, input-filter ns, request number). Raises
        :class:`APIError` (with its HTTP status) when it is not accepted."""
        try:
            if self.shutting_down:
                raise APIError(503, "server is shutting down", type="server_error", code="shutting_down")
            req = parse_request(kind, raw, self.config, self.tokenizer)
            self.engine.check_fits(len(req.prompt_ids), req.max_tokens)
        except APIError:
            self.requests_failed += 1
            raise
        except KVCapacityError as exc:
            self.requests_failed += 1
            raise APIError(400, str(exc), param="max_tokens", code="kv_capacity_exceeded") from None
        cfg = self.config
        n = next(self._counter)
        rseed = request_seed(cfg, req.prompt_ids, req.seed, req.temperature, n)
        t_in0 = time.monotonic_ns()
        refused_in = False
        if cfg.guardrail_active("input"):
            self.in_guardrail += 1
            try:
                delay = cfg.predicted_input_guardrail_s(len(req.prompt_ids))
                await asyncio.sleep(delay)
            finally:
                self.in_guardrail -= 1
            refused_in = input_refused(cfg, rseed)
        input_filter_ns = time.monotonic_ns() - t_in0
        if refused_in:
            plan = OutputPlan([], [], "", "content_filter", refused_at_input=True)
        else:
            plan = plan_output(cfg, rseed, req.max_tokens, min_tokens=req.min_tokens,
                               ignore_eos=req.ignore_eos, stop=req.stop, tools=kind == "chat")
        seq = Sequence(n, req.prompt_ids, plan.output_ids, req.max_tokens, plan.finish_reason,
                       record_times=req.timing or (req.stream and cfg.guardrail_active("output")))
        if not refused_in:
            try:
                self.engine.add(seq, time.monotonic_ns())
            except QueueFullError as exc:
                self.requests_failed += 1
                self.requests_rejected_queue += 1
                raise APIError(429, str(exc), type="rate_limit_error", code="queue_full") from None
            except ShuttingDownError as exc:
                self.requests_failed += 1
                raise APIError(503, str(exc), type="server_error", code="shutting_down") from None
            except EngineError as exc:  # pragma: no cover - check_fits ran above
                self.requests_failed += 1
                raise APIError(400, str(exc)) from None
            self._kick()
        else:
            seq.status = "finished"
            self.requests_refused += 1
        return req, seq, plan, input_filter_ns, n

    async def _watch_disconnect(self, receive: Receive, seq: Sequence) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                self.abort(seq)
                return

    def abort(self, seq: Sequence) -> None:
        """The client went away: drop ``seq`` from the engine and wake whoever waits on it."""
        if not seq.done:
            self.engine.abort(seq)
        w = seq.waiter
        if w is not None and not w.done():
            w.set_result(None)

    @staticmethod
    async def wait(seq: Sequence) -> None:
        """Until the engine emits for ``seq`` (or it ends)."""
        fut = asyncio.get_running_loop().create_future()
        seq.waiter = fut
        await fut

    def _finish_info(self, seq: Sequence, input_filter_ns: int, plan: OutputPlan) -> dict[str, Any]:
        info = {"queue_ns": seq.queue_ns or 0, "prefill_ns": seq.prefill_ns or 0,
                "preemptions": seq.preemptions, "preempted_tokens": seq.preempted_tokens,
                "cached_tokens": seq.cached_tokens, "input_filter_ns": input_filter_ns}
        if plan.reasoning_tokens:  # the thinking (issue 49): its tokens and when its last one was emitted
            r = min(plan.reasoning_tokens, seq.num_emitted)
            info["reasoning_tokens"] = r
            if seq.emit_ns and r:
                info["thinking_end_ns"] = seq.emit_ns[r - 1]
        return info

    def _usage(self, seq: Sequence, plan: OutputPlan) -> dict[str, Any]:
        u: dict[str, Any] = {"prompt_tokens": seq.n_prompt, "completion_tokens": seq.num_emitted,
                             "total_tokens": seq.n_prompt + seq.num_emitted}
        if seq.cached_tokens:
            u["prompt_tokens_details"] = {"cached_tokens": seq.cached_tokens}
        if plan.reasoning_tokens or self.config.reasoning != "none":  # counted, whether streamed or not
            u["completion_tokens_details"] = {"reasoning_tokens": min(plan.reasoning_tokens, seq.num_emitted)}
        return u

    def _thought(self, seq: Sequence, plan: OutputPlan) -> None:
        """A finished request's thinking tokens into ``/metrics``."""
        if plan.reasoning_tokens and seq.status != ABORTED:
            self.reasoning_tokens += min(plan.reasoning_tokens, seq.num_emitted)

    async def _stream(self, req: ParsedRequest, seq: Sequence, plan: OutputPlan, rid: str,
                      input_filter_ns: int, send: Send) -> None:
        cfg = self.config
        enc = ChunkEncoder(req.kind, rid, req.model, int(time.time()), req.include_usage)
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        first = enc.role() if enc.chat else b""
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        per_chunk = cfg.tokens_per_chunk
        guard_ns = round(cfg.predicted_output_guardrail_s(1) * 1e9)
        timing = req.timing
        pieces = plan.pieces
        cursor = 0
        next_out = 0  # when the output filter is free again (monotonic ns)
        mono = time.monotonic_ns
        # the phases (issue 49): tokens [0, think) are thinking, [think, tool) a tool call's arguments; a chunk
        # never spans two phases. Without them both are 0 and the loop is the one-phase loop it was.
        think, tool = plan.reasoning_tokens, plan.reasoning_tokens + plan.tool_tokens
        mode = cfg.reasoning if think else "none"
        while True:
            n = seq.num_emitted
            done = seq.done
            if seq.status == ABORTED:
                return
            buf: list[bytes] = []
            while True:
                phase_end = think if cursor < think else tool if cursor < tool else _NO_END
                k = min(per_chunk, n - cursor, phase_end - cursor)
                if k <= 0 or (k < per_chunk and not done and phase_end > n):
                    break
                ps = pieces[cursor:cursor + k]
                t = b""
                if timing and not (cursor < think and mode == "hidden"):
                    t = enc.token_timing(seq.emit_ns[cursor:cursor + k],  # type: ignore[index]
                                         seq.emit_unix_ns[cursor:cursor + k])  # type: ignore[index]
                start, cursor = cursor, cursor + k
                if start < tool:  # thinking or a tool call
                    chunk = self._phase_chunk(enc, mode, ps, start, think, tool, t, plan.reasoning_cut)
                    if chunk is None:  # hidden thinking: the time passes, nothing is sent
                        continue
                    buf.append(chunk)
                    continue
                piece = join_pieces(ps)
                if piece == b'""':
                    continue  # text held back by a stop string: nothing visible to send
                chunk = enc.token(piece, t)
                if guard_ns:  # output filter: a FIFO server checking one chunk at a time
                    if buf:  # thinking ahead of it goes first, unfiltered (the filter checks the answer)
                        await send({"type": "http.response.body", "body": b"".join(buf), "more_body": True})
                        buf = []
                    ready = seq.emit_ns[cursor - 1]  # type: ignore[index]
                    next_out = max(ready, next_out) + guard_ns
                    while (rem := next_out - mono()) > 50_000:
                        await asyncio.sleep(rem / 1e9)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                else:
                    buf.append(chunk)
            if done:
                if seq.finish_reason == "content_filter" and seq.status != ABORTED and not plan.refused_at_input:
                    self.requests_refused += 1
                self._thought(seq, plan)
                ft = enc.finish_timing({"token_ns": [], "token_unix_ns": [],
                                        **self._finish_info(seq, input_filter_ns, plan)}) if timing else b""
                buf.append(enc.finish(seq.finish_reason, ft))
                if req.include_usage:
                    buf.append(enc.usage(self._usage(seq, plan)))
                buf.append(b"data: [DONE]\n\n")
                await send({"type": "http.response.body", "body": b"".join(buf), "more_body": False})
                return
            if buf:
                await send({"type": "http.response.body", "body": b"".join(buf), "more_body": True})
            if seq.num_emitted == n and not seq.done:
                await self.wait(seq)

    @staticmethod
    def _phase_chunk(enc: ChunkEncoder, mode: str, ps: list[bytes], start: int, think: int, tool: int,
                     timing: bytes, cut: bool) -> bytes | None:
        """The event of a chunk of thinking (tokens ``start..`` below ``think``) or of a tool call's arguments
        (below ``tool``): a reasoning delta (streamed), content inside ``<think>...</think>`` (tags, the tags
        on its first and last thinking token; none closes thinking ``cut`` by max_tokens), nothing (hidden),
        a tool-call delta."""
        if start >= think:
            return enc.tool(join_pieces(ps), start == think, timing)
        if mode == "streamed":
            return enc.reasoning(join_pieces(ps), timing)
        if mode == "hidden":
            return None
        tagged = ([_OPEN] if start == 0 else []) + ps + ([_CLOSE] if start + len(ps) == think and not cut else [])
        return enc.token(join_pieces(tagged), timing)

    async def _complete(self, req: ParsedRequest, seq: Sequence, plan: OutputPlan, rid: str,
                        input_filter_ns: int, send: Send) -> None:
        while not seq.done:
            await self.wait(seq)
        if seq.status == ABORTED:
            return
        if seq.finish_reason == "content_filter" and not plan.refused_at_input:
            self.requests_refused += 1
        n_chunks = -(-seq.num_emitted // self.config.tokens_per_chunk)
        guard = self.config.predicted_output_guardrail_s(n_chunks)
        if guard:
            await asyncio.sleep(guard)
        created = int(time.time())
        self._thought(seq, plan)
        think, tool = plan.reasoning_tokens, plan.reasoning_tokens + plan.tool_tokens
        mode = self.config.reasoning if think else "none"
        answer = plan.text
        if plan.tool_tokens:  # the tool call's arguments are not content
            answer = "".join(json.loads(p) for p in plan.pieces[tool:])
        content = (f"<think>{plan.reasoning_text}{'' if plan.reasoning_cut else '</think>'}{answer}" if mode == "tags"
                   else answer)
        if req.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if mode == "streamed":
                message["reasoning_content"] = plan.reasoning_text
            if plan.tool_tokens:
                message["tool_calls"] = [{"id": f"call_{rid.split('-', 1)[-1]}", "type": "function", "function": {
                    "name": "llmbench_tool", "arguments": "".join(json.loads(p) for p in plan.pieces[think:tool])}}]
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                                      "finish_reason": seq.finish_reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": seq.finish_reason}
            if mode == "streamed":
                choice["reasoning_content"] = plan.reasoning_text
            obj = "text_completion"
        body: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": req.model,
                                "system_fingerprint": "llmbench-sim", "choices": [choice],
                                "usage": self._usage(seq, plan)}
        if req.timing:
            body["llmbench_timing"] = {"token_ns": seq.emit_ns, "token_unix_ns": seq.emit_unix_ns,
                                       **self._finish_info(seq, input_filter_ns, plan)}
        await _respond_json(send, 200, body)


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise APIError(400, "client disconnected before sending the body")
        b = msg.get("body", b"")
        size += len(b)
        if size > _MAX_BODY:
            raise APIError(413, f"request body larger than {_MAX_BODY} bytes", code="body_too_large")
        parts.append(b)
        if not msg.get("more_body", False):
            return b"".join(parts)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": headers + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _respond_json(send: Send, status: int, obj: Any) -> None:
    await _respond(send, status, json.dumps(obj).encode(), _JSON_HEADERS)


def create_app(config: SimConfig | None = None) -> Simulator:
    """An ASGI application simulating an OpenAI-compatible LLM server with ``config``."""
    return Simulator(config)

