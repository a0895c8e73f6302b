"""vLLM's prefix-cache switches for ``pytest_llmbench_configure_sut`` (5.7 without user code).

- ``prefix_cache`` False: every request carries a ``cache_salt`` that no other request shares (vLLM
  0.9+ mixes the salt into the first block's hash, so nothing is reused across requests); True:
  no salt. The body holds the placeholder :data:`FRESH_SALT`; the vLLM adapter's prefix-isolation
  hook (``ServerAdapter.isolate_prefix``, run by the prompt-fitting body hook, ``adapters/fitting.py``)
  replaces it with a new salt per request (:func:`fresh_salt`).
- ``flush_prefix_cache``: ``POST /reset_prefix_cache``, served only with ``VLLM_SERVER_DEV_MODE=1``.

Switching off needs the flush too (5.7 flushes between its runs), so it is refused, with the reason
in ``server_info["prefix_cache_unavailable"]``, on a vLLM started without dev mode.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from ..base import sut_post

FRESH_SALT = "llmbench-fresh-salt-per-request"
DEV_MODE_HINT = "start vLLM with VLLM_SERVER_DEV_MODE=1 (it serves POST /reset_prefix_cache then)"


def fresh_salt(body: dict[str, Any]) -> dict[str, Any]:
    """Replace the placeholder salt of a request body with one no other request carries."""
    if body.get("cache_salt") == FRESH_SALT:
        body["cache_salt"] = f"llmbench-{uuid.uuid4().hex}"
    return body


def _flush(sut: Any) -> bool | None:
    try:
        r = sut_post(sut, "/reset_prefix_cache")
    except httpx.HTTPError as exc:
        sut.server_info["flush_prefix_cache"] = f"not possible: POST /reset_prefix_cache failed ({exc})"
        return None
    if r.status_code >= 400:
        sut.server_info["flush_prefix_cache"] = (f"not possible: POST /reset_prefix_cache answered {r.status_code}; "
                                                 f"{DEV_MODE_HINT}")
        return None
    sut.server_info["flush_prefix_cache"] = "POST /reset_prefix_cache (VLLM_SERVER_DEV_MODE=1)"
    return True


def configure(sut: Any, setting: str, value: Any) -> bool | None:
    """True when the setting was made; None (with the reason in ``server_info``) when it cannot be."""
    if setting == "flush_prefix_cache" and value:
        return _flush(sut)
    if setting != "prefix_cache":
        return None
    if not value:
        if _flush(sut) is None:  # no dev mode: 5.7 could neither flush nor trust a cold run
            sut.server_info["prefix_cache_unavailable"] = (
                f"5.7 on vLLM needs POST /reset_prefix_cache ({sut.server_info.get('flush_prefix_cache')}): "
                f"{DEV_MODE_HINT}")
            return None
        sut.extra_body["cache_salt"] = FRESH_SALT
    else:
        sut.extra_body.pop("cache_salt", None)
    sut.server_info["prefix_cache"] = bool(value)
    sut.server_info["prefix_cache_source"] = "set through pytest_llmbench_configure_sut (per-request cache_salt)"
    sut.server_info["prefix_cache_switch"] = "per-request cache_salt: a fresh salt per request means no reuse"
    return True
