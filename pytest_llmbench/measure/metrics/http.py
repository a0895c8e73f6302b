"""HTTP lifecycle phases of each request (AIPerf HTTP Trace Metrics, k6/HAR phases; ``--llm-http-trace``).

Per-request columns, NaN where the request carried no trace or the phase's events did not happen
(``measure.http_phases``).
"""

from __future__ import annotations

import numpy as np

from ..registry import metric

_HTTP = "AIPerf metrics reference, HTTP Trace Metrics (k6/HAR phases); httptrace.py"


@metric("HTTP blocked", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_blocked")
def http_blocked(trace_blocked: np.ndarray) -> np.ndarray:
    """connection-pool wait (queued start -> end)"""
    return trace_blocked


@metric("HTTP DNS lookup", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_dns_lookup")
def http_dns_lookup(trace_dns_lookup: np.ndarray) -> np.ndarray:
    """DNS resolution; 0 on cache hit, IP literal or reuse"""
    return trace_dns_lookup


@metric("HTTP connecting", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_connecting")
def http_connecting(trace_connecting: np.ndarray) -> np.ndarray:
    """connection create - DNS inside it (TCP + TLS); 0 on reuse"""
    return trace_connecting


@metric("HTTP sending", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_sending")
def http_sending(trace_sending: np.ndarray) -> np.ndarray:
    """connection ready -> request body written"""
    return trace_sending


@metric("HTTP waiting (TTFB)", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_waiting")
def http_waiting(trace_waiting: np.ndarray) -> np.ndarray:
    """request written -> first body read that completed an event (TTFB)"""
    return trace_waiting


@metric("HTTP receiving", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_receiving")
def http_receiving(trace_receiving: np.ndarray) -> np.ndarray:
    """first body read -> the read with [DONE] (end of body)"""
    return trace_receiving


@metric("HTTP duration", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_duration")
def http_duration(trace_duration: np.ndarray) -> np.ndarray:
    """connection ready -> last body byte (measured)"""
    return trace_duration


@metric("HTTP connection overhead", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_connection_overhead")
def http_connection_overhead(trace_connection_overhead: np.ndarray) -> np.ndarray:
    """blocked + dns_lookup + connecting"""
    return trace_connection_overhead


@metric("HTTP total", "s", "lower", kind="column", section=_HTTP, aiperf="http_req_total")
def http_total(trace_total: np.ndarray) -> np.ndarray:
    """sum of the six phases blocked ... receiving"""
    return trace_total


@metric("HTTP data sent", "bytes", "neutral", kind="column", section=_HTTP, aiperf="http_req_data_sent")
def http_data_sent(trace_data_sent: np.ndarray) -> np.ndarray:
    """request line + headers + body bytes"""
    return trace_data_sent


@metric("HTTP data received", "bytes", "neutral", kind="column", section=_HTTP, aiperf="http_req_data_received")
def http_data_received(trace_data_received: np.ndarray) -> np.ndarray:
    """status line + headers + decoded body bytes"""
    return trace_data_received


@metric("HTTP connection reused", "requests", "higher", kind="column", section=_HTTP, aiperf="http_req_connection_reused")
def http_connection_reused(trace_connection_reused: np.ndarray) -> np.ndarray:
    """1 when a pooled connection was taken, else 0"""
    return trace_connection_reused


@metric("HTTP chunks sent", "events", "neutral", kind="column", section=_HTTP, aiperf="http_req_chunks_sent")
def http_chunks_sent(trace_chunks_sent: np.ndarray) -> np.ndarray:
    """request body writes"""
    return trace_chunks_sent


@metric("HTTP chunks received", "events", "neutral", kind="column", section=_HTTP, aiperf="http_req_chunks_received")
def http_chunks_received(trace_chunks_received: np.ndarray) -> np.ndarray:
    """reads of the response body that completed a timed chunk (AIPerf: every read)"""
    return trace_chunks_received
