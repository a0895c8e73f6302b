"""measure/frame.py: a run's records as columns, filled record by record in completion order."""

from __future__ import annotations

import json

import numpy as np
import pytest
from factories import MS, make_record
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.measure.frame import FrameBuilder, RunFrame
from pytest_llmbench.measure.summary import summarize


def _records(n: int, seed: int) -> list[RequestRecord]:
    """A mixed run: multi-token chunks, reasoning, server token times, usage, failures and a cancellation."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sent = float(rng.integers(0, 50))
        kind = i % 7
        if kind == 5:
            out.append(make_record(i, sent=sent, chunks=(), error_type=ErrorType.HTTP_5XX, status=500,
                                   input_tokens_server=int(rng.integers(5, 50))))
            continue
        if kind == 6:
            out.append(make_record(i, sent=sent, n_chunks=2, error_type=ErrorType.CANCELLED))
            continue
        gaps = [float(g) for g in rng.integers(1, 20, size=int(rng.integers(1, 6)))]
        r = make_record(i, sent=sent, ttft=float(rng.integers(20, 200)), itl=gaps,
                        tokens=[int(t) for t in rng.integers(1, 4, size=len(gaps) + 1)],
                        reasoning=["hm" if kind == 1 and k == 0 else "" for k in range(len(gaps) + 1)],
                        output_tokens_server=int(rng.integers(2, 12)), input_tokens_server=int(rng.integers(10, 90)),
                        usage={"total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 3}} if kind == 2 else None,
                        server_timing={"queue_ns": 5 * MS, "preemptions": kind % 2} if kind in (3, 4) else None)
        if kind == 4:
            r.server_token_ns = sorted(int(t) for t in rng.integers(0, 10**9, size=4))
        r.intended_ns = r.sent_ns - 1000
        out.append(r)
    return out


def _canon(records_or_frame: object, **kw: object) -> str:
    return json.dumps(summarize(records_or_frame, **kw).to_json(per_request=True), sort_keys=True, default=str)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=10**6), st.randoms())
def test_any_completion_order_gives_the_summary_of_the_list(n: int, seed: int, rnd: object) -> None:
    """Records added as they finish (any order) summarise exactly as the sorted list does."""
    recs = _records(n, seed)
    shuffled = list(recs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    b = FrameBuilder()
    for r in shuffled:
        b.add(r)
    assert len(b) == n
    assert _canon(b.build()) == _canon(recs)
    assert _canon(RunFrame.from_records(recs, None), itl_option="A") == _canon(recs, itl_option="A")


def test_the_builder_keeps_no_record_and_skips_other_phases() -> None:
    import sys

    b = FrameBuilder()
    r = make_record(0, n_chunks=3)
    before = (sys.getrefcount(r), sys.getrefcount(r.chunk_ns), sys.getrefcount(r.chunk_text))
    b.add(r)
    assert (sys.getrefcount(r), sys.getrefcount(r.chunk_ns), sys.getrefcount(r.chunk_text)) == before
    warm = make_record(1, n_chunks=3)
    warm.phase = "warmup"
    b.add(warm)
    assert len(b) == 1
    f = b.build()
    assert f.n == 1 and f.chunk_ns.tolist() == [100 * MS, 110 * MS, 120 * MS]  # after the first submission


def test_a_bad_record_is_named_at_build_not_while_streaming() -> None:
    b = FrameBuilder()
    bad = make_record(7, n_chunks=3)
    bad.chunk_tokens = [1, 1]  # two counts for three chunks
    b.add(bad)  # the run is not cut short
    b.add(make_record(8))
    with pytest.raises(ValueError, match="record 7: 2 chunk_tokens for 3 chunks"):
        b.build()
    with pytest.raises(ValueError, match="no records to summarise"):
        FrameBuilder().build()
