"""SLO thresholds and assertions with readable failure messages (docs/architecture.md "pytest shape").

An SLO is written the way people say it: ``ttft.p99 <= 500ms``, ``itl.p99.9 <= 200ms``,
``success_rate >= 99%``, ``output_throughput >= 2000 tok/s``, ``fluidity.p1 >= 0.9``. Three shapes:

* ``<metric>.<statistic> <op> <threshold>``: an aggregate of a distribution (``pXX`` for any
  percentile, ``mean``, ``max``, ``min``), checked against the run's :class:`~.stats.Estimate`;
* ``<scalar> <op> <threshold>``: a run-level figure (throughputs, success rate, goodput ...);
* ``<metric> <op> <threshold>`` on a distribution metric: a *per-request* SLO. It holds for a run
  when every request meets it; :meth:`SLO.ok` gives the per-request mask that goodput and the
  search criteria of §5.2.2.3 / §5.5.2 use.

The verdict of these SLOs is the user's verdict on the SUT. It never mixes with the draft's
methodology compliance (§2, compliance/), which judges the run, not the SUT.

Every SLO gets one of three verdicts (issue 47, docs/slo-and-compliance.md "Three verdicts"): PASS when a
one-sided bound at the SLO's confidence lies on the good side of the threshold, FAIL when it lies on the
bad side, INCONCLUSIVE otherwise, with about how many more requests would decide. A percentile of a
per-request figure is judged by the exact binomial bound on the share of requests beyond its threshold (a
failed request counts as beyond), a pooled percentile (ITL) by a bound over requests on each request's
share of gaps beyond it, a share (success rate, good fraction) by the binomial bound, a mean by a
batch-means bound over requests in send order, a window rate by its batch-means interval; a figure with
no bound (a procedure's scalar, a maximum) keeps a two-way verdict on its value (method ``point``). The
confidence is the SLO's own (``ttft.p99 <= 500ms confidence=99%``), the call's, or
:data:`DEFAULT_CONFIDENCE` (``--llm-slo-confidence``). :class:`StopCondition` judges the SLOs known before
a run at a fixed schedule of looks while it runs (stats/sequential.py).

:func:`assert_slo` reports every SLO it judged to the recorder in :data:`SLO_RECORDER` when one is
set (the pytest plugin sets it around a test's call, so SLOs asserted in a test body reach the
report); outside pytest it is a plain function. Given the client's measurement error of a figure
(``client_error``, the client delay propagated to it: loadgen/selfcheck.py), a verdict whose
threshold lies within that error of the value says so in its message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from . import registry
from .chunking import ITL_NOT_MEASURABLE
from .stats import MIN_SAMPLES, Estimate, batch_means_mean
from .stats.bounds import ShareDecision, SLOVerdict, burst_design_effect, share_bounds, share_verdict
from .stats.bounds import design_effect as _design_effect_of
from .stats.drift import Drift, halves_drift
from .stats.sequential import LookSchedule, look_schedule
from .units import compact_num as _num
from .units import format_value

__all__ = [
    "DEFAULT_BURST_LENGTH",
    "DEFAULT_CONFIDENCE",
    "METRICS",
    "MetricInfo",
    "ClientError",
    "FiguresView",
    "RunMetricsLike",
    "SLO",
    "SLO_RECORDER",
    "SLOError",
    "SLOInconclusive",
    "SLOResult",
    "SLOInconclusiveWarning",
    "SLOUndersampledWarning",
    "SLOViolation",
    "StopCondition",
    "StopDecision",
    "SLOVerdict",
    "assert_slo",
    "evaluate",
    "inconclusive_policy",
    "raise_for_results",
    "format_quantity",
    "good_mask",
    "parse_slo",
    "parse_slo_list",
    "recording",
    "register_metric",
    "required_samples",
    "set_default_burst_length",
    "set_default_confidence",
]


class SLOError(ValueError):
    """An SLO expression that cannot be parsed or makes no sense (names the problem)."""


class SLOViolation(AssertionError):
    """One or more SLOs failed; ``results`` holds every evaluated :class:`SLOResult`."""

    def __init__(self, message: str, results: Sequence[SLOResult] = ()) -> None:
        super().__init__(message)
        self.results = list(results)


class SLOInconclusive(SLOViolation):
    """No SLO failed but one or more are INCONCLUSIVE (neither shown to hold nor not to, at their confidence).

    A subclass of :class:`SLOViolation` (so of AssertionError): whoever does not tell it apart fails the
    test, the safe reading of "not shown to hold"; the pytest plugin maps it per ``--llm-inconclusive``.
    """


class SLOUndersampledWarning(UserWarning):
    """An SLO passed on a percentile that has fewer samples than §5.1.4.3 asks for."""


class SLOInconclusiveWarning(UserWarning):
    """An SLO was INCONCLUSIVE and the INCONCLUSIVE policy is ``pass`` (``--llm-inconclusive pass``)."""


# --------------------------------------------------------------------------------------------
# Metric catalogue
# --------------------------------------------------------------------------------------------

#: Unit families of the SLO parser (units.FAMILIES restricted to what an SLO can name).
UNIT_FAMILIES = ("time", "token_rate", "request_rate", "fraction", "ratio", "tokens", "count")


@dataclass(frozen=True)
class MetricInfo:
    """One metric an SLO can name, derived from the metric registry: kind, unit family, direction."""

    name: str
    kind: str  # "distribution" (per-request samples) | "scalar" (one figure per run)
    unit: str  # one of UNIT_FAMILIES (the family of the registry's unit)
    higher_is_better: bool
    title: str
    description: str = ""
    per_token: bool = False  # a time per token: also accepts "ms/tok"

    def __post_init__(self) -> None:
        if self.kind not in ("distribution", "scalar"):
            raise ValueError(f"metric {self.name}: kind must be 'distribution' or 'scalar', not {self.kind!r}")
        if self.unit not in UNIT_FAMILIES:
            raise ValueError(f"metric {self.name}: unit family must be one of {UNIT_FAMILIES}, not {self.unit!r}")

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"

    @classmethod
    def from_registry(cls, m: registry.Metric) -> MetricInfo:
        return cls(m.name, m.kind, m.family, m.higher_is_better, m.title, f"{m.definition} [{m.section}]"
                   if m.section else m.definition, per_token=m.per_token)


#: SLO name (a metric or one of its aliases) -> MetricInfo; built from registry.slo_metrics().
METRICS: dict[str, MetricInfo] = {}
#: alias -> canonical metric name
_ALIASES: dict[str, str] = {}


def register_metric(info: MetricInfo) -> MetricInfo:
    """Add (or replace) a metric in the SLO catalogue (extensions; built-ins come from the registry)."""
    METRICS[info.name] = info
    return info


def _from_declaration(m: registry.Metric) -> None:
    """Every SLO metric declared (``slo=True``), now or later, joins the catalogue with its aliases."""
    if m.slo:
        register_metric(MetricInfo.from_registry(m))
        _ALIASES.update({a: m.name for a in m.aliases})


registry.on_declare(_from_declaration)

# --------------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------------

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
_TOKEN_RATE_UNITS = {"tok/s": 1.0, "tokens/s": 1.0, "token/s": 1.0, "tps": 1.0}
_REQUEST_RATE_UNITS = {"req/s": 1.0, "requests/s": 1.0, "request/s": 1.0, "rps": 1.0}
_TOKEN_UNITS = {"tok": 1.0, "tokens": 1.0}
_COUNT_UNITS = {"requests": 1.0, "request": 1.0, "req": 1.0}
_PER_TOKEN_SUFFIXES = ("/tok", "/token")


def _unit_factor(info: MetricInfo, unit: str | None, text: str) -> float:
    """Factor turning a number with ``unit`` into the metric's base unit; SLOError if it does not fit."""
    u = unit.strip() if unit else ""
    if info.unit == "time":
        if info.per_token:
            for suffix in _PER_TOKEN_SUFFIXES:
                if u.endswith(suffix):
                    u = u[: -len(suffix)]
                    break
        if not u:
            raise SLOError(f"{text!r}: {info.name} is a time; give a unit (ms, s or us), e.g. '500ms'")
        if u in _TIME_UNITS:
            return _TIME_UNITS[u]
        raise SLOError(f"{text!r}: unit {unit!r} does not fit {info.name}, a time (use ms, s or us)")
    if u in _TIME_UNITS:
        raise SLOError(f"{text!r}: {info.name} is not a time; the time unit {unit!r} does not fit "
                       f"(expected {_expected_units(info)})")
    if info.unit == "token_rate":
        if not u or u in _TOKEN_RATE_UNITS:
            return 1.0
    elif info.unit == "request_rate":
        if not u or u in _REQUEST_RATE_UNITS:
            return 1.0
    elif info.unit in ("fraction", "ratio"):
        if not u:
            return 1.0
        if u == "%":
            return 0.01
    elif info.unit == "tokens":
        if not u or u in _TOKEN_UNITS:
            return 1.0
    elif info.unit == "count":
        if not u or u in _COUNT_UNITS:
            return 1.0
    raise SLOError(f"{text!r}: unit {unit!r} does not fit {info.name} (expected {_expected_units(info)})")


def _expected_units(info: MetricInfo) -> str:
    return {
        "time": "ms, s or us",
        "token_rate": "tok/s or a plain number",
        "request_rate": "req/s or a plain number",
        "fraction": "% or a fraction in [0, 1]",
        "ratio": "a number in [0, 1] or %",
        "tokens": "tokens or a plain number",
        "count": "requests or a plain number",
    }[info.unit]


def format_quantity(value: float, unit_family: str, *, like: float | None = None) -> str:
    """Print ``value`` (base units) naturally: ``612.3 ms``, ``2.5 s``, ``2000 tok/s``, ``99.5%``.

    ``like`` picks the unit from another value (to print a CI's bounds in the value's unit). The
    formatter is ``units.format_value`` (compact style), the same one the reports use.
    """
    return format_value(value, unit_family, style="compact", like=like)


def _format_range(lo: float, hi: float, unit_family: str, like: float) -> str:
    """``580.1–640.7 ms``: both bounds in the unit ``like`` selects, the unit printed once."""
    if unit_family == "fraction":
        return f"{_num(lo * 100)}–{_num(hi * 100)}%"
    a = format_quantity(lo, unit_family, like=like)
    b = format_quantity(hi, unit_family, like=like)
    a_num, _, a_unit = a.partition(" ")
    _, _, b_unit = b.partition(" ")
    if a_unit and a_unit == b_unit:
        return f"{a_num}–{b}"
    return f"{a}–{b}"


# --------------------------------------------------------------------------------------------
# The SLO type
# --------------------------------------------------------------------------------------------

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<=": np.less_equal,
    "<": np.less,
    ">=": np.greater_equal,
    ">": np.greater,
}
_NEGATED = {"<=": ">", "<": ">=", ">=": "<", ">": "<="}
_OP_ALIASES = {"≤": "<=", "≥": ">=", "=<": "<=", "=>": ">="}

_SLO_RE = re.compile(
    r"""^\s*
    (?P<metric>[A-Za-z_][A-Za-z0-9_]*)
    (?:\.(?P<stat>[A-Za-z]+[0-9]*(?:\.[0-9]+)?))?
    \s*(?P<op><=|>=|=<|=>|<|>|≤|≥)\s*
    (?P<num>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)
    \s*(?P<unit>[^\s0-9.][^\s]*)?\s*$""",
    re.VERBOSE,
)
_PCT_RE = re.compile(r"^p([0-9]+(?:\.[0-9]+)?)$")
#: A trailing ``confidence=99%`` (or ``confidence=0.99``): the SLO's own confidence.
_CONF_RE = re.compile(r"\s+confidence\s*=\s*(?P<num>[0-9]*\.?[0-9]+)\s*(?P<pct>%)?\s*$", re.IGNORECASE)
_STAT_ALIASES = {"median": "p50", "avg": "mean", "average": "mean"}


@dataclass(frozen=True)
class SLO:
    """One threshold, e.g. ``ttft.p99 <= 500ms`` (threshold in base units: s, 1/s, fraction).

    ``statistic`` is ``"p99"``/``"p99.9"``/``"mean"``/``"max"``/``"min"``, or None for a scalar
    metric or a per-request SLO. One type serves test assertions, the search criteria of
    §5.2.2.3 / §5.5.2 and goodput.
    """

    metric: str
    statistic: str | None
    operator: str
    threshold: float
    text: str = field(default="", compare=False)
    #: the confidence this SLO is judged at (``confidence=99%`` in its text); None: the call's or the default
    confidence: float | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise SLOError(_unknown_metric(self.metric, self.text or self.metric))
        if self.operator not in _OPS:
            raise SLOError(f"{self.text!r}: operator {self.operator!r} not one of <=, <, >=, >")
        if self.confidence is not None and not 0.5 <= self.confidence < 1.0:
            raise SLOError(f"{self.text!r}: confidence must be in [50%, 100%), got {self.confidence:g}")

    # -- what it is ----------------------------------------------------------------------------
    @property
    def info(self) -> MetricInfo:
        return METRICS[self.metric]

    @property
    def percentile(self) -> float | None:
        """The percentile (0–100) of a ``pXX`` statistic, else None."""
        if self.statistic is None:
            return None
        m = _PCT_RE.match(self.statistic)
        return float(m.group(1)) if m else None

    @property
    def per_request(self) -> bool:
        """True when the SLO applies to each request (a distribution metric with no statistic)."""
        return self.statistic is None and self.info.kind == "distribution"

    @property
    def label(self) -> str:
        """``TTFT P99``, ``E2E mean``, ``Success rate``."""
        title = self.info.title
        if self.statistic is None:
            return title
        if self.percentile is not None:
            return f"{title} P{self.statistic[1:]}"
        return f"{title} {self.statistic}"

    def threshold_text(self) -> str:
        return format_quantity(self.threshold, self.info.unit)

    def __str__(self) -> str:
        return f"{self.label} {self.operator} {self.threshold_text()}"

    # -- checking values -----------------------------------------------------------------------
    def compare(self, value: float) -> bool:
        """True when ``value`` (base units) meets the threshold; NaN never does."""
        if value is None or math.isnan(value):
            return False
        return bool(_OPS[self.operator](value, self.threshold))

    def ok(self, values: Any) -> np.ndarray:
        """Per-request mask: True where a request meets this SLO (NaN -> False).

        Only for per-request SLOs (``ttft <= 500ms``); an aggregate SLO has no per-request meaning.
        """
        if not self.per_request:
            raise SLOError(f"{self.text or self}: ok() needs a per-request SLO (a distribution metric "
                           f"with no statistic, e.g. '{self.metric} {self.operator} ...')")
        arr = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore"):
            res = _OPS[self.operator](arr, self.threshold)
        return np.asarray(res & ~np.isnan(arr), dtype=bool)

    @property
    def reversed(self) -> bool:
        """True for a bound on the good side (``ttft.min >= 5ms``, parsed with ``allow_reversed``)."""
        return (self.operator in (">=", ">")) != self.info.higher_is_better

    def beyond(self, values: Any) -> np.ndarray:
        """Per value: True where it is on the wrong side of the threshold (``> X`` for ``<= X``, ``>= X`` for
        ``< X``; a tie meets ``<=``/``>=``). NaN is not beyond (undefined: see :func:`evaluate`)."""
        arr = np.asarray(values, dtype=float)
        with np.errstate(invalid="ignore"):
            res = _OPS[_NEGATED[self.operator]](arr, self.threshold)
        return np.asarray(res, dtype=bool)

    def to_json(self) -> dict[str, Any]:
        d = {"metric": self.metric, "statistic": self.statistic, "operator": self.operator,
             "threshold": self.threshold, "text": self.text or str(self)}
        if self.confidence is not None:
            d["confidence"] = self.confidence
        return d


def _unknown_metric(name: str, text: str) -> str:
    dists = sorted(k for k, v in METRICS.items() if v.kind == "distribution")
    scalars = sorted(k for k, v in METRICS.items() if v.kind == "scalar")
    return (f"{text!r}: unknown metric {name!r}. Known distributions (use .p50/.p99/.p99.9/.mean/.max/.min, "
            f"or none for a per-request SLO): {', '.join(dists)}. Known scalars: {', '.join(scalars)}")


def parse_slo(text: str | SLO, *, allow_reversed: bool = False) -> SLO:
    """Parse ``'ttft.p99 <= 500ms'`` into an :class:`SLO`; :class:`SLOError` names the problem.

    A trailing ``confidence=99%`` (or ``confidence=0.99``) sets the confidence this SLO is judged at.

    ``allow_reversed=True`` accepts a bound on the wrong side of the metric's good direction
    (e.g. ``ttft.min >= 5ms`` as a sanity floor); by default that is an error, as it is
    almost always a typo.
    """
    if isinstance(text, SLO):
        return text
    if not isinstance(text, str) or not text.strip():
        raise SLOError(f"empty SLO expression {text!r}; expected e.g. 'ttft.p99 <= 500ms'")
    src = text.strip()
    confidence = None
    cm = _CONF_RE.search(src)
    if cm:
        confidence = float(cm.group("num")) * (0.01 if cm.group("pct") else 1.0)
        if not 0.5 <= confidence < 1.0:
            raise SLOError(f"{src!r}: confidence must be in [50%, 100%) (e.g. confidence=99%), got {cm.group(0).strip()}")
    m = _SLO_RE.match(src[: cm.start()] if cm else src)
    if not m:
        raise SLOError(f"{src!r}: cannot parse; expected '<metric>[.<statistic>] <op> <number>[unit]', "
                       f"e.g. 'ttft.p99 <= 500ms', 'success_rate >= 99%', 'output_throughput >= 2000 tok/s'")
    metric = m.group("metric").lower()
    metric = _ALIASES.get(metric, metric)
    if metric not in METRICS:
        raise SLOError(_unknown_metric(metric, src))
    info = METRICS[metric]
    stat = m.group("stat")
    if stat is not None:
        stat = _STAT_ALIASES.get(stat.lower(), stat.lower())
        if info.kind == "scalar":
            raise SLOError(f"{src!r}: {metric} is a single figure per run; it takes no statistic (.{stat})")
        pm = _PCT_RE.match(stat)
        if pm:
            p = float(pm.group(1))
            if not 0.0 < p < 100.0:
                raise SLOError(f"{src!r}: percentile {stat} out of range; use p0 < pXX < p100 (or .min / .max)")
            stat = f"p{p:g}"
        elif stat not in ("mean", "max", "min"):
            raise SLOError(f"{src!r}: unknown statistic {stat!r}; use pXX (e.g. p50, p99, p99.9), mean, max or min")
    op = m.group("op")
    op = _OP_ALIASES.get(op, op)
    number = float(m.group("num"))
    threshold = number * _unit_factor(info, m.group("unit"), src)
    if info.unit in ("fraction", "ratio") and not 0.0 <= threshold <= 1.0:
        hint = f"; did you mean {_num(number)}%?" if m.group("unit") is None and 1 < number <= 100 else ""
        raise SLOError(f"{src!r}: {metric} is a fraction in [0, 1], {_num(number)} is out of range{hint}")
    if threshold < 0:
        raise SLOError(f"{src!r}: negative threshold for {metric}")
    if not allow_reversed:
        lower_bound = op in (">=", ">")
        if lower_bound != info.higher_is_better:
            better = "higher" if info.higher_is_better else "lower"
            want = ">= or >" if info.higher_is_better else "<= or <"
            raise SLOError(f"{src!r}: {metric} is {better}-is-better, so an SLO bounds it with {want}; "
                           f"'{op}' looks reversed")
    return SLO(metric=metric, statistic=stat, operator=op, threshold=threshold, text=src, confidence=confidence)


def parse_slo_list(values: str | Iterable[str] | None, *, source: str) -> list[SLO]:
    """Parse SLOs from an ini key (lines) or a repeated CLI option (``--llm-slo``).

    Each value may hold several SLOs separated by newlines, ``;`` or ``,``. Errors name the
    source, e.g. ``--llm-slo: 'ttft.p99 <= 500': ttft is a time; give a unit ...``.
    """
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    out: list[SLO] = []
    for value in values:
        for part in re.split(r"[;,\n]", value):
            part = part.strip()
            if not part or part.startswith("#"):
                continue
            try:
                out.append(parse_slo(part))
            except SLOError as exc:
                raise SLOError(f"{source}: {exc}") from None
    return out


# --------------------------------------------------------------------------------------------
# Evaluation against a run's metrics# --------------------------------------------------------------------------------------------


class _DistributionLike(Protocol):
    n: int
    mean: Estimate
    min: float
    max: float


class RunMetricsLike(Protocol):
    """What slo.py needs from metrics.RunMetrics (coded against this Protocol, not the class).

    ``per_request_values`` also gives the ``failed`` column (a missing one: no request failed); a pooled
    percentile reads the run's ``tokens`` and ``itl_option`` when it has them (metrics/itl.py ``request_gaps``).
    """

    distributions: Mapping[str, _DistributionLike]

    def percentile(self, name: str, p: float) -> Estimate: ...

    def scalar(self, name: str) -> Estimate: ...

    def per_request_values(self, name: str) -> np.ndarray: ...


def required_samples(p: float) -> int:
    """Samples a percentile needs (§5.1.4.3: P99 1000, P99.9 10,000; else n >= 1/(1-q), stats.py)."""
    if p in MIN_SAMPLES:
        return MIN_SAMPLES[p]
    q = p / 100.0
    return max(1, math.ceil(round(1.0 / (1.0 - q), 9)))


#: The confidence an SLO is judged at when neither its text nor the call names one (``--llm-slo-confidence``).
DEFAULT_CONFIDENCE = 0.95


def set_default_confidence(confidence: float) -> float:
    """Set :data:`DEFAULT_CONFIDENCE` (the plugin, from ``--llm-slo-confidence``); returns the previous value."""
    global DEFAULT_CONFIDENCE
    if not 0.5 <= confidence < 1.0:
        raise SLOError(f"SLO confidence must be in [0.5, 1), got {confidence!r}")
    previous, DEFAULT_CONFIDENCE = DEFAULT_CONFIDENCE, float(confidence)
    return previous


#: The mean length of a burst of requests beyond a threshold (send order) that share verdicts allow for
#: before they see one (``--llm-slo-burst``): 1 = independent requests, the exact binomial bound. A run's own
#: bursts widen the bound by their design effect when seen (stats/bounds.py ``design_effect``).
DEFAULT_BURST_LENGTH = 1.0


def set_default_burst_length(burst_length: float) -> float:
    """Set :data:`DEFAULT_BURST_LENGTH` (the plugin, from its option); returns the previous value."""
    global DEFAULT_BURST_LENGTH
    if not burst_length >= 1.0:
        raise SLOError(f"a mean burst length is at least 1 request, got {burst_length!r}")
    previous, DEFAULT_BURST_LENGTH = DEFAULT_BURST_LENGTH, float(burst_length)
    return previous


#: How a verdict was reached: ``binomial`` (exact bound on the share of requests beyond the threshold),
#: ``requests-share`` (bound over requests on each one's share of gaps beyond it), ``batch-means`` (a mean or
#: a window rate), ``point`` (no bound: the value against the threshold).
METHODS = ("binomial", "requests-share", "batch-means", "point")


@dataclass(frozen=True, kw_only=True)
class _BoundFields:
    """What a verdict's bound adds to a value (SLOResult's fields; see there)."""

    method: str = "point"
    bound: float | None = None
    limit: float | None = None
    n: int | None = None
    exceedances: float | None = None
    needed_more: int | None = None
    design_effect: float | None = None


@dataclass(frozen=True)
class SLOResult(_BoundFields):
    """The outcome of one SLO on one run: its verdict, the value it was judged on, the bound, a message.

    ``method`` is one of :data:`METHODS`. ``bound`` is the one-sided bound that decided, compared with
    ``limit``: for a percentile the bound on the share of requests (or of a request's gaps) beyond the
    threshold against ``1 - q`` (``q`` for a lower bound such as ``fluidity.p1 >= 0.9``); for a share, a
    mean or a rate the bound on the figure itself against the threshold; None for ``method == "point"``.
    ``n`` requests were judged, of which ``exceedances`` beyond the threshold (for ``requests-share`` the
    sum of the requests' shares). ``needed_more``: for INCONCLUSIVE, about how many more requests at the
    observed share would decide. ``design_effect``: a share bound was taken on ``n/design_effect``
    requests (bursts in send order). ``confidence``: the verdict's (the value's CI keeps its own).
    """

    slo: SLO
    verdict: SLOVerdict
    value: Estimate | None
    message: str
    undersampled: bool = False
    #: the client's measurement error of the value (base unit; None: not known for this figure)
    client_error: float | None = None
    #: the threshold lies within ``client_error`` of the value: the client may have decided the verdict
    within_client_error: bool = False
    confidence: float | None = None

    @property
    def passed(self) -> bool:
        return self.verdict is SLOVerdict.PASS

    @property
    def inconclusive(self) -> bool:
        return self.verdict is SLOVerdict.INCONCLUSIVE

    def to_json(self) -> dict[str, Any]:
        return {"slo": self.slo.to_json(), "verdict": self.verdict.value, "passed": self.passed,
                "undersampled": self.undersampled,
                "value": self.value.to_json() if self.value is not None else None, "message": self.message,
                "client_error": self.client_error, "within_client_error": self.within_client_error,
                "method": self.method, "confidence": self.confidence, "bound": _finite(self.bound),
                "limit": _finite(self.limit), "n": self.n, "exceedances": _finite(self.exceedances),
                "needed_more": self.needed_more, "design_effect": self.design_effect}


def _finite(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


@dataclass(frozen=True)
class _Judged(_BoundFields):
    """A bound's verdict before the message is put together."""

    verdict: SLOVerdict
    text: str

    def fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(_BoundFields)}


def _pct(x: float) -> str:
    return f"{_num(x * 100)}%"


def _share_pct(x: float) -> str:
    """A share as a percentage with enough digits to tell it from the limit (``0.997%`` vs ``1%``)."""
    return f"{float(f'{x * 100:.3g}'):g}%"


def _describe(slo: SLO, est: Estimate) -> str:
    """``TTFT P99 612.3 ms > 500 ms (n=1000, 95% CI 580.1–640.7 ms)``: the value against the threshold."""
    fam = slo.info.unit
    op = slo.operator if slo.compare(est.value) else _NEGATED[slo.operator]
    value = format_quantity(est.value, fam)
    parts = [f"n={est.n}"]
    if est.ci_low is not None and est.ci_high is not None:
        parts.append(f"{_num(est.confidence * 100)}% CI {_format_range(est.ci_low, est.ci_high, fam, est.value)}")
    return f"{slo.label} {value} {op} {slo.threshold_text()} ({', '.join(parts)})"


def _undersampled_note(slo: SLO, est: Estimate) -> str:
    p = slo.percentile
    if p is not None and required_samples(p) > est.n:
        return f"; under-sampled: P{_num(p)} needs >= {required_samples(p)} samples, have {est.n}"
    return f"; under-sampled (n={est.n})"


def _value_for(slo: SLO, run: RunMetricsLike) -> Estimate:
    if slo.info.kind == "scalar":
        return run.scalar(slo.metric)
    p = slo.percentile
    if p is not None:
        return run.percentile(slo.metric, p)
    dist = run.distributions[slo.metric]
    if slo.statistic == "mean":
        return dist.mean
    value = dist.max if slo.statistic == "max" else dist.min
    return Estimate(value=float(value), n=int(dist.n), unit=getattr(dist, "unit", ""))


#: The client's measurement error of an SLO's value (base unit), or None when it is not known.
ClientError = Callable[[SLO, Estimate], "float | None"]


def _client_note(slo: SLO, est: Estimate, client_error: ClientError | None) -> tuple[float | None, bool, str]:
    """(error, within it?, message suffix): a threshold within the client's error of the value."""
    err = client_error(slo, est) if client_error is not None else None
    if err is None or not math.isfinite(err):
        return None, False, ""
    within = abs(est.value - slo.threshold) <= err
    if not within:
        return err, False, ""
    text = format_quantity(err, slo.info.unit, like=est.value)
    return err, True, (f"; within the client's measurement error (±{text}) of the threshold: the client's own "
                       "delay may have decided this verdict")


# -- the bounds of each kind of SLO ------------------------------------------------------------

_SIDE = {"<=": "above", "<": "at or above", ">=": "below", ">": "at or below"}
_FAILED_RULE = "a failed request counts as beyond the threshold"


def _column(run: RunMetricsLike, name: str) -> np.ndarray | None:
    try:
        return np.asarray(run.per_request_values(name))
    except (KeyError, AttributeError):
        return None


def _failed_unvalued(slo: SLO, run: RunMetricsLike, values: np.ndarray) -> np.ndarray:
    """Failed requests without a value of the metric: beyond the threshold (not for a reversed SLO)."""
    failed = _column(run, "failed")
    if failed is None or failed.shape != values.shape or slo.reversed:
        return np.zeros(values.shape, dtype=bool)
    return failed.astype(bool) & np.isnan(values)


def _share_limit(slo: SLO) -> float:
    """``p0``: the share beyond the threshold a percentile SLO allows (``1 - q`` for ``<=``, ``q`` for ``>=``)."""
    q = (slo.percentile or 0.0) / 100.0
    return 1.0 - q if slo.operator in ("<=", "<") else q


def _more_text(d: ShareDecision, unit: str = "requests") -> str:
    if d.verdict is not SLOVerdict.INCONCLUSIVE:
        return ""
    if d.needed_more is None:
        return "; no count of requests at the observed share would decide it (the share equals the limit)"
    seen = f" at the observed share ({_share_pct(d.share)})" if d.n else ""
    return f"; need ~{d.needed_more} more {unit}{seen}"


def _share_text(d: ShareDecision, what: str, how: str) -> str:
    """``share above 500 ms <= 0.78% < 1% (exact binomial bound)``, per verdict."""
    upper_side = d.verdict is SLOVerdict.PASS or (d.verdict is SLOVerdict.INCONCLUSIVE and d.bound == d.upper)
    rel = "<=" if upper_side else ">="
    if d.verdict is SLOVerdict.PASS:
        cmp = f"< {_share_pct(d.p0)}"
    elif d.verdict is SLOVerdict.FAIL:
        cmp = f"> {_share_pct(d.p0)}"
    else:
        cmp = f"not {'<' if upper_side else '>'} {_share_pct(d.p0)}"
    return f"{what} {rel} {_share_pct(d.bound)}, {cmp} ({how})"


@dataclass(frozen=True)
class _Shares:
    """The judged requests of a share SLO in send order: each one's exceedance (0/1, or its share of gaps
    beyond the threshold for ``requests-share``), how many of them failed (counted beyond), the method."""

    x: np.ndarray | None  # None: only the counts are known (a proportion with no per-request column)
    n: int
    k: float
    failed: int
    method: str

    @property
    def observed_effect(self) -> float:
        """The design effect of the exceedances' lag-1 autocorrelation in send order (1: none seen)."""
        return _design_effect_of(self.x) if self.x is not None else 1.0


def _percentile_shares(slo: SLO, run: RunMetricsLike) -> _Shares | None:
    """Binomial: a request is judged when it has a value or failed without one (then beyond)."""
    values = _column(run, slo.metric)
    if values is None or values.dtype.kind != "f":
        return None
    failed = _failed_unvalued(slo, run, values)
    defined = ~np.isnan(values)
    judged = defined | failed
    x = ((slo.beyond(values) & defined) | failed)[judged].astype(np.float64)
    return _Shares(x, int(x.size), float(x.sum()), int(failed.sum()), "binomial")


def _pooled_shares(slo: SLO, run: RunMetricsLike) -> _Shares | None:
    """Requests-share: each successful request's share of its gaps beyond the threshold (a failed one: 1)."""
    tallies = _gap_tallies(slo, run)
    if tallies is None:
        return None
    failed = _column(run, "failed")
    failed = (np.zeros(tallies.count.shape, dtype=bool) if failed is None or slo.reversed
              else failed.astype(bool))
    has = tallies.count > 0
    shares = np.where(has, tallies.selected / np.where(has, tallies.count, 1.0), 0.0)
    x = np.where(failed, 1.0, shares)[has | failed]
    return _Shares(x, int(x.size), float(x.sum()), int(failed.sum()), "requests-share")


#: The per-request column of each share metric's numerator (which requests it counts, send order); a run
#: without it gives the counts only (no design effect of the run's own).
_PROPORTION_COLUMNS = {"success_rate": "ok", "error_rate": "failed", "good_fraction": "good"}


def _proportion_shares(slo: SLO, run: RunMetricsLike, est: Estimate) -> _Shares:
    """A share of the requests (success rate, good fraction): the requests counted against the SLO."""
    n = int(est.n)
    x_count = int(round(est.value * n))
    good_high = slo.operator in (">=", ">")
    k = n - x_count if good_high else x_count
    seq = None
    name = _PROPORTION_COLUMNS.get(slo.metric)
    col, ok, failed = (_column(run, name) if name else None), _column(run, "ok"), _column(run, "failed")
    if col is not None and ok is not None and failed is not None:
        judged = ok.astype(bool) | failed.astype(bool)
        counted = col.astype(bool)[judged]  # the metric's numerator, per judged request
        against = ~counted if good_high else counted
        if int(judged.sum()) == n and int(against.sum()) == k:
            seq = against.astype(np.float64)
    return _Shares(seq, n, float(k), 0, "binomial")


def _effect_text(d: float, observed: float, prior: float) -> str:
    if d <= 1.0:
        return ""
    why = []
    if observed > 1.0 and observed >= prior:
        why.append(f"the exceedances' lag-1 autocorrelation in send order gives {_num(observed)}")
    if prior > 1.0:
        why.append(f"the declared burst allowance gives {_num(prior)}")
    return f"; the bound is taken on n/{_num(d)} requests (design effect {_num(d)}: {', '.join(why) or 'given'})"


def _share_judged(sh: _Shares, p0: float, conf: float, in_flight: int, effect: float | None,
                  prior: float) -> tuple[ShareDecision, str]:
    """The share verdict and the design-effect note: ``effect`` given (a look: fixed before it), or the
    larger of the run's own and the declared burst allowance's."""
    observed = sh.observed_effect
    d = max(prior, observed) if effect is None else max(float(effect), 1.0)
    dec = share_verdict(sh.k, sh.n, min(max(p0, 0.0), 1.0), conf, method=sh.method, in_flight=in_flight,
                        design_effect=d)
    return dec, _effect_text(d, observed if effect is None else 1.0, prior if effect is None else d)


def _share_judgement(d: ShareDecision, method: str, text: str, sh: _Shares) -> _Judged:
    return _Judged(d.verdict, text, method=method, bound=d.bound, limit=d.p0, n=sh.n, exceedances=sh.k,
                   needed_more=d.needed_more, design_effect=d.design_effect)


def _judge_percentile(slo: SLO, run: RunMetricsLike, conf: float, in_flight: int, effect: float | None,
                      prior: float) -> _Judged | None:
    """Binomial: of the judged requests, how many lie beyond the threshold."""
    sh = _percentile_shares(slo, run)
    if sh is None:
        return None
    d, note = _share_judged(sh, _share_limit(slo), conf, in_flight, effect, prior)
    side = f"{_SIDE[slo.operator]} {slo.threshold_text()}"
    rule = "" if slo.reversed else (f", {sh.failed} of them failed ({_FAILED_RULE})" if sh.failed
                                     else f" ({_FAILED_RULE})")
    flight = f", {in_flight} in flight (counted against the verdict)" if in_flight else ""
    text = (f"{int(sh.k)} of {sh.n} requests {side}{rule}{flight}; "
            f"{_share_text(d, f'share {side}', 'exact binomial bound')}{note}{_more_text(d)}")
    return _share_judgement(d, "binomial", text, sh)


def _gap_tallies(slo: SLO, run: RunMetricsLike) -> Any:
    """Each request's gaps of a pooled metric (count, sum, how many beyond the threshold), or None: from the
    run's token times (metrics/itl.py ``RunTokens.request_gaps``; None when the run kept none)."""
    tokens = getattr(run, "tokens", None)
    ok = _column(run, "ok")
    if tokens is None or ok is None or not hasattr(tokens, "request_gaps"):
        return None
    return tokens.request_gaps(slo.metric, ok.astype(bool), slo.beyond, str(getattr(run, "itl_option", None) or "B"),
                               index=_column(run, "index"))


def _judge_pooled(slo: SLO, run: RunMetricsLike, conf: float, in_flight: int, effect: float | None,
                  prior: float) -> _Judged:
    """Requests-share: each request's share of its gaps beyond the threshold, a bound on their mean."""
    sh = _pooled_shares(slo, run)
    if sh is None:
        return _Judged(SLOVerdict.INCONCLUSIVE, "the run kept no per-request gaps, and the pooled gaps of one request "
                       "are not independent samples: no bound", method="requests-share")
    d, note = _share_judged(sh, _share_limit(slo), conf, in_flight, effect, prior)
    side = f"{_SIDE[slo.operator]} {slo.threshold_text()}"
    rule = "" if slo.reversed else f" ({_FAILED_RULE}: share 1)"
    flight = f", {in_flight} in flight (counted against the verdict)" if in_flight else ""
    text = (f"over {sh.n} requests{rule}{flight}, the mean of each request's share of gaps {side} is "
            f"{_share_pct(d.share) if sh.n else 'undefined'}; "
            f"{_share_text(d, 'that mean', 'Chernoff–Hoeffding bound over requests: the gaps of one request are not independent')}"
            f"{note}{_more_text(d)}")
    return _share_judgement(d, "requests-share", text, sh)


def _metric_bound_text(slo: SLO, verdict: SLOVerdict, lower: float, upper: float, how: str,
                       like: float) -> tuple[float, str]:
    """(the bound shown, ``E2E mean <= 2.31 s < 2.5 s (upper bound, how)``) for a bound on the figure itself."""
    good_high = slo.operator in (">=", ">")
    if verdict is SLOVerdict.PASS:
        use_lower = good_high
    elif verdict is SLOVerdict.FAIL:
        use_lower = not good_high
    else:  # the bound on the side of the threshold the value lies
        use_lower = like >= slo.threshold
    bound = lower if use_lower else upper
    rel = ">=" if use_lower else "<="
    thr = slo.threshold_text()
    if verdict is SLOVerdict.INCONCLUSIVE:
        cmp = f"not {'>' if use_lower else '<'} {thr}"
    else:
        cmp = f"{'>' if use_lower else '<'} {thr}"
    text = (f"{slo.label} {rel} {format_quantity(bound, slo.info.unit, like=like)} "
            f"({'lower' if use_lower else 'upper'} bound), {cmp} ({how})")
    return bound, text


def _decide_interval(slo: SLO, lower: float, upper: float) -> SLOVerdict:
    """PASS when the whole one-sided bound is on the good side (strictly), FAIL when on the bad side."""
    t = slo.threshold
    if slo.operator in ("<=", "<"):
        return SLOVerdict.PASS if upper < t else SLOVerdict.FAIL if lower > t else SLOVerdict.INCONCLUSIVE
    return SLOVerdict.PASS if lower > t else SLOVerdict.FAIL if upper < t else SLOVerdict.INCONCLUSIVE


def _judge_proportion(slo: SLO, run: RunMetricsLike, est: Estimate, conf: float, in_flight: int,
                      effect: float | None, prior: float) -> _Judged:
    """A share of requests (success rate, good fraction): the exact binomial bound on it."""
    sh = _proportion_shares(slo, run, est)
    good_high = slo.operator in (">=", ">")
    p0 = 1.0 - slo.threshold if good_high else slo.threshold
    d, note = _share_judged(sh, p0, conf, in_flight, effect, prior)
    lower, upper = (1.0 - d.upper, 1.0 - d.lower) if good_high else (d.lower, d.upper)
    bound, text = _metric_bound_text(slo, d.verdict, lower, upper, f"exact binomial bound over {sh.n} requests",
                                     est.value)
    flight = f"; {in_flight} requests in flight counted against the verdict" if in_flight else ""
    return _Judged(d.verdict, text + flight + note + _more_text(d), method="binomial", bound=bound, limit=slo.threshold,
                   n=sh.n, exceedances=sh.k, needed_more=d.needed_more, design_effect=d.design_effect)


def _interval_more(n: int, value: float, lower: float, upper: float, threshold: float) -> int | None:
    """About how many more requests narrow a ±h interval (h ∝ 1/√n) to clear the threshold: n·(h/|x̄-t|)² - n."""
    gap = abs(value - threshold)
    half = (upper - lower) / 2
    if not gap > 0 or not math.isfinite(half):
        return None
    return max(math.ceil(n * (half / gap) ** 2) - n, 0)


def _judge_mean(slo: SLO, run: RunMetricsLike, est: Estimate, conf: float,
                in_flight: int) -> tuple[_Judged, Estimate] | None:
    """Batch means over requests in send order (a pooled mean: batches of requests, weighted by their gaps)."""
    values, weights = _column(run, slo.metric), None
    if values is None:
        tallies = _gap_tallies(slo, run) if run.distributions.get(slo.metric) is not None else None
        if tallies is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            values = np.where(tallies.count > 0, tallies.total / tallies.count, np.nan)
        weights = tallies.count
    shown = batch_means_mean(values, weights=weights, unit=est.unit, confidence=est.confidence)
    if in_flight:
        return _Judged(SLOVerdict.INCONCLUSIVE, f"{in_flight} requests in flight: a mean is judged once every request "
                       "of a look has finished", method="batch-means"), shown
    bm = batch_means_mean(values, weights=weights, unit=est.unit, confidence=2.0 * conf - 1.0)
    if bm.ci_low is None or bm.ci_high is None:
        return _Judged(SLOVerdict.INCONCLUSIVE, f"too few requests ({bm.n}) for a batch-means bound",
                       method="batch-means"), shown
    verdict = _decide_interval(slo, bm.ci_low, bm.ci_high)
    how = f"batch means over {bm.n} requests in send order"
    bound, text = _metric_bound_text(slo, verdict, bm.ci_low, bm.ci_high, how, bm.value)
    failed = _column(run, "failed")
    if failed is not None and failed.any():
        text += f"; the {int(failed.sum())} failed requests have no value and are not in the mean"
    more = (_interval_more(bm.n, bm.value, bm.ci_low, bm.ci_high, slo.threshold)
            if verdict is SLOVerdict.INCONCLUSIVE else None)
    if more is not None:
        text += f"; need ~{more} more requests"
    return _Judged(verdict, text, method="batch-means", bound=bound, limit=slo.threshold, n=bm.n,
                   needed_more=more), shown


_SUB_WINDOWS = re.compile(r"\((\d+) sub-windows\)")


def _judge_rate(slo: SLO, est: Estimate, conf: float) -> _Judged:
    """A window rate: its batch-means interval (two-sided at the run's confidence) read back as a
    standard error ``se = half / t(1-(1-c0)/2, b-1)``; the one-sided bound at ``c`` is ``x ∓ t(c, b-1)·se``."""
    from scipy.stats import t as student

    m = _SUB_WINDOWS.search(est.method or "")
    b = int(m.group(1)) if m else 10
    if est.ci_low is None or est.ci_high is None or b < 2:
        return _Judged(SLOVerdict.INCONCLUSIVE, "no batch-means interval (too few events in the window)",
                       method="batch-means")
    se = (est.ci_high - est.ci_low) / 2.0 / float(student.ppf(0.5 + est.confidence / 2.0, b - 1))
    half = float(student.ppf(conf, b - 1)) * se
    lower, upper = est.value - half, est.value + half
    verdict = _decide_interval(slo, lower, upper)
    bound, text = _metric_bound_text(slo, verdict, lower, upper, f"batch means over {b} sub-windows of the "
                                     "steady-state window", est.value)
    if verdict is SLOVerdict.INCONCLUSIVE:
        text += "; a longer run would narrow it"
    return _Judged(verdict, text, method="batch-means", bound=bound, limit=slo.threshold, n=est.n)


def _point(slo: SLO, est: Estimate, why: str) -> _Judged:
    verdict = SLOVerdict.PASS if slo.compare(est.value) else SLOVerdict.FAIL
    return _Judged(verdict, f"{verdict} (method point: {why}; judged on its value)", limit=slo.threshold, n=est.n)


def _judge(slo: SLO, run: RunMetricsLike, est: Estimate, conf: float, in_flight: int, effect: float | None,
           prior: float) -> tuple[_Judged, Estimate]:
    """The verdict of an aggregate SLO by its kind, and the estimate the message shows."""
    metric = registry.METRICS.get(slo.metric)
    agg = metric.aggregation if metric is not None else None
    if slo.info.kind == "scalar":
        if agg == registry.PROPORTION:
            return _judge_proportion(slo, run, est, conf, in_flight, effect, prior), est
        if agg == registry.WINDOW_RATE:
            return _judge_rate(slo, est, conf), est
        return _point(slo, est, "a figure with no bound"), est
    if slo.percentile is not None:
        if agg == registry.POOLED:
            return _judge_pooled(slo, run, conf, in_flight, effect, prior), est
        judged = _judge_percentile(slo, run, conf, in_flight, effect, prior)
        return (judged if judged is not None else
                _point(slo, est, "no per-request values in this run to bound the share beyond the threshold")), est
    if slo.statistic == "mean":
        mean = _judge_mean(slo, run, est, conf, in_flight)
        return mean if mean is not None else (_point(slo, est, "no per-request values in this run"), est)
    # max / min: the run's extreme; a failed request without a value lies beyond a latency bound
    values = _column(run, slo.metric)
    failed = int(_failed_unvalued(slo, run, values).sum()) if values is not None and values.dtype.kind == "f" else 0
    if failed:
        return _Judged(SLOVerdict.FAIL, f"FAIL (method point: {failed} failed requests lie beyond the threshold, "
                       f"{_FAILED_RULE})", limit=slo.threshold, n=est.n), est
    return _point(slo, est, f"the run's {slo.statistic} has no bound"), est


def _confidence(slo: SLO, confidence: float | None) -> float:
    conf = slo.confidence if slo.confidence is not None else confidence
    return DEFAULT_CONFIDENCE if conf is None else float(conf)


def evaluate(slo: SLO | str, run_metrics: RunMetricsLike, *, strict: bool = False,
             client_error: ClientError | None = None, confidence: float | None = None,
             in_flight: int = 0, burst_length: float | None = None,
             design_effect: float | None = None, point: bool = False) -> SLOResult:
    """Judge one SLO on a run: PASS, FAIL or INCONCLUSIVE at the SLO's confidence (its ``confidence=``, else
    ``confidence``, else :data:`DEFAULT_CONFIDENCE`). ``strict`` turns a PASS on an under-sampled percentile
    into FAIL (§5.1.4.3); ``client_error`` gives the client's measurement error of the value (a note when it
    spans the threshold). ``in_flight`` unfinished requests (a look while the run runs, :class:`StopCondition`)
    count as beyond the threshold for PASS and as within it for FAIL. A share bound is taken on ``n/d``
    requests, ``d`` the larger of the exceedances' own design effect in send order and that of
    ``burst_length`` (default :data:`DEFAULT_BURST_LENGTH`), or ``design_effect`` when given (a look: fixed
    before it). ``point=True`` judges the value alone, two-way (method ``point``): what a search criterion
    of §5.2.2.3 / §5.5.2 compares at each level (procedures/helpers.py ``criteria_failures``)."""
    slo = parse_slo(slo)
    conf = _confidence(slo, confidence)
    prior = burst_design_effect(DEFAULT_BURST_LENGTH if burst_length is None else burst_length)
    if slo.metric in registry.ITL_METRICS and getattr(run_metrics, "itl_option", None) == "A":
        # App. B.2.1 chose chunk timing: the gaps are between chunks, never judged as ITL (§4.6.3)
        return SLOResult(slo, SLOVerdict.FAIL, None, f"{slo}: {ITL_NOT_MEASURABLE} (App. B.2.1 chose §4.6.3 option A, "
                                                  "Time Between Chunks)", confidence=conf)
    unobserved = getattr(run_metrics, "phase_unobserved", None) if slo.metric in registry.PHASE_METRICS else None
    if isinstance(unobserved, str):  # the server hid its reasoning: a thinking-phase figure is not measured (issue 49)
        return SLOResult(slo, SLOVerdict.INCONCLUSIVE, None, f"{slo}: INCONCLUSIVE (method point: not judged): "
                         f"{unobserved}", confidence=conf, limit=slo.threshold)
    if slo.per_request:
        return _evaluate_per_request(slo, run_metrics, conf)
    try:
        est = _value_for(slo, run_metrics)
    except KeyError:
        return SLOResult(slo, SLOVerdict.FAIL, None, f"{slo.label}: not measured in this run (SLO {slo})",
                         confidence=conf)
    if est.n == 0 or est.value is None or math.isnan(est.value):
        return SLOResult(slo, SLOVerdict.FAIL, est, f"{slo.label}: undefined (n={est.n}); cannot meet {slo}",
                         confidence=conf)
    if point:
        judged, shown = _point(slo, est, "a point verdict was asked for"), est
    else:
        judged, shown = _judge(slo, run_metrics, est, conf, in_flight, design_effect, prior)
    verdict = judged.verdict
    undersampled = bool(est.undersampled)
    if judged.method == "point":
        msg = f"{_describe(slo, shown)}: {judged.text}"
    else:
        msg = f"{_describe(slo, shown)}: {verdict} at {_pct(conf)} confidence: {judged.text}"
    if undersampled:
        msg += _undersampled_note(slo, est)
    err, within, note = _client_note(slo, est, client_error)
    msg += note
    if strict and undersampled and verdict is SLOVerdict.PASS:
        verdict = SLOVerdict.FAIL
        msg += " [strict sampling: under-sampled counts as a failure]"
    return SLOResult(slo, verdict, shown, msg, undersampled, err, within, conf, **judged.fields())


def _evaluate_per_request(slo: SLO, run: RunMetricsLike, conf: float) -> SLOResult:
    try:
        values = np.asarray(run.per_request_values(slo.metric), dtype=float)
    except KeyError:
        return SLOResult(slo, SLOVerdict.FAIL, None, f"{slo.label}: not measured in this run (SLO {slo}, per request)",
                         confidence=conf)
    n = int(values.size)
    mask = slo.ok(values)
    good = int(mask.sum())
    undefined = int(np.isnan(values).sum())
    est = Estimate(value=(good / n) if n else float("nan"), n=n, unit="fraction", method="per-request SLO")
    if n == 0:
        return SLOResult(slo, SLOVerdict.FAIL, est, f"{slo} per request: no requests measured", confidence=conf)
    verdict = SLOVerdict.PASS if good == n else SLOVerdict.FAIL
    extra = f", {undefined} undefined" if undefined else ""
    if verdict is SLOVerdict.PASS:
        msg = f"{slo} per request: all {n} requests meet it"
    else:
        msg = (f"{slo} per request: {n - good} of {n} requests violate it "
               f"({format_quantity(good / n, 'fraction')} met{extra})")
    msg += f": {verdict} (method point: every request of the run, judged on the requests seen)"
    return SLOResult(slo, verdict, est, msg, method="point", confidence=conf, limit=slo.threshold, n=n,
                     exceedances=float(n - good))


#: Receives the results of every :func:`assert_slo` call while set (the plugin: the current test).
SLO_RECORDER: ContextVar[Callable[[Sequence[SLOResult]], None] | None] = ContextVar("llmbench_slo_recorder",
                                                                                  default=None)
#: What :func:`assert_slo` does with an INCONCLUSIVE verdict (and no FAIL): ``fail`` and ``skip`` raise
#: :class:`SLOInconclusive` (the plugin skips the test on ``skip``), ``pass`` warns
#: (:class:`SLOInconclusiveWarning`) and returns. The plugin sets it from ``--llm-inconclusive``.
INCONCLUSIVE_POLICIES = ("fail", "pass", "skip")
_INCONCLUSIVE: ContextVar[str] = ContextVar("llmbench_slo_inconclusive", default="fail")


@contextlib.contextmanager
def recording(recorder: Callable[[Sequence[SLOResult]], None] | None) -> Iterator[None]:
    """Within the block, :func:`assert_slo` hands its results to ``recorder`` (before raising)."""
    token = SLO_RECORDER.set(recorder)
    try:
        yield
    finally:
        SLO_RECORDER.reset(token)


@contextlib.contextmanager
def inconclusive_policy(policy: str) -> Iterator[None]:
    """Within the block, an INCONCLUSIVE verdict is handled as ``policy`` says (:data:`INCONCLUSIVE_POLICIES`)."""
    if policy not in INCONCLUSIVE_POLICIES:
        raise SLOError(f"INCONCLUSIVE policy must be one of {', '.join(INCONCLUSIVE_POLICIES)}, got {policy!r}")
    token = _INCONCLUSIVE.set(policy)
    try:
        yield
    finally:
        _INCONCLUSIVE.reset(token)


def raise_for_results(results: Sequence[SLOResult]) -> list[SLOResult]:
    """Hand ``results`` to the recorder (:data:`SLO_RECORDER`), then raise :class:`SLOViolation` when one
    FAILs, :class:`SLOInconclusive` when none fails but one is INCONCLUSIVE (under the ``pass`` policy: a
    :class:`SLOInconclusiveWarning` instead); either lists every SLO not shown to hold. A passing but
    under-sampled percentile emits :class:`SLOUndersampledWarning`. Returns the results otherwise."""
    __tracebackhide__ = True
    results = list(results)
    recorder = SLO_RECORDER.get()
    if recorder is not None:
        recorder(results)
    failed = [r for r in results if r.verdict is SLOVerdict.FAIL]
    open_ = [r for r in results if r.verdict is SLOVerdict.INCONCLUSIVE]
    if failed or open_:
        bad = failed + open_
        if len(bad) == 1:
            message = bad[0].message
        else:
            head = f"{len(failed)} of {len(results)} SLOs failed" if failed else \
                f"{len(open_)} of {len(results)} SLOs inconclusive"
            if failed and open_:
                head += f", {len(open_)} inconclusive"
            message = f"{head}:\n" + "\n".join(f"  {r.message}" for r in bad)
        if failed or _INCONCLUSIVE.get() != "pass":
            raise (SLOViolation if failed else SLOInconclusive)(message, results)
        warnings.warn(SLOInconclusiveWarning(f"{message} (counted as passed: --llm-inconclusive pass)"),
                      stacklevel=3)
    for r in results:
        if r.undersampled and r.verdict is SLOVerdict.PASS:
            warnings.warn(SLOUndersampledWarning(r.message), stacklevel=3)
    return results


def assert_slo(run_metrics: RunMetricsLike, *slos: SLO | str, strict: bool = False,
               client_error: ClientError | None = None, confidence: float | None = None) -> list[SLOResult]:
    """Assert every SLO on a run: raise :class:`SLOViolation` when one FAILs, :class:`SLOInconclusive` (its
    subclass) when none fails but one is INCONCLUSIVE; either lists every SLO not shown to hold.

    Returns the results when all pass. A passing but under-sampled percentile emits
    :class:`SLOUndersampledWarning` (``strict=True`` turns it into a failure). ``confidence`` applies to
    the SLOs that name none. The results go to the recorder of :data:`SLO_RECORDER` first, when one is set;
    an INCONCLUSIVE verdict follows :func:`inconclusive_policy` (default: raise).
    """
    __tracebackhide__ = True  # the failure message says everything; hide this frame in pytest
    if not slos:
        raise SLOError("assert_slo() needs at least one SLO, e.g. assert_slo(run, 'ttft.p99 <= 500ms')")
    return raise_for_results([evaluate(s, run_metrics, strict=strict, client_error=client_error,
                                       confidence=confidence) for s in slos])


class FiguresView:
    """A run's metrics plus figures of a whole procedure (``registry.procedure_figures()``) as scalars:
    what an SLO on a procedure result reads. ``run`` may be None (a result without run metrics)."""

    def __init__(self, run: RunMetricsLike | None, figures: Mapping[str, Estimate]) -> None:
        self.run = run
        self.figures = dict(figures)
        self.distributions: Mapping[str, _DistributionLike] = run.distributions if run is not None else {}

    def percentile(self, name: str, p: float) -> Estimate:
        if self.run is None:
            raise KeyError(name)
        return self.run.percentile(name, p)

    def scalar(self, name: str) -> Estimate:
        if name in self.figures:
            return self.figures[name]
        if self.run is None:
            raise KeyError(name)
        return self.run.scalar(name)

    def per_request_values(self, name: str) -> np.ndarray:
        if self.run is None:
            raise KeyError(name)
        return self.run.per_request_values(name)

    @property
    def tokens(self) -> Any:
        """The run's token times (a pooled percentile's per-request gaps), None without a run."""
        return getattr(self.run, "tokens", None)

    @property
    def itl_option(self) -> str | None:
        return getattr(self.run, "itl_option", None)

    @property
    def phase_unobserved(self) -> str | None:
        """The run's reason its reasoning-phase figures are not observed (summary.RunMetrics), None without."""
        return getattr(self.run, "phase_unobserved", None)


def good_mask(slos: Iterable[SLO | str], values: Mapping[str, Any] | Callable[[str], Any]) -> np.ndarray:
    """Requests meeting *every* per-request SLO (goodput's numerator); NaN counts as not met.

    ``values`` maps a metric name to its per-request array, or is a callable such as
    ``run_metrics.per_request_values``.
    """
    parsed = [parse_slo(s) for s in slos]
    if not parsed:
        raise SLOError("goodput needs at least one per-request SLO, e.g. 'ttft <= 500ms'")
    get = values if callable(values) else values.__getitem__
    mask: np.ndarray | None = None
    for slo in parsed:
        m = slo.ok(get(slo.metric))
        if mask is not None and m.shape != mask.shape:
            raise SLOError(f"per-request arrays differ in length ({slo.metric}: {m.size}, others: {mask.size})")
        mask = m if mask is None else (mask & m)
    assert mask is not None
    return mask


# --------------------------------------------------------------------------------------------
# Stopping a run once its SLOs are settled (issue 47 item 3; stats/sequential.py)
# --------------------------------------------------------------------------------------------

#: The SLO kinds a run can stop on: those with a bound that holds at a look (a share of requests, a
#: pooled percentile by requests, a mean by batch means).
_SEQUENTIAL_METHODS = ("binomial", "requests-share", "batch-means")


def _sequential_p0(slo: SLO) -> tuple[bool, float | None]:
    """(can a run stop on it?, the share limit its first look is placed by: None for a mean)."""
    if slo.per_request or slo.statistic in ("max", "min"):
        return False, None
    agg = registry.METRICS[slo.metric].aggregation if slo.metric in registry.METRICS else None
    if slo.info.kind == "scalar":
        if agg != registry.PROPORTION:
            return False, None
        p0 = 1.0 - slo.threshold if slo.operator in (">=", ">") else slo.threshold
        return (0.0 < p0 < 1.0), p0
    if slo.percentile is not None:
        return True, _share_limit(slo)
    return slo.statistic == "mean", None


def _fmt_of(slo: SLO) -> Callable[[float], str]:
    """A drift note's formatter of the SLO's figure."""
    return lambda v: format_quantity(v, slo.info.unit)


def _shares_of(slo: SLO, run: RunMetricsLike) -> _Shares | None:
    """A share SLO's judged requests on ``run`` (send order), or None (a mean, no column)."""
    agg = registry.METRICS[slo.metric].aggregation if slo.metric in registry.METRICS else None
    if slo.info.kind == "scalar":
        try:
            return _proportion_shares(slo, run, run.scalar(slo.metric))
        except KeyError:
            return None
    if slo.percentile is not None:
        return _pooled_shares(slo, run) if agg == registry.POOLED else _percentile_shares(slo, run)
    return None


def _observed_effect(slo: SLO, run: RunMetricsLike) -> float:
    """The design effect of a share SLO's exceedances in send order on ``run`` (1 when none is known)."""
    sh = _shares_of(slo, run)
    return sh.observed_effect if sh is not None else 1.0


def _drift(slo: SLO, run: RunMetricsLike, r: SLOResult, remaining: int = 0) -> Drift | None:
    """The halves tests (stats/drift.py) of a share SLO's look against its PASS or FAIL ``r``, or None; a
    percentile of a per-request figure also gets the value trend projected over the ``remaining`` requests."""
    if r.verdict is SLOVerdict.INCONCLUSIVE:
        return None
    sh = _shares_of(slo, run)
    if sh is None or sh.x is None:
        return None
    kw: dict[str, Any] = {}
    values = _column(run, slo.metric) if sh.method == "binomial" and slo.info.kind != "scalar" else None
    if values is not None and r.value is not None and values.dtype.kind == "f":
        sign = 1.0 if slo.operator in ("<=", "<") else -1.0
        judged = ~np.isnan(values) | _failed_unvalued(slo, run, values)
        kw = {"values": sign * values[judged], "percentile": sign * float(r.value.value),
              "threshold": sign * float(slo.threshold), "remaining": remaining}
    return halves_drift(sh.x, r.verdict.value, **kw)


@dataclass(frozen=True)
class StopDecision:
    """What one look decided: ``stop`` when every SLO is settled, with each SLO's latest result."""

    stop: bool
    look: int  # requests sent that the look judged (the first ``look`` ones)
    results: tuple[SLOResult | None, ...]  # per SLO: its verdict at this look, or the look it settled at
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"stop": self.stop, "look": self.look, "reason": self.reason,
                "results": [r.to_json() if r is not None else None for r in self.results]}


class StopCondition:
    """Stop a run once every SLO known before it is settled (PASS or FAIL), at a fixed schedule of looks.

    Each SLO gets its own :func:`~.stats.sequential.look_schedule` over the ``planned`` requests (first look
    at the smallest count that can decide it, then doubling; each look at ``1 - (1-c)/K`` confidence, so
    each direction's error stays at most ``1 - c`` over the run: Bonferroni). The runner (interface):

    1. when the ``n``-th request has been sent and ``n`` is in :attr:`looks`, and again as the first ``n``
       requests finish, it calls :meth:`should_stop` with the metrics of the *finished* ones among the first
       ``n`` sent and the count still in flight; looks of an earlier ``n`` stay open until decided or all
       their requests have finished;
    2. once a decision says ``stop``, it sends no more requests, lets those in flight finish (never cancels
       them), and takes the final verdicts with :meth:`final`, giving it the metrics of the first ``n`` sent
       for the counts it asks (:attr:`settled_at`, and the run's total for an SLO never settled).

    An SLO with no bound at a look (a window rate, a procedure scalar, a maximum, a per-request SLO) keeps
    the run to its plan: :attr:`unsupported` names them and :meth:`should_stop` never stops.
    """

    def __init__(self, slos: Iterable[SLO | str], planned: int, *, confidence: float | None = None,
                 strict: bool = False, burst_length: float | None = None) -> None:
        self.slos = [parse_slo(s) for s in slos]
        self.planned = int(planned)
        self.strict = strict
        self.confidence = confidence
        #: the design effect every share SLO allows for before it sees a burst (the declared burst length)
        self.prior = burst_design_effect(DEFAULT_BURST_LENGTH if burst_length is None else burst_length)
        self.schedules: list[LookSchedule | None] = []
        self.unsupported: list[SLO] = []
        for slo in self.slos:
            ok, p0 = _sequential_p0(slo)
            if not ok:
                self.schedules.append(None)
                self.unsupported.append(slo)
                continue
            self.schedules.append(look_schedule(self.planned, _confidence(slo, confidence), p0=p0,
                                                design_effect=self.prior if p0 is not None else 1.0))
        #: per SLO: the design effect of its next look (the last complete look's, at least the prior)
        self.effect: list[float] = [self.prior] * len(self.slos)
        #: per SLO: (look, its result, the design effect it was taken with) once settled
        self.settled: dict[int, tuple[int, SLOResult, float]] = {}
        #: per SLO: the looks whose PASS/FAIL was not settled because the halves drifted against it
        self.drift: dict[int, list[tuple[int, Drift]]] = {}
        #: per percentile SLO: each look's two bounds on the share beyond its threshold (the report's plot of
        #: the bound narrowing against the limit, report/looks.py)
        self.trace: dict[int, list[dict[str, Any]]] = {}
        self._complete: dict[int, set[int]] = {}

    @property
    def looks(self) -> tuple[int, ...]:
        """Every count of requests sent at which some SLO is looked at, ascending."""
        return tuple(sorted({n for s in self.schedules if s is not None for n in s.looks}))

    @property
    def settled_at(self) -> dict[int, int]:
        """SLO index -> the look (requests) it settled at."""
        return {i: n for i, (n, _, _) in self.settled.items()}

    def should_stop(self, look_metrics: RunMetricsLike, sent: int, in_flight: int = 0) -> StopDecision:
        """Judge the look at ``sent`` requests: ``look_metrics`` of the finished ones among the first ``sent``
        sent, ``in_flight`` of them not finished. Settles each SLO decided at this look (one of its own).

        A share SLO's bound is widened by the design effect fixed before the look (the previous complete
        look's, at least the declared burst allowance's): with it fixed, a verdict taken with requests in
        flight is the complete look's. Once a look is complete (``in_flight == 0``) its design effect becomes
        the next look's."""
        results: list[SLOResult | None] = []
        for i, (slo, sched) in enumerate(zip(self.slos, self.schedules)):
            if i in self.settled:
                results.append(self.settled[i][1])
                continue
            j = sched.index(sent) if sched is not None else None
            if sched is None or j is None:
                results.append(None)
                continue
            effect = self.effect[i]
            r = _at_look(evaluate(slo, look_metrics, confidence=sched.look_confidence,
                                  in_flight=in_flight, design_effect=effect), sched, j)
            results.append(r)
            # under strict sampling a PASS below §5.1.4.3's rule is not settled: the run goes on to the rule
            strict_open = self.strict and r.undersampled and r.verdict is SLOVerdict.PASS
            settles = r.verdict is not SLOVerdict.INCONCLUSIVE and r.method in _SEQUENTIAL_METHODS and not strict_open
            # drift (issue 47): a PASS on halves whose later one is worse (or a FAIL on a later better one) is not
            # a stop: the early requests are not a sample of the later ones; the run goes on
            drift = _drift(slo, look_metrics, r, self.planned - int(sent)) if settles else None
            if drift is not None and drift.drifting:
                settles = False
                self.drift.setdefault(i, []).append((int(sent), drift))
                results[-1] = r = replace(r, message=r.message + f" [drift against {r.verdict.value}: "
                                          f"{drift.text(_fmt_of(slo))}: not settled at this look, the run goes on]")
            self._trace(i, slo, r, int(sent), in_flight, held=drift is not None and drift.drifting)
            if settles:
                self.settled[i] = (sent, r, effect)
            elif in_flight == 0 and sent not in self._complete.setdefault(i, set()):
                self._complete[i].add(sent)
                self.effect[i] = max(self.prior, _observed_effect(slo, look_metrics))
        done = not self.unsupported and len(self.settled) == len(self.slos)
        if self.unsupported:
            reason = "no bound at a look for " + ", ".join(s.text or str(s) for s in self.unsupported) + \
                ": the run goes to its plan"
        elif done:
            reason = "decided: every SLO is settled"
        else:
            reason = f"{len(self.slos) - len(self.settled)} of {len(self.slos)} SLOs not settled"
            held = [self.slos[i].text or str(self.slos[i]) for i, d in self.drift.items() if d[-1][0] == sent]
            reason += f" (drift held back {', '.join(held)})" if held else ""
        return StopDecision(done, int(sent), tuple(results), reason)

    def _trace(self, i: int, slo: SLO, r: SLOResult, sent: int, in_flight: int, *, held: bool) -> None:
        """One look of a percentile SLO into :attr:`trace`: both one-sided bounds on the share beyond the
        threshold at the look's confidence (``share_bounds``), the limit and the verdict."""
        if slo.percentile is None or r.method not in ("binomial", "requests-share") or not r.n or r.limit is None:
            return
        k = float(r.exceedances or 0.0)
        # in-flight requests count beyond for the upper bound, within for the lower (share_verdict)
        _, upper = share_bounds(k + in_flight, r.n + in_flight, float(r.confidence or 0.95), r.method,
                                r.design_effect or 1.0)
        lower, _ = share_bounds(k, r.n + in_flight, float(r.confidence or 0.95), r.method, r.design_effect or 1.0)
        self.trace.setdefault(i, []).append({
            "look": sent, "n": int(r.n), "in_flight": int(in_flight), "exceedances": k, "lower": float(lower),
            "upper": float(upper), "limit": float(r.limit), "confidence": r.confidence,
            "verdict": r.verdict.value, "held_by_drift": held})

    def final(self, metrics_for: Callable[[int], RunMetricsLike], sent: int, *,
              client_error: ClientError | None = None) -> list[SLOResult]:
        """The verdicts of a run that stopped or ended at ``sent`` requests, every request finished:
        ``metrics_for(n)`` gives the metrics of the first ``n`` sent. A settled SLO is judged on the
        requests of the look it settled at (its verdict cannot change: it was taken counting the
        in-flight ones against it); another on all ``sent``, at its looks' confidence (a run cut short by
        a time budget took fewer looks than planned, so the error split still holds)."""
        out = []
        for i, (slo, sched) in enumerate(zip(self.slos, self.schedules)):
            n, effect = (self.settled[i][0], self.settled[i][2]) if i in self.settled else (int(sent), self.effect[i])
            if sched is None:
                out.append(evaluate(slo, metrics_for(n), strict=self.strict, client_error=client_error,
                                    confidence=self.confidence))
                continue
            j = sched.index(n)
            r = evaluate(slo, metrics_for(n), strict=self.strict, client_error=client_error,
                         confidence=sched.look_confidence, design_effect=effect)
            out.append(_at_look(r, sched, j if j is not None else len(sched.looks) - 1, n))
            if i in self.drift:
                out[-1] = replace(out[-1], message=out[-1].message + self._drift_note(i, slo, metrics_for(n), r))
        return out

    def _drift_note(self, i: int, slo: SLO, run: RunMetricsLike, result: SLOResult) -> str:
        """What the final verdict of an SLO held back by drift says: the looks held back, and the halves of
        the whole run against its final verdict."""
        held = ", ".join(f"{n:,}" for n, _ in self.drift[i])
        now = _drift(slo, run, result)
        tail = (f"; over the run: {now.text(_fmt_of(slo))}" + (" (still drifting: the verdict is on a drifting run)"
                                                  if now.drifting else "")) if now is not None else ""
        return f" [drift: not stopped at the look(s) at {held} requests, the halves drifting against the verdict{tail}]"


def _at_look(r: SLOResult, sched: LookSchedule, j: int, n: int | None = None) -> SLOResult:
    """The result with the look it was taken at named in its message."""
    at = sched.looks[j] if n is None else n
    note = (f" [sequential: look {j + 1} of {len(sched.looks)} at {at:,} requests; {sched.describe()}; "
            f"each direction's error <= {_pct(1 - sched.confidence)} over the run]")
    return replace(r, message=r.message + note)
