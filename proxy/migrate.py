"""`pgnl migrate`: apply the numbered SQL files of `migrations/` (shipped as `proxy.migrations`).

Each file (`NNNN_name.sql`) is applied once, in name order, in a transaction of its own, and
recorded in `nl.schema_migrations` with the sha256 of its text. Running it again applies only the
files not yet recorded, so it is safe to rerun; an applied file whose text changed is refused
(a migration, once applied somewhere, is never edited: add a new one). A session-level advisory
lock makes concurrent runs take turns.

Before anything is written, the server is checked for what the files need: the pgvector (0.8 or
later) and pg_trgm extensions, and a role that may create them where they are not installed yet.
The errors say what to install or whom to ask.

The first file runs with the session's own search_path (so that the extensions land where
`CREATE EXTENSION` puts them for this role); the later ones run with `pg_catalog` followed by the
extensions' schemas, and name their own objects with `nl.`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import errors

log = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "proxy.migrations"
FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# pg_advisory_lock(int4, int4) keys: 'pgnl' as an integer, then one number per kind of job.
LOCK_CLASS = 0x70676E6C
MIGRATE_LOCK = 1
PGVECTOR_MINIMUM = (0, 8, 0)
OPTIONAL = "-- optional:"
NEEDS = "-- needs:"
SQL_FUNCTIONS = "0008_sql_functions"
REFRESH_INDEX = "0009_refresh_index"
PGVECTOR_INSTALL = (
    "install pgvector 0.8 or later on the server (https://github.com/pgvector/pgvector"
    "#installation; Debian/Ubuntu: apt install postgresql-<major>-pgvector), or use pgnl's "
    "embedded PostgreSQL, which has it (pgnl serve without --upstream)"
)


class MigrationError(RuntimeError):
    """The migrations cannot be applied; the message says why and what to do."""


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def optional(self) -> str | None:
        """What an optional migration needs (its first line, `-- optional: ...`), else None.
        One that fails is left unapplied, with the reason, and tried again on the next run;
        only another optional migration may depend on it (see `needs`)."""
        first = self.sql.split("\n", 1)[0]
        return first.removeprefix(OPTIONAL).strip() if first.startswith(OPTIONAL) else None

    @property
    def needs(self) -> list[str]:
        """The optional migrations this one builds on (its second line, `-- needs: NAME, ...`):
        it is left out, with them, while any of them is not applied."""
        lines = self.sql.split("\n", 2)
        second = lines[1] if len(lines) > 1 else ""
        if not second.startswith(NEEDS):
            return []
        return [name.strip() for name in second.removeprefix(NEEDS).split(",") if name.strip()]


def shipped_migrations() -> list[Migration]:
    """The migration files shipped with pgnl, in the order they apply."""
    folder = resources.files(MIGRATIONS_PACKAGE)
    found = [
        Migration(entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if FILE_NAME.match(entry.name)
    ]
    return sorted(found, key=lambda migration: migration.name)


@dataclass(frozen=True)
class ExtensionState:
    """One required extension as the server reports it (pg_available_extensions)."""

    name: str
    available: bool
    default_version: str | None = None
    installed_version: str | None = None
    superuser_only: bool = True
    trusted: bool = False


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def extension_problems(
    extensions: Sequence[ExtensionState],
    *,
    role: str,
    database: str,
    is_superuser: bool,
    may_create_in_database: bool,
) -> list[str]:
    """What stops the migrations on this server, each with what to do (empty: nothing)."""
    problems: list[str] = []
    for ext in extensions:
        if ext.name == "vector":
            if not ext.available:
                problems.append(
                    "pgvector (extension 'vector') is not installed on the PostgreSQL server: "
                    + PGVECTOR_INSTALL
                )
                continue
            version = ext.installed_version or ext.default_version or "0"
            if _version(version) < PGVECTOR_MINIMUM:
                where = "installed in this database" if ext.installed_version else "on the server"
                problems.append(
                    f"pgvector {version} is {where}; pgnl needs 0.8 or later: "
                    + PGVECTOR_INSTALL
                    + (", then run ALTER EXTENSION vector UPDATE" if ext.installed_version else "")
                )
                continue
        elif not ext.available:
            problems.append(
                f"extension {ext.name} is not installed on the PostgreSQL server: install "
                "PostgreSQL's contrib modules there (Debian/Ubuntu: postgresql-contrib), or use "
                "pgnl's embedded PostgreSQL"
            )
            continue
        if ext.installed_version or is_superuser:
            continue
        if ext.superuser_only and not ext.trusted:
            problems.append(
                f"role {role} may not create extension {ext.name} (only a superuser may): ask a "
                f"superuser to run CREATE EXTENSION {ext.name}; in database {database}, then "
                "rerun pgnl migrate"
            )
        elif not may_create_in_database:
            problems.append(
                f"role {role} may not create extension {ext.name} in database {database} (it "
                f"needs CREATE on the database): ask its owner to GRANT CREATE ON DATABASE "
                f"{database} TO {role}, or a superuser to run CREATE EXTENSION {ext.name};"
            )
    return problems


def check_server(conn: psycopg.Connection[Any]) -> None:
    """Raise `MigrationError` when the server lacks what the migrations need."""
    rows = conn.execute(
        """
        SELECT wanted.name, e.name IS NOT NULL, e.default_version, e.installed_version,
               coalesce(v.superuser, true), coalesce(v.trusted, false)
          FROM unnest(ARRAY['vector', 'pg_trgm']) AS wanted(name)
          LEFT JOIN pg_catalog.pg_available_extensions e ON e.name = wanted.name
          LEFT JOIN pg_catalog.pg_available_extension_versions v
                 ON v.name = e.name AND v.version = e.default_version
        """
    ).fetchall()
    extensions = [ExtensionState(*row) for row in rows]
    facts = conn.execute(
        """
        SELECT current_user, current_database(), r.rolsuper,
               has_database_privilege(current_database(), 'CREATE'),
               to_regnamespace('nl') IS NOT NULL
          FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
        """
    ).fetchone()
    assert facts is not None
    role, database, is_superuser, may_create, has_nl = facts
    problems = extension_problems(
        extensions,
        role=role,
        database=database,
        is_superuser=is_superuser,
        may_create_in_database=may_create,
    )
    if not has_nl and not (is_superuser or may_create):
        problems.append(
            f"role {role} may not create schema nl in database {database}: run pgnl migrate as "
            f"the database owner, or ask for GRANT CREATE ON DATABASE {database} TO {role}"
        )
    if problems:
        raise MigrationError("; and ".join(problems))


@contextmanager
def autocommit(conn: psycopg.Connection[Any], job: str) -> Iterator[None]:
    """Run with autocommit on (the job opens transactions of its own), then restore it."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ValueError(f"{job} needs a connection that is not inside a transaction")
    previous = conn.autocommit
    conn.autocommit = True
    try:
        yield
    finally:
        conn.autocommit = previous


@contextmanager
def advisory_lock(conn: psycopg.Connection[Any], job: int) -> Iterator[None]:
    """Hold pgnl's session-level advisory lock for one kind of job; other holders are waited for."""
    taken = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, job]).fetchone()
    if not (taken and taken[0]):
        log.info("waiting for another pgnl session holding the same lock to finish")
        conn.execute("SELECT pg_advisory_lock(%s, %s)", [LOCK_CLASS, job])
    try:
        yield
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, job])


def _extension_search_path(conn: psycopg.Connection[Any]) -> str | None:
    """`pg_catalog, <schemas of vector and pg_trgm>`, or None while either is missing."""
    row = conn.execute(
        """
        SELECT count(*), string_agg(DISTINCT quote_ident(n.nspname), ', ')
          FROM pg_catalog.pg_extension e
          JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
         WHERE e.extname IN ('vector', 'pg_trgm')
        """
    ).fetchone()
    if row is None or row[0] < 2:
        return None
    return f"pg_catalog, {row[1]}"


def applied_migrations(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Name → checksum of the migrations recorded in this database (empty before the first)."""
    exists = conn.execute("SELECT to_regclass('nl.schema_migrations')").fetchone()
    if not exists or exists[0] is None:
        return {}
    rows = conn.execute("SELECT name, checksum FROM nl.schema_migrations").fetchall()
    return {name: checksum for name, checksum in rows}


def _failure(migration: Migration, exc: psycopg.Error) -> MigrationError:
    diag = exc.diag.message_primary or str(exc).strip()
    if isinstance(exc, errors.InsufficientPrivilege):
        return MigrationError(
            f"migration {migration.name} failed: {diag}; run pgnl migrate as the database owner "
            "or a superuser (earlier migrations stay applied)"
        )
    detail = f" ({exc.diag.context.strip()})" if exc.diag.context else ""
    return MigrationError(f"migration {migration.name} failed and was rolled back: {diag}{detail}")


def pgnl_site_dirs() -> list[str]:
    """The folders this pgnl and its packages are installed in (for the server's Python)."""
    found = [sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    return list(dict.fromkeys(os.path.abspath(d) for d in found))


def _set_up_sql_functions(conn: psycopg.Connection[Any], config_file: str | None) -> None:
    """Record where pgnl is and which settings file to read, then import it in the server: an
    error here (ERROR 58000 saying what to install) leaves the functions uninstalled."""
    for position, folder in enumerate(pgnl_site_dirs()):
        conn.execute(
            "INSERT INTO nl.plpython_path (position, dir) VALUES (%s, %s)", [position, folder]
        )
    conn.execute(
        "UPDATE nl.plpython_setup SET python = %s, config_file = %s",
        [sys.executable, config_file],
    )
    row = conn.execute("SELECT nl.pgnl_import()").fetchone()
    log.info("SQL functions: %s", row[0] if row else "")


_SET_UP = {SQL_FUNCTIONS: _set_up_sql_functions}
"""Steps that follow a migration's SQL in its transaction, with facts only pgnl knows."""


def migrate(
    conn: psycopg.Connection[Any],
    migrations: Sequence[Migration] | None = None,
    *,
    config_file: str | None = None,
    skipped: dict[str, str] | None = None,
) -> list[str]:
    """Apply the migrations not yet applied to the connection's database; return their names.

    `migrations` defaults to the files shipped with pgnl. An optional migration that fails is
    left out, its reason put in `skipped` (name → reason) and logged. `config_file` is the
    settings file the SQL functions read (None: their defaults). The connection must not be
    inside a transaction; its autocommit setting is restored afterwards.
    """
    chosen = list(shipped_migrations() if migrations is None else migrations)
    applied_now: list[str] = []
    with autocommit(conn, "pgnl migrate"):
        check_server(conn)
        with advisory_lock(conn, MIGRATE_LOCK):
            with conn.transaction():
                conn.execute("CREATE SCHEMA IF NOT EXISTS nl")
                conn.execute(
                    """
                    CREATE TABLE IF NOT EXISTS nl.schema_migrations (
                        name       text PRIMARY KEY,
                        checksum   text NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now()
                    )
                    """
                )
            done = applied_migrations(conn)
            known = {migration.name for migration in chosen}
            for migration in chosen:
                recorded = done.get(migration.name)
                if recorded is not None and recorded != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.name} was applied to this database with checksum "
                        f"{recorded[:12]}…, but its file now has {migration.checksum[:12]}…: an "
                        "applied migration must never change; restore the file and put the "
                        "change in a new migration"
                    )
            for name in sorted(set(done) - known):
                log.warning("migration %s is applied here but unknown to this pgnl", name)
            for migration in chosen:
                if migration.name in done:
                    continue
                missing = [n for n in migration.needs if n not in done and n not in applied_now]
                if migration.optional is not None and missing:
                    reason = f"it needs {', '.join(missing)}, which is not applied"
                    log.warning("migration %s left out: %s", migration.name, reason)
                    if skipped is not None:
                        skipped[migration.name] = reason
                    continue
                search_path = _extension_search_path(conn)
                try:
                    with conn.transaction():
                        if search_path is not None:
                            conn.execute(
                                "SELECT set_config('search_path', %s, true)", [search_path]
                            )
                        conn.execute(migration.sql.encode())
                        if (set_up := _SET_UP.get(migration.name)) is not None:
                            set_up(conn, config_file)
                        conn.execute(
                            "INSERT INTO nl.schema_migrations (name, checksum) VALUES (%s, %s)",
                            [migration.name, migration.checksum],
                        )
                except psycopg.Error as exc:
                    if migration.optional is None:
                        raise _failure(migration, exc) from exc
                    reason = " ".join(
                        part
                        for part in (exc.diag.message_primary or str(exc), exc.diag.message_hint)
                        if part
                    )
                    log.warning(
                        "migration %s left out (%s): %s", migration.name, migration.optional, reason
                    )
                    if skipped is not None:
                        skipped[migration.name] = reason
                    continue
                log.info("applied migration %s", migration.name)
                applied_now.append(migration.name)
    return applied_now
