"""One directive answered on the client's own upstream connection, as a sequence of steps.

A flow is a generator the session drives (sans I/O, as psycopg's generators are): each step
yields a request and is resumed with its reply.

- `Quiesce()`: wait until every request the client sent before is answered (resumed with None);
- `Exchange(data, syncs, ...)`: send `data` upstream and read the replies up to `syncs`
  ReadyForQuery messages (resumed with `upstream.Replies`); with `relay` the replies go on to the
  client as they come, ReadyForQuery excepted (the flow sends the client its own at the end);
- `Ask(question)`: run the pipeline in a worker thread (resumed with an `Answer` or an
  `AnswerError`); meanwhile the pipeline's fetches run as exchanges of their own.

The steps for a directive, in a Query or in a segment of an extended-protocol batch:

1. In a failed transaction ('E'), no pipeline: the directive's text becomes `SELECT NULL`, and
   the server answers 25P02 as it would to any statement.
2. Open a read-only scope: idle ('I'), `BEGIN TRANSACTION READ ONLY`; in a transaction block
   ('T'), `SAVEPOINT pgnl_answer; SET LOCAL transaction_read_only = on`. Both set a statement
   timeout and read the client encoding.
3. Ask the pipeline (each of its fetches in a savepoint of its own, see `upstream`).
4. Rewrite the directive's text (`rewrite.render`), send the client the notices, forward the
   statement: its replies go to the client.
5. Close the scope: `ROLLBACK`, or `ROLLBACK TO SAVEPOINT pgnl_answer; RELEASE SAVEPOINT
   pgnl_answer`, so the client's transaction is as it was, writable if it was.
6. Log the translation to nl.query_log (outside the scope; in a savepoint in a transaction block).
7. In a transaction block, a directive that failed leaves it failed, as any error does in
   PostgreSQL: one more statement of the proxy's own fails, and its error is not relayed.

Segments of a batch that hold no directive run as they came, each followed by a Sync of the
proxy's own. (So, in an implicit transaction, what ran before a directive's segment is committed
before it: a difference from PostgreSQL, which would run the whole batch as one transaction.)
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Protocol

from proxy.directives import Directive, DirectiveError, DirectiveKind, parse
from proxy.nl2sql.answer import Answer, AnswerError
from proxy.nl2sql.database import PGNL_MARK
from proxy.nl2sql.querylog import insert_statement
from proxy.rewrite import (
    QUERY_CANCELED,
    Item,
    Rendered,
    Segment,
    directive_error,
    parameters_error,
    raise_sql,
    render,
)
from proxy.upstream import Replies, bind_params, ready_for_query, statement_timeout
from proxy.wire.messages import (
    SYNC,
    Bind,
    Close,
    DataRow,
    Describe,
    Execute,
    NoticeResponse,
    Parse,
    Query,
)

log = logging.getLogger(__name__)

# Replies of the extended protocol that a simple Query does not get.
SIMPLE_QUERY_DROPS = frozenset((b"1", b"2", b"n"))
TEXT_OID = 25


@dataclass(frozen=True)
class Quiesce:
    pass


@dataclass(frozen=True)
class Exchange:
    data: bytes
    syncs: int
    relay: bool = False
    drop: frozenset[bytes] = frozenset()
    ours: bool = False  # statements of `raise_sql` may fail: drop the CONTEXT PL/pgSQL adds


@dataclass(frozen=True)
class Ask:
    question: str


Request = Quiesce | Exchange | Ask
Steps = Generator[Request, object, None]


class FlowContext(Protocol):
    """What a flow reads from, and asks of, its session."""

    @property
    def codec(self) -> str:
        """Python's codec for the client encoding."""

    @property
    def cancelled(self) -> bool:
        """The client sent a CancelRequest while this flow ran."""

    @property
    def transaction_status(self) -> str:
        """'I', 'T' or 'E', from the last ReadyForQuery the server sent."""

    statement_timeout_s: float

    def set_client_encoding(self, name: str) -> None: ...

    def emit(self, data: bytes) -> None:
        """Send bytes to the client, after everything relayed so far."""

    def skip_until_sync(self) -> None:
        """Drop the client's messages up to its next Sync (an error ended its batch early)."""


@dataclass
class Translation:
    """A question answered, for the query log."""

    directive: Directive
    answer: Answer


@dataclass
class _Outcome:
    failed: bool = False
    translations: list[Translation] = field(default_factory=list)


def _exchange(request: Exchange) -> Generator[Request, object, Replies]:
    reply = yield request
    assert isinstance(reply, Replies)
    return reply


def _items(items: list[Item]) -> bytes:
    return b"".join(item.encode() for item in items)


def query_flow(context: FlowContext, text: bytes, found: Directive | DirectiveError) -> Steps:
    """A directive sent as a simple Query: run as the unnamed statement in the extended protocol
    (which refuses more than one statement), the replies a Query would not get left out."""
    parse_item = Item(b"P", Parse(b"", text).encode()[5:], directive=found)
    items = [
        parse_item,
        Item(b"B", Bind(b"", b"").encode()[5:]),
        Item(b"D", Describe(b"P", b"").encode()[5:]),
        Item(b"E", Execute(b"").encode()[5:]),
    ]
    yield Quiesce()
    yield from _segment(context, Segment(True, items), SIMPLE_QUERY_DROPS)
    context.emit(ready_for_query(context.transaction_status))


def batch_flow(context: FlowContext, segments: list[Segment], end: bytes) -> Steps:
    """An extended-protocol batch with directives in it, cut into `segments`; `end` is its Sync
    (b"S"), Flush (b"H"), or b"" when another message cut it short."""
    yield Quiesce()
    failed = False
    for segment in segments:
        if segment.directive:
            failed = yield from _segment(context, segment, frozenset())
        else:
            replies = yield from _exchange(Exchange(_items(segment.items) + SYNC, 1, relay=True))
            failed = replies.error is not None
        if failed:
            break
    if end == b"S":
        context.emit(ready_for_query(context.transaction_status))
    elif failed:
        context.skip_until_sync()


def _segment(
    context: FlowContext, segment: Segment, drop: frozenset[bytes]
) -> Generator[Request, object, bool]:
    """Run one segment that holds directives; True when it ended in an error."""
    status = context.transaction_status
    parses = segment.parses
    if status == "E":
        for item in parses:
            _set_query(context, item, "SELECT NULL")
        replies = yield from _exchange(
            Exchange(_items(segment.items) + SYNC, 1, relay=True, drop=drop)
        )
        return replies.error is not None

    begin = yield from _exchange(Exchange(_scope_begin(status, context), 1))
    if begin.error is not None:
        # The scope could not be opened: the client gets why, and nothing runs.
        context.emit(begin.error.encode(context.codec))
        if status == "I":
            yield from _exchange(Exchange(Query("ROLLBACK").encode(), 1))
        return True
    encoding = _reported_encoding(begin)
    if encoding:
        context.set_client_encoding(encoding)
        for item in parses:
            _reparse(context, item)

    outcome = _Outcome()
    notices: list[str] = []
    for item in parses:
        rendered = yield from _answer(context, item, outcome)
        _set_query(context, item, rendered.sql + PGNL_MARK if rendered.sql else rendered.sql)
        notices += rendered.notices
    for notice in notices:
        context.emit(_notice(notice).encode(context.codec))
    # Every statement here is one of ours (a statement made from a directive, now or before).
    replies = yield from _exchange(
        Exchange(_items(segment.items) + SYNC, 1, relay=True, drop=drop, ours=True)
    )
    outcome.failed = replies.error is not None

    end = yield from _exchange(Exchange(_scope_end(status), 1))
    if end.error is not None:
        log.warning("could not close the read-only scope: %s", end.error.message)
    for translation in outcome.translations:
        yield from _log(context, translation)
    if outcome.failed and context.transaction_status == "T":
        failing = Query(raise_sql(AnswerError("25P02", "pgnl: the nl directive failed"))).encode()
        yield from _exchange(Exchange(failing, 1))
    return outcome.failed


def _answer(
    context: FlowContext, item: Item, outcome: _Outcome
) -> Generator[Request, object, Rendered]:
    found = item.directive
    if isinstance(found, DirectiveError):
        return Rendered(raise_sql(directive_error(found)), failed=True)
    assert found is not None
    if item.param_types:
        return Rendered(raise_sql(parameters_error(found.kind)), failed=True)
    if context.cancelled:
        reply: object = _canceled()
    else:
        reply = yield Ask(found.question)
        if context.cancelled:
            reply = _canceled()
    assert isinstance(reply, Answer | AnswerError)
    answer = reply if isinstance(reply, Answer) else Answer(found.question, error=reply)
    outcome.translations.append(Translation(found, answer))
    return render(found, reply)


def _canceled() -> AnswerError:
    return AnswerError(QUERY_CANCELED, "canceling statement due to user request")


def _set_query(context: FlowContext, item: Item, sql: str) -> None:
    message = Parse.decode(item.body)
    types = tuple(t or TEXT_OID for t in item.param_types)
    text = sql.replace("\0", "").encode(context.codec, "replace")
    item.body = Parse(message.name, text, types).encode()[5:]


def _reparse(context: FlowContext, item: Item) -> None:
    """The client encoding turned out other than assumed: read the directive again."""
    text = Parse.decode(item.body).query.decode(context.codec, "replace")
    found: Directive | DirectiveError | None
    try:
        found = parse(text)
    except DirectiveError as exc:
        found = exc
    if found is not None:
        item.directive = found


def _notice(message: str) -> NoticeResponse:
    return NoticeResponse({"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": message})


_ENCODING_QUERY = "SELECT pg_catalog.current_setting('client_encoding')"


def _scope_begin(status: str, context: FlowContext) -> bytes:
    timeout = statement_timeout(context.statement_timeout_s)
    if status == "I":
        return Query(f"BEGIN TRANSACTION READ ONLY; {timeout}; {_ENCODING_QUERY}").encode()
    return Query(
        f"SAVEPOINT pgnl_answer; SET LOCAL transaction_read_only = on; {timeout}; {_ENCODING_QUERY}"
    ).encode()


def _scope_end(status: str) -> bytes:
    if status == "I":
        return Query("ROLLBACK").encode()
    return Query("ROLLBACK TO SAVEPOINT pgnl_answer; RELEASE SAVEPOINT pgnl_answer").encode()


def _reported_encoding(replies: Replies) -> str:
    for kind, body in replies.groups[0]:
        if kind == b"D":
            (value,) = DataRow.decode(body).values
            return value.decode("ascii", "replace") if value else ""
    return ""


# ---------------------------------------------------------------- the query log

LOG_STATEMENT = b"pgnl_log"


def query_log_statement(answer: Answer, kind: DirectiveKind) -> tuple[str, list[object]]:
    """The INSERT into nl.query_log for one translation (`proxy.nl2sql.querylog`)."""
    return insert_statement(answer, kind.value)


def _log(context: FlowContext, translation: Translation) -> Generator[Request, object, None]:
    """Insert one translation into nl.query_log, outside the read-only scope; a failure (no
    table, no privilege) is logged and changes nothing for the client."""
    status = context.transaction_status
    if status not in ("I", "T"):
        return
    sql, params = query_log_statement(translation.answer, translation.directive.kind)
    name = LOG_STATEMENT
    insert = b"".join(
        (
            Parse(name, sql.encode(context.codec, "replace")).encode(),
            Bind(name, name, bind_params(params, context.codec)).encode(),
            Execute(name).encode(),
            SYNC,
            # In a transaction block a portal outlives Sync: without this Close, the next
            # translation of the transaction could not Bind it again (42P03).
            Close(b"P", name).encode(),
            Close(b"S", name).encode(),
            SYNC,
        )
    )
    if status == "I":
        replies = yield from _exchange(Exchange(insert, 2))
    else:
        replies = yield from _exchange(Exchange(Query("SAVEPOINT pgnl_log").encode() + insert, 3))
        undo = "RELEASE" if replies.error is None else "ROLLBACK TO SAVEPOINT pgnl_log; RELEASE"
        yield from _exchange(Exchange(Query(f"{undo} SAVEPOINT pgnl_log").encode(), 1))
    if replies.error is not None:
        log.warning(
            "could not log the translation to nl.query_log: %s (SQLSTATE %s)",
            replies.error.message,
            replies.error.sqlstate,
        )
