"""One question as every stage sees it: its text, the schema it is asked over, the literals it
types, and the trace its stages write (`Question`); and the base of the stage classes, which
hold one question's state (`Stage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.nl2sql.complete_plm import Literal, question_literals
from proxy.nl2sql.schema import Schema
from proxy.nl2sql.trace import Trace


@dataclass(frozen=True)
class Question:
    text: str
    schema: Schema
    trace: Trace
    typed: tuple[Literal, ...]
    """The values the question types: quoted strings and numbers (`question_literals`)."""

    @classmethod
    def over(cls, text: str, schema: Schema, trace: Trace) -> Question:
        return cls(text, schema, trace, tuple(question_literals(text)))


class Stage:
    """A stage's state for one question (a new one per question, never shared)."""

    def __init__(self, question: Question) -> None:
        self.asked = question
        self.question = question.text
        self.schema = question.schema
        self.trace = question.trace
        self.typed = list(question.typed)
