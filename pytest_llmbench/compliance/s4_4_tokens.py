"""§4.4 tokenization items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .engine import _blank, _Ctx, _need, _tok, decide, evaluator
from .facts import RunFacts
from .verdict import Check, Status

# ---- 4.4 tokenization


#: 4.4.1 item -> the tokenizer fields it asks for
_SPEC_FIELDS = {"4.4.1-MUST-1": ("name", "version"), "4.4.1-MUST-2": ("vocab_size",), "4.4.1-MUST-3": ("source",)}


#: why a 4.4.1/4.4.3 item holds whenever every count is the client's (option B)
_REFERENCE_DECLARED = ("every count is the client's reference tokenizer (option B), whose name, version, vocabulary "
                       "size, source and counting rules the tool ships with it (tokenizer.TokenizerDeclaration)")


def _valid(key: str, v: Any) -> bool:
    if key == "vocab_size":
        return isinstance(v, int) and not isinstance(v, bool) and v > 0
    return not _blank(v)


@evaluator(*_SPEC_FIELDS)
def _tokenizer_spec(ctx: _Ctx, rid: str) -> Check:
    """4.4.1-MUST-1..3 name the tokenizer the counts are in: the reference tokenizer's declaration
    under option B; under the server's usage counts (option A) the server's tokenizer, each field
    as the server exposed it (``/v1/models``, llama.cpp ``/props``) or from the ``tokenizer``
    declaration, else needs-declaration (``tokenizer`` key)."""
    f = ctx.facts
    if f.tokenizer is None:
        return _need(rid, "tokenizer declaration")
    keys = _SPEC_FIELDS[rid]
    values = {k: _tok(f, k) for k in keys}
    server = bool(_tok(f, "server"))
    if not server:  # option B: the client's own reference tokenizer, whose declaration the tool ships
        text = " ".join(str(values[k]) for k in keys)
        return decide(rid, ok=all(_valid(k, values[k]) for k in keys), met=f"tokenizer {text}",
                      unmet=f"tokenizer {', '.join(keys)} not stated ({text})",
                      source="construction", construction=_REFERENCE_DECLARED,
                      **{f"tokenizer_{k}": v for k, v in values.items()})
    decl = ctx.decl["tokenizer"] if "tokenizer" in ctx.decl else {}
    decl = decl if isinstance(decl, Mapping) else {}
    found, origin = {}, {}
    for k in keys:
        if _valid(k, values[k]):
            found[k], origin[k] = values[k], "the server"
        elif _valid(k, decl.get(k)):
            found[k], origin[k] = decl[k], f"declared ({ctx.decl.source})"
    missing = [k for k in keys if k not in found]
    lead = f"counts are the server's ({_tok(f, 'counting_option')}): its tokenizer"
    if missing:
        have = "; ".join(f"{k} {found[k]} from {origin[k]}" for k in found)
        c = ctx.needs(rid, "tokenizer", f"{lead}'s {' and '.join(missing)} not exposed by the server"
                      + (f" ({have})" if have else ""))
        return c
    text = "; ".join(f"{k} {found[k]} ({origin[k]})" for k in keys)
    kind = "declared" if all(o != "the server" for o in origin.values()) else "measured"
    return decide(rid, ok=True, met=f"{lead}: {text}", source=kind, **{f"tokenizer_{k}": v for k, v in found.items()})


def _counting_used(f: RunFacts) -> dict[str, int]:
    return {k: int(v) for k, v in (f.counting_used or {}).items() if v}


@evaluator("4.4.2-MUST-1")
def _counting(ctx: _Ctx, rid: str) -> Check:
    """Every successful measured record's output count names its option (A: the server's usage, B:
    the client's reference count); a successful record with neither leaves its option undeclared."""
    used = _counting_used(ctx.facts)
    audit = ctx.facts.records
    if not used and (audit is None or not audit.n_ok):
        return _need(rid, "which counting option each record's token counts came from")
    n = sum(used.values())
    ok_records = audit.n_ok if audit is not None else n
    parts = [f"option {k} ({'server usage / native' if k == 'A' else 'reference tokenizer'}) for "
             f"{v} of {ok_records} successful records" for k, v in sorted(used.items())]
    return decide(rid, ok=n >= ok_records, met="; ".join(parts),
                  unmet=f"{ok_records - n} of {ok_records} successful records carry no token count from either "
                        "option (no server usage, no client count)" + (f"; {'; '.join(parts)}" if parts else ""),
                  figure="+".join(sorted(used)) or None, without_option=max(ok_records - n, 0), **used)


@evaluator("4.4.2-SHOULD-1")
def _cross_system_tokenizer(ctx: _Ctx, rid: str) -> Check:
    used, name = _counting_used(ctx.facts), _tok(ctx.facts, "name")
    if not used:
        return _need(rid, "which counting option each record's token counts came from")
    return decide(rid, ok=set(used) == {"B"} and name == "cl100k_base",
                  met=f"all {used.get('B')} records counted with the reference tokenizer cl100k_base (option B)",
                  unmet=f"counts from {', '.join(f'option {k}: {v}' for k, v in sorted(used.items()))} records, "
                        f"tokenizer {name!r}; cl100k_base (option B) recommended for comparison")


@evaluator("4.4.2-PARAM-1", "4.4.2-REPORT-1")
def _counting_detail(ctx: _Ctx, rid: str) -> Check:
    name = _tok(ctx.facts, "name")
    return decide(rid, ok=not _blank(name), met=f"counts labelled with tokenizer {name}", unmet="tokenizer not named")


_SPECIAL_KEYS = {
    "4.4.3-MUST-1": ("bos_eos", "BOS/EOS counting"),
    "4.4.3-MUST-2": ("system_prompt", "system-prompt token counting"),
    "4.4.3-MUST-3": ("tool_call_format", "tool/function-call token counting"),
}


@evaluator(*_SPECIAL_KEYS)
def _special_tokens(ctx: _Ctx, rid: str) -> Check:
    """From the client's counting method when every count is the client's (option B, a parameter);
    when the server's usage counts were used (option A), only the server knows: declared."""
    key, what = _SPECIAL_KEYS[rid]
    used = _counting_used(ctx.facts)
    if not used:
        return _need(rid, "which counting option each record's token counts came from")
    if "A" in used:
        c = ctx.declared(rid, "special_tokens")
        if c.status is Status.MET:
            v = ctx.decl["special_tokens"].get(key) if "special_tokens" in ctx.decl else None
            c.reason = f"{what} of the server's usage counts ({used['A']} records): {v} ({ctx.decl.source})"
        elif c.status is Status.NEEDS_DECLARATION:
            c.reason = f"{used['A']} records use the server's usage counts, whose {what} only the server knows; " \
                       + c.reason
        return c
    v = _tok(ctx.facts, key)
    return decide(rid, ok=not _blank(v), met=f"{what} of the client's reference counting ({used['B']} records): {v}",
                  unmet=f"{what} of the client's counting not stated (tokenizer.{key})",
                  source="construction", construction=_REFERENCE_DECLARED, value=v)
