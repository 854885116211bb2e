"""`--shuffle-schemas`: a training question's schema shown in another order, numbered anew, and
still labelled as the schema it is (`model_export.schema_order`, `train_sketch.reordered`)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from model_export.schema_order import permuted, reordered_windows
from model_export.sketch_model import targets
from model_export.train_sketch import Example, reordered
from proxy.nl2sql.encoding import WindowEncoder, value_marks
from proxy.nl2sql.schema import Schema
from proxy.nl2sql.serialize import serialize
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots
from proxy.runtime import SHIPPED_MODELS_DIR, load_tokenizer


@pytest.fixture(scope="module")
def encoder() -> WindowEncoder:
    return WindowEncoder(load_tokenizer(SHIPPED_MODELS_DIR / "sketch" / "tokenizer.json", 512))


def test_a_permuted_schema_holds_the_same_tables_columns_and_keys(
    spider: dict[str, Schema],
) -> None:
    schema = spider["concert_singer"]
    shown, table_of, column_of = permuted(schema, random.Random(3))
    assert sorted(table_of) == list(range(len(schema.tables)))
    assert sorted(column_of) == list(range(len(schema.columns)))
    assert table_of != sorted(table_of)  # not the order it came in
    for new, old in enumerate(column_of):
        assert shown.qualified(new) == schema.qualified(old)
        assert shown.columns[new].primary_key == schema.columns[old].primary_key
    assert {
        (shown.qualified(k.column), shown.qualified(k.referenced)) for k in shown.foreign_keys
    } == {(schema.qualified(k.column), schema.qualified(k.referenced)) for k in schema.foreign_keys}


def test_a_reordered_window_names_each_item_of_the_schema_as_it_is(
    spider: dict[str, Schema], encoder: WindowEncoder
) -> None:
    """Tables and columns are numbered in the order shown, and every span still names the
    schema's own item the window maps it to, the values beside their own columns."""
    schema = spider["concert_singer"]
    france = schema.column_index(schema.table_index("singer"), "Country")
    marks = value_marks({france: ["france"]})
    question = "How many singers are from France?"
    (plain,) = encoder.encode(question, schema, marks)
    (shown,) = reordered_windows(encoder, question, schema, marks, random.Random(5)) or ()
    window = shown.window
    assert window.text != plain.window.text
    assert window.text.startswith("concert singer: * | t0: ")
    assert " | t1: " in window.text and " c0: " in window.text
    assert sorted(window.tables) == sorted(plain.window.tables)
    assert sorted(window.columns) == sorted(plain.window.columns)
    for table, (start, end) in zip(window.tables, window.table_spans, strict=True):
        assert window.text[start:end] == schema.tables[table].label
    for column, (start, end) in zip(window.columns, window.column_spans, strict=True):
        label = "*" if column == STAR else schema.columns[column].label
        assert window.text[start:end] == label
        if column == france:
            assert window.text[end:].startswith(" = france")
    assert window.text.count(" = france") == 1


def test_a_reordered_window_is_labelled_as_the_schema_is(
    spider: dict[str, Schema], encoder: WindowEncoder
) -> None:
    """Each item's targets follow it to wherever it is shown."""
    schema = spider["concert_singer"]
    singer = schema.table_index("singer")
    name = schema.column_index(singer, "Name")
    age = schema.column_index(singer, "Age")
    label = Sketch(
        select=frozenset({SelectItem("", name), SelectItem("count", STAR)}),
        tables=frozenset({singer}),
        keywords=frozenset({"where"}),
        slots=Slots(where=(Predicate(age, ">"),)),
    )
    question = "Which singers are older than 40?"
    (plain,) = encoder.encode(question, schema)
    (shown,) = reordered_windows(encoder, question, schema, (), random.Random(8)) or ()
    plain_columns, plain_tables, plain_question = targets(label, plain)
    shown_columns, shown_tables, shown_question = targets(label, shown)
    assert plain_columns.any() and plain_tables.any()
    rows = {column: row for row, column in enumerate(plain.window.columns)}
    for row, column in enumerate(shown.window.columns):
        np.testing.assert_array_equal(shown_columns[row], plain_columns[rows[column]])
    tables = {table: row for row, table in enumerate(plain.window.tables)}
    for row, table in enumerate(shown.window.tables):
        assert shown_tables[row] == plain_tables[tables[table]]
    np.testing.assert_array_equal(shown_question, plain_question)


def test_a_schema_split_into_windows_is_not_reordered(
    spider: dict[str, Schema], encoder: WindowEncoder
) -> None:
    schema = spider["baseball_1"]
    assert len(encoder.encode("Which player won the most awards?", schema)) > 1
    assert (
        reordered_windows(
            encoder, "Which player won the most awards?", schema, (), random.Random(1)
        )
        is None
    )


def test_an_epoch_reorders_the_same_questions_the_same_way_and_the_next_anew(
    spider: dict[str, Schema], encoder: WindowEncoder
) -> None:
    label = Sketch(
        select=frozenset({SelectItem("count", STAR)}), tables=frozenset({0}), keywords=frozenset()
    )
    examples = []
    for database in ("concert_singer", "pets_1", "baseball_1", "world_1", "car_1") * 4:
        schema = spider[database]
        question = f"How many rows has {database}?"
        windows = tuple(encoder.encode(question, schema))
        examples.append(Example(question, schema, label, windows))
    assert reordered(examples, encoder, 0.0, 7, 0) == examples
    first = reordered(examples, encoder, 0.5, 7, 0)
    assert first == reordered(examples, encoder, 0.5, 7, 0)
    assert first != reordered(examples, encoder, 0.5, 7, 1)
    changed = [a for a, b in zip(examples, first, strict=True) if a != b]
    assert 0 < len(changed) < len(examples)
    assert all(len(a.windows) == 1 for a in changed)
    everything = reordered(examples, encoder, 1.0, 7, 0)
    for before, after in zip(examples, everything, strict=True):
        assert len(after.windows) == len(before.windows)
        if len(before.windows) > 1:
            assert after == before
        else:
            assert after.windows[0].window != serialize(before.schema)
