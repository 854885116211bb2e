"""The one way the pipeline reaches PostgreSQL: run SQL with `$1`-style parameters, get rows.

Implemented over a psycopg connection here (the CLI, benchmarks and tests), and over the proxy's
upstream connection and PL/Python's `plpy` where those arrive. Every call runs as the connection's
own role, so grants and row-level security apply to the pipeline as to any other query.

Errors: a failing query ends one candidate (`QueryFailed`); a lost connection ends the answer
(`connection_lost`), and every stage lets it propagate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import psycopg
from psycopg import sql


class Database(Protocol):
    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        """Rows of one statement; parameters are `$1`, `$2`… PostgreSQL's own placeholders."""
        ...


class QueryFailed(Exception):
    """A candidate's query failed in the database (it ends that candidate only)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(f"{sqlstate}: {message}")
        self.sqlstate = sqlstate
        self.message = message


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error; None for an error that is not the database's."""
    state = getattr(exc, "sqlstate", None)
    return str(state) if state else None


def connection_lost(state: str | None) -> bool:
    """Errors that end the whole answer, not one candidate: no SQLSTATE (not the database's),
    a connection exception, an operator intervention other than a statement timeout."""
    if state is None:
        return True
    return state.startswith("08") or (state.startswith("57") and state != "57014")


class PsycopgDatabase:
    """`Database` over a psycopg connection. Each fetch is a transaction of its own (a savepoint
    inside the caller's), so that a statement timeout stays local to it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        with self.conn.transaction(), psycopg.RawCursor(self.conn) as cur:
            if timeout_s is not None:
                cur.execute(
                    sql.SQL("SET LOCAL statement_timeout = {}").format(int(timeout_s * 1000))
                )
            cur.execute(query.encode(), list(params))
            return cur.fetchall() if cur.description is not None else []


PGNL_MARK = "\n/* pgnl */"
"""The comment every query pgnl runs of its own accord ends with (the pipeline's, the value
index's scans): pg_stat_statements keeps a statement's trailing comments (not its leading
ones), and `pgnl learn` leaves such statements out of the history, which is the users' SQL."""


class Marked:
    """`Database` over another one, each query marked as pgnl's own (`PGNL_MARK`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        return self.db.fetch(query + PGNL_MARK, params, timeout_s=timeout_s)
