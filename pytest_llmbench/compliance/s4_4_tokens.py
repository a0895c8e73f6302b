"""§4.4 tokenization items."""

from __future__ import annotations

import sys
from collections.abc import Mapping

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass
from .engine import _blank, _Ctx, _need, _short, _tok, evaluator
from .verdict import Check

# ---- 4.4 tokenization


@evaluator("4.4.1-MUST-1", "4.4.1-MUST-2", "4.4.1-MUST-3")
def _tokenizer(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.tokenizer is None:
        return _need(rid, "tokenizer declaration")
    if rid == "4.4.1-MUST-1":
        name, version = _tok(f, "name"), _tok(f, "version")
        if _blank(name) or _blank(version):
            return Check.unmet(rid, "tokenizer name or version missing", name=name, version=version)
        return Check.met(rid, f"tokenizer {name} {version}")
    if rid == "4.4.1-MUST-2":
        vs = _tok(f, "vocab_size")
        if not isinstance(vs, int) or isinstance(vs, bool) or vs <= 0:
            return Check.unmet(rid, f"tokenizer vocabulary size not stated ({vs!r})")
        return Check.met(rid, f"vocabulary size {vs}")
    src = _tok(f, "source")
    if _blank(src):
        return Check.unmet(rid, "tokenizer source not stated")
    return Check.met(rid, f"tokenizer source {src}")


@evaluator("4.4.2-MUST-1")
def _counting(ctx: _Ctx, rid: str) -> Check:
    opt = _tok(ctx.facts, "counting_option")
    if opt in ("A", "B"):
        return Check.met(rid, f"counting option {opt} ({'native' if opt == 'A' else 'reference'} tokenizer)")
    return Check.unmet(rid, f"token counting option (A native / B reference) not declared ({opt!r})")


@evaluator("4.4.2-SHOULD-1")
def _cross_system_tokenizer(ctx: _Ctx, rid: str) -> Check:
    opt, name = _tok(ctx.facts, "counting_option"), _tok(ctx.facts, "name")
    if opt == "B" and name == "cl100k_base":
        return Check.met(rid, "reference tokenizer cl100k_base (option B)")
    return Check.unmet(rid, f"counting option {opt!r} with tokenizer {name!r}; cl100k_base reference recommended")


@evaluator("4.4.2-PARAM-1", "4.4.2-REPORT-1")
def _counting_detail(ctx: _Ctx, rid: str) -> Check:
    name = _tok(ctx.facts, "name")
    if _blank(name):
        return Check.unmet(rid, "tokenizer not named")
    return Check.met(rid, f"counts labelled with tokenizer {name}")


_SPECIAL_KEYS = {
    "4.4.3-MUST-1": ("bos_eos", ("bos", "eos"), "BOS/EOS counting"),
    "4.4.3-MUST-2": ("system_prompt", ("system",), "system-prompt token counting"),
    "4.4.3-MUST-3": ("tool_call_format", ("tool", "function"), "tool/function-call token counting"),
}


@evaluator(*_SPECIAL_KEYS)
def _special_tokens(ctx: _Ctx, rid: str) -> Check:
    key, words, what = _SPECIAL_KEYS[rid]
    st = ctx.facts.special_tokens
    if st is None:
        st = _tok(ctx.facts, "special_tokens")
    if isinstance(st, Mapping):
        v = st.get(key)
        if _blank(v):
            return Check.unmet(rid, f"{what} not stated (special_tokens.{key})")
        return Check.met(rid, f"{what}: {v}")
    if isinstance(st, str) and any(w in st.lower() for w in words):
        return Check.met(rid, f"{what} stated: {_short(st, 120)}")
    return Check.unmet(rid, f"{what} not stated")


