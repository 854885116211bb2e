"""A question that names a row by its name, where the sketch's condition is on the foreign key
that references that row by its code: "airports in Germany" is airports.country = 'DE', and
'Germany' is in countries.name. Real airports (airportsdata) of four countries, ISO 3166
countries, migrated and indexed, asked PLM-only.

Pins: the values stage looks for the value in the table the key references too, so the
condition moves to countries.name and the answer joins it; without that, a look-alike among the
airports' own names ('Man Airport' for "many airports") took the condition.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import airportsdata
import iso3166
import psycopg
import pytest

from proxy.config import Settings
from proxy.migrate import migrate
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.pipeline import load_pipeline
from proxy.runtime import load_embedder
from proxy.valueindex import build_index
from tests.fix_pg import Postgres, scratch_database

pytestmark = pytest.mark.integration

DB = "pgnl_key_names"
COUNTRIES = ("DE", "CA", "CI", "FR")

QUESTIONS = [
    (
        "How many airports are in Germany?",
        "SELECT count(*) FROM airports AS a JOIN countries AS c ON a.country = c.code "
        "WHERE c.name = 'Germany'",
    ),
    (
        "Which airports in Canada have an elevation above 1000?",
        "SELECT a.name FROM airports AS a JOIN countries AS c ON a.country = c.code "
        "WHERE c.name = 'Canada' AND a.elevation > 1000",
    ),
]


@pytest.fixture(scope="module")
def airports(postgres: Postgres) -> Iterator[psycopg.Connection[Any]]:
    with scratch_database(postgres, DB) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE countries (code char(2) PRIMARY KEY, name text NOT NULL);"
            "CREATE TABLE airports (iata char(3) PRIMARY KEY, name text NOT NULL, "
            "city text, country char(2) REFERENCES countries (code), elevation real)"
        )
        with conn.cursor() as cur:
            with cur.copy("COPY countries FROM STDIN") as copy:
                for country in iso3166.countries:
                    copy.write_row((country.alpha2, country.name))
            with cur.copy("COPY airports FROM STDIN") as copy:
                for a in airportsdata.load("IATA").values():
                    if a["country"] in COUNTRIES:
                        row = (a["iata"], a["name"], a["city"], a["country"], a["elevation"])
                        copy.write_row(row)
        migrate(conn)
        build_index(conn, load_embedder(), progress=False)
        yield conn


@pytest.mark.parametrize(("question", "gold"), QUESTIONS)
def test_a_name_reaches_its_code_across_the_foreign_key(
    airports: psycopg.Connection[Any], question: str, gold: str
) -> None:
    settings = Settings()
    settings.llm.provider = "none"
    answer = load_pipeline(settings).answer(question, PsycopgDatabase(airports))
    assert answer.error is None, answer.error
    assert sorted(answer.rows) == sorted(airports.execute(gold.encode()).fetchall()), answer.sql
    assert answer.sql is not None and "countries" in answer.sql
