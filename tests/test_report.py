"""Reports (App. C): results.json + schema, rebuild, report.md, report.html with SVG plots,
terminal rows, GitHub step summary, secrets.

The session is a :class:`SessionResult` holding real ProcedureResults: metrics from
``metrics.summarize`` over hand-made RequestRecords and compliance from
``compliance.evaluate_test``; ``results.build_document`` turns it into the document the report renders.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from factories import MS, make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.compliance import (
    LOAD_CAPABILITIES,
    Check,
    ClockFacts,
    LoadFacts,
    RecordAudit,
    RunFacts,
    WarmupFacts,
    evaluate_test,
)
from pytest_llmbench.document.build import build_document, iso_ms
from pytest_llmbench.document.redact import REDACTED
from pytest_llmbench.document.schema import SCHEMA_VERSION
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.procedures.result import Capacity, ProcedureResult, RunSummary, Table
from pytest_llmbench.report import (
    ReportError,
    dumps_document,
    load_document,
    rebuild,
    render_html,
    render_markdown,
    schema,
)
from pytest_llmbench.report import terminal_rows as doc_terminal_rows
from pytest_llmbench.report import write_reports as doc_write_reports
from pytest_llmbench.session import SessionResult
from pytest_llmbench.settings import Settings
from pytest_llmbench.sut.system import SUT

KEY_ENV = "LLMBENCH_TEST_PLANTED_KEY"
PLANTED_KEY = "sk-planted-9f8e7d6c5b4a3210-SECRET"
T0 = 1_000 * MS  # perf_counter_ns origin of the hand-made runs


# ------------------------------------------------------------------------------------ records


def make_records(n: int, *, ttft_ms: float, spread_ms: float, itl_ms: float, tokens: int,
                 gap_ms: float = 50.0, failed: int = 0, klass: str | None = None,
                 isl: int = 200) -> list[RequestRecord]:
    """n requests sent every gap_ms; TTFT = ttft_ms + spread_ms * ((7 i) mod 10) / 9; one token per chunk."""
    out = []
    for i in range(n):
        spec = {"workload": "synthetic-uniform", "spec_input_tokens": isl, "max_tokens": tokens, "request_class": klass}
        sent = T0 + int(i * gap_ms * MS)
        if i >= n - failed:
            out.append(make_record(i, sent=sent, chunks=(), end=sent + 5 * MS, unit=1, status=503,
                                   error_type=ErrorType.HTTP_5XX, error_message="overloaded", **spec))
            continue
        ttft = int((ttft_ms + spread_ms * ((7 * i) % 10) / 9.0) * MS)
        out.append(make_record(i, sent=sent, ttft=ttft, itl=itl_ms * MS, n_chunks=tokens, unit=1,
                               text=[f" t{k}" for k in range(tokens)], input_tokens_client=isl, input_tokens_server=isl,
                               output_tokens_client=tokens, output_tokens_server=tokens, **spec))
    return out


def good_facts(test_id: str, workload: str = "synthetic-uniform", **load: Any) -> RunFacts:
    recs = make_records(5, ttft_ms=50, spread_ms=0, itl_ms=5, tokens=3)
    return RunFacts(
        sut_boundary="model-engine", boundary_declared_before_start=True,
        load=LoadFacts(model=load.get("model", "open"), arrival=load.get("arrival", "poisson"),
                       rate=load.get("rate", 4.0), concurrency=load.get("concurrency"), send_lag_p99_s=2e-4,
                       capabilities=LOAD_CAPABILITIES),
        clock=ClockFacts(resolution_ns=1, single_host=True, cross_host_intervals=False,
                         timestamp_format="iso8601_ms", timestamp_sample="2026-01-22T06:52:18.123Z"),
        streaming=True, protocol="sse", single_token_chunk_fraction=1.0, itl_method="chunk",
        itl_reported=True, warmup=WarmupFacts(requests=20, output_tokens=400, drained=True, reduced=True),
        workload={"name": workload}, session_workloads=(workload,), seed=7, sequence_hash="ab" * 32,
        generator="pytest-llmbench test", records=RecordAudit.from_records(recs),
        guardrails={"input_filter": "off", "output_filter": "off", "systems": []},
        prefix_caching="disabled", endpoint_scheme="http", session_tests=(test_id,),
    )


def write_run(report: Path, name: str, records: list[RequestRecord]) -> str:
    d = report / "runs" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "records.jsonl").write_text("".join(r.dumps() + "\n" for r in records), encoding="utf-8")
    (d / "run.json").write_text(json.dumps({"schema": "pytest-llmbench/run/1"}), encoding="utf-8")
    return str(d)


def result(proc: str, title: str, metrics: Any, facts: RunFacts, *, checks: dict[str, Check] | None = None,
           **kw: Any) -> ProcedureResult:
    res = ProcedureResult(procedure=proc, title=title, params=kw.pop("params", {"workload": "synthetic-uniform"}),
                          profile="smoke", metrics=metrics, facts=facts, checks=checks or {},
                          started=iso_ms(1_769_000_000.0), finished=iso_ms(1_769_000_012.5), duration_s=12.5, **kw)
    res.compliance = evaluate_test(proc, res.checks, facts, {"model": {"name": "sim", "version": "1",
                                                                    "quantization": "none"}})
    res.measurements.setdefault("compliance_verdict", res.compliance.verdict.value)
    return res


# ------------------------------------------------------------------------------------ session


FakeSession = SessionResult


def doc_of(s: SessionResult, complete: bool = True) -> dict[str, Any]:
    """The document of ``s`` as the plugin builds it at session end."""
    s.complete = complete
    return build_document(s)


def write_reports(s: SessionResult, complete: bool = True) -> dict[str, Path]:
    return doc_write_reports(doc_of(s, complete))


def terminal_rows(s: SessionResult) -> list[str]:
    """Rows as the plugin prints them: the report path only when the report was written."""
    html = s.settings.report / "report.html"
    return doc_terminal_rows(doc_of(s, s.complete), html if html.is_file() else None)


def make_session(tmp_path: Path, *, interrupted: bool = False) -> FakeSession:
    report = tmp_path / "llmbench-report"
    settings = Settings(report=report, seed=7, api_key_env=KEY_ENV, slo=["ttft.p99<=500ms"],
                        sources={"report": "default"})
    sut = SUT(base_url="http://127.0.0.1:8123/v1", model="sim-model", api_key_env=KEY_ENV, embedded=True,
              models_listed=["sim-model"], server_info={"engine": "simulator"})
    args = ["suites", "--llm-profile", "smoke", f"--api-token={PLANTED_KEY}", "--llm-api-key-env", KEY_ENV]
    s = SessionResult(settings=settings, sut=sut, command_line=args, interrupted=interrupted,
                      started=1_769_000_000.0)

    # 5.1 TTFT: 30 requests (1 failed), TTFT 80..140 ms
    recs = make_records(30, ttft_ms=80, spread_ms=60, itl_ms=12, tokens=8, failed=1)
    m51 = summarize(recs)
    d = m51.distributions["ttft"]
    t1 = Table("Table 1: TTFT results", ["Metric", "Value"],
               [["Requests", str(d.n)], ["TTFT P50", f"{d.percentiles[50.0].value * 1000:.1f} ms"],
                ["TTFT P99", f"{d.percentiles[99.0].value * 1000:.1f} ms"]], notes=["P99 is under-sampled"])
    run51 = RunSummary("measure", write_run(report, "5_1-00/measure", recs), {"model": "open", "rate": 4.0}, m51)
    s.results["5.1:{}"] = result("5.1", "Time to First Token", m51, good_facts("5.1"), runs=[run51], tables=[t1],
                                 checks={"5.1.2-MUST-1": Check.unmet("5.1.2-MUST-1", "only 29 requests (needs 1000)")},
                                 notes=["smoke profile"])

    # 5.3 latency-throughput curve: four levels, knee at 3, saturation at 3
    runs, offered, tps, p99 = [], [1.0, 2.0, 4.0, 8.0], [], []
    for i, (rate, ttft) in enumerate(zip(offered, (60.0, 70.0, 90.0, 400.0))):
        rr = make_records(12, ttft_ms=ttft, spread_ms=ttft / 4, itl_ms=10, tokens=6, gap_ms=1000.0 / rate)
        m = summarize(rr)
        tps.append(m.scalars["output_throughput"].value)
        p99.append(m.distributions["ttft"].percentiles[99.0].value)
        runs.append(RunSummary(f"rate={rate:g}", write_run(report, f"5_3-01/level{i}", rr), {"rate": rate}, m))
    tps[3] = tps[2] * 0.8  # saturation: throughput falls at the last level
    curve = {"offered": offered, "achieved_tps": tps, "ttft_p99_s": p99, "knee_index": 3, "saturation_index": 3}
    t5 = Table("Table 5: Latency-throughput curve", ["Offered (r/s)", "Achieved (tok/s)", "TTFT P99"],
               [[f"{o:g}", f"{t:.1f}", f"{p * 1000:.0f} ms"] for o, t, p in zip(offered, tps, p99)])
    s.results["5.3:{}"] = result("5.3", "Latency-Throughput Curve", runs[0].metrics, good_facts("5.3"), runs=runs,
                                 tables=[t5], plots={"curve": curve})

    # 5.2 throughput search, 5.9 scaling, 5.6 fairness, 5.7 cache comparison (plots only + metrics)
    mm = summarize(make_records(10, ttft_ms=70, spread_ms=20, itl_ms=8, tokens=5))
    search = [{"level": 2.0, "passed": True, "value": 0.09}, {"level": 4.0, "passed": True, "value": 0.12},
              {"level": 8.0, "passed": False, "value": 0.61}, {"level": 6.0, "passed": True, "value": 0.2}]
    s.results["5.2:{}"] = result("5.2", "Maximum Output Token Throughput", mm, good_facts("5.2"),
                                 plots={"search": search}, capacity=Capacity(rate=6.0, source="measured"))
    lengths = [1000, 2000, 4000, 8000, 16000]
    ttfts = [0.05 * (L / 1000) ** 1.2 for L in lengths]
    s.results["5.9:{}"] = result("5.9", "Long Context Scaling", None, good_facts("5.9", "long-context"),
                                 plots={"scaling": {"length": lengths, "ttft_s": ttfts}})
    s.results["5.6:{}"] = result("5.6", "Multi-tenant Fairness", mm, good_facts("5.6", "synthetic-skewed"),
                                 plots={"classes": {"short": {"ttft_p50_s": 0.05, "ttft_p99_s": 0.12},
                                                    "long": {"ttft_p50_s": 0.3, "ttft_p99_s": 0.9}}})
    s.results["5.7:{}"] = result("5.7", "Prefix Cache Effectiveness", mm, good_facts("5.7", "code-completion"),
                                 plots={"configs": {"Cache Disabled": {"ttft_p50_s": 0.2, "ttft_p99_s": 0.5},
                                                    "Cache (Warm)": {"ttft_p50_s": 0.08, "ttft_p99_s": 0.2}}})
    s.capacity["rate"] = Capacity(rate=6.0, source="measured by 5.2 in this session")
    s.test_outcomes = {
        "suites/test_ttft.py::test_ttft": {"procedure": "5.1", "result_key": "5.1:{}", "slos": ["ttft.p99<=50ms"],
                                           "outcome": "failed", "when": "call",
                                           "message": "TTFT P99 140 ms > 50 ms (n=29)"},
        "suites/test_curve.py::test_curve": {"procedure": "5.3", "result_key": "5.3:{}", "slos": [],
                                             "outcome": "passed", "when": "call", "message": ""},
        "suites/test_cache.py::test_cache": {"procedure": "5.7", "result_key": "5.7:{}", "slos": [],
                                             "outcome": "skipped", "when": "setup",
                                             "message": "no configuration hook"},
    }
    return s


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    monkeypatch.setenv(KEY_ENV, PLANTED_KEY)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return make_session(tmp_path)


@pytest.fixture
def written(session: FakeSession) -> tuple[FakeSession, dict[str, Path]]:
    return session, write_reports(session, complete=True)


# ------------------------------------------------------------------------------------ results.json


def test_results_json_validates_against_schema(written: tuple[FakeSession, dict[str, Path]]) -> None:
    _, paths = written
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    assert doc["schema_version"] == SCHEMA_VERSION == "1.9"
    assert doc["complete"] is True
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["started"])  # §4.7.4
    assert doc["started"] == "2026-01-21T12:53:20.000Z"
    assert [p["procedure"] for p in doc["procedures"]] == ["5.1", "5.2", "5.3", "5.6", "5.7", "5.9"]  # draft order


def test_schema_rejects_broken_documents(written: tuple[FakeSession, dict[str, Path]]) -> None:
    _, paths = written
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    for mutate in (lambda d: d.pop("schema_version"), lambda d: d.update(complete="yes"),
                   lambda d: d["procedures"][0]["compliance"].update(verdict="kind of compliant"),
                   lambda d: d.update(started="2026-01-21 12:53:20")):
        bad = json.loads(json.dumps(doc))
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema(), cls=jsonschema.Draft202012Validator)


def test_document_carries_procedure_results_and_test_outcomes(session: FakeSession) -> None:
    doc = doc_of(session)
    p51 = doc["procedures"][0]
    res = session.results["5.1:{}"]
    raw = json.loads(json.dumps(res.to_json(), default=str))
    for key in ("procedure", "title", "params", "profile", "measurements", "tables", "checks", "notes",
                "started", "finished", "duration_s", "complete", "facts", "runs", "compliance"):
        assert key in p51["result"], key
    assert p51["result"]["tables"] == raw["tables"]
    assert p51["result"]["metrics"]["scalars"]["request_count"]["value"] == 30
    # key figures equal the metrics' own estimates
    ttft = res.metrics.distributions["ttft"]
    assert p51["figures"]["ttft_p99"]["value"] == pytest.approx(ttft.percentiles[99.0].value)
    assert p51["figures"]["ttft_p99"]["undersampled"] is True  # 29 < 1000 (§5.1.4.3)
    assert p51["compliance"]["verdict"] == "not compliant"
    unmet = {u["id"]: u for u in p51["compliance"]["unmet"]}
    assert {"id": "5.1.2-MUST-1", "level": "MUST", "status": "unmet",
            "reason": "only 29 requests (needs 1000)"}.items() <= unmet["5.1.2-MUST-1"].items()
    tests = {t["nodeid"]: t for t in doc["tests"]}
    assert tests["suites/test_ttft.py::test_ttft"]["verdict"] == "FAIL"
    assert tests["suites/test_ttft.py::test_ttft"]["compliance_verdict"] == "not compliant"
    assert tests["suites/test_curve.py::test_curve"]["verdict"] == "PASS"
    assert tests["suites/test_cache.py::test_cache"]["verdict"] == "SKIP"
    assert p51["tests"] == ["suites/test_ttft.py::test_ttft"]
    # run records: relative paths, the kinds recognised
    recs = {r["path"]: r["kind"] for r in doc["records"]}
    assert recs["runs/5_1-00/measure/records.jsonl"] == "records"
    assert recs["runs/5_1-00/measure/run.json"] == "metadata"
    assert sum(k == "records" for k in recs.values()) == 5
    assert p51["run_dirs"] == ["runs/5_1-00/measure"]


def test_mvr_key_results_are_computed_from_the_runs(session: FakeSession) -> None:
    doc = doc_of(session)
    key = doc["summary"]["key_results"]
    m51 = session.results["5.1:{}"].metrics
    assert key["source"] == "5.1 Time to First Token"
    assert key["ttft_p50"]["value"] == pytest.approx(m51.distributions["ttft"].percentiles[50.0].value)
    assert key["tpot_p99"]["value"] == pytest.approx(m51.distributions["tpot"].percentiles[99.0].value)
    # max throughput over every run of every procedure
    all_tps = [m.scalars["output_throughput"].value for r in session.results.values()
               for m in ([r.metrics] if r.metrics else []) + [x.metrics for x in r.runs]]
    assert key["max_throughput_tps"] == pytest.approx(max(all_tps))
    # throughput at TTFT P99 < 500 ms: the 5.3 level at 400 ms TTFT (P99 ~ 500 ms) must not qualify
    # unless its P99 is below the bound; recompute independently
    ok = [m.scalars["output_throughput"].value for r in session.results.values()
          for m in ([r.metrics] if r.metrics else []) + [x.metrics for x in r.runs]
          if m.percentile("ttft", 99).value < 0.5]
    assert key["throughput_at_ttft_p99_500ms_tps"] == pytest.approx(max(ok))
    cfg = doc["summary"]["configuration"]
    assert cfg["request_count"] == 30 + 4 * 12 + 3 * 10  # 5.1; 5.3 levels (primary = level 0); 5.2, 5.6, 5.7
    assert doc["summary"]["system"]["sut_boundary"] == "Model Engine (§4.1.1)"
    assert doc["summary"]["notes"]["guardrails"].startswith("input filter: off")


# ------------------------------------------------------------------------------------ rebuild


def test_rebuild_reproduces_reports_byte_for_byte(written: tuple[FakeSession, dict[str, Path]],
                                                  tmp_path: Path) -> None:
    _, paths = written
    out = tmp_path / "rebuilt"
    new = rebuild(paths["json"], out)
    assert new["markdown"].read_bytes() == paths["markdown"].read_bytes()
    assert new["html"].read_bytes() == paths["html"].read_bytes()
    # and the document itself round-trips
    doc = load_document(paths["json"])
    assert dumps_document(doc) == paths["json"].read_text(encoding="utf-8")


def test_load_document_names_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ReportError, match="not valid JSON"):
        load_document(bad)
    bad.write_text('{"schema_version": "2.0"}', encoding="utf-8")
    with pytest.raises(ReportError, match="schema_version 2.0 is not supported"):
        load_document(bad)
    with pytest.raises(ReportError, match="cannot read"):
        load_document(tmp_path / "missing.json")


def test_writes_are_atomic_no_temp_files_left(written: tuple[FakeSession, dict[str, Path]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    session, paths = written
    before = paths["json"].read_bytes()
    import pytest_llmbench.report as rep

    def boom(doc: Any) -> str:
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(rep, "render_markdown", boom)
    with pytest.raises(RuntimeError):
        write_reports(session, complete=True)
    # results.json was replaced whole (a complete, valid document), and no temp files remain
    json.loads(paths["json"].read_text(encoding="utf-8"))
    assert len(before) > 0
    assert not [p for p in paths["json"].parent.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------------------ Markdown


def test_markdown_has_minimum_viable_report_and_full_sections(written: tuple[FakeSession, dict[str, Path]]) -> None:
    session, paths = written
    md = paths["markdown"].read_text(encoding="utf-8")
    block = md.split("```text\n", 1)[1].split("```", 1)[0]
    for field_ in ("=== LLM Benchmark Report (Minimum) ===", "System Identification:", "- Model: sim-model",
                   "- Hardware: none (embedded simulator", "- Software: pytest-llmbench embedded simulator",
                   "- SUT Boundary: Model Engine (§4.1.1)", "Test Configuration:", "- Workload: synthetic-uniform",
                   "- Load Model: 5.1: open-loop poisson at 4 req/s", "- Request Count: 108",
                   "- Test Duration: 12.50 seconds", "Key Results:", "- TTFT P50: ", "- TTFT P99: ",
                   "- TPOT P50: ", "- TPOT P99: ", "- Max Throughput: ", "- Throughput at P99 TTFT < 500ms: ",
                   "Notes:", "- Guardrail configuration: input filter: off", "=== End Report ==="):
        assert field_ in block, field_
    ttft_p99 = session.results["5.1:{}"].metrics.distributions["ttft"].percentiles[99.0].value
    assert f"- TTFT P99: {ttft_p99 * 1000:,.1f} ms†" in block
    for heading in ("## 1. System identification", "## 2. Test configuration", "## 3. Results",
                    "## 4. Detailed results", "## 5. Compliance with the draft (§2)",
                    "## 6. Reproduction information"):
        assert heading in md
    # the draft tables from ProcedureResult.tables, as Markdown tables
    assert "**Table 1: TTFT results**" in md
    assert "| Metric | Value |" in md and "| Requests | 29 |" in md
    assert "**Table 5: Latency-throughput curve**" in md
    # compliance kept separate from SLO verdicts, unmet items with reasons
    slo_part = md.split("### SLO verdicts", 1)[1].split("### Summary per procedure", 1)[0]
    assert ("| suites/test_ttft.py::test_ttft | 5.1 | ttft.p99<=50ms | FAIL | TTFT P99 140 ms > 50 ms (n=29) |"
            in slo_part)
    comp = md.split("## 5. Compliance with the draft (§2)", 1)[1].split("## 6.", 1)[0]
    assert "### Compliance: 5.1 Time to First Token — not compliant" in comp
    # procedure-specific item with its readable title next to the ID
    assert re.search(r"\| 5\.1\.2-MUST-1 \| [A-Z][^|]+ \| MUST \| unmet \| only 29 requests \(needs 1000\) \|", comp)
    assert "### Unmet items grouped by what would fix them" in comp
    # reproduction: seed, plugin version, command line, records
    repro = md.split("## 6. Reproduction information", 1)[1]
    assert "| Seed | 7 |" in repro
    assert "pytest-llmbench" in repro and "suites --llm-profile smoke" in repro
    assert "runs/5_1-00/measure/records.jsonl" in repro
    assert "INCOMPLETE" not in md


def test_interrupted_document_says_incomplete_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    s = make_session(tmp_path, interrupted=True)
    s.results["5.3:{}"].complete = False
    paths = write_reports(s, complete=False)
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert doc["complete"] is False and doc["interrupted"] is True
    md = paths["markdown"].read_text(encoding="utf-8")
    assert md.startswith("# LLM Benchmark Report — INCOMPLETE")
    assert "[INCOMPLETE]" in md and "5.3 Latency-Throughput Curve (INCOMPLETE)" in md
    html = paths["html"].read_text(encoding="utf-8")
    assert '<div class="banner" role="alert" id="incomplete"><strong>⚠ INCOMPLETE RUN.</strong>' in html
    assert terminal_rows(s)[0].startswith("INCOMPLETE")
    # complete=True but the session saw an interrupt: still incomplete
    s2 = make_session(tmp_path / "b", interrupted=True)
    assert doc_of(s2)["complete"] is False


# ------------------------------------------------------------------------------------ HTML


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        for k in ("src", "href"):
            v = a.get(k) or ""
            # links to the report's own files (results.json, runs/...) are fine; anything fetched is not
            if v and not v.startswith("#") and (k == "src" or "//" in v or ":" in v):
                self.external.append(v)
        if tag == "link" or tag == "script":
            self.external.append(tag)


SVG_NS = "{http://www.w3.org/2000/svg}"


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", html, flags=re.S)]


def test_html_is_self_contained_and_well_formed(written: tuple[FakeSession, dict[str, Path]]) -> None:
    _, paths = written
    html = paths["html"].read_text(encoding="utf-8")
    c = _Collector()
    c.feed(html)
    assert c.external == []  # no network, no scripts, no stylesheets
    assert any(t == "style" for t, _ in c.tags)
    ids = [a["id"] for _, a in c.tags if a.get("id")]
    assert len(ids) == len(set(ids))
    hrefs = {a["href"][1:] for t, a in c.tags if t == "a" and (a.get("href") or "").startswith("#")}
    assert hrefs <= set(ids)
    for heading in ("Minimum Viable Report (App. C.1)", "1. System identification", "2. Test configuration",
                    "3. Results", "4. Detailed results", "5. Compliance with the draft (§2)",
                    "6. Reproduction information", "Table 1: TTFT results", "Table 5: Latency-throughput curve"):
        assert heading in html


def test_html_svg_plots_have_labelled_axes_and_data_points(written: tuple[FakeSession, dict[str, Path]]) -> None:
    session, paths = written
    html = paths["html"].read_text(encoding="utf-8")
    svgs = _svgs(html)
    kinds = [s.get("data-kind") for s in svgs]
    for k in ("cdf", "curve-throughput", "curve-latency", "search", "scaling", "bars-classes", "bars-configs"):
        assert k in kinds, k
    # 5.1 has 29 TTFT samples: below 30 a histogram shows noise, so only its CDF is drawn
    assert "histogram" not in kinds and "29 samples are too few to show a shape" in html
    for svg in svgs:
        axes = {g.get("class"): g for g in svg.iter(f"{SVG_NS}g") if "axis" in (g.get("class") or "")}
        assert set(axes) == {"axis x-axis", "axis y-axis"}
        for g in axes.values():
            label = g.find(f"{SVG_NS}text[@class='axis-label']")
            assert label is not None and label.text
            assert len(g.findall(f"{SVG_NS}g[@class='tick']")) >= 2 or svg.get("data-kind", "").startswith("bars")
        data = [e for e in svg.iter() if e.tag in (f"{SVG_NS}circle", f"{SVG_NS}rect", f"{SVG_NS}path")
                and (e.get("class") in ("point", "bar", "series"))]
        assert data, svg.get("data-kind")
    by_kind: dict[str, ET.Element] = {}
    for svg in svgs:  # the first of each kind: the 5.1 CDF comes first (no histogram below 30 samples)
        by_kind.setdefault(svg.get("data-kind"), svg)
    # units in axis labels
    x_label = by_kind["cdf"].find(f".//{SVG_NS}g[@class='axis x-axis']").get("data-label")
    assert x_label == "TTFT (ms)"
    assert by_kind["scaling"].find(f".//{SVG_NS}g[@class='axis x-axis']").get("data-scale") == "log"
    # CDF percentile points carry the exact P99
    p99 = session.results["5.1:{}"].metrics.distributions["ttft"].percentiles[99.0].value
    pts = {c.get("data-percentile"): float(c.get("data-x")) for c in by_kind["cdf"].iter(f"{SVG_NS}circle")
           if c.get("data-percentile")}
    assert pts["P99"] == pytest.approx(p99 * 1000, rel=1e-5)
    # curve: four level points, knee and saturation marked at 8 req/s
    # latency (P99 and P50 when given) against achieved throughput: the knee sits at the knee level's throughput
    lat = by_kind["curve-latency"]
    assert len([c for c in lat.iter(f"{SVG_NS}circle") if c.get("class") == "point"]) in (4, 8)
    marks = {g.get("class"): g.get("data-x") for g in lat.iter(f"{SVG_NS}g") if "marker" in (g.get("class") or "")}
    assert "marker knee" in marks
    thr = by_kind["curve-throughput"]
    marks = {g.get("class"): g.get("data-x") for g in thr.iter(f"{SVG_NS}g") if "marker" in (g.get("class") or "")}
    assert marks == {"marker saturation": "8"}
    # search: pass/fail per step
    passed = [c.get("data-passed") for c in by_kind["search"].iter(f"{SVG_NS}circle") if c.get("class") == "point"]
    assert passed == ["true", "true", "false", "true"]
    # scaling: five points and a fit line with k ~ 1.2 in its legend (fit computed by the report)
    sc = by_kind["scaling"]
    assert len([c for c in sc.iter(f"{SVG_NS}circle") if c.get("class") == "point"]) == 5
    fit = [p for p in sc.iter(f"{SVG_NS}path") if p.get("class") == "series"]
    assert fit and "k = 1.2" in fit[0].get("data-series")
    # fairness bars: 2 classes x 2 series, values in ms
    bars = {(r.get("data-group"), r.get("data-series")): float(r.get("data-y"))
            for r in by_kind["bars-classes"].iter(f"{SVG_NS}rect") if r.get("class") == "bar"}
    assert bars == {("short", "TTFT P50"): 50.0, ("short", "TTFT P99"): 120.0,
                    ("long", "TTFT P50"): 300.0, ("long", "TTFT P99"): 900.0}


def test_bad_plot_data_is_reported_not_fatal(session: FakeSession) -> None:
    session.results["5.3:{}"].plots["curve"] = {"offered": [1, 2], "achieved_tps": [3.0], "ttft_p99_s": [0.1, 0.2]}
    doc = doc_of(session)
    p = next(p for p in doc["procedures"] if p["procedure"] == "5.3")
    assert "curve" not in p["result"]["plots"]
    assert p["plot_notes"] == ["plot 'curve' not drawn: curve: achieved_tps has 1 entries, offered has 2"]
    assert "plot &#39;curve&#39; not drawn" in render_html(doc)


# ------------------------------------------------------------------------------------ terminal, CI summary


def test_terminal_rows_one_per_procedure(written: tuple[FakeSession, dict[str, Path]]) -> None:
    session, paths = written
    rows = terminal_rows(session)
    assert rows[0].startswith("SUT: ") and rows[1].startswith("tests: ")  # the headline first
    rows = rows[rows.index(next(r for r in rows if r.startswith("procedure "))):]
    assert rows[0].split()[:2] == ["procedure", "requests"]
    body = [r for r in rows[2:] if re.match(r"^5\.\d", r)]
    assert [r.split()[0] for r in body] == ["5.1", "5.2", "5.3", "5.6", "5.7", "5.9"]
    r51 = body[0]
    assert "FAIL" in r51 and "NOT compliant" in r51 and " 30 " in r51
    p50 = session.results["5.1:{}"].metrics.distributions["ttft"].percentiles[50.0].value
    assert f"{p50 * 1000:.1f} ms" in r51
    assert rows[-1] == f"report: {paths['html'].as_posix()} (also report.md, results.json)"
    widths = {len(r) for r in rows[:2]}
    assert len(widths) == 1  # header and rule line up


def test_github_step_summary_is_appended(session: FakeSession, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("previous step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    paths = write_reports(session, complete=True)
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("previous step\n## pytest-llmbench")
    assert "| 5.1 | Time to First Token |" in text and "not compliant" in text
    assert "=== LLM Benchmark Report (Minimum) ===" in text
    assert paths["step_summary"] == summary


def test_planted_api_key_appears_in_no_file(session: FakeSession, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    # the key leaks into a procedure note and a measurement: the report must still not carry it
    session.results["5.1:{}"].notes.append(f"server said: bad key {PLANTED_KEY}")
    session.results["5.1:{}"].measurements["echo"] = PLANTED_KEY
    write_reports(session, complete=True)
    files = [p for p in session.settings.report.iterdir() if p.is_file()] + [summary]
    assert {p.name for p in files} >= {"results.json", "report.md", "report.html", "step.md"}
    for p in files:
        text = p.read_text(encoding="utf-8")
        assert PLANTED_KEY not in text, p.name
    doc = json.loads((session.settings.report / "results.json").read_text(encoding="utf-8"))
    assert doc["sut"]["api_key_env"] == KEY_ENV  # the name is kept
    assert f"--api-token={REDACTED}" in doc["command_line"]
    assert doc["procedures"][0]["result"]["measurements"]["echo"] == REDACTED
    assert "\n".join(terminal_rows(session)).find(PLANTED_KEY) == -1


def test_timestamps_iso_ms() -> None:
    assert iso_ms(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(1.9996) == "1970-01-01T00:00:01.999Z"  # truncated, never rounded into the next second


def test_hostile_text_is_escaped_in_html_and_markdown(session: FakeSession) -> None:
    res = session.results["5.1:{}"]
    res.notes.append("<script>alert(1)</script>")
    res.tables.append(Table("Evil | table", ["a|b", "c"], [["<img src=x onerror=alert(1)>", "x\ny"]]))
    doc = doc_of(session)
    html = render_html(doc)
    c = _Collector()
    c.feed(html)
    assert c.external == [] and not any(t in ("script", "img") for t, _ in c.tags)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    md = render_markdown(doc)
    assert "| a\\|b | c |" in md and "| &lt;img src=x onerror=alert(1)> | x y |" in md
    assert "- &lt;script>alert(1)&lt;/script>" in md


def test_terminal_rows_without_written_reports(session: FakeSession) -> None:
    rows = terminal_rows(session)  # never written: built on the fly, no report path claimed
    assert not any(r.startswith("report:") for r in rows)
    assert len([r for r in rows if re.match(r"^5\.\d", r)]) == 6
