"""PostgreSQL protocol messages the proxy looks at: one class a message, each with encode/decode.

Only what the proxy must read or write itself is modelled here. Everything else crosses the
proxy as opaque bytes (see `framing`), so it is never decoded on the hot path.

Reference: PostgreSQL documentation, "Frontend/Backend Protocol — Message Formats".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import ClassVar, Self

_I16 = struct.Struct("!h")
_U16 = struct.Struct("!H")
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


def _cbytes(data: bytes, pos: int) -> tuple[bytes, int]:
    """A NUL-terminated string as the bytes it was sent in (the client's encoding)."""
    end = data.find(b"\0", pos)
    if end < 0:
        raise DecodeError("missing string terminator")
    return bytes(data[pos:end]), end + 1


def _u16(data: bytes, pos: int, what: str) -> tuple[int, int]:
    if len(data) < pos + 2:
        raise DecodeError(f"{what} too short")
    return _U16.unpack_from(data, pos)[0], pos + 2


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


# The extended query protocol. Names and query texts stay bytes, in the client's encoding: the
# proxy reads them to decide, and writes them back untouched unless it rewrites the query.


@dataclass(frozen=True)
class Parse:
    KIND: ClassVar[bytes] = b"P"
    name: bytes
    query: bytes
    param_types: tuple[int, ...] = ()

    @classmethod
    def decode(cls, body: bytes) -> Parse:
        name, pos = _cbytes(body, 0)
        query, pos = _cbytes(body, pos)
        count, pos = _u16(body, pos, "Parse")
        if len(body) != pos + 4 * count:
            raise DecodeError("Parse message's parameter types do not match its length")
        types = struct.unpack_from(f"!{count}I", body, pos) if count else ()
        return cls(name, query, tuple(types))

    def encode(self) -> bytes:
        types = self.param_types
        body = b"".join(
            (
                self.name,
                b"\0",
                self.query,
                b"\0",
                _U16.pack(len(types)),
                struct.pack(f"!{len(types)}I", *types),
            )
        )
        return typed(self.KIND, body)


@dataclass(frozen=True)
class Bind:
    """A Bind: which statement into which portal, with parameters (None: NULL) and formats."""

    KIND: ClassVar[bytes] = b"B"
    portal: bytes
    statement: bytes
    params: tuple[bytes | None, ...] = ()
    param_formats: tuple[int, ...] = ()
    result_formats: tuple[int, ...] = ()

    @classmethod
    def decode(cls, body: bytes) -> Bind:
        portal, pos = _cbytes(body, 0)
        statement, pos = _cbytes(body, pos)
        count, pos = _u16(body, pos, "Bind")
        if len(body) < pos + 2 * count:
            raise DecodeError("Bind too short")
        param_formats = struct.unpack_from(f"!{count}h", body, pos)
        pos += 2 * count
        count, pos = _u16(body, pos, "Bind")
        params: list[bytes | None] = []
        for _ in range(count):
            if len(body) < pos + 4:
                raise DecodeError("Bind too short")
            size = _I32.unpack_from(body, pos)[0]
            pos += 4
            if size < 0:
                params.append(None)
                continue
            if len(body) < pos + size:
                raise DecodeError("Bind too short")
            params.append(bytes(body[pos : pos + size]))
            pos += size
        count, pos = _u16(body, pos, "Bind")
        if len(body) != pos + 2 * count:
            raise DecodeError("Bind message's result formats do not match its length")
        result_formats = struct.unpack_from(f"!{count}h", body, pos)
        return cls(portal, statement, tuple(params), tuple(param_formats), tuple(result_formats))

    def encode(self) -> bytes:
        parts = [self.portal, b"\0", self.statement, b"\0", _U16.pack(len(self.param_formats))]
        parts += [_I16.pack(f) for f in self.param_formats]
        parts.append(_U16.pack(len(self.params)))
        for value in self.params:
            if value is None:
                parts.append(_I32.pack(-1))
            else:
                parts += [_I32.pack(len(value)), value]
        parts.append(_U16.pack(len(self.result_formats)))
        parts += [_I16.pack(f) for f in self.result_formats]
        return typed(self.KIND, b"".join(parts))


@dataclass(frozen=True)
class Describe:
    """Describe a prepared statement (target b"S") or a portal (b"P")."""

    KIND: ClassVar[bytes] = b"D"
    target: bytes
    name: bytes = b""

    @classmethod
    def decode(cls, body: bytes) -> Describe:
        if body[:1] not in (b"S", b"P"):
            raise DecodeError("Describe of neither a statement nor a portal")
        name, pos = _cbytes(body, 1)
        if pos != len(body):
            raise DecodeError("bytes after the end of a Describe message")
        return cls(body[:1], name)

    def encode(self) -> bytes:
        return typed(self.KIND, self.target + self.name + b"\0")


@dataclass(frozen=True)
class Close:
    """Close a prepared statement (target b"S") or a portal (b"P")."""

    KIND: ClassVar[bytes] = b"C"
    target: bytes
    name: bytes = b""

    @classmethod
    def decode(cls, body: bytes) -> Close:
        described = Describe.decode(body)
        return cls(described.target, described.name)

    def encode(self) -> bytes:
        return typed(self.KIND, self.target + self.name + b"\0")


@dataclass(frozen=True)
class Execute:
    KIND: ClassVar[bytes] = b"E"
    portal: bytes = b""
    max_rows: int = 0  # 0: all of them

    @classmethod
    def decode(cls, body: bytes) -> Execute:
        portal, pos = _cbytes(body, 0)
        if len(body) != pos + 4:
            raise DecodeError("Execute message of the wrong length")
        return cls(portal, _I32.unpack_from(body, pos)[0])

    def encode(self) -> bytes:
        return typed(self.KIND, self.portal + b"\0" + _I32.pack(self.max_rows))


SYNC = typed(b"S", b"")
FLUSH = typed(b"H", b"")


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

    @classmethod
    def decode(cls, body: bytes) -> ReadyForQuery:
        if len(body) != 1 or body not in (b"I", b"T", b"E"):
            raise DecodeError("ReadyForQuery with an invalid status")
        return cls(bytes(body))

    def encode(self) -> bytes:
        return typed(self.KIND, self.status)


@dataclass(frozen=True)
class ParameterStatus:
    KIND: ClassVar[bytes] = b"S"
    name: str
    value: str

    @classmethod
    def decode(cls, body: bytes) -> ParameterStatus:
        name, pos = _cstring(body, 0)
        value, _ = _cstring(body, pos)
        return cls(name, value)

    def encode(self) -> bytes:
        return typed(self.KIND, self.name.encode() + b"\0" + self.value.encode() + b"\0")


@dataclass(frozen=True)
class FieldDescription:
    name: bytes
    table_oid: int
    column: int
    type_oid: int
    type_size: int
    type_modifier: int
    format: int


_FIELD = struct.Struct("!IhIhih")


@dataclass(frozen=True)
class RowDescription:
    KIND: ClassVar[bytes] = b"T"
    fields: tuple[FieldDescription, ...]

    @classmethod
    def decode(cls, body: bytes) -> RowDescription:
        count, pos = _u16(body, 0, "RowDescription")
        fields = []
        for _ in range(count):
            name, pos = _cbytes(body, pos)
            if len(body) < pos + _FIELD.size:
                raise DecodeError("RowDescription too short")
            fields.append(FieldDescription(name, *_FIELD.unpack_from(body, pos)))
            pos += _FIELD.size
        return cls(tuple(fields))

    def encode(self) -> bytes:
        parts = [_U16.pack(len(self.fields))]
        for f in self.fields:
            parts += [
                f.name,
                b"\0",
                _FIELD.pack(
                    f.table_oid, f.column, f.type_oid, f.type_size, f.type_modifier, f.format
                ),
            ]
        return typed(self.KIND, b"".join(parts))


@dataclass(frozen=True)
class DataRow:
    KIND: ClassVar[bytes] = b"D"
    values: tuple[bytes | None, ...]

    @classmethod
    def decode(cls, body: bytes) -> DataRow:
        count, pos = _u16(body, 0, "DataRow")
        values: list[bytes | None] = []
        for _ in range(count):
            if len(body) < pos + 4:
                raise DecodeError("DataRow too short")
            size = _I32.unpack_from(body, pos)[0]
            pos += 4
            if size < 0:
                values.append(None)
            elif len(body) < pos + size:
                raise DecodeError("DataRow too short")
            else:
                values.append(bytes(body[pos : pos + size]))
                pos += size
        return cls(tuple(values))

    def encode(self) -> bytes:
        parts = [_U16.pack(len(self.values))]
        for value in self.values:
            parts += [_I32.pack(-1)] if value is None else [_I32.pack(len(value)), value]
        return typed(self.KIND, b"".join(parts))


@dataclass(frozen=True)
class CommandComplete:
    KIND: ClassVar[bytes] = b"C"
    tag: str

    @classmethod
    def decode(cls, body: bytes) -> CommandComplete:
        return cls(_cstring(body, 0)[0])

    def encode(self) -> bytes:
        return typed(self.KIND, self.tag.encode() + b"\0")


@dataclass(frozen=True)
class NotificationResponse:
    KIND: ClassVar[bytes] = b"A"
    pid: int
    channel: str
    payload: str

    @classmethod
    def decode(cls, body: bytes) -> NotificationResponse:
        if len(body) < 4:
            raise DecodeError("NotificationResponse too short")
        channel, pos = _cstring(body, 4)
        payload, _ = _cstring(body, pos)
        return cls(_I32.unpack_from(body, 0)[0], channel, payload)

    def encode(self) -> bytes:
        body = _I32.pack(self.pid) + self.channel.encode() + b"\0" + self.payload.encode() + b"\0"
        return typed(self.KIND, body)


# Field codes of ErrorResponse and NoticeResponse.
SEVERITY = "S"
SEVERITY_V = "V"
SQLSTATE = "C"
MESSAGE = "M"
DETAIL = "D"
HINT = "H"
WHERE = "W"


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
    def decode(cls, body: bytes, encoding: str = "utf-8") -> Self:
        """Decode the fields; `encoding` is the client encoding the server wrote them in."""
        fields: dict[str, str] = {}
        pos = 0
        while pos < len(body) and body[pos] != 0:
            code = chr(body[pos])
            raw, pos = _cbytes(body, pos + 1)
            fields[code] = raw.decode(encoding, "replace")
        return cls(fields)

    def encode(self, encoding: str = "utf-8") -> bytes:
        body = b"".join(
            code.encode() + value.encode(encoding, "replace") + b"\0"
            for code, value in self.fields.items()
        )
        return typed(self.KIND, body + b"\0")


@dataclass(frozen=True)
class NoticeResponse(ErrorResponse):
    """A NoticeResponse: the fields of an ErrorResponse, for a warning or a notice."""

    KIND: ClassVar[bytes] = b"N"


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
