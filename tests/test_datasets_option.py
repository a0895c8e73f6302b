"""The user's datasets for every procedure (issue 50, item 1): ``--llm-dataset conversation=PATH`` and
``code-completion=PATH`` read through the existing readers, checked at configure (usage errors naming
file and line), standard only for the draft's file (by SHA-256 where known, else by name, version and
the A.3.2 statistics of what was drawn), A.4.2's repository contexts from the file, and the drawn
lengths beside A.3.2 in results.json and the report. Every file here is generated; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

# imported here so that in-process pytester runs reuse them (numpy cannot be imported twice)
import pytest_llmbench.procedures  # noqa: F401
from pytest_llmbench.common import draft
from pytest_llmbench.common.seeds import Seeds
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.document.procedure import dataset_lengths
from pytest_llmbench.workloads import LengthDistribution, WorkloadError, build_workload, using_datasets
from pytest_llmbench.workloads.datasets import (
    STATISTICS_TOLERANCE,
    check_dataset,
    identify_code,
    parse_dataset_options,
)

TOK = get_tokenizer()
DRAFT = "vicuna_cleaned 2023-04-12"


def _words(k: int, tag: str) -> str:
    """``k`` tokens of text (" word" is one cl100k_base token each), starting with a unique tag."""
    return tag + " hello" * max(k - 4, 1)


def sharegpt(path: Path, n: int, *, a32: bool = True, seed: int = 0) -> Path:
    """A ShareGPT JSON file of ``n`` conversations; ``a32``: lengths drawn through A.3.2's percentiles,
    else short fixed-ish lengths far from them."""
    rng = np.random.default_rng(seed)
    if a32:
        ins = LengthDistribution("quantile-lognormal", {"quantiles": {0.5: 156, 0.95: 892, 0.99: 2134},
                                                        "min": 8, "max": 8192}).sample(rng, n)
        outs = LengthDistribution("quantile-lognormal", {"quantiles": {0.5: 234, 0.95: 789, 0.99: 1567},
                                                         "min": 8, "max": 4096}).sample(rng, n)
    else:
        ins, outs = rng.integers(20, 40, size=n), rng.integers(20, 40, size=n)
    convs = [{"id": f"c{i}", "conversations": [
        {"from": "human", "value": _words(int(ins[i]), f"S{seed}Q{i}:")},
        {"from": "gpt", "value": _words(int(outs[i]), f"A{i}:")},
        {"from": "human", "value": "thanks"}]} for i in range(n)]
    path.write_text(json.dumps(convs, indent=1), encoding="utf-8")
    return path


def code_repo(root: Path, repos: int = 4, files: int = 3) -> Path:
    """A directory of Python and JavaScript repositories (one folder each) with real functions."""
    for r in range(repos):
        lang = "py" if r % 2 == 0 else "js"
        d = root / f"repo{r}"
        d.mkdir(parents=True)
        for f in range(files):
            if lang == "py":
                body = "".join(f"def r{r}_f{f}_{j}(items, scale):\n    total = 0\n    for x in items:\n"
                               f"        total += x * scale + {j}\n    return total\n\n\n" for j in range(40))
            else:
                body = "".join(f"function r{r}F{f}N{j}(items, scale) {{\n  let total = 0;\n"
                               f"  for (const x of items) {{\n    total += x * scale + {j};\n  }}\n"
                               "  return total;\n}\n\n" for j in range(40))
            (d / f"mod{f}.{lang}").write_text(body, encoding="utf-8")
    return root


# ---------------------------------------------------------------------- reading and checking
def test_the_option_reads_the_file_unless_the_marker_names_its_own(tmp_path: Path) -> None:
    mine = sharegpt(tmp_path / "mine.json", 40, a32=False)
    other = sharegpt(tmp_path / "other.json", 40, a32=False, seed=1)
    opts = parse_dataset_options([(f"conversation={mine}", "--llm-dataset")],
                                 [(f"conversation={DRAFT}", "--llm-dataset-version")])
    prompts = {c["conversations"][0]["value"] for c in json.loads(mine.read_text())}
    with using_datasets(opts):
        wl = build_workload("conversation", n=20, seed=3, tokenizer=TOK)
        assert {s.prompt_text for s in wl.specs} <= prompts
        assert wl.declaration.dataset["source"] == str(mine) and wl.declaration.dataset["version"] == DRAFT
        explicit = build_workload("conversation", n=20, seed=3, tokenizer=TOK, dataset=str(other))
        assert not {s.prompt_text for s in explicit.specs} & prompts  # the marker's dataset= wins
        assert explicit.declaration.dataset["version"] == "unspecified"  # and the session's version is not its
    stand_in = build_workload("conversation", n=5, seed=3, tokenizer=TOK)  # outside a run: no session file
    assert stand_in.declaration.synthetic_standin


@pytest.mark.parametrize(("entry", "content", "needles"), [
    ("conversation={p}", None, ["does not exist", "--llm-dataset conversation="]),
    ("chat={p}", "[]", ["workload 'chat' takes no dataset file", "conversation=PATH or code-completion=PATH"]),
    ("conversation", None, ["is not NAME=PATH"]),
    ("conversation={p}", '[\n {"conversations": [\n  {"from": "human", "value": "hi there"}]},\n'
     ' {"conversations": [{"from": "human", "value": "again"}]}\n]', [":2: no conversation with a human turn",
                                                                  "line 2", "['human']", "1+ assistant turns"]),
    ("conversation={p}", '{"conversations": []}\n{"conversations": []}\n{oops\n', [":3: not JSON or JSON Lines"]),
    ("code-completion={p}", '{"content": "x = 1\\ny = 2\\n", "lang": "python"}\n',
     [":1: no function to complete", "A.4.1", "give source code that defines functions"]),
    ("code-completion={p}", '{"text": "def f(x):\\n    return x\\n"}\n', [":1: code dataset holds no", "'content'"]),
])
def test_bad_entries_name_the_file_and_line(tmp_path: Path, entry: str, content: str | None,
                                            needles: list[str]) -> None:
    p = tmp_path / "data.jsonl"
    if content is not None:
        p.write_text(content, encoding="utf-8")
    with pytest.raises(WorkloadError) as err:
        parse_dataset_options([(entry.format(p=p), "--llm-dataset")])
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_two_files_for_one_workload_and_a_version_without_a_file(tmp_path: Path) -> None:
    a = sharegpt(tmp_path / "a.json", 3, a32=False)
    with pytest.raises(WorkloadError, match="a second file for conversation"):
        parse_dataset_options([(f"conversation={a}", "ini llm_dataset (entry 1)"),
                               (f"conversation={a}", "ini llm_dataset (entry 2)")])
    with pytest.raises(WorkloadError, match="a version for code-completion but no --llm-dataset"):
        parse_dataset_options([(f"conversation={a}", "--llm-dataset")], [("code-completion=x", "--llm-dataset-version")])
    with pytest.raises(WorkloadError, match="takes no dataset file"):
        check_dataset("long-context", a)


# ---------------------------------------------------------------------- standard or custom
def test_a_file_far_from_a32_is_custom_even_when_named_the_drafts(tmp_path: Path) -> None:
    far = sharegpt(tmp_path / "far.json", 400, a32=False)
    wl = build_workload("conversation", n=300, seed=1, tokenizer=TOK, dataset=far, dataset_version=DRAFT)
    d = wl.declaration.to_json()
    ident = d["dataset"]["identification"]
    assert d["standard"] is False and d["custom"] is True and ident["standard"] is False and ident["method"] is None
    assert "outside ±15% (beyond the sampling error) of A.3.2" in ident["reason"] and "input P50" in ident["reason"]
    assert "name" not in d["dataset"] and any("custom dataset" in n for n in d["notes"])


def test_name_version_and_statistics_identify_the_drafts_file(tmp_path: Path) -> None:
    near = sharegpt(tmp_path / "near.json", 1500, seed=5)
    wl = build_workload("conversation", n=1200, seed=2, tokenizer=TOK, dataset=near, dataset_version=DRAFT)
    ds = wl.declaration.dataset
    st = ds["length_statistics"]
    assert st["n"] == 1200 and st["tolerance"] == STATISTICS_TOLERANCE
    assert st["compared"] == ["input P50", "input P95", "input P99", "output P50", "output P95", "output P99"]
    assert st["within_tolerance"], st
    assert ds["identification"] == {"standard": True, "method": "name, version and A.3.2 statistics",
                                    "reason": ds["identification"]["reason"]}
    assert wl.declaration.standard and ds["name"] == "ShareGPT vicuna_cleaned 2023-04-12"
    # the same file without the declared version: custom, and the reason says what to declare
    undeclared = build_workload("conversation", n=1200, seed=2, tokenizer=TOK, dataset=near)
    assert not undeclared.declaration.standard
    assert "--llm-dataset-version conversation=" in undeclared.declaration.dataset["identification"]["reason"]
    # too few draws to compare P95: not identified by statistics
    small = build_workload("conversation", n=100, seed=2, tokenizer=TOK, dataset=near, dataset_version=DRAFT)
    assert not small.declaration.standard and "too few to compare P95" in small.declaration.dataset[
        "identification"]["reason"]


def test_identification_by_sha256_when_the_table_knows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert draft.value("datasets.sharegpt_sha256") is None  # the draft gives none: never guessed
    far = sharegpt(tmp_path / "far.json", 60, a32=False)
    sha = build_workload("conversation", n=10, seed=1, tokenizer=TOK, dataset=far).declaration.dataset["sha256"]
    monkeypatch.setitem(draft.entry("datasets.sharegpt_sha256"), "value", sha)  # a test-only table entry
    wl = build_workload("conversation", n=10, seed=1, tokenizer=TOK, dataset=far)
    assert wl.declaration.dataset["identification"]["method"] == "sha256" and wl.declaration.standard
    other = sharegpt(tmp_path / "other.json", 60, a32=False, seed=9)
    wl = build_workload("conversation", n=10, seed=1, tokenizer=TOK, dataset=other, dataset_version=DRAFT)
    assert not wl.declaration.standard and "is not the draft's" in wl.declaration.dataset["identification"]["reason"]


def test_code_identification_by_declared_name_and_languages() -> None:
    langs = ["javascript", "python"]
    assert identify_code("ab" * 32, "bigcode/the-stack v1.2 dedup", langs)["standard"]
    assert identify_code("ab" * 32, "bigcode/the-stack v1.2", langs)["method"].startswith("declared name")
    assert not identify_code("ab" * 32, "my-monorepo 2024", langs)["standard"]
    ruby = identify_code("ab" * 32, "The Stack v2", ["python", "ruby"])
    assert not ruby["standard"] and "['ruby']" in ruby["reason"]


# ---------------------------------------------------------------------- A.4.2 contexts from the file
def test_code_contexts_from_the_file(tmp_path: Path) -> None:
    root = code_repo(tmp_path / "code")
    wl = build_workload("code-completion", n=2000, seed=4, tokenizer=TOK, dataset=root,
                        dataset_version="bigcode/the-stack v1.2")
    shared = [s for s in wl.specs if s.prefix_id is not None]
    assert len(shared) == 1600 and {s.prefix_id for s in shared} == {f"repo-{k}" for k in range(10)}
    lengths = wl.declaration.prefix_sharing["prefix_lengths"]
    assert len(lengths) == 10 and all(512 <= n <= 1024 for n in lengths)
    counts = np.array([sum(s.prefix_id == f"repo-{k}" for s in shared) for k in range(10)])
    zipf = np.arange(1, 11) ** -1.5
    share = counts.max() / len(shared)
    assert share == pytest.approx(zipf[0] / zipf.sum(), abs=0.04)  # Zipf s=1.5: the first context ~50 %
    for s in shared:  # a context is one language: its repository's files first, the header in its comment syntax
        ctx = TOK.decode(list(s.prompt_ids[: s.prefix_tokens]))
        assert s.prompt_text.startswith(ctx)
        first = ctx.split("\n", 1)[0]
        assert first.startswith(("# file: repo", "// file: repo")), first
        py = first.startswith("#")
        assert (".py" in first) == py and ("function r" in ctx) != py and ("def r" in ctx) == py
        task = s.prompt_text[len(ctx):].split(" TODO:")[0]  # the start of a dataset function in the same language
        assert task.startswith("def r" if py else "function r"), task[:80]
    d = wl.declaration.to_json()
    assert d["standard"] and d["dataset"]["identification"]["standard"] and d["dataset"]["functions"] == 480
    assert d["dataset"]["languages"] == ["javascript", "python"] and d["retokenization"]["mismatched"] == 0


# ---------------------------------------------------------------------- report
def test_results_json_entry_and_report_table(tmp_path: Path) -> None:
    from pytest_llmbench.report.render import _dataset_lengths_table

    far = sharegpt(tmp_path / "far.json", 400, a32=False)
    w = build_workload("conversation", n=300, seed=1, tokenizer=TOK, dataset=far).declaration.to_json()
    d = dataset_lengths(w)
    assert d is not None and d["n"] == 300 and d["source"] == str(far) and len(d["rows"]) == 6
    row = next(r for r in d["rows"] if r["side"] == "input" and r["percentile"] == 50)
    assert row["reference"] == 156 and row["compared"] and row["within"] is False
    assert next(r for r in d["rows"] if r["percentile"] == 99)["compared"] is False  # 300 draws: P99 not compared
    t = _dataset_lengths_table(d)
    assert t is not None and t["title"] == "Dataset lengths against App. A.3.2"
    assert t["rows"][0][0] == "input P50" and t["rows"][0][3] == "156" and t["rows"][0][5] == "outside"
    assert t["rows"][2][2] == "n/a" and t["rows"][2][5].startswith("not compared")
    assert "custom dataset" in t["notes"][0]
    assert dataset_lengths(build_workload("fixed", n=2, seed=1, tokenizer=TOK).declaration.to_json()) is None


SUITE = '''
import pytest
from pytest_llmbench.procedures.loads import poisson

@pytest.mark.llm_procedure("5.1", workload="conversation", load=poisson(rate=40), requests=30,
                           warmup_requests=4, warmup_tokens=10)
def test_ttft(llm_result):
    pass
'''


def test_the_option_through_pytest_against_the_simulator(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """``--llm-dataset conversation=PATH`` on a shipped-style 5.1 test: the measured prompts are the
    file's, the run is labelled custom (a small file far from A.3.2), results.json carries the drawn
    lengths beside A.3.2 and the report shows them."""
    data = sharegpt(pytester.path / "chats.json", 80, a32=False)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-dataset", "conversation=chats.json",
                                           "--llm-dataset-version", f"conversation={DRAFT}")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out[-3000:]
    doc = json.loads((pytester.path / "llmbench-report" / "results.json").read_text(encoding="utf-8"))
    proc = doc["procedures"][0]
    lengths = proc["dataset_lengths"]
    assert lengths["source"].endswith("chats.json") and lengths["n"] == 30 and not lengths["synthetic_standin"]
    assert lengths["identification"]["standard"] is False
    workload = proc["result"]["facts"]["workload"]
    assert workload["dataset"]["version"] == DRAFT and workload["custom"] is True
    # the records are the file's prompts: the measured workload rebuilt from the same seed stream and file
    prompts = {c["conversations"][0]["value"] for c in json.loads(data.read_text(encoding="utf-8"))}
    specs = build_workload("conversation", n=30, seed=Seeds(42, "5.1").derive("measure"), tokenizer=TOK,
                           dataset=data, dataset_version=DRAFT).specs
    assert all(s.prompt_text in prompts for s in specs)
    sent = {json.loads(line).get("prompt_hash") for d in proc["run_dirs"]
            for line in (pytester.path / "llmbench-report" / d / "records.jsonl").read_text().splitlines()}
    assert {s.prompt_hash for s in specs} <= sent
    html = (pytester.path / "llmbench-report" / "report.html").read_text(encoding="utf-8")
    assert "Dataset lengths against App. A.3.2" in html and "custom dataset" in html
    items = {i["id"]: i for i in proc["compliance"]["items"]}
    if "A.3.1-PARAM-1" in items:
        assert items["A.3.1-PARAM-1"]["status"] == "unmet" and "not identified" in items["A.3.1-PARAM-1"]["evidence"]


def test_usage_error_before_any_request(pytester: pytest.Pytester) -> None:
    """A file without assistant turns given in the ini file: exit 4 at configure, naming the ini entry, the
    file and its line; no run directory."""
    (pytester.path / "bad.json").write_text('[\n {"conversations": [{"from": "human", "value": "hi"}]}\n]\n')
    pytester.makeini("[pytest]\nllm_dataset =\n    conversation=bad.json\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    assert "ini llm_dataset (entry 1: conversation=bad.json)" in out and "bad.json:2: no conversation" in out
    assert "Traceback" not in out and not (pytester.path / "llmbench-report" / "runs").exists()
