"""Throughput over the §5.2.3.2 steady-state window (§5.2.3 step 3c, §5.2.4) and what is in flight (§5.5.4).

The window is the send window D (the load's start to its last send) less its first 10%: [start + 0.1·D,
start + D]; the drain after the last send is not in it (``summary.summarize``). Each rate has a whole-run
variant ``<name>_full`` (first submission to last response). Output tokens count at their chunk's arrival,
every request's (a cancelled or failed request's streamed tokens were delivered too; a successful
request's chunk tokens are scaled so that they add up to its OSL, a non-streamed response's tokens count at
its end); input tokens count at the first token, requests at completion.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..frame import Chunks
from ..registry import TIME_AVERAGE, WINDOW_RATE, derived, metric
from ..stats import Estimate, rate_from_window_sums
from ._kit import NAN, NS, Windows, segment_sum

Sums = dict[str, tuple[np.ndarray, int]]


@derived
def token_scale(osl: np.ndarray, chunk_token_sum: np.ndarray, n: int) -> np.ndarray:
    """Per request, OSL / the tokens its chunks carry (0 without chunk tokens)."""
    return np.divide(osl, chunk_token_sum, out=np.zeros(n), where=chunk_token_sum > 0)


@derived
def output_sums(ok: np.ndarray, chunks: Chunks, chunk_token_sum: np.ndarray, token_scale: np.ndarray,
                osl: np.ndarray, end_ns: np.ndarray, has_end: np.ndarray, windows: Windows) -> Sums:
    """Output tokens per batch of each window, at their chunk's arrival: every request's streamed tokens
    (a successful one's scaled to its OSL), and a successful non-streamed response's OSL at its end."""
    fold = windows.fold()
    for block in chunks.blocks():  # the run's chunks in row order, a block at a time
        streamed = block.chunk_tokens > 0
        owner = block.owner()[streamed] + block.lo
        weight = np.where(ok[owner], block.chunk_tokens[streamed] * token_scale[owner], block.chunk_tokens[streamed])
        fold.add(block.chunk_ns[streamed] * NS, weight)
    no_chunks = ok & (chunk_token_sum == 0) & (osl > 0) & has_end
    fold.add(end_ns[no_chunks] * NS, osl[no_chunks])
    return fold.sums()


@derived
def input_sums(ok: np.ndarray, has_end: np.ndarray, first_token_ns: np.ndarray, end_ns: np.ndarray,
               isl: np.ndarray, windows: Windows) -> Sums:
    """Input tokens of successful requests per batch of each window, at their first token (else their end)."""
    in_at = np.where(np.isnan(first_token_ns), end_ns.astype(np.float64), first_token_ns)
    sel = ok & has_end
    return windows.sums(in_at[sel] * NS, isl[sel])


@metric("Request throughput", "requests/s", "higher", kind="scalar", section="§5.2.4.1", aggregation=WINDOW_RATE,
        slo=True)
def request_throughput(ok: np.ndarray, has_end: np.ndarray, end_ns: np.ndarray, windows: Windows
                       ) -> dict[str, Estimate]:
    """successful requests completing inside the window / window length"""
    return windows.rate(windows.sums(end_ns[ok & has_end] * NS, None), "requests/s")


@metric("Output throughput", "tokens/s", "higher", kind="scalar", section="§5.2.3", aggregation=WINDOW_RATE,
        slo=True, aliases=("output_token_throughput",))
def output_throughput(output_sums: Sums, windows: Windows) -> dict[str, Estimate]:
    """output tokens arriving inside the window / window length: every request's streamed tokens, cancelled
    and failed ones included; a successful request's chunk tokens are scaled so its total equals its OSL
    """
    return windows.rate(output_sums, "tokens/s")


@metric("Input throughput", "tokens/s", "higher", kind="scalar", section="§5.2.4.1", aggregation=WINDOW_RATE,
        slo=True)
def input_throughput(input_sums: Sums, windows: Windows) -> dict[str, Estimate]:
    """input tokens of successful requests, counted at their first token, inside the window / window length"""
    return windows.rate(input_sums, "tokens/s")


@metric("Total token throughput", "tokens/s", "higher", kind="scalar", section="§5.2.4.1",
        aggregation=WINDOW_RATE, slo=True)
def total_token_throughput(output_sums: Sums, input_sums: Sums, windows: Windows) -> dict[str, Estimate]:
    """input + output throughput"""
    both = {k: (output_sums[k][0] + input_sums[k][0], output_sums[k][1] + input_sums[k][1]) for k in output_sums}
    return windows.rate(both, "tokens/s")


@metric("Tokens per GPU-second", "tokens/s/GPU", "higher", kind="scalar", section="§5.2.4.2",
        aggregation=WINDOW_RATE)
def tokens_per_gpu_second(output_throughput: dict[str, Estimate], gpu_count: int | None) -> Estimate | None:
    """output throughput / GPU count (§5.2.4.2)"""
    if not gpu_count:
        return None
    o = output_throughput[""]
    return Estimate(o.value / gpu_count, o.n, "tokens/s/GPU", None if o.ci_low is None else o.ci_low / gpu_count,
                    None if o.ci_high is None else o.ci_high / gpu_count, o.confidence, o.undersampled,
                    f"output throughput / {gpu_count} GPUs")


@derived
def in_flight(sent_ns: np.ndarray, end_ns: np.ndarray, isl: np.ndarray, chunks: Chunks, ok: np.ndarray,
              token_scale: np.ndarray, chunk_counts: np.ndarray, steady: tuple[float, float], windows: Windows
              ) -> tuple[Estimate, Estimate]:
    """Time-averaged tokens in flight and requests in flight over the steady-state window (§5.5.4).

    A request holds its input tokens from submission to end, and each output token from its arrival to
    the request's end (failed requests included: they held memory). The integral up to x is evaluated at
    the batch boundaries (requests already ended contribute a precomputed constant; only requests
    straddling x are evaluated chunk by chunk); the per-batch averages give a t interval (batch means).
    The chunks are read block by block: per request their weighted sums, and the chunks of the requests
    straddling a boundary.
    """
    w0, w1 = steady
    length = w1 - w0
    method = f"time average over the window, batch means ({max(windows.batches, 1)} sub-windows), t interval"
    if not length > 0:
        nan = Estimate(NAN, 0, "tokens", undersampled=True, method=method)
        return nan, replace(nan, unit="requests")
    start, end = sent_ns * NS, end_ns * NS
    n = start.size
    bounds = np.linspace(w0, w1, max(windows.batches, 1) + 1)
    w_sum, wt_sum, first_t = np.zeros(n), np.zeros(n), np.full(n, np.inf)
    mids: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in bounds]
    for block in chunks.blocks():
        lo, hi = block.lo, block.hi
        owner = block.owner() + lo
        chunk_w = np.where(ok[owner], block.chunk_tokens * token_scale[owner], block.chunk_tokens)
        chunk_t = block.chunk_ns * NS
        counts = block.chunk_counts
        w_sum[lo:hi] = segment_sum(chunk_w, counts)
        wt_sum[lo:hi] = segment_sum(chunk_w * chunk_t, counts)
        offsets = np.zeros(block.n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        has = counts > 0
        first = first_t[lo:hi]
        first[has] = chunk_t[offsets[:-1][has]]
        for j, x in enumerate(bounds):
            mid = np.flatnonzero((first < x) & (end[lo:hi] > x))
            if mid.size:
                lens = counts[mid]
                idx = np.repeat(offsets[mid] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
                mids[j].append((chunk_w[idx], chunk_t[idx]))
    ended_const = end * w_sum - wt_sum  # Σ w_k (end - t_k): the whole output contribution
    tok_int = np.empty(bounds.size)
    req_int = np.empty(bounds.size)
    for j, x in enumerate(bounds):
        held = np.clip(np.minimum(end, x) - start, 0.0, None)
        req_int[j] = held.sum()
        out_part = float(ended_const[end <= x].sum())
        if mids[j]:
            cw = np.concatenate([m[0] for m in mids[j]])
            ct = np.concatenate([m[1] for m in mids[j]])
            out_part += float(np.dot(cw, np.clip(x - ct, 0.0, None)))
        tok_int[j] = float(np.dot(isl, held)) + out_part
    out = []
    for integral, unit in ((tok_int, "tokens"), (req_int, "requests")):
        est = rate_from_window_sums(np.diff(integral), n, length, unit=unit, confidence=windows.confidence)
        out.append(replace(est, undersampled=False, method=method))
    return out[0], out[1]


@metric("Tokens in flight", "tokens", "higher", kind="scalar", section="§5.5.4", aggregation=TIME_AVERAGE, slo=True)
def tokens_in_flight(in_flight: tuple[Estimate, Estimate]) -> Estimate:
    """time average over the window of Σ (input tokens + output tokens received so far) over requests in flight
    (§5.5.4); every request, failed ones included
    """
    return in_flight[0]


@metric("Concurrency", "requests", kind="scalar", section="§5.5.4", aggregation=TIME_AVERAGE)
def concurrency(in_flight: tuple[Estimate, Estimate]) -> Estimate:
    """time average of requests in flight over the window"""
    return in_flight[1]
