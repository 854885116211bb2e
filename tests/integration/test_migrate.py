"""`pgnl migrate` against the real PostgreSQL 18 with pgvector: an empty database, an already
migrated one, two runs at once, an edited migration, a failing one, a role that may not create
the extensions, and the command line."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from proxy.migrate import (
    REFRESH_INDEX,
    SQL_FUNCTIONS,
    ExtensionState,
    Migration,
    MigrationError,
    extension_problems,
    migrate,
    shipped_migrations,
)
from tests.fix_pg import Postgres
from tests.fix_proxy import run_pgnl

pytestmark = pytest.mark.integration


@pytest.fixture
def new_database(make_database: Callable[..., str]) -> Callable[[], str]:
    """A factory of empty databases of this test's own, dropped at the end."""
    return make_database


def connect(
    postgres: Postgres, dbname: str, user: str = "postgres"
) -> psycopg.Connection[tuple[object, ...]]:
    return postgres.connect(dbname, user)


SHIPPED = [m.name for m in shipped_migrations()]


def test_shipped_migrations_are_numbered_and_start_with_the_schema() -> None:
    assert SHIPPED[:3] == ["0001_nl_schema", "0002_value_index", "0003_value_lookup"]
    assert sorted(SHIPPED) == SHIPPED


def test_empty_database_gets_every_migration_once(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    with connect(postgres, db) as conn:
        assert migrate(conn) == SHIPPED
        recorded = conn.execute(
            "SELECT name, checksum FROM nl.schema_migrations ORDER BY name"
        ).fetchall()
        assert recorded == [(m.name, m.checksum) for m in shipped_migrations()]
        extensions = {row[0] for row in conn.execute("SELECT extname FROM pg_extension")}
        assert {"vector", "pg_trgm"} <= extensions
        indexes = {
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'nl' "
                "AND tablename = 'value_index'"
            )
        }
        assert {"value_index_embedding", "value_index_trigram"} <= indexes
        embedding_type = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'nl.value_index'::regclass AND attname = 'embedding'"
        ).fetchone()
        assert embedding_type is not None and embedding_type[0] == "vector(384)"
        assert conn.autocommit  # restored as it was


def test_already_migrated_database_applies_nothing_and_keeps_its_data(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    with connect(postgres, db) as conn:
        migrate(conn)
        before = conn.execute("SELECT name, applied_at FROM nl.schema_migrations").fetchall()
        conn.execute(
            "INSERT INTO nl.value_index_columns (schema_name, table_name, column_name, "
            "schema_oid, table_oid, column_attnum, fingerprint, embedder, value_count, complete) "
            "VALUES ('s', 't', 'c', 1, 1, 1, 'f', 'e', 0, true)"
        )
        assert migrate(conn) == []
        assert migrate(conn) == []
        after = conn.execute("SELECT name, applied_at FROM nl.schema_migrations").fetchall()
        assert sorted(after) == sorted(before)
        count = conn.execute("SELECT count(*) FROM nl.value_index_columns").fetchone()
        assert count == (1,)


def test_a_new_migration_is_applied_on_top_of_the_shipped_ones(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    extra = Migration("9999_test_extra", "CREATE TABLE nl.test_extra (x int);")
    with connect(postgres, db) as conn:
        assert migrate(conn) == SHIPPED
        assert migrate(conn, [*shipped_migrations(), extra]) == ["9999_test_extra"]
        assert migrate(conn, [*shipped_migrations(), extra]) == []
        assert conn.execute("SELECT to_regclass('nl.test_extra')::text").fetchone() == (
            "nl.test_extra",
        )


def test_concurrent_runs_take_turns_and_apply_each_file_once(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    start = threading.Barrier(3)
    results: list[list[str]] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with connect(postgres, db) as conn:
                start.wait()
                results.append(migrate(conn))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert sorted(name for result in results for name in result) == SHIPPED
    with connect(postgres, db) as conn:
        rows = conn.execute("SELECT count(*) FROM nl.schema_migrations").fetchone()
        assert rows == (len(SHIPPED),)


def test_an_applied_migration_whose_file_changed_is_refused(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    with connect(postgres, db) as conn:
        migrate(conn)
        edited = [
            Migration(m.name, m.sql + "\n-- edited\n") if m.name == "0002_value_index" else m
            for m in shipped_migrations()
        ]
        extra = Migration("9999_after_edit", "CREATE TABLE nl.after_edit (x int);")
        with pytest.raises(MigrationError, match=r"0002_value_index .*must never change"):
            migrate(conn, [*edited, extra])
        # Nothing was applied, not even the new file after it.
        assert conn.execute("SELECT to_regclass('nl.after_edit')").fetchone() == (None,)


def test_a_failing_migration_is_rolled_back_and_not_recorded(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    broken = Migration(
        "9999_broken", "CREATE TABLE nl.half_done (x int);\nSELECT no_such_function();"
    )
    with connect(postgres, db) as conn:
        with pytest.raises(MigrationError, match=r"9999_broken failed and was rolled back"):
            migrate(conn, [*shipped_migrations(), broken])
        names = [str(row[0]) for row in conn.execute("SELECT name FROM nl.schema_migrations")]
        assert sorted(names) == SHIPPED
        assert conn.execute("SELECT to_regclass('nl.half_done')").fetchone() == (None,)


def test_a_role_that_may_not_create_pgvector_is_told_whom_to_ask(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    with connect(postgres, db) as conn:
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO scram_user").format(sql.Identifier(db))
        )
    with connect(postgres, db, user="scram_user") as conn:
        with pytest.raises(MigrationError) as raised:
            migrate(conn)
        message = str(raised.value)
        assert "scram_user may not create extension vector" in message
        assert "ask a superuser to run CREATE EXTENSION vector;" in message
        assert "pg_trgm" not in message  # trusted: the role may create it itself
        assert conn.execute("SELECT to_regnamespace('nl')").fetchone() == (None,)


def test_a_role_without_create_on_the_database_is_told_so(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    with connect(postgres, db) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(sql.Identifier(db)))
    with connect(postgres, db, user="scram_user") as conn, pytest.raises(MigrationError) as raised:
        migrate(conn)
    assert "GRANT CREATE ON DATABASE" in str(raised.value)
    assert "pg_trgm" in str(raised.value)


def test_a_database_owner_migrates_once_a_superuser_installed_pgvector(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    with connect(postgres, db) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO scram_user").format(sql.Identifier(db)))
    with connect(postgres, db, user="scram_user") as conn:
        skipped: dict[str, str] = {}
        # the SQL functions need plpython3u, which only a superuser may create: left for later
        functions = (SQL_FUNCTIONS, REFRESH_INDEX)
        assert migrate(conn, skipped=skipped) == [m for m in SHIPPED if m not in functions]
        assert list(skipped) == list(functions) and "superuser" in skipped[SQL_FUNCTIONS]
        assert skipped[REFRESH_INDEX] == f"it needs {SQL_FUNCTIONS}, which is not applied"
        owner = conn.execute(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'nl.value_index'::regclass"
        ).fetchone()
        assert owner == ("scram_user",)


def problems(*extensions: ExtensionState) -> list[str]:
    return extension_problems(
        extensions, role="app", database="shop", is_superuser=True, may_create_in_database=True
    )


def test_missing_or_old_pgvector_messages_say_what_to_install() -> None:
    missing = problems(ExtensionState("vector", False), ExtensionState("pg_trgm", True, "1.6"))
    assert len(missing) == 1
    assert "pgvector" in missing[0] and "not installed on the PostgreSQL server" in missing[0]
    assert "https://github.com/pgvector/pgvector#installation" in missing[0]
    assert "embedded PostgreSQL" in missing[0]
    old = problems(
        ExtensionState("vector", True, "0.8.0", "0.7.4"), ExtensionState("pg_trgm", True, "1.6")
    )
    assert len(old) == 1
    assert "pgvector 0.7.4" in old[0] and "ALTER EXTENSION vector UPDATE" in old[0]
    no_trgm = problems(ExtensionState("vector", True, "0.8.1"), ExtensionState("pg_trgm", False))
    assert len(no_trgm) == 1 and "pg_trgm" in no_trgm[0] and "contrib" in no_trgm[0]
    ready = problems(
        ExtensionState("vector", True, "0.8.1"), ExtensionState("pg_trgm", True, "1.6")
    )
    assert ready == []


def pgnl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_pgnl(*args, timeout=120)


def test_command_line_migrates_and_reports_errors_without_traceback(
    postgres: Postgres, new_database: Callable[[], str]
) -> None:
    db = new_database()
    dsn = postgres.dsn(dbname=db)
    first = pgnl("migrate", "--dsn", dsn)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"applied {len(SHIPPED)} migration(s): {', '.join(SHIPPED)}"
    second = pgnl("migrate", "--dsn", dsn)
    assert second.returncode == 0, second.stderr
    assert "nothing to apply" in second.stdout
    refused = pgnl("migrate", "--dsn", postgres.dsn(user="scram_user", dbname=new_database()))
    assert refused.returncode == 1
    assert refused.stderr.startswith("pgnl: ")
    assert "CREATE EXTENSION vector" in refused.stderr
    assert "Traceback" not in refused.stderr
    unreachable = pgnl("migrate", "--dsn", postgres.dsn(password="wrong", dbname=db))
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("pgnl: migrate failed: ")
    assert "Traceback" not in unreachable.stderr
