"""The pipeline's choices that need no database: which answered candidate only echoes the
question's value or leaves out its "not", and which FROM table a moved predicate leaves
behind."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.nl2sql.pipeline import (
    anti_join,
    counts_single_rows,
    echoes_its_value,
    ignores_a_negation,
    without_left_tables,
)
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots
from proxy.nl2sql.value_evidence import capitalised_names, code_of_a_word, named_by_schema_words


@pytest.mark.parametrize(
    ("sql", "echoes"),
    [
        ("SELECT abbreviation FROM airlines WHERE abbreviation = 'UAL'", True),
        ("SELECT title FROM cartoon WHERE cartoon.title = 'Dog' AND id > 3", True),
        (
            "SELECT t1.abbreviation FROM airlines AS t1 JOIN flights AS t2"
            " ON t1.uid = t2.airline WHERE t1.abbreviation = 'UAL'",
            True,
        ),
        # shows something the question did not say
        ("SELECT airline FROM airlines WHERE abbreviation = 'UAL'", False),
        ("SELECT t3.name FROM museum AS t1 JOIN visitor AS t3 ON true WHERE t1.name = 'x'", False),
        ("SELECT name, age FROM singer WHERE name = 'x'", False),
        ("SELECT count(*) FROM singer WHERE name = 'x'", False),
        ("SELECT name FROM singer WHERE name = 'x' OR age > 3", False),
        ("SELECT name FROM singer WHERE name <> 'x'", False),
        ("SELECT name FROM singer", False),
        ("SELECT name FROM a WHERE name = 'x' UNION SELECT name FROM b WHERE name = 'y'", False),
        ("not sql at all", False),
    ],
)
def test_echoes_its_value(sql: str, echoes: bool) -> None:
    assert echoes_its_value(sql) is echoes


NAMES = "SELECT name FROM people"


@pytest.mark.parametrize(
    ("question", "sql", "ignores"),
    [
        ("What are the names of people who do not play poker?", NAMES, True),
        ("Which semester has no students enrolled?", NAMES, True),
        ("Which students don't have pets?", NAMES, True),
        ("Which teachers have never taught?", NAMES, True),
        ("List the airports without flights.", NAMES, True),
        # the query negates
        (
            "What are the names of people who do not play poker?",
            "SELECT name FROM people WHERE people_id NOT IN (SELECT people_id FROM poker_player)",
            False,
        ),
        ("Who is not from Russia?", NAMES + " WHERE nationality <> 'Russia'", False),
        ("Who is not from Russia?", NAMES + " WHERE nationality != 'Russia'", False),
        (
            "Who plays but not poker?",
            "SELECT name FROM people EXCEPT SELECT name FROM poker",
            False,
        ),
        # comparisons and answers are no negation
        ("Cars weighing no less than 3000 and no more than 4000?", NAMES, False),
        ("Visitors whose level is not higher than 4?", NAMES, False),
        ("Dogs that were abandoned? 1 stands for yes, and 0 stands for no.", NAMES, False),
        ("Who are the people?", NAMES, False),
    ],
)
def test_ignores_a_negation(question: str, sql: str, ignores: bool) -> None:
    assert ignores_a_negation(question, sql) is ignores


MUSIC = Schema(
    "music",
    (Table("singer"), Table("song"), Table("concert")),
    (
        Column(0, "singer_id", "number"),
        Column(0, "name"),
        Column(1, "song_id", "number"),
        Column(1, "singer_id", "number"),
        Column(1, "title"),
        Column(2, "concert_id", "number"),
        Column(2, "year", "number"),
    ),
)
TITLE, YEAR = 4, 6
SINGER, SONG, CONCERT = 0, 1, 2


@pytest.mark.parametrize(
    ("question", "tables"),
    [
        # the predicate moved off song.title: song is joined no more (it would count songs)
        ("How many concerts were held in 2010?", {CONCERT}),
        # ... unless the question names it
        ("How many songs were sung at concerts in 2010?", {SONG, CONCERT}),
    ],
)
def test_a_moved_predicate_takes_its_old_table_along(question: str, tables: set[int]) -> None:
    count = frozenset({SelectItem("count", STAR)})
    before = Sketch(
        count,
        frozenset({SONG, CONCERT}),
        frozenset({"where"}),
        Slots(where=(Predicate(TITLE, "="),)),
    )
    moved = replace(before, slots=Slots(where=(Predicate(YEAR, "="),)))
    assert without_left_tables(moved, before, MUSIC, question).tables == frozenset(tables)
    # a FROM that would be left empty stays as it was
    alone = replace(moved, tables=frozenset({SONG}))
    assert without_left_tables(alone, before, MUSIC, question) == alone


# MUSIC with song.singer_id -> singer.singer_id declared, and singer's key a primary key
KEYED = Schema(
    "music",
    MUSIC.tables,
    tuple(
        replace(c, primary_key=c.name == f"{MUSIC.tables[c.table].name}_id") for c in MUSIC.columns
    ),
    (ForeignKey(3, 0),),
)
NAME, SINGER_ID = 1, 0


@pytest.mark.parametrize(
    ("question", "select", "tables", "negated"),
    [
        # the rows of the table shown, without related rows of the table named after "not"
        ("Which singers do not have any song?", {SelectItem("", NAME)}, {SINGER, SONG}, True),
        ("List the singers without songs.", {SelectItem("", NAME)}, {SINGER}, True),
        # counted: the FROM table the question names before the "not"
        ("How many singers have no songs?", {SelectItem("count", STAR)}, {SINGER, SONG}, True),
        # no "not", no table named after it, or no key from it to the shown table
        ("Which singers have songs?", {SelectItem("", NAME)}, {SINGER, SONG}, False),
        ("Which singers are not famous?", {SelectItem("", NAME)}, {SINGER}, False),
        ("Which singers have no concerts?", {SelectItem("", NAME)}, {SINGER}, False),
        # columns of two tables shown
        (
            "Which singers and titles have no songs?",
            {SelectItem("", NAME), SelectItem("", TITLE)},
            {SINGER, SONG},
            False,
        ),
    ],
)
def test_anti_join(question: str, select: set[SelectItem], tables: set[int], negated: bool) -> None:
    sketch = Sketch(frozenset(select), frozenset(tables), frozenset(), Slots())
    found = anti_join(sketch, KEYED, question)
    if not negated:
        assert found is None
        return
    assert found is not None
    assert found.select == sketch.select
    assert found.tables == {SINGER}
    assert found.keywords == {"where", "nested"}
    assert found.slots.where == (Predicate(SINGER_ID, "not in", nested=True),)


@pytest.mark.parametrize(
    ("sql", "single"),
    [
        ("SELECT name FROM singer GROUP BY singer_id ORDER BY count(*) DESC LIMIT 1", True),
        ("SELECT name, count(*) FROM singer GROUP BY singer_id, name", True),
        ("SELECT s.name FROM singer AS s GROUP BY s.singer_id HAVING count(*) > 1", True),
        # groups of several rows: another column, or a join
        ("SELECT name FROM singer GROUP BY name ORDER BY count(*) DESC LIMIT 1", False),
        (
            "SELECT t1.name FROM singer AS t1 JOIN song AS t2 ON t1.singer_id = t2.singer_id"
            " GROUP BY t1.singer_id ORDER BY count(*) DESC LIMIT 1",
            False,
        ),
        # no count, no key, no GROUP BY
        ("SELECT name, max(singer_id) FROM singer GROUP BY singer_id", False),
        ("SELECT title FROM song GROUP BY song_id ORDER BY count(*)", True),
        ("SELECT count(*) FROM singer", False),
        ("SELECT year, count(*) FROM concert GROUP BY year", False),
        ("not sql", False),
    ],
)
def test_counts_single_rows(sql: str, single: bool) -> None:
    assert counts_single_rows(sql, KEYED) is single


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
