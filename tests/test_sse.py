"""SSE parser: spec conformance, split invariance (hypothesis), real llama.cpp captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_llmbench.client.sse import SSEDecodeError, SSEError, SSEEvent, SSEParser, parse_sse

CAPTURES = Path(__file__).parent / "data" / "sse-captures"  # copies of shared/reference/sse-captures


# --- an independent, deliberately naive reference implementation of the SSE spec -------------
def reference_parse(text: str) -> list[SSEEvent]:
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    cur: list[str] = []
    i = 0
    complete_to = 0
    while i < len(text):
        c = text[i]
        if c == "\r":
            lines.append("".join(cur))
            cur = []
            i += 2 if i + 1 < len(text) and text[i + 1] == "\n" else 1
            complete_to = len(lines)
        elif c == "\n":
            lines.append("".join(cur))
            cur = []
            i += 1
            complete_to = len(lines)
        else:
            cur.append(c)
            i += 1
    events = []
    data = ""
    etype = ""
    last_id = ""
    for line in lines[:complete_to]:
        if line == "":
            if data:
                events.append(SSEEvent(data[:-1], etype or "message", last_id))
            data, etype = "", ""
            continue
        if line.startswith(":"):
            continue
        if ":" in line:
            name, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
        else:
            name, value = line, ""
        if name == "data":
            data += value + "\n"
        elif name == "event":
            etype = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return events


def _in_pieces(payload: bytes, cuts: list[int], method: str) -> list:
    p = SSEParser()
    feed = getattr(p, method)
    out: list = []
    prev = 0
    for c in sorted(set(cuts)) + [len(payload)]:
        out += feed(payload[prev:c])
        prev = c
    p.close()
    return out


def feed_in_pieces(payload: bytes, cuts: list[int]) -> list[SSEEvent]:
    return _in_pieces(payload, cuts, "feed")


def data_in_pieces(payload: bytes, cuts: list[int]) -> list[str]:
    """What :meth:`SSEParser.feed_data` (the client's per-read pass) returns over the same reads."""
    return _in_pieces(payload, cuts, "feed_data")


# --- unit cases ---------------------------------------------------------------------------------
def test_basic_and_multiline_data() -> None:
    assert parse_sse(b"data: a\n\n") == [SSEEvent("a")]
    assert parse_sse(b"data: a\ndata: b\n\n") == [SSEEvent("a\nb")]
    assert parse_sse(b"data:no-space\n\n") == [SSEEvent("no-space")]
    assert parse_sse(b"data:  two\n\n") == [SSEEvent(" two")]  # only one space is dropped
    assert parse_sse(b"data\n\n") == [SSEEvent("")]


def test_line_endings_crlf_cr_lf() -> None:
    for sep in (b"\n", b"\r\n", b"\r"):
        payload = b"data: x" + sep + b"data: y" + sep + sep + b"data: z" + sep + sep
        assert parse_sse(payload) == [SSEEvent("x\ny"), SSEEvent("z")], sep


def test_cr_lf_split_across_reads_is_one_line_ending() -> None:
    p = SSEParser()
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\ndata: b\r\n\r\n") == [SSEEvent("a\nb")]


def test_comments_keepalives_event_id_retry() -> None:
    p = SSEParser()
    evs = p.feed(b": keep-alive\n\nevent: error\nid: 7\nretry: 1500\ndata: boom\n\n: ping\n\ndata: next\n\n")
    assert evs == [SSEEvent("boom", "error", "7"), SSEEvent("next", "message", "7")]
    assert p.comments == 2 and p.retry_ms == 1500


def test_several_events_in_one_read_and_one_event_over_many_reads() -> None:
    p = SSEParser()
    assert p.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4") == [SSEEvent("1"), SSEEvent("2"), SSEEvent("3")]
    assert p.feed(b"\n") == []
    assert p.feed(b"\n") == [SSEEvent("4")]
    payload = b"data: " + b"x" * 5000 + b"\n\n"
    assert feed_in_pieces(payload, list(range(1, len(payload), 3))) == [SSEEvent("x" * 5000)]


def test_utf8_split_across_reads_and_bom() -> None:
    payload = "\ufeffdata: héllo ✓ 😀\n\n".encode()
    for cut in range(1, len(payload)):
        assert feed_in_pieces(payload, [cut]) == [SSEEvent("héllo ✓ 😀")]


def test_invalid_utf8_raises_decode_error() -> None:
    p = SSEParser()
    assert p.feed(b"data: ok\n\n") == [SSEEvent("ok")]
    with pytest.raises(SSEDecodeError, match="invalid UTF-8"):
        p.feed(b"data: \xff\xfe\n\n")
    p2 = SSEParser()
    p2.feed(b"data: \xe2\x9c")  # truncated 3-byte sequence at end of stream
    with pytest.raises(SSEDecodeError, match="ends inside a UTF-8 sequence"):
        p2.close()


def test_done_and_missing_done_and_partial_event() -> None:
    p = SSEParser()
    assert p.feed(b"data: {}\n\ndata: [DONE]\n\n") == [SSEEvent("{}"), SSEEvent("[DONE]")]
    p.close()
    assert not p.partial
    p = SSEParser()
    assert p.feed(b"data: {}\n\ndata: {\"cut") == [SSEEvent("{}")]
    p.close()
    assert p.partial  # the unterminated event is discarded and reported


def test_oversized_event_is_an_error() -> None:
    p = SSEParser(max_event_chars=100)
    with pytest.raises(SSEError, match="longer than 100"):
        p.feed(b"data: " + b"x" * 200)


# --- properties -----------------------------------------------------------------------------------
_value = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=30)
_field = st.one_of(
    st.tuples(st.just("data"), _value),
    st.tuples(st.sampled_from(["event", "id", "retry", "other"]), _value),
    st.tuples(st.just(":"), _value),  # comment
    st.tuples(st.just(""), st.just("")),  # blank line: dispatch
)


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    fields = draw(st.lists(_field, max_size=25))
    out = []
    prev_term = ""
    for name, value in fields:
        if name == ":":
            line = ":" + value
        elif name == "":
            line = ""
        else:
            line = name + draw(st.sampled_from([": ", ":"])) + value
        term = draw(st.sampled_from(["\n", "\r\n", "\r"]))
        if prev_term == "\r" and line == "" and term == "\n":
            term = "\r\n"  # CR followed by LF would merge into one line ending
        out.append(line + term)
        prev_term = term
    return "".join(out).encode()


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(payload=sse_streams(), data=st.data())
def test_any_split_gives_the_same_events_as_the_reference(payload: bytes, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=20))
    expected = reference_parse(payload.decode())
    assert parse_sse(payload) == expected
    assert feed_in_pieces(payload, cuts) == expected
    assert data_in_pieces(payload, cuts) == [e.data for e in expected]


@settings(deadline=None, max_examples=300)
@given(text=st.text(alphabet="dat:e vnirym\r\n\ufeffé", max_size=80), data=st.data())
def test_arbitrary_text_matches_reference(text: str, data: st.DataObject) -> None:
    payload = text.encode()
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=10))
    assert feed_in_pieces(payload, cuts) == reference_parse(text)
    assert data_in_pieces(payload, cuts) == [e.data for e in reference_parse(text)]


@settings(deadline=None, max_examples=300)
@given(payload=st.binary(max_size=200), data=st.data())
def test_arbitrary_bytes_give_events_or_sse_error_only(payload: bytes, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(payload)), max_size=10))
    try:
        whole = parse_sse(payload)
    except SSEError:
        with pytest.raises(SSEError):
            feed_in_pieces(payload, cuts)
        with pytest.raises(SSEError):
            data_in_pieces(payload, cuts)
        return
    assert feed_in_pieces(payload, cuts) == whole
    assert data_in_pieces(payload, cuts) == [e.data for e in whole]


# --- real llama.cpp captures -----------------------------------------------------------------------
needs_captures = pytest.mark.skipif(not CAPTURES.is_dir(), reason="llama.cpp SSE captures not available")


@needs_captures
@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURES.glob("*.sse")) if CAPTURES.is_dir() else [])
def test_captures_parse_identically_under_any_split(name: str) -> None:
    payload = (CAPTURES / name).read_bytes()
    events = parse_sse(payload)
    assert events and all(e.event == "message" for e in events)
    assert events == reference_parse(payload.decode())
    for step in (1, 7, 64, 1000):
        assert feed_in_pieces(payload, list(range(step, len(payload), step))) == events
        assert data_in_pieces(payload, list(range(step, len(payload), step))) == [e.data for e in events]
    body = [e.data for e in events]
    native = name.startswith("llama-server_native")
    if not native:
        assert body[-1] == "[DONE]"
        body = body[:-1]
    objs = [json.loads(d) for d in body]  # every other event is one JSON object
    assert all(isinstance(o, dict) for o in objs)


@needs_captures
def test_capture_details() -> None:
    chat = [json.loads(e.data) for e in parse_sse((CAPTURES / "llama-server_chat_stream.sse").read_bytes())[:-1]]
    assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chat[-1]["choices"] == [] and chat[-1]["usage"]["completion_tokens"] > 0
    comp = [json.loads(e.data) for e in parse_sse((CAPTURES / "llama-server_completions_stream.sse").read_bytes())[:-1]]
    assert comp[-1]["choices"][0]["finish_reason"] == "length" and "usage" in comp[-1] and "timings" in comp[-1]
    stop = [json.loads(e.data) for e in parse_sse((CAPTURES / "llama-server_stop_string_stream.sse").read_bytes())[:-1]]
    assert " capital of" in [o["choices"][0]["text"] for o in stop if o["choices"]]


def test_events_before_invalid_utf8_in_the_same_read_are_kept() -> None:
    """How writes coalesce into reads depends on timing: a complete event that shares a read with
    invalid bytes is returned, and the error comes with the next feed (or close)."""
    good = b'data: {"a":1}\n\n'
    bad = b'data: {"b":" \xe2\x82\xff"}\n\n'
    p = SSEParser()
    assert p.feed(good + bad + b"data: [DONE]\n\n") == [SSEEvent('{"a":1}')]
    with pytest.raises(SSEDecodeError, match="invalid UTF-8"):
        p.feed(b"data: more\n\n")
    p = SSEParser()
    assert p.feed(good + bad) == [SSEEvent('{"a":1}')]
    with pytest.raises(SSEDecodeError, match="invalid UTF-8"):
        p.close()
    # the same bytes in any split give the same event, then the error
    stream = good + bad
    for cut in range(1, len(stream)):
        p = SSEParser()
        got: list[SSEEvent] = []
        with pytest.raises(SSEDecodeError, match="invalid UTF-8"):
            got += p.feed(stream[:cut])
            got += p.feed(stream[cut:])
            p.close()
        assert got == [SSEEvent('{"a":1}')], cut


def test_feed_data_keeps_the_order_and_count_of_one_reads_events() -> None:
    """One read with fast-path events, a comment, a multi-line event, an ``event:`` field and an
    empty block between them: every event's data comes back once, in the order sent."""
    p = SSEParser()
    read = (b'data: {"i":0}\n\n: keep-alive\n\ndata: {"i":1}\n\ndata: a\ndata: b\n\n\n\n'
            b'event: note\ndata: {"i":2}\n\nid: 7\n\ndata: {"i":3}\n\ndata: {"i"')
    assert p.feed_data(read) == ['{"i":0}', '{"i":1}', "a\nb", '{"i":2}', '{"i":3}']
    assert p.events == 5 and p.comments == 1 and p.last_event_id == "7" and p.partial
    assert p.feed_data(b':4}\n\ndata: [DONE]\n\n') == ['{"i":4}', "[DONE]"]
    good, bad = b'data: {"a":1}\n\n', b'data: {"b":" \xe2\x82\xff"}\n\n'
    p = SSEParser()
    assert p.feed_data(good + bad) == ['{"a":1}']  # the events before an invalid byte first ...
    with pytest.raises(SSEDecodeError, match="invalid UTF-8"):
        p.feed_data(b"data: more\n\n")  # ... then the error


def test_feed_data_fast_path_at_every_cut() -> None:
    """Reads made of ``data: `` events only (the split on the event boundary), cut at every byte and
    at every pair of bytes: the same data as the reference, whatever part of an event a read ends in
    (inside ``data: ``, inside a payload, between the two LFs, on an event's end) and with a payload
    that is empty, holds ``data: `` or is followed by a blank line or a comment."""
    streams = [
        b'data: {"i":0}\n\ndata: \n\ndata: x data: y\n\ndata: [DONE]\n\n',
        b'data: a\n\ndata: b\n\n\n\ndata: c\n\n: ping\n\ndata: d\n\n',
        b'data: a\r\n\r\ndata: b\n\ndata: c\n',
    ]
    for payload in streams:
        expected = [e.data for e in reference_parse(payload.decode())]
        for i in range(len(payload) + 1):
            assert data_in_pieces(payload, [i]) == expected, (payload, i)
            for j in range(i, len(payload) + 1, 3):
                assert data_in_pieces(payload, [i, j]) == expected, (payload, i, j)
