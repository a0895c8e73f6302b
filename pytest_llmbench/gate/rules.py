"""Fail rules for comparisons with a baseline: ``ttft.p99:10%``, ``e2e.p99:50ms`` (§6.3).

Grammar (one rule)::

    METRIC[.STATISTIC][@LEVEL]:THRESHOLD

* ``METRIC`` — a catalogue metric (``ttft``, ``tpot``, ``e2e``, ``itl``, ``output_throughput`` ...);
  its direction (latency up is worse, throughput down is worse) comes from its definition
  through :func:`~.metricinfo.metric_info`.
* ``STATISTIC`` — ``pXX`` (any percentile) or ``mean``; required for a distribution metric,
  not allowed for a scalar one. ``median`` means ``p50``.
* ``LEVEL`` — the run label of a multi-level procedure (e.g. ``@measure``, ``@level-3``); without
  it the rule applies to the procedure's primary run, as SLOs do.
* ``THRESHOLD`` — ``N%``: a relative change of the baseline value; or an absolute amount in the
  metric's unit (``50ms``, ``200tok/s``, ``0.01`` for a fraction).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .metricinfo import GateMetric, UnknownMetricError, metric_info

__all__ = ["Rule", "RuleError", "parse_rule", "parse_rules"]


class RuleError(ValueError):
    """A fail rule that cannot be parsed (the message names the bad part)."""


_RULE_RE = re.compile(
    r"""^\s*(?P<metric>[^.@:\s]+)
    (?:\.(?P<stat>[^@:\s]+))?
    (?:@(?P<level>[^:\s]+))?
    \s*:\s*(?P<threshold>.+?)\s*$""",
    re.VERBOSE,
)
_STAT_RE = re.compile(r"^p(?P<p>[0-9]+(?:\.[0-9]+)?)$")
_THRESH_RE = re.compile(r"^(?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>\S*)$")


@dataclass(frozen=True)
class Rule:
    """One parsed fail rule; ``threshold`` is a fraction when ``relative`` else in base units."""

    text: str
    metric: str
    statistic: str | None  # "p99", "p99.9", "mean" or None (scalar)
    level: str | None
    threshold: float
    relative: bool

    @property
    def info(self) -> GateMetric:
        return metric_info(self.metric)

    @property
    def percentile(self) -> float | None:
        m = _STAT_RE.match(self.statistic or "")
        return float(m.group("p")) if m else None

    @property
    def figure(self) -> str:
        """``ttft.p99`` / ``output_throughput``: the figure the rule reads."""
        return self.metric if self.statistic is None else f"{self.metric}.{self.statistic}"

    def threshold_text(self) -> str:
        from ..measure.slo import format_quantity

        if self.relative:
            return f"{self.threshold * 100:g}%"
        return format_quantity(self.threshold, self.info.unit)

    def __str__(self) -> str:
        return self.text


def parse_rule(text: str) -> Rule:
    """Parse ``METRIC[.STAT][@LEVEL]:THRESHOLD``; :class:`RuleError` names the bad part."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError(f"empty fail rule {text!r}; expected e.g. 'ttft.p99:10%' or 'e2e.p99:50ms'")
    m = _RULE_RE.match(text)
    if m is None:
        raise RuleError(f"fail rule {text!r}: expected METRIC[.STAT][@LEVEL]:THRESHOLD, "
                        f"e.g. 'ttft.p99:10%' or 'e2e.p99:50ms' (missing ':'?)")
    name, stat, level, thr = m.group("metric"), m.group("stat"), m.group("level"), m.group("threshold")
    try:
        info = metric_info(name)
    except UnknownMetricError as exc:
        raise RuleError(f"fail rule {text!r}: metric part {name!r}: {exc}") from None
    if stat is not None:
        stat = {"median": "p50", "avg": "mean", "average": "mean"}.get(stat.lower(), stat.lower())
    if info.kind == "distribution":
        if stat is None:
            raise RuleError(f"fail rule {text!r}: {name} is a per-request distribution; name a statistic, "
                            f"e.g. '{name}.p99:{thr}' or '{name}.mean:{thr}'")
        sm = _STAT_RE.match(stat)
        if stat != "mean" and (sm is None or not 0.0 <= float(sm.group("p")) <= 100.0):
            raise RuleError(f"fail rule {text!r}: statistic part {stat!r} is not pXX (0-100) or mean")
    elif stat is not None:
        raise RuleError(f"fail rule {text!r}: {name} is a run-level figure; drop the statistic part "
                        f"{'.' + stat!r} (e.g. '{name}:{thr}')")
    tm = _THRESH_RE.match(thr)
    if tm is None:
        raise RuleError(f"fail rule {text!r}: threshold part {thr!r} is not a number with an optional unit "
                        f"(e.g. '10%', '50ms', '200tok/s')")
    num, unit = float(tm.group("num")), tm.group("unit")
    if unit == "%":
        return Rule(text.strip(), name, stat, level, num / 100.0, True)
    from ..measure.slo import SLOError, parse_slo

    op = ">=" if info.higher_is_better else "<="
    try:
        slo = parse_slo(f"{name}{'.' + stat if stat else ''} {op} {tm.group('num')}{unit}")
    except SLOError as exc:
        raise RuleError(f"fail rule {text!r}: threshold part {thr!r}: {exc}") from None
    return Rule(text.strip(), name, stat, level, float(slo.threshold), False)


def parse_rules(texts: Iterable[str] | str | None) -> list[Rule]:
    """Parse several rules (a string may hold several separated by newlines or commas)."""
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    out: list[Rule] = []
    for t in texts:
        for part in re.split(r"[\n,]", t):
            if part.strip():
                out.append(parse_rule(part))
    return out
