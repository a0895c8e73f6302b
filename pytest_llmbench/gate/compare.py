"""Compare stored runs with a baseline: comparability check, fail rules, verdicts (§6.1, §6.3).

:func:`compare` matches each procedure result of the new run(s) with the same test in the
baseline, refuses pairs that were not measured the same way (listing every difference, §6.1),
and evaluates each figure and fail rule with a confidence interval of the change
(:mod:`pytest_llmbench.measure.stats.significance`). A rule fails only when the change exceeds its
threshold **and** the whole two-sided CI lies beyond the threshold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..measure.chunking import ITL_NOT_MEASURABLE
from ..measure.registry import ITL_METRICS, WHOLE_RUN_SUFFIX
from ..measure.slo import format_quantity
from ..measure.stats import mean_estimate, percentile_estimate
from ..measure.stats.runs import MIN_RUNS
from ..measure.stats.significance import (
    DEFAULT_SEED,
    Change,
    across_runs_change,
    mean_change,
    percentile_change,
    scalar_change,
    widen_by_history,
)
from .rules import Rule, parse_rule
from .storage import GateStorageError, StoredRun, primary_label, records_format_key, repetition_views

__all__ = [
    "Comparison",
    "DEFAULT_FIGURES",
    "Difference",
    "FigureOutcome",
    "IncomparableRunsError",
    "ProcedurePair",
    "SLOVerdictPair",
    "compare",
    "comparability_key",
    "figure_samples",
    "figure_value",
    "load_as_written",
    "slo_verdict_pairs",
    "summary_value",
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
        # §4.4.2: the counting option and the tokenizer the counts are in (None: stored before they were)
        COUNTING_OPTION: (result.get("measurements") or {}).get("token_counting_option"),
        COUNT_TOKENIZER: (result.get("measurements") or {}).get("token_counting_tokenizer"),
        "records format": run.meta.get("records_format") or _records_format(run, proc),
        METRIC_DEFINITIONS: _definitions_version(result),
        "results schema": str(doc.get("schema_version") or "").split(".")[0] or None,
    })
    return key


def _definitions_version(result: Mapping[str, Any]) -> int:
    """The metric-definition version the result's runs were summarised under (``summary.DEFINITIONS_VERSION``;
    1 before versions were stored)."""
    runs = [r.get("metrics") or {} for r in result.get("runs") or []] or [result.get("metrics") or {}]
    return min(int(m.get("definitions_version") or 1) for m in runs)


#: comparability-key part: the version of the metric definitions (a throughput window, …) a run was summarised under
METRIC_DEFINITIONS = "metric definitions"
#: the hint of a refusal across definition versions
DEFINITIONS_HINT = ("the runs were summarised under different metric definitions (version 2, issue 36: throughput "
                    "over the send window [start + 0.1·D, start + D] with every request's streamed tokens; version 1: "
                    "over the run to its last response): their figures are not comparable as stored; save a new "
                    "baseline measured with this version")

#: comparability-key parts an older stored run lacks: a missing side warns instead of refusing
COUNTING_OPTION, COUNT_TOKENIZER = "counting option", "count tokenizer"
_LATER_KEYS = (COUNTING_OPTION, COUNT_TOKENIZER)
#: the hint of a refusal across tokenizers (§4.4.2-SHOULD-1)
RECOUNT_HINT = ("token counts are in different tokenizers (§4.4.2): token rates and lengths are not comparable; "
                "`python -m pytest_llmbench compare BASE NEW --recount` recounts the stored output text in the "
                "reference tokenizer (option B)")


def _records_format(run: StoredRun, proc: Mapping[str, Any]) -> str:
    base = run.path if run.path.is_dir() else run.path.parent
    for rel in proc.get("run_dirs") or []:
        p = base / rel / "run.json"
        if p.is_file():
            return records_format_key(p)
    return records_format_key(None)  # no run.json to read: records of this plugin version


def differences(baseline: Mapping[str, Any], new: Mapping[str, Any]) -> list[Difference]:
    """The items of two comparability keys that differ, in key order (a part one side's run was
    stored without, :data:`_LATER_KEYS`, is a warning: :func:`key_warnings`)."""
    out = []
    for k in list(dict.fromkeys([*baseline, *new])):
        if k in _LATER_KEYS and (baseline.get(k) is None or new.get(k) is None):
            continue
        if baseline.get(k) != new.get(k):
            out.append(Difference(k, baseline.get(k), new.get(k)))
    return out


def key_warnings(baseline: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Key parts one side lacks (a run stored before they were recorded): compared, with a warning."""
    return [f"{k} not recorded in the {'baseline' if baseline.get(k) is None else 'new'} run (stored by an older "
            f"version): compared without checking it" for k in _LATER_KEYS
            if (baseline.get(k) is None) != (new.get(k) is None)]


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


def _stored(rule: Rule) -> str:
    """The name a rule's figure is stored under: the registry's name for an alias (``tbc`` ->
    ``inter_chunk``), the rule's own for a whole-run variant (``output_throughput_full``)."""
    return rule.metric if rule.metric.endswith(WHOLE_RUN_SUFFIX) else rule.info.name


def figure_samples(run: StoredRun, proc: Mapping[str, Any], rule: Rule) -> np.ndarray | None:
    """The per-request samples a distribution rule reads, or None (not stored / not a distribution)."""
    if rule.info.kind != "distribution":
        return None
    label, _ = _run_json(proc, rule.level)
    if label is None:
        return None
    try:
        s = run.samples.get((str(proc["key"]), label, _stored(rule)))
    except GateStorageError:  # samples unavailable (report dir without records): fall back to summaries
        return None
    return None if s is None or s.size == 0 else np.asarray(s, dtype=float)


def figure_value(run: StoredRun, proc: Mapping[str, Any], rule: Rule) -> dict[str, Any] | None:
    """The figure a rule reads as an Estimate dict (``value``, ``n``, CI ...), or None when absent."""
    label, metrics = _run_json(proc, rule.level)
    if not metrics:
        return None
    if rule.info.kind == "scalar":
        return (metrics.get("scalars") or {}).get(_stored(rule))
    dist = (metrics.get("distributions") or {}).get(_stored(rule))
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
    unit: str = ""  # the figure's unit family (gate.metricinfo): how a renderer formats its values

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"

    def to_json(self) -> dict[str, Any]:
        return {"figure": self.figure, "rule": self.rule.text if self.rule else None, "level": self.level,
                "change": self.change.to_json() if self.change else None, "verdict": self.verdict,
                "message": self.message, "unit": self.unit}


@dataclass
class SLOVerdictPair:
    """One SLO of a compared test, its verdict in the baseline and in the new run (issue 47). Shown beside
    the figures, never a rule: an INCONCLUSIVE verdict is shown as such (``INCONCLUSIVE``), never as a pass;
    a baseline stored before verdicts had three values gives its PASS or FAIL."""

    test: str
    slo: str
    baseline: str | None  # None: the baseline's test did not judge this SLO
    new: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"test": self.test, "slo": self.slo, "baseline": self.baseline, "new": self.new, "message": self.message}


def _slo_outcome(r: Mapping[str, Any]) -> str:
    """A recorded SLO's verdict: its ``outcome`` (PASS, FAIL, INCONCLUSIVE since results 1.8)."""
    return str(r.get("outcome") or ("PASS" if r.get("passed") else "FAIL"))


def _verdict_text(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "not judged"
    outcome = _slo_outcome(r)
    if outcome != "INCONCLUSIVE":
        return outcome
    more = r.get("needed_more")
    return "INCONCLUSIVE (not shown to hold" + (f"; need ~{more:,} more requests)" if more is not None else ")")


def slo_verdict_pairs(base_doc: Mapping[str, Any], new_doc: Mapping[str, Any], tests: Sequence[str]
                      ) -> list[SLOVerdictPair]:
    """The SLOs the new run's ``tests`` judged, each with its verdict in the baseline's test of the same
    node id and SLO text (None when it judged none)."""
    def judged(doc: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
        return {(str(t.get("nodeid")), str(r.get("text"))): r for t in doc.get("tests") or []
                for r in t.get("slo_results") or []}

    base, out = judged(base_doc), []
    for (test, text), r in judged(new_doc).items():
        if test not in tests:
            continue
        b = base.get((test, text))
        new = _slo_outcome(r)
        out.append(SLOVerdictPair(test, text, None if b is None else _slo_outcome(b), new,
                                  f"SLO {text} [{test}]: baseline {_verdict_text(b)} → new {_verdict_text(r)}"))
    return out


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
    warnings: list[str] = field(default_factory=list)
    slo_verdicts: list[SLOVerdictPair] = field(default_factory=list)  # the tests' SLOs, baseline and new

    def to_json(self) -> dict[str, Any]:
        return {"warnings": list(self.warnings), "key": self.key, "procedure": self.procedure, "title": self.title, "tests": self.tests,
                "load": self.load, "rate_baseline": self.rate_baseline, "rate_new": self.rate_new,
                "differences": [{"field": d.field, "baseline": d.baseline, "new": d.new, "text": str(d)}
                                for d in self.differences],
                "refused": self.refused, "forced": self.forced, "note": self.note,
                "outcomes": [o.to_json() for o in self.outcomes],
                "slo_verdicts": [v.to_json() for v in self.slo_verdicts]}


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

    def section6_facts(self) -> dict[str, dict[str, Any]]:
        """§6.3 items as data for the compliance evaluators: per requirement id, ``met`` and the evidence.

        6.3-PARAM-1: at least 3 runs on each side; 6.3-REPORT-1: a CI for every compared figure;
        6.3-PARAM-2: every compared figure names its test and p-value.
        """
        outcomes = [o for p in self.pairs for o in p.outcomes]
        with_change = [o for o in outcomes if o.change is not None]
        nb, nn = len(self.baseline), len(self.new)
        return {
            "6.3-PARAM-1": {"met": nb >= MIN_RUNS and nn >= MIN_RUNS,
                            "evidence": f"{nb} baseline run(s), {nn} new run(s) (--llm-runs; §6.3 asks >= {MIN_RUNS})"},
            "6.3-REPORT-1": {"met": bool(outcomes) and len(with_change) == len(outcomes),
                             "evidence": f"{len(with_change)} of {len(outcomes)} compared figures have a "
                                         f"{self.confidence:.0%} CI of the change"},
            "6.3-PARAM-2": {"met": bool(with_change) and all(o.change.method and math.isfinite(o.change.p_value)
                                                              for o in with_change if o.change),
                            "evidence": "; ".join(sorted({o.change.method for o in with_change if o.change}))
                                        or "no figure compared"},
        }

    def to_json(self) -> dict[str, Any]:
        return {"baseline": [r.to_ref() for r in self.baseline], "new": [r.to_ref() for r in self.new],
                "rules": [r.text for r in self.rules], "confidence": self.confidence, "forced": self.forced,
                "failed": self.failed, "unmatched": self.unmatched, "pairs": [p.to_json() for p in self.pairs],
                "section6": self.section6_facts()}


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


#: Fewest stored runs of a test from which a between-run standard deviation is estimated.
MIN_HISTORY_RUNS = 3


def history_values(history: Sequence[StoredRun], proc: Mapping[str, Any], ref_key: Mapping[str, Any],
                   rule: Rule) -> list[float]:
    """The figure's value in every stored run (each ``--llm-runs`` repetition counted) of the same test,
    measured the same way (equal comparability key): the sample of run-to-run variation."""
    vals: list[float] = []
    for h in history:
        for view in repetition_views(h):
            m = _matches(proc, view.document.get("procedures") or [])
            if m is None or differences(ref_key, comparability_key(view, m)):
                continue
            _, metrics = _run_json(m, rule.level)
            v = summary_value(metrics, rule)
            if v is not None and math.isfinite(v):
                vals.append(v)
    return vals


def summary_value(metrics: Mapping[str, Any] | None, rule: Rule) -> float | None:
    """A figure's point value from a run's stored summaries (no samples needed)."""
    if not metrics:
        return None
    if rule.info.kind == "scalar":
        e = (metrics.get("scalars") or {}).get(_stored(rule))
    else:
        d = (metrics.get("distributions") or {}).get(_stored(rule)) or {}
        e = d.get("mean") if rule.statistic == "mean" else (d.get("percentiles") or {}).get(f"p{rule.percentile:g}")
    v = e.get("value") if isinstance(e, Mapping) else None
    return float(v) if isinstance(v, (int, float)) else None


WITHIN_ONLY = ("; variance used: within-run sampling only (fewer than 3 stored runs of this test, so "
               "run-to-run host drift is not covered; keep >= 3 baseline runs, e.g. --llm-runs 3)")


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
            seed: int = DEFAULT_SEED, figures: Sequence[str] = DEFAULT_FIGURES,
            history: Sequence[StoredRun] | None = None) -> Comparison:
    """Compare the new run(s) with the baseline run(s), procedure by procedure.

    Several runs on a side are repetitions (§6.3; a run of ``--llm-runs N`` counts as N): the
    across-run method is used. With one run per side, ``history`` (the stored runs, e.g.
    :func:`~.storage.list_runs`) gives the between-run variation of the same test when it holds
    at least :data:`MIN_HISTORY_RUNS` of them (:func:`widen_by_history`); otherwise the message says
    that only within-run variance was used. ``force`` compares pairs whose comparability keys
    differ (the differences stay listed, ``forced`` set).
    """
    base_runs = [baseline] if isinstance(baseline, StoredRun) else list(baseline)
    new_runs = [new] if isinstance(new, StoredRun) else list(new)
    base_runs = [v for r in base_runs for v in repetition_views(r)]
    new_runs = [v for r in new_runs for v in repetition_views(r)]
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
        warns: list[str] = []
        for r, p in base_side[1:] + new_side:
            other_key = comparability_key(r, p)
            for d in differences(ref_key, other_key):
                if d not in diffs:
                    diffs.append(d)
            warns += [w for w in key_warnings(ref_key, other_key) if w not in warns]
        pair = ProcedurePair(
            key=str(proc.get("key")), procedure=str(proc.get("procedure")), title=title,
            tests=list(proc.get("tests") or []), load=ref_key.get("parameters.load") or "not recorded",
            rate_baseline=[resolved_rate(p) for _, p in base_side], rate_new=[resolved_rate(p) for _, p in new_side],
            differences=diffs, refused=bool(diffs) and not force, forced=bool(diffs) and force, warnings=warns,
            slo_verdicts=slo_verdict_pairs(base_side[0][0].document, new_runs[0].document, list(proc.get("tests") or [])))
        comp.pairs.append(pair)
        if pair.refused:
            pair.note = ("refused: the runs were not measured the same way (§6.1); differences: "
                         + "; ".join(str(d) for d in diffs) + " (use --llm-compare-force / --force to compare anyway)"
                         + ("; " + RECOUNT_HINT if any(d.field == COUNT_TOKENIZER for d in diffs) else "")
                         + ("; " + DEFINITIONS_HINT if any(d.field == METRIC_DEFINITIONS for d in diffs) else ""))
            continue
        if warns:
            pair.note = "warning: " + "; ".join(warns)
        for i, rule in enumerate(shown):
            has_t = i < n_rules
            level = rule.level
            itl = _itl_vs_tbc(base_side, new_side, rule, title)
            if itl is not None:
                pair.outcomes.append(FigureOutcome(rule.figure, rule if has_t else None, level, None,
                                                   "FAIL" if has_t else "n/a", itl, rule.info.unit))
                continue
            c = _change_for(base_side, new_side, rule, confidence, seed)
            if c is not None and len(base_side) == 1 and len(new_side) == 1 and history is not None:
                hv = history_values(history, base_side[0][1], ref_key, rule)
                c = widen_by_history(c, hv) if len(hv) >= MIN_HISTORY_RUNS else \
                    Change(**{**c.__dict__, "method": c.method + WITHIN_ONLY})
            if c is None:
                pair.outcomes.append(FigureOutcome(rule.figure, rule if has_t else None, level, None, "n/a",
                                                   f"{rule.figure} [{title}]: not available on both sides",
                                                   rule.info.unit))
                continue
            verdict = _judge(rule, c, has_t)
            pair.outcomes.append(FigureOutcome(rule.figure, rule if has_t else None, level, c, verdict,
                                               _message(title, rule, level, c, verdict, base_label, has_t),
                                               rule.info.unit))
    return comp


def _itl_vs_tbc(base: list[tuple[StoredRun, Mapping[str, Any]]], new: list[tuple[StoredRun, Mapping[str, Any]]],
                rule: Rule, title: str) -> str | None:
    """Why an ITL figure cannot be compared: a side measured under §4.6.3 option A (App. B.2.1 chose
    Time Between Chunks) has no ITL, and ITL is never compared with chunk gaps; None when it can."""
    if _stored(rule) not in ITL_METRICS:
        return None
    opts = [[str((_run_json(p, rule.level)[1] or {}).get("itl_option") or "") for _, p in side] for side in (base, new)]
    a = ["A" in o for o in opts]
    if not any(a):
        return None
    if all(a):
        return f"{rule.figure} [{title}]: {ITL_NOT_MEASURABLE} (both sides measured Time Between Chunks, §4.6.3 A)"
    side = "new" if a[1] else "baseline"
    return (f"{rule.figure} [{title}]: refused: the {side} run measured Time Between Chunks (§4.6.3 option A), the "
            f"other ITL; itl is never compared with tbc ({ITL_NOT_MEASURABLE} there)")


def check_comparable(baseline: StoredRun, new: StoredRun, *, force: bool = False) -> list[Difference]:
    """Every difference between matched procedures; raises :class:`IncomparableRunsError` unless ``force``."""
    comp = compare(baseline, new, (), force=True, figures=())
    diffs = [d for p in comp.pairs for d in p.differences]
    if diffs and not force:
        raise IncomparableRunsError("runs are not comparable (§6.1): " + "; ".join(map(str, diffs)), diffs)
    return diffs
