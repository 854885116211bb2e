"""`pgnl doctor` against the real PostgreSQL: a database migrated and indexed is ok (exit 0);
new and dropped columns make the index's freshness a warning; a bare database FAILs on its
migrations with the command to run (exit 1); a wrong password FAILs at the connection; and no
run changes anything in the database (its connection is read-only)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from proxy.doctor import connect_read_only
from proxy.migrate import shipped_migrations
from tests.fix_pg import Postgres, table_checksum
from tests.fix_proxy import run_pgnl

pytestmark = pytest.mark.integration

CITIES = """
CREATE TABLE cities (id integer PRIMARY KEY, name text NOT NULL, country text NOT NULL);
INSERT INTO cities VALUES (1, 'Boston', 'United States'), (2, 'Lyon', 'France'),
                          (3, 'Osaka', 'Japan');
"""
REQUIRED = [m.name for m in shipped_migrations() if m.optional is None]


def snapshot(postgres: Postgres, db: str) -> tuple[object, ...]:
    """Everything doctor could change: the rows of the tables, the relations, the extensions,
    pgnl's own records (the index's columns with their refresh times, the migrations)."""
    with postgres.connect(db) as conn:
        relations = conn.execute(
            """
            SELECT c.oid::regclass::text, c.relkind FROM pg_class c
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
             ORDER BY 1
            """
        ).fetchall()
        extensions = conn.execute("SELECT extname, extversion FROM pg_extension ORDER BY 1")
        pgnl: list[object] = []
        if conn.execute("SELECT to_regclass('nl.value_index_columns')").fetchone() != (None,):
            pgnl += conn.execute("SELECT * FROM nl.value_index_columns ORDER BY 1, 2, 3").fetchall()
            pgnl += conn.execute("SELECT * FROM nl.schema_migrations ORDER BY 1").fetchall()
            pgnl += conn.execute("SELECT count(*) FROM nl.value_index").fetchall()
        return (
            table_checksum(postgres.dsn(dbname=db)),
            relations,
            extensions.fetchall(),
            pgnl,
        )


def doctor(dsn: str) -> tuple[int, dict[str, str], str]:
    """Exit status, each line by its check's name, and stderr."""
    result = run_pgnl("--log-level", "warning", "doctor", "--dsn", dsn, timeout=120)
    lines = {}
    for line in result.stdout.splitlines()[:-1]:
        status, _, rest = line.partition(" ")
        name, _, summary = rest.strip().partition(": ")
        lines[name] = f"{status} {summary}"
    return result.returncode, lines, result.stderr


def test_a_migrated_and_indexed_database_is_ok_and_left_unchanged(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(CITIES)
    dsn = postgres.dsn(dbname=db)
    for command in (["migrate"], ["index", "--no-progress"]):
        done = run_pgnl(*command, "--dsn", dsn)
        assert done.returncode == 0, done.stderr
    before = snapshot(postgres, db)
    code, lines, stderr = doctor(dsn)
    assert code == 0, (lines, stderr)
    assert "Traceback" not in stderr
    assert lines["connection"] == f"ok database {db} as role postgres (read-only)"
    assert lines["server"].startswith("ok PostgreSQL 18")
    assert lines["pgvector"].startswith("ok 0.8") and lines["pgvector"].endswith(" installed")
    assert lines["pg_trgm"].startswith("ok ") and lines["pg_trgm"].endswith(" installed")
    assert lines["migrations"] == f"ok all {len(REQUIRED)} required migrations applied"
    assert lines["migrations (optional)"].split()[0] in ("ok", "WARN")  # plpython3u, see README
    index = lines["value index"]
    assert index.startswith("ok 6 values of 2 columns, ") and " on disk; last refreshed " in index
    assert index.endswith("(just now)") or index.endswith("minute ago)"), index
    assert lines["value index (search indexes)"] == "ok HNSW and trigram indexes present"
    assert lines["value index (freshness)"].startswith("ok every column pgnl index reads")
    assert lines["query history"] == (
        "ok no records this role may read (pgnl learn --dsn writes them from the SQL the "
        "database runs); pg_stat_statements is loaded"
    )
    for model in ("aligner", "sketch", "value_embedder"):
        assert lines[f"model {model}"].startswith("ok model.onnx ")
    assert lines["llm"].startswith("ok none")  # the tests run with [llm] provider = none
    assert not [line for line in lines.values() if line.startswith("FAIL")]
    assert snapshot(postgres, db) == before

    with postgres.connect(db) as conn:
        conn.execute(
            "CREATE TABLE airlines (code text, label text); "
            "INSERT INTO airlines VALUES ('AF', 'Air France'), ('JL', 'Japan Airlines');"
            "ALTER TABLE cities DROP COLUMN country"
        )
    before = snapshot(postgres, db)
    code, lines, _ = doctor(dsn)
    assert code == 0
    freshness = lines["value index (freshness)"]
    assert freshness.startswith(
        "WARN 2 column(s) pgnl index would read are not in it: public.airlines.code, "
        "public.airlines.label; 1 indexed column(s) no longer exist: public.cities.country"
    )
    assert freshness.endswith(
        "; next: run pgnl index with the same --dsn (it reads only what changed)"
    )
    assert snapshot(postgres, db) == before


def test_a_bare_database_fails_on_its_migrations_and_says_what_to_run(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(CITIES)
    dsn = postgres.dsn(dbname=db)
    before = snapshot(postgres, db)
    code, lines, stderr = doctor(dsn)
    assert code == 1, lines
    assert "Traceback" not in stderr
    optional = [m.name for m in shipped_migrations() if m.optional is not None]
    assert lines["migrations"] == (
        f"FAIL {len(REQUIRED)} of {len(REQUIRED)} required migrations not applied: "
        f"{', '.join(REQUIRED)} (nor the optional {', '.join(optional)}); next: run pgnl "
        "migrate with the same --dsn, as the database owner or a superuser"
    )
    assert "migrations (optional)" not in lines
    assert (
        lines["pgvector"].startswith("ok ") and "pgnl migrate creates it here" in lines["pgvector"]
    )
    assert lines["value index"].startswith("WARN none in this database (nl.value_index)")
    assert lines["value index"].endswith(
        "; next: run pgnl migrate, then pgnl index, with the same --dsn"
    )
    assert [name for name, line in lines.items() if line.startswith("FAIL")] == ["migrations"]
    assert snapshot(postgres, db) == before


def test_a_wrong_password_fails_at_the_connection(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    code, lines, stderr = doctor(postgres.dsn(password="wrong", dbname=make_database()))
    assert code == 1 and "Traceback" not in stderr
    assert lines["connection"].startswith("FAIL cannot connect: ")
    assert "password authentication failed" in lines["connection"]
    assert "; next: check the DSN" in lines["connection"]
    assert lines["model sketch"].startswith("ok ")  # the rest is still checked


def test_the_connection_cannot_write_even_when_asked(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(CITIES)
    with connect_read_only(postgres.dsn(dbname=db) + "?options=-c%20work_mem%3D8MB") as conn:
        assert conn.execute("SHOW work_mem").fetchone() == ("8MB",)  # the DSN's own options kept
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO cities VALUES (4, 'Oslo', 'Norway')")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TABLE t (x int)")
    with postgres.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM cities").fetchone() == (3,)
        assert conn.execute("SELECT to_regclass('public.t')").fetchone() == (None,)
