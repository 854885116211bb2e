"""Which columns the value index reads, and reading their distinct values.

Considered: the columns of ordinary and partitioned tables and of materialized views (not
partitions, whose parent is read; not tables that belong to an extension) in the configured
schemas ([index] schemas; by default every schema but pg_catalog, information_schema, nl and
pg_toast), whose type is text-like: text, varchar, char(n), citext, an enum, or a domain over one
of them.

Skipped by default, each with the reason in the build report:

- primary-key and foreign-key columns: identifiers, not names;
- columns whose name says identifier, secret or address: `id`, `*_id`, `*Id`, `uuid`, `guid`,
  `*_key`, `hash`, `digest`, `checksum`, `token`, `secret`, `password`, `salt`, `url`, `uri`,
  `href`, `website`, `email`. E-mail addresses are skipped on purpose: nearly one per row,
  personal data, and asked about exactly, so similarity search has nothing to offer for them;
- columns whose values are mostly (half or more of a sample of distinct values) URLs, e-mail
  addresses, UUIDs, hashes or tokens, dates or times, values with no letter at all (numbers, phone
  numbers, codes), or longer than [index] max_value_length (free text);
- columns the indexing role may not SELECT.

Within a kept column the same value rules apply one value at a time (a long or URL-like value is
left out, the rest is indexed), and only the [index] max_distinct_per_column most frequent
distinct values are kept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import sql

from proxy.config import IndexSettings
from proxy.nl2sql.database import PGNL_MARK
from proxy.valueindex.common import ColumnRef
from proxy.valueindex.connection import IndexConnection

DEFAULT_EXCLUDED_SCHEMAS = ("pg_catalog", "information_schema", "nl", "pg_toast")
TEXT_TYPES = frozenset({"text", "varchar", "bpchar", "citext"})
# A btree entry holds at most about 2700 bytes; values above this are never indexed.
MAX_VALUE_BYTES = 2000
SAMPLE_ROWS = 2000
SAMPLE_DISTINCT = 200

_NAME_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^(id|uuid|guid|oid)$|[_-](id|uuid|guid)s?$|^(id|uuid|guid)[_-]", re.I),
        "an identifier",
    ),
    (re.compile(r"[a-z0-9](Id|ID|Uuid|UUID|Guid|GUID)s?$"), "an identifier"),
    (
        re.compile(
            r"(^|[_-])(key|hash|digest|checksum|sha\d*|md5|token|secret|password|passwd|salt"
            r"|signature)s?([_-]|$)",
            re.I,
        ),
        "a key, hash or secret",
    ),
    (re.compile(r"(^|[_-])(url|uri|href|website|homepage)s?([_-]|$)", re.I), "a URL"),
    (re.compile(r"(^|[_-])e[_-]?mail(s|[_-]address(es)?)?([_-]|$)", re.I), "an e-mail address"),
)

_VALUE_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^([a-z][a-z0-9+.-]*://|www\.)\S+$", re.I), "URLs"),
    (re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.I), "e-mail addresses"),
    (
        re.compile(r"^\{?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\}?$", re.I),
        "UUIDs",
    ),
    (re.compile(r"^(0x)?[0-9a-f]{16,}$", re.I), "hashes"),
    (re.compile(r"^(?=.*\d)(?=.*[a-z])[a-z0-9+/_=-]{24,}$", re.I), "hashes or tokens"),
    (
        re.compile(
            r"^\d{4}-\d{1,2}-\d{1,2}([ t]\d|$)|^\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}$"
            r"|^\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*(am|pm)?$",
            re.I,
        ),
        "dates or times",
    ),
)
_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class ColumnInfo:
    """A text-like column found in the catalog, with why it is skipped (None: it is read)."""

    ref: ColumnRef
    schema_oid: int
    table_oid: int
    attnum: int
    type_name: str
    skip_reason: str | None = None
    row_security: bool = False
    is_key: bool = False  # part of a primary or foreign key: indexed only as codes


@dataclass(frozen=True)
class ColumnValues:
    """The distinct values kept for one column, most frequent first, and whether they are all of
    the column's distinct values (no cap reached, none filtered out)."""

    values: list[tuple[str, int]]
    complete: bool


def name_skip_reason(column: str) -> str | None:
    """Why a column's name alone excludes it, or None."""
    for pattern, what in _NAME_RULES:
        if pattern.search(column):
            return f"its name looks like {what}"
    return None


def value_shape(value: str, max_length: int) -> str | None:
    """What makes a value not a name ('URLs', 'hashes', 'long free text'…), or None."""
    if len(value) > max_length or len(value.encode()) > MAX_VALUE_BYTES:
        return "long free text"
    stripped = value.strip()
    for pattern, what in _VALUE_SHAPES:
        if pattern.match(stripped):
            return what
    if not _LETTER.search(value):
        return "numbers or codes without a letter"
    return None


def sample_skip_reason(sample: Sequence[str], max_length: int) -> str | None:
    """Why a column is skipped given a sample of its distinct values, or None.

    A column is skipped when half or more of the sample has one shape that is not a name.
    """
    if not sample:
        return None
    shapes = Counter(shape for value in sample if (shape := value_shape(value, max_length)))
    if not shapes:
        return None
    shape, count = shapes.most_common(1)[0]
    if count * 2 < len(sample):
        return None
    if shape == "long free text":
        return f"its values are mostly longer than {max_length} characters (free text)"
    return f"its values are mostly {shape}"


def key_skip_reason(values: ColumnValues, settings: IndexSettings) -> str | None:
    """Why a key column's values are not codes users type (too many, or too long), or None."""
    if not values.complete or len(values.values) > settings.max_key_values:
        return (
            f"it is part of a primary or foreign key with more than {settings.max_key_values:,} "
            "distinct values (identifiers, not codes)"
        )
    if any(len(value) > settings.max_key_length for value, _ in values.values):
        return (
            "it is part of a primary or foreign key with values longer than "
            f"{settings.max_key_length} characters (identifiers, not codes)"
        )
    return None


def configured_schemas(settings: IndexSettings) -> list[str]:
    return [name.strip() for name in settings.schemas.split(",") if name.strip()]


def discover_columns(conn: IndexConnection, settings: IndexSettings) -> list[ColumnInfo]:
    """Every text-like column in the configured schemas, each with its skip reason if any."""
    schemas = configured_schemas(settings)
    rows = conn.rows(
        """
        SELECT n.nspname, c.relname, a.attname, n.oid, c.oid, a.attnum,
               coalesce(base.typname, t.typname), coalesce(base.typtype, t.typtype),
               EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                        WHERE k.conrelid = c.oid AND k.contype IN ('p', 'f')
                          AND a.attnum = ANY (k.conkey)),
               has_schema_privilege(n.oid, 'USAGE')
                   AND has_column_privilege(c.oid, a.attnum, 'SELECT'),
               c.relrowsecurity
          FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          JOIN pg_catalog.pg_attribute a
            ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
          LEFT JOIN pg_catalog.pg_type base ON t.typtype = 'd' AND base.oid = t.typbasetype
         WHERE c.relkind IN ('r', 'p', 'm') AND NOT c.relispartition
           AND CASE WHEN cardinality(%(schemas)s::text[]) > 0
                    THEN n.nspname = ANY (%(schemas)s::text[])
                    ELSE n.nspname <> ALL (%(excluded)s::text[])
                         AND n.nspname !~ '^pg_(toast|temp)' END
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                            WHERE d.classid = 'pg_catalog.pg_class'::regclass
                              AND d.objid = c.oid AND d.deptype = 'e')
         ORDER BY n.nspname, c.relname, a.attnum
        """,
        {"schemas": schemas, "excluded": list(DEFAULT_EXCLUDED_SCHEMAS)},
    )
    found: list[ColumnInfo] = []
    for (
        schema,
        table,
        column,
        schema_oid,
        table_oid,
        attnum,
        type_name,
        type_kind,
        is_key,
        readable,
        row_security,
    ) in rows:
        if type_name not in TEXT_TYPES and type_kind != "e":
            continue
        reason = None
        if is_key and settings.max_key_values <= 0:
            reason = "it is part of a primary or foreign key"
        elif not readable:
            reason = "the indexing role may not SELECT it"
        elif not is_key:  # a key's name ("code", "id") says nothing: its values tell
            reason = name_skip_reason(column)
        found.append(
            ColumnInfo(
                ColumnRef(schema, table, column),
                int(schema_oid),
                int(table_oid),
                int(attnum),
                type_name,
                reason,
                bool(row_security),
                bool(is_key),
            )
        )
    return found


def _source(column: ColumnInfo) -> tuple[sql.Composable, sql.Composable]:
    ref = column.ref
    return sql.Identifier(ref.schema, ref.table), sql.Identifier(ref.column)


def sample_values(conn: IndexConnection, column: ColumnInfo) -> list[str]:
    """Up to SAMPLE_DISTINCT distinct values from the first SAMPLE_ROWS non-null rows."""
    table, name = _source(column)
    query = sql.SQL(
        "SELECT DISTINCT v FROM (SELECT {name}::text AS v FROM {table} WHERE {name} IS NOT NULL "
        "LIMIT {rows}) s LIMIT {distinct}"
    ).format(name=name, table=table, rows=SAMPLE_ROWS, distinct=SAMPLE_DISTINCT) + sql.SQL(
        PGNL_MARK
    )
    return [row[0] for row in conn.rows(query)]


def read_values(conn: IndexConnection, column: ColumnInfo, settings: IndexSettings) -> ColumnValues:
    """The column's distinct values with their counts, filtered and capped (most frequent first)."""
    table, name = _source(column)
    cap = max(settings.max_distinct_per_column, 0)
    # The first row carries the number of distinct values (its value is NULL); the others are
    # the short enough values, most frequent first, one more than the cap to tell it was reached.
    query = sql.SQL(
        """
        WITH g AS (SELECT {name}::text AS v, count(*) AS n FROM {table}
                    WHERE {name} IS NOT NULL GROUP BY 1)
        SELECT NULL::text, (SELECT count(*) FROM g)
        UNION ALL
        (SELECT v, n FROM g WHERE length(v) <= {length} AND octet_length(v) <= {octets}
          ORDER BY n DESC, v LIMIT {limit})
        """
    ).format(
        name=name,
        table=table,
        length=settings.max_value_length,
        octets=MAX_VALUE_BYTES,
        limit=cap + 1,
    ) + sql.SQL(PGNL_MARK)
    rows = conn.rows(query)
    distinct_total = next(int(n) for v, n in rows if v is None)
    fetched = [(v, int(n)) for v, n in rows if v is not None]
    kept = [(v, n) for v, n in fetched if value_shape(v, settings.max_value_length) is None][:cap]
    return ColumnValues(kept, complete=len(kept) == distinct_total)
