"""Atomic file writes: a reader sees the old file or the new one, never half of one. Used by the run
store, the results document, the reports and the gate's store. :class:`LineSpool`: lines kept on
disk instead of in memory, in a file that has no name."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

__all__ = ["LineSpool", "atomic_text_file", "write_bytes_atomic", "write_json_atomic", "write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``.

    The file gets the usual permissions (0666 less the umask) and is fsync'd before the rename,
    so a reader sees the old file or the new one, never half of one.
    """
    with atomic_text_file(path) as f:
        f.write(text)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_text_atomic`)."""
    with _atomic_file(path, binary=True) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_text_file(path: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """A text file that replaces ``path`` when the block ends without an exception (as
    :func:`write_text_atomic` does), so a long file is written piece by piece, never held whole;
    on an exception ``path`` is left as it was and the temporary file removed."""
    with _atomic_file(path, binary=False) as f:
        yield f


@contextlib.contextmanager
def atomic_binary_file(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """:func:`atomic_text_file` for bytes: written piece by piece, replacing ``path`` at the end."""
    with _atomic_file(path, binary=True) as f:
        yield f


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike[str], *, binary: bool) -> Iterator[Any]:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class LineSpool:
    """Lines appended to an unnamed temporary file (in ``directory``, default the system's temporary
    directory): it has no name in any directory and is gone when the spool is collected or the
    process ends. Read back in order by any number of readers at once (:meth:`lines`)."""

    BLOCK = 1 << 20

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)
        self._close = weakref.finalize(self, self._file.close)
        self.count = 0

    def append(self, line: bytes) -> None:
        """One line (without its newline)."""
        self._file.write(line + b"\n")
        self.count += 1

    def lines(self) -> Iterator[bytes]:
        """Every line appended so far, in order (each reader keeps its own offset)."""
        self._file.flush()
        fd, offset, rest = self._file.fileno(), 0, b""
        while True:
            block = os.pread(fd, self.BLOCK, offset)
            if not block:
                break
            offset += len(block)
            *lines, rest = (rest + block).split(b"\n")
            yield from lines
        if rest:
            yield rest


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
