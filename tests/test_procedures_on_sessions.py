"""5.7 and 5.10 on multi-turn Conversation sessions (issue 50 item 5), against the embedded simulator.

5.7: every configuration's measured run is a session run of the same sessions from a ShareGPT file given as
``--llm-dataset conversation=PATH``; the history carries the recorded answers, so the three configurations
send the identical sequence (the same hash of what each sent); the disabled run has no cached tokens, the cold
and warm runs cached tokens that rise by turn, and the warm run's pre-populated system prompts are hits on the
first turns. 5.10: both configurations run the same sessions. Bad combinations are usage errors.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
from pathlib import Path
from typing import Any

import pytest
from factories import StartHarness, measured_ok

from pytest_llmbench import closed, poisson
from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.procedures.base import ProcedureError, get_procedure
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.workloads import DatasetOption, build_workload, sequence_sha256, using_datasets

P57, P510 = get_procedure("5.7"), get_procedure("5.10")


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(("alpha", "bravo", "delta", "echo", "river", "stone", "cloud", "maple", "orbit",
                                "pixel", "quartz", "tundra", "violet", "willow", "zephyr")) + str(rng.randrange(99))
                    for _ in range(n))


def sharegpt(path: Path, conversations: int = 3, exchanges: int = 4, *, system: bool = True) -> Path:
    """A small ShareGPT file: each conversation its own system prompt and ``exchanges`` human/gpt pairs."""
    rng = random.Random(5)
    convs = []
    for _ in range(conversations):
        turns = []
        for k in range(exchanges):
            turns += [{"from": "human", "value": _words(rng, 60 if k == 0 else 20)},
                      {"from": "gpt", "value": _words(rng, 12)}]
        convs.append({"conversations": turns, **({"system": _words(rng, 40)} if system else {})})
    path.write_text(json.dumps(convs), encoding="utf-8")
    return path


def _option(path: Path) -> dict[str, DatasetOption]:
    return {"conversation": DatasetOption("conversation", path, "--llm-dataset", None)}


def _document(ctx: Any, result: Any, tmp_path: Path) -> dict[str, Any]:
    """results.json of a session holding ``result``, validated against the schema."""
    import jsonschema

    from pytest_llmbench.document.build import build_document
    from pytest_llmbench.report import schema, write_reports
    from pytest_llmbench.session import SessionResult

    settings = ctx.settings
    settings.report = tmp_path / "report"
    s = SessionResult(settings=settings, sut=ctx.sut, command_line=["suites"], started=1_769_000_000.0)
    s.results[f"{result.procedure}:{{}}"] = result
    doc = json.loads(write_reports(build_document(s))["json"].read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    return doc


def _by_turn(records: list[RequestRecord]) -> dict[int, float]:
    turns = sorted({r.turn for r in records if r.turn is not None})
    return {k: statistics.mean(r.cached_tokens or 0 for r in records if r.turn == k) for k in turns}


def test_5_7_on_sessions_identical_sequence_and_cache_by_turn(harness: StartHarness, tmp_path: Path) -> None:
    data = sharegpt(tmp_path / "sg.json")
    params = P57.make_params("smoke", {"workload": "conversation-sessions", "requests": 12, "load": closed(2),
                                       "max_output_tokens": 4, "warmup_requests": 4, "warmup_tokens": 16})
    assert params.workload_params == {"recorded_answers": True}  # the default on sessions (module doc)
    with harness(SimConfig(time_scale=0.2, seed=1, eos_mean_tokens=0.0), profile="smoke", seed=9) as (_, ctx), \
            using_datasets(_option(data)):
        result = asyncio.run(P57.run(ctx, params))
        planned = build_workload("conversation-sessions", n=12, seed=ctx.seeds("5.7").derive("measure"),
                                 tokenizer=ctx.tokenizer, recorded_answers=True).specs.capped(4)
        doc = _document(ctx, result, tmp_path)
    m = result.measurements
    runs = dict(zip(("disabled", "cold", "warm"), result.runs))
    assert [r.extra["prefix_cache"] for r in result.runs] == ["disabled", "enabled", "enabled"]
    records = {k: measured_ok(run) for k, run in runs.items()}
    for k, recs in records.items():  # each configuration ran the three sessions' four turns from the file
        assert len(recs) == 12 and {r.turn for r in recs} == {1, 2, 3, 4}, k
        assert len({r.session_id for r in recs}) == 3
    # the identical sequence: every turn planned (recorded answers) is what each configuration sent
    assert m["request_sequence_sha256"] == sequence_sha256(planned.all_turns())
    assert m["disabled_sent_sequence_sha256"] == m["cold_sent_sequence_sha256"] == m["warm_sent_sequence_sha256"]
    want = {(s.index, s.prompt_hash) for s in planned.all_turns()}
    assert all({(r.index, r.prompt_hash) for r in recs} == want for recs in records.values())
    assert result.checks["5.7.3-PARAM-4"].status.value == "met"
    # no cache, no cached tokens; with it the history is served: cached tokens rise by turn
    assert all(not r.cached_tokens for r in records["disabled"]) and m["disabled_cached_tokens"] == 0
    cached = {k: _by_turn(records[k]) for k in ("cold", "warm")}
    for k, by in cached.items():
        assert by[1] <= by[2] < by[3] < by[4], (k, by)
        assert m[f"{k}_turn4_cached_tokens_mean"] == pytest.approx(by[4], abs=0.01)
        assert m[f"{k}_turn3_prefix_hit_rate"] > 0.8  # the previous turn's prompt, whole blocks
    # the warm run's pre-population (each conversation's system prompt) is a hit on every first turn; cold: none
    assert cached["cold"][1] == 0 and cached["warm"][1] >= 32
    assert m["shared_prefixes"] == 3 and m["sessions"] == 3
    by_turn = result.tables[2]
    assert by_turn.title == "Prefix cache by turn (multi-turn sessions)" and [r[0] for r in by_turn.rows] == \
        ["1", "2", "3", "4"]
    # the workload is custom (never the standard Conversation one, §4.1.3), as the verdict says for 5.1
    assert result.facts is not None and result.facts.workload_standing == "custom"
    assert result.compliance["4.3.2-PARAM-1"].reason.startswith("custom workload")
    assert result.compliance["5.7.2-SHOULD-1"].status.value == "unmet"
    (proc,) = doc["procedures"]  # results.json (schema-valid): the warm run's figures by turn, the by-turn table
    assert [t["turn"] for t in proc["result"]["metrics"]["sessions"]["by_turn"]] == [1, 2, 3, 4]
    assert proc["result"]["tables"][2]["title"] == by_turn.title


def test_5_7_on_sessions_refuses_the_servers_answers() -> None:
    with pytest.raises(ProcedureError, match="recorded_answers=False"):
        P57.make_params("smoke", {"workload": "conversation-sessions", "workload_params": {"recorded_answers": False}})
    with pytest.raises(ProcedureError, match="recorded_answers"):
        P510.make_params("smoke", {"workload": "conversation-sessions", "workload_params": {"recorded_answers": 0}})
    # a capacity fraction starts sessions at fraction x capacity / turns (resolve_load's turns), as in 5.1
    assert P57.make_params("smoke", {"workload": "conversation-sessions",
                                     "load": poisson(capacity_fraction=0.5)}).load.capacity_fraction == 0.5
    assert P57.make_params("smoke", {"workload": "conversation-sessions", "load": poisson(rate=2.0)}).load.rate == 2.0
    # other workloads' params as given
    assert P57.make_params("smoke", {}).workload_params == {}


def test_5_10_on_sessions_every_configuration_runs_the_same_sessions(harness: StartHarness, tmp_path: Path) -> None:
    data = sharegpt(tmp_path / "sg.json", conversations=4, exchanges=3, system=False)
    params = P510.make_params("smoke", {
        "workload": "conversation-sessions", "configurations": ("none", "input"), "load_fractions": (0.5,),
        "report_level": 0.5, "requests_per_level": 9, "throughput_probe_fraction": 1.5, "throughput_probe_requests": 6,
        "capacity": "session",
        "max_output_tokens": 4, "warmup_requests": 4, "warmup_tokens": 16})
    cfg = SimConfig(time_scale=0.2, seed=3, eos_mean_tokens=0.0, guardrail_refusal_rate=0.0)
    with harness(cfg, rate=6.0, profile="smoke", seed=5) as (_, ctx), using_datasets(_option(data)):
        result = asyncio.run(P510.run(ctx, params))
    base, inp, base_probe, inp_probe = result.runs  # the levels, then the saturation runs
    assert [r.extra["guardrails"] for r in result.runs] == ["none", "input", "none", "input"]
    sent = {}
    for name, run in (("none", base), ("input", inp)):
        recs = measured_ok(run)
        assert len(recs) == 9 and {r.turn for r in recs} == {1, 2, 3}, name
        sent[name] = {(r.session_id, r.turn, r.index, r.prompt_hash) for r in recs}
    assert sent["none"] == sent["input"]  # the same sessions, turns and prompts (recorded answers)
    assert len({s for s, *_ in sent["none"]}) == 3
    # the level starts sessions: 50 % of the 6 req/s capacity in requests, / 3 turns per session
    desc = base.extra["load_spec"]
    assert desc["resolved_rate"] == pytest.approx(3.0) and desc["session_start_rate"] == pytest.approx(1.0)
    assert desc["turns_per_session"] == 3 and desc["capacity_source"] == "declared by the test"
    for probe in (base_probe, inp_probe):  # the saturation run: 1.5 x 6 req/s in requests, 2 sessions of 3 turns
        assert probe.extra["load_spec"]["session_start_rate"] == pytest.approx(3.0)
        assert {(r.turn, r.index) for r in measured_ok(probe)} == {(t, i) for t, i in zip((1, 2, 3) * 2, range(6))}
    assert result.measurements["baseline_offered_output_tps"] is not None
    assert result.checks["5.10.3-PARAM-2"].status.value == "met"
    assert result.compliance["5.10.2-SHOULD-1"].status.value == "unmet"  # sessions: custom, never Conversation
    assert "conversation-sessions" in result.compliance["5.10.2-SHOULD-1"].reason


def test_5_7_on_sessions_a_capacity_fraction_starts_sessions_at_that_fraction_in_requests(
        harness: StartHarness, tmp_path: Path) -> None:
    """5.7 scales a capacity fraction on sessions as 5.1 does: each configuration starts sessions at
    f x capacity / turns per session."""
    data = sharegpt(tmp_path / "sg.json", conversations=2, exchanges=3, system=False)
    params = P57.make_params("smoke", {"workload": "conversation-sessions", "requests": 6, "warm_run": False,
                                       "load": poisson(capacity_fraction=0.5), "max_output_tokens": 2,
                                       "warmup_requests": 2, "warmup_tokens": 8})
    with harness(SimConfig(time_scale=0.2, seed=3, eos_mean_tokens=0.0), rate=6.0, profile="smoke", seed=5) \
            as (_, ctx), using_datasets(_option(data)):
        result = asyncio.run(P57.run(ctx, params))
    assert [r.extra["prefix_cache"] for r in result.runs] == ["disabled", "enabled"]
    for run in result.runs:
        desc = run.extra["load_spec"]
        assert desc["resolved_rate"] == pytest.approx(3.0) and desc["turns_per_session"] == 3
        assert desc["session_start_rate"] == pytest.approx(1.0) and run.load["rate"] == pytest.approx(1.0)
        assert len(measured_ok(run)) == 6


def test_5_1_on_sessions_a_capacity_fraction_starts_sessions_at_that_fraction_in_requests(
        harness: StartHarness, tmp_path: Path) -> None:
    """5.1's ``poisson(capacity_fraction=f)`` on sessions: an arrival starts a session of ``turns`` requests, so
    sessions start at f x capacity / turns per session and the requests offered are the fraction of capacity
    (before, f x capacity sessions per second: the fraction times the turns in requests)."""
    data = sharegpt(tmp_path / "sg.json", conversations=4, exchanges=3, system=False)
    p51 = get_procedure("5.1")
    params = p51.make_params("smoke", {"workload": "conversation-sessions", "requests": 9,
                                       "load": poisson(capacity_fraction=0.5), "warmup_requests": 4,
                                       "warmup_tokens": 16, "warmup_probes": 0, "max_output_tokens": 4})
    cfg = SimConfig(time_scale=0.2, seed=3, eos_mean_tokens=0.0)
    with harness(cfg, rate=6.0, profile="smoke", seed=5) as (_, ctx), using_datasets(_option(data)):
        result = asyncio.run(p51.run(ctx, params))
    (run,) = [r for r in result.runs if r.label == "measure"]
    desc = run.extra["load_spec"]
    assert desc["resolved_rate"] == pytest.approx(3.0) and desc["turns_per_session"] == 3
    assert desc["session_start_rate"] == pytest.approx(1.0)
    assert run.load["rate"] == pytest.approx(1.0)  # the session starts the load generator ran
    recs = measured_ok(run)
    assert len(recs) == 9 and {r.turn for r in recs} == {1, 2, 3}
