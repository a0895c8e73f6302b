"""The phases of one streamed answer (issue 49): reasoning, tool-call arguments and visible content, each
with its first and last arrival (records format 2.2).

Run once per request after its response is read (``LLMClient._complete``), never per chunk on the read
path. Where the user says the model writes its reasoning as ``<think>...</think>`` inside the content
(``ClientConfig.think_tags``, ``--llm-think-tags``), :func:`split_think_tags` first moves that text from
each chunk's content to its reasoning, the tags dropped, and TTFT's first content token is found again
among what is left (§5.1.3.1: reasoning is not content); then ``records.assign_phases`` sets each phase's
first and last times, the arrivals of its first and last non-whitespace fragments (``first_any_ns``, ttfa,
the first of them all).
"""

from __future__ import annotations

from ..common.records import RequestRecord, assign_phases

__all__ = ["THINK_CLOSE", "THINK_OPEN", "assign_phases", "split_think_tags", "think_spans"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def think_spans(text: str, open_tag: str = THINK_OPEN, close_tag: str = THINK_CLOSE) -> list[tuple[int, int, bool]]:
    """``(start, end, is_reasoning)`` spans of ``text`` that are not content: each tag (False) and the text
    between an open tag and its close tag (True). A close tag with no open tag before it closes reasoning
    that began with the output (chat templates that put ``<think>`` in the prompt); an open tag never
    closed holds reasoning to the end (the request ended while thinking)."""
    spans: list[tuple[int, int, bool]] = []
    pos = 0
    n = len(text)
    while pos < n:
        o = text.find(open_tag, pos)
        c = text.find(close_tag, pos)
        if o < 0 and c < 0:
            break
        if o >= 0 and (c < 0 or o < c):
            body = o + len(open_tag)
            end = text.find(close_tag, body)
            spans.append((o, body, False))
            if end < 0:
                if body < n:
                    spans.append((body, n, True))
                break
            if end > body:
                spans.append((body, end, True))
            spans.append((end, end + len(close_tag), False))
            pos = end + len(close_tag)
        else:  # a close tag first: reasoning from the start of the output when nothing came before it
            if pos == 0 and c > 0:
                spans.append((0, c, True))
            spans.append((c, c + len(close_tag), False))
            pos = c + len(close_tag)
    return spans


def split_think_tags(rec: RequestRecord, open_tag: str = THINK_OPEN, close_tag: str = THINK_CLOSE) -> bool:
    """Move ``<think>...</think>`` text of ``rec``'s content into its reasoning, chunk by chunk (a tag split
    over chunks included), drop the tags, and find the first content token again (§5.1.3.1). True when the
    content held a tag (``rec.reasoning_source`` is then ``"tags"``)."""
    texts = rec.chunk_text
    joined = "".join(texts)
    if open_tag not in joined and close_tag not in joined:
        return False
    spans = think_spans(joined, open_tag, close_tag)
    reasoning = rec.chunk_reasoning
    if len(reasoning) < len(texts):
        reasoning.extend([""] * (len(texts) - len(reasoning)))
    k = 0
    start = 0
    for i, t in enumerate(texts):
        end = start + len(t)
        content: list[str] = []
        thought: list[str] = []
        pos = start
        while k < len(spans) and spans[k][0] < end:
            a, b, is_reasoning = spans[k]
            if a > pos:
                content.append(joined[pos:a])
            lo, hi = max(a, pos), min(b, end)
            if is_reasoning and hi > lo:
                thought.append(joined[lo:hi])
            pos = max(pos, hi)
            if b <= end:
                k += 1
            else:
                break
        if pos < end:
            content.append(joined[pos:end])
        texts[i] = "".join(content)
        if thought:
            reasoning[i] = reasoning[i] + "".join(thought)
        start = end
    rec.first_token_ns = next((ns for ns, t in zip(rec.chunk_ns, texts) if t and not t.isspace()), None)
    rec.reasoning_source = "tags" if any(reasoning) else rec.reasoning_source
    return True
