"""asyncpg through the proxy: the extended protocol in binary format, with named prepared
statements, pipelined batches, portals read in pieces, binary COPY, and cancellation.

Pins: `fetch`/`fetchrow`/`fetchval` with parameters of many types, sent and received in binary;
one `prepare()`d statement reused thousands of times (and visible in pg_prepared_statements);
`executemany` (Bind/Execute pipelined under one Sync), atomic when a row fails; transactions
and savepoints rolled back and committed; `copy_records_to_table` (binary COPY FROM STDIN),
`copy_to_table`, `copy_from_query` and `copy_from_table`, checked against the rows; a cursor in
a transaction iterating 10k rows with prefetch (Execute with a row limit, PortalSuspended) and
a scrollable cursor moved by hand; a query timeout cancels the statement through the proxy and
the connection goes on; a pool of connections running queries concurrently.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import hashlib
import io
import ipaddress
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import pytest

from tests.fix_proxy import RunningProxy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("proxy_stays_healthy")]

T = TypeVar("T")
Conn = asyncpg.Connection


def with_connection(proxy: RunningProxy, body: Callable[[Conn], Awaitable[T]]) -> T:
    """Run `body` on a fresh asyncpg connection through the proxy, in an event loop of its own."""

    async def main() -> T:
        conn = await asyncpg.connect(proxy.dsn(), timeout=20)
        try:
            return await body(conn)
        finally:
            await conn.close(timeout=10)

    return asyncio.run(main())


def test_fetch_with_parameters_of_many_types(proxy: RunningProxy) -> None:
    values: list[object] = [
        42,
        -(2**62),
        1.5e300,
        decimal.Decimal("-12345678901234567890.000000001"),
        "héllo\t\n\\ 🐘",
        b"\x00\x01\xff" * 100,
        True,
        datetime.date(2026, 2, 28),
        datetime.datetime(2026, 11, 30, 23, 59, 59, 123456, tzinfo=datetime.UTC),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        json.dumps({"a": [1, 2, {"b": None}], "é": "ü"}),
        [1, None, 3],
        None,
        datetime.timedelta(days=3, seconds=7, microseconds=5),
        ipaddress.ip_network("10.1.0.0/16"),
    ]
    casts = "int4 int8 float8 numeric text bytea bool date timestamptz uuid jsonb int4[] text"
    casts += " interval cidr"
    select = ", ".join(f"${i}::{cast}" for i, cast in enumerate(casts.split(), start=1))

    async def body(conn: Conn) -> None:
        row = await conn.fetchrow(f"SELECT {select}", *values)
        assert row is not None
        got = list(row.values())
        assert got[:10] == values[:10]
        assert json.loads(got[10]) == json.loads(str(values[10]))
        assert got[11:] == values[11:]

        rows = await conn.fetch(
            "SELECT g, g * $1::int8, repeat($2, g) FROM generate_series(1, $3) g", 3, "ab", 500
        )
        assert [tuple(r) for r in rows] == [(g, g * 3, "ab" * g) for g in range(1, 501)]
        assert await conn.fetchval("SELECT $1::text || $2::text", "a", "é") == "aé"
        assert await conn.fetchval("SELECT array_length($1::float8[], 1)", [0.5] * 10_000) == 10_000
        big = "z" * 3_000_000
        assert await conn.fetchval("SELECT md5($1)", big) == hashlib.md5(big.encode()).hexdigest()  # noqa: S324

    with_connection(proxy, body)


def test_prepared_statement_reused(proxy: RunningProxy) -> None:
    async def body(conn: Conn) -> None:
        stmt = await conn.prepare("SELECT $1::int * 2, $2::text || '!', $3::bytea")
        assert [p.name for p in stmt.get_parameters()] == ["int4", "text", "bytea"]
        assert [a.type.name for a in stmt.get_attributes()] == ["int4", "text", "bytea"]
        for i in range(3000):
            row = await stmt.fetchrow(i, str(i), i.to_bytes(4, "big"))
            assert row is not None and tuple(row) == (i * 2, f"{i}!", i.to_bytes(4, "big"))
        assert await stmt.fetchval(7, "x", b"") == 14
        names = await conn.fetch(
            "SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE $1",
            "SELECT $1::int * 2%",
        )
        assert len(names) == 1 and names[0]["name"] == stmt.get_name()

        # The same text through the connection's statement cache, reused, fetched many times.
        for i in range(1000):
            assert await conn.fetchval("SELECT $1::int8 + 1", i) == i + 1

    with_connection(proxy, body)


def test_executemany(proxy: RunningProxy) -> None:
    async def body(conn: Conn) -> None:
        await conn.execute("CREATE TEMP TABLE items (id int PRIMARY KEY, name text, price numeric)")
        rows = [(i, f"item {i} ✓", decimal.Decimal(i) / 100) for i in range(1, 5001)]
        await conn.executemany("INSERT INTO items VALUES ($1, $2, $3)", rows)
        summary = await conn.fetchrow("SELECT count(*), sum(id), sum(price) FROM items")
        assert summary is not None
        assert tuple(summary) == (5000, sum(range(1, 5001)), sum(r[2] for r in rows))
        got = await conn.fetch("SELECT id, name, price FROM items ORDER BY id")
        assert [tuple(r) for r in got] == rows

        # A failing row makes the whole batch fail, and none of it stays.
        bad = [(i, "again", decimal.Decimal(0)) for i in range(10_001, 10_500)] + [(1, "dup", 0)]
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.executemany("INSERT INTO items VALUES ($1, $2, $3)", bad)
        assert await conn.fetchval("SELECT count(*) FROM items") == 5000
        assert await conn.fetchval("SELECT 'usable'") == "usable"

    with_connection(proxy, body)


class Rollback(Exception):
    pass


def test_transactions(proxy: RunningProxy) -> None:
    async def body(conn: Conn) -> None:
        await conn.execute("CREATE TEMP TABLE t (id int PRIMARY KEY)")
        with pytest.raises(Rollback):
            async with conn.transaction():
                await conn.execute("INSERT INTO t VALUES (1)")
                assert await conn.fetchval("SELECT count(*) FROM t") == 1
                raise Rollback
        assert await conn.fetchval("SELECT count(*) FROM t") == 0
        assert not conn.is_in_transaction()

        async with conn.transaction():
            await conn.execute("INSERT INTO t VALUES (2)")
            with pytest.raises(asyncpg.UniqueViolationError):
                async with conn.transaction():  # a savepoint
                    await conn.execute("INSERT INTO t VALUES (3)")
                    await conn.execute("INSERT INTO t VALUES (2)")
            await conn.execute("INSERT INTO t VALUES (4)")
        assert [r["id"] for r in await conn.fetch("SELECT id FROM t ORDER BY id")] == [2, 4]

        tr = conn.transaction(isolation="serializable", readonly=True)
        await tr.start()
        assert await conn.fetchval("SHOW transaction_isolation") == "serializable"
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await conn.execute("CREATE TABLE never_created (x int)")  # temp tables are writable
        await tr.rollback()
        assert await conn.fetchval("SELECT count(*) FROM t") == 2

    with_connection(proxy, body)


def test_copy(proxy: RunningProxy) -> None:
    records = [
        (i, None if i % 17 == 0 else f"r{i}\t\\ é\n", i * 1_000_000_007, bytes([i % 256]) * (i % 9))
        for i in range(1, 50_001)
    ]

    def text_line(record: tuple[int, str | None, int, bytes]) -> str:
        i, name, big, blob = record
        if name is None:
            shown = "\\N"
        else:
            shown = name.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        return f"{i}\t{shown}\t{big}\t\\\\x{blob.hex()}\n"

    expected = "".join(text_line(r) for r in records).encode("utf-8")

    async def body(conn: Conn) -> None:
        await conn.execute("CREATE TEMP TABLE c (id int, name text, big int8, blob bytea)")
        status = await conn.copy_records_to_table("c", records=records)
        assert status == "COPY 50000"
        got = await conn.fetch("SELECT * FROM c ORDER BY id")
        assert [tuple(r) for r in got] == records

        out = io.BytesIO()
        status = await conn.copy_from_query("SELECT * FROM c ORDER BY id", output=out)
        assert status == "COPY 50000"
        assert out.getvalue() == expected

        parameterised = io.BytesIO()
        await conn.copy_from_query(
            "SELECT id FROM c WHERE id <= $1 ORDER BY id", 3, output=parameterised, format="csv"
        )
        assert parameterised.getvalue() == b"1\n2\n3\n"

        await conn.execute("CREATE TEMP TABLE c2 (LIKE c)")
        status = await conn.copy_to_table("c2", source=io.BytesIO(expected))
        assert status == "COPY 50000"
        binary = io.BytesIO()
        await conn.copy_from_table("c2", output=binary, format="binary")
        assert binary.getvalue().startswith(b"PGCOPY\n\xff\r\n\x00")
        await conn.execute("TRUNCATE c")
        await conn.copy_to_table("c", source=io.BytesIO(binary.getvalue()), format="binary")
        differ = await conn.fetchval(
            "SELECT count(*) FROM (SELECT * FROM c EXCEPT ALL SELECT * FROM c2) d"
        )
        assert differ == 0
        assert await conn.fetchval("SELECT count(*) FROM c") == 50_000

        # A bad record: the server's error, and the connection goes on.
        with pytest.raises(asyncpg.NotNullViolationError):
            await conn.execute("ALTER TABLE c2 ALTER COLUMN name SET NOT NULL")
        await conn.execute("DELETE FROM c2 WHERE name IS NULL")
        await conn.execute("ALTER TABLE c2 ALTER COLUMN name SET NOT NULL")
        with pytest.raises(asyncpg.NotNullViolationError):
            await conn.copy_records_to_table("c2", records=records[:100])
        assert await conn.fetchval("SELECT count(*) FROM c2") == 50_000 - 50_000 // 17

    with_connection(proxy, body)


def test_cursor_in_a_transaction(proxy: RunningProxy) -> None:
    query = "SELECT g, md5(g::text) FROM generate_series(1, $1) g ORDER BY g"

    def expected(g: int) -> tuple[int, str]:
        return (g, hashlib.md5(str(g).encode()).hexdigest())  # noqa: S324

    async def body(conn: Conn) -> None:
        async with conn.transaction():
            seen: list[tuple[int, str]] = []
            async for record in conn.cursor(query, 10_000, prefetch=333):
                seen.append((record[0], record[1]))
            assert seen == [expected(g) for g in range(1, 10_001)]

            cursor = await conn.cursor(query, 10_000)
            first = await cursor.fetch(100)
            assert [tuple(r) for r in first] == [expected(g) for g in range(1, 101)]
            assert await cursor.forward(5000) == 5000
            row = await cursor.fetchrow()
            assert row is not None and tuple(row) == expected(5101)
            rest = await cursor.fetch(10_000)
            assert len(rest) == 10_000 - 5101
            assert await cursor.fetchrow() is None

            # Interleaved with other statements on the same connection.
            cursor = await conn.cursor(query, 1000)
            total = 0
            while batch := await cursor.fetch(97):
                total += len(batch)
                assert await conn.fetchval("SELECT $1::int", total) == total
            assert total == 1000

    with_connection(proxy, body)


def test_timeout_cancels_through_the_proxy(proxy: RunningProxy) -> None:
    async def body(conn: Conn) -> None:
        pid = conn.get_server_pid()
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await conn.fetchval("SELECT pg_sleep(30)", timeout=0.5)
        # asyncpg sends a CancelRequest (with the key the proxy gave it) and waits for the
        # server's answer before the connection can be used again.
        assert await conn.fetchval("SELECT pg_backend_pid()") == pid
        assert loop.time() - started < 15
        assert await conn.fetchval("SELECT 1") == 1

    with_connection(proxy, body)


def test_pool_of_connections(proxy: RunningProxy) -> None:
    async def main() -> None:
        async with asyncpg.create_pool(proxy.dsn(), min_size=2, max_size=8) as pool:

            async def work(i: int) -> tuple[int, int]:
                async with pool.acquire() as conn:
                    pid = await conn.fetchval("SELECT pg_backend_pid()")
                    await conn.execute("SELECT pg_sleep(0.01)")
                    value = await conn.fetchval("SELECT $1::int * $1::int", i)
                    return int(pid), int(value)

            results = await asyncio.gather(*(work(i) for i in range(200)))
            assert [value for _, value in results] == [i * i for i in range(200)]
            assert 2 <= len({pid for pid, _ in results}) <= 8

    asyncio.run(main())
