"""AIPerf, Etalon and smooth-goodput metrics (measure/metrics/aiperf.py, user_experience.py, http.py):
hand-computed traces for each, through ``summarize``, and the AIPerf reference walk."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from factories import S, make_record

import pytest_llmbench
from pytest_llmbench.client import httptrace
from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.measure import experience as ux
from pytest_llmbench.measure import export_aiperf, registry
from pytest_llmbench.measure.summary import SummaryOptions, summarize

AIPERF_LIST = Path(pytest_llmbench.__file__).parent / "data" / "aiperf_metrics.txt"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
#: make_record: chunks as (time s, content, reasoning, tokens), times in seconds from 10 s
REC = {"unit": S, "t0": 10, "spec_input_tokens": 10}
BARE = {**REC, "chunks": ()}  # no chunks, no response
AIPERF_METRICS = [m for m in registry.METRICS.values() if m.aiperf]


def column(name: str, *records: RequestRecord) -> list[float | None]:
    """The summarised per-request column ``name``, in the order the records are given (None for NaN)."""
    pr = summarize(list(records), phase=None).per_request
    by_index = {int(i): float(v) for i, v in zip(pr["index"], pr[name])}
    return [None if math.isnan(by_index[r.index]) else by_index[r.index] for r in records]


# ---- per-request ------------------------------------------------------------------------


def test_aiperf_itl_and_output_throughput_per_user() -> None:
    r = make_record(0, chunks=((1.0, "a", "", 1), (1.5, "b", "", 1), (2.0, "c", "", 1)), end=2.0,
                    output_tokens_server=3, **REC)
    one = make_record(1, chunks=((1.0, "a", "", 1),), end=1.0, output_tokens_server=1, **REC)
    failed = make_record(2, chunks=((1.0, "a", "", 1), (2.0, "b", "", 1)), end=2.0, output_tokens_server=2,
                         error_type=ErrorType.HTTP_5XX, **REC)
    assert column("aiperf_itl", r, one, failed) == [pytest.approx(0.5), None, None]  # (2.0 - 1.0) / (3 - 1)
    assert column("output_tps_per_user", r, one, failed) == [pytest.approx(2.0), None, None]


def test_reasoning_moves_aiperf_ttft_and_splits_the_output_count() -> None:
    # reasoning at 0.5 s (4 tokens), content at 1.0 and 2.0 s (3 tokens); OSL 7
    r = make_record(0, chunks=((0.5, "", "think", 4), (1.0, "Hi", "", 1), (2.0, " there", "", 2)), end=2.0,
                    output_tokens_server=7, output_tokens_client=7, reasoning_tokens_client=4, **REC)
    plain = make_record(1, chunks=((1.0, "Hi", "", 1),), end=1.0, output_tokens_server=1, output_tokens_client=1,
                        **REC)
    assert column("aiperf_itl", r, plain)[0] == pytest.approx((2.0 - 0.5) / 6)
    assert column("reasoning_token_count", r, plain) == [4, None]
    assert column("output_token_count", r, plain) == [3, 1]


def test_counts_of_old_records_use_the_tokenizer_in_the_export() -> None:
    """Records written before reasoning_tokens_client existed: no client count in the summary; the AIPerf
    export counts them with the tokenizer it is given."""
    from pytest_llmbench.common.tokenizer import get_tokenizer

    tok = get_tokenizer("cl100k_base")
    r = make_record(chunks=((0.5, "", "let me think", 3), (1.0, "Hello world", "", 2)), end=1.0,
                    output_tokens_server=5, output_tokens_client=5, **REC)
    assert column("reasoning_token_count", r) == [None] and column("output_token_count", r) == [None]
    line = export_aiperf.aiperf_record_lines([r], summarize([r]), tokenizer=tok)[0]
    assert line["metrics"]["reasoning_token_count"]["value"] == len(tok.encode("let me think"))
    assert line["metrics"]["output_token_count"]["value"] == len(tok.encode("Hello world"))


USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
         "completion_tokens_details": {"reasoning_tokens": 5}, "prompt_tokens_details": {"cached_tokens": 40},
         "cache_creation_input_tokens": 7, "prompt_cache_miss_tokens": 60}


def test_usage_fields() -> None:
    r = make_record(0, chunks=((0.5, "", "hmm", 4), (1.0, "a", "", 6)), end=1.0, output_tokens_server=10, usage=USAGE,
                    input_tokens_server=100, reasoning_tokens_client=4, output_tokens_client=10, **REC)
    anthropic = make_record(1, usage={"cache_read_input_tokens": 9}, **BARE)
    bare = make_record(2, cached_tokens=3, **BARE)
    assert column("usage_total_tokens", r, anthropic, bare) == [110, None, None]
    assert column("usage_reasoning_tokens", r, bare) == [5, None]
    assert column("usage_prompt_cache_read_tokens", r, anthropic, bare) == [40, 9, 3]
    assert column("usage_prompt_cache_write_tokens", r, bare) == [7, None]
    assert column("usage_prompt_cache_miss_tokens", r, bare) == [60, None]
    assert column("reasoning_usage_diff_pct", r, bare) == [pytest.approx(25.0), None]  # (5 - 4) / 4


def test_error_isl_only_for_failures() -> None:
    failed = make_record(0, error_type=ErrorType.TIMEOUT, input_tokens_server=50, **BARE)
    cancelled = make_record(1, error_type=ErrorType.CANCELLED, input_tokens_server=70, **BARE)
    assert column("error_isl", failed, cancelled, make_record(2, **BARE)) == [50, None, None]


# ---- run totals ---------------------------------------------------------------------------


def test_run_totals_by_hand() -> None:
    a = make_record(0, chunks=((0.5, "", "hmm", 4), (1.0, "a", "", 6)), end=1.0, output_tokens_server=10, usage=USAGE,
                    input_tokens_server=100, output_tokens_client=10, reasoning_tokens_client=4, **REC)
    b = make_record(1, chunks=((1.0, "b", "", 3),), end=1.0, output_tokens_server=3, input_tokens_server=300,
                    output_tokens_client=3, usage={"prompt_tokens": 300, "completion_tokens": 3, "total_tokens": 303,
                                                   "prompt_tokens_details": {"cached_tokens": 60}}, **REC)
    bad = make_record(2, error_type=ErrorType.HTTP_5XX, input_tokens_server=25, status=500, **BARE)
    cancelled = make_record(3, error_type=ErrorType.CANCELLED, input_tokens_server=99, **BARE)
    v = {k: e.value for k, e in summarize([a, b, bad, cancelled]).scalars.items()}
    assert v["total_output_tokens"] == 6 + 3
    assert v["total_osl"] == 13 and v["total_isl"] == 400
    assert v["total_reasoning_tokens"] == 4
    assert v["total_usage_prompt_tokens"] == 400 and v["total_usage_completion_tokens"] == 10 + 3
    assert v["total_usage_total_tokens"] == 413 and v["total_usage_reasoning_tokens"] == 5
    assert v["total_usage_prompt_cache_read_tokens"] == 100
    assert v["total_usage_prompt_cache_write_tokens"] == 7 and v["total_usage_prompt_cache_miss_tokens"] == 60
    assert v["overall_usage_prompt_cache_read_pct"] == pytest.approx(25.0)  # 100 / 400
    assert v["total_error_isl"] == 25  # cancelled excluded
    assert "total_usage_prompt_cache_write_tokens" not in summarize([b]).scalars  # never reported


def test_token_weighted_goodput_eq5_by_hand() -> None:
    # V = 20 tok/s (d_i = 0.05 i, A = 0). "fast" delivers token i at 0.04 i: all deadlines met.
    fast = make_record(0, chunks=tuple((0.04 * i, "x", "", 1) for i in (1, 2, 3)), end=0.12, output_tokens_server=3,
                       **REC)
    slow = make_record(1, chunks=tuple((1.0 + 0.01 * i, "y", "", 1) for i in range(5)), end=1.04,
                       output_tokens_server=5, **REC)
    failed = make_record(2, sent=0.5, end=2.0, error_type=ErrorType.HTTP_5XX, status=500, **BARE)
    run = summarize([fast, slow, failed], SummaryOptions(reading_speed=20.0, ttft_allowance=0.0))
    duration = 2.0  # first submission (0) to last response (2.0)
    assert run.scalar("benchmark_duration").value == pytest.approx(duration)
    tw = run.scalar("token_weighted_goodput")
    assert tw.value == pytest.approx(3 / duration) and "V = 20 tokens/s" in tw.method
    assert "V=20 tokens/s" in run.scalar("smooth_goodput").method and "V tokens/s" in run.definitions["user_idle_latency"]
    assert ux.token_weighted_goodput(np.array([3.0, 5.0]), np.array([True, False]), 2.0) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="duration must be > 0"):
        ux.token_weighted_goodput(np.array([1.0]), np.array([True]), 0.0)


def test_fluid_token_rate_of_a_steady_stream() -> None:
    # every request: TTFT 0.2 s = D_p (no slack), then one token every 0.1 s. With D_d < 0.1 s
    # every later token misses (fluidity 1/20), with D_d = 0.1 s all meet: the smallest passing
    # D_d is 0.1 s, the rate 10 tok/s (bisection keeps the passing side, tolerance 1e-3)
    recs = [make_record(i, sent=float(i), chunks=tuple((i + 0.2 + 0.1 * k, "t", "", 1) for k in range(20)),
                        end=i + 0.2 + 1.9, output_tokens_server=20, **REC) for i in range(5)]
    run = summarize(recs, SummaryOptions(prefill_deadline=ux.PrefillDeadline.constant(0.2)))
    rate = run.scalar("fluid_token_rate").value
    assert rate == pytest.approx(10.0, rel=2e-3) and rate <= 10.0 + 1e-9
    assert run.fluid_token_generation_rate().rate == rate


def test_http_phases_from_a_hand_built_trace() -> None:
    ms = 1_000_000
    t = {"request_start_ns": 0, "queued_start_ns": 0, "queued_end_ns": 2 * ms, "create_start_ns": 2 * ms,
         "dns_start_ns": 3 * ms, "dns_end_ns": 7 * ms, "create_end_ns": 12 * ms, "headers_sent_ns": 13 * ms,
         "body_sent_ns": 14 * ms, "response_headers_ns": 40 * ms, "first_byte_ns": 50 * ms,
         "last_byte_ns": 90 * ms, "request_header_bytes": 200, "request_body_bytes": 100, "request_chunks": 1,
         "response_header_bytes": 80, "response_body_bytes": 1000, "response_chunks": 7}
    p = httptrace.phases(t)
    exp = {"blocked": 0.002, "dns_lookup": 0.004, "connecting": 0.006, "sending": 0.002, "waiting": 0.036,
           "receiving": 0.040, "duration": 0.078, "connection_overhead": 0.012, "total": 0.090}
    for k, v in exp.items():
        assert p[k] == pytest.approx(v), k
    assert (p["data_sent"], p["data_received"], p["chunks_sent"], p["chunks_received"]) == (300, 1080, 1, 7)
    assert p["connection_reused"] == 0
    waiting = column("http_waiting", make_record(0, http_trace=t, **BARE), make_record(1, **BARE))
    assert waiting == [pytest.approx(0.036), None]


# ---- declarations and the AIPerf reference walk ---------------------------------------------


def _aiperf_tags() -> list[str]:
    return [ln.strip() for ln in AIPERF_LIST.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_declarations_are_unique_and_complete() -> None:
    """Every AIPerf metric is declared once, with its formula, and summarize computes it."""
    names = [d.name for d in AIPERF_METRICS]
    assert len(names) == len(set(names)) == 38
    rich = make_record(0, chunks=((0.5, "", "hmm", 4), (1.0, "a", "", 6)), end=1.0, output_tokens_server=10,
                       usage=USAGE, input_tokens_server=100, reasoning_tokens_client=4, output_tokens_client=10,
                       **REC)
    failed = make_record(1, error_type=ErrorType.TIMEOUT, input_tokens_server=50, **BARE)
    run = summarize([rich, failed])
    for d in AIPERF_METRICS:
        assert d.definition and d.section and d.unit and d.compute is not None
        assert registry.lookup(d.name) is d and registry.lookup(d.aiperf) is d
        if d.kind == "scalar":
            assert d.name in run.scalars, f"{d.name} declared but not computed"
        else:
            assert d.name in run.per_request.names(), f"{d.name} declared but not computed"


def test_summarize_merges_the_extra_metrics_once() -> None:
    """metrics.summarize carries every per-request extra as a column, the AIPerf ITL as a distribution,
    the run totals, token-weighted goodput (eq. 5) and the fluid token rate as scalars."""
    recs = [make_record(i, sent=0.1 * i, chunks=((0.1 * i + 0.05, "a", "", 1), (0.1 * i + 0.15, "b", "", 1),
                                                 (0.1 * i + 0.25, "c", "", 1)), end=0.1 * i + 0.25,
                        output_tokens_server=3, **REC)
            for i in range(5)]
    run = summarize(recs)
    assert run.distributions["aiperf_itl"].unit == "s"
    assert run.per_request["aiperf_itl"] == pytest.approx([0.1] * 5)  # (0.25 - 0.05) / (3 - 1)
    assert run.scalars["total_osl"].value == 15
    # token-weighted goodput: eq. 5 over the summarised columns (every deadline met = idle latency 0)
    pr = run.per_request
    eq5 = ux.token_weighted_goodput(np.where(pr["ok"], pr["osl"], 0.0), pr["user_idle_latency"] == 0.0,
                                    run.scalar("benchmark_duration").value)
    assert run.scalars["token_weighted_goodput"].value == pytest.approx(eq5)
    assert run.scalars["token_weighted_goodput"].unit == "tokens/s"
    fr = run.fluid_token_generation_rate()
    assert run.scalars["fluid_token_rate"].value == pytest.approx(fr.rate)
    assert 5 < fr.rate < 50  # 10 tokens/s decode: a 0.1 s gap per token


def test_every_aiperf_metric_is_mapped_or_has_a_reason() -> None:
    tags = _aiperf_tags()
    assert len(tags) == 88 and len(set(tags)) == 88
    new = {d.aiperf for d in AIPERF_METRICS}
    existing = set(export_aiperf.AIPERF_EQUIVALENTS)
    absent = set(export_aiperf.AIPERF_NOT_APPLICABLE)
    assert not (new & existing) and not (new & absent) and not (existing & absent)
    missing = [t for t in tags if t not in new | existing | absent]
    assert not missing, f"AIPerf metrics with no entry and no stated reason: {missing}"
    assert (new | existing | absent) <= set(tags), "tables name AIPerf tags that are not in the reference"
    assert all(len(reason) > 20 for reason in export_aiperf.AIPERF_NOT_APPLICABLE.values())


def test_existing_equivalents_name_real_metrics() -> None:
    """Each AIPERF_EQUIVALENTS target is a distribution, scalar or per-request column of a run
    (one with reasoning and SLOs, so that conditional metrics exist) or a record field."""
    from pytest_llmbench.measure.slo import parse_slo

    recs = [make_record(i, sent=0.1 * i, chunks=((0.1 * i + 0.05, "", "hm", 1), (0.1 * i + 0.2, "a", "", 1),
                                                 (0.1 * i + 0.3, "b", "", 1)), end=0.1 * i + 0.3,
                        output_tokens_server=3, input_tokens_server=10, input_tokens_client=9, output_tokens_client=3,
                        **REC)
            for i in range(4)]
    run = summarize(recs, slos=[parse_slo("ttft <= 10 s")])
    known = (set(run.distributions) | set(run.scalars) | set(run.per_request.names())
             | set(RequestRecord.__dataclass_fields__))
    unknown = {t: n for t, (n, _) in export_aiperf.AIPERF_EQUIVALENTS.items() if n not in known}
    assert not unknown


def test_docs_map_every_aiperf_metric() -> None:
    text = DOCS.read_text()
    missing = [t for t in _aiperf_tags() if not re.search(rf"`{re.escape(t)}`", text)]
    assert not missing, f"docs/metrics.md does not map: {missing}"


@pytest.mark.parametrize("text, metric, threshold", [
    ("user_idle_latency.p99 <= 500ms", "user_idle_latency", 0.5),
    ("l_r <= 1 s", "user_idle_latency", 1.0),
    ("smooth_goodput >= 100 tok/s", "smooth_goodput", 100.0),
    ("token_weighted_goodput >= 50 tok/s", "token_weighted_goodput", 50.0),
    ("fluid_token_rate >= 20 tok/s", "fluid_token_rate", 20.0),
    ("fluid_token_generation_rate >= 20 tok/s", "fluid_token_rate", 20.0),
    ("fluidity.p1 >= 0.9", "fluidity", 0.9),
    ("inter_token_latency.p99 <= 40 ms", "aiperf_itl", 0.04),
])
def test_new_metrics_parse_as_slos_and_evaluate(text: str, metric: str, threshold: float) -> None:
    from pytest_llmbench.measure.slo import evaluate, parse_slo

    s = parse_slo(text)
    assert (s.metric, s.threshold) == (metric, pytest.approx(threshold))
    recs = [make_record(i, sent=0.1 * i, chunks=((0.1 * i + 0.05, "a", "", 1), (0.1 * i + 0.15, "b", "", 1)),
                        end=0.1 * i + 0.15, output_tokens_server=2, **REC) for i in range(5)]
    res = evaluate(s, summarize(recs))
    assert res.value is not None and math.isfinite(res.value.value), res.message
