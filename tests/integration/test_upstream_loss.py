"""Losing the upstream: the client gets an ErrorResponse with a SQLSTATE and a clean close, and
other clients are unaffected. Also: an unreachable upstream, and the connection limit."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.fix_pg import Postgres, free_port
from tests.fix_proxy import RunningProxy


class Link:
    """A TCP relay between pgnl and PostgreSQL whose connections can be cut at will."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Sever every relayed connection, as a failed network would."""
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.sockets.clear()

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture
def link(postgres: Postgres) -> Iterator[Link]:
    relay = Link(postgres.port)
    yield relay
    relay.close()


def test_backend_terminated_mid_query(proxy: RunningProxy, postgres: Postgres) -> None:
    with (
        psycopg.connect(proxy.dsn(), autocommit=True) as victim,
        psycopg.connect(proxy.dsn(), autocommit=True) as bystander,
        postgres.connect() as admin,
    ):
        pid = victim.info.backend_pid
        threading.Timer(
            0.3, lambda: admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        ).start()
        with pytest.raises(psycopg.OperationalError) as caught:
            victim.execute("SELECT pg_sleep(10)")
        assert caught.value.sqlstate == "57P01"  # PostgreSQL's own FATAL, relayed as it came
        assert victim.closed or victim.broken
        assert bystander.execute("SELECT 1").fetchone() == (1,)
    assert proxy.alive() and not proxy.internal_errors()


def test_link_lost_mid_query_gives_08006(
    make_proxy: Callable[..., RunningProxy], link: Link
) -> None:
    pgnl = make_proxy(upstream_port=link.port)
    with psycopg.connect(pgnl.dsn(), autocommit=True) as victim:
        threading.Timer(0.3, link.cut).start()
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError) as caught:
            victim.execute("SELECT pg_sleep(10)")
        assert time.monotonic() - started < 5
        assert caught.value.sqlstate == "08006"
        assert "upstream server closed the connection unexpectedly" in str(caught.value)
    # a new connection through the same proxy works again
    with psycopg.connect(pgnl.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert pgnl.alive() and not pgnl.internal_errors()


def test_link_lost_leaves_other_proxy_clients_alone(
    proxy: RunningProxy, make_proxy: Callable[..., RunningProxy], link: Link
) -> None:
    pgnl = make_proxy(upstream_port=link.port)
    with (
        psycopg.connect(proxy.dsn(), autocommit=True) as other,
        psycopg.connect(pgnl.dsn(), autocommit=True) as victim,
    ):
        link.cut()
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert other.execute("SELECT 1").fetchone() == (1,)


def test_unreachable_upstream(make_proxy: Callable[..., RunningProxy]) -> None:
    dead = free_port()
    pgnl = make_proxy(upstream_port=dead)
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(pgnl.dsn())
    message = str(caught.value)
    assert f"could not connect to the upstream server at 127.0.0.1:{dead}" in message
    assert pgnl.alive()


def test_connection_limit(make_proxy: Callable[..., RunningProxy]) -> None:
    pgnl = make_proxy("--max-client-connections", "2")
    with psycopg.connect(pgnl.dsn()) as one, psycopg.connect(pgnl.dsn()) as two:
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(pgnl.dsn())
        assert one.execute("SELECT 1").fetchone() == two.execute("SELECT 1").fetchone()
    # the slots free up as soon as the proxy sees those clients go
    deadline = time.monotonic() + 5
    while True:
        try:
            with psycopg.connect(pgnl.dsn()) as again:
                assert again.execute("SELECT 1").fetchone() == (1,)
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
