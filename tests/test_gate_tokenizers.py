"""The counting option and tokenizer in the gate's comparability key (§4.4.2, §6.1): runs counted
in different tokenizers are refused by the gate and flagged by ``compare`` (which offers a recount
in the reference tokenizer, refused when the text was dropped); a run stored before the key had
them compares with a warning; ``itl`` is never compared with ``tbc`` (§4.6.3 option A)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from factories import make_record

from pytest_llmbench.__main__ import compare_main
from pytest_llmbench.common.storage import RunWriter
from pytest_llmbench.gate import compare, load_run, save
from pytest_llmbench.gate.compare import RECOUNT_HINT, IncomparableRunsError, check_comparable
from pytest_llmbench.gate.recount import RecountRefused, recount, recount_comparison
from pytest_llmbench.measure.chunking import ITL_NOT_MEASURABLE


@pytest.fixture
def store(tmp_path: Path) -> Path:  # a copy of the gate tests' stored runs
    return Path(shutil.copytree(Path(__file__).parent / "data" / "gate" / "store", tmp_path / "store"))


def _with(doc: dict, option: str | None, tokenizer: str | None, itl_option: str | None = None) -> dict:
    doc = json.loads(json.dumps(doc))
    for p in doc["procedures"]:
        meas = p["result"].setdefault("measurements", {})
        if option is not None:
            meas["token_counting_option"], meas["token_counting_tokenizer"] = option, tokenizer
        if itl_option is not None:
            for m in [p["result"]["metrics"]] + [r["metrics"] for r in p["result"]["runs"]]:
                m["itl_option"] = itl_option
    return doc


def test_runs_in_different_tokenizers_are_refused_and_flagged(store: Path, tmp_path: Path, capsys) -> None:
    base = load_run("base", store)
    a = save(_with(base.document, "A", "org/model-a"), store, samples=base.samples, name="tok-a", commit="a")
    b = save(_with(base.document, "A", "org/model-b"), store, samples=base.samples, name="tok-b", commit="b")
    comp = compare(a, b, ["tpot.p50:10%"])  # what --llm-compare runs
    assert comp.refused and not comp.pairs[0].outcomes
    assert [(d.field, d.baseline, d.new) for d in comp.pairs[0].differences] == [
        ("count tokenizer", "org/model-a", "org/model-b")]
    assert RECOUNT_HINT in comp.pairs[0].note
    with pytest.raises(IncomparableRunsError):
        check_comparable(a, b)
    rc = compare_main(["tok-a", "tok-b", "--fail", "tpot.p50:10%", "--storage", str(store),
                       "--output", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 2 and "count tokenizer: baseline org/model-a, new org/model-b" in text and "--recount" in text
    # same tokenizer, same option: compared
    same = save(_with(base.document, "A", "org/model-a"), store, samples=base.samples, name="tok-a2", commit="c")
    assert not compare(a, same, ["tpot.p50:10%"]).refused


def test_a_run_stored_without_the_counting_key_compares_with_a_warning(store: Path) -> None:
    base = load_run("base", store)  # stored before the key had the counting option and tokenizer
    new = save(_with(base.document, "B", "cl100k_base"), store, samples=base.samples, name="new", commit="n")
    comp = compare(base, new, ["tpot.p50:10%"])
    assert not comp.refused and comp.pairs[0].outcomes
    assert comp.pairs[0].warnings and "count tokenizer not recorded in the baseline run" in comp.pairs[0].note


def test_itl_is_never_compared_with_tbc(store: Path) -> None:
    base = load_run("base", store)
    a = save(_with(base.document, None, None, itl_option="A"), store, samples=base.samples, name="chunked", commit="a")
    comp = compare(base, a, ["itl.p99:10%", "tpot.p50:10%"])
    itl = next(o for o in comp.pairs[0].outcomes if o.figure == "itl.p99")
    assert itl.failed and "never compared with tbc" in itl.message
    both = compare(a, a, ["itl.p99:10%"])
    assert both.violations and ITL_NOT_MEASURABLE in both.violations[0].message


def _report(tmp: Path, base_doc: dict, text: str, drop_text: bool = False) -> Path:
    report = tmp / "llmbench-report"
    doc = json.loads(json.dumps(base_doc))
    doc.setdefault("settings", {})["drop_text"] = drop_text
    p = doc["procedures"][0]
    run_dir = p["result"]["runs"][0]["run_dir"]
    p["result"]["primary_run"] = p["result"]["runs"][0]["label"]
    with RunWriter(report / run_dir, keep_text=not drop_text) as w:
        for i in range(4):
            w.write(make_record(i, sent=i * 100.0, n_chunks=3, text=text, tokens=1, output_tokens_server=3))
    (report / "results.json").write_text(json.dumps(doc))
    return report


def test_recount_in_the_reference_tokenizer_or_refused_with_the_reason(store: Path, tmp_path: Path) -> None:
    base_doc = load_run("base", store).document
    report = _report(tmp_path / "a", base_doc, " hello world")
    from pytest_llmbench.gate.storage import StoredRun

    run = StoredRun(report, {"id": "a"})
    rc = recount(run, run.document["procedures"][0])
    assert rc.requests == 4 and rc.output_tokens == 4 * 3 * 2  # " hello world" is 2 cl100k tokens, 3 chunks each
    assert rc.server_output_tokens == 12 and rc.duration_s > 0
    dropped = _report(tmp_path / "b", base_doc, " hello world", drop_text=True)
    run_b = StoredRun(dropped, {"id": "b"})
    with pytest.raises(RecountRefused, match="--llm-drop-text"):
        recount(run_b, run_b.document["procedures"][0])


def test_a_recount_comparison_is_built_by_the_gate_and_rendered_by_the_report(store: Path, tmp_path: Path) -> None:
    """``compare --recount``: the gate computes both rates and the change; report/comparison.py only lays
    them out (one line per procedure, or its refusal)."""
    from pytest_llmbench.gate.storage import StoredRun
    from pytest_llmbench.report.comparison import render_recount

    base_doc = load_run("base", store).document
    a = StoredRun(_report(tmp_path / "a", base_doc, " hello world"), {"id": "a"})
    b = StoredRun(_report(tmp_path / "b", base_doc, " hello world hello world"), {"id": "b"})
    doc = recount_comparison(a, b)
    (p,) = doc["procedures"]
    assert (p["baseline"]["output_tokens"], p["new"]["output_tokens"]) == (24, 48)
    assert p["output_rate_change_pct"] == pytest.approx(100.0)
    text = render_recount(doc)
    assert text.splitlines()[0].endswith("baseline a, new b")
    assert "tok/s (+100.0%) in cl100k_base tokens; 24 / 48 tokens (server usage: 12 / 12)" in text
    dropped = StoredRun(_report(tmp_path / "c", base_doc, " hello world", drop_text=True), {"id": "c"})
    assert "refused: " in render_recount(recount_comparison(a, dropped))
