"""Per-request latencies: TTFT (§5.1.3.1), E2E (§5.1.4.2), TPOT (§5.4.3), server-reported phases.

Every latency is defined for successful requests only (``okf`` is NaN elsewhere); times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..registry import derived, metric
from ..stats import Distribution
from ._kit import NAN, NS, dist


@metric("TTFT", "s", "lower", section="§5.1.3.1", slo=True, aliases=("time_to_first_token",), always=True)
def ttft(first_token_ns: np.ndarray, sent_ns: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """first content token (§5.1.3.1: first non-whitespace content; reasoning, role-only and empty chunks
    excluded) - submission (sent_ns)
    """
    return (first_token_ns - sent_ns.astype(np.float64)) * NS * okf


@metric("TTFT (any chunk)", "s", "lower", section="§5.1.3.1 'time-to-any-token'", slo=True, always=True)
def ttft_any_chunk(first_chunk_ns: np.ndarray, sent_ns: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """first SSE data chunk of any kind - submission"""
    return (first_chunk_ns - sent_ns.astype(np.float64)) * NS * okf


@metric("TTFO", "s", "lower", section="AIPerf")
def ttfo(first_reasoning_ns: np.ndarray, first_token_ns: np.ndarray, ttft: np.ndarray) -> np.ndarray:
    """time to first output token: first content token - submission, defined only when reasoning content
    preceded the output
    """
    return np.where(first_reasoning_ns < first_token_ns, ttft, NAN)


@metric("E2E", "s", "lower", section="§5.1.4.2", slo=True, aliases=("e2e_latency", "request_latency"), always=True)
def e2e(end_ns: np.ndarray, sent_ns: np.ndarray, has_end: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """end (last byte / [DONE]) - submission"""
    return np.where(has_end, (end_ns - sent_ns) * NS, NAN) * okf


@metric("TPOT", "s", "lower", section="§5.4.3", slo=True, per_token=True, aliases=("time_per_output_token",),
        always=True)
def tpot(e2e: np.ndarray, ttft: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """(E2E - TTFT) / (output tokens - 1); NaN for single-token responses (no decode interval exists)"""
    return np.where(osl >= 2, (e2e - ttft) / (osl - 1), NAN)


@metric("Per-request output rate", "tokens/s", "higher", section="AIPerf", slo=True, always=True)
def output_tps_per_request(osl: np.ndarray, e2e: np.ndarray) -> np.ndarray:
    """OSL / E2E of one request (AIPerf 'E2E output token throughput')"""
    return np.where((osl > 0) & (e2e > 0), osl / e2e, NAN)


@metric("Per-request prefill rate", "tokens/s", "higher", section="AIPerf")
def prefill_tps_per_request(isl: np.ndarray, ttft: np.ndarray) -> np.ndarray:
    """ISL / TTFT"""
    return np.where(ttft > 0, isl / ttft, NAN)


@metric("Normalized latency", "s/token", "lower", section="§5.6.4", slo=True, per_token=True, always=True)
def normalized_latency(e2e: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """E2E / OSL"""
    return np.where(osl > 0, e2e / osl, NAN)


@metric("Queue wait", "s", "lower", section="§5.1.4.2", slo=True)
def queue_wait(srv_queue_ns: np.ndarray) -> np.ndarray:
    """server_timing.queue_ns (§5.1.4.2)"""
    return srv_queue_ns * NS


@metric("Prefill", "s", "lower", section="§5.1.4.2", slo=True)
def prefill(srv_prefill_ns: np.ndarray) -> np.ndarray:
    """server_timing.prefill_ns (§5.1.4.2)"""
    return srv_prefill_ns * NS


#: §5.1.4.2 RECOMMENDED input-length buckets, [low, high) tokens.
INPUT_LENGTH_BUCKETS: tuple[tuple[int, float], ...] = (
    (0, 256), (256, 512), (512, 1024), (1024, 2048), (2048, 4096), (4096, math.inf))


@derived
def ttft_by_input_length(ttft: np.ndarray, isl: np.ndarray, ok: np.ndarray, percentiles: Sequence[float],
                         confidence: float) -> dict[str, Distribution]:
    """TTFT per §5.1.4.2 input-length bucket that holds a successful request."""
    out: dict[str, Distribution] = {}
    for lo, hi in INPUT_LENGTH_BUCKETS:
        sel = ok & (isl >= lo) & (isl < hi)
        if sel.any():
            label = f"[{lo},{'inf' if math.isinf(hi) else int(hi)})"
            out[label] = dist(f"ttft{label}", ttft[sel], "s", percentiles, confidence)
    return out
