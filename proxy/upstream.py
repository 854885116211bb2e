"""The proxy as a client of the upstream server, sans I/O: what it sends for a query of its own,
and how it reads the replies.

The pipeline reaches the database through `Database.fetch(query, params, timeout_s)`. Over the
client's upstream connection each fetch is one write, in the read-only scope the session has
opened (see `directive_flow`):

    Query  SAVEPOINT pgnl_fetch; SET LOCAL statement_timeout = …
    Parse/Bind/Describe/Execute/Sync   the query, parameters as text with type OID 0
    Query  ROLLBACK TO SAVEPOINT pgnl_fetch; RELEASE SAVEPOINT pgnl_fetch
    Close/Sync                          the statement (not an error if the Parse failed)

so a fetch that fails (a timeout, a missing table) leaves the scope as it was, and the next fetch
goes on. Replies are read into `Replies`, one group of messages per ReadyForQuery; `rows` decodes
a fetch's rows to Python by type OID, and raises `UpstreamQueryError` for an ErrorResponse.
"""

from __future__ import annotations

import decimal
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from proxy.wire.messages import (
    SYNC,
    Bind,
    Close,
    DataRow,
    Describe,
    ErrorResponse,
    Execute,
    Parse,
    Query,
    RowDescription,
    typed,
)

FETCH_STATEMENT = b"pgnl_fetch"
FETCH_SYNCS = 4
"""ReadyForQuery messages one fetch's write is answered with."""

# Type OIDs decoded to something other than str.
_BOOL = 16
_INTEGERS = frozenset((20, 21, 23, 26))  # int8, int2, int4, oid
_FLOATS = frozenset((700, 701))  # float4, float8
_NUMERIC = 1700

# PostgreSQL's client encodings, by the name it reports, and Python's codec for each.
_CODECS = {
    "UTF8": "utf-8",
    "SQL_ASCII": "utf-8",  # bytes as stored; UTF-8 is the best guess, undecodable bytes replaced
    "LATIN1": "iso8859-1",
    "LATIN2": "iso8859-2",
    "LATIN3": "iso8859-3",
    "LATIN4": "iso8859-4",
    "LATIN5": "iso8859-9",
    "LATIN6": "iso8859-10",
    "LATIN7": "iso8859-13",
    "LATIN8": "iso8859-14",
    "LATIN9": "iso8859-15",
    "LATIN10": "iso8859-16",
    "ISO_8859_5": "iso8859-5",
    "ISO_8859_6": "iso8859-6",
    "ISO_8859_7": "iso8859-7",
    "ISO_8859_8": "iso8859-8",
    "WIN866": "cp866",
    "WIN874": "cp874",
    "WIN1250": "cp1250",
    "WIN1251": "cp1251",
    "WIN1252": "cp1252",
    "WIN1253": "cp1253",
    "WIN1254": "cp1254",
    "WIN1255": "cp1255",
    "WIN1256": "cp1256",
    "WIN1257": "cp1257",
    "WIN1258": "cp1258",
    "KOI8R": "koi8-r",
    "KOI8U": "koi8-u",
    "EUC_JP": "euc_jp",
    "EUC_CN": "gb2312",
    "EUC_KR": "euc_kr",
    "EUC_JIS_2004": "euc_jis_2004",
    "SJIS": "shift_jis",
    "SHIFT_JIS_2004": "shift_jis_2004",
    "BIG5": "big5",
    "GBK": "gbk",
    "GB18030": "gb18030",
    "UHC": "cp949",
    "JOHAB": "johab",
}


def python_codec(pg_encoding: str) -> str:
    """Python's codec for a PostgreSQL client encoding (UTF-8 for one it has none for)."""
    return _CODECS.get(pg_encoding.upper().replace("-", "_"), "utf-8")


class UpstreamQueryError(Exception):
    """A query of the proxy's own failed: the server's ErrorResponse, or the connection went.

    `sqlstate` and `message` as PostgreSQL gave them (the pipeline reads `sqlstate`).
    """

    def __init__(self, sqlstate: str, message: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(f"{message} (SQLSTATE {sqlstate})")
        self.sqlstate = sqlstate
        self.message = message
        self.fields = fields or {}

    @classmethod
    def from_error(cls, error: ErrorResponse) -> UpstreamQueryError:
        return cls(error.sqlstate, error.message, dict(error.fields))


FetchResult: TypeAlias = list[tuple[Any, ...]] | UpstreamQueryError
FetchDone: TypeAlias = Callable[[FetchResult], None]
Fetch: TypeAlias = Callable[[str, Sequence[object], float | None, FetchDone], None]
"""How a session runs one query of the pipeline's: (query, params, timeout_s, done); `done` gets
the rows or the error. Called, and calling back, on the event loop."""


def connection_gone() -> UpstreamQueryError:
    return UpstreamQueryError("08006", "the client's connection is closed")


def canceled() -> UpstreamQueryError:
    return UpstreamQueryError("57014", "canceling statement due to user request")


def _text_param(value: object, encoding: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, float):
        if math.isnan(value):
            return b"NaN"
        if math.isinf(value):
            return b"Infinity" if value > 0 else b"-Infinity"
        return repr(value).encode()
    if isinstance(value, int | decimal.Decimal):
        return str(value).encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return b"\\x" + bytes(value).hex().encode()
    if isinstance(value, list | tuple):
        return _array_literal(value, encoding)
    if isinstance(value, dict):
        return json.dumps(value).encode(encoding, "replace")
    return str(value).replace("\0", "").encode(encoding, "replace")


def _array_literal(values: Sequence[object], encoding: str) -> bytes:
    """A list as PostgreSQL's array input reads it (`{"a","b",NULL}`), as psycopg sends one:
    each element quoted, with its quotes and backslashes escaped; a list in it a sub-array."""
    parts = []
    for value in values:
        if isinstance(value, list | tuple):
            parts.append(_array_literal(value, encoding))
            continue
        text = _text_param(value, encoding)
        if text is None:
            parts.append(b"NULL")
        else:
            parts.append(b'"' + text.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"')
    return b"{" + b",".join(parts) + b"}"


def bind_params(params: Sequence[object], encoding: str) -> tuple[bytes | None, ...]:
    """Parameters as text values (the server infers their types: OID 0 in the Parse)."""
    return tuple(_text_param(value, encoding) for value in params)


def statement_timeout(timeout_s: float) -> str:
    return f"SET LOCAL statement_timeout = {max(1, round(timeout_s * 1000))}"


def fetch_messages(query: str, params: Sequence[object], timeout_s: float, encoding: str) -> bytes:
    """The one write that runs `query` in a savepoint of its own, under a statement timeout."""
    name = FETCH_STATEMENT
    return b"".join(
        (
            Query(f"SAVEPOINT pgnl_fetch; {statement_timeout(timeout_s)}").encode(),
            Parse(name, query.replace("\0", "").encode(encoding, "replace")).encode(),
            Bind(name, name, bind_params(params, encoding)).encode(),
            Describe(b"P", name).encode(),
            Execute(name).encode(),
            SYNC,
            Query("ROLLBACK TO SAVEPOINT pgnl_fetch; RELEASE SAVEPOINT pgnl_fetch").encode(),
            Close(b"S", name).encode(),
            SYNC,
        )
    )


@dataclass
class Replies:
    """What the server answered to one write of the proxy's: the messages it did not relay, one
    group per ReadyForQuery; the first ErrorResponse; the last transaction status."""

    groups: list[list[tuple[bytes, bytes]]] = field(default_factory=lambda: [[]])
    error: ErrorResponse | None = None
    status: str = "I"
    ready: int = 0

    def add(self, kind: bytes, body: bytes) -> None:
        self.groups[-1].append((kind, body))


def decode_value(oid: int, raw: bytes | None, encoding: str) -> Any:
    """A text-format value as Python: bool, int, float, Decimal or str by type OID; NULL: None."""
    if raw is None:
        return None
    if oid == _BOOL:
        return raw == b"t"
    if oid in _INTEGERS:
        return int(raw)
    if oid in _FLOATS:
        return float(raw)
    if oid == _NUMERIC:
        return decimal.Decimal(raw.decode("ascii"))
    return raw.decode(encoding, "replace")


def rows(replies: Replies, encoding: str) -> list[tuple[Any, ...]]:
    """The rows of a fetch (`fetch_messages`), decoded; raises `UpstreamQueryError`."""
    group = replies.groups[1] if len(replies.groups) > 1 else []
    oids: list[int] = []
    out: list[tuple[Any, ...]] = []
    for kind, body in group:
        if kind == b"T":
            oids = [f.type_oid for f in RowDescription.decode(body).fields]
        elif kind == b"D":
            values = DataRow.decode(body).values
            out.append(
                tuple(
                    decode_value(oid, raw, encoding) for oid, raw in zip(oids, values, strict=True)
                )
            )
    if replies.error is not None:
        raise UpstreamQueryError.from_error(replies.error)
    return out


def is_async(kind: bytes) -> bool:
    """NoticeResponse, ParameterStatus and NotificationResponse may come at any time."""
    return kind in (b"N", b"S", b"A")


def ready_for_query(status: str) -> bytes:
    return typed(b"Z", status.encode())
