"""Recount stored output text in the reference tokenizer, for comparisons across tokenizers (§4.4.2).

Two runs whose counts are in different tokenizers (server usage in each server's own tokens,
§4.4.2 option A) cannot be compared on token rates. §4.4.2-SHOULD-1 recommends one reference
tokenizer (cl100k_base, option B) for cross-system comparison: :func:`recount` re-tokenizes each
successful measured request's output text with it and gives, per procedure and primary run, the
output tokens and the output token rate over the run (first send to last response). Refused, with
the reason, when the records are not at hand or their text was dropped (``--llm-drop-text``).
:func:`recount_comparison` puts two runs side by side as a comparison document, with the rate's change:
like every comparison the gate builds, ``report/comparison.py`` renders it (the gate renders nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.storage import iter_records
from ..common.tokenizer import REFERENCE_TOKENIZER, get_tokenizer
from .storage import StoredRun, primary_label

__all__ = ["Recount", "RecountRefused", "recount", "recount_comparison"]


class RecountRefused(ValueError):
    """The run's output cannot be recounted (the message says why and what to do)."""


@dataclass(frozen=True)
class Recount:
    """One procedure's primary run recounted in the reference tokenizer."""

    procedure: str
    run: str
    requests: int
    output_tokens: int  # reference-tokenizer tokens of the successful requests' output text
    server_output_tokens: int | None  # the same requests' usage.completion_tokens (None: not reported)
    duration_s: float  # first send to last response
    tokenizer: str = REFERENCE_TOKENIZER

    @property
    def output_rate(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {"procedure": self.procedure, "run": self.run, "requests": self.requests,
                "output_tokens": self.output_tokens, "server_output_tokens": self.server_output_tokens,
                "duration_s": self.duration_s, "output_rate_tok_s": self.output_rate, "tokenizer": self.tokenizer}


def _run_dir(run: StoredRun, proc: Mapping[str, Any], label: str) -> Path | None:
    base = run.path if run.path.is_dir() else run.path.parent
    for r in (proc.get("result") or {}).get("runs") or []:
        if str(r.get("label")) == label and r.get("run_dir"):
            return base / str(r["run_dir"])
    return None


def recount(run: StoredRun, proc: Mapping[str, Any]) -> Recount:
    """The primary run of ``proc`` (a procedure entry of ``run``'s document) in reference tokens."""
    title = f"{proc.get('procedure')} ({run.id})"
    label = primary_label(proc.get("result") or {})
    run_dir = _run_dir(run, proc, label) if label else None
    if run_dir is None or not (run_dir / "records.jsonl").is_file():
        raise RecountRefused(f"{title}: the run's records are not at hand ({run_dir or 'no run directory'}): a "
                             "stored run keeps samples only; recount from its report directory (llmbench-report/)")
    if ((run.document.get("settings") or {}).get("drop_text")):
        raise RecountRefused(f"{title}: output text was dropped from the records (--llm-drop-text), so it cannot be "
                             "recounted in the reference tokenizer; rerun without --llm-drop-text")
    recs = [r for r in iter_records(run_dir) if r.phase == "measure"]
    ok = [r for r in recs if r.ok]
    if ok and not any(r.chunk_text for r in ok):
        raise RecountRefused(f"{title}: the records hold no output text (dropped with --llm-drop-text?), so they "
                             "cannot be recounted; rerun without --llm-drop-text")
    tok = get_tokenizer(REFERENCE_TOKENIZER)
    total = sum(len(tok.encode("".join(r.chunk_reasoning) + "".join(r.chunk_text))) for r in ok)
    server = [r.output_tokens_server for r in ok]
    sent = [r.sent_ns for r in recs if r.sent_ns]
    ends = [r.end_ns for r in recs if r.end_ns]
    duration = (max(ends) - min(sent)) / 1e9 if sent and ends else 0.0
    return Recount(str(proc.get("procedure")), str(label), len(ok), total,
                   sum(s for s in server if s is not None) if server and all(s is not None for s in server) else None,
                   duration)


def recount_comparison(baseline: StoredRun, new: StoredRun) -> dict[str, Any]:
    """``compare --recount``: each procedure both runs hold, recounted in the reference tokenizer (or the
    reason it cannot be), as a comparison document (``report.comparison.render_recount`` renders it):
    per procedure the two :meth:`Recount.to_json` and the output rate's change in percent."""
    from .compare import _matches

    procedures: list[dict[str, Any]] = []
    for proc in new.document.get("procedures") or []:
        base_proc = _matches(proc, baseline.document.get("procedures") or [])
        if base_proc is None:
            continue
        try:
            b, n = recount(baseline, base_proc), recount(new, proc)
        except RecountRefused as exc:
            procedures.append({"procedure": proc.get("procedure"), "refused": str(exc)})
            continue
        change = (n.output_rate / b.output_rate - 1) * 100 if b.output_rate > 0 else float("nan")
        procedures.append({"procedure": proc.get("procedure"), "run": n.run, "baseline": b.to_json(),
                           "new": n.to_json(), "output_rate_change_pct": change})
    return {"tokenizer": REFERENCE_TOKENIZER, "baseline": baseline.id, "new": new.id, "procedures": procedures}
