#!/usr/bin/env python3
"""CPU per request of aiohttp's trace signals, without a network (figures printed, never asserted).

    python bench/httptrace_signals.py

Sends, for one traced request on a reused connection, the five signals aiohttp sends (request
start, connection reuse, headers sent, body chunk sent, request end, with the parameters objects
and ``url.update_query`` calls aiohttp makes for them), in a tight loop, with two configs:

* ``ours``  — ``httptrace.make_trace_config()`` (stamps, header byte counts);
* ``empty`` — a ``TraceConfig`` with no handlers: aiohttp's own cost of tracing a request.

``bench/loadgen.py --trace-compare`` measures the whole client; this isolates the per-request part
that tracing adds (nothing is added per body read).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an installed copy

import aiohttp  # noqa: E402
from aiohttp.tracing import Trace  # noqa: E402
from multidict import CIMultiDict  # noqa: E402
from yarl import URL  # noqa: E402

from pytest_llmbench import httptrace  # noqa: E402

URL_ = URL("http://127.0.0.1:8000/v1/chat/completions")
HEADERS = CIMultiDict({"Host": "127.0.0.1:8000", "Content-Type": "application/json", "Accept": "text/event-stream",
                       "Content-Length": "200", "User-Agent": f"Python/3.11 aiohttp/{aiohttp.__version__}",
                       "Accept-Encoding": "gzip, deflate"})
RESPONSE = SimpleNamespace(version=SimpleNamespace(major=1, minor=1), status=200, reason="OK",
                           raw_headers=((b"Content-Type", b"text/event-stream"),
                                        (b"Date", b"Tue, 24 Nov 2026 06:00:00 GMT"),
                                        (b"Server", b"Python/3.11 aiohttp"), (b"Transfer-Encoding", b"chunked")))
BODY = b"x" * 200


async def one_request(tc: Any) -> None:
    trace = Trace(None, tc, tc.trace_config_ctx(trace_request_ctx=httptrace.new_trace()))  # type: ignore[arg-type]
    await trace.send_request_start("POST", URL_.update_query(None), HEADERS)
    await trace.send_connection_reuseconn()
    await trace.send_request_headers("POST", URL_, HEADERS)
    await trace.send_request_chunk_sent("POST", URL_, BODY)
    await trace.send_request_end("POST", URL_.update_query(None), HEADERS, RESPONSE)  # type: ignore[arg-type]


def us_per_request(tc: Any, n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        coro = one_request(tc)
        try:
            coro.send(None)  # no await suspends: runs to completion
        except StopIteration:
            pass
    return (time.process_time() - t0) / n * 1e6


def main() -> None:
    empty = aiohttp.TraceConfig()
    empty.freeze()
    configs = {"ours": httptrace.make_trace_config(), "empty": empty}
    runs: dict[str, list[float]] = {k: [] for k in configs}
    for i in range(10):  # interleaved, so machine drift hits both alike
        for name in (configs if i % 2 == 0 else reversed(list(configs))):
            runs[name].append(us_per_request(configs[name], 20000))
    for name, v in runs.items():
        print(f"  {name:>5}: {statistics.median(v):6.2f} µs CPU per traced request (median of {len(v)}, "
              f"range {min(v):.2f}-{max(v):.2f})")
    print(f"  our handlers add {statistics.median(runs['ours']) - statistics.median(runs['empty']):.2f} µs "
          f"to aiohttp's own {statistics.median(runs['empty']):.2f} µs")


if __name__ == "__main__":
    main()
