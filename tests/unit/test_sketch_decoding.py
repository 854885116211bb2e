"""Decoding the sketch model's logits: the k most probable item sets (against brute force), the
clause rules keyword sets obey, SELECT/FROM/KEYWORDS candidates, slots, merging windows; and
how `sketcher.rank` orders the pairs it decodes (each pair's own FROM first, the SELECT pool,
ties, what `nearest_equals` replaced last) and which sketches show only their values."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.nl2sql.schema import Column, Schema, Table
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
    from_candidates,
    k_best_sets,
    keyword_candidates,
    merge_windows,
    select_candidates,
    slots_for,
    valid_keywords,
)
from proxy.nl2sql.sketcher import rank, shows_only_its_values
from proxy.nl2sql.value_evidence import NamedValues
from tests.unit.sketch_schemas import CAR_MODELS, MUSIC, NAME, SINGER, SONG, TITLE, YEAR, items_of

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
        select=items_of(*shown),
        tables=frozenset({SINGER}),
        keywords=frozenset({"where"}),
        slots=Slots(where=tuple(Predicate(column, operator) for operator, column in where)),
    )
    values = NamedValues({c: frozenset({"x"}) for c in held}, frozenset(held))
    assert shows_only_its_values(sketch, values) is expected
