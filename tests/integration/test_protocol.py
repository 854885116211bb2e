"""Protocol-version negotiation through the proxy: 3.0, 3.2 (longer cancel keys), and a future
minor version that the server answers with NegotiateProtocolVersion."""

from __future__ import annotations

import socket
import struct
import threading
import time

import psycopg
import pytest

from proxy.wire.messages import StartupMessage, split_messages
from tests.fix_pg import TEST_DB
from tests.fix_proxy import RunningProxy


def read_until_ready(sock: socket.socket) -> list[tuple[bytes, bytes]]:
    data = b""
    while True:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before ReadyForQuery: {data!r}"
        data += chunk
        messages = split_messages(data)
        if messages and messages[-1][0] in (b"Z", b"E"):
            return messages


@pytest.mark.parametrize("version", ["3.0", "3.2"])
def test_cancel_with_each_protocol_version(proxy: RunningProxy, version: str) -> None:
    dsn = proxy.dsn(min_protocol_version=version, max_protocol_version=version)
    with psycopg.connect(dsn, autocommit=True) as conn:
        timer = threading.Timer(0.3, conn.cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(10)")
        timer.join()
        assert time.monotonic() - started < 1.3
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_future_minor_version_is_negotiated_by_the_server(proxy: RunningProxy) -> None:
    startup = StartupMessage((3 << 16) | 9, {"user": "trust_user", "database": TEST_DB})
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as sock:
        sock.sendall(startup.encode())
        messages = read_until_ready(sock)
        kinds = [kind for kind, _ in messages]
        assert kinds[0] == b"v", kinds  # NegotiateProtocolVersion, relayed from PostgreSQL 18
        newest_minor = struct.unpack("!i", messages[0][1][:4])[0] & 0xFFFF
        assert newest_minor == 2
        assert kinds[-1] == b"Z" and b"K" in kinds
        key = next(body for kind, body in messages if kind == b"K")
        assert len(key) == 4 + 32  # protocol 3.2 keys: the proxy's key is as long as the server's
