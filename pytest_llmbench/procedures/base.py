"""What every procedure (§5.1–§5.10) shares: registry, parameters, profiles, context, result.

A procedure module defines a parameters dataclass whose defaults are the draft's values (the
``standard`` profile), profile overrides (``smoke`` reduces, ``full`` uses the draft's
RECOMMENDED values) and a ``pipeline.ProcedureRun`` subclass, which registers itself through
:func:`register`; ``procedures/__init__.py`` imports every procedure module, and nothing in this
module imports them (no import cycle). Marker values win over the profile, the profile over the dataclass defaults.
The defaults and profiles come from ``data/draft.yaml`` and ``data/profiles.yaml`` (``common.draft``).
Anything below a draft minimum is recorded as a compliance check, never silently.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common.seeds import Seeds
from ..loadgen.load import check_arrival
from ..measure.units import CellValue, cell_json

if TYPE_CHECKING:  # pragma: no cover
    from ..common.tokenizer import Tokenizer
    from ..compliance import Check, RunFacts
    from ..loadgen.selfcheck import ClientDelay
    from ..measure.slo import SLO, FiguresView
    from ..measure.stats import Estimate
    from ..measure.summary import RunMetrics
    from ..settings import Settings
    from ..sut.system import SUT

__all__ = [
    "Capacity",
    "KeyFigure",
    "LoadSpec",
    "MeasurementMissing",
    "bursty",
    "capacity_provider",
    "closed",
    "poisson",
    "uniform",
    "Procedure",
    "ProcedureContext",
    "ProcedureError",
    "ProcedureResult",
    "RunSummary",
    "Series",
    "Overlays",
    "ServerView",
    "SkipProcedure",
    "Sweep",
    "Table",
    "get_procedure",
    "procedure_ids",
    "register",
]


class ProcedureError(ValueError):
    """Bad procedure id or parameters (reported at collection time)."""


class MeasurementMissing(AssertionError):
    """A test asked for a measurement the run did not produce (an assertion failure, not a crash):
    raised by :meth:`ProcedureResult.measured` with the procedure's notes saying why."""


class SkipProcedure(Exception):
    """The procedure cannot run against this SUT (e.g. no configuration hook can switch it)."""


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
    cold_start: dict[str, Any] | None = None  # a cold-start measurement (§4.5.3, pipeline.ColdStart)
    # what the procedure declares for the document (results.json 1.4): the run behind ``metrics``,
    # headline figures, sweep result, warnings next to its verdict, the runs it overlays
    primary_run: str | None = None
    key_figures: list[KeyFigure] = field(default_factory=list)
    sweep: Sweep | None = None
    warnings: list[Finding] = field(default_factory=list)
    overlays: Overlays | None = None
    server_view: ServerView | None = None  # 1.6: the server telemetry it shows (None: the primary run's)

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


@dataclass
class ProcedureContext:
    """What a running procedure may use. Built by the plugin; nothing here imports pytest."""

    sut: SUT
    settings: Settings
    tokenizer: Tokenizer
    run_root: Path  # this procedure's directory under the report directory
    get_capacity: Callable[[str], Awaitable[Capacity]]  # "rate" | "concurrency"
    configure_sut: Callable[[str, Any], bool]  # the SUT configuration hook (hookspecs.py)
    progress: Callable[[str], None] = lambda line: None  # one-line status updates
    declarations: dict[str, Any] = field(default_factory=dict)
    session_workloads: set[str] = field(default_factory=set)  # workloads run so far this session (§4.3.2)
    #: --llm-runs repetition whose prompts must not hit the previous one's prefix cache (0: the
    #: ordinary streams); set only when the SUT could not flush its cache (§6.3)
    repetition: int = 0
    deadline: float | None = None  # time.monotonic() by which the procedure must end (--llm-max-duration)
    budget_cuts: list[str] = field(default_factory=list)  # what the time budget cut short (for the notes)

    def remaining_s(self) -> float | None:
        """Seconds left of the procedure's time budget (None: no budget)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def seeds(self, procedure: str) -> Seeds:
        """The procedure's named seed streams under the session seed (seeds.py, §4.3.3); repetition
        ``k > 0`` of ``--llm-runs`` without a cache flush draws from its own streams
        (``<procedure>/repetition-<k>``), so its prompts share no prefix with earlier repetitions."""
        k = getattr(self, "repetition", 0)  # duck-typed contexts (tests) have no repetition
        return Seeds(self.settings.seed, procedure if k == 0 else f"{procedure}/repetition-{k}")

    def run_dir(self, label: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
        path = self.run_root / safe
        path.mkdir(parents=True, exist_ok=True)
        return path


RunFn = Callable[[ProcedureContext, Any], Awaitable[ProcedureResult]]
PlanFn = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Procedure:
    """A registered procedure: id ("5.1"), title, parameters type, profile overrides, run, plan."""

    id: str
    title: str
    params_type: type
    run: RunFn
    profiles: dict[str, dict[str, Any]]
    plan: PlanFn  # params -> {"requests": int, "min_duration_s": float} for --collect-only / dry run
    #: the capacity its result declares (``ProcedureResult.capacity``) for others to run against
    #: (§5.3.3): "rate" (req/s) or "concurrency"; None: it declares none
    provides_capacity: str | None = None
    #: the measurement keys its results carry (``ProcedureResult.measurements``), and regular
    #: expressions for the families named per level, class or configuration
    measurement_keys: tuple[str, ...] = ()
    measurement_patterns: tuple[str, ...] = ()

    def undeclared(self, keys: Iterable[str]) -> list[str]:
        """The keys of ``keys`` this procedure does not declare (neither a name nor a pattern match)."""
        names = set(self.measurement_keys)
        return [k for k in keys if k not in names and not any(re.fullmatch(p, k) for p in self.measurement_patterns)]

    def param_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.params_type)]

    def make_params(self, profile: str, overrides: dict[str, Any]) -> Any:
        """Dataclass defaults < profile < marker overrides; unknown names raise ProcedureError."""
        names = set(self.param_names())
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ProcedureError(
                f"procedure {self.id} ({self.title}) has no parameter(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(names))}"
            )
        values = dict(self.profiles.get(profile, {}))
        values.update(overrides)
        try:
            params = self.params_type(**values)
        except (TypeError, ValueError) as exc:
            raise ProcedureError(f"procedure {self.id}: invalid parameters: {exc}") from None
        validate = getattr(params, "validate", None)
        if callable(validate):
            try:
                validate()
            except ValueError as exc:
                raise ProcedureError(f"procedure {self.id}: invalid parameters: {exc}") from None
        return params


_REGISTRY: dict[str, Procedure] = {}


def register(procedure: Procedure) -> Procedure:
    _REGISTRY[procedure.id] = procedure
    return procedure


def procedure_ids() -> list[str]:
    """Registered procedure ids in draft order (the package ``__init__`` imports every procedure)."""
    return sorted(_REGISTRY, key=lambda s: tuple(int(x) for x in s.split(".")))


def capacity_provider(kind: str) -> Procedure:
    """The registered procedure that declares it provides capacity ``kind`` ("rate" | "concurrency")."""
    for pid in procedure_ids():
        if _REGISTRY[pid].provides_capacity == kind:
            return _REGISTRY[pid]
    raise ProcedureError(f"no registered procedure provides a {kind!r} capacity")


def get_procedure(proc_id: str) -> Procedure:
    key = str(proc_id).strip()
    if key not in _REGISTRY:
        raise ProcedureError(
            f"unknown procedure {proc_id!r}; known: {', '.join(procedure_ids())}"
        )
    return _REGISTRY[key]


def params_json(params: Any) -> dict[str, Any]:
    """A procedure's parameters as JSON (``to_json`` values expanded, tuples as lists)."""
    def plain(v: Any) -> Any:
        return v.to_json() if hasattr(v, "to_json") else (list(v) if isinstance(v, tuple) else v)

    return {f.name: plain(getattr(params, f.name)) for f in dataclasses.fields(params)}


def params_key(proc_id: str, params: Any) -> str:
    """A stable cache key for (procedure, parameters): one run per key per session."""
    data = dataclasses.asdict(params) if dataclasses.is_dataclass(params) else dict(params)
    return proc_id + ":" + json.dumps(data, sort_keys=True, default=str)


@dataclass(frozen=True)
class LoadSpec:
    """A procedure's load parameter as a marker writes it: ``poisson(rate=4)``, ``closed(8)`` ...

    Open loop (§4.2.3): ``arrival`` in poisson (REQUIRED), uniform, bursty (declared ``cv`` > 1),
    with an absolute ``rate`` in req/s or ``capacity_fraction`` of the SUT's measured/declared
    request-rate capacity. Closed loop (§4.2.4): ``concurrency`` requests held in flight.
    """

    model: str  # "open" | "closed"
    arrival: str | None = None
    rate: float | None = None
    capacity_fraction: float | None = None
    concurrency: int | None = None
    cv: float | None = None

    def __post_init__(self) -> None:
        if self.model == "open":
            if (self.rate is None) == (self.capacity_fraction is None):
                raise ValueError("open-loop load needs exactly one of rate= (req/s) or capacity_fraction=")
            if self.capacity_fraction is not None and not self.capacity_fraction > 0:
                raise ValueError(f"capacity_fraction must be > 0, got {self.capacity_fraction}")
            object.__setattr__(self, "arrival", check_arrival(self.arrival, self.rate, self.cv))
        elif self.model == "closed":
            if not isinstance(self.concurrency, int) or self.concurrency < 1:
                raise ValueError(f"closed-loop concurrency must be an integer >= 1, got {self.concurrency!r}")
        else:
            raise ValueError(f"load model must be 'open' or 'closed', not {self.model!r}")

    def describe(self) -> str:
        if self.model == "closed":
            return f"closed loop, concurrency {self.concurrency}"
        rate = f"{self.rate:g} req/s" if self.rate is not None else f"{self.capacity_fraction:.0%} of capacity"
        cv = f", cv {self.cv:g}" if self.cv else ""
        return f"open loop, {self.arrival} arrivals at {rate}{cv}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def poisson(rate: float | None = None, *, capacity_fraction: float | None = None) -> LoadSpec:
    """Open-loop Poisson arrivals (§4.2.3, REQUIRED for open-loop 5.1)."""
    return LoadSpec("open", "poisson", rate=rate, capacity_fraction=capacity_fraction)


def uniform(rate: float | None = None, *, capacity_fraction: float | None = None) -> LoadSpec:
    """Open-loop evenly spaced arrivals (§4.2.3)."""
    return LoadSpec("open", "uniform", rate=rate, capacity_fraction=capacity_fraction)


def bursty(rate: float | None = None, *, cv: float = 2.0, capacity_fraction: float | None = None) -> LoadSpec:
    """Open-loop bursty arrivals: gamma gaps with coefficient of variation ``cv`` > 1 (§4.2.3)."""
    return LoadSpec("open", "bursty", rate=rate, capacity_fraction=capacity_fraction, cv=cv)


def closed(concurrency: int) -> LoadSpec:
    """Closed loop holding ``concurrency`` requests in flight (§4.2.4)."""
    return LoadSpec("closed", concurrency=concurrency)
