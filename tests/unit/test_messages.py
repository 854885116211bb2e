"""Encode/decode of the messages the proxy reads or writes itself."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest

from proxy.wire import errors
from proxy.wire.messages import (
    AuthenticationSASL,
    BackendKeyData,
    Bind,
    CancelRequest,
    Close,
    CommandComplete,
    DataRow,
    DecodeError,
    Describe,
    ErrorResponse,
    Execute,
    FieldDescription,
    GSSENCRequest,
    NoticeResponse,
    NotificationResponse,
    ParameterStatus,
    Parse,
    ReadyForQuery,
    RowDescription,
    SASLInitialResponse,
    SSLRequest,
    StartupMessage,
    decode_startup_packet,
    split_messages,
)


@pytest.mark.parametrize(
    "message",
    [
        SSLRequest(),
        GSSENCRequest(),
        CancelRequest(1234, b"\x01\x02\x03\x04"),
        CancelRequest(99, bytes(range(32))),  # protocol 3.2: longer keys
        StartupMessage(196608, {"user": "alice", "database": "db", "options": "-c x=1"}),
        StartupMessage(196610, {"user": "bob", "_pq_.feature": "on"}),
    ],
)
def test_startup_packets_round_trip(message: object) -> None:
    encoded = message.encode()  # type: ignore[attr-defined]
    decoded = decode_startup_packet(encoded)
    assert decoded == message


@pytest.mark.parametrize(
    ("packet", "complaint"),
    [
        (struct.pack("!ii", 8, 2 << 16), "unsupported frontend protocol 2.0"),
        (struct.pack("!ii", 8, 4 << 16), "unsupported frontend protocol 4.0"),
        (struct.pack("!ii", 12, 80877103) + b"junk", "SSLRequest with a body"),
        (struct.pack("!ii", 13, 196608) + b"user\x00", "missing string terminator"),
        (
            struct.pack("!ii", 19, 196608) + b"user\x00u\x00\x00junk",
            "after the .* final terminator",
        ),
        (struct.pack("!ii", 15, 196608) + b"user\x00u\x00", "no final terminator"),
        (struct.pack("!ii", 9, 196608) + b"\x00", "no PostgreSQL user name"),
        (struct.pack("!iii", 12, 80877102, 5), "CancelRequest of the wrong length"),
    ],
)
def test_bad_startup_packets(packet: bytes, complaint: str) -> None:
    with pytest.raises(DecodeError, match=complaint):
        decode_startup_packet(packet)


def test_sasl_mechanisms() -> None:
    offered = AuthenticationSASL(("SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"))
    ((kind, body),) = split_messages(offered.encode())
    assert kind == b"R" and AuthenticationSASL.decode(body) == offered
    initial = SASLInitialResponse("SCRAM-SHA-256", b"n,,n=,r=abc")
    ((_, body),) = split_messages(initial.encode())
    assert SASLInitialResponse.decode(body) == initial


def test_backend_key_data_lengths() -> None:
    key = BackendKeyData(7, b"\xaa" * 32)
    ((_, body),) = split_messages(key.encode())
    assert BackendKeyData.decode(body) == key
    with pytest.raises(DecodeError):
        BackendKeyData.decode(b"\x00\x00\x00\x07")


BUILDERS: dict[str, tuple[Callable[[], ErrorResponse], str]] = {
    "protocol_violation": (lambda: errors.protocol_violation("x"), "08P01"),
    "unsupported_protocol": (lambda: errors.unsupported_protocol("x"), "08P01"),
    "upstream_unreachable": (lambda: errors.upstream_unreachable("h:1", "refused"), "08006"),
    "upstream_lost": (errors.upstream_lost, "08006"),
    "channel_binding_refused": (lambda: errors.channel_binding_refused("X-PLUS"), "28000"),
    "too_many_connections": (lambda: errors.too_many_connections(3), "53300"),
    "server_full": (
        lambda: errors.server_full(
            ErrorResponse({"S": "FATAL", "V": "FATAL", "C": "53300", "M": "too many clients"})
        ),
        "53300",
    ),
    "direct_tls_unsupported": (errors.direct_tls_unsupported, "08P01"),
    "shutting_down": (errors.shutting_down, "57P01"),
    "internal_error": (lambda: errors.internal_error("x"), "XX000"),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_proxy_error_has_sqlstate_and_hint(name: str) -> None:
    build, sqlstate = BUILDERS[name]
    error = build()
    ((kind, body),) = split_messages(error.encode())
    decoded = ErrorResponse.decode(body)
    assert kind == b"E"
    assert decoded.sqlstate == sqlstate
    assert decoded.severity == "FATAL"
    assert decoded.message and decoded.fields.get("H")


def test_builders_table_covers_every_builder() -> None:
    public = {
        name
        for name in dir(errors)
        if callable(getattr(errors, name)) and not name.startswith("_") and name.islower()
    }
    assert public == set(BUILDERS)


# ---------------------------------------------------------------- what the proxy sends and reads
# for directives (its own queries, and the client's Parse/Bind it rewrites)


@pytest.mark.parametrize(
    "message",
    [
        Parse(b"", b"SELECT 1"),
        Parse(b"S_1", "SELECT $1, 'é'".encode(), (23, 0)),
        Bind(b"", b""),
        Bind(b"C_1", b"S_1", (b"1", None, b""), (0, 1), (1,)),
        Describe(b"S", b"S_1"),
        Describe(b"P", b""),
        Close(b"P", b"C_1"),
        Execute(b"", 0),
        Execute(b"C_1", 100),
        ReadyForQuery(b"T"),
        ParameterStatus("client_encoding", "UTF8"),
        RowDescription((FieldDescription(b"sql", 0, 0, 25, -1, -1, 0),)),
        DataRow((b"42", None, b"")),
        CommandComplete("SELECT 1"),
        NotificationResponse(4242, "channel", "payload é"),
    ],
    ids=lambda m: type(m).__name__,
)
def test_protocol_messages_round_trip(message: Any) -> None:
    ((kind, body),) = split_messages(message.encode())
    assert kind == message.KIND
    assert type(message).decode(body) == message


def test_notice_response_is_an_error_response_of_its_own_kind() -> None:
    notice = NoticeResponse({"S": "NOTICE", "C": "00000", "M": "pgnl: SELECT 'é'"})
    ((kind, body),) = split_messages(notice.encode("latin-1"))
    assert kind == b"N" and b"\xe9" in body
    assert NoticeResponse.decode(body, "latin-1") == notice


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (Parse, b"S_1\x00SELECT 1\x00\x00\x02\x00\x00\x00\x17"),
        (Parse, b"no terminator"),
        (Bind, b"\x00\x00\x00\x00\x00\x01\x00\x00\x00\x09abc"),
        (Describe, b"XS_1\x00"),
        (Execute, b"\x00\x00\x00"),
        (DataRow, b"\x00\x01\x00\x00\x00\x05ab"),
        (ReadyForQuery, b"Q"),
    ],
)
def test_malformed_protocol_messages(cls: Any, body: bytes) -> None:
    with pytest.raises(DecodeError):
        cls.decode(body)
