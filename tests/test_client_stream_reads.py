"""The client's per-read pass (client/stream.py ``read_stream``): the events of one read keep their
order and count and all carry that read's arrival stamp (App. B.1.1), never a later one."""

from __future__ import annotations

import itertools
import json

import pytest
from factories import make_record

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


class Reads:
    status = 200
    content_type = "text/event-stream"

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = iter(reads)

    async def read_chunk(self) -> bytes:
        return next(self.reads, b"")


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
