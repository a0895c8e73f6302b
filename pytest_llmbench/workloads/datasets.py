"""User-supplied datasets: ShareGPT conversations (A.3) and source code (A.4).

Nothing is downloaded: the user points at files, through a marker's ``dataset=`` workload parameter
or for a whole session through ``--llm-dataset conversation=PATH`` / ``code-completion=PATH``
(:func:`parse_dataset_options`, :func:`using_datasets`). What was read, how it was selected and how
it was preprocessed is returned for the declaration (4.3.3-MUST-3), with the file's SHA-256, and
whether the file is the draft's (:func:`identify_sharegpt`, :func:`identify_code`): only then is the
workload the standard one (§4.3.2, App. A.3.1, A.4.1); any other file makes it custom (4.3-MUST-1).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..common import draft
from ..common.tokenizer import Tokenizer
from ..measure.stats import percentile_estimate
from .distributions import WorkloadError

__all__ = [
    "DATASET_WORKLOADS",
    "STATISTICS_CONFIDENCE",
    "STATISTICS_TOLERANCE",
    "CodeFunction",
    "CodeSource",
    "DatasetOption",
    "ShareGPTSelection",
    "check_dataset",
    "dataset_params",
    "identify_code",
    "identify_sharegpt",
    "length_statistics",
    "load_code_dataset",
    "load_sharegpt",
    "reference_quantiles",
    "parse_dataset_options",
    "using_datasets",
]

_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}

#: The workloads that read a user's dataset file (marker ``dataset=``, ``--llm-dataset NAME=PATH``).
DATASET_WORKLOADS = ("conversation", "code-completion")

#: Relative tolerance on each A.3.2 percentile for identifying the draft's ShareGPT file by name and
#: version (docs/workloads.md "Standard or custom"): A.3.2 names no tokenizer, and common BPE tokenizers
#: count English text within about 10 % of each other. The sampling error of a percentile drawn from a few
#: hundred prompts is larger (±14 % at P99 from 1,200 draws), so it is allowed for separately: the reference
#: must lie within the drawn percentile's distribution-free 99 % confidence interval (order statistics)
#: widened by this tolerance. That admits the draft's file under any common tokenizer and rejects a
#: different chat corpus, whose median is typically off by far more.
STATISTICS_TOLERANCE = 0.15
STATISTICS_CONFIDENCE = 0.99  # of the order-statistic interval around each drawn percentile
_PERCENTILES = (50, 95, 99)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_records_with_lines(path: Path) -> tuple[list[Any], list[int]]:
    """The records of a JSON array or JSON Lines file and the line each one starts on (1-based; the sessions
    reader uses it too): a file that does not parse is a :class:`WorkloadError` naming ``file:line``."""
    text = path.read_text(encoding="utf-8")
    start = len(text) - len(text.lstrip())
    if text[start : start + 1] == "[":
        return _array_records(path, text, start)
    records: list[Any] = []
    lines: list[int] = []
    for k, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as exc:
            raise WorkloadError(f"{path}:{k}: not JSON or JSON Lines: {getattr(exc, 'msg', exc)}") from None
        lines.append(k)
    return records, lines


def _array_records(path: Path, text: str, start: int) -> tuple[list[Any], list[int]]:
    """A top-level JSON array read element by element (``raw_decode``), noting each element's line."""
    decoder = json.JSONDecoder()
    records: list[Any] = []
    lines: list[int] = []
    line, seen = 1, 0
    i = start + 1
    n = len(text)
    try:
        while True:
            while i < n and text[i] in " \t\r\n":
                i += 1
            if i < n and text[i] == "]" and not records:
                break
            obj, end = decoder.raw_decode(text, i)
            line += text.count("\n", seen, i)
            seen = i
            records.append(obj)
            lines.append(line)
            i = end
            while i < n and text[i] in " \t\r\n":
                i += 1
            if i < n and text[i] == ",":
                i += 1
                continue
            if i < n and text[i] == "]":
                break
            raise json.JSONDecodeError("expected ',' or ']' after an element", text, i)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}: not JSON or JSON Lines: {exc.msg}") from None
    return records, lines


# ---------------------------------------------------------------------- --llm-dataset
@dataclass(frozen=True)
class DatasetOption:
    """One ``--llm-dataset NAME=PATH`` entry (with its ``--llm-dataset-version NAME=TEXT``, if any)."""

    workload: str
    path: Path
    where: str  # the option or ini line it came from, for messages
    version: str | None = None


def _split_entry(text: str, where: str, what: str) -> tuple[str, str]:
    name, sep, value = str(text).partition("=")
    name, value = name.strip().lower().replace("_", "-"), value.strip()
    if not sep or not name or not value:
        raise WorkloadError(f"{where}: {text!r} is not NAME={what} (e.g. conversation={what}; NAME is one of "
                            f"{', '.join(DATASET_WORKLOADS)})")
    if name not in DATASET_WORKLOADS:
        raise WorkloadError(f"{where}: workload {name!r} takes no dataset file: use "
                            f"{' or '.join(f'{w}={what}' for w in DATASET_WORKLOADS)}")
    return name, value


def parse_dataset_options(entries: Sequence[tuple[str, str]], versions: Sequence[tuple[str, str]] = (),
                          base: Path | None = None) -> dict[str, DatasetOption]:
    """``--llm-dataset`` entries (``(text, where)``: ``conversation=PATH``, where it was given) with their
    ``--llm-dataset-version`` entries (``conversation=TEXT``), each file read now (:func:`check_dataset`).

    A relative path is taken from ``base`` (the ini file's directory for ini lines) or the working
    directory. A malformed entry, an unknown workload name, a name given twice, a version for a
    workload without a file, a missing or unusable file: a :class:`WorkloadError` naming where."""
    out: dict[str, DatasetOption] = {}
    for text, where in entries:
        name, value = _split_entry(text, where, "PATH")
        if name in out:
            raise WorkloadError(f"{where}: a second file for {name} ({value}); {out[name].where} gave "
                                f"{out[name].path}: give one file per workload")
        path = Path(value).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        try:
            check_dataset(name, path)
        except WorkloadError as exc:
            raise WorkloadError(f"{where} {name}={value}: {exc}") from None
        out[name] = DatasetOption(name, path, where)
    for text, where in versions:
        name, value = _split_entry(text, where, "VERSION")
        if name not in out:
            raise WorkloadError(f"{where}: a version for {name} but no --llm-dataset {name}=PATH")
        out[name] = DatasetOption(name, out[name].path, out[name].where, value)
    return out


_SESSION_DATASETS: contextvars.ContextVar[Mapping[str, DatasetOption]] = contextvars.ContextVar(
    "llmbench_session_datasets", default=MappingProxyType({}))


@contextlib.contextmanager
def using_datasets(options: Mapping[str, DatasetOption]) -> Iterator[None]:
    """Within the block (a procedure's run), the named workloads read ``options``' files unless the
    builder is given its own ``dataset`` (a marker's ``workload_params`` wins)."""
    token = _SESSION_DATASETS.set(MappingProxyType(dict(options)))
    try:
        yield
    finally:
        _SESSION_DATASETS.reset(token)


def dataset_params(workload: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the session's ``--llm-dataset`` file of ``workload`` added, unless ``params``
    names a ``dataset`` of its own (then nothing is added: not even the session's version)."""
    opt = _SESSION_DATASETS.get().get(workload)
    if opt is None or "dataset" in params:
        return dict(params)
    extra: dict[str, Any] = {"dataset": str(opt.path)}
    if opt.version is not None:
        extra["dataset_version"] = opt.version
    return {**extra, **params}


# ---------------------------------------------------------------------- ShareGPT (A.3)
@dataclass
class ShareGPTSelection:
    """Prompts drawn from a ShareGPT file: (prompt text, prompt ids, output length) per request."""

    samples: list[tuple[str, list[int], int]]
    sha256: str
    total: int
    eligible: int
    selection: str
    preprocessing: str


def _turns(conv: Any) -> list[Any] | None:
    if not isinstance(conv, dict):
        return None
    turns = conv.get("conversations", conv.get("conversation", conv.get("messages")))
    return turns if isinstance(turns, list) else None


def _first_exchange(conv: Any) -> tuple[str, str] | None:
    """First human turn and the first assistant reply after it, or None."""
    turns = _turns(conv)
    if turns is None:
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


@dataclass(frozen=True)
class _ShareGPTFile:
    sha256: str
    total: int
    pairs: tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=2)
def _sharegpt_file(path: Path, size: int, mtime_ns: int) -> _ShareGPTFile:
    """A ShareGPT file's first exchanges, read once per session (the collection check and every
    build share it; a changed file, by size or time, is read again)."""
    records, lines = _read_records_with_lines(path)
    pairs = tuple(x for x in map(_first_exchange, records) if x is not None)
    if not pairs:
        raise WorkloadError(_no_exchange(path, records, lines))
    return _ShareGPTFile(_sha256(path), len(records), pairs)


def _no_exchange(path: Path, records: list[Any], lines: list[int]) -> str:
    """Why no record of a ShareGPT file is usable, naming the first record's line."""
    expected = ('expected ShareGPT format: [{"conversations": [{"from": "human", "value": ...}, '
                '{"from": "gpt", "value": ...}]}]; A.3.1 keeps conversations with 1+ assistant turns')
    if not records:
        return f"{path}: no conversation with a human turn followed by an assistant turn: the file holds no records ({expected})"
    turns = _turns(records[0])
    if turns is None:
        what = "has no 'conversations' (or 'messages') list"
    else:
        roles = [str(t.get("from", t.get("role", "?"))) for t in turns if isinstance(t, dict)]
        what = f"has the turns {roles[:6]}{' ...' if len(roles) > 6 else ''}"
    return (f"{path}:{lines[0]}: no conversation with a human turn followed by an assistant turn in its "
            f"{len(records)} records (the first, on line {lines[0]}, {what}; {expected})")


def _open_sharegpt(path: Path) -> _ShareGPTFile:
    if not path.is_file():
        raise WorkloadError(f"ShareGPT dataset file {str(path)!r} does not exist")
    st = path.stat()
    return _sharegpt_file(path.resolve(), st.st_size, st.st_mtime_ns)


def _check_sharegpt(path: Path) -> None:
    """A ShareGPT file read as :func:`load_sharegpt` reads it, without tokenizing: it exists, parses, and
    holds at least one conversation with a human turn followed by an assistant turn (App. A.3.1)."""
    _open_sharegpt(path)


def _check_code(path: Path) -> None:
    load_code_dataset(path)


#: What :func:`check_dataset` reads for each workload that takes a ``dataset`` (§4.3, App. A.3, A.4).
_DATASET_CHECKS = {"conversation": _check_sharegpt, "code-completion": _check_code}


def check_dataset(workload: str, path: str | os.PathLike[str]) -> None:
    """Read a workload's ``dataset`` file now, before any request is sent (issue 46): a missing file, a
    file that is not JSON/JSON Lines or holds nothing usable is a :class:`WorkloadError` naming the file
    (and the line, where one is to blame). A workload that takes no dataset file is an error too."""
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
    f = _open_sharegpt(p)
    pairs = f.pairs
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
    return ShareGPTSelection(chosen, f.sha256, f.total, len(pairs), selection, prep)


# ---------------------------------------------------------------------- standard or custom
def reference_quantiles() -> dict[str, dict[int, int]]:
    """A.3.2's reference length percentiles (tokens), ``{"input": {50: 156, ...}, "output": {...}}``."""
    names = {"input": "datasets.sharegpt_input_p50_p95_p99", "output": "datasets.sharegpt_output_p50_p95_p99"}
    return {side: dict(zip(_PERCENTILES, map(int, draft.value(name)), strict=True)) for side, name in names.items()}


def length_statistics(inputs: Sequence[int] | np.ndarray, outputs: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """The drawn lengths (first human turn, first reply) beside A.3.2's reference (§4.3.2.3, A.3.2): per
    side and percentile the drawn value with its distribution-free :data:`STATISTICS_CONFIDENCE` interval,
    the reference and the relative difference; ``compared`` when the interval exists (enough draws above
    the percentile), ``within`` when the reference lies in the interval widened by
    :data:`STATISTICS_TOLERANCE`."""
    ref = reference_quantiles()
    n = len(inputs)
    tol = STATISTICS_TOLERANCE
    out: dict[str, Any] = {
        "n": n, "unit": "tokens", "tolerance": tol, "confidence": STATISTICS_CONFIDENCE,
        "rule": f"A.3.2's value within the drawn percentile's {STATISTICS_CONFIDENCE:.0%} order-statistic interval "
                f"widened by ±{tol:.0%}; compared when that interval exists (enough draws above the percentile)"}
    for side, values in (("input", inputs), ("output", outputs)):
        rows = {}
        for p in _PERCENTILES:
            want = ref[side][p]
            if n == 0:
                rows[f"p{p}"] = {"drawn": None, "ci_low": None, "ci_high": None, "reference": want,
                                 "difference": None, "compared": False, "within": None}
                continue
            est = percentile_estimate(np.asarray(values, dtype=float), p, confidence=STATISTICS_CONFIDENCE)
            lo, hi = est.ci_low, est.ci_high
            compared = lo is not None and hi is not None
            within = lo * (1 - tol) <= want <= hi * (1 + tol) if lo is not None and hi is not None else None
            rows[f"p{p}"] = {"drawn": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high, "reference": want,
                             "difference": (est.value - want) / want, "compared": compared, "within": within}
        out[side] = rows
    judged = [r for side in ("input", "output") for r in out[side].values() if r["compared"]]
    out["within_tolerance"] = bool(judged) and all(r["within"] for r in judged)
    out["compared"] = [f"{side} P{p}" for side in ("input", "output") for p in _PERCENTILES
                       if out[side][f"p{p}"]["compared"]]
    return out


def _draft_release() -> tuple[str, str]:
    """The draft's ShareGPT subset and version (App. A.3.1)."""
    return str(draft.value("datasets.sharegpt_subset")), str(draft.value("datasets.sharegpt_version"))


def identify_sharegpt(sha256: str, subset: str, version: str, stats: Mapping[str, Any]) -> dict[str, Any]:
    """Whether a ShareGPT file is the draft's (App. A.3.1) and how that was decided:

    1. by SHA-256, when ``data/draft.yaml`` knows the draft file's (``datasets.sharegpt_sha256``; the
       draft gives none, so it is null: unknown, and this step decides nothing);
    2. else by name and version: the declared subset and version (marker ``dataset_subset`` and
       ``dataset_version``, or ``--llm-dataset-version conversation=TEXT``) name the draft's
       (``vicuna_cleaned``, ``2023-04-12``), and the drawn lengths match A.3.2 within the tolerance
       (:func:`length_statistics`) on P50 and P95 at least.
    Anything else is a custom dataset. Returns ``{"standard", "method", "reason"}``."""
    known = draft.value("datasets.sharegpt_sha256")
    want_subset, want_version = _draft_release()
    name = f"ShareGPT {want_subset} {want_version}"
    if known:
        if sha256 == str(known).lower():
            return {"standard": True, "method": "sha256", "reason": f"SHA-256 matches the draft's {name} file"}
        return {"standard": False, "method": None,
                "reason": f"SHA-256 {sha256[:12]}... is not the draft's {name} file ({str(known)[:12]}...)"}
    declared = f"{subset} {version}".lower()
    why = []
    if want_subset.lower() not in declared or want_version.lower() not in declared:
        why.append(f"declared subset/version {subset!r}/{version!r} do not name {want_subset} {want_version} "
                   f"(--llm-dataset-version conversation=\"{want_subset} {want_version}\")")
    compared = set(stats.get("compared") or ())
    if not {"input P50", "input P95", "output P50", "output P95"} <= compared:
        why.append(f"{stats.get('n')} prompts drawn: too few to compare P95 with A.3.2")
    elif not stats.get("within_tolerance"):
        off = [f"{side} P{p} {r['drawn']:g} vs {r['reference']}" for side in ("input", "output")
               for p in _PERCENTILES for r in [stats[side][f"p{p}"]] if r["compared"] and not r["within"]]
        why.append(f"drawn lengths outside ±{STATISTICS_TOLERANCE:.0%} (beyond the sampling error) of A.3.2: "
                   f"{', '.join(off)}")
    if why:
        return {"standard": False, "method": None,
                "reason": f"not identified as the draft's {name} (SHA-256 unknown to the draft): {'; '.join(why)}"}
    return {"standard": True, "method": "name, version and A.3.2 statistics",
            "reason": f"declared {want_subset} {want_version}; drawn {', '.join(sorted(compared))} agree with A.3.2 "
                      f"within ±{STATISTICS_TOLERANCE:.0%} beyond the sampling error (SHA-256 unknown to the draft)"}


def identify_code(sha256: str, version: str, languages: Sequence[str]) -> dict[str, Any]:
    """Whether a code dataset is the draft's The Stack subset (App. A.4.1): by SHA-256 when
    ``data/draft.yaml`` knows it (``datasets.stack_sha256``: null, the draft gives none), else by the
    declared name (``dataset_version`` naming The Stack) with only the draft's languages drawn from.
    A.4 gives no version and no length statistics to check."""
    known = draft.value("datasets.stack_sha256")
    langs = tuple(draft.value("datasets.stack_languages"))
    if known:
        ok = sha256 == str(known).lower()
        return {"standard": ok, "method": "sha256" if ok else None,
                "reason": "SHA-256 matches the draft's The Stack file" if ok else
                f"SHA-256 {sha256[:12]}... is not the draft's The Stack file"}
    why = []
    if not re.search(r"the[\s_-]*stack", version, re.IGNORECASE):
        why.append(f"declared version {version!r} does not name The Stack "
                   "(--llm-dataset-version code-completion=\"bigcode/the-stack <version>\")")
    other = sorted(set(languages) - set(langs))
    if other:
        why.append(f"languages {other} beyond The Stack's {', '.join(langs)} subset")
    if why:
        return {"standard": False, "method": None,
                "reason": f"not identified as the draft's The Stack subset (SHA-256 unknown to the draft): {'; '.join(why)}"}
    return {"standard": True, "method": "declared name (A.4 gives no version nor statistics)",
            "reason": f"declared {version!r}; languages {', '.join(sorted(set(languages)))}"}


# ---------------------------------------------------------------------- code (A.4)
_EXT_LANG = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript", ".tsx": "typescript"}
_LANG_ALIASES = {"py": "python", "js": "javascript", "ts": "typescript"}
_SIG = re.compile(r"^(\s*)(?:export\s+)?(?:async\s+)?(def|function)\s+[A-Za-z_]\w*\s*\(.*$")
_FUNCTION_LINES = 40  # lines of a function kept for its task (signature and the start of its body)
_MAX_FUNCTIONS = 200_000  # functions kept from a large file (in file order), enough to draw tasks from


@dataclass(frozen=True)
class CodeFunction:
    """A function of the dataset (A.4.1 "function-level completions"): its first lines, its language."""

    text: str  # the signature line and up to _FUNCTION_LINES - 1 lines of its body
    language: str
    repository: str


def _functions(text: str, language: str, repository: str) -> Iterator[CodeFunction]:
    """Each function with a body: its signature line and the lines indented under it (a JavaScript or
    TypeScript closing brace at the signature's indent included), at most :data:`_FUNCTION_LINES`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _SIG.match(line)
        if m is None or len(line) >= 200:
            continue
        indent = len(m.group(1))
        body: list[str] = []
        for nxt in lines[i + 1 : i + _FUNCTION_LINES]:
            depth = len(nxt) - len(nxt.lstrip())
            if nxt.strip() and depth <= indent:
                if nxt.strip().startswith("}") and depth == indent:
                    body.append(nxt)
                break
            body.append(nxt)
        while body and not body[-1].strip():
            body.pop()
        if any(b.strip() and b.strip() != "}" for b in body):
            yield CodeFunction("\n".join([line, *body]) + "\n", language, repository)


@dataclass
class CodeSource:
    """Source files (name, language, text, repository) to cut repository contexts and tasks from (A.4.1)."""

    docs: list[tuple[str, str, str, str]]
    sha256: str
    files: int
    functions: list[CodeFunction] = field(default_factory=list)
    selection: str = (
        "each repository context: the files of one repository (a record's max_stars_repo_name or repo field, a "
        "directory's top-level folder) in a seeded random order, then other files of the same language drawn at "
        "random, until the context is full; each task: a function of the same language drawn at random"
    )
    preprocessing: str = (
        "each context: files joined with a '<comment> file: <name>' header, cut to whole lines within the "
        "target length and padded to the exact token count with one comment line of filler words; each task "
        "(A.4.1 function-level completion): a function's signature and the first lines of its body, cut to whole "
        "lines within the task length, then a TODO comment padded with filler words"
    )

    def __post_init__(self) -> None:
        self._by_lang: dict[str, list[int]] = {}
        self._by_repo: dict[tuple[str, str], list[int]] = {}
        for k, (_, lang, _, repo) in enumerate(self.docs):
            self._by_lang.setdefault(lang, []).append(k)
            self._by_repo.setdefault((repo, lang), []).append(k)
        self._fn_by_lang: dict[str, list[int]] = {}
        for k, fn in enumerate(self.functions):
            self._fn_by_lang.setdefault(fn.language, []).append(k)

    @property
    def languages(self) -> list[str]:
        return sorted(self._by_lang)

    def context(self, rng: np.random.Generator, chars: int) -> tuple[str, str]:
        """A repository context of at least ``chars`` characters: one repository's files, then files of
        its language drawn at random; returns (text, language)."""
        first = int(rng.integers(len(self.docs)))
        _, lang, _, repo = self.docs[first]
        mark = "#" if lang == "python" else "//"
        own = self._by_repo[(repo, lang)]
        order = [own[int(i)] for i in rng.permutation(len(own))]
        same = self._by_lang[lang]
        parts: list[str] = []
        size = 0
        i = 0
        while size < chars:
            k = order[i] if i < len(order) else same[int(rng.integers(len(same)))]
            name, _, text, _ = self.docs[k]
            parts.append(f"{mark} file: {name}\n{text}\n")
            size += len(parts[-1])
            i += 1
        return "".join(parts), lang

    def function(self, rng: np.random.Generator, language: str) -> CodeFunction:
        """A function to complete, of ``language`` where the dataset has one (else of any language)."""
        pool = self._fn_by_lang.get(language)
        if pool:
            return self.functions[pool[int(rng.integers(len(pool)))]]
        return self.functions[int(rng.integers(len(self.functions)))]


def _record_doc(rec: Any, k: int) -> tuple[str, str, str, str] | None:
    if not isinstance(rec, dict) or not isinstance(rec.get("content"), str) or not rec["content"].strip():
        return None
    raw_lang = str(rec.get("lang", rec.get("language", "python"))).strip().lower()
    lang = _LANG_ALIASES.get(raw_lang, raw_lang)
    name = str(rec.get("path", rec.get("max_stars_repo_path", f"record-{k}")))
    repo = str(rec.get("max_stars_repo_name", rec.get("repo", rec.get("repository", f"record-{k}"))))
    return name, lang, rec["content"], repo


def load_code_dataset(path: str | os.PathLike[str]) -> CodeSource:
    """A directory of .py/.js/.ts files, or a JSON/JSONL file of ``{"content": ..., "lang": ...}``
    records (The Stack's fields: ``content``, ``lang``, ``max_stars_repo_name``, ``max_stars_repo_path``).
    A file with no record or function to use is a :class:`WorkloadError` naming it (and its first line)."""
    p = Path(path).expanduser()
    docs: list[tuple[str, str, str, str]] = []
    h = hashlib.sha256()
    first_line = None
    if p.is_dir():
        for f in sorted(p.rglob("*")):
            lang = _EXT_LANG.get(f.suffix)
            if lang and f.is_file():
                data = f.read_bytes()
                rel = f.relative_to(p).as_posix()
                h.update(rel.encode() + b"\0" + data)
                repo = rel.split("/", 1)[0] if "/" in rel else p.name
                docs.append((rel, lang, data.decode("utf-8", errors="replace"), repo))
    elif p.is_file():
        h.update(p.read_bytes())
        records, lines = _read_records_with_lines(p)
        first_line = lines[0] if lines else 1
        for k, rec in enumerate(records):
            doc = _record_doc(rec, k)
            if doc is not None:
                docs.append(doc)
    else:
        raise WorkloadError(f"code dataset {str(p)!r} does not exist")
    where = f"{p}:{first_line}" if first_line is not None else str(p)
    if not docs:
        raise WorkloadError(f"{where}: code dataset holds no .py/.js/.ts files or records with a 'content' "
                            "string (expected JSON Lines like {\"content\": \"def f(x): ...\", \"lang\": \"python\"} "
                            "or a directory of source files)")
    functions: list[CodeFunction] = []
    for _, lang, text, repo in docs:
        functions.extend(_functions(text, lang, repo))
        if len(functions) >= _MAX_FUNCTIONS:
            break
    if not functions:
        raise WorkloadError(f"{where}: no function to complete in its {len(docs)} files or records: no Python "
                            "'def' or JavaScript/TypeScript 'function' with a body (A.4.1 extracts function-level "
                            "completions); give source code that defines functions")
    return CodeSource(docs, h.hexdigest(), len(docs), functions[:_MAX_FUNCTIONS])
