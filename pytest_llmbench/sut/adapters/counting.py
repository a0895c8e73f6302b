"""Counting with the server's own tokenizer (§4.4.2 option A): its tokenize endpoint in vLLM's form
(SGLang's too), else the ``usage`` block of each response. :func:`server_counting` decides which and
returns the matching declaration; there is never a fallback to a word count. (Moved here from
``common/tokenizer.py``: it speaks a server's protocol.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from ...common.tokenizer import TokenizerDeclaration, TokenizerError
from .base import root_url
from .others import VLLM_FORM

__all__ = ["ServerTokenCounter", "server_counting", "usage_counting_declaration"]


class ServerTokenCounter:
    """Counts tokens with the SUT's own tokenizer through ``POST /tokenize`` (§4.4.2 option A).

    The request/response shape is vLLM's (also SGLang's): ``{"model": m, "prompt": text}`` ->
    ``{"count": n, "tokens": [...]}``; ``{"messages": [...]}`` counts a chat prompt with the
    server's chat template applied. The endpoint lives at the server root, so a base URL ending in
    ``/v1`` is stripped. The API key is sent as a bearer token and never appears in ``repr`` or
    errors. Errors raise :class:`TokenizerError`; nothing falls back to another count.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        add_special_tokens: bool = True,
        vocab_size: int | None = None,
        timeout: float = 10.0,
        transport: Any = None,
    ) -> None:
        self.url = root_url(base_url) + VLLM_FORM.tokenize_path
        self.model = model
        self.add_special_tokens = add_special_tokens
        self.vocab_size = vocab_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout, transport=transport)
        self.declaration = TokenizerDeclaration(
            name=f"server-native:{model or 'default'}",
            version="as served by the SUT (the /tokenize endpoint reports no version)",
            vocab_size=vocab_size or 0,  # 0 = not reported; pass vocab_size= to declare it
            source=f"SUT endpoint POST {self.url}",
            counting_option="A",
            counting_method="server-tokenize",
            bos_eos="included" if add_special_tokens else "excluded",
            special_tokens=(
                f"counted by the server's tokenizer with add_special_tokens={add_special_tokens}; "
                "chat prompts counted with the server's chat template (template tokens included)"
            ),
            system_prompt="included",
            tool_call_format="as rendered by the server's chat template (included in chat counts)",
        )

    def __repr__(self) -> str:
        return f"ServerTokenCounter(url={self.url!r}, model={self.model!r})"

    def close(self) -> None:
        self._client.close()

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.model is not None:
            body = {"model": self.model, **body}
        try:
            resp = self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise TokenizerError(f"POST {self.url} failed: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise TokenizerError(f"POST {self.url} returned HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            data = resp.json()
        except ValueError as exc:
            raise TokenizerError(f"POST {self.url} returned a body that is not JSON") from exc
        if not isinstance(data, dict):
            raise TokenizerError(f"POST {self.url} returned {type(data).__name__}, expected an object")
        return data

    @staticmethod
    def _count_of(data: dict[str, Any], url: str) -> int:
        count = data.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            return count
        tokens = data.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
        raise TokenizerError(f"POST {url} answered without 'count' or 'tokens': keys {sorted(data)}")

    def tokenize(self, text: str) -> list[int]:
        """The server's token ids for ``text``."""
        data = self._post({"prompt": text, "add_special_tokens": self.add_special_tokens})
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise TokenizerError(f"POST {self.url} answered without a 'tokens' list")
        return [int(t) for t in tokens]

    def count(self, text: str) -> int:
        """Token count of ``text`` by the server's tokenizer."""
        data = self._post({"prompt": text, "add_special_tokens": self.add_special_tokens})
        return self._count_of(data, self.url)

    def count_messages(self, messages: Sequence[dict[str, Any]]) -> int:
        """Token count of a chat prompt after the server's chat template (template tokens included)."""
        data = self._post({"messages": list(messages)})
        return self._count_of(data, self.url)

    def probe(self) -> str | None:
        """``None`` when the endpoint answers correctly, else why it cannot be used."""
        try:
            n = self.count("hello world")
        except TokenizerError as exc:
            return str(exc)
        if n <= 0:
            return f"POST {self.url} counted {n} tokens for 'hello world'"
        return None


def usage_counting_declaration(model: str | None = None, *, reason: str = "") -> TokenizerDeclaration:
    """Option A by server usage: counts are ``usage.prompt_tokens``/``completion_tokens`` (§4.4.2)."""
    why = f" ({reason})" if reason else ""
    return TokenizerDeclaration(
        name=f"server-native:{model or 'default'}",
        version="unknown (counts taken from the server's usage block)",
        vocab_size=0,  # not observable through usage; declare it from the model card if known
        source=f"usage.prompt_tokens / usage.completion_tokens reported by the SUT; no /tokenize endpoint{why}",
        counting_option="A",
        counting_method="server-usage",
        bos_eos="as counted by the server (usually included in prompt_tokens)",
        special_tokens="whatever the server counts in usage: chat-template and special tokens included",
        system_prompt="included",
        tool_call_format="included in usage.prompt_tokens as rendered by the server",
    )


def server_counting(
    base_url: str,
    model: str | None = None,
    *,
    api_key: str | None = None,
    vocab_size: int | None = None,
    transport: Any = None,
) -> tuple[ServerTokenCounter | None, TokenizerDeclaration]:
    """Option A (§4.4.2): the server's ``/tokenize`` when it works, else usage-based counting.

    Returns the counter (``None`` for usage-based counting) and the declaration to report. The
    choice is explicit in ``declaration.counting_method``; there is no word-count fallback.
    """
    counter = ServerTokenCounter(base_url, model, api_key=api_key, vocab_size=vocab_size, transport=transport)
    problem = counter.probe()
    if problem is None:
        return counter, counter.declaration
    counter.close()
    return None, usage_counting_declaration(model, reason=problem)
