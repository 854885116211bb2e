"""Decoding the sketch model's logits: the k most probable item sets (against brute force), the
clause rules keyword sets obey, SELECT/FROM/KEYWORDS candidates, slots, merging windows, and the
FROM a pair's own columns call for, and the repairs the question's own words make to a sketch
(the aggregates, columns and order it spells out, the tables it names)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.nl2sql.joins import without_unused_lookups
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import (
    AGGREGATES,
    COLUMN_OUTPUTS,
    GROUP_BY_OUTPUT,
    HAVING_OUTPUTS,
    KEYWORDS,
    OPERATORS,
    ORDER_BY_OUTPUTS,
    QUESTION_OUTPUTS,
    SELECT_OUTPUTS,
    STAR,
    WHERE_OR_OUTPUT,
    WHERE_OUTPUTS,
    FloatArray,
    Predicate,
    SelectItem,
    Sketch,
    SketchScores,
    Slots,
    aggregates_of_one_table,
    columns_of_named_tables,
    counted_by_value,
    counted_per_key,
    counted_rows,
    equal_columns,
    from_candidates,
    grouped_by_asked,
    grouped_by_its_aggregate,
    grouped_without_aggregate,
    in_said_direction,
    k_best_sets,
    keyword_candidates,
    merge_windows,
    named_tables,
    names_table,
    nearest_equals,
    nested_on_shown_table,
    one_nested_condition,
    one_number_asked,
    ordered_by_a_quantity,
    ordered_by_frequency,
    ordered_on_shown_table,
    read_by_name,
    readable_names,
    said_direction,
    select_candidates,
    shown_groups,
    slots_for,
    spoken_age_order,
    spoken_aggregate_of,
    spoken_aggregates,
    spoken_columns,
    spoken_extreme,
    spoken_group,
    spoken_order,
    spoken_recency,
    spoken_select,
    tables_counted_in,
    tables_named_in,
    valid_keywords,
)
from proxy.nl2sql.sketcher import rank, shows_only_its_values
from proxy.nl2sql.value_evidence import NamedValues

Valid = Callable[[frozenset[int]], bool]
TOLERANCE = 1e-4  # the logits are float32; log-probabilities of ~12 items agree to this


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def _log_probability(logits: Sequence[float], items: frozenset[int]) -> float:
    """Items in or out independently, item i in with probability sigmoid(logits[i])."""
    return sum(_log_sigmoid(x if i in items else -x) for i, x in enumerate(logits))


def _brute_force(logits: Sequence[float], valid: Valid) -> list[tuple[frozenset[int], float]]:
    every = (
        frozenset(items)
        for size in range(len(logits) + 1)
        for items in itertools.combinations(range(len(logits)), size)
    )
    scored = [(items, _log_probability(logits, items)) for items in every if valid(items)]
    return sorted(scored, key=lambda pair: -pair[1])


def _always(_: frozenset[int]) -> bool:
    return True


def _non_empty(items: frozenset[int]) -> bool:
    return bool(items)


def _at_most_two(items: frozenset[int]) -> bool:
    return 0 < len(items) <= 2


FILTERS: dict[str, Valid] = {
    "any": _always,
    "non-empty": _non_empty,
    "one or two": _at_most_two,
    "keywords": valid_keywords,
}

_LOGIT = st.one_of(
    st.floats(-8.0, 8.0, allow_nan=False, width=32),
    st.sampled_from([0.0, 0.5, -0.5, 1.0, -1.0, 2.0]),  # ties
)


def _check_k_best(logits: list[float], k: int, valid: Valid) -> None:
    array = np.asarray(logits, dtype=np.float32)
    exact = [float(x) for x in array]
    found = k_best_sets(array, k, valid)
    expected = _brute_force(exact, valid)[:k]
    assert len(found) == len(expected)
    sets = [items for items, _ in found]
    assert len(set(sets)) == len(sets)
    for items, score in found:
        assert valid(items)
        assert items <= set(range(len(logits)))
        assert score == pytest.approx(_log_probability(exact, items), abs=TOLERANCE)
    scores = [score for _, score in found]
    assert all(a >= b - 1e-9 for a, b in itertools.pairwise(scores))
    # The same sets up to ties: the same multiset of log-probabilities.
    assert scores == pytest.approx([score for _, score in expected], abs=TOLERANCE)


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(_LOGIT, min_size=0, max_size=10),
    k=st.integers(1, 8),
    rule=st.sampled_from(sorted(FILTERS)),
)
def test_k_best_sets_matches_brute_force(logits: list[float], k: int, rule: str) -> None:
    _check_k_best(logits, k, FILTERS[rule])


@settings(max_examples=30, deadline=None)
@given(logits=st.lists(_LOGIT, min_size=len(KEYWORDS), max_size=len(KEYWORDS)), k=st.integers(1, 8))
def test_k_best_keyword_sets_match_brute_force(logits: list[float], k: int) -> None:
    _check_k_best(logits, k, valid_keywords)


def test_k_best_sets_default_filter_is_non_empty() -> None:
    logits = np.asarray([-1.0, -2.0, -3.0], dtype=np.float32)
    found = k_best_sets(logits, 3)
    assert [items for items, _ in found] == [
        frozenset({0}),
        frozenset({1}),
        frozenset({0, 1}),
    ]
    best = k_best_sets(logits, 1, _always)
    assert best[0][0] == frozenset()
    assert best[0][1] == pytest.approx(_log_probability([-1.0, -2.0, -3.0], frozenset()))
    assert k_best_sets(np.zeros(0, dtype=np.float32), 4) == []
    assert k_best_sets(np.zeros(0, dtype=np.float32), 4, _always) == [(frozenset(), 0.0)]


def _keywords(*names: str) -> frozenset[int]:
    return frozenset(KEYWORDS.index(name) for name in names)


@pytest.mark.parametrize(
    ("names", "valid"),
    [
        ((), True),
        (("where",), True),
        (("order by",), False),
        (("order by", "asc"), True),
        (("order by", "desc"), True),
        (("order by", "asc", "desc"), False),
        (("asc",), False),
        (("desc", "limit"), False),
        (("limit",), False),
        (("where", "limit"), False),
        (("asc", "desc"), False),
        (("order by", "desc", "limit"), True),
        (("group by",), True),
        (("having",), False),
        (("having", "order by", "asc"), False),
        (("group by", "having"), True),
        (("union",), True),
        (("intersect",), True),
        (("except", "where", "nested"), True),
        (("union", "except"), False),
        (("intersect", "union"), False),
        (("intersect", "union", "except"), False),
        (
            (
                "where",
                "group by",
                "having",
                "order by",
                "desc",
                "limit",
                "distinct",
                "nested",
                "intersect",
            ),
            True,
        ),
    ],
)
def test_valid_keywords(names: tuple[str, ...], valid: bool) -> None:
    assert valid_keywords(_keywords(*names)) is valid


def _schema(tables: int = 3, per_table: int = 3) -> Schema:
    return Schema(
        "db",
        tuple(Table(f"t{t}") for t in range(tables)),
        tuple(Column(t, f"c{c}") for t in range(tables) for c in range(per_table)),
    )


SCHEMA = _schema()


def _scores(seed: int, shift: float = 0.0) -> SketchScores:
    rng = np.random.default_rng(seed)
    n = len(SCHEMA.columns)
    return SketchScores(
        column_logits=(rng.normal(-2.0, 2.0, (n + 1, COLUMN_OUTPUTS)) + shift).astype(np.float32),
        table_logits=(rng.normal(-1.0, 2.0, len(SCHEMA.tables)) + shift).astype(np.float32),
        question_logits=(rng.normal(-1.0, 2.0, QUESTION_OUTPUTS) + shift).astype(np.float32),
    )


def _all_negative() -> SketchScores:
    n = len(SCHEMA.columns)
    return SketchScores(
        column_logits=np.full((n + 1, COLUMN_OUTPUTS), -5.0, dtype=np.float32),
        table_logits=np.full(len(SCHEMA.tables), -5.0, dtype=np.float32),
        question_logits=np.full(QUESTION_OUTPUTS, -5.0, dtype=np.float32),
    )


SCORES = [_scores(seed) for seed in range(6)] + [_scores(7, 3.0), _all_negative()]


@pytest.mark.parametrize("scores", SCORES)
def test_candidates_name_existing_items_and_are_never_empty(scores: SketchScores) -> None:
    columns = {STAR, *range(len(SCHEMA.columns))}
    selects = select_candidates(scores, 8)
    assert len(selects) == 8
    for items, score in selects:
        assert items
        assert all(item.column in columns and item.aggregate in AGGREGATES for item in items)
        assert score <= 0.0
    assert len({items for items, _ in selects}) == 8
    tables = from_candidates(scores, 5)
    assert len(tables) == 5
    for chosen, _ in tables:
        assert chosen
        assert chosen <= set(range(len(SCHEMA.tables)))
    keywords = keyword_candidates(scores, 8)
    assert len(keywords) == 8
    for names, _ in keywords:
        assert names <= set(KEYWORDS)
        assert valid_keywords(frozenset(KEYWORDS.index(name) for name in names))
    for candidates in (selects, tables, keywords):
        ordered = [score for _, score in candidates]
        assert ordered == sorted(ordered, reverse=True)


def test_select_candidates_map_logits_to_columns_and_aggregates() -> None:
    scores = _all_negative()
    scores.column_logits[0, AGGREGATES.index("count")] = 4.0  # count(*)
    scores.column_logits[3 + 1, AGGREGATES.index("")] = 3.0  # column 3
    scores.column_logits[8 + 1, AGGREGATES.index("avg")] = -0.5  # avg(column 8): first flip
    scores.table_logits[2] = 1.0
    (best, score), (second, _) = select_candidates(scores, 2)
    assert best == {SelectItem("count", STAR), SelectItem("", 3)}
    assert second == best | {SelectItem("avg", 8)}
    logits = scores.column_logits[:, SELECT_OUTPUTS].reshape(-1).tolist()
    flat = frozenset({AGGREGATES.index("count"), 4 * len(AGGREGATES)})
    assert score == pytest.approx(_log_probability(logits, flat), abs=TOLERANCE)
    assert from_candidates(scores, 1)[0][0] == {2}
    assert keyword_candidates(scores, 1)[0][0] == frozenset()


def test_select_candidates_never_show_two_columns_of_one_name() -> None:
    scores = _all_negative()
    scores.column_logits[0 + 1, AGGREGATES.index("")] = 3.0  # t0.c0
    scores.column_logits[3 + 1, AGGREGATES.index("")] = 2.0  # t1.c0
    scores.column_logits[3 + 1, AGGREGATES.index("max")] = 1.0  # max(t1.c0)
    unchecked = select_candidates(scores, 1)[0][0]
    assert unchecked == {SelectItem("", 0), SelectItem("", 3), SelectItem("max", 3)}
    sets = [items for items, _ in select_candidates(scores, 4, SCHEMA)]
    assert sets[0] == {SelectItem("", 0), SelectItem("max", 3)}  # an aggregate may repeat a name
    for items in sets:
        names = [SCHEMA.columns[i.column].name for i in items if not i.aggregate]
        assert len(names) == len(set(names))


_CLAUSES = ("where", "group by", "having", "order by", "limit")


@pytest.mark.parametrize("scores", SCORES)
def test_slots_follow_the_keywords(scores: SketchScores) -> None:
    n = len(SCHEMA.columns)
    for size in range(len(_CLAUSES) + 1):
        for keywords in map(frozenset, itertools.combinations(_CLAUSES, size)):
            slots = slots_for(scores, keywords)
            assert bool(slots.where) == ("where" in keywords)
            assert bool(slots.group_by) == ("group by" in keywords)
            assert bool(slots.having) == ("having" in keywords)
            assert bool(slots.order_by) == ("order by" in keywords)
            assert (slots.limit is not None) == ("limit" in keywords)
            if "where" not in keywords:
                assert not slots.where_or
            else:
                assert slots.where_or == bool(scores.question_logits[WHERE_OR_OUTPUT] > 0)
            for predicate in slots.where:
                assert 0 <= predicate.column < n
                assert predicate.operator in OPERATORS
                assert predicate.nested == (predicate.operator in ("in", "not in"))
            assert slots.group_by <= set(range(n))
            for item in (*slots.having, *slots.order_by):
                assert STAR <= item.column < n
                assert item.aggregate in AGGREGATES


@pytest.mark.parametrize("scores", SCORES)
def test_slots_are_the_positive_logits_best_first(scores: SketchScores) -> None:
    slots = slots_for(scores, frozenset(_CLAUSES))
    logits = scores.column_logits
    where = [logits[p.column + 1, WHERE_OUTPUTS][OPERATORS.index(p.operator)] for p in slots.where]
    order_by = [
        logits[i.column + 1, ORDER_BY_OUTPUTS][AGGREGATES.index(i.aggregate)]
        for i in slots.order_by
    ]
    having = [
        logits[i.column + 1, HAVING_OUTPUTS][AGGREGATES.index(i.aggregate)] for i in slots.having
    ]
    group_by = {c for c in range(len(SCHEMA.columns)) if logits[c + 1, GROUP_BY_OUTPUT] > 0}
    for chosen, block in (
        (where, logits[1:, WHERE_OUTPUTS]),
        (order_by, logits[:, ORDER_BY_OUTPUTS]),
        (having, logits[:, HAVING_OUTPUTS]),
    ):
        assert chosen == sorted(chosen, reverse=True)
        positive = int((block > 0).sum())
        if positive:
            assert len(chosen) == positive
            assert min(chosen) > 0
        else:  # none positive: the single best
            assert chosen == [block.max()]
    if group_by:
        assert slots.group_by == group_by
    else:
        assert slots.group_by == {int(np.argmax(logits[1:, GROUP_BY_OUTPUT]))}
    assert slots.limit == 1


def test_a_later_where_predicate_needs_the_more_where_logit() -> None:
    scores = _all_negative()
    equals, greater = OPERATORS.index("="), OPERATORS.index(">")
    scores.column_logits[2 + 1, WHERE_OUTPUTS][greater] = 0.8  # the best: kept below the bar
    scores.column_logits[0 + 1, WHERE_OUTPUTS][equals] = 0.6
    scores.column_logits[1 + 1, WHERE_OUTPUTS][equals] = 0.4
    where = frozenset({"where"})
    assert slots_for(scores, where, more_where=1.0).where == (Predicate(2, ">"),)
    assert slots_for(scores, where, more_where=0.5).where == (
        Predicate(2, ">"),
        Predicate(0, "="),
    )
    assert [p.column for p in slots_for(scores, where).where] == [2, 0, 1]


def _window_logits(values: Sequence[float], rows: int, width: int) -> FloatArray:
    """`rows` rows (the window's items, then padding) whose item k is all values[k]."""
    logits = np.full((rows, width), 99.0, dtype=np.float32)
    for k, value in enumerate(values):
        logits[k] = value
    return logits


def test_merge_windows_averages_shared_items_and_places_columns() -> None:
    # Table 1 is split between the windows (columns 3, 4 in the first, 5 in the second).
    window_columns = [[STAR, 0, 1, 2, 3, 4], [STAR, 5, 6, 7, 8]]
    window_tables = [[0, 1], [1, 2]]
    column_values = [[1.0, 10.0, 11.0, 12.0, 13.0, 14.0], [3.0, 15.0, 16.0, 17.0, 18.0]]
    table_values = [[20.0, 21.0], [23.0, 22.0]]
    scores = merge_windows(
        SCHEMA,
        window_columns=window_columns,
        window_tables=window_tables,
        column_logits=[_window_logits(v, 7, COLUMN_OUTPUTS) for v in column_values],
        table_logits=[_window_logits(v, 3, 1)[:, 0] for v in table_values],
        question_logits=[
            np.full(QUESTION_OUTPUTS, 1.0, dtype=np.float32),
            np.full(QUESTION_OUTPUTS, 4.0, dtype=np.float32),
        ],
    )
    assert scores.column_logits.shape == (len(SCHEMA.columns) + 1, COLUMN_OUTPUTS)
    assert scores.column_logits.dtype == np.float32
    np.testing.assert_allclose(scores.column_logits[0], 2.0)  # `*`: the mean of both windows
    np.testing.assert_allclose(scores.column(STAR), 2.0)
    for column in range(len(SCHEMA.columns)):
        np.testing.assert_allclose(scores.column_logits[column + 1], 10.0 + column)
        np.testing.assert_allclose(scores.column(column), 10.0 + column)
    np.testing.assert_allclose(scores.table_logits, [20.0, 22.0, 22.0])
    np.testing.assert_allclose(scores.question_logits, 2.5)
    assert scores.question_logits.shape == (QUESTION_OUTPUTS,)


def test_merge_of_one_window_is_that_window() -> None:
    rng = np.random.default_rng(3)
    n = len(SCHEMA.columns)
    columns = rng.normal(size=(n + 1, COLUMN_OUTPUTS)).astype(np.float32)
    tables = rng.normal(size=len(SCHEMA.tables)).astype(np.float32)
    question = rng.normal(size=QUESTION_OUTPUTS).astype(np.float32)
    scores = merge_windows(
        SCHEMA,
        window_columns=[[STAR, *range(n)]],
        window_tables=[list(range(len(SCHEMA.tables)))],
        column_logits=[columns],
        table_logits=[tables],
        question_logits=[question],
    )
    np.testing.assert_array_equal(scores.column_logits, columns)
    np.testing.assert_array_equal(scores.table_logits, tables)
    np.testing.assert_array_equal(scores.question_logits, question)


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


MUSIC = Schema(
    "music",
    (Table("singer"), Table("song"), Table("concert")),
    (
        Column(0, "singer_id", "number"),
        Column(0, "name"),
        Column(0, "net_worth", "number"),
        Column(1, "song_id", "number"),
        Column(1, "singer_id", "number"),
        Column(1, "title"),
        Column(2, "concert_id", "number"),
        Column(2, "year", "number"),
    ),
)
NAME, NET_WORTH, TITLE, YEAR = 1, 2, 5, 7
SINGER, SONG, CONCERT = 0, 1, 2


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


def _unsure_of_music() -> SketchScores:
    """Sketch-model scores for MUSIC that favour nothing: every column, aggregate and keyword
    improbable, every table even."""
    return SketchScores(
        column_logits=np.full((len(MUSIC.columns) + 1, COLUMN_OUTPUTS), -5.0, dtype=np.float32),
        table_logits=np.zeros(len(MUSIC.tables), dtype=np.float32),
        question_logits=np.full(QUESTION_OUTPUTS, -5.0, dtype=np.float32),
    )


def test_rank_tries_each_pairs_own_from_first() -> None:
    select = frozenset({SelectItem("", TITLE)})
    count = frozenset({SelectItem("count", STAR)})
    froms = [(frozenset({SINGER, SONG}), -0.5), (frozenset({SONG}), -1.0)]
    scores = _unsure_of_music()
    ranked = rank(
        scores,
        [(select, -0.1), (count, -0.2)],
        [(frozenset(), -0.1)],
        froms,
        None,
        combine=True,
        named=(MUSIC, "What are all the titles?"),
    )
    # the title pair: its own FROM (song) first, scored as the model's best, and not twice; the
    # count pair names nothing, so the model's FROM sets stand
    assert [(s.select, set(s.tables)) for s in ranked] == [
        (select, {SONG}),
        (select, {SINGER, SONG}),
        (count, {SINGER, SONG}),
        (count, {SONG}),
    ]
    assert ranked[0].score == pytest.approx(-0.1 - 0.1 - 0.5)
    plain = rank(scores, [(select, -0.1)], [(frozenset(), -0.1)], froms, None, combine=True)
    assert [set(s.tables) for s in plain] == [{SINGER, SONG}, {SONG}]


def test_rank_keeps_the_pairs_of_the_select_k_best_select_sets_of_the_pool() -> None:
    """`[sketch] select_pool`: the aligner ranks the pairs of more SELECT sets than go on; the
    `select_k` sets whose best pair scores highest are kept, each with all its pairs."""
    title, year = frozenset({SelectItem("", TITLE)}), frozenset({SelectItem("", YEAR)})
    count = frozenset({SelectItem("count", STAR)})
    keywords = [(frozenset(), -0.1), (frozenset({"where"}), -2.0)]
    froms = [(frozenset({SONG}), -0.1)]
    scores = _unsure_of_music()
    pool = [(title, -0.1), (count, -0.5), (year, -3.0)]
    # the aligner likes the third SELECT (with "where") best and the second least
    aligned = np.array([0.0, -1.0, -4.0, -4.0, 1.0, 6.0], dtype=np.float32)

    def shown(select_k: int, combine: bool = True) -> list[tuple[frozenset[SelectItem], bool]]:
        ranked = rank(scores, pool, keywords, froms, aligned, combine=combine, select_k=select_k)
        return [(s.select, "where" in s.keywords) for s in ranked]

    assert shown(2) == [(year, True), (title, False), (year, False), (title, True)]
    assert shown(1) == [(year, True), (year, False)]
    assert [select for select, _ in shown(0)].count(count) == 2  # 0: every pair
    # without the sketch model's probabilities the third SELECT still leads; without an aligner,
    # the two most probable SELECT sets go on
    assert shown(2, combine=False)[0] == (year, True)
    plain = rank(scores, pool, keywords, froms, None, combine=True, select_k=2)
    assert {s.select for s in plain} == {title, count}


def test_rank_puts_pairs_of_equal_score_in_order_of_probability() -> None:
    """The pairs the aligner did not read (`[sketch] align_within`) share its lowest logit:
    ranked by the aligner alone, they come in the order of the sketch model's probability."""
    title, year = frozenset({SelectItem("", TITLE)}), frozenset({SelectItem("", YEAR)})
    count = frozenset({SelectItem("count", STAR)})
    keywords: list[tuple[frozenset[str], float]] = [(frozenset(), -0.1)]
    froms = [(frozenset({SONG}), -0.1)]
    scores = _unsure_of_music()
    pool = [(title, -0.1), (year, -9.0), (count, -8.0)]
    aligned = np.array([2.0, -1.0, -1.0], dtype=np.float32)  # the last two not read
    ranked = rank(scores, pool, keywords, froms, aligned, combine=False)
    assert [s.select for s in ranked] == [title, count, year]


def _items(*texts: str) -> frozenset[SelectItem]:
    """SelectItems of MUSIC from `agg:column` texts ("avg:2", ":1")."""
    return frozenset(
        SelectItem(aggregate, int(column))
        for aggregate, column in (text.split(":") for text in texts)
    )


@pytest.mark.parametrize(
    ("question", "select", "group_by", "expected"),
    [
        # the column the list is followed by, in place of the sketch's aggregates
        (
            "What is the average, minimum, and maximum net worth of singers?",
            _items("avg:2", f"avg:{YEAR}"),
            frozenset(),
            _items("avg:2", "min:2", "max:2"),
        ),
        # no column named after the list: the sketch's first aggregated column
        (
            "Show the maximum and minimum, over everything.",
            _items("max:2"),
            frozenset(),
            _items("max:2", "min:2"),
        ),
        # a bare column grouped by stays
        (
            "What is the average and maximum net worth for each name?",
            _items(f":{NAME}", "avg:2"),
            frozenset({NAME}),
            _items(f":{NAME}", "avg:2", "max:2"),
        ),
        # grouped by the column itself: left to the sketch
        (
            "What is the minimum and maximum net worth?",
            _items(":2", "max:2"),
            frozenset({NET_WORTH}),
            None,
        ),
        # one aggregate is no list
        ("What is the maximum net worth of singers?", _items(":2"), frozenset(), None),
        ("What is the average age and the maximum net worth?", _items(":2"), frozenset(), None),
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
            _items(f":{YEAR}"),
            frozenset(),
            _items("sum:2", f"max:{YEAR}"),
        ),
        ("Return the minimum net worth of singers.", _items(":2"), frozenset(), _items("min:2")),
        # a bare column grouped by stays
        (
            "Find the average net worth for each name.",
            _items(f":{NAME}", "max:2"),
            frozenset({NAME}),
            _items(f":{NAME}", "avg:2"),
        ),
        # not asked for in the first words, a word naming no column, a count, a grouped column
        ("Which singer has the maximum net worth?", _items(":1"), frozenset(), None),
        ("What is the average of them all?", _items("avg:2"), frozenset(), None),
        ("What is the total number of singers?", _items("count:-1"), frozenset(), None),
        ("What is the maximum net worth?", _items(":2"), frozenset({NET_WORTH}), None),
        ("What is the name of the singer?", _items(":1"), frozenset(), None),
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
            _items(f":{NAME}", "sum:2"),
            _items(f":{NAME}", "max:2"),
        ),
        (
            "Show the names and the total net worth.",
            _items(f":{NAME}", "avg:2"),
            _items(f":{NAME}", "sum:2"),
        ),
        # already so, a bare column, a count, or two aggregates of one column: unchanged
        ("What is the maximum net worth?", _items("max:2"), None),
        ("What is the maximum net worth?", _items(":2"), None),
        ("What is the total number of singers?", _items("avg:2"), None),
        ("What is the maximum net worth?", _items("avg:2", "min:2"), None),
    ],
)
def test_spoken_aggregate_of(
    question: str, select: frozenset[SelectItem], expected: frozenset[SelectItem] | None
) -> None:
    assert spoken_aggregate_of(question, MUSIC, select) == expected


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


CARS = Schema(
    "cars",
    (Table("cars"), Table("makers")),
    (
        Column(0, "id", "integer", primary_key=True),
        Column(0, "cylinders", "integer"),
        Column(0, "mpg", "real"),
        Column(0, "maker", "integer"),
        Column(1, "id", "integer", primary_key=True),
        Column(1, "name"),
    ),
    (ForeignKey(3, 4),),
)


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


BY_COUNT = frozenset({"group by", "order by", "desc", "limit"})
COUNTED = Slots(group_by=frozenset({5}), order_by=(SelectItem("count", STAR),), limit=1)


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
    ordered = frozenset({"order by", "asc"})
    expected = ordered if said is None else frozenset({"order by", said})
    assert in_said_direction(question, ordered) == expected
    # nothing to direct where the sketch does not order
    assert in_said_direction(question, frozenset({"where"})) == frozenset({"where"})


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


CAR_MODELS = Schema(
    "cars",
    (Table("model_list"), Table("car_names"), Table("cars_data")),
    (
        Column(0, "model_id", "integer", primary_key=True),
        Column(0, "model"),
        Column(1, "make_id", "integer", primary_key=True),
        Column(1, "model"),
        Column(2, "id", "integer", primary_key=True),
        Column(2, "horsepower", "integer"),
    ),
    (ForeignKey(column=3, referenced=1), ForeignKey(column=4, referenced=2)),
)


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


def test_rank_proposes_what_nearest_equals_replaced_last() -> None:
    # two pairs: model_list.model, then cars_data.horsepower; both ordered by horsepower
    far = frozenset({SelectItem("", 1)})
    power = frozenset({SelectItem("", 5)})
    scores = SketchScores(
        column_logits=np.full(
            (len(CAR_MODELS.columns) + 1, COLUMN_OUTPUTS), -5.0, dtype=np.float32
        ),
        table_logits=np.zeros(len(CAR_MODELS.tables), dtype=np.float32),
        question_logits=np.full(QUESTION_OUTPUTS, -5.0, dtype=np.float32),
    )
    ordered = frozenset({"order by", "limit"})
    scores.column_logits[5 + 1, ORDER_BY_OUTPUTS.start] = 5.0  # ORDER BY horsepower
    ranked = rank(
        scores,
        [(far, -0.1), (power, -0.2)],
        [(ordered, -0.1)],
        [(frozenset({2}), -0.5)],
        None,
        combine=True,
        named=(CAR_MODELS, "Which model has the least horsepower?"),
    )
    near = frozenset({SelectItem("", 3)})
    # each pair with its own FROM first, then the model's; what was moved, after all of them
    assert [(s.select, set(s.tables)) for s in ranked] == [
        (near, {1, 2}),
        (near, {2}),
        (power, {2}),
        (far, {0, 1, 2}),
        (far, {2}),
    ]


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


def test_one_nested_condition_keeps_the_one_on_the_table_the_sketch_reads() -> None:
    # "the major and age of every student who does not own a cat": student.stuid NOT IN (...),
    # and has_pet.stuid NOT IN (...) beside it is the subquery's own column, the same condition
    shown = frozenset({SelectItem("", 1), SelectItem("", 2)})
    outer, inner = Predicate(0, "not in", nested=True), Predicate(3, "not in", nested=True)
    assert one_nested_condition(PETS, shown, Slots(where=(inner, outer))) == Slots(where=(outer,))
    assert one_nested_condition(PETS, shown, Slots(where=(outer, inner))) == Slots(where=(outer,))
    # read from neither table: the first stays
    counted = frozenset({SelectItem("count", STAR)})
    assert one_nested_condition(PETS, counted, Slots(where=(inner, outer))) == Slots(where=(inner,))
    # other operators, conditions that are not nested, unrelated columns: as they are
    for where in (
        (outer, Predicate(3, "in", nested=True)),
        (outer, Predicate(3, "not in")),
        (outer, Predicate(4, "not in", nested=True)),
        (Predicate(2, ">"), inner),
    ):
        assert one_nested_condition(PETS, shown, Slots(where=where)) == Slots(where=where)


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


CITIES = Schema(
    "world",
    (Table("city"), Table("country")),
    (
        Column(0, "countrycode"),
        Column(0, "population", "integer"),
        Column(1, "code", primary_key=True),
        Column(1, "population", "integer"),
        Column(1, "gnp", "real"),
    ),
    (ForeignKey(column=0, referenced=2),),
)


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


@pytest.mark.parametrize(
    ("shown", "where", "held", "expected"),
    [
        ((":1",), (("=", NAME),), {NAME}, True),  # the names the question gives, back
        ((":1",), (("=", NAME),), set(), False),  # no value of it named: a real condition
        ((":1", ":2"), (("=", NAME),), {NAME}, False),  # net worth shown too
        (("count:1",), (("=", NAME),), {NAME}, False),  # counted, not shown back
        ((":1",), (("like", NAME),), {NAME}, False),  # a pattern: the rows say more
        ((":1",), (("=", NAME), ("=", TITLE)), {NAME}, True),
        ((":5",), (("=", NAME),), {NAME}, False),  # another column shown
    ],
)
def test_shows_only_its_values(
    shown: tuple[str, ...], where: tuple[tuple[str, int], ...], held: set[int], expected: bool
) -> None:
    sketch = Sketch(
        select=_items(*shown),
        tables=frozenset({SINGER}),
        keywords=frozenset({"where"}),
        slots=Slots(where=tuple(Predicate(column, operator) for operator, column in where)),
    )
    values = NamedValues({c: frozenset({"x"}) for c in held}, frozenset(held))
    assert shows_only_its_values(sketch, values) is expected
