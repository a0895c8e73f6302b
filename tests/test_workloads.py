"""Reference workloads (§4.3.2, App. A): length distributions, sharing, classes, determinism."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.workloads import (
    A5_TARGET_LENGTHS,
    FAIRNESS_CLASSES,
    STANDARD_WORKLOADS,
    WORKLOADS,
    RequestClass,
    WorkloadError,
    build_workload,
    chat_messages,
    completion_prompt_ids,
    dumps_requests,
    retokenization_mismatch,
)
from pytest_llmbench.workloads.text import QUESTION

TOK = get_tokenizer()


def lognormal_int_cdf(mu: float, sigma: float, lo: int, hi: int):
    """CDF of round(LogNormal(mu, sigma)) clipped to [lo, hi], at integer k."""

    def cdf(k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=float)
        base = stats.norm.cdf((np.log(k + 0.5) - mu) / sigma)
        return np.where(k < lo, 0.0, np.where(k >= hi, 1.0, base))

    return cdf


def chisq_pvalue(sample: np.ndarray, cdf, lo: int, hi: int, bins: int = 20) -> float:
    """Chi-square goodness of fit of integer data against an integer CDF, on ~equal-mass bins."""
    ks = np.arange(lo, hi + 1)
    F = cdf(ks)
    edges = sorted({int(ks[np.searchsorted(F, q)]) for q in np.linspace(0, 1, bins + 1)[1:-1]})
    edges = [lo - 1, *[e for e in edges if lo <= e < hi], hi]
    probs = np.diff([0.0 if e < lo else float(cdf(np.array([e]))[0]) for e in edges])
    counts = np.array([np.sum((sample > a) & (sample <= b)) for a, b in zip(edges, edges[1:])])
    keep = probs > 0
    return float(stats.chisquare(counts[keep], probs[keep] / probs[keep].sum() * len(sample)).pvalue)


# ---------------------------------------------------------------------- Synthetic-Uniform (A.1)
@pytest.fixture(scope="module")
def uniform3000():
    return build_workload("synthetic-uniform", n=3000, seed=7)


def test_synthetic_uniform_lengths_follow_a1(uniform3000) -> None:
    inp = np.array([s.input_tokens for s in uniform3000.specs])
    out = np.array([s.max_tokens for s in uniform3000.specs])
    assert inp.min() >= 128 and inp.max() <= 512 and out.min() >= 64 and out.max() <= 256
    jitter = np.random.default_rng(0).uniform(-0.5, 0.5, size=(2, len(inp)))
    assert stats.kstest(inp + jitter[0], stats.uniform(127.5, 385).cdf).pvalue > 0.001
    assert stats.kstest(out + jitter[1], stats.uniform(63.5, 193).cdf).pvalue > 0.001
    assert abs(inp.mean() - 320) < 6 and abs(out.mean() - 160) < 3


def test_synthetic_uniform_prompts_retokenize_exactly(uniform3000) -> None:
    specs = uniform3000.specs
    for s in specs[:200]:
        assert s.prompt_ids is not None and len(s.prompt_ids) == s.input_tokens
        assert TOK.encode(s.prompt_text) == list(s.prompt_ids)
        assert s.system_prompt is None and s.prefix_id is None and s.temperature == 0.0
    m = retokenization_mismatch(specs)
    assert m.n == 3000 and m.mismatched == 0 and m.ids_mismatched == 0
    d = uniform3000.declaration.to_json()
    assert d["retokenization"]["mismatched"] == 0 and d["standard"] is True
    assert d["input_length"] == {"type": "uniform", "params": {"min": 128, "max": 512}, "unit": "tokens",
                                 "tokenizer": "cl100k_base"}
    assert d["output_control"].startswith("max_tokens")
    assert d["tokenizer"]["name"] == "cl100k_base" and d["tokenizer"]["vocab_size"] == 100277
    assert d["seed"] == 7 and d["request_count"] == 3000 and d["prefix_sharing"]["fraction"] == 0.0


def test_full_vocabulary_ids_are_a14_ids_and_mismatch_is_reported() -> None:
    wl = build_workload("synthetic-uniform", n=50, seed=1, id_pool="full")
    ids = np.concatenate([np.array(s.prompt_ids) for s in wl.specs])
    assert ids.min() >= 0 and ids.max() <= 100255  # A.1.4: rng.randint(0, 100255)
    assert all(len(s.prompt_ids) == s.input_tokens for s in wl.specs)
    retok = wl.declaration.retokenization
    assert retok["mismatched"] > 0 and retok["ids_mismatched"] > 0  # random ids do not round-trip
    assert wl.declaration.standard is False


def test_mismatch_statistics_hand_computed() -> None:
    ids = TOK.encode("hello world")  # 2 tokens
    specs = [
        RequestSpec(0, "x", 2, 8, "hello world", tuple(ids)),
        RequestSpec(1, "x", 5, 8, "hello world", tuple(ids)),  # delta -3
        RequestSpec(2, "x", 2, 8, "hello world", (1, 2)),  # ids differ
    ]
    m = retokenization_mismatch(specs, TOK)
    assert (m.n, m.mismatched, m.ids_mismatched, m.max_abs_delta) == (3, 1, 1, 3)
    assert m.mean_delta == pytest.approx(-1.0) and m.max_rel_delta == pytest.approx(0.6)


# ---------------------------------------------------------------------- Synthetic-Skewed (A.2)
def test_synthetic_skewed_matches_a2_lognormals() -> None:
    wl = build_workload("synthetic-skewed", n=4000, seed=11)
    inp = np.array([s.input_tokens for s in wl.specs])
    out = np.array([s.max_tokens for s in wl.specs])
    assert inp.min() >= 32 and inp.max() <= 4096 and out.min() >= 16 and out.max() <= 2048
    assert chisq_pvalue(inp, lognormal_int_cdf(5.5, 1.0, 32, 4096), 32, 4096) > 0.001
    assert chisq_pvalue(out, lognormal_int_cdf(4.5, 1.2, 16, 2048), 16, 2048) > 0.001
    assert np.median(inp) == pytest.approx(math.exp(5.5), rel=0.06)  # A.2.1 median ~245
    # floors and caps: P(X < 31.5) = 2.0 %, P(X >= 4095.5) = 0.24 % for the input
    assert np.mean(inp == 32) == pytest.approx(stats.norm.cdf(math.log(32.5) - 5.5), abs=0.008)
    assert wl.declaration.to_json()["input_length"]["params"] == {"mu": 5.5, "sigma": 1.0, "min": 32, "max": 4096}


def test_wrong_distribution_would_be_detected() -> None:
    """The goodness-of-fit helper rejects a neighbouring distribution (the test can fail)."""
    x = np.clip(np.rint(np.random.default_rng(3).lognormal(5.3, 1.0, 4000)), 32, 4096)
    assert chisq_pvalue(x, lognormal_int_cdf(5.5, 1.0, 32, 4096), 32, 4096) < 1e-6


def test_fairness_classes_ranges_mix_and_restricted_distribution() -> None:
    wl = build_workload("synthetic-skewed", n=2000, seed=5, classes=FAIRNESS_CLASSES, mix={"short": 0.8, "long": 0.2})
    by = {"short": [], "long": []}
    for s in wl.specs:
        by[s.request_class].append(s)
    assert len(by["short"]) == 1600 and len(by["long"]) == 400
    for name, specs in by.items():
        c = FAIRNESS_CLASSES[name]
        assert all(c.input_min <= s.input_tokens <= c.input_max for s in specs)
        assert all(c.output_min <= s.max_tokens <= c.output_max for s in specs)
    # within a class: the A.2 log-normal restricted to the range (conditional CDF)
    short_in = np.array([s.input_tokens for s in by["short"]])
    lo, hi = 64, 256
    a, b = stats.norm.cdf(math.log(lo - 0.5) - 5.5), stats.norm.cdf(math.log(hi + 0.5) - 5.5)

    def cond(k):
        k = np.asarray(k, float)
        return np.clip((stats.norm.cdf(np.log(k + 0.5) - 5.5) - a) / (b - a), 0, 1)

    assert chisq_pvalue(short_in, cond, lo, hi, bins=10) > 0.001
    d = wl.declaration.to_json()
    assert [c["name"] for c in d["classes"]] == ["long", "short"]
    assert "rejection sampling" in d["classes"][0]["sampling"] and d["observed"]["class_counts"] == {"long": 400, "short": 1600}
    # classes appear in random order, not in blocks
    labels = [s.request_class for s in wl.specs[:100]]
    assert 5 < labels.count("long") < 40


def test_class_mix_errors_are_clear() -> None:
    with pytest.raises(WorkloadError, match="unknown classes"):
        build_workload("synthetic-skewed", n=10, seed=1, classes=FAIRNESS_CLASSES, mix={"medium": 1.0})
    with pytest.raises(WorkloadError, match="needs classes"):
        build_workload("synthetic-skewed", n=10, seed=1, mix={"short": 1.0})
    with pytest.raises(WorkloadError, match="ranges"):
        RequestClass("bad", 10, 5, 1, 2)


# ---------------------------------------------------------------------- Conversation (A.3)
def test_conversation_standin_quantiles_and_system_prompt() -> None:
    wl = build_workload("conversation", n=4000, seed=3)
    d = wl.declaration
    assert d.synthetic_standin is True and "STAND-IN" in (d.standin_label or "") and d.standard is False
    with_sys = [s for s in wl.specs if s.system_prompt is not None]
    assert len(with_sys) == 2000  # exactly 50 %
    assert len({s.system_prompt for s in with_sys}) == 1
    assert len(TOK.encode(with_sys[0].system_prompt)) == 200
    assert all(s.prefix_tokens == 200 and s.prefix_id == "system-prompt" for s in with_sys)
    user = np.array([s.input_tokens - s.prefix_tokens for s in wl.specs])
    out = np.array([s.max_tokens for s in wl.specs])
    for arr, ref in ((user, {50: 156, 95: 892, 99: 2134}), (out, {50: 234, 95: 789, 99: 1567})):
        for q, v in ref.items():
            assert np.percentile(arr, q) == pytest.approx(v, rel=0.06 if q < 99 else 0.15), (q, v)
    for s in wl.specs[:100]:
        assert len(completion_prompt_ids(s)) == s.input_tokens
        msgs = chat_messages(s)
        assert msgs[-1] == {"role": "user", "content": s.prompt_text}
        assert (msgs[0]["role"] == "system") == (s.system_prompt is not None)
    assert d.retokenization["mismatched"] == 0


def test_conversation_from_sharegpt_file(tmp_path) -> None:
    convs = []
    for i in range(40):
        convs.append({"id": f"c{i}", "conversations": [
            {"from": "human", "value": f"Question number {i}: " + "tell me about apples " * (i + 1)},
            {"from": "gpt", "value": "Apples are fruit. " * (i + 2)},
        ]})
    convs.append({"id": "no-reply", "conversations": [{"from": "human", "value": "hello there, anyone?"}]})
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(convs))
    wl = build_workload("conversation", n=30, seed=2, dataset=path, dataset_version="test-1", dataset_subset="all")
    by_prompt = {c["conversations"][0]["value"]: c for c in convs}
    for s in wl.specs:
        conv = by_prompt[s.prompt_text]
        assert conv["id"] != "no-reply"
        assert s.max_tokens == len(TOK.encode(conv["conversations"][1]["value"]))
        assert s.input_tokens == len(TOK.encode(s.prompt_text)) + s.prefix_tokens
    assert len({s.prompt_text for s in wl.specs}) == 30  # without replacement
    ds = wl.declaration.dataset
    assert ds["version"] == "test-1" and ds["conversations_in_file"] == 41 and ds["eligible"] == 40
    assert len(ds["sha256"]) == 64 and "1+ assistant turns" in ds["preprocessing"]
    assert wl.declaration.synthetic_standin is False and wl.declaration.missing_fields() == []
    with pytest.raises(WorkloadError, match="does not exist"):
        build_workload("conversation", n=3, seed=1, dataset=tmp_path / "nope.json")


# ---------------------------------------------------------------------- Code Completion (A.4)
@pytest.fixture(scope="module")
def code2000():
    return build_workload("code-completion", n=2000, seed=9)


def test_code_completion_prefix_sharing_and_zipf(code2000) -> None:
    specs = code2000.specs
    shared = [s for s in specs if s.prefix_id is not None]
    assert len(shared) == 1600  # exactly 80 %
    counts = np.array([sum(s.prefix_id == f"repo-{k}" for s in shared) for k in range(10)])
    zipf = np.arange(1, 11) ** -1.5
    assert stats.chisquare(counts, zipf / zipf.sum() * len(shared)).pvalue > 0.001
    assert counts[0] > counts[1] > counts[3]
    first = {}
    for s in shared:
        assert 512 <= s.prefix_tokens <= 1024
        head = s.prompt_ids[: s.prefix_tokens]
        first.setdefault(s.prefix_id, head)
        assert head == first[s.prefix_id]  # token-level shared prefix, identical across requests
    unshared = [s for s in specs if s.prefix_id is None]
    assert all(s.prefix_tokens == 0 for s in unshared)
    assert len({s.prompt_ids[:64] for s in unshared}) == len(unshared)  # own contexts
    d = code2000.declaration.to_json()
    assert d["synthetic_standin"] is True and "STAND-IN" in d["standin_label"]
    assert d["prefix_sharing"]["fraction"] == 0.8 and d["prefix_sharing"]["prefixes"] == 10
    assert d["prefix_sharing"]["prefix_token_breaks"] == 0 and d["retokenization"]["mismatched"] == 0


def test_code_completion_output_lognormal(code2000) -> None:
    out = np.array([s.max_tokens for s in code2000.specs])
    assert out.min() >= 1 and out.max() <= 4096
    assert chisq_pvalue(out, lognormal_int_cdf(4.0, 1.5, 1, 4096), 1, 4096, bins=12) > 0.001


def test_code_completion_from_dataset_directory(tmp_path) -> None:
    (tmp_path / "pkg").mkdir()
    for i in range(6):
        body = "".join(f"def helper_{i}_{j}(x, y):\n    return x * {j} + y\n\n\n" for j in range(60))
        (tmp_path / "pkg" / f"mod{i}.py").write_text(body)
    wl = build_workload("code-completion", n=40, seed=4, dataset=tmp_path, dataset_version="local-1")
    assert wl.declaration.synthetic_standin is False and wl.declaration.dataset["files"] == 6
    assert all("def helper_" in s.prompt_text for s in wl.specs)
    assert wl.declaration.retokenization["mismatched"] == 0


# ---------------------------------------------------------------------- Long Context (A.5)
def test_long_context_structure_and_lengths() -> None:
    wl = build_workload("long-context", n=12, seed=2, lengths=[1024, 2048, 4096], order="ascending")
    assert [s.input_tokens for s in wl.specs] == [1024] * 4 + [2048] * 4 + [4096] * 4
    for s in wl.specs:
        assert len(s.prompt_ids) == s.input_tokens and s.max_tokens == 256
        assert s.prompt_text.startswith("Document:\n") and s.prompt_text.endswith(QUESTION)
    q = len(TOK.encode(QUESTION))
    assert 90 <= q <= 110  # "~100 token question"
    d = wl.declaration.to_json()
    assert d["standard"] is False and d["content"]["question_tokens"] == q and d["retokenization"]["mismatched"] == 0


def test_long_context_default_targets_are_a51() -> None:
    wl = build_workload("long-context", n=1, seed=0, lengths=[8192])
    assert wl.specs[0].input_tokens == 8192 and len(wl.specs[0].prompt_ids) == 8192
    decl = build_workload("long-context", n=3, seed=0, lengths=A5_TARGET_LENGTHS[:1]).declaration
    assert decl.params["lengths"] == [8192]
    with pytest.raises(WorkloadError, match="must exceed"):
        build_workload("long-context", n=1, seed=0, lengths=[50])


def test_long_context_random_order_draws_from_the_set() -> None:
    wl = build_workload("long-context", n=40, seed=8, lengths=[512, 1024])
    got = [s.input_tokens for s in wl.specs]
    assert set(got) == {512, 1024} and 8 < got.count(512) < 32


# ---------------------------------------------------------------------- helpers and errors
def test_fixed_helper_forces_output() -> None:
    wl = build_workload("fixed", n=20, seed=1, input_tokens=300, output_tokens=64)
    for s in wl.specs:
        assert (s.input_tokens, s.max_tokens, s.min_tokens, s.ignore_eos) == (300, 64, 64, True)
        assert len(s.prompt_ids) == 300
    assert "ignore_eos" in wl.declaration.output_control
    five5 = build_workload("synthetic-uniform", n=5, seed=1, output_tokens=256, force_output=True)
    assert all(s.max_tokens == 256 and s.min_tokens == 256 for s in five5.specs)
    assert five5.declaration.standard is False and five5.declaration.output_length.type == "fixed"


def test_registry_and_errors() -> None:
    assert set(STANDARD_WORKLOADS) <= set(WORKLOADS)
    with pytest.raises(WorkloadError, match="unknown workload 'nope'"):
        build_workload("nope", n=1, seed=1)
    with pytest.raises(WorkloadError, match="accepted parameters"):
        build_workload("synthetic-uniform", n=1, seed=1, colour="red")
    with pytest.raises(WorkloadError, match="seed"):
        build_workload("synthetic-uniform", n=1, seed=-1)
    with pytest.raises(WorkloadError, match="positive integer"):
        build_workload("synthetic-uniform", n=0, seed=1)


# ---------------------------------------------------------------------- determinism (§4.3.3)
@pytest.mark.parametrize(
    ("name", "params"),
    [("synthetic-uniform", {}), ("synthetic-skewed", {"classes": FAIRNESS_CLASSES}), ("conversation", {}),
     ("code-completion", {}), ("long-context", {"lengths": [1024, 2048]}), ("fixed", {})],
)
def test_same_seed_same_bytes(name: str, params: dict) -> None:
    a = build_workload(name, n=60, seed=123, **params)
    b = build_workload(name, n=60, seed=123, **params)
    c = build_workload(name, n=60, seed=124, **params)
    assert dumps_requests(a.specs) == dumps_requests(b.specs)
    assert a.declaration.request_sequence_sha256 == b.declaration.request_sequence_sha256
    assert json.dumps(a.declaration.to_json(), sort_keys=True) == json.dumps(b.declaration.to_json(), sort_keys=True)
    assert dumps_requests(a.specs) != dumps_requests(c.specs)


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 40))
def test_skewed_floors_caps_and_ids_for_any_seed(seed: int, n: int) -> None:
    wl = build_workload("synthetic-skewed", n=n, seed=seed)
    assert len(wl.specs) == n and [s.index for s in wl.specs] == list(range(n))
    for s in wl.specs:
        assert 32 <= s.input_tokens <= 4096 and 16 <= s.max_tokens <= 2048
        assert len(s.prompt_ids) == s.input_tokens


def test_reference_checks_from_the_specs() -> None:
    from pytest_llmbench.workloads import reference_checks

    assert reference_checks(build_workload("synthetic-uniform", n=50, seed=1))["4.3.2-PARAM-2"][0] is True
    assert reference_checks(build_workload("conversation", n=50, seed=1))["4.3.2-PARAM-4"][0] is True
    assert reference_checks(build_workload("code-completion", n=50, seed=1))["4.3.2-PARAM-5"][0] is True
    lc = reference_checks(build_workload("long-context", n=4, seed=1, lengths=[1024]))["4.3.2-PARAM-6"]
    assert lc[0] is False and "ambiguity 5" in lc[1]
    off = build_workload("conversation", n=50, seed=1, system_prompt_fraction=0.2)
    assert reference_checks(off)["4.3.2-PARAM-4"][0] is False


class _OffByOne(type(TOK)):  # type: ignore[misc]
    """cl100k_base whose batched encode drops a token of every text of a length divisible by 7, so
    that prompt fitting (TextFactory.fit) runs and draws from the seed stream again."""

    def encode_batch(self, texts):  # type: ignore[no-untyped-def]
        return [ids[:-1] if len(t) % 7 == 0 and ids else ids for t, ids in zip(texts, super().encode_batch(texts))]


#: request-sequence hashes of the all-at-once builder before the lazy one (issue 30): the same requests
PINNED = {("cl100k_base", 2500, 1): "38c3d3226112255f06b742dec471b841bd1697117724dfc83c4e4267e1ae747e",
          ("off-by-one", 1030, 7): "f117bfe7db901c889c4024dec4d76fb8086e0338e36307d73b7d0ca6df8a32b6"}


@pytest.mark.parametrize("tok_name, n, seed", list(PINNED))
def test_a_lazy_workload_sends_the_same_requests_as_the_list(tok_name: str, n: int, seed: int) -> None:
    """synthetic-uniform made a block at a time (build_workload(lazy=True)): a re-iterable SpecStream
    of the same requests, in the same order, with the same declaration, as the list; both as before."""
    from pytest_llmbench.workloads import SpecStream

    tok = TOK if tok_name == "cl100k_base" else _OffByOne("cl100k_base")
    eager = build_workload("synthetic-uniform", n=n, seed=seed, tokenizer=tok)
    lazy = build_workload("synthetic-uniform", n=n, seed=seed, tokenizer=tok, lazy=True)
    assert isinstance(lazy.specs, SpecStream) and isinstance(eager.specs, list) and len(lazy) == n
    assert eager.declaration.request_sequence_sha256 == PINNED[(tok_name, n, seed)]
    assert lazy.declaration.to_json() == eager.declaration.to_json()
    assert list(lazy.specs) == eager.specs and list(lazy.specs) == eager.specs  # each pass reads it again
    if tok_name != "cl100k_base":
        assert eager.declaration.retokenization["mismatched"] > 0  # the fitting draws did run
    capped = lazy.specs.map(lambda s: dataclasses.replace(s, max_tokens=7))  # drawn lazily too
    assert len(capped) == n and list(capped) == [dataclasses.replace(s, max_tokens=7) for s in eager.specs]
    assert list(lazy.specs) == eager.specs  # the stream it was mapped from is unchanged


def test_prompts_made_in_blocks_do_not_depend_on_the_block_size() -> None:
    """The prompt blocks continue one seed stream: any block size gives the same prompts."""
    from pytest_llmbench.workloads.standard import _random_content_blocks
    from pytest_llmbench.workloads.text import text_factory

    tok = _OffByOne("cl100k_base")
    lengths = np.random.default_rng(0).integers(128, 512, size=40)

    def made(block: int, pool: str) -> tuple[list[str], list[list[int]]]:
        texts: list[str] = []
        ids: list[list[int]] = []
        for t, i in _random_content_blocks(text_factory(tok), np.random.default_rng(5), lengths, pool, block):
            texts += t
            ids += i
        return texts, ids

    for pool in ("round-trip", "full"):
        assert made(7, pool) == made(40, pool) == made(1, pool)
    with pytest.raises(WorkloadError, match="id_pool must be"):
        made(7, "words")
