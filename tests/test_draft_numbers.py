"""One home for the draft's numbers (issue 29): data/draft.yaml and data/profiles.yaml are read, by
name, by the parameter defaults, the profiles and the compliance thresholds; no code writes them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

import pytest_llmbench.procedures  # noqa: F401  (registers every procedure)
from pytest_llmbench.common import draft
from pytest_llmbench.procedures.base import get_procedure, procedure_ids

PKG = Path(draft.__file__).resolve().parents[1]
DATA = PKG / "data"


def _code() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(PKG.rglob("*.py")))


def test_every_draft_number_has_a_section_and_is_read_by_code() -> None:
    code = _code()
    profiles = (DATA / "profiles.yaml").read_text(encoding="utf-8")
    items = yaml.safe_load((DATA / "compliance_items.yaml").read_text(encoding="utf-8"))["items"]
    by_item = {d["draft"] for d in items.values() if "draft" in d}  # read by engine.item(rid)["draft"]
    in_verdict = {n for ns in draft.minimums().values() for n in ns}  # read by compliance.verdict (issue 32)
    unread = [n for n in draft.names() if f'"{n}"' not in code and f"draft:{n}" not in profiles and n not in by_item
              and n not in in_verdict]
    assert not unread, f"numbers of data/draft.yaml read by no code: {unread}"
    for n in draft.names():
        assert re.fullmatch(r"§[0-9A-C]+(\.[0-9]+)*", draft.section(n)), n


def test_every_compliance_threshold_is_read_by_code() -> None:
    code = _code()
    items = yaml.safe_load((DATA / "compliance_items.yaml").read_text(encoding="utf-8"))
    unread = [n for n in items["thresholds"] if f'"{n}"' not in code]
    assert not unread, f"thresholds of data/compliance_items.yaml read by no code: {unread}"
    lists = [n for n in items.get("lists", {}) if f'"{n}"' not in code]
    assert not lists, f"lists of data/compliance_items.yaml read by no code: {lists}"
    twins = {"ntp_max_s", "warmup_min_requests", "warmup_min_output_tokens", "probe_max_variation",
             "ttft_p99_min_requests", "ttft_p999_min_requests", "throughput_level_recommended_s"}
    assert not twins & set(items["thresholds"]), "a draft number is back among the compliance thresholds"


def test_draft_keys_named_by_item_data_exist() -> None:
    items = yaml.safe_load((DATA / "compliance_items.yaml").read_text(encoding="utf-8"))["items"]
    for rid, d in items.items():
        if "draft" in d:
            draft.value(d["draft"])  # raises DraftError for a name data/draft.yaml lacks


def test_profiles_override_known_parameters_of_every_procedure() -> None:
    raw = yaml.safe_load((DATA / "profiles.yaml").read_text(encoding="utf-8"))
    assert {k for k in raw if not str(k).startswith("_")} == set(procedure_ids())
    for pid in procedure_ids():
        proc = get_procedure(pid)
        names = {f.name for f in dataclasses.fields(proc.params_type)}
        for prof, over in proc.profiles.items():
            assert set(over) <= names, (pid, prof, set(over) - names)
            proc.make_params(prof, {})  # every profile builds valid parameters


def test_parameter_defaults_are_the_draft_numbers() -> None:
    for pid in procedure_ids():
        fields = {f.name: f.default for f in dataclasses.fields(get_procedure(pid).params_type)}
        assert fields["warmup_requests"] == draft.value("warmup.min_requests"), pid
        assert fields["warmup_tokens"] == draft.value("warmup.min_output_tokens"), pid
    assert get_procedure("5.1").make_params("standard", {}).requests == draft.value("ttft.p999_min_requests")
    assert get_procedure("5.2").make_params("standard", {}).level_duration_s == draft.value("throughput.level_min_s")
    assert get_procedure("5.2").make_params("full", {}).level_duration_s == draft.value(
        "throughput.level_recommended_s")
    assert get_procedure("5.6").make_params("standard", {}).requests_per_class == draft.value(
        "fairness.min_requests_per_class")


def test_a_changed_draft_number_changes_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compliance thresholds read the data file: a different warm-up minimum decides differently."""
    from pytest_llmbench.compliance import Status, decide

    assert decide("5.1.2-MUST-3", successful=900, ttft_samples=900).status is Status.UNMET
    numbers = dict(draft._numbers())
    numbers["ttft.p99_min_requests"] = {**numbers["ttft.p99_min_requests"], "value": 800}
    monkeypatch.setattr(draft, "_numbers", lambda: numbers)
    c = decide("5.1.2-MUST-3", successful=900, ttft_samples=900)
    assert c.status is Status.MET and "900 >= 800" in c.reason


#: literals of the draft's numbers that must not come back in code (the data file holds them)
_LITERALS = re.compile(r"^\s*[A-Za-z_][A-Za-z_0-9]*(: [^=]+)? = (100|10_000|10000|1000|60\.0|300\.0|120\.0|500|20)\b")


def test_no_draft_minimum_is_a_code_literal() -> None:
    hits = []
    for path in [*(PKG / "procedures").glob("*.py"), *(PKG / "compliance").glob("*.py"),
                 PKG / "loadgen" / "warmup.py", *(PKG / "measure" / "stats").glob("*.py")]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "probe" not in line and _LITERALS.match(line) and ("warmup" in line or "MIN" in line or "min" in line or "duration" in line
                                          or "requests" in line):
                hits.append(f"{path.name}:{n}: {line.strip()}")
    assert not hits, hits
