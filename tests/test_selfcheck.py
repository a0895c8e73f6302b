"""Client-delay self-check (selfcheck.py): the flagging logic on synthetic data, and a closed loop of
64 streams on the simulator with per-token server timestamps (§4.6.3 option C) whose fields must
exist and agree with each other and with the records. No wall-clock figure is asserted: how large
the client's delay is depends on the machine; only how it is reported is tested."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest
from factories import StartHarness, make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.common.storage import iter_records
from pytest_llmbench.common.jsonable import jsonable
from pytest_llmbench.loadgen.load import ClosedLoop
from pytest_llmbench.loadgen.selfcheck import (
    DELAY_PERCENTILES,
    ClientDelay,
    DelayThresholds,
    assess,
    check_figures,
    option_c_error,
    percentiles_ms,
    procedure_check,
)
from pytest_llmbench.procedures.run import client_for, measure
from pytest_llmbench.report.render import FLAG, _client_delay_table, _dist_rows
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.workloads import build_workload

MS = 1_000_000


def _delay(p50: float, p99: float) -> ClientDelay:
    table = {"p50": p50, "p90": p50, "p95": p99, "p99": p99, "p99.9": p99}
    return ClientDelay(receive_delay_ms=table, receive_n=1000, loop_lag_ms={"p50": 9.0, "p99": 9.0}, loop_n=1000,
                       cpu_s=3.0, wall_s=10.0)


def _record(i: int, error_ms: float, *, ok: bool = True) -> RequestRecord:
    """Sent at 1 s, the server's first token at 1.05 s, the client's ``error_ms`` later (no chunks kept)."""
    return make_record(i, workload="t", spec_input_tokens=4, max_tokens=4, sent=1000, chunks=(), end_ns=None,
                       first_token=1050 + error_ms, server_token_ns=[1050 * MS, 1060 * MS],
                       error_type=None if ok else ErrorType.HTTP_5XX)


# ---------------------------------------------------------------------------------------------- synthetic


def test_percentile_flag_by_share_of_the_figure() -> None:
    delay = _delay(p50=0.2, p99=2.0)
    checks = {c.figure: c for c in check_figures(
        [("ttft_p50", 50.0, 0.100), ("ttft_p99", 99.0, 0.500), ("itl_p50", 50.0, 0.003), ("e2e_p50", 50.0, 2.0)],
        delay)}
    # the receive delay (not the loop lag of 9 ms) is the client delay while a probe ran
    assert checks["ttft_p50"].client_delay_ms == 0.2 and checks["ttft_p50"].share == pytest.approx(0.002)
    assert not checks["ttft_p50"].flagged and not checks["e2e_p50"].flagged  # 0.2 % and 0.01 %
    # 2 ms is more than 1 ms but 0.4 % of a 500 ms TTFT: not a measurable share, not flagged
    assert not checks["ttft_p99"].flagged and checks["ttft_p99"].share == pytest.approx(0.004)
    assert checks["itl_p50"].flagged and checks["itl_p50"].share == pytest.approx(0.2 / 3)  # 6.7 % > 5 %
    # 2 ms at P99 of a 30 ms TTFT is 6.7 %: flagged
    assert check_figures([("ttft_p99", 99.0, 0.030)], delay)[0].flagged
    # a zero figure has no share: the absolute bound decides (0.2 ms under 1 ms, 2 ms over it)
    zero = check_figures([("itl_p50", 50.0, 0.0), ("itl_p99", 99.0, 0.0)], delay)
    assert [(c.share, c.flagged) for c in zero] == [(None, False), (None, True)]
    # the bounds are parameters: a looser share leaves the same figures unflagged
    loose = check_figures([("ttft_p99", 99.0, 0.030), ("itl_p50", 50.0, 0.003)], delay, DelayThresholds(rel=0.1))
    assert not any(c.flagged for c in loose)


def test_delay_at_a_percentile_not_kept_is_the_next_higher_and_loop_lag_without_probe() -> None:
    d = ClientDelay(receive_delay_ms={"p50": 0.1, "p99": 3.0}, receive_n=10)
    assert d.at(50) == 0.1 and d.at(90) == 3.0 and d.at(99) == 3.0 and d.at(99.9) is None
    lag_only = ClientDelay(loop_lag_ms=percentiles_ms([1 * MS] * 50 + [4 * MS] * 50), loop_n=100)
    assert lag_only.source == "loop-lag" and lag_only.at(99) == pytest.approx(4.0)
    assert ClientDelay().at(50) is None and ClientDelay().source is None
    worst = ClientDelay.worst([_delay(0.2, 2.0), _delay(0.5, 1.0), ClientDelay(cpu_s=9, wall_s=10)])
    assert worst is not None and worst.receive_delay_ms["p50"] == 0.5 and worst.receive_delay_ms["p99"] == 2.0
    assert worst.cpu_share == pytest.approx(0.9)
    assert ClientDelay.from_json(_delay(0.2, 2.0).to_json()) == _delay(0.2, 2.0)


def test_option_c_error_flags_the_run_above_5_percent_of_ttft() -> None:
    quiet = [_record(i, 0.3) for i in range(100)] + [_record(100, 50.0, ok=False)]  # failures do not count
    e = option_c_error(quiet)
    assert e is not None and e["n"] == 100 and e["p50_ms"] == pytest.approx(0.3) and e["p99_ms"] == pytest.approx(0.3)
    met = assess([("ttft_p50", 50.0, 0.05), ("ttft_p99", 99.0, 0.1)], _delay(0.1, 0.2), e)
    assert not met["flagged"] and met["reasons"] == [] and met["option_c_error"]["n"] == 100
    # 3 of 100 requests read 20 ms late: P99 is above 5 % of a 100 ms TTFT P99 though the median is not
    noisy = [_record(i, 20.0 if i < 3 else 0.3) for i in range(100)]
    e = option_c_error(noisy)
    assert e is not None and e["p50_ms"] == pytest.approx(0.3) and e["p99_ms"] > 5.0 and e["max_ms"] == pytest.approx(20)
    unmet = assess([("ttft_p50", 50.0, 0.05), ("ttft_p99", 99.0, 0.1)], _delay(0.1, 0.2), e)
    assert unmet["flagged"] and len(unmet["reasons"]) == 1 and "option C" in unmet["reasons"][0]
    assert "P99" in unmet["reasons"][0]
    # the same error against a 10 s TTFT is 0.2 %: the figure is not in doubt (the rule is relative)
    assert not assess([("ttft_p50", 50.0, 10.0), ("ttft_p99", 99.0, 10.0)], _delay(0.1, 0.2), e)["flagged"]
    assert option_c_error([_record(0, 1.0, ok=False)]) is None


def test_procedure_check_reads_the_runs_and_the_report_marks_flagged_percentiles() -> None:
    metrics = {"distributions": {
        "ttft": {"n": 100, "unit": "s", "mean": None, "percentiles": {"p50": {"value": 0.1}, "p99": {"value": 0.03}}},
        "queue_wait": {"n": 100, "unit": "s", "percentiles": {"p99": {"value": 0.001}}},  # server-side: not checked
    }}
    runs = [{"load": {"client_delay": _delay(0.2, 2.0).to_json()}},
            {"load": {"client_delay": _delay(0.1, 0.5).to_json(), "option_c_error": option_c_error([_record(0, 0.4)])}},
            {"load": {}}]  # a sharded run: no client delay
    check = procedure_check(runs, metrics)
    assert check is not None and [f["figure"] for f in check["figures"]] == ["ttft_p50", "ttft_p99"]
    assert [f["flagged"] for f in check["figures"]] == [False, True]  # the worst run's 2 ms at P99: 6.7 % of 30 ms
    assert check["flagged"] and check["option_c_error"]["p99_ms"] == pytest.approx(0.4)
    assert procedure_check([{"load": {}}], metrics) is None
    rows = _dist_rows(metrics, check)
    assert rows[0][0] == "TTFT" and not rows[0][3].endswith(FLAG) and rows[0][6].endswith(FLAG)
    assert rows[-1][0].startswith("Client delay (receive-probe") and rows[-1][3] != "n/a"
    table = _client_delay_table(check)[0]
    assert any(r[0].startswith("Measured error") for r in table["rows"]) and "FLAGGED" in table["notes"][0]


# ---------------------------------------------------------------------------------------------- simulator


def test_closed_loop_64_streams_with_server_timestamps_reports_consistent_fields(harness: StartHarness) -> None:
    cfg = SimConfig(time_scale=0.05, seed=5)
    specs = [s.__class__(**{**s.to_json(), "max_tokens": 16, "prompt_ids": None})
             for s in build_workload("synthetic-uniform", n=64, seed=5).specs]
    with harness(cfg, profile="smoke", time_scale=cfg.time_scale) as (_, ctx):

        async def go():  # type: ignore[no-untyped-def]
            async with client_for(ctx, max_connections=64) as client:
                return await measure(ctx, client, "c64", itertools.cycle(specs), ClosedLoop(64, max_requests=192))

        m = asyncio.run(go())
    run = jsonable(m.summary.to_json())
    load = run["load"]
    assert load["concurrency"] == 64 and load["ok"] == 192
    c = load["client_delay"]
    assert c["source"] == "receive-probe" and c["receive_n"] > 0 and c["loop_n"] >= c["receive_n"]
    for key in ("receive_delay_ms", "loop_lag_ms"):
        values = [c[key][f"p{p:g}"] for p in DELAY_PERCENTILES]
        assert values == sorted(values) and values[0] >= 0
    assert c["cpu_s"] > 0 and c["wall_s"] > 0 and c["cpu_share"] == pytest.approx(c["cpu_s"] / c["wall_s"])
    # option C: every successful request, recomputed from the stored records; positive by causality
    # (the client reads the chunk after the server stamped it, on the same monotonic clock)
    e = load["option_c_error"]
    recs = list(iter_records(Path(run["run_dir"])))
    d = np.array([r.first_token_ns - r.server_token_ns[0] for r in recs if r.ok]) / 1e6
    assert e["n"] == len(d) == 192 and e["min_ms"] > 0
    assert e["p50_ms"] == pytest.approx(np.percentile(d, 50)) and e["p99_ms"] == pytest.approx(np.percentile(d, 99))
    assert e["p50_ms"] <= e["p99_ms"] <= e["max_ms"]
    # the procedure's check: every TTFT/TPOT/E2E/ITL percentile next to the client delay at it
    check = procedure_check([run], run["metrics"])
    assert check is not None
    figures = {f["figure"]: f for f in check["figures"]}
    assert {"ttft_p50", "ttft_p99", "e2e_p99", "itl_p99"} <= set(figures)
    delay = ClientDelay.from_json(c)
    th = DelayThresholds()
    for f in figures.values():
        assert f["client_delay_ms"] == delay.at(f["percentile"])
        if f["value_s"] > 0:  # (a zero figure, e.g. an ITL percentile of tokens sent together, has no share)
            assert f["share"] == pytest.approx(f["client_delay_ms"] / (f["value_s"] * 1e3))
        else:
            assert f["share"] is None
        assert f["flagged"] == (f["share"] > th.rel if f["share"] is not None else f["client_delay_ms"] > th.abs_ms)
    option_c = sum(e[f"p{p}_ms"] > th.rel * figures[f"ttft_p{p}"]["value_s"] * 1e3 for p in (50, 99))
    assert check["flagged"] == (any(f["flagged"] for f in figures.values()) or option_c > 0)
    assert len(check["reasons"]) == sum(f["flagged"] for f in figures.values()) + option_c
    table = _client_delay_table(check)[0]
    assert [r[0] for r in table["rows"]][-1] == "Measured error: client − server first-token time (option C)"
