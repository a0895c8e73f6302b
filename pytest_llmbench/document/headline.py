"""The headline of a results document: what a reader needs in thirty seconds (App. C.1, §2).

Computed from the document's procedures and tests before it is written (results.py calls
:func:`annotate`), so report/ only lays it out. Adds, all JSON:

* ``headline``: SUT and profile, test counts (tests without SLOs are *informational*, not PASS),
  compliance counts with the most common unmet item, 4-6 key figures each with the procedure,
  load level and workload it came from and one definition, and durations that add up.
* per test ``label`` (PASS / FAIL / INFORMATIONAL / SKIP / NOT RUN) and ``warnings``;
* per procedure ``order`` (draft order), ``warnings`` and ``sweep`` (tested range and result);
* ``headline.findings``: each kind of finding once, most severe first, with the procedures it
  concerns (a procedure with failed requests names the most frequent error and its count);
* ``compliance_overview``: session-wide items once, procedure-specific unmet items per
  procedure, unmet items grouped by the fix, and a procedure x verdict grid, with item titles.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..measure.registry import METRICS

__all__ = ["annotate", "draft_order"]

VERDICTS = ("unconditionally compliant", "conditionally compliant", "not compliant")
#: success rate below which a procedure's verdict cell carries a warning (§5.10: refusals, errors)
SUCCESS_WARN = 0.99
#: Jain index per request below which 5.6 is flagged as unfair (§5.6.4)
JAIN_WARN = 0.8
#: TTFT inflation (mixed / isolated P99) above which 5.6 is flagged
INFLATION_WARN = 2.0
STATUS_RANK = {"unmet": 0, "needs-declaration": 1, "met": 2, "not-applicable": 3}


def draft_order(procedure: str) -> tuple[int, ...]:
    """``"5.10"`` -> ``(5, 10)``: procedures sorted as the draft numbers them."""
    return tuple(int(x) for x in re.findall(r"\d+", str(procedure))) or (999,)


def _meas(p: Mapping[str, Any]) -> dict[str, Any]:
    return dict((p.get("result") or {}).get("measurements") or {})


def _val(e: Any) -> float | None:
    if isinstance(e, Mapping):
        e = e.get("value")
    return float(e) if isinstance(e, (int, float)) and not isinstance(e, bool) else None


def _n(v: float, digits: int = 3) -> str:
    return f"{v:,.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"


def _level_text(load: Mapping[str, Any] | None) -> str:
    load = load or {}
    if load.get("rate") is not None:
        return f"{_n(float(load['rate']))} req/s offered"
    if load.get("concurrency") is not None:
        return f"concurrency {load['concurrency']}"
    return "not recorded"


# --------------------------------------------------------------------------------------------
# warnings and sweeps
# --------------------------------------------------------------------------------------------


def _cancelled(p: Mapping[str, Any]) -> tuple[int, int]:
    """(cancelled, sent) over the runs of a procedure (§5.8: cancelled requests did not complete)."""
    cancelled = sent = 0
    for r in (p.get("result") or {}).get("runs") or []:
        load = r.get("load") or {}
        s, ok = load.get("sent"), load.get("ok")
        if isinstance(s, int) and isinstance(ok, int):
            sent += s
    for lv in _meas(p).get("levels") or []:
        if isinstance(lv, Mapping) and isinstance(lv.get("cancelled"), int):
            cancelled += lv["cancelled"]
    return cancelled, sent


def completion_levels(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """§5.8.4 completion per oversubscription level counting cancelled requests as not completed:
    completed (the load generator's ``ok``) over sent, next to the level's ``cancelled`` count.
    Empty for procedures whose ``levels`` carry no ``cancelled`` count."""
    levels = [lv for lv in _meas(p).get("levels") or [] if isinstance(lv, Mapping) and "cancelled" in lv]
    runs = [r.get("load") or {} for r in (p.get("result") or {}).get("runs") or []]
    out = []
    for lv in levels:
        load = next((ld for ld in runs if ld.get("concurrency") == lv.get("concurrency")), {})
        runs = [ld for ld in runs if ld is not load]
        sent, ok = load.get("sent"), load.get("ok")
        known = isinstance(sent, int) and isinstance(ok, int) and sent > 0
        out.append({"level": lv.get("level"), "concurrency": lv.get("concurrency"), "sent": sent if known else None,
                    "completed": ok if known else None, "cancelled": lv["cancelled"],
                    "completion": ok / sent if known else None})
    return out


#: Kinds of finding, most severe first: (kind, title shown once with the procedures it concerns).
FINDING_KINDS: tuple[tuple[str, str], ...] = (
    ("incomplete", "incomplete"),
    ("invalid_runs", "runs invalid (load generator self-check)"),
    ("failed_requests", "requests failed"),
    ("cancelled", "requests cancelled (count as not completed)"),
    ("unfair", "unfair scheduling"),
    ("overloaded", "overloaded"),
    ("client_timing", "client timing flagged (the client's own delay is > 5 % of a figure)"),
)
_SEVERITY = {k: i for i, (k, _) in enumerate(FINDING_KINDS)}


def top_error(p: Mapping[str, Any]) -> dict[str, Any] | None:
    """The most frequent reason this procedure's failed requests gave, over every run (its load
    summaries' ``error_messages``), with its count; None without failures."""
    import re

    counts: dict[str, dict[str, Any]] = {}
    for r in (p.get("result") or {}).get("runs") or []:
        for e in (r.get("load") or {}).get("error_messages") or []:
            key = re.sub(r"\d+", "#", str(e.get("message")))
            cur = counts.setdefault(key, {"message": e.get("message"), "type": e.get("type"), "count": 0})
            cur["count"] += int(e.get("count") or 0)
    return max(counts.values(), key=lambda e: e["count"]) if counts else None


def procedure_findings(p: Mapping[str, Any]) -> list[dict[str, str]]:
    """Findings that must be visible next to the verdict, each with its kind (:data:`FINDING_KINDS`):
    failed and cancelled requests (with the most frequent error), unfairness, overload, client timing."""
    out: list[dict[str, str]] = []

    def add(kind: str, text: str, lead: str = "", tail: str = "") -> None:  # lead, tail: what it is, when alone
        out.append({"kind": kind, "text": text, "warning": lead + text + tail})

    m = _meas(p)
    failed: list[str] = []
    sr = _val(p["figures"].get("success_rate"))
    if sr is not None and sr < SUCCESS_WARN:
        failed.append(f"success rate {sr * 100:.1f}%")
    low = []
    for r in (p.get("result") or {}).get("runs") or []:
        load = r.get("load") or {}
        s, ok = load.get("sent"), load.get("ok")
        if isinstance(s, int) and isinstance(ok, int) and s and ok / s < SUCCESS_WARN and p["procedure"] != "5.8":
            low.append((ok / s, f"{r.get('label')} {ok} of {s}"))
    if low:
        failed.append(f"{len(low)} run(s) below {SUCCESS_WARN:.0%} success (lowest: {min(low)[1]})")
    cancelled, sent = _cancelled(p)
    runs = (p.get("result") or {}).get("runs") or []
    errors = sum(int(v) for r in runs for k, v in ((r.get("metrics") or {}).get("errors_by_type") or {}).items()
                 if k != "cancelled" and isinstance(v, int))
    if failed and not errors and cancelled:  # below 99 % only by requests cancelled at the drain (5.8)
        add("cancelled", f"{cancelled} of {sent} requests ({failed[0]}: none failed; the cancelled count against it)",
            tail=" cancelled (count as not completed)")
    else:
        if failed:
            err = top_error(p)
            if err is not None:
                failed.append(f"most frequent error: {err['message']} ({err['type']}) x{err['count']}")
            add("failed_requests", "; ".join(failed))
        if cancelled:
            add("cancelled", f"{cancelled} of {sent} requests", tail=" cancelled (count as not completed)")
    unfair = []
    jain = _val(m.get("jain_index_per_request"))
    if jain is not None and jain < JAIN_WARN:
        unfair.append(f"Jain index per request {jain:.2f}")
    for cls in ("short", "long"):
        infl = _val(m.get(f"{cls}_inflation_p99"))
        if infl is not None and infl > INFLATION_WARN:
            unfair.append(f"{cls} requests' TTFT P99 inflated {infl:.1f}x by the mix")
    if unfair:
        add("unfair", "; ".join(unfair), "unfair: ")
    if m.get("mixed_queue_growing"):
        add("overloaded", "queue grew during the mixed run (above saturation)")
    timing = p.get("client_delay") or {}
    if timing.get("flagged"):
        reasons = timing.get("reasons") or []
        more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
        add("client_timing", f"{reasons[0] if reasons else 'self-check'}{more}", "client timing flagged: ")
    invalid = [r.get("label") for r in runs if r.get("valid") is False]
    if invalid:
        add("invalid_runs", f"{len(invalid)} of {len(runs)} run(s)", tail=" invalid (load generator self-check)")
    if not p.get("complete", True):
        out.append({"kind": "incomplete", "text": "the procedure did not finish", "warning": "incomplete"})
    return out


def procedure_warnings(p: Mapping[str, Any]) -> list[str]:
    """The findings of one procedure as text (:func:`procedure_findings`)."""
    return [f["warning"] for f in procedure_findings(p)]


def findings(procs: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each kind of finding once, most severe first, with the procedures it concerns (draft order)."""
    by_kind: dict[str, list[dict[str, str]]] = {}
    for p in procs:
        for f in procedure_findings(p):
            by_kind.setdefault(f["kind"], []).append({"procedure": p["procedure"], "anchor": p["anchor"],
                                                      "text": f["text"]})
    titles = dict(FINDING_KINDS)
    return [{"kind": k, "title": titles[k], "procedures": by_kind[k]}
            for k in sorted(by_kind, key=lambda k: _SEVERITY[k])]


def primary_run(p: Mapping[str, Any]) -> str:
    """The run behind the procedure's summary figures (its ``metrics``), by label, with its level."""
    res = p.get("result") or {}
    for r in res.get("runs") or []:
        if r.get("metrics") is not None and r.get("metrics") == res.get("metrics"):
            return f"{r.get('label')} ({_level_text(r.get('load'))})"
    return "all runs pooled" if res.get("metrics") else "none"


def _range(values: list[float], unit: str, fmt: str = "{}") -> str:
    lo, hi = min(values), max(values)
    if lo == hi:
        return fmt.format(_n(lo)) + f" {unit}"
    return f"{_n(lo)}–{_n(hi)} {unit}"


def sweep(p: Mapping[str, Any]) -> dict[str, Any] | None:
    """Tested range and result of a procedure with several load levels or configurations."""
    runs = (p.get("result") or {}).get("runs") or []
    if len(runs) < 2:
        return None
    rates = [float(r["load"]["rate"]) for r in runs if (r.get("load") or {}).get("rate") is not None]
    conc = [float(r["load"]["concurrency"]) for r in runs if (r.get("load") or {}).get("concurrency") is not None]
    parts = []
    if rates:
        parts.append(_range(rates, "req/s offered"))
    if conc:
        parts.append("concurrency " + _range(conc, "").strip())
    m = _meas(p)
    proc = p["procedure"]
    result = None
    if proc == "5.2" and m.get("sustainable_rate_req_s") is not None:
        result = (f"sustainable {_n(m['sustainable_rate_req_s'])} req/s; max output "
                  f"{_n(m.get('max_output_throughput_tok_s') or 0)} tok/s")
    elif proc == "5.3" and m.get("optimal_rate_req_s") is not None:
        knee = m.get("knee_rate_req_s")
        sat = m.get("saturation_rate_req_s")
        result = (f"knee {_n(knee) + ' req/s' if knee is not None else 'not reached'}; saturation "
                  f"{_n(sat) + ' req/s' if sat is not None else 'not reached'}; highest throughput meeting the SLO "
                  f"{_n(m.get('optimal_output_tok_s') or 0)} tok/s at {_n(m['optimal_rate_req_s'])} req/s")
    elif proc == "5.5":
        cap = next((n for n in (p.get("result") or {}).get("notes") or [] if "Maximum concurrent" in n), None)
        result = cap
    elif proc == "5.8" and m.get("degradation"):
        result = str(m["degradation"]).split(";")[-1].strip()
    elif proc == "5.9" and m.get("scaling_exponent") is not None:
        result = f"TTFT ∝ L^{m['scaling_exponent']:.2f}"
    labels = [str(r.get("label")) for r in runs]
    return {"levels": len(runs), "primary": primary_run(p), "range": ", ".join(parts) or f"{len(runs)} runs: {', '.join(labels[:6])}",
            "result": result or "see the tables below"}


# --------------------------------------------------------------------------------------------
# key figures
# --------------------------------------------------------------------------------------------


def _figure(name: str, title: str, value: float | None, unit: str, p: Mapping[str, Any], level: str,
            metric: str | None, definition: str | None = None, undersampled: bool = False) -> dict[str, Any] | None:
    if value is None:
        return None
    reg = METRICS.get(metric) if metric else None
    return {"name": name, "title": title, "value": value, "unit": unit, "undersampled": undersampled,
            "procedure": p["procedure"], "procedure_title": p["title"], "anchor": p["anchor"], "level": level,
            "workload": str(p["configuration"].get("workload") or "not recorded"),
            "definition": definition or (reg.definition if reg is not None else "")}


def _primary_level(p: Mapping[str, Any]) -> str:
    runs = (p.get("result") or {}).get("runs") or []
    if len(runs) == 1:
        return _level_text(runs[0].get("load"))
    return p["configuration"].get("load") or "not recorded"


def key_figures(procs: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """4-6 figures, one definition each, from the procedure that defines them."""
    by = {p["procedure"]: p for p in procs}
    out: list[dict[str, Any] | None] = []
    lat = by.get("5.1") or by.get("5.4") or next((p for p in procs if p["figures"].get("ttft_p50")), None)
    if lat is not None:
        lvl = _primary_level(lat)
        for fig, title in (("ttft_p50", "TTFT P50"), ("ttft_p99", "TTFT P99"), ("tpot_p99", "TPOT P99")):
            e = lat["figures"].get(fig)
            if e:
                out.append(_figure(fig, title, _val(e), "s", lat, lvl, fig.split("_")[0],
                                   undersampled=bool(e.get("undersampled"))))
    p52 = by.get("5.2")
    if p52 is not None:
        m = _meas(p52)
        rate = _val(m.get("sustainable_rate_req_s"))
        out.append(_figure("sustainable_rate", "Sustainable request rate", rate, "req/s", p52,
                           "highest offered rate the SUT kept up with", None,
                           "highest offered request rate at which achieved throughput kept up with offered load "
                           "and the queue stayed bounded (§5.2.4)"))
        out.append(_figure("max_output_throughput", "Max output throughput", _val(m.get("max_output_throughput_tok_s")),
                           "tok/s", p52, "best level of the 5.2 sweep", "output_throughput"))
    p55 = by.get("5.5")
    if p55 is not None:
        m = _meas(p55)
        cap = (p55.get("result") or {}).get("capacity") or {}
        conc = cap.get("concurrency")
        out.append(_figure("capacity_concurrency", "Capacity (concurrent requests)", _val(conc), "requests", p55,
                           f"closed loop; {_n(m.get('output_throughput_at_max_tps') or 0)} tok/s at that concurrency",
                           None, "highest concurrency at which every criterion held (TTFT P99 and errors, §5.5.4); "
                           "a capacity at this workload, not a throughput ceiling"))
    p53 = by.get("5.3")
    if p53 is not None and not p52:
        m = _meas(p53)
        out.append(_figure("optimal_throughput", "Throughput at the optimal point", _val(m.get("optimal_output_tok_s")),
                           "tok/s", p53, f"{_n(m.get('optimal_rate_req_s') or 0)} req/s offered", "output_throughput"))
    return [f for f in out if f is not None][:6]


# --------------------------------------------------------------------------------------------
# compliance overview
# --------------------------------------------------------------------------------------------


def _fix(status: str, reason: str) -> str:
    """The change that would meet an unmet item, from its status and reason."""
    r = reason.lower()
    if status == "needs-declaration" or "declar" in r:
        return "Declare it (--llm-declarations)"
    if "profile" in r or "smoke" in r or "reduced" in r:
        return "Use the standard profile (smoke reduces the draft's minimums)"
    if "send lag" in r or "load generator" in r or "client" in r or "event-loop" in r:
        return "Run the load generator on a less loaded host"
    return "Change the run"


def compliance_overview(procs: list[Mapping[str, Any]], titles: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """Session-wide items once, procedure-specific unmet items per procedure, grouped by fix."""
    session: dict[str, dict[str, Any]] = {}
    specific: dict[str, list[dict[str, Any]]] = {}
    groups: dict[str, dict[str, Any]] = {}
    grid = []
    for p in procs:
        checks = ((p.get("result") or {}).get("compliance") or {}).get("checks") or []
        spec_rows = []
        for ck in checks:
            cid = str(ck.get("id"))
            title, scope = titles.get(cid, ("", ""))
            status = str(ck.get("status", ""))
            row = {"id": cid, "title": title, "level": ck.get("level", ""), "status": status,
                   "reason": ck.get("reason", ""), "source": ck.get("source", ""),
                   "evidence": ck.get("evidence") or {}, "figure": ck.get("figure")}
            failing = status in ("unmet", "needs-declaration") and row["level"] in ("MUST", "SHOULD")
            if scope == "general":
                cur = session.get(cid)
                if cur is None or STATUS_RANK.get(status, 9) < STATUS_RANK.get(cur["status"], 9):
                    session[cid] = {**row, "procedures": (cur or {}).get("procedures", [])}
                session[cid]["procedures"].append(p["procedure"])
            elif failing:
                spec_rows.append(row)
            if failing:
                fix = _fix(status, row["reason"])
                g = groups.setdefault(fix, {"fix": fix, "items": {}})
                g["items"].setdefault(cid, {"id": cid, "title": title, "level": row["level"], "procedures": []})
                if p["procedure"] not in g["items"][cid]["procedures"]:
                    g["items"][cid]["procedures"].append(p["procedure"])
        specific[p["key"]] = spec_rows
        c = p["compliance"]
        grid.append({"procedure": p["procedure"], "title": p["title"], "anchor": p["anchor"], "verdict": c["verdict"],
                     "must_unmet": sum(1 for u in c["unmet"] if u["level"] == "MUST"),
                     "should_unmet": sum(1 for u in c["unmet"] if u["level"] == "SHOULD")})
    session_rows = sorted(session.values(), key=lambda r: (STATUS_RANK.get(r["status"], 9), r["id"]))
    group_list = [{"fix": g["fix"], "items": list(g["items"].values())}
                  for g in sorted(groups.values(), key=lambda g: -len(g["items"]))]
    return {"grid": grid, "session_items": session_rows, "procedure_items": specific, "by_fix": group_list}


# --------------------------------------------------------------------------------------------
# tests and the headline
# --------------------------------------------------------------------------------------------


def test_label(t: Mapping[str, Any]) -> str:
    """PASS only when the test had SLOs to pass; a passed test without SLOs is informational."""
    if t["verdict"] == "PASS" and not t["slos"]:
        return "INFORMATIONAL"
    return str(t["verdict"])


def _sut_text(doc: Mapping[str, Any]) -> str:
    sut = doc.get("sut") or {}
    system = (doc.get("summary") or {}).get("system") or {}
    where = "embedded simulator" if sut.get("embedded_simulator") else str(sut.get("base_url") or "endpoint not declared")
    return (f"model {sut.get('model') or 'not declared'} at {where}; engine {system.get('software', 'not declared')}; "
            f"hardware {system.get('hardware', 'not declared')}")


def _ts(text: Any) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _busy_time(procs: list[Mapping[str, Any]]) -> tuple[float, list[str]]:
    """Wall time covered by at least one procedure, and which procedures ran inside another.

    A procedure that measures capacity first (5.10, 5.3) runs 5.2 inside its own interval, so
    summing per-procedure durations would count that time twice.
    """
    spans = []
    for p in procs:
        res = p.get("result") or {}
        a, b = _ts(res.get("started")), _ts(res.get("finished"))
        if a is None or b is None:
            d = float(p["configuration"].get("duration_s") or 0.0)
            spans.append((0.0, d, p["procedure"], False))
        else:
            spans.append((a, b, p["procedure"], True))
    nested = sorted({f"{q[2]} ran inside {o[2]}" for q in spans for o in spans
                     if q is not o and q[3] and o[3] and o[0] <= q[0] and q[1] <= o[1]})
    total, end = 0.0, None
    for a, b, _, timed in sorted(s for s in spans if s[3]):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    total += sum(b - a for a, b, _, timed in spans if not timed)
    return round(total, 3), nested


def _p99(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    d = ((run.get("metrics") or {}).get("distributions") or {}).get("ttft") or {}
    return (d.get("percentiles") or {}).get("p99")


def enrich_curve(p: Mapping[str, Any], capacity: Mapping[str, Any]) -> None:
    """Add P50s, the capacity and a knee-within-noise note to a ``curve`` plot (§5.3.4), in place.

    The draft's knee rule (first level whose TTFT P99 exceeds 2x the minimum P99) can fire on
    under-sampled P99s; when the knee level's P99 interval reaches below 2x the upper bound of the
    minimum's, the marker is flagged as within the noise.
    """
    res = p.get("result") or {}
    curve = (res.get("plots") or {}).get("curve")
    if not isinstance(curve, dict):
        return
    n = len(curve.get("offered") or [])
    levels = _meas(p).get("levels")
    if isinstance(levels, list) and len(levels) == n and all(isinstance(lv, Mapping) for lv in levels):
        p50 = [lv.get("ttft_p50_ms") for lv in levels]
        if all(isinstance(v, (int, float)) for v in p50):
            curve.setdefault("ttft_p50_s", [float(v) / 1000.0 for v in p50])
    cap = next((c.get("output_throughput") for c in capacity.values()
                if isinstance(c, Mapping) and c.get("rate") is not None and c.get("output_throughput")), None)
    if cap is not None and curve.get("offered_unit") == "req/s":
        curve.setdefault("capacity_tps", float(cap))
    if "knee_literal_index" in curve:  # the procedure applied the noise tolerance itself (stats.knee_point_ci)
        return
    knee = curve.get("knee_index")
    runs = res.get("runs") or []
    p99s = curve.get("ttft_p99_s") or []
    if knee is None or len(runs) != n or not p99s:
        return
    finite = [(v, i) for i, v in enumerate(p99s) if isinstance(v, (int, float))]
    if not finite:
        return
    lo_i = min(finite)[1]
    k, m = _p99(runs[knee]), _p99(runs[lo_i])
    if not k or not m:
        return
    if m.get("ci_high") is None or k.get("ci_low") is None:  # too few samples for a bounded interval
        curve["knee_note"] = (f"knee rule fired within the noise: with {m.get('n')} and {k.get('n')} samples the "
                              "P99 confidence intervals are unbounded, so the 2x rule cannot separate the levels")
    elif k["ci_low"] <= 2.0 * m["ci_high"]:
        curve["knee_note"] = (f"knee rule fired within the noise: the knee level's P99 95% CI starts at "
                              f"{k['ci_low'] * 1000:.1f} ms, below 2x the upper CI bound of the minimum P99 "
                              f"({2 * m['ci_high'] * 1000:.1f} ms)")


def annotate(doc: dict[str, Any], titles: Mapping[str, tuple[str, str]]) -> None:
    """Add ``headline``, ``compliance_overview`` and per-test/per-procedure labels to ``doc`` in place."""
    procs = doc["procedures"]
    by_key = {p["key"]: p for p in procs}
    for p in procs:
        p["order"] = list(draft_order(p["procedure"]))
        p["warnings"] = procedure_warnings(p)
        p["sweep"] = sweep(p)
        p["completion"] = completion_levels(p)
        enrich_curve(p, doc.get("capacity") or {})
        p["summary_level"] = p["sweep"]["primary"] if p["sweep"] else _primary_level(p)
    for t in doc["tests"]:
        t["label"] = test_label(t)
        proc = by_key.get(t.get("result_key") or "")
        t["warnings"] = list(proc["warnings"]) if proc else []
    labels = Counter(t["label"] for t in doc["tests"])
    verdicts = Counter(p["compliance"]["verdict"] for p in procs)
    unmet = Counter(u["id"] for p in procs for u in p["compliance"]["unmet"] if u["level"] == "MUST")
    main_reason = "no MUST item unmet"
    profile = (doc.get("settings") or {}).get("profile") or "not declared"
    if unmet:
        top, n = unmet.most_common(1)[0]
        title = titles.get(top, ("", ""))[0]
        main_reason = f"{top} unmet in {n} of {len(procs)} procedures" + (f" ({title})" if title else "")
        if profile == "smoke":
            main_reason += "; the smoke profile reduces the draft's minimums"
    procedures_s, nested = _busy_time(procs)
    session_s = float(doc.get("duration_s") or 0.0)
    doc["headline"] = {
        "sut": _sut_text(doc),
        "profile": profile,
        "complete": bool(doc.get("complete")),
        "tests": {"total": len(doc["tests"]), "passed": labels.get("PASS", 0), "failed": labels.get("FAIL", 0),
                  "informational": labels.get("INFORMATIONAL", 0), "skipped": labels.get("SKIP", 0),
                  "not_run": labels.get("NOT RUN", 0), "with_slos": sum(1 for t in doc["tests"] if t["slos"]),
                  "with_warnings": sum(1 for t in doc["tests"] if t["warnings"])},
        "compliance": {"counts": {v: verdicts.get(v, 0) for v in VERDICTS},
                       "not_evaluated": sum(n for v, n in verdicts.items() if v not in VERDICTS),
                       "main_reason": main_reason},
        "figures": key_figures(procs),
        "durations": {"session_s": round(session_s, 3), "procedures_s": procedures_s,
                      "other_s": round(max(session_s - procedures_s, 0.0), 3),
                      "other": "start-up, test collection and report writing outside every procedure",
                      "nested": nested},
        "warnings": [{"procedure": p["procedure"], "anchor": p["anchor"], "text": w}
                     for p in procs for w in p["warnings"]],
        "findings": findings(procs),
    }
    doc["compliance_overview"] = compliance_overview(procs, titles)
