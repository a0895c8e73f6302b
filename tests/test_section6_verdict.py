"""A §6 verdict for comparisons (issue 32): ``compare`` forms the §2 verdict of test "6" from the
§6.1–§6.4 items, prints it and exits 3 when a 6.1 MUST is not met; 6.1-MUST-3 (comparable hardware)
comes from observation (one machine fingerprint, the SUT on it), else from declarations, else it
needs a declaration (a warning; exit 3 with --require-section6)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from factories import gate_store

from pytest_llmbench.__main__ import compare_main
from pytest_llmbench.compliance import Check, Status, verdict_of
from pytest_llmbench.gate import load_run
from pytest_llmbench.gate.section6 import section6_verdict
from pytest_llmbench.gate.sessiongate import SessionGate
from pytest_llmbench.gate.storage import machine_fingerprint
from pytest_llmbench.gate.systems import CheckItem, compare_systems
from pytest_llmbench.report.comparison import section6_lines


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return gate_store(tmp_path)  # a copy of tests/data/gate/store: three simulator runs on one machine


def _edit(path: Path, fn) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    fn(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _other_machine(store: Path) -> None:
    _edit(store / "0002_rerun" / "meta.json", lambda m: m["machine"].update(node="another-host"))


def _hardware(store: Path, run: str, hw: dict | None) -> None:
    def put(d: dict) -> None:
        values = d["declarations"]["values"]
        values.pop("hardware", None)
        if hw is not None:
            values["hardware"] = hw
    _edit(store / run / "results.json", put)


def _compare(store: Path, tmp_path: Path, *extra: str) -> int:
    return compare_main(["base", "rerun", "--storage", str(store), "--output", str(tmp_path / "out"), *extra])


def test_two_runs_on_one_machine_against_the_simulator(store: Path, tmp_path: Path, capsys) -> None:
    assert _compare(store, tmp_path) == 0
    out = capsys.readouterr().out
    assert "§6 verdict (§2, test 6): 6: conditionally compliant (0 MUST unmet" in out
    assert "below the draft's minimum: 6: 1 run(s) per system < 3" in out  # 6.3-PARAM-1 counts as a SHOULD
    system = json.loads((tmp_path / "out" / "compare.json").read_text())["systems"]
    hw = next(i for i in system["equivalence"] if i["id"] == "6.1-MUST-3")
    assert hw["status"] == "met" and hw["source"] == "measured" and "machine fingerprints equal" in hw["detail"]
    assert system["section6"]["verdict"] == "conditionally compliant"
    assert "**Verdict (§2, test 6): 6: conditionally compliant" in (tmp_path / "out" / "compare.md").read_text()
    # three repetitions on each side meet §6.3's minimum
    assert compare_main(["1+2+3", "3+2+1", "--storage", str(store), "--output", str(tmp_path / "o2")]) == 0
    # ... and 4.4.2-SHOULD-1 binds test 6 (issue 48): the stored runs count some tokens with the server's usage
    # (option A), not the reference tokenizer, so the comparison is conditionally compliant, naming it
    out = capsys.readouterr().out
    assert "6: conditionally compliant" in out and "4.4.2-SHOULD-1" in out


def test_different_machines_without_declarations_need_a_declaration(store: Path, tmp_path: Path, capsys) -> None:
    _other_machine(store)
    for run in ("0001_base", "0002_rerun"):
        _hardware(store, run, None)
    assert _compare(store, tmp_path) == 0
    cap = capsys.readouterr()
    assert "6: not compliant" in cap.out and "needs declaration: 6.1-MUST-3" in cap.out
    assert "warning: §6.1 MUST needs a declaration: 6.1-MUST-3 (machine fingerprints differ" in cap.err
    assert _compare(store, tmp_path, "--require-section6") == 3
    assert "error: §6.1 MUST needs a declaration (--require-section6)" in capsys.readouterr().err


def test_declared_different_hardware_needs_the_62_normalisation(store: Path, tmp_path: Path, capsys) -> None:
    _other_machine(store)
    _hardware(store, "0001_base", {"accelerator": "H100-SXM", "count": 8, "memory": "80GB"})
    _hardware(store, "0002_rerun", {"accelerator": "A100", "count": 4, "memory": "40GB"})
    assert _compare(store, tmp_path) == 3
    cap = capsys.readouterr()
    assert "not met: 6.1-MUST-3" in cap.out and "no §6.2 normalisation is reported" in cap.out
    assert "error: §6.1 MUST not met: 6.1-MUST-3" in cap.err
    # §6.1 "or normalize by hardware capability": tokens per GPU-second and per dollar-hour for every run (§6.2)
    assert _compare(store, tmp_path, "--price", "0001_base=20", "--price", "0002_rerun=8") == 0
    out = capsys.readouterr().out
    assert "6.1-MUST-3" not in out.split("§6 verdict")[1]
    system = json.loads((tmp_path / "out" / "compare.json").read_text())["systems"]
    items = {i["id"]: i for i in system["equivalence"] + system["reporting"]}
    assert items["6.1-MUST-3"]["status"] == "met" and "normalised by hardware capability" in items["6.1-MUST-3"]["detail"]
    assert items["6.2-REPORT-1"]["status"] == items["6.2-REPORT-2"]["status"] == "met"


def test_declared_equal_hardware_on_two_machines_is_met(store: Path) -> None:
    _other_machine(store)
    hw = {"accelerator": "H100-SXM", "count": 8, "memory": "80GB"}
    _hardware(store, "0001_base", hw)
    _hardware(store, "0002_rerun", hw)
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    item = next(i for i in c.equivalence if i.id == "6.1-MUST-3")
    assert item.status == "met" and item.source == "declared" and "declared hardware equal" in item.detail


@pytest.mark.parametrize("statuses", [
    {"6.1-MUST-1": "met", "6.3-PARAM-1": "met", "6.4-PARAM-1": "not met"},
    {"6.1-MUST-1": "met", "6.3-PARAM-1": "not met"},
    {"6.1-MUST-3": "needs declaration", "6.3-PARAM-1": "met"},
    {"6.1-MUST-2": "not met", "6.2-REPORT-1": "n/a"},
])
def test_the_gate_applies_the_same_rule_as_the_compliance_package(statuses: dict[str, str]) -> None:
    to = {"met": Status.MET, "not met": Status.UNMET, "needs declaration": Status.NEEDS_DECLARATION,
          "n/a": Status.NOT_APPLICABLE}
    items = [CheckItem(rid, rid, st, "x") for rid, st in statuses.items()]
    checks = [Check(rid, to[st], "x") for rid, st in statuses.items()]
    assert section6_verdict(items).verdict == verdict_of(checks).value


def test_llm_compare_forms_the_section6_verdict(store: Path, tmp_path: Path) -> None:
    """--llm-compare: the session (here the stored rerun, as the plugin holds it) against a baseline
    stored on this machine."""
    _edit(store / "0001_base" / "meta.json", lambda m: m.update(machine=machine_fingerprint()))
    settings = SimpleNamespace(compare_fail=[], compare="base", save=None, autosave=False, storage=str(store),
                               sources={}, report=str(store / "0002_rerun"), compare_force=False)
    gate = SessionGate(settings)
    doc = load_run("rerun", store).document
    out = gate.comparison(doc)
    assert gate.section6 is not None and out["section6_verdict"]["verdict"] == gate.section6.verdict
    assert section6_lines(gate.section6.to_json())[0].startswith("§6 verdict (§2, test 6): 6: ")
    hw = next(i for i in out["section6_verdict"]["items"] if i["id"] == "6.1-MUST-3")
    assert hw["status"] == "met" and hw["source"] == "measured"  # this session ran here, against the simulator
    assert "6.3-PARAM-1" in out["section6"]  # the gate's own §6.3 facts are kept


def test_62_normalises_the_declared_maximum_not_the_first_procedure(store: Path) -> None:
    """Issue 48 (finding 6): §6.2 took the first procedure's output throughput (with 5.1 present, a run at a
    fraction of capacity); a declared maximum (5.2's key figure) is what tokens per GPU-second normalise."""
    hw = {"accelerator": "H100-SXM", "count": 4, "memory": "80GB"}
    for run, peak in (("0001_base", 1234.0), ("0002_rerun", 1500.0)):
        _hardware(store, run, hw)

        def add(d: dict, _peak: float = peak) -> None:
            d["procedures"][-1]["result"].setdefault("key_figures", []).append(
                {"name": "max_output_throughput", "value": _peak, "unit": "tok/s"})
        _edit(store / run / "results.json", add)
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    norm = [(n["output_throughput"], n["tokens_per_gpu_second"]) for n in c.normalisation]
    assert norm == [(1234.0, 308.5), (1500.0, 375.0)]  # the declared maxima / 4 GPUs
    assert "maximum output tokens/s a procedure declares" in c.normalisation_method


def test_64_report_1_is_labelled_construction(store: Path) -> None:
    """Finding 6: 6.4-REPORT-1 was a constant "met" presented as an observation."""
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    item = next(i for i in c.checklist if i.id == "6.4-REPORT-1")
    assert item.status == "met" and item.source == "construction" and "construction" in item.detail


def test_4_4_2_should_1_binds_the_comparison(store: Path) -> None:
    """Finding 6: 4.4.2-SHOULD-1 binds test 6 but was never evaluated there."""
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    item = next(i for i in c.reporting if i.id == "4.4.2-SHOULD-1")
    counted = {((p.get("result") or {}).get("measurements", {}).get("token_counting_option"),
                (p.get("result") or {}).get("measurements", {}).get("token_counting_tokenizer"))
               for r in c.runs for p in r.document["procedures"]}
    assert item.status == ("met" if counted == {("B", "cl100k_base")} else "not met"), (item, counted)
    assert item in c.verdict.items


def test_systems_table_uses_every_repetition_with_a_ci(store: Path) -> None:
    """Finding 6 (§6.3): the systems table took each system's first repetition and gave no CI; now each
    cell is the mean over the system's repetitions with its Student-t CI, or a within-run CI of a single
    run, or says why it has none."""
    from pytest_llmbench.gate.compare import figure_value
    from pytest_llmbench.gate.rules import parse_rule

    three = [load_run(n, store) for n in ("1", "2", "3")]
    c = compare_systems([three, [load_run("3", store)]])
    assert c.labels[0].endswith("(3 runs)") and len(c.labels) == 2
    row = next(r for r in c.table if r["figure"] == "ttft.p99")
    vals = [figure_value(r, r.document["procedures"][0], parse_rule("ttft.p99:0%"))["value"] for r in three]
    many, one = row["cells"]
    assert many["n"] == 3 and many["value"] == pytest.approx(sum(vals) / 3)
    assert many["ci_low"] < many["value"] < many["ci_high"] and "Student-t" in many["method"]
    assert "(n=3)" in row["values"][0] and "[" in row["values"][0]
    # one repetition: the figure's within-run CI, labelled as such; an under-sampled P99's CI has no upper
    # end (300 requests), and the cell says so
    assert one["n"] == 1 and one["ci_low"] is not None and "within-run" in one["method"]
    assert one["ci_high"] is None and "no upper end" in one["no_ci"] and "under-sampled" in one["no_ci"]
    assert row["values"][1].endswith(", —] (n=1)")
    p50 = next(r for r in c.table if r["figure"] == "ttft.p50")["cells"][1]
    assert p50["ci_low"] < p50["value"] < p50["ci_high"] and not p50["no_ci"]
    assert c.verdict and next(i for i in c.reporting if i.id == "6.3-PARAM-1").detail.startswith("1 run(s)")
    from pytest_llmbench.report.comparison import render_systems_html, render_systems_markdown
    md, page = render_systems_markdown(c.to_json()), render_systems_html(c.to_json())
    assert f"ttft.p99, {c.labels[1]}: one repetition, and its within-run CI has no upper end" in md
    assert "no upper end" in page and "(3 runs)" in page


def test_61_must_4_compares_the_loads_as_run(store: Path) -> None:
    """Finding 6: 6.1-MUST-4 compared the load specs as written, so 5.1 at capacity_fraction=0.5 of two
    different capacities was "met"; now the loads actually run are compared, with each run's load shown."""
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    item = next(i for i in c.equivalence if i.id == "6.1-MUST-4")
    assert item.status == "met" and item.source == "measured" and "as run: 1 run(s) compared" in item.detail

    def resolved_to(rate: float):
        def put(d: dict) -> None:
            d["procedures"][0]["result"]["facts"]["load"]["rate"] = rate
        return put
    _edit(store / "0002_rerun" / "results.json", resolved_to(12.0))  # 0.5 x a capacity of 24 req/s
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    item = next(i for i in c.equivalence if i.id == "6.1-MUST-4")
    assert item.status == "not met" and "equal as written, but the loads run differ" in item.detail
    assert "5.1 measure: poisson 10 req/s / poisson 12 req/s" in item.detail
    assert "6.1-MUST-4" in {i.id for i in c.verdict.must61_not_met}
    # a document whose runs record their loads: compared run label by run label (rate suffix dropped),
    # with the capacity each rate was resolved from
    def runs_with_loads(rate: float):
        def put(d: dict) -> None:
            run = d["procedures"][0]["result"]["runs"][0]
            run["label"] = f"measure-{rate:g}rps"
            run["load"] = {"model": "open", "arrival": "poisson", "rate": rate}
            run["extra"] = {"load_spec": {"capacity_rate": 2 * rate, "capacity_source": "declared"}}
        return put
    _edit(store / "0001_base" / "results.json", runs_with_loads(10.0))
    _edit(store / "0002_rerun" / "results.json", runs_with_loads(10.004))
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    assert next(i for i in c.equivalence if i.id == "6.1-MUST-4").status == "met"  # within the stored rounding
    _edit(store / "0002_rerun" / "results.json", runs_with_loads(11.0))
    item = next(i for i in compare_systems([load_run(n, store) for n in ("base", "rerun")]).equivalence
                if i.id == "6.1-MUST-4")
    assert "poisson 10 req/s (of capacity 20 req/s) / poisson 11 req/s (of capacity 22 req/s)" in item.detail


def test_no_section6_item_is_a_constant_outside_construction(store: Path) -> None:
    """Issue 48 (d): every §6 item's outcome is observed, or labelled construction with its reason: the items
    that read only the comparison's own text (6.2-REPORT-3, 6.4-REPORT-1) carry the label; the others move
    with the stored runs (here: hardware declared different, a GPU count and price for one run only)."""
    c = compare_systems([load_run(n, store) for n in ("base", "rerun")])
    items = {i.id: i for i in c.equivalence + c.reporting + c.checklist}
    for rid in ("6.2-REPORT-3", "6.4-REPORT-1"):
        assert items[rid].source == "construction" and "construction" in items[rid].detail, items[rid]
    _other_machine(store)
    _hardware(store, "0001_base", {"accelerator": "H100-SXM", "count": 8, "memory": "80GB"})
    _hardware(store, "0002_rerun", {"accelerator": "A100", "count": 4, "memory": "40GB"})
    moved = {i.id: i for i in (lambda x: x.equivalence + x.reporting + x.checklist)(
        compare_systems([load_run(n, store) for n in ("base", "rerun")], prices={"0001_base": 20}))}
    changed = {rid for rid in items if (items[rid].status, items[rid].detail) != (moved[rid].status, moved[rid].detail)}
    assert {"6.1-MUST-3", "6.2-REPORT-1", "6.2-REPORT-2"} <= changed
    assert moved["6.2-REPORT-2"].status == "not met"  # a price for one run only
