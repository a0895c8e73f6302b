"""A run's records in AIPerf's export formats, so dashboards built on AIPerf output read our runs.

Three files, shaped like AIPerf's (AIPerf metrics reference; its "Working with Profile Export
Files" guide):

* ``profile_export.jsonl``: one line per request, ``{"metadata": {...}, "metrics": {tag:
  {"value": v, "unit": u}}, "error": null | {"code", "type", "message"}}``; failed requests carry
  only ``error_isl``;
* ``profile_export_aiperf.json``: one object, a key per metric tag with ``{"unit", "avg", "min",
  "max", "sum", "p1" … "p99", "std"}`` for per-request metrics and ``{"unit", "avg"}`` for run
  metrics, plus ``start_time``/``end_time``, ``was_cancelled`` and ``error_summary``;
* ``profile_export_aiperf.csv``: AIPerf's two-section CSV (per-request stats, blank line, run
  values), rows named "Header (unit)".

Units are AIPerf's: times in ms, rates in tokens/sec or requests/sec, sizes in tokens or bytes.
Values follow AIPerf's definitions where ours differ (TTFT including reasoning, per-request ITL,
whole-run throughput and goodput, absolute usage diffs); see docs/metrics.md. Statistics are
plain sample statistics (numpy linear percentiles, population std) over successful requests,
as AIPerf computes them; our reports' confidence intervals are not part of this format.

``--llm-export aiperf`` writes the three files next to each measured run's records (the procedure's
``measure`` calls :func:`write_aiperf_export`). The exporter does not summarise: it takes the
run's summary (``RunMetrics``, from :func:`pytest_llmbench.measure.summary.summarize` of the same
records), so each run is summarised once, by the procedure.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from ..common.records import ClockAnchor, RequestRecord
from .frame import chunk_gaps_ns
from .http_phases import phases
from .summary import RunMetrics

__all__ = ["AIPERF_EQUIVALENTS", "AIPERF_NOT_APPLICABLE", "STAT_KEYS", "aiperf_csv", "aiperf_record_lines", "aiperf_summary", "write_aiperf_export"]

#: AIPerf's statistic keys, in its order.
STAT_KEYS: tuple[str, ...] = ("avg", "min", "max", "sum", "p1", "p5", "p10", "p25", "p50", "p75", "p90",
                              "p95", "p99", "std")
SCHEMA_VERSION = "1.1"

_MS = "ms"
#: tag -> (header, unit) for everything this exporter writes.
HEADERS: dict[str, tuple[str, str]] = {
    "time_to_first_token": ("Time to First Token", _MS),
    "time_to_second_token": ("Time to Second Token", _MS),
    "time_to_first_output_token": ("Time to First Output Token", _MS),
    "inter_token_latency": ("Inter Token Latency", _MS),
    "inter_chunk_latency": ("Inter Chunk Latency", _MS),
    "output_token_throughput_per_user": ("Output Token Throughput Per User", "tokens/sec/user"),
    "prefill_throughput_per_user": ("Prefill Throughput Per User", "tokens/sec/user"),
    "output_token_count": ("Output Token Count", "tokens"),
    "reasoning_token_count": ("Reasoning Token Count", "tokens"),
    "output_sequence_length": ("Output Sequence Length", "tokens"),
    "input_sequence_length": ("Input Sequence Length", "tokens"),
    "e2e_output_token_throughput": ("E2E Output Token Throughput", "tokens/sec/user"),
    "request_latency": ("Request Latency", _MS),
    "usage_prompt_tokens": ("Usage Prompt Tokens", "tokens"),
    "usage_completion_tokens": ("Usage Completion Tokens", "tokens"),
    "usage_total_tokens": ("Usage Total Tokens", "tokens"),
    "usage_reasoning_tokens": ("Usage Reasoning Tokens", "tokens"),
    "usage_prompt_cache_read_tokens": ("Usage Prompt Cache Read Tokens", "tokens"),
    "usage_prompt_cache_write_tokens": ("Usage Prompt Cache Write Tokens", "tokens"),
    "usage_prompt_cache_miss_tokens": ("Usage Prompt Cache Miss Tokens", "tokens"),
    "usage_prompt_tokens_diff_pct": ("Usage Prompt Diff", "%"),
    "usage_completion_tokens_diff_pct": ("Usage Completion Diff", "%"),
    "usage_reasoning_tokens_diff_pct": ("Usage Reasoning Diff", "%"),
    "osl_mismatch_diff_pct": ("OSL Mismatch Diff", "%"),
    "error_isl": ("Error Input Sequence Length", "tokens"),
    **{f"http_req_{p}": (f"HTTP {p.replace('_', ' ').title()}", _MS)
       for p in ("blocked", "dns_lookup", "connecting", "sending", "waiting", "receiving", "duration",
                 "connection_overhead", "total")},
    "http_req_data_sent": ("HTTP Data Sent", "bytes"),
    "http_req_data_received": ("HTTP Data Received", "bytes"),
    "http_req_connection_reused": ("HTTP Connection Reused", "count"),
    "http_req_chunks_sent": ("HTTP Chunks Sent", "count"),
    "http_req_chunks_received": ("HTTP Chunks Received", "count"),
    # run metrics
    "request_throughput": ("Request Throughput", "requests/sec"),
    "output_token_throughput": ("Output Token Throughput", "tokens/sec"),
    "total_token_throughput": ("Total Token Throughput", "tokens/sec"),
    "benchmark_duration": ("Benchmark Duration", "sec"),
    "request_count": ("Request Count", "requests"),
    "error_request_count": ("Error Request Count", "requests"),
    "good_request_count": ("Good Request Count", "requests"),
    "good_request_fraction": ("Good Request Fraction", "ratio"),
    "goodput": ("Goodput", "requests/sec"),
    "usage_discrepancy_count": ("Usage Discrepancy Count", "requests"),
    "osl_mismatch_count": ("OSL Mismatch Count", "requests"),
    "min_request_timestamp": ("Minimum Request Timestamp", "ns"),
    "max_response_timestamp": ("Maximum Response Timestamp", "ns"),
    "overall_usage_prompt_cache_read_pct": ("Overall Usage Prompt Cache Read %", "%"),
    "total_error_isl": ("Total Error Input Sequence Length", "tokens"),
    **{t: (t.replace("_", " ").title().replace("Osl", "OSL").replace("Isl", "ISL"), "tokens")
       for t in ("total_output_tokens", "total_osl", "total_isl", "total_reasoning_tokens",
                 "total_usage_prompt_tokens", "total_usage_completion_tokens", "total_usage_total_tokens",
                 "total_usage_reasoning_tokens", "total_usage_prompt_cache_read_tokens",
                 "total_usage_prompt_cache_write_tokens", "total_usage_prompt_cache_miss_tokens")},
}


#: AIPerf's run totals, as the metrics of the same names compute them (measure/metrics/aiperf.py).
_TOTALS = ("total_output_tokens", "total_osl", "total_isl", "total_reasoning_tokens", "total_usage_prompt_tokens",
           "total_usage_completion_tokens", "total_usage_total_tokens", "total_usage_reasoning_tokens",
           "total_usage_prompt_cache_read_tokens", "total_usage_prompt_cache_write_tokens",
           "total_usage_prompt_cache_miss_tokens", "overall_usage_prompt_cache_read_pct", "total_error_isl")


def _total(scalars: Any, tag: str) -> float | int | None:
    """A run total of the summary (an int where AIPerf counts tokens), None when the run has none."""
    e = scalars.get(tag)
    if e is None:
        return None
    return e.value if tag == "overall_usage_prompt_cache_read_pct" else int(e.value)


def _count(value: float, r: RequestRecord, tokenizer: Any, part: str) -> float | None:
    """A client-side token count of the summary; records written before the client counted (format 1.x)
    are counted here with ``tokenizer`` when one is given."""
    if math.isfinite(value) or tokenizer is None:
        return value
    if part == "reasoning":
        reasoning = "".join(r.chunk_reasoning)
        return len(tokenizer.encode(reasoning)) if reasoning else None
    return len(tokenizer.encode(r.output_text))


#: AIPerf tags that today's metrics already cover: tag -> (our name, definition difference).
#: ``our name`` is a distribution, scalar or per-request column of ``summary.summarize``, or a record field.
AIPERF_EQUIVALENTS: dict[str, tuple[str, str]] = {
    "time_to_first_token": ("ttfa", "AIPerf counts the first reasoning or content chunk, our `ttfa` "
                            "the first fragment of any kind (a tool call's too); our `ttft` (§5.1.3.1) is the "
                            "first non-whitespace content; they differ only when reasoning or a tool call "
                            "came first"),
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


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


def _prepare(records: Iterable[RequestRecord], metrics: RunMetrics, phase: str | None) -> list[RequestRecord]:
    """The exported records in the summary's row order; refuses a summary of other records."""
    recs = [r for r in records if phase is None or r.phase == phase]
    if not recs:
        raise ValueError(f"no records to export (phase filter: {phase!r})")
    recs.sort(key=lambda r: (r.sent_ns, r.index))  # summarize's row order
    rows = metrics.per_request
    if len(rows) != len(recs) or not np.array_equal(rows["index"], [r.index for r in recs]):
        raise ValueError(f"the summary given ({len(rows)} rows) is not of these {len(recs)} records (phase filter: "
                         f"{phase!r}): pass summarize() of the same records")
    return recs


def _record_metrics(r: RequestRecord, row: int, run: RunMetrics, tokenizer: Any) -> dict[str, tuple[Any, str]]:
    """tag -> (value, unit) for one successful record; undefined metrics are left out."""
    pr = run.per_request
    col = lambda name: float(pr[name][row])  # noqa: E731
    v: dict[str, Any] = {
        "time_to_first_token": col("ttfa") * 1e3,  # AIPerf's TTFT: reasoning included (the phases, issue 49)
        "time_to_second_token": col("ttst") * 1e3,
        "time_to_first_output_token": col("ttfo") * 1e3,
        "inter_token_latency": col("aiperf_itl") * 1e3,
        "output_token_throughput_per_user": col("output_tps_per_user"),
        "prefill_throughput_per_user": col("prefill_tps_per_request"),
        "output_token_count": _count(col("output_token_count"), r, tokenizer, "output"),
        "reasoning_token_count": _count(col("reasoning_token_count"), r, tokenizer, "reasoning"),
        "output_sequence_length": col("osl"),
        "input_sequence_length": col("isl"),
        "e2e_output_token_throughput": col("output_tps_per_request"),
        "request_latency": col("e2e") * 1e3,
        "usage_prompt_tokens": r.input_tokens_server,
        "usage_completion_tokens": r.output_tokens_server,
        **{tag: col(tag) for tag in ("usage_total_tokens", "usage_reasoning_tokens", "usage_prompt_cache_read_tokens",
                                     "usage_prompt_cache_write_tokens", "usage_prompt_cache_miss_tokens")},
        "usage_prompt_tokens_diff_pct": abs(col("input_usage_diff_pct")),
        "usage_completion_tokens_diff_pct": abs(col("output_usage_diff_pct")),
        "usage_reasoning_tokens_diff_pct": abs(col("reasoning_usage_diff_pct")),
        "osl_mismatch_diff_pct": col("osl_mismatch_pct"),
    }
    gaps = chunk_gaps_ns(r) * 1e-9  # the record's option-A samples (the summary pools them sorted)
    if gaps.size:
        v["inter_chunk_latency"] = [float(g) * 1e3 for g in gaps]
    for ph, val in phases(r.http_trace).items():
        if _finite(val):
            v[f"http_req_{ph}"] = val * 1e3 if HEADERS[f"http_req_{ph}"][1] == _MS else val
    out: dict[str, tuple[Any, str]] = {}
    for tag, val in v.items():
        if isinstance(val, list) or _finite(val):
            if isinstance(val, float) and val.is_integer() and HEADERS[tag][1] in ("tokens", "count", "bytes"):
                val = int(val)
            out[tag] = (val, HEADERS[tag][1])
    return out


def _wall(anchor: ClockAnchor | None, perf_ns: int | None) -> int | None:
    if perf_ns is None:
        return None
    return anchor.unix_ns_at(perf_ns) if anchor is not None else perf_ns


def aiperf_record_lines(records: Iterable[RequestRecord], metrics: RunMetrics, *, anchor: ClockAnchor | None = None,
                        tokenizer: Any = None, phase: str | None = "measure") -> list[dict[str, Any]]:
    """One AIPerf ``profile_export.jsonl`` object per record (submission order).

    ``metrics`` is the summary of these records (the ``phase`` ones). ``anchor`` (the run's
    :class:`ClockAnchor`) turns timestamps into wall-clock ns as AIPerf writes them; without it
    they stay ``perf_counter_ns`` readings.
    """
    recs = _prepare(records, metrics, phase)
    return [_line(r, i, metrics, anchor, tokenizer) for i, r in enumerate(recs)]


def _line(r: RequestRecord, row: int, run: RunMetrics, anchor: ClockAnchor | None, tokenizer: Any
          ) -> dict[str, Any]:
    cancelled = r.error_type is not None and not r.failed
    meta = {
        "session_num": row, "x_request_id": None, "x_correlation_id": None, "conversation_id": None,
        "turn_index": 0, "request_start_ns": _wall(anchor, r.sent_ns),
        "request_ack_ns": _wall(anchor, r.first_chunk_ns), "request_end_ns": _wall(anchor, r.end_ns),
        "worker_id": "pytest-llmbench", "record_processor_id": None,
        "benchmark_phase": "profiling" if r.phase == "measure" else r.phase, "was_cancelled": cancelled,
        "cancellation_time_ns": _wall(anchor, r.end_ns) if cancelled else None,
        "llmbench_index": r.index, "llmbench_workload": r.workload,
    }
    if r.ok:
        metrics = {t: {"value": v, "unit": u} for t, (v, u) in _record_metrics(r, row, run, tokenizer).items()}
        return {"metadata": meta, "metrics": metrics, "error": None}
    metrics = {"error_isl": {"value": r.input_tokens, "unit": "tokens"}} if r.failed else {}
    error = {"code": r.status, "type": str(r.error_type), "message": r.error_message}
    return {"metadata": meta, "metrics": metrics, "error": error}


def _version() -> str:
    try:
        return version("pytest-llmbench")
    except PackageNotFoundError:  # pragma: no cover - source tree without install
        return "0.0.0+unknown"


def _stats(values: list[float], unit: str) -> dict[str, Any]:
    a = np.asarray(values, dtype=np.float64)
    d: dict[str, Any] = {"unit": unit, "avg": float(a.mean()), "min": float(a.min()), "max": float(a.max()),
                         "sum": float(a.sum())}
    for p in (1, 5, 10, 25, 50, 75, 90, 95, 99):
        d[f"p{p}"] = float(np.percentile(a, p))
    d["std"] = float(a.std())
    return d


def aiperf_summary(records: Iterable[RequestRecord], metrics: RunMetrics, *, anchor: ClockAnchor | None = None,
                   tokenizer: Any = None, phase: str | None = "measure") -> dict[str, Any]:
    """AIPerf's ``profile_export_aiperf.json`` object for one run's records (``metrics``: their summary)."""
    recs = _prepare(records, metrics, phase)
    return _summary(recs, metrics, [_line(r, i, metrics, anchor, tokenizer) for i, r in enumerate(recs)], anchor,
                    tokenizer)


def _summary(recs: Sequence[RequestRecord], metrics: RunMetrics, lines: Sequence[dict[str, Any]],
             anchor: ClockAnchor | None, tokenizer: Any) -> dict[str, Any]:
    """The summary object from the records' export lines and the run's scalars."""
    pooled: dict[str, list[float]] = {}
    for line in lines:
        for tag, mv in line["metrics"].items():
            v = mv["value"]
            pooled.setdefault(tag, []).extend(v if isinstance(v, list) else [v])
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "exporter": f"pytest-llmbench {_version()}"}
    for tag in HEADERS:
        if tag in pooled and pooled[tag]:
            out[tag] = _stats(pooled[tag], HEADERS[tag][1])
    sc = metrics.scalars
    duration = sc["benchmark_duration"].value
    good = sc["good_count"].value if "good_count" in sc else None
    derived: dict[str, Any] = {
        "request_throughput": sc["request_throughput_full"].value,
        "output_token_throughput": sc["output_throughput_full"].value,
        "total_token_throughput": sc["total_token_throughput_full"].value,
        "benchmark_duration": duration,
        "request_count": int(sc["completed_count"].value),
        "error_request_count": int(sc["error_count"].value),
        "good_request_count": None if good is None else int(good),
        "good_request_fraction": sc["good_fraction"].value if "good_fraction" in sc else None,
        "goodput": None if good is None or not duration > 0 else good / duration,  # AIPerf: whole run
        "usage_discrepancy_count": int(sc["usage_discrepancy_count"].value),
        "osl_mismatch_count": int(sc["osl_mismatch_count"].value),
        "min_request_timestamp": _wall(anchor, min(r.sent_ns for r in recs)),
        "max_response_timestamp": _wall(anchor, max((r.end_ns for r in recs if r.end_ns is not None), default=None)),
        **{tag: _total(sc, tag) for tag in _TOTALS},
    }
    for tag, v in derived.items():
        if _finite(v):
            out[tag] = {"unit": HEADERS[tag][1], "avg": v}
    if anchor is not None:
        out["start_time"] = anchor.iso(min(r.sent_ns for r in recs))
        out["end_time"] = anchor.iso(max(r.end_ns or r.sent_ns for r in recs))
    out["was_cancelled"] = False
    errors = Counter((line["error"]["code"], line["error"]["type"], line["error"]["message"])
                     for line in lines if line["error"] is not None and not line["metadata"]["was_cancelled"])
    out["error_summary"] = [{"error_details": {"code": c, "type": t, "message": m}, "count": n}
                            for (c, t, m), n in errors.most_common()]
    return out


def _num(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))
    return f"{float(v):.2f}"


def aiperf_csv(summary: dict[str, Any]) -> str:
    """AIPerf's two-section CSV from an :func:`aiperf_summary` object."""
    buf = io.StringIO()
    w = csv.writer(buf)

    def name(tag: str, unit: str) -> str:
        header = HEADERS.get(tag, (tag, unit))[0]
        return header if unit.lower() in ("count", "requests") else f"{header} ({unit})"

    metric_tags = [t for t, v in summary.items() if isinstance(v, dict) and "p50" in v]
    value_tags = [t for t, v in summary.items() if isinstance(v, dict) and "avg" in v and "p50" not in v]
    if metric_tags:
        w.writerow(["Metric", *STAT_KEYS])
        for t in sorted(metric_tags):
            w.writerow([name(t, summary[t]["unit"]), *(_num(summary[t].get(k)) for k in STAT_KEYS)])
        if value_tags:
            w.writerow([])
    if value_tags:
        w.writerow(["Metric", "Value"])
        for t in sorted(value_tags):
            w.writerow([name(t, summary[t]["unit"]), _num(summary[t]["avg"])])
    return buf.getvalue()


def write_aiperf_export(directory: str | Path, records: Iterable[RequestRecord], metrics: RunMetrics, *,
                        anchor: ClockAnchor | None = None, tokenizer: Any = None,
                        phase: str | None = "measure") -> list[Path]:
    """Write ``profile_export.jsonl``, ``profile_export_aiperf.json`` and ``.csv`` to ``directory``.

    ``metrics`` is the run's summary of these records (the procedure's; the export does not summarise).
    """
    recs = _prepare(records, metrics, phase)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    lines = [_line(r, i, metrics, anchor, tokenizer) for i, r in enumerate(recs)]
    summary = _summary(recs, metrics, lines, anchor, tokenizer)
    paths = [d / "profile_export.jsonl", d / "profile_export_aiperf.json", d / "profile_export_aiperf.csv"]
    paths[0].write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines), encoding="utf-8")
    paths[1].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    paths[2].write_text(aiperf_csv(summary), encoding="utf-8")
    return paths
