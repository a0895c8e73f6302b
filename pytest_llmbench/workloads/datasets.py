"""User-supplied datasets: ShareGPT conversations (A.3) and source code (A.4).

Nothing is downloaded: the user points at files. What was read, how it was selected and how it
was preprocessed is returned for the declaration (4.3.3-MUST-3), with the file's SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..common.tokenizer import Tokenizer
from .distributions import WorkloadError

__all__ = ["CodeSource", "ShareGPTSelection", "check_dataset", "load_code_dataset", "load_sharegpt"]

_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_json_records(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            data = json.loads(text)
            if not isinstance(data, list):
                raise ValueError("top level is not a list")
            return data
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise WorkloadError(f"{path}: not JSON or JSON Lines: {exc}") from exc


@dataclass
class ShareGPTSelection:
    """Prompts drawn from a ShareGPT file: (prompt text, prompt ids, output length) per request."""

    samples: list[tuple[str, list[int], int]]
    sha256: str
    total: int
    eligible: int
    selection: str
    preprocessing: str


def _first_exchange(conv: Any) -> tuple[str, str] | None:
    """First human turn and the first assistant reply after it, or None."""
    if not isinstance(conv, dict):
        return None
    turns = conv.get("conversations", conv.get("conversation", conv.get("messages")))
    if not isinstance(turns, list):
        return None
    prompt = None
    for t in turns:
        if not isinstance(t, dict):
            continue
        who = str(t.get("from", t.get("role", ""))).lower()
        value = t.get("value", t.get("content"))
        if not isinstance(value, str):
            continue
        if prompt is None and who in _HUMAN and value.strip():
            prompt = value
        elif prompt is not None and who in _ASSISTANT and value.strip():
            return prompt, value
    return None


def _check_sharegpt(path: Path) -> None:
    """A ShareGPT file read as :func:`load_sharegpt` reads it, without tokenizing: it exists, parses, and
    holds at least one conversation with a human turn followed by an assistant turn (App. A.3.1)."""
    if not path.is_file():
        raise WorkloadError(f"ShareGPT dataset file {str(path)!r} does not exist")
    if not any(_first_exchange(conv) is not None for conv in _read_json_records(path)):
        raise WorkloadError(
            f"{path}: no conversation with a human turn followed by an assistant turn "
            "(expected ShareGPT format: [{\"conversations\": [{\"from\": \"human\", \"value\": ...}, ...]}])"
        )


#: What :func:`check_dataset` reads for each workload that takes a ``dataset`` (§4.3, App. A.3, A.4).
_DATASET_CHECKS = {"conversation": _check_sharegpt, "code-completion": lambda p: load_code_dataset(p) and None}


def check_dataset(workload: str, path: str | os.PathLike[str]) -> None:
    """Read a workload's ``dataset`` file now, before any request is sent (issue 46): a missing file, a
    file that is not JSON/JSON Lines or holds nothing usable is a :class:`WorkloadError` naming the file.
    A workload that takes no dataset file is an error too."""
    check = _DATASET_CHECKS.get(workload)
    if check is None:
        raise WorkloadError(f"workload {workload!r} takes no dataset file (only "
                            f"{', '.join(sorted(_DATASET_CHECKS))} do); remove dataset={str(path)!r}")
    check(Path(path).expanduser())


def load_sharegpt(
    path: str | os.PathLike[str],
    tokenizer: Tokenizer,
    *,
    n: int,
    rng: np.random.Generator,
    min_tokens: int = 4,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
) -> ShareGPTSelection:
    """Pick ``n`` prompts from a ShareGPT JSON/JSONL file (A.3.1), tokenizing only what is used."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise WorkloadError(f"ShareGPT dataset file {str(p)!r} does not exist")
    records = _read_json_records(p)
    pairs = [x for x in map(_first_exchange, records) if x is not None]
    if not pairs:
        raise WorkloadError(
            f"{p}: no conversation with a human turn followed by an assistant turn "
            "(expected ShareGPT format: [{\"conversations\": [{\"from\": \"human\", \"value\": ...}, ...]}])"
        )
    chosen: list[tuple[str, list[int], int]] = []
    for k in rng.permutation(len(pairs)):
        prompt, reply = pairs[int(k)]
        ids = tokenizer.encode(prompt)
        out = len(tokenizer.encode(reply))
        if len(ids) < min_tokens or out < min_tokens:
            continue
        if max_input_tokens is not None and len(ids) > max_input_tokens:
            continue
        if max_output_tokens is not None and out > max_output_tokens:
            continue
        chosen.append((prompt, ids, out))
        if len(chosen) == n:
            break
    if not chosen:
        raise WorkloadError(f"{p}: no conversation passes the length filters (min_tokens={min_tokens})")
    selection = (
        f"conversations in a seeded random order (numpy PCG64 from the workload seed); the first {n} "
        "passing the filters"
    )
    if len(chosen) < n:
        passed = len(chosen)
        extra = rng.integers(0, passed, size=n - passed)
        chosen += [chosen[int(i)] for i in extra]
        selection += f"; only {passed} passed, the other {n - passed} drawn from them with replacement"
    prep = (
        "kept conversations with 1+ assistant turns; prompt = first human turn, output length = tokens "
        f"of the first assistant reply after it (used as max_tokens); dropped prompts or replies under "
        f"{min_tokens} tokens"
    )
    if max_input_tokens is not None:
        prep += f", prompts over {max_input_tokens} tokens"
    if max_output_tokens is not None:
        prep += f", replies over {max_output_tokens} tokens"
    prep += f"; lengths in {tokenizer.declaration.name} tokens"
    return ShareGPTSelection(chosen, _sha256(p), len(records), len(pairs), selection, prep)


# ---------------------------------------------------------------------- code
_EXT_LANG = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript", ".tsx": "typescript"}
_SIG = re.compile(r"^\s*(?:export\s+)?(?:async\s+)?(def|function)\s+[A-Za-z_]\w*\s*\(.*$")


@dataclass
class CodeSource:
    """Source files (text, language) to cut repository contexts and tasks from (A.4.1)."""

    docs: list[tuple[str, str, str]]  # (name, language, text)
    sha256: str
    files: int
    selection: str = "files in a seeded random order, concatenated until the context is full"
    preprocessing: str = (
        "each context: files joined with a '<comment> file: <name>' header, cut to whole lines within "
        "the target length and padded to the exact token count with one comment line of filler words; "
        "each task: a function signature line from a random file plus a TODO comment"
    )
    signatures: list[tuple[str, str]] = field(default_factory=list)  # (line, language)

    def __post_init__(self) -> None:
        for _, lang, text in self.docs:
            for line in text.splitlines():
                if _SIG.match(line) and len(line) < 200:
                    self.signatures.append((line.strip(), lang))

    def context(self, rng: np.random.Generator, chars: int) -> tuple[str, str]:
        order = rng.permutation(len(self.docs))
        lang = self.docs[int(order[0])][1]
        mark = "#" if lang == "python" else "//"
        parts: list[str] = []
        size = 0
        i = 0
        while size < chars:
            name, _, text = self.docs[int(order[i % len(order)])]
            parts.append(f"{mark} file: {name}\n{text}\n")
            size += len(parts[-1])
            i += 1
        return "".join(parts), lang

    def task_head(self, rng: np.random.Generator) -> str:
        if not self.signatures:
            return "def complete_this(value):\n    # TODO:"
        line, lang = self.signatures[int(rng.integers(len(self.signatures)))]
        if lang == "python":
            return f"{line}\n    # TODO:"
        return f"{line}\n  // TODO:"


def load_code_dataset(path: str | os.PathLike[str]) -> CodeSource:
    """A directory of .py/.js/.ts files, or a JSON/JSONL file of ``{"content": ..., "lang": ...}``."""
    p = Path(path).expanduser()
    docs: list[tuple[str, str, str]] = []
    h = hashlib.sha256()
    if p.is_dir():
        for f in sorted(p.rglob("*")):
            lang = _EXT_LANG.get(f.suffix)
            if lang and f.is_file():
                data = f.read_bytes()
                h.update(f.relative_to(p).as_posix().encode() + b"\0" + data)
                docs.append((f.relative_to(p).as_posix(), lang, data.decode("utf-8", errors="replace")))
    elif p.is_file():
        h.update(p.read_bytes())
        for k, rec in enumerate(_read_json_records(p)):
            if isinstance(rec, dict) and isinstance(rec.get("content"), str) and rec["content"].strip():
                raw_lang = str(rec.get("lang", rec.get("language", "python"))).lower()
                lang = {"py": "python", "js": "javascript", "ts": "typescript"}.get(raw_lang, raw_lang)
                docs.append((str(rec.get("path", rec.get("max_stars_repo_path", f"record-{k}"))), lang, rec["content"]))
    else:
        raise WorkloadError(f"code dataset {str(p)!r} does not exist")
    if not docs:
        raise WorkloadError(f"code dataset {str(p)!r} holds no .py/.js/.ts files or records with 'content'")
    return CodeSource(docs, h.hexdigest(), len(docs))
