"""The database's values in the sketch stage (`proxy.nl2sql.value_evidence`): which values a
question names, and which WHERE conditions move to the columns that hold them."""

from __future__ import annotations

import pytest

from model_export.evaluate_sketch import SPIDER, spider_values
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table, load_spider_schemas
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Slots
from proxy.nl2sql.value_evidence import (
    ColumnValues,
    NamedValues,
    capitalised_names,
    code_of_a_word,
    conditions_on_a_year,
    conditions_on_named_values,
    named_by_schema_words,
    words,
)
from tests.unit.sketch_schemas import WORLD as SCHEMA

VALUES = ColumnValues.of(
    {
        1: ["Brazil", "Aruba", "Central African Republic"],
        2: ["Asia", "Europe", "Africa"],
        4: ["Kabul", "Rio de Janeiro"],
        5: ["Kabol", "Rio de Janeiro"],
        9: ["English", "Dutch", "Portuguese"],
    }
)
POPULATION = frozenset({SelectItem("", 3)})  # country.population
COUNT = frozenset({SelectItem("count", STAR)})


def named(question: str) -> NamedValues:
    return NamedValues.spoken(question, SCHEMA, VALUES)


def where(*conditions: tuple[int, str] | Predicate) -> Slots:
    return Slots(
        where=tuple(c if isinstance(c, Predicate) else Predicate(c[0], c[1]) for c in conditions)
    )


def moved(question: str, slots: Slots, select: frozenset[SelectItem] = POPULATION) -> list[int]:
    repaired = conditions_on_named_values(question, SCHEMA, select, slots, named(question))
    return [p.column for p in repaired.where]


def test_words_are_what_pg_trgm_compares() -> None:
    assert words("Brazil\u2019s  GNP") == "brazil s gnp"
    assert words("Côte d'Ivoire") == "cote d ivoire"


@pytest.mark.parametrize(
    ("question", "found"),
    [
        ("How many countries are in Asia?", {2: {"asia"}}),
        ("Give me Brazil\u2019s population.", {1: {"brazil"}}),
        ("Which cities are in 'Rio de Janeiro'?", {4: {"rio de janeiro"}, 5: {"rio de janeiro"}}),
        # a value inside a longer one the question names is not named on its own
        ("Who lives in the Central African Republic?", {1: {"central african republic"}}),
        # only whole words: "Asian" names no 'Asia'
        ("How many Asian countries are there?", {}),
        # words of the schema's names are no values ("country" of 'Country' would be one)
        ("What is the population of each country?", {}),
    ],
)
def test_the_values_a_question_names_word_for_word(
    question: str, found: dict[int, set[str]]
) -> None:
    assert named(question).columns == found


def test_common_and_one_letter_words_are_no_values() -> None:
    values = ColumnValues.of({9: ["In", "A", "by"]})
    assert NamedValues.spoken("Who is in a city by the sea?", SCHEMA, values).columns == {}
    # a one-letter value counts where the question quotes it
    assert NamedValues.spoken("Which language is 'A'?", SCHEMA, values).columns == {9: {"a"}}


def test_a_condition_moves_to_the_column_holding_the_value() -> None:
    # city.district holds no 'Asia'; country.continent does
    assert moved("How many countries are in Asia?", where((5, "="))) == [2]
    assert moved("What are the population and life expectancies in Brazil?", where((5, "="))) == [1]


def test_a_condition_whose_column_holds_a_value_stays() -> None:
    # city.name holds 'Kabul': the condition takes it where it is
    assert moved("What region is Kabul in?", where((4, "="))) == [4]


def test_each_value_goes_to_one_condition() -> None:
    # two conditions, two values: language keeps 'English', district takes 'Asia'
    question = "Which countries in Asia speak English?"
    assert moved(question, where((9, "="), (5, "="))) == [9, 2]
    # one value, two conditions: the second finds nothing left to move to
    assert moved("How many countries are in Asia?", where((5, "="), (4, "="))) == [2, 4]


def test_conditions_that_take_no_named_value_stay() -> None:
    # "asia" in lower case here and below: no condition is added for it, only moved
    question = "How many countries are in asia?"
    # a LIKE pattern, a nested condition
    assert moved(question, where((5, "like"))) == [5]
    assert moved(question, where(Predicate(5, "in", nested=True))) == [5]
    # a column whose values the index does not hold (a key): nothing says asia is not there
    assert moved(question, where((0, "="))) == [0]


def test_a_condition_on_a_foreign_key_moves_to_the_table_it_references() -> None:
    # city.countrycode references country: "asia" is a row of country, its continent
    assert moved("How many cities are in asia?", where((6, "="))) == [2]
    # 'Kabul' is held by city.name only: no column of country holds it, the key keeps it
    assert moved("Which country has the city kabul?", where((8, "="))) == [8]
    # the question may name the code itself
    assert moved("Which cities have the country code asia?", where((6, "="))) == [6]
    assert moved("Which cities are in ASIA?", where((6, "="))) == [6]


def test_a_count_keeps_a_condition_on_a_table_the_question_names() -> None:
    # what is counted may be the condition's table: the pipeline's values stage moves it later,
    # keeping the table; here "cities" names city, and then "languages" its column
    assert moved("How many cities are in asia?", where((5, "=")), COUNT) == [5]
    assert moved("How many languages are used in asia?", where((9, "!=")), COUNT) == [9]
    # a table the question does not name is not what is counted
    assert moved("How many countries are in asia?", where((5, "=")), COUNT) == [2]


def test_a_number_column_keeps_a_number_the_question_gives() -> None:
    assert moved("How many countries in asia have population 3?", where((3, "="))) == [3]
    assert moved("Which is the first country in asia?", where((3, "="))) == [3]
    # no number: the condition on a number column wants the value the question names
    assert moved("How many countries are in asia?", where((3, "="))) == [2]


def test_the_longest_value_and_the_tables_already_read_come_first() -> None:
    # 'Rio de Janeiro' is in city.name and city.district; the SELECT reads city: the condition
    # moves within city, to the first of its columns
    select = frozenset({SelectItem("", 7)})
    question = "What is the population of Rio de Janeiro?"
    assert moved(question, where((9, "=")), select) == [4]


def test_a_value_no_condition_took_gets_its_own() -> None:
    # language holds 'English'; 'Asia' (in capitals) is left: continent = ? is added
    question = "Which countries in Asia speak English?"
    assert moved(question, where((9, "="))) == [9, 2]
    # in lower case it is not added (a common word may be a value: a track named "Money")
    assert moved("Which countries in asia speak English?", where((9, "="))) == [9]


@pytest.mark.parametrize(
    ("question", "slots"),
    [
        # a value on the other side of a negation, a set operation or an OR
        ("Which countries do not speak English in Asia?", where((9, "!="))),
        ("Which countries speak English or are in Asia?", where((9, "="))),
        ("Which countries speak both English and Dutch in Asia?", where((9, "="))),
        # a nested condition: the value may be the subquery's
        ("Which countries in Asia speak English?", where((9, "="), Predicate(0, "in", True))),
        # a condition on a text column that holds none of the values may be the value's
        ("Which countries in Asia speak English?", where((9, "="), (0, "="))),
        # no condition at all: a sketch without WHERE keeps its KEYWORDS
        ("Which countries in Asia speak English?", Slots()),
    ],
)
def test_no_condition_is_added(question: str, slots: Slots) -> None:
    assert moved(question, slots) == [p.column for p in slots.where]


def test_a_value_two_columns_hold_gets_no_condition() -> None:
    # 'Rio de Janeiro' is a city's name and a district: which one is meant is not known
    question = "Which countries speak English in Rio de Janeiro?"
    assert moved(question, where((9, "="))) == [9]


CARS = Schema(
    name="cars",
    tables=(Table("cars_data"), Table("car_names")),
    columns=(
        Column(0, "id", type="integer", primary_key=True),  # 0
        Column(0, "weight", type="integer"),  # 1
        Column(0, "year", type="integer"),  # 2
        Column(1, "make_id", type="integer", primary_key=True),  # 3
        Column(1, "make"),  # 4
    ),
    foreign_keys=(ForeignKey(3, 0),),
)
CAR_VALUES = ColumnValues.of({4: ["volvo", "ford"]})


def on_a_year(question: str, slots: Slots) -> list[int]:
    select = frozenset({SelectItem("min", 1)})  # min(cars_data.weight)
    named = NamedValues.spoken(question, CARS, CAR_VALUES)
    return [p.column for p in conditions_on_a_year(question, CARS, select, slots, named).where]


def test_a_text_condition_takes_the_year_the_question_gives() -> None:
    question = "What is the minimum weight of the cars produced in 1974?"
    assert on_a_year(question, where((4, "="))) == [2]
    # no year, a value named in capitals or quotes, a condition holding a named value: kept
    assert on_a_year("What is the minimum weight of the cars?", where((4, "="))) == [4]
    assert on_a_year("What is the minimum weight of Fords made in 1974?", where((4, "="))) == [4]
    assert on_a_year("What is the lightest 'ford' of 1974?", where((4, "="))) == [4]
    assert on_a_year("What is the minimum weight of ford cars in 1974?", where((4, "="))) == [4]
    # a condition on a number column, or the year already taken: kept
    assert on_a_year(question, where((1, ">"))) == [1]
    assert on_a_year(question, where((2, ">"), (4, "="))) == [2, 4]


def test_spider_values_follow_the_value_index_rules() -> None:
    schema = load_spider_schemas(SPIDER / "tables.json")["world_1"]
    values = spider_values(SPIDER, schema)
    assert values is not None
    column = {schema.qualified(c): c for c in range(len(schema.columns))}
    assert "Asia" in values[column["country.Continent"]]
    assert column["country.Code"] not in values  # a key: identifiers, not names
    assert column["city.Population"] not in values  # numbers
    assert column["countrylanguage.CountryCode"] not in values
    asked = NamedValues.spoken("How many countries are in Asia?", schema, ColumnValues.of(values))
    assert asked.columns == {column["country.Continent"]: {"asia"}}
    # Spider ships no file for wta_1
    assert spider_values(SPIDER, load_spider_schemas(SPIDER / "tables.json")["wta_1"]) is None


@pytest.mark.parametrize(
    ("question", "names"),
    [
        ("Give the name of the country in Asia.", {"asia"}),
        # a run and its parts; the first word is capitalised as a sentence's
        ("Which cartoons did Ben Jones direct?", {"ben jones", "ben", "jones"}),
        ("What is the average life expectancy?", set()),
        ("  Aruba has how many languages?", set()),
    ],
)
def test_capitalised_names(question: str, names: set[str]) -> None:
    assert capitalised_names(question) == names


@pytest.mark.parametrize(
    ("question", "value", "code"),
    [
        ("What is the number of continents where Chinese is spoken?", "IS", True),
        ("How much do the countries in the Caribbean cover?", "DO", True),
        ("Which countries have the code IS?", "IS", False),  # written in capitals: a code
        ("Which templates have type code PP?", "PP", False),  # no common word
        ("Which country is in Asia?", "Asia", False),  # not in capitals
    ],
)
def test_code_of_a_word(question: str, value: str, code: bool) -> None:
    assert code_of_a_word(question, value) is code


@pytest.mark.parametrize(
    ("question", "value", "only"),
    [
        # "stadium" names a table: it says no 'Bayview Stadium'
        ("What is the capacity of the stadium with the most concerts?", "Bayview Stadium", True),
        # a plural of a schema word: "countries" says no 'Nordic Countries'
        ("How many languages do the countries speak?", "Nordic Countries", True),
        # a word of the value that names nothing in the schema: the value is named
        ("What is the capacity of Bayview Stadium?", "Bayview Stadium", False),
        # no word shared (a value found by meaning): not for this rule
        ("How many French singers are there?", "France", False),
    ],
)
def test_named_by_schema_words(question: str, value: str, only: bool) -> None:
    schema_words = {"stadium", "stadiums", "country", "countrys", "countries", "capacity"}
    assert named_by_schema_words(question, value, schema_words) is only
