"""What the sketch benchmark counts as the stage's top-k (`model_export.evaluate_sketch.proposed`):
each part's first k distinct values, in the order of the ranked sketches."""

from __future__ import annotations

from model_export.evaluate_sketch import proposed
from proxy.nl2sql.sketch import STAR, SelectItem, Sketch

COUNT = frozenset({SelectItem("count", STAR)})
NAME = frozenset({SelectItem("", 0)})
AGE = frozenset({SelectItem("", 1)})


def sketch(select: frozenset[SelectItem], tables: set[int], keywords: set[str]) -> Sketch:
    return Sketch(select=select, tables=frozenset(tables), keywords=frozenset(keywords))


def test_each_part_keeps_its_first_distinct_values() -> None:
    ranked = [
        sketch(COUNT, {0}, set()),
        sketch(COUNT, {0, 1}, set()),  # the same pair with its second FROM set
        sketch(NAME, {0}, {"where"}),
        sketch(NAME, {2}, {"where"}),
        sketch(AGE, {1}, {"order by", "limit"}),
    ]
    selects, froms, keywords = proposed(ranked, (2, 2, 2))
    assert selects == [COUNT, NAME]  # AGE is the third distinct SELECT: beyond K1 = 2
    assert froms == [frozenset({0}), frozenset({0, 1})]
    assert keywords == [frozenset(), frozenset({"where"})]
    selects, froms, keywords = proposed(ranked, (4, 3, 1))
    assert selects == [COUNT, NAME, AGE]
    assert froms == [frozenset({0}), frozenset({0, 1}), frozenset({2})]
    assert keywords == [frozenset()]
