"""The aligner's training pairs (`model_export.train_aligner.candidate_pairs`): the sketch
model's SELECT x KEYWORDS combinations of one question, as wide as `--select-k`, at most
`--max-pairs` of them (the most probable), the right one always among them."""

from __future__ import annotations

import numpy as np

from model_export.train_aligner import candidate_pairs
from model_export.train_sketch import Example
from proxy.nl2sql.schema import Column, Schema, Table
from proxy.nl2sql.sketch import (
    COLUMN_OUTPUTS,
    KEYWORDS,
    QUESTION_OUTPUTS,
    SELECT_OUTPUTS,
    SelectItem,
    Sketch,
    SketchScores,
)

SINGERS = Schema(
    "concerts",
    (Table("singer"),),
    (Column(0, "name"), Column(0, "country"), Column(0, "age", "number"), Column(0, "song")),
)
NAME, COUNTRY, AGE, SONG = range(4)


def scores() -> SketchScores:
    columns = np.full((len(SINGERS.columns) + 1, COLUMN_OUTPUTS), -9.0, dtype=np.float32)
    plain = SELECT_OUTPUTS.start  # the first SELECT output: the column itself, no aggregate
    for column, logit in ((NAME, 3.0), (COUNTRY, -0.5), (AGE, -1.0), (SONG, -1.5)):
        columns[column + 1, plain] = logit
    question = np.full(QUESTION_OUTPUTS, -6.0, dtype=np.float32)
    question[KEYWORDS.index("where")] = -1.0  # no WHERE first, WHERE second
    return SketchScores(columns, np.zeros(1, dtype=np.float32), question)


def example(select: set[int]) -> Example:
    label = Sketch(
        select=frozenset(SelectItem("", c) for c in select),
        tables=frozenset({0}),
        keywords=frozenset(),
    )
    return Example("Show the names of singers.", SINGERS, label, ())


def test_pairs_are_as_wide_as_select_k() -> None:
    four = candidate_pairs(example({NAME}), scores(), add_gold=True)
    eight = candidate_pairs(example({NAME}), scores(), add_gold=True, select_k=8)
    assert len(four) == 4 * 2 and len(eight) == 8 * 2
    assert sum(p["select_right"] and p["keywords_right"] for p in eight) == 1


def test_max_pairs_keeps_the_most_probable_and_adds_the_right_one() -> None:
    # the right SELECT (name, age, song) is far down the sketch model's list
    pairs = candidate_pairs(
        example({NAME, AGE, SONG}), scores(), add_gold=True, select_k=8, max_pairs=3
    )
    assert len(pairs) == 4
    assert [p["select_right"] and p["keywords_right"] for p in pairs] == [False] * 3 + [True]
    logps = [p["sketch_logp"] for p in pairs[:3]]
    assert logps == sorted(logps, reverse=True)
    # the first is the most probable of all: name alone, no WHERE
    assert pairs[0]["keywords_right"] and not pairs[0]["select_right"]
    # a question whose right pair is among the kept ones gets no extra one
    kept = candidate_pairs(example({NAME}), scores(), add_gold=True, select_k=8, max_pairs=3)
    assert len(kept) == 3 and kept[0]["select_right"] and kept[0]["keywords_right"]
