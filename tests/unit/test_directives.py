"""Directive parsing (proxy.directives): a table of query texts and what each one is."""

from __future__ import annotations

import doctest
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pglast import parser as pg_parser

from proxy import directives
from proxy.directives import (
    MAX_QUESTION_CHARS,
    Directive,
    DirectiveError,
    DirectiveKind,
    maybe_directive,
    parse,
)

RUN, SHOW, EXPLAIN = DirectiveKind.RUN, DirectiveKind.SHOW, DirectiveKind.EXPLAIN

# (query text, kind, question)
DIRECTIVES = [
    # the two forms, the three kinds
    ("-- nl: which course has the highest score?", RUN, "which course has the highest score?"),
    ("/* nl: which course has the highest score? */", RUN, "which course has the highest score?"),
    ("-- nl show: how many students?", SHOW, "how many students?"),
    ("/* nl show: how many students? */", SHOW, "how many students?"),
    ("-- nl explain: how many students?", EXPLAIN, "how many students?"),
    ("/* nl explain: how many students? */", EXPLAIN, "how many students?"),
    # case
    ("-- NL: q", RUN, "q"),
    ("/* Nl Show: q */", SHOW, "q"),
    ("/* NL EXPLAIN: q */", EXPLAIN, "q"),
    ("-- nL sHoW: q", SHOW, "q"),
    # whitespace around the keywords
    ("--nl: q", RUN, "q"),
    ("--nl:q", RUN, "q"),
    ("/*nl:q*/", RUN, "q"),
    ("-- nl : q", RUN, "q"),
    ("--\tnl\t:\tq", RUN, "q"),
    ("-- nl  show: q", SHOW, "q"),
    ("-- nl\tshow\t: q", SHOW, "q"),
    ("/*\n   nl explain: q\n*/", EXPLAIN, "q"),
    ("/*\tnl: q\t*/", RUN, "q"),
    # leading whitespace, trailing `;`, whitespace and comments
    ("   \n\t-- nl: q", RUN, "q"),
    ("\f\v/* nl: q */", RUN, "q"),
    ("/* nl: q */;", RUN, "q"),
    ("/* nl: q */ ;", RUN, "q"),
    ("/* nl: q */;;\n;", RUN, "q"),
    ("/* nl: q */\n", RUN, "q"),
    ("/* nl: q */ -- asked by alice", RUN, "q"),
    ("/* nl: q */ /* ticket 42 */;", RUN, "q"),
    ("/* nl: q */; -- done\n", RUN, "q"),
    # psql -c style: the line comment, then `;` on the next line
    ("-- nl: q\n;", RUN, "q"),
    ("-- nl: q\r\n;", RUN, "q"),
    ("-- nl: q\r;", RUN, "q"),
    ("-- nl show: how many rows?\n;\n", SHOW, "how many rows?"),
    # ordinary comments before the directive (tools that prepend their own)
    ("-- Metabase:: userID: 1 queryType: native\n-- nl: q", RUN, "q"),
    ("/* app=dbeaver */ /* nl: q */;", RUN, "q"),
    ("-- first\n-- second\n/* nl: q */", RUN, "q"),
    # later `--` lines do not continue a `--` question
    ("-- nl: which course\n-- has the highest score", RUN, "which course"),
    # whitespace in the question is normalised
    ("/* nl:   which\n  course\thas   it?   */", RUN, "which course has it?"),
    ("/* nl:\nwhich course\n\nhas it?\n*/;", RUN, "which course has it?"),
    ("-- nl:    spaced    out   ", RUN, "spaced out"),
    # the comment's own delimiters and quotes inside the question
    ("-- nl: what does */ mean?", RUN, "what does */ mean?"),
    ("-- nl: is /* a comment?", RUN, "is /* a comment?"),
    ("/* nl: rows -- all of them */", RUN, "rows -- all of them"),
    ('/* nl: who wrote "a; b"? */', RUN, 'who wrote "a; b"?'),
    (
        "/* nl: students named 'O''Brien'; all of them */;",
        RUN,
        "students named 'O''Brien'; all of them",
    ),
    ("-- nl: x; DROP TABLE students", RUN, "x; DROP TABLE students"),
    ("-- nl: show: the rest", RUN, "show: the rest"),
    ("-- nl: nl: twice", RUN, "nl: twice"),
    ("/* nl: $1 and ? placeholders */", RUN, "$1 and ? placeholders"),
    ("/* nl: café ünïcode 学生 */", RUN, "café ünïcode 学生"),
    # nesting, as in PostgreSQL's scanner
    ("/* nl: which /* nested */ course */", RUN, "which /* nested */ course"),
    ("/* nl: a /* b /* c */ d */ e */;", RUN, "a /* b /* c */ d */ e"),
    ("/* nl: a /*/ b */ c */", RUN, "a /*/ b */ c"),
    ("/* nl: q **/", RUN, "q *"),
    ("/* nl: q*/", RUN, "q"),
    # a question of exactly the maximum length
    ("-- nl: " + "x" * MAX_QUESTION_CHARS, RUN, "x" * MAX_QUESTION_CHARS),
]

PASS_THROUGH = [
    # ordinary SQL
    "SELECT 1",
    "select * from students where name = 'nl: x'",
    "",
    "   ",
    ";",
    "\n;\n",
    # a directive that is not leading
    "SELECT 1 -- nl: x",
    "SELECT 1; /* nl: x */",
    "SELECT /* nl: x */ 1",
    "; /* nl: x */",
    "-- note\n; /* nl: x */",  # `;` may follow a directive, not precede it
    "x-- nl: q",
    # comments that are not directives
    "-- nlp",
    "-- nlp: stuff",
    "/* nlp stuff */",
    "/* nl */",
    "-- nl",
    "-- nl is the country code\nSELECT * FROM t WHERE country = 'nl'",
    "-- nl is great",
    "-- nl show me the rows",
    "-- nl shwo: typo",
    "-- nl-show: q",
    "-- nlshow: q",
    "-- nl show explain: q",
    "-- no: q",
    "-- n l: q",
    "/*+ nl: q */",
    "-- x nl: q",
    "-- nl\nshow: q",
    "/* nl\n: q */",
    "/* nl\nshow: q */",
    "-- nl \u017fhow: q",  # U+017F, a long s, is not an s: keywords are ASCII
    # whitespace PostgreSQL does not skip
    "\u00a0-- nl: q",
    "\ufeff/* nl: q */",
    # SQL after ordinary leading comments
    "-- fetch them all\nSELECT 1",
    "/* hint */ SELECT 1",
    # unterminated block comments: PostgreSQL reports them itself
    "/* nl: q",
    "/* nl: q /* nested */",
    "/* nl: q */ /* trailing",
    "-- nl: q\n/* oops",
    "/* unterminated -- nl: q",
    "/* nl: */ /* trailing",  # unterminated wins over an empty question
    "/* nl: a */ /* nl: b */ /* trailing",  # and over two directives
]

# (query text, SQLSTATE, a phrase of the message)
ERRORS = [
    # empty questions
    ("-- nl:", "42601", "has no question"),
    ("-- nl:   ", "42601", "has no question"),
    ("/* nl: */", "42601", "has no question"),
    ("/* nl show:\n\n*/;", "42601", "nl show: directive has no question"),
    ("-- nl explain:\n;", "42601", "nl explain: directive has no question"),
    # SQL after the directive
    ("/* nl: q */ SELECT 1", "42601", "must be the whole statement"),
    ("/* nl: q */; SELECT 1", "42601", "must be the whole statement"),
    ("-- nl: q\nSELECT 1", "42601", "must be the whole statement"),
    ("-- nl show: q\n; DROP TABLE students", "42601", "nl show: directive must be"),
    ("/* nl: q */ /* c */ x", "42601", "must be the whole statement"),
    ("/* nl: q */ SELECT 1 /* unterminated", "42601", "must be the whole statement"),
    ("/* nl: */ SELECT 1", "42601", "must be the whole statement"),
    # two directives
    ("/* nl: a */ /* nl: b */", "42601", "only one nl directive"),
    ("-- nl: a\n-- nl show: b", "42601", "only one nl directive"),
    # too long
    ("-- nl: " + "x" * (MAX_QUESTION_CHARS + 1), "54000", "at most 4000 characters"),
    ("/* nl: " + "word " * 1000 + "*/", "54000", "4999 characters long"),
]


@pytest.mark.parametrize(("text", "kind", "question"), DIRECTIVES)
def test_directive(text: str, kind: DirectiveKind, question: str) -> None:
    assert maybe_directive(text)
    assert maybe_directive(text.encode())
    assert parse(text) == Directive(kind, question)


@pytest.mark.parametrize("text", PASS_THROUGH)
def test_pass_through(text: str) -> None:
    assert parse(text) is None


@pytest.mark.parametrize(("text", "sqlstate", "phrase"), ERRORS)
def test_error(text: str, sqlstate: str, phrase: str) -> None:
    assert maybe_directive(text)
    with pytest.raises(DirectiveError) as caught:
        parse(text)
    error = caught.value
    assert error.sqlstate == sqlstate
    assert phrase in error.message
    assert str(error) == error.message
    assert error.hint  # says what to write instead


def test_table_is_large() -> None:
    assert len(DIRECTIVES) + len(PASS_THROUGH) + len(ERRORS) >= 60


@pytest.mark.parametrize(
    "text",
    ["SELECT 1", b"SELECT 1", "  SELECT 1", "-- just a comment\nSELECT 1", b"/* hint */ SELECT"],
)
def test_pre_check_rejects_ordinary_queries(text: str | bytes) -> None:
    assert not maybe_directive(text)


def test_error_hints_show_what_to_write() -> None:
    with pytest.raises(DirectiveError) as caught:
        parse("/* nl show: */")
    assert "/* nl show: which course has the highest score? */;" in caught.value.hint
    with pytest.raises(DirectiveError) as caught:
        parse("/* nl: q */ SELECT 1")
    assert "/* nl: which course has the highest score? */;" in caught.value.hint


def test_docstring_examples() -> None:
    result = doctest.testmod(directives, raise_on_error=False, report=False)
    assert result.attempted >= 3
    assert result.failed == 0


_FRAGMENTS = [
    "--",
    "/*",
    "*/",
    "/",
    "*",
    "-",
    "nl",
    "NL",
    "nL",
    " show",
    " EXPLAIN",
    ":",
    ";",
    " ",
    "\t",
    "\n",
    "\r",
    "\f",
    "q",
    "SELECT 1",
    "'",
    "\u017f",
    "\u00a0",
]

_TEXTS = st.one_of(
    st.text(),
    st.lists(st.sampled_from(_FRAGMENTS), max_size=20).map("".join),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=3)), max_size=12).map("".join),
)


@given(_TEXTS)
@settings(max_examples=1000, deadline=None)
def test_pre_check_is_safe_and_parse_only_raises_directive_error(text: str) -> None:
    pre = maybe_directive(text)
    assert maybe_directive(text.encode()) is pre
    try:
        result = parse(text)
    except DirectiveError as error:
        assert pre
        assert error.sqlstate in {"42601", "54000"}
        return
    if not pre:
        assert result is None
    if result is not None:
        assert result.question
        assert result.question == " ".join(result.question.split())
        assert len(result.question) <= MAX_QUESTION_CHARS


_COMMENTS_AND_SEMICOLONS = {"C_COMMENT", "SQL_COMMENT", "ASCII_59"}

_LEXICAL = st.lists(
    st.sampled_from(
        ["/*", "*/", "/* nl: q", "-- nl: q", "nl:", "/", "*", "-", "--", "\n", "\r", " ", ";", "x"]
    ),
    max_size=16,
).map("".join)


@given(_LEXICAL)
@settings(max_examples=500, deadline=None)
def test_comments_end_where_postgresql_ends_them(text: str) -> None:
    """PostgreSQL's own scanner (through pglast) agrees on where comments end and what follows."""
    try:
        tokens = pg_parser.scan(text)
    except pg_parser.ParseError:
        tokens = None  # e.g. an unterminated comment, which PostgreSQL reports itself
    try:
        result = parse(text)
    except DirectiveError as error:
        if "whole statement" in error.message:
            # SQL follows: PostgreSQL sees a token that is not a comment, or cannot lex the SQL
            assert tokens is None or any(t.name not in _COMMENTS_AND_SEMICOLONS for t in tokens)
        else:
            assert tokens is not None
            assert all(t.name in _COMMENTS_AND_SEMICOLONS for t in tokens)
        return
    if result is not None:
        assert tokens is not None
        assert all(t.name in _COMMENTS_AND_SEMICOLONS for t in tokens)
    elif tokens is not None:
        # none of the comments before PostgreSQL's first other token (`;` included) is a directive
        leading = itertools.takewhile(lambda t: t.name in {"C_COMMENT", "SQL_COMMENT"}, tokens)
        assert not any(_is_directive(text[t.start : t.end + 1]) for t in leading)


def _is_directive(comment: str) -> bool:
    try:
        return parse(comment + "\n") is not None
    except DirectiveError:
        return True
