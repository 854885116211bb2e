"""The complete stage: a candidate's sketch made into SQL, by the LLM or by PLM-only completion.

With an LLM ([llm] selection `first`), the best [llm] max_completions sketches are completed by
it (the question, the schema, a few values of the columns the sketch names, the sketch:
`prompts.sketch_completion`), and the LLM's own query, written without a sketch, is one more
candidate (`complete_unguided`); the other sketches, and every sketch without an LLM, are
completed by `complete_plm` after the values stage (`grounding`). An LLM that does not answer is
not asked again for the question (`llm` becomes None), with a NOTICE; an answer of it with no
usable query fails that candidate only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from proxy.nl2sql import rules
from proxy.nl2sql.agreement import FIRST
from proxy.nl2sql.candidate import Candidate
from proxy.nl2sql.complete_plm import CompletionError, Literal, complete
from proxy.nl2sql.grounding import Grounding
from proxy.nl2sql.llm import Completion, LLMAnswerError, LLMError
from proxy.nl2sql.prompts import (
    NO_EXAMPLES,
    Examples,
    Message,
    sketch_completion,
    unguided_completion,
)
from proxy.nl2sql.question import Question, Stage
from proxy.nl2sql.relaxations import tables_named_by
from proxy.nl2sql.sketch import Sketch
from proxy.nl2sql.trace import Step, one_line, rules_note


class LLM(Protocol):
    """What the pipeline asks of an LLM: one read-only query for the messages, with the tokens it
    cost (blocking); raises `LLMError` (`proxy.nl2sql.llm.BlockingLLM` is the one over
    `LLMCompleter`)."""

    @property
    def model(self) -> str: ...

    def complete(self, messages: Sequence[Message]) -> Completion: ...


class Completer(Stage):
    """One question's completions; `llm` is None without an LLM or once it failed."""

    def __init__(
        self,
        question: Question,
        grounding: Grounding,
        llm: LLM | None,
        *,
        selection: str,
        max_completions: int,
        disabled_rules: frozenset[str] = frozenset(),
        examples: Examples = NO_EXAMPLES,
    ) -> None:
        super().__init__(question)
        self.examples = examples  # statements of the query history shown to the LLM
        self.grounding = grounding
        self.llm = llm
        self.selection = selection  # [llm] selection
        self.max_completions = max_completions  # [llm] max_completions
        self.completions = 0  # sketches the LLM completed for this question
        self.disabled_rules = disabled_rules  # [pipeline] disabled_rules

    @property
    def search_llm(self) -> LLM | None:
        """The LLM the candidate search asks: none under selection `llm-first`, where the search
        is the sketch models' own answer and the LLM is asked after it
        (`search.Search.llm_first`)."""
        return self.llm if self.selection == FIRST else None

    def complete(self, candidate: Candidate) -> bool:
        if candidate.unguided:
            return self.complete_unguided(candidate)
        if self.search_llm is not None and self.completions < self.max_completions:
            self.completions += 1
            messages = sketch_completion(
                self.question,
                self.schema,
                candidate.sketch,
                self.grounding.samples_for(candidate),
                examples=self.examples,
            )
            if self._ask_llm(candidate, messages, "LLM"):
                return True
        return self.complete_plm(candidate)

    def complete_unguided(self, candidate: Candidate) -> bool:
        """The LLM's own query for the question: the schema, the values the question names, no
        sketch."""
        if self.llm is None:
            return False
        messages = unguided_completion(
            self.question, self.schema, self.grounding.samples, examples=self.examples
        )
        return self._ask_llm(candidate, messages, "LLM, without the sketch")

    def _ask_llm(self, candidate: Candidate, messages: list[Message], outcome: str) -> bool:
        """The candidate's SQL from the LLM. An answer with no usable query fails this candidate
        only; an LLM that does not answer (down, busy past its deadline) is not asked again for
        this question, with a NOTICE."""
        assert self.llm is not None
        with self.trace.stage("complete", candidate) as step:
            try:
                candidate.sql = self.llm_sql(messages, step)
            except LLMAnswerError as exc:
                step.outcome = f"LLM answer refused: {one_line(str(exc))}"
                return False
            except LLMError as exc:
                step.outcome = f"LLM failed: {one_line(str(exc))}"
                self.trace.notice(
                    f"pgnl: the LLM ({self.llm.model}) failed, so this answer comes from "
                    f"the small models alone: {one_line(str(exc))}"
                )
                self.llm = None
                return False
            candidate.conversation = messages
            step.outcome = outcome
            self.trace.tried(candidate.sql)
            return True

    def llm_sql(self, messages: list[Message], step: Step) -> str:
        """The LLM's query for `messages`; the tokens it cost go in the step's note."""
        assert self.llm is not None
        completion = self.llm.complete(messages)
        if completion.prompt_tokens or completion.completion_tokens:
            step.note = (
                f"{completion.prompt_tokens} prompt + {completion.completion_tokens} "
                "completion tokens"
            )
        return completion.sql

    def complete_plm(self, candidate: Candidate) -> bool:
        """PLM-only completion after the values stage; the completion rules that changed the
        sketch are in the step's note."""
        candidate.sketch = self.grounding.with_named_values(candidate.sketch)
        literals = self.grounding.ground(candidate)
        with (
            self.trace.stage("complete", candidate) as step,
            rules.applying(self.disabled_rules) as fired,
        ):
            try:
                return self._write_plm(candidate, literals, step)
            finally:
                step.add(rules_note(fired))

    def _write_plm(self, candidate: Candidate, literals: list[Literal], step: Step) -> bool:
        try:
            candidate.sql = complete(
                candidate.sketch, self.schema, literals, question=self.question
            )
        except CompletionError as exc:
            narrower = self._named_tables(candidate.sketch)
            if exc.reason != "tables not connected" or narrower is None:
                step.outcome = f"no SQL: {exc.reason}"
                candidate.unfilled = exc.reason == "no value" and "HAVING" not in str(exc)
                candidate.unvalued = exc.column
                return False
            # A FROM table no column names, that no key joins to the others: leave it out.
            try:
                candidate.sql = complete(narrower, self.schema, literals, question=self.question)
            except CompletionError as again:
                step.outcome = f"no SQL: {again.reason}"
                return False
            candidate.sketch = narrower
            step.add("FROM reduced to the tables of the columns named")
        if candidate.sql in self.trace.result.candidates:
            step.outcome = "same SQL as an earlier candidate"
        else:
            step.outcome = "PLM"
            self.trace.tried(candidate.sql)
        return True

    def _named_tables(self, sketch: Sketch) -> Sketch | None:
        """The sketch with FROM reduced to the tables of the columns its clauses name, or None
        when that changes nothing or leaves no table."""
        named = tables_named_by(sketch, self.schema)
        if not named or named == set(sketch.tables):
            return None
        return replace(sketch, tables=frozenset(named))
