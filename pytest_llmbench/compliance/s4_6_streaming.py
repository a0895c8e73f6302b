"""§4.6 streaming protocol and ITL method items."""

from __future__ import annotations

from .engine import _Ctx, _need, decide, evaluator, item
from .registry import ITL_METHODS, PROTOCOLS
from .verdict import Check

# ---- 4.6 streaming protocol and ITL


#: how the report names each protocol (§4.6.1)
_PROTOCOL_NAMES = {"sse": "SSE", "grpc": "gRPC", "websocket": "WebSocket"}


def _boundary(ctx: _Ctx) -> str:
    return str(ctx.facts.sut_boundary or "this").replace("-", " ")


@evaluator("4.6.1-SHOULD-1", "4.6.1-SHOULD-2")
def _protocol_for_boundary(ctx: _Ctx, rid: str) -> Check:
    """Decided from the protocol the run's requests actually used (the records' protocol, not a setting)."""
    want = item(rid)["protocol"]  # RECOMMENDED for this boundary (§4.6.1)
    p = (ctx.facts.protocol or "").lower()
    if not p:
        return _need(rid, "streaming protocol")
    used, rec = _PROTOCOL_NAMES.get(p, p), _PROTOCOL_NAMES.get(want, want)
    return decide(rid, ok=p == want, met=f"responses streamed over {used}, as §4.6.1 recommends for a "
                  f"{_boundary(ctx)} boundary", unmet=f"responses streamed over {used}; §4.6.1 recommends {rec} "
                  f"streaming for a {_boundary(ctx)} boundary", protocol=p)


@evaluator("4.6.2-MUST-1")
def _protocol_named(ctx: _Ctx, rid: str) -> Check:
    """The protocol used, reported as such (the run's records: SSE event streams or gRPC messages)."""
    p = (ctx.facts.protocol or "").lower()
    return decide(rid, ok=p in PROTOCOLS, met=f"protocol used: {_PROTOCOL_NAMES.get(p, p)} streaming",
                  unmet=f"streaming protocol not named ({ctx.facts.protocol!r})", protocol=p or None)


@evaluator("4.6.2-MUST-2")
def _chunking(ctx: _Ctx, rid: str) -> Check:
    frac = ctx.facts.single_token_chunk_fraction
    if frac is None:
        return _need(rid, "tokens-per-chunk measurement")
    kind = ("one token per chunk" if frac >= 1.0 else
            f"multi-token chunks occur ({100 * (1 - frac):.2g}% of content chunks carry several tokens)")
    return decide(rid, ok=True, met=kind, single_token_chunk_fraction=frac)


@evaluator("4.6.2-MUST-3", "4.6.3-MUST-1")
def _itl_method(ctx: _Ctx, rid: str) -> Check:
    """The option App. B.2.1 decided per run, with its evidence (single-token share, counts); a run
    without a recorded decision falls back to the declared method."""
    decisions = ctx.facts.itl_decisions or ()
    if decisions:
        opts = sorted({str(d.get("option")) for d in decisions})
        parts = []
        for d in decisions:
            share = d.get("single_token_share")
            ref = d.get("reference_single_token_share")
            pattern = (f"single-token share {share:.1%}" if share is not None else
                       f"single-token share unknown in server tokens ({ref:.1%} in reference-tokenizer counts)"
                       if ref is not None else "tokens per chunk unknown")
            parts.append(f"{d.get('run')}: option {d.get('option')} ({pattern} of {d.get('content_chunks')} "
                         f"content chunks; {d.get('reason')})")
        return decide(rid, ok=True, met="; ".join(parts), figure="+".join(opts),
                      single_token_share=[d.get("single_token_share") for d in decisions],
                      reference_single_token_share=[d.get("reference_single_token_share") for d in decisions],
                      tokens_at_chunk_time=[d.get("tokens_at_chunk_time") for d in decisions])
    m = ctx.facts.itl_method
    option = "ABC"[ITL_METHODS.index(m)] if m in ITL_METHODS else None
    return decide(rid, ok=option is not None, met=f"ITL option {option} ({m})",
                  unmet=f"ITL calculation option not declared ({m!r})")


@evaluator("4.6.3-SHOULD-1")
def _prefer_server(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.server_token_timestamps is None:
        return _need(rid, "whether the server sends per-token timestamps")
    if not f.server_token_timestamps:  # conditional ("when the server provides them")
        return decide(rid, ok=None, na="the server sent no per-token timestamps on this run's records: "
                                       "option C unavailable")
    return decide(rid, ok=f.itl_method == "server", met="server-side per-token timestamps used (option C)",
                  unmet=f"server timestamps available but ITL option {f.itl_method!r} used")


@evaluator("4.6.3-PARAM-1")
def _itl_option(ctx: _Ctx, rid: str) -> Check:
    return decide(rid, ok=True, met=f"ITL option {ctx.facts.itl_method}")


@evaluator("4.6.3-PARAM-2")
def _itl_option_c(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    return decide(rid, ok=f.server_token_timestamps is not False, met=f"ITL option {f.itl_method}",
                  unmet="option C declared but the server sent no per-token timestamps")


@evaluator("4.6.3-REPORT-1")
def _itl_option_a(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    return decide(rid, ok=f.single_token_chunk_fraction is not None, met=f"ITL option {f.itl_method}",
                  unmet="chunk timing used but no chunk-size distribution recorded")


