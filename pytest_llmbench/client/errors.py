"""Every failure of a request as one :class:`~pytest_llmbench.common.records.ErrorType` (§4.2.6).

One error map for every transport (like httpx's ``HTTPCORE_EXC_MAP`` with
``map_httpcore_exceptions()``): an exception class -> how it is classified before the response
arrives and while its body is read (:data:`ERROR_MAP`). The most specific class wins (first hit in
the exception's MRO); an exception with no entry is a PROTOCOL error "unexpected client error".
A failure found in the response itself (status, content type, SSE framing, JSON shape) is raised
as a :class:`TransportError` directly. The gRPC transport's statuses are classified here too, by their
code's name (:data:`GRPC_STATUS_MAP`, :func:`classify_grpc_status`; no grpc import on this path).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..common.records import ErrorType

__all__ = ["BEFORE_RESPONSE", "ERROR_MAP", "GRPC_STATUS_MAP", "MID_STREAM", "ErrorRule", "TransportError",
           "classify_grpc_status", "classify_status", "classify_transport_error", "map_transport_errors"]


class TransportError(Exception):
    """A failure, already classified (``error_type``, readable ``message``)."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def classify_status(status: int) -> ErrorType | None:
    """HTTP status -> error type (None for 2xx)."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return ErrorType.RATE_LIMITED
    if 400 <= status < 500:
        return ErrorType.HTTP_4XX
    if status >= 500:
        return ErrorType.HTTP_5XX
    return ErrorType.PROTOCOL  # 1xx/3xx where a completion was expected


@dataclass(frozen=True)
class ErrorRule:
    """How one exception class is classified: ``before`` the response (connect, send, headers)
    and ``mid`` stream (reading the body); a note, if any, prefixes the message."""

    before: ErrorType
    mid: ErrorType
    before_note: str = ""
    mid_note: str = ""

    def classify(self, exc: BaseException, *, mid_stream: bool) -> TransportError:
        note = self.mid_note if mid_stream else self.before_note
        text = _describe(exc)
        return TransportError(self.mid if mid_stream else self.before, f"{note}: {text}" if note else text)


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    return f"{name}: {exc}" if str(exc) else name


_BODY_BROKEN = "response body broken"
_CLOSED_BEFORE = "server closed the connection before responding"
_CLOSED_MID = "server closed the connection mid-stream"
#: A connection error after the whole request body was written (T_submit, App. B.1.1): the request
#: reached the server, which dropped it before answering (a crash, a reset): protocol, not connect.
CLOSED_AFTER_SEND = "server closed the connection after the request was sent, before responding"
ERROR_MAP: dict[type[BaseException], ErrorRule] = {}  # filled on first use (lazy library imports)
#: Exceptions that wrap another library's (httpx-aiohttp raises httpx errors ``from`` aiohttp's).
_WRAPPERS: list[type[BaseException]] = []


def _load_error_map() -> dict[type[BaseException], ErrorRule]:
    import aiohttp
    import httpx

    _WRAPPERS[:] = [httpx.HTTPError]
    t, c, p = ErrorType.TIMEOUT, ErrorType.CONNECT, ErrorType.PROTOCOL
    return {
        # any transport (asyncio.TimeoutError is TimeoutError from Python 3.11 on)
        asyncio.TimeoutError: ErrorRule(t, t),
        TimeoutError: ErrorRule(t, t),
        ConnectionError: ErrorRule(c, p),
        # aiohttp (also what httpx-aiohttp wraps)
        aiohttp.ServerTimeoutError: ErrorRule(t, t),
        aiohttp.ClientConnectorError: ErrorRule(c, c),  # includes TLS handshake / certificate errors
        aiohttp.ClientPayloadError: ErrorRule(p, p, _BODY_BROKEN, _BODY_BROKEN),
        aiohttp.ServerDisconnectedError: ErrorRule(p, p, _CLOSED_BEFORE, _CLOSED_MID),
        aiohttp.ClientOSError: ErrorRule(c, p),
        aiohttp.ClientResponseError: ErrorRule(p, p),  # malformed HTTP response
        aiohttp.ClientError: ErrorRule(c, p),
        # httpx default transport
        httpx.TimeoutException: ErrorRule(t, t),
        httpx.ConnectError: ErrorRule(c, c),
        httpx.RemoteProtocolError: ErrorRule(p, p, _CLOSED_BEFORE, _BODY_BROKEN),
        httpx.ReadError: ErrorRule(p, p, _CLOSED_BEFORE, _BODY_BROKEN),
        httpx.DecodingError: ErrorRule(p, p, "", _BODY_BROKEN),
        httpx.TransportError: ErrorRule(c, p),
    }


_T, _C, _P = ErrorType.TIMEOUT, ErrorType.CONNECT, ErrorType.PROTOCOL
_SERVER, _CLIENT = ErrorType.HTTP_5XX, ErrorType.HTTP_4XX
#: A gRPC status (by its code's name) -> how it is classified before the first response message and
#: after it (the gRPC transport, App. B.1.2), in the vocabulary of the HTTP statuses it corresponds to
#: (the gRPC-HTTP mapping of gRPC's ``statuscodes.md``): the server's own failures are ``http_5xx``, the
#: request's ``http_4xx``. UNAVAILABLE before any message is the server not reachable or not taking
#: requests (``connect``); after one, the stream broke (``protocol``, as a connection closed
#: mid-stream). ABORTED is the server aborting the request: a failure of the SUT (``http_5xx``), not the
#: harness's ``cancelled``, which is kept for CANCELLED (the call cancelled). A code not listed is a
#: ``protocol`` error.
GRPC_STATUS_MAP: dict[str, ErrorRule] = {
    "DEADLINE_EXCEEDED": ErrorRule(_T, _T, "gRPC deadline exceeded", "gRPC deadline exceeded mid-stream"),
    "UNAVAILABLE": ErrorRule(_C, _P, "gRPC server unavailable", _CLOSED_MID),
    "RESOURCE_EXHAUSTED": ErrorRule(ErrorType.RATE_LIMITED, ErrorType.RATE_LIMITED),
    "CANCELLED": ErrorRule(ErrorType.CANCELLED, ErrorType.CANCELLED),
    "INTERNAL": ErrorRule(_SERVER, _SERVER),
    "UNKNOWN": ErrorRule(_SERVER, _SERVER),
    "DATA_LOSS": ErrorRule(_SERVER, _SERVER),
    "ABORTED": ErrorRule(_SERVER, _SERVER, "the server aborted the request", "the server aborted the request"),
    "UNIMPLEMENTED": ErrorRule(_SERVER, _SERVER),
    "INVALID_ARGUMENT": ErrorRule(_CLIENT, _CLIENT),
    "FAILED_PRECONDITION": ErrorRule(_CLIENT, _CLIENT),
    "OUT_OF_RANGE": ErrorRule(_CLIENT, _CLIENT),
    "NOT_FOUND": ErrorRule(_CLIENT, _CLIENT),
    "ALREADY_EXISTS": ErrorRule(_CLIENT, _CLIENT),
    "PERMISSION_DENIED": ErrorRule(_CLIENT, _CLIENT),
    "UNAUTHENTICATED": ErrorRule(_CLIENT, _CLIENT),
}


def classify_grpc_status(code: str, details: str, *, mid_stream: bool) -> TransportError:
    """A gRPC call's status (``code``: the name of its ``grpc.StatusCode``) -> a classified
    :class:`TransportError` by :data:`GRPC_STATUS_MAP`; ``mid_stream``: a response message had arrived."""
    rule = GRPC_STATUS_MAP.get(code)
    text = f"gRPC {code}: {details}" if details else f"gRPC {code}"
    if rule is None:
        return TransportError(ErrorType.PROTOCOL, f"unexpected gRPC status {text}")
    note = rule.mid_note if mid_stream else rule.before_note
    return TransportError(rule.mid if mid_stream else rule.before, f"{note}: {text}" if note else text)


def _lookup(exc: BaseException) -> ErrorRule | None:
    for cls in type(exc).__mro__:  # most specific first
        rule = ERROR_MAP.get(cls)
        if rule is not None:
            return rule
    return None


def classify_transport_error(exc: BaseException, *, mid_stream: bool) -> TransportError:
    """``exc`` from an HTTP library -> a classified :class:`TransportError` by :data:`ERROR_MAP`.

    httpx-aiohttp re-raises aiohttp errors as loosely chosen httpx errors (a dropped connection
    becomes ``ConnectTimeout``) ``from`` the original; when the direct cause has its own entry,
    the cause is classified instead.
    """
    if not ERROR_MAP:
        ERROR_MAP.update(_load_error_map())
    cause = exc.__cause__
    if cause is not None and isinstance(exc, tuple(_WRAPPERS)):
        rule = _lookup(cause)
        if rule is not None:
            return rule.classify(cause, mid_stream=mid_stream)
    rule = _lookup(exc)
    if rule is None:
        return TransportError(ErrorType.PROTOCOL, f"unexpected client error {_describe(exc)}")
    return rule.classify(exc, mid_stream=mid_stream)


class map_transport_errors:  # lower case: used like httpx's map_httpcore_exceptions()
    """Context manager: an ``Exception`` raised inside becomes :func:`classify_transport_error`'s
    :class:`TransportError`, chained ``from`` the original. Cancellation (a ``BaseException``)
    and an already classified :class:`TransportError` pass through. Stateless, so one instance
    per phase is shared (:data:`BEFORE_RESPONSE`, :data:`MID_STREAM`) and the hot read path
    allocates nothing."""

    __slots__ = ("mid_stream",)

    def __init__(self, *, mid_stream: bool) -> None:
        self.mid_stream = mid_stream

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, TransportError):
            return False
        raise classify_transport_error(exc, mid_stream=self.mid_stream) from exc


#: Around sending the request and waiting for the response headers.
BEFORE_RESPONSE = map_transport_errors(mid_stream=False)
#: Around each read of the response body.
MID_STREAM = map_transport_errors(mid_stream=True)
