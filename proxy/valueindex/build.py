"""Building and refreshing the value index (`pgnl index`, or `build_index` from Python).

A refresh reads each eligible column's distinct values (see `scan`) and compares them with what
the last refresh saw, through a per-column fingerprint in `nl.value_index_columns`: sha256 over
the kept values and their counts, sorted by value (and whether they are all of the column's
values). A column whose fingerprint did not change costs one read of the column and nothing
else. A column that changed is brought up to date value by value: only values that are new to it
go through the embedder; values that vanished are deleted; counts that moved are updated. A
column or table that no longer exists, or is no longer eligible, has its rows deleted.

Safe while the database is in use: source tables are read with plain SELECTs, a table's columns
in one short transaction (row_security off, so that a role that would see only some rows is told
so instead of indexing part of a table; a lock_timeout, so that a table locked by DDL is skipped,
its previous entries kept, after one wait rather than one a column). The model runs in a worker
thread on groups of whole columns ([index] batch_size values, the embedder sorting them by
length), starting while the columns are still being read; embeddings not yet written are held
for at most about two groups (see _Embedding). A text two columns hold is embedded once. Each
group is written in one transaction, after its values are embedded, so readers see a column
either as it was or as it is, never half done. A session-level advisory lock makes concurrent
refreshes take turns. Rows go in with binary COPY (the embedding in pgvector's binary form).

A bulk refresh (the first, or one that adds as many values as the index holds) drops the HNSW
and trigram indexes first and builds them once at the end: maintaining an HNSW graph row by row
costs several times more than building it in one pass (docs/measurements.md). The graph's
parameters follow
the number of values held (common.graph_for: sparser below [index] medium_graph_values, denser
from [index] large_graph_values), and so does the maintenance_work_mem it is built with.

Frequencies are the number of rows holding each value, except in tables with row-level security
enabled, where they are recorded as 0: a count over all rows would tell a role about rows it
cannot see. (Enabling or disabling row-level security on a table changes its columns'
fingerprints, so the next refresh rewrites their counts.)
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import struct
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

import psycopg
from psycopg import errors

from proxy.config import IndexSettings
from proxy.valueindex.common import (
    EMBEDDING_DIMENSION,
    INSUFFICIENT_PRIVILEGE,
    MEDIUM_GRAPH,
    ColumnRef,
    Embedder,
    HnswGraph,
    ValueIndexError,
    checked_embeddings,
    embedder_signature,
    graph_for,
    graph_memory_mb,
    normalise,
    quote_ident,
)
from proxy.valueindex.connection import (
    IndexConnection,
    PsycopgIndexConnection,
    ValueRow,
)
from proxy.valueindex.progress import Progress
from proxy.valueindex.scan import (
    ColumnInfo,
    ColumnValues,
    discover_columns,
    key_skip_reason,
    read_values,
    sample_skip_reason,
    sample_values,
)

log = logging.getLogger(__name__)

INDEX_LOCK = 2
EAGER_GROUP = 64  # values: one ONNX batch of the embedder (runtime.Embedder.batch_size)
LOCK_TIMEOUT = "5s"


@dataclass
class BuildReport:
    """What one build or refresh did."""

    columns_scanned: int = 0
    added: list[ColumnRef] = field(default_factory=list)
    changed: list[ColumnRef] = field(default_factory=list)
    unchanged: list[ColumnRef] = field(default_factory=list)
    removed: dict[ColumnRef, str] = field(default_factory=dict)
    skipped: dict[ColumnRef, str] = field(default_factory=dict)
    values_embedded: int = 0  # values written with their embedding
    values_reused: int = 0  # of those, the same text as another column's: embedded once
    values_removed: int = 0
    seconds: float = 0.0
    bulk: bool = False  # the search indexes were dropped and built again in one pass
    graph: HnswGraph | None = None  # the HNSW index was built, with these parameters
    index_seconds: float = 0.0  # of `seconds`, building the search indexes in one pass

    @property
    def values_per_second(self) -> float:
        return self.values_embedded / self.seconds if self.seconds > 0 else 0.0

    @property
    def indexed(self) -> list[ColumnRef]:
        """Every column the index now holds values of, from this run."""
        return sorted([*self.added, *self.changed, *self.unchanged])

    def summary(self) -> str:
        lines = [
            f"indexed {len(self.indexed)} of {self.columns_scanned} text columns: "
            f"{len(self.added)} new, {len(self.changed)} changed, {len(self.unchanged)} "
            f"unchanged; {len(self.removed)} removed, {len(self.skipped)} skipped",
            f"embedded {self.values_embedded:,} values in {self.seconds:.1f} s "
            f"({self.values_per_second:,.0f} values/s"
            + (
                f"; {self.values_reused:,} the same text as another column's, embedded once"
                if self.values_reused
                else ""
            )
            + f"); removed {self.values_removed:,} values"
            + ("; search indexes rebuilt in one pass" if self.bulk else "")
            + (f"; HNSW graph built with {self.graph}" if self.graph else ""),
        ]
        for title, entries in (("removed", self.removed), ("skipped", self.skipped)):
            if entries:
                lines.append(f"{title}:")
                lines += [f"  {ref}: {why}" for ref, why in sorted(entries.items())]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Stored:
    schema_oid: int
    table_oid: int
    attnum: int
    fingerprint: str
    embedder: str
    value_count: int


@dataclass(frozen=True)
class _Unreadable:
    """A column could not be read this time; `keep` says whether its old entries stay."""

    reason: str
    keep: bool


def fingerprint(values: ColumnValues) -> str:
    """sha256 over the values and their counts, sorted by value, and the completeness flag."""
    digest = hashlib.sha256(b"complete\n" if values.complete else b"capped\n")
    for value, count in sorted(values.values):
        encoded = value.encode()
        digest.update(b"%d:%b\t%d\n" % (len(encoded), encoded, count))
    return digest.hexdigest()


def _check_ready(conn: IndexConnection, embedder: Embedder) -> None:
    found = conn.rows(
        """
        SELECT c.relowner = r.oid OR r.rolsuper OR r.rolbypassrls,
               pg_catalog.pg_get_userbyid(c.relowner), current_user,
               has_table_privilege(c.oid, 'INSERT') AND has_table_privilege(c.oid, 'UPDATE')
                   AND has_table_privilege(c.oid, 'DELETE'),
               (SELECT a.atttypmod FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attname = 'embedding')
          FROM pg_catalog.pg_class c, pg_catalog.pg_roles r
         WHERE c.oid = to_regclass('nl.value_index') AND r.rolname = current_user
        """
    )
    if not found:
        raise ValueIndexError(
            "this database has no value index (nl.value_index): run pgnl migrate first"
        )
    sees_all, owner, role, may_write, dimension = found[0]
    if not (sees_all and may_write):
        raise ValueIndexError(
            f"role {role} may not write the value index: run pgnl index (or call "
            f"nl.refresh_index) as {owner} (the owner of nl.value_index, who ran pgnl migrate) "
            "or as a superuser",
            INSUFFICIENT_PRIVILEGE,
        )
    if embedder.dimension != dimension or dimension != EMBEDDING_DIMENSION:
        raise ValueIndexError(
            f"the embedder makes {embedder.dimension}-dimensional embeddings; nl.value_index "
            f"stores {dimension}-dimensional ones"
        )


def _stored_columns(conn: IndexConnection) -> dict[ColumnRef, _Stored]:
    rows = conn.rows(
        "SELECT schema_name, table_name, column_name, schema_oid, table_oid, column_attnum, "
        "fingerprint, embedder, value_count FROM nl.value_index_columns"
    )
    return {
        ColumnRef(s, t, c): _Stored(int(so), int(to), int(a), fp, e, int(n))
        for s, t, c, so, to, a, fp, e, n in rows
    }


def _read_table(
    conn: IndexConnection, columns: Sequence[ColumnInfo], settings: IndexSettings
) -> list[ColumnValues | str | _Unreadable]:
    """Each of one table's columns' values, or why it is skipped (its sample is not names), or
    why it could not be read; the columns are read in one transaction (a new one after a column
    that failed). A table that is locked is given up as a whole: its other columns would wait
    for the same lock."""
    outcomes: list[ColumnValues | str | _Unreadable] = []
    while len(outcomes) < len(columns):
        try:
            with conn.transaction():
                conn.rows(
                    "SELECT set_config('row_security', 'off', true), "
                    "set_config('lock_timeout', %s, true)",
                    [LOCK_TIMEOUT],
                )
                for column in columns[len(outcomes) :]:
                    sample = sample_values(conn, column)
                    reason = sample_skip_reason(sample, settings.max_value_length)
                    if reason is not None:
                        outcomes.append(reason)
                        continue
                    values = read_values(conn, column, settings)
                    key = key_skip_reason(values, settings) if column.is_key else None
                    outcomes.append(key if key is not None else values)
        except psycopg.DatabaseError as exc:
            if len(outcomes) == len(columns):
                raise  # not a column's read: the transaction's end
            unreadable = _unreadable(exc)
            locked = isinstance(exc, (errors.LockNotAvailable, errors.QueryCanceled))
            outcomes += [unreadable] * (len(columns) - len(outcomes) if locked else 1)
    return outcomes


def _unreadable(exc: psycopg.DatabaseError) -> _Unreadable:
    """Why a column could not be read, from the error its read raised."""
    message = (exc.diag.message_primary or str(exc)).strip()
    if isinstance(exc, (errors.UndefinedTable, errors.UndefinedColumn, errors.InvalidSchemaName)):
        return _Unreadable("it no longer exists", keep=False)
    if isinstance(exc, errors.InsufficientPrivilege):
        if "row-level security" in message:
            return _Unreadable(
                "row-level security hides some of its rows from the indexing role: run pgnl "
                "index as a superuser, the table's owner or a role with BYPASSRLS",
                keep=False,
            )
        return _Unreadable("the indexing role may not SELECT it", keep=False)
    if isinstance(exc, (errors.LockNotAvailable, errors.QueryCanceled)):
        return _Unreadable(
            f"it could not be read now ({message}); its previous entries are kept", keep=True
        )
    return _Unreadable(f"reading it failed ({message}); its previous entries are kept", keep=True)


_VECTOR_HEAD = struct.Struct("!HH")


@dataclass
class _Change:
    """What one column's refresh will do: its new values (to embed), vanished and recounted ones."""

    column: ColumnInfo
    values: ColumnValues
    fingerprint: str
    signature: str
    stored: _Stored | None
    new_values: list[str]
    gone: list[str]
    updated: list[str]
    reembed: bool  # another model made its embeddings: all of them are replaced
    replaced: int


def _plan_column(
    conn: IndexConnection,
    column: ColumnInfo,
    values: ColumnValues,
    *,
    column_fingerprint: str,
    stored: _Stored | None,
    signature: str,
    index_empty: bool,
) -> _Change:
    names = [column.ref.schema, column.ref.table, column.ref.column]
    existing: dict[str, int] = (
        {}
        if index_empty
        else dict(
            conn.rows(
                "SELECT value, frequency FROM nl.value_index "
                "WHERE schema_name = %s AND table_name = %s AND column_name = %s",
                names,
            )
        )
    )
    reembed = stored is not None and stored.embedder != signature
    replaced = len(existing) if reembed else 0
    if reembed:
        existing = {}
    current = dict(values.values)
    moved = stored is None or (stored.schema_oid, stored.table_oid, stored.attnum) != (
        column.schema_oid,
        column.table_oid,
        column.attnum,
    )
    return _Change(
        column,
        values,
        column_fingerprint,
        signature,
        stored,
        new_values=[value for value, _ in values.values if value not in existing],
        gone=[value for value in existing if value not in current],
        updated=[
            value
            for value, count in current.items()
            if value in existing and (moved or existing[value] != count)
        ],
        reembed=reembed,
        replaced=replaced,
    )


def _vectors(embedder: Embedder, values: Sequence[str]) -> list[bytes]:
    """Each value's embedding in pgvector's binary form (int16 dimension, int16 0, float4s)."""
    if not values:
        return []
    matrix = checked_embeddings(embedder, values).astype(">f4")
    head = _VECTOR_HEAD.pack(matrix.shape[1], 0)
    return [head + row.tobytes() for row in matrix]


@dataclass
class _Group:
    """Whole columns embedded together: their changes, and the texts the model embeds for them
    (each text once, and only where no earlier group of this build embeds it)."""

    number: int
    changes: list[_Change] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


class _Embedding:
    """Embeds the new values of the columns added to it in a worker thread, a group of whole
    columns at a time, so that the model works while the build reads and writes.

    A group is handed to the model when it reaches `size` texts, or as soon as it holds one
    ONNX batch while the model is idle (so that the model starts early and never waits for the
    reads); embedded groups not yet taken by the writes hold at most `2 * size` texts (a group
    is not started while it would hold more, unless nothing else is running), which bounds the
    memory the vectors take.

    A text is embedded once a build: a value that another column of the build also holds (a
    city that is also a district, a country's name that is also its local name) takes the
    vector of the first. Vectors a later group takes from an earlier one are kept until taken,
    at most `2 * size` of them; one not kept is embedded again when its group is written."""

    def __init__(self, embedder: Embedder, size: int) -> None:
        self._embedder = embedder
        self._size = max(size, 1)
        self._filling = _Group(0)
        self._first: dict[str, int] = {}  # text -> the group that embeds it
        self._wanted: dict[str, int] = {}  # text -> how many later columns take its vector
        self._kept: dict[str, bytes] = {}
        self._waiting: deque[_Group] = deque()
        self._running: deque[tuple[_Group, Future[list[bytes]]]] = deque()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgnl-embed")
        self.reused = 0  # values that took the vector of the same text in an earlier column

    def add(self, change: _Change) -> None:
        fresh = [value for value in change.new_values if value not in self._first]
        if self._filling.changes and len(self._filling.texts) + len(fresh) > self._size:
            self._close_group()
        group = self._filling
        for value in change.new_values:
            if self._first.setdefault(value, group.number) != group.number:
                self._wanted[value] = self._wanted.get(value, 0) + 1
        group.changes.append(change)
        group.texts += fresh
        self.reused += len(change.new_values) - len(fresh)
        if len(group.texts) >= EAGER_GROUP and self._model_idle():
            self._close_group()

    def groups(self) -> Iterator[tuple[list[_Change], list[bytes]]]:
        """Every group added, in order, with its changes' new values' embeddings (pgvector
        binary, in the order of the changes and of their new values)."""
        self._close_group()
        while self._running:
            group, pending = self._running.popleft()
            vectors = dict(zip(group.texts, pending.result(), strict=True))
            self._start()
            # values whose vector an earlier group made: kept, or (past the bound) made again
            later = [
                value
                for change in group.changes
                for value in change.new_values
                if self._first[value] != group.number
            ]
            missing = list(dict.fromkeys(v for v in later if v not in self._kept))
            vectors.update(zip(missing, _vectors(self._embedder, missing), strict=True))
            for value in later:
                if value not in vectors:
                    vectors[value] = self._kept[value]
                self._wanted[value] -= 1
                if not self._wanted[value]:
                    del self._wanted[value]
                    self._kept.pop(value, None)
            for value in group.texts:
                if value in self._wanted and len(self._kept) < 2 * self._size:
                    self._kept[value] = vectors[value]
            yield (
                group.changes,
                [vectors[value] for change in group.changes for value in change.new_values],
            )

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _model_idle(self) -> bool:
        return not self._waiting and all(pending.done() for _, pending in self._running)

    def _close_group(self) -> None:
        if self._filling.changes:
            self._waiting.append(self._filling)
            self._filling = _Group(self._filling.number + 1)
        self._start()

    def _start(self) -> None:
        while self._waiting:
            group = self._waiting[0]
            held = sum(len(running.texts) for running, _ in self._running)
            if self._running and held + len(group.texts) > 2 * self._size:
                return
            self._waiting.popleft()
            pending = self._pool.submit(_vectors, self._embedder, group.texts)
            self._running.append((group, pending))


def _write_group(
    conn: IndexConnection, changes: Sequence[_Change], vectors: Sequence[bytes]
) -> None:
    """Bring a group of columns' rows up to date in one transaction, their new values'
    embeddings given (in the order of the changes and of their new values): the new rows in one
    insert, the columns' bookkeeping in one statement."""
    rows: list[ValueRow] = []
    offset = 0
    with conn.transaction():
        for change in changes:
            _update_column(conn, change)
            rows += _value_rows(change, vectors[offset : offset + len(change.new_values)])
            offset += len(change.new_values)
        conn.insert_values(rows)
        conn.run(
            """
            INSERT INTO nl.value_index_columns AS c
                   (schema_name, table_name, column_name, schema_oid, table_oid, column_attnum,
                    fingerprint, embedder, value_count, complete)
            SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::oid[], %s::oid[],
                                 %s::smallint[], %s::text[], %s::text[], %s::integer[],
                                 %s::boolean[])
            ON CONFLICT (schema_name, table_name, column_name) DO UPDATE
               SET schema_oid = excluded.schema_oid, table_oid = excluded.table_oid,
                   column_attnum = excluded.column_attnum, fingerprint = excluded.fingerprint,
                   embedder = excluded.embedder,
                   value_count = excluded.value_count, complete = excluded.complete,
                   indexed_at = now(), checked_at = now()
            """,
            [
                [change.column.ref.schema for change in changes],
                [change.column.ref.table for change in changes],
                [change.column.ref.column for change in changes],
                [change.column.schema_oid for change in changes],
                [change.column.table_oid for change in changes],
                [change.column.attnum for change in changes],
                [change.fingerprint for change in changes],
                [change.signature for change in changes],
                [len(change.values.values) for change in changes],
                [change.values.complete for change in changes],
            ],
        )


def _update_column(conn: IndexConnection, change: _Change) -> None:
    """Delete a column's vanished (or re-embedded) rows and update its moved counts."""
    column = change.column
    ref = column.ref
    names = [ref.schema, ref.table, ref.column]
    if change.reembed:
        conn.run(
            "DELETE FROM nl.value_index "
            "WHERE schema_name = %s AND table_name = %s AND column_name = %s",
            names,
        )
    if change.gone:
        conn.run(
            "DELETE FROM nl.value_index WHERE schema_name = %s AND table_name = %s "
            "AND column_name = %s AND value = ANY (%s)",
            [*names, change.gone],
        )
    if change.updated:
        current = dict(change.values.values)
        conn.run(
            """
            UPDATE nl.value_index v
               SET frequency = u.n, schema_oid = %s, table_oid = %s, column_attnum = %s
              FROM unnest(%s::text[], %s::bigint[]) AS u(value, n)
             WHERE v.schema_name = %s AND v.table_name = %s AND v.column_name = %s
               AND v.value = u.value
            """,
            [
                column.schema_oid,
                column.table_oid,
                column.attnum,
                change.updated,
                [current[value] for value in change.updated],
                *names,
            ],
        )


def _value_rows(change: _Change, vectors: Sequence[bytes]) -> list[ValueRow]:
    """A column's new values as rows of nl.value_index."""
    column = change.column
    ref = column.ref
    current = dict(change.values.values)
    return [
        ValueRow(
            ref.schema,
            ref.table,
            ref.column,
            column.schema_oid,
            column.table_oid,
            column.attnum,
            value,
            normalise(value),
            current[value],
            vector,
        )
        for value, vector in zip(change.new_values, vectors, strict=True)
    ]


def _remove_column(conn: IndexConnection, ref: ColumnRef) -> int:
    names = [ref.schema, ref.table, ref.column]
    with conn.transaction():
        removed = conn.run(
            "DELETE FROM nl.value_index "
            "WHERE schema_name = %s AND table_name = %s AND column_name = %s",
            names,
        )
        conn.run(
            "DELETE FROM nl.value_index_columns "
            "WHERE schema_name = %s AND table_name = %s AND column_name = %s",
            names,
        )
    return removed


def _mark_checked(conn: IndexConnection, refs: Sequence[ColumnRef]) -> None:
    if refs:
        conn.run(
            """
            UPDATE nl.value_index_columns c SET checked_at = now()
              FROM unnest(%s::text[], %s::text[], %s::text[]) AS u(s, t, n)
             WHERE c.schema_name = u.s AND c.table_name = u.t AND c.column_name = u.n
            """,
            [[r.schema for r in refs], [r.table for r in refs], [r.column for r in refs]],
        )


EMBEDDING_INDEX = "value_index_embedding"


def _embedding_index_sql(graph: HnswGraph) -> str:
    return (
        f"CREATE INDEX {EMBEDDING_INDEX} ON nl.value_index "
        f"USING hnsw (embedding vector_cosine_ops) WITH ({graph})"
    )


def _held_values(conn: IndexConnection) -> int:
    found = conn.rows("SELECT count(*) FROM nl.value_index")
    return int(found[0][0]) if found else 0


def _built_with(conn: IndexConnection) -> tuple[int, int] | None:
    """(m, ef_construction) the HNSW index was built with (None: it is not there)."""
    found = conn.rows(
        "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass(%s)",
        [f"nl.{EMBEDDING_INDEX}"],
    )
    if not found:
        return None
    options = dict(str(option).split("=", 1) for option in found[0][0])
    return (
        int(options.get("m", MEDIUM_GRAPH.m)),
        int(options.get("ef_construction", MEDIUM_GRAPH.ef_construction)),
    )


def _set_ef_search(conn: IndexConnection, graph: HnswGraph) -> None:
    """Make the semantic look-up search this graph with its ef_search (inside the transaction
    that builds the graph, so that the two change together)."""
    try:
        with conn.transaction():
            conn.run(
                f"ALTER FUNCTION nl.search_semantic(text, integer, text, text, text) "
                f"SET hnsw.ef_search = {int(graph.ef_search)}".encode()
            )
    except errors.InsufficientPrivilege:
        log.warning(
            "the semantic look-up keeps its hnsw.ef_search, which may not suit the HNSW graph "
            "just built (%s): run pgnl index as the owner of nl.search_semantic",
            graph,
        )


def _restore_deferred(
    conn: IndexConnection, progress: Progress, settings: IndexSettings, report: BuildReport
) -> None:
    """Build again the search indexes a bulk refresh dropped (also one that was interrupted);
    the HNSW graph with the parameters for the number of values now held (report.graph)."""
    started = time.monotonic()
    pending = conn.rows(
        "SELECT index_name, definition FROM nl.value_index_deferred ORDER BY index_name"
    )
    built = None
    values = _held_values(conn) if pending else 0
    memory_mb = graph_memory_mb(values)
    for name, stored_definition in pending:
        definition = str(stored_definition)
        if name == EMBEDDING_INDEX:
            built = graph_for(values, settings)
            definition = _embedding_index_sql(built)
            progress.note(f"building index {name} ({built}) over {values:,} values")
        else:
            progress.note(f"building index {name}")
        with conn.transaction():
            conn.run(f"SET LOCAL maintenance_work_mem = '{memory_mb}MB'".encode())
            conn.run(definition.encode())
            if built is not None and name == EMBEDDING_INDEX:
                _set_ef_search(conn, built)
            conn.run("DELETE FROM nl.value_index_deferred WHERE index_name = %s", [name])
        report.graph = built or report.graph
    if pending:
        report.index_seconds += time.monotonic() - started


def _defer_search_indexes(conn: IndexConnection, only: str | None = None) -> None:
    """Drop the HNSW and trigram indexes (or just the one named), keeping their definitions to
    build them again."""
    with conn.transaction():
        indexes = conn.rows(
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = 'nl.value_index'::regclass AND NOT x.indisprimary "
            "AND (%s::text IS NULL OR i.relname = %s::text)",
            [only, only],
        )
        for name, definition in indexes:
            conn.run(
                "INSERT INTO nl.value_index_deferred (index_name, definition) VALUES (%s, %s)",
                [name, definition],
            )
            conn.run(f"DROP INDEX nl.{quote_ident(str(name))}".encode())


def _read_changes(
    conn: IndexConnection,
    eligible: Sequence[ColumnInfo],
    *,
    stored: dict[ColumnRef, _Stored],
    signature: str,
    settings: IndexSettings,
    progress: Progress,
    report: BuildReport,
    kept: set[ColumnRef],
    embedding: _Embedding,
    index_empty: bool,
) -> list[_Change]:
    """Read every eligible column; the ones that changed are returned and handed to `embedding`.
    Unchanged columns go to report.unchanged, unreadable ones to report.skipped (and to `kept`
    when their old entries stay)."""
    changes: list[_Change] = []
    for _, table_columns in itertools.groupby(eligible, key=lambda c: (c.ref.schema, c.ref.table)):
        columns = list(table_columns)
        progress.column_started(columns[0].ref)
        for column, outcome in zip(columns, _read_table(conn, columns, settings), strict=True):
            change = _changed(
                conn,
                column,
                outcome,
                stored=stored,
                signature=signature,
                report=report,
                kept=kept,
                index_empty=index_empty,
            )
            if change is None:
                progress.column_done()
            else:  # done when written
                changes.append(change)
                embedding.add(change)
    return changes


def _changed(
    conn: IndexConnection,
    column: ColumnInfo,
    outcome: ColumnValues | str | _Unreadable,
    *,
    stored: dict[ColumnRef, _Stored],
    signature: str,
    report: BuildReport,
    kept: set[ColumnRef],
    index_empty: bool,
) -> _Change | None:
    """What a column's refresh will do, from what reading it gave (None: nothing, because it is
    unchanged, skipped or unreadable, which `report` and `kept` are told)."""
    if isinstance(outcome, _Unreadable):
        report.skipped[column.ref] = outcome.reason
        if outcome.keep:
            kept.add(column.ref)
        return None
    if isinstance(outcome, str):
        report.skipped[column.ref] = outcome
        return None
    previous = stored.get(column.ref)
    if column.row_security:
        outcome = ColumnValues([(v, 0) for v, _ in outcome.values], outcome.complete)
    column_fingerprint = fingerprint(outcome)
    if (
        previous is not None
        and previous.fingerprint == column_fingerprint
        and previous.embedder == signature
        and (previous.schema_oid, previous.table_oid, previous.attnum)
        == (column.schema_oid, column.table_oid, column.attnum)
    ):
        report.unchanged.append(column.ref)
        return None
    return _plan_column(
        conn,
        column,
        outcome,
        column_fingerprint=column_fingerprint,
        stored=previous,
        signature=signature,
        index_empty=index_empty,
    )


def build_index(
    conn: psycopg.Connection[Any] | IndexConnection,
    embedder: Embedder,
    settings: IndexSettings | None = None,
    progress: bool | TextIO = True,
    *,
    only_schemas: Sequence[str] = (),
) -> BuildReport:
    """Build the value index of the connection's database, or bring it up to date.

    Run it as the role that ran `pgnl migrate` (the owner of nl.value_index) or a superuser.
    `progress`: True draws the progress line on stderr, a stream draws it there, False nothing.
    A psycopg connection must not be inside a transaction; its autocommit setting is restored.
    `only_schemas`: refresh these schemas' columns and leave the others' entries as they are
    (the default: the schemas of `settings`, and the entries of any other schema are removed).
    """
    settings = settings or IndexSettings()
    if only_schemas:
        settings = replace(settings, schemas=",".join(only_schemas))
    if isinstance(conn, psycopg.Connection):
        conn = PsycopgIndexConnection(conn)
    stream: TextIO | None = sys.stderr if progress is True else progress or None
    report = BuildReport()
    started = time.monotonic()
    with conn.job("pgnl index", INDEX_LOCK):
        _check_ready(conn, embedder)
        signature = embedder_signature(embedder)
        columns = discover_columns(conn, settings)
        stored = {
            ref: entry
            for ref, entry in _stored_columns(conn).items()
            if not only_schemas or ref.schema in only_schemas
        }
        report.columns_scanned = len(columns)
        eligible = [column for column in columns if column.skip_reason is None]
        report.skipped = {
            column.ref: column.skip_reason for column in columns if column.skip_reason is not None
        }
        tracker = Progress(stream, len(eligible))
        kept: set[ColumnRef] = set()
        embedding = _Embedding(embedder, settings.batch_size)
        try:
            _restore_deferred(conn, tracker, settings, report)
            held = _held_values(conn)  # only this build writes the index meanwhile (the lock)
            # First read every column, so that the whole refresh's size is known before a
            # row is written (the embedder starts on the new values meanwhile); then write
            # the columns that changed.
            changes = _read_changes(
                conn,
                eligible,
                stored=stored,
                signature=signature,
                settings=settings,
                progress=tracker,
                report=report,
                kept=kept,
                embedding=embedding,
                index_empty=held == 0,
            )
            coming = sum(len(change.new_values) for change in changes)
            if coming and (held == 0 or coming >= max(settings.bulk_min_values, held)):
                report.bulk = True
                _defer_search_indexes(conn)
            for group, vectors in embedding.groups():
                tracker.embedded(len(vectors))
                tracker.column_started(group[0].column.ref)
                _write_group(conn, group, vectors)
                for change in group:
                    report.values_embedded += len(change.new_values)
                    report.values_removed += len(change.gone) + change.replaced
                    written = report.added if change.stored is None else report.changed
                    written.append(change.column.ref)
                    tracker.column_done()
            report.values_reused = embedding.reused
            _mark_checked(conn, report.unchanged)
            indexed = set(report.indexed) | kept
            for ref in sorted(set(stored) - indexed):
                why = report.skipped.get(ref)
                report.removed[ref] = (
                    f"now skipped: {why}"
                    if why is not None and why != "it no longer exists"
                    else "it no longer exists (or is no longer a text column in the "
                    "indexed schemas)"
                )
                report.values_removed += _remove_column(conn, ref)
            # An index that grew past [index] medium_ or large_graph_values gets the larger
            # graph now (only a bulk refresh, which builds the graph anyway, may make it
            # smaller).
            built_with = _built_with(conn)
            wanted = graph_for(_held_values(conn), settings)
            if built_with is not None and built_with < (wanted.m, wanted.ef_construction):
                _defer_search_indexes(conn, only=EMBEDDING_INDEX)
        finally:
            embedding.close()
            _restore_deferred(conn, tracker, settings, report)
            report.seconds = time.monotonic() - started
            tracker.close()
    return report
