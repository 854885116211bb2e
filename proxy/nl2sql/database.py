"""The one way the pipeline reaches PostgreSQL: run SQL with `$1`-style parameters, get rows.

Implemented over a psycopg connection here (the CLI, benchmarks and tests), and over the proxy's
upstream connection and PL/Python's `plpy` where those arrive. Every call runs as the connection's
own role, so grants and row-level security apply to the pipeline as to any other query.
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
