"""A fault-injecting OpenAI-compatible server for the robustness tests, run in its own process.

The server streams well-formed chat/completions answers unless a fault is chosen for the request.
The fault is picked, first match wins, from:

1. the request body's ``"fault"`` field (``ClientConfig(extra_body={"fault": "reset"})``);
2. a prompt that starts with ``[fault:<name>]``;
3. a seeded mix, ``--mix reset=0.05,http_500=0.05`` (fractions per fault, drawn per request).

:data:`EXPECTED` says what the client must make of each fault (error type, HTTP status, chunks
timed before the fault, a piece of the message). The server counts what it received
(``GET /_faults/stats``: requests per fault, Authorization headers right/wrong/missing, never
the key itself), so a test can check that every request the client sent arrived exactly once.
``GET /v1/models`` lists the model; ``GET /metrics`` is 404, like a server without metrics.

Run ``python tests/faultserver.py [--mix ...] [--seed N]``: it prints ``PORT <n>``. In tests use
the ``fault_server`` fixture of tests/conftest.py (a factory) or :func:`start_fault_server`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import socket
import struct
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from factories import DONE, delta_chunk, sse

API_KEY_ENV = "FAULTSERVER_API_KEY"  # the server reads the expected key from here (never argv)
MODEL = "fault-model"
TOKEN = " ok"  # one cl100k_base token
COMPLETION_MARK = " elephant"  # first token of every completion (one cl100k token): grep logs for it


@dataclass(frozen=True)
class Expected:
    """What the client must record for a fault (``error_type`` None: a success)."""

    error_type: str | None
    status: int | None
    chunks: int  # choice-bearing SSE events timed before the fault
    message: str = ""  # a piece of the stored error message


#: Every fault the server can inject and the record it must produce (streaming chat requests).
EXPECTED: dict[str, Expected] = {
    "none": Expected(None, 200, 0),  # chunks depend on max_tokens: see normal_chunks()
    "http_400": Expected("http_4xx", 400, 0, "injected http_400: invalid request"),
    "http_401": Expected("http_4xx", 401, 0, "injected http_401: invalid API key"),
    "http_404": Expected("http_4xx", 404, 0, "injected http_404: model not found"),
    "http_429": Expected("rate_limited", 429, 0, "injected http_429: rate limit reached"),
    "http_500": Expected("http_5xx", 500, 0, "injected http_500: internal error"),
    "http_503": Expected("http_5xx", 503, 0, "injected http_503: overloaded"),
    "auth_echo": Expected("http_4xx", 401, 0, "Incorrect API key provided"),
    "drop": Expected("protocol", None, 0, "server closed the connection before responding"),
    # a TCP RST after the request was read (a crashed server): the request went out, so protocol, not connect
    "drop_rst": Expected("protocol", None, 0, "server closed the connection"),
    "reset": Expected("protocol", 200, 2, ""),
    "malformed_json": Expected("parse", 200, 2, "malformed JSON"),
    "not_object": Expected("parse", 200, 1, "not a JSON object"),
    "bad_utf8_split": Expected("parse", 200, 1, "invalid UTF-8"),
    "bad_utf8_one_write": Expected("parse", 200, 1, "invalid UTF-8"),  # the event before it survives
    "truncated_utf8": Expected("parse", 200, 1, "inside a UTF-8 sequence"),
    "empty": Expected("protocol", 200, 0, "empty stream"),
    "no_done": Expected("protocol", 200, 3, "without data: [DONE]"),
    "cut_mid_event": Expected("protocol", 200, 1, "inside an SSE event"),
    "stall": Expected("timeout", 200, 1, ""),
    "never_answer": Expected("timeout", None, 0, ""),
    "wrong_ct": Expected("protocol", 200, 0, "'text/html"),
    "json_body": Expected("protocol", 200, 0, "not text/event-stream"),
    "non_sse_body": Expected("protocol", 200, 0, "no SSE events"),
    "error_event": Expected("http_5xx", 200, 1, "engine failure"),
    "content_filter": Expected("refused", 200, 2, "content_filter"),
    "huge_chunk": Expected(None, 200, 2),  # survives: one 5.4 MB content event + the finish chunk
    "utf8_split_ok": Expected(None, 200, 3),  # a valid character split across writes is no fault
}

#: Faults that are over quickly (no timeout involved): good for mixes.
FAST_FAULTS = tuple(k for k, v in EXPECTED.items() if v.error_type not in (None, "timeout") and k != "auth_echo")
HTTP_MESSAGES = {
    400: "invalid request", 401: "invalid API key", 404: "model not found", 429: "rate limit reached",
    500: "internal error", 503: "overloaded",
}
HUGE_TEXT = "lorem ipsum dolor sit amet " * 200_000  # 5.4 MB in one event: > the client's 4 MiB read buffer


def normal_chunks(max_tokens: int, cap: int) -> int:
    """Choice-bearing events of a normal chat stream: role, tokens, finish."""
    return 1 + min(max_tokens, cap) + 1


def parse_mix(text: str) -> dict[str, float]:
    """``"reset=0.05,http_500=0.1"`` -> {fault: fraction}; unknown faults and sums > 1 are errors."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, frac = part.partition("=")
        if not sep or name not in EXPECTED:
            raise ValueError(f"bad mix entry {part!r}: use fault=fraction with a fault in {sorted(EXPECTED)}")
        mix[name] = float(frac)
    if sum(mix.values()) > 1 + 1e-9 or any(v < 0 for v in mix.values()):
        raise ValueError(f"mix fractions must be >= 0 and sum to <= 1, got {mix}")
    return mix


# =================================== the server (subprocess) ===================================
COMPACT = {"separators": (",", ":"), "ensure_ascii": False}  # the JSON of the events this server writes


class FaultApp:
    """The aiohttp application and its counters."""

    def __init__(self, mix: Mapping[str, float], seed: int, cap: int, itl_s: float, stall_s: float,
                 api_key: str | None) -> None:
        self.mix = dict(mix)
        self.rng = random.Random(seed)
        self.cap = cap
        self.itl_s = itl_s
        self.stall_s = stall_s
        self.api_key = api_key
        self.stats: Counter[str] = Counter()
        self.auth: Counter[str] = Counter()

    def pick(self, body: Mapping[str, Any], prompt: str) -> str:
        fault = body.get("fault")
        if isinstance(fault, str) and fault in EXPECTED:
            return fault
        if prompt.startswith("[fault:"):
            name = prompt[7:].partition("]")[0]
            if name in EXPECTED:
                return name
        u = self.rng.random()
        acc = 0.0
        for name, frac in self.mix.items():
            acc += frac
            if u < acc:
                return name
        return "none"

    def _check_auth(self, request: Any) -> bool:
        header = request.headers.get("Authorization")
        if self.api_key is None:
            self.auth["not_required"] += 1
            return True
        if header is None:
            self.auth["missing"] += 1
            return False
        ok = header == f"Bearer {self.api_key}"
        self.auth["ok" if ok else "wrong"] += 1
        return ok

    # -- handlers --------------------------------------------------------------------------
    async def models(self, request: Any) -> Any:
        from aiohttp import web

        if not self._check_auth(request):
            return web.json_response({"error": {"message": "invalid API key", "code": 401}}, status=401)
        return web.json_response({"object": "list", "data": [
            {"id": MODEL, "object": "model", "owned_by": "faultserver"},
            {"id": "fault-model-large", "object": "model", "owned_by": "faultserver"},
        ]})

    async def stats_handler(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"requests": sum(self.stats.values()), "by_fault": dict(self.stats),
                                  "auth": dict(self.auth)})

    async def reset_handler(self, request: Any) -> Any:
        from aiohttp import web

        self.stats.clear()
        self.auth.clear()
        return web.json_response({"ok": True})

    async def completions(self, request: Any) -> Any:
        from aiohttp import web

        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "request body is not JSON"}}, status=400)
        chat = request.path.endswith("/chat/completions")
        if chat:
            msgs = body.get("messages") or [{}]
            prompt = msgs[-1].get("content") or ""
        else:
            prompt = body.get("prompt")
        prompt = prompt if isinstance(prompt, str) else ""
        fault = self.pick(body, prompt)
        self.stats[fault] += 1
        authorised = self._check_auth(request)
        if fault == "auth_echo":  # a badly behaved server that echoes the credentials back
            header = request.headers.get("Authorization", "")
            return web.json_response({"error": {"message": f"Incorrect API key provided: {header}",
                                                "code": 401}}, status=401)
        if not authorised:
            return web.json_response({"error": {"message": "invalid API key", "code": 401}}, status=401)
        if body.get("model") != MODEL and body.get("model") != "fault-model-large":
            return web.json_response({"error": {"message": f"model {body.get('model')!r} does not exist"}},
                                     status=404)
        stream = bool(body.get("stream"))
        max_tokens = int(body.get("max_tokens") or 16)
        if fault.startswith("http_"):
            status = int(fault[5:])
            headers = {"Retry-After": "1"} if status == 429 else None
            return web.json_response({"error": {"message": f"injected {fault}: {HTTP_MESSAGES[status]}",
                                                "type": "injected", "code": status}},
                                     status=status, headers=headers)
        if fault in ("drop", "drop_rst"):
            _hard_close(request, reset=fault == "drop_rst")
            return web.Response()
        if fault == "never_answer":
            await asyncio.sleep(self.stall_s)
            return web.Response(status=504)
        if fault == "wrong_ct":
            return web.Response(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        if not stream or fault == "json_body":
            return self._json(chat, max_tokens, fault)
        if fault == "non_sse_body":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(json.dumps(self._json_payload(chat, 2)).encode() + b"\n\n")
            await resp.write_eof()
            return resp
        return await self._stream(request, chat, max_tokens, fault)

    def _json_payload(self, chat: bool, n: int) -> dict[str, Any]:
        text = COMPLETION_MARK + TOKEN * (n - 1)
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text}}
                                  if chat else {"index": 0, "text": text})
        choice["finish_reason"] = "length"
        return {"id": "f", "object": "chat.completion" if chat else "text_completion", "model": MODEL,
                "choices": [choice], "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}}

    def _json(self, chat: bool, max_tokens: int, fault: str) -> Any:
        from aiohttp import web

        if fault in ("malformed_json", "not_object"):
            return web.Response(body=b'{"choices": [' if fault == "malformed_json" else b"[1, 2]",
                                content_type="application/json")
        return web.json_response(self._json_payload(chat, min(max_tokens, self.cap)))

    def _chunk(self, chat: bool, content: str | None, *, role: bool = False, finish: str | None = None) -> bytes:
        if chat:
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if content is not None:
                delta["content"] = content
            obj = delta_chunk(delta, finish, id="f", object="chat.completion.chunk", model=MODEL)
        else:
            obj = {"id": "f", "object": "text_completion", "model": MODEL,
                   "choices": [{"index": 0, "text": content or "", "finish_reason": finish}]}
        return sse(obj, **COMPACT)

    async def _stream(self, request: Any, chat: bool, max_tokens: int, fault: str) -> Any:
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        w = resp.write
        c = self._chunk
        if fault == "none":
            n = min(max_tokens, self.cap)
            await w(c(chat, "", role=True) if chat else b"")
            for i in range(n):
                await w(c(chat, COMPLETION_MARK if i == 0 else TOKEN))
                if self.itl_s:
                    await asyncio.sleep(self.itl_s)
            if not chat:  # completions: no role chunk; keep the chunk count equal to chat's
                await w(c(chat, ""))
            usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
            await w(c(chat, None, finish="length") + sse({"id": "f", "choices": [], "usage": usage}, **COMPACT) + DONE)
        elif fault == "reset":
            await w(c(chat, COMPLETION_MARK) + c(chat, TOKEN))
            await asyncio.sleep(0.05)
            _hard_close(request, reset=True)
            return resp
        elif fault == "malformed_json":
            await w(c(chat, COMPLETION_MARK) + c(chat, TOKEN))
            await asyncio.sleep(0.01)
            await w(b'data: {"choices": [{"delta": \n\n' + DONE)
        elif fault == "not_object":
            await w(c(chat, COMPLETION_MARK) + b"data: [1, 2]\n\n" + DONE)
        elif fault == "bad_utf8_split":
            await w(c(chat, COMPLETION_MARK))
            await asyncio.sleep(0.01)
            await w(b'data: {"choices":[{"index":0,"delta":{"content":" \xe2\x82')  # a valid prefix ...
            await asyncio.sleep(0.02)
            await w(b'\xff"}}]}\n\n' + DONE)  # ... completed by a byte that is not a continuation
        elif fault == "bad_utf8_one_write":  # what bad_utf8_split becomes when the client reads late
            bad = b'data: {"choices":[{"index":0,"delta":{"content":" \xe2\x82\xff"}}]}\n\n'
            await w(c(chat, COMPLETION_MARK) + bad + DONE)
        elif fault == "truncated_utf8":
            await w(c(chat, COMPLETION_MARK))
            await asyncio.sleep(0.01)
            await w(b"data: [DONE]\n\n\xe2\x82")  # the stream ends inside a multi-byte character
        elif fault == "utf8_split_ok":
            await w(c(chat, COMPLETION_MARK))
            euro = c(chat, " \u20ac")
            cut = euro.index(b"\xe2") + 1
            await w(euro[:cut])
            await asyncio.sleep(0.02)
            await w(euro[cut:])
            await w(c(chat, None, finish="stop") + DONE)
        elif fault == "empty":
            pass
        elif fault == "no_done":
            await w(c(chat, COMPLETION_MARK) + c(chat, TOKEN) + c(chat, None, finish="length"))
        elif fault == "cut_mid_event":
            await w(c(chat, COMPLETION_MARK) + b'data: {"choices": [{"delta": {"con')
        elif fault == "stall":
            await w(c(chat, COMPLETION_MARK))
            await asyncio.sleep(self.stall_s)
            await w(c(chat, None, finish="length") + DONE)
        elif fault == "error_event":
            await w(c(chat, COMPLETION_MARK) + sse({"error": {"message": "engine failure", "code": 500}}, **COMPACT))
        elif fault == "content_filter":
            await w(c(chat, COMPLETION_MARK) + c(chat, None, finish="content_filter") + DONE)
        elif fault == "huge_chunk":
            await w(c(chat, HUGE_TEXT))
            await w(c(chat, None, finish="length") + DONE)
        else:  # pragma: no cover - EXPECTED and this dispatch go together
            raise web.HTTPInternalServerError(text=f"fault {fault!r} has no stream behaviour")
        try:
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp


def _hard_close(request: Any, *, reset: bool) -> None:
    """Close the connection now; ``reset=True`` sends a TCP RST (SO_LINGER 0) instead of a FIN."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if reset and sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


def make_app(fa: FaultApp) -> Any:
    from aiohttp import web

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", fa.completions)
    app.router.add_post("/v1/completions", fa.completions)
    app.router.add_get("/v1/models", fa.models)
    app.router.add_get("/_faults/stats", fa.stats_handler)
    app.router.add_post("/_faults/reset", fa.reset_handler)
    return app  # no /metrics route: 404, like a server that exposes none


def serve(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mix", default="", help="fault=fraction,... (seeded per request)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap", type=int, default=8, help="at most this many tokens per normal completion")
    ap.add_argument("--itl-ms", type=float, default=0.0, help="delay between the tokens of a normal completion")
    ap.add_argument("--stall-s", type=float, default=60.0, help="how long stall/never_answer stay silent")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM) ...")
    ap.add_argument("--tls-key", help="... and this private key (PEM)")
    args = ap.parse_args(argv)
    for name in ("aiohttp.server", "aiohttp.access", "aiohttp.web", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    fa = FaultApp(parse_mix(args.mix), args.seed, args.cap, args.itl_ms / 1000, args.stall_s,
                  os.environ.get(API_KEY_ENV) or None)

    async def main() -> None:
        from aiohttp import web

        runner = web.AppRunner(make_app(fa), access_log=None, handler_cancellation=True)
        await runner.setup()
        ssl_context = None
        if args.tls_cert:
            import ssl

            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(args.tls_cert, args.tls_key)
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024, ssl_context=ssl_context)
        await site.start()
        print(f"PORT {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:  # pragma: no cover
        asyncio.run(main())
    except KeyboardInterrupt:  # pragma: no cover
        pass


# ===================================== the test side ===========================================
@dataclass
class FaultServer:
    """A running fault server process."""

    proc: subprocess.Popen[str]
    port: int
    mix: dict[str, float] = field(default_factory=dict)
    scheme: str = "http"

    @property
    def root(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The API base URL (``.../v1``) to give the client or ``--llm-endpoint``."""
        return self.root + "/v1"

    def _open(self, req: str | urllib.request.Request) -> Any:
        ctx = None
        if self.scheme == "https":  # our own self-signed test certificate
            import ssl

            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return urllib.request.urlopen(req, timeout=10, context=ctx)

    def stats(self) -> dict[str, Any]:
        """{"requests": n, "by_fault": {fault: n}, "auth": {"ok"|"wrong"|"missing"|"not_required": n}}."""
        with self._open(self.root + "/_faults/stats") as r:
            return json.loads(r.read())

    def reset(self) -> None:
        with self._open(urllib.request.Request(self.root + "/_faults/reset", data=b"{}", method="POST")):
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start_fault_server(*, mix: Mapping[str, float] | str | None = None, seed: int = 0, cap: int = 8,
                       itl_ms: float = 0.0, stall_s: float = 60.0, api_key: str | None = None,
                       tls: tuple[str, str] | None = None) -> FaultServer:
    """Start the server in its own process (so stalls and blocking are real) and wait for its port.

    ``api_key``: requests must carry ``Authorization: Bearer <api_key>`` (passed to the server
    through its environment, never its command line). ``tls``: (certificate, key) PEM paths.
    """
    mix_text = mix if isinstance(mix, str) else ",".join(f"{k}={v}" for k, v in (mix or {}).items())
    parsed = parse_mix(mix_text)
    env = dict(os.environ)
    env.pop(API_KEY_ENV, None)
    if api_key is not None:
        env[API_KEY_ENV] = api_key
    cmd = [sys.executable, __file__, "--mix", mix_text, "--seed", str(seed), "--cap", str(cap),
           "--itl-ms", str(itl_ms), "--stall-s", str(stall_s)]
    if tls is not None:
        cmd += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "" if the process died before listening
    if not line.startswith("PORT "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"fault server did not start: {line!r}")
    return FaultServer(proc, int(line.split()[1]), parsed, "https" if tls else "http")


def self_signed_cert(directory: Path) -> tuple[str, str]:
    """A throwaway self-signed certificate for 127.0.0.1 made with the openssl CLI (skip without it)."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl command not available to make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return str(cert), str(key)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if __name__ == "__main__":
    serve()
