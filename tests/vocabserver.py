"""A loopback vLLM-like server with a 32,000-id vocabulary, for the prompt-fit and probe-error tests.

Runs in a thread of the test process (aiohttp on its own event loop). It answers ``/v1/models``
(``owned_by: vllm``, ``max_model_len``), ``/version``, ``/metrics`` (404), and, when ``tokenize`` is on,
``POST /tokenize`` / ``/detokenize`` with its own tokenizer: one token per two characters, ids in
100 … 31,999. ``POST /v1/completions`` rejects any id ≥ 32,000 with vLLM's 400 ("Token id N is out
of vocabulary") and a prompt plus ``max_tokens`` beyond ``max_model_len`` with vLLM's context 400;
otherwise it streams ``max_tokens`` one-token chunks with ``usage``. ``always_400`` answers every
completion with that message instead. Every prompt it received is kept (``prompts``: ids as sent,
text tokenized) with its ``cache_salt``; ``dev_mode`` serves ``POST /reset_prefix_cache``. ``dies_on``
makes the server die (as ``stop``) when a completion request it is given arrives: a death placed by what
the server received, not by when the client's records reach the disk.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import zlib
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from aiohttp import web

VOCAB = 32_000
MODEL = "tiny-vocab"


def tokenize(text: str) -> list[int]:
    return [100 + zlib.crc32(text[i:i + 2].encode()) % (VOCAB - 100) for i in range(0, len(text), 2)]


@dataclass
class VocabServer:
    tokenize: bool = True
    max_model_len: int = 8192
    always_400: str | None = None
    itl_s: float = 0.002  # between streamed tokens
    dev_mode: bool = False  # POST /reset_prefix_cache answers 200 (else 404, as vLLM without VLLM_SERVER_DEV_MODE)
    port: int = 0
    salts: list[str | None] = field(default_factory=list)
    flushes: int = 0
    prompts: list[list[int]] = field(default_factory=list)
    texts: int = 0
    tokenize_calls: int = 0
    dies_on: Callable[[dict[str, Any]], bool] | None = None  # given a completion request's body: die now?
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _error(self, message: str) -> web.Response:
        return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                                  "param": None, "code": 400}, status=400)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": self.max_model_len}]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def do_tokenize(self, request: web.Request) -> web.Response:
        if not self.tokenize:
            return web.Response(status=404)
        self.tokenize_calls += 1
        body = await request.json()
        ids = tokenize(body.get("prompt", ""))
        return web.json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids})

    async def do_detokenize(self, request: web.Request) -> web.Response:
        if not self.tokenize:
            return web.Response(status=404)
        body = await request.json()
        return web.json_response({"prompt": "ab" * len(body.get("tokens") or [])})

    async def reset(self, request: web.Request) -> web.Response:
        if not self.dev_mode:
            return web.json_response({"detail": "Not Found"}, status=404)
        self.flushes += 1
        return web.Response(status=200)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.dies_on is not None and self.dies_on(body):
            # the server dies as this request arrives: it and those in flight are dropped, later ones refused
            asyncio.get_running_loop().stop()
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError
        self.salts.append(body.get("cache_salt"))
        if self.always_400:
            return self._error(self.always_400)
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            ids = [int(t) for t in prompt]
        else:
            self.texts += 1
            ids = [1, *tokenize(str(prompt))]  # BOS, as a text prompt gets
        self.prompts.append(ids)
        bad = next((t for t in ids if t >= VOCAB or t < 0), None)
        if bad is not None:
            return self._error(f"Token id {bad} is out of vocabulary")
        n = int(body.get("max_tokens") or 16)
        if len(ids) + n > self.max_model_len:
            return self._error(f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                               f"requested {len(ids) + n} tokens ({len(ids)} in the messages, {n} in the completion).")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            chunk = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
                     "choices": [{"index": 0, "text": " ok", "finish_reason": "length" if i == n - 1 else None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(self.itl_s)
        usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
        await resp.write(f"data: {json.dumps({'id': 'cmpl-1', 'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def routes(self, app: web.Application) -> None:
        """The endpoints served (a subclass serves another server's)."""
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_post("/tokenize", self.do_tokenize)
        app.router.add_post("/detokenize", self.do_detokenize)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/reset_prefix_cache", self.reset)

    def start(self) -> VocabServer:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            self.routes(app)
            self._runner = web.AppRunner(app)
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        """Close the listening socket and every open connection (as a dying server's kernel does)."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> VocabServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
