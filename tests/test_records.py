"""The RequestSpec/RequestRecord contract: JSON round trip, outcome properties, ISO 8601 anchor."""

from __future__ import annotations

import json

from factories import make_record

from pytest_llmbench.common.records import ClockAnchor, ErrorType, RequestRecord, RequestSpec


def _record() -> RequestRecord:
    spec = RequestSpec(index=3, workload="synthetic-uniform", input_tokens=200, max_tokens=64,
                       prompt_text="hi", prompt_ids=(1, 2), stop=("\n",))
    return make_record(spec=spec, unit=1, sent=10, chunks=[20, 30], text=["a", "b"], end=50)  # times in ns


def test_spec_round_trip() -> None:
    spec = RequestSpec(index=1, workload="w", input_tokens=3, max_tokens=4, prompt_text="x",
                       prompt_ids=(5, 6, 7), stop=("a",))
    assert RequestSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_record_round_trip_and_outcome() -> None:
    rec = _record()
    back = RequestRecord.from_json(json.loads(rec.dumps()))
    assert back == rec and back.ok and not back.failed
    assert back.output_text == "ab"
    rec.error_type = ErrorType.CANCELLED
    assert not rec.ok and not rec.failed  # cancelled is not an SUT failure
    rec.error_type = ErrorType.RATE_LIMITED
    back = RequestRecord.from_json(json.loads(rec.dumps()))
    assert back.error_type is ErrorType.RATE_LIMITED and back.failed


def test_record_without_text_keeps_timing() -> None:
    d = _record().to_json(keep_text=False)
    assert d["chunk_text"] == ["", ""] and d["chunk_ns"] == [20, 30]


def test_token_count_precedence() -> None:
    rec = _record()
    assert rec.input_tokens == 200 and rec.output_tokens is None
    rec.output_tokens_client, rec.input_tokens_client = 2, 190
    assert rec.output_tokens == 2 and rec.input_tokens == 190
    rec.output_tokens_server, rec.input_tokens_server = 3, 195
    assert rec.output_tokens == 3 and rec.input_tokens == 195


def test_clock_anchor_iso_millis() -> None:
    anchor = ClockAnchor(perf_ns=1_000, unix_ns=1_700_000_000_123_456_789)
    assert anchor.iso(1_000) == "2023-11-14T22:13:20.123Z"
    assert anchor.iso(1_000 + 1_000_000) == "2023-11-14T22:13:20.124Z"


def test_a_specs_prompt_hash_is_computed_once_and_never_serialised() -> None:
    """Issue 38: the hash of a long token-id prompt costs ~0.2 ms, so a spec keeps it once computed
    (the warm-up's check hashes the measured specs before the run; the record made at the send reads
    it). The cache is not part of the workload: not in ``to_json``, equality or ``dataclasses.replace``."""
    import dataclasses
    import hashlib

    from pytest_llmbench.common.records import RequestSpec
    from pytest_llmbench.workloads.core import _spec_dict

    spec = RequestSpec(index=0, workload="w", input_tokens=3, max_tokens=4, prompt_text="a b c",
                       prompt_ids=(1, 2, 3), system_prompt="sys")
    expected = hashlib.sha256(b"sys\x00" + b"1,2,3").hexdigest()[:16]
    assert spec.prompt_hash == expected and spec._prompt_hash == expected
    object.__setattr__(spec, "_prompt_hash", "cached")
    assert spec.prompt_hash == "cached"  # read, not computed again
    assert "_prompt_hash" not in spec.to_json() and "_prompt_hash" not in _spec_dict(spec)
    other = dataclasses.replace(spec, prompt_ids=(1, 2))
    assert other.prompt_hash == hashlib.sha256(b"sys\x00" + b"1,2").hexdigest()[:16]
    assert spec == dataclasses.replace(spec)  # the cache is not compared
