"""The session state machine, driven without sockets: bytes in, recorded actions out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from proxy.nl2sql.answer import Answer, AnswerError
from proxy.session import CancelKeys, Phase, Session
from proxy.upstream import Fetch
from proxy.wire import errors
from proxy.wire.messages import (
    AuthenticationSASL,
    BackendKeyData,
    CancelRequest,
    ErrorResponse,
    GSSENCRequest,
    Query,
    ReadyForQuery,
    SASLInitialResponse,
    SSLRequest,
    StartupMessage,
    Terminate,
    split_messages,
    typed,
)

STARTUP = StartupMessage(196608, {"user": "alice", "database": "db"})
AUTH_OK = typed(b"R", b"\x00\x00\x00\x00")
UPSTREAM_KEY = BackendKeyData(4242, b"\x01\x02\x03\x04")


@dataclass
class Recorder:
    """A SessionIO that records what the session asked for."""

    to_client: bytearray = field(default_factory=bytearray)
    to_server: bytearray = field(default_factory=bytearray)
    actions: list[str] = field(default_factory=list)
    cancels: list[BackendKeyData] = field(default_factory=list)
    asked: list[tuple[str, Fetch, Callable[[Answer | AnswerError], None]]] = field(
        default_factory=list
    )

    def send_client(self, data: bytes) -> None:
        self.to_client += data

    def send_server(self, data: bytes) -> None:
        self.to_server += data

    def start_client_tls(self) -> None:
        self.actions.append("tls")

    def connect_upstream(self) -> None:
        self.actions.append("connect")

    def send_cancel(self, key: BackendKeyData) -> None:
        self.cancels.append(key)

    def close(self) -> None:
        self.actions.append("close")

    def relay(
        self, from_client: Callable[[bytes], None], from_server: Callable[[bytes], None]
    ) -> None:
        self.actions.append("relay")

    def answer(
        self, question: str, fetch: Fetch, done: Callable[[Answer | AnswerError], None]
    ) -> None:
        self.asked.append((question, fetch, done))

    def client_messages(self) -> list[tuple[bytes, bytes]]:
        """Typed messages sent to the client, after any one-byte SSL/GSS answers."""
        data = bytes(self.to_client)
        while data[:1] in (b"N", b"S") and data[1:2] in (b"", b"N", b"S", b"E", b"R"):
            data = data[1:]
        return split_messages(data)

    def client_error(self) -> ErrorResponse:
        errors_seen = [ErrorResponse.decode(b) for k, b in self.client_messages() if k == b"E"]
        assert errors_seen, f"no ErrorResponse sent to the client: {bytes(self.to_client)!r}"
        return errors_seen[-1]


def new_session(keys: CancelKeys | None = None, **kwargs: object) -> tuple[Session, Recorder]:
    io = Recorder()
    kwargs.setdefault("tls_available", False)
    return Session(io, CancelKeys() if keys is None else keys, **kwargs), io  # type: ignore[arg-type]


def ready_session(keys: CancelKeys | None = None) -> tuple[Session, Recorder]:
    session, io = new_session(keys)
    session.client_data(STARTUP.encode())
    session.upstream_connected()
    session.server_data(AUTH_OK + UPSTREAM_KEY.encode() + ReadyForQuery(b"I").encode())
    assert session.phase is Phase.READY
    io.to_client.clear()
    io.to_server.clear()
    return session, io


def test_ssl_request_without_tls_answers_n_then_starts() -> None:
    session, io = new_session()
    session.client_data(SSLRequest().encode() + STARTUP.encode())
    assert bytes(io.to_client) == b"N"
    assert io.actions == ["connect"] and session.phase is Phase.CONNECTING
    session.upstream_connected()
    assert bytes(io.to_server) == STARTUP.encode()


def test_ssl_request_with_tls_answers_s_and_upgrades() -> None:
    session, io = new_session(tls_available=True)
    session.client_data(SSLRequest().encode())
    assert bytes(io.to_client) == b"S" and io.actions == ["tls"]
    session.tls_established()
    session.client_data(STARTUP.encode())
    assert io.actions == ["tls", "connect"]


def test_bytes_pipelined_after_ssl_request_are_refused() -> None:
    session, io = new_session(tls_available=True)
    session.client_data(SSLRequest().encode() + STARTUP.encode())
    assert io.client_error().sqlstate == "08P01"
    assert "close" in io.actions and "tls" not in io.actions


def test_gssenc_request_is_declined_once() -> None:
    session, io = new_session()
    session.client_data(GSSENCRequest().encode())
    assert bytes(io.to_client) == b"N"
    session.client_data(GSSENCRequest().encode())
    assert io.client_error().sqlstate == "08P01"


def test_channel_binding_mechanisms_are_not_offered() -> None:
    session, io = new_session()
    session.client_data(STARTUP.encode())
    session.upstream_connected()
    session.server_data(AuthenticationSASL(("SCRAM-SHA-256-PLUS", "SCRAM-SHA-256")).encode())
    ((kind, body),) = io.client_messages()
    assert kind == b"R"
    assert AuthenticationSASL.decode(body).mechanisms == ("SCRAM-SHA-256",)
    io.to_server.clear()
    initial = SASLInitialResponse("SCRAM-SHA-256", b"n,,n=,r=nonce").encode()
    session.client_data(initial)
    assert bytes(io.to_server) == initial


def test_a_client_that_picks_plus_anyway_is_refused() -> None:
    session, io = new_session()
    session.client_data(STARTUP.encode())
    session.upstream_connected()
    session.server_data(AuthenticationSASL(("SCRAM-SHA-256-PLUS", "SCRAM-SHA-256")).encode())
    session.client_data(
        SASLInitialResponse("SCRAM-SHA-256-PLUS", b"p=tls-server-end-point,,").encode()
    )
    assert io.client_error().sqlstate == "28000"
    assert session.closed


def test_client_gets_its_own_cancel_secret_with_the_real_pid() -> None:
    keys = CancelKeys()
    session, io = new_session(keys)
    session.client_data(STARTUP.encode())
    session.upstream_connected()
    session.server_data(AUTH_OK + UPSTREAM_KEY.encode() + ReadyForQuery(b"I").encode())
    kinds = [k for k, _ in io.client_messages()]
    assert kinds == [b"R", b"K", b"Z"]
    issued = BackendKeyData.decode(io.client_messages()[1][1])
    assert issued.pid == UPSTREAM_KEY.pid and issued.secret != UPSTREAM_KEY.secret
    assert len(issued.secret) == len(UPSTREAM_KEY.secret)

    canceller, cancel_io = new_session(keys)
    canceller.client_data(CancelRequest(issued.pid, issued.secret).encode())
    assert cancel_io.cancels == [UPSTREAM_KEY] and "close" in cancel_io.actions

    forger, forger_io = new_session(keys)
    forger.client_data(CancelRequest(UPSTREAM_KEY.pid, UPSTREAM_KEY.secret).encode())
    assert forger_io.cancels == [] and "close" in forger_io.actions

    session.client_closed()
    assert keys.lookup(issued.pid, issued.secret) is None


def test_ready_relays_chunks_unchanged_and_tracks_transaction_status() -> None:
    session, io = ready_session()
    query = Query("BEGIN; SELECT 1").encode()
    session.client_data(query[:3])
    session.client_data(query[3:])
    assert bytes(io.to_server) == query
    reply = typed(b"C", b"BEGIN\x00") + ReadyForQuery(b"T").encode()
    session.server_data(reply)
    assert bytes(io.to_client) == reply
    assert session.transaction_status == "T"


def test_upstream_loss_at_a_boundary_tells_the_client() -> None:
    session, io = ready_session()
    session.upstream_closed()
    assert io.client_error().sqlstate == "08006"
    assert session.closed


def test_upstream_loss_mid_message_closes_without_corrupting_the_stream() -> None:
    session, io = ready_session()
    session.server_data(typed(b"D", b"\x00\x01\x00\x00\x00\x05hello")[:8])
    session.upstream_closed()
    assert len(io.to_client) == 8 and session.closed


def test_upstream_closing_after_terminate_is_quiet() -> None:
    session, io = ready_session()
    session.client_data(Terminate().encode())
    session.upstream_closed()
    assert bytes(io.to_client) == b"" and session.closed


def test_upstream_fatal_error_is_relayed_without_a_second_error() -> None:
    session, io = ready_session()
    fatal = ErrorResponse({"S": "FATAL", "C": "57P01", "M": "terminating connection"}).encode()
    session.server_data(fatal)
    session.upstream_closed()
    assert bytes(io.to_client) == fatal


def test_the_servers_own_too_many_clients_gets_a_hint_of_what_to_set() -> None:
    session, io = new_session()
    session.client_data(STARTUP.encode())
    session.upstream_connected()
    fatal = {"S": "FATAL", "V": "FATAL", "C": "53300", "M": "sorry, too many clients already"}
    session.server_data(ErrorResponse(fatal).encode())
    error = io.client_error()
    assert (error.sqlstate, error.message) == ("53300", "sorry, too many clients already")
    assert "max_client_connections" in error.fields["H"]
    # any other error at connection is relayed untouched
    session, io = new_session()
    session.client_data(STARTUP.encode())
    session.upstream_connected()
    other = ErrorResponse({"S": "FATAL", "C": "28P01", "M": "password authentication failed"})
    session.server_data(other.encode())
    assert bytes(io.to_client) == other.encode()


def test_invalid_client_framing_after_startup_is_a_protocol_violation() -> None:
    session, io = ready_session()
    session.client_data(b"Q\x00\x00\x00\x02")
    assert io.client_error().sqlstate == "08P01"
    assert bytes(io.to_server) == b"" and session.closed


@pytest.mark.parametrize(("refusal", "sqlstate"), [(errors.too_many_connections(5), "53300")])
def test_refused_connection_gets_its_error_after_startup(
    refusal: ErrorResponse, sqlstate: str
) -> None:
    session, io = new_session(refuse_with=refusal)
    session.client_data(SSLRequest().encode())
    assert bytes(io.to_client) == b"N"
    session.client_data(STARTUP.encode())
    assert io.client_error().sqlstate == sqlstate and "connect" not in io.actions


def test_upstream_unreachable() -> None:
    session, io = new_session()
    session.client_data(STARTUP.encode())
    session.upstream_failed("127.0.0.1:1", "Connection refused")
    error = io.client_error()
    assert error.sqlstate == "08006" and "127.0.0.1:1" in error.message


def test_bad_protocol_version_gets_08p01() -> None:
    session, io = new_session()
    session.client_data(StartupMessage(2 << 16, {"user": "x"}).encode())
    assert io.client_error().sqlstate == "08P01"


def test_direct_tls_handshake_is_refused_with_a_hint() -> None:
    session, io = new_session(tls_available=True)
    session.client_data(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    error = io.client_error()
    assert error.sqlstate == "08P01" and "sslnegotiation" in error.fields["H"]
