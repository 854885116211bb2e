"""The native relay through the real proxy: plain SQL is relayed natively (the metrics say so),
a directive brings the connection back to Python and is answered, and the connection goes back
to the native relay after; prepared statements, pipelines, COPY, a result far bigger than the
socket buffers and a shutdown behave as on the Python path; `[proxy] native_relay = false`
keeps every connection in Python."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from proxy import native_relay
from tests.fix_pg import free_port
from tests.fix_proxy import RunningProxy
from tests.integration.test_metrics import eventually, metrics

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not native_relay.AVAILABLE, reason="the native relay is not built"),
]

STUDENTS = """
CREATE TABLE students (id integer PRIMARY KEY, name text NOT NULL, city text NOT NULL);
INSERT INTO students VALUES (1, 'Timmy Ward', 'Boston'), (2, 'Ana Lopez', 'Chicago'),
                            (3, 'Wei Chen', 'Boston');
"""
NATIVE = "pgnl_native_relay_connections"
HANDBACKS = "pgnl_native_relay_handbacks_total"


def test_plain_sql_is_relayed_natively_and_a_directive_comes_back_to_python(
    make_proxy: Callable[..., RunningProxy], make_database: Callable[..., str]
) -> None:
    db = make_database(STUDENTS, migrated=True)
    port = free_port()
    proxy = make_proxy("--metrics-listen", f"127.0.0.1:{port}")
    with psycopg.connect(proxy.dsn(dbname=db), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM students").fetchone() == (3,)
        native = eventually(port, lambda m: m.value(NATIVE) == 1)
        assert native.value(NATIVE) == 1
        start = native.value(HANDBACKS)
        for _ in range(50):  # simple and extended protocol, all relayed natively
            assert conn.execute("SELECT name FROM students WHERE id = %s", (2,)).fetchone() == (
                "Ana Lopez",
            )
            assert conn.execute("SELECT 1", prepare=True).fetchone() == (1,)
        with conn.pipeline():
            cursors = [conn.execute("SELECT %s::int * 2", (i,)) for i in range(20)]
        assert [c.fetchone() for c in cursors] == [(i * 2,) for i in range(20)]
        assert metrics(port).value(HANDBACKS) == start  # none of that needed Python

        cur = conn.execute("-- nl: how many students are there?")
        assert cur.fetchall() == [(3,)]
        asked = metrics(port)
        assert asked.value(HANDBACKS) == start + 1
        # The next statement goes through Python, and the connection goes native again.
        assert conn.execute("SELECT city FROM students WHERE id = 3").fetchone() == ("Boston",)
        again = eventually(port, lambda m: m.value(NATIVE) == 1)
        assert again.value(NATIVE) == 1
        assert conn.execute("-- nl: how many students are there?").fetchall() == [(3,)]
        assert metrics(port).value(HANDBACKS) == start + 2
    closed = eventually(port, lambda m: m.value("pgnl_client_connections_open") == 0)
    assert closed.value(NATIVE) == 0
    assert proxy.internal_errors() == []


def test_copy_a_big_result_and_a_transaction_through_the_native_relay(
    make_proxy: Callable[..., RunningProxy], make_database: Callable[..., str]
) -> None:
    db = make_database("CREATE TABLE t (n integer, s text);")
    port = free_port()
    proxy = make_proxy("--metrics-listen", f"127.0.0.1:{port}")
    with psycopg.connect(proxy.dsn(dbname=db)) as conn:
        conn.execute("SELECT 1")
        eventually(port, lambda m: m.value(NATIVE) == 1)
        with conn.cursor() as cur, cur.copy("COPY t FROM STDIN") as copy:
            for n in range(5000):
                copy.write_row((n, "x" * 100))
        conn.commit()
        # COPY is the session's: back in Python for it, native again after.
        assert conn.execute("SELECT count(*), sum(n) FROM t").fetchone() == (5000, 12497500)
        eventually(port, lambda m: m.value(NATIVE) == 1)
        # About 50 MB of rows, read slowly: the relay holds back rather than buffer it all.
        rows = 0
        with conn.cursor(name="big") as cur:
            cur.execute("SELECT n, repeat(s, 100) FROM t, generate_series(1, 1) g")
            while batch := cur.fetchmany(500):
                rows += len(batch)
                assert all(len(r[1]) == 10_000 for r in batch)
                time.sleep(0.001)
        assert rows == 5000
        conn.rollback()
        conn.execute("INSERT INTO t VALUES (-1, 'gone')")
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM t WHERE n = -1").fetchone() == (0,)
    assert proxy.internal_errors() == []


def test_an_idle_native_connection_is_told_of_shutdown(
    make_proxy: Callable[..., RunningProxy],
) -> None:
    proxy = make_proxy()
    conn = psycopg.connect(proxy.dsn(), autocommit=True)
    try:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        time.sleep(0.2)  # gone native
        proxy.stop()
        with pytest.raises(psycopg.OperationalError, match="shutting down"):
            conn.execute("SELECT 2")
    finally:
        conn.close()


def test_the_setting_off_keeps_every_connection_in_python(
    make_proxy: Callable[..., RunningProxy],
) -> None:
    port = free_port()
    proxy = make_proxy(
        "--metrics-listen", f"127.0.0.1:{port}", env={"PGNL_PROXY_NATIVE_RELAY": "false"}
    )
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert NATIVE not in metrics(port).type
    on = free_port()
    make_proxy("--metrics-listen", f"127.0.0.1:{on}")
    assert metrics(on).type[NATIVE] == "gauge"


def test_a_question_is_answered_while_32_clients_relay_natively(
    make_proxy: Callable[..., RunningProxy], make_database: Callable[..., str]
) -> None:
    """32 connections run plain SQL in a loop, natively, while one connection asks questions:
    every question is answered, every plain query returns its row, and nobody waits for the
    question (each plain connection gets through many queries while it runs)."""
    db = make_database(STUDENTS, migrated=True)
    port = free_port()
    proxy = make_proxy("--metrics-listen", f"127.0.0.1:{port}")
    stop = threading.Event()
    done: list[int] = []
    failures: list[BaseException] = []

    def plain(worker: int) -> None:
        try:
            with psycopg.connect(proxy.dsn(dbname=db), autocommit=True) as conn:
                count = 0
                while not stop.is_set():
                    row = conn.execute("SELECT %s::int + id FROM students WHERE id = 1", (worker,))
                    assert row.fetchone() == (worker + 1,)
                    count += 1
                done.append(count)
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    workers = [threading.Thread(target=plain, args=(n,)) for n in range(32)]
    for worker in workers:
        worker.start()
    try:
        eventually(port, lambda m: m.value(NATIVE) >= 32)
        with psycopg.connect(proxy.dsn(dbname=db), autocommit=True) as asker:
            for _ in range(3):
                assert asker.execute("-- nl: how many students are there?").fetchall() == [(3,)]
        during = metrics(port)
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    assert failures == []
    assert len(done) == 32 and min(done) > 3
    assert during.value(NATIVE) >= 32  # the plain connections stayed native throughout
    assert proxy.internal_errors() == []
