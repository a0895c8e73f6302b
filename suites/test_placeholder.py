"""Placeholder until the procedures (5.1-5.10) land: checks the reference tokenizer is usable offline."""

from pytest_llmbench.tokenizer import get_tokenizer


def test_reference_tokenizer_offline() -> None:
    tok = get_tokenizer()
    assert tok.encode("hello world") == [15339, 1917]
