"""The database-aware serialization: the exact text of a small schema, spans that name every item
(checked on every Spider schema, whole and split into windows under several token budgets), how
windows cover the schema, and the foreign-key neighbourhood order tables are packed in."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from benchmarks.schema_split import windows_by_whole_text
from proxy.nl2sql.schema import (
    Column,
    ForeignKey,
    Schema,
    Table,
    spelled_out,
)
from proxy.nl2sql.serialize import Marks, Window, neighbourhood_order, serialize, windows
from proxy.nl2sql.sketch import STAR

TOKENIZER = (
    Path(__file__).resolve().parents[2] / "proxy" / "models" / "value_embedder" / "tokenizer.json"
)

_TABLE_NAME = re.compile(r"(?:^|\| )t(\d+): $")
_COLUMN_NAME = re.compile(r"(?:\( | , )c(\d+): $")
_FOREIGN_KEY = re.compile(r" \| t(\d+)\.c(\d+) = t(\d+)\.c(\d+)")


def _concert_singer() -> Schema:
    tables = (
        Table("stadium"),
        Table("singer"),
        Table("concert"),
        Table("sic", words="singer in concert"),
    )
    columns = (
        Column(0, "Stadium_ID", primary_key=True),  # 0
        Column(0, "Location"),  # 1
        Column(0, "Name"),  # 2
        Column(1, "Singer_ID", primary_key=True),  # 3
        Column(1, "Name"),  # 4
        Column(1, "Country"),  # 5
        Column(2, "concertID", primary_key=True),  # 6
        Column(2, "concert_Name"),  # 7
        Column(2, "Stadium_ID"),  # 8
        Column(3, "cid", words="concert id"),  # 9
        Column(3, "Singer_ID"),  # 10
    )
    keys = (ForeignKey(8, 0), ForeignKey(9, 6), ForeignKey(10, 3))
    return Schema("concert_singer", tables, columns, keys)


SMALL = _concert_singer()


def test_equal_schemas_hash_alike_and_a_changed_one_is_another_key() -> None:
    # the sketch stage's caches are keyed by the schema; its hash is computed once
    again = _concert_singer()
    assert again is not SMALL
    assert hash(again) == hash(SMALL)
    cache = {SMALL: "read"}
    assert cache[again] == "read"
    renamed = replace(SMALL, columns=(*SMALL.columns[:-1], Column(3, "Singer")))
    assert renamed not in cache
    assert replace(SMALL, foreign_keys=SMALL.foreign_keys[:-1]) not in cache


def test_a_small_schema_serializes_to_the_expected_text() -> None:
    window = serialize(SMALL)
    assert window.text == (
        "concert singer: *"
        " | t0: stadium ( c0: stadium id , c1: location , c2: name )"
        " | t1: singer ( c0: singer id , c1: name , c2: country )"
        " | t2: concert ( c0: concert id , c1: concert name , c2: stadium id )"
        " | t3: singer in concert ( c0: concert id , c1: singer id )"
        " | t2.c2 = t0.c0 | t3.c0 = t2.c0 | t3.c1 = t1.c0"
    )
    assert window.columns == (STAR, *range(11))
    assert window.tables == (0, 1, 2, 3)
    assert window.text[slice(*window.column_spans[0])] == "*"
    assert window.column_spans[0] == (16, 17)
    _check_window(SMALL, window)


def test_a_part_of_a_schema_keeps_only_the_foreign_keys_between_shown_columns() -> None:
    window = serialize(SMALL, [(2, [6, 8]), (0, [0]), (3, [10])])
    assert window.text == (
        "concert singer: *"
        " | t2: concert ( c0: concert id , c2: stadium id )"
        " | t0: stadium ( c0: stadium id )"
        " | t3: singer in concert ( c1: singer id )"
        " | t2.c2 = t0.c0"
    )
    assert window.columns == (STAR, 6, 8, 0, 10)
    assert window.tables == (2, 0, 3)
    _check_window(SMALL, window)


def test_marked_values_follow_their_column_outside_its_span() -> None:
    window = serialize(SMALL, marks=((5, "france"), (7, "gig ; tour")))
    assert window.text == (
        "concert singer: *"
        " | t0: stadium ( c0: stadium id , c1: location , c2: name )"
        " | t1: singer ( c0: singer id , c1: name , c2: country = france )"
        " | t2: concert ( c0: concert id , c1: concert name = gig ; tour , c2: stadium id )"
        " | t3: singer in concert ( c0: concert id , c1: singer id )"
        " | t2.c2 = t0.c0 | t3.c0 = t2.c0 | t3.c1 = t1.c0"
    )
    assert window.text[slice(*window.column_spans[1 + 5])] == "country"
    assert window.text[slice(*window.column_spans[1 + 7])] == "concert name"
    _check_window(SMALL, window)
    assert serialize(SMALL, marks=()) == serialize(SMALL)


def test_windows_with_marked_values_keep_to_the_budget() -> None:
    def words(text: str) -> int:
        return len(text.split())

    marks = ((1, "kabul ; herat"), (5, "france"))
    whole = serialize(SMALL, marks=marks)
    assert windows(SMALL, words(whole.text), words, marks) == [whole]
    for budget in (12, 20, 30, words(whole.text) - 1):
        parts = windows(SMALL, budget, words, marks)
        assert len(parts) > 1
        _check_windows(SMALL, parts, budget, words, marks)
        shown = " ".join(part.text for part in parts)
        assert "location = kabul ; herat" in shown
        assert "country = france" in shown


def test_neighbourhood_order_visits_foreign_key_neighbours_next() -> None:
    # Tables 0..5; foreign keys join 0-3, 3-5 (5 references 3) and 4-1; table 2 stands alone.
    tables = tuple(Table(f"t{i}") for i in range(6))
    columns = tuple(Column(i, "id") for i in range(6))
    keys = (ForeignKey(3, 0), ForeignKey(5, 3), ForeignKey(4, 1))
    schema = Schema("s", tables, columns, keys)
    assert neighbourhood_order(schema) == [0, 3, 5, 1, 4, 2]
    assert neighbourhood_order(SMALL) == [0, 2, 3, 1]
    assert neighbourhood_order(Schema("none", tables, columns)) == list(range(6))


def test_neighbourhood_order_is_a_permutation_on_spider(
    spider: dict[str, Schema],
) -> None:
    for schema in spider.values():
        order = neighbourhood_order(schema)
        assert sorted(order) == list(range(len(schema.tables))), schema.name
        # Every table after the first of its connected part joins an earlier one.
        neighbours = {t: set[int]() for t in range(len(schema.tables))}
        for a, b in schema.table_edges:
            neighbours[a].add(b)
            neighbours[b].add(a)
        for position, table in enumerate(order):
            earlier = set(order[:position])
            if neighbours[table] & earlier:
                continue
            # A new component starts here: nothing earlier reaches it, and it is the smallest
            # table index not yet visited.
            assert table == min(set(range(len(schema.tables))) - earlier), schema.name


def test_windows_of_a_small_schema_under_a_word_budget() -> None:
    def words(text: str) -> int:
        return len(text.split())

    whole = serialize(SMALL)
    assert windows(SMALL, words(whole.text), words) == [whole]
    for budget in (1, 8, 12, 20, 30, 40, words(whole.text) - 1):
        parts = windows(SMALL, budget, words)
        assert len(parts) > 1
        _check_windows(SMALL, parts, budget, words)


@pytest.fixture(scope="module")
def count_tokens() -> Callable[[str], int]:
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


def test_spider_schemas_load(spider: dict[str, Schema]) -> None:
    assert len(spider) == 166
    for schema in spider.values():
        assert schema.columns, schema.name
        assert all(schema.table_columns), schema.name


def test_whole_spider_schemas_name_every_item_at_its_span(spider: dict[str, Schema]) -> None:
    for schema in spider.values():
        window = serialize(schema)
        assert window.tables == tuple(range(len(schema.tables))), schema.name
        assert window.columns == (STAR, *range(len(schema.columns))), schema.name
        _check_window(schema, window)


@pytest.mark.parametrize("budget", [60, 120, 250])
def test_spider_windows(
    spider: dict[str, Schema], count_tokens: Callable[[str], int], budget: int
) -> None:
    split = 0
    for schema in spider.values():
        parts = windows(schema, budget, count_tokens)
        _check_windows(schema, parts, budget, count_tokens)
        split += len(parts) > 1
    assert split > 0  # the budgets are small enough to split some schemas


def _text_columns(schema: Schema, how_many: int) -> Marks:
    text = [c for c, column in enumerate(schema.columns) if column.type == "text"]
    return tuple((c, "new york ; paris") for c in text[:how_many])


@pytest.mark.parametrize("budget", [24, 60, 120, 250])
def test_windows_add_up_the_pieces(
    spider: dict[str, Schema], count_tokens: Callable[[str], int], budget: int
) -> None:
    """The split `windows` computes from the pieces' sizes is the one that tokenizing every
    window tried gives (`benchmarks.schema_split.windows_by_whole_text`), with the real
    tokenizer, on every Spider schema, with values marked and without: the model sees exactly
    the windows it was trained on."""
    split = 0
    for schema in spider.values():
        for marks in ((), _text_columns(schema, 3)):
            expected = windows_by_whole_text(schema, budget, count_tokens, marks)
            assert windows(schema, budget, count_tokens, marks) == expected, schema.name
            split += len(expected) > 1
    assert split > 100


def test_windows_of_a_self_referencing_schema_count_each_key_once() -> None:
    def words(text: str) -> int:
        return len(text.split())

    # employee.manager references employee.id; office.head references employee.id
    tables = (Table("employee"), Table("office"))
    columns = (
        Column(0, "id"),
        Column(0, "name"),
        Column(0, "manager"),
        Column(1, "code"),
        Column(1, "head"),
    )
    schema = Schema("org", tables, columns, (ForeignKey(2, 0), ForeignKey(4, 0)))
    for budget in range(1, words(serialize(schema).text) + 2):
        assert windows(schema, budget, words) == windows_by_whole_text(schema, budget, words)


def _check_windows(
    schema: Schema,
    parts: list[Window],
    budget: int,
    count_tokens: Callable[[str], int],
    marks: Marks = (),
) -> None:
    name = schema.name
    whole = serialize(schema, marks=marks)
    fits = count_tokens(whole.text) <= budget
    assert (len(parts) == 1) == fits, name
    if fits:
        assert parts == [whole], name
    columns: Counter[int] = Counter()
    tables: set[int] = set()
    sequence: list[int] = []
    for window in parts:
        _check_window(schema, window)
        columns.update(c for c in window.columns if c != STAR)
        tables.update(window.tables)
        sequence.extend(t for t in window.tables if not sequence or sequence[-1] != t)
        single = len(window.tables) == 1 and len(window.columns) == 2
        assert single or count_tokens(window.text) <= budget, (name, window.text)
    assert columns == Counter(range(len(schema.columns))), name
    assert tables == set(range(len(schema.tables))), name
    if not fits:
        # Packed in foreign-key neighbourhood order (a split table's parts one after another).
        assert sequence == neighbourhood_order(schema), name


def _check_window(schema: Schema, window: Window) -> None:
    """Every item is named at its span, after the `t<i>: ` or `c<j>: ` that maps back to it, and
    the foreign keys written are exactly those between the window's own columns."""
    name, text = schema.name, window.text
    assert len(window.columns) == len(window.column_spans), name
    assert len(window.tables) == len(window.table_spans), name
    assert window.columns[0] == STAR, name
    assert text[slice(*window.column_spans[0])] == "*", name
    assert text.startswith(schema.name.replace("_", " ") + ": *"), name
    for table, (start, end) in zip(window.tables, window.table_spans, strict=True):
        assert text[start:end] == schema.tables[table].label, (name, table)
        written = _TABLE_NAME.search(text[:start])
        assert written is not None, (name, table)
        assert int(written.group(1)) == table, (name, table)
    starts = [start for start, _ in window.table_spans]
    assert starts == sorted(starts), name
    for column, (start, end) in zip(window.columns[1:], window.column_spans[1:], strict=True):
        assert text[start:end] == schema.columns[column].label, (name, column)
        written = _COLUMN_NAME.search(text[:start])
        assert written is not None, (name, column)
        # The table whose name comes last before the column is the one it is listed under.
        owner = window.tables[max(k for k, s in enumerate(starts) if s < start)]
        assert schema.columns[column].table == owner, (name, column)
        assert schema.table_columns[owner][int(written.group(1))] == column, (name, column)
    spans = sorted([*window.table_spans, *window.column_spans])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), name

    last_item = max(end for _, end in spans)
    keys = [
        (
            schema.table_columns[int(a)][int(x)],
            schema.table_columns[int(b)][int(y)],
        )
        for a, x, b, y in _FOREIGN_KEY.findall(text, last_item)
    ]
    visible = set(window.columns)
    expected = [
        (key.column, key.referenced)
        for key in schema.foreign_keys
        if key.column in visible and key.referenced in visible
    ]
    assert keys == expected, name
    assert all(a in visible and b in visible for a, b in keys), name


VOCABULARY = frozenset(
    {"surface", "area", "head", "of", "state", "pet", "type", "id", "paragraph", "country"}
)


def test_spelled_out_splits_run_together_names_into_words() -> None:
    schema = Schema(
        "world",
        (Table("country"), Table("headofstate"), Table("paragraphs")),
        (
            Column(0, "surfacearea", "real"),
            Column(0, "petid", "integer"),
            Column(0, "pettype"),
            Column(0, "SurfaceArea"),  # CamelCase is split already
            Column(0, "countryx"),  # no split into words: left alone
            Column(0, "areaarea", words="given words"),  # words of its own: kept
            Column(1, "id", "integer"),
            Column(2, "id", "integer"),
        ),
    )
    spelled = spelled_out(schema, VOCABULARY)
    assert [c.label for c in spelled.columns] == [
        "surface area",
        "pet id",
        "pet type",
        "surface area",
        "countryx",
        "given words",
        "id",
        "id",
    ]
    # a plural of a word is a word ("paragraphs"), not "para graphs"
    assert [t.label for t in spelled.tables] == ["country", "head of state", "paragraphs"]
    assert [c.name for c in spelled.columns] == [c.name for c in schema.columns]
    # nothing to split: the same schema
    plain = Schema("plain", (Table("country"),), (Column(0, "area"),))
    assert spelled_out(plain, VOCABULARY) is plain
