"""Prompt fitting: the request-body hook a server's adapter hands the client when prompts go as the
server's own tokens (the ``server-ids`` prompt mode that ``procedures/prompts.py`` plans, §4.4).

The workloads build prompts in the reference tokenizer; on another model those ids are other tokens.
:class:`PromptFit` tokenizes each distinct prompt text once through the server's tokenize endpoint
(the adapter's :class:`~.base.TokenizeForm`), cuts or repeats it to the intended length part by part
(system prompt, shared prefix, rest) and shapes the body the client built: the server's ids as the
completions prompt, or their detokenized text as the chat user message. Then the adapter's
prefix-isolation edit runs (vLLM: a fresh ``cache_salt``).

It is a hook in the style of httpx's request event hooks and AIPerf's endpoint ``format_payload``
(``client/hooks.py`` says what the client asks of it): the client calls :meth:`PromptFit.ready` and,
for a prompt not fitted yet, :meth:`PromptFit.prepare` before the request, then :meth:`PromptFit.__call__`
on the body. Prompts are fitted before a run (``LLMClient.prepare``), so a measured request only looks
its prompt up.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from ...common.records import RequestSpec
from .base import BodyEdit, TokenizeForm

if TYPE_CHECKING:
    from ...common.tokenizer import Tokenizer

__all__ = ["TOKENIZE_CONCURRENCY", "PromptFit", "PromptFitError"]

TOKENIZE_CONCURRENCY = 8  # tokenize/detokenize calls in flight at once

#: a prompt's identity for fitting: its text, its system prompt and its intended length
Key = tuple[str, str | None, int]


class PromptFitError(RuntimeError):
    """The workload does not fit the server (context window) or the server's tokenizer failed."""


class PromptFit:
    """Each prompt as the server's own tokens at its intended length (a body hook for ``LLMClient``).

    ``form``: the server's tokenize endpoints; ``root_url``: the server root; ``api``: ``completions``
    (the body's prompt becomes the ids) or ``chat`` (the user message becomes their detokenized text);
    ``tokenizer``: the reference tokenizer the workload was built in; ``isolate``: the adapter's
    per-request prefix-isolation edit, run on every body. ``tokenize_calls`` counts the tokenize calls.
    """

    name = "prompt fitting"

    def __init__(self, form: TokenizeForm, *, root_url: str, model: str, api: str, tokenizer: Tokenizer | None,
                 headers: Mapping[str, str] | None = None, verify: bool = True, isolate: BodyEdit | None = None) -> None:
        self.form = form
        self._root_url, self._model, self._chat = root_url.rstrip("/"), model, api == "chat"
        self._tokenizer = tokenizer
        self._http_headers, self._verify = dict(headers or {}), verify
        self._isolate = isolate
        self._ids: dict[str, list[int]] = {}
        self._ref_len: dict[str, int] = {}
        self._fitted: dict[Key, tuple[list[int], str | None]] = {}
        self._sem: asyncio.Semaphore | None = None
        self._http: httpx.AsyncClient | None = None
        self.tokenize_calls = 0

    def describe(self) -> dict[str, Any]:
        """What the client's description adds (``run.json``)."""
        return {"prompt_mode": f"server-ids ({self.form.tokenize_path}, {self.form.name} form)"}

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=60.0, headers=self._http_headers, verify=self._verify)
        if self._sem is None:
            self._sem = asyncio.Semaphore(TOKENIZE_CONCURRENCY)
        async with self._sem:
            r = await self._http.post(self._root_url + path, json=body)
        if r.status_code != 200:
            raise PromptFitError(f"POST {path} answered {r.status_code}: {r.text[:300]}")
        return dict(r.json())

    async def server_ids(self, text: str) -> list[int]:
        """``text`` in the server's ids (one tokenize call per distinct text)."""
        ids = self._ids.get(text)
        if ids is None:
            self.tokenize_calls += 1
            form = self.form
            ids = form.ids(await self._post(form.tokenize_path, form.tokenize_body(text, self._model)))
            self._ids[text] = ids
        return ids

    async def _detokenize(self, ids: list[int]) -> str:
        form = self.form
        return form.text(await self._post(form.detokenize_path, form.detokenize_body(ids, self._model)))

    @staticmethod
    def _key(spec: RequestSpec) -> Key:
        return (spec.prompt_text, spec.system_prompt, spec.input_tokens or len(spec.prompt_ids or ()))

    async def _part(self, text: str, n: int) -> list[int]:
        """``text`` in the server's ids, cut or repeated to ``n`` ids."""
        if n <= 0:
            return []
        ids = await self.server_ids(text) or await self.server_ids(" x")
        return (ids * math.ceil(n / len(ids)))[:n]

    def _reference_len(self, text: str) -> int:
        if self._tokenizer is None:
            return 0
        n = self._ref_len.get(text)
        if n is None:
            n = self._ref_len[text] = len(self._tokenizer.encode(text))
        return n

    def ready(self, spec: RequestSpec) -> bool:
        """True when ``spec``'s prompt is fitted (the client calls :meth:`prepare` otherwise)."""
        return self._key(spec) in self._fitted

    async def prepare(self, spec: RequestSpec) -> None:
        """Fit ``spec``'s prompt. Each part keeps its reference length in the server's ids: the system
        prompt, a shared prefix at the head of ``prompt_ids`` (``prefix_tokens``), the rest; the total is
        ``input_tokens``. A prefix shared in reference tokens is shared in server tokens. Raises
        :class:`PromptFitError` (the server's tokenizer answered an error) or ``httpx.HTTPError``."""
        key = self._key(spec)
        if key in self._fitted:
            return
        tok = self._tokenizer
        target = spec.input_tokens or len(spec.prompt_ids or ()) or 1
        sys_len = min(self._reference_len(spec.system_prompt), target - 1) if spec.system_prompt else 0
        system = await self._part(spec.system_prompt or "", sys_len) if spec.system_prompt else []
        want = max(target - len(system), 1)
        head: list[int] = []
        rest_text = spec.prompt_text
        ids = spec.prompt_ids
        k = spec.prefix_tokens - (sys_len if spec.system_prompt else 0)
        if ids is not None and tok is not None and spec.prefix_id is not None and 0 < k < min(len(ids), want):
            head = await self._part(tok.decode(ids[:k]), k)
            rest_text = tok.decode(ids[k:])
        body_ids = head + await self._part(rest_text, want - len(head))
        text = await self._detokenize(body_ids) if self._chat else None
        self._fitted[key] = (system + body_ids, text)

    def __call__(self, spec: RequestSpec, body: dict[str, Any]) -> dict[str, Any]:
        """The body the client built for ``spec``, its prompt replaced by the fitted one (a prompt not
        fitted stays as it is), then the adapter's prefix-isolation edit."""
        fitted = self._fitted.get(self._key(spec))
        if fitted is not None:
            ids, text = fitted
            if not self._chat:
                body["prompt"] = list(ids)
            elif text:
                body["messages"][-1]["content"] = text
        isolate = self._isolate
        return body if isolate is None else isolate(body)
