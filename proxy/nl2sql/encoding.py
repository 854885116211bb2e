"""The sketch model's input: a question and one schema window as token ids, plus, for every
schema item in the window, which tokens name it.

The same code feeds training (`model_export/`) and the runtime (`proxy.nl2sql.sketcher`), so the
model sees at inference exactly what it was trained on. Nothing here imports torch.

`column_pool[k]` and `table_pool[k]` are rows over the token positions that average the tokens of
item k's name (`Window.column_spans`, `Window.table_spans`): the model reads an item as
`pool @ hidden_states`, a plain matrix product that exports to ONNX as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from proxy.nl2sql.schema import Schema
from proxy.nl2sql.serialize import Marks, Sizes, Span, Window, windows

MAX_LENGTH = 256
"""Tokens a window may take, question and schema together (the models are trained at this)."""
MAX_QUESTION_TOKENS = 96
"""A longer question is cut to this many tokens, so that every window keeps room for schema."""
MARKED_VALUES = 2
"""A value-reading model is shown at most this many of the values a question names in one column
(the first in sorted order)."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class EncodedWindow:
    window: Window
    input_ids: list[int]
    column_tokens: tuple[tuple[int, ...], ...]
    table_tokens: tuple[tuple[int, ...], ...]
    schema_start: int

    @property
    def length(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class Batch:
    """Padded arrays for a list of encoded windows, as the exported model takes them."""

    input_ids: IntArray
    attention_mask: IntArray
    token_type_ids: IntArray
    column_pool: FloatArray
    table_pool: FloatArray
    column_mask: FloatArray
    table_mask: FloatArray


def value_marks(named: Mapping[int, Iterable[str]]) -> Marks:
    """What a value-reading sketch model is shown beside each column: the values of it the
    question names (`NamedValues.columns`: column -> normalised values), at most MARKED_VALUES,
    joined by ` ; `."""
    return tuple(
        (column, " ; ".join(sorted(values)[:MARKED_VALUES]))
        for column, values in sorted(named.items())
        if values
    )


def _tokens_in(encoding: Encoding, span: Span) -> tuple[int, ...]:
    start, end = span
    return tuple(
        position
        for position, (sequence, (a, b)) in enumerate(
            zip(encoding.sequence_ids, encoding.offsets, strict=True)
        )
        if sequence == 1 and a < end and b > start
    )


class WindowEncoder:
    """Splits a schema into windows that fit beside a question and encodes them."""

    def __init__(self, tokenizer: Tokenizer, max_length: int = MAX_LENGTH) -> None:
        self.tokenizer = tokenizer
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.max_length = max_length
        # A split adds up the tokens of the schema's pieces, counted once per schema asked
        # about; a question's room and the values it names change only the sums.
        self._sizes = functools.lru_cache(maxsize=128)(self._count_pieces)
        self._windows = functools.lru_cache(maxsize=128)(self._split)

    def _count_pieces(self, schema: Schema) -> Sizes:
        return Sizes.of(schema, self.count_tokens)

    def _split(self, schema: Schema, budget: int, marks: Marks) -> tuple[Window, ...]:
        return tuple(windows(schema, budget, self.count_tokens, marks, self._sizes(schema)))

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def question_ids(self, question: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(question, add_special_tokens=False).ids
        return ids[:MAX_QUESTION_TOKENS]

    def encode(self, question: str, schema: Schema, marks: Marks = ()) -> list[EncodedWindow]:
        """The windows of `schema` beside `question`; `marks`: the values shown beside their
        columns (`value_marks`), for a model that reads them."""
        question_text = self.tokenizer.decode(self.question_ids(question))
        used = len(self.question_ids(question_text)) + 3  # [CLS] question [SEP] schema [SEP]
        return [
            self._encode_window(question_text, window)
            for window in self._windows(schema, self.max_length - used, marks)
        ]

    def _encode_window(self, question: str, window: Window) -> EncodedWindow:
        encoding = self.tokenizer.encode(question, window.text)
        column_tokens = tuple(_tokens_in(encoding, span) for span in window.column_spans)
        table_tokens = tuple(_tokens_in(encoding, span) for span in window.table_spans)
        return EncodedWindow(
            window=window,
            input_ids=list(encoding.ids),
            column_tokens=column_tokens,
            table_tokens=table_tokens,
            schema_start=encoding.sequence_ids.index(1),
        )


def _pool(rows: Sequence[tuple[int, ...]], width: int, items: int) -> FloatArray:
    pool = np.zeros((items, width), dtype=np.float32)
    for row, tokens in enumerate(rows):
        if tokens:
            pool[row, list(tokens)] = 1.0 / len(tokens)
    return pool


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def batch(
    encoded: Sequence[EncodedWindow], *, token_multiple: int = 1, item_multiple: int = 1
) -> Batch:
    """Pad a list of windows to the longest of each dimension, rounded up to a multiple of
    `token_multiple` (tokens) and `item_multiple` (columns, tables)."""
    width = _round_up(max(e.length for e in encoded), token_multiple)
    columns = _round_up(max(len(e.column_tokens) for e in encoded), item_multiple)
    tables = _round_up(max(1, *(len(e.table_tokens) for e in encoded)), item_multiple)
    n = len(encoded)
    input_ids = np.zeros((n, width), dtype=np.int64)
    attention_mask = np.zeros((n, width), dtype=np.int64)
    token_type_ids = np.zeros((n, width), dtype=np.int64)
    column_pool = np.zeros((n, columns, width), dtype=np.float32)
    table_pool = np.zeros((n, tables, width), dtype=np.float32)
    column_mask = np.zeros((n, columns), dtype=np.float32)
    table_mask = np.zeros((n, tables), dtype=np.float32)
    for row, item in enumerate(encoded):
        input_ids[row, : item.length] = item.input_ids
        attention_mask[row, : item.length] = 1
        token_type_ids[row, item.schema_start : item.length] = 1
        column_pool[row, : len(item.column_tokens)] = _pool(
            item.column_tokens, width, len(item.column_tokens)
        )
        table_pool[row, : len(item.table_tokens)] = _pool(
            item.table_tokens, width, len(item.table_tokens)
        )
        column_mask[row, : len(item.column_tokens)] = 1.0
        table_mask[row, : len(item.table_tokens)] = 1.0
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        column_pool=column_pool,
        table_pool=table_pool,
        column_mask=column_mask,
        table_mask=table_mask,
    )
