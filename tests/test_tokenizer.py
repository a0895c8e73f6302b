"""Reference tokenizer (§4.4): offline cl100k_base, declaration, token start offsets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.tokenizer import TokenizerError, get_tokenizer


def test_cl100k_offline_known_ids() -> None:
    tok = get_tokenizer("cl100k_base")
    assert tok.encode("hello world") == [15339, 1917]
    assert tok.decode([15339, 1917]) == "hello world"
    decl = tok.declaration
    assert decl.name == "cl100k_base" and decl.vocab_size == 100277 and "tiktoken" in decl.version


def test_token_starts_hand_computed() -> None:
    assert get_tokenizer().token_starts("hello world") == [0, 5]
    assert get_tokenizer().token_starts("") == []


@settings(deadline=None, max_examples=60)
@given(st.text(max_size=80))
def test_token_starts_monotone_and_in_range(text: str) -> None:
    starts = get_tokenizer().token_starts(text)
    assert len(starts) == len(get_tokenizer().encode(text))
    assert all(0 <= s <= len(text) for s in starts)
    assert starts == sorted(starts)


def test_unknown_tokenizer_is_an_error() -> None:
    with pytest.raises(TokenizerError, match="not-a-tokenizer"):
        get_tokenizer("not-a-tokenizer")


# ---------------------------------------------------------------------- declaration (§4.4.1-4.4.3)
def test_declaration_states_every_44_item() -> None:
    d = get_tokenizer().declaration.to_json()
    for key in ("name", "version", "vocab_size", "source", "counting_option", "bos_eos", "system_prompt",
                "tool_call_format", "counting_method"):
        assert d[key] not in (None, ""), key
    assert d["counting_option"] == "B" and d["bos_eos"] in ("included", "excluded")
    a = get_tokenizer().declaration.with_option("A", counting_method="server-usage")
    assert a.counting_option == "A" and a.name == "cl100k_base"
    with pytest.raises(TokenizerError, match="'C'"):
        get_tokenizer().declaration.with_option("C")


def test_tiktoken_prefix_and_batch() -> None:
    tok = get_tokenizer("tiktoken:cl100k_base")
    assert tok.encode("hello world") == [15339, 1917]
    assert tok.encode_batch(["hello world", ""]) == [[15339, 1917], []]
    assert len(tok.ordinary_ids()) == 100256  # A.1.4: ids 0..100255


# ---------------------------------------------------------------------- Hugging Face tokenizer.json
@pytest.fixture(scope="module")
def tiny_tokenizer_json(tmp_path_factory: pytest.TempPathFactory):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world the quick brown fox jumps over the lazy dog héllo wörld"] * 50, trainer)
    path = tmp_path_factory.mktemp("tok") / "tiny-model" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path


def test_hf_tokenizer_from_local_file(tiny_tokenizer_json) -> None:
    import tokenizers

    tok = get_tokenizer(f"hf:{tiny_tokenizer_json}")
    ref = tokenizers.Tokenizer.from_file(str(tiny_tokenizer_json))
    text = "hello world, the lazy fox"
    assert tok.encode(text) == ref.encode(text, add_special_tokens=False).ids
    assert tok.decode(tok.encode(text)) == text
    d = tok.declaration
    assert d.name == "tiny-model" and d.vocab_size == ref.get_vocab_size(with_added_tokens=True)
    assert "sha256:" in d.version and "tokenizers" in d.version and str(tiny_tokenizer_json) in d.source
    assert d.bos_eos == "excluded"
    special = {ref.token_to_id("<s>"), ref.token_to_id("</s>")}
    assert special.isdisjoint(tok.ordinary_ids())
    assert tok.encode_batch([text, "dog"]) == [tok.encode(text), tok.encode("dog")]


def test_hf_token_starts_hand_checked(tiny_tokenizer_json) -> None:
    tok = get_tokenizer(f"hf:{tiny_tokenizer_json}")
    text = "hello world the lazy fox"  # ASCII: each token starts where the previous tokens end
    ids = tok.encode(text)
    assert tok.token_starts(text) == [len(tok.decode(ids[:i])) for i in range(len(ids))]
    text = "héllo wörld the fox"  # a byte-level token may split 'é': its start is that character
    starts = tok.token_starts(text)
    assert len(starts) == len(tok.encode(text)) and starts[0] == 0 and starts == sorted(starts)
    assert text[starts[-1]:] == " fox" and text[starts[-2]:] == " the fox"


@settings(deadline=None, max_examples=40)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz éö,.", max_size=60))
def test_hf_token_starts_property(tiny_tokenizer_json, text: str) -> None:
    tok = get_tokenizer(f"hf:{tiny_tokenizer_json}")
    starts = tok.token_starts(text)
    assert len(starts) == len(tok.encode(text))
    assert starts == sorted(starts) and all(0 <= s <= len(text) for s in starts)


def test_hf_missing_or_broken_file(tmp_path) -> None:
    with pytest.raises(TokenizerError, match="does not exist"):
        get_tokenizer(f"hf:{tmp_path / 'none.json'}")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot load"):
        get_tokenizer(f"hf:{bad}")


# ---------------------------------------------------------------------- option A: server counting
def _vllm_like(seen: list):
    import httpx

    tok = get_tokenizer()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path != "/tokenize":
            return httpx.Response(404, json={"detail": "Not Found"})
        body = json.loads(request.content)
        if "messages" in body:
            ids = [1] + tok.encode("".join(m["content"] for m in body["messages"])) + [2]
        else:
            ids = ([1] if body.get("add_special_tokens", True) else []) + tok.encode(body["prompt"])
        return httpx.Response(200, json={"count": len(ids), "max_model_len": 4096, "tokens": ids})

    return handler


def test_server_tokenize_counts_with_the_server() -> None:
    import httpx

    from pytest_llmbench.sut.adapters.counting import ServerTokenCounter, server_counting

    seen: list = []
    counter, decl = server_counting("http://sut:8000/v1", "m", api_key="sk-secret",
                                    transport=httpx.MockTransport(_vllm_like(seen)))
    assert isinstance(counter, ServerTokenCounter)
    assert counter.url == "http://sut:8000/tokenize"  # /v1 stripped: vLLM serves it at the root
    assert counter.count("hello world") == 3  # BOS + 2
    assert counter.tokenize("hello world") == [1, 15339, 1917]
    assert counter.count_messages([{"role": "user", "content": "hello world"}]) == 4
    assert decl.counting_option == "A" and decl.counting_method == "server-tokenize" and decl.bos_eos == "included"
    assert seen[-1].headers["authorization"] == "Bearer sk-secret"
    assert json.loads(seen[-2].content)["model"] == "m"
    assert "sk-secret" not in repr(counter)


def test_no_tokenize_endpoint_declares_usage_counting() -> None:
    import httpx

    from pytest_llmbench.sut.adapters.counting import server_counting

    counter, decl = server_counting("http://sut:8000/v1", "m",
                                    transport=httpx.MockTransport(lambda r: httpx.Response(404, text="nope")))
    assert counter is None
    assert decl.counting_option == "A" and decl.counting_method == "server-usage"
    assert "usage.prompt_tokens" in decl.source and "HTTP 404" in decl.source


def test_malformed_tokenize_answer_is_an_error() -> None:
    import httpx

    from pytest_llmbench.sut.adapters.counting import ServerTokenCounter

    c = ServerTokenCounter("http://sut", transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"x": 1})))
    with pytest.raises(TokenizerError, match="without 'count'"):
        c.count("hello")
    c = ServerTokenCounter("http://sut", transport=httpx.MockTransport(lambda r: httpx.Response(200, text="<html>")))
    with pytest.raises(TokenizerError, match="not JSON"):
        c.count("hello")
    assert c.probe() is not None


@settings(deadline=None, max_examples=200)
@given(st.text(max_size=200))
def test_token_starts_equal_tiktokens_own_offsets(text: str) -> None:
    tok = get_tokenizer()
    ids = tok.encode(text)
    if ids:
        _, expected = tok._enc.decode_with_offsets(ids)  # the reference implementation
        assert tok.token_starts(text) == list(expected)


def test_token_starts_multibyte_split_across_tokens() -> None:
    text = "héllo 日本語 🎉🎉 ok"
    tok = get_tokenizer()
    assert tok.token_starts(text) == list(tok._enc.decode_with_offsets(tok.encode(text))[1])


def test_special_token_text_is_encoded_as_ordinary_text() -> None:
    """A model's output that spells a special token is text, not the special id: ``encode`` is
    tiktoken's ``encode_ordinary``, the ids ``encode(text, disallowed_special=())`` gives."""
    tok = get_tokenizer("cl100k_base")
    text = "a <|endoftext|> b <|fim_prefix|>"
    ids = tok.encode(text)
    assert ids == tok._enc.encode(text, disallowed_special=())  # type: ignore[attr-defined]
    assert 100257 not in ids and tok.decode(ids) == text  # <|endoftext|> is 100257
    assert tok.encode_batch([text, "x"]) == [ids, tok.encode("x")]
