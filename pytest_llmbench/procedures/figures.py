"""What a procedure offers the document's headline (App. C.1 key results) besides its own figures.

The key-figure groups (:data:`LATENCY`, :data:`THROUGHPUT`, :data:`CAPACITY`; the headline shows per
group the figures of the procedure ranking first), TTFT/TPOT figures of a primary run
(:func:`latency_figures`, added for a procedure that declares no latency figure of its own) and the
low-success warning (:func:`low_success_warnings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..measure.registry import METRICS
from .result import Finding, KeyFigure

if TYPE_CHECKING:  # pragma: no cover
    from ..measure.summary import RunMetrics
    from .run import Measured

__all__ = ["CAPACITY", "DEFAULT_LATENCY_RANK", "LATENCY", "LATENCY_FIGURES", "MAX_OUTPUT_THROUGHPUT", "SUCCESS_WARN",
           "THROUGHPUT", "latency_figures", "low_success_warnings"]


#: success rate below which a run is named in the procedure's warnings (§5.10: refusals, errors)
SUCCESS_WARN = 0.99


#: the key-figure group of the headline's latency figures, and the rank of a procedure that does not
#: declare its own (ties go to draft order)
LATENCY = "latency"
THROUGHPUT = "throughput"  # 5.2's sustainable maximum, else 5.3's optimal point
CAPACITY = "capacity"  # 5.5's concurrency


#: the declared figure that is App. C.1's "Max Throughput" (the sustainable maximum, not a capacity probe)
MAX_OUTPUT_THROUGHPUT = "max_output_throughput"
DEFAULT_LATENCY_RANK = 6  # 5.1 ranks its own 0, 5.4 3; every other group ranks 10 and up
LATENCY_FIGURES = (("ttft_p50", "TTFT P50", "ttft", 50.0), ("ttft_p99", "TTFT P99", "ttft", 99.0),
                   ("tpot_p99", "TPOT P99", "tpot", 99.0))


def latency_figures(metrics: RunMetrics | None, rank: int) -> list[KeyFigure]:
    """TTFT P50/P99 and TPOT P99 of the primary run as headline figures (§5.1.4, §5.4), group
    :data:`LATENCY`; none without TTFT samples, a figure without samples left out."""
    dists = getattr(metrics, "distributions", None) or {}
    ttft = dists.get("ttft")
    if ttft is None or ttft.n == 0:
        return []
    out = []
    for i, (name, title, metric, q) in enumerate(LATENCY_FIGURES):
        d = dists.get(metric)
        if d is None or d.n == 0 or q not in d.percentiles:
            continue
        est = d.percentiles[q]
        out.append(KeyFigure(name, title, est.value, "s", LATENCY, rank + i, metric=metric,
                             definition=METRICS[metric].definition, undersampled=bool(est.undersampled)))
    return out


def low_success_warnings(runs: Sequence[Measured]) -> list[Finding]:
    """The runs whose success (ok / sent) fell below :data:`SUCCESS_WARN`, the lowest named."""
    low = []
    for m in runs:
        load = m.summary.load or {}
        s, ok = load.get("sent"), load.get("ok")
        if isinstance(s, int) and isinstance(ok, int) and s and ok / s < SUCCESS_WARN:
            low.append((ok / s, f"{m.summary.label} {ok} of {s}"))
    return [Finding("failed_requests", f"{len(low)} run(s) below {SUCCESS_WARN:.0%} success (lowest: {min(low)[1]})")] \
        if low else []
