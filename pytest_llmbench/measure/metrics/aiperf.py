"""AIPerf's metrics that the draft's do not cover (AIPerf metrics reference, June 2026, by section and tag).

Conventions: per-request values are NaN where undefined; run totals sum successful requests (AIPerf's
"valid"), error totals sum failed requests (cancelled ones are neither), and a total over no defined
value is absent (AIPerf: no metric). Times in seconds.
"""

from __future__ import annotations

import numpy as np

from ..registry import METRICS, metric
from ..stats import Estimate
from ._kit import NAN

_A = "AIPerf metrics reference"


@metric("ITL (AIPerf)", "s", "lower", section=f"{_A}, Streaming Metrics, Inter Token Latency", slo=True,
        aiperf="inter_token_latency")
def aiperf_itl(ok: np.ndarray, first_any_ns: np.ndarray, end_ns: np.ndarray,
               has_end: np.ndarray, out_server: np.ndarray, out_client: np.ndarray) -> np.ndarray:
    """(E2E - ttfa) / (OSL - 1); equals our tpot unless reasoning (or a tool call) preceded the output

    ttfa is AIPerf's TTFT, reasoning included, unlike the §5.1.3.1 ``ttft``; the request ends at the last
    byte/[DONE] (AIPerf: last content response); OSL is the server's count, else the client's.
    """
    first = first_any_ns
    out = np.where(~np.isnan(out_server), out_server, out_client)
    defined = ok & ~np.isnan(first) & has_end & (out >= 2)
    return np.where(defined, (end_ns - first) / 1e9 / (out - 1), NAN)


@metric("Output rate per user", "tokens/s", "higher", section=f"{_A}, Streaming Metrics, Output Token Throughput "
        "Per User", slo=True, aiperf="output_token_throughput_per_user")
def output_tps_per_user(aiperf_itl: np.ndarray) -> np.ndarray:
    """1 / aiperf_itl"""
    return np.where(aiperf_itl != 0, 1.0 / aiperf_itl, NAN)


@metric("Output tokens (excl. reasoning)", "tokens", kind="column", section=f"{_A}, Token Based Metrics",
        aiperf="output_token_count")
def output_token_count(reasoning_streamed: np.ndarray, out_client: np.ndarray, reasoning_client: np.ndarray
                       ) -> np.ndarray:
    """client-side output tokens excluding reasoning"""
    return np.where(reasoning_streamed, out_client - reasoning_client, out_client)


@metric("Reasoning tokens", "tokens", kind="column", section=f"{_A}, Reasoning Metrics", aiperf="reasoning_token_count")
def reasoning_token_count(reasoning_streamed: np.ndarray, reasoning_client: np.ndarray) -> np.ndarray:
    """client-side tokens of the streamed reasoning_content"""
    return np.where(reasoning_streamed, reasoning_client, NAN)


@metric("Usage total tokens", "tokens", kind="column", section=f"{_A}, Usage Field Metrics", aiperf="usage_total_tokens")
def usage_total_tokens(u_total: np.ndarray) -> np.ndarray:
    """usage.total_tokens"""
    return u_total


@metric("Usage reasoning tokens", "tokens", kind="column", section=f"{_A}, Usage Field Metrics",
        aiperf="usage_reasoning_tokens")
def usage_reasoning_tokens(u_reasoning: np.ndarray) -> np.ndarray:
    """usage.completion_tokens_details.reasoning_tokens"""
    return u_reasoning


@metric("Usage cache-read tokens", "tokens", "higher", kind="column", section=f"{_A}, Usage Field Metrics",
        aiperf="usage_prompt_cache_read_tokens")
def usage_prompt_cache_read_tokens(u_cache_read: np.ndarray) -> np.ndarray:
    """prompt_tokens_details.cached_tokens / cache_read_input_tokens (record.cached_tokens)"""
    return u_cache_read


@metric("Usage cache-write tokens", "tokens", kind="column", section=f"{_A}, Usage Field Metrics",
        aiperf="usage_prompt_cache_write_tokens")
def usage_prompt_cache_write_tokens(u_cache_write: np.ndarray) -> np.ndarray:
    """usage.cache_creation_input_tokens (Anthropic)"""
    return u_cache_write


@metric("Usage cache-miss tokens", "tokens", "lower", kind="column", section=f"{_A}, Usage Field Metrics",
        aiperf="usage_prompt_cache_miss_tokens")
def usage_prompt_cache_miss_tokens(u_cache_miss: np.ndarray) -> np.ndarray:
    """usage.prompt_cache_miss_tokens (DeepSeek)"""
    return u_cache_miss


@metric("Reasoning usage difference", "%", "lower", kind="column", section=f"{_A}, Usage Discrepancy Metrics",
        aiperf="usage_reasoning_tokens_diff_pct")
def reasoning_usage_diff_pct(usage_reasoning_tokens: np.ndarray, reasoning_token_count: np.ndarray) -> np.ndarray:
    """(usage reasoning - client reasoning) / client reasoning x 100, signed (AIPerf: absolute)"""
    client = reasoning_token_count
    return np.where(~np.isnan(usage_reasoning_tokens) & (client > 0),
                    (usage_reasoning_tokens - client) / client * 100.0, NAN)


@metric("Error input length", "tokens", kind="column", section=f"{_A}, Error Metrics", aiperf="error_isl")
def error_isl(failed: np.ndarray, input_tokens: np.ndarray) -> np.ndarray:
    """input tokens of a failed request"""
    return np.where(failed, input_tokens, NAN)


def _total(values: np.ndarray, rows: np.ndarray, n: int, name: str) -> Estimate | None:
    """The run total ``name``: Σ of the defined ``values`` over ``rows``; None when no row defines one."""
    v = values[rows]
    v = v[~np.isnan(v)]
    return Estimate(float(v.sum()), n, "tokens", method=METRICS[name].definition) if v.size else None


_TOKENS, _REASONING, _USAGE, _ERRORS = (f"{_A}, Token Based Metrics", f"{_A}, Reasoning Metrics",
                                        f"{_A}, Usage Field Metrics", f"{_A}, Error Metrics")


@metric("Total output tokens", "tokens", kind="scalar", section=_TOKENS, aiperf="total_output_tokens")
def total_output_tokens(output_token_count: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ output_token_count, successful requests"""
    return _total(output_token_count, ok, n, "total_output_tokens")


@metric("Total OSL", "tokens", kind="scalar", section=_TOKENS, aiperf="total_osl")
def total_osl(out_server: np.ndarray, out_client: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ osl (server usage preferred), successful requests"""
    return _total(np.where(~np.isnan(out_server), out_server, out_client), ok, n, "total_osl")


@metric("Total ISL", "tokens", kind="scalar", section=_TOKENS, aiperf="total_isl")
def total_isl(input_tokens: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ isl (server usage preferred), successful requests"""
    return _total(input_tokens, ok, n, "total_isl")


@metric("Total reasoning tokens", "tokens", kind="scalar", section=_REASONING, aiperf="total_reasoning_tokens")
def total_reasoning_tokens(reasoning_token_count: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ reasoning_token_count"""
    return _total(reasoning_token_count, ok, n, "total_reasoning_tokens")


@metric("Total usage prompt tokens", "tokens", kind="scalar", section=_USAGE, aiperf="total_usage_prompt_tokens")
def total_usage_prompt_tokens(in_server: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage prompt tokens, successful requests"""
    return _total(in_server, ok, n, "total_usage_prompt_tokens")


@metric("Total usage completion tokens", "tokens", kind="scalar", section=_USAGE,
        aiperf="total_usage_completion_tokens")
def total_usage_completion_tokens(out_server: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage completion tokens, successful requests"""
    return _total(out_server, ok, n, "total_usage_completion_tokens")


@metric("Total usage total tokens", "tokens", kind="scalar", section=_USAGE, aiperf="total_usage_total_tokens")
def total_usage_total_tokens(u_total: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage total tokens, successful requests"""
    return _total(u_total, ok, n, "total_usage_total_tokens")


@metric("Total usage reasoning tokens", "tokens", kind="scalar", section=_USAGE,
        aiperf="total_usage_reasoning_tokens")
def total_usage_reasoning_tokens(u_reasoning: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage reasoning tokens, successful requests"""
    return _total(u_reasoning, ok, n, "total_usage_reasoning_tokens")


@metric("Total usage prompt cache read tokens", "tokens", kind="scalar", section=_USAGE,
        aiperf="total_usage_prompt_cache_read_tokens")
def total_usage_prompt_cache_read_tokens(u_cache_read: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage prompt cache read tokens, successful requests"""
    return _total(u_cache_read, ok, n, "total_usage_prompt_cache_read_tokens")


@metric("Total usage prompt cache write tokens", "tokens", kind="scalar", section=_USAGE,
        aiperf="total_usage_prompt_cache_write_tokens")
def total_usage_prompt_cache_write_tokens(u_cache_write: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage prompt cache write tokens, successful requests"""
    return _total(u_cache_write, ok, n, "total_usage_prompt_cache_write_tokens")


@metric("Total usage prompt cache miss tokens", "tokens", kind="scalar", section=_USAGE,
        aiperf="total_usage_prompt_cache_miss_tokens")
def total_usage_prompt_cache_miss_tokens(u_cache_miss: np.ndarray, ok: np.ndarray, n: int) -> Estimate | None:
    """Σ usage prompt cache miss tokens, successful requests"""
    return _total(u_cache_miss, ok, n, "total_usage_prompt_cache_miss_tokens")


@metric("Overall cache-read share", "%", "higher", kind="scalar", section=_USAGE,
        aiperf="overall_usage_prompt_cache_read_pct")
def overall_usage_prompt_cache_read_pct(u_cache_read: np.ndarray, in_server: np.ndarray, ok: np.ndarray, n: int
                                        ) -> Estimate | None:
    """Σ cache-read tokens / Σ usage prompt tokens x 100 (token-weighted)"""
    read, prompt = u_cache_read[ok], in_server[ok]
    read, prompt = read[~np.isnan(read)], prompt[~np.isnan(prompt)]
    if not read.size or not prompt.sum():
        return None
    return Estimate(float(read.sum()) / float(prompt.sum()) * 100.0, n, "%",
                    method="Σ cache-read tokens / Σ usage prompt tokens x 100 (token-weighted)")


@metric("Total error ISL", "tokens", kind="scalar", section=_ERRORS, aiperf="total_error_isl")
def total_error_isl(error_isl: np.ndarray, failed: np.ndarray, n: int) -> Estimate | None:
    """Σ error_isl over failed requests"""
    return _total(error_isl, failed, n, "total_error_isl")
