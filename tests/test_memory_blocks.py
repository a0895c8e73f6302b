"""Issue 30: the summary of a long run never holds its chunks at once. The chunk columns spill to files
and are read in blocks of requests; the figures are those of the whole run in memory, bit for bit."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from factories import make_record
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.document import plotdata
from pytest_llmbench.measure import frame
from pytest_llmbench.measure.frame import FrameBuilder
from pytest_llmbench.measure.metrics import itl
from pytest_llmbench.measure.metrics._kit import Windows
from pytest_llmbench.measure.samples import read_run_samples, samples_of, write_run_samples
from pytest_llmbench.measure.stats import core
from pytest_llmbench.measure.stats.core import SortedSamples, distribution, distribution_of_sorted, window_sums
from pytest_llmbench.measure.summary import summarize


def _ragged(seed: int, n: int, burst: int) -> list[RequestRecord]:
    """Random ragged records: 0-40 chunks of 0-3 tokens, failures, cancellations, server token times on
    some, and ``burst`` requests sent at the same instant (sorted by index: a block boundary falls inside)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sent = 0.0 if i < burst else float(rng.integers(0, 300))
        kind = int(rng.integers(0, 9))
        if kind == 0:
            out.append(make_record(i, sent=sent, chunks=(), error_type=ErrorType.HTTP_5XX, status=500))
            continue
        gaps = [float(g) for g in rng.integers(0, 25, size=int(rng.integers(0, 40)))]
        r = make_record(i, sent=sent, ttft=float(rng.integers(1, 200)), itl=gaps or None, n_chunks=1,
                        tokens=[int(t) for t in rng.choice([0, 1, 1, 1, 2, 3], size=len(gaps) + 1)],
                        output_tokens_server=int(rng.integers(1, 60)) if kind != 2 else None,
                        input_tokens_server=int(rng.integers(5, 2000)))
        if kind == 3:
            r.error_type, r.status = ErrorType.CANCELLED, None
        if kind in (4, 5):
            r.server_token_ns = sorted(int(t) for t in rng.integers(r.sent_ns, r.sent_ns + 10**9, size=len(gaps) + 2))
        out.append(r)
    return out


def _canon(m: object) -> str:
    return json.dumps(m.to_json(per_request=True), sort_keys=True, default=str)  # type: ignore[attr-defined]


def _builder(records: list[RequestRecord], spill_at: int, block: int, order: list[int]) -> FrameBuilder:
    b = FrameBuilder(spill_at=spill_at, block_chunks=block)
    for i in order:
        b.add(records[i])
    return b


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 60), burst=st.integers(0, 20), block=st.sampled_from([1, 2, 7, 50, 10**9]),
       spill_at=st.sampled_from([1, 3, 64, 10**9]), itl_option=st.sampled_from(["B", "A", "auto"]),
       min_raw=st.sampled_from([1, 8, 1 << 16]), rnd=st.randoms())
def test_blocks_and_spill_give_the_figures_of_the_whole_run(seed: int, n: int, burst: int, block: int, spill_at: int,
                                                            itl_option: str, min_raw: int, rnd: object) -> None:
    """Any block size (one request a block, a boundary inside a burst sent at one instant), any spill
    threshold, gaps kept as (value, count) pairs or as an array, and any completion order: the same
    RunMetrics as the records summarised in one block."""
    records = _ragged(seed, n, burst)
    order = list(range(n))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    whole = summarize(_builder(records, 10**9, 10**9, list(range(n))), itl_option=itl_option)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(itl._Gaps, "_MIN_RAW", min_raw)
        blocked = summarize(_builder(records, spill_at, block, order), itl_option=itl_option)
    assert _canon(blocked) == _canon(whole)
    for name in whole.distributions:
        assert blocked.percentile(name, 37.5) == whole.percentile(name, 37.5)
    assert str(blocked.itl_tail) == str(whole.itl_tail) and str(blocked.itl_modality) == str(whole.itl_modality)
    if blocked.tokens is not None and whole.prefill_deadline is not None:
        assert blocked.fluid_token_generation_rate(min_fluidity=0.8) == whole.fluid_token_generation_rate(min_fluidity=0.8)


def test_the_spill_files_go_after_the_summary_and_on_error() -> None:
    records = _ragged(1, 40, 5)
    b = _builder(records, 3, 10, list(range(40)))
    spill = b._chunks._dir
    assert spill is not None and os.listdir(spill)
    m = summarize(b, itl_option="B")
    assert not os.path.exists(spill) and m.tokens is None  # a spilled run keeps no token times
    with pytest.raises(ValueError, match="no token timing"):
        m.fluid_token_generation_rate()
    # an error while summarising (option C without server timestamps on every request)
    b = _builder(records, 3, 10, list(range(40)))
    spill = b._chunks._dir
    with pytest.raises(ValueError, match="itl_option 'C'"):
        summarize(b, itl_option="C")
    assert not os.path.exists(spill)
    # an inconsistent record, reported when the frame is built
    bad = make_record(99, n_chunks=3)
    bad.chunk_tokens = [1, 1]
    b = _builder(records, 3, 10, list(range(40)))
    b.add(bad)
    spill = b._chunks._dir
    with pytest.raises(ValueError, match="record 99"):
        summarize(b)
    assert not os.path.exists(spill)


def test_a_record_added_after_the_summary_starts_a_new_run() -> None:
    records = _ragged(2, 30, 0)
    b = _builder(records, 4, 10, list(range(29)))
    first = summarize(b, itl_option="B")
    assert len(b) == 0  # the builder handed its columns over
    b.add(records[29])
    second = summarize(b, itl_option="B")
    assert len(first.per_request) == 29 and len(second.per_request) == 1
    assert _canon(second) == _canon(summarize([records[29]], itl_option="B"))


def test_a_summarised_frame_cannot_be_read_again_once_its_spill_is_gone() -> None:
    b = _builder(_ragged(3, 20, 0), 2, 5, list(range(20)))
    f = b.build(release=True)
    summarize(f)
    with pytest.raises(ValueError, match="released"):
        summarize(f)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 40), min_size=0, max_size=3000),
       rle=st.booleans(), scale=st.sampled_from([1e-9, None]))
def test_compact_sorted_samples_give_numpys_figures(values: list[int], rle: bool, scale: float | None) -> None:
    """mean, std, percentiles and CIs of compact samples equal numpy's on their float64 values (the
    pairwise summation evaluated leaf by leaf; leaves of 128, numpy's block, exercise the split)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core, "_PAIRWISE_LEAF", 128)
        _compare_compact(values, rle, scale)


def _compare_compact(values: list[int], rle: bool, scale: float | None) -> None:
    raw = np.sort(np.array(values, dtype=np.int64))
    floats = raw.astype(np.float64) * (1.0 if scale is None else scale)
    if scale is None:
        floats = raw.astype(np.float64)
    if rle and raw.size:
        u, c = np.unique(raw, return_counts=True)
        x = SortedSamples(u, c, scale=scale)
    else:
        x = SortedSamples(raw.astype(np.uint32 if raw.size and raw.max() < 2**32 else np.int64), scale=scale)
    a = distribution_of_sorted("d", x, "s")
    b = distribution("d", floats, "s")
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert np.array_equal(np.asarray(x), floats)
    if raw.size:
        assert a.percentile(12.5) == b.percentile(12.5)
        assert np.array_equal(x.tail_above(float(floats[raw.size // 2])), floats[floats > floats[raw.size // 2]])
        assert np.array_equal(x[[0, raw.size - 1, raw.size // 3]], floats[[0, raw.size - 1, raw.size // 3]])
        assert np.array_equal(x[2:raw.size - 1], floats[2:raw.size - 1])


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 40), min_size=1, max_size=3000),
       rle=st.booleans(), scale=st.sampled_from([1e-9, None]))
def test_plot_data_of_compact_samples_is_numpys_without_a_copy(values: list[int], rle: bool,
                                                               scale: float | None) -> None:
    """The report's plot data (quantiles, histogram, CDF) of compact samples equals numpy's
    np.percentile / np.histogram on their float64 values, and the samples are never made float64
    whole (a long run's pooled ITL: issue 30)."""
    raw = np.sort(np.array(values, dtype=np.int64))
    floats = raw.astype(np.float64) * (1.0 if scale is None else scale)
    if rle:
        u, c = np.unique(raw, return_counts=True)
        x = SortedSamples(u, c, scale=scale)
    else:
        x = SortedSamples(raw.astype(np.uint32 if raw.max() < 2**32 else np.int64), scale=scale)

    def no_whole_copy(self: SortedSamples, dtype: object = None, copy: object = None) -> np.ndarray:
        raise AssertionError("the plot data made a float64 copy of the samples")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SortedSamples, "__array__", no_whole_copy)
        got = plotdata.samples_summary(x, "itl")
    want = plotdata.samples_summary(floats, "itl")
    assert json.dumps(got) == json.dumps(want)
    # and the float64 path is numpy's own calls
    lo, hi = float(floats[0]), float(floats[-1])
    if hi > lo:
        counts, edges = np.histogram(floats, bins=len(want["histogram"]["counts"]), range=(lo, hi))
        assert want["histogram"] == {"edges": edges.tolist(), "counts": counts.tolist()}
    qs = np.percentile(floats, plotdata.QUANTILES, method="linear")
    assert [want["stats"][f"p{q:g}"] for q in plotdata.QUANTILES] == qs.tolist()
    assert want["stats"]["mean"] == float(floats.mean())


@settings(max_examples=40, deadline=None)
@given(t=st.lists(st.floats(-1, 12, allow_nan=False), max_size=300), cuts=st.lists(st.integers(0, 300), max_size=6),
       weighted=st.booleans())
def test_window_sums_added_in_parts_are_the_sums_of_the_whole(t: list[float], cuts: list[int], weighted: bool) -> None:
    times = np.array(t)
    w = np.random.default_rng(len(t)).random(times.size) * 3.7 if weighted else None
    windows = Windows({"": (1.0, 10.0), "_full": (0.0, 11.0), "_empty": (5.0, 5.0)}, 10, 0.95)
    fold = windows.fold()
    bounds = sorted({0, times.size, *(c for c in cuts if c <= times.size)})
    for a, b in zip(bounds[:-1], bounds[1:]):
        fold.add(times[a:b], None if w is None else w[a:b])
    got = fold.sums()
    for suf, (a, b) in windows.windows.items():
        sums, n = window_sums(times, w, a, b, 10)
        assert got[suf][1] == n and np.array_equal(got[suf][0], sums)


def test_samples_file_written_block_by_block_reads_back(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_llmbench.measure import samples

    monkeypatch.setattr(samples, "_BLOCK", 7)
    m = summarize(_ragged(4, 50, 3), itl_option="B")
    write_run_samples(tmp_path, m)  # type: ignore[arg-type]
    back = read_run_samples(tmp_path)  # type: ignore[arg-type]
    want = samples_of(m)
    assert back is not None and set(back) == set(want)
    for k in want:
        assert back[k].dtype == np.float32 and np.array_equal(back[k], want[k])
        s = m.distributions[k].samples
        assert np.array_equal(back[k], np.sort(np.asarray(s, dtype=np.float32)))


def test_a_column_the_same_in_every_row_costs_nothing() -> None:
    m = summarize(_ragged(5, 30, 0), itl_option="B")
    col = m.per_request["queue_wait"]  # no server timing: NaN in every row
    assert col.strides == (0,) and np.isnan(col).all() and len(col) == 30
    assert frame.SPILL_AT > 0
