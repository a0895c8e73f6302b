"""Typed declarations and declarations held against observations (issue 32): a boolean takes
true/false or {met, note}, an enum its choices, a statement a sentence (no negation), a table its
keys; a wrong value is a usage error naming the key and the file. Guardrails declared off, a
single-host clock and a disabled prefix cache are held against what the run observed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from factories import GOOD_DECLARATIONS, good_facts, make_record

from pytest_llmbench.common.records import ErrorType
from pytest_llmbench.compliance import Declarations, RecordAudit, RunFacts, Status, evaluate_test
from pytest_llmbench.compliance.declarations import DECLARATION_FACTS, TYPES
from pytest_llmbench.compliance.registry import DeclarationError
from pytest_llmbench.compliance.s4_7_clocks import endpoint_is_local
from pytest_llmbench.sut.system import SIMULATOR_DECLARATIONS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_model_loaded_false_as_a_string_is_a_usage_error_naming_key_and_file(tmp_path: Path) -> None:
    f = tmp_path / "decl.toml"
    f.write_text('model_loaded = "false"\n', encoding="utf-8")
    with pytest.raises(DeclarationError) as exc:
        Declarations.from_file(f)
    msg = str(exc.value)
    assert str(f) in msg and "model_loaded = 'false'" in msg
    assert "model_loaded = true, model_loaded = false or model_loaded = { met = true, note = \"...\" }" in msg


@pytest.mark.parametrize("key, value, why", [
    ("isolated_system", "no", "not a boolean"),
    ("isolated_system", "yes", "not a boolean"),
    ("guardrails_default", 1, "not a boolean"),
    ("model_loaded", {"met": "true"}, "needs met = true|false"),
    ("model_loaded", {"met": True, "reason": "x"}, "unknown: reason"),
    ("terminology", "", "a negation, not a statement"),
    ("publication_review", "n/a", "a negation, not a statement"),
    ("recovery_procedure", "None", "a negation, not a statement"),
    ("production_cross_check", True, "not a statement"),
    ("prefix_caching", "on", "not one of enabled, disabled"),
    ("guardrails", {"input_filter": "maybe", "output_filter": "off", "systems": "none"}, "not one of on, off"),
    ("hardware", "H100", "must be a table"),
    ("4.8-MUST-1", "no", "a negation"),
])
def test_a_value_of_the_wrong_type_names_key_file_and_form(key: str, value: object, why: str) -> None:
    with pytest.raises(DeclarationError) as exc:
        Declarations({key: value}, source="my-decl.yaml")
    msg = str(exc.value)
    assert msg.startswith(f"my-decl.yaml: {key}") and why in msg
    if key not in ("guardrails", "hardware"):
        assert "write " in msg  # the right form is shown


def test_every_fact_has_a_type() -> None:
    assert all(f["type"] in TYPES for f in DECLARATION_FACTS.values())
    booleans = {k for k, f in DECLARATION_FACTS.items() if f["type"] == "boolean"}
    assert {"model_loaded", "server_queue_drained", "prefix_cache_populated", "guardrails_default",
            "production_representative", "isolated_system"} <= booleans


def test_booleans_with_a_note_decide_by_met() -> None:
    decl = dict(GOOD_DECLARATIONS, model_loaded={"met": False, "note": "weights still streaming"},
                isolated_system={"met": True, "note": "dedicated node"})
    res = evaluate_test("5.8", {}, good_facts("5.8"), decl)
    assert res["4.5.1-MUST-1"].status is Status.UNMET and "weights still streaming" in res["4.5.1-MUST-1"].reason
    assert res["7.4-SHOULD-1"].holds and "dedicated node" in res["7.4-SHOULD-1"].reason
    # a requirement id: a statement is met, {met = false} is unmet
    res = evaluate_test("5.1", {}, RunFacts(), {"4.5.1-MUST-1": {"met": False, "note": "cold"}})
    assert res["4.5.1-MUST-1"].status is Status.UNMET


def test_the_simulator_and_the_examples_are_well_typed() -> None:
    Declarations(SIMULATOR_DECLARATIONS, source="embedded simulator")
    for f in sorted(EXAMPLES.glob("*.toml")):
        Declarations.from_file(f)


# ------------------------------------------------------------------ held against observations


def _refused(finish_reason: str | None = None, message: str = "") -> object:
    return make_record(error_type=ErrorType.REFUSED, finish_reason=finish_reason, error_message=message)


OFF = {"input_filter": "off", "output_filter": "off", "systems": "none"}


def test_guardrails_declared_off_with_a_content_filter_refusal_is_unmet() -> None:
    recs = [make_record(), _refused("content_filter", "finish_reason content_filter (§4.8.1)")]
    facts = dataclasses.replace(good_facts(), guardrails=None, records=RecordAudit.from_records(recs))
    res = evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, guardrails=OFF))
    for rid in ("4.8.1-MUST-1", "4.8.1-MUST-2"):
        c = res[rid]
        assert c.status is Status.UNMET and "declared guardrails." in c.reason and "content filter" in c.reason
        assert c.evidence["declared"] == OFF and c.evidence["refused_by_filter"] == {"finish_reason content_filter": 1}
    assert res["4.8-MUST-1"].fails
    # a policy error code counts the same
    recs = [_refused(None, "HTTP 400 policy refusal (content_policy_violation): blocked")]
    facts = dataclasses.replace(facts, records=RecordAudit.from_records(recs))
    assert evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, guardrails=OFF))["4.8.1-MUST-1"].status \
        is Status.UNMET


def test_a_model_refusal_is_reported_not_held_against_guardrails_off() -> None:
    recs = [make_record(), _refused(None, "refusal field in the response: 'I can't' (§4.8.1)")]
    facts = dataclasses.replace(good_facts(), guardrails=None, records=RecordAudit.from_records(recs))
    res = evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, guardrails=OFF))
    assert res["4.8.1-MUST-1"].holds and res["4.8.1-MUST-2"].holds
    assert res["4.8.1-MUST-4"].holds and "0 by a content filter, 1 by the model" in res["4.8.1-MUST-4"].reason


SINGLE = {"method": "single-host", "accuracy_ms": 0}


def _remote(host: str) -> RunFacts:
    f = good_facts()
    return dataclasses.replace(f, clock=dataclasses.replace(f.clock, single_host=False, sync_method=None),
                               endpoint_host=host)


def test_a_single_host_declaration_with_a_non_local_endpoint_is_unmet() -> None:
    facts = _remote("192.0.2.10")  # TEST-NET-1: never an address of this host, no lookup
    res = evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, clock_sync=SINGLE))
    for rid in ("4.7.2-MUST-1", "4.7.2-MUST-2"):
        c = res[rid]
        assert c.status is Status.UNMET, (rid, c.reason)
        assert "192.0.2.10 resolves to no address of this host" in c.reason
        assert c.evidence["declared"] == SINGLE and c.evidence["endpoint_host"] == "192.0.2.10"
    # declared NTP on the same endpoint is judged as before (accuracy)
    res = evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, clock_sync={"method": "ntp", "accuracy_ms": 2}))
    assert res["4.7.2-MUST-1"].holds


def test_a_single_host_declaration_on_a_local_address_is_confirmed() -> None:
    assert endpoint_is_local("127.0.0.1") and endpoint_is_local("::1") in (True, None)
    assert endpoint_is_local("192.0.2.10") is False and endpoint_is_local(None) is None
    res = evaluate_test("5.1", {}, _remote("127.0.0.2"), dict(GOOD_DECLARATIONS, clock_sync=SINGLE))
    assert res["4.7.2-MUST-2"].holds and "is an address of this host" in res["4.7.2-MUST-2"].reason


def test_prefix_caching_declared_disabled_with_cached_tokens_is_unmet() -> None:
    facts = dataclasses.replace(good_facts(), prefix_caching="enabled", prefix_caching_source=(
        "measured: the server reported cached prompt tokens for 3 of 20 measured requests (max 64)"))
    c = evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, prefix_caching="disabled"))["5.1.2-MUST-13"]
    assert c.status is Status.UNMET and "declared prefix_caching = disabled" in c.reason and "cached" in c.reason
    assert c.evidence == {"declared": "disabled", "observed": "enabled"}
    ok = evaluate_test("5.1", {}, facts, dict(GOOD_DECLARATIONS, prefix_caching="enabled"))["5.1.2-MUST-13"]
    assert ok.holds


def test_the_clients_refusal_messages_are_classified_by_their_signal() -> None:
    """content_filter_signal reads what the client records: its policy-error message and finish reason."""
    from pytest_llmbench.client.stream import _stream_error
    from pytest_llmbench.compliance.facts import content_filter_signal
    from pytest_llmbench.measure.refusals import RefusalPolicy, refusal_reason

    err = _stream_error({"code": "content_filter", "message": "blocked"}, RefusalPolicy())
    assert content_filter_signal(make_record(error_type=err.error_type, error_message=err.message)) == \
        "policy error code"
    why = refusal_reason("content_filter", None, "", RefusalPolicy())
    assert content_filter_signal(_refused("content_filter", why)) == "finish_reason content_filter"
    why = refusal_reason("stop", "I cannot help with that", "", RefusalPolicy())
    assert content_filter_signal(_refused("stop", why)) is None  # the model refused by itself
