"""How the worker turns the index build's psycopg-style queries into the `$n` form the backend
binds (`proxy.pg_functions.remote.dollar_placeholders`)."""

from __future__ import annotations

import pytest
from psycopg import sql

from pg_functions.remote import dollar_placeholders  # installed as proxy.pg_functions.remote


def test_positional_placeholders_are_numbered_in_order() -> None:
    query = "SELECT * FROM t WHERE a = %s AND b = ANY (%s::text[])"
    assert dollar_placeholders(query, [1, ["x"]]) == (
        "SELECT * FROM t WHERE a = $1 AND b = ANY ($2::text[])",
        [1, ["x"]],
    )


def test_named_placeholders_share_a_number() -> None:
    query = "SELECT %(s)s, %(e)s, %(s)s::text[]"
    assert dollar_placeholders(query, {"s": ["a"], "e": ["b"]}) == (
        "SELECT $1, $2, $1::text[]",
        [["a"], ["b"]],
    )


def test_literals_quoted_names_and_percent_signs_are_left_alone() -> None:
    query = """SELECT '%s it''s', "col%s", 5 %% 2, %s"""
    assert dollar_placeholders(query, ["v"]) == (
        """SELECT '%s it''s', "col%s", 5 % 2, $1""",
        ["v"],
    )


def test_compositions_and_bytes_become_text() -> None:
    composed = sql.SQL("SELECT {} FROM {}").format(
        sql.Identifier('we"ird'), sql.Identifier("s", "t")
    )
    assert dollar_placeholders(composed, ()) == ('SELECT "we""ird" FROM "s"."t"', [])
    assert dollar_placeholders(b"DROP INDEX nl.x", ()) == ("DROP INDEX nl.x", [])


def test_too_few_parameters_is_an_error() -> None:
    with pytest.raises(ValueError, match="more placeholders than parameters"):
        dollar_placeholders("SELECT %s, %s", [1])
