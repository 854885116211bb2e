"""The SQL functions (`nl.sql`, `nl.ask`, `nl.explain`), called straight on the embedded
PostgreSQL, no proxy: through psycopg, psql and pgjdbc (`jdbc/Functions.java`, which also calls
`nl.refresh_index`; its own tests are in test_refresh_index.py).

Pins: answers on the demo database checked against hand-written SQL; errors with the proxy's
SQLSTATE, message and hint (and no PL/Python traceback); a role without SELECT on a column gets
none of its values, and row-level security holds; a call between two writes leaves the
transaction writable, and one in a read-only transaction leaves it read-only; a cancelled call
(statement_timeout, pg_cancel_backend) leaves the backend usable, and the signals sent to the
backend's process group do not reach its worker; a question that tries to break out of its
string changes nothing; a server Python that cannot import pgnl is told what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from proxy.migrate import SQL_FUNCTIONS
from tests.fix_pg import Postgres, closed_to_the_server, demo_database, table_checksum

pytestmark = pytest.mark.integration

DB = "pgnl_functions"
PSQL = shutil.which("psql")
JAVA = shutil.which("java")
JAR = Path("/usr/share/java/postgresql.jar")
FUNCTIONS_JAVA = Path(__file__).parent / "jdbc" / "Functions.java"

NEW_YORK = "how many students are from new york?"
BOSTON = "show the first and last names of students from boston"


@pytest.fixture(scope="module")
def demo(postgres: Postgres) -> Iterator[str]:
    """The demo database, migrated (with the SQL functions) and indexed; its DSN."""
    skipped: dict[str, str] = {}
    with demo_database(postgres, DB, skipped=skipped) as dsn:
        if SQL_FUNCTIONS in skipped:
            if closed := closed_to_the_server():
                pytest.skip(f"the server's account may not read pgnl's installation: {closed}")
            pytest.fail(f"the SQL functions were not installed: {skipped[SQL_FUNCTIONS]}")
        yield dsn


@pytest.fixture(scope="module")
def conn(demo: str) -> Iterator[psycopg.Connection[Any]]:
    """One connection for the module (its backend's worker loads the models once)."""
    with psycopg.connect(demo, autocommit=True) as connection:
        yield connection


def rows_of(conn: psycopg.Connection[Any], query: str) -> Counter[str]:
    """The rows of a hand-written query as JSON objects, as nl.ask gives them (a multiset)."""
    found = conn.execute(f"SELECT to_jsonb(q) FROM ({query}) AS q").fetchall()  # noqa: S608
    return Counter(json.dumps(row[0], sort_keys=True) for row in found)


def asked(conn: psycopg.Connection[Any], question: str) -> Counter[str]:
    found = conn.execute("SELECT * FROM nl.ask(%s)", [question]).fetchall()
    return Counter(json.dumps(row[0], sort_keys=True) for row in found)


def test_nl_sql_and_nl_ask_answer_as_hand_written_sql(conn: psycopg.Connection[Any]) -> None:
    chosen = conn.execute("SELECT nl.sql(%s)", [NEW_YORK]).fetchone()
    assert chosen is not None and "'New York'" in chosen[0]
    hand = rows_of(conn, "SELECT count(*) FROM students WHERE home_city = 'New York'")
    assert asked(conn, NEW_YORK) == hand
    hand = rows_of(conn, "SELECT first_name, last_name FROM students WHERE home_city = 'Boston'")
    assert len(hand) > 1
    assert asked(conn, BOSTON) == hand
    # nl.ask returns jsonb: PostgreSQL's own JSON for each type
    types = conn.execute("SELECT jsonb_typeof(a) FROM nl.ask(%s) AS a", [NEW_YORK]).fetchall()
    assert types == [("object",)]


def test_nl_explain_returns_the_trace(conn: psycopg.Connection[Any]) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM nl.explain(%s)", [NEW_YORK])
        assert [d.name for d in cur.description or ()] == [
            "stage",
            "candidate",
            "score",
            "calibration",
            "outcome",
            "ms",
        ]
        trace = cur.fetchall()
    stages = [row[0] for row in trace]
    assert stages[:3] == ["schema", "lookup", "sketch"]
    assert all(isinstance(row[5], float) for row in trace)
    logged = conn.execute(
        "SELECT directive, chosen_sql FROM nl.query_log WHERE question = %s ORDER BY id DESC",
        [NEW_YORK],
    ).fetchone()
    assert logged is not None and logged[0] == "nl.explain" and "'New York'" in logged[1]


@pytest.mark.parametrize(
    ("question", "sqlstate", "message", "hint"),
    [
        ("   ", "42601", "nl.sql was given no question", "Pass the question as text"),
        ("why " * 1500, "54000", "a question may be at most 4000 characters", "Shorten"),
    ],
)
def test_a_bad_question_gets_the_proxy_sqlstate_and_hint(
    conn: psycopg.Connection[Any], question: str, sqlstate: str, message: str, hint: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT nl.sql(%s)", [question])
    diag = raised.value.diag
    assert diag.sqlstate == sqlstate
    assert diag.message_primary is not None and message in diag.message_primary
    assert not diag.message_primary.startswith("plpy")
    assert diag.message_hint is not None and diag.message_hint.startswith(hint)
    assert "Traceback" not in (diag.context or "")
    assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_role_that_may_read_nothing_gets_nl002(demo: str, postgres: Postgres) -> None:
    with (
        psycopg.connect(postgres.dsn(user="clear_user", dbname=DB)) as user,
        pytest.raises(psycopg.Error) as raised,
    ):
        user.execute("SELECT nl.sql(%s)", [NEW_YORK])
    assert raised.value.diag.sqlstate == "NL002"
    assert raised.value.diag.message_hint


def test_grants_and_row_level_security_hold(demo: str, postgres: Postgres) -> None:
    with psycopg.connect(demo, autocommit=True) as owner:
        # scram_user may read students' names, not where they are from
        owner.execute("GRANT SELECT (id, first_name, last_name) ON students TO scram_user")
        # md5_user sees only the students enrolled before 2022
        owner.execute("ALTER TABLE students ENABLE ROW LEVEL SECURITY")
        owner.execute(
            "CREATE POLICY early ON students FOR SELECT TO md5_user USING (enrolled_year < 2022)"
        )
        owner.execute("GRANT SELECT ON students TO md5_user")
        everyone = owner.execute("SELECT count(*) FROM students").fetchone()
    try:
        with psycopg.connect(postgres.dsn(user="scram_user", dbname=DB)) as user:
            chosen = user.execute("SELECT nl.sql(%s)", [NEW_YORK]).fetchone()
            assert chosen is not None and "New York" not in chosen[0]
            assert "home_city" not in chosen[0]
            for (row,) in user.execute("SELECT * FROM nl.ask(%s)", [NEW_YORK]):
                assert "New York" not in json.dumps(row)
        with psycopg.connect(postgres.dsn(user="md5_user", dbname=DB)) as user:
            seen = user.execute("SELECT count(*) FROM students").fetchone()
            assert seen is not None and everyone is not None and 0 < seen[0] < everyone[0]
            answer = user.execute("SELECT * FROM nl.ask('how many students are there?')")
            assert answer.fetchall() == [({"count": seen[0]},)]
    finally:
        with psycopg.connect(demo, autocommit=True) as owner:
            owner.execute("DROP POLICY early ON students")
            owner.execute("ALTER TABLE students DISABLE ROW LEVEL SECURITY")
            owner.execute("REVOKE ALL ON students FROM scram_user, md5_user")


def test_a_call_between_two_writes_leaves_the_transaction_writable(demo: str) -> None:
    with psycopg.connect(demo) as tx:
        tx.execute("CREATE TABLE notes (n integer)")
        tx.execute("INSERT INTO notes VALUES (1)")
        assert tx.execute("SELECT nl.sql(%s)", [NEW_YORK]).fetchone() is not None
        assert tx.execute("SHOW transaction_read_only").fetchone() == ("off",)
        tx.execute("INSERT INTO notes VALUES (2)")
        tx.commit()
    with psycopg.connect(demo, autocommit=True) as check:
        assert check.execute("SELECT array_agg(n ORDER BY n) FROM notes").fetchone() == ([1, 2],)
        check.execute("DROP TABLE notes")


def test_a_call_in_a_read_only_transaction_leaves_it_read_only(demo: str) -> None:
    with psycopg.connect(demo) as tx:
        tx.read_only = True
        assert asked(tx, NEW_YORK)
        with pytest.raises(errors.ReadOnlySqlTransaction):
            tx.execute("CREATE TABLE notes (n integer)")


def test_a_cancelled_call_leaves_the_backend_usable(demo: str) -> None:
    # A new backend's first call starts its worker, which loads the models: over a second, so
    # the cancels below land while the call runs.
    with psycopg.connect(demo, autocommit=True) as user:
        user.execute("SET statement_timeout = '100ms'")
        with pytest.raises(errors.QueryCanceled):
            user.execute("SELECT nl.sql(%s)", [NEW_YORK])
        user.execute("RESET statement_timeout")
        chosen = user.execute("SELECT nl.sql(%s)", [NEW_YORK]).fetchone()
        assert chosen is not None and "'New York'" in chosen[0]

    with psycopg.connect(demo, autocommit=True) as user:
        pid = user.info.backend_pid
        failed: list[BaseException] = []

        def cancel() -> None:
            with psycopg.connect(demo, autocommit=True) as other:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    row = other.execute(
                        "SELECT state FROM pg_stat_activity WHERE pid = %s", [pid]
                    ).fetchone()
                    if row == ("active",):
                        time.sleep(0.2)
                        other.execute("SELECT pg_cancel_backend(%s)", [pid])
                        return
                    time.sleep(0.01)
                failed.append(TimeoutError("the call never started"))

        canceller = threading.Thread(target=cancel)
        canceller.start()
        with pytest.raises(errors.QueryCanceled):
            user.execute("SELECT nl.sql(%s)", [BOSTON])
        canceller.join()
        assert not failed
        assert asked(user, NEW_YORK) == rows_of(
            user, "SELECT count(*) FROM students WHERE home_city = 'New York'"
        )


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_the_signals_sent_to_the_backends_group_do_not_reach_its_worker(demo: str) -> None:
    # A statement timeout and pg_cancel_backend signal the backend's whole process group: a
    # worker there got SIGINT half-way through a message, and the backend then waited for the
    # rest of it for ever.
    with psycopg.connect(demo, autocommit=True) as user:
        user.execute("SELECT nl.pgnl_import()")
        backend = user.info.backend_pid
        (worker,) = _children(backend)
        assert os.getpgid(worker) != os.getpgid(backend)
        try:
            os.killpg(os.getpgid(backend), signal.SIGINT)
        except PermissionError:
            pytest.skip("the tests may not signal the server's processes")
        time.sleep(1)
        assert _children(backend) == [worker]
        assert asked(user, NEW_YORK) == rows_of(
            user, "SELECT count(*) FROM students WHERE home_city = 'New York'"
        )
        assert _children(backend) == [worker]  # the same worker answered


@pytest.mark.parametrize(
    "question",
    [
        "students'); DROP TABLE students; --",
        "$$; DELETE FROM enrollments; $$ how many students",
        "how many students'; UPDATE students SET home_city = 'x'; SELECT '",
        "$fn$ DROP TABLE courses $fn$",
    ],
)
def test_a_question_that_tries_to_break_out_changes_nothing(
    conn: psycopg.Connection[Any], demo: str, question: str
) -> None:
    before = table_checksum(demo)
    for function in ("nl.sql", "nl.ask", "nl.explain"):
        try:
            conn.execute(
                sql.SQL("SELECT * FROM {}(%s)").format(sql.Identifier(*function.split("."))),
                [question],
            ).fetchall()
        except psycopg.Error as exc:  # no answer is fine; a clean error, not a broken session
            assert exc.diag.sqlstate is not None and exc.diag.sqlstate != "XX000", exc
    assert table_checksum(demo) == before


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
def test_psql_calls_the_functions(demo: str) -> None:
    assert PSQL is not None
    script = (
        "SELECT nl.sql('how many students are from new york?');\n"
        "SELECT * FROM nl.ask('how many students are from new york?');\n"
        "SELECT nl.sql('');\n"
        "SELECT 'still here' AS after;\n"
    )
    result = subprocess.run(
        [PSQL, "-X", "-w", "-A", "-t", "-d", demo],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = result.stdout.splitlines()
    with psycopg.connect(demo) as check:
        count = check.execute("SELECT count(*) FROM students WHERE home_city = 'New York'")
        expected = count.fetchone()
    assert expected is not None
    assert "'New York'" in lines[0]
    assert json.loads(lines[1]) == {"count": expected[0]}
    assert lines[2] == "still here"
    assert "ERROR:  nl.sql was given no question" in result.stderr
    assert "HINT:  Pass the question as text" in result.stderr


@pytest.mark.skipif(JAVA is None or not JAR.exists(), reason="java or pgjdbc is not installed")
def test_pgjdbc_calls_the_functions(demo: str, postgres: Postgres) -> None:
    assert JAVA is not None
    url = f"jdbc:postgresql://127.0.0.1:{postgres.port}/{DB}?connectTimeout=10"
    result = subprocess.run(
        [JAVA, "-cp", str(JAR), str(FUNCTIONS_JAVA), url, "postgres", "pgnl", NEW_YORK],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    facts = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    with psycopg.connect(demo) as check:
        expected = check.execute("SELECT count(*) FROM students WHERE home_city = 'New York'")
        count = expected.fetchone()
    assert count is not None
    assert "'New York'" in facts["sql"]
    assert json.loads(facts["ask"]) == {"count": count[0]}
    assert facts["ask_type"] == "jsonb"
    assert facts["error_state"] == "42601"
    assert facts["error_message"].startswith("ERROR: nl.sql was given no question")
    assert facts["after_error"] == "1"
    assert facts["refresh_home_city"] == "unchanged"  # the fixture indexed the demo
    assert "unchanged" in facts["refresh_notice"]


def test_a_server_python_without_pgnl_is_told_what_to_install(demo: str) -> None:
    with psycopg.connect(demo) as tx:  # rolled back at the end: the functions stay as they were
        tx.execute("UPDATE nl.plpython_path SET dir = '/nonexistent'")
        with pytest.raises(psycopg.Error) as raised:
            tx.execute("SELECT nl.sql(%s)", [NEW_YORK])
        tx.rollback()
    diag = raised.value.diag
    assert diag.sqlstate == "58000"
    assert diag.message_primary is not None and "cannot import pgnl" in diag.message_primary
    assert diag.message_hint is not None and "pip install pgnl" in diag.message_hint
