"""The phase bar of a procedure (issue 49): where its requests' time went, as shares of E2E (waiting for the
first fragment, thinking, tool-call arguments, visible content), from its primary run's ``phase_share_*``
figures (measure/metrics/phases.py). Drawn by ``templates/_phases.html.j2``; None for a run without phases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PHASES", "phase_bar"]

#: (figure suffix, label, colour) in the order a request goes through them.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("waiting", "waiting", "#8c959f"), ("thinking", "thinking", "#8250df"),
    ("tool", "tool call", "#bf8700"), ("visible", "visible content", "#1a7f37"))


def phase_bar(metrics: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The bar's segments (label, share 0..1, percent text, colour) and a caption, or None when the run's
    summary has no phase figures (no reasoning, no tool call, nothing hidden)."""
    scalars = (metrics or {}).get("scalars") or {}
    shares = {k: (scalars.get(f"phase_share_{k}") or {}).get("value") for k, _, _ in PHASES}
    if all(v is None for v in shares.values()):
        return None
    hidden = int((scalars.get("hidden_reasoning_requests") or {}).get("value") or 0)
    segments = []
    for key, label, colour in PHASES:
        share = float(shares[key] or 0.0)
        if key == "waiting" and hidden:
            label = "waiting (hidden thinking included)"
        segments.append({"key": key, "label": label, "share": share, "pct": f"{share * 100:.1f}%", "colour": colour})
    n = (scalars.get("phase_share_visible") or {}).get("n")
    caption = (f"Share of E2E per phase, summed over {n:,} successful requests of the primary run"
               if isinstance(n, int) else "Share of E2E per phase, successful requests of the primary run")
    if hidden:
        caption += f"; {hidden:,} requests reasoned without streaming it: their thinking is inside 'waiting'"
    return {"segments": segments, "caption": caption}
