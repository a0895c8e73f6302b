"""App. B.1.3 (server-side TTFT) and App. C (the report's content) rows, from what a run knows.

App. C.1's Minimum Viable Report is written by ``document/mvr.py`` from the SUT, the declarations
and the session's procedures: these rows ask whether what it writes is known (declared, reported
by the SUT or measured), naming a field that would read "not declared". C.2's sections are rendered
for every document (``report/render.py``): labelled construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from .engine import _Ctx, decide, evaluator
from .verdict import Check

#: App. C.1 system identification: field -> (declaration key, its keys)
_SYSTEM = {"model name/version": ("model", ("name", "version")), "accelerator type x count": ("hardware",
           ("accelerator", "count")), "inference engine + version": ("engine", ("name", "version"))}


def _declared(ctx: _Ctx, key: str, keys: tuple[str, ...]) -> str | None:
    v = ctx.decl.get(key)
    if not isinstance(v, Mapping) or any(v.get(k) in (None, "") for k in keys):
        return None
    return " ".join(str(v[k]) for k in keys)


@evaluator("C.1-REPORT-1")
def _system_identification(ctx: _Ctx, rid: str) -> Check:
    found = {what: _declared(ctx, key, keys) for what, (key, keys) in _SYSTEM.items()}
    found["SUT boundary"] = ctx.facts.boundary
    missing = [w for w, v in found.items() if not v]
    keys = [_SYSTEM[w][0] for w in missing if w in _SYSTEM]
    if missing:
        return decide(rid, ok=None, needs=f"the report's system identification lacks {', '.join(missing)}"
                      + (f": declare {', '.join(keys)}" if keys else ""), key=", ".join(keys) or None)
    return decide(rid, ok=True, met="; ".join(f"{w}: {v}" for w, v in found.items()),
                  source="declared" if ctx.decl.source else "measured", **{k.split()[0]: v for k, v in found.items()})


@evaluator("C.1-REPORT-2")
def _test_configuration(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    ld = f.load
    shape = f" rate shape {ld.schedule} (mean {ld.rate:.4g} req/s)" if ld.arrival == "shaped" and ld.rate else ""
    load = (f"{ld.model}-loop" + (shape or (f" {ld.arrival} at {ld.rate:g} req/s" if ld.model == "open" and ld.rate
                                            else ""))
            + (f" at concurrency {ld.concurrency}" if ld.model == "closed" and ld.concurrency else "")
            if ld.model else None)
    n = f.records.n if f.records is not None else 0
    missing = [w for w, v in (("workload", f.workload.get("name") if f.workload else None), ("load model", load),
                              ("request count", n)) if not v]
    return decide(rid, ok=not missing, met=f"workload {f.workload.get('name')}; {load}; {n} requests "
                  "(duration from each run's send window)", unmet=f"test configuration lacks {', '.join(missing)}",
                  source="measured")


@evaluator("C.1-REPORT-3")
def _key_results(ctx: _Ctx, rid: str) -> Check:
    """TTFT/TPOT P50/P99 need successful requests; the maximum throughput is 5.2's measured maximum
    (without 5.2 in the report, the document falls back to the best run's throughput: not a maximum)."""
    f = ctx.facts
    n_ok = f.records.n_ok if f.records is not None else 0
    gaps = [] if n_ok else ["no successful request: no TTFT/TPOT percentiles"]
    if "5.2" not in f.session_tests:
        gaps.append("no 5.2 in this report: the maximum throughput and the throughput at P99 TTFT < 500 ms are read "
                    "from the runs made, not from a measured maximum")
    return decide(rid, ok=not gaps, met=f"TTFT/TPOT P50/P99 over {n_ok} successful requests; maximum throughput "
                  "from 5.2 in this report", unmet="; ".join(gaps), source="measured", successful=n_ok)


@evaluator("C.1-REPORT-4")
def _notes(ctx: _Ctx, rid: str) -> Check:
    """Deviations are listed whatever they are; the guardrail configuration must be known."""
    g = ctx.facts.guardrails or ctx.decl.get("guardrails")
    if not isinstance(g, Mapping):
        return ctx.needs(rid, "guardrails", "the report's notes cannot state the guardrail configuration")
    text = ", ".join(f"{k}={v}" for k, v in g.items())
    return decide(rid, ok=True, met=f"notes: the deviations (every unmet item) and the guardrail configuration ({text})",
                  source="measured" if ctx.facts.guardrails else "declared", guardrails=dict(g))


@evaluator("C.2-REPORT-1")
def _full_report(ctx: _Ctx, rid: str) -> Check:
    return decide(rid, ok=True, met="report.md and report.html: system identification, test configuration, results, "
                  "per-test tables and plots, methodology compliance, notes")


@evaluator("B.1.3-PARAM-1")
def _server_side_ttft(ctx: _Ctx, rid: str) -> Check:
    """TTFT is the client's (App. B.1.1); server-reported parts (queue wait, prefill) are labelled as such."""
    f = ctx.facts
    return decide(rid, ok=None, na="TTFT is measured at the client (App. B.1.1: T_submit at the last request byte, "
                  "T_first at the first content chunk); server-reported parts are labelled 'server-reported'"
                  + (" and the server's per-token timestamps were read" if f.server_token_timestamps else ""))
