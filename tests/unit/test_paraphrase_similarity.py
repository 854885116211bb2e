"""benchmarks.paraphrase_similarity's table: the share of questions at least a threshold
close, and the precision and recall of "same query" among them."""

from __future__ import annotations

from benchmarks.paraphrase_similarity import _normalised, report


def test_the_table_counts_what_each_threshold_keeps() -> None:
    pairs = [(0.95, True), (0.9, True), (0.85, False), (0.6, True), (0.5, False)]
    lines = report(pairs, [0.8, 0.99])
    assert lines[0] == (
        "5 questions; the nearest other question of the database is the same query for 60%"
    )
    assert lines[3] == "| 0.80 | 60% | 67% | 67% |"
    assert lines[4] == "| 0.99 | 0% | none kept | 0% |"


def test_the_same_query_is_compared_without_case_spacing_or_semicolon() -> None:
    assert _normalised("SELECT  count(*)\nFROM singer;") == _normalised(
        "select count(*) from singer"
    )
