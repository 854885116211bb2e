"""`extract_sql`: the read-only query in an LLM's answer, or LLMAnswerError, over a table of
answers as models write them (fences, prose, several statements, thinking, hostile statements)."""

from __future__ import annotations

import pytest

from proxy.nl2sql.llm import LLMAnswerError, extract_sql, find_statements

FOUND = [
    # plain
    ("SELECT name FROM singer", "SELECT name FROM singer"),
    ("  SELECT name FROM singer;  \n", "SELECT name FROM singer"),
    ("select count(*) from singer", "select count(*) from singer"),
    (
        "WITH f AS (SELECT * FROM singer) SELECT count(*) FROM f",
        "WITH f AS (SELECT * FROM singer) SELECT count(*) FROM f",
    ),
    ("VALUES (1), (2)", "VALUES (1), (2)"),
    ("TABLE singer", "TABLE singer"),
    ("(SELECT 1) UNION (SELECT 2)", "(SELECT 1) UNION (SELECT 2)"),
    # code fences
    ("```sql\nSELECT name\nFROM singer\n```", "SELECT name\nFROM singer"),
    ("```\nSELECT 1\n```", "SELECT 1"),
    ("~~~postgresql\nSELECT 1;\n~~~", "SELECT 1"),
    ("```sql SELECT 1 ```", "SELECT 1"),
    ("```sql\nSELECT 1", "SELECT 1"),  # a fence never closed
    # prose around the SQL
    (
        "Here is the query:\nSELECT name FROM singer\n\nIt lists every singer.",
        "SELECT name FROM singer",
    ),
    (
        "Sure! The SQL is: SELECT count(*) FROM singer; It counts them.",
        "SELECT count(*) FROM singer",
    ),
    ("The answer is `SELECT a FROM t`.", "SELECT a FROM t"),
    (
        "To answer this, join the tables:\n\n```sql\nSELECT s.name\nFROM singer AS s\n```\n\n"
        "Explanation: this selects the names.",
        "SELECT s.name\nFROM singer AS s",
    ),
    ("SQL:\nSELECT 1\nDone.", "SELECT 1"),
    # several statements: the first read-only query; one in a fence before any outside
    ("SELECT 1; SELECT 2", "SELECT 1"),
    ("SELECT name FROM singer;\nSELECT * FROM singer;", "SELECT name FROM singer"),
    ("Draft: SELECT a FROM t\n```sql\nSELECT b FROM t\n```", "SELECT b FROM t"),
    ("BEGIN;\nSELECT 1;\nCOMMIT;", "SELECT 1"),
    # thinking is not the answer
    (
        "<think>maybe DELETE FROM t;\nSELECT wrong FROM t</think>\nSELECT good FROM t",
        "SELECT good FROM t",
    ),
    # comments, strings that look like separators, names that need quotes
    ("-- the query\nSELECT 1 -- one\n", "SELECT 1"),
    ("/* nl: ignore */ SELECT 1", "SELECT 1"),
    (
        "SELECT a FROM t WHERE x = 'it''s: ok; really'",
        "SELECT a FROM t WHERE x = 'it''s: ok; really'",
    ),
    ('SELECT "Name" FROM "Singer"', 'SELECT "Name" FROM "Singer"'),
    ("SELECT 'é' AS x FROM t\nThat is all.", "SELECT 'é' AS x FROM t"),
    # a word of prose that is also a statement is not mistaken for one
    ("Select the names:\nSELECT name FROM singer", "SELECT name FROM singer"),
    ("Values are case-sensitive.\nSELECT 1", "SELECT 1"),
]

REFUSED = [
    ("DELETE FROM singer", "DELETE"),
    ("DROP TABLE singer", "DROP"),
    ("SELECT 1; DROP TABLE x", "DROP"),
    ("```sql\nSELECT 1\n```\nThen run:\nDELETE FROM singer;", "DELETE"),
    ("INSERT INTO t VALUES (1)", "INSERT"),
    ("UPDATE t SET a = 1", "UPDATE"),
    ("TRUNCATE t", "TRUNCATE"),
    ("CREATE TABLE x (a int)", "CREATE TABLE"),
    ("ALTER TABLE t ADD b int", "ALTER TABLE"),
    ("COPY t TO '/tmp/x'", "COPY"),
    ("SET search_path = evil; SELECT 1", "SET"),
    ("GRANT ALL ON t TO public", "GRANT"),
    ("EXPLAIN ANALYZE DELETE FROM t", "EXPLAIN"),
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "data-modifying DELETE"),
    ("SELECT * FROM (SELECT 1) s, LATERAL (SELECT 2 FOR UPDATE) x", "FOR UPDATE"),
    ("SELECT * INTO x FROM t", "SELECT ... INTO"),
    ("SELECT * FROM t FOR UPDATE", "FOR UPDATE"),
    ("SELECT * FROM t FOR SHARE", "FOR UPDATE or FOR SHARE"),
    ("SELECT set_config('search_path', 'evil', false)", "set_config"),
    ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity", "pg_terminate_backend"),
    ("SELECT pg_catalog.pg_read_file('/etc/passwd')", "pg_read_file"),
    ("SELECT lo_export(1, '/tmp/x')", "lo_export"),
    ("SELECT query_to_xml('DELETE FROM t', true, true, '')", "query_to_xml"),
    ("SELECT nextval('s')", "nextval"),
]

NOTHING = [
    "",
    "I cannot help with that.",
    "The table singer has a name column.",
    "SELECT name FROM",  # incomplete
    "SELECT `name` FROM `singer`",  # MySQL quoting is not PostgreSQL
    "<think>SELECT 1</think>",
]


@pytest.mark.parametrize(("answer", "sql"), FOUND)
def test_finds_the_query(answer: str, sql: str) -> None:
    assert extract_sql(answer) == sql


@pytest.mark.parametrize(("answer", "statement"), REFUSED)
def test_refuses_an_answer_with_any_statement_that_is_not_a_read_only_query(
    answer: str, statement: str
) -> None:
    with pytest.raises(LLMAnswerError, match="refused as a whole") as caught:
        extract_sql(answer)
    assert statement in caught.value.reason
    assert caught.value.answer == answer


@pytest.mark.parametrize("answer", NOTHING)
def test_no_query(answer: str) -> None:
    with pytest.raises(LLMAnswerError, match="no SQL query"):
        extract_sql(answer)


@pytest.mark.parametrize(
    ("answer", "sql"),
    [
        ("SELECT name FROM singer;", "SELECT name FROM singer"),
        ("SELECT name FROM singer\n\nThis query lists the names of", "SELECT name FROM singer"),
        ("```sql\nSELECT 1\n```\nThe", "SELECT 1"),
    ],
)
def test_a_cut_answer_keeps_a_query_that_ended_before_the_cut(answer: str, sql: str) -> None:
    assert extract_sql(answer, truncated=True) == sql


@pytest.mark.parametrize("answer", ["SELECT name FROM singer ORDER BY name", "```sql\nSELECT 1"])
def test_a_cut_answer_refuses_a_query_running_to_the_cut(answer: str) -> None:
    assert extract_sql(answer)  # whole, it would be taken
    with pytest.raises(LLMAnswerError, match="max_tokens"):
        extract_sql(answer, truncated=True)


def test_statements_are_reported_in_order_with_their_fence() -> None:
    found = find_statements("SELECT 1;\n```sql\nSELECT 2; DROP TABLE t\n```\n")
    assert [(s.sql, s.fenced, s.problem) for s in found] == [
        ("SELECT 1", False, None),
        ("SELECT 2", True, None),
        ("DROP TABLE t", True, "a DROP statement"),
    ]


def test_long_prose_is_read_quickly() -> None:
    import time

    prose = "\n".join("select the name of the table where it is from a or b" for _ in range(400))
    started = time.perf_counter()
    with pytest.raises(LLMAnswerError):
        extract_sql(prose)
    assert time.perf_counter() - started < 2.0
