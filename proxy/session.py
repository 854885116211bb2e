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
and gives the client a cancel key of its own in place of the upstream's. In READY the driver
feeds each direction straight to its reader (`SessionIO.relay`): server to client, a `Relay`,
which watches message boundaries go by and passes each chunk on as it came; client to server, a
`FrontendSplitter`, which passes messages on unchanged too, but offers the session any Query or
extended-protocol batch that may carry a directive (`-- nl: ...`).

A directive is answered by a flow (`directive_flow`): the splitter holds the client's later
messages; once every earlier request is answered (the requests the splitter passed on, and the
proxy's own, equal the ReadyForQuery messages the relay saw), the session *owns* the upstream:
the relay's chunks come to the session, which reads them whole, gives the flow the replies to
what it sent, and relays the rest. The pipeline runs in a worker thread (`SessionIO.answer`); its
queries come back here (`fetch`) and run on this connection in the flow's read-only scope. When
the flow ends, the relay writes to the client again and the splitter goes on with what it held.
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from proxy.directive_flow import Ask, Exchange, Quiesce, Steps, batch_flow, query_flow
from proxy.directives import Directive, DirectiveError, parse
from proxy.metrics import Traffic
from proxy.nl2sql.answer import Answer, AnswerError
from proxy.rewrite import forget_in_query, plan_batch
from proxy.upstream import (
    FETCH_SYNCS,
    Fetch,
    FetchDone,
    Replies,
    UpstreamQueryError,
    canceled,
    connection_gone,
    fetch_messages,
    python_codec,
    rows,
)
from proxy.wire import errors
from proxy.wire.framing import MessageReader, Relay, RelayState, StartupReader
from proxy.wire.messages import (
    AUTH_SASL,
    WHERE,
    AuthenticationSASL,
    BackendKeyData,
    CancelRequest,
    DecodeError,
    ErrorResponse,
    GSSENCRequest,
    ParameterStatus,
    SASLInitialResponse,
    SSLRequest,
    StartupMessage,
    decode_startup_packet,
    typed,
)
from proxy.wire.splitter import FrontendSplitter, SplitterState, Unit

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


def _is_server_full(body: bytes) -> bool:
    """An ErrorResponse body whose SQLSTATE is 53300 (too many connections)."""
    return ErrorResponse.decode(body).sqlstate == errors.TOO_MANY_CONNECTIONS


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

    def answer(
        self, question: str, fetch: Fetch, done: Callable[[Answer | AnswerError], None]
    ) -> None:
        """Run the pipeline for `question` in a worker thread, its queries through `fetch` (on
        the event loop); then call `done` on the event loop with the answer, or the error."""


class CancelKeys:
    """The cancel keys handed to clients, each mapped to the upstream backend it cancels.

    The client sees the upstream's real process id (so that `pg_backend_pid()` and the sender pid
    of its own notifications match what its driver was told) and a secret of the proxy's own, so
    that a cancel must come through the proxy that issued it.
    """

    def __init__(self) -> None:
        self._keys: dict[tuple[int, bytes], BackendKeyData] = {}
        self._handlers: dict[tuple[int, bytes], Callable[[], bool]] = {}

    def issue(
        self, upstream: BackendKeyData, on_cancel: Callable[[], bool] | None = None
    ) -> BackendKeyData:
        """A key for the client. `on_cancel` is told of each cancel request with it, and says
        whether the request should still go to the upstream server."""
        while True:
            mine = BackendKeyData(upstream.pid, secrets.token_bytes(len(upstream.secret)))
            if (mine.pid, mine.secret) not in self._keys:
                self._keys[(mine.pid, mine.secret)] = upstream
                if on_cancel is not None:
                    self._handlers[(mine.pid, mine.secret)] = on_cancel
                return mine

    def lookup(self, pid: int, secret: bytes) -> BackendKeyData | None:
        return self._keys.get((pid, secret))

    def cancel(self, pid: int, secret: bytes) -> BackendKeyData | None:
        """A cancel request came with this key: the upstream key to send it on with, or None
        (no such key, or the session dealt with it itself)."""
        target = self._keys.get((pid, secret))
        handler = self._handlers.get((pid, secret))
        if target is not None and handler is not None and not handler():
            return None
        return target

    def release(self, issued: BackendKeyData) -> None:
        self._keys.pop((issued.pid, issued.secret), None)
        self._handlers.pop((issued.pid, issued.secret), None)


@dataclass
class _Running:
    """An exchange of the proxy's own with the upstream server, and who waits for its replies
    (called with None when the connection went first)."""

    request: Exchange
    on_done: Callable[[Replies | None], None]
    replies: Replies


class Session:
    """See the module docstring. Feed it with `client_data` and `server_data`."""

    def __init__(
        self,
        io: SessionIO,
        cancel_keys: CancelKeys,
        *,
        tls_available: bool,
        refuse_with: ErrorResponse | None = None,
        statement_timeout_s: float = 30.0,
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
        self._to_server: FrontendSplitter | None = None  # client to server, once READY
        self._to_client: Relay | None = None  # server to client, once READY
        self._client_terminated = False
        self._pending_client = b""
        self._expect_sasl_initial = False
        self._last_server_type = 0
        # Directives (see the module docstring).
        self.statement_timeout_s = statement_timeout_s
        self.client_encoding = "UTF8"
        self.codec = "utf-8"
        self.cancelled = False  # a cancel request came while a flow ran
        self._statements: set[bytes] = set()  # prepared statements made from directives
        self._flow: Steps | None = None
        self._asking = 0  # the number of the question out with the pipeline; 0: none
        self._questions = 0
        self._owning = False  # the relay's chunks come to `_owned_data`
        self._reader = MessageReader()
        self._running: _Running | None = None
        self._queued: deque[_Running] = deque()
        self._proxy_syncs = 0  # requests of the proxy's own answered with a ReadyForQuery
        self._client_out = bytearray()

    # ------------------------------------------------------------ facts for the rest

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    def traffic(self) -> Traffic:
        """Messages and bytes each way since authentication (the relays' own counts)."""
        to_server, to_client = self._to_server, self._to_client
        if to_server is None or to_client is None:
            return Traffic()
        return Traffic(
            to_server.message_count,
            to_server.byte_count,
            to_client.message_count,
            to_client.byte_count,
        )

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

    def refuse(self, error: ErrorResponse) -> None:
        """The driver will not take this client (a limit): tell it why and close."""
        self._fail(error)

    # ------------------------------------------------------------ the native relay

    def native_state(self) -> tuple[RelayState, SplitterState] | None:
        """The state the native relay goes on from, when this session is in plain pass-through
        and may be relayed natively for now (see `proxy.native_relay`); None when it must stay
        here: not READY, TLS (the proxy's own encryption), a directive's flow, bytes of its own
        waiting, or a splitter that holds or watches something."""
        to_server, to_client = self._to_server, self._to_client
        if (
            self.phase is not Phase.READY
            or self._tls_done
            or to_server is None
            or to_client is None
            or self._flow is not None
            or self._owning
            or self._running is not None
            or self._queued
            or self._client_out
            or to_client.broken
            or to_client.write != self.io.send_client
        ):
            return None
        counters = to_server.native_state()
        return None if counters is None else (to_client.export(), counters)

    def native_returned(self, relay: RelayState, splitter: SplitterState) -> None:
        """The native relay handed the connection back: go on from its state."""
        if self._to_client is not None and self._to_server is not None:
            self._to_client.load(relay)
            self._to_server.load_native_state(splitter)

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
                if self._cancel_keys.lookup(message.pid, message.secret) is None:
                    log.info("cancel request with an unknown key ignored")
                target = self._cancel_keys.cancel(message.pid, message.secret)
                if target is not None:
                    self.io.send_cancel(target)
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
            if kind == b"S":
                self._parameter_status(body)
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
                self.client_key = self._cancel_keys.issue(upstream_key, self._cancel_requested)
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
            elif kind == b"E" and _is_server_full(body):
                self.io.send_client(errors.server_full(ErrorResponse.decode(body)).encode())
            else:
                self.io.send_client(typed(kind, body))

    def _start_relaying(self, status: int) -> None:
        self.phase = Phase.READY
        self._to_server = FrontendSplitter(
            self.io.send_server, self._offer, self._client_violation, self._statements
        )
        self._to_client = Relay(self.io.send_client, self._server_violation)
        self._to_client.status = status
        self.io.relay(self._to_server.feed, self._to_client.feed)

    def _client_violation(self, what: str) -> None:
        self._fail(errors.protocol_violation(what))

    def _server_violation(self, what: str) -> None:
        log.error("upstream sent an invalid message (%s); closing the session", what)
        self._fail(errors.upstream_lost())

    # ------------------------------------------------------------ directives

    def _offer(self, unit: Unit) -> bool:
        """The splitter's question: take this Query or batch over (True), or pass it on?"""
        if unit.is_query:
            body = unit.messages[0][1]
            raw = body[:-1] if body.endswith(b"\0") else body
            text = raw.decode(self.codec, "replace")
            found: Directive | DirectiveError | None
            try:
                found = parse(text)
            except DirectiveError as exc:
                found = exc
            if found is None:
                forget_in_query(text, self._statements)
                return False
            self._statements.discard(b"")  # a Query ends the unnamed statement
            self._start_flow(query_flow(self, raw, found))
            return True
        messages = unit.messages
        end = messages[-1][0] if messages[-1][0] in (b"S", b"H") else b""
        try:
            segments = plan_batch(
                messages[:-1] if end else messages, self._statements, self._decode
            )
        except DecodeError:
            return False  # the server will refuse it, as it should
        if not any(segment.directive for segment in segments):
            return False
        self._start_flow(batch_flow(self, segments, end))
        return True

    def _decode(self, text: bytes) -> str:
        return text.decode(self.codec, "replace")

    def _start_flow(self, flow: Steps) -> None:
        self._flow = flow
        self.cancelled = False
        self._advance(None)

    def _advance(self, value: object) -> None:
        """Resume the flow with `value`, and carry out what it asks next."""
        while self._flow is not None:
            try:
                request = self._flow.send(value)
            except StopIteration:
                self._end_flow()
                return
            except Exception as exc:
                log.exception("a directive's flow failed")
                self._fail(errors.internal_error(f"{type(exc).__name__}: {exc}"))
                return
            if isinstance(request, Quiesce):
                if not self._quiet():
                    assert self._to_client is not None
                    self._to_client.write = self._watch
                    return
                self._own()
                value = None
            elif isinstance(request, Exchange):
                self._run(_Running(request, self._advance, Replies()))
                return
            else:
                assert isinstance(request, Ask)
                self._questions += 1
                self._asking = self._questions
                self._flush_client()
                self.io.answer(request.question, self.fetch, self._answer_for(self._asking))
                return

    def _answer_for(self, number: int) -> Callable[[Answer | AnswerError], None]:
        def answered(answer: Answer | AnswerError) -> None:
            if self._asking != number or self._flow is None:
                return  # the session ended meanwhile
            self._asking = 0
            self._advance(answer)

        return answered

    def _quiet(self) -> bool:
        """Every request sent upstream so far has been answered, and the replies relayed."""
        to_server, to_client = self._to_server, self._to_client
        assert to_server is not None and to_client is not None
        answered = to_client.ready_count == to_server.syncs + self._proxy_syncs
        return answered and to_client.at_boundary

    def _watch(self, data: bytes) -> None:
        """The relay's writer while a flow waits for the replies to earlier requests."""
        self.io.send_client(data)
        if self._flow is not None and self._quiet():
            self._own()
            self._advance(None)

    def _own(self) -> None:
        assert self._to_client is not None
        self._owning = True
        self._to_client.write = self._owned_data

    def _end_flow(self) -> None:
        self._flow = None
        self._asking = 0
        if self.closed:
            return
        if self._owning:
            self._owning = False
            self._client_out += self._reader.take_rest()  # async messages, or a part of one
        self._flush_client()
        if self._to_client is not None:
            self._to_client.write = self.io.send_client
        if self._to_server is not None:
            self._to_server.resume()

    def _run(self, running: _Running) -> None:
        """Send an exchange upstream now, or after the one in progress."""
        if self.closed:
            running.on_done(None)
            return
        if self._running is not None:
            self._queued.append(running)
            return
        self._running = running
        self._proxy_syncs += running.request.syncs
        self._flush_client()
        self.io.send_server(running.request.data)

    def _owned_data(self, data: bytes) -> None:
        """The relay's writer while the session owns the upstream: read the replies whole."""
        reader = self._reader
        reader.feed(data)
        while self._owning:
            message = reader.next_message()  # lengths were checked by the relay
            if message is None:
                break
            self._server_message(*message)
        self._flush_client()

    def _server_message(self, kind: bytes, body: bytes) -> None:
        if kind in (b"N", b"S", b"A"):
            if kind == b"S":
                self._parameter_status(body)
            self._client_out += typed(kind, body)
            return
        running = self._running
        if running is None:
            log.error("upstream sent a %r message when nothing was asked of it", kind)
            self._fail(errors.upstream_lost())
            return
        request, replies = running.request, running.replies
        if kind == b"Z":
            replies.status = chr(body[0]) if body else "I"
            replies.ready += 1
            if replies.ready < request.syncs:
                replies.groups.append([])
                return
            self._running = self._queued.popleft() if self._queued else None
            if self._running is not None:
                next_one = self._running
                self._proxy_syncs += next_one.request.syncs
                self.io.send_server(next_one.request.data)
            running.on_done(replies)
            return
        if kind == b"E":
            error = ErrorResponse.decode(body, self.codec)
            if replies.error is None:
                replies.error = error
            if request.relay:
                if request.ours and "inline_code_block" in error.fields.get(WHERE, ""):
                    fields = {k: v for k, v in error.fields.items() if k not in "WFLR"}
                    body = ErrorResponse(fields).encode(self.codec)[5:]
                self._client_out += typed(kind, body)
                return
        if not request.relay:
            replies.add(kind, body)
        elif kind not in request.drop:
            self._client_out += typed(kind, body)

    def _flush_client(self) -> None:
        if self._client_out:
            out = bytes(self._client_out)
            self._client_out.clear()
            self.io.send_client(out)

    def _parameter_status(self, body: bytes) -> None:
        try:
            status = ParameterStatus.decode(body)
        except DecodeError:
            return
        if status.name == "client_encoding":
            self.set_client_encoding(status.value)

    def _cancel_requested(self) -> bool:
        """A cancel request came for this session: whether the upstream should get it."""
        if self._flow is None:
            return True
        self.cancelled = True
        return self._running is not None  # a statement of the flow's is running upstream

    # FlowContext, for the flows

    @property
    def transaction_status(self) -> str:
        """'I' idle, 'T' in a transaction block, 'E' in a failed one (last ReadyForQuery)."""
        return chr(self._to_client.status) if self._to_client is not None else "I"

    def set_client_encoding(self, name: str) -> None:
        self.client_encoding = name
        self.codec = python_codec(name)

    def emit(self, data: bytes) -> None:
        self._client_out += data

    def skip_until_sync(self) -> None:
        if self._to_server is not None:
            self._to_server.skip_until_sync()

    # The pipeline's Database, on the event loop (see proxy.answerer.UpstreamDatabase)

    def fetch(
        self, query: str, params: Sequence[object], timeout_s: float | None, done: FetchDone
    ) -> None:
        """Run one query of the pipeline's in the flow's read-only scope; `done` gets the rows
        or an `UpstreamQueryError`."""
        if self.closed or not self._asking:
            done(connection_gone())
            return
        if self.cancelled:
            done(canceled())
            return
        codec = self.codec
        timeout = self.statement_timeout_s if timeout_s is None else timeout_s
        data = fetch_messages(query, params, timeout, codec)

        def finished(replies: Replies | None) -> None:
            if replies is None:
                done(connection_gone())
                return
            try:
                done(rows(replies, codec))
            except UpstreamQueryError as exc:
                done(exc)

        self._run(_Running(Exchange(data, FETCH_SYNCS), finished, Replies()))

    # ------------------------------------------------------------ ending

    def _fail(self, error: ErrorResponse | None) -> None:
        """Send the client a last error (where the stream allows one) and close both sides."""
        if self.phase is Phase.CLOSED:
            return
        if error is not None:
            log.info("closing session: %s (SQLSTATE %s)", error.message, error.sqlstate)
            to_client = self._to_client
            if (
                to_client is None
                or self._owning
                or (to_client.at_boundary and not to_client.broken)
            ):
                self._flush_client()
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
        self._flow = None
        self._asking = 0
        self._owning = False
        waiting = [self._running, *self._queued] if self._running else list(self._queued)
        self._running = None
        self._queued.clear()
        for running in waiting:
            running.on_done(None)
        self.io.close()
