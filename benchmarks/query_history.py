"""The query history of Spider dev, as `benchmarks.execution_accuracy --history` uses it.

Soma-SQL's setting: each database's history (nl.ambiguity, through `proxy.learn.write`, as
`pgnl learn --file` writes it) holds the gold SQL (the PostgreSQL translation) of every dev
question of that database, without the questions. While a question is asked, its own gold
statement is left out (`LeaveOut.around`):

- `leave-one-out`: the question's own statement, once: a statement that another question's
  gold repeats word for word (Spider's paraphrased questions share their SQL) stays, with one
  call fewer;
- `leave-pattern-out`: every statement of the question's pattern (the same SQL but for its
  constants, pglast's fingerprint): the history then holds no query of the same shape, only the
  database's other queries.

What is left out is put back, byte for byte, before the next question.

With `questions` (`--history-questions FILE`), the records get the question an LLM writes for
each (`proxy.learn_questions`, as `pgnl learn` has it written), and are found by it. The LLM's
answers are kept in FILE (`CachedQuestions`), so that a later run asks only for what is new.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from pglast.parser import ParseError, fingerprint

from proxy.learn import FILE, LearnReport, Statement, write
from proxy.learn_questions import QuestionsReport, QuestionWriter, write_questions
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.history import statement_hash
from proxy.nl2sql.llm import BlockingLLM
from proxy.nl2sql.prompts import Message
from proxy.nl2sql.schema import introspect
from proxy.valueindex.common import Embedder

NONE = "none"
LEAVE_ONE_OUT = "leave-one-out"
LEAVE_PATTERN_OUT = "leave-pattern-out"
SETTINGS = (NONE, LEAVE_ONE_OUT, LEAVE_PATTERN_OUT)


def learn_gold(
    dsns: Mapping[str, str],
    gold: Mapping[str, Sequence[str]],
    embedder: Embedder,
    questions: QuestionWriter | None = None,
) -> dict[str, tuple[LearnReport, QuestionsReport]]:
    """Each database's history made of its dev questions' gold statements, with the questions
    `questions` writes for them where given; db_id -> reports."""
    reports: dict[str, tuple[LearnReport, QuestionsReport]] = {}
    for db_id, statements in gold.items():
        report, asked = LearnReport(), QuestionsReport()
        with psycopg.connect(dsns[db_id], autocommit=True) as conn:
            conn.execute("DELETE FROM nl.ambiguity WHERE database_name = current_database()")
            schema = introspect(PsycopgDatabase(conn), name=conn.info.dbname)
            ran = [s for s in statements if _runs(conn, s)]
            report.skipped += len(statements) - len(ran)  # a log holds what ran
            write(conn, embedder, schema, [Statement(s, FILE) for s in ran], report)
            if questions is not None:
                asked = write_questions(conn, embedder, questions, schema, stream=sys.stderr)
        reports[db_id] = (report, asked)
    return reports


class CachedQuestions:
    """A QuestionWriter that keeps the LLM's answers in a file (JSON lines: the digest of the
    prompt, the answer) and asks the LLM, started on the first need (`start`), only for prompts
    the file lacks: the embedded LLM takes the better part of an hour for Spider dev's ~1000
    statements on a small CPU."""

    def __init__(self, path: Path, start: Callable[[], BlockingLLM]) -> None:
        self.path = path
        self.start = start
        self.llm: BlockingLLM | None = None
        self.answers: dict[str, str] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    record = json.loads(line)
                    self.answers[str(record["prompt"])] = str(record["answer"])
        self.asked = 0  # answers this run asked the LLM for

    @staticmethod
    def digest(messages: Sequence[Message]) -> str:
        text = json.dumps([[m.role, m.content] for m in messages], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def text(self, messages: Sequence[Message]) -> str:
        key = self.digest(messages)
        if key not in self.answers:
            if self.llm is None:
                self.llm = self.start()
            self.answers[key] = self.llm.text(messages)
            self.asked += 1
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"prompt": key, "answer": self.answers[key]}) + "\n")
        return self.answers[key]

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
            self.llm = None


_MOVE = {
    LEAVE_ONE_OUT: "WITH gone AS (DELETE FROM nl.ambiguity WHERE database_name = "
    "current_database() AND statement_hash = %s AND calls = 1 RETURNING *) "
    "INSERT INTO left_out SELECT * FROM gone",
    LEAVE_PATTERN_OUT: "WITH gone AS (DELETE FROM nl.ambiguity WHERE database_name = "
    "current_database() AND fingerprint = %s RETURNING *) "
    "INSERT INTO left_out SELECT * FROM gone",
}


def _runs(conn: psycopg.Connection[Any], statement: str) -> bool:
    """Whether the statement plans on PostgreSQL (a gold translation may not)."""
    try:
        conn.execute(b"EXPLAIN " + statement.encode())
    except psycopg.Error:
        return False
    return True


class LeaveOut:
    """A question's own gold statement(s) out of the history while it is asked."""

    def __init__(self, dsns: Mapping[str, str], setting: str) -> None:
        if setting not in SETTINGS:
            raise ValueError(f"--history takes one of {', '.join(SETTINGS)}, not {setting!r}")
        self.dsns = dsns
        self.setting = setting
        self.connections: dict[str, psycopg.Connection[Any]] = {}

    def _conn(self, db_id: str) -> psycopg.Connection[Any]:
        conn = self.connections.get(db_id)
        if conn is None:
            conn = psycopg.connect(self.dsns[db_id], autocommit=True)
            conn.execute("CREATE TEMPORARY TABLE left_out (LIKE nl.ambiguity)")
            self.connections[db_id] = conn
        return conn

    @contextlib.contextmanager
    def around(self, db_id: str, gold_pg: str | None) -> Iterator[None]:
        if self.setting == NONE or gold_pg is None:
            yield
            return
        conn = self._conn(db_id)
        if self.setting == LEAVE_ONE_OUT:
            key = statement_hash(gold_pg)
        else:
            try:
                key = fingerprint(gold_pg)
            except ParseError:
                yield
                return
        moved = conn.execute(_MOVE[self.setting], [key]).rowcount
        decremented: list[tuple[Any, ...]] = []
        if self.setting == LEAVE_ONE_OUT:  # a statement held more than once: one call fewer
            decremented = conn.execute(
                "UPDATE nl.ambiguity SET calls = calls - 1 WHERE database_name = "
                "current_database() AND statement_hash = %s AND calls > 1 RETURNING id",
                [key],
            ).fetchall()
        try:
            yield
        finally:
            if decremented:
                conn.execute(
                    "UPDATE nl.ambiguity SET calls = calls + 1 WHERE id = ANY(%s)",
                    [[row[0] for row in decremented]],
                )
            if moved:
                conn.execute(
                    "INSERT INTO nl.ambiguity OVERRIDING SYSTEM VALUE SELECT * FROM left_out"
                )
                conn.execute("DELETE FROM left_out")

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
