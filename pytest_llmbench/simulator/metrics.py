"""Prometheus text exposition of the simulator's state, and a small parser for the client side.

Names follow vLLM's (``vllm:`` → ``llmbench:``). :func:`parse_prometheus_text` reads any
Prometheus text-format page (vLLM's included) into ``{series: value}``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

__all__ = ["MetricsSnapshot", "parse_prometheus_text", "render_metrics"]

MetricsSnapshot = list[tuple[str, str, str, float]]  # (name, type, help, value)

_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?P<labels>\{[^}]*\})?"
    r"\s+(?P<value>\S+)"
    r"(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def render_metrics(samples: Iterable[tuple[str, str, str, float]]) -> str:
    """``(name, type, help, value)`` tuples → Prometheus text format 0.0.4."""
    out: list[str] = []
    for name, typ, help_, value in samples:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {typ}")
        if isinstance(value, float) and not value.is_integer():
            v = repr(value)
        else:
            v = str(int(value))
        out.append(f"{name} {v}")
    return "\n".join(out) + "\n"


def _parse_value(s: str) -> float:
    low = s.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(s)


def parse_prometheus_text(text: str) -> dict[str, float]:
    """Parse Prometheus text exposition into ``{series: value}``.

    A series without labels is keyed by its name (``llmbench:num_requests_running``); one with
    labels by ``name{k="v",...}`` with labels sorted by key, so keys are stable across servers.
    Comments and blank lines are skipped; a malformed sample line raises ``ValueError`` quoting it.
    """
    out: dict[str, float] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"line {lineno} is not a Prometheus sample: {raw!r}")
        try:
            value = _parse_value(m.group("value"))
        except ValueError:
            raise ValueError(f"line {lineno} has a non-numeric value: {raw!r}") from None
        key = m.group("name")
        labels = m.group("labels")
        if labels and labels != "{}":
            body = labels[1:-1]
            pairs = []
            pos = 0
            while pos < len(body):
                lm = _LABEL.match(body, pos)
                if lm is None or lm.end() == pos:
                    raise ValueError(f"line {lineno} has malformed labels: {raw!r}")
                pairs.append((lm.group(1), lm.group(2)))
                pos = lm.end()
            key += "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs)) + "}"
        out[key] = value
    return out
