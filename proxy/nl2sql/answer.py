"""What the pipeline hands back for one question: the chosen SQL, the trace, and what went wrong.

These types are the pipeline's whole interface to its callers (the proxy session, `pgnl ask`,
the SQL functions, the benchmarks); they hold plain data only, so a caller needs nothing else
from `proxy.nl2sql` to show an answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

NO_ANSWER = "NL001"
"""SQLSTATE: no candidate query ran (implementation-defined class NL)."""
NOTHING_TO_ASK = "NL002"
"""SQLSTATE: the role can read no column of this database."""
SCHEMA_UNREADABLE = "NL003"
"""SQLSTATE: the catalog could not be read."""

Outcome = Literal["answered", "fallback", "failed"]
"""answered: a candidate ran and returned a non-empty, not all-NULL result; fallback: none did,
the best one that ran was chosen (a NOTICE says so); failed: no candidate ran."""

TRACE_COLUMNS = ("stage", "candidate", "score", "calibration", "outcome", "ms")
"""Column names of `-- nl explain:` rows, in order (`TraceRow.values`)."""


@dataclass(frozen=True)
class TraceRow:
    """One step of the pipeline: a stage, for one candidate (None: for the question), with the
    sketch's score where there is one, the calibrations it made, what happened, and its time."""

    stage: str
    candidate: int | None
    score: float | None
    calibration: str
    outcome: str
    ms: float

    def values(self) -> tuple[str, int | None, float | None, str, str, float]:
        return (self.stage, self.candidate, self.score, self.calibration, self.outcome, self.ms)


@dataclass(frozen=True)
class AnswerError:
    """Why no SQL could be chosen, as the ErrorResponse the client gets."""

    sqlstate: str
    message: str
    hint: str = ""
    detail: str = ""  # the last SQL tried, where there was one


@dataclass
class Answer:
    """The pipeline's result for one question."""

    question: str
    sql: str | None = None
    """The chosen query (None when `outcome` is failed)."""
    outcome: Outcome = "failed"
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    """The chosen query's result, as the pipeline's own execution returned it."""
    notices: list[str] = field(default_factory=list)
    """Messages for the client besides the SQL itself (a fall-back taken, an LLM that failed)."""
    trace: list[TraceRow] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Milliseconds spent in each stage, summed over candidates, and "total"."""
    candidates: list[str] = field(default_factory=list)
    """Every SQL text tried, in order."""
    error: AnswerError | None = None
