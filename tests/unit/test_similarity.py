"""Similarity methods on the kinds of errors users and LLMs make with values (table-driven)."""

from __future__ import annotations

import pytest

from proxy.nl2sql import similarity

R = 0.65  # the calibration threshold

# (literal, the value meant, a plausible wrong value)
ERRORS = [
    ("timmothy", "Timmy", "Tammy Ward"),  # typo-ish spelling
    ("new york", "New York", "Newark"),  # case
    ("NY", "New York", "Nevada"),  # initials
    ("HI", "Hawaii", "Ohio"),  # postal code
    ("Ward Timmy", "Timmy Ward", "Tim Wardell"),  # word order
    ("Timmy", "Timmy Ward", "Tammy Ward"),  # partial name
    ("students", "student", "studio"),  # plural
    ("Calculus 1", "Calculus I", "Cell Biology"),
]


@pytest.mark.parametrize(("literal", "meant", "wrong"), ERRORS)
def test_hybrid_prefers_the_value_meant(literal: str, meant: str, wrong: str) -> None:
    right = similarity.hybrid(literal, meant)
    assert right >= R, f"{literal!r} -> {meant!r} scored {right:.2f}"
    assert right > similarity.hybrid(literal, wrong)


@pytest.mark.parametrize(
    ("literal", "value", "expected"),
    [
        ("abc", "abc", 1.0),
        ("abc", "ABC", 1.0),
        ("café", "cafe", 1.0),
        ("abcd", "abce", 0.5),  # one substitution is two indels: 1 - 2/4
        ("a", "xyz", 0.0),
        ("", "", 1.0),
    ],
)
def test_indel_formula(literal: str, value: str, expected: float) -> None:
    assert similarity.indel(literal, value) == pytest.approx(expected)


def test_trigram_similarity_matches_pg_trgm_on_known_values() -> None:
    # SELECT similarity('word', 'two words') = 0.36363637 in PostgreSQL
    assert similarity.trigram_similarity("word", "two words") == pytest.approx(0.363636, abs=1e-5)
    assert similarity.trigram_similarity("abc", "abc") == 1.0


@pytest.mark.parametrize(
    ("code", "value", "scored"),
    [
        ("NY", "New York", True),
        ("UK", "United Kingdom", True),
        ("HI", "Hawaii", True),
        ("TX", "Texas", True),
        ("hi", "Hawaii", False),  # lower-case words are words, not codes
        ("XY", "Texas", False),
        ("TEXAS", "Texas", False),
        ("N1", "New York", False),
    ],
)
def test_abbreviation(code: str, value: str, scored: bool) -> None:
    assert (similarity.abbreviation(code, value) > 0) is scored


def test_glove_relates_words_not_letters() -> None:
    glove = similarity.GloVe.load()
    near, far = glove.similarity("automobile", ["car", "banana"])
    assert near > far
    assert glove.similarity("zzqxv", ["car"]) == [0.0]  # no vector: no similarity
