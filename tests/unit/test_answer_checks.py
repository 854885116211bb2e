"""The checks an answered candidate must pass (`proxy.nl2sql.answer_checks`): which SQL only
echoes the question's value, leaves out its "not" or a value it typed, or counts groups of one
row."""

from __future__ import annotations

import pytest

from proxy.nl2sql.answer_checks import (
    answers,
    counts_single_rows,
    echoes_its_value,
    ignores_a_negation,
    uses_every_literal,
)
from proxy.nl2sql.complete_plm import question_literals
from tests.unit.music import KEYED


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
    ("question", "sql", "uses"),
    [
        ('songs titled "Love"', "SELECT * FROM song WHERE title = 'Love'", True),
        ('songs titled "Love"', "SELECT * FROM song WHERE title = 'LOVE'", True),  # case aside
        ('songs titled "Love"', "SELECT * FROM song WHERE title = 'Loved one'", True),
        ('songs titled "Love"', "SELECT * FROM song WHERE title = 'Hate'", False),
        ("concerts after 2014", "SELECT * FROM concert WHERE year > 2014", True),
        # a number counts only as a whole number, not inside another
        ("concerts after 2014", "SELECT * FROM concert WHERE year > 20145", False),
        ("concerts after 2014", "SELECT * FROM concert WHERE year > 2014.5", True),
        ("concerts after 2014", "SELECT * FROM concert WHERE year > 1.2014", False),
        ("how many singers?", "SELECT count(*) FROM singer", True),
    ],
)
def test_uses_every_literal(question: str, sql: str, uses: bool) -> None:
    assert uses_every_literal(sql, question_literals(question)) is uses


@pytest.mark.parametrize(
    ("question", "sql", "answered"),
    [
        ("names of singers with a song", "SELECT name FROM singer", True),
        ("names of singers after 2014", "SELECT name FROM singer", False),  # leaves out 2014
        ("names of singers who never sang", "SELECT name FROM singer", False),  # its "not"
        ("the name of singer Adele", "SELECT name FROM singer WHERE name = 'Adele'", False),
        (
            "the singer with the most songs",
            "SELECT name FROM singer GROUP BY singer_id ORDER BY count(*) DESC LIMIT 1",
            False,
        ),
    ],
)
def test_answers(question: str, sql: str, answered: bool) -> None:
    assert answers(question, sql, KEYED, question_literals(question)) is answered
