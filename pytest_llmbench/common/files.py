"""Atomic file writes: a reader sees the old file or the new one, never half of one. Used by the run
store, the results document, the reports and the gate's store."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict
from pathlib import Path
from typing import Any

__all__ = ["write_bytes_atomic", "write_json_atomic", "write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``.

    The file gets the usual permissions (0666 less the umask) and is fsync'd before the rename,
    so a reader sees the old file or the new one, never half of one.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=2, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "to_json"):
        return o.to_json()
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    if hasattr(o, "value"):  # enums
        return o.value
    if hasattr(o, "tolist"):  # numpy scalars/arrays
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in run.json")
