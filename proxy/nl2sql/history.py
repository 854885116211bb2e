"""The query history: the SQL that already runs on a database, as records later questions
retrieve (Soma-SQL's query log; table nl.ambiguity, written by `pgnl learn`: `proxy.learn`).

- `record_of(sql, schema)`: a statement as a `Record`: its parts (`readings.Parts`) as
  comparable features with no literals (`features`), the values it filters by, the tables and
  columns it reads (for the row-level security that hides a record from a role that may not
  read them), and the text embedded for retrieval (`describe`: the statement in words, where
  no question is known).
- `History`: the records nearest a question, retrieved as the asking role (so only those it
  may read), with their similarity to the question; and the statements run most often.
- `support(parts, near)`: whether the database's users run a reading: the similarity to the
  question of the nearest retrieved record of the reading's own pattern (0 where none is).
  The ambiguity stage weighs an open reading against the seed by it (`settle`); the LLM is
  shown the most run statements, or the nearest, as examples (`History.frequent`,
  `examples`, `prompts`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pglast.parser import ParseError, fingerprint

from proxy.config import AmbiguitySettings
from proxy.nl2sql.database import Database
from proxy.nl2sql.prompts import NO_EXAMPLES, Examples
from proxy.nl2sql.readings import Parts, read
from proxy.nl2sql.schema import Schema, words_of
from proxy.valueindex.common import Embedder, checked_embeddings, vector_literal

FREQUENT = "frequent"
NEAREST = "nearest"
EXAMPLES_BY = (FREQUENT, NEAREST)  # [ambiguity] history_examples_by
_MISSING = {"42P01", "42883", "3F000", "42501"}  # no nl.ambiguity (never migrated), or no grant


@dataclass(frozen=True)
class Record:
    """One statement of the history, as `pgnl learn` writes it."""

    statement: str
    statement_hash: str  # of the statement with its whitespace collapsed
    fingerprint: str  # pglast's: the same for statements that differ only in their constants
    features: tuple[str, ...]
    filter_values: dict[str, list[str]]  # table.column -> the constants it is compared with
    tables: tuple[tuple[str, str], ...]  # (schema, table) read
    columns: tuple[tuple[str, str, str], ...]  # (schema, table, column) read
    description: str  # the statement in words


@dataclass(frozen=True)
class Retrieved:
    """A record retrieved for a question."""

    statement: str
    features: frozenset[str]
    question: str | None
    calls: int
    similarity: float  # cosine of the question's embedding and the record's


def features(parts: Parts) -> frozenset[str]:
    """The parts two readings are compared by, without their literals."""
    found = {f"table {t}" for t in parts.tables}
    found |= {f"join {a} = {b}" for a, b in parts.joins}
    found |= {f"select {p}" for p in parts.projection}
    found |= {f"aggregate {a}" for a in parts.aggregates}
    found |= {f"filter {p.column} {p.operator}" for p in parts.predicates}
    found |= {f"group {g}" for g in parts.grouping}
    found |= {f"order {o}" for o in parts.ordering}
    if parts.distinct:
        found.add("distinct")
    if parts.limit is not None:
        found.add("limit")
    if parts.nested:
        found.add("nested")
    return frozenset(found)


def statement_hash(sql: str) -> str:
    return hashlib.sha256(" ".join(sql.split()).encode()).hexdigest()


def record_of(sql: str, schema: Schema) -> Record | None:
    """`sql` as a record over `schema`; None for a statement that is not one SELECT reading
    the schema's tables (DDL, writes, catalog queries, pgnl's own look-ups)."""
    parts = read(sql, schema)
    if parts is None or not parts.tables:
        return None
    tables: list[tuple[str, str]] = []
    for name in sorted(parts.tables):
        try:
            table = schema.tables[schema.table_index(name)]
        except KeyError:
            return None  # a table outside the schema (a CTE's name, the catalog)
        tables.append((table.schema, table.name))
    columns: list[tuple[str, str, str]] = []
    for qualified in sorted(parts.columns() | {c for edge in parts.joins for c in edge}):
        table_name, _, column_name = qualified.partition(".")
        try:
            index = schema.table_index(table_name)
        except KeyError:
            continue  # an output alias read as a column
        table = schema.tables[index]
        for c in schema.table_columns[index]:
            if schema.columns[c].name.lower() == column_name:
                columns.append((table.schema, table.name, schema.columns[c].name))
    values: dict[str, list[str]] = {}
    for predicate in sorted(parts.predicates, key=lambda p: (p.column, p.operator, p.values)):
        values.setdefault(predicate.column, []).extend(
            v for v in predicate.values if v not in values.get(predicate.column, [])
        )
    try:
        print_ = fingerprint(sql)
    except ParseError:
        return None
    return Record(
        statement=sql.strip(),
        statement_hash=statement_hash(sql),
        fingerprint=print_,
        features=tuple(sorted(features(parts))),
        filter_values=values,
        tables=tuple(tables),
        columns=tuple(columns),
        description=describe(parts),
    )


AGGREGATE_WORDS = {
    "count": "number of",
    "sum": "total",
    "avg": "average",
    "min": "minimum",
    "max": "maximum",
}
"""SQL's aggregates in words (`describe`)."""


def describe(parts: Parts) -> str:
    """The statement in words, as SQL reads: what it selects (its aggregates in words), from
    which tables, the columns and values it filters by, its grouping and ordering ("number of
    singer where singer country France by singer country most singer age")."""
    words: list[str] = []
    for item in parts.projection:
        words.append(_words(item))
    words.append(" ".join(words_of(t) for t in sorted(parts.tables)))
    for p in sorted(parts.predicates, key=lambda p: (p.column, p.values)):
        words.append(f"where {_words(p.column)} {' '.join(v for v in p.values if v)}")
    if parts.grouping:
        words.append("by " + " ".join(_words(g) for g in sorted(parts.grouping)))
    for o in parts.ordering:
        direction = "most" if o.endswith(" DESC") else "least"
        words.append(f"{direction} {_words(o.rsplit(' ', 1)[0])}")
    text = " ".join(w for w in words if w.strip())
    return " ".join(dict.fromkeys(text.split()))  # each word once, in order


def _words(text: str) -> str:
    for mark in "().,*=<>'\"":
        text = text.replace(mark, f" {mark} " if mark in "()" else " ")
    out: list[str] = []
    for word in text.split():
        if word.lower() in AGGREGATE_WORDS:
            out.append(AGGREGATE_WORDS[word.lower()])
        elif word not in "()" and word.upper() not in {"DISTINCT", "ASC", "DESC", "NULLS"}:
            out.append(words_of(word))
    return " ".join(out)


def support(parts: Parts, near: Sequence[Retrieved]) -> tuple[float, Retrieved | None]:
    """How the retrieved history supports a reading: the similarity to the question of the
    nearest record that is the reading's own pattern (the same features: the same query but
    for its constants), and that record; (0, None) where the history does not hold it.

    A record that shares only some of the reading's parts is no evidence for it: measured
    with a partial overlap (Jaccard) instead, the prior chose other readings that merely
    resembled the database's queries, and lost answers (docs/measurements.md)."""
    mine = features(parts)
    for record in near:  # the nearest first
        if record.features == mine:
            return max(record.similarity, 0.0), record
    return 0.0, None


def examples(near: Sequence[Retrieved], count: int, min_similarity: float) -> list[str]:
    """The statements of the `count` nearest records at least `min_similarity` close (the
    LLM's examples of what runs on the database)."""
    return [r.statement for r in near if r.similarity >= min_similarity][:count]


class History:
    """The records of nl.ambiguity nearest a question, read through `db` as its role."""

    def __init__(self, db: Database, embedder: Embedder, *, timeout_s: float | None) -> None:
        self.db = db
        self.embedder = embedder
        self.timeout_s = timeout_s

    def near(self, question: str, k: int) -> list[Retrieved]:
        """The `k` records nearest `question`; none where the database has no history (never
        migrated, or the role may not read it)."""
        if k <= 0:
            return []
        held = self._fetch(
            "SELECT EXISTS (SELECT 1 FROM nl.ambiguity WHERE database_name = current_database())",
            [],
        )
        if not held or not held[0][0]:
            return []  # no history: the question is not embedded
        vector = vector_literal(checked_embeddings(self.embedder, [question])[0])
        # nl.history_near (migration 0013) lets the index scan go on until k records this
        # role may read are found; its order is relaxed, so they are sorted here
        rows = self._fetch("SELECT * FROM nl.history_near($1::vector, $2)", [vector, k])
        near = [_retrieved(row) for row in rows]
        return sorted(near, key=lambda r: (-r.similarity, r.statement))

    def for_question(
        self, question: str, settings: AmbiguitySettings, *, llm: bool
    ) -> tuple[list[Retrieved], Examples]:
        """The records nearest `question` ([ambiguity] history_records), and the statements
        the LLM is shown (history_examples of them, chosen by history_examples_by; none
        without an LLM or a history)."""
        near = self.near(question, settings.history_records)
        if not near or not llm or settings.history_examples <= 0:
            return near, NO_EXAMPLES
        if settings.history_examples_by == NEAREST:
            shown = examples(near, settings.history_examples, settings.history_min_similarity)
            return near, Examples(tuple(shown))
        return near, Examples(tuple(self.frequent(settings.history_examples)), first=True)

    def frequent(self, k: int) -> list[str]:
        """The `k` statements run most often (that the role may read), the same for every
        question; none where the database has no history."""
        if k <= 0:
            return []
        rows = self._fetch(
            """
            SELECT statement FROM nl.ambiguity
             WHERE database_name = current_database()
             ORDER BY calls DESC, statement_hash
             LIMIT $1
            """,
            [k],
        )
        return [str(row[0]) for row in rows]

    def _fetch(self, query: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """Rows of a query on nl.ambiguity; none where the database has no history table
        (never migrated) or the role may not read it."""
        try:
            return self.db.fetch(query, params, timeout_s=self.timeout_s)
        except Exception as exc:
            if str(getattr(exc, "sqlstate", "") or "") in _MISSING:
                return []
            raise


def _retrieved(row: Sequence[Any]) -> Retrieved:
    # plain text and numbers: a `Database` may return every value as text (the proxy's does)
    statement, feats, question, calls, similarity = row
    return Retrieved(
        str(statement),
        frozenset(str(feats).split("\n")) if feats else frozenset(),
        None if question is None else str(question),
        int(calls),
        float(similarity),
    )
