"""Spider's dev databases in PostgreSQL, and Spider's gold SQL in PostgreSQL's dialect.

Library for the benchmarks that execute Spider questions on PostgreSQL (calibration, accuracy):

- `load_dev_databases(admin_dsn)` loads each Spider dev database (a SQLite file under
  `database/` of $PGNL_SPIDER_DIR, Spider's folder: `spider_dir`) into a PostgreSQL database of
  its own, `spider_<db_id>` (lower-cased), and returns db_id -> DSN. Tables go to schema
  `public` under the SQLite names, lower-cased (Spider's SQL is case-insensitive on
  identifiers), rows are copied with COPY, and
  the primary and foreign keys of `tables.json` are added where the data satisfies them (the
  others are skipped and counted). A database already loaded from the same file is re-used: the
  loader marks a finished load with a comment on the database. `wta_1`, a dev database whose
  .sqlite file Spider does not ship, is skipped, with a progress message saying so.
- `gold_queries(split)` reads the questions and gold SQL (SQLite dialect) of dev.json/train.json.
- `to_postgres(sql)` transpiles gold SQL with sqlglot (read="sqlite", write="postgres"), after
  three rewrites that keep SQLite's meaning: a double-quoted name that is not qualified becomes
  a string literal (SQLite reads `name = "Timmy"` so, and Spider's SQL never quotes an identifier
  with double quotes), identifiers are lower-cased like the loaded tables, and LIKE becomes ILIKE
  (SQLite's LIKE ignores ASCII case). What sqlglot cannot parse or generate raises
  `TranspileError`; nothing is dropped silently.

Column types: SQLite is dynamically typed and Spider's data is dirty, so a declared type is only
a hint. INTEGER-ish declarations become bigint, REAL/FLOAT/DOUBLE/NUMERIC/DECIMAL ones double
precision, the rest (TEXT, VARCHAR, DATETIME, bool...) text, and an undeclared column is typed by
its values. A column whose values do not fit its type is widened (bigint -> double precision when
every value is a number) or falls back to text. A text column in a foreign key to a numeric one
takes that type when all its values convert (SQLite joins them numerically; PostgreSQL would
refuse text = bigint). `LoadReport.fallbacks` lists every column whose type was changed.
Databases are created with LC_COLLATE "C", so text sorts by code point, as in SQLite.

    python -m benchmarks.spider_pg --dsn postgresql://postgres:pw@127.0.0.1:5432/postgres

loads every dev database into that server and prints what it did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import sqlglot
from pglast import keywords as pg_keywords
from psycopg import sql
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from model_export.spider import spider_dir as find_spider

DEV_DATABASES: tuple[str, ...] = (
    "battle_death",
    "car_1",
    "concert_singer",
    "course_teach",
    "cre_Doc_Template_Mgt",
    "dog_kennels",
    "employee_hire_evaluation",
    "flight_2",
    "museum_visit",
    "network_1",
    "orchestra",
    "pets_1",
    "poker_player",
    "real_estate_properties",
    "singer",
    "student_transcripts_tracking",
    "tvshow",
    "voter_1",
    "world_1",
    "wta_1",
)
MISSING_DATABASES = frozenset({"wta_1", "baseball_1", "soccer_1"})  # no .sqlite in Spider

LOADER_MARK = "pgnl spider loader"  # + version, db_id, hash of the file
LOADER_VERSION = 1
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


def spider_dir() -> Path:
    """Spider's folder: $PGNL_SPIDER_DIR, else the shared copy beside the checkout
    (`model_export.spider`)."""
    return find_spider()


def sqlite_path(db_id: str) -> Path:
    return spider_dir() / "database" / db_id / f"{db_id}.sqlite"


def pg_database_name(db_id: str) -> str:
    return f"spider_{db_id.lower()}"


# ---------------------------------------------------------------- gold queries


@dataclass(frozen=True)
class GoldQuery:
    db_id: str
    question: str
    sql_sqlite: str


def gold_queries(split: str = "dev") -> list[GoldQuery]:
    """The questions and gold SQL of dev.json (split="dev") or train.json (split="train")."""
    if split not in ("dev", "train"):
        raise ValueError(f"unknown Spider split {split!r}: dev or train")
    with (spider_dir() / f"{split}.json").open(encoding="utf-8") as handle:
        examples = json.load(handle)
    return [GoldQuery(e["db_id"], e["question"], e["query"]) for e in examples]


@dataclass(frozen=True)
class TableSchema:
    """One Spider database's schema as tables.json gives it, names lower-cased."""

    db_id: str
    columns: tuple[tuple[str, str], ...]  # (table, column) by tables.json column index (0: *)
    primary_keys: tuple[tuple[int, ...], ...]  # column indexes, grouped by table
    foreign_keys: tuple[tuple[int, int], ...]  # (column index, referenced column index)


@cache
def _tables_json() -> dict[str, TableSchema]:
    with (spider_dir() / "tables.json").open(encoding="utf-8") as handle:
        raw = json.load(handle)
    schemas: dict[str, TableSchema] = {}
    for entry in raw:
        tables = [t.lower() for t in entry["table_names_original"]]
        columns = tuple(
            (tables[t] if t >= 0 else "", c.lower()) for t, c in entry["column_names_original"]
        )
        grouped: dict[str, list[int]] = {}
        for key in entry["primary_keys"]:
            for index in key if isinstance(key, list) else [key]:
                grouped.setdefault(columns[index][0], []).append(index)
        schemas[entry["db_id"]] = TableSchema(
            entry["db_id"],
            columns,
            tuple(tuple(v) for v in grouped.values()),
            tuple((int(a), int(b)) for a, b in entry["foreign_keys"]),
        )
    return schemas


def table_schema(db_id: str) -> TableSchema:
    return _tables_json()[db_id]


def schema_columns(db_id: str) -> dict[str, list[str]]:
    """table -> its columns (lower-cased), from tables.json: a schema that needs no database."""
    out: dict[str, list[str]] = {}
    for table, column in table_schema(db_id).columns[1:]:
        out.setdefault(table, []).append(column)
    return out


# ---------------------------------------------------------------- SQLite SQL -> PostgreSQL


class TranspileError(ValueError):
    """sqlglot could not read the SQLite SQL or write it as PostgreSQL; the message says why."""


_SAFE_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_$]*")


def needs_quotes(name: str) -> bool:
    """Whether PostgreSQL needs `name` quoted (as quote_ident decides)."""
    return not _SAFE_IDENTIFIER.fullmatch(name) or (
        name in pg_keywords.RESERVED_KEYWORDS
        or name in pg_keywords.TYPE_FUNC_NAME_KEYWORDS
        or name in pg_keywords.COL_NAME_KEYWORDS
    )


def identifier(name: str) -> exp.Identifier:
    """A lower-case identifier, quoted only where PostgreSQL needs it."""
    name = name.lower()
    return exp.Identifier(this=name, quoted=needs_quotes(name))


def _double_quoted(text: str, node: exp.Identifier) -> bool:
    """Whether a quoted identifier was written "so" (not `so` or [so], always identifiers)."""
    start = node.meta.get("start")
    return not isinstance(start, int) or not 0 <= start < len(text) or text[start] == '"'


def parse_sqlite(sql_sqlite: str) -> exp.Expression:
    """Spider SQL (SQLite dialect) as a sqlglot tree with SQLite's meaning made explicit.

    See the module docstring: double-quoted unqualified names become strings, identifiers are
    lower-cased, LIKE becomes ILIKE. Raises TranspileError.
    """
    text = sql_sqlite.strip().rstrip(";").strip()
    try:
        statements = sqlglot.parse(text, read="sqlite", error_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise TranspileError(f"sqlglot cannot parse it as SQLite: {exc}") from exc
    if len(statements) != 1 or statements[0] is None:
        raise TranspileError(f"not exactly one statement ({len(statements)})")
    tree = statements[0]

    def rewrite(node: exp.Expression) -> exp.Expression:
        if (
            isinstance(node, exp.Column)
            and not node.table
            and isinstance(node.this, exp.Identifier)
            and node.this.quoted
            and _double_quoted(text, node.this)
        ):
            return exp.Literal.string(node.this.this)
        if isinstance(node, exp.Identifier):
            return identifier(node.this)
        return node

    tree = tree.transform(rewrite, copy=False)
    for like in list(tree.find_all(exp.Like)):
        like.replace(exp.ILike(**like.args))
    return tree


def render_postgres(tree: exp.Expression) -> str:
    """A tree from `parse_sqlite` as PostgreSQL SQL. Raises TranspileError."""
    try:
        return tree.sql(dialect="postgres", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise TranspileError(f"sqlglot cannot write it for PostgreSQL: {exc}") from exc


def to_postgres(sql_sqlite: str) -> str:
    """Spider gold SQL (SQLite) in PostgreSQL's dialect. Raises TranspileError."""
    return render_postgres(parse_sqlite(sql_sqlite))


# ---------------------------------------------------------------- loading


@dataclass
class Fallback:
    """A column whose values do not fit its declared type."""

    table: str
    column: str
    declared: str
    chosen: str
    example: str  # one value that did not fit


@dataclass
class LoadReport:
    db_id: str
    dsn: str
    reused: bool = False
    tables: int = 0
    rows: int = 0
    fallbacks: list[Fallback] = field(default_factory=list)
    keys_added: int = 0
    keys_skipped: list[str] = field(default_factory=list)  # "<constraint>: <why>"
    seconds: float = 0.0

    def summary(self) -> str:
        if self.reused:
            return f"{self.db_id}: already loaded, re-used"
        widened = ", ".join(f"{f.table}.{f.column}->{f.chosen}" for f in self.fallbacks)
        return (
            f"{self.db_id}: {self.tables} tables, {self.rows} rows, {self.keys_added} keys, "
            f"{len(self.keys_skipped)} keys skipped, {self.seconds:.2f}s"
            + (f"; types changed: {widened}" if widened else "")
        )


def database_dsn(admin_dsn: str, dbname: str) -> str:
    """`admin_dsn` pointing at another database, in the same form (URI or key=value)."""
    if admin_dsn.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(admin_dsn)
        return urlunsplit(parts._replace(path="/" + dbname))
    return psycopg.conninfo.make_conninfo(admin_dsn, dbname=dbname)


def _declared_kind(declared: str) -> str:
    upper = declared.upper()
    if "INT" in upper:
        return "bigint"
    if any(word in upper for word in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL")):
        return "double precision"
    if not upper.strip():
        return ""  # undeclared: typed by its values
    return "text"


def _fits_bigint(value: object) -> bool:
    if isinstance(value, int):
        return BIGINT_MIN <= value <= BIGINT_MAX
    return isinstance(value, float) and value.is_integer() and BIGINT_MIN <= value <= BIGINT_MAX


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).replace("\x00", "")


def choose_type(declared: str, values: Iterable[object]) -> tuple[str, str | None]:
    """The PostgreSQL type of a SQLite column, and a value that did not fit its declared type."""
    kind = _declared_kind(declared)
    if kind == "text":
        return "text", None
    not_int: object = None
    not_number: object = None
    present = False
    for value in values:
        if value is None:
            continue
        present = True
        if not_int is None and not _fits_bigint(value):
            not_int = value
        if not isinstance(value, int | float):
            not_number = value
            break
    if not_number is not None:
        return "text", _as_text(not_number)
    if kind == "":
        return ("bigint" if not_int is None else "double precision") if present else "text", None
    if kind == "bigint" and not_int is not None:
        return "double precision", _as_text(not_int)
    return kind, None


def _convert(value: object, kind: str) -> object:
    if value is None:
        return None
    if kind == "bigint":
        return int(value)  # type: ignore[call-overload]
    if kind == "double precision":
        return value
    return _as_text(value)


def _sqlite_marker(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return f"{LOADER_MARK} v{LOADER_VERSION} {path.stem} sha256:{digest}"


def _open_sqlite(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return conn


def _create_database(admin: psycopg.Connection[Any], name: str) -> None:
    ident = sql.Identifier(name)
    for ctype in ("C.UTF-8", "C"):
        try:
            admin.execute(
                sql.SQL(
                    "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' "
                    "LC_COLLATE 'C' LC_CTYPE {}"
                ).format(ident, sql.Literal(ctype))
            )
            return
        except psycopg.errors.InvalidParameterValue:
            if ctype == "C":
                raise


def load_database(
    admin_dsn: str, db_id: str, progress: Callable[[str], None] | None = None
) -> LoadReport:
    """Load one Spider database into PostgreSQL database `spider_<db_id>` (see module doc)."""
    path = sqlite_path(db_id)
    if not path.exists():
        raise FileNotFoundError(f"{db_id}: Spider has no SQLite file {path}")
    name = pg_database_name(db_id)
    dsn = database_dsn(admin_dsn, name)
    report = LoadReport(db_id, dsn)
    marker = _sqlite_marker(path)
    started = time.perf_counter()
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [name],
        ).fetchone()
        if row is not None:
            comment = row[0]
            if comment == marker:
                report.reused = True
                return report
            if comment is not None and not str(comment).startswith(LOADER_MARK):
                raise RuntimeError(
                    f"database {name} exists and was not made by this loader "
                    f"(comment {comment!r}); drop it or use another server"
                )
            if progress:
                progress(f"{db_id}: {name} is stale or half-loaded; re-creating it")
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        _create_database(admin, name)
        with psycopg.connect(dsn) as conn, _open_sqlite(path) as source:
            _copy_tables(source, conn, report)
            _add_keys(conn, table_schema(db_id), report)
            conn.execute("ANALYZE")
            conn.commit()
        admin.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(name), sql.Literal(marker)
            )
        )
    report.seconds = time.perf_counter() - started
    return report


def _copy_tables(
    source: sqlite3.Connection, conn: psycopg.Connection[Any], report: LoadReport
) -> None:
    tables = [
        str(r[0])
        for r in source.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY rowid"
        )
    ]
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        info = source.execute(f"PRAGMA table_info({quoted})").fetchall()
        names = [str(c[1]) for c in info]
        declared = [str(c[2] or "") for c in info]
        rows = source.execute(f"SELECT * FROM {quoted}").fetchall()  # noqa: S608
        kinds: list[str] = []
        for i, column in enumerate(names):
            kind, misfit = choose_type(declared[i], (r[i] for r in rows))
            kinds.append(kind)
            if misfit is not None:
                report.fallbacks.append(
                    Fallback(table.lower(), column.lower(), declared[i], kind, misfit[:40])
                )
        target = sql.Identifier("public", table.lower())
        conn.execute(
            sql.SQL("CREATE TABLE {} ({})").format(
                target,
                sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(c.lower()), sql.SQL(k))
                    for c, k in zip(names, kinds, strict=True)
                ),
            )
        )
        columns = sql.SQL(", ").join(sql.Identifier(c.lower()) for c in names)
        with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(target, columns)) as copy:
            for r in rows:
                copy.write_row([_convert(v, k) for v, k in zip(r, kinds, strict=True)])
        report.tables += 1
        report.rows += len(rows)


def _try(
    conn: psycopg.Connection[Any], statement: sql.Composed, label: str, report: LoadReport
) -> None:
    try:
        with conn.transaction():
            conn.execute(statement)
        report.keys_added += 1
    except psycopg.Error as exc:
        reason = (exc.diag.message_primary or str(exc)).strip()
        report.keys_skipped.append(f"{label}: {reason}")


def _column_type(conn: psycopg.Connection[Any], table: str, column: str) -> str | None:
    row = conn.execute(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_schema = 'public' AND table_name = %s AND column_name = %s",
        [table, column],
    ).fetchone()
    return None if row is None else str(row[0])


def _match_types(
    conn: psycopg.Connection[Any],
    child: tuple[str, str],
    parent: tuple[str, str],
    report: LoadReport,
) -> None:
    """Give the text side of a foreign key the other side's numeric type, if its values allow.

    SQLite compares a TEXT column with an INTEGER one numerically (the INTEGER side's affinity
    wins), so `concert.stadium_id = stadium.stadium_id` joins there; PostgreSQL refuses text =
    bigint. Casting the text side, where every value converts, keeps SQLite's meaning.
    """
    types = {side: _column_type(conn, *side) for side in (child, parent)}
    text_side = next((side for side, kind in types.items() if kind == "text"), None)
    other = next((kind for side, kind in types.items() if side != text_side), None)
    if text_side is None or other not in ("bigint", "double precision"):
        return
    table, column = text_side
    try:
        with conn.transaction():
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
                    sql.Identifier("public", table),
                    sql.Identifier(column),
                    sql.SQL(other),
                    sql.Identifier(column),
                    sql.SQL(other),
                )
            )
    except psycopg.Error:
        return
    report.fallbacks.append(Fallback(table, column, "text", other, "(to match a foreign key)"))


def _add_keys(conn: psycopg.Connection[Any], schema: TableSchema, report: LoadReport) -> None:
    columns = schema.columns
    primary: dict[str, tuple[str, ...]] = {}
    for key in schema.primary_keys:
        table = columns[key[0]][0]
        names = tuple(columns[i][1] for i in key)
        primary[table] = names
        _try(
            conn,
            sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                sql.Identifier("public", table),
                sql.SQL(", ").join(sql.Identifier(n) for n in names),
            ),
            f"primary key {table}({', '.join(names)})",
            report,
        )
    # Spider lists a composite foreign key as one pair a column: pairs from one table to another
    # that cover the referenced table's composite primary key are one constraint.
    grouped: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for child, parent in schema.foreign_keys:
        grouped.setdefault((columns[child][0], columns[parent][0]), []).append(
            (columns[child][1], columns[parent][1])
        )
    for (table, referenced), pairs in grouped.items():
        pk = primary.get(referenced, ())
        if len(pairs) > 1 and len(pk) > 1 and {p for _, p in pairs} == set(pk):
            constraints = [pairs]
        else:
            constraints = [[pair] for pair in pairs]
        for pairs_ in constraints:
            own = [c for c, _ in pairs_]
            theirs = [p for _, p in pairs_]
            for own_column, their_column in pairs_:
                _match_types(conn, (table, own_column), (referenced, their_column), report)
            _try(
                conn,
                sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} ({})").format(
                    sql.Identifier("public", table),
                    sql.SQL(", ").join(sql.Identifier(n) for n in own),
                    sql.Identifier("public", referenced),
                    sql.SQL(", ").join(sql.Identifier(n) for n in theirs),
                ),
                f"foreign key {table}({', '.join(own)}) -> {referenced}({', '.join(theirs)})",
                report,
            )


def load_dev_databases(
    admin_dsn: str,
    dbs: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    reports: list[LoadReport] | None = None,
) -> dict[str, str]:
    """Load Spider dev databases (all 20 by default; wta_1 has no file and is skipped).

    `admin_dsn` connects as a role that may create databases. Returns db_id -> DSN of its
    PostgreSQL database, which has the same user and password as `admin_dsn`. Each load's
    `LoadReport` is appended to `reports` when given, and its summary line sent to `progress`.
    """
    dsns: dict[str, str] = {}
    for db_id in dbs if dbs is not None else DEV_DATABASES:
        if not sqlite_path(db_id).exists():
            if progress:
                progress(f"{db_id}: skipped, Spider ships no SQLite file for it")
            continue
        report = load_database(admin_dsn, db_id, progress)
        if reports is not None:
            reports.append(report)
        if progress:
            progress(report.summary())
        dsns[db_id] = report.dsn
    return dsns


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", required=True, help="admin DSN of the target PostgreSQL server")
    parser.add_argument("--db", action="append", help="a db_id (repeatable); default: all dev")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the keys skipped")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    reports: list[LoadReport] = []
    dsns = load_dev_databases(args.dsn, args.db, lambda line: print(line, file=sys.stderr), reports)
    if args.verbose:
        for report in reports:
            for skipped_key in report.keys_skipped:
                print(f"{report.db_id}: skipped {skipped_key}", file=sys.stderr)
    skipped = sum(len(r.keys_skipped) for r in reports)
    print(
        f"{len(dsns)} databases ({sum(r.reused for r in reports)} re-used), "
        f"{sum(r.rows for r in reports)} rows, {sum(r.keys_added for r in reports)} keys added, "
        f"{skipped} skipped, {time.perf_counter() - started:.1f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
