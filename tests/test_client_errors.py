"""The client's one transport error map (``client.ERROR_MAP``), per entry and per transport.

Expected classifications are written out here, not read from the table, so a changed entry fails.
Each transport is tested in-process: its HTTP library object is replaced by one that raises the
exception (aiohttp: a fake pool and protocol for its lean path, a fake session for its own request
path; httpx: ``httpx.MockTransport``; httpx-aiohttp: the same, with
the exception passed through httpx-aiohttp's own ``map_aiohttp_exceptions`` as its transport does).
Real sockets breaking are covered by tests/test_faults.py and tests/test_client.py.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
import httpx
import pytest
import yarl
from httpx_aiohttp.transport import map_aiohttp_exceptions
from multidict import CIMultiDict, CIMultiDictProxy

from pytest_llmbench import client as client_mod
from pytest_llmbench.client import (
    ERROR_MAP,
    ClientConfig,
    LLMClient,
    SubmitStamp,
    TransportError,
    classify_transport_error,
    make_transport,
    map_transport_errors,
)
from pytest_llmbench.common.records import ErrorType, RequestSpec

T, C, P = ErrorType.TIMEOUT, ErrorType.CONNECT, ErrorType.PROTOCOL
URL = "http://127.0.0.1:9/v1"


@dataclass(frozen=True)
class Case:
    """One exception and its expected class before the response and mid-stream."""

    make: Callable[[], BaseException]
    before: ErrorType
    mid: ErrorType
    before_text: str = ""
    mid_text: str = ""


def _connector_error() -> aiohttp.ClientConnectorError:
    key = types.SimpleNamespace(host="127.0.0.1", port=9, ssl=True)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))  # type: ignore[arg-type]


def _response_error() -> aiohttp.ClientResponseError:
    info = aiohttp.RequestInfo(yarl.URL(URL), "POST", CIMultiDictProxy(CIMultiDict()), yarl.URL(URL))
    return aiohttp.ClientResponseError(info, (), status=400, message="Bad status line")


# One case per ERROR_MAP entry (the key is the exception's exact class).
GENERIC: dict[type[BaseException], Case] = {
    TimeoutError: Case(lambda: TimeoutError("timed out"), T, T),
    asyncio.TimeoutError: Case(lambda: asyncio.TimeoutError(), T, T),
    ConnectionError: Case(lambda: ConnectionError("gone"), C, P),
}
AIOHTTP: dict[type[BaseException], Case] = {
    aiohttp.ServerTimeoutError: Case(lambda: aiohttp.ServerTimeoutError("read"), T, T),
    aiohttp.ClientConnectorError: Case(_connector_error, C, C, "Cannot connect", "Cannot connect"),
    aiohttp.ClientPayloadError: Case(lambda: aiohttp.ClientPayloadError("short"), P, P,
                                     "response body broken", "response body broken"),
    aiohttp.ServerDisconnectedError: Case(aiohttp.ServerDisconnectedError, P, P,
                                          "closed the connection before responding",
                                          "closed the connection mid-stream"),
    aiohttp.ClientOSError: Case(lambda: aiohttp.ClientOSError(104, "reset"), C, P),
    aiohttp.ClientResponseError: Case(_response_error, P, P, "Bad status line", "Bad status line"),
    aiohttp.ClientError: Case(lambda: aiohttp.ClientError("other"), C, P),
}
HTTPX: dict[type[BaseException], Case] = {
    httpx.TimeoutException: Case(lambda: httpx.TimeoutException("slow"), T, T),
    httpx.ConnectError: Case(lambda: httpx.ConnectError("refused"), C, C),
    httpx.RemoteProtocolError: Case(lambda: httpx.RemoteProtocolError("eof"), P, P,
                                    "closed the connection before responding", "response body broken"),
    httpx.ReadError: Case(lambda: httpx.ReadError("rst"), P, P, "ReadError: rst", "response body broken"),
    httpx.DecodingError: Case(lambda: httpx.DecodingError("gzip"), P, P, "DecodingError", "response body broken"),
    httpx.TransportError: Case(lambda: httpx.TransportError("other"), C, P),
}
# Subclasses with no entry of their own: the most specific entry in their MRO applies.
SUBCLASSES: dict[str, Case] = {
    "aiohttp.SocketTimeoutError": Case(lambda: aiohttp.SocketTimeoutError("sock"), T, T),
    "aiohttp.ClientConnectionResetError": Case(lambda: aiohttp.ClientConnectionResetError("rst"), C, P),
    "ConnectionResetError": Case(lambda: ConnectionResetError(104, "reset"), C, P),
    "httpx.ReadTimeout": Case(lambda: httpx.ReadTimeout("read"), T, T),
    "httpx.WriteError": Case(lambda: httpx.WriteError("pipe"), C, P),
    "httpx.LocalProtocolError": Case(lambda: httpx.LocalProtocolError("bad"), C, P),
}
UNMAPPED = Case(lambda: RuntimeError("bug"), P, P, "unexpected client error RuntimeError: bug",
                "unexpected client error RuntimeError: bug")
ENTRIES = {**GENERIC, **AIOHTTP, **HTTPX}


def _phase_id(mid: bool) -> str:
    return "mid-stream" if mid else "before"


def test_every_entry_has_a_case() -> None:
    classify_transport_error(RuntimeError(), mid_stream=False)  # loads the lazy table
    assert set(ERROR_MAP) == set(ENTRIES)


@pytest.mark.parametrize("mid", [False, True], ids=_phase_id)
@pytest.mark.parametrize(
    "case", [*ENTRIES.values(), *SUBCLASSES.values(), UNMAPPED],
    ids=[*(c.__module__.split(".")[0] + "." + c.__name__ for c in ENTRIES), *SUBCLASSES, "unmapped"],
)
def test_map_entry_raises_the_mapped_type_chained(case: Case, mid: bool) -> None:
    original = case.make()
    with pytest.raises(TransportError) as info, map_transport_errors(mid_stream=mid):
        raise original
    err = info.value
    assert err.error_type is (case.mid if mid else case.before)
    assert err.__cause__ is original
    assert (case.mid_text if mid else case.before_text) in err.message
    assert type(original).__name__ in err.message


def test_cancellation_and_classified_errors_pass_through() -> None:
    with pytest.raises(asyncio.CancelledError), map_transport_errors(mid_stream=True):
        raise asyncio.CancelledError
    already = TransportError(ErrorType.PARSE, "x")
    with pytest.raises(TransportError) as info, map_transport_errors(mid_stream=False):
        raise already
    assert info.value is already and info.value.__cause__ is None


# ------------------------------------ per transport ------------------------------------------
FIRST = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'


class _FakeAiohttpSession:
    """The part of ``aiohttp.ClientSession`` AiohttpTransport uses; fails where told."""

    def __init__(self, exc: BaseException, mid: bool) -> None:
        self.exc, self.mid = exc, mid

    async def post(self, url: str, **_: object) -> object:
        if not self.mid:
            raise self.exc
        reads = iter([FIRST])

        async def readany() -> bytes:
            for b in reads:
                return b
            raise self.exc

        return types.SimpleNamespace(status=200, headers={"Content-Type": "text/event-stream"},
                                     content=types.SimpleNamespace(readany=readany), release=lambda: None)

    async def close(self) -> None:
        pass


class _FakeAiohttpPool:
    """The part of aiohttp's connector, connection and protocol AiohttpTransport's lean path uses (a
    pooled connection, its protocol's response message and payload stream); fails where told: the
    connection (before the response) or the second read of the body (mid-stream)."""

    def __init__(self, exc: BaseException, mid: bool) -> None:
        self.exc, self.mid = exc, mid
        self.transport = types.SimpleNamespace(write=lambda data: None, is_closing=lambda: False)
        self.protocol, self.writing_paused = self, False

    async def connect(self, req: object, traces: object, timeout: object) -> object:
        if not self.mid:
            raise self.exc
        return self

    def set_response_params(self, **_: object) -> None:
        pass

    def start_timeout(self) -> None:
        pass

    async def read(self) -> tuple[object, object]:
        payload = await _FakeAiohttpSession(self.exc, True).post("")
        return types.SimpleNamespace(code=200, headers=payload.headers), types.SimpleNamespace(  # type: ignore[attr-defined]
            readany=payload.content.readany, on_eof=lambda callback: None)  # type: ignore[attr-defined]

    def close(self) -> None:
        pass

    def release(self) -> None:
        pass


class _FailingStream(httpx.AsyncByteStream):
    def __init__(self, exc: BaseException, wrap: bool) -> None:
        self.exc, self.wrap = exc, wrap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield FIRST
        if self.wrap:
            with map_aiohttp_exceptions():
                raise self.exc
        raise self.exc


def _httpx_client(exc: BaseException, mid: bool, wrap: bool) -> httpx.AsyncClient:
    """httpx with a MockTransport failing like the real one; ``wrap``: as httpx-aiohttp does."""

    async def handler(request: httpx.Request) -> httpx.Response:
        if mid:
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  stream=_FailingStream(exc, wrap))
        if wrap:
            with map_aiohttp_exceptions():
                raise exc
        raise exc

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def _failing_transport(name: str, exc: BaseException, mid: bool) -> client_mod.Transport:
    t = make_transport(ClientConfig(base_url=URL, model="m", transport=name.removesuffix("-session")), None)
    if name == "aiohttp":  # the lean path (an untraced request's): aiohttp's pool and protocol
        assert t._lean  # type: ignore[attr-defined]
        t._connector = _FakeAiohttpPool(exc, mid)  # type: ignore[attr-defined]
    elif name == "aiohttp-session":  # aiohttp's own request path (a traced request's)
        await t._session.close()  # type: ignore[attr-defined]
        t._session = _FakeAiohttpSession(exc, mid)  # type: ignore[attr-defined]
        t._lean = False  # type: ignore[attr-defined]
    else:
        await t._client.aclose()  # type: ignore[attr-defined]
        t._client = _httpx_client(exc, mid, wrap=name == "httpx-aiohttp")  # type: ignore[attr-defined]
    return t


# What each transport's library raises: aiohttp errors (httpx-aiohttp wraps them in httpx errors,
# classified by their aiohttp cause), httpx errors; any of them may see a bare OSError/timeout.
PER_TRANSPORT = [
    (name, cid, case)
    for name, cases in (("aiohttp", {**AIOHTTP, **GENERIC}), ("aiohttp-session", {**AIOHTTP, **GENERIC}),
                        ("httpx-aiohttp", {**AIOHTTP, **GENERIC}),
                        ("httpx", {**HTTPX, **GENERIC}))
    for cid, case in [*((k.__name__, c) for k, c in cases.items()), ("unmapped", UNMAPPED)]
]


@pytest.mark.parametrize("mid", [False, True], ids=_phase_id)
@pytest.mark.parametrize("transport,exc_name,case", PER_TRANSPORT,
                         ids=[f"{t}-{n}" for t, n, _ in PER_TRANSPORT])
async def test_transport_maps_through_the_table(transport: str, exc_name: str, case: Case, mid: bool) -> None:
    original = case.make()
    t = await _failing_transport(transport, original, mid)
    try:
        with pytest.raises(TransportError) as info:
            resp = await t.post(URL, b"{}", {}, SubmitStamp())
            assert mid, "the post should have failed"
            assert await resp.read_chunk() == FIRST
            await resp.read_chunk()
    finally:
        await t.aclose()
    err = info.value
    assert err.error_type is (case.mid if mid else case.before), err.message
    assert (case.mid_text if mid else case.before_text) in err.message
    chain = [err.__cause__, getattr(err.__cause__, "__cause__", None)]
    assert original in chain  # chained, directly or through httpx-aiohttp's wrapper


@pytest.mark.parametrize("transport", ["aiohttp", "aiohttp-session", "httpx-aiohttp", "httpx"])
async def test_send_records_the_mapped_type(transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``LLMClient.send``: a connection dropped mid-stream keeps the chunk already timed."""
    original = aiohttp.ServerDisconnectedError() if transport != "httpx" else httpx.RemoteProtocolError("eof")
    t = await _failing_transport(transport, original, mid=True)
    monkeypatch.setattr(client_mod, "make_transport", lambda config, n: t)
    async with LLMClient(ClientConfig(base_url=URL, model="m", transport=transport.removesuffix("-session"),
                                      tokenizer=None)) as c:
        rec = await c.send(RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=4, prompt_text="x"))
    assert rec.error_type is ErrorType.PROTOCOL
    assert rec.chunk_text == ["hi"] and rec.first_token_ns == rec.chunk_ns[0]
