"""`nl.refresh_index(schema)`, called straight on the embedded PostgreSQL: `pgnl index` from SQL.

Pins: the index it builds holds the same rows and embeddings as `pgnl index`'s (build_index over
psycopg) on a twin database; a second call changes nothing and a changed column is refreshed;
its work is the caller's transaction's (rolled back with it) and leaves the caller's settings as
they were; a schema argument refreshes that schema and keeps the others' entries; a read-only
transaction, an unknown schema, a role without EXECUTE and a role that may not write the index
get errors with their SQLSTATE; psql shows its progress and summary as NOTICEs.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from importlib import resources
from typing import Any

import numpy as np
import psycopg
import pytest

from proxy.migrate import REFRESH_INDEX, migrate
from proxy.runtime import load_embedder
from proxy.valueindex import build_index
from tests.fix_pg import Postgres, closed_to_the_server

pytestmark = pytest.mark.integration

DB = "pgnl_refresh"
TWIN = "pgnl_refresh_twin"
PSQL = shutil.which("psql")
SAMPLE = resources.files("proxy.demo").joinpath("sample.sql")

Connection = psycopg.Connection[Any]


def _fresh(postgres: Postgres, name: str) -> str:
    with postgres.connect("postgres") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    dsn = postgres.dsn(dbname=name)
    skipped: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SAMPLE.read_text().encode())
        migrate(conn, skipped=skipped)
    if REFRESH_INDEX in skipped:
        if closed := closed_to_the_server():
            pytest.skip(f"the server's account may not read pgnl's installation: {closed}")
        pytest.fail(f"nl.refresh_index was not installed: {skipped[REFRESH_INDEX]}")
    return dsn


@pytest.fixture(scope="module")
def demo(postgres: Postgres) -> Iterator[str]:
    """The demo database, migrated, not indexed; its DSN."""
    try:
        yield _fresh(postgres, DB)
    finally:
        with postgres.connect("postgres") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


def index_rows(conn: Connection) -> dict[tuple[str, ...], tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT schema_name, table_name, column_name, value, normalised, frequency, "
        "embedding::text FROM nl.value_index"
    ).fetchall()
    return {tuple(row[:4]): tuple(row[4:]) for row in rows}


def refresh(conn: Connection, *args: str | None) -> list[tuple[Any, ...]]:
    if args:
        return conn.execute("SELECT * FROM nl.refresh_index(%s)", list(args)).fetchall()
    return conn.execute("SELECT * FROM nl.refresh_index()").fetchall()


def by_column(rows: list[tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    return {f"{s}.{t}.{c}": (outcome, count, why) for s, t, c, outcome, count, why in rows}


def test_it_builds_the_index_pgnl_index_builds_then_keeps_it_up_to_date(
    demo: str, postgres: Postgres
) -> None:
    twin = _fresh(postgres, TWIN)
    try:
        with psycopg.connect(twin, autocommit=True) as conn:
            build_index(conn, load_embedder(), progress=False)
            expected = index_rows(conn)
    finally:
        with postgres.connect("postgres") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {TWIN} WITH (FORCE)")
    notices: list[str] = []
    with psycopg.connect(demo, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        first = by_column(refresh(conn))
        built = index_rows(conn)
        cities = conn.execute("SELECT count(DISTINCT home_city) FROM students").fetchone()
        assert cities is not None and cities[0] > 3
        assert first["public.students.home_city"][:2] == ("added", cities[0])
        assert first["public.courses.title"][0] == "added"
        assert all(outcome != "removed" for outcome, _, _ in first.values())
        assert first["public.enrollments.semester"][0] == "added"  # a key, of short codes
        skipped = [why for outcome, _, why in first.values() if outcome == "skipped"]
        assert all(skipped)  # each skipped column says why
        assert any(n.startswith("indexed ") and "values/s" not in n for n in notices)
        assert any("columns" in n and "values/s" in n for n in notices)  # the progress line
        # the same rows as pgnl index's, and the same embeddings (to float4 precision)
        assert built.keys() == expected.keys() and len(built) > 20
        for key, (normalised, frequency, embedding) in built.items():
            assert (normalised, frequency) == expected[key][:2]
            mine = np.array(embedding.strip("[]").split(","), dtype=np.float32)
            theirs = np.array(expected[key][2].strip("[]").split(","), dtype=np.float32)
            assert np.abs(mine - theirs).max() < 1e-5
        # searchable at once: the HNSW index is there
        assert conn.execute("SELECT to_regclass('nl.value_index_embedding')").fetchone() != (None,)
        again = by_column(refresh(conn))
        indexed = {c for c, (outcome, _, _) in first.items() if outcome == "added"}
        assert {c for c, (outcome, _, _) in again.items() if outcome == "unchanged"} == indexed
        conn.execute("UPDATE students SET home_city = 'Timbuktu' WHERE id = 1")
        changed = by_column(refresh(conn))
        assert changed["public.students.home_city"][0] == "changed"
        assert index_rows(conn)[("public", "students", "home_city", "Timbuktu")][1] == 1


def test_its_work_is_the_callers_transaction(demo: str) -> None:
    with psycopg.connect(demo) as tx:
        tx.execute("SET lock_timeout = '7s'")
        tx.commit()
        tx.execute("CREATE TABLE places (name text)")
        tx.execute("INSERT INTO places VALUES ('Atlantis'), ('Lemuria')")
        assert by_column(refresh(tx))["public.places.name"][:2] == ("added", 2)
        # the build's own settings ended with the call
        assert tx.execute("SHOW lock_timeout").fetchone() == ("7s",)
        assert tx.execute("SHOW row_security").fetchone() == ("on",)
        assert tx.execute("SHOW transaction_read_only").fetchone() == ("off",)
        tx.rollback()
    with psycopg.connect(demo, autocommit=True) as check:
        found = check.execute("SELECT count(*) FROM nl.value_index WHERE value = 'Atlantis'")
        assert found.fetchone() == (0,)


def test_a_schema_argument_keeps_the_other_schemas_entries(demo: str) -> None:
    with psycopg.connect(demo, autocommit=True) as conn:
        refresh(conn)
        before = index_rows(conn)
        conn.execute("CREATE SCHEMA archive")
        conn.execute("CREATE TABLE archive.harbours (name text)")
        conn.execute("INSERT INTO archive.harbours VALUES ('Valletta'), ('Tórshavn')")
        try:
            only = by_column(refresh(conn, "archive"))
            assert list(only) == ["archive.harbours.name"] and only["archive.harbours.name"][0]
            after = index_rows(conn)
            assert {k: v for k, v in after.items() if k[0] == "public"} == before
            assert ("archive", "harbours", "name", "Tórshavn") in after
            # and every schema again: archive's entries stay, public's are unchanged
            every = by_column(refresh(conn, None))
            assert every["archive.harbours.name"][0] == "unchanged"
        finally:
            conn.execute("DROP SCHEMA archive CASCADE")
            refresh(conn)


@pytest.mark.parametrize(
    ("setup", "argument", "sqlstate", "words"),
    [
        ("SET TRANSACTION READ ONLY", None, "25006", "cannot run in a read-only transaction"),
        ("", "no_such_schema", "3F000", 'schema "no_such_schema" does not exist'),
    ],
)
def test_bad_calls_get_their_sqlstate(
    demo: str, setup: str, argument: str | None, sqlstate: str, words: str
) -> None:
    with psycopg.connect(demo) as tx:
        if setup:
            tx.execute(setup.encode())
        with pytest.raises(psycopg.Error) as raised:
            refresh(tx, argument)
        assert raised.value.diag.sqlstate == sqlstate
        assert words in (raised.value.diag.message_primary or "")
        assert raised.value.diag.message_hint
        assert "plpy" not in str(raised.value)


def test_who_may_call_it(demo: str, postgres: Postgres) -> None:
    other = postgres.dsn(user="scram_user", dbname=DB)
    with psycopg.connect(other) as user, pytest.raises(psycopg.Error) as raised:
        refresh(user)
    assert raised.value.diag.sqlstate == "42501"  # EXECUTE is not granted to PUBLIC
    assert "permission denied for function refresh_index" in str(raised.value)
    with psycopg.connect(demo, autocommit=True) as owner:
        owner.execute("GRANT EXECUTE ON FUNCTION nl.refresh_index(text) TO scram_user")
        owner.execute("GRANT EXECUTE ON FUNCTION nl.plpy_refresh_index(text) TO scram_user")
    try:
        with psycopg.connect(other) as user, pytest.raises(psycopg.Error) as raised:
            refresh(user)
        assert raised.value.diag.sqlstate == "42501"
        assert "may not write the value index" in (raised.value.diag.message_primary or "")
    finally:
        with psycopg.connect(demo, autocommit=True) as owner:
            owner.execute("REVOKE EXECUTE ON FUNCTION nl.refresh_index(text) FROM scram_user")
            owner.execute("REVOKE EXECUTE ON FUNCTION nl.plpy_refresh_index(text) FROM scram_user")


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_shows_the_summary(demo: str) -> None:
    assert PSQL is not None
    result = subprocess.run(
        [PSQL, "-X", "-w", "-A", "-t", "-d", demo],
        input="SELECT outcome, count(*) FROM nl.refresh_index() GROUP BY 1 ORDER BY 1;\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "NOTICE:  indexed " in result.stderr
    outcomes = dict(line.split("|") for line in result.stdout.splitlines() if line)
    assert int(outcomes.get("unchanged", "0")) + int(outcomes.get("added", "0")) > 3


def test_a_cancelled_refresh_writes_nothing_and_leaves_the_backend_usable(demo: str) -> None:
    with psycopg.connect(demo, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA big")
        # four columns of 5,000 values ([index] max_distinct_per_column): a build of seconds
        conn.execute(
            "CREATE TABLE big.harbours AS SELECT 'Harbour ' || i AS name, 'Quay ' || i AS quay, "
            "'Pier ' || i AS pier, 'Dock ' || i AS dock FROM generate_series(1, 5000) AS i"
        )
        try:
            conn.execute("SELECT nl.pgnl_import()")  # the worker is up: the timeout hits the build
            conn.execute("SET statement_timeout = '2s'")
            with pytest.raises(psycopg.errors.QueryCanceled):
                refresh(conn, "big")
            conn.execute("SET statement_timeout = 0")
            assert conn.execute("SELECT 1").fetchone() == (1,)
            held = conn.execute("SELECT count(*) FROM nl.value_index WHERE schema_name = 'big'")
            assert held.fetchone() == (0,)
            # the next call starts a new worker and works
            assert {row[3] for row in refresh(conn, "public")} <= {"unchanged", "skipped"}
        finally:
            conn.execute("SET statement_timeout = 0")
            conn.execute("DROP SCHEMA big CASCADE")
