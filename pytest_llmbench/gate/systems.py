"""Comparing systems side by side (§6): equivalence (§6.1), normalisation (§6.2), repeated-run
statistics (§6.3) and the fair-comparison checklist (§6.4).

:func:`compare_systems` builds the comparison; :meth:`SystemComparison.to_json` is the document
``report/comparison.py`` renders (terminal table, Markdown, HTML with plots) and ``compare``
writes to ``compare.json``."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..common import draft
from ..measure.slo import format_quantity
from .compare import DEFAULT_FIGURES, _matches, comparability_key, figure_value
from .metricinfo import metric_info
from .rules import parse_rule
from .section6 import Section6Verdict, section6_verdict
from ..measure.stats.runs import summarize_runs
from .storage import StoredRun, primary_label, repetition_views

__all__ = ["CheckItem", "SystemComparison", "compare_systems", "resolved_loads"]

#: Two runs count as "tested at the same time" (§6.4) when their windows overlap or are this close.
SAME_TIME_GAP_S = 3600.0


@dataclass(frozen=True)
class CheckItem:
    """One §6.1–§6.4 item: ``status`` is met, not met, needs declaration or n/a; ``source`` where the
    evidence comes from (measured, declared, parameter, none; empty: the stored documents)."""

    id: str
    text: str
    status: str
    detail: str
    source: str = ""


@dataclass
class SystemComparison:
    """Everything the side-by-side report shows."""

    runs: list[StoredRun]
    labels: list[str]
    #: {"procedure", "figure", "unit" (family), "values": [str], "raw": [float|None]}
    table: list[dict[str, Any]]
    equivalence: list[CheckItem]
    normalisation: list[dict[str, Any]]
    normalisation_method: str
    checklist: list[CheckItem]
    config_differences: list[tuple[str, list[str]]]
    #: the §6.2 report items and §6.3's minimum of runs
    reporting: list[CheckItem] = field(default_factory=list)

    @property
    def verdict(self) -> Section6Verdict:
        """The comparison's §2 verdict (test "6") from the §6.1–§6.4 items (section6.py)."""
        return section6_verdict(self.equivalence + self.reporting + self.checklist)

    def to_json(self) -> dict[str, Any]:
        return {"runs": [r.to_ref() for r in self.runs], "labels": self.labels, "table": self.table,
                "equivalence": [c.__dict__ for c in self.equivalence], "normalisation": self.normalisation,
                "normalisation_method": self.normalisation_method,
                "checklist": [c.__dict__ for c in self.checklist],
                "reporting": [c.__dict__ for c in self.reporting], "section6": self.verdict.to_json(),
                "config_differences": [{"item": k, "values": v} for k, v in self.config_differences]}


def _decl(run: StoredRun) -> Mapping[str, Any]:
    return (run.document.get("declarations") or {}).get("values") or {}


def _gpu_count(run: StoredRun, override: Mapping[str, float]) -> float | None:
    if _base_id(run) in override:
        return float(override[_base_id(run)])
    hw = _decl(run).get("hardware") or {}
    c = hw.get("count") if isinstance(hw, Mapping) else None
    return float(c) if isinstance(c, (int, float)) and c > 0 else None


def _price(run: StoredRun, override: Mapping[str, float]) -> float | None:
    if _base_id(run) in override:
        return float(override[_base_id(run)])
    d = _decl(run)
    for holder in (d.get("cost"), d.get("hardware"), d):
        if isinstance(holder, Mapping):
            for k in ("price_per_hour", "price_per_hour_usd", "usd_per_hour"):
                v = holder.get(k)
                if isinstance(v, (int, float)) and v > 0:
                    return float(v)
    return None


def _status(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "not met")


def _equal_over(values: Sequence[Any]) -> bool:
    return all(v == values[0] for v in values[1:])


def _time(run: StoredRun, key: str) -> float | None:
    s = run.document.get(key)
    try:
        return datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _sut_on_this_machine(run: StoredRun) -> str | None:
    """How the run's SUT shared the harness's machine (the embedded simulator, a loopback endpoint), else None."""
    sut = run.document.get("sut") or {}
    if sut.get("embedded_simulator"):
        return "the embedded simulator"
    host = urlsplit(str(sut.get("base_url") or "")).hostname or ""
    try:
        loop = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = False
    return f"loopback endpoint {host}" if loop else None


def _reference_counting(runs: Sequence[StoredRun]) -> CheckItem:
    """4.4.2-SHOULD-1 binds test 6 (issue 48): results compared across systems should count tokens with
    the reference tokenizer cl100k_base (option B) in every procedure of every run."""
    other = sorted({f"{r.id} {p.get('procedure')}: option {m.get('token_counting_option')} "
                    f"({m.get('token_counting_tokenizer')})"
                    for r in runs for p in r.document.get("procedures") or []
                    for m in [(p.get("result") or {}).get("measurements") or {}]
                    if (m.get("token_counting_option"), m.get("token_counting_tokenizer")) != ("B", "cl100k_base")})
    return CheckItem("4.4.2-SHOULD-1", "Reference tokenizer (cl100k_base, option B) for cross-system comparison",
                     "not met" if other else "met",
                     "; ".join(other[:6]) + (f" (+{len(other) - 6} more)" if len(other) > 6 else "") if other
                     else "every procedure of every run counted with cl100k_base (option B)", source="measured")


#: the key figure a procedure declares as the SUT's maximum output throughput (procedures.figures, a layer
#: above: the name is the document's, written into ``procedures[].result.key_figures``)
_MAX_OUTPUT_FIGURE = "max_output_throughput"


def _declared_maximum(run: StoredRun) -> float | None:
    """The maximum output throughput (tok/s) a stored run's procedures declare (§6.2), or None."""
    for p in run.document.get("procedures") or []:
        for f in (p.get("result") or {}).get("key_figures") or []:
            v = f.get("value") if isinstance(f, Mapping) else None
            if f.get("name") == _MAX_OUTPUT_FIGURE and isinstance(v, (int, float)) and v == v:
                return float(v)
    return None


#: a run label's rate suffix (``L00-10%-5.91rps``): the same step of a procedure on two systems keeps its label
_RATE_SUFFIX = re.compile(r"-[0-9.]+rps$")
#: two resolved rates are the same load when they differ by no more than the stored rounding (3 decimals)
#: plus this relative share
RATE_REL_TOL = 1e-3


def resolved_loads(proc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The loads a stored procedure actually ran (§6.1-MUST-4), by run label (rate suffix removed):
    ``model``, ``arrival``, ``rate`` (req/s, a capacity fraction resolved), ``concurrency``, and the
    capacity the rate is a fraction of (``capacity_rate``). A document whose runs do not record their
    load gives its primary run's resolved load (``facts.load``)."""
    result = proc.get("result") or {}
    out: dict[str, dict[str, Any]] = {}
    for run in result.get("runs") or []:
        ld, spec = run.get("load"), (run.get("extra") or {}).get("load_spec") or {}
        if isinstance(ld, Mapping) and ld.get("model"):
            out[_RATE_SUFFIX.sub("", str(run.get("label")))] = {
                "model": ld.get("model"), "arrival": ld.get("arrival"), "rate": ld.get("rate"),
                "concurrency": ld.get("concurrency"), "capacity_rate": spec.get("capacity_rate")}
    if not out:
        ld = (result.get("facts") or {}).get("load") or {}
        if ld.get("model"):
            out[primary_label(result) or "run"] = {"model": ld.get("model"), "arrival": ld.get("arrival"),
                                                   "rate": ld.get("rate"), "concurrency": ld.get("concurrency")}
    return out


def _load_text(ld: Mapping[str, Any]) -> str:
    if ld.get("model") == "closed":
        return f"closed c={ld.get('concurrency')}"
    rate = ld.get("rate")
    text = f"{ld.get('arrival') or 'open'} {rate:.4g} req/s" if isinstance(rate, (int, float)) else \
        f"{ld.get('arrival') or 'open'} rate not recorded"
    cap = ld.get("capacity_rate")
    return text + (f" (of capacity {cap:.4g} req/s)" if isinstance(cap, (int, float)) else "")


def _same_load(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if (a.get("model"), a.get("arrival"), a.get("concurrency")) != (b.get("model"), b.get("arrival"),
                                                                      b.get("concurrency")):
        return False
    ra, rb = a.get("rate"), b.get("rate")
    if ra is None or rb is None:
        return ra is None and rb is None
    return math.isclose(float(ra), float(rb), rel_tol=RATE_REL_TOL, abs_tol=0.0015)


def _load_item(procs: Sequence[Sequence[tuple[StoredRun, Mapping[str, Any] | None]]],
               written: tuple[bool | None, str]) -> CheckItem:
    """6.1-MUST-4, same load model and parameters (§6.1), compared as resolved: the load each run actually
    sent (a capacity fraction resolved against each system's capacity, a search's levels as run), run
    label by run label, beside the specs as written. Evidence: every compared run's load per system."""
    text = "Same load model and parameters"
    ok_written, d_written = written
    if ok_written is None:
        return CheckItem("6.1-MUST-4", text, "n/a", d_written)
    bad, same, unknown = [], 0, []
    for row in procs:
        name = str(row[0][1].get("procedure")) if row[0][1] is not None else "?"
        if any(p is None for _, p in row):
            continue  # missing in some runs: 6.1-MUST-1 and the written comparison name it
        loads = [resolved_loads(p) for _, p in row]  # type: ignore[arg-type]
        if not all(loads):
            unknown.append(name)
            continue
        labels = list(dict.fromkeys(k for ld in loads for k in ld))
        for lab in labels:
            here = [ld.get(lab) for ld in loads]
            if any(h is None for h in here):
                bad.append(f"{name} {lab}: run by " + " / ".join("yes" if h else "no" for h in here))
            elif not all(_same_load(here[0], h) for h in here[1:]):
                bad.append(f"{name} {lab}: " + " / ".join(_load_text(h) for h in here))  # type: ignore[arg-type]
            else:
                same += 1
    if not ok_written:
        return CheckItem("6.1-MUST-4", text, "not met", f"as written: {d_written}"
                         + (f"; as run: {'; '.join(bad[:6])}" if bad else ""), "measured")
    if bad:
        more = f" (+{len(bad) - 6} more)" if len(bad) > 6 else ""
        return CheckItem("6.1-MUST-4", text, "not met",
                         "the specs are equal as written, but the loads run differ (a capacity fraction resolves "
                         "against each system's own capacity; declare one capacity, --llm-capacity, or give a "
                         f"rate): {'; '.join(bad[:6])}{more}", "measured")
    if unknown:
        return CheckItem("6.1-MUST-4", text, "needs declaration",
                         f"equal as written; the loads run are not recorded for {', '.join(unknown)}", "none")
    return CheckItem("6.1-MUST-4", text, "met", f"equal as written and as run: {same} run(s) compared, each "
                     "with the same load model, arrival, concurrency and rate (within 0.1 %)", "measured")


def _hardware_item(runs: Sequence[StoredRun], norm: Sequence[Mapping[str, Any]]) -> CheckItem:
    """6.1-MUST-3, comparable hardware or normalised (§6.1, §6.2): from observation where one exists
    (one machine fingerprint for every run, the SUT on that machine), else from the hardware
    declarations (different hardware needs the §6.2 normalisation for every run), else needs-declaration."""
    text = "Comparable hardware (or normalised by hardware capability)"
    fps = [r.meta.get("machine") for r in runs]
    where = [_sut_on_this_machine(r) for r in runs]
    if all(fps) and _equal_over(fps) and all(where):
        node = fps[0].get("node") if isinstance(fps[0], Mapping) else "?"
        return CheckItem("6.1-MUST-3", text, "met", f"one machine ran every run and its SUT ({node}; "
                         f"{', '.join(sorted(set(w for w in where if w)))}): machine fingerprints equal", "measured")
    why = ("machine fingerprints differ" if all(fps) and not _equal_over(fps) else
           "a run has no machine fingerprint" if not all(fps) else "the SUT did not run on the harness's machine")
    hw = [_decl(r).get("hardware") for r in runs]
    missing = [r.id for r, h in zip(runs, hw) if not h]
    if missing:
        return CheckItem("6.1-MUST-3", text, "needs declaration",
                         f"{why}, and hardware is not declared for {', '.join(missing)}: declare hardware "
                         "{accelerator, count, memory} in each run's declarations", "none")
    if _equal_over(hw):
        return CheckItem("6.1-MUST-3", text, "met", f"{why}; declared hardware equal ({_short(hw[0])})", "declared")
    normalised = all(n.get("tokens_per_gpu_second") is not None and n.get("tokens_per_dollar_hour") is not None
                     for n in norm)
    decl = " / ".join(_short(h) for h in hw)
    if normalised:
        return CheckItem("6.1-MUST-3", text, "met", f"declared hardware differs ({decl}); results normalised by "
                         "hardware capability: tokens per GPU-second and per dollar-hour for every run (§6.2)",
                         "declared")
    return CheckItem("6.1-MUST-3", text, "not met", f"declared hardware differs ({decl}) and no §6.2 normalisation "
                     "is reported for every run: give each run's GPU count (hardware.count or --gpus RUN=N) and "
                     "price per hour (cost.price_per_hour or --price RUN=USD)", "declared")


def _short(v: Any) -> str:
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def _reporting_items(runs: Sequence[StoredRun], norm: Sequence[Mapping[str, Any]], method: str,
                     repetitions: Sequence[int]) -> list[CheckItem]:
    """6.2-REPORT-1..3 (when hardware differs: tokens per GPU-second, per dollar-hour, the method) and
    6.3-PARAM-1 (at least 3 runs per system, a draft minimum: counts as a SHOULD)."""
    differs = not _equal_over([_decl(r).get("hardware") for r in runs])
    out = []
    for rid, key, what in (("6.2-REPORT-1", "tokens_per_gpu_second", "tokens per GPU-second"),
                           ("6.2-REPORT-2", "tokens_per_dollar_hour", "tokens per dollar-hour")):
        if not differs:
            out.append(CheckItem(rid, f"Report {what} when hardware differs", "n/a", "declared hardware equal"))
            continue
        lacking = [n["run"] for n in norm if n.get(key) is None]
        out.append(CheckItem(rid, f"Report {what} when hardware differs", "not met" if lacking else "met",
                             f"not computable for {', '.join(lacking)}" if lacking else f"{what} for every run",
                             "declared"))
    # the comparison writes its method under Normalisation itself: met by how it is built, labelled so
    out.append(CheckItem("6.2-REPORT-3", "State the normalization method", "met" if method else "not met",
                         "construction: compare_systems states its method under Normalisation (§6.2)" if method
                         else "no method stated", "construction" if method else "none"))
    need = int(draft.value("comparison.min_runs"))
    few = [f"{_base_id(r)} {n}" for r, n in zip(runs, repetitions) if n < need]
    out.append(CheckItem("6.3-PARAM-1", "At least 3 independent runs per system", "not met" if few else "met",
                         (f"{min(repetitions)} run(s) per system < {need} ({', '.join(few)}; join repetitions with "
                          "'+' or run with --llm-runs)") if few else
                         f"{min(repetitions)} or more runs per system", "parameter"))
    return out


def _base_id(run: StoredRun) -> str:
    """The stored run's id (a repetition view of ``--llm-runs N`` is ``<id>#k``)."""
    return run.id.split("#", 1)[0]


def _label(reps: Sequence[StoredRun]) -> str:
    """A system's column label: its stored run(s), and how many repetitions stand behind it."""
    ids = "+".join(dict.fromkeys(_base_id(r) for r in reps))
    return ids if len(reps) == 1 else f"{ids} ({len(reps)} runs)"


def _table_row(title: str, f: str, row: Sequence[tuple[Sequence[StoredRun], Sequence[Mapping[str, Any] | None]]],
               confidence: float) -> dict[str, Any]:
    """One figure of one procedure over the systems (§6.3): each system's value over all its repetitions,
    with a CI and its method, or the reason none can be given."""
    rule = parse_rule(f"{f}:0%")
    unit = metric_info(rule.metric).unit
    raw: list[float | None] = []
    cells: list[dict[str, Any]] = []
    for reps, procs in row:
        ests = [figure_value(r, p, rule) if p is not None else None for r, p in zip(reps, procs)]
        vals = [float(e["value"]) for e in ests if e and e.get("value") is not None]
        if not vals:
            raw.append(None)
            cells.append({"n": 0, "value": None, "ci_low": None, "ci_high": None, "method": "",
                          "no_ci": "figure absent in every repetition"})
            continue
        missing = len(reps) - len(vals)
        if len(vals) > 1:
            s = summarize_runs(f, vals, confidence=confidence)
            cell = {"n": s.n, "value": s.mean, "ci_low": s.ci_low, "ci_high": s.ci_high, "method": s.method,
                    "no_ci": ""}
        else:
            one = next(e for e in ests if e and e.get("value") is not None)
            lo, hi = (x if isinstance(x, (int, float)) else None for x in (one.get("ci_low"), one.get("ci_high")))
            how = f"within-run CI of one run ({one.get('method') or 'stored estimate'}); no across-run CI: one " \
                  "repetition (§6.3 asks >= 3)"
            why = ("" if lo is not None and hi is not None else
                   f"one repetition, and its within-run CI has no {'upper' if lo is not None else 'lower'} end "
                   f"({one.get('n')} samples{', under-sampled for this percentile' if one.get('undersampled') else ''})"
                   if lo is not None or hi is not None else
                   "one repetition and no within-run CI stored for this figure: an across-run CI needs >= 2 "
                   "repetitions")
            cell = {"n": 1, "value": vals[0], "ci_low": lo, "ci_high": hi,
                    "method": how if lo is not None or hi is not None else "", "no_ci": why}
        if missing:
            cell["no_ci"] = (cell["no_ci"] + "; " if cell["no_ci"] else "") + f"absent in {missing} repetition(s)"
        raw.append(cell["value"])
        cells.append(cell)
    return {"procedure": title, "figure": f, "unit": unit, "raw": raw, "cells": cells,
            "values": [_cell_text(c, unit) for c in cells]}


def _cell_text(c: Mapping[str, Any], unit: str) -> str:
    """``123 ms [118 ms, 128 ms] (n=3)``; a one-sided CI as ``[118 ms, —]``; else the value and "no CI"."""
    if c["value"] is None:
        return "n/a"
    v = format_quantity(c["value"], unit)
    if c["ci_low"] is None and c["ci_high"] is None:
        return v + f" (n={c['n']}, no CI)"
    lo, hi = (format_quantity(x, unit) if x is not None else "—" for x in (c["ci_low"], c["ci_high"]))
    return v + f" [{lo}, {hi}] (n={c['n']})"


def compare_systems(runs: Sequence[StoredRun | Sequence[StoredRun]], *, figures: Sequence[str] = DEFAULT_FIGURES,
                    gpus: Mapping[str, float] | None = None, prices: Mapping[str, float] | None = None,
                    confidence: float = 0.95) -> SystemComparison:
    """Side-by-side comparison of stored runs of (possibly) different systems (§6).

    Each element of ``runs`` is one system: a stored run, or its repetitions (a run of ``--llm-runs N``
    counts as its N repetitions, §6.3). The table gives each figure over every repetition with a CI
    (Student-t across repetitions; one repetition: the figure's within-run CI) or the reason for none;
    the §6.1/§6.4 items read each system's first repetition. ``gpus`` / ``prices`` (by run id of the
    first repetition) override the declared GPU count / price per hour.
    """
    systems = [[v for r in ([x] if isinstance(x, StoredRun) else list(x)) for v in repetition_views(r)]
               for x in runs]
    if len(systems) < 2 or not all(systems):
        raise ValueError("a system comparison needs at least two runs")
    runs = [s[0] for s in systems]
    repetitions = [len(s) for s in systems]
    gpus, prices = dict(gpus or {}), dict(prices or {})
    labels = [_label(s) for s in systems]
    procs = []
    reps_of = []
    for proc in runs[0].document.get("procedures") or []:
        reps = [(s, [_matches(proc, v.document.get("procedures") or []) for v in s]) for s in systems]
        reps_of.append(reps)
        procs.append([(s[0], found[0]) for s, found in reps])
    # side-by-side table: every repetition of each system (§6.3)
    table = []
    for row, reps in zip(procs, reps_of):
        title = f"{row[0][1].get('procedure')} {row[0][1].get('title', '')}".strip()
        table += [_table_row(title, f, reps, confidence) for f in figures]
    keys = [[comparability_key(r, p) if p is not None else None for r, p in row] for row in procs]
    # §6.1 equivalence
    def same(field_names: Sequence[str]) -> tuple[bool | None, str]:
        bad = []
        for row_keys, row in zip(keys, procs):
            if any(k is None for k in row_keys):
                bad.append(f"{row[0][1].get('procedure')}: missing in some runs")
                continue
            for fn in field_names:
                vals = [k.get(fn) for k in row_keys]
                if not _equal_over(vals):
                    bad.append(f"{row[0][1].get('procedure')} {fn}: " + " / ".join(str(v) for v in vals))
        if not procs:
            return None, "no procedures"
        return (not bad), ("; ".join(bad) if bad else "equal in every run")
    gpu_counts = [_gpu_count(r, gpus) for r in runs]
    equiv = []
    ok, d = same(["workload", "request sequence", "seed"])
    equiv.append(CheckItem("6.1-MUST-1", "Identical workload (same requests, same order, same seeds)", _status(ok), d))
    ok, d = same(["boundary"])
    equiv.append(CheckItem("6.1-MUST-2", "Equivalent SUT boundary", _status(ok), d))
    equiv.append(_load_item(procs, same(["parameters.load"])))
    # §6.2 normalisation of the maximum output throughput a procedure declares (5.2's), else the first
    # procedure with an output throughput (issue 48: not a run at a fraction of capacity when a maximum exists)
    norm = []
    for i, (r, reps) in enumerate(zip(runs, systems)):
        maxima = [m for v in reps if (m := _declared_maximum(v)) is not None]
        tput: float | None = sum(maxima) / len(maxima) if maxima else None
        basis = (f"maximum output throughput a procedure declares (5.2), mean over {len(maxima)} repetition(s)"
                 if maxima else "")
        for row in procs if tput is None else ():
            p = row[i][1]
            if p is not None:
                v = figure_value(r, p, parse_rule("output_throughput:0%"))
                if v and v.get("value") is not None:
                    tput = float(v["value"])
                    basis = (f"no maximum declared: {p.get('procedure')}'s output throughput (first repetition), "
                             "not a maximum")
                    break
        g, price = gpu_counts[i], _price(r, prices)
        norm.append({"run": _base_id(r), "output_throughput": tput, "basis": basis, "gpus": g, "price_per_hour": price,
                     "tokens_per_gpu_second": tput / g if tput is not None and g else None,
                     "tokens_per_dollar_hour": tput * 3600.0 / price if tput is not None and price else None})
    method = ("tokens per GPU-second = the maximum output tokens/s a procedure declares (5.2's, the mean over a "
              "system's repetitions; else the first procedure's output tokens/s, named in each row's basis) ÷ "
              "declared GPU count "
              "(declarations hardware.count, or --gpus RUN=N); tokens per dollar-hour = output tokens/s × 3600 ÷ "
              "declared price per hour in USD (declarations cost.price_per_hour, or --price RUN=USD) (§6.2)")
    equiv.insert(2, _hardware_item(runs, norm))
    reporting = _reporting_items(runs, norm, method, repetitions)
    reporting.append(_reference_counting(runs))
    # §6.4 checklist
    checklist = []
    ok, d = same(["workload", "parameters.workload", "request sequence"])
    checklist.append(CheckItem("6.4-PARAM-1", "Same workload specification", _status(ok), d))
    ok, d = same(["parameters.requests", "parameters.duration_s"])
    durs = [r.document.get("duration_s") for r in runs]
    if ok and all(isinstance(x, (int, float)) for x in durs) and max(durs) > 1.2 * min(durs) > 0:
        ok, d = False, "session durations differ by more than 20%: " + " / ".join(f"{x:.1f} s" for x in durs)
    checklist.append(CheckItem("6.4-PARAM-2", "Same test duration", _status(ok), d))
    ok, d = same(["parameters.warmup_requests", "parameters.warmup_tokens", "parameters.warmup_probes"])
    checklist.append(CheckItem("6.4-PARAM-3", "Same warm-up procedure", _status(ok), d))
    slos = [sorted((t.get("nodeid"), tuple(t.get("slos") or [])) for t in r.document.get("tests") or []) for r in runs]
    sets = [[s for _, s in x] for x in slos]
    checklist.append(CheckItem("6.4-PARAM-4", "Same success criteria", _status(_equal_over(sets)),
                               "SLOs equal" if _equal_over(sets) else "SLOs differ between runs"))
    windows = [(_time(r, "started"), _time(r, "finished")) for r in runs]
    if all(a is not None and b is not None for a, b in windows):
        gap = max(a for a, _ in windows) - min(b for _, b in windows)  # type: ignore[type-var,operator]
        checklist.append(CheckItem("6.4-PARAM-5", "Tested at the same time (shared resources)",
                                   "met" if gap <= SAME_TIME_GAP_S else "not met",
                                   f"largest gap between run windows {max(gap, 0):.0f} s (limit {SAME_TIME_GAP_S:.0f} s)"))
    else:
        checklist.append(CheckItem("6.4-PARAM-5", "Tested at the same time (shared resources)", "n/a", "run times not recorded"))
    prod = [_decl(r).get("production_representative") for r in runs]
    if all(p is None for p in prod):
        checklist.append(CheckItem("6.4-PARAM-6", "Production-representative configuration", "needs declaration",
                                   "declare production_representative = true in each run's declarations"))
    else:
        flags = [p.get("met") is True if isinstance(p, Mapping) else p is True for p in prod]  # {met, note} or a bool
        checklist.append(CheckItem("6.4-PARAM-6", "Production-representative configuration",
                                   "met" if all(flags) else "not met", " / ".join(str(p) for p in prod)))
    cfg = _config_differences(runs)
    # the comparison lists every differing configuration field of the stored documents, whatever they are:
    # met by how the comparison is built (issue 48: labelled, not presented as an observation)
    checklist.append(CheckItem("6.4-REPORT-1", "Differences in configuration explicitly noted", "met",
                               f"{len(cfg)} differing item(s) listed below (construction: every differing "
                               "configuration field of the stored documents is listed)", source="construction"))
    return SystemComparison(list(runs), labels, table, equiv, norm, method, checklist, cfg, reporting=reporting)


def _flatten(prefix: str, v: Any, out: dict[str, Any]) -> None:
    if isinstance(v, Mapping):
        for k, x in v.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), x, out)
    else:
        out[prefix] = v


def _config_differences(runs: Sequence[StoredRun]) -> list[tuple[str, list[str]]]:
    from .storage import sut_fingerprint

    flat = []
    for r in runs:
        d: dict[str, Any] = {}
        _flatten("sut", r.meta.get("sut") or sut_fingerprint(r.document), d)
        _flatten("declarations", _decl(r), d)
        flat.append(d)
    keys = sorted(set().union(*flat))
    return [(k, [str(f.get(k, "—")) for f in flat]) for k in keys if not _equal_over([f.get(k) for f in flat])]
