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
from ..common.records import RequestSpec, drop_session_defaults, prompt_key
from ..common.seeds import WORKLOAD_GENERATOR_VERSION
from ..common.tokenizer import Tokenizer, get_tokenizer
from .distributions import LengthDistribution, WorkloadError

__all__ = [
    "MismatchStats",
    "SpecStream",
    "StreamFacts",
    "cap_spec",
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
    if spec.request_fields:
        d["request_fields"] = dict(spec.request_fields)
    else:  # a workload without extra body fields hashes as before (request_sequence_sha256)
        del d["request_fields"]
    drop_session_defaults(d)  # so does a single-turn workload (no session fields)
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
    msgs.extend({"role": role, "content": content} for role, content in spec.history)  # a session's earlier turns
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


@dataclass
class StreamFacts:
    """What later steps read of a lazy workload's requests, noted once as they were generated (issue 46), so
    that none of them reads the stream again: each request's prompt hash (:attr:`RequestSpec.prompt_hash`,
    8 bytes each, in order: the warm-up's disjointness check, §4.5.1, and the hash a record carries), the
    histograms of input lengths and output caps and the shared-prefix count (the 4.3.2 checks, §4.3.2), the
    longest prompt (the pre-flight request) and the longest prompt plus output (the context check)."""

    keys: array[int] = field(default_factory=lambda: array("Q"))
    inputs: dict[int, int] = field(default_factory=dict)
    max_tokens: dict[int, int] = field(default_factory=dict)
    shared: int = 0
    longest: tuple[int, bytes] = (-1, b"")  # (input tokens, line) of the first request with the most
    max_total: int = 0  # the most input + max_tokens of one request

    def add(self, s: RequestSpec, line: bytes) -> None:
        self.keys.append(int(s.prompt_hash, 16))
        self.inputs[s.input_tokens] = self.inputs.get(s.input_tokens, 0) + 1
        self.max_tokens[s.max_tokens] = self.max_tokens.get(s.max_tokens, 0) + 1
        self.shared += s.prefix_id is not None
        if s.input_tokens > self.longest[0]:
            self.longest = (s.input_tokens, line)
        self.max_total = max(self.max_total, s.input_tokens + s.max_tokens)


class SpecStream:
    """A workload's requests drawn lazily (§4.3.3: the same seed, the same requests): written once,
    as they were generated, to a :class:`~..common.files.LineSpool` as their canonical lines
    (:func:`dumps_requests`) and read back one at a time on each iteration. Re-iterable, with a
    known count; memory holds the request being sent, never the workload. ``capped`` gives the same
    stream with each request's output capped, ``map`` with each request transformed otherwise.

    The :class:`StreamFacts` noted at generation answer without a pass over the stream: :meth:`hashes_among`
    (the prompt hashes among some), :meth:`longest`, :meth:`max_total`, :meth:`lengths`; each answers None
    for a stream ``map`` transformed (its caller then reads the stream)."""

    def __init__(self, spool: LineSpool, count: int,
                 transform: Callable[[RequestSpec], RequestSpec] | None = None, *,
                 facts: StreamFacts | None = None, cap: int | None = None) -> None:
        self._spool, self._count, self._transform = spool, count, transform
        self._facts, self._cap = facts, cap

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[RequestSpec]:
        t, cap = self._transform, self._cap
        keys = self._facts.keys if self._facts is not None else None
        for i, line in enumerate(self._spool.lines()):
            spec = self._spec(line, None if keys is None else keys[i])
            yield spec if t is None else t(spec)

    def _spec(self, line: bytes, key: int | None) -> RequestSpec:
        """One request of the spool, capped, its prompt hash known (the one noted at generation)."""
        spec = RequestSpec.from_json(orjson.loads(line))
        cap = self._cap
        if cap is not None:
            spec = dataclasses.replace(spec, max_tokens=min(spec.max_tokens, cap),
                                       min_tokens=None if spec.min_tokens is None else min(spec.min_tokens, cap))
        if key is not None:  # the prompt is the one generated: its hash is not computed again at the send
            object.__setattr__(spec, "_prompt_hash", f"{key:016x}")
        return spec

    def map(self, fn: Callable[[RequestSpec], RequestSpec]) -> SpecStream:
        t = self._transform
        return SpecStream(self._spool, self._count, fn if t is None else lambda s: fn(t(s)), facts=self._facts,
                          cap=self._cap)

    def capped(self, cap: int) -> SpecStream:
        """The same requests, each one's ``max_tokens`` (and ``min_tokens``) at most ``cap``."""
        if self._transform is not None:
            return self.map(functools.partial(cap_spec, cap=cap))
        return SpecStream(self._spool, self._count, facts=self._facts,
                          cap=cap if self._cap is None else min(cap, self._cap))

    def _known(self) -> StreamFacts | None:
        return self._facts if self._transform is None else None

    def hashes_among(self, hashes: set[str]) -> set[str] | None:
        """The prompt hashes among ``hashes`` that this stream's requests carry (None: not known without a pass)."""
        facts = self._known()
        if facts is None:
            return None
        asked = {h: k for h in hashes if (k := prompt_key(h)) is not None}  # no other string is a prompt hash
        found = np.isin(np.array(list(asked.values()), dtype=np.uint64), np.frombuffer(facts.keys, dtype=np.uint64))
        return {h for h, ok in zip(asked, found.tolist()) if ok}

    def longest(self) -> RequestSpec | None:
        """The first request with the most input tokens (None: not known without a pass)."""
        facts = self._known()
        if facts is None or facts.longest[0] < 0:
            return None
        return self._spec(facts.longest[1], None)

    def max_total(self) -> int | None:
        """The most input plus output tokens one request asks for, or more (an output cap only lowers it);
        None: not known without a pass."""
        facts = self._known()
        return None if facts is None else facts.max_total

    def lengths(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The input lengths and output caps of the requests, sorted (their histograms expanded, the cap
        applied), and how many start with a shared prefix; None: not known without a pass."""
        facts = self._known()
        if facts is None:
            return None

        def expand(h: dict[int, int], cap: int | None = None) -> np.ndarray:
            values = np.array(sorted(h), dtype=np.int64)
            counts = np.array([h[v] for v in values.tolist()], dtype=np.int64)
            a = np.repeat(values if cap is None else np.minimum(values, cap), counts)
            return np.sort(a) if cap is not None else a

        return expand(facts.inputs), expand(facts.max_tokens, self._cap), facts.shared

    def __repr__(self) -> str:
        return f"SpecStream({self._count} requests)"


def cap_spec(s: RequestSpec, cap: int) -> RequestSpec:
    """``s`` with its ``max_tokens`` (and ``min_tokens``) at most ``cap`` (the same prompt: its hash kept)."""
    out = dataclasses.replace(s, max_tokens=min(s.max_tokens, cap),
                              min_tokens=None if s.min_tokens is None else min(s.min_tokens, cap))
    if s._prompt_hash is not None:
        object.__setattr__(out, "_prompt_hash", s._prompt_hash)
    return out


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
    facts = StreamFacts() if lazy else None
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
                facts.add(s, line[:-1])  # type: ignore[union-attr]
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
    return Workload(SpecStream(spool, n, facts=facts) if spool is not None else specs, declaration)


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
    known = specs.lengths() if isinstance(specs, SpecStream) else None
    if known is not None:  # a lazy workload's lengths as noted when it was generated: no pass over it
        inp, mx, n_shared = known
        shared = np.zeros(inp.size, dtype=bool)
        shared[:n_shared] = True  # where the prefixes are does not matter to the checks, only how many
    else:
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
