"""A multi-turn session run's table (issue 50): TTFT and cached prompt tokens by turn index, and the
per-session totals, from its primary run's ``metrics.sessions`` (measure/metrics/sessions.py). Drawn by
``templates/_sessions.html.j2`` with a bar per turn of its TTFT P50 (where a prefix cache serves the history,
the bars after turn 1 are short); None for a run without sessions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..measure.units import fmt_num, fmt_time

__all__ = ["session_view"]


def _p(d: Mapping[str, Any] | None, key: str) -> float | None:
    """A distribution's percentile (``p50``) or ``mean`` value, None when absent or not finite."""
    if not d:
        return None
    e = d.get("mean") if key == "mean" else (d.get("percentiles") or {}).get(key)
    v = (e or {}).get("value")
    return float(v) if isinstance(v, (int, float)) and v == v else None


def session_view(metrics: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The table rows (turn, requests, ok, TTFT P50/P99, mean prompt and cached tokens, cached share), the
    bars (TTFT P50 per turn, widths relative to the longest) and a per-session line; None without sessions."""
    s = (metrics or {}).get("sessions")
    if not s or not s.get("by_turn"):
        return None
    rows, bars = [], []
    longest = max((_p(t["ttft"], "p50") or 0.0 for t in s["by_turn"]), default=0.0) or 1.0
    for t in s["by_turn"]:
        p50 = _p(t["ttft"], "p50")
        share = t.get("cached_share_mean")
        rows.append([str(t["turn"]), str(t["requests"]), str(t["ok"]), fmt_time(p50), fmt_time(_p(t["ttft"], "p99")),
                     fmt_num(t.get("input_tokens_mean")), fmt_num(_p(t.get("cached_tokens"), "mean")),
                     "n/a" if share is None else f"{share * 100:.0f}%"])
        bars.append({"turn": t["turn"], "width": f"{(p50 or 0.0) / longest * 100:.1f}", "label": fmt_time(p50)})
    per = s.get("per_session") or {}
    line = (f"{s['sessions']:,} sessions: turns per session mean {fmt_num(_p(per.get('turns'), 'mean'))}, prompt "
            f"tokens per session mean {fmt_num(_p(per.get('input_tokens'), 'mean'))}, output tokens per session mean "
            f"{fmt_num(_p(per.get('output_tokens'), 'mean'))}, session duration P50 "
            f"{fmt_time(_p(per.get('duration'), 'p50'))} (P99 {fmt_time(_p(per.get('duration'), 'p99'))})")
    header = ["Turn", "Requests", "OK", "TTFT P50", "TTFT P99", "Prompt tokens (mean)", "Cached tokens (mean)",
              "Cached share"]
    return {"header": header, "rows": rows, "bars": bars, "line": line,
            "caption": ("cached tokens as the server reported them (usage.prompt_tokens_details.cached_tokens); n/a: "
                        "none reported for that turn")}
