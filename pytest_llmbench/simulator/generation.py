"""What a simulated request will output: its length, finish reason and words, drawn up front.

Output length (§5.2): with ``ignore_eos`` (or ``eos_mean_tokens == 0``) exactly ``max_tokens``;
otherwise an EOS point drawn from a geometric distribution with mean ``eos_mean_tokens``, never
below ``min_tokens`` and never above ``max_tokens`` (the EOS token itself is not counted or
shown). An active output guardrail may refuse part-way (``content_filter``). Each output token is
one word of the :mod:`vocabulary <.vocab>`, so the joined text re-tokenizes to exactly
``completion_tokens`` tokens. A ``stop`` string ends the output at the token that completes it;
the text is cut before the stop string (vLLM semantics), the tokens generated are still counted.

Reasoning (issue 49, ``SimConfig.reasoning``): a thinking length drawn from its own seeded stream (mean
``reasoning_mean_tokens``) comes first, its tokens words of the same vocabulary; thinking counts against
``max_tokens`` (a request whose budget ends inside it has no answer). A chat request's first
``tool_call_tokens`` answer tokens are a tool call's arguments.

Seeding: a request's ``seed`` if given; else, at ``temperature == 0`` (greedy), the prompt's token
ids (same prompt, same output); else the server seed and the request's arrival number.
"""

from __future__ import annotations

import hashlib
import json
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from .config import SimConfig
from .vocab import get_vocabulary

__all__ = ["OutputPlan", "input_refused", "plan_output", "request_seed", "stable_hash", "think"]


@dataclass(slots=True)
class OutputPlan:
    """The whole output of one request, decided when it arrives."""

    output_ids: list[int]  # token ids, one per generated token
    pieces: list[bytes]  # JSON string literal of each token's visible text
    text: str  # the visible text (after stop-string truncation)
    finish_reason: str  # "stop" | "length" | "content_filter"
    refused_at_input: bool = False
    reasoning_tokens: int = 0  # the first ones of output_ids are thinking (issue 49)
    reasoning_text: str = ""  # their text (pieces[:reasoning_tokens] joined)
    tool_tokens: int = 0  # the next ones stream as a tool call's arguments (chat)
    reasoning_cut: bool = False  # max_tokens ended the output while thinking


def stable_hash(*parts: object) -> int:
    """A 64-bit hash that is the same in every process (``hash()`` of str is salted per process)."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        if isinstance(p, (list, tuple)) and all(isinstance(x, int) for x in p):
            h.update(b"i" + array("q", p).tobytes())
        else:
            h.update(b"r" + repr(p).encode())
        h.update(b"|")
    return int.from_bytes(h.digest(), "little")


def request_seed(config: SimConfig, prompt_ids: Sequence[int], seed: int | None, temperature: float,
                 counter: int) -> int:
    if seed is not None:
        return stable_hash(config.seed, "seed", seed)
    if temperature == 0:
        return stable_hash(config.seed, "greedy", list(prompt_ids))
    return stable_hash(config.seed, "n", counter)


def input_refused(config: SimConfig, rseed: int) -> bool:
    """Whether the input filter refuses this request (seeded, rate ``guardrail_refusal_rate``)."""
    if not config.guardrail_active("input") or config.guardrail_refusal_rate <= 0:
        return False
    return random.Random(stable_hash(rseed, "input-filter")).random() < config.guardrail_refusal_rate


def plan_output(config: SimConfig, rseed: int, max_tokens: int, *, min_tokens: int = 0,
                ignore_eos: bool = False, stop: Sequence[str] = (), tools: bool = False) -> OutputPlan:
    """Draw the output of one request deterministically from ``rseed``: with ``config.reasoning`` the
    thinking first (:func:`think`), then the answer; ``tools`` (chat): its first ``tool_call_tokens``
    tokens are a tool call's arguments."""
    plan = _plan_answer(config, rseed, max_tokens, min_tokens=min_tokens, ignore_eos=ignore_eos, stop=stop)
    if config.reasoning == "none" or plan.finish_reason == "content_filter":
        think_n = 0
    else:
        think_n = think(config, rseed)
    tool_n = config.tool_call_tokens if tools else 0
    if not think_n and not tool_n:
        return plan
    # thinking counts against max_tokens: what does not fit is cut from the answer, then from the thinking
    n = len(plan.output_ids)
    if think_n + n > max_tokens:
        n = max(max_tokens - think_n, 0)
        plan = OutputPlan(plan.output_ids[:n], plan.pieces[:n], _joined(plan.pieces[:n]), "length")
    kept = min(think_n, max_tokens)
    vocab = get_vocabulary()
    idx = random.Random(stable_hash(rseed, "think")).choices(range(len(vocab)), k=kept)
    ids, words, jb = vocab.ids, vocab.words, vocab.json_bytes
    return OutputPlan([ids[i] for i in idx] + plan.output_ids, [jb[i] for i in idx] + plan.pieces, plan.text,
                      plan.finish_reason, reasoning_tokens=kept, reasoning_text="".join(words[i] for i in idx),
                      tool_tokens=min(tool_n, n), reasoning_cut=kept < think_n)


def think(config: SimConfig, rseed: int) -> int:
    """The thinking length of a request (issue 49): 1 + a seeded geometric draw of mean
    ``reasoning_mean_tokens`` - 1, so at least one token (its own stream: the answer stays as drawn)."""
    mean = max(config.reasoning_mean_tokens, 1.0)
    return 1 + (int(random.Random(stable_hash(rseed, "think-length")).expovariate(1.0 / (mean - 1.0)))
                if mean > 1.0 else 0)


def _joined(pieces: Sequence[bytes]) -> str:
    return "".join(json.loads(p) for p in pieces)


def _plan_answer(config: SimConfig, rseed: int, max_tokens: int, *, min_tokens: int = 0,
                 ignore_eos: bool = False, stop: Sequence[str] = ()) -> OutputPlan:
    """The answer of one request, drawn deterministically from ``rseed``."""
    rng = random.Random(rseed)
    vocab = get_vocabulary()
    if ignore_eos or config.eos_mean_tokens <= 0:
        n, reason = max_tokens, "length"
    else:
        eos = 1 + int(rng.expovariate(1.0 / config.eos_mean_tokens))
        eos = max(eos, min_tokens)
        n, reason = (eos, "stop") if eos < max_tokens else (max_tokens, "length")
    if config.guardrail_active("output") and config.guardrail_refusal_rate > 0:
        grng = random.Random(stable_hash(rseed, "output-filter"))
        if grng.random() < config.guardrail_refusal_rate:
            n, reason = grng.randrange(n + 1), "content_filter"
    idx = rng.choices(range(len(vocab)), k=n)
    words = vocab.words
    ids = vocab.ids
    jb = vocab.json_bytes
    output_ids = [ids[i] for i in idx]
    pieces = [jb[i] for i in idx]
    text_words = [words[i] for i in idx]
    text = "".join(text_words)
    if stop:
        cut = _first_stop(text, stop)
        if cut is not None:
            end, start = cut  # text ends before `start`; generation stops at the token reaching `end`
            pos = 0
            kept: list[bytes] = []
            for k, w in enumerate(text_words):
                nxt = pos + len(w)
                vis = w[: max(0, min(len(w), start - pos))]
                kept.append(jb[idx[k]] if vis == w else json.dumps(vis).encode())
                pos = nxt
                if nxt >= end:
                    break
            n = len(kept)
            return OutputPlan(output_ids[:n], kept, text[:start], "stop")
    return OutputPlan(output_ids, pieces, text, reason)


def _first_stop(text: str, stop: Sequence[str]) -> tuple[int, int] | None:
    """(end of the earliest-completed stop match, its start) or None."""
    best: tuple[int, int] | None = None
    for s in stop:
        if not s:
            continue
        p = text.find(s)
        if p >= 0 and (best is None or p + len(s) < best[0]):
            best = (p + len(s), p)
    return best
