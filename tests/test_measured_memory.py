"""The measured path keeps no record in memory (issue 30): a measured run's records go to disk and to
the summary's columns as they finish; afterwards ``Measured.records`` reads them back from disk, the
recount streams record by record, and the figures are those of the records summarised in memory."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from factories import StartHarness, make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.common.storage import RECORDS_FILE, RecordsView, RunWriter, load_run
from pytest_llmbench.loadgen.load import ClosedLoop
from pytest_llmbench.measure import frame, tokencount
from pytest_llmbench.measure.chunking import decide_itl
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.procedures import run as measured_run
from pytest_llmbench.procedures.facts import run_facts
from pytest_llmbench.procedures.run import Measured, client_for, itl_decision_for, measure
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.workloads import build_workload

SIM = SimConfig(time_scale=0.1, seed=3)


async def _measure(ctx: Any, n: int, label: str = "measure") -> Measured:
    wl = build_workload("synthetic-uniform", n=n, seed=11, tokenizer=ctx.tokenizer, lazy=True)
    async with client_for(ctx, max_connections=8) as client:
        return await measure(ctx, client, label, wl.specs, ClosedLoop(8, max_requests=n))


@pytest.mark.parametrize("drop_text", [False, True])
def test_a_measured_run_is_summarised_as_its_records_in_memory(harness: StartHarness, drop_text: bool) -> None:
    """The run's records are a view of its records file (text included with --llm-drop-text, from
    the writer's spool); its metrics and App. B.2.1 decision are byte for byte those of the records
    read back into a list and summarised there."""
    with harness(SIM, profile="smoke", seed=5, drop_text=drop_text) as (_, ctx):
        m = asyncio.run(_measure(ctx, 120))
    assert isinstance(m.records, RecordsView) and m.records is m.load.records and len(m.records) == 120
    records = list(m.records)
    assert [r.index for r in records] == [r.index for r in load_run(m.summary.run_dir).records]
    assert all(r.chunk_text for r in records if r.ok)  # as the client received them
    on_disk = (Path(m.summary.run_dir) / RECORDS_FILE).read_text(encoding="utf-8")
    texts = {json.dumps(t, ensure_ascii=False) for r in records for t in r.chunk_text if t}  # as a line holds them
    assert texts and any(t in on_disk for t in texts) is (not drop_text)
    decision = itl_decision_for(records)
    assert m.summary.extra["itl_decision"] == decision.to_json()
    send_window = (m.load.start_ns, min(m.load.send_end_ns, max(r.sent_ns for r in records)))  # as measure() passes
    in_memory = summarize(records, itl_option=decision.option, send_window_ns=send_window)
    assert json.dumps(m.metrics.to_json(per_request=True), sort_keys=True) == \
        json.dumps(in_memory.to_json(per_request=True), sort_keys=True)
    facts = run_facts(ctx, workload={"name": "synthetic-uniform"}, warmup=None, measured=[m])
    assert facts.records is not None and facts.records.n == 120 and facts.streamed_records == 120
    assert facts.counting_used == {"A": 120}


def _live_records() -> int:
    """RequestRecord objects alive, those the load generator froze out of the collector's sight
    (run_load's gc_freeze) included."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    gc.collect()
    n = sum(1 for o in gc.get_objects() if isinstance(o, RequestRecord))
    if frozen:
        gc.freeze()
    return n


def test_no_record_outlives_its_write_but_the_summarys(harness: StartHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a FrameBuilder that keeps one record, nothing else keeps any: late in the run only the
    requests in flight are alive (not the load generator's list, the writer or the workload), and
    once the run is measured and its facts computed none is (before: every record, both times)."""
    during: list[int] = []

    class KeepsOne(frame.FrameBuilder):
        def add(self, record: RequestRecord) -> None:
            if not len(self):
                super().add(record)
            self.seen = getattr(self, "seen", 0) + 1
            if self.seen == 140:
                during.append(_live_records())

    monkeypatch.setattr(measured_run, "FrameBuilder", KeepsOne)
    with harness(SIM, profile="smoke", seed=5) as (_, ctx):
        m = asyncio.run(_measure(ctx, 150))
        run_facts(ctx, workload={"name": "synthetic-uniform"}, warmup=None, measured=[m])
    assert m.load.sent == 150 and during and during[0] <= 8 + 3, during  # 8 in flight
    assert _live_records() <= 3


class _Recounter:
    """An adapter that recounts a record in the server's tokens unless its index is in ``fail``."""

    def __init__(self, fail: set[int]) -> None:
        self.fail = fail
        self.offered: list[int] = []

    async def recount_tokens(self, records: list[RequestRecord], client: Any) -> int:
        done = 0
        for r in records:
            self.offered.append(r.index)
            if r.index not in self.fail:
                r.token_count_method, r.chunk_tokens = tokencount.TOKENIZE, [2] * len(r.chunk_tokens)
                done += 1
        return done


def _written(root: Path) -> RunWriter:
    """A closed run of 11 records: index 2 failed, index 5 already counted in the server's tokens."""
    with RunWriter(root, keep_text=False, spool_text=True) as w:
        for i in range(11):
            rec = make_record(i, text=" ok", output_tokens_server=4, token_count_method=tokencount.REFERENCE)
            if i == 2:
                rec.error_type = ErrorType.TIMEOUT
            if i == 5:
                rec.token_count_method = tokencount.USAGE_PER_CHUNK
            w.write(rec)
    return w


def test_the_recount_offers_every_record_that_needs_one_once_and_rewrites_the_file(tmp_path: Path) -> None:
    writer = _written(tmp_path)
    adapter = _Recounter(fail={7})
    ctx = SimpleNamespace(sut=SimpleNamespace(adapter=adapter))
    assert asyncio.run(measured_run._recount(ctx, None, writer, writer.view())) is True  # type: ignore[arg-type]
    assert adapter.offered == [0, 1, 3, 4, 6, 7, 8, 9, 10]  # the failed and the exact ones are not
    methods = [r.token_count_method for r in writer.view()]
    assert methods == [tokencount.TOKENIZE] * 2 + [tokencount.REFERENCE] + [tokencount.TOKENIZE] * 2 \
        + [tokencount.USAGE_PER_CHUNK, tokencount.TOKENIZE, tokencount.REFERENCE] + [tokencount.TOKENIZE] * 3
    assert [r.index for r in load_run(tmp_path).records] == list(range(11))
    assert all(r.chunk_text == [" ok"] * 4 for r in writer.view())  # the spool was rewritten whole
    assert decide_itl(writer.view()).records_counted_by_server == 9  # 8 recounted, 1 counted by the server


def test_a_server_that_recounts_nothing_leaves_the_records_untouched(tmp_path: Path) -> None:
    writer = _written(tmp_path)
    before = (tmp_path / RECORDS_FILE).read_bytes()
    adapter = _Recounter(fail={0})
    ctx = SimpleNamespace(sut=SimpleNamespace(adapter=adapter))
    assert asyncio.run(measured_run._recount(ctx, None, writer, writer.view())) is False  # type: ignore[arg-type]
    assert adapter.offered == [0] and (tmp_path / RECORDS_FILE).read_bytes() == before


def test_prompt_hygiene_counts_repeats_and_warm_up_prompts_from_8_byte_keys() -> None:
    """Measured prompt repeats and prompts the warm-up sent, in one pass with each hash kept as an
    integer: the counts of the hash strings themselves (a hash that is not 16 hex digits counts too)."""
    from pytest_llmbench.procedures.sample import PromptTally

    hashes = ["00000000000000ff", "00000000000000ff", "abcdef0123456789", "ABCDEF0123456789", "0x00000000000ff",
              "legacy", "legacy", None, "abcdef0123456789"]
    warm = {"abcdef0123456789", "legacy", "00000000000000fe"}
    p = PromptTally(warm)
    for i, h in enumerate(hashes):
        p.add(make_record(i, prompt_hash=h))
    sent = [h for h in hashes if h is not None]
    assert p.repeats() == len(sent) - len(set(sent)) == 3
    assert p.seen == sum(1 for h in sent if h in warm) == 4
