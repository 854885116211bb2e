"""Training-time augmentation: a question's schema shown in another order.

Spider's 140 training databases always come in the order their authors wrote them, and a model
trained on them can learn where an item sits instead of what it is called. `--shuffle-schemas P`
(`train_sketch`) shows each training question, with probability P and a fresh order every epoch,
its schema with the tables in a random order and each table's columns in a random order, numbered
anew (`t0`, `t1`, ... and `c0`, `c1`, ... in the order shown, foreign keys with them), through the
same `serialize` and `WindowEncoder` as the runtime. Only the window's items are mapped back to the
schema's own indexes, so the labels and the loss are those of the schema as it is.

A schema split into several windows is shown as it is: its windows depend on the order (they are
packed in foreign-key order), and an epoch's batches must keep the same windows for a resumed run
to continue where it stopped (`training.Loop`).
"""

from __future__ import annotations

import random
from dataclasses import replace

from proxy.nl2sql.encoding import EncodedWindow, WindowEncoder
from proxy.nl2sql.schema import Column, ForeignKey, Schema
from proxy.nl2sql.serialize import Marks
from proxy.nl2sql.sketch import STAR


def permuted(schema: Schema, rng: random.Random) -> tuple[Schema, list[int], list[int]]:
    """`schema` with its tables, and the columns of each, in a random order; and, for each table
    and column of the new schema, its index in `schema` (new -> old)."""
    table_order = list(range(len(schema.tables)))
    rng.shuffle(table_order)
    new_table = {old: new for new, old in enumerate(table_order)}
    column_order: list[int] = []
    for old_table in table_order:
        in_table = list(schema.table_columns[old_table])
        rng.shuffle(in_table)
        column_order.extend(in_table)
    new_column = {old: new for new, old in enumerate(column_order)}
    columns: list[Column] = [
        replace(schema.columns[old], table=new_table[schema.columns[old].table])
        for old in column_order
    ]
    keys = tuple(
        ForeignKey(new_column[key.column], new_column[key.referenced])
        for key in schema.foreign_keys
    )
    shown = Schema(
        name=schema.name,
        tables=tuple(schema.tables[old] for old in table_order),
        columns=tuple(columns),
        foreign_keys=keys,
    )
    return shown, table_order, column_order


def reordered_windows(
    encoder: WindowEncoder,
    question: str,
    schema: Schema,
    marks: Marks,
    rng: random.Random,
) -> tuple[EncodedWindow, ...] | None:
    """The question beside `schema` in a random order (`permuted`), encoded as the runtime
    encodes it, with each window's tables and columns given by their indexes in `schema`; None
    where the schema does not fit in one window."""
    shown, table_of, column_of = permuted(schema, rng)
    position = {old: new for new, old in enumerate(column_of)}
    shown_marks = tuple(sorted((position[column], text) for column, text in marks))
    encoded = encoder.encode(question, shown, shown_marks)
    if len(encoded) != 1:
        return None
    (only,) = encoded
    window = replace(
        only.window,
        tables=tuple(table_of[t] for t in only.window.tables),
        columns=tuple(STAR if c == STAR else column_of[c] for c in only.window.columns),
    )
    return (replace(only, window=window),)
