"""OpenAI wire format: request validation and pre-encoded response/chunk bytes (§4.6).

Validation turns a JSON body into a :class:`ParsedRequest` or raises :class:`APIError` carrying the
HTTP status and the OpenAI error object. Chunk encoding builds each request's constant JSON head
once and splices the per-token JSON string literals into it, so the per-token hot path is a few
bytes concatenations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..common.tokenizer import Tokenizer
from .config import SimConfig

__all__ = ["APIError", "ChunkEncoder", "ParsedRequest", "error_body", "parse_request"]

SYSTEM_FINGERPRINT = "llmbench-sim"
_ROLES = {"system", "user", "assistant", "tool", "developer", "function"}


class APIError(Exception):
    """An error response: HTTP status + OpenAI error object."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type, "param": param, "code": code}}).encode()


@dataclass(slots=True)
class ParsedRequest:
    """A validated generation request."""

    kind: str  # "chat" | "completion"
    model: str
    prompt_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    timing: bool = False


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def _int(body: dict[str, Any], name: str, minimum: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"'{name}' must be an integer, got {json.dumps(v)[:40]}", name, "invalid_type")
    if v < minimum:
        raise _bad(f"'{name}' must be >= {minimum}, got {v}", name, "invalid_value")
    return v


def _bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _bad(f"'{name}' must be a boolean, got {json.dumps(v)[:40]}", name, "invalid_type")
    return v


def _message_text(m: Any, i: int) -> str:
    if not isinstance(m, dict):
        raise _bad(f"messages[{i}] must be an object", f"messages.[{i}]", "invalid_type")
    role = m.get("role")
    if role not in _ROLES:
        raise _bad(f"messages[{i}].role must be one of {sorted(_ROLES)}, got {json.dumps(role)[:40]}",
                   f"messages.[{i}].role", "invalid_value")
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        parts = []
        for j, p in enumerate(c):
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise _bad(f"messages[{i}].content[{j}] must be a text part "
                           '({"type": "text", "text": ...}); other part types are not supported',
                           f"messages.[{i}].content", "invalid_value")
            parts.append(p["text"])
        return "".join(parts)
    raise _bad(f"messages[{i}].content must be a string or a list of text parts",
               f"messages.[{i}].content", "invalid_type")


def _prompt_ids(kind: str, body: dict[str, Any], tok: Tokenizer) -> list[int]:
    if kind == "chat":
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise _bad("'messages' must be a non-empty array", "messages", "invalid_value")
        ids: list[int] = []
        for i, m in enumerate(msgs):
            text = _message_text(m, i)
            if text:
                ids.extend(tok.encode(text))  # no chat-template overhead (docs/simulator.md)
        return ids
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        return tok.encode(p)
    if isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        n_vocab = tok.declaration.vocab_size
        for t in p:
            if not 0 <= t < n_vocab:
                raise _bad(f"token id {t} in 'prompt' is outside the vocabulary [0, {n_vocab})",
                           "prompt", "invalid_value")
        return list(p)
    if p is None:
        raise _bad("'prompt' is required", "prompt", "missing_required_parameter")
    raise _bad("'prompt' must be a string, a list of token ids, or a batch of exactly one of those "
               "(batched prompts are not supported)", "prompt", "invalid_value")


def parse_request(kind: str, raw: bytes, config: SimConfig, tok: Tokenizer) -> ParsedRequest:
    """Validate a /v1/chat/completions (``kind="chat"``) or /v1/completions body."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"request body is not valid JSON: {exc}", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None, "invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter", "model", "missing_required_parameter")
    if model != config.model_name:
        raise APIError(404, f"The model `{model}` does not exist (this server serves "
                       f"`{config.model_name}`)", param="model", code="model_not_found")
    n = body.get("n")
    if n is not None and n != 1:
        raise _bad("only n=1 is supported", "n", "invalid_value")
    stream = _bool(body, "stream")
    so = body.get("stream_options")
    include_usage = False
    if so is not None:
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true", "stream_options",
                       "invalid_value")
        if not isinstance(so, dict):
            raise _bad("'stream_options' must be an object", "stream_options", "invalid_type")
        include_usage = _bool(so, "include_usage")
    max_tokens = _int(body, "max_tokens", 1)
    mct = _int(body, "max_completion_tokens", 1)
    if mct is not None:
        max_tokens = mct
    min_tokens = _int(body, "min_tokens", 0) or 0
    ignore_eos = _bool(body, "ignore_eos")
    t = body.get("temperature", 1.0)
    if t is None:
        t = 1.0
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 2:
        raise _bad(f"'temperature' must be a number in [0, 2], got {json.dumps(t)[:40]}", "temperature",
                   "invalid_value")
    stop_v = body.get("stop")
    if stop_v is None:
        stop: tuple[str, ...] = ()
    elif isinstance(stop_v, str):
        stop = (stop_v,)
    elif isinstance(stop_v, list) and all(isinstance(s, str) for s in stop_v):
        stop = tuple(stop_v)
    else:
        raise _bad("'stop' must be a string or an array of strings", "stop", "invalid_type")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _bad("'seed' must be an integer", "seed", "invalid_type")
    timing = _bool(body, "llmbench_timing", False) or config.timing
    prompt_ids = _prompt_ids(kind, body, tok)
    p = len(prompt_ids)
    param = "messages" if kind == "chat" else "prompt"
    if p == 0:
        raise _bad("the prompt is empty (0 tokens)", param, "invalid_value")
    cw = config.context_window
    if max_tokens is None:
        max_tokens = cw - p
    if p + max_tokens > cw or max_tokens < 1:
        raise _bad(f"This model's maximum context length is {cw} tokens. However, you requested "
                   f"{p + max(max_tokens, 0)} tokens ({p} in the {param}, {max(max_tokens, 0)} in the "
                   f"completion). Please reduce the length of the {param} or completion.",
                   param, "context_length_exceeded")
    if min_tokens > max_tokens:
        raise _bad(f"'min_tokens' ({min_tokens}) must not exceed max_tokens ({max_tokens})", "min_tokens",
                   "invalid_value")
    return ParsedRequest(kind, model, prompt_ids, max_tokens, min_tokens, ignore_eos, float(t), stop, seed,
                         stream, include_usage, timing)


def _ints(xs: Sequence[int]) -> bytes:
    return ("[" + ",".join(map(str, xs)) + "]").encode()


class ChunkEncoder:
    """Pre-encoded SSE event bytes for one streaming request."""

    __slots__ = ("chat", "head", "tok_open", "tok_close", "tail", "rid", "model", "created", "obj", "think_open",
                 "think_close", "tool_first", "tool_next", "tool_close")

    def __init__(self, kind: str, rid: str, model: str, created: int, include_usage: bool) -> None:
        self.chat = kind == "chat"
        self.rid = rid
        self.model = model
        self.created = created
        self.obj = "chat.completion.chunk" if self.chat else "text_completion"
        self.head = (f'data: {{"id":"{rid}","object":"{self.obj}","created":{created},'
                     f'"model":{json.dumps(model)},"system_fingerprint":"{SYSTEM_FINGERPRINT}",'
                     f'"choices":[{{"index":0,').encode()
        self.tok_open = self.head + (b'"delta":{"content":' if self.chat else b'"text":')
        self.tok_close = (b'},' if self.chat else b',') + b'"logprobs":null,"finish_reason":null}]'
        self.tail = (b',"usage":null' if include_usage else b"")
        # reasoning (issue 49): delta.reasoning_content on chat, choices[0].reasoning_content on completions
        self.think_open = self.head + (b'"delta":{"reasoning_content":' if self.chat else
                                       b'"text":"","reasoning_content":')
        self.think_close = self.tok_close
        # a tool call's arguments (chat): its id, type and name on the first delta, as OpenAI streams them
        call = f'call_{rid.split("-", 1)[-1]}'
        self.tool_first = self.head + (b'"delta":{"tool_calls":[{"index":0,"id":"' + call.encode()
                                       + b'","type":"function","function":{"name":"llmbench_tool","arguments":')
        self.tool_next = self.head + b'"delta":{"tool_calls":[{"index":0,"function":{"arguments":'
        self.tool_close = b'}}]},"logprobs":null,"finish_reason":null}]'

    def role(self) -> bytes:
        return (self.head + b'"delta":{"role":"assistant","content":""},"logprobs":null,'
                b'"finish_reason":null}]' + self.tail + b"}\n\n")

    def token(self, piece: bytes, timing: bytes = b"") -> bytes:
        return self.tok_open + piece + self.tok_close + self.tail + timing + b"}\n\n"

    def reasoning(self, piece: bytes, timing: bytes = b"") -> bytes:
        """A reasoning delta (``SimConfig.reasoning == "streamed"``)."""
        return self.think_open + piece + self.think_close + self.tail + timing + b"}\n\n"

    def tool(self, piece: bytes, first: bool, timing: bytes = b"") -> bytes:
        """A tool call's arguments delta (chat); the call's id and name on the ``first``."""
        return (self.tool_first if first else self.tool_next) + piece + self.tool_close + self.tail + timing + b"}\n\n"

    def finish(self, reason: str, timing: bytes = b"") -> bytes:
        body = b'"delta":{}' if self.chat else b'"text":""'
        return (self.head + body + b',"logprobs":null,"finish_reason":"' + reason.encode() + b'"}]'
                + self.tail + timing + b"}\n\n")

    def usage(self, usage: dict[str, Any]) -> bytes:
        d = {"id": self.rid, "object": self.obj, "created": self.created, "model": self.model,
             "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [], "usage": usage}
        return b"data: " + json.dumps(d, separators=(",", ":")).encode() + b"\n\n"

    @staticmethod
    def token_timing(token_ns: Sequence[int], token_unix_ns: Sequence[int]) -> bytes:
        return (b',"llmbench_timing":{"token_ns":' + _ints(token_ns) + b',"token_unix_ns":'
                + _ints(token_unix_ns) + b"}")

    @staticmethod
    def finish_timing(info: dict[str, Any]) -> bytes:
        return b',"llmbench_timing":' + json.dumps(info, separators=(",", ":")).encode()


def join_pieces(pieces: Sequence[bytes]) -> bytes:
    """Concatenate JSON string literals into one literal (``'" a"' + '" b"'`` → ``'" a b"'``)."""
    if len(pieces) == 1:
        return pieces[0]
    return b'"' + b"".join(p[1:-1] for p in pieces) + b'"'
