"""Metrics from AIPerf, Etalon and the smooth-goodput paper that :mod:`metrics` does not compute.

Pure functions over :class:`~pytest_llmbench.common.records.RequestRecord` lists (or over the
:class:`~pytest_llmbench.measure.metrics.RunMetrics` that :func:`metrics.summarize` made from them), each
citing its source; the metrics are declared in the registry (:data:`registry.EXTRA_METRICS`)
and :func:`metrics.summarize` merges them into every run. Sources (``/work/shared/reference/``):

* AIPerf metrics reference (June 2026), cited by section and tag;
* Etalon (Agrawal et al.) §4.2, fluid token generation rate;
* "Revisiting SLO and Goodput Metrics in LLM Serving" (smooth goodput), eq. 4-8.

Conventions follow :mod:`metrics`: per-request values are ``None`` where undefined; run totals
sum successful requests (AIPerf's "valid"), error totals sum failed requests (``cancelled`` ones,
stopped by the harness at a window's end, are neither). Times in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..common.records import RequestRecord
from . import registry
from .experience import FluidRate
from .http_phases import HTTP_PHASES, phases
from .registry import Metric

if TYPE_CHECKING:
    from ..common.tokenizer import Tokenizer

__all__ = [
    "AIPERF_EQUIVALENTS",
    "AIPERF_NOT_APPLICABLE",
    "EXTRA_METRICS",
    "PER_REQUEST",
    "RUN",
    "aiperf_inter_token_latency",
    "error_isl",
    "first_output_ns",
    "fluid_token_generation_rate",
    "output_token_count",
    "output_token_throughput_per_user",
    "overall_usage_prompt_cache_read_pct",
    "per_request_table",
    "reasoning_token_count",
    "run_values",
    "token_weighted_goodput",
    "token_weighted_goodput_of",
]


# --------------------------------------------------------------------------------------------
# per-request helpers
# --------------------------------------------------------------------------------------------


def first_output_ns(rec: RequestRecord) -> int | None:
    """First chunk with non-whitespace content *or* reasoning (AIPerf's TTFT point)."""
    first = rec.first_token_ns
    for t, txt in zip(rec.chunk_ns, rec.chunk_reasoning):
        if txt and txt.strip():
            return t if first is None else min(t, first)
    return first


def aiperf_inter_token_latency(rec: RequestRecord) -> float | None:
    """AIPerf ITL (Streaming Metrics, ``inter_token_latency``): (request latency − TTFT)/(OSL − 1).

    TTFT here includes reasoning (AIPerf's), unlike our §5.1.3.1 ``ttft``; request latency ends
    at the last byte/[DONE] (AIPerf: last content response). ``None`` below 2 tokens.
    """
    first = first_output_ns(rec)
    osl = rec.output_tokens
    if not rec.ok or first is None or rec.end_ns is None or osl is None or osl < 2:
        return None
    return (rec.end_ns - first) / 1e9 / (osl - 1)


def output_token_throughput_per_user(rec: RequestRecord) -> float | None:
    """AIPerf "Output Token Throughput Per User" (``output_token_throughput_per_user``) = 1/ITL,
    tokens/s, ITL as in :func:`aiperf_inter_token_latency`. ``None`` when ITL is undefined or 0."""
    itl = aiperf_inter_token_latency(rec)
    return 1.0 / itl if itl else None


def reasoning_token_count(rec: RequestRecord, tokenizer: Tokenizer | None = None) -> int | None:
    """AIPerf "Reasoning Token Count" (``reasoning_token_count``): client-side tokens of the
    streamed ``reasoning_content``. ``None`` when no reasoning was streamed; records written
    before ``reasoning_tokens_client`` existed need ``tokenizer``."""
    text = "".join(rec.chunk_reasoning)
    if not text:
        return None
    if rec.reasoning_tokens_client is not None:
        return rec.reasoning_tokens_client
    return len(tokenizer.encode(text)) if tokenizer is not None else None


def output_token_count(rec: RequestRecord, tokenizer: Tokenizer | None = None) -> int | None:
    """AIPerf "Output Token Count" (``output_token_count``): client-side output tokens *excluding*
    reasoning (our ``osl`` includes it and prefers the server's count, §4.4.2)."""
    if not "".join(rec.chunk_reasoning):
        if rec.output_tokens_client is not None:
            return rec.output_tokens_client
    elif rec.output_tokens_client is not None and rec.reasoning_tokens_client is not None:
        return rec.output_tokens_client - rec.reasoning_tokens_client
    return len(tokenizer.encode(rec.output_text)) if tokenizer is not None else None


def _usage_int(rec: RequestRecord, *path: str) -> int | None:
    v: Any = rec.usage
    for k in path:
        if not isinstance(v, dict):
            return None
        v = v.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def usage_total_tokens(rec: RequestRecord) -> int | None:
    """AIPerf ``usage_total_tokens``: ``usage.total_tokens``."""
    return _usage_int(rec, "total_tokens")


def usage_reasoning_tokens(rec: RequestRecord) -> int | None:
    """AIPerf ``usage_reasoning_tokens``: ``usage.completion_tokens_details.reasoning_tokens``."""
    return _usage_int(rec, "completion_tokens_details", "reasoning_tokens")


def usage_prompt_cache_read_tokens(rec: RequestRecord) -> int | None:
    """AIPerf ``usage_prompt_cache_read_tokens``: OpenAI ``prompt_tokens_details.cached_tokens``
    (or ``input_tokens_details``), Anthropic ``cache_read_input_tokens``; else ``record.cached_tokens``."""
    for path in (("prompt_tokens_details", "cached_tokens"), ("input_tokens_details", "cached_tokens"),
                 ("cache_read_input_tokens",)):
        v = _usage_int(rec, *path)
        if v is not None:
            return v
    return rec.cached_tokens


def usage_prompt_cache_write_tokens(rec: RequestRecord) -> int | None:
    """AIPerf ``usage_prompt_cache_write_tokens``: ``usage.cache_creation_input_tokens`` (Anthropic)."""
    return _usage_int(rec, "cache_creation_input_tokens")


def usage_prompt_cache_miss_tokens(rec: RequestRecord) -> int | None:
    """AIPerf ``usage_prompt_cache_miss_tokens``: ``usage.prompt_cache_miss_tokens`` (DeepSeek)."""
    return _usage_int(rec, "prompt_cache_miss_tokens")


def usage_reasoning_diff_pct(rec: RequestRecord, tokenizer: Tokenizer | None = None) -> float | None:
    """AIPerf "Usage Reasoning Diff %" (``usage_reasoning_tokens_diff_pct``), *signed* like our
    ``input_usage_diff_pct``: (server reasoning − client reasoning)/client reasoning × 100.
    AIPerf reports the absolute value (the AIPerf export takes ``abs``)."""
    server, client = usage_reasoning_tokens(rec), reasoning_token_count(rec, tokenizer)
    if server is None or not client:
        return None
    return (server - client) / client * 100.0


def error_isl(rec: RequestRecord) -> int | None:
    """AIPerf "Error Input Sequence Length" (``error_isl``): input tokens of a failed request."""
    return rec.input_tokens if rec.failed else None


#: Per-request metrics: name -> function(record, tokenizer) (HTTP-trace phases added below).
PER_REQUEST: dict[str, Callable[[RequestRecord, Any], float | int | None]] = {
    "aiperf_itl": lambda r, t: aiperf_inter_token_latency(r),
    "output_tps_per_user": lambda r, t: output_token_throughput_per_user(r),
    "output_token_count": output_token_count,
    "reasoning_token_count": reasoning_token_count,
    "usage_total_tokens": lambda r, t: usage_total_tokens(r),
    "usage_reasoning_tokens": lambda r, t: usage_reasoning_tokens(r),
    "usage_prompt_cache_read_tokens": lambda r, t: usage_prompt_cache_read_tokens(r),
    "usage_prompt_cache_write_tokens": lambda r, t: usage_prompt_cache_write_tokens(r),
    "usage_prompt_cache_miss_tokens": lambda r, t: usage_prompt_cache_miss_tokens(r),
    "reasoning_usage_diff_pct": usage_reasoning_diff_pct,
    "error_isl": lambda r, t: error_isl(r),
}


def per_request_table(records: Sequence[RequestRecord], tokenizer: Tokenizer | None = None
                      ) -> dict[str, np.ndarray]:
    """Every per-request metric of this module, one float array per name (NaN where undefined),
    in the order of ``records``; HTTP-trace phases as ``http_<phase>``."""
    out: dict[str, np.ndarray] = {}
    for name, fn in PER_REQUEST.items():
        out[name] = np.array([_nan(fn(r, tokenizer)) for r in records], dtype=np.float64)
    traces = [phases(r.http_trace) for r in records]
    for ph in HTTP_PHASES:
        out[f"http_{ph}"] = np.array([_nan(p[ph]) for p in traces], dtype=np.float64)
    return out


def _nan(v: float | int | None) -> float:
    return np.nan if v is None else float(v)


# --------------------------------------------------------------------------------------------
# run metrics
# --------------------------------------------------------------------------------------------


def _sum(values: Iterable[int | None]) -> int | None:
    """Sum of the defined values; ``None`` when no value is defined (AIPerf: no metric)."""
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def overall_usage_prompt_cache_read_pct(records: Sequence[RequestRecord]) -> float | None:
    """AIPerf "Overall Usage Prompt Cache Read %" (``overall_usage_prompt_cache_read_pct``):
    Σ cache-read tokens / Σ usage prompt tokens × 100 over successful requests (token-weighted)."""
    ok = [r for r in records if r.ok]
    read = _sum(usage_prompt_cache_read_tokens(r) for r in ok)
    prompt = _sum(r.input_tokens_server for r in ok)
    if read is None or not prompt:
        return None
    return read / prompt * 100.0


def run_values(records: Sequence[RequestRecord], tokenizer: Tokenizer | None = None
               ) -> dict[str, float | int | None]:
    """Every run total of this module (AIPerf Token Based / Reasoning / Usage / Error Metrics)."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if r.failed]
    return {
        "total_output_tokens": _sum(output_token_count(r, tokenizer) for r in ok),
        "total_osl": _sum(r.output_tokens for r in ok),
        "total_isl": _sum(r.input_tokens for r in ok),
        "total_reasoning_tokens": _sum(reasoning_token_count(r, tokenizer) for r in ok),
        "total_usage_prompt_tokens": _sum(r.input_tokens_server for r in ok),
        "total_usage_completion_tokens": _sum(r.output_tokens_server for r in ok),
        "total_usage_total_tokens": _sum(usage_total_tokens(r) for r in ok),
        "total_usage_reasoning_tokens": _sum(usage_reasoning_tokens(r) for r in ok),
        "total_usage_prompt_cache_read_tokens": _sum(usage_prompt_cache_read_tokens(r) for r in ok),
        "total_usage_prompt_cache_write_tokens": _sum(usage_prompt_cache_write_tokens(r) for r in ok),
        "total_usage_prompt_cache_miss_tokens": _sum(usage_prompt_cache_miss_tokens(r) for r in ok),
        "overall_usage_prompt_cache_read_pct": overall_usage_prompt_cache_read_pct(records),
        "total_error_isl": _sum(error_isl(r) for r in failed),
    }


def token_weighted_goodput_of(n_tokens: np.ndarray, met: np.ndarray, duration: float) -> float:
    """Smooth-goodput paper eq. 5: ``Σ_r 1(∀i t_i <= d_i)·n_r / T`` tokens/s."""
    n = np.asarray(n_tokens, dtype=np.float64)
    m = np.asarray(met, dtype=bool)
    if n.shape != m.shape:
        raise ValueError(f"n_tokens {n.shape} and met {m.shape} must have the same shape")
    if not duration > 0:
        raise ValueError(f"duration must be > 0 s, got {duration}")
    return float(np.sum(np.where(m, n, 0.0)) / duration)


class SummarisedRun(Protocol):
    """What the two run-level functions below read of a :class:`~.metrics.RunMetrics` (typed here so
    this module, which ``metrics`` imports, does not import ``metrics`` back)."""

    per_request: Any

    def scalar(self, name: str) -> Any: ...

    def fluid_token_generation_rate(self, *, min_fluidity: float, request_fraction: float) -> FluidRate: ...


def token_weighted_goodput(run: SummarisedRun, good: np.ndarray | None = None) -> float:
    """Token-weighted goodput (smooth-goodput paper eq. 5) of a summarised run, tokens/s.

    A request counts its OSL when every token met its deadline ``d_i = A + i/V`` (eq. 4; the
    run's reading speed and TTFT allowance), i.e. its user idle latency is 0; failed requests
    count 0 tokens. ``good`` (one bool per row, e.g. from per-request SLOs, the eq. 2 TTFT/TBT
    customisation) replaces the deadline test. T = first submission to last response.
    """
    pr = run.per_request
    ok = pr["ok"]
    met = (pr["user_idle_latency"] == 0.0) if good is None else np.asarray(good, dtype=bool)
    n = np.where(ok, np.nan_to_num(pr["osl"]), 0.0)
    return token_weighted_goodput_of(n, met & ok, run.scalar("benchmark_duration").value)


def fluid_token_generation_rate(run: SummarisedRun, *, min_fluidity: float = 0.9,
                                request_fraction: float = 0.99) -> FluidRate:
    """Etalon §4.2 fluid token generation rate of a summarised run (``experience.
    fluid_token_generation_rate`` on the run's option-B token times and fitted ``D_p``)."""
    return run.fluid_token_generation_rate(min_fluidity=min_fluidity, request_fraction=request_fraction)


# --------------------------------------------------------------------------------------------
# declarations: in the metric registry (registry.EXTRA_METRICS), the one home of every metric
# --------------------------------------------------------------------------------------------

#: The registry's declarations of this module's metrics (name, unit, direction, source, AIPerf tag).
EXTRA_METRICS: tuple[Metric, ...] = registry.EXTRA_METRICS

#: The run-level (scalar) names of this module.
RUN: tuple[str, ...] = tuple(m.name for m in EXTRA_METRICS if m.kind == "scalar")

#: AIPerf tags that today's metrics already cover: tag -> (our name, definition difference).
#: ``our name`` is a distribution, scalar or per-request column of ``metrics.summarize``.
AIPERF_EQUIVALENTS: dict[str, tuple[str, str]] = {
    "time_to_first_token": ("ttft_incl_reasoning", "AIPerf counts the first reasoning or content "
                            "chunk; our `ttft` (§5.1.3.1) is the first non-whitespace content; they "
                            "differ only when reasoning is streamed (then `ttft_incl_reasoning`)"),
    "time_to_second_token": ("ttst", "same definition"),
    "time_to_first_output_token": ("ttfo", "defined only when reasoning preceded the output"),
    "inter_chunk_latency": ("inter_chunk", "ours starts at the first content token; pooled"),
    "prefill_throughput_per_user": ("prefill_tps_per_request", "ISL/TTFT with our §5.1.3.1 TTFT"),
    "output_sequence_length": ("osl", "server usage preferred over the client count (§4.4.2)"),
    "input_sequence_length": ("isl", "server usage preferred; AIPerf tokenizes the prompt client-side"),
    "e2e_output_token_throughput": ("output_tps_per_request", "OSL / E2E"),
    "output_token_throughput": ("output_throughput_full", "whole run; our default "
                                "`output_throughput` uses the §5.2.3.2 steady-state window"),
    "total_token_throughput": ("total_token_throughput_full", "whole run (default: steady window)"),
    "usage_prompt_tokens": ("input_tokens_server", "record field (usage.prompt_tokens)"),
    "usage_completion_tokens": ("output_tokens_server", "record field (usage.completion_tokens)"),
    "usage_prompt_tokens_diff_pct": ("input_usage_diff_pct", "ours signed, AIPerf absolute"),
    "usage_completion_tokens_diff_pct": ("output_usage_diff_pct", "ours signed, AIPerf absolute"),
    "usage_discrepancy_count": ("usage_discrepancy_count", "input/output diffs > 10%; reasoning diff not included"),
    "osl_mismatch_diff_pct": ("osl_mismatch_pct", "same (signed)"),
    "osl_mismatch_count": ("osl_mismatch_count", "same min(5%, 50 tokens) rule"),
    "good_request_count": ("good_count", "needs per-request SLOs"),
    "good_request_fraction": ("good_fraction", "failed requests in the denominator, as AIPerf"),
    "goodput": ("goodput", "steady-state window (AIPerf: whole run)"),
    "request_latency": ("e2e", "ends at the last byte/[DONE]; AIPerf at the last content response"),
    "request_throughput": ("request_throughput_full", "whole run (default: steady window)"),
    "request_count": ("completed_count", "AIPerf's request_count is successful requests; our "
                      "`request_count` counts every record"),
    "error_request_count": ("error_count", "cancelled requests excluded"),
    "min_request_timestamp": ("sent", "per-request submission times; wall clock via run.json's anchor"),
    "max_response_timestamp": ("end", "per-request end times; wall clock via run.json's anchor"),
    "benchmark_duration": ("benchmark_duration", "same: first submission to last response"),
}

_TEXT = "text-only client: no image, video or audio is sent or received"
_GPU = ("GPU telemetry (DCGM/pynvml) is not visible to a client; absent unless the server "
        "exports power/energy counters")
_AUDIO = "audio usage field: the client sends and receives text only"
_VENDOR = ("the procedures send no tool declarations (Gemini tool-use count) and no predicted outputs "
           "(OpenAI `prediction`), so no server fills this usage field")

#: AIPerf tags deliberately absent, with the reason.
AIPERF_NOT_APPLICABLE: dict[str, str] = {
    **{t: _TEXT for t in ("num_images", "image_throughput", "image_latency", "video_inference_time",
                          "video_peak_memory", "audio_duration", "rtfx")},
    **{t: _AUDIO for t in ("usage_prompt_audio_tokens", "usage_completion_audio_tokens",
                           "usage_prompt_audio_seconds", "total_usage_prompt_audio_tokens",
                           "total_usage_completion_audio_tokens", "total_usage_prompt_audio_seconds")},
    **{t: _VENDOR for t in ("usage_tool_use_prompt_tokens", "usage_accepted_prediction_tokens",
                            "usage_rejected_prediction_tokens", "total_usage_tool_use_prompt_tokens",
                            "total_usage_accepted_prediction_tokens",
                            "total_usage_rejected_prediction_tokens")},
    **{t: _GPU for t in ("total_gpu_power", "total_gpu_energy", "output_tokens_per_joule", "energy_per_user")},
}
