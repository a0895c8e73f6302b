"""The embedded simulator answers for itself (sut/system.py): its special-token handling (§4.4.3),
its guardrail systems per configuration as 5.10 switches them (§4.8.1) and whether its guardrails
ran at their defaults (§4.8.2), with source ``declared`` naming it. Another server declares nothing,
so the same items need the tester's declaration; a user's file still wins."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pytest_llmbench.compliance import RunFacts, Status, effective_declarations, evaluate_test
from pytest_llmbench.simulator.config import SimConfig, guardrail_defaults
from pytest_llmbench.sut.system import SIMULATOR_GUARDRAIL_SYSTEMS, SUT, self_declarations, simulator_guardrails

SPECIAL = ("4.4.3-MUST-1", "4.4.3-MUST-2", "4.4.3-MUST-3")


def _sim(guardrails: str = "none", **config: Any) -> SUT:
    """An embedded SUT whose server_info is what the simulator's /admin/config answers."""
    info = {**SimConfig(guardrails=guardrails, **config).to_json(), "guardrail_defaults": guardrail_defaults()}
    return SUT("http://127.0.0.1:1/v1", "llmbench-sim", embedded=True, server_info=info)


def _decl(sut: SUT, tmp_path: Any, user: str | None = None) -> Any:
    path = None
    if user is not None:
        path = tmp_path / "decl.toml"
        path.write_text(user)
    settings = SimpleNamespace(declarations=path, rootdir=tmp_path)
    return effective_declarations(settings, self_declarations(sut))


def test_special_tokens_of_the_simulators_usage_counts_are_declared_by_it(tmp_path: Any) -> None:
    facts = RunFacts(counting_used={"A": 300})  # the server's usage counts were used (option A)
    res = evaluate_test("5.1", {}, facts, _decl(_sim(), tmp_path))
    for rid in SPECIAL:
        c = res[rid]
        assert c.status is Status.MET and c.source == "declared" and "embedded simulator" in c.reason, c
    assert "excluded" in res["4.4.3-MUST-1"].reason and "included" in res["4.4.3-MUST-2"].reason
    # a real server declares nothing about itself: only its operator knows
    other = SUT("http://10.0.0.1:8000/v1", "m", embedded=False)
    res = evaluate_test("5.1", {}, facts, _decl(other, tmp_path))
    assert all(res[rid].status is Status.NEEDS_DECLARATION for rid in SPECIAL)
    # the user's file overrides what the simulator says
    res = evaluate_test("5.1", {}, facts, _decl(_sim(), tmp_path, '[special_tokens]\nbos_eos = "included"\n'
                                                               'system_prompt = "separate"\ntool_call_format = "x"\n'))
    assert "included" in res["4.4.3-MUST-1"].reason and "decl.toml" in res["4.4.3-MUST-1"].reason


@pytest.mark.parametrize("modes, systems", [
    (("none",), "none"),
    (("input",), [SIMULATOR_GUARDRAIL_SYSTEMS["input"]]),
    (("none", "input", "output", "full"), [SIMULATOR_GUARDRAIL_SYSTEMS["input"], SIMULATOR_GUARDRAIL_SYSTEMS["output"]]),
])
def test_guardrail_systems_follow_the_configurations_that_ran(modes: tuple[str, ...], systems: Any) -> None:
    g = simulator_guardrails(*modes)
    assert g["systems"] == systems
    assert g["input_filter"] == ("on" if {"input", "full"} & set(modes) else "off")
    assert g["output_filter"] == ("on" if {"output", "full"} & set(modes) else "off")


def test_5_10_discloses_the_systems_it_switched_on_and_their_defaults(tmp_path: Any) -> None:
    """5.10's facts hold the filters of every configuration it ran (as its adjust_facts sets them):
    the systems are named (4.8.1-MUST-3) and the defaults stated by the simulator (4.8.2-SHOULD-1)."""
    facts = RunFacts(guardrails=simulator_guardrails("none", "input", "output", "full"), counting_used={"A": 1})
    res = evaluate_test("5.10", {}, facts, _decl(_sim("none"), tmp_path))
    assert res["4.8.1-MUST-3"].status is Status.MET
    assert SIMULATOR_GUARDRAIL_SYSTEMS["output"] in res["4.8.1-MUST-3"].reason
    c = res["4.8.2-SHOULD-1"]
    assert c.status is Status.MET and c.source == "declared" and "default settings" in c.reason
    assert "embedded simulator" in c.reason
    # a changed guardrail setting is not the default configuration: the simulator says so
    changed = evaluate_test("5.10", {}, facts, _decl(_sim("none", guardrail_refusal_rate=0.5), tmp_path))
    assert changed["4.8.2-SHOULD-1"].status is Status.UNMET
    # without the simulator's word (another server), the tester must declare it
    other = SUT("http://10.0.0.1:8000/v1", "m")
    assert evaluate_test("5.10", {}, facts, _decl(other, tmp_path))["4.8.2-SHOULD-1"].status is Status.NEEDS_DECLARATION
