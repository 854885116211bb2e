"""Grouping (`sketch_rules.groups`): a grouped column given a number becomes a WHERE condition,
a column averaged is no group, groups that aggregate nothing go, and the column "each ..." or
"which ..." names is grouped by."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Slots
from proxy.nl2sql.sketch_rules.groups import (
    counted_by_value,
    grouped_by_asked,
    grouped_by_its_aggregate,
    grouped_without_aggregate,
    spoken_group,
)
from tests.unit.sketch_schemas import BY_COUNT, CARS


def test_counted_by_value_filters_on_the_number() -> None:
    # "cars with more than 4 cylinders": WHERE cylinders > 4, not GROUP BY cylinders HAVING
    slots = Slots(group_by=frozenset({1}), having=(SelectItem("count", STAR),))
    select = frozenset({SelectItem("count", STAR)})
    found = counted_by_value(
        "How many cars have more than 4 cylinders?",
        CARS,
        select,
        frozenset({"group by", "having"}),
        slots,
    )
    assert found == (select, frozenset({"where"}), Slots(where=(Predicate(1, "="),)))


def test_counted_by_value_drops_the_shown_group() -> None:
    slots = Slots(group_by=frozenset({1}))
    select = frozenset({SelectItem("", 1), SelectItem("avg", 2)})
    found = counted_by_value(
        "What is the average mpg of the cars with 4 cylinders?",
        CARS,
        select,
        frozenset({"group by"}),
        slots,
    )
    assert found is not None
    assert found[0] == frozenset({SelectItem("avg", 2)})
    assert found[2].where == (Predicate(1, "="),)
    assert not found[2].group_by


@pytest.mark.parametrize(
    ("question", "group_by"),
    [
        # the number counts rows of a group, it is no value of the grouped column
        ("Which cylinder counts have more than 4 cars?", 1),
        # a key: "more than 2 makers" counts makers
        ("Which cars have more than 2 makers?", 3),
    ],
)
def test_counted_by_value_leaves_counts_alone(question: str, group_by: int) -> None:
    slots = Slots(group_by=frozenset({group_by}), having=(SelectItem("count", STAR),))
    select = frozenset({SelectItem("", group_by)})
    assert counted_by_value(question, CARS, select, frozenset({"group by"}), slots) is None


def test_grouped_by_its_aggregate_is_one_average() -> None:
    # SELECT mpg, avg(mpg) ... GROUP BY mpg: each group has one mpg; the question asks for one
    select = frozenset({SelectItem("", 2), SelectItem("avg", 2)})
    found = grouped_by_its_aggregate(
        "What is the average mpg of the cars each time?",
        CARS,
        select,
        frozenset({"group by"}),
        Slots(group_by=frozenset({2})),
    )
    assert found == (frozenset({SelectItem("avg", 2)}), frozenset(), Slots())


@pytest.mark.parametrize(
    ("question", "select"),
    [
        # the question groups by the column in words
        ("What is the average mpg for each mpg?", {SelectItem("", 2), SelectItem("avg", 2)}),
        # a count of the grouped column is no single value
        ("How many cars of each mpg are there?", {SelectItem("", 2), SelectItem("count", 2)}),
    ],
)
def test_grouped_by_its_aggregate_leaves_real_groups(
    question: str, select: set[SelectItem]
) -> None:
    slots = Slots(group_by=frozenset({2}))
    found = grouped_by_its_aggregate(question, CARS, frozenset(select), frozenset(), slots)
    assert found is None


def test_grouped_without_aggregate_lists_rows() -> None:
    select = frozenset({SelectItem("", 1), SelectItem("", 2)})
    grouped = Slots(group_by=frozenset({1}))
    asked = "Show each cylinder count and the mpg of the car."
    found = grouped_without_aggregate(asked, select, frozenset({"group by"}), grouped)
    assert found == (select, frozenset(), Slots())
    # an aggregate anywhere keeps the groups
    counted = Slots(group_by=frozenset({1}), order_by=(SelectItem("count", STAR),))
    assert grouped_without_aggregate(asked, select, BY_COUNT, counted) is None
    # as does one the question speaks of
    total = "Which cylinder count has the lowest mpg in total?"
    assert grouped_without_aggregate(total, select, frozenset({"group by"}), grouped) is None


MATCHES = Schema(
    "tennis",
    (Table("matches"), Table("players")),
    (
        Column(0, "match_num", "integer", primary_key=True),
        Column(0, "year", "integer"),
        Column(0, "winner_id", "integer"),
        Column(0, "tourney_name"),
        Column(1, "player_id", "integer", primary_key=True),
        Column(1, "hand"),
    ),
    (ForeignKey(column=2, referenced=4),),
)


def test_spoken_group() -> None:
    # "how many matches were played in each year": grouped by year, not by match_num
    counted = frozenset({SelectItem("count", STAR), SelectItem("", 0)})
    by_number = Slots(group_by=frozenset({0}))
    found = spoken_group("How many matches were played in each year?", MATCHES, counted, by_number)
    assert found == (
        frozenset({SelectItem("count", STAR), SelectItem("", 1)}),
        Slots(group_by=frozenset({1})),
    )
    # grouped by what the words name, or words naming no column, or none: as it is
    for question in (
        "How many matches were played for each match number?",
        "How many matches were played in each season?",
        "How many matches were played?",
    ):
        assert spoken_group(question, MATCHES, counted, by_number) is None
    # a column of a table the sketch does not read is not taken ("each hand")
    asked = "How many matches were won for each hand?"
    assert spoken_group(asked, MATCHES, counted, by_number) is None
    # two groups: not for this rule
    two = Slots(group_by=frozenset({0, 3}))
    assert spoken_group("How many matches in each year?", MATCHES, counted, two) is None


SCHOOLERS = Schema(
    "network",
    (Table("highschooler"),),
    (
        Column(0, "id", "integer", primary_key=True),
        Column(0, "name"),
        Column(0, "grade", "integer"),
    ),
)


def test_grouped_by_asked() -> None:
    # "which grades have 4 or more high schoolers": by grade; by id each group counts 1
    select = frozenset({SelectItem("", 2)})
    by_id = Slots(group_by=frozenset({0}), having=(SelectItem("count", STAR),))
    asked = "Which grades have 4 or more high schoolers?"
    by_grade = replace(by_id, group_by=frozenset({2}))
    assert grouped_by_asked(asked, SCHOOLERS, select, by_id) == by_grade
    # the words after "which" name a table, or no shown column; no count; no key: None
    for question in ("Which high schoolers have 4 or more friends?", "Which ones have 4 or more?"):
        assert grouped_by_asked(question, SCHOOLERS, select, by_id) is None
    uncounted = replace(by_id, having=(SelectItem("max", 2),))
    assert grouped_by_asked(asked, SCHOOLERS, select, uncounted) is None
    assert grouped_by_asked(asked, SCHOOLERS, select, by_grade) is None
