"""The check, calibrate and execute stages: a candidate's SQL run, its literals corrected, the
corrected SQL run.

- `check`: the SQL run within the question's budget (`budget`), at most [pipeline]
  large_answer_rows read; on an error, the LLM (where it wrote the SQL) is shown it and asked
  for a correction, at most [pipeline] feedback_rounds times.
- `calibrate`: literals that are not values of the database replaced by the closest real value
  (`calibrate.calibrate`), a join only the old column needed left out; with an LLM, the
  corrections go back to it to rewrite the query where calibration could not.
- `execute`: a corrected SQL run; it replaces the candidate's when it runs, else the SQL before
  calibration is kept.

Every query runs through the caller's `Database`, as its role, inside its read-only
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.config import CalibrationSettings, PipelineSettings
from proxy.nl2sql.budget import QUERY_CANCELED, Budget, CostGuard, OutOfTime
from proxy.nl2sql.calibrate import Calibration, DatabaseCatalog, calibrate, without_join
from proxy.nl2sql.candidate import Candidate
from proxy.nl2sql.completion import Completer
from proxy.nl2sql.database import Database, QueryFailed, connection_lost, sqlstate
from proxy.nl2sql.grounding import Grounding
from proxy.nl2sql.llm import LLMError
from proxy.nl2sql.prompts import Message, calibration_feedback, error_feedback
from proxy.nl2sql.question import Question, Stage
from proxy.nl2sql.sketch_rules.words import tables_named_in
from proxy.nl2sql.trace import one_line
from proxy.valueindex.common import ValueIndexError


def describe(calibration: Calibration) -> str:
    target = calibration.new_column
    where = f" in {target.table}.{target.column}" if target != calibration.column else ""
    applied = "" if calibration.applied else " (not applied: another table)"
    return (
        f"{calibration.literal!r} -> {calibration.new_value!r}{where} "
        f"({calibration.score:.2f}, {calibration.level}){applied}"
    )


class Executor(Stage):
    """One question's runs of its candidates (`last_error`: the last query's error)."""

    def __init__(
        self,
        question: Question,
        db: Database,
        *,
        grounding: Grounding,
        completer: Completer,
        settings: PipelineSettings,
        calibration: CalibrationSettings,
        budget: Budget,
    ) -> None:
        super().__init__(question)
        self.db = db
        self.grounding = grounding
        self.completer = completer
        self.settings = settings
        self.calibration = calibration
        self.catalog = DatabaseCatalog(db)
        self.budget = budget  # the question's, from its start
        self.costs = CostGuard(db)
        self.last_error = ""

    def fetch(self, sql: str) -> list[tuple[Any, ...]]:
        """Run a candidate within the time budget; QueryFailed on an error of the query,
        OutOfTime once the budget is spent, other errors propagate."""
        timeout = self.budget.timeout(self.settings.statement_timeout_s)
        if (cap := self.settings.large_answer_rows) > 0:  # one more tells "more than cap"
            body = sql.rstrip().removesuffix(";")
            sql = f"SELECT * FROM (\n{body}\n) AS pgnl_checked LIMIT {cap + 1}"  # noqa: S608
        try:
            return self.db.fetch(sql, timeout_s=timeout)
        except Exception as exc:
            state = sqlstate(exc)
            if connection_lost(state):
                raise
            if state == QUERY_CANCELED and self.budget.spent():
                raise OutOfTime from exc
            assert state is not None
            raise QueryFailed(state, one_line(str(exc), 1000)) from exc

    def check(self, candidate: Candidate) -> bool:
        """Run the candidate; with an LLM, errors go back to it up to feedback_rounds times."""
        rounds = 0
        while True:
            with self.trace.stage("check", candidate) as step:
                timeout = self.budget.timeout(self.settings.statement_timeout_s)
                if (skip := self.costs.skip_reason(candidate.sql, timeout)) is not None:
                    step.outcome = skip
                    return False
                try:
                    candidate.rows = self.fetch(candidate.sql)
                except OutOfTime:
                    step.outcome = "stopped: the question's time budget ran out"
                    raise
                except QueryFailed as exc:
                    self.last_error = f"{exc.sqlstate} ({one_line(exc.message, 200)})"
                    step.outcome = f"error {self.last_error}"
                    error = exc
                    if exc.sqlstate == QUERY_CANCELED:  # its own statement timeout
                        self.costs.timed_out(candidate.sql, timeout)
                else:
                    step.outcome = f"{len(candidate.rows)} rows"
                    return True
            if self.completer.llm is None or not candidate.conversation:
                return False
            if rounds >= self.settings.feedback_rounds:
                return False
            rounds += 1
            with self.trace.stage("complete", candidate) as step:
                messages = error_feedback(candidate.conversation, candidate.sql, error.message)
                try:
                    candidate.sql = self.completer.llm_sql(messages, step)
                except LLMError as exc:
                    step.outcome = f"LLM failed: {one_line(str(exc))}"
                    return False
                candidate.conversation = messages
                step.outcome = "LLM, after the error"
                self.trace.tried(candidate.sql)

    # ------------------------------------------------------------ calibration

    def calibrate(self, candidate: Candidate) -> None:
        index = self.grounding.index
        if index is None:
            return
        with self.trace.stage("calibrate", candidate) as step:
            try:
                result = calibrate(
                    candidate.sql,
                    index,
                    self.catalog,
                    threshold=self.calibration.threshold,
                    method=self.calibration.method,  # type: ignore[arg-type]
                )
            except ValueIndexError as exc:
                step.outcome = "no value index"
                self.grounding.no_index(exc)
                return
            except Exception as exc:
                if connection_lost(sqlstate(exc)):
                    raise
                step.outcome = f"look-up failed: {one_line(str(exc))}"
                return
            found = result.calibrations
            step.outcome = f"{len(found)} literals corrected" if found else "literals as found"
            if found:
                step.note = "; ".join(describe(c) for c in found)
        if not found:
            return
        calibrated = self._without_left_joins(result.sql, found) if result.changed else None
        # The LLM rewrites the query only where calibration could not (a value found in another
        # table, which the query must join); each rewrite costs an LLM call.
        if (
            self.completer.llm is not None
            and candidate.conversation
            and (calibrated is None or any(not c.applied for c in found))
        ):
            with self.trace.stage("complete", candidate) as step:
                messages = calibration_feedback(candidate.conversation, candidate.sql, found)
                try:
                    rewritten = self.completer.llm_sql(messages, step)
                except LLMError as exc:
                    step.outcome = f"LLM failed: {one_line(str(exc))}"
                else:
                    step.outcome = "LLM, after calibration"
                    if self._execute(candidate, rewritten, messages):
                        return
        if calibrated is not None:
            self._execute(candidate, calibrated, candidate.conversation)

    def _without_left_joins(self, sql: str, found: Sequence[Calibration]) -> str:
        """The calibrated SQL without the joins of tables that only a moved predicate's old
        column needed, and that the question does not name (`without_join`): "singers whose
        citizenship is not France", once song.title became singer.citizenship, no longer
        joins song (which repeats each singer per song)."""
        named = tables_named_in(self.question, self.schema)
        for calibration in found:
            old, new = calibration.column, calibration.new_column
            if not calibration.applied or (old.schema, old.table) == (new.schema, new.table):
                continue
            try:
                table = self.schema.table_index(old.table)
            except KeyError:
                continue
            if table not in named:
                sql = without_join(sql, old.table) or sql
        return sql

    def _execute(self, candidate: Candidate, sql: str, conversation: list[Message]) -> bool:
        """Run a corrected SQL; it replaces the candidate's when it runs."""
        if sql == candidate.sql:
            return True
        self.trace.tried(sql)
        with self.trace.stage("execute", candidate) as step:
            try:
                rows = self.fetch(sql)
            except QueryFailed as exc:
                step.outcome = f"error {exc.sqlstate}; the SQL before calibration is kept"
                return False
            step.outcome = f"{len(rows)} rows"
        candidate.sql, candidate.rows, candidate.conversation = sql, rows, conversation
        return True
