"""The steps after a measured run read its records as they finished (issue 46, item 1): procedures/tally.py.

Each tally gives what the pass over the records it replaces gave: the record audit and the facts' scan over
several runs (merged run after run), the load summary's error messages and option-C error, the workload as
run from length histograms (numpy's median and mean), prefix caching observed, the send times; and a lazy
workload answers the warm-up's disjointness check, the pre-flight's longest prompt and the 4.3.2 checks from
what it noted when it was generated, without a pass over its stream.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from factories import make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.compliance import RecordAudit
from pytest_llmbench.loadgen.selfcheck import option_c_error, option_c_error_of
from pytest_llmbench.procedures import sample
from pytest_llmbench.procedures.facts import prefix_cache_observed
from pytest_llmbench.procedures.helpers import cap_output
from pytest_llmbench.procedures.run import error_messages
from pytest_llmbench.procedures.tally import (
    EARLY_RECORDS,
    CachedTokens,
    RecordScan,
    RecordTally,
    SendTimes,
    SentLengths,
    tally_of,
)
from pytest_llmbench.workloads import SpecStream, build_workload, reference_checks


def _records(n: int, seed: int, *, stamped_from: int | None = None) -> list[RequestRecord]:
    """A mixed run: failures of several kinds, cached tokens, server stamps from ``stamped_from`` on, open-loop
    send times, two phases, input and output lengths that vary."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = rng.integers(0, 6)
        r = make_record(i, sent=float(i), spec_input_tokens=int(rng.integers(100, 140)),
                        max_tokens=int(rng.integers(10, 40)), prompt_hash=f"{int(rng.integers(0, 50)):016x}",
                        intended_ns=i * 1_000_000 - int(rng.integers(0, 500)), inflight_at_send=int(rng.integers(0, 9)),
                        oldest_outstanding_ns=int(rng.integers(0, 10**6)), cached_tokens=int(rng.integers(0, 3)) * 7,
                        output_tokens_client=4, phase="warmup" if kind == 5 else "measure")
        if kind == 1:
            r.error_type, r.status, r.error_message = ErrorType.HTTP_5XX, 500, f"upstream {i} failed"
        elif kind == 2:
            r.error_type, r.error_message = ErrorType.CONNECT, "connection refused"
        elif kind == 3:
            r.chunk_text[0] = ""  # a role-only chunk before the first content token
            r.first_token_ns = r.chunk_ns[1]
        if stamped_from is not None and i >= stamped_from and r.ok:
            r.server_token_ns = [t - 3_000 - i for t in r.chunk_ns]
        out.append(r)
    return out


@pytest.mark.parametrize("first_run,stamped_from", [(30, 40), (60, 10), (10, 45)])
def test_merged_tallies_are_the_pass_over_every_run(first_run: int, stamped_from: int) -> None:
    """The scan and the audit merged run after run are the one pass over the runs' records in order (early
    server stamps counted over the first EARLY_RECORDS records of all runs, across the runs' boundary)."""
    a, b = _records(first_run, 1), _records(70, 2, stamped_from=stamped_from)
    whole = RecordTally.of(a + b)
    parts = [RecordTally.of(a), RecordTally.of(b)]
    merged = RecordScan.merged(t.scan for t in parts)
    assert dataclasses.asdict(merged) == dataclasses.asdict(whole.scan)
    assert merged.early_server_stamps == (first_run + stamped_from < EARLY_RECORDS)
    assert RecordAudit.merged(t.audit for t in parts) == RecordAudit.from_records(a + b) == whole.audit
    assert CachedTokens.merged(t.cached for t in parts) == whole.cached
    assert prefix_cache_observed(None, CachedTokens.merged(t.cached for t in parts)) == prefix_cache_observed(None, a + b)


def test_load_summary_figures_from_the_tally() -> None:
    records = _records(200, 3, stamped_from=0)
    t = RecordTally.of(records)
    assert t.failures.top() == error_messages(records) and t.failures.top()[0]["count"] > 1  # numbers folded
    assert option_c_error_of(t.option_c_ns()) == option_c_error(records) is not None
    assert t.pre_content == sum(1 for r in records if r.first_chunk_ns < r.first_token_ns) > 0
    assert t.connection_failures == sum(1 for r in records if r.error_type is ErrorType.CONNECT) > 0
    sends = SendTimes.of(records)
    for name in ("intended", "handoff", "has_state", "inflight", "oldest"):
        assert np.array_equal(t.sends.column(name), sends.column(name))
    assert t.sends.max_inflight == max(r.inflight_at_send for r in records)


def test_a_run_without_a_tally_is_tallied_once_from_its_records() -> None:
    records = _records(20, 4)
    m = SimpleNamespace(records=records, tally=None)
    t = tally_of(m)  # type: ignore[arg-type]
    assert m.tally is t and tally_of(m) is t and t.n == 20  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 2, 7, 40, 41])
def test_the_workload_as_run_from_histograms_is_numpys(n: int) -> None:
    """min, max, median (np.median: the middle one, the mean of the two middle ones) and mean of the lengths
    sent, from their histograms: the same numbers as the arrays of the lengths."""
    records = _records(n, 5 + n)
    w = {"name": "synthetic-uniform", "synthetic_standin": True}
    got = sample.as_run(w, 20, SentLengths.merged([RecordTally.of(records[: n // 2]).lengths,
                                                   RecordTally.of(records[n // 2:]).lengths]))
    ins = np.array([r.spec_input_tokens for r in records], dtype=np.int64)
    outs = np.array([r.max_tokens for r in records], dtype=np.int64)
    for key, a in (("input_length", ins), ("output_length", outs)):
        assert got[key]["params"] == {"min": int(a.min()), "p50": float(np.median(a)),
                                      "mean": round(float(a.mean()), 2), "max": int(a.max())}
    assert ("output capped at 20 tokens" in got["altered_by"]) == bool((outs >= 20).any())


def test_a_lazy_workload_answers_without_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's disjointness check, the longest prompt and the 4.3.2 checks of a lazy (capped) workload
    from what it noted when generated: the answers of a pass over its requests, and no pass made."""
    wl = build_workload("synthetic-uniform", n=300, seed=7, lazy=True)
    stream = cap_output(wl.specs, 100)
    assert isinstance(stream, SpecStream)
    specs = list(stream)
    as_list = build_workload("synthetic-uniform", n=300, seed=7)
    assert specs == cap_output(as_list.specs, 100)  # the same requests as the list workload's
    hashes = {s.prompt_hash for s in specs[::37]} | {"0123456789abcdef", "not a hash"}
    expected = reference_checks(dataclasses.replace(wl, specs=specs))
    longest = max(specs, key=lambda s: s.input_tokens)

    def no_pass(self: SpecStream) -> None:
        raise AssertionError("the stream was read")

    monkeypatch.setattr(SpecStream, "__iter__", no_pass)
    assert stream.hashes_among(hashes) == {s.prompt_hash for s in specs[::37]}
    assert stream.longest() == longest
    assert stream.max_total() >= max(s.input_tokens + s.max_tokens for s in specs)
    assert reference_checks(dataclasses.replace(wl, specs=stream)) == expected
    assert stream.map(lambda s: s).longest() is None  # another transform: not known without a pass


def test_a_lazy_workload_sends_the_hash_it_noted(tmp_path: Path) -> None:
    """A request drawn from the stream carries the prompt hash noted at generation (not computed again):
    the hash of its prompt."""
    stream = cap_output(build_workload("synthetic-uniform", n=20, seed=3, lazy=True).specs, 30)
    for s in stream:
        noted = s.prompt_hash
        object.__setattr__(s, "_prompt_hash", None)
        assert s.prompt_hash == noted and s.max_tokens <= 30
