"""Secrets never reach a document (§7): the API key is only named (``sut.api_key_env``); as a second
line of defence every string of the finished document is scrubbed of the values of that variable and
of any environment variable whose name says it holds a key, token, secret or password, and the
command line is written with anything secret-looking redacted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MIN_SECRET_LEN", "REDACTED", "SECRET_NAME", "command_line", "scrub", "secret_values"]

#: Environment variable names whose values are treated as secrets.
SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL)", re.IGNORECASE)
MIN_SECRET_LEN = 6
REDACTED = "***REDACTED***"


def secret_values(result: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """Values that must not appear in any report: the named API key variable and key-like variables."""
    env = os.environ if environ is None else environ
    names: set[str] = set()
    for obj in (result.sut, result.settings):
        name = getattr(obj, "api_key_env", None)
        if name:
            names.add(str(name))
    names.update(k for k in env if SECRET_NAME.search(k))
    values = {env[k] for k in names if k in env and len(env[k]) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def scrub(x: Any, secrets: list[str]) -> Any:
    """``x`` (plain JSON) with every occurrence of each secret replaced by :data:`REDACTED`, keys included."""
    if not secrets:
        return x
    if isinstance(x, str):
        for s in secrets:
            if s in x:
                x = x.replace(s, REDACTED)
        return x
    if isinstance(x, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in x.items()}
    if isinstance(x, list):
        return [scrub(v, secrets) for v in x]
    return x


_URL_USERINFO = re.compile(r"(https?://)([^/@\s:]+):([^/@\s]+)@")
_SECRET_ARG = re.compile(r"^(--?[\w-]*(key|token|secret|passw(or)?d)[\w-]*)=(.+)$", re.IGNORECASE)


def _redact_arg(arg: str) -> str:
    arg = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@", arg)
    m = _SECRET_ARG.match(arg)
    if m and not m.group(1).lower().endswith("-env"):
        return f"{m.group(1)}={REDACTED}"
    return arg


def command_line(args: list[str]) -> list[str]:
    """The pytest command line with anything secret-looking redacted (§7)."""
    out = ["pytest"]
    redact_next = False
    for a in (str(x) for x in args):
        if redact_next:
            out.append(REDACTED)
            redact_next = False
            continue
        if re.match(r"^--?[\w-]*(key|token|secret|passw(or)?d)[\w-]*$", a, re.IGNORECASE) and not a.endswith("-env"):
            out.append(a)
            redact_next = True
            continue
        out.append(_redact_arg(a))
    return out
