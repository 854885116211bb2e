"""The schema the models see: tables, their columns, primary and foreign keys.

One `Schema` type, made from two sources: Spider's tables.json (`from_spider`, for training and
measuring) and a live PostgreSQL database (`introspect`, for answering questions). Columns are
numbered once, across the whole schema, in table order (`Schema.columns`): the models refer to a
column by that number and to a table by its position, and `Schema` maps both back to names.

A natural-language name (`Column.words`, `Table.words`) is what the models read: Spider's
annotated names where there are some, else the identifier split into lower-case words
(`home_city` → "home city", `HomeCity` → "home city"). The sketch stage also splits names run
together in lower case into words of its tokenizer (`spelled_out`: `surfacearea` → "surface
area", as an unquoted `SurfaceArea` is stored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.nl2sql.database import Database

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[_\W]+")
_NUMERIC_TYPE = re.compile(
    r"^(number|int|integer|bigint|smallint|tinyint|mediumint|int[248]|numeric|decimal|real"
    r"|double precision|double|float[48]?|serial|bigserial|smallserial|money)\b",
    re.IGNORECASE,
)


def words_of(identifier: str) -> str:
    """An identifier as lower-case words: `home_city`, `HomeCity`, `homeCity` → "home city"."""
    spaced = _CAMEL.sub(" ", identifier)
    return " ".join(part for part in _SEPARATORS.split(spaced.lower()) if part)


@dataclass(frozen=True)
class Column:
    """One column; `table` is the index of its table in `Schema.tables`."""

    table: int
    name: str
    type: str = "text"
    words: str = ""
    primary_key: bool = False
    comment: str = ""

    @property
    def label(self) -> str:
        """The words the models read for this column."""
        return self.words or words_of(self.name)

    @property
    def numeric(self) -> bool:
        """Whether the column's type holds numbers (PostgreSQL's, or SQLite's as Spider
        declares them)."""
        return bool(_NUMERIC_TYPE.match(self.type.strip()))


@dataclass(frozen=True)
class Table:
    name: str
    schema: str = "public"
    words: str = ""
    comment: str = ""

    @property
    def label(self) -> str:
        return self.words or words_of(self.name)

    @property
    def qualified_name(self) -> str:
        """`name` for a table of schema `public`, else `schema.name` (unquoted, for display)."""
        return self.name if self.schema == "public" else f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class ForeignKey:
    """`column` (global index) references `referenced` (global index)."""

    column: int
    referenced: int


@dataclass(frozen=True)
class Schema:
    """A database's tables and columns, numbered. `columns` is in table order: the columns of
    table 0 first, then table 1's, and so on."""

    name: str
    tables: tuple[Table, ...]
    columns: tuple[Column, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()

    def __post_init__(self) -> None:
        previous = 0
        for index, column in enumerate(self.columns):
            if not 0 <= column.table < len(self.tables):
                raise ValueError(f"column {index} ({column.name}) names no table")
            if column.table < previous:
                raise ValueError("Schema.columns must be in table order")
            previous = column.table
        for key in self.foreign_keys:
            for index in (key.column, key.referenced):
                if not 0 <= index < len(self.columns):
                    raise ValueError(f"foreign key names column {index}, which does not exist")

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        """The dataclass hash, computed once: the sketch stage's caches are keyed by the schema,
        and hashing every table and column anew on each look-up took a quarter of its ranking
        time."""
        return hash((self.name, self.tables, self.columns, self.foreign_keys))

    @cached_property
    def table_columns(self) -> tuple[tuple[int, ...], ...]:
        """For each table, the global indexes of its columns."""
        grouped: list[list[int]] = [[] for _ in self.tables]
        for index, column in enumerate(self.columns):
            grouped[column.table].append(index)
        return tuple(tuple(group) for group in grouped)

    def primary_key(self, table: int) -> tuple[int, ...]:
        """The global indexes of a table's primary-key columns (none where it has no key)."""
        return tuple(c for c in self.table_columns[table] if self.columns[c].primary_key)

    @cached_property
    def table_edges(self) -> tuple[tuple[int, int], ...]:
        """Pairs of tables joined by a foreign key (referencing table, referenced table)."""
        edges = {
            (self.columns[key.column].table, self.columns[key.referenced].table)
            for key in self.foreign_keys
        }
        return tuple(sorted(edges))

    def referenced_tables(self, column: int) -> frozenset[int]:
        """The tables whose keys `column` references (none where it is no foreign key)."""
        return frozenset(
            self.columns[key.referenced].table for key in self.foreign_keys if key.column == column
        )

    def qualified(self, column: int) -> str:
        """`table.column` for a global column index."""
        item = self.columns[column]
        return f"{self.tables[item.table].name}.{item.name}"

    def table_index(self, name: str) -> int:
        """The index of the table called `name` (case-insensitive); KeyError when none."""
        wanted = name.lower()
        for index, table in enumerate(self.tables):
            if table.name.lower() == wanted:
                return index
        raise KeyError(name)

    def column_index(self, table: int, name: str) -> int:
        """The global index of column `name` of table `table` (case-insensitive)."""
        wanted = name.lower()
        for index in self.table_columns[table]:
            if self.columns[index].name.lower() == wanted:
                return index
        raise KeyError(f"{self.tables[table].name}.{name}")


def from_spider(entry: dict[str, Any]) -> Schema:
    """A schema from one entry of Spider's tables.json (the `*` pseudo-column is dropped, so
    global indexes here are Spider's minus one)."""
    tables = tuple(
        Table(name=original, words=words)
        for original, words in zip(entry["table_names_original"], entry["table_names"], strict=True)
    )
    primary: set[int] = set()
    for key in entry["primary_keys"]:
        primary.update(key if isinstance(key, list) else [key])
    columns = []
    for index, ((table, original), (_, words), kind) in enumerate(
        zip(
            entry["column_names_original"],
            entry["column_names"],
            entry["column_types"],
            strict=True,
        )
    ):
        if table < 0:
            continue
        columns.append(
            Column(table=table, name=original, type=kind, words=words, primary_key=index in primary)
        )
    keys = tuple(ForeignKey(column=a - 1, referenced=b - 1) for a, b in entry["foreign_keys"])
    return Schema(name=entry["db_id"], tables=tables, columns=tuple(columns), foreign_keys=keys)


def load_spider_schemas(path: Path) -> dict[str, Schema]:
    """Every schema of a Spider tables.json, by db_id."""
    entries: Sequence[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return {entry["db_id"]: from_spider(entry) for entry in entries}


def tables_of(schema: Schema, columns: Iterable[int]) -> frozenset[int]:
    """The tables the given global column indexes belong to."""
    return frozenset(schema.columns[column].table for column in columns)


# The relations `introspect` reads and `catalog_fingerprint` covers: tables (plain and
# partitioned, not their partitions), views, materialized views and foreign tables, outside the
# system schemas, the temporary schemas and pgnl's own `nl`.
_IN_SCOPE = """
    c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
    AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'nl')
    AND n.nspname !~ '^pg_(toast|temp)'
"""

_COLUMNS_SQL = f"""
SELECT n.nspname::text, c.relname::text, c.oid::bigint, a.attnum::int, a.attname::text,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                WHERE k.conrelid = c.oid AND k.contype = 'p' AND a.attnum = ANY (k.conkey)),
       coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), ''),
       coalesce(pg_catalog.col_description(c.oid, a.attnum), ''),
       pg_catalog.current_database()::text
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE {_IN_SCOPE}
   AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
   AND pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT')
 ORDER BY n.nspname <> 'public', n.nspname COLLATE "C", c.relname COLLATE "C", a.attnum
"""  # noqa: S608 (_IN_SCOPE is a constant)

# Every foreign key's column pairs (conkey[i] references confkey[i]); `introspect` keeps the
# pairs it can see both ends of.
_FOREIGN_KEYS_SQL = """
SELECT k.conrelid::bigint, pair.attnum::int, k.confrelid::bigint, pair.fattnum::int
  FROM pg_catalog.pg_constraint k
 CROSS JOIN LATERAL unnest(k.conkey, k.confkey) AS pair(attnum, fattnum)
 WHERE k.contype = 'f'
"""

# One row per catalog fact `introspect` depends on, tagged by kind, hashed in a stable order:
# relations (name, schema, kind, grants, the role's schema usage), their columns (name, number,
# type as shown, grants, whether the role may read it), primary and foreign keys, and comments.
# Row data, statistics and storage (relpages, reltuples, relfilenode) are left out.
_FINGERPRINT_SQL = f"""
WITH rel AS (
    SELECT c.oid, n.nspname, c.relname, c.relkind, c.relacl, n.nspacl,
           pg_catalog.has_schema_privilege(n.oid, 'USAGE') AS usable
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE {_IN_SCOPE}
)
SELECT md5(coalesce(string_agg(fact, E'\\n' ORDER BY fact COLLATE "C"), ''))
  FROM (
    SELECT 'r' || ROW(r.oid, r.nspname, r.relname, r.relkind, r.relacl, r.nspacl, r.usable)::text
      FROM rel r
    UNION ALL
    SELECT 'a' || ROW(a.attrelid, a.attnum, a.attname,
                      pg_catalog.format_type(a.atttypid, a.atttypmod), a.attacl,
                      pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT'))::text
      FROM pg_catalog.pg_attribute a
      JOIN rel r ON r.oid = a.attrelid
     WHERE a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'k' || ROW(k.oid, k.contype, k.conrelid, k.conkey, k.confrelid, k.confkey)::text
      FROM pg_catalog.pg_constraint k
      JOIN rel r ON r.oid = k.conrelid
     WHERE k.contype IN ('p', 'f')
    UNION ALL
    SELECT 'd' || ROW(d.objoid, d.objsubid, d.description)::text
      FROM pg_catalog.pg_description d
      JOIN rel r ON r.oid = d.objoid
     WHERE d.classoid = 'pg_catalog.pg_class'::regclass
  ) AS facts(fact)
"""  # noqa: S608 (_IN_SCOPE is a constant)


def introspect(db: Database, *, name: str = "", timeout_s: float | None = 10.0) -> Schema:
    """The schema of the database `db` is connected to, as its current role sees it.

    Returns a `Schema` named `name` (or the database's name) holding the tables, partitioned
    tables, views, materialized views and foreign tables of every schema but `pg_catalog`,
    `information_schema`, `pg_toast*`, the temporary schemas and pgnl's own `nl` (partitions
    are left out: their parent stands for them). Visibility is decided by the role's
    privileges, as PostgreSQL checks them for a query: a column is included when the role has
    USAGE on its schema and SELECT on the column (`has_column_privilege`, which a table-level
    grant, a column grant, a grant to PUBLIC or to a role it belongs to, or superuser all
    satisfy); a table is included when at least one of its columns is, with only those columns.

    Tables come schema `public` first, then the other schemas in byte order, and by name within
    a schema; columns in their table's order (`attnum`). `Table.schema` is the schema name,
    `Column.type` the type as `format_type` writes it, `Column.primary_key` whether the column
    is part of the primary key, and `comment` the `COMMENT ON` text ("" where none). A foreign
    key becomes one `ForeignKey` per column pair, kept only where both columns are visible.

    Two round trips (columns, foreign keys), each under `timeout_s`; a third when no column is
    visible and `name` is empty.
    """
    rows = db.fetch(_COLUMNS_SQL, timeout_s=timeout_s)
    tables: list[Table] = []
    columns: list[Column] = []
    by_attnum: dict[tuple[int, int], int] = {}
    table_oids: dict[int, int] = {}
    database = ""
    for (
        schema_name,
        table_name,
        table_oid,
        attnum,
        column_name,
        type_name,
        is_primary,
        table_comment,
        column_comment,
        current,
    ) in rows:
        database = current
        if table_oid not in table_oids:
            table_oids[table_oid] = len(tables)
            tables.append(Table(name=table_name, schema=schema_name, comment=table_comment))
        by_attnum[(table_oid, attnum)] = len(columns)
        columns.append(
            Column(
                table=table_oids[table_oid],
                name=column_name,
                type=type_name,
                primary_key=bool(is_primary),
                comment=column_comment,
            )
        )
    keys: set[ForeignKey] = set()
    if columns:
        for table_oid, attnum, referenced_oid, referenced_attnum in db.fetch(
            _FOREIGN_KEYS_SQL, timeout_s=timeout_s
        ):
            column = by_attnum.get((table_oid, attnum))
            referenced = by_attnum.get((referenced_oid, referenced_attnum))
            if column is not None and referenced is not None:
                keys.add(ForeignKey(column=column, referenced=referenced))
    if not name and not database:
        database = db.fetch("SELECT pg_catalog.current_database()::text", timeout_s=timeout_s)[0][0]
    return Schema(
        name=name or str(database),
        tables=tuple(tables),
        columns=tuple(columns),
        foreign_keys=tuple(sorted(keys, key=lambda key: (key.column, key.referenced))),
    )


def catalog_fingerprint(db: Database, *, timeout_s: float | None = 10.0) -> str:
    """A hex digest (32 digits) of the catalog rows `introspect` reads, in one query.

    It changes when DDL changes what `introspect` would return for the current role: relations
    or columns created, dropped, renamed or retyped, primary and foreign keys, comments, and
    the grants that decide visibility (table and column ACLs, schema USAGE, and the role's
    resulting SELECT privilege per column, so that role membership counts too). It does not
    change when only data does (INSERT, UPDATE, DELETE, TRUNCATE, VACUUM, ANALYZE). It is the
    current role's: roles that may read different columns get different fingerprints of the
    same database. It may also change for DDL that leaves `introspect`'s result alone (a grant
    of another privilege, a dropped column the role could not see).
    """
    rows = db.fetch(_FINGERPRINT_SQL, timeout_s=timeout_s)
    return str(rows[0][0])


# Words a run-together name is split into besides those of three letters or more.
_SHORT_WORDS = frozenset({"of", "id", "no", "is", "to", "by", "yn"})
_MAX_PARTS = 3


def _split_word(word: str, vocabulary: frozenset[str]) -> list[str] | None:
    """A run-together lower-case word as the fewest words of `vocabulary` (at most three,
    each of three letters or more or a short word like "of"): "surfacearea" -> surface area,
    "headofstate" -> head of state. None where it is a word itself or has no such split."""
    singulars = {word, word[:-1] if word.endswith("s") else word, word[:-2] + "y"}
    if singulars & vocabulary or not word.isalpha() or len(word) < 5:
        return None  # a word, or the plural of one ("paragraphs")
    best: list[list[str] | None] = [[]] + [None] * len(word)
    for end in range(1, len(word) + 1):
        for start in range(max(0, end - 20), end):
            part, before = word[start:end], best[start]
            if before is None or len(before) >= _MAX_PARTS:
                continue
            if part in vocabulary and (len(part) >= 3 or part in _SHORT_WORDS):
                candidate = [*before, part]
                current = best[end]
                if current is None or len(candidate) < len(current):
                    best[end] = candidate
    found = best[len(word)]
    return found if found is not None and len(found) > 1 else None


def spelled_out(schema: Schema, vocabulary: frozenset[str]) -> Schema:
    """The schema with run-together names split into words where its names have no words of
    their own (`Column.words`): a database created with unquoted CamelCase names holds
    `surfacearea` and `lifeexpectancy`, which the models read best as "surface area" and
    "life expectancy", as they were trained."""

    def words(label: str) -> str:
        parts: list[str] = []
        for word in label.split():
            parts.extend(_split_word(word, vocabulary) or [word])
        return " ".join(parts)

    columns = tuple(
        c if c.words or words(c.label) == c.label else replace(c, words=words(c.label))
        for c in schema.columns
    )
    tables = tuple(
        t if t.words or words(t.label) == t.label else replace(t, words=words(t.label))
        for t in schema.tables
    )
    if columns == schema.columns and tables == schema.tables:
        return schema
    return replace(schema, tables=tables, columns=columns)


SCHEMA_CACHE = 64
"""Schemas `SchemaCache` keeps by default."""


class SchemaCache:
    """Introspected schemas by catalog fingerprint (which is per database state and per role's
    view of it), the most recently used kept."""

    def __init__(self, size: int = SCHEMA_CACHE) -> None:
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
