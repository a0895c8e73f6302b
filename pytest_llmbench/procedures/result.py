"""What a procedure produces (§5.x.4/§5.x.5): its result, runs, tables and what it declares for the document.

:class:`ProcedureResult` holds the parameters, the runs (:class:`RunSummary`), measurements, the
draft's tables (:class:`Table`), compliance facts and verdict, and what the procedure shows: its
primary run, headline figures (:class:`KeyFigure`), sweep result (:class:`Sweep`), warnings
(:class:`Finding`), overlaid runs (:class:`Overlays`) and server telemetry (:class:`ServerView`).
``document/`` aggregates these; nothing here imports pytest or a procedure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..measure.units import CellValue, cell_json

if TYPE_CHECKING:  # pragma: no cover
    from ..compliance import Check, RunFacts
    from ..loadgen.selfcheck import ClientDelay
    from ..measure.slo import SLO, FiguresView
    from ..measure.stats import Estimate
    from ..measure.summary import RunMetrics

__all__ = [
    "FINDING_KINDS",
    "Capacity",
    "Finding",
    "KeyFigure",
    "MeasurementMissing",
    "Overlays",
    "ProcedureResult",
    "RunSummary",
    "Series",
    "ServerView",
    "Sweep",
    "Table",
]


class MeasurementMissing(AssertionError):
    """A test asked for a measurement the run did not produce (an assertion failure, not a crash):
    raised by :meth:`ProcedureResult.measured` with the procedure's notes saying why."""


@dataclass
class Table:
    """One of the draft's reporting tables (Tables 1–14) or a supporting table.

    A cell is words (row labels, verdicts, ``n/a (…)``), a :class:`~pytest_llmbench.measure.units.Cell`
    (a number with its unit, shown by the report's one formatter) or a list of both read in a row
    (``[">= ", Cell(0.127, "s")]``); results.json (1.5) keeps the numbers with their units.
    """

    title: str
    columns: list[str]
    rows: list[list[CellValue]]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "columns": list(self.columns),
                "rows": [[cell_json(c) for c in row] for row in self.rows], "notes": list(self.notes)}


@dataclass
class RunSummary:
    """One load run inside a procedure (a level, a configuration, a class baseline ...)."""

    label: str
    run_dir: str
    load: dict[str, Any]
    metrics: RunMetrics
    valid: bool = True
    invalid_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # the server's /metrics series over the run (measure/telemetry.TelemetrySeries.to_json(); results.json 1.6)
    telemetry: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "run_dir": self.run_dir,
            "load": self.load,
            "valid": self.valid,
            "invalid_reason": self.invalid_reason,
            "extra": self.extra,
            "telemetry": self.telemetry,
            "metrics": self.metrics.to_json(),
        }


@dataclass
class Capacity:
    """The SUT's capacity that 5.3, 5.4, 5.6, 5.8 and 5.10 are defined relative to."""

    rate: float | None = None  # max sustainable request rate, req/s (5.2)
    concurrency: int | None = None  # max concurrency meeting 5.5's criteria
    output_throughput: float | None = None  # tok/s at that load
    source: str = ""  # "declared (--llm-capacity)", "measured by 5.5 in this session", ...
    #: what the value is (issue 48): "measured" (a saturated level bounds it), "lower-bound" (no level
    #: saturated: the capacity is at least this) or "declared"; with the workload and request shape measured on
    standing: str = "measured"
    workload: str | None = None
    request_shape: str | None = None  # e.g. "max_tokens, EOS allowed" or "forced output (min_tokens = max_tokens)"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class KeyFigure:
    """A figure a procedure offers the headline (App. C.1 key results), with its own definition.

    The headline shows, per ``group``, the figures of the procedure whose figures in that group
    have the lowest ``rank``, every shown figure in ``rank`` order; a figure whose value is None
    keeps its group but is not shown. ``level`` None: the procedure's primary level.
    """

    name: str
    title: str
    value: float | None
    unit: str
    group: str
    rank: int
    level: str | None = None
    definition: str = ""
    metric: str | None = None  # the registry metric the figure is a statistic of, if any
    undersampled: bool = False  # fewer samples than §5.1.4.3 asks for the percentile

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Sweep:
    """What a procedure with several load levels or configurations found: its result sentence and,
    when the runs' offered loads do not say it, its tested range (§5.2.4, §5.3.4, §5.5.4, §5.8.4, §5.9.4)."""

    result: str
    range: str | None = None  # None: the runs' offered rates and concurrencies

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Series:
    """One run (or one request class of a run) a procedure overlays with others on a CDF."""

    label: str  # in the reader's words ("Cache (Warm)", "short, mixed", "50% of capacity (4 req/s)")
    run: str  # the label of the run (``RunSummary.label``) whose samples it draws
    group: int = 0  # colour group: series of one group share a colour
    dashed: bool = False
    request_class: str | None = None  # only this class's successful requests of the run (§5.6 mixed)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Overlays:
    """The runs a procedure compares: one empirical CDF per series and metric, and, for
    ``differences``, each series' percentile differences from the first (baseline) series."""

    by: str  # what a series is: "load level", "request class", "configuration"
    metrics: list[str]  # registry metric names overlaid, in the procedure's order
    section: str  # the draft section that asks for the comparison
    series: list[Series]
    differences: list[tuple[str, list[float]]] = field(default_factory=list)  # (metric, percentiles)

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "metrics": list(self.metrics), "section": self.section,
                "series": [s.to_json() for s in self.series],
                "differences": [[m, list(p)] for m, p in self.differences]}


@dataclass
class ServerView:
    """The server telemetry a procedure shows (measure/telemetry.py; results.json 1.6): ``runs`` on one
    time axis with the client's in-flight count, and, for a sweep, one group per level (``levels``:
    (level in the reader's words, run label)) of the server's queue, KV usage and preemption events.
    Without one the document draws the primary run's series."""

    runs: list[str]
    levels: list[tuple[str, str]] = field(default_factory=list)
    by: str = "load level"
    section: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "levels": [list(x) for x in self.levels], "by": self.by,
                "section": self.section}


#: Kinds of finding a procedure declares next to its verdict; the headline groups findings by kind
#: (document/headline.py gives each kind its title and order, most severe first).
FINDING_KINDS = ("failed_requests", "cancelled", "unfair", "overloaded")


@dataclass(frozen=True)
class Finding:
    """One finding a procedure wants visible next to its verdict: its kind (:data:`FINDING_KINDS`)
    and the text, e.g. ``Finding("unfair", "Jain index per request 0.28")`` (§5.6.4)."""

    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in FINDING_KINDS:
            raise ValueError(f"finding kind {self.kind!r} is not one of {', '.join(FINDING_KINDS)}")

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}


@dataclass
class ProcedureResult:
    """Everything a procedure produced: parameters, runs, measurements, tables, compliance facts."""

    procedure: str
    title: str
    params: dict[str, Any]
    profile: str
    metrics: RunMetrics | None  # the primary run's metrics: what SLO assertions evaluate
    runs: list[RunSummary] = field(default_factory=list)
    measurements: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    checks: dict[str, Check] = field(default_factory=dict)
    facts: RunFacts | None = None
    notes: list[str] = field(default_factory=list)
    plots: dict[str, Any] = field(default_factory=dict)
    capacity: Capacity | None = None
    compliance: Any = None  # compliance.ComplianceResult, set by the procedure's finish step
    started: str = ""
    finished: str = ""
    duration_s: float = 0.0
    complete: bool = True
    cold_start: dict[str, Any] | None = None  # a cold-start measurement (§4.5.3, coldstart.ColdStart)
    # what the procedure declares for the document (results.json 1.4): the run behind ``metrics``,
    # headline figures, sweep result, warnings next to its verdict, the runs it overlays
    primary_run: str | None = None
    key_figures: list[KeyFigure] = field(default_factory=list)
    sweep: Sweep | None = None
    warnings: list[Finding] = field(default_factory=list)
    overlays: Overlays | None = None
    server_view: ServerView | None = None  # 1.6: the server telemetry it shows (None: the primary run's)
    #: a run that stopped when decided (issue 47): SLO text -> (its ``measure.slo.SLOResult`` taken at the run's
    #: looks, the requests it was judged on); the plugin asserts these for the marker's and --llm-slo's SLOs
    #: instead of judging them again on the whole run. Each test records them in its ``slo_results``.
    slo_verdicts: dict[str, Any] = field(default_factory=dict)

    def measured(self, key: str) -> Any:
        """``measurements[key]``, or :class:`MeasurementMissing` naming why there is none.

        A procedure records ``None`` for a figure it could not measure (no sample in a class, no
        level meeting the criterion, a budget that left a level empty); comparing that ``None``
        in an SLO would crash with a ``TypeError``. This fails the test instead, with the
        procedure's own notes, e.g. ``llm_result.measured("short_ttft_p99_ms") <= 2000``.
        """
        __tracebackhide__ = True  # a failure points at the test's line (a plain local; no pytest import)
        if key not in self.measurements:
            known = ", ".join(sorted(self.measurements)) or "none"
            raise MeasurementMissing(f"procedure {self.procedure} has no measurement {key!r} (known: {known})")
        value = self.measurements[key]
        if value is None:
            why = "; ".join(self.notes) if self.notes else "the procedure left no note"
            raise MeasurementMissing(f"procedure {self.procedure} measured no {key!r} on this run: {why}")
        return value

    def primary_summary(self) -> RunSummary | None:
        """The run behind the summary figures: the one the procedure declared (``primary_run``), else the
        run whose metrics are the result's summary ``metrics`` (None: pooled or no run)."""
        if self.primary_run is not None:
            declared = next((r for r in self.runs if r.label == self.primary_run), None)
            if declared is not None:
                return declared
        return next((r for r in self.runs if self.metrics is not None and r.metrics is self.metrics), None)

    def client_delay(self) -> ClientDelay | None:
        """The client's own delay behind the summary figures (loadgen/selfcheck.py): the primary run's,
        else the worst of every run's; None when no run measured it (sharded runs)."""
        from ..loadgen.selfcheck import ClientDelay

        primary = self.primary_summary()
        runs = [primary] if primary is not None and primary.load.get("client_delay") else self.runs
        return ClientDelay.worst(ClientDelay.from_json(r.load["client_delay"]) for r in runs
                                 if r.load.get("client_delay"))

    def slo_metrics(self) -> FiguresView:
        """What an SLO on this result reads: the summary run metrics and the procedure figures
        (``registry.procedure_figures()``, declared by the procedure modules, e.g. ``max_concurrency``) found in
        its measurements."""
        from ..measure.registry import procedure_figures
        from ..measure.slo import FiguresView
        from ..measure.stats import Estimate

        # n of a procedure figure: its own count when the procedure keeps one, else the requests behind it
        requests = sum(int(r.metrics.scalars["request_count"].value) for r in self.runs
                       if "request_count" in getattr(r.metrics, "scalars", {})) or 1
        figures = {}
        for m in procedure_figures():
            v = self.measurements.get(m.measurement or "")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                n = self.measurements.get(m.count) if m.count else None
                figures[m.name] = Estimate(value=float(v) * m.scale, n=int(n) if isinstance(n, int) else requests,
                                           unit=m.unit, method=f"procedure {self.procedure} figure ({m.section})")
        return FiguresView(self.metrics, figures)

    def slo_client_error(self, slo: SLO, est: Estimate) -> float | None:
        """The client's measurement error (s) of an SLO's value: its delay propagated to the figure
        (selfcheck.figure_error_ms); None for figures the client's clock does not time."""
        from ..loadgen.selfcheck import figure_error_ms

        delay = self.client_delay()
        if delay is None or slo.info.unit != "time" or slo.info.kind != "distribution" or slo.per_request:
            return None
        p = slo.percentile if slo.percentile is not None else {"mean": 90.0, "max": 100.0, "min": 50.0}[
            str(slo.statistic)]
        per_request = self.metrics.per_request if self.metrics is not None else None
        ms = figure_error_ms(slo.metric, p, est.value, delay, per_request)
        return None if ms is None else ms / 1e3

    def to_json(self) -> dict[str, Any]:
        return {
            "procedure": self.procedure,
            "title": self.title,
            "params": self.params,
            "profile": self.profile,
            "metrics": self.metrics.to_json() if self.metrics is not None else None,
            "runs": [r.to_json() for r in self.runs],
            "measurements": self.measurements,
            "tables": [t.to_json() for t in self.tables],
            "checks": {k: v.to_json() for k, v in self.checks.items()},
            "facts": self.facts.to_json() if self.facts is not None else None,
            "notes": self.notes,
            "plots": self.plots,
            "capacity": self.capacity.to_json() if self.capacity else None,
            "compliance": self.compliance.to_json() if self.compliance is not None else None,
            "started": self.started,
            "finished": self.finished,
            "duration_s": self.duration_s,
            "complete": self.complete,
            "cold_start": self.cold_start,
            "primary_run": self.primary_run,
            "key_figures": [f.to_json() for f in self.key_figures],
            "sweep": self.sweep.to_json() if self.sweep is not None else None,
            "warnings": [w.to_json() for w in self.warnings],
            "overlays": self.overlays.to_json() if self.overlays is not None else None,
            "server_view": self.server_view.to_json() if self.server_view is not None else None,
        }
