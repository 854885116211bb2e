"""proxy.rewrite: the SQL a directive becomes, the checks on generated SQL, and how a batch is
cut into segments (tables of examples; the statements are parsed back with PostgreSQL's own
parser, and run on the real server in tests/integration/test_directives.py)."""

from __future__ import annotations

import doctest
import math

import pglast
import pytest
from pglast import ast

from proxy import rewrite
from proxy.directives import Directive, DirectiveError, DirectiveKind
from proxy.nl2sql.answer import Answer, AnswerError, TraceRow
from proxy.rewrite import (
    Segment,
    check_generated,
    explain_sql,
    forget_in_query,
    forgotten_statements,
    plan_batch,
    quote_literal,
    raise_sql,
    render,
    show_sql,
)
from proxy.wire.messages import Bind, Close, Describe, Execute, Parse, split_messages

RUN = Directive(DirectiveKind.RUN, "how many students?")
SHOW = Directive(DirectiveKind.SHOW, "how many students?")
EXPLAIN = Directive(DirectiveKind.EXPLAIN, "how many students?")


def test_doctests() -> None:
    assert doctest.testmod(rewrite).failed == 0


@pytest.mark.parametrize(
    "text", ["plain", "it's", "back\\slash", "\\'", "é 日本 🐘", "$$ $pgnl$", "line\nbreak", ""]
)
def test_quote_literal_round_trips(text: str) -> None:
    statement = pglast.parse_sql(f"SELECT {quote_literal(text)}")[0].stmt
    assert isinstance(statement, ast.SelectStmt) and statement.targetList is not None
    assert statement.targetList[0].val.val.sval == text


def test_quote_literal_drops_nul() -> None:
    assert quote_literal("a\0b") == "E'ab'"


def test_show_sql_is_one_text_column_named_sql() -> None:
    statement = pglast.parse_sql(show_sql("SELECT 'x' FROM t"))[0].stmt
    assert isinstance(statement, ast.SelectStmt) and statement.targetList is not None
    target = statement.targetList[0]
    assert target.name == "sql" and target.val.arg.val.sval == "SELECT 'x' FROM t"


@pytest.mark.parametrize("hostile", ["$pgnl$", "'; DROP TABLE t; --", "\\'); END $$"])
def test_raise_sql_is_one_do_block_whatever_the_text(hostile: str) -> None:
    error = AnswerError("NL001", f"message {hostile}", hint=f"hint {hostile}", detail=hostile)
    (statement,) = pglast.parse_sql(raise_sql(error))
    assert isinstance(statement.stmt, ast.DoStmt) and statement.stmt.args is not None
    body = statement.stmt.args[0].arg.sval
    assert "ERRCODE = 'NL001'" in body and "HINT = " in body and "DETAIL = " in body


@pytest.mark.parametrize(
    ("sqlstate", "used"), [("42601", "42601"), ("00000", "XX000"), ("bad", "XX000")]
)
def test_raise_sql_keeps_only_error_sqlstates(sqlstate: str, used: str) -> None:
    assert f"ERRCODE = '{used}'" in raise_sql(AnswerError(sqlstate, "m"))


def test_explain_sql_types_every_value() -> None:
    trace = [
        TraceRow("schema", None, None, "", "4 tables", 1.5),
        TraceRow("check", 1, -2.5, "'x' -> 'y'", "2 rows", math.inf),
        TraceRow("check", 2, math.nan, "", "error: it's", 0.0),
    ]
    (statement,) = pglast.parse_sql(explain_sql(trace))
    assert isinstance(statement.stmt, ast.SelectStmt)
    text = explain_sql(trace)
    assert "'NaN'::double precision" in text and "'Infinity'::double precision" in text
    assert "NULL::integer" in text and "1::integer" in text
    assert text.endswith("AS trace(stage, candidate, score, calibration, outcome, ms)")
    assert explain_sql([]).endswith("WHERE false")
    pglast.parse_sql(explain_sql([]))


@pytest.mark.parametrize(
    ("sql", "refused"),
    [
        ("SELECT count(*) FROM students", None),
        ("VALUES (1)", None),
        ("TABLE students", None),
        ("WITH s AS (SELECT 1) SELECT * FROM s", None),
        ("SELECT 1 UNION SELECT 2", None),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("DELETE FROM students", "DeleteStmt"),
        ("COMMIT", "TransactionStmt"),
        ("SELECT * INTO copy FROM students", "creates a table"),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DeleteStmt"),
        ("SELEC 1", "not valid SQL"),
    ],
)
def test_check_generated(sql: str, refused: str | None) -> None:
    reason = check_generated(sql)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


def test_render_run_notices_the_sql_first() -> None:
    answer = Answer("q", sql="SELECT 1", outcome="fallback", notices=["no rows; fell back"])
    rendered = render(RUN, answer)
    assert rendered.sql == "SELECT 1" and not rendered.failed
    assert rendered.notices == ["pgnl: SELECT 1", "no rows; fell back"]


def test_render_refuses_generated_sql_that_writes() -> None:
    rendered = render(RUN, Answer("q", sql="DELETE FROM students", outcome="answered"))
    assert rendered.failed and "'2F003'" in rendered.sql and "DELETE FROM students" in rendered.sql
    # nl show: only shows it.
    shown = render(SHOW, Answer("q", sql="DELETE FROM students", outcome="answered"))
    assert shown.sql == show_sql("DELETE FROM students")


def test_render_errors_and_explain_of_a_failure() -> None:
    error = AnswerError("NL001", "no candidate ran", hint="rephrase")
    answer = Answer("q", error=error, trace=[TraceRow("schema", None, None, "", "ok", 1.0)])
    assert render(RUN, answer) == rewrite.Rendered(raise_sql(error), [], failed=True)
    assert render(SHOW, error).failed
    explained = render(EXPLAIN, answer)
    assert not explained.failed and explained.sql == explain_sql(answer.trace)
    assert explained.notices == ["pgnl found no SQL for the question: no candidate ran"]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("DEALLOCATE S_1", ["s_1"]),
        ('deallocate prepare "S_1"', ["S_1"]),
        ('DEALLOCATE "a""b";', ['a"b']),
        ("DEALLOCATE ALL", ["*"]),
        ("  discard all", ["*"]),
        ("DISCARD PLANS", None),
        ("SELECT 1", None),
    ],
)
def test_forgotten_statements(text: str, names: list[str] | None) -> None:
    assert forgotten_statements(text) == names


def test_a_query_ends_the_unnamed_statement() -> None:
    statements = {b"", b"s_1", b"S_2"}
    forget_in_query("DEALLOCATE s_1", statements)
    assert statements == {b"S_2"}


# ---------------------------------------------------------------- batches


def messages(data: bytes) -> list[tuple[bytes, bytes]]:
    return split_messages(data)


def plan(data: bytes, statements: set[bytes]) -> list[Segment]:
    return plan_batch(messages(data), statements, lambda b: b.decode())


def kinds(segment: Segment) -> str:
    return "".join(item.kind.decode() for item in segment.items)


def test_pgjdbc_begin_then_a_directive() -> None:
    statements: set[bytes] = set()
    data = (
        Parse(b"", b"BEGIN").encode()
        + Bind(b"", b"").encode()
        + Execute(b"", 1).encode()
        + Parse(b"", b"-- nl: q").encode()
        + Bind(b"", b"").encode()
        + Describe(b"P", b"").encode()
        + Execute(b"", 0).encode()
    )
    first, second = plan(data, statements)
    assert (first.directive, kinds(first)) == (False, "PBE")
    assert (second.directive, kinds(second)) == (True, "PBDE")
    assert second.parses[0].directive == Directive(DirectiveKind.RUN, "q")
    assert statements == {b""}


def test_a_named_statement_runs_in_the_scope_until_closed() -> None:
    statements: set[bytes] = set()
    (segment,) = plan(Parse(b"S_1", b"/* nl show: q */").encode(), statements)
    assert segment.directive and statements == {b"S_1"}
    later = Bind(b"C_1", b"S_1").encode() + Execute(b"C_1", 100).encode()
    (segment,) = plan(later, statements)
    assert segment.directive and kinds(segment) == "BE"
    assert Execute.decode(segment.items[1].body).max_rows == 0  # rows in one go
    other = Bind(b"", b"S_2").encode() + Execute(b"", 5).encode()
    (segment,) = plan(other, statements)
    assert not segment.directive and Execute.decode(segment.items[1].body).max_rows == 5
    (segment,) = plan(Close(b"S", b"S_1").encode(), statements)
    assert not segment.directive and statements == set()


def test_segments_alternate_and_describe_goes_with_its_neighbour() -> None:
    statements = {b"D"}
    data = (
        Describe(b"S", b"D").encode()
        + Bind(b"", b"D").encode()
        + Execute(b"").encode()
        + Parse(b"", b"SELECT 1").encode()
        + Bind(b"", b"").encode()
        + Execute(b"").encode()
        + Bind(b"p", b"D").encode()
        + Execute(b"p").encode()
    )
    segments = plan(data, statements)
    assert [(s.directive, kinds(s)) for s in segments] == [
        (True, "DBE"),
        (False, "PBE"),
        (True, "BE"),
    ]


def test_parameters_bound_to_a_directive_are_counted() -> None:
    statements: set[bytes] = set()
    data = Parse(b"", b"-- nl: q", (23,)).encode() + Bind(b"", b"", (b"1", b"2")).encode()
    (segment,) = plan(data, statements)
    assert segment.parses[0].param_types == (23, 0)


def test_a_directive_error_is_a_directive_segment() -> None:
    (segment,) = plan(Parse(b"", b"-- nl: q\nSELECT 1").encode(), set())
    assert segment.directive and isinstance(segment.parses[0].directive, DirectiveError)


def test_nothing_about_directives_is_one_plain_segment() -> None:
    statements = {b"x"}
    (segment,) = plan(Parse(b"", b"DEALLOCATE x").encode() + Bind(b"", b"").encode(), statements)
    assert not segment.directive and statements == set()
