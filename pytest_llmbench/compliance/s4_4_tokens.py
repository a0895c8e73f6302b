"""§4.4 tokenization items."""

from __future__ import annotations

from .engine import _blank, _Ctx, _need, _tok, decide, evaluator
from .facts import RunFacts
from .verdict import Check, Status

# ---- 4.4 tokenization


@evaluator("4.4.1-MUST-1")
def _tokenizer_name(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.tokenizer is None:
        return _need(rid, "tokenizer declaration")
    name, version = _tok(f, "name"), _tok(f, "version")
    return decide(rid, ok=not (_blank(name) or _blank(version)), met=f"tokenizer {name} {version}",
                  unmet="tokenizer name or version missing", name=name, version=version)


@evaluator("4.4.1-MUST-2")
def _tokenizer_vocabulary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.tokenizer is None:
        return _need(rid, "tokenizer declaration")
    vs = _tok(f, "vocab_size")
    return decide(rid, ok=isinstance(vs, int) and not isinstance(vs, bool) and vs > 0, met=f"vocabulary size {vs}",
                  unmet=f"tokenizer vocabulary size not stated ({vs!r})")


@evaluator("4.4.1-MUST-3")
def _tokenizer_source(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.tokenizer is None:
        return _need(rid, "tokenizer declaration")
    src = _tok(f, "source")
    return decide(rid, ok=not _blank(src), met=f"tokenizer source {src}", unmet="tokenizer source not stated")


def _counting_used(f: RunFacts) -> dict[str, int]:
    return {k: int(v) for k, v in (f.counting_used or {}).items() if v}


@evaluator("4.4.2-MUST-1")
def _counting(ctx: _Ctx, rid: str) -> Check:
    used = _counting_used(ctx.facts)
    if not used:
        return _need(rid, "which counting option each record's token counts came from")
    n = sum(used.values())
    parts = [f"option {k} ({'server usage / native' if k == 'A' else 'reference tokenizer'}) for "
             f"{v} of {n} records" for k, v in sorted(used.items())]
    return decide(rid, ok=True, met="; ".join(parts), figure="+".join(sorted(used)), **used)


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
    if _blank(v):
        return decide(rid, ok=False, unmet=f"{what} of the client's counting not stated (tokenizer.{key})")
    return decide(rid, ok=True, met=f"{what} of the client's reference counting ({used['B']} records): {v}",
                  source="parameter", value=v)
