"""The look-ups predicate calibration needs, over the `Database` protocol, as the asking role.

Every query runs on the caller's own connection and role: nl.value_index's row-level security
(see migrations/0002_value_index.sql) returns only values of columns that role may SELECT, and,
where the source table has row-level security, only values in rows it can see. The look-ups
also skip values whose column was dropped since the last refresh, so a stale index yields fewer
candidates, never an error.

- `contains(column, value)`: is this exact value in the column, for this role? Answered from
  the index when the column is indexed completely (no cap reached, no value filtered out), else
  by the source column itself (as the role; a column that is gone or unreadable gives False).
- `search_trigram(literal, scope, k)`: nearest values by spelling (pg_trgm similarity of the
  normalised text), e.g. 'Timothy' → 'Timmy'.
- `search_semantic(literal, scope, k)`: nearest values by meaning (cosine similarity of MiniLM
  embeddings), e.g. 'NY' → 'New York'.
- `values_in(scope, limit)`: the most frequent values of a scope.
- `named_in(runs)`: the values a text names word for word, given its runs of words.
- `indexed_columns()`: the columns whose values the index holds.
- `search_in_text(text, schema, tables, k, min_score)`: the values of some tables that a text names,
  by pg_trgm's strict word similarity ("flights to ATO" finds 'ATO').

Scores are similarities in [0, 1], results best first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from proxy.nl2sql.database import Database
from proxy.valueindex.common import (
    Candidate,
    ColumnRef,
    Embedder,
    Scope,
    ValueIndexError,
    checked_embeddings,
    normalise,
    quote_ident,
    vector_literal,
)

log = logging.getLogger(__name__)

# SQLSTATEs that mean the value index is not installed in this database.
_MISSING_INDEX = {"42P01", "42883", "3F000"}
# SQLSTATE classes that, for a query on a source column, mean "not there for this role": the
# column or table is gone, not readable, or the value does not fit its type.
_NOT_THERE_CLASSES = ("42", "22", "3F")

_SEARCH = (
    "SELECT schema_name, table_name, column_name, value, score, frequency "
    "FROM nl.search_{}($1::text, $2::integer, $3::text, $4::text, $5::text)"
)


def _sqlstate(exc: BaseException) -> str:
    return str(getattr(exc, "sqlstate", None) or "")


def _scope_filter(scope: Scope, first: int) -> tuple[str, list[object]]:
    """A WHERE fragment on nl.value_index v for the scope, with its parameters from $first."""
    names = [scope.schema_name, scope.table_name, scope.column_name]
    columns = ["v.schema_name", "v.table_name", "v.column_name"]
    given = [(col, name) for col, name in zip(columns, names, strict=True) if name is not None]
    clauses = [f"{col} = ${first + i}" for i, (col, _) in enumerate(given)]
    return " AND ".join(clauses) or "true", [name for _, name in given]


class ValueIndex:
    """Look-ups in the value index, as the role of the `Database` given.

    `embedder` is needed by `search_semantic` only; `timeout_s` bounds each query.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder | None = None,
        *,
        timeout_s: float | None = 5.0,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.timeout_s = timeout_s

    def _fetch(self, query: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        try:
            return self.db.fetch(query, params, timeout_s=self.timeout_s)
        except Exception as exc:
            if _sqlstate(exc) in _MISSING_INDEX:
                raise ValueIndexError(
                    "this database has no value index (or an older one): run pgnl migrate, "
                    f"then pgnl index ({exc})"
                ) from exc
            raise

    @staticmethod
    def _candidates(rows: list[tuple[Any, ...]]) -> list[Candidate]:
        found = [
            Candidate(ColumnRef(schema, table, column), value, float(score), int(frequency))
            for schema, table, column, value, score, frequency in rows
        ]
        return sorted(found, key=lambda c: (-c.score, -c.frequency, c.value))

    def contains(self, column: ColumnRef, value: str) -> bool:
        """Whether the exact value is in the column and visible to this role."""
        rows = self._fetch(
            """
            SELECT EXISTS (SELECT 1 FROM nl.value_index v
                            WHERE v.schema_name = $1 AND v.table_name = $2
                              AND v.column_name = $3 AND v.value = $4
                              AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')),
                   EXISTS (SELECT 1 FROM nl.value_index_columns c
                            WHERE c.schema_name = $1 AND c.table_name = $2
                              AND c.column_name = $3 AND c.complete
                              AND has_column_privilege(c.table_oid, c.column_attnum, 'SELECT'))
            """,
            [column.schema, column.table, column.column, value],
        )
        found, complete = rows[0]
        if found or complete:
            return bool(found)
        table = f"{quote_ident(column.schema)}.{quote_ident(column.table)}"
        name = quote_ident(column.column)
        source = f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {name} = $1)"  # noqa: S608
        try:
            return bool(self.db.fetch(source, [value], timeout_s=self.timeout_s)[0][0])
        except Exception as exc:
            if _sqlstate(exc).startswith(_NOT_THERE_CLASSES):
                log.debug("%s is not readable here (%s): %s", column, _sqlstate(exc), exc)
                return False
            raise

    def search_trigram(self, literal: str, scope: Scope, k: int = 10) -> list[Candidate]:
        """The k values of the scope nearest to the literal by spelling."""
        text = normalise(literal)
        if not text or k <= 0:
            return []
        rows = self._fetch(
            _SEARCH.format("trigram"),
            [text, k, scope.schema_name, scope.table_name, scope.column_name],
        )
        return self._candidates(rows)

    def search_semantic(self, literal: str, scope: Scope, k: int = 10) -> list[Candidate]:
        """The k values of the scope nearest to the literal by meaning."""
        if self.embedder is None:
            raise ValueIndexError("semantic look-ups need an embedder (proxy.runtime)")
        if not literal.strip() or k <= 0:
            return []
        query = vector_literal(checked_embeddings(self.embedder, [literal])[0])
        rows = self._fetch(
            _SEARCH.format("semantic"),
            [query, k, scope.schema_name, scope.table_name, scope.column_name],
        )
        return self._candidates(rows)

    def search_in_text(
        self,
        text: str,
        schema: str | None = None,
        tables: Sequence[str] | None = None,
        k: int = 10,
        min_score: float = 0.5,
    ) -> list[Candidate]:
        """The k values that `text` names best (score: strict word similarity of the value to
        the text's closest run of whole words), those scoring min_score or more, in `tables`
        of `schema` (all its tables when None; the whole database when `schema` is None too)."""
        normalised = normalise(text)
        if not normalised or k <= 0:
            return []
        rows = self._fetch(
            "SELECT schema_name, table_name, column_name, value, score, frequency "
            "FROM nl.search_in_text($1::text, $2::integer, $3::text, $4::jsonb, "
            "$5::double precision)",
            [
                normalised,
                k,
                schema,
                None if tables is None else json.dumps(list(tables)),
                min_score,
            ],
        )
        return self._candidates(rows)

    def named_in(self, runs: Sequence[str]) -> list[Candidate]:
        """The values whose normalised form is one of `runs` (score 1.0): the values a text
        names word for word, given its runs of words (`value_evidence.runs`), found through
        the btree index on `normalised` (migrations/0007), most frequent first."""
        if not runs:
            return []
        rows = self._fetch(
            """
            SELECT v.schema_name, v.table_name, v.column_name, v.value, 1.0, v.frequency
              FROM nl.value_index v
             WHERE v.normalised = ANY($1::text[])
               AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
            """,
            [list(runs)],
        )
        return self._candidates(rows)

    def indexed_columns(self) -> list[ColumnRef]:
        """The columns whose values the index holds, of those this role may read."""
        rows = self._fetch(
            "SELECT schema_name, table_name, column_name FROM nl.value_index_columns "
            "WHERE has_column_privilege(table_oid, column_attnum, 'SELECT')",
            [],
        )
        return [ColumnRef(schema, table, column) for schema, table, column in rows]

    def values_in(self, scope: Scope, limit: int = 100) -> list[Candidate]:
        """The scope's most frequent values (score 1.0), most frequent first."""
        if limit <= 0:
            return []
        where, params = _scope_filter(scope, 1)
        # The filter is made of fixed column names and $n placeholders only.
        query = f"""
            SELECT v.schema_name, v.table_name, v.column_name, v.value, 1.0, v.frequency
              FROM nl.value_index v
             WHERE {where} AND has_column_privilege(v.table_oid, v.column_attnum, 'SELECT')
             ORDER BY v.frequency DESC, v.value
             LIMIT ${len(params) + 1}::integer
            """  # noqa: S608
        rows = self._fetch(query, [*params, limit])
        return self._candidates(rows)
