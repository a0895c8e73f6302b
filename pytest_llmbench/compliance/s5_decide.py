"""Deciders of the items only a procedure can observe (§5.1–§5.8): the procedure passes what it saw
on its runs, its tables and its plots; the decision and its thresholds live here and in
``data/compliance_items.yaml``. Each decider returns a row
(:func:`.engine.row`: the observation, the wording of each outcome, evidence) and can be met and can be
unmet (tests/test_compliance_items.py enumerates both for every one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..common import draft
from .engine import decides, item, item_data, row
from .verdict import Check

__all__ = ["listed"]


def listed(name: str) -> list[Any]:
    """One list of ``data/compliance_items.yaml`` (``lists:``), e.g. the rows Table 1 must hold."""
    return list(item_data()["lists"][name])


def _blank(v: Any) -> bool:
    return v is None or not str(v).strip() or str(v).strip().lower() in ("n/a", "none", "nan")


# ---------------------------------------------------------------------------------------------- §5.1


@decides("5.1.2-MUST-2")
def _request_count(rid: str, *, planned: int, sent: int) -> Check:
    """§5.1.2: the total request count is defined, and the run sent exactly that many."""
    return row(rid, planned >= 1 and sent == planned, f"request count {planned} defined; {sent} sent",
               f"request count {planned} defined but {sent} sent" if planned >= 1 else
               f"request count not defined ({planned!r})", figure=planned, planned=planned, sent=sent)


@decides("5.1.2-MUST-3", "5.1.2-MUST-4")
def _sample_size(rid: str, *, successful: int, ttft_samples: int) -> Check:
    """§5.1.2.1: the request count is >= 1000 for P99, >= 10,000 for P99.9, counted as successful requests.

    A successful request that streamed no non-whitespace content has no TTFT (§5.1.3.1); the evidence
    names how many, and Table 1 flags a percentile whose sample count is short (§5.1.4.3).
    """
    need, what = (int(draft.value(item(rid)["draft"])), item(rid)["percentile"])
    short = successful - ttft_samples
    ttft = (f"; TTFT defined for {ttft_samples} ({short} streamed no non-whitespace content, §5.1.3.1)"
            if short > 0 else "")
    return row(rid, successful >= need, f"{successful} >= {need} successful requests for {what}{ttft}",
               f"{successful} requests < {need} required for {what}{ttft}", figure=successful, required=need,
               ttft_samples=ttft_samples)


@decides("5.1.3-MUST-1")
def _pre_content(rid: str, *, pre_content: int, requests: int, noted: bool) -> Check:
    """§5.1.3.1: when the SUT sends non-content chunks first, the report says so and how TTFT is timed."""
    if pre_content == 0:
        return row(rid, None, na=f"none of {requests} requests sent a non-content chunk before the first "
                   "content token (measured)", pre_content_requests=0)
    return row(rid, bool(noted), f"{pre_content} of {requests} requests sent non-content chunks first; the report "
               "notes it and times TTFT to the first content token",
               f"{pre_content} of {requests} requests sent non-content chunks first, and the report does not "
               "say so", figure=pre_content, source="measured", pre_content_requests=pre_content)


@decides("5.1.4-MUST-1")
def _percentiles(rid: str, *, reported: Mapping[str, Any]) -> Check:
    """§5.1.4.1: every TTFT percentile (P50, P90, P95, P99, P99.9) has a value in the written Table 1."""
    want = listed("ttft_percentile_rows")
    missing = [r for r in want if _blank(reported.get(r))]
    return row(rid, not missing, "Table 1: " + ", ".join(f"{r} {reported.get(r)}" for r in want),
               f"Table 1 lacks a value for {', '.join(missing)}", figure={r: reported.get(r) for r in want})


@decides("5.1.4-MUST-2")
def _sample_count(rid: str, *, n_ok: int, notes: Sequence[str]) -> Check:
    """§5.1.4.3: the report states the sample count (read back from Table 1's notes)."""
    stated = any(f"n={n_ok}" in n for n in notes)
    return row(rid, stated, f"Table 1 states the sample count n={n_ok}",
               f"Table 1 does not state the sample count n={n_ok}", figure=n_ok)


@decides("5.1.4-SHOULD-1")
def _buckets(rid: str, *, buckets: Sequence[str]) -> Check:
    """§5.1.4.2: TTFT by input length in the RECOMMENDED buckets (read back from Table 2's rows)."""
    want = listed("ttft_input_buckets")
    other = [b for b in buckets if b not in want]
    ok = bool(buckets) and not other
    return row(rid, ok, f"Table 2 rows {', '.join(buckets)}: RECOMMENDED buckets ({len(buckets)} populated)",
               f"Table 2 rows {', '.join(other)} are not RECOMMENDED buckets" if other else "Table 2 has no row",
               figure=list(buckets))


@decides(*(f"5.1.5-MUST-{i}" for i in range(1, 9)))
def _summary_line(rid: str, *, line: str | None, what: str, key: str | None = None, source: str = "") -> Check:
    """§5.1.5: one line of the configuration summary, known from the run (or declared: ``key``, comma-separated
    when several keys answer it)."""
    keys = [k.strip() for k in key.split(",")] if key else []
    if _blank(line) and keys:
        return row(rid, None, needs=f"{what} not known to the client: declare " + " and ".join(f"'{k}'" for k in keys),
                   key=keys[0], source="none")
    return row(rid, not _blank(line), f"{what}: {line}", f"{what} missing from the summary", figure=line,
               source=source if not _blank(line) else "none")


@decides("5.1.5-SHOULD-1")
def _table1(rid: str, *, rows: Sequence[str]) -> Check:
    """§5.1.5: results as a table with the RECOMMENDED rows (read back from Table 1)."""
    want = listed("ttft_table1_rows")
    missing = [r for r in want if r not in rows]
    return row(rid, not missing, f"Table 1 with rows {', '.join(want)}", f"Table 1 lacks rows {', '.join(missing)}",
               figure=len(rows))


@decides("5.1.5-SHOULD-2")
def _ttft_plot(rid: str, *, samples: int) -> Check:
    """§5.1.5: a TTFT histogram / CDF (the samples handed to the report's plots)."""
    return row(rid, samples > 0, f"TTFT histogram and CDF in report.html from {samples} samples",
               "no TTFT samples to plot", figure=samples)


# ---------------------------------------------------------------------------------------------- §5.2


@decides("5.2.2-MUST-2")
def _level_duration(rid: str, *, level_duration_s: float, send_windows_s: Sequence[float]) -> Check:
    """§5.2.2: the test duration at each load level is defined (and the levels ran)."""
    ok = level_duration_s > 0 and bool(send_windows_s)
    shortest = min(send_windows_s) if send_windows_s else None
    return row(rid, ok, f"test duration per load level: {level_duration_s:g} s ({len(send_windows_s)} levels, "
               f"shortest send window {shortest:.1f} s)" if ok else "",
               f"level duration {level_duration_s!r} s, {len(send_windows_s)} levels ran",
               figure=level_duration_s, shortest_send_window_s=shortest)


@decides("5.2.2-SHOULD-1")
def _level_duration_recommended(rid: str, *, send_windows_s: Sequence[float]) -> Check:
    """§5.2.2.1: RECOMMENDED 300 s per level, judged on the send windows the levels really had
    (start → the stop condition; 1 % timer slack), not on the profile's setting."""
    need = draft.value("throughput.level_recommended_s")
    if not send_windows_s:
        return row(rid, False, unmet="no load level ran")
    shortest = min(send_windows_s)
    return row(rid, shortest >= 0.99 * need,
               f"every level's send window >= {need:g} s (shortest {shortest:.1f} s, {len(send_windows_s)} levels)",
               f"shortest level send window {shortest:.1f} s < the RECOMMENDED {need:g} s "
               f"({len(send_windows_s)} levels)", figure=shortest)


@decides("5.2.2-MUST-4", "5.2.2-MUST-5")
def _search_range(rid: str, *, loop: str, start: float, stop: float, step: float | None, note: str = "") -> Check:
    """§5.2.2: the search range (rate for open loop, concurrency for closed loop) and its step."""
    mine = item(rid)["loop"]  # open: the arrival-rate range (MUST-4); closed: the concurrency range (MUST-5)
    if loop != mine:
        return row(rid, None, na=f"{loop}-loop search: no {'arrival-rate' if mine == 'open' else 'concurrency'}"
                   " range")
    what = "arrival rate" if mine == "open" else "concurrency"
    step_txt = "x2 (doubling)" if step is None else f"{step:g}"
    ok = start > 0 and stop >= start and (step is None or step > 0)
    return row(rid, ok, f"{what} {start:g}..{stop:g}, step {step_txt}{' (' + note + ')' if note else ''}",
               f"{what} range {start!r}..{stop!r} step {step!r} is not a defined search range",
               figure=[start, stop, step])


# ---------------------------------------------------------------------------------------------- §5.4


@decides("5.4.2-MUST-1")
def _itl_min_output(rid: str, *, min_output_tokens: int, ok_requests: int, short_requests: int,
                    shortest: int | None) -> Check:
    """§5.4.2: every request produces at least 50 output tokens (measured on the records)."""
    need = int(draft.value("itl.min_output_tokens"))
    if min_output_tokens < need:
        return row(rid, False, unmet=f"min_output_tokens {min_output_tokens} < {need}")
    if ok_requests == 0:
        return row(rid, False, unmet="no successful request")
    return row(rid, short_requests == 0, f"all {ok_requests} successful requests produced >= {need} output "
               f"tokens (shortest {shortest}; min_tokens + ignore_eos)",
               f"{short_requests} of {ok_requests} requests produced < {need} output tokens (shortest "
               f"{shortest}): the server did not honour min_tokens/ignore_eos", figure=shortest,
               short_requests=short_requests)


@decides("5.4.2-SHOULD-2")
def _itl_levels(rid: str, *, fractions: Sequence[float]) -> Check:
    """§5.4.2: RECOMMENDED load levels 25 %, 50 %, 75 %, 90 % of saturation."""
    want = draft.value("itl.levels")
    ok = all(any(abs(f - x) < 1e-6 for f in fractions) for x in want)
    txt = ", ".join(f"{f:.0%}" for f in fractions)
    return row(rid, ok, f"levels {txt} of saturation",
               f"levels {txt} do not include " + ", ".join(f"{x:.0%}" for x in want) + " of saturation",
               figure=list(fractions))


@decides("5.4.3-MUST-1")
def _itl_span(rid: str, *, checked: int, mismatched: int) -> Check:
    """§5.4.3: TTFT is never an ITL sample: each request's samples span exactly first-to-last token."""
    return row(rid, checked > 0 and mismatched == 0,
               f"for all {checked} requests the ITL samples add up to exactly first-to-last token time: no "
               "sample contains the TTFT",
               f"{mismatched} of {checked} requests' ITL samples do not span first-to-last token" if checked
               else "no request to check", figure=mismatched, requests_checked=checked)


# ---------------------------------------------------------------------------------------------- §5.5-§5.8


@decides("7.4-SHOULD-3")
def _cascading(rid: str, *, sampled: bool, stop_rule: str) -> Check:
    """§7.4: watch for cascading failures (server /metrics sampled during every level)."""
    return row(rid, bool(sampled),
               f"server /metrics (queue depth, preemptions) sampled during every level; {stop_rule}",
               "the SUT's /metrics could not be sampled during the runs: cascading failures watched through "
               "client-side errors only", figure=sampled)


def _basis_gap(standing: str | None, shape: str | None, own_shape: str | None) -> str | None:
    """Why a fraction of this capacity is not the fraction the draft asks for, or None (issue 48)."""
    if standing == "lower-bound":
        return ("the capacity is a lower bound (no level saturated in its search): each level's real fraction of "
                "capacity is below its nominal one")
    if shape and own_shape and shape != own_shape:
        return f"the capacity was measured on {shape}; this procedure sends {own_shape}: the fraction refers to another load"
    return None


@decides("5.1.2-MUST-6")
def _fraction_rate(rid: str, *, ok: bool | None = None, rate: float | None = None, fraction: float | None = None,
                   capacity: float | None = None, standing: str | None = None, capacity_source: str = "",
                   **plain: Any) -> Check:
    """§5.1.2.2 "Arrival rate: requests per second", given as a fraction of capacity (5.1's default
    ``capacity_fraction=0.5``): the rate that ran is that fraction only of a measured or declared capacity;
    of a lower bound it is a rate the tester has to confirm (issue 48: never a silent met). Without a
    fraction (an absolute rate, the facts' evaluator; a replayed trace's mean rate, unmet with one send
    time) it is a plain row of the caller's observation ``ok`` (``met``, ``unmet`` ...)."""
    if rate is None or fraction is None or capacity is None:
        return row(rid, ok, **plain)
    text = (f"arrival rate {rate:.4g} req/s = {fraction:g} x capacity {capacity:.4g} req/s "
            f"({standing or 'standing not recorded'}: {capacity_source})")
    gap = _basis_gap(standing, None, None)
    if gap:
        return row(rid, None, needs=f"{text}, but {gap}: the rate run is below {fraction:g} of the real capacity; "
                   f"give load=poisson(rate=...) or --llm-capacity, or declare '{rid}' to accept {rate:.4g} req/s",
                   key=rid, figure=rate, fraction=fraction, capacity=capacity, standing=standing)
    return row(rid, True, text, figure=rate, fraction=fraction, capacity=capacity, standing=standing,
               source="declared" if standing == "declared" else "measured")


@decides("5.3.3-PARAM-1", "5.4.2-PARAM-2")
def _capacity_basis(rid: str, *, rate: float | None, source: str, standing: str | None,
                    shape: str | None = None, own_shape: str | None = None, what: str = "") -> Check:
    """The capacity a procedure's levels are fractions of (§5.3.3 step 1, §5.4.2): measured on this
    procedure's request shape, or declared; a lower bound or another shape is unmet, never a silent met."""
    if rate is None:
        return row(rid, False, unmet="no request-rate capacity")
    text = f"{what}capacity {rate:.4g} req/s ({standing}): {source}"
    gap = _basis_gap(standing, shape, own_shape)
    return row(rid, gap is None, text, f"{text}; {gap}", figure=rate, standing=standing, request_shape=shape,
               source="declared" if standing == "declared" else "measured")


@decides("5.6.2-SHOULD-1")
def _contention_load(rid: str, *, fraction: float | None, rate: float | None, queue_growing: bool | None,
                     standing: str | None = None) -> Check:
    """§5.6.2: RECOMMENDED load at 70–90 % of saturation (and the SUT's queue did not grow); a fraction of a
    lower bound (the saturation search did not reach a plateau) is not a fraction of saturation."""
    lo, hi = draft.value("fairness.load_band")
    gap = _basis_gap(standing, None, None)
    if gap and fraction is not None:
        return row(rid, False, unmet=f"offered load {fraction:.0%} of the probed throughput, but {gap}",
                   figure=fraction, fraction=fraction, standing=standing)
    if queue_growing:
        return row(rid, False, unmet="the SUT's queue grew during the mixed run: the offered load "
                   + (f"({fraction:.0%} of the request-rate capacity) " if fraction is not None else "")
                   + "is above saturation for this class mix", fraction=fraction, queue_growing=True)
    if fraction is None:
        return row(rid, False, unmet=f"load given as an absolute rate ({rate!r} req/s): its fraction of saturation is "
                   f"unknown; use capacity_fraction in [{lo}, {hi}]")
    return row(rid, lo <= fraction <= hi, f"offered load {fraction:.0%} of saturation",
               f"offered load {fraction:.0%} of saturation, outside the RECOMMENDED {lo:.0%}-{hi:.0%}",
               figure=fraction, fraction=fraction)


@decides("5.7.2-MUST-1")
def _cache_configurations(rid: str, *, ran: Sequence[str], state_off: Any, state_on: Any) -> Check:
    """§5.7.2: runs with the prefix cache disabled and enabled. The states are those the SUT reported
    (measured); when it reports none, the tester declares the item by its id (how the cache was switched)."""
    missing = [r for r in ("disabled", "enabled") if r not in ran]
    if missing:
        return row(rid, False, unmet=f"missing the {' and '.join(missing)} run", ran=list(ran))
    if state_off is False and state_on is True:
        return row(rid, True, "runs with the prefix cache disabled and enabled; the SUT reported each state", "",
                   figure=[state_off, state_on], source="measured")
    if state_off is True or state_on is False:
        return row(rid, False, unmet=f"the SUT reported prefix caching {state_off!r} in the disabled run and "
                   f"{state_on!r} in the enabled run", disabled_state=state_off, enabled_state=state_on)
    return row(rid, None, needs="runs with the prefix cache disabled and enabled, but the SUT did not report its "
               f"state: declare '{rid}' (how the cache was switched) in the declarations file", key=rid, source="none")
