"""The asyncio driver: the listener and the two socket pumps. The only module that touches the
clients' and servers' sockets (`proxy.metrics` serves GET /metrics on a listener of its own).

Each accepted client gets a `ClientConnection` (an asyncio Protocol) that owns a `Session` and,
once the client has sent its StartupMessage, one `UpstreamConnection` to the upstream server
(session mode: one upstream connection a client connection, for its whole life). Bytes go from
`data_received` straight into the session, and out through `transport.write`; the protocol
callbacks are the whole hot path. Backpressure: when one side's send buffer fills, reading from
the other side pauses. Questions (`-- nl: ...`) are answered off the loop, by the proxy's
`Answerer` (worker threads); the sessions keep flowing meanwhile.

Between directives the native relay (`proxy.native_relay`) takes a connection whenever its
session is in plain pass-through: both transports pause, a C loop relays duplicates of their
sockets, and hands the connection back here (`handed_back`) when the session must see something.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from proxy import metrics
from proxy.answerer import Answerer
from proxy.config import Settings
from proxy.native_relay import AVAILABLE as NATIVE_AVAILABLE
from proxy.native_relay import HandBack, NativeRelay
from proxy.nl2sql.answer import Answer, AnswerError
from proxy.session import CancelKeys, Session
from proxy.upstream import Fetch
from proxy.wire import errors
from proxy.wire.messages import BackendKeyData, CancelRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upstream:
    """Where the upstream PostgreSQL listens: TCP host and port, or a Unix socket directory."""

    host: str
    port: int

    @property
    def is_unix(self) -> bool:
        return self.host.startswith("/")

    @property
    def socket_path(self) -> str:
        return f"{self.host}/.s.PGSQL.{self.port}"

    def __str__(self) -> str:
        return self.socket_path if self.is_unix else f"{self.host}:{self.port}"

    @classmethod
    def from_dsn(cls, dsn: str) -> Upstream:
        """Host and port of a libpq connection string or URI (the rest is the client's)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(dsn)
        except Exception as exc:
            raise ValueError(f"upstream {dsn!r} is not a valid connection string: {exc}") from None
        host = str(params.get("host") or "127.0.0.1").split(",")[0]
        port = int(str(params.get("port") or 5432).split(",")[0])
        return cls(host, port)


async def _open(
    loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, upstream: Upstream, limit: float
) -> None:
    if upstream.is_unix:
        coro = loop.create_unix_connection(lambda: protocol, upstream.socket_path)
    else:
        coro = loop.create_connection(lambda: protocol, upstream.host, upstream.port)
    await asyncio.wait_for(coro, limit)


def _discard(data: bytes) -> None:
    """Where writes go while a socket is not (or no longer) connected."""


class UpstreamConnection(asyncio.Protocol):
    """The upstream side of one client connection."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.session = client.session
        self.transport: asyncio.Transport | None = None
        # Hot path: the event loop calls the session directly (uvloop caches this attribute).
        self.data_received = client.session.server_data  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        _no_delay(transport)
        self.client.send_server = self.transport.write

    def connection_lost(self, exc: Exception | None) -> None:
        transport, self.transport = self.transport, None
        self.client.send_server = _discard
        if isinstance(exc, OSError) and transport is not None:
            # A write failed (PostgreSQL had closed: a FATAL, a terminated backend) and the loop
            # closes without reading what PostgreSQL sent before it closed, often the error
            # that says why. Like libpq after a failed write, read it first and pass it on.
            pending = _unread(transport)
            if pending:
                self.session.server_data(pending)
        self.session.upstream_closed()

    def pause_writing(self) -> None:
        self.client.pause_reading()

    def resume_writing(self) -> None:
        self.client.resume_reading()


def _unread(transport: asyncio.BaseTransport, limit: int = 1 << 20) -> bytes:
    """What the peer sent that the kernel still holds for a transport closing on an error (the
    socket is open until `connection_lost` returns); b"" when there is none or it cannot be read."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return b""
    chunks: list[bytes] = []
    # OSError ends it: nothing more (EAGAIN), the reset itself, or the fd already gone
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(sock.fileno())) as dup:
        dup.setblocking(False)
        size = 0
        while size < limit and (chunk := dup.recv(65536)):
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def _no_delay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ClientConnection(asyncio.Protocol):
    """One client socket, its session, and the upstream connection opened for it."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.loop = proxy.loop
        self.transport: asyncio.Transport | None = None
        self.upstream: UpstreamConnection | None = None
        self._startup_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # SessionIO's two writers are the transports' own `write` while connected: the hot path
        # goes from the event loop into the session and back out with no frame in between.
        self.send_client: Callable[[bytes], None] = _discard
        self.send_server: Callable[[bytes], None] = _discard
        self.native_id: int | None = None  # while the native relay has this connection
        self.session = Session(
            self,
            proxy.cancel_keys,
            tls_available=proxy.tls is not None,
            statement_timeout_s=proxy.settings.pipeline.statement_timeout_s,
        )
        self.data_received = self.session.client_data  # type: ignore[method-assign]

    # ------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.send_client = self.transport.write
        proxy = self.proxy
        proxy.counters.accepted += 1
        proxy.clients.add(self)
        _no_delay(transport)
        self._startup_timer = self.loop.call_later(proxy.startup_timeout, self._startup_expired)

    def data_received(self, data: bytes) -> None:  # replaced per instance, see __init__
        self.session.client_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._take_back()
        self.transport = None
        self.send_client = _discard
        if self in self.proxy.clients:
            self.proxy.clients.discard(self)
            self.proxy.counters.closed_traffic.add(self.traffic())
        if self._startup_timer is not None:
            self._startup_timer.cancel()
        self.session.client_closed()

    def pause_writing(self) -> None:
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None:
            upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None:
            upstream.transport.resume_reading()

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    # ------------------------------------------------------------ SessionIO (and the writers)

    def relay(
        self, from_client: Callable[[bytes], None], from_server: Callable[[bytes], None]
    ) -> None:
        # The hot path from now on: the event loop hands each chunk straight to its relay (in C
        # where it was compiled). uvloop looks `data_received` up once per `set_protocol`.
        upstream = self.upstream
        if self.transport is None or upstream is None or upstream.transport is None:
            return
        client_chunk, server_chunk = from_client, from_server
        if self.proxy.native is not None:
            # Hotter still: the native relay takes the connection whenever it is in plain
            # pass-through; in between, each chunk is followed by a look at whether it is.
            def client_chunk(data: bytes) -> None:
                from_client(data)
                self._try_native()

            def server_chunk(data: bytes) -> None:
                from_server(data)
                self._try_native()

            self.loop.call_soon(self._try_native)
        self.data_received = client_chunk  # type: ignore[method-assign, assignment]
        self.transport.set_protocol(self)
        upstream.data_received = server_chunk  # type: ignore[method-assign, assignment]
        upstream.transport.set_protocol(upstream)

    # ------------------------------------------------------------ the native relay

    def traffic(self) -> metrics.Traffic:
        """Messages and bytes each way since authentication, wherever they were relayed."""
        native = self.proxy.native
        if native is not None and self.native_id is not None:
            counts = native.traffic(self.native_id)
            if counts is not None:
                return metrics.Traffic(*counts)
        return self.session.traffic()

    def _try_native(self) -> None:
        native = self.proxy.native
        if native is None or self.native_id is not None:
            return
        state = self.session.native_state()
        if state is None:
            return
        fds = self._native_fds()
        if fds is None:
            return
        self.native_id = native.attach(self, fds, state)
        if self.native_id is None:
            self._resume_both()

    def _native_fds(self) -> tuple[int, int] | None:
        """The two sockets' file descriptors, paused for asyncio; None: not now."""
        upstream = self.upstream
        client, server = self.transport, upstream.transport if upstream else None
        if client is None or server is None or client.is_closing() or server.is_closing():
            return None
        if client.get_write_buffer_size() or server.get_write_buffer_size():
            return None  # a side is slow to read: stay here until it has caught up
        client_socket = client.get_extra_info("socket")
        server_socket = server.get_extra_info("socket")
        if client_socket is None or server_socket is None:
            return None
        client.pause_reading()
        server.pause_reading()
        return client_socket.fileno(), server_socket.fileno()

    def _resume_both(self) -> None:
        upstream = self.upstream
        for transport in (self.transport, upstream.transport if upstream else None):
            if transport is not None and not transport.is_closing():
                transport.resume_reading()

    def handed_back(self, back: HandBack) -> None:
        """Go on in Python from what the native relay returned: first what it had still to
        write to each side, then what each side sent that the session must read."""
        self.native_id = None
        self._resume_both()
        session = self.session
        session.native_returned(back.relay, back.splitter)
        if back.to_client:
            self.send_client(back.to_client)
        if back.to_server:
            self.send_server(back.to_server)
        if back.from_server:
            session.server_data(back.from_server)
        if back.from_client:
            session.client_data(back.from_client)

    def _take_back(self) -> None:
        """Have the connection back from the native relay, if it is there."""
        native = self.proxy.native
        if native is not None and self.native_id is not None:
            back = native.detach(self.native_id)
            self.native_id = None
            if back is not None:
                self.handed_back(back)

    def answer(
        self, question: str, fetch: Fetch, done: Callable[[Answer | AnswerError], None]
    ) -> None:
        self.proxy.answerer.answer(question, fetch, done)

    def start_client_tls(self) -> None:
        assert self.transport is not None
        self.transport.pause_reading()
        self._spawn(self._start_tls())

    def connect_upstream(self) -> None:
        # The limit is looked at once the client has said who it is, not on accepting: a client
        # that has just closed its connection (its end is still on its way) does not count.
        proxy = self.proxy
        if len(proxy.clients) > proxy.max_clients:
            proxy.counters.refused += 1
            self.session.refuse(errors.too_many_connections(proxy.max_clients))
            return
        self._spawn(self._connect_upstream())

    def send_cancel(self, key: BackendKeyData) -> None:
        self.proxy.spawn(self.proxy.send_cancel(key))

    def close(self) -> None:
        self._take_back()
        if self._startup_timer is not None:
            self._startup_timer.cancel()
            self._startup_timer = None
        if self.transport is not None:
            self.transport.close()
        upstream = self.upstream
        if upstream is not None and upstream.transport is not None:
            upstream.transport.close()
        for task in self._tasks:
            task.cancel()

    # ------------------------------------------------------------ work off the hot path

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = self.loop.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_tls(self) -> None:
        tls = self.proxy.tls
        assert tls is not None and self.transport is not None
        try:
            transport = await self.loop.start_tls(self.transport, self, tls, server_side=True)
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            log.info("TLS handshake with a client failed: %s", exc)
            if self.transport is not None:
                self.transport.abort()
            return
        if transport is None:
            return
        self.transport = transport
        self.send_client = transport.write
        self.session.tls_established()

    async def _connect_upstream(self) -> None:
        target = self.proxy.upstream
        upstream = UpstreamConnection(self)
        self.upstream = upstream
        try:
            await _open(self.loop, upstream, target, self.proxy.connect_timeout)
        except TimeoutError:
            self.session.upstream_failed(str(target), "timed out")
            return
        except OSError as exc:
            self.session.upstream_failed(str(target), exc.strerror or str(exc))
            return
        self.session.upstream_connected()

    def _startup_expired(self) -> None:
        self._startup_timer = None
        if self.session.phase.value not in ("ready", "closed"):
            log.info("client did not finish authenticating in time; closing")
            self.session.client_closed()


class Proxy:
    """The listener and what its connections share: cancel keys, limits, TLS, the upstream, the
    `Answerer` (the pipeline and its worker threads)."""

    def __init__(
        self,
        upstream: Upstream,
        *,
        tls: ssl.SSLContext | None = None,
        max_clients: int = 1000,
        connect_timeout: float = 10.0,
        startup_timeout: float = 60.0,
        settings: Settings | None = None,
    ) -> None:
        self.upstream = upstream
        self.tls = tls
        self.max_clients = max_clients
        self.connect_timeout = connect_timeout
        self.startup_timeout = startup_timeout
        self.cancel_keys = CancelKeys()
        self.clients: set[ClientConnection] = set()
        self.counters = metrics.ProxyCounters()
        self.loop = asyncio.get_running_loop()
        self.settings = settings or Settings()
        self.answerer = Answerer(self.settings, self.loop)
        self.native: NativeRelay | None = None
        if self.settings.proxy.native_relay and NATIVE_AVAILABLE:
            self.native = NativeRelay(self.loop)
        elif self.settings.proxy.native_relay:
            log.info("the native relay was not built; every connection is relayed in Python")
        self._server: asyncio.Server | None = None
        self._metrics_server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Start accepting clients; returns the address bound (port 0 picks a free one)."""
        try:
            self._server = await self.loop.create_server(
                lambda: ClientConnection(self), host, port, reuse_address=True, backlog=1024
            )
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"pgnl cannot listen on {host}:{port}: {exc.strerror}; "
                "choose another address with --listen or [proxy] listen",
            ) from None
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    def spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = self.loop.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def metrics_text(self) -> str:
        """Every metric of this proxy, in Prometheus' text format (on the event loop)."""
        live = metrics.Traffic()
        for client in self.clients:
            live.add(client.traffic())
        return metrics.exposition(
            [
                *self.counters.families(
                    len(self.clients),
                    live,
                    None if self.native is None else (len(self.native), self.native.handbacks),
                ),
                *self.answerer.questions.families(),
                *metrics.LLM.families(),
            ]
        )

    async def serve_metrics(self, host: str, port: int) -> tuple[str, int]:
        """Serve GET /metrics on host:port ([metrics] listen); returns the address bound."""
        self._metrics_server = await metrics.serve(self.metrics_text, host, port)
        bound = self._metrics_server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def send_cancel(self, key: BackendKeyData) -> None:
        """Deliver a CancelRequest to the upstream server on a connection of its own."""
        request = CancelRequest(key.pid, key.secret).encode()
        try:
            reader, writer = await asyncio.wait_for(self._open_raw(), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            log.warning("could not deliver a cancel request to %s: %s", self.upstream, exc)
            return
        writer.write(request)
        with contextlib.suppress(OSError, TimeoutError):
            await writer.drain()
            # The server closes the connection once it has handled the request.
            await asyncio.wait_for(reader.read(), self.connect_timeout)
        writer.close()

    async def _open_raw(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.upstream.is_unix:
            return await asyncio.open_unix_connection(self.upstream.socket_path)
        return await asyncio.open_connection(self.upstream.host, self.upstream.port)

    async def close(self) -> None:
        """Stop accepting, tell each connected client why, and close every connection."""
        if self._server is not None:
            self._server.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self.native is not None:
            self.native.close()  # every connection back in Python, where the goodbye is said
            self.native = None
        goodbye = errors.shutting_down()
        for client in list(self.clients):
            session = client.session
            if session.phase.value == "ready" and session.transaction_status == "I":
                client.send_client(goodbye.encode())
            client.close()
        if self._server is not None:
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        self.answerer.close()


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext | None:
    """A server-side TLS context from PEM files; None when no certificate is configured."""
    if not cert_file:
        return None
    if not key_file:
        raise ValueError("[proxy] tls_cert_file is set but tls_key_file is not; set both")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot load TLS certificate {cert_file} / key {key_file}: {exc}"
        ) from None
    return context
