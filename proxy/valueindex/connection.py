"""What building the value index needs of a database: `IndexConnection`, and its two kinds.

- `PsycopgIndexConnection`, for `pgnl index`: a connection of its own in autocommit, each of
  the build's transactions a real one (readers see a group of columns change at its commit),
  the job under pgnl's session-level advisory lock, rows written with binary COPY.
- The calling backend, for `nl.refresh_index` (`proxy.pg_functions.remote`): everything inside
  the caller's transaction, each of the build's transactions a subtransaction, the job under a
  transaction-level advisory lock, rows written with INSERT.

Queries use psycopg's placeholders (`%s`, `%(name)s`) and may be `psycopg.sql` compositions.
A failed query raises the `psycopg.errors` class of its SQLSTATE, on either kind.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import sql

from proxy.migrate import advisory_lock, autocommit

Query = str | bytes | sql.SQL | sql.Composed
Params = Sequence[Any] | Mapping[str, Any]

VALUE_COLUMNS = (
    "schema_name, table_name, column_name, schema_oid, table_oid, column_attnum, value, "
    "normalised, frequency, embedding"
)


@dataclass(frozen=True)
class ValueRow:
    """One row of nl.value_index; `embedding` in pgvector's binary form (see `vector_bytes`)."""

    schema_name: str
    table_name: str
    column_name: str
    schema_oid: int
    table_oid: int
    column_attnum: int
    value: str
    normalised: str
    frequency: int
    embedding: bytes


_VECTOR_HEAD = struct.Struct("!HH")


def vector_text(embedding: bytes) -> str:
    """pgvector's text form (`[0.1,0.2,...]`) of an embedding in its binary form."""
    dimension, _ = _VECTOR_HEAD.unpack_from(embedding)
    floats = struct.unpack_from(f"!{dimension}f", embedding, _VECTOR_HEAD.size)
    return "[" + ",".join(f"{number:.9g}" for number in floats) + "]"


class IndexConnection(Protocol):
    """See the module docstring."""

    def rows(self, query: Query, params: Params = ()) -> list[tuple[Any, ...]]:
        """The query's rows."""
        ...

    def run(self, query: Query, params: Params = ()) -> int:
        """Run a statement; the number of rows it changed (0 where it tells none)."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """All or nothing: committed when the block ends, rolled back when it raises."""
        ...

    def insert_values(self, rows: Sequence[ValueRow]) -> None:
        """Add rows to nl.value_index."""
        ...

    def job(self, name: str, lock: int) -> AbstractContextManager[None]:
        """Run the whole job, `name` for messages, holding pgnl's advisory lock `lock` (another
        holder is waited for)."""
        ...


# COPY's binary format (PostgreSQL documentation, "COPY — Binary Format"): writing the 384
# floats of an embedding as text costs more than computing it.
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_COPY_TRAILER = struct.pack("!h", -1)
_FIELD_LENGTH = struct.Struct("!i")


def _binary_copy_row(fields: Sequence[bytes]) -> bytes:
    out = [struct.pack("!h", len(fields))]
    for data in fields:
        out += [_FIELD_LENGTH.pack(len(data)), data]
    return b"".join(out)


def _copy_row(row: ValueRow) -> bytes:
    return _binary_copy_row(
        [
            row.schema_name.encode(),
            row.table_name.encode(),
            row.column_name.encode(),
            struct.pack("!I", row.schema_oid),
            struct.pack("!I", row.table_oid),
            struct.pack("!h", row.column_attnum),
            row.value.encode(),
            row.normalised.encode(),
            struct.pack("!q", row.frequency),
            row.embedding,
        ]
    )


class PsycopgIndexConnection:
    """`IndexConnection` over a psycopg connection that is not inside a transaction."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def rows(self, query: Query, params: Params = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(query, params or None).fetchall())

    def run(self, query: Query, params: Params = ()) -> int:
        return max(self.conn.execute(query, params or None).rowcount, 0)

    def transaction(self) -> AbstractContextManager[None]:
        return _transaction(self.conn)

    def insert_values(self, rows: Sequence[ValueRow]) -> None:
        if not rows:
            return
        with (
            self.conn.cursor() as cur,
            cur.copy(f"COPY nl.value_index ({VALUE_COLUMNS}) FROM STDIN (FORMAT binary)") as copy,
        ):
            copy.write(_COPY_HEADER + b"".join(_copy_row(row) for row in rows) + _COPY_TRAILER)

    @contextmanager
    def job(self, name: str, lock: int) -> Iterator[None]:
        with autocommit(self.conn, name), advisory_lock(self.conn, lock):
            yield


@contextmanager
def _transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    with conn.transaction():
        yield
