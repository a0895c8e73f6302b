"""The simulator's output vocabulary: words that are exactly one reference-tokenizer token each.

Every word is lower-case ASCII letters with a leading space (" the", " model"). The reference
tokenizer (``cl100k_base``, §4.4) splits text into pre-tokens at such word starts, so any
concatenation of these words tokenizes back into exactly one token per word: a client that
re-tokenizes the joined output counts exactly ``completion_tokens`` tokens.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from ..common.tokenizer import get_tokenizer

__all__ = ["Vocabulary", "get_vocabulary"]

_WORD = re.compile(r" [a-z]{3,10}")


@dataclass(frozen=True)
class Vocabulary:
    """Parallel tuples: the word, its token id, and its JSON string literal as bytes."""

    words: tuple[str, ...]
    ids: tuple[int, ...]
    json_bytes: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.words)


@functools.lru_cache(maxsize=4)
def get_vocabulary(size: int = 1024, scan_ids: int = 40000) -> Vocabulary:
    """The ``size`` lowest-id (most frequent) single-token words, each verified to round-trip."""
    tok = get_tokenizer()
    words: list[str] = []
    ids: list[int] = []
    for i in range(scan_ids):
        try:
            w = tok.decode([i])
        except Exception:  # ids without a token (gaps in the vocabulary)
            continue
        if _WORD.fullmatch(w) and tok.encode(w) == [i]:
            words.append(w)
            ids.append(i)
            if len(words) == size:
                break
    if len(words) < size:  # pragma: no cover - would mean a different tokenizer
        raise RuntimeError(f"reference tokenizer has only {len(words)} single-token words, need {size}")
    return Vocabulary(tuple(words), tuple(ids), tuple(json.dumps(w).encode() for w in words))
