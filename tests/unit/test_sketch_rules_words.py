"""How the question's words name tables (`sketch_rules.words`): the tables a question names and
those it counts, and the FROM a pair's own columns call for (the lookups none of its columns is
read from left out)."""

from __future__ import annotations

import pytest

from proxy.nl2sql.joins import without_unused_lookups
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Slots
from proxy.nl2sql.sketch_rules.words import (
    counted_per_key,
    counted_rows,
    named_tables,
    names_table,
    tables_counted_in,
    tables_named_in,
)
from tests.unit.sketch_schemas import CONCERT, MUSIC, NAME, NET_WORTH, SINGER, SONG, YEAR

# --- the FROM a pair's own columns call for ------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "table", "named"),
    [
        ("What are the names of poker players?", "poker player", True),
        ("Which courses have students enrolled?", "student enrolment", True),
        ("How many pets does each student have?", "pets", True),
        ("List the singers by age.", "singer", True),
        ("Show the names of conductors and their orchestras.", "show", False),
        ("What are the TV channels whose series names are Sky Radio?", "tv series", False),
        ("Which students have a pet dog?", "student enrolment", False),
        ("How many singers are there?", "song", False),
        ("Which students have more than one pet?", "pets", True),
        ("Please show the names of the countries.", "show", False),
        ("How many countries are there?", "countrylanguage", False),
        ("Which departments offer engineering degrees?", "engineer", True),
    ],
)
def test_names_table(question: str, table: str, named: bool) -> None:
    assert names_table(question, table) is named


def test_named_tables_are_the_tables_of_the_columns_named() -> None:
    ordered = Slots(order_by=(SelectItem("", NET_WORTH),))
    select = frozenset({SelectItem("", NAME)})
    question = "List the name of singers in ascending order of net worth."
    said = tables_named_in(question, MUSIC)
    assert said == frozenset({SINGER})
    model = frozenset({SINGER, SONG})
    assert named_tables(MUSIC, select, ordered, said, model) == frozenset({SINGER})
    where = Slots(where=(Predicate(YEAR, ">"),))
    named = named_tables(MUSIC, select, where, said, frozenset({SINGER}))
    assert named == frozenset({SINGER, CONCERT})


CONCERTS = Schema(
    "concerts",
    (Table("singer"), Table("singer_in_concert"), Table("concert")),
    (
        Column(0, "singer_id", "number", primary_key=True),
        Column(0, "name"),
        Column(1, "singer_id", "number", primary_key=True),
        Column(1, "concert_id", "number", primary_key=True),
        Column(2, "concert_id", "number", primary_key=True),
        Column(2, "year", "number"),
    ),
    (ForeignKey(column=2, referenced=0), ForeignKey(column=3, referenced=4)),
)


def test_named_tables_take_the_tables_that_join_them() -> None:
    select = frozenset({SelectItem("", 1)})
    in_2014 = Slots(where=(Predicate(5, "="),))
    question = "List the names of singers in concerts of 2014."
    said = tables_named_in(question, CONCERTS)
    named = named_tables(CONCERTS, select, in_2014, said, frozenset({0, 2}))
    assert named == frozenset({0, 1, 2})
    # one table needs nothing to join it
    assert named_tables(CONCERTS, select, Slots(), said, frozenset({0})) == frozenset({0})


def test_a_lookup_no_column_is_read_from_is_left_out() -> None:
    # singer joins singer_in_concert by a key of singer_in_concert that references singer's
    # whole key: it adds no row, so "the ids of concerts of 2014 with a singer" reads
    # singer_in_concert and concert, not singer
    everything = frozenset({0, 1, 2})
    assert without_unused_lookups(CONCERTS, everything, [5]) == frozenset({1, 2})
    # a table a column is read from stays
    assert without_unused_lookups(CONCERTS, everything, [1, 5]) == everything
    # the referencing side stays: joined, it keeps only the singers in a concert
    assert without_unused_lookups(CONCERTS, frozenset({0, 1}), [1]) == frozenset({0, 1})
    # a chain of lookups goes whole: count(*) of singer_in_concert
    assert without_unused_lookups(CONCERTS, everything, []) == frozenset({1})
    in_2014 = Slots(where=(Predicate(5, "="),))
    asked = "Which concerts of 2014 had singers? Give their ids."
    said = tables_named_in(asked, CONCERTS)
    assert said == frozenset({0, 2})
    concert_ids = frozenset({SelectItem("", 4)})
    assert named_tables(CONCERTS, concert_ids, in_2014, said, said) == frozenset({1, 2})
    # a counting pair too, as Spider's gold queries write it: "how many singers sang in
    # concerts of 2014" counts singer_in_concert's rows (completion counts its distinct
    # singer_id: `complete_plm._counted_table`)
    counted = frozenset({SelectItem("count", STAR)})
    assert named_tables(CONCERTS, counted, in_2014, said, said) == frozenset({1, 2})
    # a lookup a column is read from stays
    names = frozenset({SelectItem("", 1), SelectItem("count", STAR)})
    assert named_tables(CONCERTS, names, in_2014, said, said) == everything


def test_a_table_that_is_the_same_entity_is_no_lookup() -> None:
    # candidates' key references people's key: a candidate is a person, one entity in two
    # tables, and a question about candidates' support joins people even when it reads nothing
    # there (Spider's gold queries do)
    elections = Schema(
        "elections",
        (Table("people"), Table("candidates")),
        (
            Column(0, "person_id", "number", primary_key=True),
            Column(0, "name"),
            Column(1, "candidate_id", "number", primary_key=True),
            Column(1, "support", "number"),
        ),
        (ForeignKey(column=2, referenced=0),),
    )
    both = frozenset({0, 1})
    assert without_unused_lookups(elections, both, [3]) == both


def test_named_tables_keep_the_model_tables_the_question_names() -> None:
    select = frozenset({SelectItem("", NAME)})
    asked = "What are the names of singers who have songs?"
    model = frozenset({SINGER, SONG, CONCERT})
    said = tables_named_in(asked, MUSIC)
    assert named_tables(MUSIC, select, Slots(), said, model) == frozenset({SINGER, SONG})


def test_named_tables_leave_the_tables_a_subquery_names_to_it() -> None:
    select = frozenset({SelectItem("", NAME)})
    asked = "List the name of singers that do not have any song."
    model = frozenset({SINGER, SONG})
    said = tables_named_in(asked, MUSIC)
    assert SONG in said
    without = Slots(where=(Predicate(0, "not in", nested=True),))
    assert named_tables(MUSIC, select, without, said, model) == frozenset({SINGER})
    # a plain condition keeps the named table the model holds
    assert named_tables(MUSIC, select, Slots(), said, model) == frozenset({SINGER, SONG})


@pytest.mark.parametrize(
    ("question", "named"),
    [
        # the closer name of two that the same word says
        ("How many visitors below age 30 are there?", {"visitor"}),
        ("Which visits did the visitors make?", {"visit", "visitor"}),
        # a name of more words is a different span: both are said
        ("Which courses have students enrolled?", {"student", "student enrolment", "enrolment"}),
        # a near name still counts where no closer one is said with the same words
        ("How many people are enrolled?", {"enrolment"}),
    ],
)
def test_tables_named_in_prefers_the_closer_name(question: str, named: set[str]) -> None:
    names = ("visit", "visitor", "student", "student enrolment", "enrolment")
    schema = Schema("school", tuple(Table(name) for name in names), ())
    said = tables_named_in(question, schema)
    assert {schema.tables[t].label for t in said} == named


def test_tables_named_in_reads_a_table_by_its_name_as_well_as_its_words() -> None:
    # Spider's museum_visit calls its visitor table "customer"; questions say "visitors"
    tables = (Table("museum"), Table("visitor", words="customer"), Table("visit"))
    schema = Schema("museum_visit", tables, ())
    said = tables_named_in("How many visitors below age 30 are there?", schema)
    assert {schema.tables[t].name for t in said} == {"visitor"}
    said = tables_named_in("List the customers of the museum.", schema)
    assert {schema.tables[t].name for t in said} == {"visitor", "museum"}


@pytest.mark.parametrize(
    ("select", "question", "named"),
    [
        # what is counted is what the question names
        (frozenset({SelectItem("count", STAR)}), "How many songs are there?", {SONG}),
        (
            frozenset({SelectItem("", NAME), SelectItem("count", STAR)}),
            "Show each singer's name and how many songs they have.",
            {SINGER, SONG},
        ),
        # nothing to go by: the sketch model's FROM decides
        (frozenset({SelectItem("count", STAR)}), "How many are there?", None),
        (frozenset({SelectItem("", STAR)}), "Show everything about songs.", None),
    ],
)
def test_named_tables_of_counting_and_columnless_pairs(
    select: frozenset[SelectItem], question: str, named: set[int] | None
) -> None:
    model = frozenset({SINGER, CONCERT})
    found = named_tables(MUSIC, select, Slots(), tables_named_in(question, MUSIC), model)
    assert found == (frozenset(named) if named is not None else None)


def test_named_tables_leave_a_counting_pair_with_a_subquery_to_the_model() -> None:
    select = frozenset({SelectItem("count", STAR)})
    nested = Slots(where=(Predicate(0, "not in", nested=True),))
    question = "How many singers have no song?"
    assert (
        named_tables(MUSIC, select, nested, tables_named_in(question, MUSIC), frozenset({SINGER}))
        is None
    )


DEPARTMENTS = Schema(
    "college",
    (Table("departments"), Table("degree_programs"), Table("courses")),
    (
        Column(0, "department_id", "number", primary_key=True),
        Column(0, "department_name"),
        Column(1, "degree_program_id", "number", primary_key=True),
        Column(1, "department_id", "number"),
        Column(2, "course_id", "number", primary_key=True),
        Column(2, "department_id", "number"),
    ),
    (ForeignKey(column=3, referenced=0), ForeignKey(column=5, referenced=0)),
)


@pytest.mark.parametrize(
    ("question", "model", "group_by", "counted"),
    [
        # the question names the table whose rows are counted
        ("Which department offers the most degree programs?", set(), {0}, {0, 1}),
        ("Which department has the most courses?", {0, 1}, {0}, {0, 2}),
        # not named: the one the sketch model's FROM holds
        ("Which department has the most of them?", {0, 2}, {0}, {0, 2}),
        # two tables reference departments and nothing tells which: unchanged
        ("Which department has the most of them?", {0}, {0}, {0}),
        # grouped by a column that is not the key: a count of departments per name
        ("Which department name is used most?", {0, 1}, {1}, {0}),
    ],
)
def test_counted_per_key(
    question: str, model: set[int], group_by: set[int], counted: set[int]
) -> None:
    items = (SelectItem("", 1), SelectItem("count", STAR))
    said = tables_named_in(question, DEPARTMENTS)
    tables, grouped = frozenset({0}), frozenset(group_by)
    found = counted_per_key(
        DEPARTMENTS, items, grouped, tables, said=said, model_tables=frozenset(model)
    )
    assert found == frozenset(counted)
    # a sum per key is no count of rows
    summed = (SelectItem("", 1), SelectItem("sum", 2))
    kept = counted_per_key(
        DEPARTMENTS, summed, grouped, tables, said=said, model_tables=frozenset(model)
    )
    assert kept == tables


@pytest.mark.parametrize(
    ("question", "model", "found"),
    [
        # the question counts the table that references the one its columns are read from
        ("How many degree programs does the engineering department offer?", set(), {0, 1}),
        ("What is the number of courses in the history department?", {0, 1}, {0, 2}),
        # it counts something it does not name: the referencing table the model's FROM holds
        ("How many does the engineering department offer?", {0, 2}, {0, 2}),
        # it counts the table itself
        ("How many departments are called engineering?", {0, 1}, {0}),
        # two tables reference departments and nothing tells which: unchanged
        ("How many does the engineering department offer?", {0}, {0}),
    ],
)
def test_counted_rows_are_those_of_the_table_counted(
    question: str, model: set[int], found: set[int]
) -> None:
    count = frozenset({SelectItem("count", STAR)})
    where = Slots(where=(Predicate(1, "="),))
    said = tables_named_in(question, DEPARTMENTS)
    counted = tables_counted_in(question, DEPARTMENTS)
    named = named_tables(DEPARTMENTS, count, where, said, frozenset(model), counted=counted)
    assert named == frozenset(found)
    # without the tables counted (no question read), the columns' own table stands
    assert named_tables(DEPARTMENTS, count, where, frozenset(), frozenset(model)) == frozenset({0})
    # a count per department's key is `counted_per_key`'s, a sum counts no rows
    items = (SelectItem("", 1), SelectItem("count", STAR))
    per_key = counted_rows(
        DEPARTMENTS,
        items,
        frozenset({0}),
        frozenset({0}),
        counted=counted,
        model_tables=frozenset(model),
    )
    assert per_key == {0}
    summed = (SelectItem("sum", 0),)
    kept = counted_rows(
        DEPARTMENTS,
        summed,
        frozenset(),
        frozenset({0}),
        counted=counted,
        model_tables=frozenset(model),
    )
    assert kept == {0}


def test_tables_counted_in() -> None:
    assert tables_counted_in("How many courses are there?", DEPARTMENTS) == {2}
    assert tables_counted_in("Which department has the most degree programs?", DEPARTMENTS) == {1}
    # named, but not counted
    assert tables_counted_in("List the courses of the history department.", DEPARTMENTS) == set()


def test_a_bridge_keyed_by_one_of_its_references_is_no_entity_of_it() -> None:
    # Spider's tables.json gives course_arrange the key course_id alone; its keys reference
    # course and teacher, so it is a bridge between two entities, and "the names of teachers
    # and how many courses they teach" reads teacher and course_arrange, not course
    courses = Schema(
        "course_teach",
        (Table("course"), Table("teacher"), Table("course_arrange")),
        (
            Column(0, "course_id", "number", primary_key=True),
            Column(0, "course"),
            Column(1, "teacher_id", "number", primary_key=True),
            Column(1, "name"),
            Column(2, "course_id", "number", primary_key=True),
            Column(2, "teacher_id", "number"),
        ),
        (ForeignKey(column=4, referenced=0), ForeignKey(column=5, referenced=2)),
    )
    everything = frozenset({0, 1, 2})
    assert without_unused_lookups(courses, everything, [3]) == frozenset({1, 2})
    # read from, course stays
    assert without_unused_lookups(courses, everything, [1, 3]) == everything
