"""The metric registry: every metric declared once, computing nothing (docs/architecture.md).

Like AIPerf's metric classes, each :class:`Metric` states its name, the aliases an SLO may use,
its unit (a name from :mod:`.units`, the one unit vocabulary), its direction (lower or higher is
better, or neutral for descriptive figures), its definition with the draft or paper section, and
how a run aggregates it. ``metrics.py`` computes the figures; ``slo.py`` (parsing, messages),
``results.py`` (key figures), ``report/`` (formatting, terminal columns) and the regression gate
read this table: :func:`lookup` resolves a name or alias, :func:`higher_is_better` gives the
direction a comparison needs.

A *figure* (:data:`FIGURES`) is a metric with a statistic, e.g. ``ttft_p99`` = TTFT at P99; the
terminal table's columns and the App. C.1 key results are figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from . import units

__all__ = ["DIRECTIONS", "EXTRA_METRICS", "FIGURES", "METRICS", "PROCEDURE_FIGURES", "TERMS", "TERMINAL_COLUMNS", "Figure",
           "Metric", "definitions", "higher_is_better", "lookup", "procedure_figures", "slo_metrics"]

Direction = Literal["lower", "higher", "neutral"]
Kind = Literal["distribution", "scalar", "column"]
DIRECTIONS = ("lower", "higher", "neutral")

#: Aggregations (how one run turns the metric into figures).
PERCENTILES = "percentiles of per-request values over successful requests (CI per §5.1.4.3)"
POOLED = "percentiles of per-gap samples pooled over successful requests"
WINDOW_RATE = "events in the steady-state window / window length, batch-means CI (§5.2.3.2)"
PROPORTION = "proportion with a Wilson CI"
COUNT = "count over the run"
TIME_AVERAGE = "time average over the steady-state window"
PER_RUN = "one value per run"
PER_REQUEST = "per-request column (records table), not summarised"
PROCEDURE = "one value per procedure result (its measurements), not per run"


@dataclass(frozen=True)
class Metric:
    """One metric: what it is, its unit and direction, where it is defined and how it aggregates."""

    name: str
    title: str
    unit: str
    direction: Direction
    kind: Kind
    definition: str
    section: str = ""
    aggregation: str = PERCENTILES
    aliases: tuple[str, ...] = ()
    slo: bool = False  # may be named in an SLO expression
    per_token: bool = False  # a time per token: an SLO also accepts "ms/tok"
    aiperf: str | None = None  # AIPerf's metric tag when AIPerf has this metric (export_aiperf.py)
    #: a procedure figure: the key of ``ProcedureResult.measurements`` holding it, the factor taking that
    #: value to the base unit (``ms`` -> s: 1e-3, ``pct`` -> fraction: 0.01) and the key of its sample count
    measurement: str | None = None
    scale: float = 1.0
    count: str | None = None

    def __post_init__(self) -> None:
        if self.unit not in units.UNITS:
            raise ValueError(f"metric {self.name}: unit {self.unit!r} is not in units.UNITS")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: direction must be one of {DIRECTIONS}")
        if self.slo and self.direction == "neutral":
            raise ValueError(f"metric {self.name}: an SLO metric needs a direction")

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher"

    @property
    def family(self) -> str:
        return units.UNITS[self.unit].family

    def to_json(self) -> dict[str, object]:
        """The registry entry as stored in results.json (``metrics``)."""
        return {"name": self.name, "title": self.title, "unit": self.unit, "direction": self.direction,
                "kind": self.kind, "definition": self.definition, "section": self.section,
                "aggregation": self.aggregation}


def _d(name: str, title: str, unit: str, direction: Direction, definition: str, section: str = "",
       aggregation: str = PERCENTILES, *, aliases: tuple[str, ...] = (), slo: bool = False,
       per_token: bool = False) -> Metric:
    return Metric(name, title, unit, direction, "distribution", definition, section, aggregation, aliases, slo,
                  per_token)


def _s(name: str, title: str, unit: str, direction: Direction, definition: str, section: str = "",
       aggregation: str = PER_RUN, *, aliases: tuple[str, ...] = (), slo: bool = False) -> Metric:
    return Metric(name, title, unit, direction, "scalar", definition, section, aggregation, aliases, slo)


def _p(name: str, title: str, unit: str, direction: Direction, definition: str, section: str, measurement: str,
       scale: float = 1.0, count: str | None = None) -> Metric:
    """A procedure figure (one per result, e.g. 5.5's maximum concurrency) an SLO may name."""
    return Metric(name, title, unit, direction, "scalar", definition, section, PROCEDURE, (), True,
                  measurement=measurement, scale=scale, count=count)


def _c(name: str, title: str, unit: str, definition: str) -> Metric:
    return Metric(name, title, unit, "neutral", "column", definition, aggregation=PER_REQUEST)


# ---- AIPerf, Etalon and smooth-goodput metrics (computed by metrics_extra.py) ----------------------
_A = "AIPerf metrics reference"
_HTTP = f"{_A}, HTTP Trace Metrics (k6/HAR phases); httptrace.py"


def _x(name: str, title: str, kind: Kind, unit: str, direction: Direction, definition: str, section: str,
       aliases: tuple[str, ...] = (), aiperf: str | None = None, *, slo: bool = False) -> Metric:
    """A metric of the reference documents; ``aiperf`` (AIPerf's tag) is also an alias when it differs."""
    names = tuple(a for a in ((aiperf,) if aiperf and aiperf != name else ()) + aliases if a != name)
    aggregation = {"distribution": PERCENTILES, "scalar": PER_RUN, "column": PER_REQUEST}[kind]
    return Metric(name, title, unit, direction, kind, definition, section, aggregation, names, slo, aiperf=aiperf)


def _http(phase: str, title: str, unit: str, direction: Direction, definition: str) -> Metric:
    tag = f"http_req_{phase}"
    return _x(f"http_{phase}", f"HTTP {title}", "column", unit, direction, definition, _HTTP, (), tag)


def _total(k: str) -> Metric:
    return _x(f"total_usage_{k}", f"Total usage {k.replace('_', ' ')}", "scalar", "tokens", "neutral",
              f"Σ usage {k.replace('_', ' ')}, successful requests", f"{_A}, Usage Field Metrics", (),
              f"total_usage_{k}")


#: The metrics of the reference documents (audit §4) that metrics_extra.py computes.
EXTRA_METRICS: tuple[Metric, ...] = (
    _x("aiperf_itl", "ITL (AIPerf)", "distribution", "s", "lower", "(E2E - TTFT incl. reasoning) / (OSL - 1); "
       "equals our tpot unless reasoning preceded the output", f"{_A}, Streaming Metrics, Inter Token Latency",
       (), "inter_token_latency", slo=True),
    _x("output_tps_per_user", "Output rate per user", "distribution", "tokens/s", "higher", "1 / aiperf_itl",
       f"{_A}, Streaming Metrics, Output Token Throughput Per User", (), "output_token_throughput_per_user",
       slo=True),
    _x("output_token_count", "Output tokens (excl. reasoning)", "column", "tokens", "neutral",
       "client-side output tokens excluding reasoning", f"{_A}, Token Based Metrics", (), "output_token_count"),
    _x("reasoning_token_count", "Reasoning tokens", "column", "tokens", "neutral",
       "client-side tokens of the streamed reasoning_content", f"{_A}, Reasoning Metrics", (),
       "reasoning_token_count"),
    _x("usage_total_tokens", "Usage total tokens", "column", "tokens", "neutral", "usage.total_tokens",
       f"{_A}, Usage Field Metrics", (), "usage_total_tokens"),
    _x("usage_reasoning_tokens", "Usage reasoning tokens", "column", "tokens", "neutral",
       "usage.completion_tokens_details.reasoning_tokens", f"{_A}, Usage Field Metrics", (),
       "usage_reasoning_tokens"),
    _x("usage_prompt_cache_read_tokens", "Usage cache-read tokens", "column", "tokens", "higher",
       "prompt_tokens_details.cached_tokens / cache_read_input_tokens (record.cached_tokens)",
       f"{_A}, Usage Field Metrics", (), "usage_prompt_cache_read_tokens"),
    _x("usage_prompt_cache_write_tokens", "Usage cache-write tokens", "column", "tokens", "neutral",
       "usage.cache_creation_input_tokens (Anthropic)", f"{_A}, Usage Field Metrics", (),
       "usage_prompt_cache_write_tokens"),
    _x("usage_prompt_cache_miss_tokens", "Usage cache-miss tokens", "column", "tokens", "lower",
       "usage.prompt_cache_miss_tokens (DeepSeek)", f"{_A}, Usage Field Metrics", (), "usage_prompt_cache_miss_tokens"),
    _x("reasoning_usage_diff_pct", "Reasoning usage difference", "column", "%", "lower",
       "(usage reasoning - client reasoning) / client reasoning x 100, signed (AIPerf: absolute)",
       f"{_A}, Usage Discrepancy Metrics", (), "usage_reasoning_tokens_diff_pct"),
    _x("error_isl", "Error input length", "column", "tokens", "neutral", "input tokens of a failed request",
       f"{_A}, Error Metrics", (), "error_isl"),
    _http("blocked", "blocked", "s", "lower", "connection-pool wait (queued start -> end)"),
    _http("dns_lookup", "DNS lookup", "s", "lower", "DNS resolution; 0 on cache hit, IP literal or reuse"),
    _http("connecting", "connecting", "s", "lower", "connection create - DNS inside it (TCP + TLS); 0 on reuse"),
    _http("sending", "sending", "s", "lower", "connection ready -> request body written"),
    _http("waiting", "waiting (TTFB)", "s", "lower", "request written -> first body read that completed an event (TTFB)"),
    _http("receiving", "receiving", "s", "lower", "first body read -> the read with [DONE] (end of body)"),
    _http("duration", "duration", "s", "lower", "connection ready -> last body byte (measured)"),
    _http("connection_overhead", "connection overhead", "s", "lower", "blocked + dns_lookup + connecting"),
    _http("total", "total", "s", "lower", "sum of the six phases blocked ... receiving"),
    _http("data_sent", "data sent", "bytes", "neutral", "request line + headers + body bytes"),
    _http("data_received", "data received", "bytes", "neutral", "status line + headers + decoded body bytes"),
    _http("connection_reused", "connection reused", "requests", "higher",
          "1 when a pooled connection was taken, else 0"),
    _http("chunks_sent", "chunks sent", "events", "neutral", "request body writes"),
    _http("chunks_received", "chunks received", "events", "neutral",
          "reads of the response body that completed a timed chunk (AIPerf: every read)"),
    _x("total_output_tokens", "Total output tokens", "scalar", "tokens", "neutral",
       "Σ output_token_count, successful requests", f"{_A}, Token Based Metrics", (), "total_output_tokens"),
    _x("total_osl", "Total OSL", "scalar", "tokens", "neutral", "Σ osl (server usage preferred), successful "
       "requests", f"{_A}, Token Based Metrics", (), "total_osl"),
    _x("total_isl", "Total ISL", "scalar", "tokens", "neutral", "Σ isl (server usage preferred), successful "
       "requests", f"{_A}, Token Based Metrics", (), "total_isl"),
    _x("total_reasoning_tokens", "Total reasoning tokens", "scalar", "tokens", "neutral",
       "Σ reasoning_token_count", f"{_A}, Reasoning Metrics", (), "total_reasoning_tokens"),
    *(_total(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens", "reasoning_tokens",
                          "prompt_cache_read_tokens", "prompt_cache_write_tokens", "prompt_cache_miss_tokens")),
    _x("overall_usage_prompt_cache_read_pct", "Overall cache-read share", "scalar", "%", "higher",
       "Σ cache-read tokens / Σ usage prompt tokens x 100 (token-weighted)", f"{_A}, Usage Field Metrics", (),
       "overall_usage_prompt_cache_read_pct"),
    _x("total_error_isl", "Total error ISL", "scalar", "tokens", "neutral", "Σ error_isl over failed requests",
       f"{_A}, Error Metrics", (), "total_error_isl"),
    _x("token_weighted_goodput", "Token-weighted goodput", "scalar", "tokens/s", "higher",
       "Σ 1(all deadlines d_i = A + i/V met)·OSL / T over the whole run; failed requests count 0 tokens",
       "smooth goodput paper eq. 5 (deadlines eq. 4)", ("goodput_eq5", "token_goodput"), slo=True),
    _x("fluid_token_rate", "Fluid token rate", "scalar", "tokens/s", "higher",
       "1 / smallest decode deadline D_d with >= 99% of requests (failed ones count as not fluid) at "
       "fluidity-index >= 0.9", "Etalon §4.2; experience.fluid_token_generation_rate",
       ("fluid_token_generation_rate",), slo=True),
)


#: Figures of a whole procedure (§5.5-§5.10) that an SLO may name like a run scalar, e.g.
#: ``assert_slo(result, "max_concurrency >= 8")``: read from the result's measurements (procedures/).
PROCEDURE_FIGURES: tuple[Metric, ...] = (
    _p("max_concurrency", "Maximum concurrency", "requests", "higher", "highest concurrency at which every "
       "§5.5.4 criterion held (completion, TTFT P99, no out-of-memory errors)", "§5.5.4", "max_concurrency"),
    _p("capacity_output_throughput", "Output throughput at maximum concurrency", "tokens/s", "higher",
       "output throughput of the §5.5 level at the maximum concurrency", "§5.5.4", "output_throughput_at_max_tps"),
    _p("jain_index", "Jain's fairness index", "ratio", "higher", "Jain's index over the requests' TTFT slowdowns "
       "in the mixed run: 1 = every request served alike", "§5.6.4", "jain_index", count="jain_index_n"),
    _p("short_class_ttft_p99", "Short-class TTFT P99", "s", "lower", "TTFT P99 of the short class in the mixed run",
       "§5.6.4", "short_ttft_p99_ms", 1e-3, count="short_count"),
    _p("short_class_starvation_rate", "Short-class starvation rate", "fraction", "lower", "share of the short "
       "class's requests whose TTFT exceeds 5x the class median in the mixed run", "§5.6.4", "short_starvation_rate",
       count="short_count"),
    _p("warm_cache_ttft_reduction_p50", "Warm-cache TTFT reduction at P50", "fraction", "higher",
       "(TTFT P50 with the cache disabled - TTFT P50 with a warm cache) / TTFT P50 with the cache disabled",
       "§5.7.4", "warm_ttft_reduction_p50_pct", 0.01),
    _p("oversubscription_fail_rate", "Failure rate under oversubscription", "fraction", "lower",
       "highest failure rate (failed / sent; a cancelled request is not a failure) of any §5.8 level", "§5.8.4",
       "max_fail_rate"),
    _p("oversubscription_capacity_errors", "Capacity errors under oversubscription", "requests", "lower",
       "requests that failed with an out-of-memory or capacity error, over every §5.8 level", "§5.8.4",
       "capacity_errors"),
    _p("guardrail_e2e_overhead_p50", "Total guardrail overhead at E2E P50", "s", "lower", "E2E P50 (Full "
       "Filter) - E2E P50 (Baseline) at the report level", "§5.10.4", "total_overhead_e2e_p50_ms", 1e-3),
    _p("guardrail_throughput_loss", "Throughput lost to full guardrails", "fraction", "lower",
       "(max throughput Baseline - max throughput Full Filter) / Baseline (Table 14's reduction, sign reversed)",
       "§5.10.4", "full_throughput_loss"),
)


_ALL: tuple[Metric, ...] = (
    # ---- per-request latencies (distributions) --------------------------------------------------
    _d("ttft", "TTFT", "s", "lower", "first content token (§5.1.3.1: first non-whitespace content; reasoning, "
       "role-only and empty chunks excluded) - submission (sent_ns)", "§5.1.3.1", slo=True,
       aliases=("time_to_first_token",)),
    _d("ttft_any_chunk", "TTFT (any chunk)", "s", "lower", "first SSE data chunk of any kind - submission",
       "§5.1.3.1 'time-to-any-token'", slo=True),
    _d("ttft_incl_reasoning", "TTFT (incl. reasoning)", "s", "lower", "first chunk with non-whitespace content "
       "or reasoning - submission (AIPerf's TTFT for reasoning models); only when reasoning was streamed",
       "AIPerf"),
    _d("ttfo", "TTFO", "s", "lower", "time to first output token: first content token - submission, defined "
       "only when reasoning content preceded the output", "AIPerf"),
    _d("ttst", "TTST", "s", "lower", "time to second token: first content chunk to the next content chunk "
       "(AIPerf definition); NaN with fewer than 2 content chunks", "AIPerf", slo=True),
    _d("e2e", "E2E", "s", "lower", "end (last byte / [DONE]) - submission", "§5.1.4.2", slo=True,
       aliases=("e2e_latency", "request_latency")),
    _d("tpot", "TPOT", "s", "lower", "(E2E - TTFT) / (output tokens - 1); NaN for single-token responses (no "
       "decode interval exists)", "§5.4.3", slo=True, per_token=True, aliases=("time_per_output_token",)),
    _d("itl", "ITL", "s", "lower", "consecutive token arrival gaps after the first content token (§5.4.3), "
       "pooled over requests; the submission-to-first-token interval is never a sample", "§5.4.3",
       POOLED, slo=True),
    _d("inter_chunk", "Time between chunks", "s", "lower", "gaps between consecutive content chunks after the "
       "first content token (§4.6.3 option A, 'time between chunks'); SLOs say tbc", "§4.6.3", POOLED,
       aliases=("tbc", "time_between_chunks"), slo=True),
    _d("itl_distributed", "ITL (option B)", "s", "lower", "option B samples: every token of an N-token chunk "
       "gets the chunk's time, so the chunk adds one gap and N-1 zeros (draft text, see requirements note 15)",
       "§4.6.3", POOLED),
    _d("itl_server", "ITL (option C)", "s", "lower", "option C samples: gaps between server_token_ns "
       "(CLOCK_MONOTONIC)", "§4.6.3", POOLED),
    _d("chunk_size", "Chunk size", "tokens", "neutral", "tokens per content chunk (§4.6.3 option A asks for it)",
       "§4.6.3", POOLED),
    _d("jitter", "Jitter", "s", "lower", "per-request sample standard deviation (ddof=1) of its ITL samples; "
       "NaN below 2 samples (§5.4.3 e)", "§5.4.3"),
    _d("max_pause", "Max pause", "s", "lower", "per-request largest ITL sample (§5.4.3 f)", "§5.4.3"),
    _d("isl", "Input length", "tokens", "neutral", "input tokens: server usage, else client count, else the "
       "spec's length (§4.4.2)", "§4.4.2"),
    _d("osl", "Output length", "tokens", "neutral", "output tokens: server usage, else client count, else the "
       "chunk token sum", "§4.4.2"),
    _d("output_tps_per_request", "Per-request output rate", "tokens/s", "higher",
       "OSL / E2E of one request (AIPerf 'E2E output token throughput')", "AIPerf", slo=True),
    _d("prefill_tps_per_request", "Per-request prefill rate", "tokens/s", "higher", "ISL / TTFT", "AIPerf"),
    _d("normalized_latency", "Normalized latency", "s/token", "lower", "E2E / OSL", "§5.6.4", slo=True,
       per_token=True),
    _d("send_lag", "Submit lag", "s", "lower", "sent (T_submit) - intended: the schedule lag plus connection set-up "
       "and the request write (open loop, §4.2.5, App. B.1.1); every sent request", "§4.2.5", slo=True,
       aliases=("submit_lag",)),
    _d("schedule_lag", "Schedule lag", "s", "lower", "hand-over to the transport (queued) - intended: the client's "
       "own pacing (open loop, §4.2.5); every sent request", "§4.2.5", slo=True),
    _d("schedule_latency", "Schedule latency", "s", "lower", "end - intended (open loop latency from the "
       "schedule, free of coordinated omission)", "§4.2.5", slo=True),
    _d("input_usage_diff_pct", "Input usage difference", "%", "neutral", "(server prompt tokens - client "
       "count) / client count x 100 (signed)", "§4.4.2"),
    _d("output_usage_diff_pct", "Output usage difference", "%", "neutral", "(server completion tokens - client "
       "count) / client count x 100 (signed)", "§4.4.2"),
    _d("osl_mismatch_pct", "OSL mismatch", "%", "neutral", "(OSL - max_tokens) / max_tokens x 100 (signed; "
       "negative = stopped early)", "AIPerf"),
    _d("queue_wait", "Queue wait", "s", "lower", "server_timing.queue_ns (§5.1.4.2)", "§5.1.4.2", slo=True),
    _d("prefill", "Prefill", "s", "lower", "server_timing.prefill_ns (§5.1.4.2)", "§5.1.4.2", slo=True),
    _d("fluidity", "Fluidity index", "fraction", "higher", "Etalon fluidity-index: share of token deadlines met "
       "per request (Etalon §4.2, D_p from the run's TTFT fit, D_d = 1/decode rate)", "Etalon §4.2", slo=True,
       aliases=("fluidity_index",)),
    _d("user_idle_latency", "User idle latency", "s", "lower", "l_r = max_i(t_i - (A + i/V)) clipped at 0: "
       "how long a reader at V s/token with a TTFT allowance A waits beyond the reading pace; failed "
       "requests included", "smooth goodput paper eq. 4, 6", aliases=("l_r", "idle_latency"), slo=True),
    # ---- per-request columns that are not summarised ---------------------------------------------
    _c("sent", "Sent", "s", "submission time after the first submission"),
    _c("end", "End", "s", "end time after the first submission"),
    _c("itl_mean", "Mean ITL", "s", "per-request mean of its ITL samples"),
    _c("itl_count", "ITL samples", "samples", "per-request number of ITL samples"),
    _c("max_tokens", "max_tokens", "tokens", "the request's max_tokens"),
    _c("preemptions", "Preemptions", "events", "server_timing.preemptions (§5.8.4)"),
    _c("preempted_tokens", "Preempted tokens", "tokens", "server_timing.preempted_tokens (§5.8.4)"),
    # ---- run-level figures (scalars) --------------------------------------------------------------
    _s("request_count", "Requests", "requests", "neutral", "measured requests", "§5.1.4.3", COUNT),
    _s("completed_count", "Completed", "requests", "neutral", "successful requests", "", COUNT),
    _s("error_count", "Errors", "requests", "lower", "failed requests", "", COUNT),
    _s("cancelled_count", "Cancelled", "requests", "neutral", "cancelled requests (excluded from rates)", "",
       COUNT),
    _s("refusals", "Refusals", "requests", "neutral", "requests refused by a content filter (§4.8.1)", "§4.8.1",
       COUNT),
    _s("success_rate", "Success rate", "fraction", "higher", "successful / (successful + failed); cancelled "
       "excluded", "", PROPORTION, slo=True),
    _s("error_rate", "Error rate", "fraction", "lower", "failed / (successful + failed)", "", PROPORTION,
       slo=True),
    _s("refusal_rate", "Refusal rate", "fraction", "neutral", "refused (content filter, §4.8.1) / (successful + "
       "failed)", "§4.8.1", PROPORTION),
    _s("benchmark_duration", "Benchmark duration", "s", "neutral", "first submission to last response",
       "§5.2.3"),
    _s("steady_state_duration", "Steady-state duration", "s", "neutral", "length of the steady-state window",
       "§5.2.3.2"),
    _s("request_throughput", "Request throughput", "requests/s", "higher", "successful requests completing "
       "inside the window / window length", "§5.2.4.1", WINDOW_RATE, slo=True),
    _s("output_throughput", "Output throughput", "tokens/s", "higher", "output tokens of successful requests "
       "arriving inside the window / window length; a chunk's tokens are scaled so a request's total equals "
       "its OSL", "§5.2.3", WINDOW_RATE, slo=True, aliases=("output_token_throughput",)),
    _s("input_throughput", "Input throughput", "tokens/s", "higher", "input tokens of successful requests, "
       "counted at their first token, inside the window / window length", "§5.2.4.1", WINDOW_RATE, slo=True),
    _s("total_token_throughput", "Total token throughput", "tokens/s", "higher", "input + output throughput",
       "§5.2.4.1", WINDOW_RATE, slo=True),
    _s("tokens_per_gpu_second", "Tokens per GPU-second", "tokens/s/GPU", "higher", "output throughput / GPU "
       "count (§5.2.4.2)", "§5.2.4.2", WINDOW_RATE),
    _s("good_count", "Good requests", "requests", "higher", "requests meeting every per-request SLO", "§5.2.2.3",
       COUNT),
    _s("goodput", "Goodput", "requests/s", "higher", "requests meeting every per-request SLO, completing inside "
       "the window, per second; failed requests are never good; an SLO whose metric is undefined (NaN) for a "
       "successful request does not apply to it", "§5.2.2.3", WINDOW_RATE, slo=True),
    _s("good_fraction", "Good fraction", "fraction", "higher", "good / (successful + failed) over the whole run",
       "§5.2.2.3", PROPORTION, slo=True),
    _s("tokens_in_flight", "Tokens in flight", "tokens", "higher", "time average over the window of Σ (input "
       "tokens + output tokens received so far) over requests in flight (§5.5.4); every request, failed ones "
       "included", "§5.5.4", TIME_AVERAGE, slo=True),
    _s("concurrency", "Concurrency", "requests", "neutral", "time average of requests in flight over the window",
       "§5.5.4", TIME_AVERAGE),
    _s("preemption_rate", "Preemption rate", "fraction", "lower", "requests with server_timing.preemptions > 0 / "
       "requests whose server reported preemptions (§5.8.4)", "§5.8.4", PROPORTION),
    _s("preemption_recovery_rate", "Preemption recovery rate", "fraction", "higher", "preempted requests that "
       "completed successfully / preempted", "§5.8.4", PROPORTION),
    _s("tokens_lost_per_preemption", "Tokens lost per preemption", "tokens/preemption", "lower",
       "Σ preempted_tokens / Σ preemptions", "§5.8.4"),
    _s("itl_tail_ratio", "ITL tail ratio", "ratio", "lower", "P99 / P50 of the ITL samples (§5.4.4.3); NaN when "
       "P50 is 0", "§5.4.4.3"),
    _s("single_token_chunk_fraction", "Single-token chunk fraction", "fraction", "neutral", "share of content "
       "chunks carrying exactly one token (App. B.2.1)", "App. B.2.1", PROPORTION),
    _s("osl_mismatch_count", "OSL mismatches", "requests", "lower", "requests with |OSL - max_tokens| > min(5% "
       "of max_tokens, 50 tokens) (AIPerf rule)", "AIPerf", COUNT),
    _s("usage_discrepancy_count", "Usage discrepancies", "requests", "lower", "requests whose |input or output "
       "usage diff| > 10% (AIPerf rule)", "AIPerf", COUNT),
    _s("smooth_goodput", "Smooth goodput", "tokens/s", "higher", "Σ (n_r - α·f(l_r)) / T: output tokens of "
       "judged requests discounted by the user idle latency, over the whole run", "smooth goodput paper eq. 7-8",
       slo=True),
    *EXTRA_METRICS,
    *PROCEDURE_FIGURES,
)

#: Metrics whose samples are ITL gaps: under §4.6.3 option A (App. B.2.1 chose chunk timing) they
#: are not measurable, and an SLO or gate rule on them fails (measure.chunking.ITL_NOT_MEASURABLE).
ITL_METRICS = frozenset({"itl", "itl_distributed", "jitter", "max_pause", "itl_tail_ratio"})

METRICS: dict[str, Metric] = {}
_BY_NAME: dict[str, Metric] = {}
for _m in _ALL:
    for _name in (_m.name, *_m.aliases):
        if _name in _BY_NAME:
            raise ValueError(f"metric name or alias {_name!r} declared twice")
        _BY_NAME[_name] = _m
    METRICS[_m.name] = _m

#: Whole-run variants of the window rates: ``<name>_full`` (same metric, window = whole run).
WHOLE_RUN_SUFFIX = "_full"

#: Definitions of terms that are not metrics.
TERMS: dict[str, str] = {
    "steady_state_window": "[start + f x test duration, start + test duration], f = steady_state_fraction "
    "(default 0.1: the first 10% of the duration is ramp-up, §5.2.3.2); metrics.steady_state_window",
}


def lookup(name: str) -> Metric:
    """The metric named ``name`` (or one of its aliases, or a ``<rate>_full`` whole-run variant)."""
    m = _BY_NAME.get(name)
    if m is None and name.endswith(WHOLE_RUN_SUFFIX):
        m = _BY_NAME.get(name[: -len(WHOLE_RUN_SUFFIX)])
    if m is None:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}")
    return m


def higher_is_better(name: str) -> bool:
    """True when a larger value of ``name`` is better (a regression is a fall), else False."""
    return lookup(name).higher_is_better


def slo_metrics() -> list[Metric]:
    """The metrics an SLO expression may name."""
    return [m for m in METRICS.values() if m.slo]


def procedure_figures() -> list[Metric]:
    """The figures a procedure result holds once (:data:`PROCEDURE_FIGURES`), not per run."""
    return [m for m in METRICS.values() if m.measurement is not None]


def definitions() -> dict[str, str]:
    """Metric name -> definition, plus the terms (what ``RunMetrics.definitions`` starts from)."""
    out = {m.name: m.definition for m in METRICS.values() if m.kind != "column" and m.measurement is None}
    out.update(TERMS)
    return out


@dataclass(frozen=True)
class Figure:
    """A figure shown by the reports: a metric, a statistic (``p50``..., None for a scalar) and a label."""

    name: str
    metric: str
    statistic: str | None
    label: str

    @property
    def percentile(self) -> float | None:
        return float(self.statistic[1:]) if self.statistic and self.statistic.startswith("p") else None


FIGURES: dict[str, Figure] = {f.name: f for f in (
    *(Figure(f"{m}_{p}", m, p, f"{lookup(m).title} {p.upper()}")
      for m in ("ttft", "tpot", "e2e", "itl") for p in ("p50", "p99")),
    *(Figure(m, m, None, lookup(m).title) for m in ("output_throughput", "request_throughput", "input_throughput",
                                                    "success_rate", "request_count", "benchmark_duration")),
)}

#: The terminal table's figure columns: (header, figure name).
TERMINAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("TTFT P50", "ttft_p50"), ("TTFT P99", "ttft_p99"), ("TPOT P99", "tpot_p99"),
    ("output tok/s", "output_throughput"),
)
