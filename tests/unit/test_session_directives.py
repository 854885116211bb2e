"""Directives in the session, driven without sockets: what goes upstream and when, and what the
client is sent, with the server's replies written by hand (the real server and pipeline are in
tests/integration/test_directives.py)."""

from __future__ import annotations

from proxy.nl2sql.answer import Answer, AnswerError
from proxy.nl2sql.database import PGNL_MARK
from proxy.session import CancelKeys, Session
from proxy.upstream import FetchResult, UpstreamQueryError
from proxy.wire.messages import (
    FLUSH,
    SYNC,
    Bind,
    CommandComplete,
    DataRow,
    ErrorResponse,
    Execute,
    FieldDescription,
    NotificationResponse,
    Parse,
    Query,
    ReadyForQuery,
    RowDescription,
    split_messages,
    typed,
)
from tests.unit.test_session import Recorder, ready_session

QUESTION = "how many students?"
SQL = "SELECT count(*) FROM students"


def z(status: str) -> bytes:
    return ReadyForQuery(status.encode()).encode()


def c(tag: str) -> bytes:
    return CommandComplete(tag).encode()


def row_description(name: bytes = b"count", oid: int = 20) -> bytes:
    return RowDescription((FieldDescription(name, 0, 0, oid, 8, -1, 0),)).encode()


def error(sqlstate: str, message: str = "failed") -> bytes:
    return ErrorResponse({"S": "ERROR", "C": sqlstate, "M": message}).encode()


PARSED, BOUND, CLOSED = typed(b"1", b""), typed(b"2", b""), typed(b"3", b"")


def sent(io: Recorder) -> list[tuple[bytes, bytes]]:
    """What the session sent upstream since last asked."""
    messages = split_messages(bytes(io.to_server))
    io.to_server.clear()
    return messages


def received(io: Recorder) -> list[tuple[bytes, bytes]]:
    """What the client was sent since last asked."""
    messages = split_messages(bytes(io.to_client))
    io.to_client.clear()
    return messages


def open_scope(session: Session, io: Recorder, status: str = "I") -> None:
    ((kind, body),) = sent(io)
    assert kind == b"Q"
    if status == "I":
        assert body.startswith(b"BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout")
    else:
        assert body.startswith(b"SAVEPOINT pgnl_answer; SET LOCAL transaction_read_only = on")
    encoding = row_description(b"current_setting", 25) + DataRow((b"UTF8",)).encode()
    session.server_data(c("BEGIN") + c("SET") + encoding + c("SELECT 1") + z("T"))


def close_scope_and_log(session: Session, io: Recorder, status: str = "I") -> None:
    ((kind, body),) = sent(io)
    if status == "I":
        assert (kind, body) == (b"Q", b"ROLLBACK\x00")
        session.server_data(c("ROLLBACK") + z("I"))
        kinds = [k for k, _ in sent(io)]
        assert kinds == [b"P", b"B", b"E", b"S", b"C", b"C", b"S"]  # the nl.query_log insert
        session.server_data(PARSED + BOUND + c("INSERT 0 1") + z("I") + CLOSED * 2 + z("I"))
    else:
        assert body.startswith(b"ROLLBACK TO SAVEPOINT pgnl_answer; RELEASE SAVEPOINT")
        session.server_data(c("ROLLBACK") + c("RELEASE") + z("T"))
        kinds = [k for k, _ in sent(io)]
        assert kinds == [b"Q", b"P", b"B", b"E", b"S", b"C", b"C", b"S"]  # in a savepoint
        session.server_data(c("SAVEPOINT") + z("T") + PARSED + BOUND + c("INSERT 0 1") + z("T"))
        session.server_data(CLOSED * 2 + z("T"))
        assert sent(io) == [(b"Q", b"RELEASE SAVEPOINT pgnl_log\x00")]
        session.server_data(c("RELEASE") + z("T"))


def answer(io: Recorder, result: Answer | AnswerError) -> None:
    _, _, done = io.asked.pop()
    done(result)


def count_answer() -> Answer:
    return Answer(QUESTION, sql=SQL, outcome="answered")


def run_query(session: Session, io: Recorder, status: str = "I") -> list[tuple[bytes, bytes]]:
    """The rewritten statement of a simple-Query directive went upstream: reply with one row."""
    messages = sent(io)
    assert [k for k, _ in messages] == [b"P", b"B", b"D", b"E", b"S"]
    # marked as pgnl's, so that `pgnl learn` tells it from the users' own SQL
    assert Parse.decode(messages[0][1]).query == (SQL + PGNL_MARK).encode()
    session.server_data(
        PARSED + BOUND + row_description() + DataRow((b"4",)).encode() + c("SELECT 1") + z("T")
    )
    return received(io)


def test_a_query_directive_when_idle() -> None:
    session, io = ready_session()
    session.client_data(Query(f"-- nl: {QUESTION}").encode())
    open_scope(session, io)
    assert [q for q, _, _ in io.asked] == [QUESTION]
    answer(io, count_answer())
    to_client = run_query(session, io)
    assert [k for k, _ in to_client] == [b"N", b"T", b"D", b"C"]  # no ParseComplete etc.
    assert ErrorResponse.decode(to_client[0][1]).message == f"pgnl: {SQL}"
    close_scope_and_log(session, io)
    assert received(io) == [(b"Z", b"I")]
    assert session.transaction_status == "I"


def test_in_a_transaction_block_the_scope_is_a_savepoint() -> None:
    session, io = ready_session()
    session.client_data(Query("BEGIN").encode())
    session.server_data(c("BEGIN") + z("T"))
    received(io)
    sent(io)
    session.client_data(Query(f"/* nl: {QUESTION} */;").encode())
    open_scope(session, io, "T")
    answer(io, count_answer())
    run_query(session, io, "T")
    close_scope_and_log(session, io, "T")
    assert received(io) == [(b"Z", b"T")]


def test_the_directive_waits_for_earlier_replies_and_later_messages_wait_for_it() -> None:
    session, io = ready_session()
    session.client_data(
        Query("SELECT pg_sleep(1)").encode()
        + Query(f"-- nl: {QUESTION}").encode()
        + Query("SELECT 2").encode()
    )
    assert [body for _, body in sent(io)] == [b"SELECT pg_sleep(1)\x00"]
    session.server_data(row_description() + DataRow((b"",)).encode())
    assert sent(io) == []  # the first query is not answered yet
    session.server_data(c("SELECT 1") + NotificationResponse(1, "ch", "hi").encode() + z("I"))
    assert [k for k, _ in received(io)] == [b"T", b"D", b"C", b"A", b"Z"]
    open_scope(session, io)
    session.client_data(Query("SELECT 3").encode())  # held too, in order
    answer(io, count_answer())
    run_query(session, io)
    close_scope_and_log(session, io)
    assert sent(io) == [(b"Q", b"SELECT 2\x00"), (b"Q", b"SELECT 3\x00")]


def test_the_pipeline_queries_through_the_session() -> None:
    session, io = ready_session()
    session.client_data(Query(f"-- nl: {QUESTION}").encode())
    open_scope(session, io)
    _, fetch, _ = io.asked[0]
    results: list[FetchResult] = []
    fetch("SELECT $1::int", [7], None, results.append)
    kinds = [k for k, _ in sent(io)]
    assert kinds == [b"Q", b"P", b"B", b"D", b"E", b"S", b"Q", b"C", b"S"]
    savepoint = c("SAVEPOINT") + c("SET") + z("T")
    rows = PARSED + BOUND + row_description(b"int4", 23) + DataRow((b"7",)).encode()
    rollback = c("ROLLBACK") + c("RELEASE") + z("T")
    session.server_data(savepoint + rows + c("SELECT 1") + z("T") + rollback + CLOSED + z("T"))
    assert results == [[(7,)]]
    fetch("SELECT nope", [], 1.0, results.append)
    sent(io)
    session.server_data(savepoint + error("42703", "column nope does not exist") + z("E"))
    session.server_data(rollback + CLOSED + z("T"))
    failure = results[-1]
    assert isinstance(failure, UpstreamQueryError) and failure.sqlstate == "42703"
    assert received(io) == []  # none of it reached the client


def test_no_sql_is_an_error_raised_by_the_server() -> None:
    session, io = ready_session()
    session.client_data(Query(f"-- nl: {QUESTION}").encode())
    open_scope(session, io)
    answer(io, AnswerError("NL001", "no candidate ran", hint="rephrase it"))
    parse = Parse.decode(sent(io)[0][1])
    assert parse.query.startswith(b"DO $pgnl$ BEGIN RAISE EXCEPTION USING ERRCODE = 'NL001'")
    context = {"S": "ERROR", "C": "NL001", "M": "no candidate ran", "H": "rephrase it"}
    raised = ErrorResponse({**context, "W": "PL/pgSQL function inline_code_block line 1 at RAISE"})
    session.server_data(PARSED + BOUND + typed(b"n", b"") + raised.encode() + z("E"))
    (reply,) = received(io)
    assert ErrorResponse.decode(reply[1]).fields == context  # the CONTEXT line is dropped
    close_scope_and_log(session, io)
    assert received(io) == [(b"Z", b"I")]


def test_in_a_failed_transaction_the_server_says_25p02() -> None:
    session, io = ready_session()
    session.client_data(Query("BEGIN; SELECT 1/0").encode())
    session.server_data(c("BEGIN") + error("22012") + z("E"))
    received(io)
    sent(io)
    session.client_data(Query(f"-- nl: {QUESTION}").encode())
    messages = sent(io)
    assert Parse.decode(messages[0][1]).query == b"SELECT NULL" and io.asked == []
    session.server_data(error("25P02") + z("E"))
    assert [k for k, _ in received(io)] == [b"E", b"Z"]


def test_cancel_while_the_pipeline_thinks() -> None:
    keys = CancelKeys()
    session, io = ready_session(keys)
    session.client_data(Query(f"-- nl: {QUESTION}").encode())
    open_scope(session, io)
    assert session.client_key is not None
    cancel = keys.cancel(session.client_key.pid, session.client_key.secret)
    assert cancel is None  # nothing of the flow's runs upstream: not sent on
    _, fetch, _ = io.asked[0]
    results: list[FetchResult] = []
    fetch("SELECT 1", [], None, results.append)
    assert isinstance(results[0], UpstreamQueryError) and results[0].sqlstate == "57014"
    answer(io, count_answer())  # too late: the client asked to cancel
    assert b"ERRCODE = '57014'" in Parse.decode(sent(io)[0][1]).query


def test_a_client_gone_mid_answer_fails_the_pipeline_queries() -> None:
    session, io = ready_session()
    session.client_data(Query(f"-- nl: {QUESTION}").encode())
    open_scope(session, io)
    _, fetch, done = io.asked[0]
    results: list[FetchResult] = []
    fetch("SELECT 1", [], None, results.append)
    session.client_closed()
    assert isinstance(results[0], UpstreamQueryError) and results[0].sqlstate == "08006"
    fetch("SELECT 2", [], None, results.append)
    assert isinstance(results[1], UpstreamQueryError)
    done(count_answer())  # ignored
    assert "close" in io.actions


def test_a_batch_ended_by_flush_that_fails_skips_to_the_clients_sync() -> None:
    session, io = ready_session()
    session.client_data(
        Parse(b"", f"-- nl: {QUESTION}".encode()).encode()
        + Bind(b"", b"").encode()
        + Execute(b"").encode()
        + FLUSH
    )
    open_scope(session, io)
    answer(io, AnswerError("NL001", "no candidate ran"))
    assert [k for k, _ in sent(io)] == [b"P", b"B", b"E", b"S"]  # the proxy's own Sync
    session.server_data(PARSED + BOUND + error("NL001") + z("E"))
    assert [k for k, _ in received(io)] == [b"1", b"2", b"E"]
    close_scope_and_log(session, io)
    assert received(io) == []  # a Flush gets no ReadyForQuery
    session.client_data(Execute(b"").encode() + Query("SELECT 1").encode() + SYNC)
    assert sent(io) == [(b"S", b"")]  # skipped up to the Sync, as the server would have


def test_bind_of_a_directive_statement_runs_in_the_scope_without_asking() -> None:
    session, io = ready_session()
    session.client_data(Parse(b"S_1", f"-- nl: {QUESTION}".encode()).encode() + SYNC)
    open_scope(session, io)
    answer(io, count_answer())
    assert [k for k, _ in sent(io)] == [b"P", b"S"]
    session.server_data(PARSED + z("T"))
    close_scope_and_log(session, io)
    assert [k for k, _ in received(io)] == [b"N", b"1", b"Z"]
    session.client_data(Bind(b"", b"S_1").encode() + Execute(b"", 10).encode() + SYNC)
    open_scope(session, io)
    assert io.asked == []
    messages = sent(io)
    assert [k for k, _ in messages] == [b"B", b"E", b"S"]
    assert Execute.decode(messages[1][1]).max_rows == 0
    session.server_data(BOUND + DataRow((b"4",)).encode() + c("SELECT 1") + z("T"))
    assert sent(io) == [(b"Q", b"ROLLBACK\x00")]
    session.server_data(c("ROLLBACK") + z("I"))
    assert [k for k, _ in received(io)] == [b"2", b"D", b"C", b"Z"]
