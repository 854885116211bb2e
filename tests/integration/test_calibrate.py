"""Predicate calibration against a real value index: the demo's university database, migrated and
indexed with the shipped ONNX embedder, looked up as the asking role (table-driven examples)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from proxy.nl2sql.calibrate import DatabaseCatalog, Method, calibrate
from proxy.nl2sql.database import PsycopgDatabase
from proxy.runtime import load_embedder
from proxy.valueindex import ColumnRef, ValueIndex, build_index
from tests.fix_pg import Postgres, demo_database

DB = "pgnl_calibrate_test"


@pytest.fixture(scope="module")
def university(postgres: Postgres) -> Iterator[psycopg.Connection[Any]]:
    with (
        demo_database(postgres, DB) as dsn,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        yield conn


@pytest.fixture
def lookups(university: psycopg.Connection[Any]) -> tuple[ValueIndex, DatabaseCatalog]:
    db = PsycopgDatabase(university)
    return ValueIndex(db, load_embedder()), DatabaseCatalog(db)


STUDENTS = "SELECT s.id FROM students AS s WHERE "

# (predicate as written, expected predicate after calibration or None if left alone)
EXAMPLES = [
    ("s.first_name = 'timmothy'", "s.first_name = 'Timmy'"),  # typo
    ("s.home_state = 'NY'", "s.home_state = 'New York'"),  # abbreviation
    ("s.home_state = 'HI'", "s.home_state = 'Hawaii'"),  # postal code
    ("s.home_state = 'Boston'", "s.home_city = 'Boston'"),  # a value in the wrong column
    ("s.last_name IN ('ward', 'Garcia')", "s.last_name IN ('Ward', 'Garcia')"),  # case, in a list
    ("s.home_city ILIKE '%honolul%'", None),  # a pattern that matches already
    ("s.home_city LIKE '%honolul%'", "s.home_city LIKE '%Honolulu%'"),  # LIKE is case-sensitive
    # a pattern in the wrong column moves to one whose values contain it, as a pattern
    ("s.home_state ILIKE '%Honolul%'", "s.home_city ILIKE '%Honolul%'"),
    ("s.enrolled_year = '2021'", None),  # a number, not calibrated into a string
    ("s.last_name = 'Ward'", None),  # already correct
    ("s.last_name = 'Zzyzx-Qwerty'", None),  # nothing close enough: left alone
]


@pytest.mark.parametrize(("where", "expected"), EXAMPLES)
def test_calibration_examples(
    lookups: tuple[ValueIndex, DatabaseCatalog],
    university: psycopg.Connection[Any],
    where: str,
    expected: str | None,
) -> None:
    index, catalog = lookups
    result = calibrate(STUDENTS + where, index, catalog)
    if expected is None:
        assert not result.changed, result.calibrations
        assert result.sql == STUDENTS + where
    else:
        assert result.sql == STUDENTS + expected
        rows = university.execute(result.sql.encode()).fetchall()
        assert rows, "the calibrated query finds rows"


def test_value_in_a_table_the_query_does_not_read_is_reported_not_applied(
    lookups: tuple[ValueIndex, DatabaseCatalog],
) -> None:
    index, catalog = lookups
    sql = "SELECT id FROM students WHERE first_name = 'Machine Lerning'"
    result = calibrate(sql, index, catalog)
    assert result.sql == sql
    (found,) = result.calibrations
    assert (found.new_column, found.new_value, found.applied) == (
        ColumnRef("public", "courses", "title"),
        "Machine Learning",
        False,
    )
    assert found.level == "database"


def test_aliases_and_subqueries_resolve_to_real_columns(
    lookups: tuple[ValueIndex, DatabaseCatalog],
) -> None:
    index, catalog = lookups
    sql = (
        "SELECT c.title FROM courses AS c WHERE c.department_id IN "
        "(SELECT d.id FROM departments AS d WHERE d.name = 'computer sciense')"
    )
    result = calibrate(sql, index, catalog)
    assert "d.name = 'Computer Science'" in result.sql
    assert result.calibrations[0].column == ColumnRef("public", "departments", "name")


@pytest.mark.parametrize(
    ("sql", "note"),
    [
        ("SELEC id FROM students", "does not parse"),
        ("SELECT 1; SELECT 2", "not exactly one statement"),
        (STUDENTS + "s.first_name = '" + "x" * 10_000_000 + "'", "longer than"),
        (STUDENTS + "s.nickname = 'Tim'", "could not be resolved"),
    ],
    ids=["unparsable", "two statements", "10 MB literal", "unknown column"],
)
def test_bad_input_leaves_the_sql_unchanged(
    lookups: tuple[ValueIndex, DatabaseCatalog], sql: str, note: str
) -> None:
    index, catalog = lookups
    result = calibrate(sql, index, catalog)
    assert result.sql == sql and not result.calibrations
    assert any(note in line for line in result.notes), result.notes


def test_a_column_dropped_since_indexing_is_no_crash(
    postgres: Postgres, university: psycopg.Connection[Any]
) -> None:
    university.execute("CREATE TABLE pets (name text, species text)")
    university.execute("INSERT INTO pets VALUES ('Rex', 'dog'), ('Tom', 'cat')")
    build_index(university, load_embedder(), progress=False)
    university.execute("ALTER TABLE pets DROP COLUMN species")
    db = PsycopgDatabase(university)
    index, catalog = ValueIndex(db, load_embedder()), DatabaseCatalog(db)
    result = calibrate("SELECT name FROM pets WHERE species = 'dgo'", index, catalog)
    assert result.sql == "SELECT name FROM pets WHERE species = 'dgo'"
    result = calibrate("SELECT name FROM pets WHERE name = 'rex'", index, catalog)
    assert result.sql == "SELECT name FROM pets WHERE name = 'Rex'"


CITY = "SELECT id FROM students WHERE home_city = "
STATE = "SELECT id FROM students WHERE home_state = "


@pytest.mark.parametrize(
    ("method", "sql", "expected"),
    [
        ("char", CITY + "'Honolullu'", CITY + "'Honolulu'"),
        ("trigram", CITY + "'Honolullu'", CITY + "'Honolulu'"),
        ("semantic", STATE + "'New York City'", STATE + "'New York'"),
        ("glove", STATE + "'new york city'", STATE + "'New York'"),
        ("hybrid", CITY + "'Honolullu'", CITY + "'Honolulu'"),
    ],
)
def test_each_similarity_method_can_be_chosen(
    lookups: tuple[ValueIndex, DatabaseCatalog], method: Method, sql: str, expected: str
) -> None:
    index, catalog = lookups
    result = calibrate(sql, index, catalog, method=method, levels=("column",))
    assert result.sql == expected, result.notes


def test_an_unknown_method_is_refused(lookups: tuple[ValueIndex, DatabaseCatalog]) -> None:
    index, catalog = lookups
    with pytest.raises(ValueError, match="char, trigram, semantic, glove or hybrid"):
        calibrate("SELECT 1", index, catalog, method="fuzzy")  # type: ignore[arg-type]
