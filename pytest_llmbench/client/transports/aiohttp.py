"""Plain aiohttp, the fastest transport measured (bench/loadgen.py); the only one with HTTP-trace
hooks (:mod:`.httptrace`, ``ClientConfig.http_trace``).

An untraced POST takes a lean path (issue 38: aiohttp's request path cost 50–100 µs of every due
send's first step): aiohttp's own connection pool (``connector.connect``: keep-alive, DNS, connect,
TLS, limits) and its own response parser and payload stream, but the request head serialised once
per (URL, headers) instead of a ``ClientRequest`` built, checked and serialised per request, and the
body written in the sending task's own step (no body-writer task). T_submit is what App. B.1.1
asks and what :func:`.base.stamped_body` gives the other paths: the head and all but the last body
byte written, the stamp, the last byte written. Where aiohttp's internals are not as expected (an
aiohttp other than the one measured), or a URL carries credentials, it takes ``session.post``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...common.records import ErrorType
from ..errors import BEFORE_RESPONSE, MID_STREAM, TransportError
from . import httptrace
from .base import ReadBody, Response, SubmitStamp, body_headers, body_writes, stamped_body

if TYPE_CHECKING:
    from ..config import ClientConfig

__all__ = ["AiohttpTransport"]

_clock = time.perf_counter_ns


class _AiohttpResponse(ReadBody):
    """A response body read from aiohttp's payload stream. ``release`` is aiohttp's response's, or on
    the lean path the connection's: back to the pool at the body's end (as aiohttp's own response
    does), closed instead when the body was not read to its end."""

    __slots__ = ("_release", "_content", "status", "content_type")

    def __init__(self, content: Any, status: int, content_type: str, release: Callable[[], Any]) -> None:
        self._content = content
        self.status = status
        self.content_type = content_type
        self._release = release

    @classmethod
    def of(cls, resp: Any) -> _AiohttpResponse:
        """aiohttp's own response (``session.post``)."""
        return cls(resp.content, resp.status, resp.headers.get("Content-Type", ""), resp.release)

    async def read_chunk(self) -> bytes:
        with MID_STREAM:
            return await self._content.readany()

    async def release(self) -> None:
        self._release()


class _Route:
    """What a POST to one URL with one headers mapping needs that does not depend on its body: the
    template request aiohttp's pool keys connections by, and the request head up to the
    ``Content-Length`` value, serialised once (aiohttp's own auto headers included: Host, Accept,
    Accept-Encoding, User-Agent)."""

    __slots__ = ("url", "headers", "request", "head")

    def __init__(self, url: str, headers: Mapping[str, str], request: Any, head: bytes) -> None:
        self.url = url
        self.headers = headers  # the caller's mapping (LLMClient keeps one for its life); identity is the key
        self.request = request
        self.head = head


def _lean_supported() -> bool:
    """aiohttp's internals the lean path drives are there (written against aiohttp 3.14)."""
    try:
        from aiohttp.client_proto import ResponseHandler
        from aiohttp.client_reqrep import ClientRequest
        from aiohttp.connector import BaseConnector
        from aiohttp.helpers import TimerNoop  # noqa: F401
        from aiohttp.http_exceptions import HttpProcessingError  # noqa: F401
    except ImportError:
        return False
    return all(hasattr(ResponseHandler, a) for a in ("set_response_params", "read", "start_timeout", "_drain_helper",
                                                       "writing_paused")) \
        and hasattr(BaseConnector, "connect") and hasattr(ClientRequest, "connection_key")


def _write_all_but_last(transport: Any, head: bytes, body: bytes) -> None:
    """The request head (``head`` ends at ``Content-Length: ``), the body's length, and all but the
    last byte of ``body``, in one write where the body is short (App. B.1.1: T_submit follows)."""
    head += b"%d\r\n\r\n" % len(body)
    if len(body) <= 1:
        transport.write(head)
    elif len(body) < 65536:
        transport.write(head + body[:-1])
    else:  # no copy of a long body into the head
        transport.write(head)
        transport.write(memoryview(body)[:-1])


def _write_last(transport: Any, body: bytes, submit: SubmitStamp) -> None:
    """T_submit (App. B.1.1), then the last byte of ``body``: the stamp is taken as it is sent."""
    submit.ns = _clock()
    if body:
        transport.write(body[-1:])


class AiohttpTransport:
    """Plain aiohttp: one session, one connector sized to the load; untraced POSTs on the lean path."""

    name = "aiohttp"

    def __init__(self, config: ClientConfig, max_connections: int | None) -> None:
        import aiohttp

        make = httptrace.make_connector if config.http_trace else aiohttp.TCPConnector
        connector = make(
            limit=max_connections or 0,
            limit_per_host=0,
            force_close=not config.reuse_connections,
            ssl=bool(config.verify_tls),  # True: verify certificates (the default)
            ttl_dns_cache=300,
        )
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.connect_timeout_s, sock_read=config.read_timeout_s
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            read_bufsize=config.read_bufsize,
            max_line_size=config.read_bufsize,
            max_field_size=config.read_bufsize,
        )
        self._connector = connector
        self._lean = not config.http_trace and _lean_supported()
        self._route: _Route | None = None
        self._params: dict[str, Any] = {}
        self._bad_response: type[Exception] = TransportError  # aiohttp's HttpProcessingError on the lean path
        if self._lean:  # what session.post gives the protocol for a response (client.py _request)
            from aiohttp.client_proto import ResponseHandler
            from aiohttp.helpers import TimerNoop
            from aiohttp.http_exceptions import HttpProcessingError

            self._bad_response = HttpProcessingError

            wanted = dict(timer=TimerNoop(), skip_payload=False, read_until_eof=True, auto_decompress=True,
                          read_timeout=config.read_timeout_s, read_bufsize=config.read_bufsize,
                          timeout_ceil_threshold=getattr(connector, "_timeout_ceil_threshold", 5),
                          max_line_size=config.read_bufsize, max_field_size=config.read_bufsize)
            accepted = inspect.signature(ResponseHandler.set_response_params).parameters
            self._params = {k: v for k, v in wanted.items() if k in accepted}

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], submit: SubmitStamp,
                   trace: httptrace.HttpTraceData | None = None) -> Response:
        if trace is None:
            if self._lean:
                route = self._route
                if route is None or route.headers is not headers or route.url != url:
                    route = self._make_route(url, headers)
                if route is not None:
                    return await self._post_lean(route, body, submit)
            with BEFORE_RESPONSE:
                resp = await self._session.post(url, data=stamped_body(body, submit),
                                                headers=body_headers(headers, body))
            return _AiohttpResponse.of(resp)
        token = httptrace.CURRENT_TRACE.set(trace)  # the connector's hooks stamp into it
        try:
            with BEFORE_RESPONSE:
                resp = await self._session.post(url, data=stamped_body(body, submit),
                                                headers=body_headers(headers, body))
        except BaseException:  # before the response headers (cancellation included)
            trace["exception_ns"] = time.perf_counter_ns()
            if submit.ns:  # the body went out whole (one cut off before its last byte counts none)
                httptrace.note_request_sent(trace, submit.ns, len(body), body_writes(body))
            raise
        finally:
            httptrace.CURRENT_TRACE.reset(token)
        httptrace.note_response(trace, resp)
        # T_submit; the answer when it came before the last body byte was pulled (as record.sent_ns)
        httptrace.note_request_sent(trace, submit.ns or trace["response_headers_ns"], len(body), body_writes(body))
        return httptrace.TracedResponse(_AiohttpResponse.of(resp), trace)

    def _make_route(self, url: str, headers: Mapping[str, str]) -> _Route | None:
        """The template request and the serialised head for ``url`` and ``headers`` (aiohttp's own
        ``ClientRequest`` builds the headers it would send: the same request on the wire); None (and
        ``session.post`` from then on) where the lean path does not apply."""
        import asyncio

        from aiohttp import hdrs
        from aiohttp.client_reqrep import ClientRequest
        from yarl import URL

        try:
            u = URL(url)
            if u.user is not None or u.password is not None or u.scheme not in ("http", "https") or not u.raw_host:
                raise ValueError("not a plain http(s) URL")
            req = ClientRequest("POST", u, headers=dict(headers), loop=asyncio.get_running_loop(),
                                session=self._session, ssl=True)
        except (TypeError, ValueError, AttributeError):
            self._lean = False
            return None
        lines = [f"POST {req.url.raw_path_qs} HTTP/1.1"]
        for k, v in req.headers.items():
            if k in (hdrs.CONTENT_LENGTH, hdrs.TRANSFER_ENCODING):
                continue
            if "\r" in k or "\n" in k or "\r" in v or "\n" in v:  # session.post rejects it, as before
                self._lean = False
                return None
            lines.append(f"{k}: {v}")
        lines.append("Content-Length: ")
        route = self._route = _Route(url, headers, req, "\r\n".join(lines).encode("utf-8"))
        return route

    async def _post_lean(self, route: _Route, body: bytes, submit: SubmitStamp) -> Response:
        """Connection from aiohttp's pool, head and body written here, T_submit before the last
        byte (App. B.1.1), then aiohttp's parser's response message and payload stream."""
        with BEFORE_RESPONSE:
            conn = await self._connector.connect(route.request, [], self._timeout)
            try:
                proto = conn.protocol
                proto.set_response_params(**self._params)
                transport = proto.transport
                if transport is None or transport.is_closing():
                    raise ConnectionResetError("connection closed before the request was written")
                _write_all_but_last(transport, route.head, body)
                if proto.writing_paused:  # above the transport's high-water mark: wait as aiohttp does
                    await proto._drain_helper()
                _write_last(transport, body, submit)
                proto.start_timeout()  # sock_read from here (aiohttp: after the body is written)
                while True:
                    message, payload = await proto.read()
                    if message.code < 100 or message.code > 199 or message.code == 101:
                        break  # an interim 1xx answer is skipped, as aiohttp does
            except self._bad_response as exc:
                conn.close()
                raise TransportError(ErrorType.PROTOCOL, f"malformed HTTP response: {exc.message}") from exc
            except BaseException:
                conn.close()
                raise
        payload.on_eof(conn.release)  # back to the pool at the body's end (closed if it cannot be reused)
        return _AiohttpResponse(payload, message.code, message.headers.get("Content-Type", ""), conn.release)

    async def get(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with BEFORE_RESPONSE:
            async with self._session.get(url, headers=headers) as resp:
                return resp.status, await resp.read()

    async def aclose(self) -> None:
        await self._session.close()
