"""Reference tokenizer (§4.4): offline cl100k_base, declaration, token start offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.tokenizer import TokenizerError, get_tokenizer


def test_cl100k_offline_known_ids() -> None:
    tok = get_tokenizer("cl100k_base")
    assert tok.encode("hello world") == [15339, 1917]
    assert tok.decode([15339, 1917]) == "hello world"
    decl = tok.declaration
    assert decl.name == "cl100k_base" and decl.vocab_size == 100277 and "tiktoken" in decl.version


def test_token_starts_hand_computed() -> None:
    assert get_tokenizer().token_starts("hello world") == [0, 5]
    assert get_tokenizer().token_starts("") == []


@settings(deadline=None, max_examples=60)
@given(st.text(max_size=80))
def test_token_starts_monotone_and_in_range(text: str) -> None:
    starts = get_tokenizer().token_starts(text)
    assert len(starts) == len(get_tokenizer().encode(text))
    assert all(0 <= s <= len(text) for s in starts)
    assert starts == sorted(starts)


def test_unknown_tokenizer_is_an_error() -> None:
    with pytest.raises(TokenizerError, match="not-a-tokenizer"):
        get_tokenizer("not-a-tokenizer")
