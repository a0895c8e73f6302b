"""Multi-turn sessions (issue 50): a conversation held turn by turn, each turn sending the history.

A *session* is one conversation: a system prompt and K user messages. Turn k sends the system prompt,
every earlier user message with the answer to it, then user message k, so turn k's prompt begins with
turn k−1's prompt and answer: what a chat client sends, and what a server's prefix cache serves. The
answers in the history are the server's own (its streamed content), or, with ``recorded_answers``, the
dataset's recorded replies, so that every turn's length is known before the run (and the whole request
sequence is fixed by the seed).

The conversations come from a ShareGPT-shaped file (App. A.3.1: ``conversations`` of ``{from, value}``,
several exchanges each) or, without a file, are generated from the seed (a long first message, short
later ones). Sessions are a **custom** workload, never the standard Conversation one: §4.1.3 places
"multi-turn conversation state" inside a compound system under test, while here the client holds it.

:class:`SessionSource` is the run's specs iterable: iterating it yields each session's first turn (what
the load's arrival process or concurrency slots start); :meth:`SessionSource.next_turn` makes turn k+1
from turn k's spec and finished record (``loadgen/sessions.py`` drives it). It keeps no run state, so the
same source may be iterated again (a warm-up's first turns) without disturbing a run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..common.records import RequestRecord, RequestSpec
from ..common.tokenizer import Tokenizer, get_tokenizer
from .core import Workload, WorkloadDeclaration, finish
from .datasets import _read_records_with_lines, _sha256
from .distributions import LengthDistribution, WorkloadError
from .text import text_factory

__all__ = [
    "DATASET_KIND",
    "DEFAULT_SESSION_HEADER",
    "SESSIONS_WORKLOAD",
    "THINK_KINDS",
    "Session",
    "SessionSource",
    "ThinkTime",
    "conversation_sessions",
    "load_conversations",
]

#: the workload's registered name
SESSIONS_WORKLOAD = "conversation-sessions"
#: the ``--llm-dataset KIND=PATH`` whose file this workload reads when no ``dataset=`` is given
#: (workloads.build_workload passes it in as ``dataset=``)
DATASET_KIND = "conversation"
#: the sticky-session header sent when ``session_header=True`` (a router's consistent-hash key)
DEFAULT_SESSION_HEADER = "x-session-id"
#: think-time kinds: none, a fixed pause, or drawn (exponential or uniform on [0, 2·mean]), seeded
THINK_KINDS = ("none", "fixed", "exponential", "uniform")

_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
_FIELDS = ("conversations", "conversation", "messages")


@dataclass(frozen=True)
class ThinkTime:
    """The pause between an answer and the next turn (the user reading and typing): ``none``, ``fixed``
    (``mean_s`` every time) or drawn from ``exponential``/``uniform`` (mean ``mean_s``), seeded per session."""

    kind: str = "none"
    mean_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in THINK_KINDS:
            raise WorkloadError(f"think time kind must be one of {THINK_KINDS}, got {self.kind!r}")
        if not (math.isfinite(self.mean_s) and self.mean_s >= 0):
            raise WorkloadError(f"think time must be a finite number of seconds >= 0, got {self.mean_s!r}")
        if self.kind != "none" and self.mean_s == 0:
            object.__setattr__(self, "kind", "none")

    @classmethod
    def of(cls, think_time: float | None, kind: str | None = None) -> ThinkTime:
        """From a marker's parameters: ``think_time`` seconds (0/None: none), ``kind`` fixed by default."""
        s = float(think_time or 0.0)
        return cls("none" if s == 0 else (kind or "fixed"), s)

    def draw(self, rng: np.random.Generator, n: int) -> tuple[float, ...]:
        """``n`` pauses in seconds."""
        if self.kind == "none" or n == 0:
            return (0.0,) * n
        if self.kind == "fixed":
            return (self.mean_s,) * n
        if self.kind == "exponential":
            return tuple(float(x) for x in rng.exponential(self.mean_s, size=n))
        return tuple(float(x) for x in rng.uniform(0.0, 2 * self.mean_s, size=n))

    def describe(self) -> str:
        if self.kind == "none":
            return "none (turn k+1 is sent as soon as turn k's answer is read)"
        if self.kind == "fixed":
            return f"fixed {self.mean_s:g} s after each answer"
        spread = "exponential" if self.kind == "exponential" else f"uniform on [0, {2 * self.mean_s:g}] s"
        return f"drawn, {spread}, mean {self.mean_s:g} s, seeded per session"


@dataclass(frozen=True)
class Session:
    """One conversation to hold: its user messages, the recorded answers and the output cap of each turn.

    ``messages[k]`` is turn k+1's new user message (``message_tokens[k]`` reference tokens); ``answers[k]`` the
    recorded reply to it (``max_tokens[k]`` = its length, the turn's output cap); ``think_s[k]`` the pause
    before turn k+2; ``origin`` where it came from (file and conversation index, or "generated")."""

    session_id: str
    number: int  # its position in the run, 0-based
    first_index: int  # RequestSpec.index of its first turn; turn k has first_index + k - 1
    system_prompt: str | None
    system_tokens: int
    messages: tuple[str, ...]
    message_tokens: tuple[int, ...]
    answers: tuple[str, ...]
    max_tokens: tuple[int, ...]
    think_s: tuple[float, ...]
    origin: str

    @property
    def turns(self) -> int:
        return len(self.messages)


@dataclass(frozen=True)
class _Conversation:
    """A conversation read from a file: (user message, recorded answer) exchanges in order, and its place in the
    file (``where``: its index, and its line in a JSON Lines file)."""

    index: int
    system: str | None
    exchanges: tuple[tuple[str, str], ...]
    where: str


def _exchanges(conv: Any) -> tuple[str | None, list[tuple[str, str]], str | None]:
    """A record's system prompt, its (human, assistant) exchanges in order, and the field read (None: none)."""
    if not isinstance(conv, dict):
        return None, [], None
    name = next((f for f in _FIELDS if f in conv), None)
    turns = conv.get(name) if name else None
    if not isinstance(turns, list):
        return None, [], name
    system = conv.get("system") if isinstance(conv.get("system"), str) else None
    out: list[tuple[str, str]] = []
    user: str | None = None
    said = ((str(t.get("from", t.get("role", ""))).lower(), t.get("value", t.get("content")))
            for t in turns if isinstance(t, dict))
    for who, value in said:
        if not isinstance(value, str):
            continue
        if who == "system" and not out and user is None:
            system = value
        elif who in _HUMAN and value.strip():
            user = value if user is None else user + "\n" + value  # two human turns in a row: one message
        elif who in _ASSISTANT and value.strip() and user is not None:
            out.append((user, value))
            user = None
    return system, out, name


def _is_array(path: Path) -> bool:
    """Whether the file is one JSON array (else JSON Lines): its first non-blank character is ``[``."""
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            head = chunk.lstrip()
            if head:
                return head[:1] == b"["
    return False


def load_conversations(path: str | os.PathLike[str]) -> tuple[list[_Conversation], int, str]:
    """The multi-turn conversations of a ShareGPT-shaped JSON/JSON Lines file (read with the datasets' reader),
    those without an assistant turn left out; (conversations, records in the file, SHA-256). A file with none
    is a :class:`WorkloadError` naming the file, the first conversation and its field. Read once per session
    (the collection check and every build share it; a changed file, by size or time, is read again)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise WorkloadError(f"sessions dataset file {str(p)!r} does not exist")
    st = p.stat()
    convs, total, sha = _conversations_file(p, st.st_size, st.st_mtime_ns)
    return list(convs), total, sha


@functools.lru_cache(maxsize=2)
def _conversations_file(p: Path, size: int, mtime_ns: int) -> tuple[tuple[_Conversation, ...], int, str]:
    records, lines = _read_records_with_lines(p)
    array = _is_array(p)

    def where(i: int) -> str:
        return f"conversation #{i}" if array else f"line {lines[i]} (conversation #{i})"

    convs: list[_Conversation] = []
    first_bad: tuple[int, str | None] | None = None
    for i, rec in enumerate(records):
        system, ex, name = _exchanges(rec)
        if ex:
            convs.append(_Conversation(i, system, tuple(ex), where(i)))
        elif first_bad is None:
            first_bad = (i, name)
    if not convs:
        where_bad, name = ("its first record", None) if first_bad is None else (where(first_bad[0]), first_bad[1])
        raise WorkloadError(
            f"{p}: {where_bad}, field {name or 'conversations'!r}: no human turn followed by an assistant turn in any "
            "conversation; multi-turn sessions need ShareGPT conversations "
            "([{\"conversations\": [{\"from\": \"human\", \"value\": ...}, {\"from\": \"gpt\", \"value\": ...}, ...]}])")
    return tuple(convs), len(records), _sha256(p)


class SessionSource:
    """The specs iterable of a session run: iterating it yields each session's first turn, in session order;
    :meth:`next_turn` makes the next turn from a finished one. Holds no run state (re-iterable).

    ``recorded_answers``: the history carries the dataset's answers instead of the server's (every turn's
    prompt then fixed before the run). ``header``: the sticky-session header's name, sent on every turn with
    the session id (None: none sent)."""

    def __init__(self, sessions: Sequence[Session], *, workload: str = SESSIONS_WORKLOAD,
                 recorded_answers: bool = False, header: str | None = None, force_output: bool = False,
                 cap: int | None = None) -> None:
        self.sessions = list(sessions)
        self.by_id = {s.session_id: s for s in self.sessions}
        self.workload = workload
        self.recorded_answers = recorded_answers
        self.header = header
        self.force_output = force_output
        self.cap = cap

    def __len__(self) -> int:
        """Every turn of every session: the requests the run sends when no session ends early."""
        return sum(s.turns for s in self.sessions)

    def __iter__(self) -> Iterator[RequestSpec]:
        for s in self.sessions:
            yield self._spec(s, 1, (), s.system_tokens + s.message_tokens[0])

    def __repr__(self) -> str:
        return f"SessionSource({len(self.sessions)} sessions, {len(self)} turns)"

    def capped(self, cap: int) -> SessionSource:
        """The same sessions with each turn's ``max_tokens`` at most ``cap`` (profiles shorten runs)."""
        return SessionSource(self.sessions, workload=self.workload, recorded_answers=self.recorded_answers,
                             header=self.header, force_output=self.force_output,
                             cap=cap if self.cap is None else min(cap, self.cap))

    def _max_tokens(self, s: Session, turn: int) -> int:
        m = s.max_tokens[turn - 1]
        return m if self.cap is None else min(m, self.cap)

    def _spec(self, s: Session, turn: int, history: tuple[tuple[str, str], ...], input_tokens: int) -> RequestSpec:
        out = self._max_tokens(s, turn)
        return RequestSpec(
            index=s.first_index + turn - 1, workload=self.workload, input_tokens=int(input_tokens), max_tokens=out,
            prompt_text=s.messages[turn - 1], system_prompt=s.system_prompt,
            prefix_id="system-prompt" if s.system_prompt else None, prefix_tokens=s.system_tokens,
            min_tokens=out if self.force_output else None, ignore_eos=self.force_output,
            history=history, session_id=s.session_id, turn=turn,
            headers=((self.header, s.session_id),) if self.header else (),
        )

    def turns_of(self, session: Session) -> list[RequestSpec]:
        """Every turn of ``session`` with the recorded answers in the history (what a run with
        ``recorded_answers`` sends; otherwise the first turn is sent as here and the rest differ)."""
        out = [self._spec(session, 1, (), session.system_tokens + session.message_tokens[0])]
        for k in range(1, session.turns):
            out.append(self._follow(session, out[-1], session.answers[k - 1], session.max_tokens[k - 1]))
        return out

    def _follow(self, s: Session, prev: RequestSpec, answer: str, answer_tokens: int) -> RequestSpec:
        k = prev.turn or 1
        history = prev.history + (("user", prev.prompt_text), ("assistant", answer))
        return self._spec(s, k + 1, history, prev.input_tokens + answer_tokens + s.message_tokens[k])

    def next_turn(self, spec: RequestSpec, record: RequestRecord) -> tuple[RequestSpec, float] | None:
        """Turn k+1 of ``spec``'s session after turn k's ``record`` and the pause before it (s); None when the
        session has no further turn. The history's last answer is the record's streamed content (the server's
        answer), or the recorded one (``recorded_answers``). The caller ends a session whose turn failed."""
        s = self.by_id[spec.session_id]  # type: ignore[index]
        k = spec.turn or 1
        if k >= s.turns:
            return None
        if self.recorded_answers:
            answer, n = s.answers[k - 1], s.max_tokens[k - 1]
        else:
            answer, n = record.output_text, record.output_tokens or 0
        return self._follow(s, spec, answer, n), s.think_s[k - 1]

    def all_turns(self) -> list[RequestSpec]:
        """Every turn of every session as a run with ``recorded_answers`` sends it (its request sequence)."""
        return [t for s in self.sessions for t in self.turns_of(s)]


def _session_id(seed: int, number: int) -> str:
    tag = hashlib.sha256(str(seed).encode()).hexdigest()[:6]
    return f"{tag}-{number:05d}"


def _check_window(sessions: Sequence[Session], context_window: int | None, origin_of: dict[str, str]) -> None:
    """A session whose last turn (every earlier answer at its recorded length) would not fit the context window
    is a usage error naming where it came from and which turn."""
    if context_window is None:
        return
    for s in sessions:
        total = s.system_tokens
        for k in range(s.turns):
            need = total + s.message_tokens[k] + s.max_tokens[k]
            if need > context_window:
                raise WorkloadError(
                    f"{origin_of[s.session_id]}, field 'conversations' exchange {k + 1}: session {s.session_id} "
                    f"needs {need} tokens at turn {k + 1} (history + message + max_tokens), more than the context "
                    f"window of {context_window}; cut sessions with max_turns=")
            total += s.message_tokens[k] + s.max_tokens[k]


def conversation_sessions(
    *,
    n: int,
    seed: int,
    tokenizer: Tokenizer | None = None,
    dataset: str | os.PathLike[str] | None = None,
    turns: int = 4,
    max_turns: int | None = None,
    think_time: float | None = 0.0,
    think_time_kind: str | None = None,
    recorded_answers: bool = False,
    session_header: str | bool | None = None,
    system_prompt_tokens: int = 200,
    first_message_tokens: int = 512,
    message_tokens: int = 64,
    answer_tokens: int = 128,
    context_window: int | None = None,
    force_output: bool = False,
) -> Workload:
    """Multi-turn sessions holding ``n`` requests in all (custom workload, issue 50; see the module).

    From ``dataset`` (ShareGPT-shaped, several exchanges per conversation): conversations in a seeded random
    order until their turns reach ``n`` (cut to ``max_turns`` each; the last session cut so that the total is
    ``n``), each turn's output cap the recorded reply's length. Without a file: ``ceil(n / turns)`` generated
    sessions of ``turns`` turns (the last one shorter), a shared ``system_prompt_tokens`` system prompt, a first
    message of ``first_message_tokens`` and later ones of ``message_tokens``, answers capped at ``answer_tokens``.
    ``think_time`` seconds between an answer and the next turn (``think_time_kind``: fixed by default,
    ``exponential``/``uniform`` drawn per session from the seed). ``session_header``: True sends
    ``x-session-id``, a string names the header, None/False sends none. ``context_window``: a session whose
    turn would exceed it is a usage error before any request.
    """
    if n < 1:
        raise WorkloadError(f"n must be >= 1, got {n}")
    if turns < 1 or (max_turns is not None and max_turns < 1):
        raise WorkloadError(f"turns and max_turns must be >= 1, got turns={turns}, max_turns={max_turns}")
    for name, v in (("first_message_tokens", first_message_tokens), ("message_tokens", message_tokens),
                    ("answer_tokens", answer_tokens)):
        if v < 1:
            raise WorkloadError(f"{name} must be >= 1, got {v}")
    tok = tokenizer if tokenizer is not None else get_tokenizer()
    think = ThinkTime.of(think_time, think_time_kind)
    header = DEFAULT_SESSION_HEADER if session_header is True else (session_header or None)
    r_pick, r_text, r_think = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    sessions: list[Session] = []
    origin_of: dict[str, str] = {}
    index = 0
    notes = [
        "custom workload: the client holds each conversation (§4.1.3 places multi-turn conversation state inside a "
        "compound SUT), so it is never the standard Conversation workload (§4.3.2.3)",
        "history answers: " + ("the dataset's recorded replies (every turn's length fixed before the run)"
                               if recorded_answers else "the server's own answers to the earlier turns"),
        f"think time: {think.describe()}",
        f"sticky sessions: header {header!r} = session id on every turn" if header else "sticky sessions: no header",
    ]
    if dataset is not None:
        path = Path(dataset).expanduser()
        convs, total, sha = load_conversations(path)
        order = r_pick.permutation(len(convs))
        k = 0
        while index < n:
            c = convs[int(order[k % len(order)])]
            ex = c.exchanges[: max_turns] if max_turns is not None else c.exchanges
            ex = ex[: n - index]
            number = len(sessions)
            sid = _session_id(seed, number)
            origin_of[sid] = f"{path}: {c.where}"
            sys_n = len(tok.encode(c.system)) if c.system else 0
            msgs = tuple(u for u, _ in ex)
            answers = tuple(a for _, a in ex)
            sessions.append(Session(
                sid, number, index, c.system, sys_n, msgs, tuple(len(tok.encode(u)) for u in msgs), answers,
                tuple(max(len(tok.encode(a)), 1) for a in answers),
                think.draw(np.random.default_rng([seed, number]), len(ex)), origin_of[sid]))
            index += len(ex)
            k += 1
        reused = max(0, len(sessions) - len(convs))
        ds: dict[str, Any] | None = {
            "source": str(dataset), "sha256": sha, "format": "ShareGPT JSON (conversations of {from, value})",
            "version": "unspecified", "subset": "unspecified",
            "subset_selection": ("conversations with 1+ human->assistant exchange in a seeded random order (numpy "
                                 "PCG64 from the workload seed) until their turns reach the request count"
                                 + (f"; {reused} taken again" if reused else "")),
            "preprocessing": ("each human turn followed by an assistant turn is one session turn (consecutive human "
                              "turns joined); the recorded reply's length in "
                              f"{tok.declaration.name} tokens is the turn's max_tokens"
                              + (f"; sessions cut to {max_turns} turns" if max_turns else "")),
            "conversations_in_file": total, "eligible": len(convs),
        }
        system_n = max((s.system_tokens for s in sessions), default=0)
    else:
        factory = text_factory(tok)
        system = None
        if system_prompt_tokens > 0:
            from .standard import _system_prompt

            system = _system_prompt(factory, system_prompt_tokens)
        system_n = len(tok.encode(system)) if system else 0
        while index < n:
            number = len(sessions)
            k_turns = min(turns, n - index)
            lengths = [first_message_tokens] + [message_tokens] * (k_turns - 1)
            fitted = factory.fit_many(r_text, [factory.prose_ids(r_text, m) for m in lengths], lengths)
            answers = factory.fit_many(r_text, [factory.prose_ids(r_text, answer_tokens)] * k_turns,
                                       [answer_tokens] * k_turns)
            sid = _session_id(seed, number)
            origin_of[sid] = f"generated session {number}"
            sessions.append(Session(
                sid, number, index, system, system_n, tuple(f.text for f in fitted), tuple(len(f.ids) for f in fitted),
                tuple(a.text for a in answers), (answer_tokens,) * k_turns,
                think.draw(np.random.default_rng([seed, number]), k_turns), origin_of[sid]))
            index += k_turns
        ds = None
        notes.append("synthetic sessions (no dataset file): random lowercase-word text; the recorded answers are "
                     "generated text of answer_tokens tokens")
    _check_window(sessions, context_window, origin_of)
    source = SessionSource(sessions, recorded_answers=recorded_answers, header=header, force_output=force_output)
    first = list(source)
    tname = tok.declaration.name
    decl = WorkloadDeclaration(
        name=SESSIONS_WORKLOAD,
        description=("Multi-turn sessions (custom, issue 50): turn k sends the system prompt, the earlier turns and "
                     "their answers, and the new message"),
        standard=False,
        seed=seed,
        request_count=len(source),
        input_length=LengthDistribution("empirical", {"values": [t for s in sessions for t in s.message_tokens]},
                                        tokenizer=tname,
                                        note="each turn's new user message; turn k's prompt adds the system prompt "
                                             "and every earlier message and answer"),
        output_length=LengthDistribution("empirical", {"values": [t for s in sessions for t in s.max_tokens]},
                                         tokenizer=tname, note="each turn's max_tokens (the recorded reply's length)"),
        output_control=("max_tokens with min_tokens = max_tokens and ignore_eos (output length forced)" if force_output
                        else "max_tokens (a response may stop earlier at EOS)"),
        content={
            "domain": "conversation (multi-turn)",
            "language": "as in the dataset" if dataset is not None else "none (random lowercase-word tokens)",
            "system_prompt": system_n > 0,
            "system_prompt_tokens": system_n,
            "generation": "dataset text" if dataset is not None else "random lowercase-word tokens with punctuation",
        },
        prefix_sharing={
            "fraction": (len(source) - len(sessions)) / len(source),
            "length": LengthDistribution("fixed", {"value": max(system_n, 1)}, tokenizer=tname).to_json(),
            "prefixes": len(sessions),
            "selection": "every turn after a session's first",
            "shared_part": "the session's history: turn k's prompt begins with turn k-1's prompt and answer",
        },
        tokenizer=tok.declaration.to_json(),
        dataset=ds,
        params={"sessions": len(sessions), "turns": turns, "max_turns": max_turns, "think_time": think.mean_s,
                "think_time_kind": think.kind, "recorded_answers": recorded_answers, "session_header": header,
                "system_prompt_tokens": system_prompt_tokens, "first_message_tokens": first_message_tokens,
                "message_tokens": message_tokens, "answer_tokens": answer_tokens, "context_window": context_window,
                "force_output": force_output},
        notes=notes,
    )
    wl = finish(first, decl, tok)
    if recorded_answers:  # every turn is known: the whole sequence is the run's (4.3.3)
        from .core import sequence_sha256

        decl.request_sequence_sha256 = sequence_sha256(source.all_turns())
        decl.notes.append("request_sequence_sha256: every turn (recorded answers)")
    else:
        decl.notes.append("request_sequence_sha256: the sessions' first turns (later turns carry the server's answers)")
    return dataclasses.replace(wl, specs=source)  # type: ignore[arg-type]
