"""Per-chunk counts when byte-level tokens stream as chunks with empty text (issue 33: vLLM holds the
first byte of a multi-byte character until the character completes): one token per chunk still."""

from __future__ import annotations

from factories import make_record

from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.measure.tokencount import ONE_PER_CHUNK, apply_one_per_chunk


def _rec(texts: list[str], usage: int) -> RequestRecord:
    rec = make_record(chunks=(), spec_input_tokens=4, max_tokens=usage)
    rec.chunk_text = list(texts)
    rec.chunk_ns = list(range(1, len(texts) + 1))
    rec.output_tokens_server = usage
    return rec


def test_content_chunks_one_token_each() -> None:
    rec = _rec(["a", "b", "c"], 3)
    assert apply_one_per_chunk(rec) and rec.chunk_tokens == [1, 1, 1] and rec.token_count_method == ONE_PER_CHUNK


def test_a_trailing_finish_chunk_without_text_carries_none() -> None:
    rec = _rec(["a", "b", ""], 2)  # llama.cpp: the finish chunk has no token
    assert apply_one_per_chunk(rec) and rec.chunk_tokens == [1, 1, 0]


def test_empty_text_chunks_that_carry_byte_tokens() -> None:
    rec = _rec(["", "é", "", "", "€", "x"], 6)  # completions: every chunk one token
    assert apply_one_per_chunk(rec) and rec.chunk_tokens == [1] * 6
    rec = _rec(["", "", "é", "x"], 3)  # chat: the role chunk first, then one token per chunk
    assert apply_one_per_chunk(rec) and rec.chunk_tokens == [0, 1, 1, 1]
    rec = _rec(["", "", "", ""], 4)  # nothing decodable yet: still four tokens
    assert apply_one_per_chunk(rec) and sum(rec.chunk_tokens) == 4


def test_counts_that_fit_no_rule_are_left_to_the_fallback() -> None:
    rec = _rec(["ab", "", "c"], 5)  # a multi-token chunk: not one per chunk
    assert not apply_one_per_chunk(rec) and rec.token_count_method != ONE_PER_CHUNK
