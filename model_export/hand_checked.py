"""Hand-checked questions whose best sketch a shipped model must get right, whatever its form.

Dev accuracy is measured over 1034 questions, where a smaller form of a model can win as many as
it loses; these are the plain questions a user tries first. The exporter does not ship a smaller
form that gets one of them wrong where fp32 gets it right (`export_sketch`), and
`tests/unit/test_sketcher.py` checks the shipped models on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import Sketch
from proxy.nl2sql.sketcher import Sketcher

MUSIC = Schema(
    name="music",
    tables=(Table("singer"), Table("concert"), Table("singer_in_concert")),
    columns=(
        Column(0, "singer_id", "number", primary_key=True),
        Column(0, "name"),
        Column(0, "country"),
        Column(0, "age", "number"),
        Column(1, "concert_id", "number", primary_key=True),
        Column(1, "concert_name"),
        Column(1, "year", "number"),
        Column(2, "concert_id", "number"),
        Column(2, "singer_id", "number"),
    ),
    foreign_keys=(ForeignKey(7, 4), ForeignKey(8, 0)),
)


@dataclass(frozen=True)
class HandChecked:
    question: str
    schema: Schema
    tables: frozenset[int]
    """The FROM tables, by index."""
    select: str | None = None
    """The SELECT as `Sketch.select_text` writes it (None: not checked)."""
    keywords: frozenset[str] = frozenset()
    """Keywords the best sketch must hold (it may hold more)."""

    def answered_by(self, sketch: Sketch) -> bool:
        return (
            sketch.tables == self.tables
            and (self.select is None or sketch.select_text(self.schema) == self.select)
            and self.keywords <= sketch.keywords
        )


QUESTIONS = (
    HandChecked("How many singers are there?", MUSIC, frozenset({0}), select="count(*)"),
    HandChecked(
        "What is the name of the oldest singer?",
        MUSIC,
        frozenset({0}),
        keywords=frozenset({"order by", "desc", "limit"}),
    ),
)


def missed(sketcher: Sketcher, questions: Sequence[HandChecked] = QUESTIONS) -> list[str]:
    """The questions whose best sketch is not right."""
    return [
        item.question
        for item in questions
        if not item.answered_by(sketcher.sketch(item.question, item.schema)[0])
    ]
