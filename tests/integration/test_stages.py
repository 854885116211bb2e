"""The pipeline's stages one at a time, each over the demo's university database (migrated and
indexed), with hand-made sketches: what each stage module takes and gives, without the models
choosing the sketch.

- grounding: the values a question names, found in the value index and given to the sketch's
  conditions (a predicate moves to the column that holds its value);
- execution: a candidate run, its error traced; a literal calibrated to the database's value;
- search: the candidates tried in order, the first that answers chosen; a partial answer kept
  until one answers; the relaxation of a condition with no value, with its NOTICE.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from proxy.config import Settings
from proxy.nl2sql.budget import Budget
from proxy.nl2sql.candidate import Candidate
from proxy.nl2sql.completion import Completer
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.execution import Executor
from proxy.nl2sql.grounding import Grounding
from proxy.nl2sql.question import Question
from proxy.nl2sql.schema import Schema, introspect
from proxy.nl2sql.search import Search
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots
from proxy.nl2sql.trace import Trace
from proxy.runtime import load_embedder
from proxy.valueindex.lookup import ValueIndex
from tests.fix_pg import Postgres, demo_database

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def university(postgres: Postgres) -> Iterator[str]:
    with demo_database(postgres, "pgnl_stages") as dsn:
        yield dsn


class Stages:
    """One question's stages over the university, as the pipeline's driver wires them."""

    def __init__(self, conn: psycopg.Connection[Any], question: str) -> None:
        settings = Settings()
        db = PsycopgDatabase(conn)
        self.schema: Schema = introspect(db)
        self.trace = Trace(question)
        asked = Question.over(question, self.schema, self.trace)
        index = ValueIndex(db, load_embedder(), timeout_s=settings.pipeline.statement_timeout_s)
        self.grounding = Grounding(
            asked,
            index,
            value_match=settings.pipeline.value_match,
            threshold=settings.calibration.threshold,
        )
        self.completer = Completer(
            asked,
            self.grounding,
            None,
            selection=settings.llm.selection,
            max_completions=settings.llm.max_completions,
        )
        self.executor = Executor(
            asked,
            db,
            grounding=self.grounding,
            completer=self.completer,
            settings=settings.pipeline,
            calibration=settings.calibration,
            budget=Budget(settings.pipeline.budget_s),
        )
        self.search = Search(
            asked,
            grounding=self.grounding,
            completer=self.completer,
            executor=self.executor,
            settings=settings.pipeline,
            llm_settings=settings.llm,
        )

    def column(self, table: str, name: str) -> int:
        return self.schema.column_index(self.schema.table_index(table), name)

    def table(self, name: str) -> int:
        return self.schema.table_index(name)

    def stages(self) -> list[tuple[str, str]]:
        return [(row.stage, row.outcome) for row in self.trace.result.trace]


@pytest.fixture
def conn(university: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(university) as connection:
        connection.read_only = True
        yield connection


def count_where(stages: Stages, table: str, *where: tuple[str, str, str]) -> Sketch:
    """`count(*)` of `table` (and the tables of the conditions) with WHERE conditions."""
    predicates = tuple(Predicate(stages.column(t, c), op) for t, c, op in where)
    return Sketch(
        frozenset({SelectItem("count", STAR)}),
        frozenset({stages.table(table), *(stages.table(t) for t, _, _ in where)}),
        frozenset({"where"}),
        Slots(where=predicates),
    )


# ---------------------------------------------------------------- grounding


def test_the_lookup_finds_the_values_a_question_names(conn: psycopg.Connection[Any]) -> None:
    stages = Stages(conn, "how many students are from new york?")
    values, outcome = stages.grounding.spoken_values()
    assert values is not None
    assert stages.column("students", "home_state") in values.columns
    assert "columns hold a value the question names" in outcome


def test_a_condition_moves_to_the_column_that_holds_its_value(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "how many students are from hawaii?")
    candidate = Candidate(1, count_where(stages, "students", ("students", "home_city", "=")))
    literals = stages.grounding.ground(candidate)
    assert [(literal.value, literal.column) for literal in literals] == [
        ("Hawaii", stages.column("students", "home_state"))
    ]
    assert candidate.sketch.slots.where == (
        Predicate(stages.column("students", "home_state"), "="),
    )
    (values,) = [row for row in stages.trace.result.trace if row.stage == "values"]
    assert values.outcome == "1 values for 1 predicates"
    assert values.calibration == "moved students.home_city -> students.home_state"


def test_a_quoted_value_needs_no_look_up(conn: psycopg.Connection[Any]) -> None:
    stages = Stages(conn, 'how many students are from "Hawaii"?')
    candidate = Candidate(1, count_where(stages, "students", ("students", "home_state", "=")))
    literals = stages.grounding.ground(candidate)
    assert [literal.value for literal in literals] == ["Hawaii"]
    assert stages.stages() == []  # the typed literal is enough: no values stage


def test_without_an_index_the_literals_are_the_question_s_own(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "how many students are from hawaii?")
    stages.grounding.index = None
    candidate = Candidate(1, count_where(stages, "students", ("students", "home_city", "=")))
    assert stages.grounding.ground(candidate) == []
    assert candidate.sketch.slots.where == (Predicate(stages.column("students", "home_city"), "="),)


# ---------------------------------------------------------------- execution


def test_a_failing_candidate_is_traced_and_ends_only_itself(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "how many students are there?")
    broken = Candidate(1, count_where(stages, "students"), sql="SELECT nope FROM students")
    assert not stages.executor.check(broken)
    assert stages.executor.last_error.startswith("42703")
    working = Candidate(2, count_where(stages, "students"), sql="SELECT count(*) FROM students")
    assert stages.executor.check(working)
    assert working.rows == [(240,)]
    assert [stage for stage, _ in stages.stages()] == ["check", "check"]
    assert stages.stages()[0][1].startswith("error 42703")
    assert stages.stages()[1][1] == "1 rows"


def test_calibration_replaces_a_literal_by_the_database_s_value(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "how many students are from hawai?")
    candidate = Candidate(
        1,
        count_where(stages, "students", ("students", "home_state", "=")),
        sql="SELECT count(*) FROM students WHERE home_state = 'Hawai'",
    )
    assert stages.executor.check(candidate)
    assert candidate.rows == [(0,)]
    stages.executor.calibrate(candidate)
    assert "'Hawaii'" in candidate.sql
    assert candidate.rows[0][0] > 0
    assert [stage for stage, _ in stages.stages()] == ["check", "calibrate", "execute"]


# ---------------------------------------------------------------- search


def test_the_first_candidate_that_answers_is_chosen(conn: psycopg.Connection[Any]) -> None:
    stages = Stages(conn, "how many students are from hawaii?")
    empty = count_where(stages, "students", ("students", "first_name", "="))
    right = count_where(stages, "students", ("students", "home_state", "="))
    chosen = stages.search.run([empty, right])
    assert chosen is not None
    assert chosen.outcome == "answered"
    assert "home_state = 'Hawaii'" in chosen.candidate.sql
    assert chosen.candidate.rows[0][0] > 0


def test_an_answer_that_echoes_its_value_waits_for_a_better_one(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "which courses does the Music department offer?")
    name = stages.column("departments", "name")
    echo = Sketch(
        frozenset({SelectItem("", name)}),
        frozenset({stages.table("departments")}),
        frozenset({"where"}),
        Slots(where=(Predicate(name, "="),)),
    )
    titles = Sketch(
        frozenset({SelectItem("", stages.column("courses", "title"))}),
        frozenset({stages.table("courses"), stages.table("departments")}),
        frozenset({"where"}),
        Slots(where=(Predicate(name, "="),)),
    )
    chosen = stages.search.run([echo, titles])
    assert chosen is not None and chosen.outcome == "answered"
    assert chosen.candidate.number == 2
    assert sorted(chosen.candidate.rows) == [("Music Theory",)]
    # alone, the echo is the best there is: chosen, as a partial answer
    alone = Stages(conn, "which courses does the Music department offer?").search.run([echo])
    assert alone is not None and alone.candidate.number == 1
    assert alone.candidate.rows == [("Music",)]


def test_a_condition_with_no_value_is_left_out_with_a_notice(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "how many courses are there?")
    sketch = count_where(stages, "courses", ("courses", "code", "="))
    chosen = stages.search.run([sketch])
    assert chosen is not None and chosen.outcome == "answered"
    assert chosen.candidate.rows == [(12,)]
    assert "the condition is left out" in chosen.notice
    assert "where" not in chosen.candidate.sql.casefold()


def test_no_candidate_that_runs_is_an_error_with_the_last_sql(
    conn: psycopg.Connection[Any],
) -> None:
    stages = Stages(conn, "how many courses are there?")
    # a FROM no key joins to the SELECT's table: no SQL, and nothing ran
    sketch = Sketch(frozenset(), frozenset({stages.table("courses")}), frozenset())
    assert stages.search.run([sketch]) is None
    error = stages.trace.result.error
    assert error is not None and error.sqlstate == "NL001"
