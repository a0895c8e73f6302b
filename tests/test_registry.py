"""The metric registry (registry.py): every name the SLOs, the terminal table and the reports use
resolves to one registered metric with a unit from the one vocabulary (units.py) and a direction."""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import MS, make_record

from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.document.mvr import KEY_RESULT_UNITS
from pytest_llmbench.document.procedure import DIST_FIGURES, SCALAR_FIGURES
from pytest_llmbench.measure import registry, slo, units
from pytest_llmbench.measure.summary import DEFINITIONS, UNITS, summarize
from pytest_llmbench.report.terminal import HEADER, TERMINAL_COLUMNS


def _records(n: int = 12) -> list[RequestRecord]:
    """Sent on schedule every 50 ms from 1 s, TTFT 80 + 3 i ms, 4 tokens 10 ms apart, the end 1 ms after."""
    return [make_record(i, workload="walk", spec_input_tokens=50, max_tokens=4, sent=1000 + 50 * i, ttft=80 + 3 * i,
                        text=" a", end=1000 + 50 * i + 80 + 3 * i + 31, intended_ns=(1000 + 50 * i) * MS,
                        output_tokens_client=4, input_tokens_client=50) for i in range(n)]


def _resolves(name: str) -> registry.Metric:
    m = registry.lookup(name)
    assert m.unit in units.UNITS, (name, m.unit)
    assert m.direction in registry.DIRECTIONS, name
    assert m.definition and m.title, name
    return m


def test_every_slo_name_and_alias_resolves_to_one_metric_with_a_direction() -> None:
    names = set(slo.METRICS) | {a for m in registry.slo_metrics() for a in m.aliases}
    assert {"ttft", "tpot", "itl", "success_rate", "output_throughput", "time_to_first_token"} <= names
    for name in names:
        m = _resolves(name)
        assert m.slo and m.direction != "neutral", name
        info = slo.METRICS[m.name]
        assert info.unit == m.family and info.higher_is_better == m.higher_is_better, name
    for m in registry.slo_metrics():
        for alias in m.aliases:
            assert slo.parse_slo(f"{alias} {'>=' if m.higher_is_better else '<='} 1{_unit_for(m)}").metric == m.name


def _unit_for(m: registry.Metric) -> str:
    return {"time": "s", "fraction": "%", "ratio": ""}.get(m.family, "")


def test_every_terminal_column_and_report_figure_resolves() -> None:
    assert HEADER[2:-2] == tuple(title for title, _ in TERMINAL_COLUMNS)
    figure_names = [f for _, f in TERMINAL_COLUMNS] + [f for f, _, _ in DIST_FIGURES] + list(SCALAR_FIGURES)
    for name in figure_names:
        fig = registry.FIGURES[name]
        m = _resolves(fig.metric)
        assert (fig.statistic is None) == (m.kind == "scalar"), name
    for key, unit in KEY_RESULT_UNITS.items():
        assert unit in units.UNITS, key


def test_every_figure_summarize_computes_is_registered_with_the_same_unit() -> None:
    m = summarize(_records())
    for name, est in m.scalars.items():
        reg = _resolves(name)
        assert est.unit == reg.unit, (name, est.unit, reg.unit)
    for name, dist in m.distributions.items():
        reg = _resolves(name)
        assert dist.unit == reg.unit, (name, dist.unit, reg.unit)
    numeric = [k for k, v in m.per_request.columns.items() if v.dtype == np.float64]
    assert "ttft" in numeric and "output_tps_per_request" in numeric
    for name in numeric:  # every per-request column (records table) has a registered unit
        assert _resolves(name).unit == UNITS[name], name


def test_definitions_come_from_the_registry_and_match_the_computation() -> None:
    assert DEFINITIONS["output_tps_per_request"].startswith("OSL / E2E")  # computed as OSL/E2E (metrics.py)
    assert "OSL / E2E" in slo.METRICS["output_tps_per_request"].description
    assert slo.METRICS["e2e_from_schedule"].description.startswith("end - intended")
    assert slo.parse_slo("schedule_latency.p99 <= 1 s").metric == "e2e_from_schedule"  # the former name
    m = summarize(_records(3))
    osl, e2e = m.per_request["osl"], m.per_request["e2e"]
    assert m.per_request["output_tps_per_request"] == pytest.approx(osl / e2e)
    assert "§5.2.3.2" in DEFINITIONS["steady_state_window"]


def test_lookup_names_the_unknown_metric_and_gives_directions() -> None:
    with pytest.raises(KeyError, match="unknown metric 'ttfb'"):
        registry.lookup("ttfb")
    assert registry.higher_is_better("output_throughput") and not registry.higher_is_better("ttft")
    assert registry.lookup("output_throughput_full") is registry.lookup("output_throughput")


@pytest.mark.parametrize("unit", sorted(units.UNITS))
def test_one_formatter_shows_every_unit(unit: str) -> None:
    for style in ("table", "compact"):
        text = units.format_value(1.5, unit, style=style)  # type: ignore[arg-type]
        assert text != "n/a" and "1" in text
        assert units.format_value(math.nan, unit, style=style) == "n/a"  # type: ignore[arg-type]


def test_adding_a_metric_is_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/metrics.md's worked example: one decorated function is computed, summarised, defined and usable
    in an SLO; a pass and a fail of that SLO follow the hand-computed value."""
    for name in ("METRICS", "_BY_NAME"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    for name in ("METRICS", "_ALIASES"):
        monkeypatch.setattr(slo, name, dict(getattr(slo, name)))

    @registry.metric("Decode time", "s", "lower", section="§5.4.3", slo=True)
    def decode_time(e2e: np.ndarray, ttft: np.ndarray) -> np.ndarray:
        """E2E - TTFT: time from the first content token to the end of the response"""
        return e2e - ttft

    # first chunk 100 ms after the send, then 4 more 10 ms apart: the response ends 140 ms after the send
    recs = [make_record(i, sent=10 * i, ttft=100, itl=10, n_chunks=5, output_tokens_server=5) for i in range(3)]
    m = summarize(recs)
    assert m.per_request["decode_time"] == pytest.approx([0.040] * 3)
    assert m.percentile("decode_time", 50).value == pytest.approx(0.040)
    assert m.definitions["decode_time"] == "E2E - TTFT: time from the first content token to the end of the response"
    # 3 of 3 requests within 50 ms: a P50 is shown at 80 % (at 95 % it takes 5)
    assert slo.evaluate(slo.parse_slo("decode_time.p50 <= 50 ms confidence=80%"), m).passed
    assert slo.evaluate(slo.parse_slo("decode_time.p50 <= 30 ms confidence=80%"), m).verdict is slo.SLOVerdict.FAIL


def test_a_metric_reading_nothing_known_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("METRICS", "_BY_NAME"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))

    @registry.metric("Broken", "s", "lower")
    def broken(no_such_field: np.ndarray) -> np.ndarray:
        """reads a field no frame has"""
        return no_such_field

    with pytest.raises(ValueError, match=r"metric 'broken' reads \['no_such_field'\]"):
        summarize([make_record(0)])


def test_every_declaration_is_complete() -> None:
    """Each computed metric has a definition (its docstring), a known unit and reads only known names."""
    frame_and_options = {"n", "index", "request_class", "error", "ok", "failed", "cancelled", "okf", "sent_ns",
                         "end_ns", "has_end", "duration", "reasoning_streamed", "chunk_counts", "chunks",
                         "chunk_token_sum", "server_token_counts", "slos", "itl_option", "gpu_count",
                         "percentiles", "confidence", "batches", "prefill_deadline", "decode_deadline",
                         "reading_speed", "ttft_allowance", "alpha", "steady", "windows", "per_request"}
    from pytest_llmbench.measure.frame import _TIMES, FLOAT_FIELDS

    order = registry.evaluation_order(frame_and_options | set(_TIMES) | set(FLOAT_FIELDS))
    for m in registry.METRICS.values():
        assert m.definition and m.unit in units.UNITS, m.name
        if m.measurement is None:
            assert m.compute is not None and m.name in order, m.name
