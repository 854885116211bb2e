"""psycopg 3 through the proxy, in text and binary mode, simple and extended protocol."""

from __future__ import annotations

import datetime
import decimal

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.fix_proxy import RunningProxy


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_round_trip_of_types(proxy: RunningProxy, binary: bool) -> None:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn, conn.cursor(binary=binary) as cur:
        cur.execute(
            "SELECT %s::int, %s::text, %s::numeric, %s::date, %s::bytea, %s::jsonb, %s::float8[]",
            [
                42,
                "héllo\tworld",
                decimal.Decimal("1.50"),
                datetime.date(2026, 11, 30),
                b"\x00\xffbytes",
                Jsonb({"a": [1, 2]}),
                [1.5, -2.0],
            ],
        )
        assert cur.fetchone() == (
            42,
            "héllo\tworld",
            decimal.Decimal("1.50"),
            datetime.date(2026, 11, 30),
            b"\x00\xffbytes",
            {"a": [1, 2]},
            [1.5, -2.0],
        )


def test_transactions_and_errors_keep_the_session_usable(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn()) as conn:
        conn.execute("CREATE TEMP TABLE t (id int PRIMARY KEY, name text)")
        conn.commit()
        conn.execute("INSERT INTO t VALUES (1, 'one')")
        status = psycopg.pq.TransactionStatus
        assert conn.info.transaction_status is status.INTRANS
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO t VALUES (1, 'again')")
        assert str(conn.info.transaction_status.name) == "INERROR"
        conn.rollback()
        conn.execute("INSERT INTO t VALUES (2, 'two')")
        conn.commit()
        assert conn.execute("SELECT name FROM t").fetchall() == [("two",)]


def test_pipeline_of_many_extended_batches(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        cursors = [conn.cursor() for _ in range(200)]
        with conn.pipeline():
            for i, cur in enumerate(cursors):
                cur.execute("SELECT %s::int * 2", [i])
        assert [cur.fetchone() for cur in cursors] == [(i * 2,) for i in range(200)]


def test_prepared_statements_server_side(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn(), autocommit=True, prepare_threshold=0) as conn:
        for i in range(10):
            assert conn.execute("SELECT %s::text || 'x'", [str(i)]).fetchone() == (f"{i}x",)
        names = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert names is not None and names[0] >= 1


def test_large_result_and_large_query(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g"
        ).fetchall()
        assert len(rows) == 100000 and rows[-1][0] == 100000
        big = "y" * 5_000_000
        assert conn.execute("SELECT length(%s)", [big]).fetchone() == (5_000_000,)


def test_parameter_status_and_backend_pid(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        assert (
            conn.info.parameter_status(
                "server_version",
            )
            is not None
        )
        conn.execute("SET application_name = 'through pgnl'")
        assert conn.info.parameter_status("application_name") == "through pgnl"
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None and row[0] == conn.info.backend_pid
