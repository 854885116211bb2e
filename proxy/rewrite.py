"""How a directive becomes SQL the server runs: pure functions, no I/O.

The proxy answers a directive by rewriting the statement's text and forwarding it (inside a
read-only scope, see `proxy.directive_flow`), so that every reply the client sees, rows and
errors alike, comes from PostgreSQL itself and keeps the protocol's rules (an error skips the rest
of an extended-protocol batch up to its Sync, aborts a transaction block, and so on):

- `nl:` → the chosen SQL, once `check_generated` accepts it (one SELECT, writing nothing);
- `nl show:` → `show_sql`: one row, one text column `sql`;
- `nl explain:` → `explain_sql`: the trace as typed rows;
- no SQL, or a directive that cannot run → `raise_sql`: a DO block that raises the error with its
  SQLSTATE, message, hint and detail.

`plan_batch` cuts an extended-protocol batch into segments: the messages that concern directives
(which run in the read-only scope) and the others (which run as they came).

>>> quote_literal("it's \\\\ here")
"E'it''s \\\\\\\\ here'"
>>> show_sql("SELECT 1")
"SELECT E'SELECT 1'::text AS sql"
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, MutableSet
from dataclasses import dataclass, field

from proxy.directives import Directive, DirectiveError, DirectiveKind, parse
from proxy.nl2sql.answer import TRACE_COLUMNS, Answer, AnswerError, TraceRow
from proxy.wire.messages import Bind, Close, DecodeError, Describe, Execute, Parse

PROHIBITED_STATEMENT = "2F003"
"""SQLSTATE of generated SQL that pgnl refuses to run (not a single read-only query)."""
UNDEFINED_PARAMETER = "42P02"
INTERNAL_ERROR = "XX000"
QUERY_CANCELED = "57014"

_SQLSTATE = re.compile(r"[0-9A-Z]{5}")

TRACE_TYPES = ("text", "integer", "double precision", "text", "text", "double precision")
"""The SQL type of each of `TRACE_COLUMNS`."""


def quote_literal(text: str) -> str:
    """A string constant that means `text` whatever standard_conforming_strings says (an
    escape string: backslashes and quotes doubled). NUL, which text cannot hold, is dropped."""
    escaped = text.replace("\0", "").replace("\\", "\\\\").replace("'", "''")
    return f"E'{escaped}'"


def show_sql(sql: str) -> str:
    """`nl show:`: the SQL as one row of one text column named sql."""
    return f"SELECT {quote_literal(sql)}::text AS sql"


def _trace_value(value: object, sql_type: str) -> str:
    if value is None:
        return f"NULL::{sql_type}"
    if isinstance(value, float):
        shown = "NaN" if math.isnan(value) else repr(value).replace("inf", "Infinity")
        return f"'{shown}'::{sql_type}"
    if isinstance(value, int):
        return f"{int(value)}::{sql_type}"
    return f"{quote_literal(str(value))}::{sql_type}"


def explain_sql(trace: Iterable[TraceRow]) -> str:
    """`nl explain:`: the trace as rows (stage, candidate, score, calibration, outcome, ms)."""
    rows = [
        "("
        + ", ".join(_trace_value(v, t) for v, t in zip(row.values(), TRACE_TYPES, strict=True))
        + ")"
        for row in trace
    ]
    names = ", ".join(TRACE_COLUMNS)
    if not rows:
        empty = ", ".join(f"NULL::{t}" for t in TRACE_TYPES)
        # Every part is a quoted literal or a fixed name.
        return f"SELECT * FROM (VALUES ({empty})) AS trace({names}) WHERE false"  # noqa: S608
    return f"SELECT * FROM (VALUES {', '.join(rows)}) AS trace({names})"  # noqa: S608


def raise_sql(error: AnswerError) -> str:
    """A statement that makes the server raise `error` (a DO block; it writes nothing)."""
    sqlstate = error.sqlstate if _SQLSTATE.fullmatch(error.sqlstate) else INTERNAL_ERROR
    if sqlstate.startswith(("00", "01", "02")):  # success, warning, no data: not errors
        sqlstate = INTERNAL_ERROR
    options = [f"ERRCODE = '{sqlstate}'", f"MESSAGE = {quote_literal(error.message)}"]
    if error.hint:
        options.append(f"HINT = {quote_literal(error.hint)}")
    if error.detail:
        options.append(f"DETAIL = {quote_literal(error.detail)}")
    body = f" BEGIN RAISE EXCEPTION USING {', '.join(options)}; END "
    tag = "pgnl"
    while f"${tag}$" in body:
        tag += "_"
    return f"DO ${tag}${body}${tag}$"


RAISE_PREFIX = "DO $pgnl"
"""How every statement `raise_sql` writes begins (so its CONTEXT line can be dropped)."""


def check_generated(sql: str) -> str | None:
    """Why generated SQL may not run (None: it may): it must be one SELECT (or VALUES, TABLE,
    set operation) that creates no table and has no data-modifying WITH."""
    from pglast import ast, parse_sql
    from pglast.parser import ParseError

    try:
        statements = parse_sql(sql)
    except ParseError as exc:
        return f"it is not valid SQL ({exc})"
    if len(statements) != 1:
        return f"it holds {len(statements)} statements, not one"
    statement = statements[0].stmt
    if not isinstance(statement, ast.SelectStmt):
        return f"it is a {type(statement).__name__}, not a query"
    if statement.intoClause is not None:
        return "it creates a table (SELECT INTO)"
    if statement.withClause is not None:
        for cte in statement.withClause.ctes or ():
            if not isinstance(cte.ctequery, ast.SelectStmt):
                return f"its WITH clause runs a {type(cte.ctequery).__name__}"
    return None


@dataclass(frozen=True)
class Rendered:
    """A directive's answer as the text to run and the notices to send before it."""

    sql: str
    notices: list[str] = field(default_factory=list)
    failed: bool = False  # `sql` raises an error (no answer, or one that was refused)


def render(directive: Directive, answer: Answer | AnswerError) -> Rendered:
    """The statement that gives the client `answer` to `directive`, and the notices before it."""
    if isinstance(answer, AnswerError):
        return Rendered(raise_sql(answer), failed=True)
    notices = list(answer.notices)
    if directive.kind is DirectiveKind.EXPLAIN:
        if answer.error is not None:
            notices.append(f"pgnl found no SQL for the question: {answer.error.message}")
        return Rendered(explain_sql(answer.trace), notices)
    if answer.sql is None or answer.error is not None:
        error = answer.error or AnswerError(
            INTERNAL_ERROR,
            "pgnl found no SQL for the question",
            hint="Rephrase the question, naming the tables and columns it is about.",
        )
        return Rendered(raise_sql(error), notices, failed=True)
    if directive.kind is DirectiveKind.SHOW:
        return Rendered(show_sql(answer.sql), notices)
    refused = check_generated(answer.sql)
    if refused is not None:
        error = AnswerError(
            PROHIBITED_STATEMENT,
            f"pgnl refused to run the SQL it generated: {refused}",
            hint="pgnl runs a single read-only query for a question; ask for data to read, "
            "or use nl show: to see the SQL.",
            detail=answer.sql,
        )
        return Rendered(raise_sql(error), notices, failed=True)
    return Rendered(answer.sql, [f"pgnl: {answer.sql}", *notices])


def directive_error(error: DirectiveError) -> AnswerError:
    return AnswerError(error.sqlstate, error.message, hint=error.hint)


def parameters_error(kind: DirectiveKind) -> AnswerError:
    return AnswerError(
        UNDEFINED_PARAMETER,
        f"an {kind.spelling} directive takes no parameters",
        hint="Write the values into the question itself, and send the directive with no "
        "parameters (in JDBC, a Statement or a PreparedStatement with no setXxx calls).",
    )


# ---------------------------------------------------------------- forgetting prepared statements

_DEALLOCATE = re.compile(
    r"\s*(?:deallocate\s+(?:prepare\s+)?(?:(all)\b|\"((?:[^\"]|\"\")+)\"|([^\s;]+))"
    r"|discard\s+(all)\b)",
    re.IGNORECASE,
)


def forgotten_statements(text: str) -> list[str] | None:
    """The prepared statements `text` drops: a list of names, ["*"] for all of them (DEALLOCATE
    ALL, DISCARD ALL), None when it is no such statement. Unquoted names fold to lower case, as
    PostgreSQL's identifiers do."""
    match = _DEALLOCATE.match(text)
    if match is None:
        return None
    every, quoted, plain, discard = match.groups()
    if every or discard:
        return ["*"]
    if quoted is not None:
        return [quoted.replace('""', '"')]
    return [plain.lower()]


# ---------------------------------------------------------------- extended-protocol batches


@dataclass
class Item:
    """One message of a batch. For a Parse of a directive, `directive` is what the text holds
    (or the error it makes); the session fills in `answer` before the batch is forwarded."""

    kind: bytes
    body: bytes
    directive: Directive | DirectiveError | None = None
    param_types: tuple[int, ...] = ()
    """For a directive's Parse: the parameter types it declared, or as many as a Bind in the
    batch supplied (a directive takes none; the statement that says so must take them)."""

    def encode(self) -> bytes:
        return self.kind + (len(self.body) + 4).to_bytes(4, "big") + self.body


@dataclass
class Segment:
    """Messages that run together: in the read-only scope (`directive`) or as they came."""

    directive: bool
    items: list[Item] = field(default_factory=list)

    @property
    def parses(self) -> list[Item]:
        """The Parses of directives in this segment, in order."""
        return [item for item in self.items if item.directive is not None]


def plan_batch(
    messages: list[tuple[bytes, bytes]],
    statements: MutableSet[bytes],
    decode: Callable[[bytes], str],
) -> list[Segment]:
    """Cut a batch (its Sync or Flush left out) into segments, and keep `statements` (the names
    of prepared statements made from directives) up to date as the server will, message by
    message. A Parse of a directive, and a Bind of, or an Execute of a portal bound from, such
    a statement belong in a directive segment; Describe and Close go with their neighbours. An
    Execute of a directive's portal gets no row limit: the scope ends with the segment, and the
    portal with it, so its rows must come in one go.

    Raises `DecodeError` for a message the server would refuse as malformed.
    """
    portals: dict[bytes, bool] = {}
    items: list[tuple[Item, bool | None]] = []
    directive_parses: dict[bytes, Item] = {}
    for kind, body in messages:
        item = Item(kind, body)
        related: bool | None
        if kind == b"P":
            message = Parse.decode(body)
            text = decode(message.query)
            found: Directive | DirectiveError | None
            try:
                found = parse(text)
            except DirectiveError as exc:
                found = exc
            forgotten = forgotten_statements(text) if found is None else None
            if forgotten is not None:
                _forget(statements, forgotten)
            if found is None:
                related = False
                if message.name == b"":
                    statements.discard(b"")
            else:
                item.directive = found
                item.param_types = message.param_types
                statements.add(message.name)
                directive_parses[message.name] = item
                related = True
        elif kind == b"B":
            bind = Bind.decode(body)
            related = bind.statement in statements
            portals[bind.portal] = related
            parsed = directive_parses.get(bind.statement) if related else None
            if parsed is not None and len(bind.params) > len(parsed.param_types):
                extra = len(bind.params) - len(parsed.param_types)
                parsed.param_types = (*parsed.param_types, *(0,) * extra)
        elif kind == b"E":
            execute = Execute.decode(body)
            related = portals.get(execute.portal, False)
            if related and execute.max_rows:
                item.body = Execute(execute.portal, 0).encode()[5:]
        elif kind == b"C":
            close = Close.decode(body)
            if close.target == b"S":
                statements.discard(close.name)
                directive_parses.pop(close.name, None)
            else:
                portals.pop(close.name, None)
            related = None
        elif kind == b"D":
            Describe.decode(body)
            related = None
        else:
            raise DecodeError(f"message type {kind!r} cannot be part of a batch")
        items.append((item, related))
    return _segments(items)


def _forget(statements: MutableSet[bytes], names: list[str]) -> None:
    if names == ["*"]:
        statements.clear()
    for name in names:
        statements.discard(name.encode())


def _segments(items: list[tuple[Item, bool | None]]) -> list[Segment]:
    segments: list[Segment] = []
    waiting: list[Item] = []  # Describe/Close before any other message
    for item, related in items:
        if related is None:
            if segments:
                segments[-1].items.append(item)
            else:
                waiting.append(item)
        elif segments and segments[-1].directive is related:
            segments[-1].items.append(item)
        else:
            segments.append(Segment(related, [*waiting, item]))
            waiting = []
    if waiting:
        segments.append(Segment(False, waiting))
    return segments


def forget_in_query(text: str, statements: MutableSet[bytes]) -> None:
    """A Query passed on: the unnamed statement ends, and DEALLOCATE/DISCARD drop others."""
    statements.discard(b"")
    forgotten = forgotten_statements(text)
    if forgotten is not None:
        _forget(statements, forgotten)
