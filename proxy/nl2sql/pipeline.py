"""The NL2SQL pipeline: a question and a database in, the chosen SQL (and its rows) out.

ZeroNL2SQL's Algorithm 2 as a declared sequence of stages (`STAGES`), each timed and traced
(`trace`), each in a module of its own; this one only sequences them:

    intent     a request to change data or the server is refused (`intent`: SQLSTATE NL005)
               before anything runs; traced only then
    schema     the database as the asking role sees it (`schema.SchemaCache`), cached per
               catalog fingerprint, so DDL or a grant is seen on the next question and nothing
               else is re-read
    history    the records of the database's query history nearest the question, among those
               the role may read (`history`; written by `pgnl learn`): examples for the LLM,
               and the prior the ambiguity stage weighs open readings by
    lookup     the values the question names word for word, by column (`grounding`)
    sketch     ranked sketches: the sketch model's top-k SELECT x KEYWORDS x FROM, re-ranked by
               the aligner and repaired by the sketch rules (`sketcher`, `rules`)
    values     (PLM-only) the values of each WHERE column that the question names, found in the
               value index ("singers from france" -> 'France') (`grounding`)
    complete   the sketch made into SQL: by the LLM when one is configured, else by PLM-only
               completion (`completion`, `complete_plm`)
    check      the SQL run; on an error, the LLM is shown it and asked for a correction
               (`execution`)
    calibrate  literals that are not values of the database replaced by the closest real value
               (`execution`, `calibrate`)
    execute    the calibrated SQL run (`execution`)
    select     the choice among the candidates (`search`; its candidates and relaxations in the
               order it tries them, the checks an answer passes in `answer_checks`)
    ambiguity  the choice against the question's other readings: where they return other rows,
               the differences named and probed in the data, the choice repaired or replaced
               where the data refutes it, or where the query history matches another reading
               the data leaves open clearly better; a NOTICE naming a reading left open
               (`settle`, `ambiguity`, `probes`)

Every query goes through the `Database` the caller gives, as its role, with [pipeline]
statement_timeout_s each, all of a question's within [pipeline] budget_s (`budget`): the
caller runs them in a read-only transaction (the proxy opens one on the client's own
connection; `pgnl ask` connects read-only), so nothing generated can write.
A lost connection ends the answer (the exception propagates); a failing query only ends its
candidate. `answer` blocks (models, queries): callers on an event loop run it in a thread.
"""

from __future__ import annotations

import logging
import time

from proxy.config import ConfigError, Settings
from proxy.nl2sql import rules
from proxy.nl2sql.agreement import LLM_FIRST, SELECTIONS
from proxy.nl2sql.answer import (
    NO_ANSWER,
    NOTHING_TO_ASK,
    SCHEMA_UNREADABLE,
    Answer,
    AnswerError,
)
from proxy.nl2sql.budget import Budget
from proxy.nl2sql.candidate import ANSWERED, UNGUIDED
from proxy.nl2sql.completion import LLM, Completer
from proxy.nl2sql.database import Database, Marked, connection_lost, sqlstate
from proxy.nl2sql.execution import Executor
from proxy.nl2sql.grounding import Grounding
from proxy.nl2sql.history import EXAMPLES_BY, History, Retrieved
from proxy.nl2sql.intent import WRITE_REQUEST, write_request
from proxy.nl2sql.prompts import NO_EXAMPLES, Examples
from proxy.nl2sql.question import Question
from proxy.nl2sql.schema import Schema, SchemaCache
from proxy.nl2sql.search import Search
from proxy.nl2sql.settle import Ambiguity
from proxy.nl2sql.sketcher import Sketcher, load_sketcher
from proxy.nl2sql.trace import Trace, one_line, rules_note
from proxy.runtime import load_embedder
from proxy.valueindex.common import Embedder
from proxy.valueindex.lookup import ValueIndex

__all__ = [
    "LLM",
    "NOTHING_TO_ASK",
    "NO_ANSWER",
    "SCHEMA_UNREADABLE",
    "STAGES",
    "UNGUIDED",
    "Pipeline",
    "load_pipeline",
]

log = logging.getLogger(__name__)

STAGES = (
    "intent",
    "schema",
    "history",
    "lookup",
    "sketch",
    "values",
    "complete",
    "check",
    "calibrate",
    "execute",
    "select",
    "ambiguity",
)


class Pipeline:
    """See the module docstring. One per process; `answer` may run in several threads at once."""

    def __init__(
        self,
        settings: Settings,
        sketcher: Sketcher,
        embedder: Embedder | None,
        llm: LLM | None = None,
    ) -> None:
        if settings.llm.selection not in SELECTIONS:
            raise ConfigError(
                f"[llm] selection must be one of {', '.join(SELECTIONS)}, "
                f"not {settings.llm.selection!r}"
            )
        if settings.ambiguity.history_examples_by not in EXAMPLES_BY:
            raise ConfigError(
                f"[ambiguity] history_examples_by must be one of {', '.join(EXAMPLES_BY)}, "
                f"not {settings.ambiguity.history_examples_by!r}"
            )
        self.settings = settings
        self.sketcher = sketcher
        self.embedder = embedder
        self.llm = llm
        self.schemas = SchemaCache()

    def answer(self, question: str, db: Database) -> Answer:
        """The chosen SQL for `question` over `db`, with its rows, trace and timings."""
        return _Run(self, question, db).answer()


def load_pipeline(settings: Settings, llm: LLM | None = None) -> Pipeline:
    """A pipeline with the shipped models (loaded once per process and shared)."""
    sketcher = load_sketcher(settings.runtime, settings.sketch)
    embedder = load_embedder(settings.runtime)
    return Pipeline(settings, sketcher, embedder, llm)


class _Run:
    """One question's way through the stages."""

    def __init__(self, pipeline: Pipeline, question: str, db: Database) -> None:
        self.pipeline = pipeline
        self.settings = pipeline.settings.pipeline
        self.question = question
        self.db = Marked(db)
        self.trace = Trace(question)
        self.result = self.trace.result
        self.budget = Budget(self.settings.budget_s)
        self.disabled_rules = frozenset(self.settings.disabled_rules)

    def answer(self) -> Answer:
        start = time.perf_counter()
        try:
            self._answer()
        finally:
            self.result.timings_ms["total"] = round((time.perf_counter() - start) * 1000, 3)
            self.result.timings_ms = {k: round(v, 3) for k, v in self.result.timings_ms.items()}
        return self.result

    def _answer(self) -> None:
        result = self.result
        what = write_request(self.question)
        if what is not None:
            with self.trace.stage("intent") as step:
                step.outcome = f"refused: the request asks to {what}"
            result.error = AnswerError(
                WRITE_REQUEST,
                f"pgnl only reads: this request asks to {what}, which pgnl never does",
                hint="Write the SQL for it yourself: statements that are not directives go to "
                "the server as they are, with your role's privileges. Or ask a question about "
                "the data.",
            )
            return
        with self.trace.stage("schema") as step:
            try:
                schema = self.pipeline.schemas.get(self.db, self.settings.statement_timeout_s)
            except Exception as exc:
                state = sqlstate(exc)
                if connection_lost(state):
                    raise
                step.outcome = f"error {state}"
                result.error = AnswerError(
                    SCHEMA_UNREADABLE,
                    f"pgnl could not read this database's catalog: {one_line(str(exc))}",
                    hint="check that the role may read pg_catalog and try again",
                )
                return
            step.outcome = f"{len(schema.tables)} tables, {len(schema.columns)} columns"
        near, shown = self._history()
        grounding, search = self._stages(schema, shown)
        with self.trace.stage("lookup") as step:
            values, step.outcome = grounding.spoken_values()
            if values is not None:
                step.note = ", ".join(
                    f"{schema.qualified(c)} {sorted(v)}" for c, v in sorted(values.columns.items())
                )
        with (
            self.trace.stage("sketch") as step,
            rules.applying(self.disabled_rules) as fired,
        ):
            try:
                sketches = self.pipeline.sketcher.sketch(self.question, schema, values)
            except ValueError as exc:
                step.outcome = "nothing to ask about"
                result.error = AnswerError(
                    NOTHING_TO_ASK,
                    str(exc),
                    hint="ask as a role that may SELECT from the tables the question is about",
                )
                return
            step.outcome = f"{len(sketches)} sketches"
            step.add(rules_note(fired))
        chosen = search.run(sketches)
        if search.completer.llm is not None and search.completer.selection == LLM_FIRST:
            chosen = search.llm_first(chosen, sketches)
        if chosen is None:
            return
        ambiguity = self.pipeline.settings.ambiguity
        if ambiguity.enabled and chosen.outcome == ANSWERED:
            # The next ranked sketches are weighed by the query history: without one, the
            # sketch models' answer beside the LLM's is the only other reading.
            others = search.readings(chosen, ambiguity.readings if near else 0)
            chosen = Ambiguity(search.asked, search.executor, ambiguity, near).settle(
                chosen, others, independent=search.sketch_answer
            )
        result.error = None
        result.sql, result.rows = chosen.candidate.sql, chosen.candidate.rows
        result.outcome = chosen.outcome
        if chosen.notice:
            self.trace.notice(chosen.notice)
        if 0 < (cap := self.settings.large_answer_rows) < len(result.rows):
            result.rows = result.rows[:cap]
            self.trace.notice(
                f"pgnl: the answer has more than {cap:,} rows; narrow the question (a condition, "
                "'the first 10 ...') or page through the rows (psql: \\set FETCH_COUNT 1000)"
            )
        log.debug(
            "chose candidate %d (%s): %s", chosen.candidate.number, chosen.outcome, result.sql
        )

    def _history(self) -> tuple[list[Retrieved], Examples]:
        """The query history's records nearest the question ([ambiguity] history_records), and
        the examples the LLM is shown ([ambiguity] history_examples, _by)."""
        settings = self.pipeline.settings.ambiguity
        embedder = self.pipeline.embedder
        if settings.history_records <= 0 or embedder is None:
            return [], NO_EXAMPLES
        history = History(self.db, embedder, timeout_s=self.settings.statement_timeout_s)
        started = time.perf_counter()
        try:
            near, shown = history.for_question(
                self.question, settings, llm=self.pipeline.llm is not None
            )
        except Exception as exc:
            state = sqlstate(exc)
            if connection_lost(state):
                raise
            with self.trace.stage("history", since=started) as step:
                step.outcome = f"not read: {state}: {one_line(str(exc))}"
            return [], NO_EXAMPLES
        if near:  # a database without a history has no row for it in the trace
            with self.trace.stage("history", since=started) as step:
                step.outcome = f"{len(near)} records, the nearest {near[0].similarity:.2f} close"
                if shown.statements:
                    step.outcome += f"; {len(shown.statements)} shown to the LLM"
                step.note = one_line(near[0].statement, 200)
        return near, shown

    def _stages(self, schema: Schema, shown: Examples) -> tuple[Grounding, Search]:
        """The question's stages over its schema, sharing its trace, value index and LLM."""
        settings = self.pipeline.settings
        question = Question.over(self.question, schema, self.trace)
        index = ValueIndex(
            self.db, self.pipeline.embedder, timeout_s=self.settings.statement_timeout_s
        )
        grounding = Grounding(
            question,
            index,
            value_match=self.settings.value_match,
            threshold=settings.calibration.threshold,
        )
        completer = Completer(
            question,
            grounding,
            self.pipeline.llm,
            selection=settings.llm.selection,
            max_completions=settings.llm.max_completions,
            disabled_rules=self.disabled_rules,
            examples=shown,
        )
        executor = Executor(
            question,
            self.db,
            grounding=grounding,
            completer=completer,
            settings=self.settings,
            calibration=settings.calibration,
            budget=self.budget,
        )
        search = Search(
            question,
            grounding=grounding,
            completer=completer,
            executor=executor,
            settings=self.settings,
            llm_settings=settings.llm,
        )
        return grounding, search
