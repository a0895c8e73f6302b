"""Multi-turn sessions (issue 50 item 2): the workload, the load generator's session driver, the records.

Against the embedded simulator: turn k's prompt begins with turn k-1's prompt and answer (the bodies sent,
checked against the records' answers), cached prompt tokens rise by turn and TTFT falls after turn 1 where
the prefix cache hits (and does not without it). In process (MockTransport): only session starts follow an
open loop's arrivals, a closed loop of N holds N sessions, a failed turn ends its session, the sticky header,
the first turns' bytes by seed, and the usage errors of a sessions dataset.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.client.transports.mock import MockRequest, MockResponse, MockTransport
from pytest_llmbench.common.records import RECORDS_FORMAT, RequestRecord, RequestSpec
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.loadgen.load import ArrivalProcess, ClosedLoop, LoadOptions, OpenLoop, run_load
from pytest_llmbench.workloads import WorkloadError, build_workload, chat_messages, dumps_requests
from pytest_llmbench.workloads.sessions import SessionSource, ThinkTime


class Capture(LLMClient):
    """A client that keeps every spec it sends, by index (the bodies are rebuilt from them)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.sent: dict[int, RequestSpec] = {}

    async def send(self, spec: RequestSpec, **kw: Any) -> RequestRecord:  # type: ignore[override]
        self.sent[spec.index] = spec
        return await super().send(spec, **kw)


def _answer(text: str = "fine thanks", *, status: int = 200) -> MockResponse:
    if status != 200:
        return MockResponse.json({"error": {"message": "boom", "type": "server_error"}}, status=status)
    events: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"content": w + " "}, "finish_reason": None}]}
                                    for w in text.split()]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": len(text.split())}})
    return MockResponse.sse(events)


def _sessions(n: int, **kw: Any) -> SessionSource:
    params: dict[str, Any] = {"turns": 3, "first_message_tokens": 40, "message_tokens": 8, "answer_tokens": 8,
                              "system_prompt_tokens": 20}
    params.update(kw)
    return build_workload("conversation-sessions", n=n, seed=7, **params).specs  # type: ignore[return-value]


def _mock_client(handler: Any, **kw: Any) -> Capture:
    return Capture(ClientConfig(base_url="http://mock/v1", model="m", **kw), transport=MockTransport(handler))


# ------------------------------------------------------------------------------------------ the simulator
def _by_session(records: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        out[r.session_id].append(r)  # type: ignore[index]
    return {k: sorted(v, key=lambda r: r.turn or 0) for k, v in out.items()}


async def _sim_run(base_url: str, source: SessionSource, load: Any) -> tuple[Capture, Any]:
    async with Capture(ClientConfig(base_url=base_url, model="llmbench-sim", max_connections=8)) as client:
        result = await run_load(client, source, load, LoadOptions(drain_timeout_s=30))
    return client, result


def test_sessions_on_the_simulator_history_cache_and_ttft_by_turn() -> None:
    from pytest_llmbench.simulator import SimConfig, start_simulator

    source = build_workload("conversation-sessions", n=16, seed=3, turns=4, first_message_tokens=800,
                            message_tokens=24, answer_tokens=24, system_prompt_tokens=0).specs
    assert isinstance(source, SessionSource)
    cfg = SimConfig(time_scale=0.5, eos_mean_tokens=0.0, seed=1)
    with start_simulator(cfg) as sim:
        client, result = asyncio.run(_sim_run(sim.base_url, source, ClosedLoop(2)))
        sim.set_config(prefix_cache=False, flush_prefix_cache=True)
        _, off = asyncio.run(_sim_run(sim.base_url, source, ClosedLoop(2)))
    records = list(result.records)
    assert result.sent == len(records) == 16 and result.ok == 16
    assert result.sessions == {"sessions": 4, "started": 4, "completed": 4, "failed": 0, "cut": 0, "turns_sent": 16,
                               "turns_not_sent": 0, "failed_by_error": {}, "recorded_answers": False, "header": None}
    sessions = _by_session(records)
    assert len(sessions) == 4 and all([r.turn for r in s] == [1, 2, 3, 4] for s in sessions.values())
    for recs in sessions.values():
        for prev, cur in zip(recs, recs[1:]):
            before = client.build_body(client.sent[prev.index])["messages"]
            now = client.build_body(client.sent[cur.index])["messages"]
            # turn k's prompt begins with turn k-1's prompt and the server's answer to it
            assert now[:len(before)] == before
            assert now[len(before)] == {"role": "assistant", "content": prev.output_text}
            assert prev.output_text.strip() and len(now) == len(before) + 2
            assert cur.input_tokens_server > prev.input_tokens_server + prev.output_tokens_server - 1
            assert cur.intended_ns >= prev.end_ns  # sent after the answer, never before
    cached = {k: statistics.mean(r.cached_tokens or 0 for r in records if r.turn == k) for k in (1, 2, 3, 4)}
    assert cached[1] < cached[2] < cached[3] < cached[4], cached  # the history is served by the prefix cache
    for r in records:
        if r.turn and r.turn > 1:  # at least turn k-1's prompt, whole blocks of 16 tokens
            prev = sessions[r.session_id][r.turn - 2]  # type: ignore[index]
            assert (r.cached_tokens or 0) >= (prev.input_tokens_server // 16) * 16

    def ttft_by_turn(recs: list[RequestRecord]) -> dict[int, float]:
        return {k: statistics.median((r.first_token_ns - r.sent_ns) / 1e6 for r in recs if r.turn == k)
                for k in (1, 2, 3, 4)}

    figures = summarize(records).sessions  # the metrics by turn agree with the records
    assert figures is not None and figures.sessions == 4 and [t.turn for t in figures.by_turn] == [1, 2, 3, 4]
    for k in (1, 2, 3, 4):
        t = figures.turn(k)
        assert t.requests == t.ok == 4
        if k > 1:  # the simulator reports cached tokens when there are some (turn 1 has none)
            assert t.cached_tokens.mean.value == pytest.approx(cached[k]) and t.cached_share_mean > 0.8
        assert t.ttft.percentile(50).value * 1e3 == pytest.approx(ttft_by_turn(records)[k], rel=1e-6)
    assert figures.turns.mean.value == 4 and figures.duration.n == 4
    assert figures.output_tokens.mean.value == pytest.approx(
        statistics.mean(sum(r.output_tokens for r in s) for s in sessions.values()))
    assert summarize(list(off.records)).sessions.turn(2).cached_tokens is None  # no cache: none reported
    on, without = ttft_by_turn(records), ttft_by_turn(list(off.records))
    print("TTFT by turn (ms), cache on:", on, "off:", without, "cached tokens by turn:", cached)
    assert all(on[k] < 0.6 * on[1] for k in (2, 3, 4)), on  # the cache hits: later turns prefill their new part only
    assert all(without[k] > 3 * on[k] for k in (2, 3, 4)), without  # without it every turn prefills its whole prompt
    assert all(not r.cached_tokens for r in off.records)


# ------------------------------------------------------------------------------------------ the load model
def test_open_loop_only_session_starts_follow_the_arrivals() -> None:
    source = _sessions(12, turns=3, think_time=0.02)
    client = _mock_client(lambda req: _answer())
    arrival = ArrivalProcess("uniform", rate=50.0, seed=1)

    async def go() -> Any:
        async with client:
            return await run_load(client, source, OpenLoop(arrival))

    result = asyncio.run(go())
    records = sorted(result.records, key=lambda r: r.intended_ns)
    firsts = [r for r in records if r.turn == 1]
    assert len(records) == 12 and len(firsts) == 4 and result.sessions["completed"] == 4
    offsets = [r.intended_ns - result.start_ns for r in firsts]
    assert offsets == list(arrival.schedule_ns(4))  # the starts at the schedule's times, nothing else on it
    for recs in _by_session(records).values():
        for prev, cur in zip(recs, recs[1:]):  # a later turn: the previous answer's end plus the think time
            assert cur.intended_ns == prev.end_ns + 20_000_000
            assert cur.sent_ns >= cur.intended_ns


def test_closed_loop_holds_n_sessions_and_a_failed_turn_ends_its_session() -> None:
    source = _sessions(24, turns=4)
    fail_session = source.sessions[1].session_id
    open_sessions: set[str] = set()
    most = [0]

    async def handler(req: MockRequest) -> MockResponse:
        body = req.json()
        sid = req.headers.get("x-session-id")
        turn = sum(1 for m in body["messages"] if m["role"] == "user")
        open_sessions.add(sid)  # type: ignore[arg-type]
        most[0] = max(most[0], len(open_sessions))
        await asyncio.sleep(0.005)
        if sid == fail_session and turn == 2:
            open_sessions.discard(sid)
            return _answer(status=500)
        if turn == 4 or (sid == fail_session and turn == 2):
            open_sessions.discard(sid)
        return _answer()

    source = SessionSource(source.sessions, header="x-session-id")
    client = _mock_client(handler, max_connections=3)

    async def go() -> Any:
        async with client:
            return await run_load(client, source, ClosedLoop(3))

    result = asyncio.run(go())
    s = result.sessions
    assert most[0] == 3 and result.concurrency_max == 3  # three sessions at once, each one request at a time
    assert s["failed"] == 1 and s["failed_by_error"] == {"http_5xx": 1} and s["completed"] == 5
    assert s["started"] == s["completed"] + s["failed"] + s["cut"] == 6
    assert s["turns_not_sent"] == 2 and s["turns_sent"] == result.sent == len(result.records) == 22
    failed = [r for r in result.records if r.session_id == fail_session]
    assert [(r.turn, r.ok) for r in sorted(failed, key=lambda r: r.turn)] == [(1, True), (2, False)]
    for r in result.records:  # the sticky header on every turn carries the record's session id
        assert client.sent[r.index].headers == (("x-session-id", r.session_id),)


def test_request_count_cuts_sessions_and_every_request_is_accounted_for() -> None:
    source = _sessions(30, turns=5, think_time=0.01)
    client = _mock_client(lambda req: _answer())

    async def go() -> Any:
        async with client:
            return await run_load(client, source, ClosedLoop(4, max_requests=11))

    result = asyncio.run(go())
    s = result.sessions
    assert result.sent == len(result.records) == s["turns_sent"] == 11
    assert s["started"] == s["completed"] + s["failed"] + s["cut"] and s["cut"] >= 1
    assert s["turns_sent"] + s["turns_not_sent"] == sum(x.turns for x in source.sessions[: s["started"]])


def test_no_header_unless_asked_and_completions_prompt_extends() -> None:
    seen: list[MockRequest] = []

    def handler(req: MockRequest) -> MockResponse:
        seen.append(req)
        return MockResponse.sse([{"choices": [{"index": 0, "text": "ok then", "finish_reason": "stop"}]}])

    source = _sessions(3, turns=3)
    client = _mock_client(handler, api="completions")

    async def go() -> Any:
        async with client:
            return await run_load(client, source, ClosedLoop(1))

    asyncio.run(go())
    assert all("x-session-id" not in {k.lower() for k in r.headers} for r in seen)
    prompts = [r.json()["prompt"] for r in seen]
    assert prompts[1].startswith(prompts[0] + "ok then") and prompts[2].startswith(prompts[1] + "ok then")
    named = build_workload("conversation-sessions", n=2, seed=1, turns=2, session_header="x-affinity").specs
    assert [s.headers for s in named] == [(("x-affinity", next(iter(named)).session_id),)]


# ------------------------------------------------------------------------------------------ the workload
def test_first_turns_are_byte_identical_by_seed_and_recorded_answers_fix_every_turn() -> None:
    a = build_workload("conversation-sessions", n=20, seed=11, turns=4, think_time=1.0, think_time_kind="exponential")
    b = build_workload("conversation-sessions", n=20, seed=11, turns=4, think_time=1.0, think_time_kind="exponential")
    c = build_workload("conversation-sessions", n=20, seed=12, turns=4)
    assert dumps_requests(a.specs) == dumps_requests(b.specs) != dumps_requests(c.specs)
    assert a.declaration.request_sequence_sha256 == b.declaration.request_sequence_sha256
    assert [s.think_s for s in a.specs.sessions] == [s.think_s for s in b.specs.sessions]
    assert len({t for s in a.specs.sessions for t in s.think_s}) > 1  # drawn, not fixed
    d = a.declaration.to_json()
    assert d["custom"] and not d["standard"] and d["name"] == "conversation-sessions"
    assert any("§4.1.3" in n for n in d["notes"]) and any("server's own answers" in n for n in d["notes"])
    rec = build_workload("conversation-sessions", n=8, seed=11, turns=4, recorded_answers=True)
    turns = rec.specs.all_turns()
    assert [t.turn for t in turns] == [1, 2, 3, 4] * 2
    s0 = rec.specs.sessions[0]
    assert [m["content"] for m in chat_messages(turns[2]) if m["role"] == "assistant"] == list(s0.answers[:2])
    assert any("recorded replies" in n for n in rec.declaration.notes)
    # a single-turn workload's stored requests carry no session field (their hash is as before)
    plain = build_workload("synthetic-uniform", n=2, seed=1)
    assert b"session_id" not in dumps_requests(plain.specs) and b'"turn"' not in dumps_requests(plain.specs)
    assert RECORDS_FORMAT == "2.3"
    spec = next(iter(a.specs))
    assert RequestSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_recorded_answers_in_the_history_at_run_time() -> None:
    source = _sessions(3, turns=3, recorded_answers=True)
    client = _mock_client(lambda req: _answer("something else entirely"))

    async def go() -> Any:
        async with client:
            return await run_load(client, source, ClosedLoop(1))

    asyncio.run(go())
    sent = [client.sent[i] for i in sorted(client.sent)]
    assert sent == source.all_turns()  # the whole sequence fixed before the run


def _sharegpt(tmp_path: Path, convs: list[Any], *, jsonl: bool = False) -> Path:
    p = tmp_path / ("sg.jsonl" if jsonl else "sg.json")
    p.write_text("\n".join(json.dumps(c) for c in convs) if jsonl else json.dumps(convs), encoding="utf-8")
    return p


def _conv(*pairs: tuple[str, str]) -> dict[str, Any]:
    turns = []
    for u, a in pairs:
        turns += [{"from": "human", "value": u}, {"from": "gpt", "value": a}]
    return {"conversations": turns}


def test_sessions_from_a_sharegpt_file(tmp_path: Path) -> None:
    convs = [_conv(("hello there", "hi, how can I help"), ("tell me a joke", "no"), ("why", "because")),
             {"conversations": [{"from": "human", "value": "only a question"}]},
             _conv(("one", "two"), ("three", "four"))]
    p = _sharegpt(tmp_path, convs)
    wl = build_workload("conversation-sessions", n=5, seed=2, dataset=str(p))
    src = wl.specs
    assert sum(s.turns for s in src.sessions) == 5 and all(s.turns >= 1 for s in src.sessions)
    assert {s.messages[0] for s in src.sessions} <= {"hello there", "one"}
    assert wl.declaration.dataset["eligible"] == 2 and wl.declaration.dataset["conversations_in_file"] == 3
    s = next(x for x in src.sessions if x.messages[0] == "hello there")
    assert s.answers[:2] == ("hi, how can I help", "no")
    cut = build_workload("conversation-sessions", n=4, seed=2, dataset=str(p), max_turns=1).specs
    assert all(x.turns == 1 for x in cut.sessions)


def test_sessions_read_the_llm_dataset_conversation_file(tmp_path: Path) -> None:
    """``--llm-dataset conversation=PATH`` (workloads.using_datasets, as a procedure's run sets it) reaches the
    sessions workload when no ``dataset=`` is given; a marker's own ``dataset=`` still wins."""
    from pytest_llmbench.workloads import DatasetOption, using_datasets

    given = _sharegpt(tmp_path, [_conv(("from the option", "yes"), ("again", "sure"))])
    other = tmp_path / "other"
    other.mkdir()
    own = _sharegpt(other, [_conv(("from the marker", "ok"), ("more", "fine"))])
    with using_datasets({"conversation": DatasetOption("conversation", given, "--llm-dataset", "v1")}):
        from_option = build_workload("conversation-sessions", n=2, seed=1).specs
        from_marker = build_workload("conversation-sessions", n=2, seed=1, dataset=str(own)).specs
    assert {s.messages[0] for s in from_option.sessions} == {"from the option"}
    assert {s.messages[0] for s in from_marker.sessions} == {"from the marker"}
    synthetic = build_workload("conversation-sessions", n=2, seed=1).specs  # outside the run: no file
    assert not {s.messages[0] for s in synthetic.sessions} & {"from the option", "from the marker"}


def test_usage_errors_name_file_place_and_field(tmp_path: Path) -> None:
    none = _sharegpt(tmp_path, [{"conversations": [{"from": "human", "value": "q"}]}, {"x": 1}], jsonl=True)
    with pytest.raises(WorkloadError, match=r"sg\.jsonl: line 1 \(conversation #0\), field 'conversations'"):
        build_workload("conversation-sessions", n=2, seed=1, dataset=str(none))
    long = _sharegpt(tmp_path, [_conv(("a " * 50, "b " * 60), ("c " * 50, "d " * 60))])
    with pytest.raises(WorkloadError, match=r"sg\.json: conversation #0, field 'conversations' exchange 2: .* "
                                            r"context window of 200"):
        build_workload("conversation-sessions", n=2, seed=1, dataset=str(long), context_window=200)
    with pytest.raises(WorkloadError, match="does not exist"):
        build_workload("conversation-sessions", n=2, seed=1, dataset=str(tmp_path / "missing.json"))
    with pytest.raises(WorkloadError, match="generated session 0, field 'conversations' exchange 1"):
        build_workload("conversation-sessions", n=2, seed=1, first_message_tokens=300, context_window=256)
    with pytest.raises(WorkloadError, match="think time kind"):
        ThinkTime("gaussian", 1.0)


# ------------------------------------------------------------------------------------------ a procedure
def test_5_1_on_sessions_results_json_and_report(tmp_path: Path) -> None:
    """A marker's ``workload="conversation-sessions"`` through 5.1 (closed loop of 2 sessions): the records on
    disk carry the sessions, results.json (schema 1.9) their figures by turn, the HTML report their table."""
    import jsonschema
    from factories import simulator_harness

    from pytest_llmbench.common.storage import iter_records
    from pytest_llmbench.document.build import build_document
    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.procedures.loads import closed
    from pytest_llmbench.report import schema, write_reports
    from pytest_llmbench.session import SessionResult
    from pytest_llmbench.simulator import SimConfig

    proc = get_procedure("5.1")
    params = proc.make_params("smoke", {"workload": "conversation-sessions", "requests": 12, "load": closed(2),
                                        "warmup_requests": 4, "warmup_tokens": 16, "warmup_probes": 0,
                                        "max_output_tokens": 8})
    with simulator_harness(SimConfig(time_scale=0.2, seed=2), tmp_path, seed=3, timeout=60.0) as (_, ctx):
        result = asyncio.run(proc.run(ctx, params))
        records = list(iter_records(ctx.run_root / "measure"))
        settings = ctx.settings
        settings.report = tmp_path / "report"
        s = SessionResult(settings=settings, sut=ctx.sut, command_line=["suites"], started=1_769_000_000.0)
        s.results["5.1:{}"] = result
        paths = write_reports(build_document(s))
    assert len(records) == 12 and {r.turn for r in records} == {1, 2, 3, 4}
    assert len({r.session_id for r in records}) == 3
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    figures = doc["procedures"][0]["result"]["metrics"]["sessions"]
    assert figures["sessions"] == 3 and [t["turn"] for t in figures["by_turn"]] == [1, 2, 3, 4]
    assert figures["by_turn"][3]["cached_tokens"]["mean"]["value"] > figures["by_turn"][1]["cached_tokens"]["mean"]["value"]
    html = paths["html"].read_text(encoding="utf-8")
    assert "Multi-turn sessions: by turn" in html and 'data-plot="sessions"' in html


def test_stop_when_decided_refuses_a_session_run() -> None:
    from pytest_llmbench.procedures.base import StopRequest
    from pytest_llmbench.procedures.stopping import StopWhenDecided

    st = StopWhenDecided(StopRequest(("ttft.p99 <= 1s",)), planned=6)
    with pytest.raises(ValueError, match="does not apply to multi-turn sessions"):
        st.specs(_sessions(6))
    plain = build_workload("synthetic-uniform", n=3, seed=1).specs
    assert [s.index for s in st.specs(plain)] == [0, 1, 2]  # others as before
