"""The one unit vocabulary and the one number formatter (computes nothing; report/ and slo.py read it).

Every figure stores its value in a base unit named here (times in seconds, §4.7); a unit belongs
to a *family* that says how it is parsed in an SLO and how it is shown. :func:`format_value`
shows a value in its unit in one of two styles: ``"table"`` (reports and terminal: 4 significant
digits, times in ms below 10 s) or ``"compact"`` (SLO messages: ``612.3 ms``, ``2.5 s``,
``2000 tok/s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FAMILIES", "UNITS", "Unit", "compact_num", "fmt_num", "fmt_pct", "fmt_time", "format_value", "unit_family"]

Style = Literal["table", "compact"]

#: Unit families: ``time`` (seconds), ``token_rate``, ``request_rate``, ``fraction`` (0..1, shown
#: as %), ``ratio`` (shown plainly), ``tokens``, ``count`` (requests, events, samples), ``percent``.
FAMILIES = ("time", "token_rate", "request_rate", "fraction", "ratio", "tokens", "count", "percent")


@dataclass(frozen=True)
class Unit:
    """A base unit: its name in results.json, its family and how it is labelled on screen."""

    name: str
    family: str
    label: str  # shown after the number ("tok/s"); times choose ms/s/µs themselves

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unit {self.name}: family must be one of {FAMILIES}, not {self.family!r}")


UNITS: dict[str, Unit] = {u.name: u for u in (
    Unit("s", "time", "s"),
    Unit("s/token", "time", "s/token"),
    Unit("tokens/s", "token_rate", "tok/s"),
    Unit("tokens/s/GPU", "token_rate", "tokens/s/GPU"),
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


def format_value(v: Any, unit: str = "", *, style: Style = "table", like: float | None = None) -> str:
    """``v`` (in base unit ``unit``) as text: the one formatter of reports, terminal and SLO messages.

    ``style="table"``: ``123.4 ms``, ``12.35 s``, ``98.70%``, ``1,234 tok/s``, ``30 requests``;
    ``style="compact"``: ``612.3 ms``, ``2.5 s``, ``98.7%``, ``2000 tok/s`` (``like`` picks the
    time unit from another value, to print a CI's bounds in the value's unit).
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
    return _table(v, unit)
