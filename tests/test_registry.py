"""The metric registry (registry.py): every name the SLOs, the terminal table and the reports use
resolves to one registered metric with a unit from the one vocabulary (units.py) and a direction."""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import MS, make_record

from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.document.build import DIST_FIGURES, KEY_RESULT_UNITS, SCALAR_FIGURES
from pytest_llmbench.measure import registry, slo, units
from pytest_llmbench.measure.metrics import DEFINITIONS, UNITS, summarize
from pytest_llmbench.report.terminal import HEADER


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
    assert HEADER[2:-2] == tuple(title for title, _ in registry.TERMINAL_COLUMNS)
    figure_names = [f for _, f in registry.TERMINAL_COLUMNS] + [f for f, _, _ in DIST_FIGURES] + list(SCALAR_FIGURES)
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
    assert slo.METRICS["schedule_latency"].description.startswith("end - intended")
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
