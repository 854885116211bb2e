"""Ordering (`sketch_rules.order`): the column a superlative or "ordered by" names, a quantity
in place of a group's count, "youngest" and "oldest", "most recent", the direction said in
words, and "by frequency"."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, SelectItem, Slots
from proxy.nl2sql.sketch_rules.order import (
    ordered_by_a_quantity,
    ordered_by_frequency,
    said_direction,
    spoken_age_order,
    spoken_order,
    spoken_recency,
)
from tests.unit.sketch_schemas import BY_COUNT, CARS, COUNTED

# country with a surface area beside its population
AREAS = Schema(
    "world",
    (Table("country"),),
    (
        Column(0, "name"),
        Column(0, "population", "number"),
        Column(0, "surfacearea", "number", words="surface area"),
    ),
)


@pytest.mark.parametrize(
    ("question", "order_by", "expected"),
    [
        # the superlative names another column than the sketch orders by
        ("Which country has the largest area?", SelectItem("", 1), SelectItem("", 2)),
        (
            "Name the 3 countries with the smallest surface area.",
            SelectItem("", 1),
            SelectItem("", 2),
        ),
        # it names the sketch's own column, or none
        ("Which country has the largest population?", SelectItem("", 1), SelectItem("", 1)),
        ("Which country is the most recent?", SelectItem("", 1), SelectItem("", 1)),
        ("List the countries by area.", SelectItem("", 1), SelectItem("", 1)),
        # "ordered by", "sorted by", "in alphabetical order of" name the column too
        ("List the countries, ordered by their names.", SelectItem("", 1), SelectItem("", 0)),
        ("Show countries sorted by surface area.", SelectItem("", 1), SelectItem("", 2)),
        (
            "List the countries in ascending alphabetical order of name.",
            SelectItem("", 2),
            SelectItem("", 0),
        ),
        # an aggregate is left alone
        (
            "Which country has the largest area?",
            SelectItem("count", STAR),
            SelectItem("count", STAR),
        ),
    ],
)
def test_spoken_order(question: str, order_by: SelectItem, expected: SelectItem) -> None:
    slots = Slots(order_by=(order_by,), limit=1)
    select = frozenset({SelectItem("", 0)})
    assert spoken_order(question, AREAS, select, slots) == replace(slots, order_by=(expected,))


def test_spoken_order_keeps_the_one_ordered_column_the_words_name() -> None:
    # "in alphabetical order of name" over ORDER BY surfacearea, name: by name alone
    select = frozenset({SelectItem("", 0), SelectItem("", 2)})
    two = Slots(order_by=(SelectItem("", 2), SelectItem("", 0)))
    asked = "List the countries and their areas in ascending alphabetical order of name."
    assert spoken_order(asked, AREAS, select, two).order_by == (SelectItem("", 0),)
    # a count: by the shown column "order by" names; "the most common" orders by the count
    counted = Slots(group_by=frozenset({0}), order_by=(SelectItem("count", STAR),))
    listed = frozenset({SelectItem("", 0), SelectItem("count", STAR)})
    asked = "Show each name and how many countries have it. Order by name."
    assert spoken_order(asked, AREAS, listed, counted).order_by == (SelectItem("", 0),)
    common = "What is the most common name of countries?"
    assert spoken_order(common, AREAS, listed, counted) == counted


def test_spoken_order_reads_a_shown_column_the_words_say_in_part() -> None:
    # "ordered by id" of the document ids shown, counted per document: by document_id
    documents = Schema(
        "documents",
        (Table("paragraphs"),),
        (Column(0, "template_id", "number"), Column(0, "document_id", "number")),
    )
    counted = Slots(group_by=frozenset({1}), order_by=(SelectItem("count", STAR),))
    shown = frozenset({SelectItem("", 1), SelectItem("count", STAR)})
    asked = "Return the document ids and the number of paragraphs of each, ordered by id."
    assert spoken_order(asked, documents, shown, counted).order_by == (SelectItem("", 1),)
    # two shown columns the words say in part: left to the sketch
    both = frozenset({SelectItem("", 0), SelectItem("", 1), SelectItem("count", STAR)})
    assert spoken_order(asked, documents, both, counted) == counted


def test_ordered_by_a_quantity_the_superlative_names() -> None:
    # "the most cylinders" is a value of each car, not a count of a group of makers
    select = frozenset({SelectItem("", 5)})
    found = ordered_by_a_quantity(
        "Which maker has the car with the most cylinders?", CARS, select, BY_COUNT, COUNTED
    )
    assert found == (
        select,
        frozenset({"order by", "desc", "limit"}),
        Slots(order_by=(SelectItem("", 1),), limit=1),
    )


@pytest.mark.parametrize(
    "question",
    [
        # the words name a table: the most rows of cars
        "Which maker has the most cars?",
        # what is most common is counted
        "Which maker has the most common cylinders?",
        # a key is no quantity
        "Which maker has the highest id?",
        # no column is named
        "Which maker is the most famous?",
    ],
)
def test_ordered_by_a_quantity_leaves_counts_alone(question: str) -> None:
    select = frozenset({SelectItem("", 5)})
    assert ordered_by_a_quantity(question, CARS, select, BY_COUNT, COUNTED) is None


def test_ordered_by_a_quantity_leaves_aggregates_and_other_orders_alone() -> None:
    asked = "Which maker has the car with the most cylinders?"
    counted = frozenset({SelectItem("", 5), SelectItem("count", STAR)})
    assert ordered_by_a_quantity(asked, CARS, counted, BY_COUNT, COUNTED) is None
    by_mpg = replace(COUNTED, order_by=(SelectItem("", 2),))
    assert (
        ordered_by_a_quantity(asked, CARS, frozenset({SelectItem("", 5)}), BY_COUNT, by_mpg) is None
    )


PEOPLE = Schema(
    "people",
    (Table("people"),),
    (
        Column(0, "name"),
        Column(0, "age", "integer"),
        Column(0, "birth_date", "date"),
        Column(0, "height", "real"),
    ),
)


@pytest.mark.parametrize(
    ("question", "column", "ordered", "direction"),
    [
        ("Who is the youngest person?", 1, 1, "asc"),
        ("Who is the oldest person?", 1, 1, "desc"),
        ("Who is the youngest person?", 2, 2, "desc"),
        ("Who is the oldest person?", 2, 2, "asc"),
        # ordered by another column: by the age of the table the SELECT reads
        ("Who is the oldest person?", 3, 1, "desc"),
        # no such word: as the sketch has it
        ("Who is the tallest person?", 1, 1, "desc"),
    ],
)
def test_spoken_age_order(question: str, column: int, ordered: int, direction: str) -> None:
    names = frozenset({SelectItem("", 0)})
    by_column = Slots(order_by=(SelectItem("", column),), limit=1)
    keywords = frozenset({"order by", "desc", "limit"})
    found = spoken_age_order(question, PEOPLE, names, keywords, by_column)
    assert found == (
        frozenset({"order by", direction, "limit"}),
        Slots(order_by=(SelectItem("", ordered),), limit=1),
    )


OWNED = Schema(
    "owned",
    (Table("student"), Table("pets")),
    (
        Column(0, "name"),
        Column(0, "age", "integer"),
        Column(1, "weight", "real"),
        Column(1, "pet_age", "integer"),
        Column(1, "owner", "integer"),
    ),
    (ForeignKey(column=4, referenced=0),),
)


def test_spoken_age_order_reads_the_age_of_the_rows_shown() -> None:
    # "the weight of the youngest dog" ordered by student.age: by pets.pet_age
    weight = frozenset({SelectItem("", 2)})
    keywords = frozenset({"order by", "desc", "limit"})
    by_student_age = Slots(order_by=(SelectItem("", 1),), limit=1)
    found = spoken_age_order(
        "the weight of the youngest dog", OWNED, weight, keywords, by_student_age
    )
    assert found == (
        frozenset({"order by", "asc", "limit"}),
        Slots(order_by=(SelectItem("", 3),), limit=1),
    )
    # the shown rows have no age (owners without one): the age the sketch orders by stays
    owners = Schema(
        "owners",
        OWNED.tables,
        (OWNED.columns[0], *OWNED.columns[2:]),
        (ForeignKey(column=3, referenced=0),),
    )
    name = frozenset({SelectItem("", 0)})
    by_pet_age = Slots(order_by=(SelectItem("", 2),), limit=1)
    found = spoken_age_order("the owner of the oldest dog", owners, name, keywords, by_pet_age)
    assert found == (keywords, by_pet_age)


def test_spoken_age_order_leaves_counts_alone() -> None:
    counted = Slots(order_by=(SelectItem("count", STAR),), limit=1)
    keywords = frozenset({"order by", "desc", "limit"})
    names = frozenset({SelectItem("", 0)})
    found = spoken_age_order("Who is the oldest person?", PEOPLE, names, keywords, counted)
    assert found == (keywords, counted)


@pytest.mark.parametrize(
    ("question", "said"),
    [
        ("List the names of singers from high to low age.", "desc"),
        ("Sort the shops in descending order of products.", "desc"),
        ("List the names in alphabetical order.", "asc"),
        ("List the names in reverse alphabetical order.", "desc"),
        ("List the oldest singer.", None),
        # both ways said: neither
        ("Sort by age descending and by name ascending.", None),
    ],
)
def test_said_direction(question: str, said: str | None) -> None:
    assert said_direction(question) == said


def test_ordered_by_frequency_groups_and_counts() -> None:
    cylinders = frozenset({SelectItem("", 1)})
    by_mpg = Slots(order_by=(SelectItem("", 2),))
    asked = "List the cylinder counts of cars, sorted by their frequency."
    found = ordered_by_frequency(asked, cylinders, frozenset({"order by"}), by_mpg)
    assert found == (
        cylinders,
        frozenset({"group by", "order by", "asc"}),
        Slots(group_by=frozenset({1}), order_by=(SelectItem("count", STAR),)),
    )
    # no such words, an aggregate shown, or already counted: as it is
    plain = "List the cylinder counts of cars, sorted by mpg."
    assert ordered_by_frequency(plain, cylinders, frozenset({"order by"}), by_mpg) is None
    averaged = frozenset({SelectItem("avg", 2)})
    assert ordered_by_frequency(asked, averaged, frozenset({"order by"}), by_mpg) is None
    assert ordered_by_frequency(asked, cylinders, BY_COUNT, COUNTED) is None


TREATMENTS = Schema(
    "kennels",
    (Table("treatments"),),
    (
        Column(0, "treatment_id", "integer", primary_key=True),
        Column(0, "cost_of_treatment", "integer"),
        Column(0, "date_of_treatment", "datetime"),
    ),
)


def test_spoken_recency() -> None:
    # "how much does the most recent treatment cost": by its date, not by its cost
    select = frozenset({SelectItem("", 1)})
    by_cost = Slots(order_by=(SelectItem("", 1),), limit=1)
    ordered = frozenset({"order by", "desc", "limit"})
    asked = "How much does the most recent treatment cost?"
    by_date = replace(by_cost, order_by=(SelectItem("", 2),))
    assert spoken_recency(asked, TREATMENTS, select, ordered, by_cost) == (ordered, by_date)
    earliest = "What did the earliest treatment cost?"
    found = spoken_recency(earliest, TREATMENTS, select, ordered, by_cost)
    assert found == (frozenset({"order by", "asc", "limit"}), by_date)
    # ordered by the date already, by an aggregate, or another question: None
    assert spoken_recency(asked, TREATMENTS, select, ordered, by_date) is None
    counted = Slots(order_by=(SelectItem("count", STAR),), limit=1)
    assert spoken_recency(asked, TREATMENTS, select, ordered, counted) is None
    assert spoken_recency("What is the highest cost?", TREATMENTS, select, ordered, by_cost) is None
    # ordered by the cost and the date: by the date alone
    both = replace(by_cost, order_by=(SelectItem("", 1), SelectItem("", 2)))
    recently = "What did the most recently performed treatment cost?"
    assert spoken_recency(recently, TREATMENTS, select, ordered, both) == (ordered, by_date)
