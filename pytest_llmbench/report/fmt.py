"""Number formatting shared by the Markdown, HTML, terminal and step-summary renderers.

Numbers and units come from ``units.py`` (the one formatter and unit vocabulary, shared with the
SLO messages). Everything here reads the plain JSON of ``results.json`` (an Estimate is a dict with ``value``,
``n``, ``unit``, ``ci_low``, ``ci_high``, ``confidence``, ``undersampled``), so a report rebuilt
from disk formats exactly like the original. Times are stored in seconds and shown in ms (§4.7).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..measure.units import fmt_num, fmt_pct, fmt_time, format_cell, format_value, is_cell

__all__ = ["fmt_cell", "fmt_ci", "fmt_duration", "fmt_est", "fmt_num", "fmt_pct", "fmt_time", "fmt_value",
           "is_estimate", "md_cell", "md_text"]

UNDERSAMPLED_MARK = "†"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt_value(v: Any, unit: str = "") -> str:
    """A value in its unit (units.UNITS): s -> ms/s, fraction -> %, tokens/s -> tok/s, counts as integers."""
    return format_value(v, unit)


def fmt_cell(c: Any) -> Any:
    """A procedure table's cell as stored: ``{"value", "unit", …}`` by the unit's cell rule
    (units.format_cell), a list of words and numbers joined; anything else (words: all a document
    before 1.5 holds) as it is, for the template to show."""
    return format_cell(c) if isinstance(c, list) or is_cell(c) else c


def is_estimate(d: Any) -> bool:
    return isinstance(d, Mapping) and "value" in d and "n" in d and "unit" in d


def fmt_ci(est: Mapping[str, Any]) -> str:
    """``95% CI 110.2 ms–130.1 ms`` or empty when the interval could not be computed."""
    lo, hi = est.get("ci_low"), est.get("ci_high")
    if lo is None or hi is None:
        return ""
    conf = est.get("confidence") or 0.95
    unit = est.get("unit", "")
    return f"{fmt_num(conf * 100, 3)}% CI {fmt_value(lo, unit)}–{fmt_value(hi, unit)}"


def fmt_est(est: Any, *, ci: bool = False, n: bool = False) -> str:
    """An Estimate dict as text; ``†`` marks an under-sampled value (§5.1.4.3)."""
    if est is None:
        return "n/a"
    if not is_estimate(est):
        return fmt_any(est)
    text = fmt_value(est.get("value"), est.get("unit", ""))
    if est.get("undersampled") and est.get("value") is not None:
        text += UNDERSAMPLED_MARK
    extra = []
    if ci and (c := fmt_ci(est)):
        extra.append(c)
    if n:
        extra.append(f"n={est.get('n')}")
    return f"{text} ({', '.join(extra)})" if extra else text


def fmt_any(v: Any, limit: int = 160) -> str:
    """Any JSON value for a table cell (dicts/lists compactly, cut at ``limit`` characters)."""
    if is_estimate(v):
        return fmt_est(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        text = ", ".join(v) if v else "none"
        return text if len(text) <= limit else text[: limit - 1] + "…"
    if isinstance(v, (dict, list)):
        text = json.dumps(v, ensure_ascii=False, separators=(", ", ": "), sort_keys=False)
        return text if len(text) <= limit else text[: limit - 1] + "…"
    if isinstance(v, float):
        return f"{v:,.6g}" if math.isfinite(v) else str(v)
    if isinstance(v, int):
        return str(v)
    if v is None:
        return "n/a"
    return str(v)


def fmt_duration(seconds: Any) -> str:
    """A wall-clock duration: ``75.00 s`` below 10 minutes, else ``2 h 03 min 04 s``."""
    if not _finite(seconds):
        return "n/a"
    if seconds < 600:
        return f"{fmt_num(float(seconds))} s"
    total = int(round(seconds))
    h, rem = divmod(total, 3600)
    m, sec = divmod(rem, 60)
    return (f"{h:,} h {m:02d} min {sec:02d} s" if h else f"{m} min {sec:02d} s")


_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def md_text(v: Any) -> str:
    """Text safe in Markdown prose: anything that would open an HTML tag is escaped."""
    text = v if isinstance(v, str) else fmt_any(v)
    return _TAG.sub("&lt;", text)


def md_cell(v: Any) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, one line, no HTML tags)."""
    text = md_text(v)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")
