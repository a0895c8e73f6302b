"""Incremental Server-Sent Events parser, separate from I/O (§4.6.1, App. B.1.1).

Follows the WHATWG HTML "Server-sent events" parsing rules: lines end in CRLF, LF or CR (a CR
at the end of one read followed by LF at the start of the next is one line ending); a blank line
dispatches the event; ``data:`` lines accumulate, joined with LF; one space after the colon is
dropped; lines starting with ``:`` are comments (keep-alives); ``event``/``id``/``retry`` are
kept; a leading BOM is ignored; an event not terminated by a blank line when the stream ends is
discarded (:attr:`SSEParser.partial` tells the caller one was cut off). Bytes are decoded by an
incremental UTF-8 decoder, so a multi-byte character split across reads is fine; invalid UTF-8
raises :class:`SSEDecodeError` (the client records it as ``parse``). Events completed before the
invalid byte are still returned, whether or not one read also carried the invalid byte (how writes
coalesce into reads depends on timing): the error is then raised by the next ``feed`` or ``close``.

This is the hot path: one :meth:`SSEParser.feed` (or :meth:`SSEParser.feed_data`, the data
strings only, what the client reads) per socket read, with a fast path for the common
``data: <json>\\n\\n`` event and no per-byte Python loop.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple, TypeVar

__all__ = ["SSEDecodeError", "SSEError", "SSEEvent", "SSEParser", "parse_sse"]


class SSEError(ValueError):
    """The byte stream cannot be parsed as SSE (names the problem)."""


class SSEDecodeError(SSEError):
    """The stream holds bytes that are not valid UTF-8."""


class SSEEvent(NamedTuple):
    """One dispatched event. ``event`` is ``"message"`` unless an ``event:`` field set it."""

    data: str
    event: str = "message"
    id: str = ""


_DEFAULT_MAX_EVENT_CHARS = 64 * 1024 * 1024
_T = TypeVar("_T")


class _Invalid(Exception):
    """A read with invalid UTF-8: the valid ``prefix`` to parse first, then ``error``."""

    def __init__(self, prefix: bytes, error: SSEDecodeError) -> None:
        self.prefix = prefix
        self.error = error

_new = tuple.__new__  # builds an SSEEvent without the namedtuple constructor's Python frame
_UTF8Decoder = codecs.getincrementaldecoder("utf-8")  # looked up once, not per stream (a codec registry search)


class SSEParser:
    """Feed raw bytes as they arrive, get back the events completed by those bytes.

    >>> p = SSEParser()
    >>> p.feed(b"data: a\\r\\nda"), p.feed(b"ta: b\\r\\n\\r\\n")
    ([], [SSEEvent(data='a\\nb', event='message', id='')])
    """

    __slots__ = (
        "_decoder",
        "_buf",
        "_searched",
        "_skip_lf",
        "_started",
        "_max",
        "_error",
        "last_event_id",
        "retry_ms",
        "comments",
        "events",
    )

    def __init__(self, *, max_event_chars: int = _DEFAULT_MAX_EVENT_CHARS) -> None:
        if max_event_chars <= 0:
            raise ValueError(f"max_event_chars must be positive, got {max_event_chars}")
        self._decoder = _UTF8Decoder("strict")
        self._buf = ""  # decoded, LF-normalised text not yet dispatched
        self._searched = 0  # prefix of _buf already searched for a blank line
        self._skip_lf = False  # previous read ended in CR: drop a leading LF
        self._started = False  # BOM check done
        self._max = max_event_chars
        self._error: SSEDecodeError | None = None  # invalid UTF-8 after events already returned
        self.last_event_id = ""
        self.retry_ms: int | None = None
        self.comments = 0  # comment lines seen (keep-alives)
        self.events = 0  # events dispatched

    # -- public API ------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume one read; return the events it completed (possibly none, possibly several)."""
        try:
            buf = self._complete(chunk)
        except _Invalid as bad:
            return self._defer(bad, self.feed(bad.prefix))
        if buf is None:
            return []
        out: list[SSEEvent] = []
        start = 0
        pos = buf.find("\n\n")
        while pos >= 0:
            block = buf[start:pos]
            start = pos + 2
            if block[:6] == "data: " and block.find("\n", 6) < 0:  # fast path: one data line
                out.append(_new(SSEEvent, (block[6:], "message", self.last_event_id)))
            elif block:
                ev = self._parse_block(block)
                if ev is not None:
                    out.append(ev)
            pos = buf.find("\n\n", start)
        self._keep(buf[start:])
        self.events += len(out)
        return out

    def feed_data(self, chunk: bytes) -> list[str]:
        """As :meth:`feed`, but only the data of each completed event, in order, in one pass over
        the read: one split, and the common ``data: <json>`` events need no call of their own. A
        read's events all arrived with that read (the caller stamps them with its one clock read)."""
        try:
            buf = self._complete(chunk)
        except _Invalid as bad:
            return self._defer(bad, self.feed_data(bad.prefix))
        if buf is None:
            return []
        if buf[:6] == "data: ":  # fast path: every event one "data: " line, split on the event boundary
            parts = buf[6:].split("\n\ndata: ")
            last = parts[-1]
            lf = buf.count("\n")
            if lf == 2 * len(parts) and last[-2:] == "\n\n":  # the read ends on an event's end
                parts[-1] = last[:-2]
                self._keep("")
                self.events += len(parts)
                return parts
            if lf == 2 * len(parts) - 2 and "\n" not in last:  # ... or inside a "data: " line
                parts.pop()
                self._keep("data: " + last)
                self.events += len(parts)
                return parts
        blocks = buf.split("\n\n")
        self._keep(blocks.pop())
        out = [b[6:] for b in blocks if b[:6] == "data: " and "\n" not in b]
        if len(out) != len(blocks):  # a comment, a field other than data, a multi-line or empty block
            out = []
            for block in blocks:
                if block[:6] == "data: " and "\n" not in block:
                    out.append(block[6:])
                elif block:
                    ev = self._parse_block(block)
                    if ev is not None:
                        out.append(ev.data)
        self.events += len(out)
        return out

    def close(self) -> None:
        """Signal end of stream. Raises :class:`SSEDecodeError` on a truncated UTF-8 sequence.

        Per the SSE rules an unterminated last event is discarded; check :attr:`partial`.
        Raises the :class:`SSEDecodeError` deferred by :meth:`feed`, if any.
        """
        if self._error is not None:
            raise self._error
        try:
            tail = self._decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise SSEDecodeError(f"SSE stream ends inside a UTF-8 sequence: {exc.reason}") from None
        self._buf += tail

    @property
    def partial(self) -> bool:
        """True when non-blank text of an unterminated event is buffered (stream cut mid-event)."""
        return bool(self._buf.strip("\n"))

    # -- internals -------------------------------------------------------------------------
    def _complete(self, chunk: bytes) -> str | None:
        """The buffered text and this read, decoded and LF-normalised, when it holds at least one
        complete event (a blank line); else None, the text kept. Raises :class:`_Invalid` on bytes
        that are not UTF-8."""
        if self._error is not None:
            raise self._error
        try:
            text = self._decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            error = SSEDecodeError(f"invalid UTF-8 in SSE stream: {exc.reason} at byte {exc.start}")
            pending = self._decoder.getstate()[0]  # bytes of a character begun in an earlier read
            self._decoder.reset()
            raise _Invalid((pending + chunk)[: exc.start], error) from None  # the prefix decodes whole
        if not text:
            return None
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
                if not text:
                    return None
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return None
        if "\r" in text:
            if text[-1] == "\r":
                self._skip_lf = True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if self._buf:
            buf = self._buf + text
            pos = buf.find("\n\n", self._searched - 1 if self._searched else 0)
        else:
            buf = text
            pos = buf.find("\n\n")
        if pos < 0:
            self._keep(buf)
            return None
        return buf

    def _keep(self, rest: str) -> None:
        """Buffer the text of an event not complete yet."""
        if len(rest) > self._max:
            raise SSEError(f"SSE event longer than {self._max} characters without a blank line")
        self._buf = rest
        self._searched = len(rest)

    def _defer(self, bad: _Invalid, events: list[_T]) -> list[_T]:
        """The events completed before an invalid byte first, the error at the next call."""
        if not events:
            raise bad.error from None
        self._error = bad.error
        return events

    def _parse_block(self, block: str) -> SSEEvent | None:
        data: list[str] = []
        event_type = ""
        for line in block.split("\n"):
            if not line:
                continue  # a blank line before any field: nothing buffered to dispatch
            if line[0] == ":":
                self.comments += 1
                continue
            name, sep, value = line.partition(":")
            if sep and value[:1] == " ":
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                event_type = value
            elif name == "id":
                if "\0" not in value:
                    self.last_event_id = value
            elif name == "retry":
                if value.isascii() and value.isdigit():
                    self.retry_ms = int(value)
            # any other field name is ignored (SSE spec)
        if not data:
            return None
        return SSEEvent("\n".join(data), event_type or "message", self.last_event_id)


def parse_sse(payload: bytes) -> list[SSEEvent]:
    """Parse a complete SSE byte stream (a convenience for tests and captured streams)."""
    p = SSEParser()
    events = p.feed(payload)
    p.close()
    return events
