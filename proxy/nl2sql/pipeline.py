"""The NL2SQL pipeline: a question and a database in, the chosen SQL (and its rows) out.

ZeroNL2SQL's Algorithm 2 as a declared sequence of stages (`STAGES`), each timed and traced:

    intent     a request to change data or the server is refused (`intent`: SQLSTATE NL005)
               before anything runs; traced only then
    schema     the database as the asking role sees it (`schema.introspect`), cached per catalog
               fingerprint, so DDL or a grant is seen on the next question and nothing else is
               re-read
    lookup     the values the question names word for word, by column (one look-up in the value
               index: `value_evidence.NamedValues`)
    sketch     ranked sketches: the sketch model's top-k SELECT x KEYWORDS x FROM, re-ranked by
               the aligner (`Sketcher`); a WHERE condition on a column that holds none of the
               looked-up values moves to one that holds one
    values     (PLM-only) the values of each WHERE column that the question names unquoted,
               found in the value index ("singers from france" -> 'France'); a quoted string
               goes to the condition whose column holds it, or moves one there
    complete   the sketch made into SQL: by the LLM when one is configured, else by PLM-only
               completion (`complete_plm`); an LLM that fails is not asked again for this
               question, and PLM-only completion takes over, with a NOTICE
    check      the SQL run; on an error, the LLM is shown it and asked for a correction, at most
               [pipeline] feedback_rounds times
    calibrate  literals that are not values of the database replaced by the closest real value
               (`calibrate`); with an LLM, the corrections go back to it to rewrite the query,
               and the calibrated SQL is kept when its rewrite does not run
    execute    the calibrated SQL run

Candidates are tried best sketch first ([pipeline] max_candidates of them, duplicates skipped).
The first whose result is non-empty and not all NULL, whose SQL holds every value the question
typed (quoted strings, numbers) and shows more than the value its WHERE sets, is chosen
("answered"), else the first with such a result; else, PLM-only, the sketches that failed for
want of a WHERE value are tried again without the conditions that found none, then without
WHERE (answered, with a NOTICE naming what was left out); else the first
that ran ("fallback", with a NOTICE saying so); when none ran, an `AnswerError` (SQLSTATE
NL001) that shows the last SQL tried.

Every query goes through the `Database` the caller gives, as its role, with [pipeline]
statement_timeout_s each, all of a question's within [pipeline] budget_s (`budget`): the
caller runs them in a read-only transaction (the proxy opens one on the client's own
connection; `pgnl ask` connects read-only), so nothing generated can write.
A lost connection ends the answer (the exception propagates); a failing query only ends its
candidate. `answer` blocks (models, queries): callers on an event loop run it in a thread.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pglast import ast
from pglast.enums import A_Expr_Kind, BoolExprType

from proxy.config import ConfigError, Settings
from proxy.nl2sql.agreement import FIRST, LLM_FIRST, SELECTIONS, same_result
from proxy.nl2sql.answer import Answer, AnswerError, Outcome, TraceRow
from proxy.nl2sql.budget import OUT_OF_TIME, QUERY_CANCELED, Budget, CostGuard, OutOfTime
from proxy.nl2sql.calibrate import (
    Calibration,
    DatabaseCatalog,
    best_match,
    calibrate,
    nodes_of,
    one_select,
    without_join,
)
from proxy.nl2sql.complete_plm import (
    CompletionError,
    Literal,
    complete,
    question_literals,
    set_operation,
)
from proxy.nl2sql.database import Database
from proxy.nl2sql.intent import WRITE_REQUEST, write_request
from proxy.nl2sql.joins import references_to
from proxy.nl2sql.llm import Completion, LLMAnswerError, LLMError
from proxy.nl2sql.prompts import (
    Message,
    calibration_feedback,
    error_feedback,
    sketch_completion,
    unguided_completion,
)
from proxy.nl2sql.schema import Schema, catalog_fingerprint, introspect
from proxy.nl2sql.sketch import STAR, Predicate, Sketch, Slots, tables_named_in
from proxy.nl2sql.sketcher import Sketcher, load_sketcher
from proxy.nl2sql.value_evidence import (
    STOP_WORDS,
    NamedValues,
    capitalised_names,
    code_of_a_word,
    named_by_schema_words,
    runs,
    schema_words,
)
from proxy.runtime import load_embedder
from proxy.valueindex.common import Candidate, ColumnRef, Embedder, Scope, ValueIndexError
from proxy.valueindex.lookup import ValueIndex

log = logging.getLogger(__name__)

STAGES = (
    "intent",
    "schema",
    "lookup",
    "sketch",
    "values",
    "complete",
    "check",
    "calibrate",
    "execute",
    "select",
)

NO_ANSWER = "NL001"
"""SQLSTATE: no candidate query ran (implementation-defined class NL)."""
NOTHING_TO_ASK = "NL002"
"""SQLSTATE: the role can read no column of this database."""
SCHEMA_UNREADABLE = "NL003"
"""SQLSTATE: the catalog could not be read."""

SAMPLE_VALUES = 3
"""Values shown to the LLM per relevant text column."""
SAMPLE_COLUMNS = 8
_TEXT_OPERATORS = ("=", "!=", "like", "not like", "in", "not in")
GUESS_GRAMS = 12
"""Words and word pairs of a question compared with a column's values when none is named."""
_OR = re.compile(r"\bor\b", re.I)
_WORD = re.compile(r"[^\W_][\w'-]*")
_CODE = re.compile(r"[A-Z][A-Z0-9]{1,4}")
_EXACT = 0.999  # a value-index score of a value the question names word for word
_SCHEMA_CACHE = 64


class LLM(Protocol):
    """What the pipeline asks of an LLM: one read-only query for the messages, with the tokens it
    cost (blocking); raises `LLMError` (`proxy.nl2sql.llm.BlockingLLM` is the one over
    `LLMCompleter`)."""

    @property
    def model(self) -> str: ...

    def complete(self, messages: Sequence[Message]) -> Completion: ...


class QueryFailed(Exception):
    """A candidate's query failed in the database (it ends that candidate only)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(f"{sqlstate}: {message}")
        self.sqlstate = sqlstate
        self.message = message


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return str(state) if state else None


def _connection_lost(sqlstate: str | None) -> bool:
    """Errors that end the whole answer, not one candidate: no SQLSTATE (not the database's),
    a connection exception, an operator intervention other than a statement timeout."""
    if sqlstate is None:
        return True
    return sqlstate.startswith("08") or (sqlstate.startswith("57") and sqlstate != "57014")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _has_values(rows: Sequence[tuple[Any, ...]]) -> bool:
    """Non-empty and not all NULL: Algorithm 2's test of a useful result."""
    return any(value is not None for row in rows for value in row)


def _describe(calibration: Calibration) -> str:
    target = calibration.new_column
    where = f" in {target.table}.{target.column}" if target != calibration.column else ""
    applied = "" if calibration.applied else " (not applied: another table)"
    return (
        f"{calibration.literal!r} -> {calibration.new_value!r}{where} "
        f"({calibration.score:.2f}, {calibration.level}){applied}"
    )


class SchemaCache:
    """Introspected schemas by catalog fingerprint (which is per database state and per role's
    view of it), the most recently used kept."""

    def __init__(self, size: int = _SCHEMA_CACHE) -> None:
        self.size = size
        self._schemas: dict[str, Schema] = {}

    def get(self, db: Database, timeout_s: float) -> Schema:
        fingerprint = catalog_fingerprint(db, timeout_s=timeout_s)
        schema = self._schemas.pop(fingerprint, None)
        if schema is None:
            schema = introspect(db, timeout_s=timeout_s)
        self._schemas[fingerprint] = schema
        while len(self._schemas) > self.size:
            del self._schemas[next(iter(self._schemas))]
        return schema


@dataclass
class _Step:
    """What a stage says of itself in the trace."""

    outcome: str = "interrupted"
    note: str = ""  # the trace's calibration column: corrections, moved predicates


ANSWERED: Outcome = "answered"
FALLBACK: Outcome = "fallback"


@dataclass(frozen=True)
class _Chosen:
    """The candidate a selection chose, how, and the NOTICE that goes with it."""

    candidate: _Candidate
    outcome: Outcome
    notice: str = ""


@dataclass
class _Candidate:
    number: int
    sketch: Sketch
    sql: str = ""
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    conversation: list[Message] = field(default_factory=list)
    unfilled: bool = False  # PLM-only completion found no value for a WHERE predicate
    unvalued: int | None = None  # the column of that predicate, where the completion named it
    unguided: bool = False  # the LLM's own query, written without the sketch


UNGUIDED = 0
"""The candidate number, in the trace, of the LLM's own query (written without a sketch)."""


def _tables_named_by(sketch: Sketch, schema: Schema) -> frozenset[int]:
    """The tables of the columns a sketch's clauses name."""
    slots = sketch.slots
    return frozenset(
        schema.columns[column].table
        for column in (
            *(i.column for i in (*sketch.select, *slots.having, *slots.order_by)),
            *(p.column for p in slots.where),
            *slots.group_by,
        )
        if column != STAR
    )


def _without_where(sketch: Sketch) -> Sketch:
    """The sketch with no WHERE predicates (and not "nested" where a WHERE predicate was)."""
    gone = {"where", "nested"} if any(p.nested for p in sketch.slots.where) else {"where"}
    return replace(
        sketch,
        keywords=sketch.keywords - gone,
        slots=replace(sketch.slots, where=(), where_or=False),
    )


_COMPARATIVE = (
    r"(?:less|more|higher|lower|greater|fewer|larger|smaller|later|earlier|older|younger"
    r"|longer|shorter|bigger|after|before|above|below|over|under)\b"
)
_NEGATION_SAID = re.compile(
    rf"\b(?:not|never|without)\b(?!\s+{_COMPARATIVE})|n't\b(?!\s+{_COMPARATIVE})"
    rf"|\bno\s+(?!{_COMPARATIVE})(?=[a-z])",
    re.IGNORECASE,
)
_NEGATION_WRITTEN = re.compile(r"\bNOT\b|<>|!=|\bEXCEPT\b", re.IGNORECASE)


def ignores_a_negation(question: str, sql: str) -> bool:
    """Whether the question says "not" ("do not play poker", "with no students", "never",
    "without"; not "no more than") and the query negates nothing (no NOT, <>, != or EXCEPT):
    such a query answers the question without its "not"."""
    return bool(_NEGATION_SAID.search(question)) and not _NEGATION_WRITTEN.search(sql)


_NEGATED_WORDS = 8  # words after the "not" where the table it is about is named


def anti_join(sketch: Sketch, schema: Schema, question: str) -> Sketch | None:
    """For a question that says its rows have no related rows of a table ("countries with no
    car makers", "templates not used by any document", "students who do not have friends"),
    the sketch's rows of one table T as `T.key NOT IN (SELECT ... FROM X)`, X the table named
    after the "not" that a key joins to T's one-column primary key. T is the table of every
    column the sketch shows (of the one FROM table the question names before the "not", for a
    `count(*)`). None where the question or the sketch does not fit. The sketch model rarely
    proposes such a nested NOT IN."""
    said = _NEGATION_SAID.search(question)
    if said is None:
        return None
    after = " ".join(question[said.end() :].split()[:_NEGATED_WORDS])
    shown = {schema.columns[i.column].table for i in sketch.select if i.column != STAR}
    if not shown:
        shown = set(sketch.tables & tables_named_in(question[: said.start()], schema))
    if len(shown) != 1:
        return None
    (table,) = shown
    keys = schema.primary_key(table)
    if len(keys) != 1:
        return None
    related = {schema.columns[c].table for c in references_to(schema, table)} - {table}
    if not related & tables_named_in("of " + after, schema):
        return None
    return replace(
        sketch,
        tables=frozenset({table}),
        keywords=frozenset({"where", "nested"}) | (sketch.keywords & {"distinct"}),
        slots=Slots(where=(Predicate(keys[0], "not in", nested=True),)),
    )


def counts_single_rows(sql: str, schema: Schema) -> bool:
    """Whether the query reads one table, groups it by its whole primary key and counts
    (`SELECT name FROM museum GROUP BY museum_id ORDER BY count(*) DESC LIMIT 1`): every group
    is one row, so the count is 1 and says nothing; the question counts rows of another
    table ("the museum that has the most staff")."""
    select = one_select(sql)
    if select is None:
        return False
    sources = select.fromClause or ()
    if len(sources) != 1 or not isinstance(sources[0], ast.RangeVar) or not select.groupClause:
        return False
    try:
        table = schema.table_index(str(sources[0].relname))
    except KeyError:
        return False
    key = {schema.columns[c].name.lower() for c in schema.primary_key(table)}
    grouped = {
        str(g.fields[-1].sval).lower()
        for g in select.groupClause
        if isinstance(g, ast.ColumnRef) and g.fields and isinstance(g.fields[-1], ast.String)
    }
    counts = any(
        isinstance(f, ast.FuncCall) and tuple(n.sval for n in f.funcname or ()) == ("count",)
        for f in nodes_of(select, ast.FuncCall, inside=True)
    )
    return bool(key) and key <= grouped and counts


def echoes_its_value(sql: str) -> bool:
    """Whether the query shows one plain column that its WHERE sets equal to a constant
    (`SELECT abbreviation FROM airlines WHERE abbreviation = 'UAL'`): every row it returns is
    the question's own value, so it answers nothing the question did not say."""
    select = one_select(sql)
    if select is None:
        return False
    targets = select.targetList or ()
    if len(targets) != 1 or not isinstance(targets[0].val, ast.ColumnRef):
        return False
    shown = targets[0].val.fields
    where = select.whereClause
    conjuncts = (
        where.args or ()
        if isinstance(where, ast.BoolExpr) and where.boolop == BoolExprType.AND_EXPR
        else (where,)
    )
    return any(
        isinstance(c, ast.A_Expr)
        and c.kind == A_Expr_Kind.AEXPR_OP
        and tuple(n.sval for n in c.name or ()) == ("=",)
        and isinstance(c.lexpr, ast.ColumnRef)
        and _same_column(c.lexpr.fields, shown)
        and isinstance(c.rexpr, ast.A_Const)
        for c in conjuncts
    )


def _same_column(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> bool:
    """Whether two column references name one column: the same name, and the same table where
    both say one (a bare name stands for the only table that has it)."""
    a_names = [getattr(f, "sval", None) for f in a or ()]
    b_names = [getattr(f, "sval", None) for f in b or ()]
    if not a_names or not b_names or a_names[-1] != b_names[-1] or a_names[-1] is None:
        return False
    return len(a_names) == 1 or len(b_names) == 1 or a_names[:-1] == b_names[:-1]


def without_left_tables(moved: Sketch, before: Sketch, schema: Schema, question: str) -> Sketch:
    """`moved` (the sketch after the values stage moved predicates) without the FROM tables
    that only a moved predicate's old column had named, unless the question names them:
    "how many countries are in Asia" on city.district, moved to country.continent, no longer
    joins city (which would count cities)."""
    left = (_tables_named_by(before, schema) - _tables_named_by(moved, schema)) & moved.tables
    left -= tables_named_in(question, schema)
    if not left or not moved.tables - left:
        return moved
    return replace(moved, tables=moved.tables - left)


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
        self.calibration = pipeline.settings.calibration
        self.question = question
        self.db = db
        self.llm = pipeline.llm
        self.index: ValueIndex | None = ValueIndex(
            db, pipeline.embedder, timeout_s=self.settings.statement_timeout_s
        )
        self.catalog = DatabaseCatalog(db)
        self.result = Answer(question=question)
        self.schema: Schema | None = None
        self._found: dict[tuple[str, ...] | None, list[Candidate]] = {}
        self._numbers: dict[ColumnRef, int] | None = None
        self._names: frozenset[str] | None = None
        self._samples: dict[int, list[str]] = {}
        self._holds: dict[tuple[int, str], bool] = {}  # (column, quoted string) -> held there
        self._typed = question_literals(question)
        self._last_error = ""
        self._llm_completions = 0  # sketches the LLM completed for this question
        self._selection = pipeline.settings.llm.selection
        self.budget = Budget(self.settings.budget_s)
        self.costs = CostGuard(db)
        # answered, but leaves out a value or a "not" the question gave, only shows the value
        # it asks by, or counts groups of one row
        self._partial: _Candidate | None = None
        self._fallback: _Candidate | None = None  # ran, with no values

    # ------------------------------------------------------------ bookkeeping

    @contextmanager
    def stage(self, name: str, candidate: _Candidate | None = None) -> Iterator[_Step]:
        """Time a stage; the block says its outcome (and a note) on the `_Step`."""
        step = _Step()
        start = time.perf_counter()
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
        if text not in self.result.notices:
            self.result.notices.append(text)

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
            state = _sqlstate(exc)
            if _connection_lost(state):
                raise
            if state == QUERY_CANCELED and self.budget.spent():
                raise OutOfTime from exc
            assert state is not None
            raise QueryFailed(state, _one_line(str(exc), 1000)) from exc

    # ------------------------------------------------------------ the stages

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
            with self.stage("intent") as step:
                step.outcome = f"refused: the request asks to {what}"
            result.error = AnswerError(
                WRITE_REQUEST,
                f"pgnl only reads: this request asks to {what}, which pgnl never does",
                hint="Write the SQL for it yourself: statements that are not directives go to "
                "the server as they are, with your role's privileges. Or ask a question about "
                "the data.",
            )
            return
        with self.stage("schema") as step:
            try:
                schema = self.pipeline.schemas.get(self.db, self.settings.statement_timeout_s)
            except Exception as exc:
                state = _sqlstate(exc)
                if _connection_lost(state):
                    raise
                step.outcome = f"error {state}"
                result.error = AnswerError(
                    SCHEMA_UNREADABLE,
                    f"pgnl could not read this database's catalog: {_one_line(str(exc))}",
                    hint="check that the role may read pg_catalog and try again",
                )
                return
            step.outcome = f"{len(schema.tables)} tables, {len(schema.columns)} columns"
        self.schema = schema
        with self.stage("lookup") as step:
            values, step.outcome = self._spoken_values()
            if values is not None:
                step.note = ", ".join(
                    f"{schema.qualified(c)} {sorted(v)}" for c, v in sorted(values.columns.items())
                )
        with self.stage("sketch") as step:
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
        chosen = self._search(sketches)
        if self.llm is not None and self._selection == LLM_FIRST:
            chosen = self._llm_first(chosen, sketches)
        if chosen is None:
            return
        result.error = None
        result.sql, result.rows = chosen.candidate.sql, chosen.candidate.rows
        result.outcome = chosen.outcome
        if chosen.notice:
            self.notice(chosen.notice)
        if 0 < (cap := self.settings.large_answer_rows) < len(result.rows):
            result.rows = result.rows[:cap]
            self.notice(
                f"pgnl: the answer has more than {cap:,} rows; narrow the question (a condition, "
                "'the first 10 ...') or page through the rows (psql: \\set FETCH_COUNT 1000)"
            )
        log.debug(
            "chose candidate %d (%s): %s", chosen.candidate.number, chosen.outcome, result.sql
        )

    def _search(self, sketches: Sequence[Sketch]) -> _Chosen | None:
        """`_search_all`, within the question's time budget: when it runs out, the best
        candidate so far (`_out_of_time`)."""
        try:
            return self._search_all(sketches)
        except OutOfTime:
            return self._out_of_time()

    def _search_all(self, sketches: Sequence[Sketch]) -> _Chosen | None:
        """The candidates in order, the first whose result passes the checks; else the best
        partial answer, a relaxed one, or one that ran with no values (None, with the error
        set, when none ran)."""
        result = self.result
        tried: set[str] = set()
        unfilled: list[_Candidate] = []
        for candidate in self._candidates(sketches):
            if not self._complete(candidate) or candidate.sql in tried:
                if candidate.unfilled:
                    unfilled.append(candidate)
                continue
            tried.add(candidate.sql)
            if not self._check(candidate):
                continue
            self._calibrate(candidate)
            if _has_values(candidate.rows):
                if (
                    self._uses_every_literal(candidate)
                    and not echoes_its_value(candidate.sql)
                    and not ignores_a_negation(self.question, candidate.sql)
                    and not counts_single_rows(candidate.sql, self._schema)
                ):
                    return _Chosen(candidate, ANSWERED)
                self._partial = self._partial or candidate
                continue
            self._fallback = self._fallback or candidate
        partial = self._partial
        if partial is None or ignores_a_negation(self.question, partial.sql):
            # Nothing answered with the question's "not": its sketches as anti-joins.
            for sketch in sketches[: self.settings.max_candidates]:
                negated = anti_join(sketch, self._schema, self.question)
                if negated is None:
                    continue
                candidate = _Candidate(sketches.index(sketch) + 1, negated)
                if not self._complete(candidate) or candidate.sql in tried:
                    continue
                tried.add(candidate.sql)
                if self._check(candidate) and _has_values(candidate.rows):
                    return _Chosen(candidate, ANSWERED)
        if partial is not None:
            return _Chosen(partial, ANSWERED)
        for candidate in unfilled:
            # No candidate answered, and these had a WHERE condition the question gave no
            # value for ("Show all the grades of the high schoolers" under a sketch that filters
            # them): without those conditions (then without any), the first that answers is
            # chosen, with a NOTICE.
            for relaxed, left_out in self._relaxed(candidate):
                if relaxed.sql in tried:
                    continue
                tried.add(relaxed.sql)
                if not self._check(relaxed):
                    continue
                self._calibrate(relaxed)
                if _has_values(relaxed.rows):
                    return _Chosen(
                        relaxed,
                        ANSWERED,
                        "pgnl: the question names no value for a condition its sketch asked "
                        f"for ({left_out}); the condition is left out",
                    )
        if self._fallback is not None:
            return _Chosen(
                self._fallback,
                FALLBACK,
                "pgnl: no candidate query returned rows with values; the best one that ran "
                "is shown (its result is empty or all NULL)",
            )
        last = result.candidates[-1] if result.candidates else ""
        slow = self.costs.too_slow is not None
        result.error = AnswerError(
            NO_ANSWER,
            "pgnl found no query that runs for this question"
            + (f": the last one tried failed with {self._last_error}" if self._last_error else ""),
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
        return None

    def _out_of_time(self) -> _Chosen | None:
        """The best candidate found before the time budget ran out, with a NOTICE; or, with none,
        the error that says the question ran out of time."""
        budget = self.budget.seconds
        with self.stage("select") as step:
            best = self._partial or self._fallback
            step.outcome = f"out of time ([pipeline] budget_s = {budget:g} s)" + (
                f": candidate {best.number}, the best so far" if best else ": no answer"
            )
        if best is not None:
            return _Chosen(
                best,
                ANSWERED if best is self._partial else FALLBACK,
                f"pgnl: the question ran out of its time budget ([pipeline] budget_s = "
                f"{budget:g} s) before every candidate was tried; the best answer so far is shown",
            )
        last = self.result.candidates[-1] if self.result.candidates else ""
        self.result.error = AnswerError(
            OUT_OF_TIME,
            f"pgnl ran out of time for this question: no candidate query answered within "
            f"{budget:g} s",
            hint="raise [pipeline] budget_s (PGNL_PIPELINE_BUDGET_S), or narrow the question "
            "(a value, a time range); -- nl explain: shows what ran and for how long",
            detail=f"last SQL tried: {last}" if last else "",
        )
        return None

    def _llm_first(self, seed: _Chosen | None, sketches: Sequence[Sketch]) -> _Chosen | None:
        """Selection `llm-first`: the LLM's own query, written with the values of the columns
        the sketch models' answer `seed` names, run (an error fed back) and calibrated, is the
        answer when it returns values and holds every value the question typed that `seed`
        holds; else `seed`. Whether the two agree is in the trace."""
        if not sketches:
            return seed
        answered = seed.candidate if seed is not None and seed.outcome == ANSWERED else None
        if answered is not None:
            self._samples_for(answered)  # the values of its columns, for the LLM's prompt
        sketch = seed.candidate.sketch if seed is not None else sketches[0]
        try:
            own = self._opinion(_Candidate(UNGUIDED, sketch, unguided=True))
        except OutOfTime:
            with self.stage("select") as step:
                step.outcome = "the sketch models' answer: the time budget ran out first"
            return seed
        with self.stage("select") as step:
            if own is None or not _has_values(own.rows):
                step.outcome = "the sketch models' answer: the LLM's own query " + (
                    "returned no values" if own is not None else "did not run"
                )
                return seed
            if (
                answered is not None
                and not self._uses_every_literal(own)
                and self._uses_every_literal(answered)
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
                step.note = _one_line(answered.sql)
        return _Chosen(own, ANSWERED)

    def _opinion(self, candidate: _Candidate) -> _Candidate | None:
        """The LLM's own query for the candidate, run (with feedback on an error) and
        calibrated; None when the LLM gave none, or none that ran."""
        if not self._complete_unguided(candidate) or not self._check(candidate):
            return None
        self._calibrate(candidate)
        return candidate

    def _candidates(self, sketches: Sequence[Sketch]) -> Iterator[_Candidate]:
        """The ranked sketches ([pipeline] max_candidates), with the LLM's own query ([llm]
        unguided) after the sketches the LLM completes ([llm] max_completions), while it
        answers."""
        settings = self.pipeline.settings.llm
        llm = self._search_llm
        unguided_due = settings.unguided
        for number, sketch in enumerate(sketches[: self.settings.max_candidates], start=1):
            if (
                unguided_due
                and llm is not None
                and self._llm_completions >= settings.max_completions
            ):
                unguided_due = False
                yield _Candidate(UNGUIDED, sketches[0], unguided=True)
            yield _Candidate(number, sketch)
        if unguided_due and llm is not None and sketches:
            yield _Candidate(UNGUIDED, sketches[0], unguided=True)

    def _relaxed(self, candidate: _Candidate) -> Iterator[tuple[_Candidate, str]]:
        """The unfilled candidate completed without the WHERE conditions it found no value for,
        each with the conditions left out: first without only those its completion named, one
        at a time, while a condition with a value stays ("the weekly rank for the episode "A
        Love of a Lifetime"" under a sketch that also filters tv_series.channel: the episode's
        condition stays, with FROM tables only the left-out conditions named gone), then
        without any WHERE condition."""
        schema = self._schema
        sketch = candidate.sketch
        left_out: list[str] = []
        column = candidate.unvalued
        while column is not None:
            where = sketch.slots.where
            position = next(
                (i for i, p in enumerate(where) if p.column == column and not p.nested), None
            )
            if position is None or len(where) == 1:
                break
            left_out.append(f"{schema.qualified(column)} {where[position].operator}")
            kept = replace(
                sketch, slots=replace(sketch.slots, where=where[:position] + where[position + 1 :])
            )
            sketch = without_left_tables(kept, sketch, schema, self.question)
            narrower = _Candidate(candidate.number, sketch)
            if self._complete(narrower):
                yield narrower, ", ".join(left_out)
                break
            column = narrower.unvalued if narrower.unfilled else None
        relaxed = _Candidate(candidate.number, _without_where(candidate.sketch))
        if self._complete(relaxed):
            yield relaxed, candidate.sketch.keywords_text()

    def _uses_every_literal(self, candidate: _Candidate) -> bool:
        """Whether the candidate's SQL holds every value the question typed: each quoted string
        (case aside; one that calibration replaced counts as left out) and each number."""
        sql = candidate.sql.casefold()
        for literal in self._typed:
            text = str(literal.value).casefold()
            if literal.kind == "number":
                if not re.search(rf"(?<![\w.]){re.escape(text)}(?![\w])", sql):
                    return False
            elif text.strip() not in sql:
                return False
        return True

    @property
    def _search_llm(self) -> LLM | None:
        """The LLM the candidate search asks: none under selection `llm-first`, where the search
        is the sketch models' own answer and the LLM is asked after it (`_llm_first`)."""
        return self.llm if self._selection == FIRST else None

    # ------------------------------------------------------------ completion

    def _complete(self, candidate: _Candidate) -> bool:
        if candidate.unguided:
            return self._complete_unguided(candidate)
        if (
            self._search_llm is not None
            and self._llm_completions < self.pipeline.settings.llm.max_completions
        ):
            self._llm_completions += 1
            messages = sketch_completion(
                self.question, self._schema, candidate.sketch, self._samples_for(candidate)
            )
            if self._ask_llm(candidate, messages, "LLM"):
                return True
        return self._complete_plm(candidate)

    def _complete_unguided(self, candidate: _Candidate) -> bool:
        """The LLM's own query for the question: the schema, the values the question names, no
        sketch."""
        if self.llm is None:
            return False
        samples = {c: self._samples[c] for c in sorted(self._samples) if self._samples[c]}
        messages = unguided_completion(self.question, self._schema, samples)
        return self._ask_llm(candidate, messages, "LLM, without the sketch")

    def _ask_llm(self, candidate: _Candidate, messages: list[Message], outcome: str) -> bool:
        """The candidate's SQL from the LLM. An answer with no usable query fails this candidate
        only; an LLM that does not answer (down, busy past its deadline) is not asked again for
        this question, with a NOTICE."""
        assert self.llm is not None
        with self.stage("complete", candidate) as step:
            try:
                candidate.sql = self._llm_sql(messages, step)
            except LLMAnswerError as exc:
                step.outcome = f"LLM answer refused: {_one_line(str(exc))}"
                return False
            except LLMError as exc:
                step.outcome = f"LLM failed: {_one_line(str(exc))}"
                self.notice(
                    f"pgnl: the LLM ({self.llm.model}) failed, so this answer comes from "
                    f"the small models alone: {_one_line(str(exc))}"
                )
                self.llm = None
                return False
            candidate.conversation = messages
            step.outcome = outcome
            self.result.candidates.append(candidate.sql)
            return True

    def _llm_sql(self, messages: list[Message], step: _Step) -> str:
        """The LLM's query for `messages`; the tokens it cost go in the step's note."""
        assert self.llm is not None
        completion = self.llm.complete(messages)
        if completion.prompt_tokens or completion.completion_tokens:
            step.note = (
                f"{completion.prompt_tokens} prompt + {completion.completion_tokens} "
                "completion tokens"
            )
        return completion.sql

    def _complete_plm(self, candidate: _Candidate) -> bool:
        candidate.sketch = self._with_named_values(candidate.sketch)
        literals = self._ground(candidate)
        with self.stage("complete", candidate) as step:
            try:
                candidate.sql = complete(
                    candidate.sketch, self._schema, literals, question=self.question
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
                    candidate.sql = complete(
                        narrower, self._schema, literals, question=self.question
                    )
                except CompletionError as again:
                    step.outcome = f"no SQL: {again.reason}"
                    return False
                candidate.sketch = narrower
                step.note = "FROM reduced to the tables of the columns named"
            if candidate.sql in self.result.candidates:
                step.outcome = "same SQL as an earlier candidate"
            else:
                step.outcome = "PLM"
                self.result.candidates.append(candidate.sql)
        return True

    def _named_tables(self, sketch: Sketch) -> Sketch | None:
        """The sketch with FROM reduced to the tables of the columns its clauses name, or None
        when that changes nothing or leaves no table."""
        named = _tables_named_by(sketch, self._schema)
        if not named or named == set(sketch.tables):
            return None
        return replace(sketch, tables=frozenset(named))

    @property
    def _schema(self) -> Schema:
        assert self.schema is not None
        return self.schema

    def _column_ref(self, column: int) -> ColumnRef:
        schema = self._schema
        table = schema.tables[schema.columns[column].table]
        return ColumnRef(table.schema or "public", table.name, schema.columns[column].name)

    def _is_text(self, column: int) -> bool:
        kind = self._schema.columns[column].type.lower()
        return any(word in kind for word in ("char", "text", "name", "citext"))

    def _wants_value(self, predicate: Predicate) -> bool:
        """A WHERE predicate that needs a string the question may name unquoted: a text
        comparison on a text column, or `=` on another column when the question holds no number
        (the slot head picked the wrong column: the value's column is the right one)."""
        if predicate.nested:
            return False
        if self._is_text(predicate.column):
            return predicate.operator in _TEXT_OPERATORS
        return predicate.operator == "=" and not any(t.kind == "number" for t in self._typed)

    def _named_values(self, tables: tuple[str, ...] | None) -> list[Candidate]:
        """Values the question names, in these tables of the schema (None: anywhere)."""
        if tables not in self._found:
            assert self.index is not None
            schema = self._schema
            schemas = {t.schema or "public" for t in schema.tables}
            found = self.index.search_in_text(
                self.question,
                schema=next(iter(schemas)) if tables is not None and len(schemas) == 1 else None,
                tables=tables,
                k=20,
                min_score=self.settings.value_match,
            )
            self._found[tables] = [
                c
                for c in found
                if c.column in self._column_numbers
                and not code_of_a_word(self.question, c.value)
                and not named_by_schema_words(self.question, c.value, self._schema_words)
            ]
        return self._found[tables]

    def _spoken_values(self) -> tuple[NamedValues | None, str]:
        """The values the question names word for word, by column, and the columns the value
        index holds, for the sketch stage (`value_evidence`), and what the look-up found; None
        without an index or when the look-up fails."""
        assert self.index is not None
        try:
            found = self.index.named_in(sorted(runs(self.question)))
            indexed = self.index.indexed_columns()
        except ValueIndexError as exc:
            self._no_index(exc)
            return None, "no value index"
        except Exception as exc:
            if _connection_lost(_sqlstate(exc)):
                raise
            return None, f"look-up failed: {_one_line(str(exc))}"
        numbers = self._column_numbers
        values = NamedValues.of(
            self.question,
            self._schema,
            [(numbers[c.column], c.value) for c in found if c.column in numbers],
            [numbers[ref] for ref in indexed if ref in numbers],
            names=self._schema_words,
        )
        return values, f"{len(values.columns)} columns hold a value the question names"

    def _with_named_values(self, sketch: Sketch) -> Sketch:
        """The sketch with a condition `column = value` for each value of a text column of its
        tables that the question names in capitals ("the country in Asia with the lowest life
        expectancy": continent = 'Asia') where the sketch filters on no such column: the sketch
        model often leaves such a condition out. Only where every condition the sketch has
        takes a value the question typed or a capitalised value of its own column ("the student
        named Timmothy Ward" under first_name = ?: last_name = 'Ward' is added), so that a value
        already meant for one is not given to two, and never beside OR. Words of the schema's
        names ("Package Option") and words inside a quoted string are no such values."""
        typed = [t for t in self._typed if t.kind == "string"]
        unquoted = self.question
        for literal in typed:
            if literal.span is not None:  # a quoted string is one value, not several
                start, end = literal.span
                unquoted = unquoted[:start] + " " * (end - start) + unquoted[end:]
        said = capitalised_names(unquoted) - self._schema_words
        if not said or self.index is None or sketch.slots.where_or:
            return sketch
        wanting = {p.column for p in sketch.slots.where if self._wants_value(p)}
        schema = self._schema
        names = tuple(sorted(schema.tables[t].name for t in sketch.tables))
        try:
            found = self._named_values(names)
        except ValueIndexError as exc:
            self._no_index(exc)
            return sketch
        except Exception as exc:
            if _connection_lost(_sqlstate(exc)):
                raise
            return sketch  # the values stage says why when it looks again
        taken = {str(t.value).casefold() for t in typed}
        for value in found:
            # a condition the question names a value of in capitals takes that value ("named
            # Timmothy Ward": first_name 'Timmothy'), so that the rest may go to other columns
            column = self._column_numbers[value.column]
            if column in wanting and value.value.casefold() in said - taken:
                wanting.discard(column)
                taken.add(value.value.casefold())
        if len(wanting) > len(typed):
            return sketch
        filtered = {p.column for p in sketch.slots.where}
        added: list[Predicate] = []
        for value in found:
            column = self._column_numbers[value.column]
            folded = value.value.casefold()
            if folded not in said or column in filtered:
                continue
            if any(f" {folded} " in f" {t} " for t in taken):
                continue  # a value taken, or words of one ("Jetblue" of "Jetblue Airways")
            if schema.columns[column].table not in sketch.tables or not self._is_text(column):
                continue
            added.append(Predicate(column, "="))
            filtered.add(column)
            taken.add(folded)
        if not added:
            return sketch
        return replace(
            sketch,
            keywords=sketch.keywords | {"where"},
            slots=replace(sketch.slots, where=(*sketch.slots.where, *added)),
        )

    def _ground(self, candidate: _Candidate) -> list[Literal]:
        """The `values` stage: the question's typed literals, then, for each WHERE predicate
        that wants a string the question does not quote, the value of the database the question
        names best: in the predicate's own column, else in another text column of the sketch's
        tables or of a table the question names ("how many countries have governments that are
        republics" finds 'Republic' in country.governmentform where the sketch read only
        countrylanguage; the predicate moves there), else anywhere in the database (likewise). A
        predicate on a number column that a quoted string cannot fill ("abbreviation 'UAL'"
        given to `flights.airline`) moves to the text column holding that string; a FROM table
        only a moved predicate had named goes (`without_left_tables`). Look-ups are made once
        per table set per question."""
        sketch = candidate.sketch
        predicates = list(sketch.slots.where)
        wanting = [i for i, p in enumerate(predicates) if self._wants_value(p)]
        typed = [t for t in self._typed if t.kind == "string"]
        # a quoted string cannot be the value of a number column: that predicate wants moving
        homeless = [i for i in wanting if not self._is_text(predicates[i].column)]
        if not wanting or self.index is None or (len(typed) >= len(wanting) and not homeless):
            return self._typed
        schema = self._schema
        wanted_tables = {
            *sketch.tables,
            *(schema.columns[predicates[i].column].table for i in wanting),
            *tables_named_in(self.question, schema),
            # a predicate on a foreign key: the question may name the row it references by
            # that row's name ("airports in Germany": airports.country, countries.name)
            *(t for i in wanting for t in schema.referenced_tables(predicates[i].column)),
        }
        names = tuple(sorted(schema.tables[t].name for t in wanted_tables))
        bound: list[Literal] = []
        with self.stage("values", candidate) as step:
            try:
                nearby = self._named_values(names)
                anywhere = None if nearby else self._named_values(None)
                pins = self._pinned(predicates, wanting)
            except ValueIndexError as exc:
                self._no_index(exc)
                step.outcome = "no value index"
                return self._typed
            except Exception as exc:
                if _connection_lost(_sqlstate(exc)):
                    raise
                step.outcome = f"look-up failed: {_one_line(str(exc))}"
                return self._typed
            moves: list[str] = []

            def move(i: int, column: int) -> None:
                if column != predicates[i].column:
                    moves.append(
                        f"{schema.qualified(predicates[i].column)} -> {schema.qualified(column)}"
                    )
                    predicates[i] = replace(predicates[i], column=column)

            found = nearby or anywhere or []
            for n, i, column in self._quoted_homes(predicates, wanting, pins, found):
                move(i, column)
                pins[n] = i
            pinned = set(pins.values())
            taken = {str(t.value).casefold() for t in typed}
            # quoted strings no predicate has been moved to (or holds) yet
            unplaced = {
                str(t.value).casefold()
                for n, t in enumerate(self._typed)
                if t.kind == "string" and n not in pins
            }
            free = len(typed) - len(pins)  # quoted strings not yet spoken for
            # predicates on number columns first: the quoted strings they can move to
            for i in sorted(wanting, key=lambda i: self._is_text(predicates[i].column)):
                if i in pinned:
                    continue
                predicate = predicates[i]
                home = schema.columns[predicate.column].table
                if free and self._is_text(predicate.column):
                    free -= 1  # a quoted string goes to it
                    continue
                holder = next((c for c in found if c.value.casefold() in unplaced), None)
                if free and holder is not None:
                    # the text column that holds a quoted string takes the predicate
                    move(i, self._column_numbers[holder.column])
                    unplaced.discard(holder.value.casefold())
                    free -= 1
                    continue
                equal = {
                    p.column
                    for j, p in enumerate(predicates)
                    if j != i and p.operator == "=" and not p.nested
                }
                pool = [
                    c
                    for c in found
                    if c.value.casefold() not in taken
                    # a column another condition already equals a value cannot equal a second
                    # ("title = 'The Rise of the Blue Beetle!' AND title = 'Fall of ...'")
                    and (sketch.slots.where_or or self._column_numbers[c.column] not in equal)
                ]
                own = [c for c in pool if self._column_numbers[c.column] == predicate.column]
                others = sorted(
                    (c for c in pool if self._is_text(self._column_numbers[c.column])),
                    key=lambda c: (
                        -c.score,
                        schema.columns[self._column_numbers[c.column]].table != home,
                        -len(c.value.split()),  # "Central Africa" before "Africa"
                    ),
                )
                chosen = own[0] if own else (others[0] if others else None)
                if own and others and own[0].score < _EXACT <= others[0].score:
                    # the question names another column's value word for word, and the
                    # predicate's own only in part ("countries in Asia": continent 'Asia', not
                    # region 'Nordic Countries'): the predicate moves there
                    chosen = others[0]
                if chosen is None and self._is_text(predicate.column):
                    chosen = self._guess_value(predicate.column, taken)
                if chosen is None:
                    continue
                column = self._column_numbers[chosen.column]
                move(i, column)
                taken.add(chosen.value.casefold())
                bound.append(Literal(chosen.value, "string", column=column))
                if len(wanting) == 1 and (
                    set_operation(sketch) is not None or _OR.search(self.question)
                ):
                    # "both cats and dogs": the right side of the set operation takes the
                    # second value of the same column; "English or Dutch": both are listed
                    second = next(
                        (
                            c
                            for c in pool
                            if c.column == chosen.column and c.value.casefold() not in taken
                        ),
                        None,
                    ) or self._guess_code(column, taken)  # "type code PP or PPT"
                    if second is not None:
                        taken.add(second.value.casefold())
                        bound.append(Literal(second.value, "string", column=column))
            step.outcome = f"{len(bound)} values for {len(wanting)} predicates"
            if moves:
                step.note = "moved " + ", ".join(moves)
        if moves:
            moved = replace(sketch, slots=replace(sketch.slots, where=tuple(predicates)))
            candidate.sketch = without_left_tables(moved, sketch, schema, self.question)
        literals = [
            replace(t, column=predicates[pins[n]].column) if n in pins else t
            for n, t in enumerate(self._typed)
        ]
        return [*literals, *bound]

    def _quoted_homes(
        self,
        predicates: Sequence[Predicate],
        wanting: Sequence[int],
        pins: dict[int, int],
        found: Sequence[Candidate],
    ) -> Iterator[tuple[int, int, int]]:
        """For each quoted string no wanting column holds (`pins`) that the value index `found`
        in a text column: the first text predicate free for it, and that column (index in the
        question's literals, index in `predicates`, column). The predicate moves there, as
        calibration would move its value later, so that no other predicate is given a second
        value of that column."""
        used = set(pins.values())
        for n, literal in enumerate(self._typed):
            if literal.kind != "string" or n in pins:
                continue
            text = str(literal.value).casefold()
            holder = next(
                (
                    c
                    for c in found
                    if c.value.casefold() == text and self._is_text(self._column_numbers[c.column])
                ),
                None,
            )
            first = next(
                (i for i in wanting if i not in used and self._is_text(predicates[i].column)),
                None,
            )
            if holder is None or first is None:
                continue
            used.add(first)
            yield n, first, self._column_numbers[holder.column]

    def _pinned(self, predicates: Sequence[Predicate], wanting: Sequence[int]) -> dict[int, int]:
        """The quoted strings that a wanting predicate's text column holds word for word, each
        with that predicate (the first that holds it; one string a predicate): index in the
        question's literals -> index in `predicates`. "What is the weekly rank for the episode
        "A Love of a Lifetime"" under a sketch filtering tv_series.channel and then
        tv_series.episode gives the title to episode, not to the first text condition."""
        assert self.index is not None
        pins: dict[int, int] = {}
        for n, literal in enumerate(self._typed):
            if literal.kind != "string":
                continue
            for i in wanting:
                column = predicates[i].column
                if i in pins.values() or not self._is_text(column):
                    continue
                key = (column, str(literal.value))
                if key not in self._holds:
                    self._holds[key] = self.index.contains(self._column_ref(column), key[1])
                if self._holds[key]:
                    pins[n] = i
                    break
        return pins

    def _guess_value(self, column: int, taken: set[str]) -> Candidate | None:
        """For a text column none of whose values the question names word for word: a code the
        question writes in capitals ("the PPT template") that the column holds, else the value
        closest to one of the question's words or word pairs (calibration's hybrid similarity,
        at its threshold: "French" -> 'France'). Words that name tables or columns are not
        values."""
        assert self.index is not None
        code = self._guess_code(column, taken)
        if code is not None:
            return code
        ref = self._column_ref(column)
        tokens = _WORD.findall(self.question)
        names = self._schema_words
        words = [
            t
            for t in tokens
            if t.casefold() not in STOP_WORDS and t.casefold() not in names and not t.isdigit()
        ]
        pairs = [f"{a} {b}" for a, b in itertools.pairwise(tokens) if a in words and b in words]
        best: tuple[float, Candidate] | None = None
        for gram in [*pairs, *words][:GUESS_GRAMS]:
            match = best_match(self.index, gram, Scope.column(ref), "hybrid")
            if match is None or match[0] < self.calibration.threshold:
                continue
            if match[1].value.casefold() in taken:
                continue
            if best is None or match[0] > best[0]:
                best = match
        return best[1] if best is not None else None

    def _guess_code(self, column: int, taken: set[str]) -> Candidate | None:
        """A code the question writes in capitals ("the PPT template") that the column holds,
        other than those `taken`."""
        assert self.index is not None
        ref = self._column_ref(column)
        for token in _WORD.findall(self.question):
            fresh = _CODE.fullmatch(token) and token.casefold() not in taken
            if fresh and self.index.contains(ref, token):
                return Candidate(ref, token, 1.0, 1)
        return None

    @property
    def _schema_words(self) -> frozenset[str]:
        if self._names is None:
            self._names = schema_words(self._schema)
        return self._names

    @property
    def _column_numbers(self) -> dict[ColumnRef, int]:
        """Schema column index by (schema, table, column)."""
        if self._numbers is None:
            self._numbers = {self._column_ref(c): c for c in range(len(self._schema.columns))}
        return self._numbers

    def _no_index(self, exc: Exception) -> None:
        self.index = None
        self.notice(f"pgnl: values were not looked up or calibrated: {exc}")

    def _samples_for(self, candidate: _Candidate) -> dict[int, list[str]]:
        """A few values of the text columns the sketch names, for the LLM's prompt."""
        sketch = candidate.sketch
        columns = [
            *(p.column for p in sketch.slots.where),
            *(i.column for i in sketch.select if i.column != STAR),
        ]
        wanted = [c for c in dict.fromkeys(columns) if self._is_text(c)][:SAMPLE_COLUMNS]
        for column in wanted:
            if column in self._samples or self.index is None:
                continue
            try:
                found = self.index.values_in(Scope.column(self._column_ref(column)), SAMPLE_VALUES)
            except ValueIndexError as exc:
                self._no_index(exc)
                break
            except Exception as exc:
                if _connection_lost(_sqlstate(exc)):
                    raise
                found = []
            self._samples[column] = [c.value for c in found]
        return {c: self._samples[c] for c in wanted if self._samples.get(c)}

    # ------------------------------------------------------------ execution check

    def _check(self, candidate: _Candidate) -> bool:
        """Run the candidate; with an LLM, errors go back to it up to feedback_rounds times."""
        rounds = 0
        while True:
            with self.stage("check", candidate) as step:
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
                    self._last_error = f"{exc.sqlstate} ({_one_line(exc.message, 200)})"
                    step.outcome = f"error {self._last_error}"
                    error = exc
                    if exc.sqlstate == QUERY_CANCELED:  # its own statement timeout
                        self.costs.timed_out(candidate.sql, timeout)
                else:
                    step.outcome = f"{len(candidate.rows)} rows"
                    return True
            if self.llm is None or not candidate.conversation:
                return False
            if rounds >= self.pipeline.settings.pipeline.feedback_rounds:
                return False
            rounds += 1
            with self.stage("complete", candidate) as step:
                messages = error_feedback(candidate.conversation, candidate.sql, error.message)
                try:
                    candidate.sql = self._llm_sql(messages, step)
                except LLMError as exc:
                    step.outcome = f"LLM failed: {_one_line(str(exc))}"
                    return False
                candidate.conversation = messages
                step.outcome = "LLM, after the error"
                self.result.candidates.append(candidate.sql)

    # ------------------------------------------------------------ calibration

    def _calibrate(self, candidate: _Candidate) -> None:
        if self.index is None:
            return
        with self.stage("calibrate", candidate) as step:
            try:
                result = calibrate(
                    candidate.sql,
                    self.index,
                    self.catalog,
                    threshold=self.calibration.threshold,
                    method=self.calibration.method,  # type: ignore[arg-type]
                )
            except ValueIndexError as exc:
                step.outcome = "no value index"
                self._no_index(exc)
                return
            except Exception as exc:
                if _connection_lost(_sqlstate(exc)):
                    raise
                step.outcome = f"look-up failed: {_one_line(str(exc))}"
                return
            found = result.calibrations
            step.outcome = f"{len(found)} literals corrected" if found else "literals as found"
            if found:
                step.note = "; ".join(_describe(c) for c in found)
        if not found:
            return
        calibrated = self._without_left_joins(result.sql, found) if result.changed else None
        # The LLM rewrites the query only where calibration could not (a value found in another
        # table, which the query must join); each rewrite costs an LLM call.
        if (
            self.llm is not None
            and candidate.conversation
            and (calibrated is None or any(not c.applied for c in found))
        ):
            with self.stage("complete", candidate) as step:
                messages = calibration_feedback(candidate.conversation, candidate.sql, found)
                try:
                    rewritten = self._llm_sql(messages, step)
                except LLMError as exc:
                    step.outcome = f"LLM failed: {_one_line(str(exc))}"
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
        named = tables_named_in(self.question, self._schema)
        for calibration in found:
            old, new = calibration.column, calibration.new_column
            if not calibration.applied or (old.schema, old.table) == (new.schema, new.table):
                continue
            try:
                table = self._schema.table_index(old.table)
            except KeyError:
                continue
            if table not in named:
                sql = without_join(sql, old.table) or sql
        return sql

    def _execute(self, candidate: _Candidate, sql: str, conversation: list[Message]) -> bool:
        """Run a corrected SQL; it replaces the candidate's when it runs."""
        if sql == candidate.sql:
            return True
        self.result.candidates.append(sql)
        with self.stage("execute", candidate) as step:
            try:
                rows = self.fetch(sql)
            except QueryFailed as exc:
                step.outcome = f"error {exc.sqlstate}; the SQL before calibration is kept"
                return False
            step.outcome = f"{len(rows)} rows"
        candidate.sql, candidate.rows, candidate.conversation = sql, rows, conversation
        return True
