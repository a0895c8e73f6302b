"""The headline a reader sees first, rendered from a stored results document (a default smoke run).

``tests/data/results-smoke.json.gz`` is the ``results.json`` of ``pytest suites`` against the
embedded simulator (runs' per-run distributions trimmed to keep the file small; the rendering
paths for them are covered by test_report.py). Nothing here measures: it renders the document.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.procedures.base import procedure_ids
from pytest_llmbench.report import SUMMARY_LIMIT, render_html, render_markdown, render_summary, terminal_rows

DATA = Path(__file__).parent / "data" / "results-smoke.json.gz"
PLACEHOLDERS = ("the plugin's version", " x ?", " x 0", "TODO", "| None |", "| nan |", "{{", "}}")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(gzip.decompress(DATA.read_bytes()).decode("utf-8"))


@pytest.fixture(scope="module")
def md(doc: dict[str, Any]) -> str:
    return render_markdown(doc)


@pytest.fixture(scope="module")
def html(doc: dict[str, Any]) -> str:
    return render_html(doc)


def test_headline_is_first_and_says_what_happened(doc: dict[str, Any], md: str, html: str) -> None:
    head = md.split("## Headline", 1)[1].split("## Minimum Viable Report", 1)[0]
    assert md.index("## Headline") < md.index("## Minimum Viable Report") < md.index("## 1. System")
    assert "embedded simulator" in head and "profile:** smoke" in head
    # the suites assert SLOs in 10 test bodies (assert_slo): those are PASS, the other 10 informational
    assert "20 tests: 10 passed, 0 failed, 10 informational (no SLO set); 10 had SLOs" in head
    assert "| PASS |" in md and "INFORMATIONAL" in md
    assert re.search(r"0 unconditionally, 0 conditionally, 10 not compliant\. Main reason: \S+-MUST-\d+", head)
    # 4-6 key figures, each naming its procedure, level and workload, each defined once
    rows = [r for r in head.splitlines() if r.startswith("| ") and not r.startswith("| Key figure")]
    assert 4 <= len(rows) <= 6
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert re.match(r"^5\.\d+ ", cells[2]) and cells[3] and cells[4] and cells[4] != "not recorded", r
    titles = [f["title"] for f in doc["headline"]["figures"]]
    assert len(titles) == len(set(titles))
    for t in titles:
        assert head.count(f"- *{t}*: ") == 1
    # the procedure warnings the issue names are in the headline and in the verdict column
    assert "5.10: success rate 89" in head or "5.10: success rate" in head
    assert "**unfair scheduling** — 5.6: Jain index per request" in head  # each kind once, its procedures named
    assert 'id="headline"' in html and html.index('id="headline"') < html.index('id="mvr"')


def test_headline_figures_agree_with_the_tables(doc: dict[str, Any], md: str) -> None:
    figs = {f["name"]: f for f in doc["headline"]["figures"]}
    p52 = next(p for p in doc["procedures"] if p["procedure"] == "5.2")
    assert figs["max_output_throughput"]["value"] == p52["result"]["measurements"]["max_output_throughput_tok_s"]
    # C.1's max throughput is the same 5.2 figure, not a capacity probe of another procedure
    assert doc["summary"]["key_results"]["max_throughput_tps"] == figs["max_output_throughput"]["value"]
    p51 = next(p for p in doc["procedures"] if p["procedure"] == "5.1")
    assert figs["ttft_p50"]["value"] == p51["figures"]["ttft_p50"]["value"]


def test_durations_add_up(doc: dict[str, Any]) -> None:
    d = doc["headline"]["durations"]
    assert d["procedures_s"] <= d["session_s"] + 1e-6
    assert d["session_s"] == pytest.approx(d["procedures_s"] + d["other_s"], abs=0.01)
    assert doc["summary"]["configuration"]["test_duration_s"] == d["procedures_s"]


def test_no_placeholder_text(md: str, html: str, doc: dict[str, Any]) -> None:
    text = md + "\n".join(terminal_rows(doc)) + render_summary(doc, "report.html")
    for bad in PLACEHOLDERS:
        assert bad not in text, bad
    assert "the plugin's version" not in html


def test_procedures_in_draft_order_everywhere(doc: dict[str, Any], md: str, html: str) -> None:
    stored = {p["procedure"] for p in doc["procedures"]}
    order = [pid for pid in procedure_ids() if pid in stored]  # the discovered procedures, in draft order
    assert len(order) == len(stored) >= 10  # the smoke run ran every procedure, each one known
    assert [p["procedure"] for p in doc["procedures"]] == order
    detailed = md.split("## 4. Detailed results", 1)[1].split("\n## 5. ", 1)[0]
    found = re.findall(r"^### (5\.\d+) ", detailed, flags=re.M)
    assert found == order
    assert re.findall(r'data-procedure="(5\.\d+)"', html) == order
    body = [r.split()[0] for r in terminal_rows(doc) if re.match(r"^5\.\d+ [A-Z]", r)]
    assert body == order


def test_sweeps_name_range_result_and_level(doc: dict[str, Any], md: str) -> None:
    p53 = md.split("### 5.3 ", 1)[1].split("### 5.4 ", 1)[0]
    assert re.search(r"\*\*Tested:\*\* [\d.]+–[\d.]+ req/s offered \(\d+ runs\)\. \*\*Result:\*\* knee", p53)
    summary = md.split("### Summary per procedure", 1)[1].split("## 4.", 1)[0]
    assert "| Level behind the row |" in summary
    assert re.search(r"\| 5\.5 \| [^|]+ \| c\d+ \(concurrency \d+\) \|", summary)


def test_compliance_grouped_once_with_titles(md: str) -> None:
    comp = md.split("## 5. Compliance with the draft (§2)", 1)[1].split("## 6.", 1)[0]
    assert "### Unmet items grouped by what would fix them" in comp
    assert "### Session-wide items (apply to every procedure; listed once)" in comp
    # a session-wide item appears once in the session table, not once per procedure
    session = comp.split("### Session-wide items", 1)[1].split("### Compliance:", 1)[0]
    ids = re.findall(r"^\| ([\w.]+-(?:MUST|SHOULD)-\d+) \| ([^|]+) \|", session, flags=re.M)
    assert ids and len({i for i, _ in ids}) == len(ids)
    assert all(len(title.strip()) > 10 for _, title in ids)  # a readable title next to the ID
    per_proc = comp.split("### Compliance:", 1)[1]
    assert not any(f"| {i} |" in per_proc for i, _ in ids)


def test_summary_md_is_pr_comment_sized(doc: dict[str, Any]) -> None:
    text = render_summary(doc, "report.html", limit=SUMMARY_LIMIT)
    assert len(text) < SUMMARY_LIMIT
    assert "10 informational" in text and "| 5.10 | Guardrail Overhead |" in text
    assert "[report.html](report.html)" in text
    # a document too big for the limit loses optional parts, never the headline
    big = copy.deepcopy(doc)
    big["tests"] = big["tests"] * 200
    for t in big["tests"]:
        t["message"] = "x" * 50
    text = render_summary(big, "report.html", limit=SUMMARY_LIMIT)
    assert len(text) < SUMMARY_LIMIT and "Key figure" in text


def test_comparison_is_rendered_with_its_interval(doc: dict[str, Any]) -> None:
    cmp_doc = copy.deepcopy(doc)
    # the shape the gate writes (gate.compare.Comparison.to_json)
    def outcome(fig, base, new, rel, ci, verdict):  # type: ignore[no-untyped-def]
        return {"figure": fig, "rule": f"{fig}:10%", "level": None, "verdict": verdict, "message": f"{fig} {verdict}",
                "change": {"baseline": base, "new": new, "n_baseline": 300, "n_new": 300, "rel": rel,
                           "rel_ci": ci, "method": "bootstrap 95% CI of the relative change"}}
    cmp_doc["comparison"] = {
        "baseline": [{"id": "0001_main"}], "new": [], "rules": ["ttft.p99:10%"], "confidence": 0.95,
        "forced": False, "failed": True, "unmatched": [],
        "pairs": [{"key": "5.1", "procedure": "5.1", "title": "5.1 TTFT", "tests": [], "load": "poisson(rate=4)",
                   "differences": [], "refused": False, "forced": False, "note": "",
                   "outcomes": [outcome("ttft.p99", 0.040, 0.052, 0.30, [0.12, 0.41], "FAIL"),
                                outcome("output_throughput", 3200.0, 3278.0, 0.024, [-0.03, 0.075], "pass")]}]}
    summary = render_summary(cmp_doc, "report.html", limit=SUMMARY_LIMIT)
    assert "### Comparison with 0001_main: FAIL" in summary
    reg = summary.split("**Regressions:**", 1)[1].split("<details>", 1)[0]
    assert "ttft.p99" in reg and "output_throughput" not in reg and "+12.0% … +41.0%" in reg
    assert 'id="comparison"' in render_html(cmp_doc)
    assert "### Comparison with 0001_main" in render_markdown(cmp_doc)


def _section(html: str, doc: dict[str, Any], procedure: str) -> str:
    anchors = [p["anchor"] for p in doc["procedures"]]
    i = next(i for i, p in enumerate(doc["procedures"]) if p["procedure"] == procedure)
    body = html.split(f'id="{anchors[i]}"', 1)[1]
    return body.split(f'id="{anchors[i + 1]}"', 1)[0] if i + 1 < len(anchors) else body


@pytest.mark.parametrize(("procedure", "key", "by", "count"), [
    ("5.4", "cdfs_itl", "load level", 4), ("5.6", "cdfs_ttft", "request class", 4),
    ("5.7", "cdfs_ttft", "configuration", 3), ("5.10", "cdfs_ttft", "configuration", 4),
    ("5.10", "cdfs_e2e", "configuration", 4)])
def test_overlaid_cdfs_one_per_run(doc: dict[str, Any], html: str, procedure: str, key: str, by: str,
                                   count: int) -> None:
    p = next(p for p in doc["procedures"] if p["procedure"] == procedure)
    d = p["result"]["plots"][key]
    assert d["by"] == by and len(d["series"]) == count
    sec = _section(html, doc, procedure)
    svg = next(s for s in re.findall(r"<svg .*?</svg>", sec, re.S) if 'data-kind="cdfs"' in s and
               f"{d['title']} CDF per {by}" in s)
    series = re.findall(r'<path class="series" data-series="([^"]+)"', svg)
    assert series == [s["label"] for s in d["series"]]
    assert svg.count('<g class="legend">') == 1 and re.search(r'data-label="[^"]+ \(ms', svg)
    # the single-run CDF of the overlaid metric is not drawn again
    assert 'data-kind="cdf"' not in svg and f"{d['title']} cumulative distribution" not in sec


def test_configuration_differences_carry_their_noise_band(doc: dict[str, Any], html: str, md: str) -> None:
    for procedure, baseline in (("5.7", "Cache Disabled"), ("5.10", "Baseline")):
        p = next(p for p in doc["procedures"] if p["procedure"] == procedure)
        rows = p["result"]["plots"]["differences"]["rows"]
        assert rows and all(r["baseline"] == baseline and r["ci_low"] <= r["diff"] <= r["ci_high"] for r in rows)
        sec = _section(html, doc, procedure)
        assert f"Difference from {baseline} with its 95% confidence interval (noise band)" in sec
        assert 'data-kind="differences"' in sec
        for r in rows:
            reading = "within noise" if r["ci_low"] <= 0 <= r["ci_high"] else ("higher" if r["diff"] > 0 else "lower")
            assert r["within_noise"] == (reading == "within noise")
            assert re.search(rf'data-label="{re.escape(r["series"])}: [^"]*{r["statistic"].upper()}"[^>]*'
                             rf'data-within-noise="{str(r["within_noise"]).lower()}"', sec)
    assert "| within noise |" in md or "| higher |" in md or "| lower |" in md


def test_slo_line_on_the_latency_curve(doc: dict[str, Any]) -> None:
    from pytest_llmbench.document.outcomes import slo_objectives

    d = copy.deepcopy(doc)
    p53 = next(p for p in d["procedures"] if p["procedure"] == "5.3")
    p53["slos"] = slo_objectives(["ttft.p99 <= 500ms", "output_throughput >= 2000 tok/s", "not an slo"])
    sec = _section(render_html(d), d, "5.3")
    lat = next(s for s in re.findall(r"<svg .*?</svg>", sec, re.S) if 'data-kind="curve-latency"' in s)
    assert re.search(r'<g class="marker slo" data-y="500" data-label="SLO TTFT P99 ≤ 500 ms">', lat)
    tput = next(s for s in re.findall(r"<svg .*?</svg>", sec, re.S) if 'data-kind="curve-throughput"' in s)
    assert re.search(r'<g class="marker slo" data-y="2000" data-label="SLO Output throughput ≥ 2000 tok/s">', tput)
    assert "without" not in "".join(o["text"] for o in p53["slos"]) and len(p53["slos"]) == 2
    assert 'class="marker slo"' not in _section(render_html(doc), doc, "5.3")  # no SLO set in the smoke run


def _with_cancellations(doc: dict[str, Any]) -> dict[str, Any]:
    """The stored document with 5.8's drain having cancelled requests in its last two levels: what 5.8
    records then (the levels' ``cancelled``, the runs' ``ok`` and its ``cancelled`` finding), annotated again."""
    from pytest_llmbench.document.headline import annotate, item_titles

    d = copy.deepcopy(doc)
    p58 = next(p for p in d["procedures"] if p["procedure"] == "5.8")
    levels = p58["result"]["measurements"]["levels"]
    runs = [r for r in p58["result"]["runs"] if (r.get("extra") or {}).get("phase_role") != "capacity search"]
    total = 0
    for lv, run in list(zip(levels, runs))[-2:]:
        lv["cancelled"] = k = max(1, run["load"]["sent"] // 4)
        run["load"]["ok"] = run["load"]["sent"] - k
        total += k
    p58["result"]["warnings"] = [*p58["result"].get("warnings", []),
                                 {"kind": "cancelled", "text": f"{total} of {sum(r['load']['sent'] for r in runs)} requests"}]
    annotate(d, item_titles())
    return d


def test_cancelled_requests_count_against_completion(doc: dict[str, Any]) -> None:
    d = _with_cancellations(doc)
    md = render_markdown(d)
    assert "cancelled (count as not completed)" in md.split("## ", 2)[1]  # in the headline
    p58 = next(p for p in d["procedures"] if p["procedure"] == "5.8")
    levels = p58["completion"]
    assert any(lv["cancelled"] for lv in levels) and not all(lv["cancelled"] for lv in levels)
    table = md.split("Table 11: Memory Pressure Degradation", 1)[1].split("\n\n", 2)[1]
    header, _, *rows = table.splitlines()
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[1:3] == ["Complete", "Cancelled"]
    for lv, row in zip(levels, rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == f"{lv['cancelled']:,}"
        assert lv["completion"] == lv["completed"] / lv["sent"]
        if lv["cancelled"]:
            assert not cells[1].startswith("100") and f"({lv['completed']} of {lv['sent']})" in cells[1]
