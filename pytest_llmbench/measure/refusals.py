"""Refusal detection (§4.8.1 "whether any requests were refused", §5.10): what counts as refused.

The draft asks the report to disclose whether any request was refused during testing (§4.8.1)
and §5.10 compares configurations whose filters refuse some requests; it does not say how a
refusal shows on the wire. A request is refused (``ErrorType.REFUSED``, a failure, never a
success) when any of these holds, checked in this order:

1. an HTTP 400, 403 or 422 answer (or an error event inside the stream) whose error ``code``,
   ``type`` or nested ``innererror.code`` names a content policy: one of :data:`POLICY_CODES`
   (OpenAI ``content_policy_violation``, Azure OpenAI ``content_filter`` /
   ``ResponsibleAIPolicyViolation``, ...) or a code the tester declared;
2. ``finish_reason == "content_filter"`` (OpenAI, Azure, vLLM guardrails, the simulator);
3. a non-empty OpenAI ``refusal`` field in the streamed ``delta`` (or the JSON ``message``);
4. the completion's text matches the tester's declared refusal pattern (a regular expression,
   ``re.search``), for servers that refuse in plain text.

Other 4xx answers stay ``http_4xx``: only a policy code makes an HTTP error a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["POLICY_CODES", "POLICY_STATUSES", "RefusalPolicy", "policy_code", "refusal_reason"]

POLICY_STATUSES = frozenset({400, 403, 422})
#: error codes (lower case) that name a content-policy rejection
POLICY_CODES = frozenset({
    "content_filter",  # Azure OpenAI (400), OpenAI moderation finish reason
    "content_policy_violation",  # OpenAI images/chat (400)
    "responsibleaipolicyviolation",  # Azure OpenAI innererror.code
    "policy_violation",
    "safety",
    "moderation",
    "guardrail_intervened",  # AWS Bedrock guardrails
})


@dataclass(frozen=True)
class RefusalPolicy:
    """What the tester declared beyond the built-in rules: extra policy codes and a text pattern."""

    codes: tuple[str, ...] = ()
    pattern: str | None = None  # regular expression searched in the completion text

    def __post_init__(self) -> None:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"refusal pattern {self.pattern!r} is not a regular expression: {exc}") from None

    @property
    def all_codes(self) -> frozenset[str]:
        return POLICY_CODES | {c.lower() for c in self.codes}

    def describe(self) -> str:
        parts = ["HTTP 400/403/422 or stream error with a policy code", "finish_reason content_filter",
                 "OpenAI refusal field"]
        if self.codes:
            parts[0] += f" (declared codes: {', '.join(self.codes)})"
        if self.pattern:
            parts.append(f"text matching {self.pattern!r}")
        return "; ".join(parts)


def _codes(err: Any) -> Iterable[str]:
    if not isinstance(err, Mapping):
        return
    for key in ("code", "type"):
        v = err.get(key)
        if isinstance(v, str):
            yield v
    inner = err.get("innererror")
    if isinstance(inner, Mapping):
        yield from _codes(inner)


def policy_code(status: int | None, body: Any, policy: RefusalPolicy | None = None) -> str | None:
    """The content-policy code of an HTTP error answer (parsed JSON ``body``), else None.

    ``status`` None stands for an error event inside a 200 stream (any policy code counts).
    """
    if status is not None and status not in POLICY_STATUSES:
        return None
    err = body.get("error", body) if isinstance(body, Mapping) else None
    known = (policy or RefusalPolicy()).all_codes
    for code in _codes(err):
        if code.lower() in known:
            return code
    return None


def refusal_reason(finish_reason: str | None, refusal: str | None, text: str,
                   policy: RefusalPolicy | None = None) -> str | None:
    """Why a completed response is a refusal (rules 2–4 of the module docstring), else None."""
    if finish_reason == "content_filter":
        return "finish_reason content_filter (§4.8.1)"
    if refusal:
        return f"refusal field in the response: {refusal[:120]!r} (§4.8.1)"
    if policy is not None and policy.pattern and re.search(policy.pattern, text):
        return f"completion text matches the declared refusal pattern {policy.pattern!r} (§4.8.1)"
    return None
