"""The metric registry: every metric declared once, beside its formula (docs/metrics.md).

Like AIPerf's metric classes, each metric is one function in a module of ``measure/metrics/``,
decorated with :func:`metric`: its name, the aliases an SLO may use, its unit (a name from
:mod:`.units`, the one unit vocabulary), its direction (lower or higher is better, or neutral for
descriptive figures), the draft or paper section, how a run aggregates it, and (its parameters)
what it reads; its docstring is the definition. The modules are found by directory (no import
list) and evaluated in the order their parameters give (:func:`evaluation_order`, ``graphlib``);
``summary.summarize`` runs them. ``slo.py`` (parsing, messages), ``document/`` (key figures),
``report/`` (formatting, terminal columns) and the regression gate read the declarations:
:func:`lookup` resolves a name or alias, :func:`higher_is_better` gives a comparison's direction.

A *figure* (:data:`FIGURES`) is a metric with a statistic, e.g. ``ttft_p99`` = TTFT at P99; the
terminal table's columns and the App. C.1 key results are figures.
"""

from __future__ import annotations

import graphlib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from . import units

__all__ = ["DIRECTIONS", "FIGURES", "ITL_METRICS", "METRICS", "PHASE_METRICS", "TERMS", "Figure", "Metric",
           "Node", "compute", "declare", "definitions", "derived", "evaluation_order", "figure", "higher_is_better", "lookup",
           "metric", "needs", "on_declare", "procedure_figures", "slo_metrics"]

Direction = Literal["lower", "higher", "neutral"]
Kind = Literal["distribution", "scalar", "column"]
Rows = Literal["ok", "all"]  # the requests a distribution summarises: successful ones, or every one sent
Window = Literal["steady", "whole"]
DIRECTIONS = ("lower", "higher", "neutral")

#: Aggregations (how one run turns the metric into figures).
PERCENTILES = "percentiles of per-request values over successful requests (CI per §5.1.4.3)"
POOLED = "percentiles of per-gap samples pooled over successful requests"
WINDOW_RATE = "events in the steady-state window / window length, batch-means CI (§5.2.3.2)"
PROPORTION = "proportion with a Wilson CI"
COUNT = "count over the run"
TIME_AVERAGE = "time average over the steady-state window"
PER_RUN = "one value per run"
PER_REQUEST = "per-request column (records table), not summarised"
PROCEDURE = "one value per procedure result (its measurements), not per run"


@dataclass(frozen=True)
class Metric:
    """One metric: what it is, its unit and direction, where it is defined and how it aggregates."""

    name: str
    title: str
    unit: str
    direction: Direction
    kind: Kind
    definition: str
    section: str = ""
    aggregation: str = PERCENTILES
    aliases: tuple[str, ...] = ()
    slo: bool = False  # may be named in an SLO expression
    per_token: bool = False  # a time per token: an SLO also accepts "ms/tok"
    aiperf: str | None = None  # AIPerf's metric tag when AIPerf has this metric (export_aiperf.py)
    #: a procedure figure: the key of ``ProcedureResult.measurements`` holding it, the factor taking that
    #: value to the base unit (``ms`` -> s: 1e-3, ``pct`` -> fraction: 0.01) and the key of its sample count
    measurement: str | None = None
    scale: float = 1.0
    count: str | None = None
    over: Rows = "ok"
    always: bool = False  # a distribution summarised even when no request defines it
    window: Window | None = None  # a scalar's time window (§5.2.3.2 steady state, or the whole run)
    compute: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    needs: tuple[str, ...] = ()  # what ``compute`` reads (its parameter names)
    itl_gaps: bool = False  # its samples are ITL gaps: not measurable under §4.6.3 option A
    #: a figure of the reasoning phase: unobservable where the server hides its reasoning (an SLO on it is
    #: INCONCLUSIVE on such a run, slo.py; issue 49)
    phase: bool = False

    def __post_init__(self) -> None:
        if self.unit not in units.UNITS:
            raise ValueError(f"metric {self.name}: unit {self.unit!r} is not in units.UNITS")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: direction must be one of {DIRECTIONS}")
        if self.slo and self.direction == "neutral":
            raise ValueError(f"metric {self.name}: an SLO metric needs a direction")

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher"

    @property
    def family(self) -> str:
        return units.UNITS[self.unit].family

    def to_json(self) -> dict[str, object]:
        """The registry entry as stored in results.json (``metrics``)."""
        return {"name": self.name, "title": self.title, "unit": self.unit, "direction": self.direction,
                "kind": self.kind, "definition": self.definition, "section": self.section,
                "aggregation": self.aggregation}


_KIND_AGGREGATION = {"distribution": PERCENTILES, "scalar": PER_RUN, "column": PER_REQUEST}
_WHOLE_RUN = frozenset({"benchmark_duration", "smooth_goodput", "token_weighted_goodput"})


def _definition(fn: Callable[..., Any]) -> str:
    """The docstring's first paragraph on one line: the formula, as reports print it."""
    doc = inspect.cleandoc(fn.__doc__ or "")
    first = doc.split("\n\n", 1)[0]
    if not first:
        raise ValueError(f"metric {fn.__name__}: its docstring (the formula) is missing")
    return " ".join(first.split())


def metric(title: str, unit: str, direction: Direction = "neutral", *, kind: Kind = "distribution",
           section: str = "", aggregation: str | None = None, aliases: tuple[str, ...] = (), slo: bool = False,
           per_token: bool = False, aiperf: str | None = None, over: Rows = "ok", always: bool = False,
           window: Window | None = None, itl_gaps: bool = False, name: str | None = None,
           phase: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the decorated function as a metric: its name (the function's), title, unit, direction, §.

    The function is the formula (vectorised, numpy): its parameters name what it reads (frame fields,
    summarise options, other metrics or derived values; :func:`evaluation_order`), its docstring's first
    paragraph is the definition reports print. ``kind``: ``distribution`` (one value per request,
    summarised by percentiles over the successful requests, or every sent one with ``over="all"``;
    ``always``: even when no request defines it), ``scalar`` (an Estimate, or a ``{suffix: Estimate}``
    dict for a window rate and its whole-run variant, or None when the run cannot give it) or
    ``column`` (per request, not summarised). ``aiperf``: AIPerf's tag, also an alias when it differs.
    ``phase``: a figure of the reasoning phase (:attr:`Metric.phase`).
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        n = name or fn.__name__
        names = tuple(a for a in ((aiperf,) if aiperf and aiperf != n else ()) + aliases if a != n)
        agg = aggregation or _KIND_AGGREGATION[kind]
        win = window or ("whole" if n in _WHOLE_RUN else "steady" if agg in (WINDOW_RATE, TIME_AVERAGE) else None)
        m = Metric(n, title, unit, direction, kind, _definition(fn), section,
                   agg, names, slo, per_token, aiperf, over=over, always=always, window=win,
                   compute=fn, needs=tuple(inspect.signature(fn).parameters), itl_gaps=itl_gaps, phase=phase)
        _declare(m)
        return fn

    return register


def derived(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare an intermediate value (not a metric) several metrics read, e.g. the pooled ITL samples."""
    if fn.__name__ in _NODES:
        raise ValueError(f"derived value {fn.__name__!r} declared twice")
    _NODES[fn.__name__] = Node(fn.__name__, fn, tuple(inspect.signature(fn).parameters))
    return fn


def declare(*metrics: Metric) -> None:
    """Declare metrics whose value is not computed from records (procedure figures, :data:`PROCEDURE`)."""
    for m in metrics:
        _declare(m)


def figure(name: str, title: str, unit: str, direction: Direction, definition: str, section: str,
           measurement: str, scale: float = 1.0, count: str | None = None) -> Metric:
    """A procedure figure (one per result, e.g. 5.5's maximum concurrency) an SLO may name."""
    return Metric(name, title, unit, direction, "scalar", definition, section, PROCEDURE, (), True,
                  measurement=measurement, scale=scale, count=count)


def _declare(m: Metric) -> None:
    for n in (m.name, *m.aliases):
        if n in _BY_NAME or n in _NODES:
            raise ValueError(f"metric name or alias {n!r} declared twice")
        _BY_NAME[n] = m
    METRICS[m.name] = m
    for listener in _LISTENERS:
        listener(m)


def on_declare(listener: Callable[[Metric], None]) -> None:
    """Call ``listener`` with every metric declared so far and every one declared later (the SLO
    catalogue keeps itself in step this way)."""
    _LISTENERS.append(listener)
    for m in list(METRICS.values()):
        listener(m)


@dataclass(frozen=True)
class Node:
    """A derived value in the evaluation graph: its name, formula and what it reads."""

    name: str
    compute: Callable[..., Any]
    needs: tuple[str, ...]


METRICS: dict[str, Metric] = {}
_BY_NAME: dict[str, Metric] = {}
_NODES: dict[str, Node] = {}
_LISTENERS: list[Callable[[Metric], None]] = []


def _discover() -> None:
    """Import every module of ``measure/metrics/`` (no import list: a new file is a new metric family)."""
    from . import metrics as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")


def evaluation_order(inputs: Iterable[str], extra: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Every computed metric and derived value, each after everything it reads (``graphlib``).

    ``inputs`` are the names the caller provides (frame fields, summarise options); ``extra`` adds the
    caller's own steps (name -> what it reads). A parameter that names nothing known, or a cycle, is a
    declaration error naming the metric.
    """
    given = set(inputs)
    nodes: dict[str, tuple[str, ...]] = {**(extra or {}), **{n.name: n.needs for n in _NODES.values()}}
    nodes.update({m.name: m.needs for m in METRICS.values() if m.compute is not None})
    graph: dict[str, list[str]] = {}
    for name, needs in nodes.items():
        unknown = [p for p in needs if p not in given and p not in nodes]
        if unknown:
            raise ValueError(f"metric {name!r} reads {unknown}, which no frame field, option, metric or "
                             f"derived value provides")
        graph[name] = [p for p in needs if p in nodes]
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise ValueError(f"metrics read each other in a cycle: {exc.args[1]}") from None


def needs(name: str) -> tuple[str, ...]:
    """What a metric or derived value reads (its formula's parameter names)."""
    node = _NODES.get(name)
    return node.needs if node is not None else METRICS[name].needs


def compute(name: str) -> Callable[..., Any]:
    """The formula of a metric or derived value."""
    node = _NODES.get(name)
    if node is not None:
        return node.compute
    fn = METRICS[name].compute
    if fn is None:
        raise KeyError(f"metric {name!r} has no formula (a procedure figure)")
    return fn


_discover()

#: Metrics whose samples are ITL gaps: under §4.6.3 option A (App. B.2.1 chose chunk timing) they
#: are not measurable, and an SLO or gate rule on them fails (measure.chunking.ITL_NOT_MEASURABLE).
ITL_METRICS = frozenset(m.name for m in METRICS.values() if m.itl_gaps)

#: Figures of the reasoning phase (``phase=True``): where the server hides its reasoning they are not
#: observable, and an SLO on them is INCONCLUSIVE with the reason (slo.py, issue 49).
PHASE_METRICS = frozenset(m.name for m in METRICS.values() if m.phase)

#: Whole-run variants of the window rates: ``<name>_full`` (same metric, window = whole run).
WHOLE_RUN_SUFFIX = "_full"

#: Definitions of terms that are not metrics.
TERMS: dict[str, str] = {
    "steady_state_window": "[start + f x D, start + D], D = the send duration (the load's start to its last "
    "send; the drain after it is not in the window), f = steady_state_fraction (default 0.1: the first 10% is "
    "ramp-up, §5.2.3 step 3c, §5.2.3.2); summary.steady_state_window",
}


def lookup(name: str) -> Metric:
    """The metric named ``name`` (or one of its aliases, or a ``<rate>_full`` whole-run variant)."""
    m = _BY_NAME.get(name)
    if m is None and name.endswith(WHOLE_RUN_SUFFIX):
        m = _BY_NAME.get(name[: -len(WHOLE_RUN_SUFFIX)])
    if m is None:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}")
    return m


def higher_is_better(name: str) -> bool:
    """True when a larger value of ``name`` is better (a regression is a fall), else False."""
    return lookup(name).higher_is_better


def slo_metrics() -> list[Metric]:
    """The metrics an SLO expression may name."""
    return [m for m in METRICS.values() if m.slo]


def procedure_figures() -> list[Metric]:
    """The figures a procedure result holds once (each declared by its procedure module, procedures/), not per run."""
    return [m for m in METRICS.values() if m.measurement is not None]


def definitions() -> dict[str, str]:
    """Metric name -> definition, plus the terms (what ``RunMetrics.definitions`` starts from)."""
    out = {m.name: m.definition for m in METRICS.values() if m.kind != "column" and m.measurement is None}
    out.update(TERMS)
    return out


@dataclass(frozen=True)
class Figure:
    """A figure shown by the reports: a metric, a statistic (``p50``..., None for a scalar) and a label."""

    name: str
    metric: str
    statistic: str | None
    label: str

    @property
    def percentile(self) -> float | None:
        return float(self.statistic[1:]) if self.statistic and self.statistic.startswith("p") else None


FIGURES: dict[str, Figure] = {f.name: f for f in (
    *(Figure(f"{m}_{p}", m, p, f"{lookup(m).title} {p.upper()}")
      for m in ("ttft", "tpot", "e2e", "itl") for p in ("p50", "p99")),
    *(Figure(m, m, None, lookup(m).title) for m in ("output_throughput", "request_throughput", "input_throughput",
                                                    "success_rate", "request_count", "benchmark_duration")),
)}
