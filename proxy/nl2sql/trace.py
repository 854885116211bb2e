"""One question's record as the stages write it: the `Answer` being built, a row of its trace
and a timing for each stage a block runs (`Trace.stage`), and the NOTICEs for the client.

Every stage module writes through a `Trace`, so `-- nl explain:` and the query log show the
stages in the order they ran, whichever module ran them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.nl2sql.answer import Answer, TraceRow

if TYPE_CHECKING:
    from proxy.nl2sql.candidate import Candidate


@dataclass
class Step:
    """What a stage says of itself in the trace."""

    outcome: str = "interrupted"
    note: str = ""  # the trace's calibration column: corrections, moved predicates

    def add(self, note: str) -> None:
        """One more note, after those the step has ("; " between)."""
        if note:
            self.note = f"{self.note}; {note}" if self.note else note


def rules_note(fired: Sequence[str]) -> str:
    """The note that names the PLM-only rules that changed a stage's sketches (`rules`): the
    benchmarks read it back from the trace."""
    return "rules: " + ", ".join(fired) if fired else ""


def one_line(text: str, limit: int = 300) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Trace:
    """The answer of one question, written as its stages run."""

    def __init__(self, question: str) -> None:
        self.result = Answer(question=question)

    @contextmanager
    def stage(
        self, name: str, candidate: Candidate | None = None, *, since: float | None = None
    ) -> Iterator[Step]:
        """Time a stage (from `since`, a `time.perf_counter()` reading, when the work came
        before the block); the block says its outcome (and a note) on the `Step`."""
        step = Step()
        start = time.perf_counter() if since is None else since
        try:
            yield step
        finally:
            ms = (time.perf_counter() - start) * 1000
            timings = self.result.timings_ms
            timings[name] = timings.get(name, 0.0) + ms
            self.result.trace.append(
                TraceRow(
                    stage=name,
                    candidate=candidate.number if candidate else None,
                    score=(
                        round(candidate.sketch.score, 4)
                        if candidate and not candidate.unguided
                        else None
                    ),
                    calibration=step.note,
                    outcome=step.outcome,
                    ms=round(ms, 3),
                )
            )

    def notice(self, text: str) -> None:
        """A NOTICE for the client (once, however often a stage says it)."""
        if text not in self.result.notices:
            self.result.notices.append(text)

    def tried(self, sql: str) -> None:
        """An SQL text the pipeline tried (`Answer.candidates`)."""
        self.result.candidates.append(sql)

    @property
    def last_tried(self) -> str:
        return self.result.candidates[-1] if self.result.candidates else ""
