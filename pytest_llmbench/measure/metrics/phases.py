"""The phases of a streamed answer (issue 49): waiting, thinking (reasoning), tool-call arguments, visible
content; ttfa beside the draft's TTFT; hidden reasoning counted.

The phase times are the record's (``records.phase_times``: the first and last arrival of each phase's
non-whitespace fragments); the visible answer starts at the first content token or tool-call fragment
after the reasoning. Reasoning tokens are the server's ``usage.completion_tokens_details.reasoning_tokens``
where sent, else the reference tokenizer's count of the streamed reasoning (§4.4.2; the record names which).
``phase=True`` marks the figures of the reasoning phase, which a server that hides its reasoning makes
unobservable (an SLO on one is then INCONCLUSIVE, slo.py). Times in seconds, latencies of successful
requests only.
"""

from __future__ import annotations

import numpy as np

from ...common.records import REASONING_STANDINGS
from ..frame import Chunks
from ..registry import COUNT, WINDOW_RATE, derived, metric
from ..stats import Estimate
from ._kit import NAN, NS, Windows, count

_HIDDEN = REASONING_STANDINGS.index("hidden")
_UNDETERMINED = REASONING_STANDINGS.index("undetermined")
_SECTION = "issue 49 (reasoning models)"


@metric("TTFA", "s", "lower", section="MLPerf Endpoints 'time to first token' (any fragment)", slo=True,
        aliases=("ttft_incl_reasoning", "time_to_first_any"), always=True, phase=True)
def ttfa(first_any_ns: np.ndarray, sent_ns: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """first non-whitespace fragment of any kind (reasoning, tool-call arguments or content; role-only and
    empty chunks excluded) - submission; equals TTFT (§5.1.3.1) when nothing precedes the content
    """
    return (first_any_ns - sent_ns.astype(np.float64)) * NS * okf


@derived
def answer_start_ns(first_token_ns: np.ndarray, tool_first_ns: np.ndarray) -> np.ndarray:
    """The first fragment of the visible answer: the first content token or tool-call fragment."""
    return np.fmin(first_token_ns, tool_first_ns)


@metric("Thinking time", "s", "lower", section=_SECTION, slo=True, phase=True)
def thinking_time(first_reasoning_ns: np.ndarray, answer_start_ns: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """first content token (or tool-call fragment) - first reasoning fragment; requests whose reasoning
    streamed and whose answer followed it
    """
    return np.where(answer_start_ns > first_reasoning_ns, (answer_start_ns - first_reasoning_ns) * NS, NAN) * okf


@derived
def reasoning_token_counts(u_reasoning: np.ndarray, reasoning_client: np.ndarray, reasoning_streamed: np.ndarray
                           ) -> np.ndarray:
    """Per request: the server's reasoning tokens, else the client's count of the streamed reasoning."""
    return np.where(~np.isnan(u_reasoning), u_reasoning, np.where(reasoning_streamed, reasoning_client, NAN))


@metric("Reasoning tokens", "tokens", "lower", section=_SECTION, slo=True)
def reasoning_tokens(reasoning_token_counts: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """usage.completion_tokens_details.reasoning_tokens, else the reference tokenizer's count of the streamed
    reasoning (§4.4.2); requests that reasoned
    """
    return np.where(reasoning_token_counts > 0, reasoning_token_counts, NAN) * okf


@metric("Reasoning counted by the server", "requests", kind="scalar", section=_SECTION, aggregation=COUNT)
def reasoning_tokens_from_usage(u_reasoning: np.ndarray, reasoning_tokens: np.ndarray, ok: np.ndarray,
                                phased: bool) -> Estimate | None:
    """successful requests whose reasoning_tokens came from the server's usage; the others' from the reference
    tokenizer's count of the streamed reasoning (§4.4.2: the method named)
    """
    if not phased:
        return None
    return count(int((ok & ~np.isnan(reasoning_tokens) & ~np.isnan(u_reasoning)).sum()))


@metric("Reasoning token rate", "tokens/s", "higher", section=_SECTION, slo=True, phase=True)
def reasoning_token_rate(reasoning_tokens: np.ndarray, thinking_time: np.ndarray) -> np.ndarray:
    """reasoning tokens / thinking time"""
    return np.where(thinking_time > 0, reasoning_tokens / thinking_time, NAN)


def _phase_itl(first: np.ndarray, last: np.ndarray, tokens: np.ndarray, okf: np.ndarray) -> np.ndarray:
    return np.where(tokens >= 2, (last - first) * NS / (tokens - 1), NAN) * okf


@metric("ITL (reasoning)", "s", "lower", section=_SECTION, slo=True, per_token=True, phase=True)
def itl_reasoning(first_reasoning_ns: np.ndarray, reasoning_last_ns: np.ndarray, reasoning_tokens: np.ndarray,
                  okf: np.ndarray) -> np.ndarray:
    """(last reasoning fragment - first reasoning fragment) / (reasoning tokens - 1): the mean gap between
    tokens within the thinking phase (AIPerf's per-request ITL restricted to the phase)
    """
    return _phase_itl(first_reasoning_ns, reasoning_last_ns, reasoning_tokens, okf)


@metric("ITL (tool call)", "s", "lower", section=_SECTION, slo=True, per_token=True)
def itl_tool(tool_first_ns: np.ndarray, tool_last_ns: np.ndarray, tool_client: np.ndarray, okf: np.ndarray
             ) -> np.ndarray:
    """(last tool-call fragment - first) / (tool-call argument tokens - 1)"""
    return _phase_itl(tool_first_ns, tool_last_ns, tool_client, okf)


@derived
def visible_tokens(out_client: np.ndarray, reasoning_client: np.ndarray, tool_client: np.ndarray) -> np.ndarray:
    """Per request: the client's count of the content tokens (output less streamed reasoning and tool calls)."""
    return out_client - np.nan_to_num(reasoning_client) - np.nan_to_num(tool_client)


@metric("ITL (visible content)", "s", "lower", section=_SECTION, slo=True, per_token=True)
def itl_content(first_token_ns: np.ndarray, content_last_ns: np.ndarray, visible_tokens: np.ndarray,
                okf: np.ndarray) -> np.ndarray:
    """(last content fragment - first content token) / (content tokens - 1), the content counted by the
    reference tokenizer
    """
    return _phase_itl(first_token_ns, content_last_ns, visible_tokens, okf)


@derived
def phased(reasoning_streamed: np.ndarray, tool_first_ns: np.ndarray, reasoning_standing: np.ndarray) -> bool:
    """Whether the run has phases beyond its content: streamed reasoning, a tool call, or reasoning the server
    counted and did not stream (or may have: not determinable). The phase scalars are given only then."""
    return bool(reasoning_streamed.any() or (~np.isnan(tool_first_ns)).any()
                or (reasoning_standing == _HIDDEN).any() or (reasoning_standing == _UNDETERMINED).any())


@metric("Visible output throughput", "tokens/s", "higher", kind="scalar", section=_SECTION, aggregation=WINDOW_RATE,
        slo=True)
def visible_output_throughput(chunks: Chunks, windows: Windows, phased: bool) -> dict[str, Estimate] | None:
    """content tokens arriving inside the window / window length, as the client counted them (reasoning and
    tool-call arguments left out, and no scaling to the server's count: hidden reasoning adds nothing)
    """
    if not phased:  # equal to output_throughput's streamed tokens: not repeated
        return None
    fold = windows.fold()
    for block in chunks.blocks():
        streamed = block.chunk_tokens > 0
        fold.add(block.chunk_ns[streamed] * NS, block.chunk_tokens[streamed])
    for ns, tokens in chunks.aside():  # chunks of reasoning or tool-call arguments alone, taken out again
        fold.add(ns * NS, -tokens.astype(np.float64))
    return windows.rate(fold.sums(), "tokens/s")


@metric("Hidden reasoning", "requests", "lower", kind="scalar", section=_SECTION, aggregation=COUNT)
def hidden_reasoning_requests(reasoning_standing: np.ndarray, ok: np.ndarray, phased: bool) -> Estimate | None:
    """successful requests whose server counted reasoning tokens (usage) of which no fragment arrived"""
    return count(int(((reasoning_standing == _HIDDEN) & ok).sum())) if phased else None


@metric("Hidden reasoning tokens", "tokens", kind="scalar", section=_SECTION, aggregation=COUNT)
def hidden_reasoning_tokens(reasoning_standing: np.ndarray, u_reasoning: np.ndarray, ok: np.ndarray, n: int,
                            phased: bool) -> Estimate | None:
    """Σ usage reasoning tokens of the requests with hidden reasoning"""
    if not phased:
        return None
    sel = (reasoning_standing == _HIDDEN) & ok
    return Estimate(float(np.nansum(u_reasoning[sel])), n, "tokens", method="Σ usage reasoning tokens, hidden")


@metric("Reasoning not determinable", "requests", "lower", kind="scalar", section=_SECTION, aggregation=COUNT)
def reasoning_undetermined_requests(reasoning_standing: np.ndarray, ok: np.ndarray, phased: bool) -> Estimate | None:
    """successful requests with no reasoning count from the server whose completion_tokens far exceed the
    tokens seen (records.UNSEEN_FACTOR): hidden reasoning neither shown nor excluded
    """
    return count(int(((reasoning_standing == _UNDETERMINED) & ok).sum())) if phased else None


@metric("Ended while thinking", "requests", "lower", kind="scalar", section=_SECTION, aggregation=COUNT)
def ended_while_thinking(first_reasoning_ns: np.ndarray, answer_start_ns: np.ndarray, ok: np.ndarray,
                         phased: bool) -> Estimate | None:
    """successful requests whose reasoning streamed and that ended with no content or tool call (thinking
    counts against max_tokens): they have no TTFT, and are counted here instead of dropped silently
    """
    return count(int((ok & ~np.isnan(first_reasoning_ns) & np.isnan(answer_start_ns)).sum())) if phased else None


@derived
def phase_spans(ok: np.ndarray, sent_ns: np.ndarray, end_ns: np.ndarray, has_end: np.ndarray,
                first_any_ns: np.ndarray, first_reasoning_ns: np.ndarray, answer_start_ns: np.ndarray,
                first_token_ns: np.ndarray, tool_first_ns: np.ndarray, phased: bool) -> dict[str, float] | None:
    """Σ over successful requests of each phase's span (s): waiting (submission to the first fragment),
    thinking (first reasoning fragment to the answer, or the end), tool (first tool-call fragment to the
    first content token, or the end), visible (first content token to the end), and of E2E; None for a run
    without phases."""
    if not phased:
        return None
    sel = ok & has_end & ~np.isnan(first_any_ns)
    end = end_ns[sel].astype(np.float64)
    sent = sent_ns[sel].astype(np.float64)
    r0, ans, c0, t0 = first_reasoning_ns[sel], answer_start_ns[sel], first_token_ns[sel], tool_first_ns[sel]
    thinking = np.where(np.isnan(r0), 0.0, np.fmin(ans, end) - r0)
    tool = np.where(np.isnan(t0), 0.0, np.fmin(c0, end) - t0)
    visible = np.where(np.isnan(c0), 0.0, end - c0)
    return {"waiting": float((first_any_ns[sel] - sent).sum()) * NS,
            "thinking": float(np.maximum(thinking, 0).sum()) * NS, "tool": float(np.maximum(tool, 0).sum()) * NS,
            "visible": float(visible.sum()) * NS,
            "e2e": float((end - sent).sum()) * NS, "n": float(sel.sum())}


def _share(spans: dict[str, float] | None, phase: str) -> Estimate | None:
    if spans is None or not spans["e2e"] > 0:
        return None
    return Estimate(spans[phase] / spans["e2e"], int(spans["n"]), "fraction",
                    method=f"Σ {phase} span / Σ E2E, successful requests")


@metric("Waiting share of E2E", "fraction", kind="scalar", section=_SECTION)
def phase_share_waiting(phase_spans: dict[str, float] | None) -> Estimate | None:
    """Σ (first fragment of any kind - submission) / Σ E2E over successful requests (hidden thinking falls here)"""
    return _share(phase_spans, "waiting")


@metric("Thinking share of E2E", "fraction", kind="scalar", section=_SECTION, phase=True)
def phase_share_thinking(phase_spans: dict[str, float] | None) -> Estimate | None:
    """Σ (answer start, or end - first reasoning fragment) / Σ E2E over successful requests"""
    return _share(phase_spans, "thinking")


@metric("Tool-call share of E2E", "fraction", kind="scalar", section=_SECTION)
def phase_share_tool(phase_spans: dict[str, float] | None) -> Estimate | None:
    """Σ (first content token, or end - first tool-call fragment) / Σ E2E over successful requests"""
    return _share(phase_spans, "tool")


@metric("Visible share of E2E", "fraction", kind="scalar", section=_SECTION)
def phase_share_visible(phase_spans: dict[str, float] | None) -> Estimate | None:
    """Σ (end - first content token) / Σ E2E over successful requests"""
    return _share(phase_spans, "visible")
