"""Reading one response into its record: SSE chunks timed as they arrive (App. B.1.1), or one
JSON body; usage, finish reason, refusals and in-stream errors (§4.2.6, §4.8.1).

Every chunk is stamped with ``time.perf_counter_ns()`` at the read that completed its ``data:``
event (one clock read per socket read; the events of one read are parsed in one pass and all carry
that read's stamp, never a later one). The first token is the first chunk whose *content* has a
non-whitespace character (``records.TTFT_RULE``, §5.1.3.1). Reasoning (``delta.reasoning_content`` or
``delta.reasoning`` on chat, ``choices[0].reasoning_content`` on completions) and tool-call arguments
(``delta.tool_calls``) are kept per chunk beside the content (``chunk_reasoning``, ``chunk_tool``): the
phases of a reasoning model's answer (issue 49), timed once the response is read
(``records.assign_phases``). The common streamed object (content alone) is decoded typed, only the
fields read (:func:`_chunk_decoder`); every other one as a dict, with the same result. Per-chunk token
counts are assigned after the stream ends by tokenizing the joined output once
(:func:`assign_chunk_tokens`, §4.6.3). A server's own extensions of a streamed object (llama.cpp ``timings``, the simulator's
``llmbench_timing``) are its adapter's to read (``ServerAdapter.parse_extensions``).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..common.records import ErrorType, RequestRecord
from ..common.tokenizer import Tokenizer
from ..measure.refusals import RefusalPolicy, policy_code
from ..sut.adapters import ServerAdapter
from .config import ClientConfig
from .errors import TransportError, classify_status
from .sse import SSEParser
from .transports.base import Response

try:  # orjson is ~3-5x faster than json on the per-chunk hot path
    import orjson as _orjson

    loads = _orjson.loads

    def dumps(obj: Any) -> bytes:
        return _orjson.dumps(obj)

except ImportError:  # pragma: no cover - fallback when orjson is not installed
    import json as _json

    loads = _json.loads

    def dumps(obj: Any) -> bytes:
        return _json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


try:  # a typed decode of the common chunk: only the fields read, no dict per object (issue 38)
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - msgspec is a dependency; without it every object takes loads
    _msgspec = None  # type: ignore[assignment]

__all__ = ["Hold", "ResponseReader", "add_tool_calls", "assign_chunk_tokens", "dumps", "loads"]

#: with a hold set, a read's events are parsed this many at a time, the hold asked before each
#: slice: a send that falls due during a long read waits for one slice, not the whole read
_HOLD_SLICE = 16

#: ``hold(now_ns, events, since_ns)``: before the reader parses a read of ``events`` events (stamped
#: ``since_ns`` already), something to wait for first, or None. The open loop sets one so that a send
#: due before that work would end goes first (loadgen/load.py); the read's stamp is taken before the
#: wait. After each wait the reader asks again with the time then (``now_ns``); the hold bounds how
#: long one read is held.
Hold = Callable[[int, int, int], "Awaitable[None] | None"]


if _msgspec is not None:  # gc=False: decoded JSON holds no cycle, so the collector need not track them
    class _Delta(_msgspec.Struct, gc=False):
        content: str | None = None
        reasoning_content: str | None = None
        reasoning: str | None = None
        refusal: str | None = None
        #: only null or ``[]`` decode: a delta that carries a tool call is another shape (read as a dict, its
        #: arguments kept), at no per-chunk cost to the common delta
        tool_calls: tuple[()] | None = None

    class _Choice(_msgspec.Struct, gc=False):
        delta: _Delta | None = None
        text: str | None = None
        finish_reason: str | None = None
        #: completions reasoning (``choices[0].reasoning_content`` or ``.reasoning``): only null decodes, so a
        #: choice that carries reasoning is read as a dict, and the common completions chunk pays nothing for it
        reasoning_content: None = None
        reasoning: None = None


@functools.lru_cache(maxsize=None)
def _chunk_decoder(metadata_keys: frozenset[str]) -> tuple[Callable[[str], Any], Callable[[Any], Any], Any] | None:
    """The typed decoder of the common streamed object (§4.6.1): its ``choices`` (each one's delta
    content, reasoning, refusal, text and finish reason, all strings or null; a delta's ``tool_calls`` and a
    completions choice's ``reasoning_content`` only when null or empty), ``usage`` only when
    null, and whether each of ``metadata_keys`` is there. Returns ``(decode, metadata, none)``:
    ``metadata(obj) == none`` when the object holds no metadata key. An object of any other shape
    fails to decode (``msgspec.DecodeError``) and is read as a dict (:meth:`ResponseReader.read_stream`).
    None without msgspec, or where a metadata key is one of the fields read."""
    if _msgspec is None or metadata_keys & {"choices", "usage"}:
        return None
    keys = sorted(metadata_keys)
    names = [f"m{i}" for i in range(len(keys))]
    chunk = _msgspec.defstruct(
        "_Chunk",
        [("choices", list[_Choice], []), ("usage", None, None)] + [(n, Any, _msgspec.UNSET) for n in names],
        rename=dict(zip(names, keys)),
        gc=False,
    )
    decode = _msgspec.json.Decoder(chunk).decode
    metadata = operator.attrgetter(*names)
    none = (_msgspec.UNSET,) * len(names) if len(names) > 1 else _msgspec.UNSET
    return decode, metadata, none


def assign_chunk_tokens(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    """Tokens per chunk: tokenize ``"".join(texts)`` once, give each token to the chunk that
    holds its first character (§4.6.3). Never tokenizes chunks one by one."""
    joined = "".join(texts)
    if not joined:
        return [0] * len(texts)
    starts = tokenizer.token_starts(joined)  # ascending
    # the tokens that start before each chunk's end (one bisection per chunk); a chunk's own are the step
    below = list(map(functools.partial(bisect.bisect_left, starts), itertools.accumulate(map(len, texts))))
    return [b - a for a, b in zip([0, *below], below)]


def add_tool_calls(rec: RequestRecord, deltas: Any) -> None:
    """A chunk's ``tool_calls`` deltas into ``rec``: their arguments joined as this chunk's ``chunk_tool``
    entry (aligned with ``chunk_text``: the chunk's text is appended after this), and each call assembled
    in ``rec.tool_calls`` by its ``index`` (id and name from its first delta, arguments concatenated)."""
    calls = rec.tool_calls if rec.tool_calls is not None else []
    rec.tool_calls = calls
    args: list[str] = []
    for d in deltas if isinstance(deltas, list) else ():
        if not isinstance(d, dict):
            continue
        index = d.get("index", len(calls) if d.get("id") else max(len(calls) - 1, 0))
        while len(calls) <= index:
            calls.append({"index": len(calls), "id": None, "name": None, "arguments": ""})
        call = calls[index]
        if d.get("id"):
            call["id"] = d["id"]
        fn = d.get("function")
        if isinstance(fn, dict):
            if fn.get("name"):
                call["name"] = fn["name"]
            a = fn.get("arguments")
            if isinstance(a, str) and a:
                call["arguments"] += a
                args.append(a)
    tool = rec.chunk_tool
    tool.extend([""] * (len(rec.chunk_text) - len(tool)))
    tool.append("".join(args))


def _error_message(body: bytes) -> str:
    """The human message of an error body (OpenAI ``{"error": {"message": ...}}`` or raw text)."""
    try:
        obj = loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(err.get(key), str):
                    return err[key]
        elif isinstance(err, str):
            return err
    return body.decode("utf-8", "replace").strip()


def _json_or_none(body: bytes) -> Any:
    try:
        return loads(body)
    except ValueError:
        return None


def _stream_error(err: Any, policy: RefusalPolicy | None = None) -> TransportError:
    """An ``{"error": ...}`` object sent inside a 200 stream (vLLM does this); a policy code is a refusal."""
    code = err.get("code") if isinstance(err, dict) else None
    msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    refusal = policy_code(None, {"error": err}, policy)
    if refusal is not None:
        return TransportError(ErrorType.REFUSED, f"policy refusal in stream ({refusal}): {msg}")
    try:
        code = int(code)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        code = 500
    et = classify_status(code) or ErrorType.HTTP_5XX
    return TransportError(et, f"error event in stream: {msg}")


class ResponseReader:
    """Reads a :class:`Response` into a :class:`RequestRecord` as ``config`` asked (stream or not,
    chat or completions) and ``adapter`` reads the server's extensions; a failure found in the
    response raises a classified :class:`TransportError`."""

    __slots__ = ("chat", "stream", "require_done", "refusals", "parse_extensions", "metadata_keys", "hold",
                 "typed")

    def __init__(self, config: ClientConfig, adapter: ServerAdapter) -> None:
        self.chat = config.api == "chat"
        self.stream = config.stream
        self.require_done = config.require_done
        self.refusals = config.refusals
        self.parse_extensions = adapter.parse_extensions
        #: an object with one of these keys is read beyond its choices (see ``read_stream``)
        self.metadata_keys = frozenset({"error", *adapter.extension_keys})
        #: see :data:`Hold` (None: never wait)
        self.hold: Hold | None = None
        #: the typed decoder of the common object (:func:`_chunk_decoder`); None: every object as a dict
        self.typed = _chunk_decoder(self.metadata_keys)

    async def read(self, resp: Response, rec: RequestRecord) -> None:
        """Status, content type, then the body (stream or JSON) into ``rec``."""
        rec.status = resp.status
        et = classify_status(resp.status)
        if et is not None:
            raw = await resp.read_body(64 * 1024)
            code = policy_code(resp.status, _json_or_none(raw), self.refusals)
            if code is not None:  # a content-policy rejection is a refusal (§4.8.1)
                raise TransportError(ErrorType.REFUSED, f"HTTP {resp.status} policy refusal ({code}): "
                                     f"{_error_message(raw)}")
            raise TransportError(et, f"HTTP {resp.status}: {_error_message(raw)}")
        if self.stream:
            if not resp.content_type.startswith("text/event-stream"):
                raw = await resp.read_body(64 * 1024)
                raise TransportError(
                    ErrorType.PROTOCOL,
                    f"streaming request answered with Content-Type {resp.content_type!r}, "
                    f"not text/event-stream: {_error_message(raw)}",
                )
            await self.read_stream(resp, rec)
        else:
            await self.read_json(resp, rec)

    async def read_json(self, resp: Response, rec: RequestRecord) -> None:
        """A non-streaming answer: one chunk, timed when the whole body is in."""
        raw = await resp.read_body(1 << 31)
        now = time.perf_counter_ns()
        rec.end_ns = now
        obj = loads(raw)
        if not isinstance(obj, dict):
            raise TransportError(ErrorType.PARSE, "response body is not a JSON object")
        if "error" in obj and not obj.get("choices"):
            raise _stream_error(obj["error"], self.refusals)
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            if self.chat:
                msg = c.get("message") or {}
                content = msg.get("content") or ""
                reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
                if msg.get("refusal"):
                    rec.refusal = msg["refusal"]
                if msg.get("tool_calls"):
                    add_tool_calls(rec, msg["tool_calls"])
            else:
                content = c.get("text") or ""
                reasoning = c.get("reasoning_content") or c.get("reasoning") or ""
            rec.first_chunk_ns = now
            rec.chunk_ns.append(now)
            rec.chunk_text.append(content)
            rec.chunk_reasoning.append(reasoning)
            if reasoning:
                rec.reasoning_source = "field"
            if content and not content.isspace():
                rec.first_token_ns = now
            rec.finish_reason = c.get("finish_reason")
        else:
            raise TransportError(ErrorType.PROTOCOL, "response has no choices")
        if obj.get("usage"):
            rec.usage = obj["usage"]

    async def read_stream(self, resp: Response, rec: RequestRecord) -> None:
        """The hot path, one pass per read: read, one clock read, the read's events parsed at once
        and recorded with that read's stamp, the time they arrived (App. B.1.1).

        Per event only the text is appended; the read's stamps (and the empty reasoning of its
        chunks) are added once per read, in a ``finally`` so that the three lists stay aligned
        when an event raises (the chunks before it keep their stamp). With a :data:`Hold` set (the
        open loop's send priority) the read's events are parsed :data:`_HOLD_SLICE` at a time and
        the hold is asked before each slice; every event still carries the read's stamp."""
        parser = SSEParser()
        feed = parser.feed_data
        read = resp.read_chunk
        clock = time.perf_counter_ns
        _loads = loads
        chat = self.chat
        metadata_keys = self.metadata_keys
        isdisjoint = metadata_keys.isdisjoint
        metadata = self._metadata
        chunk_ns = rec.chunk_ns
        chunk_text = rec.chunk_text
        chunk_reasoning = rec.chunk_reasoning
        text_app = chunk_text.append
        usage_app = rec.chunk_usage_tokens.append
        first_token = rec.first_token_ns is not None
        done = False
        events_seen = 0
        typed = self.typed
        if typed is not None:
            decode, metadata_of, no_metadata = typed
            decode_error = _msgspec.DecodeError
        while True:
            data = await read()
            if not data:
                break
            now = clock()
            events = feed(data)
            if not events:
                continue
            if rec.first_chunk_ns is None:
                rec.first_chunk_ns = now
            ne = len(events)
            events_seen += ne
            hold = self.hold
            lo = 0
            try:
                while lo < ne:
                    if hold is None:  # no send to give way to: the whole read at once
                        hi = ne
                    else:  # a slice at a time, asking before each (a send due within it goes first)
                        hi = lo + _HOLD_SLICE
                        k = min(ne, hi) - lo
                        wait = hold(now if lo == 0 else clock(), k, now)
                        while wait is not None:  # released: ask again, a send may be due within this work too
                            await wait
                            hold = self.hold
                            wait = hold(clock(), k, now) if hold is not None else None
                    for d in (events if lo == 0 and hi >= ne else events[lo:hi]):
                        if d == "[DONE]":
                            if not done:
                                done = True
                                rec.end_ns = now
                            continue
                        obj = content = None
                        if typed is not None:  # the common object, typed: its content and finish reason
                            try:
                                ch = decode(d)
                            except decode_error:  # another shape (or not JSON): read below as a dict
                                ch = None
                            if ch is not None and ch.choices and metadata_of(ch) == no_metadata:
                                c = ch.choices[0]
                                if not chat:
                                    content = c.text or ""
                                elif (delta := c.delta) is None:
                                    content = ""
                                elif not (delta.reasoning_content or delta.reasoning or delta.refusal):
                                    content = delta.content or ""  # (reasoning, refusal: the dict path reads them)
                            if content is None:
                                typed = None  # this stream sends other shapes: the rest of it as dicts
                            else:
                                fr = c.finish_reason
                        if content is None:
                            obj = _loads(d)
                            if type(obj) is not dict:
                                raise TransportError(ErrorType.PARSE, f"SSE data is not a JSON object: {d[:80]!r}")
                            choices = obj.get("choices")
                            if not choices:  # a usage-only chunk, an error
                                metadata(obj, rec)
                                continue
                            c = choices[0]
                            if chat:
                                delta = c.get("delta")
                                if delta:
                                    content = delta.get("content") or ""
                                    if not content or len(delta) != 1:  # not the common delta, content alone
                                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                                        if reasoning:  # aligned with this chunk's text
                                            chunk_reasoning.extend([""] * (len(chunk_text) - len(chunk_reasoning)))
                                            chunk_reasoning.append(reasoning)
                                            rec.reasoning_source = "field"
                                        if delta.get("refusal"):  # OpenAI: the refusal streams instead of content
                                            rec.refusal = (rec.refusal or "") + delta["refusal"]
                                        tool_calls = delta.get("tool_calls")
                                        if tool_calls:  # a tool call's arguments, aligned with this chunk's text
                                            add_tool_calls(rec, tool_calls)
                                else:
                                    content = ""
                            else:
                                content = c.get("text") or ""
                                reasoning = c.get("reasoning_content") or c.get("reasoning")
                                if reasoning:  # completions reasoning (choices[0].reasoning_content)
                                    chunk_reasoning.extend([""] * (len(chunk_text) - len(chunk_reasoning)))
                                    chunk_reasoning.append(reasoning)
                                    rec.reasoning_source = "field"
                            fr = c.get("finish_reason")
                        text_app(content)
                        if not first_token and content and not content.isspace():
                            first_token = True
                            rec.first_token_ns = now
                        if fr:
                            rec.finish_reason = fr
                        if obj is not None:
                            usage = obj.get("usage")  # "usage": null rides on every chunk with include_usage
                            if usage:  # continuous usage stats (vLLM: every chunk): the running output count (§4.4)
                                rec.usage = usage
                                ct = usage.get("completion_tokens")
                                if type(ct) is int:
                                    usage_app(ct)
                            # metadata is rare: an error, a server's extension keys
                            if not isdisjoint(obj):
                                metadata(obj, rec)
                    lo = hi
            finally:  # this read's stamp on each of its chunks; no reasoning where none came
                n = len(chunk_text)
                if n > len(chunk_ns):
                    chunk_ns.extend([now] * (n - len(chunk_ns)))
                if n > len(chunk_reasoning):
                    chunk_reasoning.extend([""] * (n - len(chunk_reasoning)))
        parser.close()
        if rec.chunk_tool and len(rec.chunk_tool) < len(chunk_text):  # a tool call streamed: aligned to the end
            rec.chunk_tool.extend([""] * (len(chunk_text) - len(rec.chunk_tool)))
        if rec.end_ns is None:
            rec.end_ns = clock()
        if parser.partial:
            raise TransportError(ErrorType.PROTOCOL, "stream ended inside an SSE event")
        if events_seen == 0:
            raise TransportError(ErrorType.PROTOCOL, "empty stream: no SSE events")
        if not done and self.require_done:
            raise TransportError(ErrorType.PROTOCOL, "stream closed without data: [DONE]")

    def _metadata(self, obj: dict[str, Any], rec: RequestRecord) -> None:
        """An in-stream error, the usage, then the server's extensions (its adapter's)."""
        err = obj.get("error")
        if err:
            raise _stream_error(err, self.refusals)
        usage = obj.get("usage")
        if usage:
            rec.usage = usage
        self.parse_extensions(obj, rec)
