"""Where the columns are (`sketch_rules.columns`): a column moved to the table the question
names, a key read by the name it stands for, the nearer of two columns a key makes equal, a
subquery condition or an ORDER BY column moved to the shown table, aggregates read from one
table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Slots
from proxy.nl2sql.sketch_rules.columns import (
    aggregates_of_one_table,
    columns_of_named_tables,
    equal_columns,
    nearest_equals,
    nested_on_shown_table,
    ordered_on_shown_table,
    read_by_name,
    readable_names,
)
from tests.unit.sketch_schemas import CAR_MODELS, CITIES

# city and country both have a population; city.country_id keys country
WORLD = Schema(
    "world",
    (Table("city"), Table("country")),
    (
        Column(0, "id", "number", primary_key=True),
        Column(0, "name"),
        Column(0, "population", "number"),
        Column(0, "country_id", "number"),
        Column(1, "id", "number", primary_key=True),
        Column(1, "name"),
        Column(1, "population", "number"),
    ),
    (ForeignKey(3, 4),),
)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # the table named has a column of that name: it is meant
        ("What are the names of countries with the top 3 largest population?", 6),
        # the column's own table is named: it stays
        ("Which cities in countries have the largest population?", 2),
        # no table named: alone in city, it moves to country, which the SELECT reads
        ("What is the largest population?", 6),
    ],
)
def test_columns_of_named_tables(question: str, expected: int) -> None:
    select = frozenset({SelectItem("", 5)})
    slots = Slots(
        where=(Predicate(2, ">"),),
        order_by=(SelectItem("", 2), SelectItem("", 6)),
        group_by=frozenset({2}),
        limit=3,
    )
    moved, moved_slots = columns_of_named_tables(question, WORLD, select, slots)
    assert moved == select
    assert moved_slots.where == (Predicate(expected, ">"),)
    assert moved_slots.group_by == {expected}
    # one ORDER BY item per column
    assert moved_slots.order_by == tuple(
        dict.fromkeys((SelectItem("", expected), SelectItem("", 6)))
    )
    assert moved_slots.limit == 3
    # keys stay: they say how tables join
    keyed = frozenset({SelectItem("", 0), SelectItem("", 3)})
    assert columns_of_named_tables(question, WORLD, keyed, Slots())[0] == keyed


def test_a_column_with_company_in_its_table_stays() -> None:
    # city.population beside city.name: city is read for two columns, so both stay
    select = frozenset({SelectItem("", 1), SelectItem("", 5)})
    slots = Slots(order_by=(SelectItem("", 2),))
    assert columns_of_named_tables("Which is largest?", WORLD, select, slots) == (select, slots)
    # alone, it moves to the table the other columns read
    alone = frozenset({SelectItem("", 5)})
    moved = columns_of_named_tables("Which is largest?", WORLD, alone, slots)[1]
    assert moved.order_by == (SelectItem("", 6),)


def test_a_condition_on_a_column_holding_a_named_value_stays() -> None:
    # "the population of the country of Kabul": city.name = ? would move to the name of the
    # table the question names; it holds 'Kabul', country.name does not
    select = frozenset({SelectItem("", 6)})
    slots = Slots(where=(Predicate(1, "="),))
    question = "What is the population of the country of Kabul?"
    assert columns_of_named_tables(question, WORLD, select, slots)[1] == Slots(
        where=(Predicate(5, "="),)
    )
    kept = columns_of_named_tables(question, WORLD, select, slots, holding={1})
    assert kept == (select, slots)
    # where the column it would move to holds a named value too, it moves
    both = columns_of_named_tables(question, WORLD, select, slots, holding={1, 5})
    assert both[1] == Slots(where=(Predicate(5, "="),))


AIRLINES = Schema(
    "flights",
    (Table("airlines"), Table("flights")),
    (
        Column(0, "uid", "integer", primary_key=True),
        Column(0, "airline"),
        Column(1, "flight_no", "integer", primary_key=True),
        Column(1, "airline", "integer"),
    ),
    (ForeignKey(column=3, referenced=0),),
)


def test_a_key_named_like_a_name_is_read_by_that_name() -> None:
    assert readable_names(AIRLINES) == {3: 1}
    by_airline = Slots(group_by=frozenset({3}), order_by=(SelectItem("count", STAR),))
    select = frozenset({SelectItem("", 3)})
    asked = "Which airline has the most flights?"
    shown, slots = read_by_name(asked, AIRLINES, select, by_airline)
    assert shown == frozenset({SelectItem("", 1)})
    assert slots.group_by == frozenset({1})
    # asked for an id, the key is what is meant
    ids = "What are the ids of airlines with the most flights?"
    assert read_by_name(ids, AIRLINES, select, by_airline) == (select, by_airline)
    # an aggregate over the key stays: count(DISTINCT flights.airline) counts airlines
    counted = frozenset({SelectItem("count", 3)})
    assert read_by_name(asked, AIRLINES, counted, Slots())[0] == counted


def test_a_key_of_the_same_kind_as_the_column_named_like_it_is_no_id() -> None:
    # orders.city references cities.code, and cities.city is text like it: no id to read by
    cities = Schema(
        "shop",
        (Table("cities"), Table("orders")),
        (
            Column(0, "code", primary_key=True),
            Column(0, "city"),
            Column(1, "order_id", "integer", primary_key=True),
            Column(1, "city"),
        ),
        (ForeignKey(column=3, referenced=0),),
    )
    assert readable_names(cities) == {}


def test_nearest_equals_reads_a_keyed_column_one_join_nearer() -> None:
    assert equal_columns(CAR_MODELS) == {1: frozenset({3}), 3: frozenset({1})}
    # "the model of the car with the least horsepower": car_names.model, beside cars_data
    weakest = Slots(order_by=(SelectItem("", 5),), limit=1)
    far = frozenset({SelectItem("", 1)})
    found = nearest_equals(CAR_MODELS, far, weakest)
    assert found == (frozenset({SelectItem("", 3)}), weakest)
    # alone, or already nearest, it stays
    assert nearest_equals(CAR_MODELS, far, Slots()) == (far, Slots())
    near = frozenset({SelectItem("", 3)})
    assert nearest_equals(CAR_MODELS, near, weakest) == (near, weakest)
    # grouped by it too: both move
    grouped = Slots(group_by=frozenset({1}), order_by=(SelectItem("max", 5),))
    shown, slots = nearest_equals(CAR_MODELS, far, grouped)
    assert shown == near
    assert slots.group_by == frozenset({3})


PETS = Schema(
    "pets",
    (Table("student"), Table("has_pet"), Table("pets")),
    (
        Column(0, "stuid", "integer", primary_key=True),
        Column(0, "major"),
        Column(0, "age", "integer"),
        Column(1, "stuid", "integer"),
        Column(1, "petid", "integer"),
        Column(2, "petid", "integer", primary_key=True),
        Column(2, "pettype"),
    ),
    (ForeignKey(column=3, referenced=0), ForeignKey(column=4, referenced=5)),
)


def test_a_subquery_condition_moves_to_the_table_the_select_shows() -> None:
    shown = frozenset({SelectItem("", 1), SelectItem("", 2)})  # student.major, student.age
    # has_pet.stuid NOT IN (...): the key makes it student.stuid
    inner = Predicate(3, "not in", nested=True)
    outer = Predicate(0, "not in", nested=True)
    assert nested_on_shown_table(PETS, shown, Slots(where=(inner,))) == Slots(where=(outer,))
    # pets.pettype IN (...): no key joins it to student; student's own key
    typed = Predicate(6, "in", nested=True)
    moved = Predicate(0, "in", nested=True)
    assert nested_on_shown_table(PETS, shown, Slots(where=(typed,))) == Slots(where=(moved,))
    # already there: kept once
    both = Slots(where=(outer, inner))
    assert nested_on_shown_table(PETS, shown, both) == Slots(where=(outer,))
    # another condition reads has_pet, a SELECT of two tables, or of none: as they are
    for select, where in (
        (shown, (inner, Predicate(4, "="))),
        (shown | {SelectItem("", 6)}, (inner,)),
        (frozenset({SelectItem("count", STAR)}), (inner,)),
        (shown, (Predicate(3, "not in"),)),
        (shown, (Predicate(3, ">", nested=True),)),
    ):
        assert nested_on_shown_table(PETS, select, Slots(where=where)) == Slots(where=where)


CARTOONS = Schema(
    "cartoons",
    (Table("cartoon"), Table("tv_series")),
    (
        Column(0, "title"),
        Column(0, "original_air_date"),
        Column(0, "channel"),
        Column(1, "air_date"),
        Column(1, "channel"),
        Column(1, "rating", "number"),
    ),
    (ForeignKey(column=2, referenced=4),),
)


def test_an_order_by_an_outside_table_moves_to_the_shown_tables_column_of_its_name() -> None:
    titles = frozenset({SelectItem("", 0)})
    by_air_date = Slots(order_by=(SelectItem("", 3),))
    moved = ordered_on_shown_table(CARTOONS, titles, by_air_date)
    assert moved == Slots(order_by=(SelectItem("", 1),))
    # tv_series is read by a condition, a SELECT of two tables, a name no column ends in: kept
    for select, slots in (
        (titles, replace(by_air_date, where=(Predicate(5, ">"),))),
        (titles | {SelectItem("", 5)}, by_air_date),
        (titles, Slots(order_by=(SelectItem("", 5),))),
    ):
        assert ordered_on_shown_table(CARTOONS, select, slots) == slots


def test_aggregates_of_one_table() -> None:
    # "the total population and maximum GNP in Asia": both of country
    mixed = frozenset({SelectItem("sum", 1), SelectItem("max", 4)})
    assert aggregates_of_one_table(CITIES, mixed) == {SelectItem("sum", 3), SelectItem("max", 4)}
    # count(*) goes along; one table already: as it is
    counted = frozenset({SelectItem("count", STAR), SelectItem("sum", 1), SelectItem("max", 4)})
    assert aggregates_of_one_table(CITIES, counted) == {
        SelectItem("count", STAR),
        SelectItem("sum", 3),
        SelectItem("max", 4),
    }
    for unchanged in (
        frozenset({SelectItem("sum", 3), SelectItem("max", 4)}),
        frozenset({SelectItem("", 0), SelectItem("max", 4)}),  # a plain column beside them
        frozenset({SelectItem("max", 0), SelectItem("max", 4)}),  # no table has both names
        frozenset({SelectItem("sum", 1), SelectItem("avg", 3)}),  # both tables do: a tie
    ):
        assert aggregates_of_one_table(CITIES, unchanged) == unchanged
