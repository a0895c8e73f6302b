#!/usr/bin/env python3
"""CPU per request of the HTTP-trace hooks, without a network (figures printed, never asserted).

    python bench/httptrace_hooks.py

Runs, in a tight loop, what ``ClientConfig(http_trace=True)`` adds to one request on a reused
connection outside aiohttp's own code (httptrace.py), in three parts timed alike:

* ``hooks`` — the per-request hooks: the trace made (``new_trace``) and current for the connector
  (``CURRENT_TRACE`` set and reset), the connector's reuse hook, the response headers stamped and
  both header blocks sized (``note_response``), the body's end noted (``note_request_sent``). The
  ``TracingConnector.connect`` frame around aiohttp's is not in it (``bench/httptrace_calls.py``
  counts it with the rest of a request's calls);
* ``body side`` — once per response, unchanged by the hooks: the response wrapped
  (``TracedResponse``, released) and its 50 body reads noted (``note_stream_reads``);
* ``TraceConfig`` — for reference, what the hooks replaced: aiohttp's ``TraceConfig`` machinery
  with no handlers attached (a ``Trace`` per request and the five signals a traced request on a
  reused connection sent, with their parameters objects and ``url.update_query`` calls); the
  handlers' own work (stamps, header sizes) came on top of it.

``bench/loadgen.py --trace-compare`` measures the whole client; this isolates the per-request part
that tracing adds (nothing is added per body read).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an installed copy

import aiohttp  # noqa: E402
from aiohttp.tracing import Trace  # noqa: E402
from multidict import CIMultiDict, CIMultiDictProxy  # noqa: E402
from yarl import URL  # noqa: E402

from pytest_llmbench.client import httptrace  # noqa: E402

URL_ = URL("http://127.0.0.1:8000/v1/chat/completions")
HEADERS = CIMultiDict({"Host": "127.0.0.1:8000", "Content-Type": "application/json", "Accept": "text/event-stream",
                       "Content-Length": "200", "User-Agent": f"Python/3.11 aiohttp/{aiohttp.__version__}",
                       "Accept-Encoding": "gzip, deflate"})
RESPONSE = SimpleNamespace(
    request_info=SimpleNamespace(method="POST", url=URL_, headers=CIMultiDictProxy(HEADERS)),
    version=SimpleNamespace(major=1, minor=1), status=200, reason="OK",
    raw_headers=((b"Content-Type", b"text/event-stream"), (b"Date", b"Tue, 24 Nov 2026 06:00:00 GMT"),
                 (b"Server", b"Python/3.11 aiohttp"), (b"Transfer-Encoding", b"chunked")))
BODY = b"x" * 200
CHUNK_NS = list(range(100, 150))  # 50 chunks, one read each


class _Inner:
    """The untraced response's surface that ``TracedResponse`` uses."""

    status = 200
    content_type = "text/event-stream"
    _content = SimpleNamespace(total_bytes=5000)

    async def read_chunk(self) -> bytes:
        return b""

    async def release(self) -> None:
        return None


INNER = _Inner()


async def hooks_request(hooks: Any) -> None:
    """The per-request hooks of one traced request on a reused connection (what this module added)."""
    trace = httptrace.new_trace(1)
    token = httptrace.CURRENT_TRACE.set(trace)
    try:
        await hooks.send_connection_reuseconn()
    finally:
        httptrace.CURRENT_TRACE.reset(token)
    httptrace.note_response(trace, RESPONSE)
    httptrace.note_request_sent(trace, 2, len(BODY), 2)


async def body_side(trace: Any) -> None:
    """The body side of one traced response, once per response (as before the hooks)."""
    resp = httptrace.TracedResponse(INNER, trace)
    httptrace.note_stream_reads(trace, CHUNK_NS, CHUNK_NS[0], CHUNK_NS[-1] + 1)
    trace.pop("first_byte_ns")  # note_stream_reads fills a trace once: clear it for the next turn
    await resp.release()


async def trace_config_request(tc: Any) -> None:
    """aiohttp's TraceConfig machinery for one traced request on a reused connection (no handlers)."""
    trace = Trace(None, tc, tc.trace_config_ctx(trace_request_ctx=None))  # type: ignore[arg-type]
    await trace.send_request_start("POST", URL_.update_query(None), HEADERS)
    await trace.send_connection_reuseconn()
    await trace.send_request_headers("POST", URL_, HEADERS)
    await trace.send_request_chunk_sent("POST", URL_, BODY)
    await trace.send_request_end("POST", URL_.update_query(None), HEADERS, RESPONSE)  # type: ignore[arg-type]


def us_per_request(one: Callable[[Any], Coroutine[Any, Any, None]], arg: Any, n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        coro = one(arg)
        try:
            coro.send(None)  # no await suspends: runs to completion
        except StopIteration:
            pass
    return (time.process_time() - t0) / n * 1e6


def main() -> None:
    empty = aiohttp.TraceConfig()
    empty.freeze()
    cases: dict[str, tuple[Callable[[Any], Coroutine[Any, Any, None]], Any]] = {
        "hooks": (hooks_request, httptrace._connector_hooks()),
        "body side": (body_side, httptrace.new_trace(1)),
        "TraceConfig": (trace_config_request, empty),
    }
    runs: dict[str, list[float]] = {k: [] for k in cases}
    print(f"aiohttp {aiohttp.__version__}, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs (process CPU time per request: noisy on a shared machine)")
    for i in range(10):  # interleaved, so machine drift hits both alike
        for name in (cases if i % 2 == 0 else reversed(list(cases))):
            fn, arg = cases[name]
            runs[name].append(us_per_request(fn, arg, 20000))
    for name, v in runs.items():
        print(f"  {name:>11}: {statistics.median(v):6.2f} µs CPU per traced request (median of {len(v)}, "
              f"range {min(v):.2f}-{max(v):.2f})")
    print("  hooks: the per-request stamps and header sizes that replaced aiohttp's TraceConfig; body side: "
          "unchanged, once per response; TraceConfig: aiohttp's machinery alone, no handlers (replaced)")


if __name__ == "__main__":
    main()
