"""Spider's hardness levels: hand-built parses, hand-checked dev questions, and Spider dev's
published totals (248 easy, 446 medium, 174 hard, 166 extra)."""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from typing import Any

import pytest

from benchmarks.spider_hardness import (
    count_component1,
    count_component2,
    count_others,
    hardness,
)
from model_export.spider import NOT_FOUND, spider_dir

SPIDER = spider_dir()
needs_spider = pytest.mark.skipif(not (SPIDER / "dev.json").exists(), reason=NOT_FOUND)


def _column(column: int, aggregate: int = 0) -> list[Any]:
    """A val_unit over one column: [unit_op, col_unit, None]."""
    return [0, [aggregate, column, False], None]


def _sql(**parts: Any) -> dict[str, Any]:
    """A parse of `SELECT count(*) FROM t1`, with `parts` replaced."""
    sql: dict[str, Any] = {
        "select": [False, [[3, _column(0)]]],
        "from": {"table_units": [["table_unit", 1]], "conds": []},
        "where": [],
        "groupBy": [],
        "having": [],
        "orderBy": [],
        "limit": None,
        "intersect": None,
        "union": None,
        "except": None,
    }
    sql.update(parts)
    return sql


def _condition(column: int, op: int, value: Any, *, negated: bool = False) -> list[Any]:
    return [negated, op, _column(column), value, None]


EQUALS, LIKE, IN = 2, 9, 8


@pytest.mark.parametrize(
    ("sql", "counts", "level"),
    [
        (_sql(), (0, 0, 0), "easy"),
        (_sql(where=[_condition(1, EQUALS, 1.0)]), (1, 0, 0), "easy"),
        # two SELECT items and two WHERE conditions: others 2, component 1 still 1
        (
            _sql(
                select=[False, [[0, _column(1)], [0, _column(2)]]],
                where=[_condition(1, EQUALS, 1.0), "and", _condition(2, EQUALS, 2.0)],
            ),
            (1, 0, 2),
            "medium",
        ),
        # an OR and a LIKE each count as a component
        (
            _sql(where=[_condition(1, LIKE, '"%a%"'), "or", _condition(2, EQUALS, 2.0)]),
            (3, 0, 1),
            "hard",
        ),
        # a subquery in WHERE: component 2
        (_sql(where=[_condition(1, IN, _sql())]), (1, 1, 0), "hard"),
        # Spider's quirk: a negated condition counts as an aggregate (count(*) + NOT = 2 > 1)
        (_sql(where=[_condition(1, IN, _sql(), negated=True)]), (1, 1, 1), "extra"),
        # Spider's quirk: HAVING's "and" counts as an aggregate too (beside count(*): 2 > 1)
        (
            _sql(
                groupBy=[[0, 1, False]],
                having=[
                    [False, 3, _column(0, 3), 1.0, None],
                    "and",
                    [False, 4, _column(0, 3), 9.0, None],
                ],
            ),
            (1, 0, 1),
            "medium",
        ),
    ],
)
def test_hand_built(sql: dict[str, Any], counts: tuple[int, int, int], level: str) -> None:
    assert (count_component1(sql), count_component2(sql), count_others(sql)) == counts
    assert hardness(sql) == level


def test_joins_count_as_components() -> None:
    two_tables = {"table_units": [["table_unit", 1], ["table_unit", 2]], "conds": []}
    three_tables = {"table_units": [["table_unit", i] for i in (1, 2, 3)], "conds": []}
    assert count_component1(_sql(**{"from": two_tables})) == 1
    assert hardness(_sql(**{"from": three_tables})) == "medium"  # component 1 = 2, others 0


@cache
def _dev() -> list[dict[str, Any]]:
    examples: list[dict[str, Any]] = json.loads((SPIDER / "dev.json").read_text(encoding="utf-8"))
    return examples


@needs_spider
@pytest.mark.parametrize(
    ("index", "query", "level"),
    [
        (0, "SELECT count(*) FROM singer", "easy"),
        (2, "SELECT name ,  country ,  age FROM singer ORDER BY age DESC", "medium"),
        # WHERE = 1, the INTERSECT is one nested query: (1, 1, 0)
        (30, "SELECT country FROM singer WHERE age  >  40 INTERSECT", "hard"),
        # two joins and a WHERE (component 1 = 3) plus the INTERSECT
        (60, "SELECT T1.Fname FROM student AS T1 JOIN has_pet AS T2", "extra"),
        # avg() and NOT IN count as two aggregates (Spider's quirk) beside the subquery
        (85, "select avg(age) from student where stuid not in", "extra"),
        (150, "SELECT T1.FullName ,  T1.Id FROM CAR_MAKERS AS T1 JOIN", "medium"),
        (200, 'SELECT AirportName FROM AIRPORTS WHERE AirportCode  =  "AKO"', "easy"),
    ],
)
def test_dev_questions(index: int, query: str, level: str) -> None:
    example = _dev()[index]
    assert example["query"].startswith(query)
    assert hardness(example["sql"]) == level


@needs_spider
def test_dev_totals_are_spiders() -> None:
    assert Counter(hardness(e["sql"]) for e in _dev()) == {
        "easy": 248,
        "medium": 446,
        "hard": 174,
        "extra": 166,
    }
