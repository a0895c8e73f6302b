"""SLO thresholds and assertions with readable failure messages (docs/architecture.md "pytest shape").

An SLO is written the way people say it: ``ttft.p99 <= 500ms``, ``itl.p99.9 <= 200ms``,
``success_rate >= 99%``, ``output_throughput >= 2000 tok/s``, ``fluidity.p1 >= 0.9``. Three shapes:

* ``<metric>.<statistic> <op> <threshold>``: an aggregate of a distribution (``pXX`` for any
  percentile, ``mean``, ``max``, ``min``), checked against the run's :class:`~.stats.Estimate`;
* ``<scalar> <op> <threshold>``: a run-level figure (throughputs, success rate, goodput ...);
* ``<metric> <op> <threshold>`` on a distribution metric: a *per-request* SLO. It holds for a run
  when every request meets it; :meth:`SLO.ok` gives the per-request mask that goodput and the
  search criteria of §5.2.2.3 / §5.5.2 use.

The pass/fail of these SLOs is the user's verdict on the SUT. It never mixes with the draft's
methodology compliance (§2, compliance/), which judges the run, not the SUT.

:func:`assert_slo` reports every SLO it judged to the recorder in :data:`SLO_RECORDER` when one is
set (the pytest plugin sets it around a test's call, so SLOs asserted in a test body reach the
report); outside pytest it is a plain function. Given the client's measurement error of a figure
(``client_error``, the client delay propagated to it: loadgen/selfcheck.py), a verdict whose
threshold lies within that error of the value says so in its message.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from . import registry
from .chunking import ITL_NOT_MEASURABLE
from .stats import MIN_SAMPLES, Estimate
from .units import compact_num as _num
from .units import format_value

__all__ = [
    "METRICS",
    "MetricInfo",
    "ClientError",
    "FiguresView",
    "RunMetricsLike",
    "SLO",
    "SLO_RECORDER",
    "SLOError",
    "SLOResult",
    "SLOUndersampledWarning",
    "SLOViolation",
    "assert_slo",
    "evaluate",
    "format_quantity",
    "good_mask",
    "parse_slo",
    "parse_slo_list",
    "recording",
    "register_metric",
    "required_samples",
]


class SLOError(ValueError):
    """An SLO expression that cannot be parsed or makes no sense (names the problem)."""


class SLOViolation(AssertionError):
    """One or more SLOs failed; ``results`` holds every evaluated :class:`SLOResult`."""

    def __init__(self, message: str, results: Sequence[SLOResult] = ()) -> None:
        super().__init__(message)
        self.results = list(results)


class SLOUndersampledWarning(UserWarning):
    """An SLO passed on a percentile that has fewer samples than §5.1.4.3 asks for."""


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

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise SLOError(_unknown_metric(self.metric, self.text or self.metric))
        if self.operator not in _OPS:
            raise SLOError(f"{self.text!r}: operator {self.operator!r} not one of <=, <, >=, >")

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

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "statistic": self.statistic, "operator": self.operator,
                "threshold": self.threshold, "text": self.text or str(self)}


def _unknown_metric(name: str, text: str) -> str:
    dists = sorted(k for k, v in METRICS.items() if v.kind == "distribution")
    scalars = sorted(k for k, v in METRICS.items() if v.kind == "scalar")
    return (f"{text!r}: unknown metric {name!r}. Known distributions (use .p50/.p99/.p99.9/.mean/.max/.min, "
            f"or none for a per-request SLO): {', '.join(dists)}. Known scalars: {', '.join(scalars)}")


def parse_slo(text: str | SLO, *, allow_reversed: bool = False) -> SLO:
    """Parse ``'ttft.p99 <= 500ms'`` into an :class:`SLO`; :class:`SLOError` names the problem.

    ``allow_reversed=True`` accepts a bound on the wrong side of the metric's good direction
    (e.g. ``ttft.min >= 5ms`` as a sanity floor); by default that is an error, as it is
    almost always a typo.
    """
    if isinstance(text, SLO):
        return text
    if not isinstance(text, str) or not text.strip():
        raise SLOError(f"empty SLO expression {text!r}; expected e.g. 'ttft.p99 <= 500ms'")
    src = text.strip()
    m = _SLO_RE.match(src)
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
    return SLO(metric=metric, statistic=stat, operator=op, threshold=threshold, text=src)


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
# Evaluation against a run's metrics
# --------------------------------------------------------------------------------------------


class _DistributionLike(Protocol):
    n: int
    mean: Estimate
    min: float
    max: float


class RunMetricsLike(Protocol):
    """What slo.py needs from metrics.RunMetrics (coded against this Protocol, not the class)."""

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


@dataclass(frozen=True)
class SLOResult:
    """The outcome of one SLO on one run: passed or not, the value it was judged on, a message."""

    slo: SLO
    passed: bool
    value: Estimate | None
    message: str
    undersampled: bool = False
    #: the client's measurement error of the value (base unit; None: not known for this figure)
    client_error: float | None = None
    #: the threshold lies within ``client_error`` of the value: the client may have decided the verdict
    within_client_error: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"slo": self.slo.to_json(), "passed": self.passed, "undersampled": self.undersampled,
                "value": self.value.to_json() if self.value is not None else None, "message": self.message,
                "client_error": self.client_error, "within_client_error": self.within_client_error}


def _describe(slo: SLO, est: Estimate, passed: bool) -> str:
    """``TTFT P99 612.3 ms > 500 ms (n=1000, 95% CI 580.1–640.7 ms)``."""
    fam = slo.info.unit
    op = slo.operator if passed else _NEGATED[slo.operator]
    value = format_quantity(est.value, fam)
    parts = [f"n={est.n}"]
    if est.ci_low is not None and est.ci_high is not None:
        parts.append(f"{_num(est.confidence * 100)}% CI {_format_range(est.ci_low, est.ci_high, fam, est.value)}")
    msg = f"{slo.label} {value} {op} {slo.threshold_text()} ({', '.join(parts)})"
    if est.undersampled:
        p = slo.percentile
        if p is not None and required_samples(p) > est.n:
            msg += f"; under-sampled: P{_num(p)} needs >= {required_samples(p)} samples, have {est.n}"
        else:
            msg += f"; under-sampled (n={est.n})"
    return msg


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


def evaluate(slo: SLO | str, run_metrics: RunMetricsLike, *, strict: bool = False,
             client_error: ClientError | None = None) -> SLOResult:
    """Judge one SLO on a run. ``strict`` also fails an under-sampled percentile (§5.1.4.3);
    ``client_error`` gives the client's measurement error of the value (a note when it spans the threshold)."""
    slo = parse_slo(slo)
    if slo.metric in registry.ITL_METRICS and getattr(run_metrics, "itl_option", None) == "A":
        # App. B.2.1 chose chunk timing: the gaps are between chunks, never judged as ITL (§4.6.3)
        return SLOResult(slo, False, None, f"{slo}: {ITL_NOT_MEASURABLE} (App. B.2.1 chose §4.6.3 option A, "
                                           "Time Between Chunks)")
    if slo.per_request:
        return _evaluate_per_request(slo, run_metrics)
    try:
        est = _value_for(slo, run_metrics)
    except KeyError:
        return SLOResult(slo, False, None, f"{slo.label}: not measured in this run (SLO {slo})")
    if est.n == 0 or est.value is None or math.isnan(est.value):
        return SLOResult(slo, False, est, f"{slo.label}: undefined (n={est.n}); cannot meet {slo}")
    passed = slo.compare(est.value)
    undersampled = bool(est.undersampled)
    msg = _describe(slo, est, passed)
    err, within, note = _client_note(slo, est, client_error)
    msg += note
    if strict and undersampled:
        passed = False
        if slo.compare(est.value):
            msg += " [strict sampling: under-sampled counts as a failure]"
    return SLOResult(slo, passed, est, msg, undersampled, err, within)


def _evaluate_per_request(slo: SLO, run: RunMetricsLike) -> SLOResult:
    try:
        values = np.asarray(run.per_request_values(slo.metric), dtype=float)
    except KeyError:
        return SLOResult(slo, False, None, f"{slo.label}: not measured in this run (SLO {slo}, per request)")
    n = int(values.size)
    mask = slo.ok(values)
    good = int(mask.sum())
    undefined = int(np.isnan(values).sum())
    est = Estimate(value=(good / n) if n else float("nan"), n=n, unit="fraction", method="per-request SLO")
    if n == 0:
        return SLOResult(slo, False, est, f"{slo} per request: no requests measured")
    passed = good == n
    extra = f", {undefined} undefined" if undefined else ""
    if passed:
        msg = f"{slo} per request: all {n} requests meet it"
    else:
        msg = (f"{slo} per request: {n - good} of {n} requests violate it "
               f"({format_quantity(good / n, 'fraction')} met{extra})")
    return SLOResult(slo, passed, est, msg)


#: Receives the results of every :func:`assert_slo` call while set (the plugin: the current test).
SLO_RECORDER: ContextVar[Callable[[Sequence[SLOResult]], None] | None] = ContextVar("llmbench_slo_recorder",
                                                                                  default=None)


@contextlib.contextmanager
def recording(recorder: Callable[[Sequence[SLOResult]], None] | None) -> Iterator[None]:
    """Within the block, :func:`assert_slo` hands its results to ``recorder`` (before raising)."""
    token = SLO_RECORDER.set(recorder)
    try:
        yield
    finally:
        SLO_RECORDER.reset(token)


def assert_slo(run_metrics: RunMetricsLike, *slos: SLO | str, strict: bool = False,
               client_error: ClientError | None = None) -> list[SLOResult]:
    """Assert every SLO on a run; raise :class:`SLOViolation` listing every failure.

    Returns the results when all pass. A passing but under-sampled percentile emits
    :class:`SLOUndersampledWarning` (``strict=True`` turns it into a failure). The results go to
    the recorder of :data:`SLO_RECORDER` first, when one is set.
    """
    __tracebackhide__ = True  # the failure message says everything; hide this frame in pytest
    if not slos:
        raise SLOError("assert_slo() needs at least one SLO, e.g. assert_slo(run, 'ttft.p99 <= 500ms')")
    results = [evaluate(s, run_metrics, strict=strict, client_error=client_error) for s in slos]
    recorder = SLO_RECORDER.get()
    if recorder is not None:
        recorder(results)
    failed = [r for r in results if not r.passed]
    if failed:
        if len(failed) == 1:
            message = failed[0].message
        else:
            message = f"{len(failed)} of {len(results)} SLOs failed:\n" + "\n".join(f"  {r.message}" for r in failed)
        raise SLOViolation(message, results)
    for r in results:
        if r.undersampled:
            warnings.warn(SLOUndersampledWarning(r.message), stacklevel=2)
    return results


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
