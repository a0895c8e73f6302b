"""Prometheus text exposition of the simulator's state.

Names follow vLLM's (``vllm:`` → ``llmbench:``); the client side reads them, like any server's,
with ``measure/telemetry.py`` (prometheus_client's parser).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MetricsSnapshot", "render_metrics"]

MetricsSnapshot = list[tuple[str, str, str, float]]  # (name, type, help, value)

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
