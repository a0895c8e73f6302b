"""Table cells keep numbers with their unit (issue 28 item 4, results.json 1.5): ``units.Cell``, its JSON,
the one formatter's cell rule (the text the procedures wrote until 1.4, reproduced), the report, the
REPORT read-backs, and documents before 1.5 whose cells are strings."""

from __future__ import annotations

import json
import math
import random

import jsonschema
import numpy as np
import pytest

from pytest_llmbench.compliance import Status
from pytest_llmbench.document.schema import schema
from pytest_llmbench.measure.units import Cell, cell_from_json, cell_json, format_cell, format_value
from pytest_llmbench.procedures.helpers import censored_cell, fmt_censored, fmt_ms, reported
from pytest_llmbench.procedures.result import Table
from pytest_llmbench.report.fmt import fmt_cell
from pytest_llmbench.report.render import _as_text


def _old_fmt_ms(seconds: float | None) -> str:
    """helpers.fmt_ms as the procedures used it until 1.4 (the rule the cell style reproduces)."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "n/a"
    if seconds >= 10:
        return f"{seconds:.1f} s"
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def _values(n: int = 3000) -> list[float]:
    rnd = random.Random(28)
    edges = [0.0, 0.0999, 0.09995, 0.1, 0.9995, 9.9499, 9.95, 9.9999, 10.0, 99.95, 1e-9, 123456.789]
    return edges + [10 ** rnd.uniform(-5, 4) for _ in range(n)]


def test_time_cells_read_as_fmt_ms_did() -> None:
    for v in _values():
        assert format_cell(Cell(v, "s")) == _old_fmt_ms(v) == fmt_ms(v)
        assert format_cell(Cell(v, "s", signed=True)) == "+" + _old_fmt_ms(v)  # 5.10 _fmt_delta
        assert format_cell(Cell(-v, "s", signed=True)) == ("+" if v == 0 else "-") + _old_fmt_ms(v)


def test_rules_of_every_unit_family_reproduce_the_procedures_text() -> None:
    rnd = random.Random(4)
    for _ in range(2000):
        x = rnd.uniform(-2, 2) * 10 ** rnd.randint(-3, 5)
        for d in (0, 1, 2):
            assert format_cell(Cell(x, "fraction", d)) == f"{x:.{d}%}"
            assert format_cell(Cell(x, "fraction", d)) == f"{x * 100:.{d}f}%"  # 5.5/5.6/5.8 _pct
            assert format_cell(Cell(x, "%", d)) == f"{x:.{d}f}%"
            assert format_cell(Cell(x, "%", d, signed=True)) == f"{x:+.{d}f}%"  # 5.7, 5.10 reductions
            assert format_cell(Cell(x, "requests/s", d)) == f"{x:.{d}f}"
            assert format_cell(Cell(x, "tokens/s", d, label=True)) == f"{x:.{d}f} tok/s"
            assert format_cell(Cell(x, "tokens/s/GPU", d, label=True)) == f"{x:.{d}f} tok/s/GPU"
            assert format_cell(Cell(x, "ratio", d)) == f"{x:.{d}f}"
        assert format_cell(Cell(x, "tokens", 0, label=True)) == f"{x:,.0f} tokens"  # 5.5 tokens in flight
        n = rnd.randint(0, 10**6)
        assert format_cell(Cell(n, "requests")) == str(n)  # counts: no separator, no label
        assert format_cell(Cell(np.int64(n), "requests")) == str(n)
    assert format_cell(Cell(None, "s")) == format_cell(Cell(math.nan, "tokens/s", 0)) == "n/a"
    assert format_cell(Cell(float("inf"), "fraction")) == "n/a"


def test_a_cell_is_a_number_with_its_unit_in_the_document() -> None:
    c = Cell(np.float64(0.127), "s")
    assert type(c.value) is float and str(c) == "127 ms" and f"{c}" == "127 ms"
    assert cell_json(c) == {"value": 0.127, "unit": "s"}
    assert cell_json(Cell(12.5, "tokens/s", 1, label=True)) == {"value": 12.5, "unit": "tokens/s", "digits": 1,
                                                                 "label": True}
    assert cell_json(Cell(math.nan, "s"))["value"] is None  # strict JSON: no NaN
    mixed = [">= ", Cell(0.25, "s"), " (", Cell(-0.031, "%", 1, signed=True), ")"]
    assert cell_from_json(json.loads(json.dumps(cell_json(mixed)))) == mixed
    assert format_cell(mixed) == ">= 250 ms (-0.0%)"
    assert type(Cell(np.int64(3)).value) is int
    with pytest.raises(ValueError):
        Cell(1.0, "furlongs")
    with pytest.raises(TypeError):
        Cell("12 ms", "s")  # type: ignore[arg-type]
    assert format_value(0.0084, "s", style="cell") == "8.4 ms"


def test_censored_percentile_is_a_bound_with_its_number() -> None:
    from pytest_llmbench.measure.stats import censored_percentile

    bounded = censored_percentile(np.array([0.1, 0.2, 0.3]), [], 50.0)
    assert censored_cell(bounded) == Cell(bounded.value, "s") and fmt_censored(bounded) == "200 ms"
    lower = censored_percentile(np.array([0.1]), [5.0, 6.0, 7.0], 99.0)
    assert not lower.bounded
    assert censored_cell(lower) == [">= ", Cell(lower.lower, "s")]
    assert fmt_censored(lower) == ">= " + _old_fmt_ms(lower.lower)
    assert censored_cell(None) == "n/a"


def test_table_json_validates_and_renders_as_text() -> None:
    t = Table("Table 1: TTFT Results", ["Metric", "Value"],
              [["Requests", Cell(1000, "requests")], ["TTFT P50", Cell(0.0123, "s")], ["TTFT P99", Cell(None, "s")],
               ["Rate", [Cell(0.5, "requests/s", 2), "/", Cell(0.51, "requests/s", 2)]], ["Source", "measured"]])
    d = t.to_json()
    validator = jsonschema.Draft202012Validator(schema()["$defs"]["table"] | {"$defs": schema()["$defs"]})
    validator.validate(d)
    validator.validate({**d, "rows": [["a", "b"]]})  # a 1.4 table: strings only
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**d, "rows": [[{"value": 1, "unit": "s", "colour": "red"}]]})
    assert _as_text(json.loads(json.dumps(d)))["rows"] == [["Requests", "1000"], ["TTFT P50", "12.3 ms"],
                                                           ["TTFT P99", "n/a"], ["Rate", "0.50/0.51"],
                                                           ["Source", "measured"]]
    assert [fmt_cell(x) for x in ("12 ms", 3, None)] == ["12 ms", 3, None]  # pre-1.5 cells: as they were


def test_reported_reads_cells_as_the_report_shows_them() -> None:
    full = Table("Table 6: ITL Results", ["Metric", "Value"], [["ITL Mean", Cell(0.01, "s")], ["ITL P99",
                                                                                               Cell(None, "s")]])
    blank = Table("Table 7", ["Level", "Jitter"], [["50%", [""]], ["100%", Cell(0.002, "s")]])
    ok = reported("5.4.4-REPORT-1", "ITL", [(full, "ITL Mean")], [full])
    assert ok.status is Status.MET
    # "n/a" is not a value (issue 48, fidelity-audit-3 finding 7): a row without one leaves the item unmet
    na = reported("5.4.4-REPORT-1", "ITL", [(full, "ITL Mean"), (full, "ITL P99")], [full])
    assert na.status is Status.UNMET and "'ITL P99' reads 'n/a' in 1 of 1 rows" in na.reason
    gap = reported("5.4.4-REPORT-1", "ITL", [(blank, "Jitter")], [blank])
    assert gap.status is Status.UNMET and "'Jitter' blank" in gap.reason
