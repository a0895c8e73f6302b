"""Workload container, declaration (§4.3.1, §4.3.3), replay files and prompt rendering (§4.4).

A :class:`Workload` is the exact list of :class:`~pytest_llmbench.common.records.RequestSpec` to send
plus its :class:`WorkloadDeclaration`, the text a report prints about it. The request sequence is
serialized canonically (one spec per line, sorted keys, UTF-8), so the same seed gives the same
bytes and the SHA-256 of those bytes identifies the sequence (4.3.3-MUST-1, 4.3.3-SHOULD-1).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..common.files import LineSpool
from ..common.jsonable import jsonable
from ..common.records import RequestSpec
from ..common.seeds import WORKLOAD_GENERATOR_VERSION
from ..common.tokenizer import Tokenizer, get_tokenizer
from .distributions import LengthDistribution, WorkloadError

__all__ = [
    "MismatchStats",
    "SpecStream",
    "Workload",
    "WorkloadDeclaration",
    "chat_messages",
    "completion_prompt_ids",
    "dumps_requests",
    "check_requests",
    "load_requests",
    "reference_checks",
    "retokenization_mismatch",
    "save_requests",
    "sequence_sha256",
]


# ---------------------------------------------------------------------- serialization
_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(RequestSpec) if f.init)  # not the cached hash


def _spec_dict(spec: RequestSpec) -> dict[str, Any]:
    """Same dict as ``spec.to_json()`` without ``dataclasses.asdict``'s per-element deep copy.

    (``asdict`` copies a 100K-token ``prompt_ids`` tuple element by element: seconds per spec.)
    """
    d = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    if spec.prompt_ids is not None:
        d["prompt_ids"] = list(spec.prompt_ids)
    if spec.stop is not None:
        d["stop"] = list(spec.stop)
    return d


def _spec_line(spec: RequestSpec) -> str:
    return json.dumps(_spec_dict(spec), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def dumps_requests(specs: Iterable[RequestSpec]) -> bytes:
    """The canonical JSON Lines bytes of a request sequence (what :func:`save_requests` writes)."""
    return "".join(_spec_line(s) + "\n" for s in specs).encode("utf-8")


def sequence_sha256(specs: Iterable[RequestSpec]) -> str:
    """SHA-256 of :func:`dumps_requests`: equal hashes mean byte-identical request sequences."""
    h = hashlib.sha256()
    for s in specs:
        h.update((_spec_line(s) + "\n").encode("utf-8"))
    return h.hexdigest()


def save_requests(path: str | os.PathLike[str], specs: Iterable[RequestSpec]) -> str:
    """Write the exact request sequence as JSON Lines (4.3.3-SHOULD-1); returns its SHA-256."""
    data = dumps_requests(specs)
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def check_requests(path: str | os.PathLike[str]) -> int:
    """Read a request file (:func:`save_requests`) line by line without keeping it, before any request is
    sent (issue 46): the number of requests, or a :class:`WorkloadError` naming the file and the line."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"request file {str(p)!r} does not exist")
    count = 0
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                RequestSpec.from_json(json.loads(line))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise WorkloadError(f"{p}:{lineno}: not a request spec: {exc}") from exc
            count += 1
    if not count:
        raise WorkloadError(f"request file {str(p)!r} holds no request")
    return count


def load_requests(path: str | os.PathLike[str]) -> list[RequestSpec]:
    """Read a file written by :func:`save_requests` back into specs, in order (replay)."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"request file {str(p)!r} does not exist")
    specs = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                specs.append(RequestSpec.from_json(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise WorkloadError(f"{p}:{lineno}: not a request spec: {exc}") from exc
    return specs


# ---------------------------------------------------------------------- rendering (§4.4)
@functools.lru_cache(maxsize=64)
def _encode_cached(tokenizer: Tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text))


def completion_prompt_ids(spec: RequestSpec, tokenizer: Tokenizer | None = None) -> list[int]:
    """Token-id prompt for the completions endpoint: system-prompt ids + ``prompt_ids``.

    Its length is ``spec.input_tokens`` for every generated workload (the system prompt's ids are
    cached, so a shared system prompt is encoded once). Raises when the spec has no ids.
    """
    if spec.prompt_ids is None:
        raise WorkloadError(f"request {spec.index} of {spec.workload!r} has no prompt_ids (text-only spec)")
    if not spec.system_prompt:
        return list(spec.prompt_ids)
    tok = tokenizer or get_tokenizer()
    return list(_encode_cached(tok, spec.system_prompt)) + list(spec.prompt_ids)


def chat_messages(spec: RequestSpec) -> list[dict[str, str]]:
    """Chat-completions messages: the decoded text, system prompt first when there is one."""
    msgs = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
    msgs.append({"role": "user", "content": spec.prompt_text})
    return msgs


@dataclass(frozen=True)
class MismatchStats:
    """How far re-tokenized prompts are from their intended length (§4.4, App. A.1.4).

    ``delta`` = tokens of the text as the chat endpoint sends it (system prompt + user text,
    encoded separately) minus ``input_tokens``. ``ids_mismatched`` counts specs whose
    ``prompt_ids`` differ from ``encode(prompt_text)`` (the completions and chat endpoints would
    see different prompts).
    """

    tokenizer: str
    n: int
    mismatched: int
    ids_mismatched: int
    mean_delta: float
    mean_abs_delta: float
    max_abs_delta: int
    max_rel_delta: float

    @property
    def fraction(self) -> float:
        return self.mismatched / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}


def retokenization_mismatch(specs: Sequence[RequestSpec], tokenizer: Tokenizer | None = None) -> MismatchStats:
    """Re-tokenize every spec's text and compare with its intended length and ids (§4.4)."""
    tally = _Retokenization(len(specs), tokenizer or get_tokenizer())
    tally.add(specs)
    return tally.stats()


class _Retokenization:
    """:func:`retokenization_mismatch` over ``n`` specs given a block at a time."""

    def __init__(self, n: int, tokenizer: Tokenizer) -> None:
        self.tok = tokenizer
        self.deltas = np.zeros(n, dtype=np.int64)
        self.rel = np.zeros(n)
        self.ids_bad = 0
        self.k = 0

    def add(self, specs: Sequence[RequestSpec]) -> None:
        tok = self.tok
        batch = getattr(tok, "encode_batch", None)
        texts = [s.prompt_text for s in specs]
        encoded = batch(texts) if batch is not None else [tok.encode(t) for t in texts]
        deltas, rel = self.deltas, self.rel
        for s, ids in zip(specs, encoded):
            k = self.k
            sys_n = len(_encode_cached(tok, s.system_prompt)) if s.system_prompt else 0
            deltas[k] = sys_n + len(ids) - s.input_tokens
            rel[k] = abs(deltas[k]) / max(s.input_tokens, 1)
            if s.prompt_ids is not None and tuple(ids) != tuple(s.prompt_ids):
                self.ids_bad += 1
            self.k += 1

    def stats(self) -> MismatchStats:
        n, deltas, rel = self.k, self.deltas[: self.k], self.rel[: self.k]
        return MismatchStats(
            tokenizer=self.tok.declaration.name,
            n=n,
            mismatched=int(np.count_nonzero(deltas)),
            ids_mismatched=self.ids_bad,
            mean_delta=float(deltas.mean()) if n else 0.0,
            mean_abs_delta=float(np.abs(deltas).mean()) if n else 0.0,
            max_abs_delta=int(np.abs(deltas).max()) if n else 0,
            max_rel_delta=float(rel.max()) if n else 0.0,
        )


# ---------------------------------------------------------------------- declaration
_REFERENCE_NAMES = ("synthetic-uniform", "synthetic-skewed", "conversation", "code-completion", "long-context")

def _summary(x: np.ndarray) -> dict[str, float]:
    if x.size == 0:
        return {"count": 0}
    return {
        "count": int(x.size),
        "mean": round(float(x.mean()), 3),
        "min": int(x.min()),
        **{f"p{q}": float(np.percentile(x, q)) for q in (50, 95, 99)},
        "max": int(x.max()),
    }


def _generator_version() -> str:
    try:
        own = metadata.version("pytest-llmbench")
    except metadata.PackageNotFoundError:  # pragma: no cover
        own = "unknown"
    return (f"pytest-llmbench {own}; workload generator v{WORKLOAD_GENERATOR_VERSION}; "
            f"numpy {np.__version__} PCG64 (SeedSequence)")


@dataclass
class WorkloadDeclaration:
    """Everything a report states about a workload (§4.3.1, §4.3.3, §4.4.1).

    ``standard`` is True only for an unmodified reference workload (App. A); anything else is a
    custom workload and is reported in full (4.3-MUST-1): ``spec`` then holds the complete spec.
    """

    name: str
    description: str
    standard: bool
    seed: int
    request_count: int
    input_length: LengthDistribution
    output_length: LengthDistribution
    output_control: str
    content: dict[str, Any]
    prefix_sharing: dict[str, Any]
    tokenizer: dict[str, Any]
    temperature: float = 0.0
    dataset: dict[str, Any] | None = None
    synthetic_standin: bool = False
    standin_label: str | None = None
    classes: list[dict[str, Any]] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    generator: str = field(default_factory=_generator_version)
    observed: dict[str, Any] = field(default_factory=dict)
    retokenization: dict[str, Any] | None = None
    request_sequence_sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; also carries the key names the compliance checks read.

        Added keys: ``custom`` (= not ``standard``), ``base`` (the reference workload this one
        derives from, when any), ``output_length.control``, ``content.system_prompt_len`` and
        ``prefix_sharing.length_distribution`` (aliases of the fields of this class).
        """
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["input_length"] = self.input_length.to_json()
        d["output_length"] = {**self.output_length.to_json(), "control": self.output_control}
        d["content"] = {**self.content, "system_prompt_len": self.content.get("system_prompt_tokens")}
        d["prefix_sharing"] = {**self.prefix_sharing, "length_distribution": self.prefix_sharing.get("length")}
        d["custom"] = not self.standard
        d["base"] = self.name if self.name in _REFERENCE_NAMES else None
        return jsonable(d)

    def missing_fields(self) -> list[str]:
        """4.3.1/4.3.3 fields that are empty (what a compliance check flags)."""
        out = []
        for key in ("domain", "language", "system_prompt", "system_prompt_tokens"):
            if self.content.get(key) in (None, ""):
                out.append(f"content.{key}")
        for key in ("fraction", "length"):
            if key not in self.prefix_sharing:
                out.append(f"prefix_sharing.{key}")
        if self.dataset is not None:
            for key in ("version", "subset_selection", "preprocessing"):
                if not self.dataset.get(key) or self.dataset.get(key) == "unspecified":
                    out.append(f"dataset.{key}")
        return out


class SpecStream:
    """A workload's requests drawn lazily (§4.3.3: the same seed, the same requests): written once,
    as they were generated, to a :class:`~..common.files.LineSpool` as their canonical lines
    (:func:`dumps_requests`) and read back one at a time on each iteration. Re-iterable, with a
    known count; memory holds the request being sent, never the workload. ``map`` gives the same
    stream with each request transformed (e.g. its output capped)."""

    def __init__(self, spool: LineSpool, count: int,
                 transform: Callable[[RequestSpec], RequestSpec] | None = None) -> None:
        self._spool, self._count, self._transform = spool, count, transform

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[RequestSpec]:
        t = self._transform
        for line in self._spool.lines():
            spec = RequestSpec.from_json(orjson.loads(line))
            yield spec if t is None else t(spec)

    def map(self, fn: Callable[[RequestSpec], RequestSpec]) -> SpecStream:
        t = self._transform
        return SpecStream(self._spool, self._count, fn if t is None else lambda s: fn(t(s)))

    def __repr__(self) -> str:
        return f"SpecStream({self._count} requests)"


@dataclass
class Workload:
    """The requests to send (``specs``: a list, or a :class:`SpecStream` for a workload built lazily)
    and what the report says about them (``declaration``)."""

    specs: list[RequestSpec] | SpecStream
    declaration: WorkloadDeclaration

    def __len__(self) -> int:
        return len(self.specs)

    def __iter__(self) -> Iterator[RequestSpec]:
        return iter(self.specs)

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the specs (JSON Lines) and ``<path>.declaration.json``; returns the sequence hash."""
        digest = save_requests(path, self.specs)
        Path(str(path) + ".declaration.json").write_text(
            json.dumps(self.declaration.to_json(), indent=2, sort_keys=True, ensure_ascii=False), encoding="utf-8"
        )
        return digest


def finish(
    specs: list[RequestSpec],
    declaration: WorkloadDeclaration,
    tokenizer: Tokenizer,
    *,
    check: bool = True,
) -> Workload:
    """Fill the observed lengths, the re-tokenization check and the sequence hash."""
    return finish_blocks([specs], declaration, tokenizer, n=len(specs), check=check)


def finish_blocks(
    blocks: Iterable[Sequence[RequestSpec]],
    declaration: WorkloadDeclaration,
    tokenizer: Tokenizer,
    *,
    n: int,
    check: bool = True,
    lazy: bool = False,
) -> Workload:
    """:func:`finish` for ``n`` specs generated a block at a time; ``lazy``: the specs go to a
    :class:`SpecStream` as they come, so the workload is never held in memory."""
    inp = np.empty(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    retok = _Retokenization(n, tokenizer) if check else None
    digest = hashlib.sha256()
    spool = LineSpool() if lazy else None
    specs: list[RequestSpec] = []
    shared, classes, k = 0, {}, 0
    any_prefix = any_class = False
    for block in blocks:
        for s in block:
            inp[k], out[k] = s.input_tokens, s.max_tokens
            k += 1
            any_prefix |= s.prefix_id is not None
            shared += s.prefix_id is not None
            if s.request_class is not None:
                any_class = True
            classes[str(s.request_class)] = classes.get(str(s.request_class), 0) + 1
            line = (_spec_line(s) + "\n").encode("utf-8")
            digest.update(line)
            if spool is not None:
                spool.append(line[:-1])
            else:
                specs.append(s)
        if retok is not None:
            retok.add(block)
    if k != n:
        raise WorkloadError(f"workload {declaration.name!r}: {k} requests generated, {n} declared")
    declaration.observed = {"input_tokens": _summary(inp), "max_tokens": _summary(out)}
    if any_prefix:
        declaration.observed["shared_prefix_fraction"] = shared / n
    if any_class:
        declaration.observed["class_counts"] = classes
    if retok is not None:
        declaration.retokenization = retok.stats().to_json()
    declaration.request_sequence_sha256 = digest.hexdigest()
    return Workload(SpecStream(spool, n) if spool is not None else specs, declaration)


# ---------------------------------------------------------------------- reference checks
def reference_checks(workload: Workload) -> dict[str, tuple[bool, str]]:
    """Checks of the 4.3.2 PARAM items this workload's requests can answer: id -> (met, reason).

    Computed from the specs themselves (not from the declaration), for the compliance table.
    """
    specs = workload.specs
    name = workload.declaration.name
    out: dict[str, tuple[bool, str]] = {}
    if not specs:
        return out
    cols = array("q"), array("q"), array("b")  # one pass: a lazy workload is read from its spool once
    for s in specs:
        cols[0].append(s.input_tokens)
        cols[1].append(s.max_tokens)
        cols[2].append(s.prefix_id is not None)
    inp, mx = np.frombuffer(cols[0], dtype=np.int64), np.frombuffer(cols[1], dtype=np.int64)
    shared = np.frombuffer(cols[2], dtype=np.int8).astype(bool)
    if name == "synthetic-uniform":
        ok = inp.min() >= 128 and inp.max() <= 512 and mx.min() >= 64 and mx.max() <= 256 and not shared.any()
        out["4.3.2-PARAM-2"] = (bool(ok), f"inputs {inp.min()}-{inp.max()}, max_tokens {mx.min()}-{mx.max()}, "
                                          f"shared prefixes {int(shared.sum())}")
    elif name == "synthetic-skewed":
        ok = inp.max() <= 4096 and mx.max() <= 2048 and not shared.any()
        out["4.3.2-PARAM-3"] = (bool(ok), f"max input {inp.max()} (cap 4096), max output {mx.max()} (cap 2048), "
                                          f"median input {float(np.median(inp)):.0f} (e^5.5 = 245)")
    elif name == "conversation":
        sys_prompts = {s.system_prompt for s in specs if s.system_prompt}
        frac = float(shared.mean())
        se = math.sqrt(0.25 / len(specs))
        n_tok = {s.prefix_tokens for s in specs if s.system_prompt}
        ok = len(sys_prompts) == 1 and n_tok == {200} and abs(frac - 0.5) <= max(3 * se, 1 / len(specs))
        out["4.3.2-PARAM-4"] = (bool(ok), f"{frac:.1%} of requests share {len(sys_prompts)} system prompt(s) of "
                                          f"{sorted(n_tok)} tokens")
    elif name == "code-completion":
        frac = float(shared.mean())
        prefixes = {s.prefix_id for s in specs if s.prefix_id}
        ok = abs(frac - 0.8) <= max(3 * math.sqrt(0.16 / len(specs)), 1 / len(specs))
        out["4.3.2-PARAM-5"] = (bool(ok), f"{frac:.1%} of requests start with one of {len(prefixes)} repository "
                                          "context prefixes")
    elif name == "long-context":
        lengths = set(workload.declaration.params.get("lengths") or [])
        ok = bool((mx == 256).all()) and set(inp.tolist()) <= lengths
        within = bool(inp.min() >= 8192 and inp.max() <= 32768)
        out["4.3.2-PARAM-6"] = (ok and within, f"max_tokens {sorted(set(mx.tolist()))}, input lengths "
                                               f"{sorted(set(inp.tolist()))}" + ("" if within else
                                               " (outside 4.3.2.5's 8192-32768; draft ambiguity 5)"))
    return out
