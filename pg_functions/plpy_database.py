"""`Database` over PL/Python's `plpy`, for the pipeline running inside a PostgreSQL backend.

Each fetch runs in a subtransaction of its own, so a failing candidate ends that candidate only
(the caller's transaction goes on). Parameters (`$1`, `$2`…) are bound as untyped string
literals, quoted by the server's own `quote_literal`: the server infers their types from the
query, as it does for psycopg's untyped parameters (`plpy.prepare` needs every type up front).
Rows come back as tuples in column order, even where two columns share a name.

A fetch's `timeout_s` cannot be a statement timeout here: PostgreSQL times the whole call of a
function, not the queries it runs. The caller's `statement_timeout` bounds the whole call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

_PLACEHOLDER = re.compile(
    r"""
      (?P<skip> '(?:[^']|'')*'             # a string literal
              | "(?:[^"]|"")*"             # a quoted identifier
              | --[^\n]*                   # a comment to the end of the line
      )
    | \$(?P<number>\d+)
    """,
    re.X,
)


QUERY_CANCELED = "57014"


class Plpy(Protocol):
    """The part of PL/Python's `plpy` module used here."""

    SPIError: type[Exception]

    def execute(self, query: str) -> Any: ...

    def quote_literal(self, text: str) -> str: ...

    def subtransaction(self) -> Any: ...

    def notice(self, message: str) -> None: ...

    def error(self, message: str, **fields: str) -> None: ...


class Cancelled(Exception):
    """The call was cancelled (statement_timeout, pg_cancel_backend, Ctrl-C in psql). It has no
    SQLSTATE of its own, so the pipeline stops rather than try the next candidate; `error` is
    the database's, raised again by the function."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _text(value: object) -> str:
    """A parameter as PostgreSQL's text form (lists as array literals)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        items = []
        for item in value:
            if item is None:
                items.append("NULL")
            else:
                text = _text(item).replace("\\", "\\\\").replace('"', '\\"')
                items.append(f'"{text}"')
        return "{" + ",".join(items) + "}"
    return str(value)


def bind(query: str, params: Sequence[object], quote: Callable[[str], str]) -> str:
    """`query` with each `$n` outside literals, quoted names and comments replaced by its
    parameter as a quoted literal (NULL for None)."""
    if not params:
        return query

    def replace(match: re.Match[str]) -> str:
        if match.group("skip") is not None:
            return match.group(0)
        number = int(match.group("number"))
        if not 1 <= number <= len(params):
            raise ValueError(f"${number} has no parameter ({len(params)} given)")
        value = params[number - 1]
        return "NULL" if value is None else quote(_text(value))

    return _PLACEHOLDER.sub(replace, query)


def _wrapped(query: str) -> str:
    """The query's rows as one JSON array each, in column order."""
    body = query.rstrip().removesuffix(";")
    return f"SELECT to_json(ROW(q.*))::text FROM (\n{body}\n) AS q"  # noqa: S608


class PlpyDatabase:
    """See the module docstring."""

    def __init__(self, plpy: Plpy) -> None:
        self.plpy = plpy

    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        text = bind(query, params, self.plpy.quote_literal)
        try:
            with self.plpy.subtransaction():
                result = self.plpy.execute(text)
                names = _column_names(result)
                if len(set(names)) == len(names):
                    return [tuple(row[name] for name in names) for row in result]
                # two columns share a name: plpy's rows are dicts, so read them as JSON arrays
                rows = self.plpy.execute(_wrapped(text))
        except self.plpy.SPIError as exc:
            if getattr(exc, "sqlstate", None) == QUERY_CANCELED:
                raise Cancelled(exc) from exc
            raise
        return [tuple(json.loads(row["to_json"]).values()) for row in rows]

    def run(self, query: str, params: Sequence[object] = ()) -> int:
        """Run a statement in the current (sub)transaction; the number of rows it changed."""
        try:
            result = self.plpy.execute(bind(query, params, self.plpy.quote_literal))
        except self.plpy.SPIError as exc:
            if getattr(exc, "sqlstate", None) == QUERY_CANCELED:
                raise Cancelled(exc) from exc
            raise
        return int(result.nrows())


def _column_names(result: Any) -> list[str]:
    try:
        return list(result.colnames())
    except Exception:  # plpy raises for a statement that returns no rows (a utility command)
        return []
