"""PostgreSQL protocol messages the proxy looks at: one class a message, each with encode/decode.

Only what the proxy must read or write itself is modelled here. Everything else crosses the
proxy as opaque bytes (see `framing`), so it is never decoded on the hot path.

Reference: PostgreSQL documentation, "Frontend/Backend Protocol — Message Formats".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar

_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_HEADER = struct.Struct("!cI")

# Codes of the untyped packets a client may open a connection with.
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102
PROTOCOL_3_0 = 3 << 16
PROTOCOL_3_2 = (3 << 16) | 2

# Longest startup packet PostgreSQL accepts (MAX_STARTUP_PACKET_LENGTH); a cancel key is at most
# 256 bytes in protocol 3.2.
MAX_STARTUP_PACKET = 10000
MAX_CANCEL_KEY = 256
# Longest typed message PostgreSQL accepts (PQ_LARGE_MESSAGE_LIMIT = MaxAllocSize - 1).
MAX_MESSAGE = 0x3FFFFFFF - 1


class DecodeError(ValueError):
    """Bytes that do not form the message they claim to be; the proxy answers SQLSTATE 08P01."""


def typed(kind: bytes, body: bytes) -> bytes:
    """Frame a body as a typed message: one type byte, an int32 length, the body."""
    return _HEADER.pack(kind, len(body) + 4) + body


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.find(b"\0", pos)
    if end < 0:
        raise DecodeError("missing string terminator")
    return data[pos:end].decode("utf-8", "replace"), end + 1


# ---------------------------------------------------------------- untyped client packets


@dataclass(frozen=True)
class SSLRequest:
    def encode(self) -> bytes:
        return _I32.pack(8) + _I32.pack(SSL_REQUEST_CODE)


@dataclass(frozen=True)
class GSSENCRequest:
    def encode(self) -> bytes:
        return _I32.pack(8) + _I32.pack(GSSENC_REQUEST_CODE)


@dataclass(frozen=True)
class CancelRequest:
    pid: int
    secret: bytes

    def encode(self) -> bytes:
        body = _I32.pack(CANCEL_REQUEST_CODE) + _I32.pack(self.pid) + self.secret
        return _I32.pack(len(body) + 4) + body


@dataclass(frozen=True)
class StartupMessage:
    version: int
    parameters: dict[str, str]
    raw: bytes = field(default=b"", compare=False, repr=False)

    def encode(self) -> bytes:
        if self.raw:
            return self.raw
        body = bytearray(_I32.pack(self.version))
        for key, value in self.parameters.items():
            body += key.encode() + b"\0" + value.encode() + b"\0"
        body += b"\0"
        return _I32.pack(len(body) + 4) + bytes(body)


StartupPacket = SSLRequest | GSSENCRequest | CancelRequest | StartupMessage


def decode_startup_packet(packet: bytes) -> StartupPacket:
    """Decode one whole untyped packet (its length word included)."""
    if len(packet) < 8:
        raise DecodeError("startup packet too short")
    code = _I32.unpack_from(packet, 4)[0]
    if code == SSL_REQUEST_CODE:
        if len(packet) != 8:
            raise DecodeError("SSLRequest with a body")
        return SSLRequest()
    if code == GSSENC_REQUEST_CODE:
        if len(packet) != 8:
            raise DecodeError("GSSENCRequest with a body")
        return GSSENCRequest()
    if code == CANCEL_REQUEST_CODE:
        if not 16 <= len(packet) <= 12 + MAX_CANCEL_KEY:
            raise DecodeError("CancelRequest of the wrong length")
        return CancelRequest(pid=_I32.unpack_from(packet, 8)[0], secret=bytes(packet[12:]))
    if code >> 16 != 3:
        raise DecodeError(
            f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: "
            "pgnl speaks protocol 3.x, as PostgreSQL 7.4 and later do"
        )
    parameters: dict[str, str] = {}
    pos = 8
    while True:
        if pos >= len(packet):
            raise DecodeError("startup packet has no final terminator")
        if packet[pos] == 0:
            if pos != len(packet) - 1:
                raise DecodeError("bytes after the startup packet's final terminator")
            break
        key, pos = _cstring(packet, pos)
        value, pos = _cstring(packet, pos)
        parameters[key] = value
    if "user" not in parameters:
        raise DecodeError("no PostgreSQL user name specified in startup packet")
    return StartupMessage(version=code, parameters=parameters, raw=bytes(packet))


# ---------------------------------------------------------------- typed client messages


@dataclass(frozen=True)
class Query:
    KIND: ClassVar[bytes] = b"Q"
    text: str

    def encode(self) -> bytes:
        return typed(self.KIND, self.text.encode() + b"\0")


@dataclass(frozen=True)
class Terminate:
    KIND: ClassVar[bytes] = b"X"

    def encode(self) -> bytes:
        return typed(self.KIND, b"")


@dataclass(frozen=True)
class SASLInitialResponse:
    """The client's choice of SASL mechanism: the 'p' message answering AuthenticationSASL."""

    KIND: ClassVar[bytes] = b"p"
    mechanism: str
    data: bytes

    @classmethod
    def decode(cls, body: bytes) -> SASLInitialResponse:
        mechanism, pos = _cstring(body, 0)
        if len(body) < pos + 4:
            raise DecodeError("SASLInitialResponse too short")
        size = _I32.unpack_from(body, pos)[0]
        data = body[pos + 4 :]
        if size != -1 and size != len(data):
            raise DecodeError("SASLInitialResponse length does not match its data")
        return cls(mechanism=mechanism, data=bytes(data))

    def encode(self) -> bytes:
        body = self.mechanism.encode() + b"\0" + _I32.pack(len(self.data)) + self.data
        return typed(self.KIND, body)


# ---------------------------------------------------------------- backend messages

AUTH_OK = 0
AUTH_SASL = 10


@dataclass(frozen=True)
class AuthenticationSASL:
    KIND: ClassVar[bytes] = b"R"
    mechanisms: tuple[str, ...]

    @classmethod
    def decode(cls, body: bytes) -> AuthenticationSASL:
        if len(body) < 4 or _I32.unpack_from(body, 0)[0] != AUTH_SASL:
            raise DecodeError("not an AuthenticationSASL message")
        mechanisms: list[str] = []
        pos = 4
        while pos < len(body) and body[pos] != 0:
            name, pos = _cstring(body, pos)
            mechanisms.append(name)
        return cls(tuple(mechanisms))

    def encode(self) -> bytes:
        body = _I32.pack(AUTH_SASL)
        body += b"".join(m.encode() + b"\0" for m in self.mechanisms) + b"\0"
        return typed(self.KIND, body)


@dataclass(frozen=True)
class BackendKeyData:
    KIND: ClassVar[bytes] = b"K"
    pid: int
    secret: bytes

    @classmethod
    def decode(cls, body: bytes) -> BackendKeyData:
        if not 8 <= len(body) <= 4 + MAX_CANCEL_KEY:
            raise DecodeError("BackendKeyData of the wrong length")
        return cls(pid=_I32.unpack_from(body, 0)[0], secret=bytes(body[4:]))

    def encode(self) -> bytes:
        return typed(self.KIND, _I32.pack(self.pid) + self.secret)


@dataclass(frozen=True)
class ReadyForQuery:
    KIND: ClassVar[bytes] = b"Z"
    status: bytes  # b"I" idle, b"T" in a transaction block, b"E" in a failed one

    def encode(self) -> bytes:
        return typed(self.KIND, self.status)


# Field codes of ErrorResponse and NoticeResponse.
SEVERITY = "S"
SEVERITY_V = "V"
SQLSTATE = "C"
MESSAGE = "M"
DETAIL = "D"
HINT = "H"


@dataclass(frozen=True)
class ErrorResponse:
    """An ErrorResponse: a list of coded fields (a NoticeResponse has the same shape)."""

    KIND: ClassVar[bytes] = b"E"
    fields: dict[str, str]

    @property
    def sqlstate(self) -> str:
        return self.fields.get(SQLSTATE, "")

    @property
    def severity(self) -> str:
        return self.fields.get(SEVERITY_V) or self.fields.get(SEVERITY, "")

    @property
    def message(self) -> str:
        return self.fields.get(MESSAGE, "")

    @classmethod
    def decode(cls, body: bytes) -> ErrorResponse:
        fields: dict[str, str] = {}
        pos = 0
        while pos < len(body) and body[pos] != 0:
            code = chr(body[pos])
            value, pos = _cstring(body, pos + 1)
            fields[code] = value
        return cls(fields)

    def encode(self) -> bytes:
        body = b"".join(
            code.encode() + value.encode() + b"\0" for code, value in self.fields.items()
        )
        return typed(self.KIND, body + b"\0")


def split_messages(data: bytes) -> list[tuple[bytes, bytes]]:
    """Split a buffer of whole typed messages into (type, body) pairs. For tests and tools."""
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    while pos + 5 <= len(data):
        kind = data[pos : pos + 1]
        length = _U32.unpack_from(data, pos + 1)[0]
        if length < 4 or pos + 1 + length > len(data):
            break
        out.append((kind, data[pos + 5 : pos + 1 + length]))
        pos += 1 + length
    return out
