"""Questions for the query history's statements that came without one (Soma-SQL's synthetic
questions): `pgnl learn`, where an LLM is configured, asks it what question each such record of
nl.ambiguity answers (`prompts.statement_question`: the statement, after the schema), and embeds
that question in place of the statement's words. A later question is then matched against
questions, as it is for the records learned from nl.query_log.

The records are taken most-run first; each is written as soon as its question is, so an
interrupted run keeps what it wrote and the next run asks only for the rest. An answer that is
no question (empty, or SQL) is skipped, and tried again on the next run; after
`MAX_FAILURES_IN_A_ROW` LLM errors in a row the pass stops, with a note saying why.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

import psycopg

from proxy.nl2sql.llm import LLMError
from proxy.nl2sql.prompts import Message, statement_question
from proxy.nl2sql.schema import Schema
from proxy.valueindex.common import Embedder, checked_embeddings, vector_literal

MAX_QUESTION_CHARS = 300
# A schema of at most this many columns is shown whole, the same for every statement, so that an
# LLM server that keeps its last prompt's KV cache (the embedded one does) reads only the
# statement anew; a larger one is cut to the statement's tables.
WHOLE_SCHEMA_COLUMNS = 300
MAX_FAILURES_IN_A_ROW = 3
LOG_INTERVAL_S = 5.0


class QuestionWriter(Protocol):
    """What writes the questions: the LLM's raw answer to messages (`BlockingLLM.text`)."""

    def text(self, messages: Sequence[Message]) -> str: ...


@dataclass
class QuestionsReport:
    written: int = 0
    unusable: int = 0  # answers that held no question
    note: str = ""  # why the pass stopped early, if it did

    def summary(self) -> str:
        line = f"{self.written} questions written by the LLM"
        if self.unusable:
            line += f", {self.unusable} answers held no question (asked again next time)"
        return line + (f"; {self.note}" if self.note else "")


_LABEL = re.compile(r"^\s*(?:[-*#>]+\s*)?(?:\*\*)?(?:question|q)\s*[:.]\s*(?:\*\*)?\s*", re.I)
# SQL, not a question: "From which city ...?" and "With how many ...?" are questions.
_SQL = re.compile(r"^\s*(?:select\s+\S|with\s+\w+\s+as\s*\()", re.I)


def question_of(answer: str) -> str | None:
    """The question in the LLM's answer: its first line with text, without a "Question:" label
    or quotes; None where there is none or it reads as SQL."""
    for line in answer.strip().splitlines():
        if line.lstrip().startswith("```"):
            return None  # a fenced block: SQL, not a question
        text = _LABEL.sub("", line).strip().strip("\"'`*").strip()
        if not text:
            continue
        return None if _SQL.match(text) else text[:MAX_QUESTION_CHARS]
    return None


WITHOUT_QUESTION = """
SELECT a.id, a.statement,
       coalesce((SELECT json_agg(json_build_array(n.nspname, c.relname))
                   FROM unnest(a.table_oids) t
                   JOIN pg_class c ON c.oid = t
                   JOIN pg_namespace n ON n.oid = c.relnamespace), '[]')
  FROM nl.ambiguity a
 WHERE a.database_name = current_database() AND a.question IS NULL
 ORDER BY a.calls DESC, a.id
"""


def without_question(conn: psycopg.Connection[Any]) -> int:
    """How many of this database's records have no question yet."""
    row = conn.execute(
        "SELECT count(*) FROM nl.ambiguity "
        "WHERE database_name = current_database() AND question IS NULL"
    ).fetchone()
    return int(row[0]) if row else 0


def write_questions(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    llm: QuestionWriter,
    schema: Schema,
    *,
    stream: TextIO | None = None,
    whole_schema_columns: int = WHOLE_SCHEMA_COLUMNS,
) -> QuestionsReport:
    """A question from `llm` for each record of nl.ambiguity that has none, written with its
    embedding; `conn` is an autocommit connection as the owner of the nl tables. A schema of
    more than `whole_schema_columns` is shown cut to each statement's tables."""
    report = QuestionsReport()
    rows = conn.execute(WITHOUT_QUESTION).fetchall()
    index = {(t.schema, t.name): i for i, t in enumerate(schema.tables)}
    started = shown = time.monotonic()
    failures = 0
    for done, (record_id, statement, tables) in enumerate(rows, 1):
        in_prompt: list[int] | None = None  # the whole schema
        if len(schema.columns) > whole_schema_columns:
            names = json.loads(tables) if isinstance(tables, str) else tables
            in_prompt = [index[(s, t)] for s, t in names if (s, t) in index] or None
        try:
            answer = llm.text(statement_question(statement, schema, in_prompt))
        except (LLMError, concurrent.futures.TimeoutError) as exc:
            failures += 1
            if failures >= MAX_FAILURES_IN_A_ROW:
                report.note = (
                    f"stopped after {failures} LLM errors in a row (the last: {exc or 'timeout'}); "
                    "run pgnl learn again once the LLM answers ([llm] in the configuration)"
                )
                break
            continue
        failures = 0
        question = question_of(answer)
        if question is None:
            report.unusable += 1
            continue
        (vector,) = checked_embeddings(embedder, [question])
        conn.execute(
            "UPDATE nl.ambiguity SET question = %s, synthetic = true, embedding = %s::vector "
            "WHERE id = %s AND question IS NULL",
            [question, vector_literal(vector), record_id],
        )
        report.written += 1
        now = time.monotonic()
        if stream is not None and (now - shown >= LOG_INTERVAL_S or done == len(rows)):
            shown = now
            print(
                f"learn: {done}/{len(rows)} statements asked for their question "
                f"({now - started:.0f} s)",
                file=stream,
                flush=True,
            )
    return report
