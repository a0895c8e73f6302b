"""Workloads (§4.3, App. A): a definition plus a seed gives the exact list of requests to send.

>>> from pytest_llmbench.workloads import build_workload
>>> wl = build_workload("synthetic-uniform", n=1000, seed=42)
>>> wl.specs[0].input_tokens, wl.declaration.to_json()["seed"]

``build_workload`` accepts a registered name (:data:`WORKLOADS`), a custom spec file (``.toml``,
``.yaml``/``.yml``, ``.json``) or a request file written by :func:`save_requests` (``.jsonl``,
replayed as is). Builder keyword arguments pass through ``**params``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..common.tokenizer import Tokenizer, get_tokenizer
from .core import (
    MismatchStats,
    SpecStream,
    StreamFacts,
    Workload,
    WorkloadDeclaration,
    cap_spec,
    chat_messages,
    check_requests,
    completion_prompt_ids,
    dumps_requests,
    load_requests,
    reference_checks,
    retokenization_mismatch,
    save_requests,
    sequence_sha256,
)
from .custom import build_custom, load_spec, validate_spec
from .datasets import DATASET_WORKLOADS, DatasetOption, check_dataset, dataset_params, parse_dataset_options, using_datasets
from .distributions import LengthDistribution, WorkloadError
from .standard import (
    A5_TARGET_LENGTHS,
    CONVERSATION_REFERENCE_QUANTILES,
    FAIRNESS_CLASSES,
    RequestClass,
    code_completion,
    conversation,
    fixed_length,
    long_context,
    synthetic_skewed,
    synthetic_uniform,
)
from .sessions import DATASET_KIND as SESSIONS_DATASET_KIND
from .sessions import SESSIONS_WORKLOAD, SessionSource, conversation_sessions
from .text import TextFactory, text_factory

__all__ = [
    "DATASET_WORKLOADS",
    "DatasetOption",
    "check_dataset",
    "parse_dataset_options",
    "using_datasets",
    "check_requests",
    "A5_TARGET_LENGTHS",
    "CONVERSATION_REFERENCE_QUANTILES",
    "FAIRNESS_CLASSES",
    "LAZY_WORKLOADS",
    "SESSIONS_WORKLOAD",
    "STANDARD_WORKLOADS",
    "SessionSource",
    "WORKLOADS",
    "LengthDistribution",
    "MismatchStats",
    "RequestClass",
    "SpecStream",
    "StreamFacts",
    "TextFactory",
    "Workload",
    "WorkloadDeclaration",
    "WorkloadError",
    "build_custom",
    "build_workload",
    "cap_spec",
    "chat_messages",
    "code_completion",
    "completion_prompt_ids",
    "conversation",
    "conversation_sessions",
    "dumps_requests",
    "fixed_length",
    "load_requests",
    "load_spec",
    "reference_checks",
    "long_context",
    "replay_workload",
    "retokenization_mismatch",
    "save_requests",
    "sequence_sha256",
    "synthetic_skewed",
    "synthetic_uniform",
    "text_factory",
    "validate_spec",
]

#: Registered workload builders: name -> ``builder(*, n, seed, tokenizer, **params) -> Workload``.
WORKLOADS: dict[str, Callable[..., Workload]] = {
    "synthetic-uniform": synthetic_uniform,
    "synthetic-skewed": synthetic_skewed,
    "conversation": conversation,
    "code-completion": code_completion,
    "long-context": long_context,
    "fixed": fixed_length,
    SESSIONS_WORKLOAD: conversation_sessions,  # custom: multi-turn sessions held by the client (issue 50)
}

#: Builders that make their requests a block at a time into a :class:`SpecStream` (``lazy=True``).
LAZY_WORKLOADS = frozenset({"synthetic-uniform"})

#: The five standard workloads of §4.3.2.
STANDARD_WORKLOADS = ("synthetic-uniform", "synthetic-skewed", "conversation", "code-completion", "long-context")

_SPEC_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


def build_workload(
    name_or_path: str | os.PathLike[str],
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | str | None = None,
    lazy: bool = False,
    **params: Any,
) -> Workload:
    """Build ``n`` requests of a named workload, a custom spec file, or replay a request file.

    ``tokenizer`` (a :class:`~pytest_llmbench.common.tokenizer.Tokenizer` or a name for
    :func:`~pytest_llmbench.common.tokenizer.get_tokenizer`) defines the token unit; default
    cl100k_base (§4.4.2 option B). Same arguments, same requests, byte for byte. ``lazy``: the
    requests as a :class:`SpecStream` (never all in memory) where the builder can make them so
    (:data:`LAZY_WORKLOADS`), else the usual list. Within :func:`using_datasets` (a procedure's run
    with ``--llm-dataset``), ``conversation`` and ``code-completion`` read the session's file unless
    ``params`` name a ``dataset`` of their own (a marker's ``workload_params`` win); ``conversation-sessions``
    reads the ``conversation`` file the same way.
    """
    tok = get_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    key = str(name_or_path)
    if key in DATASET_WORKLOADS:  # the session's --llm-dataset file, unless params name their own dataset
        params = dataset_params(key, params)
    elif key == SESSIONS_WORKLOAD:  # multi-turn sessions read --llm-dataset's conversation file too; always
        params = dataset_params(SESSIONS_DATASET_KIND, params)  # custom, so a declared version identifies nothing
        params.pop("dataset_version", None)
    if key in WORKLOADS:
        if lazy and key in LAZY_WORKLOADS:
            params = {**params, "lazy": True}
        try:
            return WORKLOADS[key](n=n, seed=seed, tokenizer=tok, **params)
        except TypeError as exc:  # unknown keyword: name the workload and the accepted ones
            if "unexpected keyword" not in str(exc):
                raise
            import inspect

            accepted = [p for p in inspect.signature(WORKLOADS[key]).parameters if p not in ("n", "seed", "tokenizer")]
            raise WorkloadError(f"workload {key!r}: {exc}; accepted parameters: {', '.join(accepted)}") from exc
    suffix = Path(key).suffix.lower()
    if suffix in _SPEC_SUFFIXES:
        if params:
            raise WorkloadError(f"custom workload {key!r} takes no extra parameters, got {sorted(params)}")
        return build_custom(key, n=n, seed=seed, tokenizer=tok)
    if suffix == ".jsonl":
        return replay_workload(key, n=n, seed=seed)
    raise WorkloadError(
        f"unknown workload {key!r}: use one of {', '.join(WORKLOADS)}, a spec file "
        f"({', '.join(_SPEC_SUFFIXES)}) or a request file (.jsonl)"
    )


def replay_workload(path: str | os.PathLike[str], *, n: int | None = None, seed: int | None = None) -> Workload:
    """Replay a saved request sequence; the saved declaration (``<path>.declaration.json``) is reused.

    ``n`` may select the first ``n`` requests; ``seed`` must match the saved seed when given.
    """
    specs = load_requests(path)
    if n is not None:
        if n > len(specs):
            raise WorkloadError(f"{path} holds {len(specs)} requests, {n} asked for")
        specs = specs[:n]
    side = Path(str(path) + ".declaration.json")
    if not side.is_file():
        raise WorkloadError(f"{path}: no declaration file {side.name} next to it; a replayed workload must be declared")
    d = json.loads(side.read_text(encoding="utf-8"))
    if seed is not None and d.get("seed") != seed:
        raise WorkloadError(f"{path} was generated with seed {d.get('seed')}, not {seed}")
    fields = set(WorkloadDeclaration.__dataclass_fields__) - {"input_length", "output_length"}
    decl = WorkloadDeclaration(
        **{k: v for k, v in d.items() if k in fields},
        input_length=_dist_from_json(d["input_length"]),
        output_length=_dist_from_json(d["output_length"]),
    )
    decl.notes = [*decl.notes, f"replayed from {path}"]
    decl.request_count = len(specs)
    decl.request_sequence_sha256 = sequence_sha256(specs)
    return Workload(specs, decl)


def _dist_from_json(d: dict[str, Any]) -> LengthDistribution:
    params = dict(d["params"])
    if d["type"] == "quantile-lognormal":
        params["quantiles"] = {float(k): v for k, v in params["quantiles"].items()}
    return LengthDistribution(d["type"], params, d.get("unit", "tokens"), d.get("tokenizer", ""), d.get("note"))
