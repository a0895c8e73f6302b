"""metrics.summarize on small hand-computed traces (every expected number worked out by hand).

Times are written in ms (factories.make_record stores them in ns); metrics come back in seconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
from factories import MS, make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.measure import registry
from pytest_llmbench.measure.summary import (
    DEFINITIONS,
    RequestSLO,
    RunMetrics,
    SummaryOptions,
    summarize,
    throughput_at_ttft_p99,
)


def approx(v: object, rel: float = 1e-9, abs: float = 1e-12) -> object:
    return pytest.approx(v, rel=rel, abs=abs, nan_ok=True)


# ----------------------------------------------------------------------------------------------
# multi-token chunks: options A, B, C (§4.6.3), TPOT, jitter, max pause, TTST
# ----------------------------------------------------------------------------------------------


def multi_chunk_run() -> list[RequestRecord]:
    # request 0: sent 0; chunks at 100, 110, 130 ms carrying 1, 2, 1 tokens; server per-token
    #            times 100, 105, 110, 128 ms. OSL = 4.
    # request 1: sent 50; one chunk at 200 ms with one token (single-token response).
    r0 = make_record(0, chunks=[100, 110, 130], tokens=[1, 2, 1],
                     server_token_ns=[100 * MS, 105 * MS, 110 * MS, 128 * MS])
    r1 = make_record(1, sent=50, chunks=[200], server_token_ns=[199 * MS])
    return [r0, r1]


def test_per_request_latencies_multi_token_chunks() -> None:
    m = summarize(multi_chunk_run())
    pr = m.per_request
    # TTFT: 100-0 = 0.100 s; 200-50 = 0.150 s
    assert pr["ttft"] == approx([0.100, 0.150])
    # E2E: 130 ms; 150 ms
    assert pr["e2e"] == approx([0.130, 0.150])
    # TPOT = (0.130 - 0.100) / (4 - 1) = 0.010; single token -> NaN (no decode interval)
    assert pr["tpot"] == approx([0.010, math.nan])
    # TTST (first content chunk -> next content chunk) = 110 - 100 = 10 ms; NaN for one chunk
    assert pr["ttst"] == approx([0.010, math.nan])
    # OSL / E2E = 4 / 0.130; 1 / 0.150
    assert pr["output_tps_per_request"] == approx([4 / 0.130, 1 / 0.150])
    # ISL / TTFT = 100 / 0.1 and 100 / 0.15; E2E / OSL
    assert pr["prefill_tps_per_request"] == approx([1000.0, 100 / 0.150])
    assert pr["normalized_latency"] == approx([0.130 / 4, 0.150])


def test_itl_option_b_gives_chunk_time_to_every_token() -> None:
    m = summarize(multi_chunk_run(), itl_option="B")
    # token times 100, 110, 110, 130 -> ITL 10, 0, 20 ms (N-1 zeros per N-token chunk)
    assert np.asarray(m.per_request.itl["B"].values) == approx([0.0, 0.010, 0.020])  # pooled, sorted
    assert m.distributions["itl"].n == 3 and m.distributions["itl"].name == "itl"
    # jitter = sample std of (10, 0, 20) = sqrt(((0)^2 + 10^2 + 10^2)/2) = 10 ms; max pause 20 ms
    assert m.per_request["jitter"] == approx([0.010, math.nan])
    assert m.per_request["max_pause"] == approx([0.020, math.nan])
    assert m.per_request["itl_count"].tolist() == [3, 0]
    assert m.distributions["itl"].mean.value == approx(0.010)
    assert m.distributions["itl"].max == approx(0.020)


def test_itl_option_a_is_time_between_chunks() -> None:
    m = summarize(multi_chunk_run(), itl_option="A")
    # chunk gaps 10, 20 ms; reported under the name "time between chunks"
    assert m.distributions["itl"].name == "time_between_chunks"
    assert np.sort(m.distributions["itl"].samples) == approx([0.010, 0.020])
    assert m.per_request["jitter"] == approx([math.sqrt(((10 - 15) ** 2 + (20 - 15) ** 2) / 1) / 1000, math.nan])
    # chunk sizes 1, 2, 1 (request 0) and 1 (request 1): 3 of 4 chunks carry one token
    assert np.sort(m.distributions["chunk_size"].samples) == approx([1, 1, 1, 2])
    assert m.scalar("single_token_chunk_fraction").value == approx(0.75)
    assert "A" in m.definitions["itl_option"]


def test_itl_option_c_uses_server_timestamps() -> None:
    m = summarize(multi_chunk_run(), itl_option="C")
    # server gaps 5, 5, 18 ms
    assert m.distributions["itl"].samples == approx([0.005, 0.005, 0.018])
    assert m.per_request["max_pause"] == approx([0.018, math.nan])
    assert summarize(multi_chunk_run(), itl_option="auto").itl_option == "C"


def test_no_interval_combines_the_clocks_of_two_hosts() -> None:
    """§4.7.2: every interval comes from one host's clock. Offsetting the server's clock (as between two
    unsynchronised hosts) changes no metric, so sub-ms cross-host sync is never needed (4.7.2-SHOULD-1)."""
    base = summarize(multi_chunk_run(), itl_option="C")
    shifted = multi_chunk_run()
    for r in shifted:
        r.server_token_ns = [t + 7_000_000_123 for t in r.server_token_ns or []]
        r.server_timing = {"queue_ns": 1_000_000, "prefill_ns": 2_000_000}
    unshifted = multi_chunk_run()
    for r in unshifted:
        r.server_timing = {"queue_ns": 1_000_000, "prefill_ns": 2_000_000}
    assert summarize(shifted, itl_option="C").to_json() == summarize(unshifted, itl_option="C").to_json()
    assert base.distributions["itl"].samples == approx([0.005, 0.005, 0.018])


def test_itl_option_c_without_server_times_is_an_error() -> None:
    run = multi_chunk_run()
    run[0].server_token_ns = None
    with pytest.raises(ValueError, match="server_token_ns"):
        summarize(run, itl_option="C")
    assert summarize(run, itl_option="auto").itl_option == "B"
    with pytest.raises(ValueError, match="itl_option"):
        summarize(run, itl_option="D")


# ----------------------------------------------------------------------------------------------
# stalls, whitespace and reasoning chunks
# ----------------------------------------------------------------------------------------------


def test_stall_shows_in_max_pause_and_tail_but_not_tpot() -> None:
    # tokens every 10 ms, one 500 ms stall: chunks at 100,110,120,620,630 (one token each)
    m = summarize([make_record(0, chunks=[100, 110, 120, 620, 630])])
    pr = m.per_request
    assert pr["max_pause"] == approx([0.5])
    # TPOT = (0.630 - 0.100) / 4 = 0.1325 hides the stall in an average
    assert pr["tpot"] == approx([0.1325])
    # ITL samples 10, 10, 500, 10 ms: P50 = 10 ms (linear rule: h = 1.5 between 10 and 10)
    assert m.percentile("itl", 50).value == approx(0.010)
    # P99: h = 3 * 0.99 = 2.97 -> sorted (10,10,10,500): 10 + 0.97 * 490 = 485.3 ms
    assert m.percentile("itl", 99).value == approx(0.4853)
    assert m.scalar("itl_tail_ratio").value == approx(48.53)
    assert m.percentile("itl", 99).undersampled


def test_whitespace_and_role_chunks_do_not_start_ttft() -> None:
    # chunk 0 at 40 ms: role-only (no text, 0 tokens); chunk 1 at 60 ms: "  " whitespace with a
    # token; chunk 2 at 100 ms: first content; chunk 3 at 120 ms.
    r = make_record(0, chunks=[40, 60, 100, 120], tokens=[0, 1, 1, 1], text=["", "  ", "Hi", " there"],
                    first_token=100)
    m = summarize([r])
    assert m.per_request["ttft"] == approx([0.100])
    assert m.per_request["ttft_any_chunk"] == approx([0.040])
    # ITL starts at the first content token: one sample of 20 ms (the whitespace token is before it)
    assert m.distributions["itl"].samples == approx([0.020])


def test_reasoning_before_output() -> None:
    # reasoning chunks at 50 and 70 ms (no content tokens), content at 200 and 210 ms
    r = make_record(0, chunks=[50, 70, 200, 210], tokens=[0, 0, 1, 1], text=["", "", "A", "B"],
                    reasoning=["think", "more", "", ""], first_token=200)
    m = summarize([r])
    pr = m.per_request
    assert pr["ttft"] == approx([0.200])  # §5.1.3.1: first content token
    assert pr["ttfa"] == approx([0.050])  # first fragment of any kind (MLPerf; AIPerf's TTFT incl. reasoning)
    assert pr["ttft_incl_reasoning"] is pr["ttfa"]  # the former name, an alias
    assert pr["thinking_time"] == approx([0.150]) and m.scalar("ended_while_thinking").value == 0
    assert pr["ttfo"] == approx([0.200])  # reasoning preceded the output
    assert pr["ttst"] == approx([0.010])
    # without reasoning, TTFO is undefined and has no distribution
    m2 = summarize([make_record(0, chunks=[100, 110])])
    assert math.isnan(m2.per_request["ttfo"][0]) and "ttfo" not in m2.distributions


# ----------------------------------------------------------------------------------------------
# failures, cancellations, single-token responses
# ----------------------------------------------------------------------------------------------


def failure_run() -> list[RequestRecord]:
    return [
        make_record(0, chunks=[100, 120]),
        make_record(1, sent=10, chunks=[], error_type=ErrorType.HTTP_5XX, end=30, status=500),
        make_record(2, sent=20, chunks=[], error_type=ErrorType.REFUSED, end=40),
        make_record(3, sent=30, chunks=[130], error_type=ErrorType.CANCELLED, end=135),
        make_record(4, sent=40, chunks=[90, 150], error_type=ErrorType.TIMEOUT, end=400),
        make_record(5, sent=50, chunks=[150]),
    ]


def test_failed_requests_counted_not_measured() -> None:
    m = summarize(failure_run())
    s = m.scalars
    assert s["request_count"].value == 6
    assert s["completed_count"].value == 2 and s["error_count"].value == 3
    assert s["cancelled_count"].value == 1
    assert m.errors_by_type == {"http_5xx": 1, "refused": 1, "timeout": 1}
    assert s["refusals"].value == 1
    # cancelled is not a failure and not in the denominator: 2 ok / (2 ok + 3 failed)
    assert s["success_rate"].value == approx(0.4) and s["error_rate"].value == approx(0.6)
    assert s["refusal_rate"].value == approx(0.2)
    # only successful requests feed latency distributions: TTFT 100 ms and 100 ms
    assert m.distributions["ttft"].n == 2
    assert m.per_request["ttft"] == approx([0.1, math.nan, math.nan, math.nan, math.nan, 0.1])
    # the timed-out request streamed tokens, but they are not ITL samples: one 20 ms sample
    assert m.distributions["itl"].samples == approx([0.020])


def test_single_token_responses_have_no_itl_or_tpot() -> None:
    m = summarize([make_record(0, chunks=[100]), make_record(1, chunks=[80])])
    assert m.distributions["itl"].n == 0 and m.distributions["tpot"].n == 0
    assert np.isnan(m.per_request["tpot"]).all() and np.isnan(m.per_request["jitter"]).all()
    assert math.isnan(m.percentile("itl", 50).value)
    assert math.isnan(m.scalar("itl_tail_ratio").value)
    assert "single-token" in DEFINITIONS["tpot"]


# ----------------------------------------------------------------------------------------------
# throughput windows, tokens in flight, goodput
# ----------------------------------------------------------------------------------------------


#: The load's send window of window_run: it started at 0 and stopped sending at 1000 ms (a 1 s level whose
#: last request left at 700 ms), so the steady-state window is [100, 1000] ms (first 10% excluded).
SEND_WINDOW = (0, 1000 * MS)


def window_run() -> list[RequestRecord]:
    # run from 0 to 1000 ms; steady-state window [100, 1000] ms (first 10% excluded)
    return [
        make_record(0, chunks=[50, 60, 70], spec_input_tokens=10, end=80),  # all inside the ramp-up
        make_record(1, sent=200, chunks=[300, 400], tokens=[2, 2], spec_input_tokens=20, end=500),  # 4 tokens, OSL 4
        make_record(2, sent=600, chunks=[900, 1000], spec_input_tokens=30, end=1000,
                    output_tokens_server=4, output_tokens_client=2),  # server says 4: chunks scaled x2
        make_record(3, sent=700, chunks=[], error_type=ErrorType.HTTP_5XX, end=800, spec_input_tokens=40),
    ]


def test_throughput_uses_steady_state_window() -> None:
    m = summarize(window_run(), send_window_ns=SEND_WINDOW)
    assert m.scalar("benchmark_duration").value == approx(1.0)
    assert m.steady_window == approx((0.1, 1.0))
    # requests completing in [0.1, 1.0]: #1 (0.5 s), #2 (1.0 s) -> 2 / 0.9 s
    assert m.scalar("request_throughput").value == approx(2 / 0.9)
    # output tokens arriving in the window: 2+2 (#1) + 2x(1+1) (#2 scaled to OSL 4) = 8 -> 8/0.9
    assert m.scalar("output_throughput").value == approx(8 / 0.9)
    # input tokens counted at the first token: #1 at 0.3 s (20), #2 at 0.9 s (30) -> 50/0.9
    assert m.scalar("input_throughput").value == approx(50 / 0.9)
    assert m.scalar("total_token_throughput").value == approx(58 / 0.9)
    # the whole run: 3 requests, 3+4+4 = 11 tokens over 1.0 s
    assert m.scalar("request_throughput_full").value == approx(3.0)
    assert m.scalar("output_throughput_full").value == approx(11.0)
    assert "steady state" in m.windows["output_throughput"]
    assert "whole run" in m.windows["output_throughput_full"]
    assert "all measured requests" in m.windows["success_rate"]


def test_tokens_per_gpu_second() -> None:
    m = summarize(window_run(), SummaryOptions(gpu_count=4), send_window_ns=SEND_WINDOW)
    assert m.scalar("tokens_per_gpu_second").value == approx(8 / 0.9 / 4)
    with pytest.raises(ValueError, match="gpu_count"):
        summarize(window_run(), SummaryOptions(gpu_count=0), send_window_ns=SEND_WINDOW)


def test_tokens_in_flight_time_weighted() -> None:
    m = summarize(window_run(), send_window_ns=SEND_WINDOW)
    # window [0.1, 1.0] s. In flight (token-seconds inside the window):
    #  #1 [0.2, 0.5]: input 20 x 0.3 = 6; tokens 2 from 0.3 -> 0.5 = 0.4; 2 from 0.4 -> 0.5 = 0.2
    #  #2 [0.6, 1.0]: input 30 x 0.4 = 12; 2 tokens (scaled) from 0.9 -> 1.0 = 0.2; 2 at 1.0 = 0
    #  #3 (failed) [0.7, 0.8]: input 40 x 0.1 = 4
    #  #0 ends at 0.08 s, before the window: 0
    total = 6 + 0.4 + 0.2 + 12 + 0.2 + 4
    assert m.scalar("tokens_in_flight").value == approx(total / 0.9)
    # requests in flight: (0.3 + 0.4 + 0.1) / 0.9
    assert m.scalar("concurrency").value == approx(0.8 / 0.9)


@dataclass
class MaxSLO:
    """Stub of slo.py's per-request SLO: value <= limit."""

    metric: str
    limit: float

    def ok(self, values: np.ndarray) -> np.ndarray:
        return values <= self.limit


def test_goodput_counts_failed_in_denominator() -> None:
    assert isinstance(MaxSLO("ttft", 1.0), RequestSLO)
    run = window_run()  # TTFTs: #0 50 ms, #1 100 ms, #2 300 ms; #3 failed
    m = summarize(run, slos=[MaxSLO("ttft", 0.2)], send_window_ns=SEND_WINDOW)
    # good: #0 and #1; good fraction = 2 / (3 ok + 1 failed)
    assert m.scalar("good_count").value == 2
    assert m.scalar("good_fraction").value == approx(0.5)
    # goodput in the steady window: only #1 completes inside [0.1, 1.0] -> 1 / 0.9
    assert m.scalar("goodput").value == approx(1 / 0.9)
    # two SLOs must both hold: E2E <= 0.25 s fails #1 (0.3 s) -> good = #0 only
    m2 = summarize(run, slos=[MaxSLO("ttft", 0.2), MaxSLO("e2e", 0.25)])
    assert m2.scalar("good_count").value == 1
    # a TPOT SLO does not apply to a single-token response (TPOT undefined)
    m3 = summarize([make_record(0, chunks=[100])], slos=[MaxSLO("tpot", 0.001)])
    assert m3.scalar("good_count").value == 1
    with pytest.raises(KeyError, match="known"):
        summarize(run, slos=[MaxSLO("no_such_metric", 1.0)])
    assert "goodput" not in summarize(run).scalars


# ----------------------------------------------------------------------------------------------
# buckets, server timing, schedule lag, usage
# ----------------------------------------------------------------------------------------------


def test_ttft_by_input_length_buckets() -> None:
    run = [make_record(i, chunks=[t], spec_input_tokens=isl)
           for i, (t, isl) in enumerate([(100, 100), (200, 255), (300, 256), (900, 5000)])]
    m = summarize(run)
    assert sorted(m.ttft_by_input_length) == ["[0,256)", "[256,512)", "[4096,inf)"]
    assert m.ttft_by_input_length["[0,256)"].n == 2
    assert m.ttft_by_input_length["[0,256)"].percentiles[50.0].value == approx(0.150)
    assert m.ttft_by_input_length["[4096,inf)"].max == approx(0.9)


def test_queue_wait_prefill_and_preemption() -> None:
    run = [
        make_record(0, chunks=[100], server_timing={"queue_ns": 30 * MS, "prefill_ns": 60 * MS, "preemptions": 0}),
        make_record(1, chunks=[200], server_timing={"queue_ns": 50 * MS, "prefill_ns": 100 * MS, "preemptions": 2,
                                                    "preempted_tokens": 30}),
        make_record(2, chunks=[], error_type=ErrorType.HTTP_5XX, end=300,
                    server_timing={"preemptions": 1, "preempted_tokens": 15}),
        make_record(3, chunks=[150]),  # server reported nothing
    ]
    m = summarize(run)
    assert m.distributions["queue_wait"].n == 2
    assert m.distributions["queue_wait"].mean.value == approx(0.040)
    assert m.distributions["prefill"].max == approx(0.100)
    # preempted: #1 and #2 of the 3 that reported -> 2/3; recovered: #1 of 2 -> 1/2
    assert m.scalar("preemption_rate").value == approx(2 / 3)
    assert m.scalar("preemption_recovery_rate").value == approx(0.5)
    # (30 + 15) tokens lost over (2 + 1) preemptions = 15
    assert m.scalar("tokens_lost_per_preemption").value == approx(15.0)
    assert "preemption_rate" not in summarize([make_record(0, chunks=[100])]).scalars


def test_send_lag_and_latencies_from_the_schedule() -> None:
    run = [make_record(0, sent=12, chunks=[100], intended_ns=10 * MS),
           make_record(1, sent=35, chunks=[150], intended_ns=20 * MS)]
    m = summarize(run)
    assert m.per_request["send_lag"] == approx([0.002, 0.015])
    # end - intended: 100 - 10 = 90 ms; 150 - 20 = 130 ms; the first token is the only chunk here
    assert m.per_request["e2e_from_schedule"] == approx([0.090, 0.130])
    assert m.per_request["ttft_from_schedule"] == approx([0.090, 0.130])
    assert m.per_request["ttft"] == approx([0.088, 0.115])  # from T_submit: 100 - 12, 150 - 35
    assert "send_lag" not in summarize([make_record(0, chunks=[100])]).distributions


def test_schedule_lag_and_submit_lag_are_named_apart() -> None:
    """schedule lag = hand-over (queued) - intended; submit lag (``send_lag``, alias ``submit_lag``) =
    sent (T_submit) - intended; a record without a hand-over stamp (format < 2.0) uses sent."""
    run = [make_record(0, sent=12, chunks=[100], intended_ns=10 * MS, queued_ns=11 * MS),
           make_record(1, sent=35, chunks=[150], intended_ns=20 * MS)]
    m = summarize(run)
    assert m.per_request["schedule_lag"] == approx([0.001, 0.015])
    assert m.per_request["send_lag"] == approx([0.002, 0.015])
    assert registry.lookup("submit_lag").name == "send_lag" and registry.lookup("schedule_lag").title == "Schedule lag"
    assert "schedule_lag" not in summarize([make_record(0, chunks=[100])]).distributions


def test_usage_discrepancy_and_osl_mismatch() -> None:
    r = make_record(0, chunks=[100, 110], max_tokens=100, input_tokens_client=100, input_tokens_server=110,
                    output_tokens_client=50, output_tokens_server=48)
    m = summarize([r])
    assert m.per_request["input_usage_diff_pct"] == approx([10.0])
    assert m.per_request["output_usage_diff_pct"] == approx([-4.0])
    # OSL = server's 48 of 100 requested -> -52%; |52| > min(5, 50) -> a mismatch
    assert m.per_request["osl_mismatch_pct"] == approx([-52.0])
    assert m.scalar("osl_mismatch_count").value == 1
    assert m.scalar("usage_discrepancy_count").value == 0  # 10% is not > 10%


# ----------------------------------------------------------------------------------------------
# interface
# ----------------------------------------------------------------------------------------------


def test_unknown_names_list_known_ones_and_json() -> None:
    m = summarize(multi_chunk_run())
    with pytest.raises(KeyError, match="ttft"):
        m.percentile("nope", 50)
    with pytest.raises(KeyError, match="request_throughput"):
        m.scalar("nope")
    with pytest.raises(KeyError, match="e2e"):
        m.per_request_values("nope")
    # any p from the kept samples, with CI
    est = m.percentile("e2e", 75)
    assert est.value == approx(0.130 + 0.75 * 0.020)
    doc = m.to_json(per_request=True)
    text = json.dumps(doc, allow_nan=False)  # strict JSON: no NaN leaks
    assert "itl_method" in text and doc["per_request"]["tpot"][1] is None


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="no records"):
        summarize([])
    r = make_record(7, chunks=[100, 90])
    with pytest.raises(ValueError, match="record 7"):
        summarize([r])
    with pytest.raises(ValueError, match="steady_state_fraction"):
        summarize(multi_chunk_run(), SummaryOptions(steady_state_fraction=1.0))
    w = make_record(0, chunks=[100])
    w.phase = "warmup"
    with pytest.raises(ValueError, match="phase"):
        summarize([w])
    assert summarize([w], phase=None).scalar("request_count").value == 1


def test_throughput_at_ttft_p99() -> None:
    levels = [(100.0, 0.2), (180.0, 0.45), (220.0, 0.52), (150.0, 0.3)]
    assert throughput_at_ttft_p99(levels) == 180.0
    assert throughput_at_ttft_p99([(100.0, 0.6)]) is None
    m = summarize(window_run(), send_window_ns=SEND_WINDOW)
    assert throughput_at_ttft_p99([m]) == approx(m.scalar("output_throughput").value)
    assert isinstance(m, RunMetrics)
    with pytest.raises(TypeError, match="pairs"):
        throughput_at_ttft_p99([1.0])


def test_experience_metrics_in_summary() -> None:
    m = summarize(multi_chunk_run(), SummaryOptions(decode_deadline=0.025))
    # fluidity: every decode gap <= 25 ms -> 1.0 for request 0; request 1 only has its first token
    fi = m.per_request["fluidity"]
    assert 0.0 <= np.nanmin(fi) <= np.nanmax(fi) <= 1.0 and fi[0] == 1.0
    # user idle latency, V = 1/20 s: request 0 tokens at 0.10, 0.11, 0.11, 0.13 s vs deadlines
    # 0.05, 0.10, 0.15, 0.20 -> max lateness 0.05 s; request 1: 0.15 - 0.05 = 0.10 s
    assert m.per_request["user_idle_latency"] == approx([0.05, 0.10])
    # smooth goodput = ((4 - 5 x 0.05) + (1 - 5 x 0.10)) / 0.2 s = 4.25 / 0.2
    assert m.scalar("smooth_goodput").value == approx(4.25 / 0.2)
    rate = m.fluid_token_generation_rate()
    assert rate.rate > 0 and rate.n == 2


def test_itl_shape_modality_and_tail() -> None:
    rng = np.random.default_rng(3)

    def run(gap_fn: object) -> list[RequestRecord]:
        out = []
        for i in range(30):
            gaps = gap_fn(40)  # type: ignore[operator]
            chunks = list(100 + np.cumsum(np.concatenate(([0.0], gaps))))
            out.append(make_record(i, chunks=chunks))
        return out

    uni = summarize(run(lambda k: rng.normal(20, 1, k)))
    assert uni.itl_modality is not None and uni.itl_modality.verdict == "unimodal"
    # two decode regimes (10 ms and 50 ms steps, as with and without a batched prefill)
    bi = summarize(run(lambda k: np.where(rng.random(k) < 0.5, rng.normal(10, 0.5, k), rng.normal(50, 0.5, k))))
    assert bi.itl_modality is not None and bi.itl_modality.verdict == "multimodal"
    assert bi.itl_tail is not None and bi.itl_tail.p99_p50_ratio == approx(bi.scalar("itl_tail_ratio").value)
    assert bi.to_json()["itl_modality"]["verdict"] == "multimodal"


def test_all_failed_run_and_fallbacks() -> None:
    # every request failed: counts and rates exist, latency distributions are empty, no crash
    m = summarize([make_record(0, chunks=[], error_type=ErrorType.CONNECT, end=5),
                   make_record(1, sent=10, chunks=[], error_type=ErrorType.RATE_LIMITED, end=20, status=429)])
    assert m.scalar("success_rate").value == 0.0 and m.distributions["ttft"].n == 0
    assert m.errors_by_type == {"connect": 1, "rate_limited": 1}
    assert m.itl_modality is not None and m.itl_modality.verdict == "undetermined"
    assert m.scalar("request_throughput").value == 0.0
    json.dumps(m.to_json(per_request=True), allow_nan=False)
    # no chunk_tokens from the tokenizer: one token per non-whitespace text chunk
    r = make_record(0, chunks=[100, 110, 125], text=["a", " ", "b"])
    r.chunk_tokens = []
    m2 = summarize([r])
    assert m2.per_request["osl"] == approx([2.0])
    assert m2.distributions["itl"].samples == approx([0.025])
    # a non-streamed response (no chunks): its OSL counts at the end time
    ns = make_record(0, chunks=[], end=400, output_tokens_server=30)
    m3 = summarize([make_record(1, chunks=[10], end=10), ns], SummaryOptions(steady_state_fraction=0.0))
    assert m3.scalar("output_throughput").value == approx(31 / 0.4)


def test_throughput_window_is_the_send_window_less_its_ramp_up() -> None:
    """Issue 36 / §5.2.3 step 3c with §5.2.3.2: D = the send duration (first to last submission, 1000 ms);
    tokens arriving in [0.1·D, D] ÷ 0.9·D, every request's streamed tokens (a cancelled one's too), the
    drain after the last send left out, whatever the last response's time."""
    run = [
        make_record(0, sent=0, chunks=[50, 60]),  # ramp-up: both tokens before 100 ms
        make_record(1, sent=200, chunks=[300, 400, 500]),  # 3 tokens inside
        make_record(2, sent=500, chunks=[600, 700], error_type=ErrorType.CANCELLED),  # cancelled: 2 tokens inside
        make_record(3, sent=1000, chunks=[900 + 200, 1500, 4000], end=4000),  # the last send: 1 s; tokens in the drain
    ]
    m = summarize(run)
    assert m.steady_window == approx((0.1, 1.0))
    assert m.scalar("benchmark_duration").value == approx(4.0)  # the whole run still ends at the last response
    assert m.scalar("output_throughput").value == approx((3 + 2) / 0.9)
    assert m.scalar("output_throughput_full").value == approx((2 + 3 + 2 + 3) / 4.0)
    assert "send window" in m.windows["output_throughput"] and "drain" in m.windows["output_throughput"]
    # the load's own window (start, last send) when the caller knows it: a 2 s level -> [0.2, 2.0] s
    m2 = summarize(run, send_window_ns=(0, 2000 * MS))
    assert m2.steady_window == approx((0.2, 2.0)) and m2.scalar("output_throughput").value == approx((3 + 2 + 2) / 1.8)
    assert m.to_json()["definitions_version"] == 2


def test_a_burst_has_no_send_window_and_the_whole_run_stands_in() -> None:
    run = [make_record(i, sent=0, chunks=[100, 200]) for i in range(3)]
    m = summarize(run)
    assert m.steady_window == approx((0.02, 0.2)) and "sent at once" in m.windows["output_throughput"]


def test_a_ramp_up_request_is_not_in_the_steady_window_latencies() -> None:
    """5.2's Table 4 reads the latencies of the requests sent in the steady-state window: a ramp-up request
    with a 10 s TTFT is left out, as its tokens are left out of the throughput."""
    run = [make_record(0, sent=0, ttft=10_000, n_chunks=2),  # sent at 0: ramp-up (window [0.1, 1.0] s)
           *(make_record(i, sent=100 * i, ttft=50, n_chunks=2) for i in range(1, 11))]
    m = summarize(run)
    assert m.steady_window == approx((0.1, 1.0))
    assert m.percentile("ttft", 100).value == approx(10.0)  # the run's distribution has it
    w = m.in_steady_window("ttft")
    assert w.n == 10 and w.percentile(100).value == approx(0.050)
