"""The reference workloads of App. A as seeded generators, plus 5.6 classes and a fixed helper.

Each builder takes ``n`` (request count), ``seed`` and the tokenizer that defines the token unit
(the reference tokenizer, cl100k_base, by default, §4.4.2 option B) and returns a
:class:`~pytest_llmbench.workloads.core.Workload`. Random streams are split from one
``numpy.random.SeedSequence(seed)``: lengths, content and selection draw from separate streams,
so the same seed gives the same requests byte for byte (4.3.3-MUST-1).

``force_output=True`` (every builder) sets ``min_tokens = max_tokens`` and ``ignore_eos`` so
that outputs have the drawn length instead of stopping early at EOS (draft ambiguity 9; needed
for 5.4's >= 50 output tokens and 5.5's fixed length).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..common.records import RequestSpec
from ..common.tokenizer import Tokenizer
from .core import Workload, WorkloadDeclaration, finish, finish_blocks
from .datasets import (
    CodeSource,
    identify_code,
    identify_sharegpt,
    length_statistics,
    load_code_dataset,
    load_sharegpt,
    reference_quantiles,
)
from .distributions import LengthDistribution, WorkloadError
from .text import CODE_LANGUAGES, QUESTION, SYSTEM_PROMPT_SOURCE, CodeWriter, TextFactory, comment_marker, text_factory

__all__ = [
    "A5_TARGET_LENGTHS",
    "CONVERSATION_REFERENCE_QUANTILES",
    "FAIRNESS_CLASSES",
    "RequestClass",
    "code_completion",
    "conversation",
    "fixed_length",
    "long_context",
    "mix_counts",
    "synthetic_skewed",
    "synthetic_uniform",
]

#: A.5.1 target lengths of the Long Context workload.
A5_TARGET_LENGTHS = (8192, 16384, 32768, 65536, 131072)

#: A.3.2 reference length quantiles of the Conversation workload (ShareGPT vicuna_cleaned).
CONVERSATION_REFERENCE_QUANTILES = {side: {p / 100: v for p, v in q.items()} for side, q in reference_quantiles().items()}

SHAREGPT_REFERENCE = {
    "name": "ShareGPT",
    "subset": "vicuna_cleaned",
    "version": "2023-04-12",
    "preprocessing": "conversations with 1+ assistant turns",
}


@dataclass(frozen=True)
class RequestClass:
    """A 5.6 request class: inclusive input and output token ranges."""

    name: str
    input_min: int
    input_max: int
    output_min: int
    output_max: int

    def __post_init__(self) -> None:
        if not (1 <= self.input_min <= self.input_max and 1 <= self.output_min <= self.output_max):
            raise WorkloadError(f"request class {self.name!r}: ranges must satisfy 1 <= min <= max")


#: The two classes of §5.6.2.
FAIRNESS_CLASSES: dict[str, RequestClass] = {
    "short": RequestClass("short", 64, 256, 32, 128),
    "long": RequestClass("long", 1024, 4096, 256, 1024),
}


# ---------------------------------------------------------------------- helpers
_NO_SHARING: dict[str, Any] = {"fraction": 0.0, "length": "none", "prefixes": 0}

def _streams(seed: int, k: int) -> list[np.random.Generator]:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise WorkloadError(f"seed must be a non-negative integer, got {seed!r}")
    return [np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(k)]


def _check_n(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise WorkloadError(f"request count n must be a positive integer, got {n!r}")
    return int(n)


def _exact_subset(rng: np.random.Generator, n: int, fraction: float) -> np.ndarray:
    """A boolean mask with exactly ``round(fraction * n)`` True entries at random positions."""
    if not 0.0 <= fraction <= 1.0:
        raise WorkloadError(f"fraction must be within [0, 1], got {fraction}")
    mask = np.zeros(n, dtype=bool)
    mask[rng.permutation(n)[: int(round(fraction * n))]] = True
    return mask


def _output_control(force_output: bool) -> str:
    if force_output:
        return "max_tokens with min_tokens = max_tokens and ignore_eos (output length forced)"
    return "max_tokens (a response may stop earlier at EOS)"


def _spec(
    index: int,
    workload: str,
    fitted_ids: Sequence[int],
    text: str,
    input_tokens: int,
    max_tokens: int,
    force_output: bool,
    **extra: Any,
) -> RequestSpec:
    return RequestSpec(
        index=index,
        workload=workload,
        input_tokens=int(input_tokens),
        max_tokens=int(max_tokens),
        prompt_text=text,
        prompt_ids=tuple(map(int, fitted_ids)),
        min_tokens=int(max_tokens) if force_output else None,
        ignore_eos=bool(force_output),
        **extra,
    )


def _standin_dataset(label: str) -> dict[str, Any]:
    """The dataset block of a stand-in: says plainly that no dataset was used (4.3.3-MUST-3)."""
    return {
        "source": "none: synthetic stand-in generated by pytest-llmbench",
        "version": "n/a (synthetic stand-in; no dataset was read)",
        "subset_selection": "n/a (synthetic stand-in)",
        "preprocessing": label,
        "synthetic_standin": True,
    }


def _tok(tokenizer: Tokenizer | None) -> Tokenizer:
    from ..common.tokenizer import get_tokenizer

    return tokenizer if tokenizer is not None else get_tokenizer()


def _random_content(
    factory: TextFactory, rng: np.random.Generator, lengths: np.ndarray, id_pool: str
) -> tuple[list[str], list[list[int]]]:
    """Random-token prompts (A.1.4). ``round-trip``: word pool, fitted; ``full``: any ordinary id."""
    texts: list[str] = []
    ids: list[list[int]] = []
    for t, i in _random_content_blocks(factory, rng, lengths, id_pool):
        texts += t
        ids += i
    return texts, ids


CONTENT_BLOCK = 1024  # prompts made (and fitted with one batched encode) at a time


def _random_content_blocks(
    factory: TextFactory, rng: np.random.Generator, lengths: np.ndarray, id_pool: str, block: int = CONTENT_BLOCK
) -> Iterator[tuple[list[str], list[list[int]]]]:
    """:func:`_random_content`, ``block`` prompts at a time: the same prompts from the same ``rng``.

    ``round-trip`` draws every prompt's word-pool ids first and then fits them, drawing again from
    ``rng`` for a prompt that does not encode to its length; a block's ids come from a copy of
    ``rng`` and its fitting from ``rng`` itself, moved past every prompt's ids beforehand."""
    if id_pool not in ("round-trip", "full"):
        raise WorkloadError(f"id_pool must be 'round-trip' or 'full', got {id_pool!r}")
    if id_pool == "round-trip":
        words = copy.deepcopy(rng)
        for k in lengths:
            factory.word_ids(rng, int(k))  # rng now stands where the fitting draws begin
        for lo in range(0, len(lengths), block):
            part = lengths[lo : lo + block]
            fitted = factory.fit_many(rng, [factory.word_ids(words, int(k)) for k in part], part.tolist())
            yield [f.text for f in fitted], [f.ids for f in fitted]
        return
    ordinary = getattr(factory.tok, "ordinary_ids", None)
    pool = np.asarray(ordinary() if ordinary else range(factory.tok.declaration.vocab_size))
    for lo in range(0, len(lengths), block):
        ids = [pool[rng.integers(0, len(pool), size=int(k))].tolist() for k in lengths[lo : lo + block]]
        yield [factory.tok.decode(x) for x in ids], ids


def _random_content_fields(id_pool: str, factory: TextFactory) -> dict[str, Any]:
    """The §4.3.1 content fields of a random-token workload (no system prompt, no semantics)."""
    return {"domain": "synthetic (no semantic meaning)", "language": "none (random tokens)",
            "system_prompt": False, "system_prompt_tokens": 0,
            "generation": _random_content_note(id_pool, factory)}


def _random_content_note(id_pool: str, factory: TextFactory) -> str:
    if id_pool == "full":
        return (
            "random token ids drawn uniformly from every ordinary (non-special) id of the vocabulary, "
            "as in A.1.4; prompt_ids are sent as-is to the completions endpoint, the decoded text "
            "re-tokenizes to a different length (see retokenization)"
        )
    return (
        f"random token ids drawn uniformly from the {len(factory.words)} vocabulary tokens that decode "
        "to a space plus lowercase letters and re-encode to themselves (A.1.4 restricted to "
        "round-trip-safe ids), so prompt_text re-tokenizes to exactly prompt_ids"
    )


# ---------------------------------------------------------------------- A.1 / A.2
def synthetic_uniform(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    input_min: int = 128,
    input_max: int = 512,
    output_min: int = 64,
    output_max: int = 256,
    output_tokens: int | None = None,
    force_output: bool = False,
    id_pool: str = "round-trip",
    lazy: bool = False,
) -> Workload:
    """Synthetic-Uniform (§4.3.2.1, A.1): input U(128, 512), output U(64, 256) via max_tokens.

    ``output_tokens`` fixes the output length instead (5.5); any change from the A.1 values makes
    the workload non-standard, and the declaration then reports it in full. ``lazy``: the requests
    are made a block at a time into a :class:`~.core.SpecStream` (the same requests, never all in
    memory at once).
    """
    n = _check_n(n)
    tok = _tok(tokenizer)
    factory = text_factory(tok)
    r_len, r_out, r_txt = _streams(seed, 3)
    tname = tok.declaration.name
    din = LengthDistribution("uniform", {"min": input_min, "max": input_max}, tokenizer=tname)
    if output_tokens is not None:
        dout = LengthDistribution("fixed", {"value": output_tokens}, tokenizer=tname)
    else:
        dout = LengthDistribution("uniform", {"min": output_min, "max": output_max}, tokenizer=tname)
    lin = din.sample(r_len, n)
    lout = dout.sample(r_out, n)
    blocks = _random_content_blocks(factory, r_txt, lin, id_pool)
    specs = _spec_blocks(blocks, "synthetic-uniform", lin, lout, force_output)
    standard = (input_min, input_max, output_min, output_max, output_tokens, id_pool) == (128, 512, 64, 256, None, "round-trip")
    decl = WorkloadDeclaration(
        name="synthetic-uniform",
        description="Synthetic-Uniform (§4.3.2.1, App. A.1): baseline with controlled variability",
        standard=standard,
        seed=seed,
        request_count=n,
        input_length=din,
        output_length=dout,
        output_control=_output_control(force_output),
        content=_random_content_fields(id_pool, factory),
        prefix_sharing=_NO_SHARING,
        tokenizer=tok.declaration.to_json(),
        params={"input_min": input_min, "input_max": input_max, "output_min": output_min,
                "output_max": output_max, "output_tokens": output_tokens, "force_output": force_output,
                "id_pool": id_pool},
    )
    if not standard:
        decl.notes.append("parameters differ from App. A.1: reported as a custom workload (4.3-MUST-1)")
    return finish_blocks(specs, decl, tok, n=n, lazy=lazy)


def _spec_blocks(blocks: Iterable[tuple[list[str], list[list[int]]]], workload: str, lin: np.ndarray,
                 lout: np.ndarray, force_output: bool) -> Iterator[list[RequestSpec]]:
    """The requests of prompt blocks (:func:`_random_content_blocks`), numbered on from 0."""
    i = 0
    for texts, ids in blocks:
        yield [_spec(i + j, workload, ids[j], texts[j], lin[i + j], lout[i + j], force_output)
               for j in range(len(texts))]
        i += len(texts)


def _sample_in_range(rng: np.random.Generator, mu: float, sigma: float, lo: int, hi: int, n: int) -> np.ndarray:
    """Log-normal(mu, sigma) rounded to integers, restricted to [lo, hi] by rejection sampling."""
    out = np.empty(0, dtype=np.int64)
    p = _lognormal_mass(mu, sigma, lo - 0.5, hi + 0.5)
    if p < 1e-6:
        raise WorkloadError(f"range [{lo}, {hi}] has probability {p:.2e} under LogNormal({mu}, {sigma})")
    while out.size < n:
        need = n - out.size
        x = np.rint(rng.lognormal(mu, sigma, size=int(need / p * 1.2) + 16)).astype(np.int64)
        out = np.concatenate([out, x[(x >= lo) & (x <= hi)][:need]])
    return out


def _lognormal_mass(mu: float, sigma: float, a: float, b: float) -> float:
    def cdf(x: float) -> float:
        return 0.0 if x <= 0 else 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))

    return cdf(b) - cdf(a)


def mix_counts(n: int, mix: Mapping[str, float]) -> dict[str, int]:
    total = float(sum(mix.values()))
    if total <= 0 or any(w < 0 for w in mix.values()):
        raise WorkloadError(f"class mix weights must be >= 0 with a positive sum, got {dict(mix)}")
    raw = {k: n * w / total for k, w in mix.items()}
    counts = {k: int(math.floor(v)) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: (-(raw[k] - counts[k]), k))[: n - sum(counts.values())]:
        counts[k] += 1
    return counts


def synthetic_skewed(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    classes: Mapping[str, RequestClass] | Sequence[RequestClass] | None = None,
    mix: Mapping[str, float] | None = None,
    force_output: bool = False,
    id_pool: str = "round-trip",
) -> Workload:
    """Synthetic-Skewed (§4.3.2.2, A.2): input LogNormal(5.5, 1.0) in [32, 4096], output
    LogNormal(4.5, 1.2) in [16, 2048].

    With ``classes`` (5.6, e.g. :data:`FAIRNESS_CLASSES`) each class's lengths are drawn from the
    same log-normals restricted to the class ranges by rejection sampling, and ``mix`` (class ->
    weight, e.g. ``{"short": 0.8, "long": 0.2}``) sets exact class counts (largest remainder), in
    random order. A single-class mix gives the class-in-isolation baseline (5.6.3 step 2).
    """
    n = _check_n(n)
    tok = _tok(tokenizer)
    factory = text_factory(tok)
    r_len, r_out, r_txt, r_cls = _streams(seed, 4)
    tname = tok.declaration.name
    din = LengthDistribution("lognormal", {"mu": 5.5, "sigma": 1.0, "min": 32, "max": 4096}, tokenizer=tname)
    dout = LengthDistribution("lognormal", {"mu": 4.5, "sigma": 1.2, "min": 16, "max": 2048}, tokenizer=tname)
    labels: list[str | None] = [None] * n
    class_decl = None
    if classes is None:
        if mix is not None:
            raise WorkloadError("a class mix needs classes (e.g. classes=FAIRNESS_CLASSES)")
        lin = din.sample(r_len, n)
        lout = dout.sample(r_out, n)
    else:
        cmap = dict(classes) if isinstance(classes, Mapping) else {c.name: c for c in classes}
        mix = dict(mix) if mix is not None else {k: 1.0 for k in cmap}
        unknown = sorted(set(mix) - set(cmap))
        if unknown:
            raise WorkloadError(f"class mix names unknown classes {unknown}; defined: {sorted(cmap)}")
        counts = mix_counts(n, mix)
        lin = np.empty(n, dtype=np.int64)
        lout = np.empty(n, dtype=np.int64)
        order = r_cls.permutation(n)
        start = 0
        for name in sorted(counts):
            c, k = cmap[name], counts[name]
            idx = np.sort(order[start : start + k])
            start += k
            lin[idx] = _sample_in_range(r_len, 5.5, 1.0, c.input_min, c.input_max, k)
            lout[idx] = _sample_in_range(r_out, 4.5, 1.2, c.output_min, c.output_max, k)
            for i in idx:
                labels[i] = name
        class_decl = [
            {**asdict(cmap[k]), "mix_weight": mix.get(k, 0.0), "count": counts.get(k, 0),
             "sampling": "Synthetic-Skewed log-normals restricted to the class ranges by rejection sampling"}
            for k in sorted(cmap)
        ]
    texts, ids = _random_content(factory, r_txt, lin, id_pool)
    specs = [
        _spec(i, "synthetic-skewed", ids[i], texts[i], lin[i], lout[i], force_output, request_class=labels[i])
        for i in range(n)
    ]
    decl = WorkloadDeclaration(
        name="synthetic-skewed",
        description="Synthetic-Skewed (§4.3.2.2, App. A.2): realistic length variation",
        standard=classes is None and id_pool == "round-trip",
        seed=seed,
        request_count=n,
        input_length=din,
        output_length=dout,
        output_control=_output_control(force_output),
        content=_random_content_fields(id_pool, factory),
        prefix_sharing=_NO_SHARING,
        tokenizer=tok.declaration.to_json(),
        classes=class_decl,
        params={"force_output": force_output, "id_pool": id_pool, "mix": dict(mix) if mix else None},
    )
    if classes is not None:
        decl.notes.append("request classes (§5.6.2) restrict the A.2 distributions to each class's ranges")
    return finish(specs, decl, tok)


# ---------------------------------------------------------------------- A.3
def _system_prompt(factory: TextFactory, tokens: int) -> str:
    """The shared system prompt, exactly ``tokens`` long, independent of the seed."""
    src = factory.tok.encode(SYSTEM_PROMPT_SOURCE)
    return factory.fit(np.random.default_rng(0), tokens, body=src).text


def conversation(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    dataset: str | Path | None = None,
    dataset_version: str = "unspecified",
    dataset_subset: str = "unspecified",
    system_prompt_fraction: float = 0.5,
    system_prompt_tokens: int = 200,
    min_tokens: int = 4,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
    force_output: bool = False,
) -> Workload:
    """Conversation (§4.3.2.3, A.3): ShareGPT lengths; 50% share a 200-token system prompt.

    ``dataset`` is a ShareGPT-format JSON/JSONL file: each conversation's first human turn is the
    prompt, the first assistant reply after it gives the output length (max_tokens). The workload is
    the standard one only for the draft's file (:func:`~.datasets.identify_sharegpt`: by SHA-256 where
    ``data/draft.yaml`` knows it, else by the declared subset and version with the drawn lengths agreeing
    with A.3.2 within ±15 % beyond their sampling error); any other file is custom. The drawn length statistics beside A.3.2's are in
    ``dataset["length_statistics"]``. Without a file, a labelled synthetic stand-in draws lengths from
    log-normal pieces through the A.3.2 reference quantiles (P50/P95/P99 reproduced), with random
    lowercase-word text.
    """
    n = _check_n(n)
    tok = _tok(tokenizer)
    factory = text_factory(tok)
    r_len, r_out, r_txt, r_sys, r_pick = _streams(seed, 5)
    tname = tok.declaration.name
    system = _system_prompt(factory, system_prompt_tokens) if system_prompt_fraction > 0 else None
    sys_n = len(tok.encode(system)) if system else 0
    with_sys = _exact_subset(r_sys, n, system_prompt_fraction)
    notes: list[str] = []
    if dataset is None:
        qi = CONVERSATION_REFERENCE_QUANTILES["input"]
        qo = CONVERSATION_REFERENCE_QUANTILES["output"]
        din = LengthDistribution("quantile-lognormal", {"quantiles": qi, "min": 4, "max": 8192}, tokenizer=tname,
                                 note="user-turn length; requests with the system prompt add its tokens")
        dout = LengthDistribution("quantile-lognormal", {"quantiles": qo, "min": 4, "max": 4096}, tokenizer=tname)
        lin = din.sample(r_len, n)
        lout = dout.sample(r_out, n)
        fitted = factory.fit_many(r_txt, [factory.prose_ids(r_txt, int(k)) for k in lin], lin.tolist())
        prompts = [(f.text, f.ids) for f in fitted]
        standin = True
        label = (
            "SYNTHETIC STAND-IN for ShareGPT (vicuna_cleaned, 2023-04-12): no dataset file given; lengths "
            "from log-normal pieces fitted through the A.3.2 reference quantiles, content random lowercase-word "
            "tokens"
        )
        notes.append(label)
        ds = {**_standin_dataset(label), "length_statistics": length_statistics(lin, lout)}
    else:
        conv = load_sharegpt(dataset, tok, n=n, rng=r_pick, min_tokens=min_tokens,
                             max_input_tokens=max_input_tokens, max_output_tokens=max_output_tokens)
        prompts = [(t, ids) for t, ids, _ in conv.samples]
        lin = np.array([len(ids) for _, ids in prompts], dtype=np.int64)
        lout = np.array([o for _, _, o in conv.samples], dtype=np.int64)
        din = LengthDistribution("empirical", {"values": lin.tolist()}, tokenizer=tname,
                                 note="first human turn; requests with the system prompt add its tokens")
        dout = LengthDistribution("empirical", {"values": lout.tolist()}, tokenizer=tname,
                                  note="first assistant reply after it, used as max_tokens")
        stats = length_statistics(lin, lout)
        ident = identify_sharegpt(conv.sha256, dataset_subset, dataset_version, stats)
        ds = {
            "source": str(dataset),
            "sha256": conv.sha256,
            "format": "ShareGPT JSON (conversations of {from, value})",
            "version": dataset_version,
            "subset": dataset_subset,
            "subset_selection": conv.selection,
            "preprocessing": conv.preprocessing,
            "conversations_in_file": conv.total,
            "eligible": conv.eligible,
            "reference": SHAREGPT_REFERENCE,
            "identification": ident,
            "length_statistics": stats,
        }
        if ident["standard"]:
            ds["name"] = f"ShareGPT {SHAREGPT_REFERENCE['subset']} {SHAREGPT_REFERENCE['version']}"
        else:
            notes.append(f"custom dataset: {ident['reason']} (4.3-MUST-1)")
        standin = False
        label = None
        if dataset_version == "unspecified" or (dataset_subset == "unspecified"
                                                and SHAREGPT_REFERENCE["subset"] not in dataset_version):
            notes.append("dataset version/subset not given: 4.3.3-MUST-3 is unmet until they are declared")
    specs = []
    for i in range(n):
        text, ids = prompts[i]
        s = bool(with_sys[i])
        specs.append(
            _spec(i, "conversation", ids, text, int(lin[i]) + (sys_n if s else 0), lout[i], force_output,
                  system_prompt=system if s else None, prefix_id="system-prompt" if s else None,
                  prefix_tokens=sys_n if s else 0)
        )
    decl = WorkloadDeclaration(
        name="conversation",
        description="Conversation (§4.3.2.3, App. A.3): interactive chat",
        standard=dataset is not None and bool(ds.get("identification", {}).get("standard"))
        and system_prompt_fraction == 0.5 and system_prompt_tokens == 200,
        seed=seed,
        request_count=n,
        input_length=din,
        output_length=dout,
        output_control=_output_control(force_output),
        content={
            "domain": "conversation",
            "language": "as in the dataset (ShareGPT: mostly English)" if dataset else "none (random lowercase-word tokens)",
            "system_prompt": system_prompt_fraction > 0,
            "system_prompt_tokens": sys_n,
            "generation": "dataset text" if dataset else "random lowercase-word tokens with punctuation",
        },
        prefix_sharing={
            "fraction": system_prompt_fraction,
            "length": LengthDistribution("fixed", {"value": max(sys_n, 1)}, tokenizer=tname).to_json(),
            "prefixes": 1 if system else 0,
            "selection": "exactly round(fraction * n) requests, chosen uniformly at random",
            "shared_part": "system prompt (system message; prepended ids on the completions endpoint)",
        },
        tokenizer=tok.declaration.to_json(),
        dataset=ds,
        synthetic_standin=standin,
        standin_label=label,
        params={"system_prompt_fraction": system_prompt_fraction, "system_prompt_tokens": system_prompt_tokens,
                "min_tokens": min_tokens, "max_input_tokens": max_input_tokens,
                "max_output_tokens": max_output_tokens, "force_output": force_output},
        notes=notes,
    )
    return finish(specs, decl, tok)


# ---------------------------------------------------------------------- A.4
def _zipf_probs(k: int, s: float) -> np.ndarray:
    w = np.arange(1, k + 1, dtype=float) ** -s
    return w / w.sum()


def code_completion(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    dataset: str | Path | None = None,
    dataset_version: str = "unspecified",
    prefixes: int = 10,
    prefix_min: int = 512,
    prefix_max: int = 1024,
    sharing_fraction: float = 0.8,
    zipf_s: float = 1.5,
    task_mu: float = 4.0,
    task_sigma: float = 0.7,
    task_min: int = 16,
    task_max: int = 512,
    output_mu: float = 4.0,
    output_sigma: float = 1.5,
    output_max: int = 4096,
    force_output: bool = False,
) -> Workload:
    """Code Completion (§4.3.2.4, A.4): 10 repository contexts of 512-1024 tokens; 80% of requests
    start with one of them, chosen by Zipf(s=1.5); output LogNormal(4.0, 1.5).

    Each prompt is a repository context followed by a function to complete (the "task"). Shared
    requests use one of the ``prefixes`` contexts (a token-level prefix of their prompt ids);
    the others get a context of their own drawn from the same length range, so caching is the
    only difference. Code comes from ``dataset`` (JSONL with a ``content`` field, or a directory
    of .py/.js/.ts files: each context one repository's files then files of its language, each task
    the start of one of its functions, A.4.1) or, without one, from a labelled code-like stand-in.
    The workload is standard only for the draft's The Stack subset (:func:`~.datasets.identify_code`).
    The draft gives no output cap; ``output_max`` (4096) is declared.
    """
    n = _check_n(n)
    if prefixes < 1:
        raise WorkloadError(f"prefixes must be >= 1, got {prefixes}")
    tok = _tok(tokenizer)
    factory = text_factory(tok)
    r_pfx, r_sel, r_task, r_out, r_txt, r_share = _streams(seed, 6)
    tname = tok.declaration.name
    writer = CodeWriter(factory, r_txt)
    source = load_code_dataset(dataset) if dataset is not None else None

    def context(rng: np.random.Generator, length: int, k: int) -> tuple[str, str]:
        if source is not None:
            text, lang = source.context(rng, chars=length * 6)
        else:
            lang = CODE_LANGUAGES[k % len(CODE_LANGUAGES)]
            text = writer.file(lang, min_chars=length * 6)
        return factory.fit_code(rng, text, length, comment=comment_marker(lang)).text, lang

    plen = LengthDistribution("uniform", {"min": prefix_min, "max": prefix_max}, tokenizer=tname)
    shared_lens = plen.sample(r_pfx, prefixes)
    shared = [context(r_pfx, int(L), k) for k, L in enumerate(shared_lens)]
    shared_ids = [tok.encode(t) for t, _ in shared]
    is_shared = _exact_subset(r_share, n, sharing_fraction)
    choice = r_sel.choice(prefixes, size=n, p=_zipf_probs(prefixes, zipf_s))
    dtask = LengthDistribution("lognormal", {"mu": task_mu, "sigma": task_sigma, "min": task_min, "max": task_max},
                               tokenizer=tname)
    ltask = dtask.sample(r_task, n)
    dout = LengthDistribution("lognormal", {"mu": output_mu, "sigma": output_sigma, "min": 1, "max": output_max},
                              tokenizer=tname)
    lout = dout.sample(r_out, n)
    own_lens = plen.sample(r_pfx, n)
    specs = []
    prefix_broken = 0
    raised = 0
    for i in range(n):
        if is_shared[i]:
            k = int(choice[i])
            ctx_text, lang = shared[k]
            ctx_ids = shared_ids[k]
            pid: str | None = f"repo-{k}"
        else:
            ctx_text, lang = context(r_txt, int(own_lens[i]), i)
            ctx_ids = tok.encode(ctx_text)
            pid = None
        task = int(ltask[i])
        head = writer.task_head(lang) if source is None else _dataset_task(factory, source, r_txt, lang, task)
        min_task = len(tok.encode(head)) + 2  # signature + TODO comment + >= 1 filler word + newline
        if task < min_task:
            task, raised = min_task, raised + 1
        target = len(ctx_ids) + task
        fitted = factory.fit(r_txt, target, head=ctx_text + head, tail="\n")
        if list(fitted.ids[: len(ctx_ids)]) != ctx_ids:
            prefix_broken += 1
        specs.append(
            _spec(i, "code-completion", fitted.ids, fitted.text, target, lout[i], force_output,
                  prefix_id=pid, prefix_tokens=len(ctx_ids) if pid else 0)
        )
    din = LengthDistribution(
        "empirical", {"values": [s.input_tokens for s in specs]}, tokenizer=tname,
        note=(f"context Uniform({prefix_min}, {prefix_max}) tokens + task LogNormal({task_mu}, {task_sigma}) "
              f"in [{task_min}, {task_max}] tokens"),
    )
    standin = source is None
    label = None
    if standin:
        label = ("SYNTHETIC STAND-IN for The Stack (Python, JavaScript, TypeScript): no code dataset given; "
                 "code-like functions and classes with random identifiers")
    ds = _standin_dataset(label) if label else None
    notes = [label] if label else []
    ident: dict[str, Any] = {}
    if source is not None:
        ident = identify_code(source.sha256, dataset_version, source.languages)
        ds = {"source": str(dataset), "sha256": source.sha256, "version": dataset_version,
              "subset_selection": source.selection, "preprocessing": source.preprocessing,
              "files": source.files, "functions": len(source.functions), "languages": source.languages,
              "reference": {"name": "The Stack", "subset": "Python, JavaScript, TypeScript",
                            "preprocessing": "function-level completions"},
              "identification": ident}
        if ident["standard"]:
            ds["name"] = "The Stack (Python, JavaScript, TypeScript)"
        else:
            notes.append(f"custom dataset: {ident['reason']} (4.3-MUST-1)")
    if raised:
        notes.append(f"{raised} task lengths were below their function signature + 2 tokens and were raised")
    if prefix_broken:
        notes.append(f"{prefix_broken} prompts do not start with their context's token ids (tokenizer merges)")
    decl = WorkloadDeclaration(
        name="code-completion",
        description="Code Completion (§4.3.2.4, App. A.4): coding assistant with shared repository contexts",
        standard=(prefixes, prefix_min, prefix_max, sharing_fraction, zipf_s, output_mu, output_sigma)
        == (10, 512, 1024, 0.8, 1.5, 4.0, 1.5) and bool(ident.get("standard")),
        seed=seed,
        request_count=n,
        input_length=din,
        output_length=dout,
        output_control=_output_control(force_output),
        content={
            "domain": "code",
            "language": "Python, JavaScript, TypeScript",
            "system_prompt": False,
            "system_prompt_tokens": 0,
            "generation": "dataset files" if source else "synthetic code-like text",
            "task_length": dtask.to_json(),
        },
        prefix_sharing={
            "fraction": sharing_fraction,
            "prefixes": prefixes,
            "length": plen.to_json(),
            "prefix_lengths": [len(x) for x in shared_ids],
            "selection": f"Zipf(s={zipf_s}) over the {prefixes} contexts (P(k) ~ k^-s, k = 1..{prefixes})",
            "shared_requests": "exactly round(fraction * n), chosen uniformly at random",
            "unshared_requests": "a context of their own, same length distribution",
            "prefix_token_breaks": prefix_broken,
        },
        tokenizer=tok.declaration.to_json(),
        dataset=ds,
        synthetic_standin=standin,
        standin_label=label,
        params={"prefixes": prefixes, "prefix_min": prefix_min, "prefix_max": prefix_max,
                "sharing_fraction": sharing_fraction, "zipf_s": zipf_s, "task_mu": task_mu,
                "task_sigma": task_sigma, "task_min": task_min, "task_max": task_max,
                "output_mu": output_mu, "output_sigma": output_sigma, "output_max": output_max,
                "force_output": force_output},
        notes=notes,
    )
    return finish(specs, decl, tok)


def _dataset_task(factory: TextFactory, source: CodeSource, rng: np.random.Generator, lang: str, task: int) -> str:
    """A.4.1's function-level completion from the dataset: a function of the context's language, its
    signature and the start of its body cut to whole lines within ``task`` tokens, then a TODO comment
    (the builder pads it to the exact length)."""
    fn = source.function(rng, lang)
    lines = fn.text.splitlines()
    body = next((x for x in lines[1:] if x.strip()), "    ")
    indent = body[: len(body) - len(body.lstrip())] or "    "
    todo = f"{indent}{comment_marker(fn.language)} TODO:"
    room = task - len(factory.tok.encode(todo)) - 2
    cut = factory.cut_lines(fn.text, room) if room > 0 else ""
    return (cut or lines[0] + "\n") + todo


# ---------------------------------------------------------------------- A.5
def long_context(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    lengths: Sequence[int] = A5_TARGET_LENGTHS,
    order: str = "random",
    output_tokens: int = 256,
    force_output: bool = False,
) -> Workload:
    """Long Context (§4.3.2.5, A.5): [document][question], the question fixed (~100 tokens), the
    document filling the rest of the target length; output fixed at 256 via max_tokens.

    ``lengths`` are the target input lengths (A.5.1 list by default; any list for 5.9, e.g.
    1K-32K). ``order="random"`` draws each request's length uniformly from the list (A.5.1);
    ``order="ascending"`` splits ``n`` evenly over the lengths in ascending blocks (5.9.3).
    """
    n = _check_n(n)
    lengths = sorted({int(x) for x in lengths})
    tok = _tok(tokenizer)
    factory = text_factory(tok)
    q_ids = tok.encode(QUESTION)
    if not lengths or lengths[0] <= len(q_ids) + 8:
        raise WorkloadError(f"long-context lengths must exceed the {len(q_ids)}-token question; got {lengths}")
    r_len, r_txt = _streams(seed, 2)
    if order == "random":
        lin = np.asarray(lengths, dtype=np.int64)[r_len.integers(0, len(lengths), size=n)]
    elif order == "ascending":
        counts = mix_counts(n, {str(L): 1.0 for L in lengths})
        lin = np.concatenate([np.full(counts[str(L)], L, dtype=np.int64) for L in lengths])
    else:
        raise WorkloadError(f"order must be 'random' or 'ascending', got {order!r}")
    head = "Document:\n"
    specs = []
    for i in range(n):
        target = int(lin[i])
        body = factory.prose_ids(r_txt, target - len(q_ids))
        fitted = factory.fit(r_txt, target, head=head, tail=QUESTION, body=body)
        specs.append(_spec(i, "long-context", fitted.ids, fitted.text, target, output_tokens, force_output))
    tname = tok.declaration.name
    standard = tuple(lengths) == A5_TARGET_LENGTHS and output_tokens == 256 and order == "random"
    decl = WorkloadDeclaration(
        name="long-context",
        description="Long Context (§4.3.2.5, App. A.5): [document][question] structure",
        standard=standard,
        seed=seed,
        request_count=n,
        input_length=LengthDistribution(
            "empirical", {"values": list(lengths)}, tokenizer=tname,
            note=("uniform over the target lengths (A.5.1)" if order == "random"
                  else "equal blocks per target length, ascending (5.9.3)"),
        ),
        output_length=LengthDistribution("fixed", {"value": output_tokens}, tokenizer=tname),
        output_control=_output_control(force_output),
        content={
            "domain": "document question answering (synthetic)",
            "language": "none (random lowercase-word tokens)",
            "system_prompt": False,
            "system_prompt_tokens": 0,
            "structure": f"'Document:' + document filling target - {len(q_ids)} tokens + fixed question",
            "question_tokens": len(q_ids),
            "generation": "random lowercase-word tokens with punctuation",
        },
        prefix_sharing=_NO_SHARING,
        tokenizer=tok.declaration.to_json(),
        params={"lengths": list(lengths), "order": order, "output_tokens": output_tokens, "force_output": force_output},
        notes=["target lengths follow A.5.1 (4.3.2.5 says Uniform(8192, 32768); draft ambiguity 5)"]
        if standard else ["Long Context structure at the declared target lengths"],
    )
    return finish(specs, decl, tok)


# ---------------------------------------------------------------------- fixed helper
def fixed_length(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    input_tokens: int = 256,
    output_tokens: int = 256,
    force_output: bool = True,
    id_pool: str = "round-trip",
) -> Workload:
    """Fixed input and output lengths (5.5 fixed output, 5.4 >= 50 output tokens, warm-up).

    Output is forced by default (``min_tokens = max_tokens``, ``ignore_eos``) so that every
    request really generates ``output_tokens``.
    """
    n = _check_n(n)
    tok = _tok(tokenizer)
    factory = text_factory(tok)
    (r_txt,) = _streams(seed, 1)
    tname = tok.declaration.name
    lin = np.full(n, input_tokens, dtype=np.int64)
    texts, ids = _random_content(factory, r_txt, lin, id_pool)
    specs = [_spec(i, "fixed", ids[i], texts[i], input_tokens, output_tokens, force_output) for i in range(n)]
    decl = WorkloadDeclaration(
        name="fixed",
        description="Fixed-length synthetic workload (custom, §4.3.1)",
        standard=False,
        seed=seed,
        request_count=n,
        input_length=LengthDistribution("fixed", {"value": input_tokens}, tokenizer=tname),
        output_length=LengthDistribution("fixed", {"value": output_tokens}, tokenizer=tname),
        output_control=_output_control(force_output),
        content=_random_content_fields(id_pool, factory),
        prefix_sharing=_NO_SHARING,
        tokenizer=tok.declaration.to_json(),
        params={"input_tokens": input_tokens, "output_tokens": output_tokens, "force_output": force_output,
                "id_pool": id_pool},
    )
    return finish(specs, decl, tok)

