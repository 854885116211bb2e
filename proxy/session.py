"""One client connection's protocol state, sans I/O.

The session is fed bytes from either side and decides what to relay, what to answer itself and
when to close; the `SessionIO` it is given does the sending (the asyncio driver in `server`, or
a list in the tests). A connection goes through these phases:

    STARTUP ──SSLRequest──▶ TLS ──▶ STARTUP ──StartupMessage──▶ CONNECTING ──▶ AUTHENTICATING
                                                                                  │ ReadyForQuery
                                                                                  ▼
    CLOSED ◀──────────────── Terminate / either side closes / protocol violation ── READY

In STARTUP the proxy answers SSLRequest and GSSENCRequest itself and routes CancelRequest. In
AUTHENTICATING it relays the exchange between client and upstream and reads every server message
whole: it removes channel-binding SASL mechanisms (TLS ends at the proxy, so `-PLUS` cannot work)
and gives the client a cancel key of its own in place of the upstream's. In READY it hands each
direction to a `Relay`, which watches message boundaries go by and passes each chunk on as it
came; the driver then feeds the relays directly (`SessionIO.relay`).
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections.abc import Callable
from typing import Protocol

from proxy.wire import errors
from proxy.wire.framing import MessageReader, Relay, StartupReader
from proxy.wire.messages import (
    AUTH_SASL,
    AuthenticationSASL,
    BackendKeyData,
    CancelRequest,
    DecodeError,
    ErrorResponse,
    GSSENCRequest,
    SASLInitialResponse,
    SSLRequest,
    StartupMessage,
    decode_startup_packet,
    typed,
)

log = logging.getLogger(__name__)

_ERROR = ord("E")
_TLS_HANDSHAKE = 0x16  # first byte of a TLS ClientHello record


class Phase(enum.Enum):
    STARTUP = "startup"
    TLS = "tls handshake"
    CONNECTING = "connecting upstream"
    AUTHENTICATING = "authenticating"
    READY = "ready"
    CLOSED = "closed"


def _nowhere(data: bytes) -> None:
    """Where a relay writes once the session is closed."""


class SessionIO(Protocol):
    """What a session asks of the driver that owns its sockets."""

    def send_client(self, data: bytes) -> None: ...

    def send_server(self, data: bytes) -> None: ...

    def start_client_tls(self) -> None:
        """Upgrade the client socket to TLS, then call `Session.tls_established`."""

    def connect_upstream(self) -> None:
        """Open the upstream socket, then call `upstream_connected` or `upstream_failed`."""

    def send_cancel(self, key: BackendKeyData) -> None:
        """Deliver a CancelRequest with this upstream key on a connection of its own."""

    def close(self) -> None:
        """Flush what was sent and close both sockets."""

    def relay(
        self, from_client: Callable[[bytes], None], from_server: Callable[[bytes], None]
    ) -> None:
        """Authentication is over: hand each side's bytes straight to these from now on.

        (Calling `client_data` / `server_data` instead stays correct, one call slower.)
        """


class CancelKeys:
    """The cancel keys handed to clients, each mapped to the upstream backend it cancels.

    The client sees the upstream's real process id (so that `pg_backend_pid()` and the sender pid
    of its own notifications match what its driver was told) and a secret of the proxy's own, so
    that a cancel must come through the proxy that issued it.
    """

    def __init__(self) -> None:
        self._keys: dict[tuple[int, bytes], BackendKeyData] = {}

    def issue(self, upstream: BackendKeyData) -> BackendKeyData:
        while True:
            mine = BackendKeyData(upstream.pid, secrets.token_bytes(len(upstream.secret)))
            if (mine.pid, mine.secret) not in self._keys:
                self._keys[(mine.pid, mine.secret)] = upstream
                return mine

    def lookup(self, pid: int, secret: bytes) -> BackendKeyData | None:
        return self._keys.get((pid, secret))

    def release(self, issued: BackendKeyData) -> None:
        self._keys.pop((issued.pid, issued.secret), None)


class Session:
    """See the module docstring. Feed it with `client_data` and `server_data`."""

    def __init__(
        self,
        io: SessionIO,
        cancel_keys: CancelKeys,
        *,
        tls_available: bool,
        refuse_with: ErrorResponse | None = None,
    ) -> None:
        self.io = io
        self.phase = Phase.STARTUP
        self.startup: StartupMessage | None = None
        self.client_key: BackendKeyData | None = None
        self._cancel_keys = cancel_keys
        self._tls_available = tls_available
        self._tls_done = False
        self._gss_answered = False
        self.refuse_with = refuse_with
        self._startup_reader = StartupReader()
        self._client_reader = MessageReader()
        self._server_reader = MessageReader()
        self._to_server: Relay | None = None  # client to server, once READY
        self._to_client: Relay | None = None  # server to client, once READY
        self._client_terminated = False
        self._pending_client = b""
        self._expect_sasl_initial = False
        self._last_server_type = 0

    # ------------------------------------------------------------ facts for the rest

    @property
    def transaction_status(self) -> str:
        """'I' idle, 'T' in a transaction block, 'E' in a failed one (last ReadyForQuery)."""
        return chr(self._to_client.status) if self._to_client is not None else "I"

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    # ------------------------------------------------------------ events from the driver

    def client_data(self, data: bytes) -> None:
        if self._to_server is not None:
            self._to_server.feed(data)
        elif self.phase is Phase.STARTUP:
            self._startup_reader.feed(data)
            self._read_startup()
        elif self.phase is Phase.AUTHENTICATING:
            self._client_reader.feed(data)
            self._relay_client_auth()
        elif self.phase is Phase.CONNECTING:
            self._pending_client += data
        elif self.phase is Phase.TLS:
            # Bytes in clear after we said "S": the driver paused reading, so only a client that
            # ignores the protocol gets here (the injection PostgreSQL rejects too).
            self._fail(errors.protocol_violation("unencrypted data after the SSL handshake began"))

    def server_data(self, data: bytes) -> None:
        if self._to_client is not None:
            self._to_client.feed(data)
        elif self.phase is Phase.AUTHENTICATING:
            self._server_reader.feed(data)
            self._relay_server_auth()

    def tls_established(self) -> None:
        if self.phase is Phase.TLS:
            self._tls_done = True
            self.phase = Phase.STARTUP

    def upstream_connected(self) -> None:
        if self.phase is not Phase.CONNECTING:
            return
        assert self.startup is not None
        self.phase = Phase.AUTHENTICATING
        self.io.send_server(self.startup.encode())
        if self._pending_client:
            pending, self._pending_client = self._pending_client, b""
            self.client_data(pending)

    def upstream_failed(self, target: str, reason: str) -> None:
        if self.phase is Phase.CONNECTING:
            self._fail(errors.upstream_unreachable(target, reason))

    def upstream_closed(self) -> None:
        if self.phase is Phase.CLOSED:
            return
        to_server, to_client = self._to_server, self._to_client
        if self._client_terminated or (to_server is not None and to_server.terminated):
            self._close()
        elif to_client is not None:
            quiet = not to_client.at_boundary or to_client.last_type == _ERROR
            self._fail(None if quiet else errors.upstream_lost())
        elif self._last_server_type == _ERROR:
            self._close()
        else:
            self._fail(errors.upstream_lost())

    def client_closed(self) -> None:
        self._close()

    # ------------------------------------------------------------ startup phase

    def _read_startup(self) -> None:
        reader = self._startup_reader
        if reader.first_byte == _TLS_HANDSHAKE and not self._tls_done:
            self._fail(errors.direct_tls_unsupported())
            return
        while self.phase is Phase.STARTUP:
            try:
                packet = reader.next_packet()
                if packet is None:
                    return
                message = decode_startup_packet(packet)
            except DecodeError as exc:
                if "unsupported frontend protocol" in str(exc):
                    self._fail(errors.unsupported_protocol(str(exc)))
                else:
                    self._fail(errors.protocol_violation(str(exc)))
                return
            if isinstance(message, SSLRequest):
                self._answer_ssl_request()
            elif isinstance(message, GSSENCRequest):
                if self._tls_done or self._gss_answered:
                    self._fail(errors.protocol_violation("GSSENCRequest after encryption began"))
                    return
                self._gss_answered = True
                self.io.send_client(b"N")
            elif isinstance(message, CancelRequest):
                target = self._cancel_keys.lookup(message.pid, message.secret)
                if target is not None:
                    self.io.send_cancel(target)
                else:
                    log.info("cancel request with an unknown key ignored")
                self._close()
            else:
                self._start(message)

    def _answer_ssl_request(self) -> None:
        if self._tls_done:
            self._fail(errors.protocol_violation("SSLRequest inside an encrypted connection"))
        elif not self._tls_available:
            self.io.send_client(b"N")
        elif self._startup_reader.pending:
            self._fail(errors.protocol_violation("data sent after SSLRequest before the answer"))
        else:
            self.phase = Phase.TLS
            self.io.send_client(b"S")
            self.io.start_client_tls()

    def _start(self, message: StartupMessage) -> None:
        if self.refuse_with is not None:
            self._fail(self.refuse_with)
            return
        self.startup = message
        self._pending_client = self._startup_reader.take_rest()
        self.phase = Phase.CONNECTING
        self.io.connect_upstream()

    # ------------------------------------------------------------ authentication phase

    def _relay_client_auth(self) -> None:
        reader = self._client_reader
        while self.phase is Phase.AUTHENTICATING:
            try:
                message = reader.next_message()
            except DecodeError as exc:
                self._fail(errors.protocol_violation(str(exc)))
                return
            if message is None:
                return
            kind, body = message
            if kind == b"p" and self._expect_sasl_initial:
                self._expect_sasl_initial = False
                try:
                    mechanism = SASLInitialResponse.decode(body).mechanism
                except DecodeError as exc:
                    self._fail(errors.protocol_violation(str(exc)))
                    return
                if mechanism.endswith("-PLUS"):
                    self._fail(errors.channel_binding_refused(mechanism))
                    return
            if kind == b"X":
                self._client_terminated = True
            self.io.send_server(typed(kind, body))

    def _relay_server_auth(self) -> None:
        reader = self._server_reader
        while self.phase is Phase.AUTHENTICATING:
            try:
                message = reader.next_message()
            except DecodeError as exc:
                log.error("upstream sent an invalid message during authentication (%s)", exc)
                self._fail(errors.upstream_lost())
                return
            if message is None:
                return
            kind, body = message
            self._last_server_type = kind[0]
            if kind == b"R" and body[:4] == AUTH_SASL.to_bytes(4, "big"):
                self._expect_sasl_initial = True
                try:
                    offered = AuthenticationSASL.decode(body)
                except DecodeError:
                    self._fail(errors.upstream_lost())
                    return
                plain = tuple(m for m in offered.mechanisms if not m.endswith("-PLUS"))
                self.io.send_client(AuthenticationSASL(plain).encode())
            elif kind == b"K":
                try:
                    upstream_key = BackendKeyData.decode(body)
                except DecodeError:
                    self._fail(errors.upstream_lost())
                    return
                self.client_key = self._cancel_keys.issue(upstream_key)
                self.io.send_client(self.client_key.encode())
            elif kind == b"Z":
                self._start_relaying(body[0] if body else ord("I"))
                self.io.send_client(typed(kind, body))
                rest_server = reader.take_rest()
                rest_client = self._client_reader.take_rest()
                if rest_server:
                    self.server_data(rest_server)
                if rest_client:
                    self.client_data(rest_client)
            else:
                self.io.send_client(typed(kind, body))

    def _start_relaying(self, status: int) -> None:
        self.phase = Phase.READY
        self._to_server = Relay(self.io.send_server, self._client_violation)
        self._to_client = Relay(self.io.send_client, self._server_violation)
        self._to_client.status = status
        self.io.relay(self._to_server.feed, self._to_client.feed)

    def _client_violation(self, what: str) -> None:
        self._fail(errors.protocol_violation(what))

    def _server_violation(self, what: str) -> None:
        log.error("upstream sent an invalid message (%s); closing the session", what)
        self._fail(errors.upstream_lost())

    # ------------------------------------------------------------ ending

    def _fail(self, error: ErrorResponse | None) -> None:
        """Send the client a last error (where the stream allows one) and close both sides."""
        if self.phase is Phase.CLOSED:
            return
        if error is not None:
            log.info("closing session: %s (SQLSTATE %s)", error.message, error.sqlstate)
            to_client = self._to_client
            if to_client is None or (to_client.at_boundary and not to_client.broken):
                self.io.send_client(error.encode())
        self._close()

    def _close(self) -> None:
        if self.phase is Phase.CLOSED:
            return
        self.phase = Phase.CLOSED
        for relay in (self._to_server, self._to_client):
            if relay is not None:
                relay.write = _nowhere
        if self.client_key is not None:
            self._cancel_keys.release(self.client_key)
        self.io.close()
