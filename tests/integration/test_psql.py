"""psql 15 (libpq, simple query protocol) through the proxy, run as a real subprocess.

Pins: `psql -c` output; `\\d` (psql's catalog queries) describing a table; `\\copy` FROM a file
and TO a file/stdout byte for byte, with tabs, newlines, backslashes, unicode and NULLs, a few
thousand rows; a script on stdin with transaction blocks, a savepoint and inline COPY data;
errors (exit status, the server's message and position on stderr) leave the next psql working;
`-1` with ON_ERROR_STOP rolls the whole script back; a wrong password is refused with the
server's message; Ctrl-C (SIGINT) cancels a running query through the proxy's cancel keys.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from tests.fix_pg import Postgres
from tests.fix_proxy import RunningProxy

PSQL = shutil.which("psql") or "/usr/bin/psql"
PASSWORD = "pgnl"  # the postgres role's (tests/fix_pg.py)

pytestmark = [
    pytest.mark.usefixtures("proxy_stays_healthy"),
    pytest.mark.integration,
    pytest.mark.skipif(not os.path.exists(PSQL), reason="psql is not installed"),
]

Row = tuple[int, str | None, str | None]


def psql(
    proxy: RunningProxy,
    *args: str,
    stdin: str | None = None,
    password: str = PASSWORD,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run psql against the proxy (password from PGPASSWORD, never prompting, no psqlrc)."""
    return subprocess.run(
        [PSQL, "-X", "-w", "-d", proxy.dsn(password=""), *args],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        env=psql_env(password),
        check=False,
    )


def psql_env(password: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(
        PGPASSWORD=password,
        PGCLIENTENCODING="UTF8",
        PGCONNECT_TIMEOUT="10",
        LC_ALL="C.UTF-8",
        LANG="C.UTF-8",
    )
    return env


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"psql failed ({result.returncode}): {result.stderr}"
    return result.stdout


@pytest.fixture
def table(postgres: Postgres) -> Iterator[str]:
    """A fresh table name in public; the table is dropped after the test."""
    name = f"psql_{uuid.uuid4().hex[:12]}"
    yield name
    with postgres.connect() as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


# ---------------------------------------------------------------- helpers for COPY text format

_PIECES = [
    "plain",
    "tab\there",
    "new\nline",
    "cr\rlf\r\n",
    "back\\slash",
    "é",
    "日本語",
    "🐘",
    " ",
    "",
]


def make_rows(count: int, seed: int = 7) -> list[Row]:
    rng = random.Random(seed)
    rows: list[Row] = []
    for i in range(1, count + 1):
        txt = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 6)))
        note = None if i % 7 == 0 else f"n{i}\t{rng.choice(_PIECES)}"
        rows.append((i, None if i % 11 == 0 else txt, note))
    return rows


def copy_escape(value: str | None) -> str:
    if value is None:
        return "\\N"
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def copy_text(rows: list[Row]) -> bytes:
    lines = [f"{i}\t{copy_escape(txt)}\t{copy_escape(note)}\n" for i, txt, note in rows]
    return "".join(lines).encode("utf-8")


# ---------------------------------------------------------------- tests


def test_command_output(proxy: RunningProxy) -> None:
    out = ok(psql(proxy, "-At", "-c", "SELECT 6 * 7, 'héllo 🐘', current_user, current_database()"))
    assert out == "42|héllo 🐘|postgres|pgnl_test\n"
    out = ok(psql(proxy, "-c", "SELECT g AS n, g * g AS sq FROM generate_series(1, 3) g"))
    assert out.splitlines() == [
        " n | sq ",
        "---+----",
        " 1 |  1",
        " 2 |  4",
        " 3 |  9",
        "(3 rows)",
        "",
    ]


def test_describe_table(proxy: RunningProxy, table: str) -> None:
    ok(
        psql(
            proxy,
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            f"CREATE TABLE {table} (id integer PRIMARY KEY, name text NOT NULL DEFAULT 'x', "
            f"price numeric(10,2) CHECK (price >= 0), tags text[], created timestamptz)",
        )
    )
    ok(psql(proxy, "-c", f"CREATE INDEX {table}_name ON {table} (lower(name))"))
    out = ok(psql(proxy, "-c", f"\\d {table}"))
    assert f'Table "public.{table}"' in out
    columns = {
        "id": r"integer\s*\|\s*\|\s*not null\s*\|",
        "name": r"text\s*\|\s*\|\s*not null\s*\|\s*'x'::text",
        "price": r"numeric\(10,2\)\s*\|\s*\|\s*\|",
        "tags": r"text\[\]\s*\|",
        "created": r"timestamp with time zone\s*\|",
    }
    for column, rest in columns.items():
        assert re.search(rf"^\s*{column}\s*\|\s*{rest}", out, re.M), (column, out)
    assert f'"{table}_pkey" PRIMARY KEY, btree (id)' in out
    assert f'"{table}_name" btree (lower(name))' in out
    assert re.search(rf'"{table}_price_check" CHECK \(price >= 0(::numeric)?\)', out), out
    listed = ok(psql(proxy, "-At", "-c", f"\\dt {table}"))
    assert listed.strip() == f"public|{table}|table|postgres"


def test_copy_round_trip(
    proxy: RunningProxy, postgres: Postgres, table: str, scratch: Path
) -> None:
    rows = make_rows(4000)
    source = scratch / f"{table}.in"
    source.write_bytes(copy_text(rows))
    ok(psql(proxy, "-c", f"CREATE TABLE {table} (id int PRIMARY KEY, txt text, note text)"))

    out = ok(psql(proxy, "-v", "ON_ERROR_STOP=1", "-c", f"\\copy {table} FROM '{source}'"))
    assert out == "COPY 4000\n"
    with postgres.connect() as conn:
        query = sql.SQL("SELECT id, txt, note FROM {} ORDER BY id").format(sql.Identifier(table))
        assert conn.execute(query).fetchall() == rows

    target = scratch / f"{table}.out"
    out = ok(psql(proxy, "-c", f"\\copy (SELECT * FROM {table} ORDER BY id) TO '{target}'"))  # noqa: S608
    assert out == "COPY 4000\n"
    assert target.read_bytes() == source.read_bytes()

    out = ok(psql(proxy, "-c", f"\\copy (SELECT * FROM {table} ORDER BY id) TO STDOUT"))  # noqa: S608
    assert out.encode("utf-8") == source.read_bytes()


def test_script_on_stdin_with_transactions(proxy: RunningProxy, table: str) -> None:
    # The table name goes in as a psql variable, interpolated by psql itself (:"tbl").
    script = """
CREATE TABLE :"tbl" (id int PRIMARY KEY, name text);
BEGIN;
INSERT INTO :"tbl" VALUES (1, 'one'), (2, 'two');
SAVEPOINT s;
INSERT INTO :"tbl" VALUES (3, 'three');
ROLLBACK TO SAVEPOINT s;
COMMIT;
BEGIN;
INSERT INTO :"tbl" VALUES (4, 'four');
ROLLBACK;
COPY :"tbl" FROM STDIN;
5\tfive
6\tsix, with a\\ttab
\\.
SELECT count(*) AS n FROM :"tbl" \\gset
\\echo rows=:n
SELECT string_agg(name, '|' ORDER BY id) FROM :"tbl";
"""
    out = ok(
        psql(proxy, "-At", "-v", "ON_ERROR_STOP=1", "-v", f"tbl={table}", "-f", "-", stdin=script)
    )
    assert out.splitlines() == [
        "CREATE TABLE",
        "BEGIN",
        "INSERT 0 2",
        "SAVEPOINT",
        "INSERT 0 1",
        "ROLLBACK",
        "COMMIT",
        "BEGIN",
        "INSERT 0 1",
        "ROLLBACK",
        "COPY 2",
        "rows=4",
        "one|two|five|six, with a\ttab",
    ]


def test_single_transaction_script_rolls_back_on_error(proxy: RunningProxy, table: str) -> None:
    ok(psql(proxy, "-c", f"CREATE TABLE {table} (id int PRIMARY KEY)"))
    script = "INSERT INTO :tbl VALUES (1);\nINSERT INTO :tbl VALUES (1);\nSELECT 'after';\n"
    result = psql(
        proxy, "-1", "-v", "ON_ERROR_STOP=1", "-v", f"tbl={table}", "-f", "-", stdin=script
    )
    assert result.returncode == 3, result
    assert "duplicate key value violates unique constraint" in result.stderr
    assert "after" not in result.stdout
    count = ok(
        psql(proxy, "-At", "-v", f"tbl={table}", "-f", "-", stdin="SELECT count(*) FROM :tbl")
    )
    assert count == "0\n"


def test_errors_then_next_command_works(proxy: RunningProxy) -> None:
    result = psql(proxy, "-c", "SELECT 1/0")
    assert result.returncode == 1
    assert "ERROR:  division by zero" in result.stderr
    assert result.stdout == ""

    result = psql(proxy, "-c", "SELECT 1;\nSELEC 2")
    assert result.returncode == 1
    assert 'ERROR:  syntax error at or near "SELEC"' in result.stderr
    # The position field came through: psql draws the caret under the offending token.
    assert "LINE 2: SELEC 2\n        ^" in result.stderr

    script = "SELECT 'before';\nSELECT * FROM no_such_table_here;\nSELECT 'after';\n"
    result = psql(proxy, "-At", "-v", "ON_ERROR_STOP=1", "-f", "-", stdin=script)
    assert result.returncode == 3
    assert result.stdout == "before\n"
    assert 'relation "no_such_table_here" does not exist' in result.stderr

    # Without ON_ERROR_STOP psql carries on within the same session.
    result = psql(proxy, "-At", "-f", "-", stdin=script)
    assert result.returncode == 0
    assert result.stdout == "before\nafter\n"

    assert ok(psql(proxy, "-At", "-c", "SELECT 'still fine'")) == "still fine\n"


def test_wrong_password_is_refused(proxy: RunningProxy) -> None:
    result = psql(proxy, "-c", "SELECT 1", password="not-the-password")
    assert result.returncode == 2
    assert 'password authentication failed for user "postgres"' in result.stderr
    assert ok(psql(proxy, "-At", "-c", "SELECT 1")) == "1\n"


def test_ctrl_c_cancels_the_running_query(proxy: RunningProxy, postgres: Postgres) -> None:
    marker = f"cancel-me-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(
        [PSQL, "-X", "-w", "-d", proxy.dsn(password=""), "-c", f"SELECT pg_sleep(60), '{marker}'"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env=psql_env(PASSWORD),
    )
    try:
        with postgres.connect() as conn:
            deadline = time.monotonic() + 20
            query = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND pid <> %s"
            while True:
                row = conn.execute(query, [f"%{marker}%", conn.info.backend_pid]).fetchone()
                if row is not None and row[0] == 1:
                    break
                assert time.monotonic() < deadline, "the query never started"
                time.sleep(0.05)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert time.monotonic() - started < 20
    assert process.returncode == 1, (stdout, stderr)
    assert "canceling statement due to user request" in stderr
