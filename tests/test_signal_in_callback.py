"""A SIGTERM that arrives while the event loop runs a transport's callback still interrupts the run (seen in
CI: raised inside aiohttp's ``data_received``, uvloop logged it as a fatal transport error and the run went
on to its end; session.TerminationSignals hands it to the loop instead)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import uvloop

from pytest_llmbench.session import TerminationSignals


class _KillOnData(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:  # the signal lands inside the transport's callback
        os.kill(os.getpid(), signal.SIGTERM)


async def _serve_and_read() -> None:
    class _Send(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transport.write(b"x")  # type: ignore[attr-defined]

    server = await asyncio.get_running_loop().create_server(_Send, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await asyncio.get_running_loop().create_connection(_KillOnData, "127.0.0.1", port)
    await asyncio.sleep(2)  # the run would go on to its end if the interruption were swallowed
    server.close()


@pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])
def test_sigterm_inside_a_transport_callback_interrupts(run) -> None:  # type: ignore[no-untyped-def]
    guard = TerminationSignals()
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a CI runner's background job has it
    guard.install()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            run(_serve_and_read())
    finally:
        guard.restore()
        signal.signal(signal.SIGINT, previous_int)
    assert guard.received == "SIGTERM"
