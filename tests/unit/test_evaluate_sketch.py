"""What the sketch benchmark counts as the stage's top-k (`model_export.evaluate_sketch.proposed`):
each part's first k distinct values, in the order of the ranked sketches."""

from __future__ import annotations

from model_export.evaluate_sketch import PARTS, REACH, accuracy, dev_questions, proposed
from proxy.nl2sql.sketch import STAR, SelectItem, Sketch
from proxy.nl2sql.sketcher import load_sketcher

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


def test_the_reach_of_the_models_candidates_grows_with_depth_from_its_own_top_k() -> None:
    """`model_reach`: the gold part among the sketch model's first N candidates; at N = K it is
    the model's own top-k, and it never falls as N grows."""
    questions = dev_questions(limit=40)
    figures = accuracy(load_sketcher(), questions, progress=False)
    reach = figures["model_reach"]
    assert set(reach) == set(PARTS)
    for part, k in zip(PARTS, (4, 2, 2), strict=True):
        shares = [reach[part][str(depth)] for depth in REACH[part]]
        assert shares == sorted(shares), (part, shares)
        assert reach[part][str(k)] == figures["model_top_k"][part]
    # deeper candidates find a gold SELECT the first four miss (on the first 40 dev questions)
    assert reach["select"]["32"] > reach["select"]["4"]
