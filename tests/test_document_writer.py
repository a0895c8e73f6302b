"""One writer of the results document (issue 45): the generate/update hook pair in the style of
pytest-benchmark's ``generate_json``/``update_json``, applied in a declared order, each procedure's
entry built once per session, secrets scrubbed last; the machine fingerprint's hook pair.

The plugin's hook implementations (its module and its session object) are registered with a pluggy
manager of their own, as pytest registers them, so no benchmark session has to run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pluggy
import pytest
from test_report import KEY_ENV, PLANTED_KEY, make_session

from pytest_llmbench import hookspecs, plugin
from pytest_llmbench.document import procedure
from pytest_llmbench.document.build import KEY_ORDER, build_document, generate_document
from pytest_llmbench.document.procedure import EntryCache
from pytest_llmbench.document.redact import REDACTED

pytest_plugins = ["pytester"]


class FakeGate:
    """What the plugin's comparison update asks of the gate; records what the document held then."""

    comparing = True

    def __init__(self) -> None:
        self.seen: list[str] = []

    def comparison(self, doc: dict[str, Any]) -> dict[str, Any]:
        self.seen = list(doc)
        return {"pairs": [], "note": "compared"}


def _hooks(result: Any, *others: Any, gate: Any = None) -> Any:
    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    pm.register(plugin.LLMBenchPlugin(None, SimpleNamespace(settings=result.settings), gate), "llmbench-session")
    for other in others:
        pm.register(other)
    return pm.hook


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(KEY_ENV, PLANTED_KEY)
    s = make_session(tmp_path)
    s.finished = 1_769_000_100.0
    return s


def test_the_plugin_writes_the_document_build_document_builds(session: Any) -> None:
    """No update of a user, no baseline: the plugin's writer and the pytest-free builder agree."""
    doc = plugin.write_document(_hooks(session), None, session)
    assert doc == build_document(session)
    assert json.dumps(doc) == json.dumps(build_document(session))  # key order included
    assert list(doc) == [k for k in KEY_ORDER if k in doc] and "headline" in doc and "comparison" not in doc


def test_updates_run_headline_first_then_a_user_s_then_the_comparison(session: Any) -> None:
    order: list[str] = []

    class User:
        @staticmethod
        @pytest.hookimpl  # pytest registers a conftest's hook unmarked; a bare pluggy manager wants the mark
        def pytest_llmbench_update_document(document: dict[str, Any]) -> None:
            order.append("user")
            assert "headline" in document and "comparison" not in document
            document["ci"] = {"job": f"token {PLANTED_KEY}"}  # a secret a hook wrote is scrubbed too

    gate = FakeGate()
    doc = plugin.write_document(_hooks(session, User(), gate=gate), None, session)
    assert order == ["user"] and "ci" in gate.seen and "headline" in gate.seen
    assert doc["comparison"] == {"pairs": [], "note": "compared"}
    assert list(doc)[-2:] == ["comparison", "ci"]  # the plugin's keys in their order, a user's after them
    assert doc["ci"]["job"] == f"token {REDACTED}" and PLANTED_KEY not in json.dumps(doc)


def test_a_generate_hook_replaces_the_plugin_s_document(session: Any) -> None:
    class Own:
        @staticmethod
        @pytest.hookimpl(tryfirst=True)
        def pytest_llmbench_generate_document(result: Any) -> dict[str, Any]:
            return {"procedures": [], "tests": [], "mine": len(result.results), "duration_s": 1.0,
                    "settings": {}, "capacity": {}}

    hook = _hooks(session, Own())
    assert plugin.gate_document(hook, None, session)["mine"] == len(session.results)
    doc = plugin.write_document(hook, None, session)  # the plugin's updates still apply, then the finish
    assert doc["mine"] == len(session.results) and doc["headline"]["tests"]["total"] == 0
    assert list(doc)[0] == "duration_s" and list(doc)[-1] == "mine"


def test_each_procedure_entry_is_built_once_per_session(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """--llm-compare assembles a document after every test: the measured parts come from the cache;
    a judged copy of a result (the session's, at its end) shares them and shows its own verdict."""
    built: list[str] = []
    measured = procedure._measured
    monkeypatch.setattr(procedure, "_measured", lambda r, d: built.append(r.procedure) or measured(r, d))
    cache = EntryCache()
    first = generate_document(session, cache)
    assert sorted(built) == sorted(r.procedure for r in session.results.values())
    again = generate_document(session, cache)
    assert len(built) == len(session.results) and again == first
    key, r = next(iter(session.results.items()))
    notes = [*r.compliance.notes, "judged over the session"]
    session.results[key] = dataclasses.replace(r, compliance=dataclasses.replace(r.compliance, notes=notes))
    judged = generate_document(session, cache)
    assert len(built) == len(session.results)
    entry = next(p for p in judged["procedures"] if p["key"] == key)
    assert entry["compliance"]["notes"][-1] == "judged over the session"
    assert entry["result"]["compliance"]["notes"][-1] == "judged over the session"
    session.results[key] = dataclasses.replace(r, runs=list(r.runs))  # another result: built anew
    generate_document(session, cache)
    assert len(built) == len(session.results) + 1


def test_every_document_gets_its_own_copy_of_the_cached_parts(session: Any) -> None:
    cache = EntryCache()
    a, b = generate_document(session, cache), generate_document(session, cache)
    a["procedures"][0]["result"]["plots"]["mine"] = 1
    a["procedures"][0]["figures"].clear()
    assert "mine" not in b["procedures"][0]["result"]["plots"] and b["procedures"][0]["figures"]
    assert generate_document(session, cache) == b


def test_the_machine_fingerprint_comes_from_its_hook_pair(tmp_path: Path) -> None:
    from pytest_llmbench.gate.sessiongate import SessionGate
    from pytest_llmbench.gate.storage import load_run, machine_fingerprint, save
    from pytest_llmbench.settings import Settings

    class User:
        @staticmethod
        @pytest.hookimpl
        def pytest_llmbench_update_machine_info(machine_info: dict[str, Any]) -> None:
            machine_info["gpu"] = "none"

    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    pm.register(User())
    info = plugin._machine_info(SimpleNamespace(hook=pm.hook))  # type: ignore[arg-type]
    gate = SessionGate(Settings(report=tmp_path / "rep"), machine_info=info)
    assert gate.machine == {**machine_fingerprint(), "gpu": "none"}
    base = load_run("base", Path(__file__).parent / "data" / "gate" / "store")
    stored = save(base.document, tmp_path / "store", samples=base.samples, name="m", commit="c", machine=gate.machine)
    assert stored.meta["machine"]["gpu"] == "none"
    assert json.loads((stored.path / "meta.json").read_text(encoding="utf-8"))["machine"] == gate.machine


CONFTEST = '''
def pytest_llmbench_update_document(document):
    document["ci"] = {"headline": "headline" in document, "comparison": "comparison" in document}


def pytest_llmbench_update_machine_info(machine_info):
    machine_info["rack"] = "r1"
'''
TEST = '''
import pytest

@pytest.mark.llm_procedure("5.1", requests=20, warmup_requests=3, warmup_tokens=100, warmup_probes=0,
                           max_output_tokens=16)
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


def test_a_conftest_s_hooks_update_the_document_and_the_machine_fingerprint(pytester: pytest.Pytester) -> None:
    """Through pytest: a conftest's update runs after the headline and before the comparison, its key is
    written after the plugin's; the stored session carries the conftest's machine fingerprint."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_t=TEST)
    common = ("-p", "no:randomly", "-p", "no:cacheprovider", "--llm-capacity", "rate=20")
    pytester.runpytest_subprocess(*common, "--llm-save", "base", timeout=600).assert_outcomes(passed=1)
    stored = json.loads((pytester.path / ".llmbench" / "0001_base" / "meta.json").read_text(encoding="utf-8"))
    assert stored["machine"]["rack"] == "r1"
    pytester.runpytest_subprocess(*common, "--llm-compare", "base", timeout=600).assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "llmbench-report" / "results.json").read_text(encoding="utf-8"))
    assert doc["ci"] == {"headline": True, "comparison": False}
    assert list(doc)[-2:] == ["comparison", "ci"] and doc["comparison"]["pairs"]
