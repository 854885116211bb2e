"""The sketch stage over a live PostgreSQL schema: the demo's university database, introspected
as a role would see it, serializes so that every item's span names that item, and the shipped
models sketch questions over it naming only tables and columns that exist."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources

import pytest

from proxy.config import RuntimeSettings
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.schema import introspect
from proxy.nl2sql.serialize import serialize
from proxy.nl2sql.sketch import STAR
from proxy.nl2sql.sketcher import load_sketcher
from tests.fix_pg import Postgres

pytestmark = pytest.mark.integration

UNIVERSITY = resources.files("proxy.demo").joinpath("sample.sql").read_text(encoding="utf-8")
_ITEM = re.compile(r"(t(\d+)|c(\d+)): $")


def test_live_schema_round_trips_and_sketches(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    name = make_database(UNIVERSITY)
    with postgres.connect(name) as conn:
        schema = introspect(PsycopgDatabase(conn))
    assert {t.name for t in schema.tables} >= {"departments", "instructors", "courses", "students"}
    window = serialize(schema)
    for table, (start, end) in zip(window.tables, window.table_spans, strict=True):
        assert window.text[start:end] == schema.tables[table].label
        match = _ITEM.search(window.text[:start])
        assert match is not None and int(match.group(2)) == table
    for column, (start, end) in zip(window.columns, window.column_spans, strict=True):
        if column == STAR:
            assert window.text[start:end] == "*"
            continue
        assert window.text[start:end] == schema.columns[column].label
        match = _ITEM.search(window.text[:start])
        assert match is not None
        table = schema.columns[column].table
        assert schema.table_columns[table][int(match.group(3))] == column

    sketcher = load_sketcher(RuntimeSettings(provider="cpu", threads=1))
    for question in (
        "How many students are there?",
        "Which course has the most credits?",
        "List the names of instructors in the Physics department.",
    ):
        sketches = sketcher.sketch(question, schema)
        assert sketches
        for sketch in sketches:
            assert all(
                i.column == STAR or 0 <= i.column < len(schema.columns) for i in sketch.select
            )
            assert all(0 <= t < len(schema.tables) for t in sketch.tables)
    best = sketcher.sketch("How many students are there?", schema)[0]
    assert best.tables == frozenset({schema.table_index("students")})
