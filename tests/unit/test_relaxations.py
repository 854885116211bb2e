"""The sketch edits that make more candidates (`proxy.nl2sql.relaxations`): the anti-join of a
question's "not", the FROM table a moved predicate leaves behind, and the relaxations of a
condition the question gave no value for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from proxy.nl2sql.candidate import Candidate
from proxy.nl2sql.complete_plm import CompletionError, complete, question_literals
from proxy.nl2sql.relaxations import (
    anti_join,
    relaxations,
    tables_named_by,
    without_left_tables,
    without_where,
)
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots
from tests.unit.music import CONCERT, KEYED, MUSIC, NAME, SINGER, SINGER_ID, SONG, TITLE, YEAR


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


def test_tables_named_by_and_without_where() -> None:
    sketch = Sketch(
        frozenset({SelectItem("", NAME)}),
        frozenset({SINGER, SONG, CONCERT}),
        frozenset({"where", "nested"}),
        Slots(where=(Predicate(TITLE, "=", nested=True),), where_or=True),
    )
    assert tables_named_by(sketch, MUSIC) == {SINGER, SONG}  # no column of concert is named
    bare = without_where(sketch)
    assert bare.slots.where == ()
    assert not bare.slots.where_or
    assert bare.keywords == frozenset()  # "nested" went with its predicate
    assert bare.tables == sketch.tables


def _plm(question: str) -> Callable[[Candidate], bool]:
    """PLM-only completion of a candidate with the question's own literals, as the complete
    stage makes it."""

    def complete_candidate(candidate: Candidate) -> bool:
        try:
            candidate.sql = complete(
                candidate.sketch, KEYED, question_literals(question), question=question
            )
        except CompletionError as exc:
            candidate.unfilled = exc.reason == "no value"
            candidate.unvalued = exc.column
            return False
        return True

    return complete_candidate


def test_relaxations_leave_out_the_condition_with_no_value_first() -> None:
    question = 'Which singers sang "Hello"?'
    sketch = Sketch(
        frozenset({SelectItem("", NAME)}),
        frozenset({SINGER, SONG}),
        frozenset({"where"}),
        Slots(where=(Predicate(TITLE, "="), Predicate(NAME, "="))),
    )
    candidate = Candidate(3, sketch)
    complete_candidate = _plm(question)
    assert not complete_candidate(candidate)  # "Hello" fills one condition, not two
    assert candidate.unfilled
    found = list(relaxations(candidate, KEYED, question, complete_candidate))
    assert [left_out for _, left_out in found] == ["singer.name =", "where"]
    narrower, relaxed = (c for c, _ in found)
    assert narrower.number == relaxed.number == 3
    assert narrower.sketch.slots.where == (Predicate(TITLE, "="),)
    assert "'Hello'" in narrower.sql
    assert "where" not in relaxed.sql.casefold()


def test_relaxations_of_a_candidate_that_named_no_column() -> None:
    question = "Which singers sang?"
    sketch = Sketch(
        frozenset({SelectItem("", NAME)}),
        frozenset({SINGER, SONG}),
        frozenset({"where"}),
        Slots(where=(Predicate(TITLE, "="),)),
    )
    candidate = Candidate(1, sketch)
    found = list(relaxations(candidate, KEYED, question, _plm(question)))
    assert [left_out for _, left_out in found] == ["where"]  # one condition: only WHERE goes
