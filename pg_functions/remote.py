"""The worker's view of the calling backend: every query the worker needs is run by the backend,
as the caller's own role (see `calls`), over the channel.

- `RemoteDatabase`: the pipeline's `proxy.nl2sql.database.Database` (docs/method.md), for
  answering a question (`nl.sql`, `nl.ask`, `nl.explain`);
- `RemoteIndexConnection`: `proxy.valueindex.IndexConnection`, for building the value index
  (`nl.refresh_index`): each of the build's transactions is a subtransaction of the caller's,
  the job holds a transaction-level advisory lock, and new rows go in with INSERT.

A query that fails raises the `psycopg.errors` class of the SQLSTATE the backend reported (the
index build tells a locked or vanished column by it), carrying the backend's message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import errors, sql

from proxy.migrate import LOCK_CLASS
from proxy.valueindex.connection import VALUE_COLUMNS, Params, Query, ValueRow, vector_text

from .channel import receive, send

INSERT_CHUNK = 500
"""Rows of nl.value_index a statement inserts (each embedding is about 4 kB as text)."""

_INSERT = (
    f"INSERT INTO nl.value_index ({VALUE_COLUMNS}) "  # noqa: S608 (no user text)
    "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::oid[], $5::oid[], "
    "$6::smallint[], $7::text[], $8::text[], $9::bigint[], $10::vector[])"
)

# psycopg's placeholders, outside string literals and quoted names.
_PSYCOPG_PLACEHOLDER = re.compile(
    r"""
      (?P<skip> '(?:[^']|'')*' | "(?:[^"]|"")*" )
    | %(?:\((?P<name>[^)]+)\))?(?P<kind>[sbt%])
    """,
    re.X,
)


class RemoteQueryError(Exception):
    """A query the backend ran for the worker failed; it carries the database's SQLSTATE."""

    def __init__(self, sqlstate: str | None, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class RemoteDatabase:
    """`Database` whose queries the backend runs, over the channel's two file descriptors."""

    def __init__(self, reading: int, writing: int) -> None:
        self.reading = reading
        self.writing = writing

    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        reply = self.request(("fetch", query, list(params)))
        rows: list[tuple[Any, ...]] = reply[1]
        return rows

    def request(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Send one message and wait for the backend's reply; an error reply raises."""
        send(self.writing, message)
        reply = receive(self.reading)
        if reply[0] == "error":
            raise RemoteQueryError(reply[1], reply[2])
        return reply

    def notice(self, text: str) -> None:
        """Have the backend send the caller a NOTICE."""
        send(self.writing, ("notice", text))


def dollar_placeholders(query: Query, params: Params) -> tuple[str, list[Any]]:
    """A psycopg-style query as text with `$1`, `$2`… and its parameters in that order."""
    if isinstance(query, bytes):
        text = query.decode()
    elif isinstance(query, sql.Composable):
        text = query.as_string(None)
    else:
        text = query
    ordered: list[Any] = []
    numbers: dict[str, int] = {}
    positional = iter(params) if not isinstance(params, Mapping) else iter(())

    def replace(match: re.Match[str]) -> str:
        if match.group("skip") is not None:
            return match.group(0)
        if match.group("kind") == "%":
            return "%"
        name = match.group("name")
        if name is None:
            try:
                ordered.append(next(positional))
            except StopIteration:
                raise ValueError(
                    f"the query has more placeholders than parameters: {text}"
                ) from None
            return f"${len(ordered)}"
        if not isinstance(params, Mapping):
            raise ValueError(f"%({name})s needs its parameters by name")
        if name not in numbers:
            ordered.append(params[name])
            numbers[name] = len(ordered)
        return f"${numbers[name]}"

    return _PSYCOPG_PLACEHOLDER.sub(replace, text), ordered


def _raised(exc: RemoteQueryError) -> errors.Error:
    """The psycopg error of the backend's SQLSTATE."""
    try:
        kind = errors.lookup(exc.sqlstate or "XX000")
    except KeyError:
        kind = errors.DatabaseError
    return kind(str(exc))


class RemoteIndexConnection:
    """See the module docstring."""

    def __init__(self, db: RemoteDatabase) -> None:
        self.db = db

    def _send(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        try:
            return self.db.request(message)
        except RemoteQueryError as exc:
            raise _raised(exc) from None

    def rows(self, query: Query, params: Params = ()) -> list[tuple[Any, ...]]:
        reply = self._send(("fetch", *dollar_placeholders(query, params)))
        rows: list[tuple[Any, ...]] = reply[1]
        return rows

    def run(self, query: Query, params: Params = ()) -> int:
        return int(self._send(("run", *dollar_placeholders(query, params)))[1])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._send(("begin",))
        try:
            yield
        except BaseException:
            self._send(("rollback",))
            raise
        self._send(("commit",))

    def insert_values(self, rows: Sequence[ValueRow]) -> None:
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            self._send(
                (
                    "run",
                    _INSERT,
                    [
                        [row.schema_name for row in chunk],
                        [row.table_name for row in chunk],
                        [row.column_name for row in chunk],
                        [row.schema_oid for row in chunk],
                        [row.table_oid for row in chunk],
                        [row.column_attnum for row in chunk],
                        [row.value for row in chunk],
                        [row.normalised for row in chunk],
                        [row.frequency for row in chunk],
                        [vector_text(row.embedding) for row in chunk],
                    ],
                )
            )

    @contextmanager
    def job(self, name: str, lock: int) -> Iterator[None]:
        # Held until the caller's transaction ends: a cancelled call cannot leave it behind.
        self.rows("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_CLASS, lock])
        yield
