"""Input and output lengths (§4.4.2), the request's submission and end, and their consistency checks."""

from __future__ import annotations

import numpy as np

from ..registry import COUNT, metric
from ..stats import Estimate
from ._kit import NAN, NS, count


@metric("Input length", "tokens", section="§4.4.2", always=True)
def isl(input_tokens: np.ndarray) -> np.ndarray:
    """input tokens: server usage, else client count, else the spec's length (§4.4.2)"""
    return input_tokens


@metric("Output length", "tokens", section="§4.4.2", always=True)
def osl(out_server: np.ndarray, out_client: np.ndarray, chunk_token_sum: np.ndarray) -> np.ndarray:
    """output tokens: server usage, else client count, else the chunk token sum"""
    return np.where(~np.isnan(out_server), out_server, np.where(~np.isnan(out_client), out_client, chunk_token_sum))


@metric("Sent", "s", kind="column")
def sent(sent_ns: np.ndarray) -> np.ndarray:
    """submission time after the first submission"""
    return sent_ns.astype(np.float64) * NS


@metric("End", "s", kind="column")
def end(end_ns: np.ndarray, has_end: np.ndarray) -> np.ndarray:
    """end time after the first submission"""
    return np.where(has_end, end_ns * NS, NAN)


@metric("max_tokens", "tokens", kind="column")
def max_tokens(max_tokens_asked: np.ndarray) -> np.ndarray:
    """the request's max_tokens"""
    return max_tokens_asked


@metric("Input usage difference", "%", section="§4.4.2")
def input_usage_diff_pct(in_server: np.ndarray, in_client: np.ndarray) -> np.ndarray:
    """(server prompt tokens - client count) / client count x 100 (signed)"""
    return np.where(in_client > 0, (in_server - in_client) / in_client * 100.0, NAN)


@metric("Output usage difference", "%", section="§4.4.2")
def output_usage_diff_pct(out_server: np.ndarray, out_client: np.ndarray) -> np.ndarray:
    """(server completion tokens - client count) / client count x 100 (signed)"""
    return np.where(out_client > 0, (out_server - out_client) / out_client * 100.0, NAN)


@metric("OSL mismatch", "%", section="AIPerf")
def osl_mismatch_pct(osl: np.ndarray, max_tokens_asked: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """(OSL - max_tokens) / max_tokens x 100 (signed; negative = stopped early)"""
    mt = max_tokens_asked
    return np.where(mt > 0, (osl - mt) / mt * 100.0, NAN) * okf


@metric("OSL mismatches", "requests", "lower", kind="scalar", section="AIPerf", aggregation=COUNT)
def osl_mismatch_count(osl: np.ndarray, max_tokens_asked: np.ndarray, ok: np.ndarray) -> Estimate:
    """requests with |OSL - max_tokens| > min(5% of max_tokens, 50 tokens) (AIPerf rule)"""
    mt = max_tokens_asked
    return count(int((ok & (mt > 0) & (np.abs(osl - mt) > np.minimum(0.05 * mt, 50))).sum()))


@metric("Usage discrepancies", "requests", "lower", kind="scalar", section="AIPerf", aggregation=COUNT)
def usage_discrepancy_count(input_usage_diff_pct: np.ndarray, output_usage_diff_pct: np.ndarray) -> Estimate:
    """requests whose |input or output usage diff| > 10% (AIPerf rule)"""
    disc = ((np.abs(np.nan_to_num(input_usage_diff_pct)) > 10) | (np.abs(np.nan_to_num(output_usage_diff_pct)) > 10))
    return count(int(disc.sum()))
