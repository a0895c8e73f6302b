"""What the client asks of a request-body hook (``LLMClient(body_hook=...)``).

In the style of httpx's request event hooks and AIPerf's endpoint ``format_payload``: whoever builds
the client hands it the hook the SUT's adapter made (``sut/adapters``: prompt fitting,
``adapters/fitting.py``), so what a server needs of a body lives in its adapter and the request's
walk only goes down (load generator -> client -> the adapter's hook). The client stays OpenAI-only.

Per request the client asks :meth:`BodyHook.ready` and, for a request not ready, awaits
:meth:`BodyHook.prepare` before the request is timed: a failure there fails the request
(``protocol``, ``"<name>: <error>"``) without sending it. Then it builds the OpenAI body and hands it
to the hook (``hook(spec, body)``), which returns the body to send. Without a hook the client does
none of this. ``LLMClient.prepare(specs)`` prepares a list before a run.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..common.records import RequestSpec

__all__ = ["BodyHook"]


class BodyHook(Protocol):
    """Shapes each request body for the SUT; ``name`` names it in a failed request's message."""

    name: str

    def ready(self, spec: RequestSpec) -> bool:
        """True when the body of ``spec`` can be shaped at once (cheap: it runs at every send)."""
        ...

    async def prepare(self, spec: RequestSpec) -> None:
        """What shaping ``spec`` needs first (e.g. the server's tokens); raises when it cannot."""
        ...

    def __call__(self, spec: RequestSpec, body: dict[str, Any]) -> dict[str, Any]:
        """The body to send for ``spec``, from the one the client built (may edit it in place)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the client's description (``run.json``) adds."""
        ...

    async def aclose(self) -> None:
        """Release what the hook holds (closed with the client)."""
        ...
