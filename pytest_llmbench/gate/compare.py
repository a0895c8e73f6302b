"""Compare stored runs with a baseline: comparability check, fail rules, verdicts (§6.1, §6.3).

:func:`compare` matches each procedure result of the new run(s) with the same test in the
baseline, refuses pairs that were not measured the same way (listing every difference, §6.1),
and evaluates each figure and fail rule with a confidence interval of the change
(:mod:`.significance`). A rule fails only when the change exceeds its threshold **and** the whole
two-sided CI lies beyond the threshold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..slo import format_quantity
from ..stats import mean_estimate, percentile_estimate
from .metricinfo import metric_info
from .rules import Rule, parse_rule
from .significance import (DEFAULT_SEED, Change, across_runs_change, mean_change, percentile_change,
                           scalar_change)
from .storage import StoredRun, primary_label

__all__ = [
    "Comparison",
    "DEFAULT_FIGURES",
    "Difference",
    "FigureOutcome",
    "IncomparableRunsError",
    "ProcedurePair",
    "compare",
    "comparability_key",
    "figure_samples",
    "figure_value",
    "load_as_written",
]

#: Figures shown for every compared procedure (no threshold: the change and its CI only).
DEFAULT_FIGURES = ("ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99", "e2e.p99", "output_throughput")


class IncomparableRunsError(ValueError):
    """Runs that were not measured the same way (``differences`` lists them)."""

    def __init__(self, message: str, differences: Sequence[Difference] = ()) -> None:
        super().__init__(message)
        self.differences = list(differences)


@dataclass(frozen=True)
class Difference:
    """One item in which two runs differ (``field`` names it, e.g. ``parameters.load``)."""

    field: str
    baseline: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.field}: baseline {_short(self.baseline)}, new {_short(self.new)}"


def _short(v: Any, limit: int = 80) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------
# comparability
# --------------------------------------------------------------------------------------------


def load_as_written(load: Mapping[str, Any] | None) -> str:
    """``poisson(capacity_fraction=0.5)``, ``closed(concurrency=8)``: a load spec as the test wrote it."""
    if not load:
        return "not recorded"
    kind = load.get("arrival") if load.get("model") == "open" else load.get("model")
    args = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in load.items()
                     if k not in ("model", "arrival") and v is not None)
    return f"{kind or 'load'}({args})"


def comparability_key(run: StoredRun, proc: Mapping[str, Any]) -> dict[str, Any]:
    """Everything that must be equal for two procedure results to be compared (§6.1, §6.4).

    The SUT's version and configuration are *not* in it: they are what is compared.
    """
    doc = run.document
    sut = doc.get("sut") or {}
    result = proc.get("result") or {}
    conf = proc.get("configuration") or {}
    params = dict(result.get("params") or {})
    key: dict[str, Any] = {"procedure": proc.get("procedure")}
    for k in sorted(params):
        key[f"parameters.{k}"] = load_as_written(params[k]) if k == "load" and isinstance(params[k], Mapping) \
            else params[k]
    key.update({
        "workload": conf.get("workload"),
        "seed": conf.get("seed"),
        "request sequence": conf.get("sequence_hash"),
        "workload generator": conf.get("generator"),
        "profile": proc.get("profile"),
        "boundary": sut.get("boundary"),
        "api": sut.get("api"),
        "model": sut.get("model"),
        "tokenizer": (doc.get("settings") or {}).get("tokenizer"),
        "records format": run.meta.get("records_format") or _records_format(run, proc),
        "results schema": str(doc.get("schema_version") or "").split(".")[0] or None,
    })
    return key


def _records_format(run: StoredRun, proc: Mapping[str, Any]) -> str:
    from ..storage import SCHEMA

    base = run.path if run.path.is_dir() else run.path.parent
    for rel in proc.get("run_dirs") or []:
        p = base / rel / "run.json"
        if p.is_file():
            try:
                return str(json.loads(p.read_text(encoding="utf-8")).get("schema") or SCHEMA)
            except (OSError, json.JSONDecodeError):
                break
    return SCHEMA  # no run.json to read: records of this plugin version


def differences(baseline: Mapping[str, Any], new: Mapping[str, Any]) -> list[Difference]:
    """The items of two comparability keys that differ, in key order."""
    out = []
    for k in list(dict.fromkeys([*baseline, *new])):
        if baseline.get(k) != new.get(k):
            out.append(Difference(k, baseline.get(k), new.get(k)))
    return out


def resolved_rate(proc: Mapping[str, Any]) -> float | None:
    """The request rate the load spec resolved to (open loop), for display next to the spec."""
    load = ((proc.get("result") or {}).get("facts") or {}).get("load") or {}
    r = load.get("rate")
    return float(r) if isinstance(r, (int, float)) else None


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------


def _run_json(proc: Mapping[str, Any], level: str | None) -> tuple[str | None, Mapping[str, Any] | None]:
    result = proc.get("result") or {}
    label = level or primary_label(result)
    for run in result.get("runs") or []:
        if str(run.get("label")) == label:
            return label, run.get("metrics") or {}
    if level is None:
        return label, result.get("metrics")
    return label, None


def figure_samples(run: StoredRun, proc: Mapping[str, Any], rule: Rule) -> np.ndarray | None:
    """The per-request samples a distribution rule reads, or None (not stored / not a distribution)."""
    if rule.info.kind != "distribution":
        return None
    label, _ = _run_json(proc, rule.level)
    if label is None:
        return None
    try:
        s = run.samples.get((str(proc["key"]), label, rule.metric))
    except Exception:  # samples unavailable (report dir without records): fall back to summaries
        return None
    return None if s is None or s.size == 0 else np.asarray(s, dtype=float)


def figure_value(run: StoredRun, proc: Mapping[str, Any], rule: Rule) -> dict[str, Any] | None:
    """The figure a rule reads as an Estimate dict (``value``, ``n``, CI ...), or None when absent."""
    label, metrics = _run_json(proc, rule.level)
    if not metrics:
        return None
    if rule.info.kind == "scalar":
        return (metrics.get("scalars") or {}).get(rule.metric)
    dist = (metrics.get("distributions") or {}).get(rule.metric)
    samples = figure_samples(run, proc, rule)
    if rule.statistic == "mean":
        if samples is not None:
            return mean_estimate(samples, unit=str((dist or {}).get("unit") or "")).to_json()
        return dist.get("mean") if dist else None
    p = rule.percentile
    if samples is not None and p is not None:
        return percentile_estimate(samples, p, unit=str((dist or {}).get("unit") or ""), assume_sorted=True).to_json()
    if dist:
        return (dist.get("percentiles") or {}).get(f"p{p:g}")
    return None


# --------------------------------------------------------------------------------------------
# outcomes
# --------------------------------------------------------------------------------------------


@dataclass
class FigureOutcome:
    """One figure of one procedure compared: the change, its CI, and the verdict against the rule."""

    figure: str
    rule: Rule | None
    level: str | None
    change: Change | None
    verdict: str  # "FAIL" | "pass" | "pass (not significant)" | "improved" | "changed" | "no significant change" | "n/a"
    message: str

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"

    def to_json(self) -> dict[str, Any]:
        return {"figure": self.figure, "rule": self.rule.text if self.rule else None, "level": self.level,
                "change": self.change.to_json() if self.change else None, "verdict": self.verdict,
                "message": self.message}


@dataclass
class ProcedurePair:
    """A procedure of the new run(s) and the same test in the baseline."""

    key: str
    procedure: str
    title: str
    tests: list[str]
    load: str
    rate_baseline: list[float | None]
    rate_new: list[float | None]
    differences: list[Difference]
    refused: bool
    forced: bool
    outcomes: list[FigureOutcome] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "procedure": self.procedure, "title": self.title, "tests": self.tests,
                "load": self.load, "rate_baseline": self.rate_baseline, "rate_new": self.rate_new,
                "differences": [{"field": d.field, "baseline": d.baseline, "new": d.new} for d in self.differences],
                "refused": self.refused, "forced": self.forced, "note": self.note,
                "outcomes": [o.to_json() for o in self.outcomes]}


@dataclass
class Comparison:
    """The result of :func:`compare`; ``failed`` when a rule is violated or a pair was refused."""

    baseline: list[StoredRun]
    new: list[StoredRun]
    rules: list[Rule]
    pairs: list[ProcedurePair]
    confidence: float
    forced: bool
    unmatched: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[FigureOutcome]:
        return [o for p in self.pairs for o in p.outcomes if o.failed]

    @property
    def refused(self) -> list[ProcedurePair]:
        return [p for p in self.pairs if p.refused]

    @property
    def failed(self) -> bool:
        return bool(self.violations or self.refused)

    def outcomes_for_test(self, nodeid: str) -> list[FigureOutcome]:
        """Every outcome of the procedure a test used (to fail that test with the messages)."""
        return [o for p in self.pairs if nodeid in p.tests for o in p.outcomes]

    def to_json(self) -> dict[str, Any]:
        return {"baseline": [r.to_ref() for r in self.baseline], "new": [r.to_ref() for r in self.new],
                "rules": [r.text for r in self.rules], "confidence": self.confidence, "forced": self.forced,
                "failed": self.failed, "unmatched": self.unmatched, "pairs": [p.to_json() for p in self.pairs]}


def _fmt(v: float | None, unit: str, like: float | None = None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return format_quantity(v, unit, like=like)


def _fmt_change(c: Change, relative: bool, unit: str) -> tuple[str, str]:
    if relative:
        return (f"{c.rel * 100:+.1f}%", f"{c.rel_ci[0] * 100:+.1f}% … {c.rel_ci[1] * 100:+.1f}%")
    sign = lambda v: ("+" if v >= 0 else "-") + _fmt(abs(v), unit, like=c.baseline)  # noqa: E731
    return sign(c.diff), f"{sign(c.diff_ci[0])} … {sign(c.diff_ci[1])}"


def _change_for(base: list[tuple[StoredRun, Mapping[str, Any]]], new: list[tuple[StoredRun, Mapping[str, Any]]],
                rule: Rule, confidence: float, seed: int) -> Change | None:
    if len(base) > 1 or len(new) > 1:
        bv = [v["value"] for r, p in base if (v := figure_value(r, p, rule)) and v.get("value") is not None]
        nv = [v["value"] for r, p in new if (v := figure_value(r, p, rule)) and v.get("value") is not None]
        if not bv or not nv or len(bv) + len(nv) < 3:
            return None
        return across_runs_change(bv, nv, confidence=confidence)
    (rb, pb), (rn, pn) = base[0], new[0]
    if rule.info.kind == "distribution":
        sb, sn = figure_samples(rb, pb, rule), figure_samples(rn, pn, rule)
        if sb is None or sn is None:
            return None
        if rule.statistic == "mean":
            return mean_change(sb, sn, confidence=confidence, seed=seed)
        return percentile_change(sb, sn, rule.percentile or 50.0, confidence=confidence, seed=seed)
    eb, en = figure_value(rb, pb, rule), figure_value(rn, pn, rule)
    if not eb or not en or eb.get("value") is None or en.get("value") is None:
        return None
    try:
        return scalar_change(eb, en, confidence=confidence, seed=seed)
    except ValueError:
        return None


def _judge(rule: Rule, c: Change, has_threshold: bool) -> str:
    worse_up = not rule.info.higher_is_better
    lo, hi = c.rel_ci if rule.relative else c.diff_ci
    point = c.rel if rule.relative else c.diff
    t = rule.threshold if has_threshold else 0.0
    if worse_up:
        beyond, exceeds, better = lo > t, point > t, hi < -t
    else:
        beyond, exceeds, better = hi < -t, point < -t, lo > t
    if not has_threshold:
        if beyond:
            return "worse"
        return "better" if better else "no significant change"
    if beyond:
        return "FAIL"
    if better:
        return "improved"
    return "pass (not significant)" if exceeds else "pass"


def _message(pair_title: str, rule: Rule, level: str | None, c: Change, verdict: str, base_label: str,
             has_threshold: bool) -> str:
    info = rule.info
    change, ci = _fmt_change(c, rule.relative, info.unit)
    where = f"{pair_title}" + (f", run {level}" if level else "")
    head = {"FAIL": "REGRESSION", "worse": "worse"}.get(verdict, verdict)
    text = (f"{head}: {rule.figure} [{where}]: baseline {_fmt(c.baseline, info.unit)} ({base_label}, n={c.n_baseline}) "
            f"→ new {_fmt(c.new, info.unit)} (n={c.n_new}); change {change} ({c.confidence:.0%} CI {ci}, "
            f"p(no change)={c.p_value:.3g})")
    if has_threshold:
        text += (f"; rule {rule.text} ({info.worse} is worse: fails only when the whole CI lies beyond "
                 f"{'+' if not info.higher_is_better else '-'}{rule.threshold_text()})")
    return text + f"; method: {c.method}"


def _matches(new_proc: Mapping[str, Any], base_procs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    tests = set(new_proc.get("tests") or [])
    for bp in base_procs:
        if tests and tests & set(bp.get("tests") or []):
            return bp
    for bp in base_procs:
        if bp.get("key") == new_proc.get("key"):
            return bp
    same = [bp for bp in base_procs if bp.get("procedure") == new_proc.get("procedure")]
    return same[0] if len(same) == 1 else None


def compare(baseline: StoredRun | Sequence[StoredRun], new: StoredRun | Sequence[StoredRun],
            rules: Sequence[Rule | str] = (), *, force: bool = False, confidence: float = 0.95,
            seed: int = DEFAULT_SEED, figures: Sequence[str] = DEFAULT_FIGURES) -> Comparison:
    """Compare the new run(s) with the baseline run(s), procedure by procedure.

    Several runs on a side are repetitions (§6.3): the across-run method is used. ``force``
    compares pairs whose comparability keys differ (the differences stay listed, ``forced`` set).
    """
    base_runs = [baseline] if isinstance(baseline, StoredRun) else list(baseline)
    new_runs = [new] if isinstance(new, StoredRun) else list(new)
    if not base_runs or not new_runs:
        raise ValueError("compare() needs at least one baseline and one new run")
    parsed = [parse_rule(r) if isinstance(r, str) else r for r in rules]
    rule_figs = {(r.figure, r.level) for r in parsed}
    shown = parsed + [parse_rule(f"{f}:0%") for f in figures if (f, None) not in rule_figs]
    n_rules = len(parsed)
    comp = Comparison(base_runs, new_runs, parsed, [], confidence, force)
    base_label = "+".join(r.id for r in base_runs)
    for proc in new_runs[0].document.get("procedures") or []:
        new_side = [(new_runs[0], proc)]
        for other in new_runs[1:]:
            m = _matches(proc, other.document.get("procedures") or [])
            if m is not None:
                new_side.append((other, m))
        base_side = [(r, m) for r in base_runs if (m := _matches(proc, r.document.get("procedures") or []))]
        title = f"{proc.get('procedure')} {proc.get('title', '')}".strip()
        if not base_side:
            comp.unmatched.append(f"{title} ({', '.join(proc.get('tests') or []) or proc.get('key')}): no baseline")
            continue
        ref_key = comparability_key(*base_side[0])
        diffs: list[Difference] = []
        for r, p in base_side[1:] + new_side:
            for d in differences(ref_key, comparability_key(r, p)):
                if d not in diffs:
                    diffs.append(d)
        pair = ProcedurePair(
            key=str(proc.get("key")), procedure=str(proc.get("procedure")), title=title,
            tests=list(proc.get("tests") or []), load=ref_key.get("parameters.load") or "not recorded",
            rate_baseline=[resolved_rate(p) for _, p in base_side], rate_new=[resolved_rate(p) for _, p in new_side],
            differences=diffs, refused=bool(diffs) and not force, forced=bool(diffs) and force)
        comp.pairs.append(pair)
        if pair.refused:
            pair.note = ("refused: the runs were not measured the same way (§6.1); differences: "
                         + "; ".join(str(d) for d in diffs) + " (use --llm-compare-force / --force to compare anyway)")
            continue
        for i, rule in enumerate(shown):
            has_t = i < n_rules
            level = rule.level
            c = _change_for(base_side, new_side, rule, confidence, seed)
            if c is None:
                pair.outcomes.append(FigureOutcome(rule.figure, rule if has_t else None, level, None, "n/a",
                                                   f"{rule.figure} [{title}]: not available on both sides"))
                continue
            verdict = _judge(rule, c, has_t)
            pair.outcomes.append(FigureOutcome(rule.figure, rule if has_t else None, level, c, verdict,
                                               _message(title, rule, level, c, verdict, base_label, has_t)))
    return comp


def check_comparable(baseline: StoredRun, new: StoredRun, *, force: bool = False) -> list[Difference]:
    """Every difference between matched procedures; raises :class:`IncomparableRunsError` unless ``force``."""
    comp = compare(baseline, new, (), force=True, figures=())
    diffs = [d for p in comp.pairs for d in p.differences]
    if diffs and not force:
        raise IncomparableRunsError("runs are not comparable (§6.1): " + "; ".join(map(str, diffs)), diffs)
    return diffs
