"""Every MUST and SHOULD the engine decides can be met and can be unmet (no check that cannot fail).

For each verdict-setting item an evaluator answers, :data:`CASES` gives the facts under which it
holds and a change of facts (or of declarations: declared vs undeclared) under which it fails.
Items only a procedure can observe (its runs, tables, plots) are decided by a registered decider
(``compliance.decide``) from the observations the procedure passes; :data:`DECIDER_CASES` gives the
observations under which each is met and a change under which it is unmet. The tests fail when a
verdict-setting item that can apply to some procedure has neither an evaluator case nor a decider
case, so a new item cannot arrive without an unmet case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from factories import GOOD_DECLARATIONS, all_procedure_checks, good_facts

from pytest_llmbench.compliance import (
    RunFacts,
    Status,
    applicable_items,
    draft_tests,
    engine,
    evaluate_test,
    procedure_items,
    registry,
    timestamp_format_of,
)
from pytest_llmbench.compliance.facts import RecordAudit

Change = dict[str, Any]


def _apply(f: RunFacts, change: Change) -> RunFacts:
    """``{"load.rate": 0, "workload": {...}}`` -> a copy of ``f`` with those (nested) fields set."""
    f = dataclasses.replace(f, load=dataclasses.replace(f.load), clock=dataclasses.replace(f.clock),
                            warmup=dataclasses.replace(f.warmup))
    for path, value in change.items():
        obj: Any = f
        *head, last = path.split(".")
        for part in head:
            obj = getattr(obj, part)
        setattr(obj, last, value)
    return f


REMOTE: Change = {"clock.single_host": False, "clock.sync_method": None}
ENGINE: Change = {"sut_boundary": "model-engine", "workload": {"name": "synthetic-uniform"},
                  "session_workloads": ("synthetic-uniform",)}
CLOSED: Change = {"load.model": "closed", "load.concurrency": 4, "load.resubmit_gap_p99_s": 0.001,
                  "load.resubmit_n": 100}
CUSTOM = {"name": "my-chat", "custom": True,
          "input_length": {"type": "normal", "params": {"mean": 100}, "unit": "tokens", "tokenizer": "cl100k_base"},
          "output_length": {"type": "fixed", "params": {"value": 50}, "control": "max_tokens", "unit": "tokens"},
          "content": {"domain": "chat", "language": "en", "system_prompt": False, "system_prompt_len": 0},
          "prefix_sharing": {"fraction": 0.0, "length_distribution": "none"}}
COLD: Change = {"warmup.cold_start": True, "warmup.requests": 0, "warmup.output_tokens": 0}
SERVER_COUNTS: Change = {"counting_used": {"A": 20}}


def _drop(*keys: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda d: {k: v for k, v in d.items() if k not in keys}


def _set(**kv: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda d: {**d, **kv}


@dataclasses.dataclass
class Case:
    """Facts for one item: ``context`` makes it apply and hold; ``unmet`` (facts) or ``decl`` breaks it."""

    test: str = "5.1"
    context: Change = dataclasses.field(default_factory=dict)
    unmet: Change = dataclasses.field(default_factory=dict)
    decl: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    context_decl: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _audit(**missing: int) -> RecordAudit:
    return dataclasses.replace(good_facts().records, **missing)  # type: ignore[arg-type]


CASES: dict[str, Case] = {
    "abstract-SHOULD-1": Case(decl=_drop("terminology")),
    "1-SHOULD-1": Case(decl=_drop("terminology")),
    "4.1-MUST-1": Case(unmet={"boundary_declared_before_start": None}),
    "4.2-MUST-1": Case(unmet={"load.lag_inflight_rho": 0.7}),
    "4.2.1-MUST-1": Case(unmet={"clock.resolution_ns": 2e6}),
    "4.2.1-SHOULD-1": Case(unmet={"clock.resolution_ns": 5e3}),
    "4.2.2-MUST-1": Case(unmet={"streaming": False, "protocol": None}),
    "4.2.2-MUST-2": Case(unmet={"records": _audit(missing_chunk_times=2)}),
    "4.2.3-MUST-1": Case(unmet={"load.send_lag_n": 0}),
    "4.2.3-MUST-2": Case(unmet={"load.send_lag_n": 0}),  # via 4.2.3-MUST-1? no: see test below
    "4.2.3-SHOULD-1": Case(),
    "4.2.4-MUST-1": Case(context=CLOSED, unmet={"load.resubmit_gap_p99_s": 0.05}),
    "4.2.5-MUST-1": Case(unmet={"load.send_lag_p99_s": 0.2}),
    "4.2.5-MUST-2": Case(),
    "4.2.6-MUST-1": Case(unmet={"records": _audit(missing_submit=1)}),
    "4.2.6-MUST-2": Case(unmet={"records": _audit(missing_first_token=1)}),
    "4.2.6-MUST-3": Case(unmet={"records": _audit(missing_chunk_times=1)}),
    "4.2.6-MUST-4": Case(unmet={"records": _audit(missing_final=1)}),
    "4.2.6-MUST-5": Case(unmet={"records": _audit(missing_input_tokens=1)}),
    "4.2.6-MUST-6": Case(unmet={"records": _audit(missing_output_tokens=1)}),
    "4.2.6-MUST-7": Case(unmet={"records": _audit(missing_status=1)}),
    "4.3-MUST-1": Case(context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "content": None}}),
    "4.3.1-MUST-1": Case(context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "input_length": None}}),
    "4.3.1-MUST-2": Case(context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "output_length": None}}),
    "4.3.1-MUST-3": Case(context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "content": None}}),
    "4.3.1-MUST-4": Case(context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "prefix_sharing": None}}),
    "4.3.2-MUST-1": Case(context=ENGINE, unmet={"session_workloads": ("conversation",),
                                                "workload": {"name": "conversation"}}),
    "4.3.2-SHOULD-1": Case(unmet={"session_workloads": ("synthetic-uniform",),
                                  "workload": {"name": "synthetic-uniform"}}),
    "4.3.2-MUST-2": Case(test="5.9", unmet={"workload": {"name": "synthetic-uniform"}}),
    "4.3.3-MUST-1": Case(unmet={"seed": None}),
    "4.3.3-MUST-2": Case(unmet={"seed": None}),
    "4.3.3-SHOULD-1": Case(unmet={"sequence_hash": None, "generator": None}),
    "4.3.3-MUST-3": Case(decl=_drop("dataset")),
    "4.4.1-MUST-1": Case(unmet={"tokenizer": {**good_facts().tokenizer, "version": ""}}),
    "4.4.1-MUST-2": Case(unmet={"tokenizer": {**good_facts().tokenizer, "vocab_size": None}}),
    "4.4.1-MUST-3": Case(unmet={"tokenizer": {**good_facts().tokenizer, "source": ""}}),
    "4.4.2-MUST-1": Case(unmet={"counting_used": None}),
    "4.4.2-SHOULD-1": Case(unmet=SERVER_COUNTS),
    "4.4.3-MUST-1": Case(context=SERVER_COUNTS, context_decl=_set(special_tokens={
        "bos_eos": "excluded", "system_prompt": "included", "tool_call_format": "none"}), decl=_drop("special_tokens")),
    "4.4.3-MUST-2": Case(context=SERVER_COUNTS, context_decl=_set(special_tokens={
        "bos_eos": "excluded", "system_prompt": "included", "tool_call_format": "none"}), decl=_drop("special_tokens")),
    "4.4.3-MUST-3": Case(context=SERVER_COUNTS, context_decl=_set(special_tokens={
        "bos_eos": "excluded", "system_prompt": "included", "tool_call_format": "none"}), decl=_drop("special_tokens")),
    "4.5.1-MUST-1": Case(decl=_drop("model_loaded")),
    "4.5.1-MUST-2": Case(unmet={"warmup.requests": 20, "warmup.output_tokens": 500}),
    "4.5.1-MUST-3": Case(unmet={"warmup.drained": False, "warmup.server_queue_drained": False}),
    "4.5.1-MUST-4": Case(test="5.7", context={"prefix_caching": "enabled", "prefix_cache_under_test": True,
                                              "warmup.prefix_populated": True},
                         unmet={"warmup.prefix_populated": False}),
    "4.5.2-SHOULD-1": Case(unmet={"warmup.probes_before": ()}),
    "4.5.2-SHOULD-2": Case(unmet={"warmup.probes_after": (0.10, 0.15, 0.11)}),
    "4.5.3-MUST-1": Case(context=COLD, unmet={"warmup.requests": 5}),
    "4.5.3-MUST-2": Case(context=COLD, unmet={"warmup.cold_start": False}),
    "4.6.1-SHOULD-1": Case(unmet={"protocol": "websocket"}),
    "4.6.1-SHOULD-2": Case(context={**ENGINE, "protocol": "grpc"}, unmet={"protocol": "sse"}),
    "4.6.2-MUST-1": Case(unmet={"protocol": None}),
    "4.6.2-MUST-2": Case(unmet={"single_token_chunk_fraction": None}),
    "4.6.2-MUST-3": Case(unmet={"itl_method": None}),
    "4.6.3-MUST-1": Case(unmet={"itl_method": None}),
    "4.6.3-SHOULD-1": Case(unmet={"server_token_timestamps": True, "itl_method": "chunk"}),
    "4.7.1-SHOULD-1": Case(context=ENGINE, unmet={"clock.single_host": False}),
    "4.7.2-MUST-1": Case(context=REMOTE, decl=_set(clock_sync={"method": "ntp", "accuracy_ms": 25})),
    "4.7.2-SHOULD-1": Case(context={**REMOTE, "clock.cross_host_intervals": True},
                           context_decl=_set(clock_sync={"method": "ptp", "accuracy_ms": 0.01}),
                           decl=_set(clock_sync={"method": "ntp", "accuracy_ms": 5})),
    "4.7.2-MUST-2": Case(context=REMOTE, context_decl=_set(clock_sync={"method": "ntp", "accuracy_ms": 2}),
                         decl=_drop("clock_sync")),
    "4.7.3-SHOULD-1": Case(context={**REMOTE, "network_rtt_s": 0.02},
                           context_decl=_set(clock_sync={"method": "ntp", "accuracy_ms": 2}),
                           unmet={"network_rtt_s": None}),
    "4.7.3-MUST-1": Case(unmet={"latency_adjustment": {"method": "", "value": None}}),
    # the format is read off the run's written first send time (timestamp_format_of)
    "4.7.4-MUST-1": Case(unmet={"clock.timestamp_sample": "2026-11-22T06:52:18Z",
                                "clock.timestamp_format": timestamp_format_of("2026-11-22T06:52:18Z")}),
    "4.7.4-SHOULD-1": Case(unmet={"clock.timestamp_format": "unix_ns", "clock.timestamp_sample": "1763794338123456789"}),
    "4.8-MUST-1": Case(unmet={"guardrails": None}, decl=_drop("guardrails")),
    "4.8.1-MUST-1": Case(unmet={"guardrails": None}, decl=_drop("guardrails")),
    "4.8.1-MUST-2": Case(unmet={"guardrails": None}, decl=_drop("guardrails")),
    "4.8.1-MUST-3": Case(unmet={"guardrails": None}, decl=_drop("guardrails")),
    "4.8.1-MUST-4": Case(unmet={"records": None}),
    "4.8.2-SHOULD-1": Case(decl=_drop("guardrails_default")),
    # binds only when a guardrail is off (not applicable otherwise, issue 48)
    "4.8.2-MUST-1": Case(context={"guardrails": {"input_filter": "off", "output_filter": "on", "systems": []}},
                         unmet={"guardrails": None}, decl=_drop("guardrails")),
    "4.8.2-SHOULD-2": Case(unmet={"session_tests": ("5.1",)}),
    "5.1.2-MUST-1": Case(context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "content": None}}),
    "5.1.2-MUST-5": Case(unmet={"load.model": None}),
    "5.1.2-MUST-6": Case(unmet={"load.rate": None}),
    "5.1.2-MUST-7": Case(unmet={"load.arrival": None}),
    "5.1.2-MUST-8": Case(unmet={"load.arrival": "uniform"}),
    "5.1.2-MUST-9": Case(context=CLOSED, unmet={"load.concurrency": None}),
    "5.1.2-MUST-10": Case(unmet={"sut_boundary": None}),
    "5.1.2-MUST-11": Case(decl=_drop("model")),
    "5.1.2-MUST-12": Case(decl=_drop("hardware")),
    "5.1.2-MUST-13": Case(unmet={"prefix_caching": None}),
    "5.2.2-MUST-1": Case(test="5.2", context={"workload": CUSTOM}, unmet={"workload": {**CUSTOM, "content": None}}),
    "5.2.2-MUST-3": Case(test="5.2", unmet={"load.model": None}),
    "5.3.2-MUST-1": Case(test="5.3", unmet=CLOSED),
    "5.4.2-SHOULD-1": Case(test="5.4", unmet={"workload": {"name": "long-context"}}),
    "5.5.2-SHOULD-1": Case(test="5.5", unmet={"workload": {"name": "long-context"}}),
    "5.6.2-MUST-1": Case(test="5.6", unmet={"workload": {"name": "synthetic-uniform"}}),
    "5.7.2-SHOULD-1": Case(test="5.7", unmet={"workload": {"name": "conversation"}}),
    "5.8.2-SHOULD-1": Case(test="5.8", unmet={"workload": {"name": "conversation"}}),
    "5.9.2-MUST-1": Case(test="5.9", unmet={"workload": {"name": "conversation"}}),
    "5.10.2-SHOULD-1": Case(test="5.10", unmet={"workload": {"name": "synthetic-uniform"}}),
    "7.1-SHOULD-1": Case(decl=_drop("publication_review")),
    "7.2-SHOULD-1": Case(decl=_drop("production_cross_check")),
    "7.4-SHOULD-1": Case(test="5.8", decl=_drop("isolated_system")),
    "7.4-SHOULD-2": Case(test="5.8", decl=_drop("recovery_procedure")),
}
# capabilities: met by this run's data when exercised (unmet when the data contradicts them), else
# tool-verified by a named plugin test (test_tool_verified_items_name_tests_that_exist)
CASES["4.2.3-MUST-2"] = Case(context={"load.arrival_fit_p": 0.4}, unmet={"load.arrival_fit_p": 1e-9})
CASES["4.2.3-SHOULD-1"] = Case(context={"load.arrival": "uniform", "load.arrival_fit_p": 0.4,
                                        "load.capabilities": ("absolute_schedule", "async", "open_loop", "uniform")},
                               unmet={"load.arrival_fit_p": 1e-9})
CASES["4.2.5-MUST-2"] = Case(context={**CLOSED, "load.max_inflight": 4}, unmet={"load.max_inflight": 0,
                                                                               "load.capabilities": ("closed_loop",)})
CASES["4.4.2-SHOULD-1"] = Case(context={"compared": True}, unmet=SERVER_COUNTS)
CASES["4.5.3-MUST-2"] = Case(context=COLD, unmet={"warmup.requests": 5})
CASES["4.6.3-MUST-1"] = Case(test="5.4", unmet={"itl_method": None})
CASES["4.6.3-SHOULD-1"] = Case(test="5.4", context={"itl_method": "server", "server_token_timestamps": True},
                               unmet={"itl_method": "chunk"})
SYNCED = _set(clock_sync={"method": "ntp", "accuracy_ms": 2})
CASES["4.7.2-MUST-1"] = Case(context=REMOTE, context_decl=SYNCED, decl=_set(clock_sync={"method": "ntp",
                                                                                           "accuracy_ms": 25}))
CASES["4.7.3-MUST-1"] = Case(context={**REMOTE, "latency_adjustment": {"method": "RTT/2 subtracted", "value": 0.004}},
                             context_decl=SYNCED, unmet={"latency_adjustment": {"method": "", "value": None}})


#: decider items: (observations under which the item is met, the change under which it is unmet)
DECIDER_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "5.1.2-MUST-2": ({"planned": 10_000, "sent": 10_000}, {"sent": 9_000}),
    "5.1.2-MUST-3": ({"successful": 1000, "ttft_samples": 975}, {"successful": 999, "ttft_samples": 999}),
    "5.1.2-MUST-4": ({"successful": 10_000, "ttft_samples": 10_000}, {"successful": 9_999, "ttft_samples": 9_990}),
    "5.1.3-MUST-1": ({"pre_content": 10, "requests": 100, "noted": True}, {"noted": False}),
    "5.1.4-MUST-1": ({"reported": {f"TTFT P{q}": "12.0 ms" for q in ("50", "90", "95", "99", "99.9")}},
                     {"reported": {f"TTFT P{q}": "12.0 ms" if q != "99.9" else "n/a" for q in
                                   ("50", "90", "95", "99", "99.9")}}),
    "5.1.4-MUST-2": ({"n_ok": 1000, "notes": ["sample count n=1000 successful measured requests"]},
                     {"notes": ["TTFT = first content token"]}),
    "5.1.4-SHOULD-1": ({"buckets": ["0-256", "256-512"]}, {"buckets": ["0-100", "100-512"]}),
    "5.1.5-SHOULD-1": ({"rows": ["Requests", "TTFT P50", "TTFT P90", "TTFT P95", "TTFT P99", "TTFT P99.9",
                                 "TTFT Mean", "TTFT Min", "TTFT Max"]}, {"rows": ["Requests", "TTFT P50"]}),
    "5.1.5-SHOULD-2": ({"samples": 1000}, {"samples": 0}),
    **{f"5.1.5-MUST-{i}": ({"line": "gateway at http://127.0.0.1:8000", "what": "summary line", "source": "parameter"},
                           {"line": None}) for i in (1, 3, 4, 5, 6)},
    **{f"5.1.5-MUST-{i}": ({"line": "declared value (decl.toml)", "what": "summary line", "key": "model, hardware",
                            "source": "declared"}, {"line": None}) for i in (2, 7, 8)},
    "5.2.2-MUST-2": ({"level_duration_s": 300.0, "send_windows_s": [300.0, 301.0]}, {"send_windows_s": []}),
    "5.2.2-SHOULD-1": ({"send_windows_s": [300.2, 299.5]}, {"send_windows_s": [300.2, 60.0]}),
    "5.2.2-MUST-4": ({"loop": "open", "start": 1.0, "stop": 64.0, "step": None}, {"start": 0.0}),
    "5.2.2-MUST-5": ({"loop": "closed", "start": 1, "stop": 256, "step": 8}, {"stop": 0}),
    "5.4.2-MUST-1": ({"min_output_tokens": 50, "ok_requests": 100, "short_requests": 0, "shortest": 50},
                     {"short_requests": 3, "shortest": 12}),
    "5.4.2-SHOULD-2": ({"fractions": [0.25, 0.5, 0.75, 0.9]}, {"fractions": [0.5]}),
    "5.4.3-MUST-1": ({"checked": 100, "mismatched": 0}, {"mismatched": 1}),
    "5.6.2-SHOULD-1": ({"fraction": 0.8, "rate": None, "queue_growing": False}, {"queue_growing": True}),
    "5.7.2-MUST-1": ({"ran": ["disabled", "enabled"], "state_off": False, "state_on": True},
                     {"state_off": None, "state_on": None}),
    "7.4-SHOULD-3": ({"sampled": True, "stop_rule": "stops at the first failing level"}, {"sampled": False}),
}


def verdict_items() -> list[str]:
    """MUST/SHOULD items an evaluator answers and that can apply to some procedure (not §6: issue 14)."""
    return [rid for rid in _procedure_verdict_items() if rid in engine.EVALUATORS]


def _procedure_verdict_items() -> list[str]:
    """Every MUST/SHOULD that can apply to some procedure (5.1–5.10)."""
    applies = {req.id for t in draft_tests() if t != "6" for req, _ in applicable_items(t)}
    return [r.id for r in registry() if r.in_verdict and r.id in applies]


def decider_items() -> list[str]:
    """MUST/SHOULD items that can apply to some procedure and that no evaluator answers (the §6
    comparison's own items, which bind a compared run, belong to the comparison: issue 14)."""
    return [rid for rid in _procedure_verdict_items()
            if rid not in engine.EVALUATORS and registry()[rid].applies_to != "6"]


def _judge(case: Case, change: Change, decl_change: Callable[[dict[str, Any]], dict[str, Any]] | None) -> Any:
    facts = _apply(good_facts(case.test), {**case.context, **change})
    decl = dict(GOOD_DECLARATIONS)
    if case.context_decl:
        decl = case.context_decl(decl)
    if decl_change:
        decl = decl_change(decl)
    return evaluate_test(case.test, all_procedure_checks(case.test), facts, decl)


def test_every_verdict_item_has_a_case() -> None:
    missing = sorted(set(verdict_items()) - set(CASES))
    assert not missing, f"verdict-setting items without a met/unmet case: {missing}"


@pytest.mark.parametrize("rid", verdict_items())
def test_item_can_be_met_and_unmet(rid: str) -> None:
    case = CASES[rid]
    met = _judge(case, {}, None)[rid]
    assert met.status is Status.MET, f"{rid} not met in its met case: {met.reason}"
    assert met.reason and met.source not in ("", "none", "not-applicable"), met
    assert case.unmet or case.decl, f"{rid}: no unmet case"
    unmet = _judge(case, case.unmet, case.decl)[rid]
    assert unmet.fails, f"{rid} still {unmet.status.value} in its unmet case: {unmet.reason}"
    if case.decl is not None and not case.unmet and unmet.status is Status.NEEDS_DECLARATION:
        assert unmet.key and unmet.fix == f"declare {unmet.key}", unmet  # undeclared: names the key


def test_every_procedure_item_has_a_decider_and_a_case() -> None:
    """Each verdict-setting item no evaluator answers is decided by compliance from observations, with a case."""
    items = decider_items()
    assert not set(items) - set(engine.DECIDERS), f"procedure items without a decider: {set(items) - set(engine.DECIDERS)}"
    missing = sorted(set(items) - set(DECIDER_CASES))
    assert not missing, f"procedure items without a met/unmet case: {missing}"


@pytest.mark.parametrize("rid", decider_items())
def test_procedure_item_can_be_met_and_unmet(rid: str) -> None:
    met_obs, change = DECIDER_CASES[rid]
    met = engine.decide(rid, **met_obs)
    assert met.status is Status.MET, f"{rid} not met in its met case: {met.reason}"
    assert met.reason and met.source not in ("", "none", "not-applicable"), met
    assert change, f"{rid}: no unmet case"
    unmet = engine.decide(rid, **{**met_obs, **change})
    assert unmet.fails, f"{rid} still {unmet.status.value} in its unmet case: {unmet.reason}"
    assert unmet.reason, unmet


def test_procedures_decide_their_items_through_compliance() -> None:
    """No procedure builds the check of a decider item itself (it passes observations to ``decide``)."""
    import re
    from pathlib import Path

    src = Path(engine.__file__).resolve().parents[1] / "procedures"
    for path in sorted(src.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        built = {m.group(1) for m in re.finditer(r'Check(?:\.\w+)?\(\s*"([^"]+)"', text)}
        assert not built & set(engine.DECIDERS), (path.name, sorted(built & set(engine.DECIDERS)))


def test_timestamp_format_is_read_off_the_written_text() -> None:
    assert timestamp_format_of("2026-11-22T06:52:18.123Z") == "iso8601_ms"
    assert timestamp_format_of("1763794338123") == "unix_ms"
    assert timestamp_format_of("2026-11-22T06:52:18Z") is None and timestamp_format_of(None) is None


def test_tool_verified_items_name_tests_that_exist() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for cap, node in engine.item_data()["tool_tests"].items():
        path, _, name = node.partition("::")
        assert f"def {name}(" in (root / path).read_text(encoding="utf-8"), (cap, node)


def test_procedure_items_are_left_to_procedures() -> None:
    """Items no evaluator answers are the procedures' (their tests cover met and unmet)."""
    for t in draft_tests()[:-1]:
        assert not set(procedure_items(t)) & set(engine.EVALUATORS)


def test_cross_host_intervals_come_from_the_hosts_that_timed_the_records() -> None:
    """4.7.2-SHOULD-1 reads which hosts timed the run (procedures/facts.load_hosts), not a literal."""
    import socket
    from types import SimpleNamespace

    from pytest_llmbench.procedures.facts import load_hosts

    def run(sharding: Any) -> Any:
        return SimpleNamespace(load=SimpleNamespace(parameters={"sharding": sharding} if sharding else {}))

    assert load_hosts([run(None)]) == {socket.gethostname()}
    one = {"hosts": ["a"], "parent_host": "a"}
    two = {"hosts": ["a", "b"], "parent_host": "a"}
    assert load_hosts([run(one), run(one)]) == {"a"}
    assert load_hosts([run(one), run(two)]) == {"a", "b"}


def test_prefix_warmup_item_applies_only_where_the_prefix_cache_is_under_test() -> None:
    """4.5.1-MUST-4 ("when prefix caching is on and under test"): not applicable to 5.1 whatever the cache
    state; under test, the state comes from the SUT or else the ``prefix_caching`` declaration."""
    case = Case(test="5.7")

    def item(change: Change, **decl: Any) -> Any:
        return _judge(case, change, _set(**decl) if decl else None)["4.5.1-MUST-4"]

    in_5_1 = evaluate_test("5.1", all_procedure_checks("5.1"), _apply(good_facts("5.1"), {"prefix_caching": None}),
                           dict(GOOD_DECLARATIONS))["4.5.1-MUST-4"]
    assert in_5_1.status is Status.NOT_APPLICABLE, in_5_1
    tested = {"prefix_caching": None, "prefix_cache_under_test": True, "warmup.prefix_populated": True}
    assert item(tested, prefix_caching="enabled").status is Status.MET
    assert item(tested, prefix_caching="disabled").status is Status.NOT_APPLICABLE
    assert item({**tested, "warmup.prefix_populated": False}, prefix_caching="enabled").fails
    assert item({**tested, "prefix_caching": "enabled", "warmup.prefix_populated": False}).fails


def test_prefix_caching_state_is_measured_from_cached_tokens() -> None:
    """5.1.2-MUST-13: a server that reports cached prompt tokens (repeated warm-up probes, or any measured
    request) has prefix caching enabled, measured; none proves nothing and leaves it to the declaration."""
    from types import SimpleNamespace

    from pytest_llmbench.loadgen.warmup import ProbeResult
    from pytest_llmbench.procedures.facts import prefix_cache_observed

    def probe(cached: int | None) -> ProbeResult:
        return ProbeResult("after", True, 1.0, 0.1, cached_tokens=cached)

    warm = SimpleNamespace(probes_before=[probe(0)], probes_after=[probe(426), probe(426), probe(None)])
    recs = [SimpleNamespace(cached_tokens=c) for c in (0, None, 0)]
    state, source = prefix_cache_observed(warm, recs)  # type: ignore[arg-type]
    assert state == "enabled" and source.startswith("measured") and "2 repeated warm-up probes (max 426)" in source
    cold = SimpleNamespace(probes_before=[probe(0)], probes_after=[probe(None)])
    assert prefix_cache_observed(cold, recs) == (None, None)  # type: ignore[arg-type]
    hit = [SimpleNamespace(cached_tokens=c) for c in (0, 12, 0)]
    assert "1 of 3 measured requests (max 12)" in prefix_cache_observed(None, hit)[1]  # type: ignore[arg-type,operator]
    facts = _apply(good_facts("5.1"), {"prefix_caching": state, "prefix_caching_source": source})
    check = evaluate_test("5.1", all_procedure_checks("5.1"), facts, _drop("prefix_caching")(dict(GOOD_DECLARATIONS)))
    assert check["5.1.2-MUST-13"].status is Status.MET and check["5.1.2-MUST-13"].source == "measured"


def test_request_count_items_count_successful_requests_and_name_those_without_ttft() -> None:
    """§5.1.2.1 sets the request count; a successful all-whitespace response has no TTFT (§5.1.3.1).

    Against llama-server (Gemma 3 270M), 25 of 1000 successful requests streamed only whitespace:
    the request count is met, and the evidence says how many TTFT samples the percentiles rest on.
    """
    met = engine.decide("5.1.2-MUST-3", successful=1000, ttft_samples=975)
    assert met.status is Status.MET
    assert met.reason == ("1000 >= 1000 successful requests for P99; TTFT defined for 975 "
                          "(25 streamed no non-whitespace content, §5.1.3.1)")
    unmet = engine.decide("5.1.2-MUST-4", successful=1000, ttft_samples=1000)
    assert unmet.status is Status.UNMET and unmet.reason == "1000 requests < 10000 required for P99.9"
