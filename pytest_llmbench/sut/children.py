"""Child servers die with the process that started them (SIGKILL of pytest leaves no orphan SUT).

Linux: ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` in the child between fork and exec. The signal follows the
*thread* that forked, so it is set only when the parent forks from its main thread (a worker thread's
exit would otherwise stop the server). Elsewhere (and from other threads) nothing is set and the
owner's ``stop()`` remains the only way the child ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that ties the child's life to this process, or None."""
    libc = _libc()
    if libc is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def preexec() -> None:  # runs in the child, after fork, before exec
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec
