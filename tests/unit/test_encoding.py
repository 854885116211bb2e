"""The sketch model's input: windows that fit beside the question, the tokens that name each schema
item, and the padded batch (masks, pooling rows, token types) built from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from proxy.nl2sql.encoding import (
    MARKED_VALUES,
    MAX_QUESTION_TOKENS,
    EncodedWindow,
    WindowEncoder,
    batch,
    value_marks,
)
from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import STAR

TOKENIZER = (
    Path(__file__).resolve().parents[2] / "proxy" / "models" / "value_embedder" / "tokenizer.json"
)

LONG_QUESTION = (
    "For every stadium that hosted a concert in 2014 or 2015, list the name, the location, the "
    "capacity and the average attendance, together with the names of all the singers who sang "
    "there, their countries and ages, the titles of their songs and the years those songs came "
    "out, sorted by the capacity of the stadium from the largest to the smallest, and then by "
    "the name of the singer in alphabetical order, leaving out every concert whose theme was "
    "the same as that of an earlier concert held in the same stadium in a previous year."
)

# (database, question, max_length): schemas that fit in one window and schemas split into many
# (baseball_1 has 352 columns), short questions and one cut to MAX_QUESTION_TOKENS.
CASES = [
    ("concert_singer", "How many singers do we have?", 256),
    ("concert_singer", LONG_QUESTION, 256),
    ("concert_singer", "What is the average age of singers from France?", 64),
    ("baseball_1", "Which player won the most awards in 1990?", 256),
    ("baseball_1", LONG_QUESTION, 256),
    ("formula_1", "Give the names of drivers who finished first at Monaco.", 128),
    ("cre_Drama_Workshop_Groups", "What are the store names?", 128),
    ("sakila_1", "Which film has the longest rental duration (days)?", 128),
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER))


def _plain(text: str) -> str:
    return "".join(text.lower().split())


def _encode(
    tokenizer: Tokenizer, spider: dict[str, Schema], database: str, question: str, max_length: int
) -> tuple[Schema, list[EncodedWindow]]:
    schema = spider[database]
    return schema, WindowEncoder(tokenizer, max_length).encode(question, schema)


@pytest.mark.parametrize(("database", "question", "max_length"), CASES)
def test_windows_fit_and_name_every_item(
    tokenizer: Tokenizer, spider: dict[str, Schema], database: str, question: str, max_length: int
) -> None:
    schema, encoded = _encode(tokenizer, spider, database, question, max_length)
    assert encoded
    columns: list[int] = []
    for window in encoded:
        assert window.length <= max_length, window.window.text
        ids = window.input_ids
        question_tokens = window.schema_start - 2  # [CLS] question [SEP]
        assert 0 < question_tokens <= MAX_QUESTION_TOKENS
        assert ids[0] == tokenizer.token_to_id("[CLS]")
        assert ids[window.schema_start - 1] == ids[-1] == tokenizer.token_to_id("[SEP]")
        labels = ["*" if c == STAR else schema.columns[c].label for c in window.window.columns]
        table_labels = [schema.tables[t].label for t in window.window.tables]
        for positions, label in [
            *zip(window.column_tokens, labels, strict=True),
            *zip(window.table_tokens, table_labels, strict=True),
        ]:
            assert positions, label
            assert positions == tuple(range(positions[0], positions[-1] + 1)), label
            assert window.schema_start <= positions[0], label
            assert positions[-1] < window.length - 1, label
            assert _plain(tokenizer.decode([ids[p] for p in positions])) == _plain(label)
        columns.extend(c for c in window.window.columns if c != STAR)
    assert sorted(columns) == list(range(len(schema.columns)))
    # The question, cut to MAX_QUESTION_TOKENS, is the same in every window.
    heads = {tuple(w.input_ids[: w.schema_start]) for w in encoded}
    assert len(heads) == 1


def test_a_long_question_is_cut_and_short_ones_are_not(
    tokenizer: Tokenizer, spider: dict[str, Schema]
) -> None:
    schema = spider["concert_singer"]
    encoder = WindowEncoder(tokenizer, 256)
    assert len(encoder.question_ids(LONG_QUESTION)) == MAX_QUESTION_TOKENS
    cut = tokenizer.encode(LONG_QUESTION, add_special_tokens=False).ids[:MAX_QUESTION_TOKENS]
    for window in encoder.encode(LONG_QUESTION, schema):
        assert window.schema_start == MAX_QUESTION_TOKENS + 2
        assert window.input_ids[1 : window.schema_start - 1] == cut
    short = "How many singers do we have?"
    (window,) = encoder.encode(short, schema)
    expected = tokenizer.encode(short, add_special_tokens=False).ids
    assert window.input_ids[1 : window.schema_start - 1] == expected


def test_value_marks_show_a_few_sorted_values_of_each_column() -> None:
    named = {7: frozenset({"tour", "gig", "anniversary"}), 2: frozenset({"france"}), 3: frozenset()}
    assert MARKED_VALUES == 2
    assert value_marks(named) == ((2, "france"), (7, "anniversary ; gig"))
    assert value_marks({}) == ()


def test_marked_values_are_encoded_beside_their_column(
    tokenizer: Tokenizer, spider: dict[str, Schema]
) -> None:
    schema = spider["concert_singer"]
    country = next(i for i, c in enumerate(schema.columns) if c.label == "country" and c.table == 1)
    encoder = WindowEncoder(tokenizer, 256)
    question = "What is the average age of singers from France?"
    (plain,) = encoder.encode(question, schema)
    (marked,) = encoder.encode(question, schema, ((country, "france"),))
    assert "country = france" in marked.window.text
    assert "country = france" not in plain.window.text
    assert marked.length == plain.length + 2  # "=" and "france"
    position = marked.window.columns.index(country)
    tokens = marked.column_tokens[position]
    assert tokenizer.decode([marked.input_ids[t] for t in tokens]) == "country"
    after = marked.input_ids[tokens[-1] + 1 : tokens[-1] + 3]
    assert tokenizer.decode(after) == "= france"
    # marks change the split too: a schema is split under what it is shown with
    encoder_small = WindowEncoder(tokenizer, 128)
    many = tuple((c, "a value of many words here") for c in range(len(schema.columns)))
    assert len(encoder_small.encode(question, schema, many)) > len(
        encoder_small.encode(question, schema)
    )


def test_splitting_is_needed_where_the_schema_does_not_fit(
    tokenizer: Tokenizer, spider: dict[str, Schema]
) -> None:
    _, encoded = _encode(tokenizer, spider, "baseball_1", "How many players?", 256)
    assert len(encoded) > 5
    _, encoded = _encode(tokenizer, spider, "concert_singer", "How many singers?", 256)
    assert len(encoded) == 1


def test_batch(tokenizer: Tokenizer, spider: dict[str, Schema]) -> None:
    encoded: list[EncodedWindow] = []
    for database, question, max_length in CASES[:2] + CASES[5:7]:
        encoded.extend(_encode(tokenizer, spider, database, question, max_length)[1])
    arrays = batch(encoded)
    n = len(encoded)
    width = max(e.length for e in encoded)
    columns = max(len(e.column_tokens) for e in encoded)
    tables = max(len(e.table_tokens) for e in encoded)
    assert len({e.length for e in encoded}) > 1  # some rows are padded
    assert arrays.input_ids.shape == (n, width)
    assert arrays.attention_mask.shape == (n, width)
    assert arrays.token_type_ids.shape == (n, width)
    assert arrays.column_pool.shape == (n, columns, width)
    assert arrays.table_pool.shape == (n, tables, width)
    assert arrays.column_mask.shape == (n, columns)
    assert arrays.table_mask.shape == (n, tables)
    assert arrays.input_ids.dtype == np.int64
    assert arrays.column_pool.dtype == np.float32
    for row, item in enumerate(encoded):
        length = item.length
        assert arrays.input_ids[row, :length].tolist() == item.input_ids
        assert not arrays.input_ids[row, length:].any()
        assert arrays.attention_mask[row].tolist() == [1] * length + [0] * (width - length)
        types = [0] * item.schema_start + [1] * (length - item.schema_start)
        assert arrays.token_type_ids[row].tolist() == types + [0] * (width - length)
        # The tokenizer's own token types for the pair agree.
        assert types == _type_ids(tokenizer, item)
        for pool, mask, tokens in (
            (arrays.column_pool[row], arrays.column_mask[row], item.column_tokens),
            (arrays.table_pool[row], arrays.table_mask[row], item.table_tokens),
        ):
            real = len(tokens)
            assert mask.tolist() == [1.0] * real + [0.0] * (len(mask) - real)
            np.testing.assert_allclose(pool.sum(axis=1)[:real], 1.0, rtol=1e-6)
            assert not pool[real:].any()
            for k, positions in enumerate(tokens):
                assert np.flatnonzero(pool[k]).tolist() == list(positions)
            assert not pool[:, length:].any()


def test_batch_of_one_window(tokenizer: Tokenizer, spider: dict[str, Schema]) -> None:
    (item,) = _encode(tokenizer, spider, "concert_singer", "How many singers?", 256)[1]
    arrays = batch([item])
    assert arrays.input_ids.shape == (1, item.length)
    assert arrays.table_pool.shape == (1, len(item.table_tokens), item.length)
    assert arrays.attention_mask.all()


def _type_ids(tokenizer: Tokenizer, item: EncodedWindow) -> list[int]:
    question = tokenizer.decode(item.input_ids[1 : item.schema_start - 1])
    encoding = tokenizer.encode(question, item.window.text)
    assert encoding.ids == item.input_ids
    return list(encoding.type_ids)
