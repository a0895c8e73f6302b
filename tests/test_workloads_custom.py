"""Custom workload specs (§4.3, §4.3.1), replay files (§4.3.3) and non-reference tokenizers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from scipy import stats

from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.workloads import (
    WorkloadError,
    build_workload,
    dumps_requests,
    load_requests,
    save_requests,
    sequence_sha256,
    validate_spec,
)

TOK = get_tokenizer()

SPEC_TOML = """
name = "support-chat"
description = "customer support chat with a shared product manual"

[input_length]
type = "uniform"
min = 300
max = 900
unit = "tokens"
tokenizer = "cl100k_base"

[output_length]
type = "lognormal"
mu = 4.0
sigma = 0.5
min = 8
max = 512
unit = "tokens"
control = "both"
stop = ["\\n\\nUser:"]

[content]
domain = "conversation"
language = "English"
system_prompt = true
system_prompt_tokens = 50

[prefix_sharing]
fraction = 0.6
prefixes = 3
selection = "zipf"
s = 1.2

[prefix_sharing.length]
type = "fixed"
value = 128
"""

SPEC = {
    "name": "support-chat",
    "description": "customer support chat with a shared product manual",
    "input_length": {"type": "uniform", "min": 300, "max": 900, "unit": "tokens", "tokenizer": "cl100k_base"},
    "output_length": {"type": "lognormal", "mu": 4.0, "sigma": 0.5, "min": 8, "max": 512, "unit": "tokens",
                      "control": "both", "stop": ["\n\nUser:"]},
    "content": {"domain": "conversation", "language": "English", "system_prompt": True, "system_prompt_tokens": 50},
    "prefix_sharing": {"fraction": 0.6, "prefixes": 3, "selection": "zipf", "s": 1.2,
                       "length": {"type": "fixed", "value": 128}},
}


def test_toml_json_yaml_specs_give_identical_requests(tmp_path) -> None:
    toml_p = tmp_path / "support.toml"
    toml_p.write_text(SPEC_TOML)
    json_p = tmp_path / "support.json"
    json_p.write_text(json.dumps(SPEC))
    yaml_p = tmp_path / "support.yaml"
    yaml_p.write_text(yaml.safe_dump(SPEC))
    a = build_workload(toml_p, n=500, seed=5)
    b = build_workload(json_p, n=500, seed=5)
    c = build_workload(str(yaml_p), n=500, seed=5)
    assert dumps_requests(a.specs) == dumps_requests(b.specs) == dumps_requests(c.specs)
    d = a.declaration.to_json()
    assert d["name"] == "support-chat" and d["standard"] is False
    assert d["spec"]["content"] == SPEC and len(d["spec"]["sha256"]) == 64  # reported in full
    assert d["input_length"]["params"] == {"min": 300, "max": 900}
    assert d["output_control"].startswith("both") and d["tokenizer"]["name"] == "cl100k_base"
    assert a.declaration.missing_fields() == []


def test_custom_spec_is_honoured(tmp_path) -> None:
    p = tmp_path / "support.toml"
    p.write_text(SPEC_TOML)
    wl = build_workload(p, n=1500, seed=2)
    inp = np.array([s.input_tokens for s in wl.specs])
    out = np.array([s.max_tokens for s in wl.specs])
    assert inp.min() >= 300 and inp.max() <= 900
    jit = np.random.default_rng(0).uniform(-0.5, 0.5, len(inp))
    assert stats.kstest(inp + jit, stats.uniform(299.5, 601).cdf).pvalue > 0.001
    assert np.median(out) == pytest.approx(np.exp(4.0), rel=0.06) and out.min() >= 8 and out.max() <= 512
    assert all(s.stop == ("\n\nUser:",) for s in wl.specs)
    shared = [s for s in wl.specs if s.prefix_id is not None]
    assert len(shared) == 900  # exactly 60 %
    counts = np.array([sum(s.prefix_id == f"prefix-{k}" for s in shared) for k in range(3)])
    z = np.arange(1, 4) ** -1.2
    assert stats.chisquare(counts, z / z.sum() * 900).pvalue > 0.001
    for s in wl.specs:
        assert s.system_prompt is not None and len(TOK.encode(s.system_prompt)) == 50
        assert len(s.prompt_ids) + 50 == s.input_tokens  # input length includes system prompt and prefix
        if s.prefix_id:
            assert s.prefix_tokens == 128
    heads = {s.prefix_id: s.prompt_ids[:128] for s in shared}
    assert all(s.prompt_ids[:128] == heads[s.prefix_id] for s in shared)
    assert wl.declaration.retokenization["mismatched"] == 0


def test_incomplete_spec_lists_every_missing_field_in_one_error(tmp_path) -> None:
    p = tmp_path / "broken.toml"
    p.write_text(
        """
[input_length]
type = "uniform"
min = 10

[output_length]
type = "fixed"
value = 100

[content]
domain = "general"
"""
    )
    with pytest.raises(WorkloadError) as err:
        build_workload(p, n=10, seed=1)
    msg = str(err.value)
    assert str(p) in msg
    for field in ("input_length.unit", "input_length.tokenizer", "input_length.max", "output_length.unit",
                  "output_length.control", "content.language", "content.system_prompt",
                  "content.system_prompt_tokens", "prefix_sharing"):
        assert field in msg, field
    assert "input_length.type" not in msg and "content.domain" not in msg


def test_invalid_values_are_reported_with_missing_ones() -> None:
    bad = json.loads(json.dumps(SPEC))
    bad["input_length"]["type"] = "poisson"
    bad["output_length"]["control"] = "telepathy"
    bad["prefix_sharing"]["fraction"] = 1.5
    del bad["content"]["language"]
    with pytest.raises(WorkloadError) as err:
        validate_spec(bad, "x.json")
    msg = str(err.value)
    assert "content.language" in msg and "poisson" in msg and "telepathy" in msg and "1.5" in msg


def test_stop_control_needs_stop_sequences() -> None:
    bad = json.loads(json.dumps(SPEC))
    del bad["output_length"]["stop"]
    with pytest.raises(WorkloadError, match=r"output_length.stop"):
        validate_spec(bad)


def test_spec_without_prefix_or_system_prompt(tmp_path) -> None:
    spec = json.loads(json.dumps(SPEC))
    spec["content"].update(system_prompt=False, system_prompt_tokens=0)
    spec["prefix_sharing"] = {"fraction": 0, "length": "none"}
    spec["input_length"] = {"type": "empirical", "values": [100, 200, 400], "unit": "tokens", "tokenizer": "cl100k_base"}
    p = tmp_path / "plain.json"
    p.write_text(json.dumps(spec))
    wl = build_workload(p, n=300, seed=1)
    assert {s.input_tokens for s in wl.specs} == {100, 200, 400}
    assert all(s.system_prompt is None and s.prefix_id is None for s in wl.specs)


def test_unknown_file_type_and_missing_file(tmp_path) -> None:
    with pytest.raises(WorkloadError, match="does not exist"):
        build_workload(tmp_path / "nope.toml", n=1, seed=1)
    with pytest.raises(WorkloadError, match="unknown workload"):
        build_workload(str(tmp_path / "spec.ini"), n=1, seed=1)


# ---------------------------------------------------------------------- replay (§4.3.3)
def test_save_and_load_requests_round_trip(tmp_path) -> None:
    wl = build_workload("conversation", n=50, seed=4)
    path = tmp_path / "requests.jsonl"
    digest = save_requests(path, wl.specs)
    assert digest == wl.declaration.request_sequence_sha256 == sequence_sha256(wl.specs)
    back = load_requests(path)
    assert back == wl.specs and isinstance(back[0], RequestSpec)
    assert path.read_bytes() == dumps_requests(back)
    # the canonical line equals RequestSpec.to_json (the shared contract)
    first = json.loads(path.read_text().splitlines()[0])
    assert first == wl.specs[0].to_json()


def test_workload_save_and_replay_via_build_workload(tmp_path) -> None:
    wl = build_workload("code-completion", n=30, seed=8)
    path = tmp_path / "cc.jsonl"
    wl.save(path)
    again = build_workload(str(path), n=30, seed=8)
    assert again.specs == wl.specs
    assert again.declaration.request_sequence_sha256 == wl.declaration.request_sequence_sha256
    assert again.declaration.prefix_sharing == wl.declaration.to_json()["prefix_sharing"]
    assert any("replayed" in n for n in again.declaration.notes)
    with pytest.raises(WorkloadError, match="seed 8, not 9"):
        build_workload(str(path), n=30, seed=9)
    (tmp_path / "bare.jsonl").write_bytes(path.read_bytes())
    with pytest.raises(WorkloadError, match="declaration"):
        build_workload(str(tmp_path / "bare.jsonl"), n=30, seed=8)


def test_load_requests_names_the_bad_line(tmp_path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"index": 0}\n')
    with pytest.raises(WorkloadError, match=r"bad.jsonl:1"):
        load_requests(p)


# ---------------------------------------------------------------------- other tokenizers
def test_workload_with_a_tiny_hf_tokenizer(tmp_path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    words = "the quick brown fox jumps over lazy dog and cat sat on mat with hat red blue green".split()
    corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(30)) for i in range(200)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "tiny" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    hf = get_tokenizer(f"hf:{path}")
    wl = build_workload("synthetic-uniform", n=30, seed=1, tokenizer=hf)
    for s in wl.specs:
        assert hf.encode(s.prompt_text) == list(s.prompt_ids) and len(s.prompt_ids) == s.input_tokens
    d = wl.declaration.to_json()
    assert d["tokenizer"]["name"] == "tiny" and d["input_length"]["tokenizer"] == "tiny"
    assert d["retokenization"]["tokenizer"] == "tiny" and d["retokenization"]["mismatched"] == 0
