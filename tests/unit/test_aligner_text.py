"""The aligner's input texts: a question beside a SELECT set and a keyword set, in words."""

from __future__ import annotations

import pytest

from proxy.nl2sql.aligner import keywords_words, pair_text, select_words
from proxy.nl2sql.schema import Column, Schema, Table
from proxy.nl2sql.sketch import STAR, SelectItem

SCHEMA = Schema(
    "concert_singer",
    (Table("stadium"), Table("singer"), Table("sic", words="singer in concert")),
    (
        Column(0, "Stadium_ID"),  # 0
        Column(0, "Capacity"),  # 1
        Column(1, "Singer_ID"),  # 2
        Column(1, "Name"),  # 3
        Column(1, "Country"),  # 4
        Column(1, "SongReleaseYear"),  # 5
        Column(2, "cid", words="concert id"),  # 6
    ),
)


@pytest.mark.parametrize(
    ("question", "select", "keywords", "expected"),
    [
        (
            "How many singers are there?",
            {SelectItem("count", STAR)},
            set(),
            "our solution: count ( * ) ; keywords: none",
        ),
        (
            "Names and countries of singers, oldest first.",
            {SelectItem("", 4), SelectItem("", 3)},
            ["desc", "order by", "where"],
            "our solution: singer . name , singer . country ; keywords: where, order by, desc",
        ),
        (
            "What is the largest capacity, and how many stadiums are there?",
            {SelectItem("max", 1), SelectItem("count", STAR), SelectItem("", 0)},
            ("limit", "order by", "asc", "asc"),
            "our solution: stadium . stadium id , count ( * ) , max ( stadium . capacity )"
            " ; keywords: order by, asc, limit",
        ),
        (
            "Distinct release years of songs in concerts?",
            [SelectItem("", 5), SelectItem("", 6)],
            {"nested", "distinct", "except"},
            "our solution: singer . song release year , singer in concert . concert id"
            " ; keywords: distinct, except, nested",
        ),
        (
            "  Which   stadium?  ",
            frozenset({SelectItem("avg", 1), SelectItem("sum", 1)}),
            frozenset({"group by", "having"}),
            "our solution: avg ( stadium . capacity ) , sum ( stadium . capacity )"
            " ; keywords: group by, having",
        ),
        (
            "Nothing at all",
            set(),
            set(),
            "our solution:  ; keywords: none",
        ),
    ],
)
def test_pair_text(
    question: str,
    select: set[SelectItem] | list[SelectItem],
    keywords: set[str] | list[str] | tuple[str, ...],
    expected: str,
) -> None:
    assert pair_text(question, select, keywords, SCHEMA) == (f"user question: {question}", expected)


def test_a_set_has_one_text_whatever_its_order() -> None:
    items = [SelectItem("", 3), SelectItem("count", STAR), SelectItem("max", 5)]
    assert select_words(items, SCHEMA) == select_words(reversed(items), SCHEMA)
    assert keywords_words(["limit", "where"]) == keywords_words(iter(["where", "limit"]))
    assert keywords_words([]) == "none"
