"""A candidate query on its way through the stages, and the choice among them.

A `Candidate` starts as a ranked sketch (number 1 the best; `UNGUIDED`, number 0, the LLM's own
query written without one); completion gives it SQL, the check its rows, calibration a
corrected SQL. The search chooses one (`Chosen`): answered, or a fall-back with a NOTICE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.nl2sql.answer import Outcome
from proxy.nl2sql.prompts import Message
from proxy.nl2sql.sketch import Sketch

UNGUIDED = 0
"""The candidate number, in the trace, of the LLM's own query (written without a sketch)."""

ANSWERED: Outcome = "answered"
FALLBACK: Outcome = "fallback"


@dataclass
class Candidate:
    number: int
    sketch: Sketch
    sql: str = ""
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    conversation: list[Message] = field(default_factory=list)
    unfilled: bool = False  # PLM-only completion found no value for a WHERE predicate
    unvalued: int | None = None  # the column of that predicate, where the completion named it
    unguided: bool = False  # the LLM's own query, written without the sketch


@dataclass(frozen=True)
class Chosen:
    """The candidate a selection chose, how, and the NOTICE that goes with it."""

    candidate: Candidate
    outcome: Outcome
    notice: str = ""


def has_values(rows: Sequence[tuple[Any, ...]]) -> bool:
    """Non-empty and not all NULL: Algorithm 2's test of a useful result."""
    return any(value is not None for row in rows for value in row)
