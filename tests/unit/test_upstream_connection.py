"""proxy.server.UpstreamConnection: what PostgreSQL sent before it closed reaches the session,
even when a write to it fails before the event loop has read it (libpq does the same)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
import uvloop

from proxy.server import UpstreamConnection
from proxy.wire import errors

FATAL = errors.protocol_violation("invalid frontend message type 28").encode()


class _Session:
    """What the upstream side calls on its session, kept in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []
        self.closed = asyncio.Event()

    def server_data(self, data: bytes) -> None:
        self.events.append(("data", data))

    def upstream_closed(self) -> None:
        self.events.append(("closed", b""))
        self.closed.set()


class _Client:
    def __init__(self) -> None:
        self.session = _Session()
        self.send_server: Callable[[bytes], None] = lambda data: None


async def _write_after_the_server_closed(blocked_s: float) -> list[tuple[str, bytes]]:
    loop = asyncio.get_running_loop()
    client = _Client()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host, port = listener.getsockname()[:2]
        await loop.create_connection(lambda: UpstreamConnection(cast(Any, client)), host, port)
        server, _ = listener.accept()
    server.sendall(FATAL)
    server.close()
    # The loop is busy elsewhere (time.sleep blocks it): it reads nothing meanwhile, as when a
    # client's data is handled first. The first write draws the server's reset, the second fails.
    time.sleep(blocked_s)  # noqa: ASYNC251 (blocking the loop is the point)
    client.send_server(b"Q")
    time.sleep(blocked_s)  # noqa: ASYNC251 (blocking the loop is the point)
    client.send_server(b"\0\0\0\4")
    await asyncio.wait_for(client.session.closed.wait(), 10)
    return client.session.events


@pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop])
def test_error_sent_before_a_failed_write_is_passed_on(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    loop = new_loop()
    try:
        events = loop.run_until_complete(_write_after_the_server_closed(0.05))
    finally:
        loop.close()
    assert b"".join(data for kind, data in events if kind == "data") == FATAL
    assert events[-1] == ("closed", b"")
