"""The client's per-read pass (client/stream.py ``read_stream``): the events of one read keep their
order and count and all carry that read's arrival stamp (App. B.1.1), never a later one."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from factories import ScriptedReads as Reads
from factories import make_record
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_llmbench.client import stream as stream_mod
from pytest_llmbench.client.config import ClientConfig
from pytest_llmbench.client.errors import TransportError
from pytest_llmbench.client.stream import ResponseReader
from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.sut.adapters import GENERIC


def event(content: str | None = None, *, finish: str | None = None, usage: dict | None = None, **delta_extra) -> bytes:
    delta = {} if content is None else {"content": content}
    delta.update(delta_extra)
    choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps({"id": "x", "choices": choices, "usage": usage}).encode() + b"\n\n"


def record() -> RequestRecord:
    """A record not read yet: no chunks, no end (the reader fills them)."""
    return make_record(chunks=(), end_ns=None)


@pytest.fixture
def stamps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The reader's clock gives 1000, 2000, ...: one value per clock read, so a stamp tells which read took it."""
    taken: list[int] = []
    ticks = itertools.count(1000, 1000)

    def clock() -> int:
        taken.append(next(ticks))
        return taken[-1]

    monkeypatch.setattr(stream_mod, "time", type("T", (), {"perf_counter_ns": staticmethod(clock)}))
    return taken


async def test_events_of_one_read_keep_order_count_and_that_reads_stamp(stamps: list[int]) -> None:
    a, b, c, d, e = (event(t) for t in ("A", " b", " c", " d", " e"))
    reads = [
        event("", role="assistant") + a + b,  # three events in one read: role-only, A, b
        c + d[:10],  # c, and the start of d
        d[10:] + e + event(None, finish="length"),  # d completed here: this read's stamp, not the first one's
        event(usage={"prompt_tokens": 1, "completion_tokens": 5}) + b"data: [DONE]\n\n",
    ]
    rec = record()
    await ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC).read_stream(Reads(reads), rec)
    assert stamps[:4] == [1000, 2000, 3000, 4000]  # one clock read per socket read
    assert rec.chunk_text == ["", "A", " b", " c", " d", " e", ""]
    assert rec.chunk_ns == [1000, 1000, 1000, 2000, 3000, 3000, 3000]
    assert rec.first_chunk_ns == 1000 and rec.first_token_ns == 1000 and rec.end_ns == 4000
    assert rec.finish_reason == "length" and rec.usage == {"prompt_tokens": 1, "completion_tokens": 5}


async def test_a_bad_event_keeps_the_chunks_timed_before_it_in_the_same_read(stamps: list[int]) -> None:
    reads = [event("A"), event(" b") + b"data: [1]\n\n" + event(" c")]
    rec = record()
    reader = ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC)
    with pytest.raises(TransportError) as err:
        await reader.read_stream(Reads(reads), rec)
    assert err.value.error_type is ErrorType.PARSE
    assert rec.chunk_text == ["A", " b"] and rec.chunk_ns == [1000, 2000] and rec.chunk_reasoning == ["", ""]


async def test_reasoning_and_refusal_deltas_are_read_beside_content(stamps: list[int]) -> None:
    reads = [event(None, reasoning_content="think") + event("x", reasoning="more") + event(None, refusal="no")
             + b"data: [DONE]\n\n"]
    rec = record()
    await ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC).read_stream(Reads(reads), rec)
    assert rec.chunk_text == ["", "x", ""] and rec.chunk_reasoning == ["think", "more", ""]
    assert rec.refusal == "no" and rec.chunk_ns == [1000] * 3 and rec.first_token_ns == 1000


async def test_reasoning_after_content_only_chunks_stays_aligned(stamps: list[int]) -> None:
    """The read's stamps and empty reasonings are added once per read: a reasoning chunk after
    content-only ones (same read, then a later read) lands at its own chunk's index."""
    reads = [event("a") + event("b") + event(None, reasoning_content="r1"),
             event("c") + event(None, reasoning="r2") + event("d") + b"data: [DONE]\n\n"]
    rec = record()
    await ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC).read_stream(Reads(reads), rec)
    assert rec.chunk_text == ["a", "b", "", "c", "", "d"]
    assert rec.chunk_reasoning == ["", "", "r1", "", "r2", ""]
    assert rec.chunk_ns == [1000] * 3 + [2000] * 3


async def test_a_held_read_asks_again_after_each_wait_and_keeps_its_stamp(stamps: list[int]) -> None:
    """The send priority (loadgen/load.py ``_SendsFirst``, issue 38): a held read asks the hold again
    when released, with the time then and its own stamp as ``since``, until the hold lets it run; its
    events keep the stamp taken before the first wait (App. B.1.1), the next read gets its own."""
    import asyncio

    calls: list[tuple[int, int, int]] = []
    answers = iter([True, True, False, False])  # held twice, then runs; the next read is not held

    def hold(now_ns: int, n: int, since_ns: int) -> asyncio.Future[None] | None:
        calls.append((now_ns, n, since_ns))
        if not next(answers):
            return None
        w = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(w.set_result, None)  # a send's hand-over releases it
        return w

    reader = ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC)
    reader.hold = hold
    rec = record()
    await reader.read_stream(Reads([event("A") + event(" b"), event(" c") + b"data: [DONE]\n\n"]), rec)
    # read 1 stamped 1000; asked at 1000, then again at 2000 and 3000 (clock reads after each wait)
    assert calls == [(1000, 2, 1000), (2000, 2, 1000), (3000, 2, 1000), (4000, 2, 4000)]
    assert rec.chunk_ns == [1000, 1000, 4000] and rec.first_token_ns == 1000 and rec.end_ns == 4000


async def test_a_hold_removed_while_a_read_waits_lets_it_run(stamps: list[int]) -> None:
    """The open loop ends (its hold removed) while a read waits: the read runs without asking again."""
    import asyncio

    reader = ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC)
    asked: list[int] = []

    def hold(now_ns: int, n: int, since_ns: int) -> asyncio.Future[None] | None:
        asked.append(now_ns)
        w = asyncio.get_running_loop().create_future()

        def end() -> None:
            reader.hold = None
            w.set_result(None)

        asyncio.get_running_loop().call_soon(end)
        return w

    reader.hold = hold
    rec = record()
    await reader.read_stream(Reads([event("A") + b"data: [DONE]\n\n"]), rec)
    assert asked == [1000] and rec.chunk_text == ["A"] and rec.chunk_ns == [1000]


async def test_a_long_read_is_parsed_a_slice_at_a_time_each_slice_asking_the_hold(stamps: list[int]) -> None:
    """With a hold set, 40 events of one read are parsed 16, 16 and 8 at a time, the hold asked before
    each slice (the first with the read's stamp, the others with the time then, ``since`` the stamp);
    a slice held waits, then asks again. Every event keeps the read's stamp (App. B.1.1)."""
    import asyncio

    calls: list[tuple[int, int, int]] = []
    held = iter([False, True, False, False])  # the second slice waits once

    def hold(now_ns: int, n: int, since_ns: int) -> asyncio.Future[None] | None:
        calls.append((now_ns, n, since_ns))
        if not next(held):
            return None
        w = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(w.set_result, None)
        return w

    reader = ResponseReader(ClientConfig(base_url="http://127.0.0.1:1/v1", model="m"), GENERIC)
    reader.hold = hold
    rec = record()
    texts = [f" t{i}" for i in range(39)]
    await reader.read_stream(Reads([b"".join(event(t) for t in texts) + b"data: [DONE]\n\n"]), rec)
    assert calls == [(1000, 16, 1000), (2000, 16, 1000), (3000, 16, 1000), (4000, 8, 1000)]
    assert rec.chunk_text == texts and rec.chunk_ns == [1000] * 39 and rec.end_ns == 1000
    rec, reader.hold = record(), None  # no hold: the read at once, no clock read but its stamp
    await reader.read_stream(Reads([b"".join(event(t) for t in texts) + b"data: [DONE]\n\n"]), rec)
    assert rec.chunk_text == texts and rec.chunk_ns == [5000] * 39 and stamps[-1] == 5000


# -- the typed decode of the common object against the dict path -------------------------------

_text = st.text(alphabet=st.sampled_from(["a", " ", "\n", "é", "\u2028", "\"", "\\", "日"]), max_size=4)
_str_or_junk = st.one_of(st.none(), _text, st.integers(-2, 2), st.just([]))
_delta = st.one_of(
    st.none(), st.just({}), st.just("x"), st.just([]),
    st.fixed_dictionaries({}, optional={"role": st.just("assistant"), "content": _str_or_junk,
                                        "reasoning_content": _str_or_junk, "reasoning": _str_or_junk,
                                        "refusal": _str_or_junk}),
)
_choice = st.one_of(st.just(3), st.fixed_dictionaries(
    {"index": st.just(0)}, optional={"delta": _delta, "text": _str_or_junk,
                                     "finish_reason": st.one_of(st.none(), st.sampled_from(["stop", "length", ""]),
                                                                st.just(5))}))
_usage = st.one_of(st.none(), st.just([1]), st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 9), "completion_tokens": st.one_of(st.integers(0, 9), st.just(2 ** 70))}))
_object = st.fixed_dictionaries(
    {"id": st.just("x")},
    optional={"choices": st.one_of(st.lists(_choice, max_size=2), st.none(), st.just({"0": 1})),
              "usage": _usage,
              "timings": st.just({"predicted_n": 3}),
              "llmbench_timing": st.just({"queue_ns": 5}),
              "error": st.just({"message": "boom", "code": 503})},
)
_str_or_none = st.one_of(st.none(), _text)
_common = st.fixed_dictionaries(  # the shape the typed decode takes, mostly (its reasoning and refusal not)
    {"id": st.just("x"), "usage": st.none(), "choices": st.lists(st.fixed_dictionaries(
        {"index": st.just(0), "finish_reason": st.one_of(st.none(), st.sampled_from(["stop", ""]))},
        optional={"text": _str_or_none, "delta": st.fixed_dictionaries({}, optional={
            "role": st.just("assistant"), "content": _str_or_none, "reasoning_content": _str_or_none,
            "reasoning": _str_or_none, "refusal": _str_or_none})}), min_size=1, max_size=2)})
_event = st.one_of(_common.map(lambda o: json.dumps(o, ensure_ascii=False)),
                   _object.map(lambda o: json.dumps(o, ensure_ascii=False)),
                   st.sampled_from(["[1]", "not json", '"s"', "{}", '{"choices": [{"delta": {"content": "\\ud800"}}]}']))


def _read_all(reader: ResponseReader, reads: list[bytes]) -> tuple[dict, str | None]:
    """The record and the error (type and message) of one stream, the reader's clock reset."""
    ticks = itertools.count(1000, 1000)
    clock = type("T", (), {"perf_counter_ns": staticmethod(lambda: next(ticks))})
    rec = record()
    coro = reader.read_stream(Reads(reads), rec)
    error = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream_mod, "time", clock)
        try:
            coro.send(None)  # Reads never waits: the reader runs to its end in one step
        except StopIteration:
            pass
        except Exception as exc:  # noqa: BLE001 - compared, whatever it is
            error = f"{type(exc).__name__}: {getattr(exc, 'error_type', '')} {exc}"
    return rec.to_json(), error


@pytest.mark.skipif(stream_mod._msgspec is None, reason="msgspec not installed")
def _chat(delta: dict, finish: str | None = None) -> str:
    return json.dumps({"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None})


_A = _chat({"content": " a"})


@settings(max_examples=400, deadline=None)
@given(events=st.lists(_event, min_size=1, max_size=6), chat=st.booleans(), done=st.booleans(),
       cuts=st.lists(st.integers(0, 400), max_size=3))
@example(events=[_A, _chat({"content": "b", "refusal": "no"}), _A], chat=True, done=True, cuts=[])
@example(events=[_A, _chat({"content": "", "reasoning_content": "r"}), _chat({"reasoning": "s"}), _A], chat=True,
         done=True, cuts=[])
@example(events=[_A, _chat({}, "stop"), _chat(None, "length"), _chat({"content": "\n "})], chat=True, done=False,
         cuts=[])
@example(events=[json.dumps({"choices": [{"text": " t", "finish_reason": None}]}),
                 json.dumps({"choices": [{"text": None, "finish_reason": "stop"}]})], chat=False, done=True, cuts=[])
@example(events=[_A, json.dumps({"choices": [{"delta": {"content": "c"}}], "usage": {"completion_tokens": 2}}), _A],
         chat=True, done=True, cuts=[30])
def test_the_typed_decode_reads_every_stream_as_the_dict_path_does(events: list[str], chat: bool, done: bool,
                                                                   cuts: list[int]) -> None:
    """Issue 38: the common object is decoded typed (msgspec: only the fields read); any other shape,
    a metadata key, reasoning or refusal, or bytes that are not JSON go to the dict path, and the
    rest of the stream with them. Whatever the objects and however the bytes fall into reads, the
    record (every chunk, stamp, count and usage) and the error are the dict path's alone."""
    raw = b"".join(b"data: " + e.encode() + b"\n\n" for e in events) + (b"data: [DONE]\n\n" if done else b"")
    bounds = sorted({0, len(raw), *(min(c, len(raw)) for c in cuts)})
    reads = [raw[a:b] for a, b in zip(bounds, bounds[1:])]
    cfg = ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", api="chat" if chat else "completions")
    typed = ResponseReader(cfg, GENERIC)
    assert typed.typed is not None
    plain = ResponseReader(cfg, GENERIC)
    plain.typed = None
    assert _read_all(typed, reads) == _read_all(plain, reads)


def test_the_typed_decode_takes_the_common_object_and_leaves_the_rest() -> None:
    """The common chunk (content alone, usage null) is decoded typed; a metadata key, a usage value, an
    object of another shape and reasoning are not (the dict path reads them, and the rest of the stream)."""
    if stream_mod._msgspec is None:
        pytest.skip("msgspec not installed")
    decode, metadata_of, none = stream_mod._chunk_decoder(frozenset({"error", "timings"}))
    common = decode(event(" a").removeprefix(b"data: ").strip())
    assert common.choices[0].delta.content == " a" and metadata_of(common) == none
    assert metadata_of(decode(b'{"choices": [], "timings": {}}')) != none
    for other in (b'{"usage": {"completion_tokens": 1}}', b'{"choices": {"0": 1}}', b"[1]",
                  b'{"choices": [{"delta": {"content": 1}}]}'):
        with pytest.raises(stream_mod._msgspec.DecodeError):
            decode(other)
    assert stream_mod._chunk_decoder(frozenset({"usage"})) is None  # a metadata key among the fields read


CAPTURES = Path(__file__).parent / "data" / "sse-captures"  # real llama-server streams


@pytest.mark.skipif(stream_mod._msgspec is None, reason="msgspec not installed")
@pytest.mark.parametrize("capture", sorted(p.name for p in CAPTURES.glob("*.sse")))
@pytest.mark.parametrize("read_size", [None, 7, 100])
def test_the_typed_decode_reads_real_llama_server_streams_as_the_dict_path_does(capture: str,
                                                                                read_size: int | None) -> None:
    """Each captured llama-server stream (its ``timings`` on the finish chunk, the usage chunk, the
    completions shape), whole or cut into reads of 7 or 100 bytes: the same record as the dict path."""
    raw = (CAPTURES / capture).read_bytes()
    reads = [raw] if read_size is None else [raw[i:i + read_size] for i in range(0, len(raw), read_size)]
    for api in ("chat", "completions"):
        cfg = ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", api=api)
        typed, plain = ResponseReader(cfg, GENERIC), ResponseReader(cfg, GENERIC)
        plain.typed = None
        got, expected = _read_all(typed, reads), _read_all(plain, reads)
        assert got == expected
        if "native" not in capture:  # llama.cpp's own /completion shape has no choices to read
            assert expected[0]["chunk_text"]  # the capture was read, not refused
