"""The registry of PLM-only rules: each rule changes a sketch it is written for and leaves one
it is not alone; disabled (`rules.applying`), it is not applied, and the sketch stage's (or
completion's) output is what it is without the rule; `[pipeline] disabled_rules` and
`pgnl rules`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy import cli, config
from proxy.nl2sql import complete_plm, rules, sketcher
from proxy.nl2sql.complete_plm import CompletionError, complete, question_literals
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, SketchParts, Slots
from proxy.nl2sql.sketch_rules.words import tables_named_in as named_in
from proxy.nl2sql.value_evidence import ColumnValues, NamedValues
from tests.unit.sketch_schemas import WORLD

ROOT = Path(__file__).resolve().parents[2]
CALL_SITES = ("sketcher.py", "complete_plm.py")


def _items(*texts: str) -> frozenset[SelectItem]:
    """SelectItems from `agg:column` texts ("avg:2", ":1", "count:-1" for count(*))."""
    return frozenset(
        SelectItem(aggregate, int(column))
        for aggregate, column in (text.split(":") for text in texts)
    )


def _order(*texts: str) -> tuple[SelectItem, ...]:
    return tuple(sorted(_items(*texts), key=lambda i: i.column))


COUNT = SelectItem("count", STAR)
NO_SLOTS = Slots()

# --- small schemas -----------------------------------------------------------------------------

WORLD_VALUES = ColumnValues.of(
    {1: ["Brazil", "Aruba"], 2: ["Asia", "Europe"], 4: ["Kabul"], 5: ["Kabol"], 9: ["English"]}
)
CARS_DATA = Schema(
    "cars",
    (Table("cars_data"), Table("car_names")),
    (
        Column(0, "id", type="integer", primary_key=True),  # 0
        Column(0, "weight", type="integer"),  # 1
        Column(0, "year", type="integer"),  # 2
        Column(1, "make_id", type="integer", primary_key=True),  # 3
        Column(1, "make"),  # 4
    ),
    (ForeignKey(3, 0),),
)
CAR_VALUES = ColumnValues.of({4: ["volvo", "ford"]})
PETS = Schema(
    "pets",
    (Table("student"), Table("has_pet"), Table("pets")),
    (
        Column(0, "stuid", "integer", primary_key=True),  # 0
        Column(0, "major"),  # 1
        Column(0, "age", "integer"),  # 2
        Column(1, "stuid", "integer"),  # 3
        Column(1, "petid", "integer"),  # 4
        Column(2, "petid", "integer", primary_key=True),  # 5
        Column(2, "pettype"),  # 6
    ),
    (ForeignKey(column=3, referenced=0), ForeignKey(column=4, referenced=5)),
)
CARTOONS = Schema(
    "cartoons",
    (Table("cartoon"), Table("tv_series")),
    (
        Column(0, "title"),  # 0
        Column(0, "original_air_date"),  # 1
        Column(0, "channel"),  # 2
        Column(1, "air_date"),  # 3
        Column(1, "channel"),  # 4
        Column(1, "rating", "number"),  # 5
    ),
    (ForeignKey(column=2, referenced=4),),
)
CITY_COUNTRY = Schema(  # city and country both have a population
    "world",
    (Table("city"), Table("country")),
    (
        Column(0, "id", "number", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(0, "population", "number"),  # 2
        Column(0, "country_id", "number"),  # 3
        Column(1, "id", "number", primary_key=True),  # 4
        Column(1, "name"),  # 5
        Column(1, "population", "number"),  # 6
    ),
    (ForeignKey(3, 4),),
)
AIRLINES = Schema(
    "flights",
    (Table("airlines"), Table("flights")),
    (
        Column(0, "uid", "integer", primary_key=True),  # 0
        Column(0, "airline"),  # 1
        Column(1, "flight_no", "integer", primary_key=True),  # 2
        Column(1, "airline", "integer"),  # 3
    ),
    (ForeignKey(column=3, referenced=0),),
)
CAR_MODELS = Schema(
    "cars",
    (Table("model_list"), Table("car_names"), Table("cars_data")),
    (
        Column(0, "model_id", "integer", primary_key=True),  # 0
        Column(0, "model"),  # 1
        Column(1, "make_id", "integer", primary_key=True),  # 2
        Column(1, "model"),  # 3
        Column(2, "id", "integer", primary_key=True),  # 4
        Column(2, "horsepower", "integer"),  # 5
    ),
    (ForeignKey(column=3, referenced=1), ForeignKey(column=4, referenced=2)),
)
CARS = Schema(
    "cars",
    (Table("cars"), Table("makers")),
    (
        Column(0, "id", "integer", primary_key=True),  # 0
        Column(0, "cylinders", "integer"),  # 1
        Column(0, "mpg", "real"),  # 2
        Column(0, "maker", "integer"),  # 3
        Column(1, "id", "integer", primary_key=True),  # 4
        Column(1, "name"),  # 5
    ),
    (ForeignKey(3, 4),),
)
AREAS = Schema(
    "world",
    (Table("country"),),
    (
        Column(0, "name"),  # 0
        Column(0, "population", "number"),  # 1
        Column(0, "surfacearea", "number", words="surface area"),  # 2
    ),
)
MATCHES = Schema(
    "tennis",
    (Table("matches"), Table("players")),
    (
        Column(0, "match_num", "integer", primary_key=True),  # 0
        Column(0, "year", "integer"),  # 1
        Column(0, "winner_id", "integer"),  # 2
        Column(0, "tourney_name"),  # 3
        Column(1, "player_id", "integer", primary_key=True),  # 4
        Column(1, "hand"),  # 5
    ),
    (ForeignKey(column=2, referenced=4),),
)
SCHOOLERS = Schema(
    "network",
    (Table("highschooler"),),
    (
        Column(0, "id", "integer", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(0, "grade", "integer"),  # 2
    ),
)
MUSIC = Schema(
    "music",
    (Table("singer"), Table("song"), Table("concert")),
    (
        Column(0, "singer_id", "number"),  # 0
        Column(0, "name"),  # 1
        Column(0, "net_worth", "number"),  # 2
        Column(1, "song_id", "number"),  # 3
        Column(1, "singer_id", "number"),  # 4
        Column(1, "title"),  # 5
        Column(2, "concert_id", "number"),  # 6
        Column(2, "year", "number"),  # 7
    ),
)
COUNTRIES = Schema(  # city.countrycode keys country.code
    "world",
    (Table("city"), Table("country")),
    (
        Column(0, "countrycode"),  # 0
        Column(0, "population", "integer"),  # 1
        Column(1, "code", primary_key=True),  # 2
        Column(1, "population", "integer"),  # 3
        Column(1, "gnp", "real"),  # 4
    ),
    (ForeignKey(column=0, referenced=2),),
)
PEOPLE = Schema(
    "people",
    (Table("people"),),
    (
        Column(0, "name"),  # 0
        Column(0, "age", "integer"),  # 1
        Column(0, "birth_date", "date"),  # 2
        Column(0, "height", "real"),  # 3
    ),
)
TREATMENTS = Schema(
    "kennels",
    (Table("treatments"),),
    (
        Column(0, "treatment_id", "integer", primary_key=True),  # 0
        Column(0, "cost_of_treatment", "integer"),  # 1
        Column(0, "date_of_treatment", "datetime"),  # 2
    ),
)
SINGERS = Schema(  # singer, singer_in_concert, and stadiums
    "concert_singer",
    (Table("singer"), Table("singer_in_concert"), Table("stadium")),
    (
        Column(0, "singer_id", "integer", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(0, "country"),  # 2
        Column(0, "age", "integer"),  # 3
        Column(1, "singer_id", "integer", primary_key=True),  # 4
        Column(1, "concert_id", "integer", primary_key=True),  # 5
        Column(2, "stadium_id", "integer", primary_key=True),  # 6
        Column(2, "name"),  # 7
        Column(2, "capacity", "integer"),  # 8
    ),
    (ForeignKey(column=4, referenced=0),),
)
VENUES = Schema(  # concert.stadium_id keys stadium
    "venues",
    (Table("stadium"), Table("concert")),
    (
        Column(0, "stadium_id", "integer", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(1, "concert_id", "integer", primary_key=True),  # 2
        Column(1, "stadium_id", "integer"),  # 3
    ),
    (ForeignKey(column=3, referenced=0),),
)
DOCUMENTS = Schema(  # paragraphs.document_id keys documents
    "documents",
    (Table("documents"), Table("paragraphs")),
    (
        Column(0, "document_id", "integer", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(1, "paragraph_id", "integer", primary_key=True),  # 2
        Column(1, "document_id", "integer"),  # 3
    ),
    (ForeignKey(column=3, referenced=0),),
)
CITIES = Schema(
    "cities",
    (Table("city"),),
    (
        Column(0, "id", "integer", primary_key=True),  # 0
        Column(0, "district"),  # 1
        Column(0, "population", "integer"),  # 2
    ),
)

# --- the sketch stage's rules ------------------------------------------------------------------


@dataclass(frozen=True)
class SketchCase:
    """A pair as the sketch model proposed it, and whether `rule` changes it."""

    rule: str
    changes: bool
    schema: Schema
    question: str
    select: frozenset[SelectItem]
    keywords: frozenset[str] = frozenset()
    slots: Slots = NO_SLOTS
    values: ColumnValues | None = None

    def repaired(self) -> list[SketchParts]:
        values = (
            None
            if self.values is None
            else NamedValues.spoken(self.question, self.schema, self.values)
        )
        return sketcher._repaired(
            (self.schema, self.question),
            named_in(self.question, self.schema),
            self.select,
            self.keywords,
            self.slots,
            values=values,
        )


def _kw(*names: str) -> frozenset[str]:
    return frozenset(names)


def _where(*conditions: tuple[int, str]) -> Slots:
    return Slots(where=tuple(Predicate(column, operator) for column, operator in conditions))


_INNER = Predicate(3, "not in", nested=True)  # has_pet.stuid NOT IN (...)
_OUTER = Predicate(0, "not in", nested=True)  # student.stuid NOT IN (...)
_BY_COUNT = _kw("group by", "order by", "desc", "limit")
_LIMITED = _kw("order by", "desc", "limit")
_POPULOUS = Slots(where=(Predicate(2, ">"),), order_by=_order(":2", ":6"), limit=3)

SKETCH_CASES = (
    SketchCase(
        "conditions_on_named_values",
        True,
        WORLD,
        "How many countries are in Asia?",
        _items(":3"),
        _kw("where"),
        _where((5, "=")),
        WORLD_VALUES,
    ),
    SketchCase(
        "conditions_on_named_values",
        False,
        WORLD,
        "What region is Kabul in?",
        _items(":3"),
        _kw("where"),
        _where((4, "=")),
        WORLD_VALUES,
    ),
    SketchCase(
        "conditions_on_a_year",
        True,
        CARS_DATA,
        "What is the minimum weight of the cars produced in 1974?",
        _items("min:1"),
        _kw("where"),
        _where((4, "=")),
        CAR_VALUES,
    ),
    SketchCase(
        "conditions_on_a_year",
        False,
        CARS_DATA,
        "What is the minimum weight of the cars?",
        _items("min:1"),
        _kw("where"),
        _where((4, "=")),
        CAR_VALUES,
    ),
    SketchCase(
        "nested_on_shown_table",
        True,
        PETS,
        "What are the major and age of students who do not own a cat?",
        _items(":1", ":2"),
        _kw("where", "nested"),
        Slots(where=(_INNER,)),
    ),
    SketchCase(
        "nested_on_shown_table",
        False,
        PETS,
        "What are the major and age of students who do not own a cat?",
        _items(":1", ":2"),
        _kw("where", "nested"),
        Slots(where=(_OUTER,)),
    ),
    SketchCase(
        "ordered_on_shown_table",
        True,
        CARTOONS,
        "List the titles of all cartoons ordered by their air date.",
        _items(":0"),
        _kw("order by", "asc"),
        Slots(order_by=_order(":3")),
    ),
    SketchCase(
        "ordered_on_shown_table",
        False,
        CARTOONS,
        "List the titles of all cartoons ordered by their rating.",
        _items(":0"),
        _kw("order by", "asc"),
        Slots(order_by=_order(":5")),
    ),
    SketchCase(
        "columns_of_named_tables",
        True,
        CITY_COUNTRY,
        "What are the names of countries with the top 3 largest population?",
        _items(":5"),
        _kw("where", *_LIMITED),
        _POPULOUS,
    ),
    SketchCase(  # the column's own table is named: it stays
        "columns_of_named_tables",
        False,
        CITY_COUNTRY,
        "Which cities in countries have the largest population?",
        _items(":5"),
        _kw("where", *_LIMITED),
        _POPULOUS,
    ),
    SketchCase(
        "read_by_name",
        True,
        AIRLINES,
        "Which airline has the most flights?",
        _items(":3"),
        _BY_COUNT,
        Slots(group_by=frozenset({3}), order_by=(COUNT,), limit=1),
    ),
    SketchCase(
        "read_by_name",
        False,
        AIRLINES,
        "What are the ids of airlines with the most flights?",
        _items(":3"),
        _BY_COUNT,
        Slots(group_by=frozenset({3}), order_by=(COUNT,), limit=1),
    ),
    SketchCase(
        "nearest_equals",
        True,
        CAR_MODELS,
        "Which model has the least horsepower?",
        _items(":1"),
        _kw("order by", "limit"),
        Slots(order_by=_order(":5"), limit=1),
    ),
    SketchCase(
        "nearest_equals",
        False,
        CAR_MODELS,
        "Which model has the least horsepower?",
        _items(":3"),
        _kw("order by", "limit"),
        Slots(order_by=_order(":5"), limit=1),
    ),
    SketchCase(
        "counted_by_value",
        True,
        CARS,
        "How many cars have more than 4 cylinders?",
        frozenset({COUNT}),
        _kw("group by", "having"),
        Slots(group_by=frozenset({1}), having=(COUNT,)),
    ),
    SketchCase(
        "counted_by_value",
        False,
        CARS,
        "Which cylinder counts have more than 4 cars?",
        _items(":1"),
        _kw("group by", "having"),
        Slots(group_by=frozenset({1}), having=(COUNT,)),
    ),
    SketchCase(
        "grouped_by_its_aggregate",
        True,
        CARS,
        "What is the average mpg of the cars each time?",
        _items(":2", "avg:2"),
        _kw("group by"),
        Slots(group_by=frozenset({2})),
    ),
    SketchCase(
        "grouped_by_its_aggregate",
        False,
        CARS,
        "What is the average mpg for each mpg?",
        _items(":2", "avg:2"),
        _kw("group by"),
        Slots(group_by=frozenset({2})),
    ),
    SketchCase(
        "ordered_by_a_quantity",
        True,
        CARS,
        "Which maker has the car with the most cylinders?",
        _items(":5"),
        _BY_COUNT,
        Slots(group_by=frozenset({5}), order_by=(COUNT,), limit=1),
    ),
    SketchCase(
        "ordered_by_a_quantity",
        False,
        CARS,
        "Which maker has the most cars?",
        _items(":5"),
        _BY_COUNT,
        Slots(group_by=frozenset({5}), order_by=(COUNT,), limit=1),
    ),
    SketchCase(
        "spoken_order",
        True,
        AREAS,
        "Which country has the largest area?",
        _items(":0"),
        _LIMITED,
        Slots(order_by=_order(":1"), limit=1),
    ),
    SketchCase(
        "spoken_order",
        False,
        AREAS,
        "Which country has the largest population?",
        _items(":0"),
        _LIMITED,
        Slots(order_by=_order(":1"), limit=1),
    ),
    SketchCase(
        "spoken_group",
        True,
        MATCHES,
        "How many matches were played in each year?",
        frozenset({COUNT, SelectItem("", 0)}),
        _kw("group by"),
        Slots(group_by=frozenset({0})),
    ),
    SketchCase(
        "spoken_group",
        False,
        MATCHES,
        "How many matches were played in each season?",
        frozenset({COUNT, SelectItem("", 0)}),
        _kw("group by"),
        Slots(group_by=frozenset({0})),
    ),
    SketchCase(
        "grouped_by_asked",
        True,
        SCHOOLERS,
        "Which grades have 4 or more high schoolers?",
        _items(":2"),
        _kw("group by", "having"),
        Slots(group_by=frozenset({0}), having=(COUNT,)),
    ),
    SketchCase(
        "grouped_by_asked",
        False,
        SCHOOLERS,
        "Which high schoolers have 4 or more friends?",
        _items(":2"),
        _kw("group by", "having"),
        Slots(group_by=frozenset({0}), having=(COUNT,)),
    ),
    SketchCase(
        "spoken_aggregates",
        True,
        MUSIC,
        "What is the average, minimum, and maximum net worth of singers?",
        _items("avg:2", "avg:7"),
    ),
    SketchCase(
        "spoken_aggregates",
        False,
        MUSIC,
        "What is the maximum net worth of singers?",
        _items("max:2"),
    ),
    SketchCase(
        "spoken_select",
        True,
        MUSIC,
        "What is the total net worth and maximum year?",
        _items(":7"),
    ),
    SketchCase("spoken_select", False, MUSIC, "What is the name of the singer?", _items(":1")),
    SketchCase(
        "spoken_aggregate_of",
        True,
        MUSIC,
        "For each name, what is the maximum net worth?",
        _items(":1", "sum:2"),
        _kw("group by"),
        Slots(group_by=frozenset({1})),
    ),
    SketchCase(
        "spoken_aggregate_of",
        False,
        MUSIC,
        "For each name, what is the maximum net worth?",
        _items(":1", "max:2"),
        _kw("group by"),
        Slots(group_by=frozenset({1})),
    ),
    SketchCase(
        "spoken_columns",
        True,
        CARS,
        "Show the cylinders and mpg of all cars.",
        _items(":1"),
    ),
    SketchCase("spoken_columns", False, CARS, "How many cars are there?", frozenset({COUNT})),
    SketchCase(
        "spoken_extreme",
        True,
        COUNTRIES,
        "What is the smallest gnp of the countries in Asia?",
        _items(":4"),
        _kw("where"),
    ),
    SketchCase(
        "spoken_extreme",
        False,
        COUNTRIES,
        "What is the gnp of the countries in Asia?",
        _items(":4"),
        _kw("where"),
    ),
    SketchCase(
        "aggregates_of_one_table",
        True,
        COUNTRIES,
        "Give both figures for a city.",
        _items("sum:1", "max:4"),
    ),
    SketchCase(
        "aggregates_of_one_table",
        False,
        COUNTRIES,
        "Give both figures.",
        _items("sum:3", "max:4"),
    ),
    SketchCase(
        "grouped_without_aggregate",
        True,
        CARS,
        "Show the cylinder count and the mpg of every car.",
        _items(":1", ":2"),
        _kw("group by"),
        Slots(group_by=frozenset({1})),
    ),
    SketchCase(
        "grouped_without_aggregate",
        False,
        CARS,
        "Which cylinder count has the lowest mpg in total?",
        _items(":1", ":2"),
        _kw("group by"),
        Slots(group_by=frozenset({1})),
    ),
    SketchCase(
        "ordered_by_frequency",
        True,
        CARS,
        "List the cylinder counts of cars, sorted by their frequency.",
        _items(":1"),
        _kw("order by"),
        Slots(order_by=_order(":2")),
    ),
    SketchCase(
        "ordered_by_frequency",
        False,
        CARS,
        "List the cylinder counts of cars, sorted by mpg.",
        _items(":1"),
        _kw("order by"),
        Slots(order_by=_order(":2")),
    ),
    SketchCase(
        "spoken_age_order",
        True,
        PEOPLE,
        "Who is the oldest person?",
        _items(":0"),
        _kw("order by", "asc", "limit"),
        Slots(order_by=_order(":1"), limit=1),
    ),
    SketchCase(
        "spoken_age_order",
        False,
        PEOPLE,
        "Who is the oldest person?",
        _items(":0"),
        _LIMITED,
        Slots(order_by=_order(":1"), limit=1),
    ),
    SketchCase(
        "spoken_recency",
        True,
        TREATMENTS,
        "How much does the most recent treatment cost?",
        _items(":1"),
        _LIMITED,
        Slots(order_by=_order(":1"), limit=1),
    ),
    SketchCase(
        "spoken_recency",
        False,
        TREATMENTS,
        "What is the highest cost?",
        _items(":1"),
        _LIMITED,
        Slots(order_by=_order(":1"), limit=1),
    ),
    SketchCase(
        "one_number_asked",
        True,
        COUNTRIES,
        "How many different populations do the countries have?",
        _items(":3"),
    ),
    SketchCase(
        "one_number_asked",
        False,
        COUNTRIES,
        "What is the population of the countries?",
        _items(":3"),
    ),
    SketchCase(
        "shown_groups",
        True,
        COUNTRIES,
        "Show the best of them.",
        _items("max:4"),
        _kw("group by"),
        Slots(group_by=frozenset({3})),
    ),
    SketchCase(
        "shown_groups",
        False,
        COUNTRIES,
        "Show the best of them.",
        _items("max:4", ":3"),
        _kw("group by"),
        Slots(group_by=frozenset({3})),
    ),
)


def _returns_none(*_: object, **__: object) -> None:
    return None


def _returns(*positions: int) -> Callable[..., object]:
    """A stand-in for a rule that answers some of its arguments as they came."""

    def unchanged(*args: object, **_: object) -> object:
        found = tuple(args[p] for p in positions)
        return found[0] if len(found) == 1 else found

    return unchanged


SKETCH_WITHOUT: dict[str, Callable[..., object]] = {
    "conditions_on_named_values": _returns(3),
    "conditions_on_a_year": _returns(3),
    "nested_on_shown_table": _returns(2),
    "ordered_on_shown_table": _returns(2),
    "columns_of_named_tables": _returns(2, 3),
    "read_by_name": _returns(2, 3),
    "nearest_equals": _returns(1, 2),
    "counted_by_value": _returns_none,
    "grouped_by_its_aggregate": _returns_none,
    "ordered_by_a_quantity": _returns_none,
    "spoken_order": _returns(3),
    "spoken_group": _returns_none,
    "grouped_by_asked": _returns_none,
    "spoken_aggregates": _returns_none,
    "spoken_select": _returns_none,
    "spoken_aggregate_of": _returns_none,
    "spoken_columns": _returns_none,
    "spoken_extreme": _returns_none,
    "aggregates_of_one_table": _returns(1),
    "grouped_without_aggregate": _returns_none,
    "ordered_by_frequency": _returns_none,
    "spoken_age_order": _returns(3, 4),
    "spoken_recency": _returns_none,
    "one_number_asked": _returns_none,
    "shown_groups": _returns(0),
}
"""Each sketch rule replaced by a function that changes nothing: what the sketch stage does
without it."""


def _case_id(case: SketchCase | CompleteCase) -> str:
    return f"{case.rule}-{'changes' if case.changes else 'leaves'}"


@pytest.mark.parametrize("case", SKETCH_CASES, ids=_case_id)
def test_each_sketch_rule_changes_what_it_is_for_and_can_be_disabled(
    case: SketchCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    with rules.applying() as fired:
        applied = case.repaired()
    assert (case.rule in fired) is case.changes, fired
    assert case.repaired() == applied  # outside `applying`: every rule, nothing recorded
    with rules.applying(frozenset({case.rule})) as fired_without:
        disabled = case.repaired()
    assert case.rule not in fired_without
    monkeypatch.setattr(sketcher, case.rule, SKETCH_WITHOUT[case.rule])
    assert case.repaired() == disabled
    assert (disabled != applied) is case.changes


def test_every_sketch_rule_has_cases_both_ways() -> None:
    sketch_rules = {rule.name for rule in rules.RULES if rule.stage == "sketch"}
    assert set(SKETCH_WITHOUT) == sketch_rules
    assert {(c.rule, c.changes) for c in SKETCH_CASES} == {
        (name, changes) for name in sketch_rules for changes in (True, False)
    }


# --- completion's rules ------------------------------------------------------------------------


@dataclass(frozen=True)
class CompleteCase:
    """A sketch to complete, and whether `rule` changes it."""

    rule: str
    changes: bool
    schema: Schema
    question: str
    sketch: Sketch

    def completed(self) -> str:
        literals = question_literals(self.question)
        try:
            return complete(self.sketch, self.schema, literals, question=self.question)
        except CompletionError as error:
            return f"error: {error}"


def _sketch(
    select: frozenset[SelectItem],
    tables: Sequence[int],
    keywords: frozenset[str] = frozenset(),
    slots: Slots = NO_SLOTS,
) -> Sketch:
    return Sketch(select=select, tables=frozenset(tables), keywords=keywords, slots=slots)


_DISTRICT = _where((1, "="))
_COUNTED = Slots(group_by=frozenset({2}), having=(COUNT,))
_AGE = _where((3, ">"))
_GROUPED = _kw("group by", "having")
_AVG_ID = SelectItem("avg", 0)

COMPLETE_CASES = (
    CompleteCase(
        "extreme_row",
        True,
        PEOPLE,
        "What is the name and the age of the oldest person?",
        _sketch(_items(":0", "max:1"), [0]),
    ),
    CompleteCase(
        "extreme_row",
        False,
        PEOPLE,
        "What is the highest age?",
        _sketch(_items("max:1"), [0]),
    ),
    CompleteCase(
        "spoken_range",
        True,
        SINGERS,
        "Stadiums with a capacity between 5000 and 10000",
        _sketch(_items(":7"), [2], _kw("where"), _where((8, ">"))),
    ),
    CompleteCase(
        "spoken_range",
        False,
        SINGERS,
        "Stadiums with a capacity above 5000",
        _sketch(_items(":7"), [2], _kw("where"), _where((8, ">"))),
    ),
    CompleteCase(
        "counted_table",
        True,
        SINGERS,
        "How many singers sang in a concert?",
        _sketch(frozenset({COUNT}), [0, 1]),
    ),
    CompleteCase(
        "counted_table",
        False,
        SINGERS,
        "Count the number of concert appearances of singers",
        _sketch(frozenset({COUNT}), [0, 1]),
    ),
    CompleteCase(
        "people_counted",
        True,
        CITIES,
        "How many people live in 'Gelderland' district?",
        _sketch(frozenset({COUNT}), [0], _kw("where"), _DISTRICT),
    ),
    CompleteCase(
        "people_counted",
        False,
        CITIES,
        "How many cities are in 'Gelderland' district?",
        _sketch(frozenset({COUNT}), [0], _kw("where"), _DISTRICT),
    ),
    CompleteCase(
        "cued_operator",
        True,
        SINGERS,
        "Which countries have singers younger than 30?",
        _sketch(_items(":2"), [0], _kw("where"), _AGE),
    ),
    CompleteCase(
        "cued_operator",
        False,
        SINGERS,
        "Which countries have singers older than 30?",
        _sketch(_items(":2"), [0], _kw("where"), _AGE),
    ),
    CompleteCase(
        "compared_column",
        True,
        SINGERS,
        "Which stadiums have a capacity greater than 3000?",
        _sketch(_items(":7"), [2], _kw("where"), _where((6, ">"))),
    ),
    CompleteCase(  # HAVING's comparison too
        "compared_column",
        True,
        SINGERS,
        "Which countries have singers whose average age is greater than 30?",
        _sketch(_items(":2"), [0], _GROUPED, Slots(group_by=frozenset({2}), having=(_AVG_ID,))),
    ),
    CompleteCase(
        "compared_column",
        False,
        SINGERS,
        "Which stadiums have a capacity greater than 3000?",
        _sketch(_items(":7"), [2], _kw("where"), _where((8, ">"))),
    ),
    CompleteCase(
        "compared_with_average",
        True,
        SINGERS,
        "Which singers are older than the average?",
        _sketch(_items(":1"), [0], _kw("where"), _AGE),
    ),
    CompleteCase(
        "compared_with_average",
        False,
        SINGERS,
        "Which singers are older than 30?",
        _sketch(_items(":1"), [0], _kw("where"), _AGE),
    ),
    CompleteCase(
        "or_partner",
        True,
        SINGERS,
        "Which singers are from 'France' or 'Spain'?",
        _sketch(_items(":1"), [0], _kw("where"), _where((2, "="))),
    ),
    CompleteCase(
        "or_partner",
        False,
        SINGERS,
        "Which singers are from 'France'?",
        _sketch(_items(":1"), [0], _kw("where"), _where((2, "="))),
    ),
    CompleteCase(
        "by_shown_reference",
        True,
        DOCUMENTS,
        "Which document ids have at least 2 paragraphs?",
        _sketch(_items(":3"), [1], _GROUPED, _COUNTED),
    ),
    CompleteCase(
        "by_shown_reference",
        False,
        DOCUMENTS,
        "Which document ids have at least 2 paragraphs?",
        _sketch(_items(":3"), [1], _GROUPED, Slots(group_by=frozenset({3}), having=(COUNT,))),
    ),
    CompleteCase(
        "by_entity_key",
        True,
        VENUES,
        "Which stadiums hosted at least 2 concerts?",
        _sketch(_items(":1"), [0, 1], _GROUPED, Slots(group_by=frozenset({1}), having=(COUNT,))),
    ),
    CompleteCase(
        "by_entity_key",
        False,
        VENUES,
        "Which stadiums hosted at least 2 concerts?",
        _sketch(_items(":1"), [0, 1], _GROUPED, Slots(group_by=frozenset({0}), having=(COUNT,))),
    ),
)


def _unchanged_sketch(sketch: Sketch, *_: object) -> Sketch:
    return sketch


COMPLETE_WITHOUT: dict[str, tuple[str, Callable[..., object]]] = {
    "extreme_row": ("_extreme_row", _unchanged_sketch),
    "spoken_range": ("_spoken_range", _unchanged_sketch),
    "counted_table": ("_counted_table", _unchanged_sketch),
    "people_counted": ("_people_counted", _unchanged_sketch),
    "cued_operator": ("_cued_operator", _returns(1)),
    "compared_column": ("_compared_column", _returns_none),
    "compared_with_average": ("_compared_with_average", _returns_none),
    "or_partner": ("_or_partner", _returns_none),
    "by_shown_reference": ("_by_shown_reference", _returns(1)),
    "by_entity_key": ("_by_entity_key", _returns(1)),
}
"""Each completion rule's function in `complete_plm`, and one that changes nothing in its
place."""


@pytest.mark.parametrize("case", COMPLETE_CASES, ids=_case_id)
def test_each_completion_rule_changes_what_it_is_for_and_can_be_disabled(
    case: CompleteCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    with rules.applying() as fired:
        applied = case.completed()
    assert (case.rule in fired) is case.changes, fired
    assert not applied.startswith("error")
    assert case.completed() == applied
    with rules.applying(frozenset({case.rule})) as fired_without:
        disabled = case.completed()
    assert case.rule not in fired_without
    monkeypatch.setattr(complete_plm, *COMPLETE_WITHOUT[case.rule])
    assert case.completed() == disabled
    assert (disabled != applied) is case.changes


def test_every_completion_rule_has_cases_both_ways() -> None:
    complete_rules = {rule.name for rule in rules.RULES if rule.stage == "complete"}
    assert set(COMPLETE_WITHOUT) == complete_rules
    assert {(c.rule, c.changes) for c in COMPLETE_CASES} == {
        (name, changes) for name in complete_rules for changes in (True, False)
    }


# --- the registry ------------------------------------------------------------------------------


def test_rules_are_named_once_in_stage_order() -> None:
    names = [rule.name for rule in rules.RULES]
    assert len(names) == len(set(names))
    stages = [rule.stage for rule in rules.RULES]
    assert stages == sorted(stages, key=("sketch", "complete").index)
    assert all(rule.purpose and "\n" not in rule.purpose for rule in rules.RULES)


def test_the_firing_rules_are_recorded_in_order_once() -> None:
    # two pairs of the same question: spoken_order is recorded once
    case = SketchCase(
        "spoken_order",
        True,
        AREAS,
        "List the country names from high to low, ordered by surface area.",
        _items(":0"),
        _kw("order by", "asc"),
        Slots(order_by=_order(":1")),
    )
    with rules.applying() as fired:
        case.repaired()
        case.repaired()
        rules.apply("shown_groups", 1, lambda: 2)
        rules.apply("spoken_order", 1, lambda: 2)
    assert fired == ["spoken_order", "shown_groups"]
    # a block within another leaves out both's rules, and records in both
    with rules.applying(["spoken_group"]) as outer:
        with rules.applying(frozenset({"spoken_order"})) as inner:
            assert not rules.enabled("spoken_group")
            case.repaired()
            rules.apply("shown_groups", 1, lambda: 2)
        assert inner == ["shown_groups"]
        assert rules.enabled("spoken_order")
        assert not rules.enabled("spoken_group")
        case.repaired()
    assert outer == ["shown_groups", "spoken_order"]


def test_unknown_rules_are_refused() -> None:
    with pytest.raises(ValueError, match=r"no rule is named 'spoken_ordr': run `pgnl rules`"):
        rules.validate(["spoken_order", "spoken_ordr"])
    with pytest.raises(ValueError, match="pgnl rules"), rules.applying(frozenset({"nothing"})):
        pass
    # a call site cannot use a rule the registry lacks
    with pytest.raises(ValueError, match=r"add it to proxy\.nl2sql\.rules\.RULES"):
        rules.apply("unregistered", 1, lambda: 2)
    assert rules.validate(("extreme_row",)) == {"extreme_row"}


def test_every_registered_rule_has_a_call_site() -> None:
    # the other way round, a call site naming a rule the registry lacks raises (above)
    sources = "".join((ROOT / "proxy/nl2sql" / f).read_text() for f in CALL_SITES)
    for rule in rules.RULES:
        assert f'"{rule.name}"' in sources, rule.name


def test_outside_applying_every_rule_is_enabled_and_nothing_recorded() -> None:
    assert all(rules.enabled(rule.name) for rule in rules.RULES)
    assert rules.noted("spoken_order", 1, 2) == 2
    with rules.applying(frozenset({"spoken_order"})) as fired:
        assert not rules.enabled("spoken_order")
        assert rules.enabled("spoken_group")
        assert rules.apply("spoken_group", 1, lambda: None) == 1  # None: unchanged
        assert rules.apply("spoken_group", 1, lambda: 1) == 1
        assert rules.apply("spoken_order", 1, lambda: 2) == 1
        assert rules.apply("shown_groups", 1, lambda: 3) == 3
    assert fired == ["shown_groups"]
    assert rules.enabled("spoken_order")


# --- the setting and the command ---------------------------------------------------------------


def test_disabled_rules_setting(tmp_path: Path) -> None:
    assert config.Settings().pipeline.disabled_rules == ()
    path = tmp_path / "pgnl.toml"
    path.write_text('[pipeline]\ndisabled_rules = ["spoken_order", "extreme_row"]\n')
    loaded = config.load(path, environ={})
    assert loaded.pipeline.disabled_rules == ("spoken_order", "extreme_row")
    environ = {"PGNL_PIPELINE_DISABLED_RULES": " spoken_order, shown_groups ,"}
    from_env = config.load(path, environ=environ)
    assert from_env.pipeline.disabled_rules == ("spoken_order", "shown_groups")
    assert config.load(None, environ={"PGNL_PIPELINE_DISABLED_RULES": ""}).pipeline == (
        config.PipelineSettings()
    )


@pytest.mark.parametrize(
    ("toml", "environ", "complaint"),
    [
        (
            '[pipeline]\ndisabled_rules = ["spoken_ordr"]\n',
            {},
            r"pgnl\.toml: \[pipeline\] disabled_rules: no rule is named 'spoken_ordr': run "
            r"`pgnl rules` to list them; remove it",
        ),
        (
            "",
            {"PGNL_PIPELINE_DISABLED_RULES": "extreme_row,nope"},
            r"environment: \[pipeline\] disabled_rules: no rule is named 'nope'",
        ),
        ("[pipeline]\ndisabled_rules = [1]\n", {}, "must be a list of strings"),
    ],
)
def test_bad_disabled_rules_say_what_to_do(
    tmp_path: Path, toml: str, environ: dict[str, str], complaint: str
) -> None:
    path = tmp_path / "pgnl.toml"
    path.write_text(toml)
    with pytest.raises(config.ConfigError, match=complaint):
        config.load(path, environ=environ)


def test_pgnl_rules_lists_every_rule_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    settings = config.Settings()
    settings.pipeline.disabled_rules = ("spoken_order",)
    assert cli.cmd_rules(settings) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["stage", "name", "purpose"]
    listed = [line.split()[:2] for line in lines[1 : 1 + len(rules.RULES)]]
    assert listed == [
        [rule.stage, rule.name + ("*" if rule.name == "spoken_order" else "")]
        for rule in rules.RULES
    ]
    assert lines[1].endswith(rules.RULES[0].purpose)
    assert lines[-1] == "* disabled by [pipeline] disabled_rules"


def _pgnl_rules(cwd: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "rules"],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,  # no pgnl.toml there
        env={"PATH": "", "PYTHONPATH": str(ROOT), **environ},
        timeout=60,
    )


def test_python_m_proxy_rules(tmp_path: Path) -> None:
    done = _pgnl_rules(tmp_path)
    assert done.returncode == 0, done.stderr
    names = [line.split()[1] for line in done.stdout.splitlines()[1:]]
    assert names == [rule.name for rule in rules.RULES]
    # a misspelt disabled rule: the error, and the list it points to
    misspelt = _pgnl_rules(tmp_path, PGNL_PIPELINE_DISABLED_RULES="spoken_ordr")
    assert misspelt.returncode == 2
    assert "no rule is named 'spoken_ordr'" in misspelt.stderr
    assert misspelt.stdout == done.stdout
