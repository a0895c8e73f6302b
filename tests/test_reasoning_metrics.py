"""The phase metrics of reasoning models (issue 49) on hand-computed traces: ttfa beside TTFT, thinking time,
reasoning tokens and their rate, per-phase ITL, visible vs total output tok/s, hidden reasoning caught (its
SLOs INCONCLUSIVE with the reason), requests that ended while thinking counted."""

from __future__ import annotations

import math

from factories import make_record
from pytest import approx

from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.measure import registry
from pytest_llmbench.measure.slo import SLOVerdict, evaluate, parse_slo
from pytest_llmbench.measure.summary import summarize


def thinker(i: int, *, sent: float = 0.0, usage: bool = True) -> RequestRecord:
    """Sent at ``sent`` ms: three reasoning tokens at +50, +60, +70 ms, then three content tokens at +200, +210,
    +220 ms (the end)."""
    chunks = [(sent + 50, "", "Let", 1), (sent + 60, "", " me", 1), (sent + 70, "", " think", 1),
              (sent + 200, "The", "", 1), (sent + 210, " answer", "", 1), (sent + 220, ".", "", 1)]
    u = {"prompt_tokens": 10, "completion_tokens": 6, "completion_tokens_details": {"reasoning_tokens": 3}}
    return make_record(i, sent=sent, chunks=chunks, output_tokens_client=6, reasoning_tokens_client=3,
                       output_tokens_server=6 if usage else None, usage=u if usage else None)


def hider(i: int, *, sent: float = 0.0) -> RequestRecord:
    """Thinks 30 tokens without streaming them (usage counts them), then three content tokens at +200..220 ms."""
    chunks = [(sent + 200, "The", "", 1), (sent + 210, " answer", "", 1), (sent + 220, ".", "", 1)]
    u = {"prompt_tokens": 10, "completion_tokens": 33, "completion_tokens_details": {"reasoning_tokens": 30}}
    return make_record(i, sent=sent, chunks=chunks, output_tokens_client=3, output_tokens_server=33, usage=u)


def test_the_phases_of_a_streamed_thinker() -> None:
    m = summarize([thinker(0)])
    pr = m.per_request
    assert pr["ttft"] == approx([0.200])  # §5.1.3.1: the first content token, unchanged
    assert pr["ttfa"] == approx([0.050])  # the first fragment of any kind (MLPerf)
    assert pr["thinking_time"] == approx([0.150])  # first reasoning fragment to the first content token
    assert pr["reasoning_tokens"] == approx([3]) and pr["reasoning_token_rate"] == approx([3 / 0.150])
    assert pr["itl_reasoning"] == approx([0.010]) and pr["itl_content"] == approx([0.010])
    assert math.isnan(pr["itl_tool"][0])
    shares = {k: m.scalar(f"phase_share_{k}").value for k in ("waiting", "thinking", "tool", "visible")}
    assert shares == approx({"waiting": 50 / 220, "thinking": 150 / 220, "tool": 0.0, "visible": 20 / 220})
    assert m.scalar("hidden_reasoning_requests").value == 0 and m.phase_unobserved is None
    assert m.reasoning_findings() == []


def test_ttft_minus_ttfa_is_the_thinking_time_when_the_answer_follows_at_once() -> None:
    recs = [thinker(i, sent=1000.0 * i) for i in range(5)]
    pr = summarize(recs).per_request
    assert pr["ttft"] - pr["ttfa"] == approx(pr["thinking_time"])


def test_a_run_without_reasoning_has_no_phase_scalars_and_ttfa_equals_ttft() -> None:
    m = summarize([make_record(i, sent=100.0 * i) for i in range(3)])
    assert list(m.per_request["ttfa"]) == list(m.per_request["ttft"])
    assert not any(k.startswith(("phase_share", "hidden_reasoning", "visible_output")) for k in m.scalars)
    assert "thinking_time" not in m.distributions


def test_hidden_reasoning_is_flagged_and_its_phase_slos_are_inconclusive() -> None:
    """usage counts 30 reasoning tokens and none arrived: the run says so, names the hidden tokens, a
    thinking-time SLO is INCONCLUSIVE with the reason (never PASS), a content SLO is still judged."""
    recs = [hider(i, sent=1000.0 * i) for i in range(40)]
    m = summarize(recs)
    assert m.scalar("hidden_reasoning_requests").value == 40 and m.scalar("hidden_reasoning_tokens").value == 1200
    assert "40 requests had 1200 reasoning tokens" in m.phase_unobserved
    (finding,) = m.reasoning_findings()
    assert "hidden reasoning" in finding and "TTFT and ITL include unobserved thinking" in finding
    for text in ("thinking_time.p50 <= 5s", "ttfa.p99 <= 1s", "reasoning_token_rate.p50 >= 1"):
        r = evaluate(text, m)
        assert r.verdict is SLOVerdict.INCONCLUSIVE and "hidden reasoning" in r.message, r.message
    assert evaluate("ttft.p50 <= 1s", m).verdict is SLOVerdict.PASS  # TTFT is still judged (on what arrived)
    # output tok/s counts the server's 33 tokens per request; the client saw 3 of them
    total, visible = m.scalar("output_throughput_full").value, m.scalar("visible_output_throughput_full").value
    assert total == approx(11 * visible)
    assert m.to_json()["reasoning_findings"] == [finding]


def test_not_determinable_is_never_none() -> None:
    """No reasoning count from the server, and far more completion tokens than arrived."""
    recs = [make_record(i, sent=1000.0 * i, output_tokens_client=4, output_tokens_server=200) for i in range(3)]
    m = summarize(recs)
    assert m.scalar("reasoning_undetermined_requests").value == 3
    assert m.phase_unobserved.startswith("hidden reasoning not determinable")
    assert evaluate("thinking_time.p50 <= 5s", m).verdict is SLOVerdict.INCONCLUSIVE


def test_requests_that_ended_while_thinking_are_counted_and_named() -> None:
    ended = make_record(1, sent=1000.0, chunks=[(1050, "", "hmm", 1), (1060, "", " so", 1)], finish_reason="length",
                        output_tokens_client=2, reasoning_tokens_client=2)
    m = summarize([thinker(0), ended])
    assert m.scalar("ended_while_thinking").value == 1
    assert math.isnan(m.per_request["ttft"][1]) and m.per_request["ttfa"][1] == approx(0.050)
    assert m.reasoning_findings() == ["1 requests ended while thinking (no content: counted, not in TTFT)"]


def test_phase_metrics_are_slo_able_and_judged_on_a_streamed_run() -> None:
    recs = [thinker(i, sent=1000.0 * i) for i in range(300)]  # P99 decided with no exceedance needs ~300
    m = summarize(recs)
    for text in ("ttfa.p99 <= 1s", "thinking_time.p50 <= 5s", "reasoning_tokens.p50 <= 10",
                 "itl_reasoning.p50 <= 20ms", "reasoning_token_rate.p50 >= 10", "visible_output_throughput >= 0.1"):
        slo = parse_slo(text)
        assert registry.lookup(slo.metric).slo
        r = evaluate(slo, m)
        assert r.verdict is SLOVerdict.PASS, r.message
    assert evaluate("thinking_time.p50 <= 100ms", m).verdict is SLOVerdict.FAIL
    assert parse_slo("ttft_incl_reasoning.p99 <= 1s").metric == "ttfa"  # the former name, an alias


def test_reasoning_tokens_come_from_the_server_else_the_tokenizer() -> None:
    no_usage = thinker(0, usage=False)
    assert no_usage.reasoning_token_method.startswith("client tokenizer")
    m = summarize([no_usage, thinker(1, sent=1000.0)])
    assert m.per_request["reasoning_tokens"] == approx([3, 3])
    assert m.scalar("reasoning_tokens_from_usage").value == 1  # the method named: one by usage, one by tokenizer
    served = thinker(0)
    served.usage["completion_tokens_details"]["reasoning_tokens"] = 4  # the server counts one more
    assert summarize([served]).per_request["reasoning_tokens"] == approx([4])


def test_a_tool_call_is_a_phase_of_its_own() -> None:
    r = make_record(0, chunks=[(50, "", "", 2), (60, "", "", 2), (90, "Ok", "", 1)], output_tokens_client=5,
                    tool_tokens_client=4, chunk_tool=['{"a":', ' 1}', ""])
    m = summarize([r])
    pr = m.per_request
    assert pr["ttfa"] == approx([0.050]) and pr["ttft"] == approx([0.090])
    assert pr["itl_tool"] == approx([0.010 / 3])
    assert m.scalar("phase_share_tool").value == approx(40 / 90)


def test_the_aiperf_export_reads_the_phases() -> None:
    """AIPerf's reasoning fields from the same data: its TTFT is ttfa, TTFO our TTFT, reasoning_token_count
    the client's count of the streamed reasoning, usage_reasoning_tokens the server's."""
    from pytest_llmbench.measure.export_aiperf import aiperf_record_lines

    rec = thinker(0)
    (line,) = aiperf_record_lines([rec], summarize([rec]))
    m = {k: v["value"] for k, v in line["metrics"].items()}
    assert m["time_to_first_token"] == approx(50.0) and m["time_to_first_output_token"] == approx(200.0)
    assert m["reasoning_token_count"] == 3 and m["usage_reasoning_tokens"] == 3 and m["output_token_count"] == 3
