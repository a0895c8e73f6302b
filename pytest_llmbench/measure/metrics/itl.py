"""Inter-token latency (§5.4.3) under the §4.6.3 options, and the chunking it rests on (App. B.2.1).

ITL samples start at the first content token: the submission-to-first-token interval is never a
sample. Option ``A`` is the time between content chunks; ``B`` gives every token of a chunk the chunk's
arrival time (the draft's literal text: an N-token chunk adds N-1 zero gaps); ``C`` uses the server's
per-token timestamps. ``itl_option`` (``auto``: C when every successful multi-token request carries
server timestamps, else B) picks the one reported as ``itl``, ``jitter`` and ``max_pause``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .. import experience as ux
from ..frame import ChunkBlock, Chunks
from ..registry import PER_RUN, POOLED, PROPORTION, derived, metric
from ..stats import Distribution, Estimate, SortedSamples, distribution_of_sorted
from ._kit import NAN, NS, pairs_diff, per_owner_stats, proportion


@dataclass(frozen=True)
class ItlSamples:
    """Pooled ITL samples of one §4.6.3 option, sorted and compact (integer ns; ``values[k]`` and
    ``np.asarray(values)`` give seconds, as float64)."""

    option: str  # "A" | "B" | "C"
    values: SortedSamples


class _Gaps:
    """Integer ns gaps collected block by block. While ties make them compressible (a fast server's gaps,
    timed to the ns, repeat) they are held as sorted (value, count) pairs, each block's merged in as it
    comes; else in one array allocated once (uint32 while every gap fits, else int64), sorted in place
    at the end. Either way :meth:`sorted` gives the same samples."""

    _MIN_RAW = 1 << 16  # samples before the pairs may be judged not worth keeping

    def __init__(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 0)
        self.values = np.empty(0, dtype=np.int64)  # the pairs merged so far
        self.counts = np.empty(0, dtype=np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_size = 0
        self.buf: np.ndarray | None = None  # the array, once pairs are not worth it
        self.k = 0
        self.n = 0

    def add(self, gaps: np.ndarray) -> None:
        if not gaps.size:
            return
        self.n += int(gaps.size)
        if self.buf is not None:
            self._append(gaps)
            return
        u, c = np.unique(gaps, return_counts=True)
        self.pending.append((u, c))
        self.pending_size += int(u.size)
        if self.pending_size >= max(self.values.size, self._MIN_RAW):
            self._merge()
            if self.n >= self._MIN_RAW and self.values.size * 16 > self.n * 4:  # pairs cost more than uint32
                self._to_array()

    def _merge(self) -> None:
        if not self.pending:
            return
        vals = np.concatenate([self.values, *(u for u, _ in self.pending)]).astype(np.int64, copy=False)
        cnts = np.concatenate([self.counts, *(c for _, c in self.pending)]).astype(np.int64, copy=False)
        self.pending, self.pending_size = [], 0
        order = np.argsort(vals, kind="stable")
        vals, cnts = vals[order], cnts[order]
        starts = np.flatnonzero(np.concatenate(([True], vals[1:] != vals[:-1])))
        self.values, self.counts = vals[starts], np.add.reduceat(cnts, starts) if starts.size else cnts

    def _to_array(self) -> None:
        self._merge()
        values, counts = self.values, self.counts
        self.values, self.counts = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        self.buf = np.empty(max(self.capacity, self.n), dtype=np.uint32)
        self.k = 0
        self._append(np.repeat(values, counts))

    def _append(self, gaps: np.ndarray) -> None:
        assert self.buf is not None
        if self.buf.dtype == np.uint32 and int(gaps.max()) > np.iinfo(np.uint32).max:
            self.buf = self.buf.astype(np.int64)
        if self.k + gaps.size > self.buf.size:  # not expected: the capacity bounds the samples
            self.buf = np.concatenate((self.buf[:self.k], np.empty(self.k + gaps.size, dtype=self.buf.dtype)))
        self.buf[self.k:self.k + gaps.size] = gaps
        self.k += gaps.size

    def copy(self, capacity: int) -> _Gaps:
        """These samples so far, as the start of another set (option B's, once a chunk holds two tokens)."""
        out = _Gaps(capacity)
        if self.buf is not None:
            out.buf = np.empty(max(capacity, self.k), dtype=self.buf.dtype)
            if self.k:
                out._append(self.buf[:self.k])
        else:
            self._merge()
            out.values, out.counts = self.values.copy(), self.counts.copy()
        out.n = self.n
        return out

    def sorted(self) -> SortedSamples:
        """The samples sorted; as (value, count) pairs when ties make that at most half the size."""
        if self.buf is None:
            self._merge()
            small = self.values.size and int(self.values[-1]) <= np.iinfo(np.uint32).max
            return SortedSamples(self.values.astype(np.uint32) if small else self.values, self.counts, scale=NS)
        values = self.buf[:self.k]
        values.sort()
        self.buf = np.empty(0, dtype=values.dtype)
        if values.size < 2:
            return SortedSamples(values, scale=NS)
        change = values[1:] != values[:-1]
        distinct = int(np.count_nonzero(change)) + 1
        if distinct * 16 > values.size * values.itemsize:
            return SortedSamples(values, scale=NS)
        starts = np.empty(distinct, dtype=np.int64)
        starts[0] = 0
        starts[1:] = np.flatnonzero(change) + 1
        del change
        counts = np.diff(np.append(starts, values.size))
        return SortedSamples(values[starts], counts, scale=NS)


def _tally(counts: dict[int, int], sizes: np.ndarray) -> None:
    if sizes.size:
        u, c = np.unique(sizes, return_counts=True)
        for v, k in zip(u.tolist(), c.tolist()):
            counts[v] = counts.get(v, 0) + k


def _run_length(counts: dict[int, int]) -> SortedSamples:
    keys = sorted(counts)
    return SortedSamples(np.array(keys, dtype=np.int64), np.array([counts[k] for k in keys], dtype=np.int64))


def _content(block: ChunkBlock, first_token_ns: np.ndarray) -> np.ndarray:
    """Chunk mask: content chunks (tokens > 0) from the request's first content token on."""
    ft_chunk = first_token_ns[block.lo:block.hi][block.owner()]
    ft_chunk[np.isnan(ft_chunk)] = np.inf  # a request with no content token has no content chunk
    return (block.chunk_tokens > 0) & (block.chunk_ns >= ft_chunk)


def _token_times(block: ChunkBlock, first_token_ns: np.ndarray, sent_ns: np.ndarray) -> ux.TokenTimes:
    """Option-B token times of the block's requests: every token of a content chunk at its arrival."""
    content = _content(block, first_token_ns)
    sizes = block.chunk_tokens[content]
    times = np.repeat(block.chunk_ns[content], sizes)
    owner = np.repeat(block.owner()[content], sizes)
    offsets = np.zeros(block.n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=block.n), out=offsets[1:])
    return ux.TokenTimes(times, offsets, sent_ns[block.lo:block.hi])


class RunTokens:
    """The option-B token times of a run's requests (those ``keep`` selects), made block by block from its
    chunks (:meth:`blocks`), never the whole run's at once; :meth:`whole` gives one TokenTimes (small runs)."""

    def __init__(self, chunks: Chunks, first_token_ns: np.ndarray, sent_ns: np.ndarray,
                 keep: np.ndarray | None = None) -> None:
        self.chunks, self.first_token_ns, self.sent_ns, self.keep = chunks, first_token_ns, sent_ns, keep

    @property
    def n_requests(self) -> int:
        return self.chunks.n if self.keep is None else int(np.count_nonzero(self.keep))

    def select(self, keep: np.ndarray) -> RunTokens:
        """The token times of the requests where ``keep`` (one bool per request here) is True."""
        keep = np.asarray(keep, dtype=bool)
        if self.keep is not None:
            full = self.keep.copy()
            full[self.keep] = keep
            keep = full
        return RunTokens(self.chunks, self.first_token_ns, self.sent_ns, keep)

    def blocks(self) -> Iterator[tuple[ux.TokenTimes, slice]]:
        """(token times of a block's requests, their positions among this selection's requests)."""
        at = 0
        for block in self.chunks.blocks():
            tt = _token_times(block, self.first_token_ns, self.sent_ns)
            if self.keep is not None:
                tt = tt.select(self.keep[block.lo:block.hi])
            yield tt, slice(at, at + tt.n_requests)
            at += tt.n_requests

    def request_gaps(self, metric: str, ok: np.ndarray, select: Callable[[np.ndarray], np.ndarray],
                     itl_option: str, index: np.ndarray | None = None) -> RequestGaps | None:
        """:func:`request_gaps` of the pooled metric ``metric`` (its option from :data:`GAP_OPTIONS`, ``itl``
        the run's ``itl_option``); None for a metric that is not pooled gaps. What slo.py reads (duck-typed:
        measure.slo does not import the metric modules)."""
        if metric not in GAP_OPTIONS:
            return None
        return request_gaps(self, ok, GAP_OPTIONS[metric] or itl_option, select, index)

    def whole(self) -> ux.TokenTimes:
        parts = [tt for tt, _ in self.blocks()]
        offsets = [np.zeros(1, dtype=np.int64)]
        base = 0
        for tt in parts:
            offsets.append(tt.offsets[1:] + base)
            base += int(tt.offsets[-1])
        return ux.TokenTimes(np.concatenate([tt.times_ns for tt in parts] or [np.empty(0, np.int64)]),
                             np.concatenate(offsets),
                             np.concatenate([tt.start_ns for tt in parts] or [np.empty(0, np.int64)]))


@dataclass(frozen=True)
class ItlData:
    """Token times and the pooled ITL samples of every §4.6.3 option this run supports."""

    samples: dict[str, ItlSamples]
    option: str  # the option reported as "itl" (``auto`` resolved)
    ttst: np.ndarray  # time to second token, per request (s)
    tokens: RunTokens  # option-B token times of every request (failed ones feed user idle latency)
    sizes: SortedSamples  # tokens of each content chunk (every request's)
    sizes_ok: SortedSamples  # tokens of each content chunk of the successful requests
    single_token_chunks: bool
    stats: dict[str, np.ndarray]  # itl_mean, jitter, max_pause, itl_count of the chosen option


def _server_gaps(block: ChunkBlock, ok: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Option C: gaps between server per-token timestamps of successful requests that carry them."""
    counts = block.server_token_counts
    has_c = (counts > 0) & ok
    s_ns = block.server_token_ns[np.repeat(has_c, counts)]
    s_vals, s_owner = pairs_diff(s_ns, np.repeat(np.flatnonzero(has_c), counts[has_c]))
    if (s_vals < 0).any():
        raise ValueError(f"record {index[block.lo + int(s_owner[s_vals < 0][0])]}: server_token_ns is not "
                         "non-decreasing")
    return s_vals, s_owner


def _a_gaps(block: ChunkBlock, content: np.ndarray, owner: np.ndarray, ok: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Option A: gaps (ns) between consecutive content chunks of the block's successful requests, and their rows."""
    content_ok = content & ok[owner]
    return pairs_diff(block.chunk_ns[content_ok], owner[content_ok])


def _b_gaps(block: ChunkBlock, content: np.ndarray, owner: np.ndarray, ok: np.ndarray, sizes: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Option B: every token of a content chunk (``sizes`` tokens each) at its arrival; gaps (ns) and rows."""
    b_ns = np.repeat(block.chunk_ns[content], sizes)
    b_own = np.repeat(owner[content], sizes)
    sel = ok[b_own]
    return pairs_diff(b_ns[sel], b_own[sel])


def _resolve(option: str, ok: np.ndarray, osl: np.ndarray, server_token_counts: np.ndarray,
             chunk_token_sum: np.ndarray) -> str:
    """``auto`` -> C when every successful multi-token request has server timestamps, else B; C checked. A
    request that streamed no token (its output all hidden reasoning, issue 49) has no token to stamp."""
    has_c = (server_token_counts > 0) & ok
    need_c = ok & (osl >= 2) & (chunk_token_sum > 0)
    complete = bool(has_c[need_c].all()) if need_c.any() else bool(has_c.any())
    if option == "AUTO":
        return "C" if complete else "B"
    if option == "C" and not complete:
        missing = int((need_c & ~has_c).sum())
        raise ValueError(f"itl_option 'C' needs server_token_ns on every successful multi-token "
                         f"request; {missing} lack it (use 'B' or 'auto', §4.6.3)")
    return option


@derived
def itl_data(first_token_ns: np.ndarray, chunks: Chunks, chunk_counts: np.ndarray, chunk_token_sum: np.ndarray,
             ok: np.ndarray, osl: np.ndarray, n: int, sent_ns: np.ndarray, server_token_counts: np.ndarray,
             index: np.ndarray, itl_option: str) -> ItlData:
    """ITL per §5.4.3 from the first content token on, under options A, B and C (§4.6.3), over the run's
    chunks block by block: per-request figures of a block's requests, pooled samples gathered compactly."""
    option = _resolve(itl_option, ok, osl, server_token_counts, chunk_token_sum)
    gaps_a = _Gaps(int(chunk_counts[ok].sum()))
    gaps_b: _Gaps | None = None  # while every content chunk so far holds one token, B's samples are A's
    has_c = bool(((server_token_counts > 0) & ok).any())
    gaps_c = _Gaps(int(server_token_counts[ok].sum())) if has_c else None
    b_capacity = int(chunk_token_sum[ok].sum())
    ttst = np.full(n, NAN)
    stats = {"itl_count": np.zeros(n), "itl_mean": np.full(n, NAN), "jitter": np.full(n, NAN),
             "max_pause": np.full(n, NAN)}
    sizes: dict[int, int] = {}
    sizes_ok: dict[int, int] = {}
    for block in chunks.blocks():
        lo, hi = block.lo, block.hi
        ok_b = ok[lo:hi]
        owner = block.owner()
        content = _content(block, first_token_ns)
        a_vals, a_owner = _a_gaps(block, content, owner, ok_b)
        b_sizes = block.chunk_tokens[content]
        single_b = bool((b_sizes == 1).all())
        if gaps_b is None and not single_b:
            gaps_b = gaps_a.copy(b_capacity)  # the blocks so far held one token a chunk: B's samples were A's
        gaps_a.add(a_vals)
        if a_owner.size:
            u, first_idx = np.unique(a_owner, return_index=True)
            ttst[lo + u] = a_vals[first_idx] * NS
        _tally(sizes, b_sizes)
        _tally(sizes_ok, b_sizes[ok_b[owner[content]]])
        chosen = (a_vals, a_owner)
        if not single_b or gaps_b is not None or option == "B":
            b_vals, b_owner = _b_gaps(block, content, owner, ok_b, b_sizes)
            if gaps_b is not None:
                gaps_b.add(b_vals)
            if option == "B":
                chosen = (b_vals, b_owner)
        if option == "C":
            chosen = _server_gaps(block, ok_b, index)
        if gaps_c is not None:
            c_vals = chosen[0] if option == "C" else _server_gaps(block, ok_b, index)[0]
            gaps_c.add(c_vals)
        count, mean, std, mx = per_owner_stats(chosen[0] * NS, chosen[1], block.n)
        stats["itl_count"][lo:hi] = count
        for key, arr in (("itl_mean", mean), ("jitter", std), ("max_pause", mx)):
            arr[~ok_b] = NAN
            stats[key][lo:hi] = arr
    single = set(sizes) <= {1}
    a = gaps_a.sorted()
    samples = {"A": ItlSamples("A", a), "B": ItlSamples("B", a if gaps_b is None else gaps_b.sorted())}
    if gaps_c is not None:
        samples["C"] = ItlSamples("C", gaps_c.sorted())
    return ItlData(samples, option, ttst, RunTokens(chunks, first_token_ns, sent_ns), _run_length(sizes),
                   _run_length(sizes_ok), single, stats)


@metric("TTST", "s", "lower", section="AIPerf", slo=True, always=True)
def ttst(itl_data: ItlData, okf: np.ndarray) -> np.ndarray:
    """time to second token: first content chunk to the next content chunk (AIPerf definition); NaN with fewer
    than 2 content chunks
    """
    return itl_data.ttst * okf


@metric("Mean ITL", "s", kind="column")
def itl_mean(itl_data: ItlData) -> np.ndarray:
    """per-request mean of its ITL samples"""
    return itl_data.stats["itl_mean"]


@metric("ITL samples", "samples", kind="column")
def itl_count(itl_data: ItlData) -> np.ndarray:
    """per-request number of ITL samples"""
    return itl_data.stats["itl_count"]


@metric("Jitter", "s", "lower", section="§5.4.3", always=True, itl_gaps=True)
def jitter(itl_data: ItlData) -> np.ndarray:
    """per-request sample standard deviation (ddof=1) of its ITL samples; NaN below 2 samples (§5.4.3 e)"""
    return itl_data.stats["jitter"]


@metric("Max pause", "s", "lower", section="§5.4.3", always=True, itl_gaps=True)
def max_pause(itl_data: ItlData) -> np.ndarray:
    """per-request largest ITL sample (§5.4.3 f)"""
    return itl_data.stats["max_pause"]


@metric("Time between chunks", "s", "lower", section="§4.6.3", aggregation=POOLED,
        aliases=("tbc", "time_between_chunks"), slo=True)
def inter_chunk(itl_data: ItlData, percentiles: Sequence[float], confidence: float) -> Distribution:
    """gaps between consecutive content chunks after the first content token (§4.6.3 option A, 'time between
    chunks'); SLOs say tbc
    """
    return distribution_of_sorted("time_between_chunks", itl_data.samples["A"].values, "s", percentiles,
                                  confidence=confidence)


@metric("ITL (option B)", "s", "lower", section="§4.6.3", aggregation=POOLED, itl_gaps=True)
def itl_distributed(itl_data: ItlData, inter_chunk: Distribution, percentiles: Sequence[float],
                    confidence: float) -> Distribution:
    """option B samples: every token of an N-token chunk gets the chunk's time, so the chunk adds one gap and
    N-1 zeros (draft text, see requirements note 15)
    """
    if itl_data.single_token_chunks:
        return replace(inter_chunk, name="itl_distributed")
    return distribution_of_sorted("itl_distributed", itl_data.samples["B"].values, "s", percentiles,
                                  confidence=confidence)


@metric("ITL (option C)", "s", "lower", section="§4.6.3", aggregation=POOLED)
def itl_server(itl_data: ItlData, percentiles: Sequence[float], confidence: float) -> Distribution | None:
    """option C samples: gaps between server_token_ns (CLOCK_MONOTONIC)"""
    if "C" not in itl_data.samples:
        return None
    return distribution_of_sorted("itl_server", itl_data.samples["C"].values, "s", percentiles, confidence=confidence)


@metric("ITL", "s", "lower", section="§5.4.3", aggregation=POOLED, slo=True, itl_gaps=True)
def itl(itl_data: ItlData, inter_chunk: Distribution, itl_distributed: Distribution,
        itl_server: Distribution | None) -> Distribution:
    """consecutive token arrival gaps after the first content token (§5.4.3), pooled over requests; the
    submission-to-first-token interval is never a sample
    """
    chosen = {"A": inter_chunk, "B": itl_distributed, "C": itl_server}[itl_data.option]
    if chosen is None:  # option C is resolved only when server token times exist (itl_data)
        raise ValueError("ITL option C chosen without server per-token timestamps (§4.6.3)")
    return replace(chosen, name="time_between_chunks" if itl_data.option == "A" else "itl")


@metric("Chunk size", "tokens", section="§4.6.3", aggregation=POOLED)
def chunk_size(itl_data: ItlData, percentiles: Sequence[float], confidence: float) -> Distribution:
    """tokens per content chunk (§4.6.3 option A asks for it)"""
    return distribution_of_sorted("chunk_size", itl_data.sizes_ok, "tokens", percentiles, confidence=confidence)


@metric("ITL tail ratio", "ratio", "lower", kind="scalar", section="§5.4.4.3", aggregation=PER_RUN, itl_gaps=True)
def itl_tail_ratio(itl: Distribution) -> Estimate:
    """P99 / P50 of the ITL samples (§5.4.4.3); NaN when P50 is 0"""
    p50, p99 = itl.percentiles.get(50.0), itl.percentiles.get(99.0)
    if p50 is None or p99 is None:
        p50, p99 = itl.percentile(50.0), itl.percentile(99.0)
    return Estimate(p99.value / p50.value if p50.value > 0 else NAN, itl.n, "ratio",
                    undersampled=p99.undersampled, method="P99 / P50 of ITL samples")


@metric("Single-token chunk fraction", "fraction", kind="scalar", section="App. B.2.1", aggregation=PROPORTION)
def single_token_chunk_fraction(itl_data: ItlData, confidence: float) -> Estimate | None:
    """share of content chunks carrying exactly one token (App. B.2.1)"""
    sizes = itl_data.sizes
    ones = int(sizes.counts[sizes.values == 1].sum()) if sizes.size else 0
    return proportion(ones, int(sizes.size), confidence) if sizes.size else None


#: The §4.6.3 option each pooled gap metric is made of (None: the option the run reports as ``itl``).
GAP_OPTIONS: dict[str, str | None] = {"inter_chunk": "A", "itl_distributed": "B", "itl_server": "C", "itl": None}


@dataclass(frozen=True)
class RequestGaps:
    """One entry per request of a run (row order, i.e. send order): its ITL gaps under one §4.6.3 option.

    ``count`` gaps, their ``total`` (s) and how many of them ``selected`` (the mask given to
    :func:`request_gaps`, e.g. "beyond an SLO's threshold"); 0 for a failed request or one with < 2 tokens.
    """

    count: np.ndarray
    total: np.ndarray
    selected: np.ndarray


def request_gaps(tokens: RunTokens, ok: np.ndarray, option: str, select: Callable[[np.ndarray], np.ndarray],
                 index: np.ndarray | None = None) -> RequestGaps:
    """The pooled samples of option ``option`` (``"A"``, ``"B"`` or ``"C"``), tallied per request: each
    successful request's gap count, their sum and the count of gaps (s) that ``select`` marks. The same gaps,
    from the same chunks, as :func:`itl_data` pools (what an SLO on a pooled percentile bounds per request,
    slo.py); read block by block."""
    n = tokens.chunks.n
    count, total, selected = np.zeros(n), np.zeros(n), np.zeros(n)
    rows = np.arange(n) if index is None else index
    for block in tokens.chunks.blocks():
        ok_b = ok[block.lo:block.hi]
        if option == "C":
            vals, own = _server_gaps(block, ok_b, rows)
        else:
            owner = block.owner()
            content = _content(block, tokens.first_token_ns)
            vals, own = (_a_gaps(block, content, owner, ok_b) if option == "A" else
                         _b_gaps(block, content, owner, ok_b, block.chunk_tokens[content]))
        gaps = vals * NS
        at = slice(block.lo, block.hi)
        count[at] = np.bincount(own, minlength=block.n)
        total[at] = np.bincount(own, weights=gaps, minlength=block.n)
        selected[at] = np.bincount(own, weights=np.asarray(select(gaps), dtype=np.float64), minlength=block.n)
    return RequestGaps(count, total, selected)
