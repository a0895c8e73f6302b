"""Inter-token latency (§5.4.3) under the §4.6.3 options, and the chunking it rests on (App. B.2.1).

ITL samples start at the first content token: the submission-to-first-token interval is never a
sample. Option ``A`` is the time between content chunks; ``B`` gives every token of a chunk the chunk's
arrival time (the draft's literal text: an N-token chunk adds N-1 zero gaps); ``C`` uses the server's
per-token timestamps. ``itl_option`` (``auto``: C when every successful multi-token request carries
server timestamps, else B) picks the one reported as ``itl``, ``jitter`` and ``max_pause``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from .. import experience as ux
from ..registry import PER_RUN, POOLED, PROPORTION, derived, metric
from ..stats import Distribution, Estimate
from ._kit import NAN, NS, dist, pairs_diff, per_owner_stats, proportion, segment_sum


@dataclass(frozen=True)
class ItlSamples:
    """Pooled ITL samples (seconds) with the per-request row each one belongs to."""

    option: str  # "A" | "B" | "C"
    values: np.ndarray
    owner: np.ndarray  # row index into the per-request table, non-decreasing

    def for_request(self, row: int) -> np.ndarray:
        lo, hi = np.searchsorted(self.owner, [row, row + 1])
        return self.values[lo:hi]


@dataclass(frozen=True)
class ItlData:
    """Token times and the pooled ITL samples of every §4.6.3 option this run supports."""

    samples: dict[str, ItlSamples]
    option: str  # the option reported as "itl" (``auto`` resolved)
    ttst: np.ndarray  # time to second token, per request (s)
    tokens: ux.TokenTimes  # option-B token times of every request (failed ones feed user idle latency)
    content: np.ndarray  # chunk mask: content chunks from the first content token on
    sizes: np.ndarray  # tokens of each content chunk
    single_token_chunks: bool
    stats: dict[str, np.ndarray]  # itl_mean, jitter, max_pause, itl_count of the chosen option


@derived
def chunk_owner(chunk_counts: np.ndarray, chunk_ns: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    """The row of each streamed chunk; a request's chunks must arrive in order."""
    owner = np.repeat(np.arange(n, dtype=np.int32), chunk_counts)
    if chunk_ns.size > 1:
        bad = (np.diff(chunk_ns) < 0) & (owner[1:] == owner[:-1])
        if bad.any():
            raise ValueError(f"record {index[int(owner[1:][bad][0])]}: chunk_ns is not non-decreasing")
    return owner


@derived
def chunk_token_sum(chunk_tokens: np.ndarray, chunk_counts: np.ndarray) -> np.ndarray:
    """Tokens per request, summed over its chunks."""
    return segment_sum(chunk_tokens, chunk_counts)


def _server_itl(ok: np.ndarray, server_token_counts: np.ndarray, server_token_ns: np.ndarray,
                index: np.ndarray) -> ItlSamples | None:
    """Option C: gaps between server per-token timestamps of successful requests that carry them."""
    has_c = (server_token_counts > 0) & ok
    if not has_c.any():
        return None
    s_ns = server_token_ns[np.repeat(has_c, server_token_counts)]
    s_vals, s_owner = pairs_diff(s_ns, np.repeat(np.flatnonzero(has_c), server_token_counts[has_c]))
    if (s_vals < 0).any():
        raise ValueError(f"record {index[int(s_owner[s_vals < 0][0])]}: server_token_ns is not non-decreasing")
    return ItlSamples("C", s_vals * NS, s_owner)


def _resolve(option: str, ok: np.ndarray, osl: np.ndarray, server_token_counts: np.ndarray) -> str:
    """``auto`` -> C when every successful multi-token request has server timestamps, else B; C checked."""
    has_c = (server_token_counts > 0) & ok
    need_c = ok & (osl >= 2)
    complete = bool(has_c[need_c].all()) if need_c.any() else bool(has_c.any())
    if option == "AUTO":
        return "C" if complete else "B"
    if option == "C" and not complete:
        missing = int((need_c & ~has_c).sum())
        raise ValueError(f"itl_option 'C' needs server_token_ns on every successful multi-token "
                         f"request; {missing} lack it (use 'B' or 'auto', §4.6.3)")
    return option


@derived
def itl_data(first_token_ns: np.ndarray, chunk_ns: np.ndarray, chunk_tokens: np.ndarray, chunk_owner: np.ndarray,
             ok: np.ndarray, osl: np.ndarray, n: int, sent_ns: np.ndarray, server_token_counts: np.ndarray,
             server_token_ns: np.ndarray, index: np.ndarray, itl_option: str) -> ItlData:
    """ITL per §5.4.3 from the first content token on, under options A, B and C (§4.6.3)."""
    ft_chunk = first_token_ns[chunk_owner]
    ft_chunk[np.isnan(ft_chunk)] = np.inf  # a request with no content token has no content chunk
    content = (chunk_tokens > 0) & (chunk_ns >= ft_chunk)
    del ft_chunk
    content_ok = content & ok[chunk_owner]
    a_vals, a_owner = pairs_diff(chunk_ns[content_ok], chunk_owner[content_ok])
    del content_ok
    samples = {"A": ItlSamples("A", a_vals * NS, a_owner)}
    ttst = np.full(n, NAN)
    if a_owner.size:
        u, first_idx = np.unique(a_owner, return_index=True)
        ttst[u] = a_vals[first_idx] * NS
    del a_vals
    sizes = chunk_tokens[content]
    single = bool((sizes == 1).all())
    if single:  # one token per chunk: option B's samples are option A's (no zero gaps to add)
        b_ns_all, b_own_all = chunk_ns[content], chunk_owner[content]
        samples["B"] = ItlSamples("B", samples["A"].values, a_owner)
    else:
        b_ns_all = np.repeat(chunk_ns[content], sizes)
        b_own_all = np.repeat(chunk_owner[content], sizes)
        sel_b = ok[b_own_all]
        b_vals, b_owner = pairs_diff(b_ns_all[sel_b], b_own_all[sel_b])
        samples["B"] = ItlSamples("B", b_vals * NS, b_owner)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(b_own_all, minlength=n), out=offsets[1:])
    del b_own_all
    server = _server_itl(ok, server_token_counts, server_token_ns, index)
    if server is not None:
        samples["C"] = server
    option = _resolve(itl_option, ok, osl, server_token_counts)
    chosen = samples[option]
    itl_count, itl_mean, jitter, max_pause = per_owner_stats(chosen.values, chosen.owner, n)
    for arr in (itl_mean, jitter, max_pause):
        arr[~ok] = NAN
    return ItlData(samples, option, ttst, ux.TokenTimes(b_ns_all, offsets, sent_ns), content, sizes, single,
                   {"itl_mean": itl_mean, "jitter": jitter, "max_pause": max_pause, "itl_count": itl_count})


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
    return dist("time_between_chunks", itl_data.samples["A"].values, "s", percentiles, confidence)


@metric("ITL (option B)", "s", "lower", section="§4.6.3", aggregation=POOLED, itl_gaps=True)
def itl_distributed(itl_data: ItlData, inter_chunk: Distribution, percentiles: Sequence[float],
                    confidence: float) -> Distribution:
    """option B samples: every token of an N-token chunk gets the chunk's time, so the chunk adds one gap and
    N-1 zeros (draft text, see requirements note 15)
    """
    if itl_data.single_token_chunks:
        return replace(inter_chunk, name="itl_distributed")
    return dist("itl_distributed", itl_data.samples["B"].values, "s", percentiles, confidence)


@metric("ITL (option C)", "s", "lower", section="§4.6.3", aggregation=POOLED)
def itl_server(itl_data: ItlData, percentiles: Sequence[float], confidence: float) -> Distribution | None:
    """option C samples: gaps between server_token_ns (CLOCK_MONOTONIC)"""
    if "C" not in itl_data.samples:
        return None
    return dist("itl_server", itl_data.samples["C"].values, "s", percentiles, confidence)


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
def chunk_size(itl_data: ItlData, ok: np.ndarray, chunk_owner: np.ndarray, percentiles: Sequence[float],
               confidence: float) -> Distribution:
    """tokens per content chunk (§4.6.3 option A asks for it)"""
    values = itl_data.sizes[ok[chunk_owner[itl_data.content]]].astype(np.float64)
    return dist("chunk_size", values, "tokens", percentiles, confidence)


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
    return proportion(int((sizes == 1).sum()), int(sizes.size), confidence) if sizes.size else None
