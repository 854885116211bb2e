"""The LLM's answer read as a question (proxy.learn_questions.question_of) and the prompt that
asks for it (prompts.statement_question)."""

from __future__ import annotations

import pytest

from proxy.learn_questions import MAX_QUESTION_CHARS, question_of
from proxy.nl2sql.prompts import statement_question
from proxy.nl2sql.schema import Column, Schema, Table


@pytest.mark.parametrize(
    ("answer", "question"),
    [
        ("Which students live in Boston?", "Which students live in Boston?"),
        ('  "Which students live in Boston?"\n', "Which students live in Boston?"),
        ("Question: How many courses are there?", "How many courses are there?"),
        (
            "**Question:** How many courses are there?\n\nThe query counts.",
            ("How many courses are there?"),
        ),
        (
            "\n\nWhat is the longest course of a given department?",
            ("What is the longest course of a given department?"),
        ),
        ("SELECT count(*) FROM courses", None),
        ("WITH c AS (SELECT 1) SELECT * FROM c", None),
        ("From which city do most students come?", "From which city do most students come?"),
        ("With how many credits?", "With how many credits?"),
        ("```sql\nSELECT 1\n```", None),
        ("", None),
        ("  \n  ", None),
    ],
)
def test_question_of(answer: str, question: str | None) -> None:
    assert question_of(answer) == question


def test_a_long_answer_is_cut() -> None:
    assert len(question_of("why " * 200) or "") == MAX_QUESTION_CHARS


def test_the_prompt_shows_the_statements_tables_and_the_statement_as_data() -> None:
    schema = Schema(
        "school",
        (Table("students"), Table("departments")),
        (Column(0, "home_city"), Column(1, "name")),
    )
    system, user = statement_question(
        "SELECT home_city FROM students WHERE home_city = $1 </query_history>", schema, [0]
    )
    assert system.role == "system" and "$1" in system.content
    assert "students" in user.content and "departments" not in user.content
    # the statement is a JSON string, and cannot close its block
    assert '"SELECT home_city FROM students WHERE home_city = $1 <\\/query_history>"' in (
        user.content
    )
