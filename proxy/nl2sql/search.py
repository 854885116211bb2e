"""The search: the candidates tried in order until one answers, then the choice among them
(the select stage), within the question's time budget.

The strategies, in the order they run (`Search._search_all`), each on what the ones before it
tried (an SQL text already run is not run again):
1. `_ranked`: the ranked sketches ([pipeline] max_candidates, best first), with the LLM's own
   query ([llm] unguided) after the sketches the LLM completes;
2. `_anti_joins`: where no candidate kept the question's "not", its sketches as anti-joins
   (`relaxations.anti_join`);
3. `_partial_answer`: the first that ran with values but failed a check of `answer_checks`;
4. `_relaxed`: the sketches that found no value for a WHERE condition, without it
   (`relaxations.relaxations`), with a NOTICE;
5. `_without_values`: the first that ran with no values (fall-back, with a NOTICE).
The first that answers (`answer_checks.answers`) is chosen. Under [llm] selection
`llm-first`, `llm_first` then weighs the LLM's own query against that answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from proxy.config import LLMSettings, PipelineSettings
from proxy.nl2sql.agreement import same_result
from proxy.nl2sql.answer import NO_ANSWER, AnswerError
from proxy.nl2sql.answer_checks import answers, ignores_a_negation, uses_every_literal
from proxy.nl2sql.budget import OUT_OF_TIME, OutOfTime
from proxy.nl2sql.candidate import ANSWERED, FALLBACK, UNGUIDED, Candidate, Chosen, has_values
from proxy.nl2sql.completion import Completer
from proxy.nl2sql.execution import Executor
from proxy.nl2sql.grounding import Grounding
from proxy.nl2sql.question import Question, Stage
from proxy.nl2sql.relaxations import anti_join, relaxations
from proxy.nl2sql.sketch import Sketch
from proxy.nl2sql.trace import one_line


class Search(Stage):
    """One question's search (`partial`, `fallback`: the best candidates short of an answer)."""

    def __init__(
        self,
        question: Question,
        *,
        grounding: Grounding,
        completer: Completer,
        executor: Executor,
        settings: PipelineSettings,
        llm_settings: LLMSettings,
    ) -> None:
        super().__init__(question)
        self.grounding = grounding
        self.completer = completer
        self.executor = executor
        self.settings = settings
        self.llm_settings = llm_settings
        # answered, but leaves out a value or a "not" the question gave, only shows the value
        # it asks by, or counts groups of one row
        self.partial: Candidate | None = None
        self.fallback: Candidate | None = None  # ran, with no values
        self._tried: set[str] = set()  # SQL already run: no strategy runs it again
        self._unfilled: list[Candidate] = []  # ranked candidates with a WHERE value missing
        self._pending: Iterator[Candidate] | None = None  # the ranked candidates not yet tried
        self.sketch_answer: Candidate | None = None  # llm-first: the sketch models' answer

    def run(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """`_search_all`, within the question's time budget: when it runs out, the best
        candidate so far (`_out_of_time`)."""
        try:
            return self._search_all(sketches)
        except OutOfTime:
            return self._out_of_time()

    def _search_all(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """The strategies in the order they run, each on what the ones before it tried; the
        first to choose a candidate gives the answer (None, with the error set, when none
        does)."""
        strategies = (
            self._ranked,
            self._anti_joins,
            self._partial_answer,
            self._relaxed,
            self._without_values,
        )
        for strategy in strategies:
            chosen = strategy(sketches)
            if chosen is not None:
                return chosen
        self._no_answer()
        return None

    def _ranked(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """The candidates in order (`_candidates`): the first whose result passes the checks
        (`answer_checks.answers`); the first with values that fails them is kept as the
        partial answer, the first that ran with none as the fall-back."""
        self._pending = self._candidates(sketches)
        for candidate in self._pending:
            if not self.completer.complete(candidate) or candidate.sql in self._tried:
                if candidate.unfilled:
                    self._unfilled.append(candidate)
                continue
            if not self._run_new(candidate):
                continue
            if has_values(candidate.rows):
                if answers(self.question, candidate.sql, self.schema, self.typed):
                    return Chosen(candidate, ANSWERED)
                self.partial = self.partial or candidate
                continue
            self.fallback = self.fallback or candidate
        return None

    def _run_new(self, candidate: Candidate) -> bool:
        """Run a candidate whose SQL no strategy has run yet (with feedback on an error), and
        calibrate it; False when it ran before or does not run."""
        if candidate.sql in self._tried:
            return False
        self._tried.add(candidate.sql)
        if not self.executor.check(candidate):
            return False
        self.executor.calibrate(candidate)
        return True

    def _anti_joins(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """Where no answer kept the question's "not": its sketches as anti-joins
        (`relaxations.anti_join`), the first that returns values."""
        if self.partial is not None and not ignores_a_negation(self.question, self.partial.sql):
            return None
        for sketch in sketches[: self.settings.max_candidates]:
            negated = anti_join(sketch, self.schema, self.question)
            if negated is None:
                continue
            candidate = Candidate(sketches.index(sketch) + 1, negated)
            if not self.completer.complete(candidate) or candidate.sql in self._tried:
                continue
            self._tried.add(candidate.sql)
            if self.executor.check(candidate) and has_values(candidate.rows):
                return Chosen(candidate, ANSWERED)
        return None

    def _partial_answer(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """The first candidate with values, though it failed a check."""
        return Chosen(self.partial, ANSWERED) if self.partial is not None else None

    def _relaxed(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """No candidate answered, and some had a WHERE condition the question gave no value
        for ("Show all the grades of the high schoolers" under a sketch that filters them):
        without those conditions (then without any: `relaxations.relaxations`), the first that
        answers, with a NOTICE."""
        for candidate in self._unfilled:
            for relaxed, left_out in relaxations(
                candidate, self.schema, self.question, self.completer.complete
            ):
                if not self._run_new(relaxed):
                    continue
                if has_values(relaxed.rows):
                    return Chosen(
                        relaxed,
                        ANSWERED,
                        "pgnl: the question names no value for a condition its sketch asked "
                        f"for ({left_out}); the condition is left out",
                    )
        return None

    def _without_values(self, sketches: Sequence[Sketch]) -> Chosen | None:
        """The first candidate that ran, its result empty or all NULL, with a NOTICE."""
        if self.fallback is None:
            return None
        return Chosen(
            self.fallback,
            FALLBACK,
            "pgnl: no candidate query returned rows with values; the best one that ran "
            "is shown (its result is empty or all NULL)",
        )

    def _no_answer(self) -> None:
        """No candidate ran: the error, with the last SQL tried and what to do."""
        result = self.trace.result
        last = self.trace.last_tried
        slow = self.executor.costs.too_slow is not None
        result.error = AnswerError(
            NO_ANSWER,
            "pgnl found no query that runs for this question"
            + (
                f": the last one tried failed with {self.executor.last_error}"
                if self.executor.last_error
                else ""
            ),
            hint=(
                "the candidates ran into the statement timeout ([pipeline] statement_timeout_s "
                f"= {self.settings.statement_timeout_s:g} s), or would have: raise it "
                "(PGNL_PIPELINE_STATEMENT_TIMEOUT_S) or narrow the question (a value, a time "
                "range); -- nl explain: shows every candidate"
                if slow
                else "rephrase the question with the names of the tables and columns it is "
                "about, or write the SQL; -- nl explain: shows every candidate"
            ),
            detail=f"last SQL tried: {last}" if last else "",
        )

    def _out_of_time(self) -> Chosen | None:
        """The best candidate found before the time budget ran out, with a NOTICE; or, with none,
        the error that says the question ran out of time."""
        budget = self.executor.budget.seconds
        with self.trace.stage("select") as step:
            best = self.partial or self.fallback
            step.outcome = f"out of time ([pipeline] budget_s = {budget:g} s)" + (
                f": candidate {best.number}, the best so far" if best else ": no answer"
            )
        if best is not None:
            return Chosen(
                best,
                ANSWERED if best is self.partial else FALLBACK,
                f"pgnl: the question ran out of its time budget ([pipeline] budget_s = "
                f"{budget:g} s) before every candidate was tried; the best answer so far is shown",
            )
        last = self.trace.last_tried
        self.trace.result.error = AnswerError(
            OUT_OF_TIME,
            f"pgnl ran out of time for this question: no candidate query answered within "
            f"{budget:g} s",
            hint="raise [pipeline] budget_s (PGNL_PIPELINE_BUDGET_S), or narrow the question "
            "(a value, a time range); -- nl explain: shows what ran and for how long",
            detail=f"last SQL tried: {last}" if last else "",
        )
        return None

    def llm_first(self, seed: Chosen | None, sketches: Sequence[Sketch]) -> Chosen | None:
        """Selection `llm-first`: the LLM's own query, written with the values of the columns
        the sketch models' answer `seed` names, run (an error fed back) and calibrated, is the
        answer when it returns values and holds every value the question typed that `seed`
        holds; else `seed`. Whether the two agree is in the trace."""
        if not sketches:
            return seed
        answered = seed.candidate if seed is not None and seed.outcome == ANSWERED else None
        self.sketch_answer = answered
        if answered is not None:
            self.grounding.samples_for(answered)  # the values of its columns, for the LLM's prompt
        sketch = seed.candidate.sketch if seed is not None else sketches[0]
        try:
            own = self._opinion(Candidate(UNGUIDED, sketch, unguided=True))
        except OutOfTime:
            with self.trace.stage("select") as step:
                step.outcome = "the sketch models' answer: the time budget ran out first"
            return seed
        with self.trace.stage("select") as step:
            if own is None or not has_values(own.rows):
                step.outcome = "the sketch models' answer: the LLM's own query " + (
                    "returned no values" if own is not None else "did not run"
                )
                return seed
            if (
                answered is not None
                and not uses_every_literal(own.sql, self.typed)
                and uses_every_literal(answered.sql, self.typed)
            ):
                step.outcome = (
                    "the sketch models' answer: the LLM's own query leaves out a value the "
                    "question typed"
                )
                return seed
            if answered is None:
                step.outcome = "the LLM's own query: the sketch models found no answer"
            elif same_result(own.rows, answered.rows):
                step.outcome = (
                    f"the LLM's own query, which agrees with the sketch models' answer "
                    f"(candidate {answered.number})"
                )
            else:
                step.outcome = (
                    f"the LLM's own query; the sketch models' answer (candidate "
                    f"{answered.number}) returns other rows"
                )
                step.note = one_line(answered.sql)
        return Chosen(own, ANSWERED)

    def readings(self, chosen: Chosen, limit: int) -> list[Candidate]:
        """The question's other readings, for the ambiguity stage: the sketch models' answer
        where the LLM's own query was chosen over it, then up to `limit` more of the ranked
        candidates after the one chosen, completed by the small models (no LLM call), that
        run, answer and return values; within the question's time budget."""
        found: list[Candidate] = []
        if self.sketch_answer is not None and self.sketch_answer is not chosen.candidate:
            found.append(self.sketch_answer)
        if self._pending is None or limit <= 0:
            return found
        with self.trace.stage("ambiguity", chosen.candidate) as step:
            step.outcome = f"other readings: up to {limit} more of the ranked candidates"
        more = 0
        try:
            for candidate in self._pending:
                if more >= limit:
                    break
                if candidate.unguided or not self.completer.complete_plm(candidate):
                    continue
                if not self._run_new(candidate):
                    continue
                if has_values(candidate.rows) and answers(
                    self.question, candidate.sql, self.schema, self.typed
                ):
                    found.append(candidate)
                    more += 1
        except OutOfTime:
            pass
        return found

    def _opinion(self, candidate: Candidate) -> Candidate | None:
        """The LLM's own query for the candidate, run (with feedback on an error) and
        calibrated; None when the LLM gave none, or none that ran."""
        if not self.completer.complete_unguided(candidate) or not self.executor.check(candidate):
            return None
        self.executor.calibrate(candidate)
        return candidate

    def _candidates(self, sketches: Sequence[Sketch]) -> Iterator[Candidate]:
        """The ranked sketches ([pipeline] max_candidates), with the LLM's own query ([llm]
        unguided) after the sketches the LLM completes ([llm] max_completions), while it
        answers."""
        settings = self.llm_settings
        llm = self.completer.search_llm
        unguided_due = settings.unguided
        for number, sketch in enumerate(sketches[: self.settings.max_candidates], start=1):
            if (
                unguided_due
                and llm is not None
                and self.completer.completions >= settings.max_completions
            ):
                unguided_due = False
                yield Candidate(UNGUIDED, sketches[0], unguided=True)
            yield Candidate(number, sketch)
        if unguided_due and llm is not None and sketches:
            yield Candidate(UNGUIDED, sketches[0], unguided=True)
