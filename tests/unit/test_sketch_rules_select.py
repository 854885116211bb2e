"""What the SELECT says (`sketch_rules.select`): the aggregates and columns the question spells
out, the extreme it names, the one number it asks for, and the groups a grouped SELECT of
aggregates shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, SelectItem, Slots
from proxy.nl2sql.sketch_rules.select import (
    one_number_asked,
    shown_groups,
    spoken_aggregate_of,
    spoken_aggregates,
    spoken_columns,
    spoken_extreme,
    spoken_select,
)
from tests.unit.sketch_schemas import CARS, CITIES, MUSIC, NAME, NET_WORTH, YEAR, items_of


@pytest.mark.parametrize(
    ("question", "select", "group_by", "expected"),
    [
        # the column the list is followed by, in place of the sketch's aggregates
        (
            "What is the average, minimum, and maximum net worth of singers?",
            items_of("avg:2", f"avg:{YEAR}"),
            frozenset(),
            items_of("avg:2", "min:2", "max:2"),
        ),
        # no column named after the list: the sketch's first aggregated column
        (
            "Show the maximum and minimum, over everything.",
            items_of("max:2"),
            frozenset(),
            items_of("max:2", "min:2"),
        ),
        # a bare column grouped by stays
        (
            "What is the average and maximum net worth for each name?",
            items_of(f":{NAME}", "avg:2"),
            frozenset({NAME}),
            items_of(f":{NAME}", "avg:2", "max:2"),
        ),
        # grouped by the column itself: left to the sketch
        (
            "What is the minimum and maximum net worth?",
            items_of(":2", "max:2"),
            frozenset({NET_WORTH}),
            None,
        ),
        # one aggregate is no list
        ("What is the maximum net worth of singers?", items_of(":2"), frozenset(), None),
        ("What is the average age and the maximum net worth?", items_of(":2"), frozenset(), None),
    ],
)
def test_spoken_aggregates(
    question: str,
    select: frozenset[SelectItem],
    group_by: frozenset[int],
    expected: frozenset[SelectItem] | None,
) -> None:
    assert spoken_aggregates(question, MUSIC, select, group_by) == expected


@pytest.mark.parametrize(
    ("question", "select", "group_by", "expected"),
    [
        # each aggregate word takes the column its words name
        (
            "What is the total net worth and maximum year?",
            items_of(f":{YEAR}"),
            frozenset(),
            items_of("sum:2", f"max:{YEAR}"),
        ),
        (
            "Return the minimum net worth of singers.",
            items_of(":2"),
            frozenset(),
            items_of("min:2"),
        ),
        # a bare column grouped by stays
        (
            "Find the average net worth for each name.",
            items_of(f":{NAME}", "max:2"),
            frozenset({NAME}),
            items_of(f":{NAME}", "avg:2"),
        ),
        # not asked for in the first words, a word naming no column, a count, a grouped column
        ("Which singer has the maximum net worth?", items_of(":1"), frozenset(), None),
        ("What is the average of them all?", items_of("avg:2"), frozenset(), None),
        ("What is the total number of singers?", items_of("count:-1"), frozenset(), None),
        ("What is the maximum net worth?", items_of(":2"), frozenset({NET_WORTH}), None),
        ("What is the name of the singer?", items_of(":1"), frozenset(), None),
    ],
)
def test_spoken_select(
    question: str,
    select: frozenset[SelectItem],
    group_by: frozenset[int],
    expected: frozenset[SelectItem] | None,
) -> None:
    assert spoken_select(question, MUSIC, select, group_by) == expected


@pytest.mark.parametrize(
    ("question", "select", "expected"),
    [
        # the aggregate the question says for a column the SELECT aggregates
        (
            "For each name, what is the maximum net worth?",
            items_of(f":{NAME}", "sum:2"),
            items_of(f":{NAME}", "max:2"),
        ),
        (
            "Show the names and the total net worth.",
            items_of(f":{NAME}", "avg:2"),
            items_of(f":{NAME}", "sum:2"),
        ),
        # already so, a bare column, a count, or two aggregates of one column: unchanged
        ("What is the maximum net worth?", items_of("max:2"), None),
        ("What is the maximum net worth?", items_of(":2"), None),
        ("What is the total number of singers?", items_of("avg:2"), None),
        ("What is the maximum net worth?", items_of("avg:2", "min:2"), None),
    ],
)
def test_spoken_aggregate_of(
    question: str, select: frozenset[SelectItem], expected: frozenset[SelectItem] | None
) -> None:
    assert spoken_aggregate_of(question, MUSIC, select) == expected


def test_spoken_columns_adds_the_column_a_list_names() -> None:
    asked = "Show the cylinders and mpg of all cars, ordered by mpg."
    found = spoken_columns(asked, CARS, frozenset({SelectItem("", 1)}))
    assert found == frozenset({SelectItem("", 1), SelectItem("", 2)})
    # in a later sentence, after words that only say whose
    later = "Which cars are the heaviest? List their cylinders and mpg."
    assert spoken_columns(later, CARS, frozenset({SelectItem("", 2)})) == found


STUDENTS = Schema(
    "students",
    (Table("students"),),
    (
        Column(0, "student_id", "integer", primary_key=True),
        Column(0, "first_name"),
        Column(0, "middle_name"),
        Column(0, "last_name"),
        Column(0, "date_first_registered"),
        Column(0, "email_address"),
        Column(0, "cell_phone"),
        Column(0, "home_phone"),
    ),
)


def test_spoken_columns_reads_a_list_that_says_its_noun_once() -> None:
    # "first, middle, and last names": first_name and middle_name, not date_first_registered
    asked = "What are the first, middle, and last names of the earliest graduate?"
    found = spoken_columns(asked, STUDENTS, frozenset({SelectItem("", 2), SelectItem("", 3)}))
    assert found == frozenset({SelectItem("", 1), SelectItem("", 2), SelectItem("", 3)})
    # "email" names its column without "phone"
    asked = "List the email, cell phone and home phone of all the students."
    found = spoken_columns(asked, STUDENTS, frozenset({SelectItem("", 6), SelectItem("", 7)}))
    assert found == frozenset({SelectItem("", 5), SelectItem("", 6), SelectItem("", 7)})


OWNERS = Schema(
    "owners",
    (Table("owners"), Table("dogs"), Table("professionals")),
    (
        Column(0, "owner_id", "integer", primary_key=True),
        Column(0, "zip_code"),
        Column(1, "dog_id", "integer", primary_key=True),
        Column(1, "owner_id", "integer"),
        Column(2, "zip_code"),
    ),
    (ForeignKey(3, 0),),
)


def test_spoken_columns_reads_a_table_word_in_the_list_as_the_tables() -> None:
    # "owner id" says owners.owner_id ("id" of the owners) as wholly as dogs.owner_id: the
    # column the sketch already shows stays, and "zip code" is the owners' one
    asked = "Which owner paid the most for their dogs? Show the owner id and zip code."
    found = spoken_columns(asked, OWNERS, frozenset({SelectItem("", 0)}))
    assert found == frozenset({SelectItem("", 0), SelectItem("", 1)})


def test_spoken_columns_keeps_the_count_a_list_names() -> None:
    counted = frozenset({SelectItem("", 5), SelectItem("count", STAR)})
    whole = counted | {SelectItem("", 4)}
    asked = "List the name, id and the number of cars of each maker."
    assert spoken_columns(asked, CARS, counted) == whole
    # after the groups it is asked for
    asked = "For each maker, list its id, name and how many cars it has."
    assert spoken_columns(asked, CARS, counted) == whole
    # a list without the count, or a count the SELECT does not take, changes nothing
    assert spoken_columns("List the name and id of each maker.", CARS, counted) is None
    averaged = frozenset({SelectItem("", 5), SelectItem("avg", 2)})
    assert spoken_columns(asked, CARS, averaged) is None


@pytest.mark.parametrize(
    ("question", "select"),
    [
        # one item is no list
        ("Show the mpg of all cars.", {SelectItem("", 1)}),
        # the sketch selects a column the list does not name
        ("Show the cylinders and mpg of all cars.", {SelectItem("", 3)}),
        # nothing is missing
        ("Show the cylinders and mpg of all cars.", {SelectItem("", 1), SelectItem("", 2)}),
        # a count is no column
        ("Show the cylinders and number of cars.", {SelectItem("", 1)}),
        ("Show the cylinders and average mpg of cars.", {SelectItem("", 1)}),
        # the sketch aggregates
        ("Show the cylinders and mpg of all cars.", {SelectItem("max", 1)}),
    ],
)
def test_spoken_columns_leaves_other_selects_alone(question: str, select: set[SelectItem]) -> None:
    assert spoken_columns(question, CARS, frozenset(select)) is None


def test_spoken_extreme() -> None:
    weight = frozenset({SelectItem("", 4)})  # country.gnp, standing in for a weight
    where = frozenset({"where"})
    asked = "What is the smallest gnp of the countries in Asia?"
    assert spoken_extreme(asked, CITIES, weight, where) == frozenset({SelectItem("min", 4)})
    highest = spoken_extreme("the highest gnp of Asia", CITIES, weight, where)
    assert highest == frozenset({SelectItem("max", 4)})
    # ordered or grouped: the sketch says how already; no such word, or another column: None
    assert spoken_extreme(asked, CITIES, weight, frozenset({"order by", "limit"})) is None
    assert spoken_extreme(asked, CITIES, weight, frozenset({"group by"})) is None
    assert spoken_extreme("What is the gnp of Asia?", CITIES, weight, where) is None
    assert spoken_extreme("the highest population", CITIES, weight, where) is None


def test_shown_groups() -> None:
    # "the maximum gnp for each continent" (population standing in for the continent)
    best = frozenset({SelectItem("max", 4)})
    grouped = Slots(group_by=frozenset({3}))
    assert shown_groups(best, grouped) == best | {SelectItem("", 3)}
    # a plain column shown already, HAVING, ORDER BY or LIMIT, or no groups: as it is
    for select, slots in (
        (best | {SelectItem("", 2)}, grouped),
        (best, replace(grouped, having=(SelectItem("count", STAR),))),
        (best, replace(grouped, order_by=(SelectItem("max", 4),))),
        (best, replace(grouped, limit=1)),
        (best, Slots()),
    ):
        assert shown_groups(select, slots) == select


def test_one_number_asked() -> None:
    # CITIES: city.countrycode, city.population, country.code (key), .population, .gnp
    shown = frozenset({SelectItem("", 3)})
    none: frozenset[str] = frozenset()
    asked = "How many different populations do the countries have?"
    assert one_number_asked(asked, CITIES, shown, none, Slots()) == (
        frozenset({SelectItem("count", 3)}),
        frozenset({"distinct"}),
    )
    together = "How many people do the countries of Asia hold together?"
    where = frozenset({"where"})
    assert one_number_asked(together, CITIES, shown, where, Slots()) == (
        frozenset({SelectItem("sum", 3)}),
        where,
    )
    # a key is not summed; a grouped or aggregated SELECT, or another question: None
    key = frozenset({SelectItem("", 2)})
    assert one_number_asked(together, CITIES, key, none, Slots()) is None
    grouped = Slots(group_by=frozenset({3}))
    assert one_number_asked(asked, CITIES, shown, none, grouped) is None
    summed = frozenset({SelectItem("max", 3)})
    assert one_number_asked(asked, CITIES, summed, none, Slots()) is None
    assert one_number_asked("What is the population of Asia?", CITIES, shown, none, Slots()) is None
