"""pgjdbc (the Debian package's driver, 42.5) through the proxy, run from `jdbc/Main.java` with
Java's source launcher.

Pins: connecting with SCRAM and with MD5 (pgjdbc's own implementations), SSLRequest refused and
the driver going on in clear; a PreparedStatement run past `prepareThreshold=2` switching to a
named server-side statement, seen from inside (`PGStatement.isUseServerPrepare()` and a row in
pg_prepared_statements) with binary numeric/timestamp results; a 1000-row batch insert; commit,
rollback and a savepoint; a fetch size inside a transaction (portal read in pieces, another
query in between); an error and recovery; `setQueryTimeout` cancelling through the proxy; and
DatabaseMetaData (getTables, getColumns, getPrimaryKeys). Java prints key=value lines; this test
asserts on them and on the table as PostgreSQL sees it directly.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from tests.fix_pg import ROLES, TEST_DB, Postgres
from tests.fix_proxy import RunningProxy

JAVA = shutil.which("java")
JAR = Path("/usr/share/java/postgresql.jar")
MAIN = Path(__file__).parent / "jdbc" / "Main.java"

pytestmark = [
    pytest.mark.usefixtures("proxy_stays_healthy"),
    pytest.mark.integration,
    pytest.mark.skipif(JAVA is None, reason="java (JDK 11+ for source launch) is not installed"),
    pytest.mark.skipif(not JAR.exists(), reason=f"pgjdbc is not installed ({JAR} is missing)"),
]


@pytest.fixture
def table(postgres: Postgres) -> Iterator[str]:
    name = f"jdbc_{uuid.uuid4().hex[:12]}"
    yield name
    with postgres.connect() as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def run_main(proxy: RunningProxy, user: str, password: str, table: str) -> dict[str, str]:
    assert JAVA is not None
    url = (
        f"jdbc:postgresql://{proxy.host}:{proxy.port}/{TEST_DB}"
        "?prepareThreshold=2&ApplicationName=pgnl-jdbc-test&connectTimeout=10"
    )
    result = subprocess.run(
        [JAVA, "-cp", str(JAR), str(MAIN), url, user, password, table],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, f"Main.java failed:\n{result.stdout}\n{result.stderr}"
    facts: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, sep, value = line.partition("=")
        assert sep, f"unexpected output line {line!r}"
        facts[key] = value
    return facts


@pytest.mark.parametrize("user", ["postgres", "md5_user"], ids=["scram", "md5"])
def test_pgjdbc(proxy: RunningProxy, postgres: Postgres, table: str, user: str) -> None:
    password = "pgnl" if user == "postgres" else ROLES[user][0]
    facts = run_main(proxy, user, password, table)
    assert facts.pop("driver_version").startswith("42.")
    expected = {
        "server_version": "18",
        "backend_pid_matches": "true",
        "prepared_sum": str(sum(i * 2 for i in range(10))),
        "server_prepare": "true",
        "batch_statements": "1000",
        "batch_inserted": "1000",
        "rows_after_batch": "1000",
        "price_sum": str(sum(range(1, 1001))),
        "ids_after_transactions": "[2001, 2003]",
        "fetched_rows": "10000",
        "fetched_sum": str(sum(range(1, 10001))),
        "error": "22012",
        "after_error": "42",
        "timeout": "57014",
        "after_timeout": "1",
        "tables": f"[public.{table}:TABLE]",
        "columns": "[id:int4:NO, name:text:NO, price:numeric:YES, created:timestamptz:YES]",
        "primary_key": "[id]",
        "done": "true",
    }
    prepared = int(facts.pop("pg_prepared_statements"))
    timeout_seconds = int(facts.pop("timeout_seconds"))
    assert facts == expected
    assert prepared >= 1, "pgjdbc never used a named server-side statement"
    assert timeout_seconds < 10, "the query timeout's cancel did not take effect promptly"

    with postgres.connect() as conn:
        query = sql.SQL("SELECT count(*), min(name), max(id) FROM {}").format(sql.Identifier(table))
        row = conn.execute(query).fetchone()
    assert row == (1002, "committed", 2003)
