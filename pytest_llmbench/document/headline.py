"""The headline of a results document: what a reader needs in thirty seconds (App. C.1, §2).

Computed from the document's procedures and tests before it is written, so report/ only lays it
out: :func:`annotate` is the first of the document's update hooks (``pytest_llmbench_update_document``,
the plugin's own implementation, ``tryfirst``; docs/architecture.md). Adds, all JSON:

* ``headline``: SUT and profile, test counts (tests without SLOs are *informational*, not PASS),
  compliance counts with the most common unmet item, 4-6 key figures each with the procedure,
  load level and workload it came from and one definition, and durations that add up.
* per test ``label`` (PASS / FAIL / INCONCLUSIVE / INFORMATIONAL / SKIP / NOT RUN) and ``warnings``;
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

from ..common.draft import VERDICTS

__all__ = ["annotate", "busy_time", "draft_order", "item_titles"]

#: success rate below which a procedure's verdict cell carries a warning (§5.10: refusals, errors)
SUCCESS_WARN = 0.99
STATUS_RANK = {"unmet": 0, "needs-declaration": 1, "met": 2, "not-applicable": 3}


def item_titles() -> dict[str, tuple[str, str]]:
    """id -> (readable title, applies_to) of every compliance item (data/requirements.yaml)."""
    from ..compliance import registry

    return {r.id: (r.summary, r.applies_to) for r in registry()}


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


def completion_levels(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """§5.8.4 completion per oversubscription level counting cancelled requests as not completed:
    completed (the load generator's ``ok``) over sent, next to the level's ``cancelled`` count.
    Empty for procedures whose ``levels`` carry no ``cancelled`` count."""
    levels = [lv for lv in _meas(p).get("levels") or [] if isinstance(lv, Mapping) and "cancelled" in lv]
    runs = [r.get("load") or {} for r in (p.get("result") or {}).get("runs") or []
            if (r.get("extra") or {}).get("phase_role") != "capacity search"]  # a search level is not a level
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
    ("hidden_reasoning", "hidden reasoning (TTFT and ITL include unobserved thinking; output tok/s counts tokens never "
                         "seen)"),
    ("ended_while_thinking", "requests ended while thinking (no content: not in TTFT)"),
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


def _declared(p: Mapping[str, Any]) -> list[dict[str, str]]:
    """The findings the procedure declared (``result.warnings``, since 1.4: kind and text)."""
    return [dict(w) for w in (p.get("result") or {}).get("warnings") or [] if isinstance(w, Mapping)]


def reasoning_findings(runs: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(kind, text) of a procedure's reasoning findings (issue 49), summed over its runs' counts: requests with
    hidden reasoning and the reasoning tokens the server counted for them, requests whose reasoning is not
    determinable, requests that ended while thinking."""
    def total(name: str) -> int:
        return sum(int(((r.get("metrics") or {}).get("scalars") or {}).get(name, {}).get("value") or 0) for r in runs)

    out: list[tuple[str, str]] = []
    hidden, unknown = total("hidden_reasoning_requests"), total("reasoning_undetermined_requests")
    if hidden:
        out.append(("hidden_reasoning", f"{hidden:,} requests with {total('hidden_reasoning_tokens'):,} reasoning "
                    "tokens counted by the server and none streamed"))
    if unknown:
        out.append(("hidden_reasoning", f"{unknown:,} requests not determinable (completion tokens far beyond those "
                    "streamed, no reasoning count from the server)"))
    ended = total("ended_while_thinking")
    if ended:
        out.append(("ended_while_thinking", f"{ended:,} requests"))
    return out


def procedure_findings(p: Mapping[str, Any]) -> list[dict[str, str]]:
    """Findings that must be visible next to the verdict, each with its kind (:data:`FINDING_KINDS`):
    failed requests (with the most frequent error) and what the procedure declares (cancellations,
    unfairness, overload), then the client's timing, invalid runs and an incomplete run."""
    out: list[dict[str, str]] = []

    def add(kind: str, text: str, lead: str = "", tail: str = "") -> None:  # lead, tail: what it is, when alone
        out.append({"kind": kind, "text": text, "warning": lead + text + tail})

    declared = _declared(p)
    failed: list[str] = []
    sr = _val(p["figures"].get("success_rate"))
    if sr is not None and sr < SUCCESS_WARN:
        failed.append(f"success rate {sr * 100:.1f}%")
    failed += [d["text"] for d in declared if d["kind"] == "failed_requests"]
    cancelled = [d["text"] for d in declared if d["kind"] == "cancelled"]
    runs = (p.get("result") or {}).get("runs") or []
    errors = sum(int(v) for r in runs for k, v in ((r.get("metrics") or {}).get("errors_by_type") or {}).items()
                 if k != "cancelled" and isinstance(v, int))
    if failed and not errors and cancelled:  # below 99 % only by requests cancelled at the drain (5.8)
        add("cancelled", f"{cancelled[0]} ({failed[0]}: none failed; the cancelled count against it)",
            tail=" cancelled (count as not completed)")
    else:
        if failed:
            err = top_error(p)
            if err is not None:
                failed.append(f"most frequent error: {err['message']} ({err['type']}) x{err['count']}")
            add("failed_requests", "; ".join(failed))
        for c in cancelled:
            add("cancelled", c, tail=" cancelled (count as not completed)")
    unfair = [d["text"] for d in declared if d["kind"] == "unfair"]
    if unfair:
        add("unfair", "; ".join(unfair), "unfair: ")
    for d in declared:
        if d["kind"] == "overloaded":
            add("overloaded", d["text"])
    for kind, text in reasoning_findings(runs):  # reasoning models (issue 49), over the procedure's runs
        add(kind, text)
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
    """The run behind the procedure's summary figures (the run it declares primary), with its level."""
    res = p.get("result") or {}
    label = res.get("primary_run")
    for r in res.get("runs") or []:
        if label is not None and r.get("label") == label:
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
    declared = (p.get("result") or {}).get("sweep") or {}
    result = declared.get("result")
    labels = [str(r.get("label")) for r in runs]
    return {"levels": len(runs), "primary": primary_run(p),
            "range": declared.get("range") or ", ".join(parts) or f"{len(runs)} runs: {', '.join(labels[:6])}",
            "result": result or "see the tables below"}


# --------------------------------------------------------------------------------------------
# key figures
# --------------------------------------------------------------------------------------------


def _primary_level(p: Mapping[str, Any]) -> str:
    runs = (p.get("result") or {}).get("runs") or []
    if len(runs) == 1:
        return _level_text(runs[0].get("load"))
    return p["configuration"].get("load") or "not recorded"


def key_figures(procs: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """At most 6 figures the procedures declare (``result.key_figures``), one definition each: per
    group the figures of the procedure that ranks them first (ties: draft order), in rank order."""
    winner: dict[str, tuple[int, int]] = {}  # group -> (rank, procedure index)
    for i, p in enumerate(procs):
        for f in (p.get("result") or {}).get("key_figures") or []:
            best = winner.get(f["group"])
            if best is None or (f["rank"], i) < best:
                winner[f["group"]] = (f["rank"], i)
    chosen = {(g, i) for g, (_, i) in winner.items()}
    out = []
    for i, p in enumerate(procs):
        for f in (p.get("result") or {}).get("key_figures") or []:
            value = _val(f.get("value"))
            if (f["group"], i) not in chosen or value is None:
                continue
            out.append((f["rank"], i, {
                "name": f["name"], "title": f["title"], "value": value, "unit": f["unit"],
                "undersampled": bool(f.get("undersampled")), "procedure": p["procedure"],
                "procedure_title": p["title"], "anchor": p["anchor"],
                "level": f.get("level") or _primary_level(p),
                "workload": str(p["configuration"].get("workload") or "not recorded"),
                "definition": f.get("definition") or ""}))
    return [f for _, _, f in sorted(out, key=lambda x: (x[0], x[1]))][:6]


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


def busy_time(procs: list[Mapping[str, Any]]) -> tuple[float, list[str]]:
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


def enrich_curve(p: Mapping[str, Any], capacity: Mapping[str, Any]) -> None:
    """Add the session's request-rate capacity (its output throughput) to a ``curve`` plot over
    offered req/s, in place (§5.3.4). Whether a knee fired within the noise is the procedure's
    judgement (5.3's ``knee_note``, stats.knee_point_ci), not re-judged here."""
    curve = ((p.get("result") or {}).get("plots") or {}).get("curve")
    if not isinstance(curve, dict):
        return
    cap = next((c.get("output_throughput") for c in capacity.values()
                if isinstance(c, Mapping) and c.get("rate") is not None and c.get("output_throughput")), None)
    if cap is not None and curve.get("offered_unit") == "req/s":
        curve.setdefault("capacity_tps", float(cap))


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
    procedures_s, nested = busy_time(procs)
    session_s = float(doc.get("duration_s") or 0.0)
    doc["headline"] = {
        "sut": _sut_text(doc),
        "profile": profile,
        "complete": bool(doc.get("complete")),
        "tests": {"total": len(doc["tests"]), "passed": labels.get("PASS", 0), "failed": labels.get("FAIL", 0),
                  "inconclusive": labels.get("INCONCLUSIVE", 0),
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
