"""Each measured run is summarised once (issue 30, "Summarise once"): the procedure summarises it while
its records are in memory, the session writes its samples beside the records, the AIPerf export takes the
summary it is given and ``--llm-save`` stores by copying the samples files.

The summariser is counted through a real session (the embedded simulator, procedure 5.1 with tiny
parameters) run in process, so a wrapper around it sees every call, wherever it is made from.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import ttft_records

from pytest_llmbench.measure import summary
from pytest_llmbench.measure.frame import FrameBuilder, RunFrame

TEST_5_1 = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=10, warmup_requests=2, warmup_tokens=10,
                           warmup_probes=0, max_output_tokens=8)
def test_ttft(llm_result):
    assert llm_result.metrics.scalars["request_count"].value == 10
'''


@pytest.fixture
def summarise_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts calls of the summariser: every module attribute bound to it is replaced by a counting wrapper
    (``from .summary import summarize`` bindings as well as the defining module's own name)."""
    original = summary.summarize
    calls: list[int] = []

    def counting(records: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(records, (FrameBuilder, RunFrame)):
            records = list(records)
        calls.append(len(records) if not isinstance(records, RunFrame) else records.n)
        return original(records, *args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("pytest_llmbench") and getattr(module, "summarize", None) is original:
            monkeypatch.setattr(module, "summarize", counting)
    yield calls


def test_one_summary_per_measured_run_with_save_and_aiperf_export(pytester: pytest.Pytester,
                                                                   summarise_calls: list[int]) -> None:
    pytester.makepyfile(test_x=TEST_5_1)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--llm-report", "rep",
                                          "--llm-save", "once", "--llm-export", "aiperf")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    runs = [r for p in doc["procedures"] for r in p["result"]["runs"] if r.get("run_dir")]
    assert len(runs) == 1
    assert summarise_calls == [10], f"the summariser ran {len(summarise_calls)} times for 1 measured run"
    run_dir = pytester.path / "rep" / runs[0]["run_dir"]
    assert {p.name for p in (run_dir / "aiperf").iterdir()} == {
        "profile_export.jsonl", "profile_export_aiperf.json", "profile_export_aiperf.csv"}
    stored = pytester.path / ".llmbench" / "0001_once"
    meta = json.loads((stored / "meta.json").read_text())
    ttft = next(i for i, e in enumerate(meta["samples"]) if e["metric"] == "ttft")
    with np.load(stored / "samples.npz") as z, np.load(run_dir / "samples.npz") as beside:
        assert np.array_equal(z[f"s{ttft}"], beside["ttft"]) and z[f"s{ttft}"].size == 10
    assert not meta.get("notes")  # nothing was summarised again


def test_samples_file_beside_the_records(tmp_path: Path) -> None:
    """The run's samples file holds what the in-memory summary held, sorted float32 per distribution."""
    from pytest_llmbench.measure.samples import SAMPLES_FILE, read_run_samples, samples_of, write_run_samples

    metrics = summary.summarize(ttft_records([30.0, 10.0, 20.0]))
    assert read_run_samples(tmp_path) is None  # no file: a run written before samples were kept
    path = write_run_samples(tmp_path, metrics)
    assert path == tmp_path / SAMPLES_FILE
    back = read_run_samples(tmp_path)
    assert back is not None and set(back) == set(samples_of(metrics))
    assert back["ttft"].dtype == np.float32 and back["ttft"].tolist() == pytest.approx([0.010, 0.020, 0.030])


def test_compare_summarises_a_run_of_an_older_report_directory_once(tmp_path: Path, summarise_calls: list[int],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m pytest_llmbench compare PATH …`` on a report directory written before runs kept their samples:
    the package CLI hands the gate session.resummarize_run, which runs once; the samples file is written beside
    the records and a note printed; the next compare reads the file."""
    from pytest_llmbench.__main__ import compare_main
    from pytest_llmbench.common.storage import RunWriter

    doc = json.loads((Path(__file__).parent / "data" / "gate" / "store" / "0001_base" / "results.json").read_text())
    run = doc["procedures"][0]["result"]["runs"][0]
    run_dir, run["metrics"]["itl_option"] = run["run_dir"], "B"  # what these one-token-chunk records give (§4.6.3)
    report = tmp_path / "old-report"
    with RunWriter(report / run_dir) as w:
        for r in ttft_records([10.0 + i for i in range(30)]):
            w.write(r)
    (report / "results.json").write_text(json.dumps(doc))
    args = [str(report), str(report), "--storage", str(tmp_path / "store"), "--output", str(tmp_path / "out")]
    assert compare_main(args) == 0
    err = capsys.readouterr().err
    assert summarise_calls == [30] and err.count("summarised again once from their records.jsonl") == 1
    assert (report / run_dir / "samples.npz").is_file()
    assert compare_main(args) == 0
    assert summarise_calls == [30] and "summarised again" not in capsys.readouterr().err


def test_a_crashed_procedure_keeps_its_runs_samples(tmp_path: Path) -> None:
    """Crash recovery summarises what reached the disk (the procedure never did) and writes the samples
    beside those records too, so storing or comparing the incomplete session summarises nothing again."""
    import pytest_llmbench.procedures  # noqa: F401 - registers the procedures
    from pytest_llmbench.common.storage import RunWriter
    from pytest_llmbench.measure.samples import read_run_samples
    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.session import partial_result

    proc = get_procedure("5.1")
    with RunWriter(tmp_path / "measure") as w:
        for r in ttft_records([12.0, 11.0, 13.0]):
            w.write(r)
    result = partial_result(proc, proc.make_params("smoke", {}), tmp_path, "smoke", RuntimeError("boom"))
    assert not result.complete and [r.label for r in result.runs] == ["measure"]
    kept = read_run_samples(tmp_path / "measure")
    assert kept is not None and kept["ttft"].tolist() == pytest.approx([0.011, 0.012, 0.013])
