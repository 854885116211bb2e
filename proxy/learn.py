"""`pgnl learn`: a database's query history mined into nl.ambiguity (proxy.nl2sql.history).

The statements come from three sources, each optional:

- `pg_stat_statements` (`STAT_STATEMENTS`), where the server loads it (the embedded PostgreSQL
  does): this database's top-level SELECTs, their text normalised ($n for the constants) and
  their call counts. Statements pgnl ran for a question carry `PGNL_MARK` and are left out, so
  the history is what the users run, not pgnl's own candidates and probes.
- `nl.query_log` (`QUERY_LOG`): answers pgnl gave that were not corrected: an answered
  question the same role did not ask again (another question within `REASKED_WITHIN` of it
  counts as a correction); the question is kept with the SQL, and embedded instead of the
  statement's words.
- files of SQL (`FILE`), e.g. a server log's statements or a project's saved queries.

Each statement is read against the schema as the learning role sees it; what is not one SELECT
over its tables is skipped. A statement already recorded keeps its embedding (only its call
count and `last_seen` change, and a user's question replaces none or the LLM's), so a second
run embeds only what is new. `pgnl learn` then has the LLM write a question for each record
without one (`proxy.learn_questions`). Progress goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import psycopg
from pglast import split
from pglast.parser import ParseError

from proxy.nl2sql.database import PGNL_MARK, PsycopgDatabase
from proxy.nl2sql.history import Record, record_of
from proxy.nl2sql.schema import Schema, introspect
from proxy.valueindex.common import Embedder, checked_embeddings, quote_ident, vector_literal

STAT_STATEMENTS = "pg_stat_statements"
QUERY_LOG = "query_log"
FILE = "file"
SOURCES = (STAT_STATEMENTS, QUERY_LOG, FILE)

REASKED_WITHIN = "2 minutes"
BATCH = 64  # statements embedded together
LOG_INTERVAL_S = 5.0


class LearnError(RuntimeError):
    """The history cannot be learned here (the message says what to do)."""


@dataclass(frozen=True)
class Statement:
    sql: str
    source: str
    calls: int = 1
    question: str | None = None


@dataclass
class LearnReport:
    read: dict[str, int] = field(default_factory=dict)  # statements read, by source
    skipped: int = 0  # not one SELECT over the schema's tables
    added: int = 0
    updated: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        read = ", ".join(f"{n} from {source}" for source, n in self.read.items()) or "nothing"
        lines = [
            f"read {read}; {self.added} records added, {self.updated} already there, "
            f"{self.skipped} statements skipped (not one SELECT over this database's tables)"
        ]
        return "\n".join(lines + self.notes)


def statements_of_file(text: str, source: str = FILE) -> list[Statement]:
    """The statements of a SQL file; one that does not parse is left to `record_of` to skip."""
    try:
        pieces = list(split(text))
    except ParseError:
        pieces = [p for p in text.split(";") if p.strip()]
    return [Statement(str(p).strip(), source) for p in pieces if str(p).strip()]


def stat_statements(conn: psycopg.Connection[Any], report: LearnReport) -> list[Statement]:
    """This database's statements in pg_stat_statements; none, with a note, where the server
    does not load it. The extension is created where the library is loaded and it is not yet."""
    loaded = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
    if loaded is None or STAT_STATEMENTS not in str(loaded[0]):
        report.notes.append(
            "pg_stat_statements: not loaded by this server, so not read (add it to "
            "shared_preload_libraries and restart the server to learn from it)"
        )
        return []
    exists = conn.execute(
        "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
    ).fetchone()
    if exists is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        except psycopg.Error as exc:
            report.notes.append(
                "pg_stat_statements: loaded but not created in this database, and this role "
                f"may not create it ({exc.sqlstate}); ask its owner to CREATE EXTENSION "
                "pg_stat_statements"
            )
            return []
        report.notes.append("pg_stat_statements: created in this database (it reads nothing yet)")
    rows = conn.execute(
        """
        SELECT query, calls FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND toplevel AND query ~* '^\\s*(with|select)\\M' AND position(%s in query) = 0
        """,
        [PGNL_MARK.strip()],
    ).fetchall()
    return [Statement(str(q), STAT_STATEMENTS, int(c)) for q, c in rows]


def logged_answers(conn: psycopg.Connection[Any]) -> list[Statement]:
    """The answers of nl.query_log that were not corrected (see the module docstring)."""
    rows = conn.execute(
        f"""
        SELECT q.chosen_sql, q.question, count(*) FROM nl.query_log q
         WHERE q.database_name = current_database() AND q.outcome = 'answered'
           AND q.chosen_sql IS NOT NULL AND q.directive IN ('nl', 'ask')
           AND NOT EXISTS (
               SELECT 1 FROM nl.query_log r
                WHERE r.role_name = q.role_name AND r.database_name = q.database_name
                  AND r.id > q.id AND r.directive IN ('nl', 'ask')
                  AND r.logged_at <= q.logged_at + interval '{REASKED_WITHIN}')
         GROUP BY q.chosen_sql, q.question
        """  # noqa: S608 (a constant interval)
    ).fetchall()
    return [Statement(str(sql), QUERY_LOG, int(n), str(question)) for sql, question, n in rows]


class _Progress:
    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream, self.total, self.done = stream, total, 0
        self.started = self._shown = time.monotonic()

    def step(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.stream is not None and (
            now - self._shown >= LOG_INTERVAL_S or self.done == self.total
        ):
            self._shown = now
            print(
                f"learn: {self.done}/{self.total} new statements embedded "
                f"({now - self.started:.0f} s)",
                file=self.stream,
                flush=True,
            )


def learn(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    *,
    sources: Sequence[str] = (STAT_STATEMENTS, QUERY_LOG),
    files: Iterable[str] = (),
    progress: bool = True,
) -> LearnReport:
    """Read `sources` (and the SQL texts of `files`) and write what is new to nl.ambiguity;
    `conn` is an autocommit connection as the owner of the nl tables."""
    report = LearnReport()
    if conn.execute("SELECT to_regclass('nl.ambiguity')").fetchone() in (None, (None,)):
        raise LearnError("this database has no nl.ambiguity: run pgnl migrate first")
    statements: list[Statement] = []
    if STAT_STATEMENTS in sources:
        found = stat_statements(conn, report)
        report.read[STAT_STATEMENTS] = len(found)
        statements += found
    if QUERY_LOG in sources:
        found = logged_answers(conn)
        report.read["nl.query_log"] = len(found)
        statements += found
    for text in files:
        found = statements_of_file(text)
        report.read[FILE] = report.read.get(FILE, 0) + len(found)
        statements += found
    schema = introspect(PsycopgDatabase(conn), name=conn.info.dbname)
    write(conn, embedder, schema, statements, report, stream=sys.stderr if progress else None)
    return report


def write(
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    schema: Schema,
    statements: Sequence[Statement],
    report: LearnReport,
    *,
    stream: TextIO | None = None,
) -> None:
    """The statements' records written to nl.ambiguity (new ones embedded)."""
    merged: dict[str, tuple[Record, Statement]] = {}
    for statement in statements:
        record = record_of(statement.sql, schema)
        if record is None:
            report.skipped += 1
            continue
        if record.statement_hash in merged:
            first, seen = merged[record.statement_hash]
            calls = seen.calls + statement.calls
            merged[record.statement_hash] = (
                first,
                Statement(seen.sql, seen.source, calls, seen.question or statement.question),
            )
        else:
            merged[record.statement_hash] = (record, statement)
    known = {
        row[0]
        for row in conn.execute(
            "SELECT statement_hash FROM nl.ambiguity WHERE database_name = current_database()"
        )
    }
    for digest, (_, statement) in merged.items():
        if digest in known:
            conn.execute(
                "UPDATE nl.ambiguity SET calls = greatest(calls, %s), last_seen = now() "
                "WHERE database_name = current_database() AND statement_hash = %s",
                [statement.calls, digest],
            )
            report.updated += 1
    _ask_by_users(conn, embedder, {d: s.question for d, (_, s) in merged.items() if d in known})
    new = [(r, s) for digest, (r, s) in merged.items() if digest not in known]
    shown = _Progress(stream, len(new))
    for start in range(0, len(new), BATCH):
        batch = new[start : start + BATCH]
        texts = [s.question or r.description for r, s in batch]
        vectors = checked_embeddings(embedder, texts)
        with conn.transaction():
            for (record, statement), vector in zip(batch, vectors, strict=True):
                insert(conn, record, statement, vector_literal(vector))
        report.added += len(batch)
        shown.step(len(batch))


def _ask_by_users(
    conn: psycopg.Connection[Any], embedder: Embedder, questions: dict[str, str | None]
) -> None:
    """Known records that now come with a user's question (nl.query_log) where they had none, or
    only the LLM's: that question written, and embedded in place of what was."""
    asked = {digest: q for digest, q in questions.items() if q}
    if not asked:
        return
    rows = conn.execute(
        "SELECT statement_hash FROM nl.ambiguity WHERE database_name = current_database() "
        "AND statement_hash = ANY(%s) AND (question IS NULL OR synthetic)",
        [list(asked)],
    ).fetchall()
    digests = [str(row[0]) for row in rows]
    for start in range(0, len(digests), BATCH):
        batch = digests[start : start + BATCH]
        vectors = checked_embeddings(embedder, [asked[d] for d in batch])
        with conn.transaction():
            for digest, vector in zip(batch, vectors, strict=True):
                conn.execute(
                    "UPDATE nl.ambiguity SET question = %s, synthetic = false, "
                    "embedding = %s::vector "
                    "WHERE database_name = current_database() AND statement_hash = %s",
                    [asked[digest], vector_literal(vector), digest],
                )


INSERT = """
INSERT INTO nl.ambiguity
       (statement_hash, fingerprint, statement, source, calls, table_oids, column_oids,
        column_attnums, features, filter_values, question, description, embedding)
SELECT %(hash)s, %(fingerprint)s, %(statement)s, %(source)s, %(calls)s,
       ARRAY(SELECT to_regclass(t)::oid FROM unnest(%(tables)s::text[]) t),
       coalesce(read.oids, '{}'), coalesce(read.attnums, '{}'),
       %(features)s::text[], %(filter_values)s::jsonb, %(question)s, %(description)s,
       %(embedding)s::vector
  FROM (SELECT array_agg(a.attrelid ORDER BY c.n) AS oids,
               array_agg(a.attnum ORDER BY c.n) AS attnums
          FROM unnest(%(column_tables)s::text[], %(column_names)s::text[])
               WITH ORDINALITY AS c(t, name, n)
          JOIN pg_attribute a ON a.attrelid = to_regclass(c.t) AND a.attname = c.name) AS read
ON CONFLICT (database_name, statement_hash) DO NOTHING
"""


def insert(
    conn: psycopg.Connection[Any], record: Record, statement: Statement, embedding: str
) -> None:
    conn.execute(
        INSERT,
        {
            "hash": record.statement_hash,
            "fingerprint": record.fingerprint,
            "statement": record.statement,
            "source": statement.source,
            "calls": statement.calls,
            "tables": [f"{quote_ident(s)}.{quote_ident(t)}" for s, t in record.tables],
            "column_tables": [f"{quote_ident(s)}.{quote_ident(t)}" for s, t, _ in record.columns],
            "column_names": [c for _, _, c in record.columns],
            "features": list(record.features),
            "filter_values": json.dumps(record.filter_values),
            "question": statement.question,
            "description": record.description,
            "embedding": embedding,
        },
    )
