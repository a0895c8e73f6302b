"""The one unit vocabulary and the one number formatter (computes nothing; report/ and slo.py read it).

Every figure stores its value in a base unit named here (times in seconds, §4.7); a unit belongs
to a *family* that says how it is parsed in an SLO and how it is shown. :func:`format_value`
shows a value in its unit in one of two styles: ``"table"`` (reports and terminal: 4 significant
digits, times in ms below 10 s) or ``"compact"`` (SLO messages: ``612.3 ms``, ``2.5 s``,
``2000 tok/s``) — and, through :func:`format_cell`, a number in a procedure's draft table
(:class:`Cell`: the value with its unit, shown by the unit's cell rule).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

__all__ = ["FAMILIES", "UNITS", "Cell", "CellValue", "Unit", "cell_from_json", "cell_json", "compact_num",
           "fmt_num", "fmt_pct", "fmt_time", "format_cell", "format_value", "is_cell", "unit_family"]

Style = Literal["table", "compact", "cell"]

#: Unit families: ``time`` (seconds), ``token_rate``, ``request_rate``, ``fraction`` (0..1, shown
#: as %), ``ratio`` (shown plainly), ``tokens``, ``count`` (requests, events, samples), ``percent``.
FAMILIES = ("time", "token_rate", "request_rate", "fraction", "ratio", "tokens", "count", "percent")


@dataclass(frozen=True)
class Unit:
    """A base unit: its name in results.json, its family and how it is labelled on screen."""

    name: str
    family: str
    label: str  # shown after the number ("tok/s"); times choose ms/s/µs themselves
    short: str = ""  # the label in a draft table cell when it is shorter ("tok/s/GPU"); "" = ``label``

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unit {self.name}: family must be one of {FAMILIES}, not {self.family!r}")


UNITS: dict[str, Unit] = {u.name: u for u in (
    Unit("s", "time", "s"),
    Unit("s/token", "time", "s/token"),
    Unit("tokens/s", "token_rate", "tok/s"),
    Unit("tokens/s/GPU", "token_rate", "tokens/s/GPU", "tok/s/GPU"),
    Unit("requests/s", "request_rate", "req/s"),
    Unit("fraction", "fraction", "%"),
    Unit("ratio", "ratio", "ratio"),
    Unit("tokens", "tokens", "tokens"),
    Unit("tokens/preemption", "tokens", "tokens/preemption"),
    Unit("requests", "count", "requests"),
    Unit("events", "count", "events"),
    Unit("samples", "count", "samples"),
    Unit("bytes", "count", "bytes"),
    Unit("%", "percent", "%"),
)}

#: A family name given where a unit is expected (``format_quantity(x, "time")``) means its base unit.
_FAMILY_BASE = {"time": "s", "token_rate": "tokens/s", "request_rate": "requests/s", "fraction": "fraction",
                "ratio": "ratio", "tokens": "tokens", "count": "requests", "percent": "%"}


def unit_family(unit: str) -> str:
    """The family of a unit name (or of a family name itself); ``ratio`` for an unknown unit."""
    if unit in UNITS:
        return UNITS[unit].family
    return unit if unit in FAMILIES else "ratio"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --- table style ------------------------------------------------------------------------------
def fmt_num(v: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits, thousands separators, no exponent below 1e9."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if not _finite(v):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if v == 0:
        return "0"
    v = float(f"{v:.{digits}g}")  # round first: 9.9999999 -> 10.00, not 10.000
    a = abs(v)
    if a >= 1e9 or a < 1e-4:
        return f"{v:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a)))
    return f"{v:,.{decimals}f}"


def fmt_time(seconds: Any) -> str:
    """Seconds shown as ms below 10 s (``123.4 ms``), else as s (``12.35 s``)."""
    if not _finite(seconds):
        return "n/a"
    if abs(seconds) < 1e-9:  # below 1 ns: floating-point noise of a constant series
        return "0 ms"
    if abs(seconds) >= 10:
        return f"{fmt_num(float(seconds))} s"
    return f"{fmt_num(float(seconds) * 1000.0)} ms"


def fmt_pct(fraction: Any, digits: int = 4) -> str:
    if not _finite(fraction):
        return "n/a"
    return f"{fmt_num(float(fraction) * 100.0, digits)}%"


def _table(v: float, unit: str) -> str:
    u = UNITS.get(unit)
    if unit == "s":
        return fmt_time(v)
    if unit == "fraction":
        return fmt_pct(v)
    if u is not None and u.family == "count" and float(v).is_integer():
        return f"{int(v):,} {unit}"
    if unit == "tokens" and float(v).is_integer():
        return f"{int(v):,} tokens"
    if unit == "%":
        return f"{fmt_num(float(v))}%"
    label = u.label if u is not None else unit
    return f"{fmt_num(float(v))} {label}".rstrip()


# --- cell style: a number in a procedure's draft table ----------------------------------------
def _cell(v: float, unit: str, digits: int | None, label: bool, signed: bool) -> str:
    """The draft tables' rule per unit (what the procedures wrote as text until results.json 1.5):

    - times (``s``, ``s/token``): ``8.4 ms`` below 100 ms, ``127 ms`` below 10 s, ``12.3 s`` above;
    - ``fraction``: a percentage with ``digits`` decimals (default 1): ``98.7%``;
    - ``%`` (already a percentage): ``12.5%``, same decimals;
    - any other unit: ``digits`` decimals (an integer as it is, no separator), then the unit's label
      when ``label`` (counts and tokens with their label get thousands separators: ``1,234 tokens``).

    ``signed`` shows the sign always (``+12 ms``, ``-3.5%``): a difference.
    """
    family = unit_family(unit)
    if family == "time":
        a = abs(v) if signed else v
        sign = ("+" if v >= 0 else "-") if signed else ""
        if a >= 10:
            return f"{sign}{a:.1f} s"
        ms = a * 1000
        return f"{sign}{ms:.1f} ms" if ms < 100 else f"{sign}{ms:.0f} ms"
    plus = "+" if signed else ""
    if family == "fraction":
        return f"{v:{plus}.{1 if digits is None else digits}%}"
    if family == "percent":
        return f"{v:{plus}.{1 if digits is None else digits}f}%"
    u = UNITS.get(unit)
    group = "," if label and family in ("tokens", "count") else ""
    if digits is None and isinstance(v, int):
        text = f"{v:{plus}{group}d}"
    elif digits is None:
        text = ("+" if signed and v >= 0 else "") + fmt_num(float(v))
    else:
        text = f"{v:{plus}{group}.{digits}f}"
    if not label or not unit:
        return text
    return f"{text} {(u.short or u.label) if u is not None else unit}"


@dataclass(frozen=True)
class Cell:
    """A number in a procedure's table with its unit; a report shows it by the unit's cell rule.

    ``value`` in the unit's base (times in seconds, fractions 0..1; None: nothing measured, ``n/a``);
    ``digits``: decimals shown (None: the unit's rule); ``label``: the unit's label follows the number
    (times and percentages always show theirs); ``signed``: a difference, its sign always shown.
    In results.json (1.5) ``{"value": 0.127, "unit": "s"}`` plus ``digits``/``label``/``signed`` when
    set. A table cell is words (a ``str``), a ``Cell``, or a list of both read in a row (``[">= ",
    Cell(...)]``): :data:`CellValue`.
    """

    value: float | int | None
    unit: str = ""
    digits: int | None = None
    label: bool = False
    signed: bool = False

    def __post_init__(self) -> None:
        v = self.value
        if v is not None:
            if isinstance(v, (bool, str)) or not hasattr(v, "__float__"):
                raise TypeError(f"Cell value must be a number or None, not {type(v).__name__}")
            if type(v) not in (int, float):  # numpy scalars: plain Python numbers in the document
                v = int(v) if hasattr(v, "__index__") else float(v)
            object.__setattr__(self, "value", v if _finite(v) else None)  # NaN/inf: no value (strict JSON)
        if self.unit and self.unit not in UNITS:
            raise ValueError(f"Cell unit {self.unit!r} is not one of units.UNITS")

    def __str__(self) -> str:
        return format_cell(self)

    def __float__(self) -> float:
        if self.value is None:
            raise TypeError("a Cell without a value (n/a) has no number")
        return float(self.value)

    def __int__(self) -> int:
        return int(float(self))

    def to_json(self) -> dict[str, Any]:
        return cell_json(self)


#: A table cell: words, a number with its unit, or both in a row.
CellValue = Union[str, Cell, "list[str | Cell]"]


def is_cell(x: Any) -> bool:
    """``x`` is a cell's JSON (``{"value": …, "unit": …}``, no ``n``: not an Estimate)."""
    return isinstance(x, Mapping) and "value" in x and "unit" in x and "n" not in x


def cell_json(c: Any) -> Any:
    """A table cell as results.json stores it: a string, ``{"value", "unit", …}``, or a list of both."""
    if isinstance(c, Cell):
        d: dict[str, Any] = {"value": c.value, "unit": c.unit}
        if c.digits is not None:
            d["digits"] = c.digits
        if c.label:
            d["label"] = True
        if c.signed:
            d["signed"] = True
        return d
    if isinstance(c, (list, tuple)):
        return [cell_json(x) for x in c]
    return c


def cell_from_json(x: Any) -> Any:
    """The inverse of :func:`cell_json` (a string stays a string: documents before 1.5 hold only strings)."""
    if is_cell(x):
        return Cell(x["value"], x["unit"], x.get("digits"), bool(x.get("label")), bool(x.get("signed")))
    if isinstance(x, list):
        return [cell_from_json(y) for y in x]
    return x


def format_cell(c: Any) -> str:
    """A table cell as text: words as they are, a number by its unit's cell rule, parts joined."""
    if isinstance(c, str):
        return c
    if isinstance(c, (list, tuple)):
        return "".join(format_cell(x) for x in c)
    if isinstance(c, Cell):
        return format_value(c.value, c.unit, style="cell", digits=c.digits, label=c.label, signed=c.signed)
    if is_cell(c):
        return format_cell(cell_from_json(c))
    return "n/a" if c is None else str(c)


# --- compact style ----------------------------------------------------------------------------
def compact_num(x: float) -> str:
    """A compact number: 612.3, 500, 2000, 0.9, 1.25."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) >= 1000:
        return f"{x:.0f}"
    if abs(x) >= 1e-3:
        s = f"{x:.4g}"
        return s if "e" not in s else f"{x:.0f}"
    return f"{x:.3e}"


def _time_unit(seconds: float) -> tuple[str, float]:
    a = abs(seconds)
    if a >= 1.0:
        return "s", 1.0
    if a >= 1e-3 or a == 0:
        return "ms", 1e3
    return "µs", 1e6


def _compact(v: float, unit: str, like: float | None) -> str:
    family = unit_family(unit)
    if family == "time":
        name, factor = _time_unit(v if like is None else like)
        return f"{compact_num(v * factor)} {name}"
    if family == "fraction":
        return f"{compact_num(v * 100)}%"
    if family == "percent":
        return f"{compact_num(v)}%"
    u = UNITS.get(_FAMILY_BASE.get(unit, unit))
    label = u.label if u is not None and family != "ratio" else ""
    return f"{compact_num(v)} {label}".rstrip()


def format_value(v: Any, unit: str = "", *, style: Style = "table", like: float | None = None,
                 digits: int | None = None, label: bool = False, signed: bool = False) -> str:
    """``v`` (in base unit ``unit``) as text: the one formatter of reports, terminal and SLO messages.

    ``style="table"``: ``123.4 ms``, ``12.35 s``, ``98.70%``, ``1,234 tok/s``, ``30 requests``;
    ``style="compact"``: ``612.3 ms``, ``2.5 s``, ``98.7%``, ``2000 tok/s`` (``like`` picks the
    time unit from another value, to print a CI's bounds in the value's unit);
    ``style="cell"``: a procedure's draft table (:class:`Cell`; ``digits``, ``label``, ``signed``
    apply to it only): ``127 ms``, ``8.4 ms``, ``12.3 s``, ``98.7%``, ``1234 tok/s``, ``0.85``.
    """
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return v
    if not _finite(v):
        return "n/a"
    if style == "compact":
        return _compact(float(v), unit, like)
    if style == "cell":
        return _cell(v, unit, digits, label, signed)
    return _table(v, unit)
