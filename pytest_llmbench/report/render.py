"""Render the report document (built by document/build.py) as Markdown, self-contained HTML and a step summary.

One view model (:func:`view`) turns the document into labelled rows and preformatted text; the
jinja2 templates in ``templates/`` only lay it out, so ``report.md`` and ``report.html`` always
say the same thing. Rendering reads the document only (no clock, no environment), which is what
makes :func:`pytest_llmbench.report.rebuild` reproduce the files byte for byte.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import jinja2
from markupsafe import Markup

from .figures import diff_reading, figures_for, metric_name
from .looks import look_figures
from .fmt import (
    fmt_any,
    fmt_cell,
    fmt_duration,
    fmt_est,
    fmt_num,
    fmt_pct,
    fmt_time,
    fmt_value,
    is_estimate,
    md_cell,
    md_text,
)
from .phases import phase_bar
from .rates import rate_figures
from .sessions import session_view

__all__ = ["render_html", "render_markdown", "render_summary", "view"]

#: Distributions shown per procedure (name in metrics.distributions, label).
DIST_ROWS = (("ttft", "TTFT"), ("ttfa", "TTFA (first fragment of any kind)"), ("thinking_time", "Thinking time"),
             ("reasoning_tokens", "Reasoning tokens"), ("itl_reasoning", "ITL (reasoning)"), ("tpot", "TPOT"), ("e2e", "E2E latency"), ("itl", None), ("ttst", "TTST"),
             ("jitter", "ITL jitter (per-request std)"), ("max_pause", "Max pause (per request)"),
             ("queue_wait", "Queue wait (server)"), ("prefill", "Prefill (server)"),
             ("send_lag", "Send lag (schedule)"), ("isl", "Input tokens"), ("osl", "Output tokens"))
PCTS = ("p50", "p90", "p95", "p99", "p99.9")
VERDICT_CLASS = {"unconditionally compliant": "ok", "conditionally compliant": "warn", "not compliant": "bad"}
LABEL_CLASS = {"PASS": "ok", "FAIL": "bad", "INCONCLUSIVE": "warn", "INFORMATIONAL": "info", "SKIP": "warn",
               "NOT RUN": "warn"}


def _ms(est: Any) -> str:
    """C.1 prints latencies as ``[value] ms``."""
    if not is_estimate(est) or est.get("value") is None:
        return "n/a"
    mark = "†" if est.get("undersampled") else ""
    return f"{fmt_num(est['value'] * 1000.0)} ms{mark}"


def _tps(v: Any) -> str:
    return "n/a" if v is None else f"{fmt_num(v)} tok/s"


def mvr_text(doc: Mapping[str, Any]) -> str:
    """The Minimum Viable Report exactly in the shape of App. C.1."""
    s = doc["summary"]
    sysid, cfg, key, notes = s["system"], s["configuration"], s["key_results"], s["notes"]
    head = "=== LLM Benchmark Report (Minimum) ===" + ("" if doc["complete"] else "   [INCOMPLETE]")
    at = key.get("throughput_at_ttft_p99_500ms_tps")
    at_text = _tps(at) if at is not None else "n/a (no measured load level had TTFT P99 < 500 ms)"
    lines = [
        head, "",
        "System Identification:",
        f"- Model: {sysid['model']}",
        f"- Hardware: {sysid['hardware']}",
        f"- Software: {sysid['software']}",
        f"- SUT Boundary: {sysid['sut_boundary']}",
        "",
        "Test Configuration:",
        f"- Workload: {cfg['workload']}",
        "- Load Model: " + ("\n  ".join(cfg["load_model"].split("; ")) or "not recorded"),
        f"- Request Count: {cfg['request_count']:,}",
        f"- Test Duration: {fmt_num(cfg['test_duration_s'])} seconds",
        "",
        "Key Results:" + (f" (latencies from {key['source']})" if key.get("source") else ""),
        f"- TTFT P50: {_ms(key.get('ttft_p50'))}",
        f"- TTFT P99: {_ms(key.get('ttft_p99'))}",
        f"- TPOT P50: {_ms(key.get('tpot_p50'))}",
        f"- TPOT P99: {_ms(key.get('tpot_p99'))}",
        f"- Max Throughput: {_tps(key.get('max_throughput_tps'))}"
        + (f" ({key['max_throughput_source']})" if key.get("max_throughput_source") else ""),
        f"- Throughput at P99 TTFT < 500ms: {at_text}"
        + (f" ({key['throughput_at_ttft_p99_500ms_source']})" if key.get("throughput_at_ttft_p99_500ms_source")
           else ""),
        "",
        "Notes:",
    ]
    lines += [f"- {d}" for d in notes["deviations"]] or ["- no deviations from the methodology recorded"]
    lines += [f"- Guardrail configuration: {notes['guardrails']}", "", "=== End Report ==="]
    return "\n".join(lines)


#: Marks a latency percentile the client's own delay may have set (results ``client_delay``).
FLAG = "⚑"


#: Latencies from the intended send, shown under the draft's own (from T_submit) when they differ.
FROM_SCHEDULE = {"ttft": ("ttft_from_schedule", "TTFT from schedule"), "e2e": ("e2e_from_schedule", "E2E from schedule")}
SCHEDULE_NOTE = ("TTFT and E2E follow the draft: from T_submit, the last request byte written (App. B.1.1). In this "
                 "open-loop run requests left later than their schedule by more than the client's own delay, so the "
                 "rows \"from schedule\" measure from the intended send as well (§4.2.5): what a user arriving on "
                 "the schedule waited, the wait the draft's figures leave out (coordinated omission).")


def _delay_bound_s(check: Mapping[str, Any] | None) -> float:
    """The client's own delay at P99 (self-check), seconds; 1 ms when the run has no self-check."""
    client = (check or {}).get("client") or {}
    table = client.get("receive_delay_ms") if client.get("source") == "receive-probe" else client.get("loop_lag_ms")
    p99 = (table or {}).get("p99")
    return (float(p99) if p99 is not None else 1.0) / 1e3


def _schedule_rows(metrics: Mapping[str, Any] | None, check: Mapping[str, Any] | None) -> set[str]:
    """The draft latencies whose from-schedule variant differs at P99 by more than the client-delay bound."""
    dists = (metrics or {}).get("distributions") or {}
    out = set()
    for name, (sched, _) in FROM_SCHEDULE.items():
        a = ((dists.get(name) or {}).get("percentiles") or {}).get("p99") or {}
        b = ((dists.get(sched) or {}).get("percentiles") or {}).get("p99") or {}
        if a.get("value") is not None and b.get("value") is not None and \
                b["value"] - a["value"] > _delay_bound_s(check):
            out.add(name)
    return out


def _dist_rows(metrics: Mapping[str, Any] | None, check: Mapping[str, Any] | None = None) -> list[list[str]]:
    """The distribution table; with the client-delay self-check, flagged percentiles carry
    :data:`FLAG` and a last row gives the client's delay at every percentile column. TTFT and E2E from
    the schedule follow their draft rows where they differ (:data:`SCHEDULE_NOTE`)."""
    if not metrics:
        return []
    dists = metrics.get("distributions") or {}
    flagged = {f["figure"] for f in (check or {}).get("figures") or [] if f.get("flagged")}
    schedule = _schedule_rows(metrics, check)
    order = [row for name, label in DIST_ROWS
             for row in ((name, label), *((FROM_SCHEDULE[name],) if name in schedule else ()))]
    rows = []
    for name, label in order:
        d = dists.get(name)
        if not d or not d.get("n") or (name == "ttfa" and "thinking_time" not in dists):  # ttfa = TTFT: shown once
            continue
        unit = d.get("unit", "")
        if label is None:
            label = "Time between chunks" if d.get("name") == "time_between_chunks" else \
                f"ITL (option {metrics.get('itl_option', '?')})"
        pct = d.get("percentiles") or {}
        rows.append([label, f"{d['n']:,}", fmt_est(d.get("mean"))]
                    + [(fmt_est(pct.get(p)) + (f" {FLAG}" if f"{name}_{p}" in flagged else "")) if p in pct else "n/a"
                       for p in PCTS]
                    + [fmt_value(d.get("min"), unit), fmt_value(d.get("max"), unit), fmt_value(d.get("std"), unit)])
    client = (check or {}).get("client")
    if rows and client and client.get("source"):
        table = client["receive_delay_ms"] if client["source"] == "receive-probe" else client["loop_lag_ms"]
        n = client["receive_n"] if client["source"] == "receive-probe" else client["loop_n"]
        rows.append([f"Client delay ({client['source']}, self-check)", f"{n:,}", ""]
                    + [fmt_value(table[p] / 1e3, "s") if p in table else "n/a" for p in PCTS] + ["", "", ""])
    return rows


def _client_delay_table(check: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The client-delay self-check of one procedure (results ``client_delay``, selfcheck.py)."""
    if not check:
        return []
    rows = []
    c = check.get("client") or {}
    for key, n_key, label in (("receive_delay_ms", "receive_n", "Receive delay (socket readable → timestamp)"),
                              ("loop_lag_ms", "loop_n", "Event-loop lag")):
        t = c.get(key) or {}
        if t:
            rows.append([label, fmt_value(t.get("p50", 0) / 1e3, "s"), fmt_value(t.get("p99", 0) / 1e3, "s"),
                         f"{c.get(n_key, 0):,} samples"])
    if c.get("cpu_share") is not None:
        rows.append(["Client CPU (process CPU time / wall time)", "", "",
                     f"{c['cpu_share']:.0%} of one core ({c['cpu_s']:.3g} s CPU over {c['wall_s']:.3g} s)"])
    e = check.get("option_c_error")
    if e:
        rows.append(["Measured error: client − server first-token time (option C)", fmt_value(e["p50_ms"] / 1e3, "s"),
                     fmt_value(e["p99_ms"] / 1e3, "s"), f"{e['n']:,} requests, max {fmt_value(e['max_ms'] / 1e3, 's')}"])
    th = check.get("thresholds") or {}
    verdict = f"FLAGGED {FLAG}" if check.get("flagged") else "not flagged"
    notes = [f"Self-check: {verdict}. A latency percentile is flagged ({FLAG} in the distribution table) when the "
             f"client delay at that percentile, propagated to it (whole for TTFT, E2E and ITL; ÷ (OSL − 1) of the "
             f"request at the percentile for TPOT), exceeds {th.get('rel', 0.05):.0%} of it ({th.get('abs_ms', 1):g} ms "
             f"for a zero percentile); the run is flagged then, or when the option-C error at P50 or P99 exceeds "
             f"{th.get('rel', 0.05):.0%} of TTFT at that percentile."]
    notes += list(check.get("reasons") or [])
    return [{"title": "Client-delay self-check", "columns": ["Client figure", "P50", "P99", "Detail"],
             "rows": rows, "notes": notes}]


def _fig(figs: Mapping[str, Any], name: str) -> str:
    e = figs.get(name)
    return fmt_est(e) if e else "n/a"


def _run_rows(runs: list[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for r in runs:
        m = r.get("metrics") or {}
        d = m.get("distributions") or {}
        sc = m.get("scalars") or {}

        def pct(name: str, p: str, d: Mapping[str, Any] = d) -> str:
            return fmt_est((d.get(name) or {}).get("percentiles", {}).get(p))

        valid = "yes" if r.get("valid", True) else f"no: {r.get('invalid_reason') or 'invalid'}"
        load = ", ".join(f"{k}={fmt_any(v)}" for k, v in (r.get("load") or {}).items())
        count = (sc.get("request_count") or {}).get("value")
        rows.append([str(r.get("label")), load, valid, f"{int(count):,}" if count is not None else "n/a",
                     pct("ttft", "p50"), pct("ttft", "p99"), pct("tpot", "p50"), fmt_est(sc.get("output_throughput")),
                     fmt_est(sc.get("success_rate")), str(r.get("run_dir") or "")])
    return rows


def _proc_view(p: Mapping[str, Any], with_figures: bool) -> dict[str, Any]:
    res = p["result"]
    c = p["compliance"]
    all_checks = (res.get("compliance") or {}).get("checks") or []
    cfg = p["configuration"]
    return {
        "anchor": p["anchor"],
        "heading": f"{p['procedure']} {p['title']}" + (" — COLD START measurement (§4.5.3)" if p.get("cold_start")
                                                       else ""),
        "procedure": p["procedure"],
        "complete": p["complete"],
        "key": p["key"],
        "tests": p.get("tests", []),
        "meta_rows": [
            ["Profile", p["profile"]], ["Workload", fmt_any(cfg["workload"])], ["Load", cfg["load"]],
            ["Runs", str(cfg["levels"])], ["Requests", f"{cfg['requests']:,}"],
            ["Duration", fmt_time(cfg["duration_s"]) if cfg["duration_s"] is not None else "n/a"],
            ["Started", res.get("started") or "n/a"], ["Finished", res.get("finished") or "n/a"],
            ["Seed", fmt_any(cfg["seed"])], ["Request sequence hash", fmt_any(cfg["sequence_hash"])],
            ["Capacity", _capacity(res.get("capacity"))],
        ],
        "param_rows": [[k, fmt_any(v)] for k, v in (res.get("params") or {}).items()],
        "measurement_rows": [[k, fmt_est(v, ci=True, n=True) if is_estimate(v) else fmt_any(v)]
                             for k, v in (res.get("measurements") or {}).items()],
        "tables": ([_with_cancelled(_as_text(t), p.get("completion") or []) for t in res.get("tables") or []]
                   + _extra_tables(p)
                   + _client_delay_table(p.get("client_delay"))),
        "run_rows": _run_rows(res.get("runs") or []),
        "dist_rows": _dist_rows(res.get("metrics"), p.get("client_delay")),
        "dist_note": SCHEDULE_NOTE if _schedule_rows(res.get("metrics"), p.get("client_delay")) else "",
        "errors": (res.get("metrics") or {}).get("errors_by_type") or {},
        "notes": list(res.get("notes") or []),
        "plot_notes": list(p.get("plot_notes") or []),
        "warnings": list(p.get("warnings") or []),
        "sweep": p.get("sweep"),
        "primary_label": (p.get("sweep") or {}).get("primary", ""),
        "verdict": c["verdict"],
        "verdict_class": VERDICT_CLASS.get(c["verdict"], "warn"),
        "unmet_rows": [[u["id"], u["level"], u["status"], u["reason"]] for u in c["unmet"]],
        "compliance_notes": list(c.get("notes") or []),
        "all_rows": [[ck.get("id", ""), ck.get("level", ""), ck.get("status", ""), ck.get("reason", "")]
                     for ck in all_checks],
        "must_unmet": sum(1 for u in c["unmet"] if u["level"] == "MUST"),
        "should_unmet": sum(1 for u in c["unmet"] if u["level"] == "SHOULD"),
        "figures": figures_for(p["procedure"], res.get("plots") or {}, p.get("slos") or []) if with_figures else [],
        "phases": phase_bar(res.get("metrics")),  # reasoning models' phases (issue 49; report/phases.py)
        "sessions": session_view(res.get("metrics")),  # multi-turn sessions by turn (issue 50; report/sessions.py)
    }


_EXPERIENCE_HEADERS = {"goodput": "Goodput (requests)", "token_weighted_goodput": "Token-weighted goodput",
                       "smooth_goodput": "Smooth goodput", "user_idle_latency_p50": "User idle latency P50",
                       "user_idle_latency_p99": "User idle latency P99", "fluid_token_rate": "Fluid token rate"}


def _extra_tables(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Goodput/experience per run and the HTTP timing table, from the document's ``experience`` and
    ``http_timing`` entries (document/procedure.py computes them; issue 19)."""
    out: list[dict[str, Any]] = []
    exp = p.get("experience") or []
    if exp:
        names = [k for k in _EXPERIENCE_HEADERS if any(k in r["values"] for r in exp)]
        out.append({"title": "Goodput and user experience", "columns": ["Run", *(_EXPERIENCE_HEADERS[k] for k in names)],
                    "rows": [[r["label"], *(fmt_est(r["values"].get(k)) for k in names)] for r in exp],
                    "notes": ["Goodput counts requests meeting every SLO (§5.2.2.3); token-weighted goodput counts "
                              "the output tokens of requests meeting every reading deadline (smooth-goodput paper "
                              "eq. 5); fluid token rate: Etalon §4.2."]})
    diff = ((p.get("result") or {}).get("plots") or {}).get("differences") or {}
    if diff.get("rows"):
        out.append(_differences_table(diff))
    http = p.get("http_timing") or []
    if http:
        pcts = list(http[0]["percentiles"])
        out.append({"title": "HTTP timing (--llm-http-trace)",
                    "columns": ["Phase", "AIPerf tag", *(k.upper() for k in pcts), "Mean", "n"],
                    "rows": [[r["metric"], r.get("aiperf") or "", *(fmt_value(r["percentiles"][k], r["unit"])
                              for k in pcts), fmt_value(r["mean"], r["unit"]), f"{r['n']:,}"] for r in http],
                    "notes": ["Connection set-up (blocked + DNS + connecting) precedes T_submit, so it is not part of "
                              "TTFT (App. B.1.1); waiting is the "
                              "time to the first response byte."]})
    lengths = _dataset_lengths_table(p.get("dataset_lengths"))
    if lengths:
        out.append(lengths)
    return out


def _dataset_lengths_table(d: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The Conversation workload's drawn lengths beside App. A.3.2 (document ``dataset_lengths``, 1.9)."""
    if not d:
        return None

    def cell(v: Any, pct: bool = False) -> str:
        return "n/a" if v is None else (f"{v * 100:+.1f}%" if pct else f"{v:,.0f}")

    rows = [[f"{r['side']} P{r['percentile']}", cell(r["drawn"]),
             f"{cell(r.get('ci_low'))}–{cell(r.get('ci_high'))}" if r["compared"] else "n/a", cell(r["reference"]),
             cell(r["difference"], True),
             ("within" if r["within"] else "outside") if r["compared"] else "not compared (too few draws)"]
            for r in d["rows"]]
    ident = d.get("identification") or {}
    if d.get("synthetic_standin"):
        what = "synthetic stand-in (no dataset file): lengths drawn through the A.3.2 percentiles"
    else:
        sha = d.get("sha256") or ""
        what = (f"{d.get('source')} (SHA-256 {sha[:16]}…): "
                + ("the draft's file, identified by " + str(ident.get("method")) if ident.get("standard")
                   else "custom dataset") + f": {ident.get('reason', '')}")
    return {"title": "Dataset lengths against App. A.3.2",
            "columns": [f"Length ({d.get('unit', 'tokens')})", f"Drawn (n={d['n']:,})",
                        f"{float(d.get('confidence') or 0.99):.0%} interval", "A.3.2 reference", "Difference",
                        f"Reference in interval ±{float(d['tolerance']):.0%}"],
            "rows": rows, "notes": [what, f"Rule: {d.get('rule')}."]}


def _as_text(table: Mapping[str, Any]) -> Mapping[str, Any]:
    """A procedure's table with every cell as text: numbers with their unit (results.json 1.5) through
    the one formatter (fmt_cell), words as they are."""
    return {**table, "rows": [[fmt_cell(c) for c in row] for row in table.get("rows") or []]}


def _with_cancelled(table: Mapping[str, Any], levels: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    """A table with a "Complete" column (§5.8 Table 11) shown with the document's completion per level,
    which counts cancelled requests as not completed, and a "Cancelled" column next to it."""
    cols = list(table.get("columns") or [])
    if not levels or "Complete" not in cols:
        return table
    i = cols.index("Complete")
    by_label = {f"{lv['level'] * 100:g}%": lv for lv in levels if isinstance(lv.get("level"), (int, float))}
    rows = []
    for row in table["rows"]:
        lv = next((v for k, v in by_label.items() if str(row[0]).split(" ")[0] == k), None)
        row = list(row)
        if lv is not None and lv.get("completion") is not None:
            row[i] = fmt_pct(lv["completion"], 3) + f" ({lv['completed']:,} of {lv['sent']:,})"
        row.insert(i + 1, f"{lv['cancelled']:,}" if lv is not None else "n/a")
        rows.append(row)
    note = ("Complete: requests completed successfully / requests sent; cancelled requests (still queued when "
            "the level's drain time ran out) count as not completed (§5.8.4).")
    # the procedure's own definition of Complete is replaced by `note`; the rest of that note is kept
    kept = [str(n).split("; ", 1)[1] if str(n).startswith("Complete = ") and "; " in str(n) else n
            for n in table.get("notes") or [] if not (str(n).startswith("Complete = ") and "; " not in str(n))]
    return {**table, "columns": [*cols[: i + 1], "Cancelled", *cols[i + 1:]], "rows": rows, "notes": [*kept, note]}


def _differences_table(d: Mapping[str, Any]) -> dict[str, Any]:
    """§5.7/§5.10 configuration differences with their CI: "within noise" when the CI includes 0."""
    conf = f"{d['confidence'] * 100:g}%"

    def signed(v: float, unit: str) -> str:
        return ("+" if v > 0 else "") + fmt_value(v, unit)

    rows = []
    for r in d["rows"]:
        mark = "†" if r.get("undersampled") else ""
        rows.append([r["series"], f"{metric_name(r['metric'])} {r['statistic'].upper()}",
                     f"{fmt_value(r['baseline_value'], r['unit'])} → {fmt_value(r['value'], r['unit'])}",
                     f"{signed(r['diff'], r['unit'])}{mark} [{signed(r['ci_low'], r['unit'])}, "
                     f"{signed(r['ci_high'], r['unit'])}]", f"{r['n_baseline']:,} / {r['n']:,}", diff_reading(r)])
    return {"title": f"Difference from {d['baseline']} with its {conf} confidence interval (noise band)",
            "columns": ["Configuration", "Metric", f"{d['baseline']} → configuration", f"Difference [{conf} CI]",
                        "n", "Reading"],
            "rows": rows,
            "notes": [f"A difference whose interval includes 0 is within noise: no measured difference, whatever "
                      f"its sign. n: requests behind each side ({d['baseline']} / configuration). Method: "
                      f"{d['method']}. † fewer samples than §5.1.4.3 asks for that percentile."]}


def _capacity(c: Any) -> str:
    if not isinstance(c, Mapping):
        return "n/a"
    parts = []
    if c.get("rate") is not None:
        parts.append(f"{c['rate']:,.6g} req/s")
    if c.get("concurrency") is not None:
        parts.append(f"concurrency {c['concurrency']}")
    if c.get("output_throughput") is not None:
        parts.append(f"{c['output_throughput']:,.6g} tok/s")
    text = ", ".join(parts) or "n/a"
    return f"{text} ({c['source']})" if c.get("source") else text


def _system_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    s = doc["summary"]["system"]
    sut = doc.get("sut") or {}
    rows = [["Model", s["model"]], ["Hardware", s["hardware"]], ["Software (engine)", s["software"]],
            ["SUT boundary (§4.1)", s["sut_boundary"]]]
    if sut:
        rows += [["Endpoint", str(sut.get("base_url"))], ["API", str(sut.get("api"))],
                 ["Model served", str(sut.get("model"))],
                 ["Embedded simulator", "yes" if sut.get("embedded_simulator") else "no"],
                 ["Server kind", f"{sut.get('server_kind') or 'unknown'} ({sut.get('server_kind_source') or 'n/a'})"],
                 ["TLS verification", "on" if sut.get("verify_tls") else "off"],
                 ["API key", f"from ${sut['api_key_env']} (value never recorded)" if sut.get("api_key_env")
                  else "none"]]
    decl = doc.get("declarations") or {}
    rows.append(["Declarations", decl.get("source") or "none"])
    return rows


_SETTING_LABELS = (("profile", "Profile"), ("seed", "Seed (§4.3.3)"), ("tokenizer", "Reference tokenizer (§4.4)"),
                   ("api", "API"), ("boundary", "Boundary setting"), ("capacity", "Declared capacity"),
                   ("slo", "SLOs (all tests)"), ("timeout", "Request timeout (s)"),
                   ("time_scale", "Simulator time scale"), ("strict_sampling", "Strict sampling"),
                   ("drop_text", "Drop text from records"), ("report", "Report directory"))


def view(doc: Mapping[str, Any], *, with_figures: bool = False) -> dict[str, Any]:
    """Everything the templates show, formatted."""
    settings = doc.get("settings") or {}
    procs = [_proc_view(p, with_figures) for p in doc["procedures"]]
    summary_rows = []
    for p in doc["procedures"]:
        f = p["figures"]
        tests = [t for t in doc["tests"] if t["result_key"] == p["key"]]
        slo = ", ".join(sorted({t.get("label", t["verdict"]) for t in tests})) or "no test"
        if p.get("warnings"):
            slo += " ⚠ " + "; ".join(p["warnings"])
        summary_rows.append([p["procedure"], p["title"], p.get("summary_level", ""), _fig(f, "ttft_p50"), _fig(f, "ttft_p99"),
                             _fig(f, "tpot_p50"), _fig(f, "tpot_p99"), _fig(f, "output_throughput"),
                             _fig(f, "success_rate"), slo, p["compliance"]["verdict"]])
    first_metrics = next((p["result"]["metrics"] for p in doc["procedures"] if p["result"].get("metrics")), None)
    definitions = sorted((first_metrics or {}).get("definitions", {}).items())
    repro = doc["reproduction"]
    repro_rows = [["Seed", fmt_any(repro.get("seed"))], ["Workloads", ", ".join(repro.get("workloads") or []) or "n/a"],
                  ["Reference tokenizer", fmt_any(repro.get("tokenizer"))],
                  ["Plugin version", f"pytest-llmbench {repro.get('plugin_version')}"],
                  ["Python / platform", f"{doc['tool']['python']} / {doc['tool']['platform']}"],
                  ["Methodology", doc["tool"]["draft"]]]
    for key, h in (repro.get("sequence_hashes") or {}).items():
        repro_rows.append([f"Request sequence hash ({key.split(':', 1)[0]})", h])
    seq_files = repro.get("request_sequence_files") or []
    repro_rows.append(["Request sequence files", ", ".join(seq_files) if seq_files else "none written"])
    return {
        "title": "LLM Benchmark Report",
        "doc": doc,
        "complete": doc["complete"],
        "generated": f"pytest-llmbench {doc['tool']['version']}, {doc['tool']['draft']}",
        "started": doc["started"],
        "finished": doc["finished"],
        "duration": fmt_duration(doc["duration_s"]),
        "mvr": mvr_text(doc),
        "system_rows": _system_rows(doc),
        "settings_rows": [[label, fmt_any(settings.get(k)) if settings.get(k) not in (None, [], "") else "—"]
                          for k, label in _SETTING_LABELS],
        "config_header": ["Procedure", "Title", "Workload", "Load model", "Runs", "Requests", "Duration", "Profile"],
        "config_rows": [[p["procedure"], p["title"], fmt_any(p["configuration"]["workload"]),
                         p["configuration"]["load"], str(p["configuration"]["levels"]),
                         f"{p['configuration']['requests']:,}", fmt_time(p["configuration"]["duration_s"]),
                         p["profile"]] for p in doc["procedures"]],
        "test_header": ["Test", "Procedure", "SLOs (marker, --llm-slo, test body): as judged", "SLO / test verdict",
                        "Message", "Compliance (separate)"],
        "test_rows": [{"cells": [t["nodeid"], t["procedure"] or "", _slo_cell(t),
                                 t.get("label", t["verdict"]), t["message"], t["compliance_verdict"]],
                       "warnings": "; ".join(t.get("warnings") or []),
                       "verdict_class": LABEL_CLASS.get(t.get("label", t["verdict"]), "warn"),
                       "compliance_class": VERDICT_CLASS.get(t["compliance_verdict"], "warn"),
                       "anchor": t.get("anchor")} for t in doc["tests"]],
        "test_short_rows": [[t["nodeid"], t.get("label", t["verdict"])
                             + (" ⚠ " + "; ".join(t["warnings"]) if t.get("warnings") else ""),
                             t["compliance_verdict"]] for t in doc["tests"]],
        "headline": headline_view(doc),
        "comparison": comparison_view(doc),
        "compliance": compliance_view(doc),
        "summary_header": ["Procedure", "Title", "Level behind the row", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "Output throughput",
                           "Success", "SLO verdicts", "Compliance"],
        "summary_rows": summary_rows,
        "slo_header": SLO_HEADER,
        "slo_rows": slo_rows(doc),
        "dist_header": ["Metric", "n", "Mean", "P50", "P90", "P95", "P99", "P99.9", "Min", "Max", "Std"],
        "run_header": ["Run", "Load", "Valid", "Requests", "TTFT P50", "TTFT P99", "TPOT P50", "Output throughput",
                       "Success", "Run directory"],
        "procedures": procs,
        "compliance_header": ["Procedure", "Verdict (§2)", "MUST unmet", "SHOULD unmet"],
        "compliance_rows": [[p["heading"], p["verdict"], str(p["must_unmet"]), str(p["should_unmet"])] for p in procs],
        "repro_rows": repro_rows,
        "command_line": " ".join(_shell_quote(a) for a in doc["command_line"]),
        "record_rows": [[r["path"], r["kind"], f"{r['bytes']:,}"] for r in doc["records"]],
        "records": doc["records"],
        "exports": doc.get("exports"),
        "record_links": [[f"[{r['path']}]({r['path']})", r["kind"], f"{r['bytes']:,}"] for r in doc["records"]],
        "definitions": definitions,
        "capacity_rows": [[k, _capacity(v)] for k, v in (doc.get("capacity") or {}).items()],
        "any_undersampled": "†" in json.dumps(summary_rows, ensure_ascii=False) or any(
            "†" in c for p in procs for row in p["dist_rows"] for c in row),
    }


def _fig_value(f: Mapping[str, Any]) -> str:
    if f["unit"] == "requests":
        text = f"{f['value']:,.0f} concurrent"
    else:
        text = fmt_value(f["value"], {"tok/s": "tokens/s"}.get(f["unit"], f["unit"]))
        if f["unit"] == "req/s" and not text.endswith("req/s"):
            text = f"{fmt_num(f['value'])} req/s"
    return text + ("†" if f.get("undersampled") else "")


#: The columns of the judged-SLO table (summary.md, report.md): one row per SLO judged on a test.
SLO_HEADER = ["Test", "SLO", "Verdict", "Value", "Bound (limit)", "n", "Beyond", "To decide"]


def _bound_text(r: Mapping[str, Any]) -> str:
    """The bound that decided against its limit: a share of requests (a percentile's ``binomial`` or
    ``requests-share`` bound: ``<= 0.72% (1%)``), else the figure's own bound in its unit; ``point``: none."""
    bound, limit = r.get("bound"), r.get("limit")
    if r.get("method") in (None, "point") or bound is None or limit is None:
        return "no bound (point)"
    share = r.get("method") in ("binomial", "requests-share") and str(r.get("statistic") or "").startswith("p")
    verdict = r.get("outcome")
    if share:  # a bound on the share beyond the threshold: upper for PASS, lower for FAIL (measure/stats/bounds.py)
        n, k = r.get("judged") or 0, r.get("exceedances") or 0
        lower = verdict == "FAIL" or (verdict == "INCONCLUSIVE" and bool(n) and k / n > limit)
        unit = "fraction"
    else:  # a bound on the figure itself: the one on the good side for PASS, the bad side for FAIL
        good_high = r.get("operator") in (">=", ">")
        value, threshold = r.get("value"), r.get("threshold")
        lower = good_high if verdict == "PASS" else (not good_high) if verdict == "FAIL" else \
            (value is not None and threshold is not None and value >= threshold)
        unit = r.get("unit") or ""
    return f"{'>=' if lower else '<='} {fmt_value(bound, unit)} ({fmt_value(limit, unit)})"


def slo_rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """Every SLO judged on a test (results 1.8; an older document's are left to the tests table): verdict, value,
    bound against its limit, requests judged, how many beyond the threshold, and "need ~N more" for
    INCONCLUSIVE (about how many more requests at the observed share would decide)."""
    rows = []
    for t in doc["tests"]:
        for r in t.get("slo_results") or []:
            if "method" not in r:  # judged before results 1.8 (two-way, no bound): the tests table shows it
                continue
            more = r.get("needed_more")
            decide = (f"need ~{more:,} more" if more is not None else "more than the run can give") \
                if r["outcome"] == "INCONCLUSIVE" else ""
            if r["outcome"] == "INCONCLUSIVE" and r.get("value") is None:  # not observed (hidden reasoning, issue 49)
                decide = "not observable in this run (its message says why)"
            if r.get("look") is not None:
                decide = (decide + "; " if decide else "") + f"stopped when decided at {r['look']:,}"
            n = r.get("judged") if r.get("judged") is not None else r.get("n")
            beyond = r.get("exceedances")
            rows.append([t["nodeid"], r["text"], r["outcome"], fmt_value(r.get("value"), r.get("unit") or ""),
                         _bound_text(r), "n/a" if n is None else f"{n:,}",
                         "" if beyond is None else fmt_num(beyond), decide])
    return rows


def _slo_cell(t: Mapping[str, Any]) -> str:
    """A test's SLOs: each judged one with its outcome and message (value, threshold, n, CI), then the
    others as written (not judged: the test stopped first, or a document before schema 1.4)."""
    judged = t.get("slo_results") or []
    parts = [f"{r['text']} → {r['outcome']}: {r['message']}" for r in judged]
    seen = {r["text"] for r in judged}
    parts += [s for s in t.get("slos") or [] if s not in seen]
    return "; ".join(parts) or "none"


def headline_view(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The headline (headline.py computed it): counts, key figures with their source, warnings."""
    h = doc.get("headline")
    if not h:
        return None
    t, c, d = h["tests"], h["compliance"], h["durations"]
    tests = f"{t['total']} tests: {t['passed']} passed, {t['failed']} failed"
    if t.get("inconclusive"):  # 1.8: an SLO neither shown to hold nor not to (whatever pytest made of it)
        tests += f", {t['inconclusive']} inconclusive"
    if t["informational"]:
        tests += f", {t['informational']} informational (no SLO set)"
    if t["skipped"] or t["not_run"]:
        tests += f", {t['skipped']} skipped, {t['not_run']} not run"
    tests += f"; {t['with_slos']} had SLOs"
    counts = c["counts"]
    comp = (f"{counts['unconditionally compliant']} unconditionally, {counts['conditionally compliant']} "
            f"conditionally, {counts['not compliant']} not compliant")
    if c.get("not_evaluated"):
        comp += f", {c['not_evaluated']} not evaluated"
    dur = (f"{fmt_duration(d['session_s'])} session = {fmt_duration(d['procedures_s'])} in procedures + "
           f"{fmt_duration(d['other_s'])} {d['other']}")
    if d.get("nested"):
        dur += f" ({'; '.join(d['nested'])}, counted once)"
    figures = [{"title": f["title"], "value": _fig_value(f), "procedure": f"{f['procedure']} {f['procedure_title']}",
                "anchor": f["anchor"], "level": f["level"], "workload": f["workload"], "definition": f["definition"]}
               for f in h["figures"]]
    warn: dict[str, list[str]] = {}
    anchors: dict[str, str] = {}
    for w in h["warnings"]:
        warn.setdefault(w["procedure"], []).append(w["text"])
        anchors[w["procedure"]] = w["anchor"]
    return {"sut": h["sut"], "profile": h["profile"], "tests": tests, "compliance": comp,
            "main_reason": c["main_reason"], "duration": dur, "figures": figures,
            "figure_rows": [[f["title"], f["value"], f["procedure"], f["level"], f["workload"]] for f in figures],
            "warnings": [{"procedure": k, "anchor": anchors[k], "text": "; ".join(v)} for k, v in warn.items()],
            # each kind of finding once, most severe first (documents before schema 1.4: none, warnings shown)
            "findings": [{"title": f["title"], "items": list(f["procedures"])} for f in h.get("findings") or []],
            "ok": t["failed"] == 0 and doc["complete"]}


def compliance_view(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    co = doc.get("compliance_overview")
    if not co:
        return None

    def row(i: Mapping[str, Any]) -> list[str]:
        ev = i.get("evidence") or {}
        ev_text = "; ".join(f"{k}: {fmt_any(v, 60)}" for k, v in ev.items()) if isinstance(ev, Mapping) else ""
        return [i["id"], i.get("title", ""), i.get("level", ""), i.get("status", ""),
                i.get("reason", "") + (f" (evidence: {ev_text})" if ev_text else "")]

    failing = [i for i in co["session_items"] if i["status"] in ("unmet", "needs-declaration")
               and i.get("level") in ("MUST", "SHOULD")]
    return {
        "grid_header": ["Procedure", *VERDICT_CLASS, "MUST unmet", "SHOULD unmet"],
        "grid": [{"anchor": g["anchor"], "name": f"{g['procedure']} {g['title']}",
                  "marks": ["●" if g["verdict"] == v else "" for v in VERDICT_CLASS],
                  "verdict_class": VERDICT_CLASS.get(g["verdict"], "warn"),
                  "must": g["must_unmet"], "should": g["should_unmet"]} for g in co["grid"]],
        "by_fix": [{"fix": g["fix"], "rows": [[i["id"], i["title"], i["level"], ", ".join(i["procedures"])]
                                             for i in g["items"]]} for g in co["by_fix"]],
        "session_failing": [row(i) for i in failing],
        "session_other": [row(i) for i in co["session_items"] if i not in failing],
        "procedure_items": {k: [row(i) for i in v] for k, v in co["procedure_items"].items()},
    }


def comparison_view(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The "compared with baseline" section (§6, docs/regression-gate.md) from ``doc["comparison"]``
    (written by the gate's ``Comparison.to_json()``); None when the session compared nothing."""
    comp = doc.get("comparison")
    if not comp:
        return None
    units = {k: (m or {}).get("unit", "") for k, m in (doc.get("metrics") or {}).items()}
    pct = lambda v: "n/a" if v is None else f"{v * 100:+.1f}%"  # noqa: E731
    pairs = []
    for p in comp.get("pairs") or []:
        rows, methods = [], []
        for o in p.get("outcomes") or []:
            c = o.get("change") or {}
            unit = units.get(str(o["figure"]).split(".")[0], "")
            ci = c.get("rel_ci") or [None, None]
            rows.append([o["figure"] + (f"@{o['level']}" if o.get("level") else ""),
                         f"{fmt_value(c.get('baseline'), unit)} (n={c.get('n_baseline')})" if c else "n/a",
                         f"{fmt_value(c.get('new'), unit)} (n={c.get('n_new')})" if c else "n/a",
                         pct(c.get("rel")) if c else "n/a", f"{pct(ci[0])} … {pct(ci[1])}" if c else "n/a",
                         o.get("rule") or "—", o["verdict"]])
            if c.get("method") and c["method"] not in methods:
                methods.append(c["method"])
        notes = [p["note"]] if p.get("note") else []
        if p.get("forced"):
            notes.append("FORCED (--llm-compare-force) despite: " + "; ".join(
                f"{d['field']}: baseline {d['baseline']}, new {d['new']}" for d in p.get("differences") or []))
        pairs.append({"title": p["title"], "load": p.get("load"), "rows": rows, "notes": notes, "methods": methods,
                      "messages": [o["message"] for o in p.get("outcomes") or [] if o["verdict"] == "FAIL"]})
    return {"baseline": "+".join(r["id"] for r in comp.get("baseline") or []),
            "rules": ", ".join(comp.get("rules") or []) or "none (report only)",
            "verdict": "FAIL" if comp.get("failed") else "pass", "confidence": comp.get("confidence"),
            "header": ["Figure", "Baseline", "New", "Change", "CI of change", "Rule", "Verdict"],
            "pairs": pairs, "unmatched": list(comp.get("unmatched") or []),
            # §6.3 repeated-runs items, decided by the gate from this comparison (gate/compare.section6_facts)
            "section6": [[rid, "met" if f.get("met") else "not met", f.get("evidence", "")]
                         for rid, f in sorted((comp.get("section6") or {}).items())],
            # flattened for the headline (report.md, summary.md): every figure, the failing ones first
            "rows": [[f"{p['title']}: {r[0]}", *r[1:]] for p in pairs for r in p["rows"]],
            "regressions": [[f"{p['title']}: {r[0]}", *r[1:]] for p in pairs for r in p["rows"] if r[6] == "FAIL"],
            "notes": [n for p in pairs for n in p["notes"]] + list(comp.get("unmatched") or [])}


def _shell_quote(a: str) -> str:
    import shlex

    return shlex.quote(a)


@functools.cache
def _env(kind: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_llmbench.report", "templates"),
        autoescape=(kind == "html"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["cell"] = md_cell
    env.filters["text"] = md_text
    env.filters["pct"] = fmt_pct
    env.filters["num"] = fmt_num
    env.filters["zip_grid"] = lambda names, grid: [[n, *g["marks"], str(g["must"]), str(g["should"])]
                                                    for n, g in zip(names, grid)]
    env.filters["slug"] = lambda s: "".join(c if c.isalnum() else "-" for c in str(s)).strip("-").lower()
    return env


def render_markdown(doc: Mapping[str, Any]) -> str:
    """``report.md``: App. C.1 then the six sections of App. C.2."""
    return _env("md").get_template("report.md.j2").render(v=view(doc))


def render_html(doc: Mapping[str, Any]) -> str:
    """``report.html``: the same content, self-contained (inline CSS and SVG, no scripts)."""
    v = view(doc, with_figures=True)
    for p, entry in zip(v["procedures"], doc["procedures"]):
        p["figures"] = [{"key": f.key, "title": f.title, "caption": f.caption, "svg": Markup(f.svg)}
                        for f in p["figures"]]
        # issue 47: the bound at each look of a run stopped when decided (templates/_slo_looks.html.j2)
        p["slo_looks"] = [{"key": f.key, "title": f.title, "caption": f.caption, "svg": Markup(f.svg)}
                          for f in look_figures(entry["result"])]
        # issue 50: a rate-shaped run's offered vs achieved rate and TTFT over time (templates/_rate_shape.html.j2)
        p["rate_shapes"] = [{"key": f.key, "title": f.title, "caption": f.caption, "svg": Markup(f.svg)}
                            for f in rate_figures(entry["result"])]
    return _env("html").get_template("report.html.j2").render(v=v)


def render_summary(doc: Mapping[str, Any], report_path: str | None = None, *, limit: int | None = None) -> str:
    """``summary.md``: headline, per-procedure table, regressions, link (PR comment / step summary).

    With ``limit``, parts are dropped (the per-test table, then the C.1 block, then the findings) until
    the text fits, so it stays below GitHub's 65,536-character comment limit.
    """
    template = _env("md").get_template("summary.md.j2")
    text = ""
    for level in range(4):
        text = template.render(v=view(doc), report_path=report_path, trim=level)
        if limit is None or len(text) < limit:
            return text
    return text[: max(0, (limit or 0) - 200)] + "\n\n… cut to fit; the full report is in report.md / report.html\n"
