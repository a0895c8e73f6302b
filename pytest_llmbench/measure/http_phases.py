"""AIPerf's HTTP-trace phases of one request, from the event times the aiohttp transport stamps
(``RequestRecord.http_trace``; see ``client/transports/httptrace.py`` for where each event is stamped).

:func:`phases` turns one dict into AIPerf's 14 ``http_req_*`` values (k6/HAR phases):

* ``blocked``    = pool wait (connector queued start → end), 0 without a wait
* ``dns_lookup`` = resolver call start → end, 0 on a cache hit / IP literal / reuse
* ``connecting`` = connection create span − the DNS span inside it (aiohttp resolves inside
  ``create``; TLS handshake included), 0 on reuse
* ``sending``    = connection ready → request body written (T_submit: the last body byte; headers
  when there is no body)
* ``waiting``    = request written → first response *body* byte (TTFB): the client's stamp of
  the first read that completed an SSE event
* ``receiving``  = first → last response body byte: to the read that carried ``[DONE]`` (the
  stream's end without one)
* ``duration``   = connection ready → last body byte (measured, not summed)
* ``connection_overhead`` = blocked + dns_lookup + connecting; ``total`` = the six phases summed
* ``data_sent`` / ``data_received``: request line + headers + body bytes / status line + headers
  + body bytes, the header blocks reconstructed from the header lists as HTTP/1.1 serialises
  them; body bytes received are after chunked-transfer decoding (framing not counted)
* ``chunks_sent`` = body writes (``client.stamped_body`` writes the body less its last byte, then
  that byte); ``chunks_received`` = reads of the response body stream that completed a chunk the
  client timed (the first SSE event and every event with ``choices``: the distinct per-read
  stamps); a read that completed only ``[DONE]``, the usage chunk, a comment or part of an event
  is not counted (AIPerf counts every read). A body read whole, non-streaming or an error, counts
  once; aiohttp's buffer may merge socket reads
* ``connection_reused`` = 1 when a pooled connection was taken, else 0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: AIPerf's 14 HTTP-trace tags, in the order of its reference, mapped to :func:`phases` keys.
HTTP_PHASES: tuple[str, ...] = (
    "blocked", "dns_lookup", "connecting", "sending", "waiting", "receiving", "duration",
    "connection_overhead", "total", "data_sent", "data_received", "connection_reused",
    "chunks_sent", "chunks_received",
)


def phases(trace: Mapping[str, Any] | None) -> dict[str, float | int | None]:
    """AIPerf's HTTP-trace values for one request: times in seconds, bytes, counts.

    A phase whose events did not happen (request failed before the response) is ``None``;
    phases that legitimately did not occur (no pool wait, reused connection) are 0.
    """
    out: dict[str, float | int | None] = dict.fromkeys(HTTP_PHASES)
    if not trace or "request_start_ns" not in trace:
        return out
    t = trace
    ns = 1e-9

    def span(a: str, b: str) -> int:
        return t[b] - t[a] if a in t and b in t else 0

    blocked = span("queued_start_ns", "queued_end_ns")
    dns = span("dns_start_ns", "dns_end_ns")
    created = "create_end_ns" in t
    connecting = max(span("create_start_ns", "create_end_ns") - dns, 0) if created else 0
    ready = t.get("create_end_ns") or t.get("reused_ns") or t.get("queued_end_ns") or t["request_start_ns"]
    reused = "reused_ns" in t and not created
    out["blocked"], out["dns_lookup"], out["connecting"] = blocked * ns, dns * ns, connecting * ns
    out["connection_overhead"] = (blocked + dns + connecting) * ns
    out["connection_reused"] = 1 if reused else 0
    sent = t.get("body_sent_ns") or t.get("headers_sent_ns")
    out["chunks_sent"] = int(t.get("request_chunks", 0))
    if "request_header_bytes" in t:
        out["data_sent"] = int(t["request_header_bytes"]) + int(t.get("request_body_bytes", 0))
    if sent is None:
        return out
    out["sending"] = max(sent - ready, 0) * ns
    first = t.get("first_byte_ns") or t.get("response_headers_ns")
    last = t.get("last_byte_ns") or first
    if "response_header_bytes" in t:
        out["data_received"] = int(t["response_header_bytes"]) + int(t.get("response_body_bytes", 0))
        out["chunks_received"] = int(t.get("response_chunks", 0))
    if first is None or last is None:
        return out
    out["waiting"] = max(first - sent, 0) * ns
    out["receiving"] = max(last - first, 0) * ns
    out["duration"] = max(last - ready, 0) * ns
    out["total"] = (blocked + dns + connecting) * ns + out["sending"] + out["waiting"] + out["receiving"]
    return out
