"""COPY through the proxy with psycopg 3: the CopyIn/CopyOut sub-protocols, relayed as they came.

Pins: COPY FROM STDIN in text format (100k rows written in odd-sized chunks, so that CopyData
messages and TCP reads split anywhere) and in binary format (100k rows), then COPY TO STDOUT
of the same table, checked against checksums computed by the server and by Python; a load of
more than 10 MB (with one 3 MB row); COPY TO STDOUT of generated rows compared byte for byte;
a bad row early or late in a long COPY FROM gives the server's error (with its context line)
and leaves the connection usable; a CopyFail from the client (an exception inside
`with cur.copy(...)`, or libpq's put_copy_end with a message) reaches the server, and the
connection stays usable, in autocommit and inside a transaction.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests.fix_pg import Postgres
from tests.fix_proxy import RunningProxy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("proxy_stays_healthy")]

Conn = psycopg.Connection[tuple[object, ...]]
Row = tuple[int, str, bytes, int | None]
NULL = "\\N"  # NULL in COPY text format

_PIECES = ["a", "bc", "\t", "\n", "\r", "\\", "é", "日本", "🐘", " ", "N", ".", "x" * 40]


@pytest.fixture
def conn(proxy: RunningProxy) -> Iterator[Conn]:
    with psycopg.connect(proxy.dsn(), autocommit=True) as connection:
        yield connection


@pytest.fixture
def table(postgres: Postgres) -> Iterator[sql.Identifier]:
    """A table (id int, name text, payload bytea, n bigint), dropped after the test."""
    name = sql.Identifier(f"copy_{uuid.uuid4().hex[:12]}")
    with postgres.connect() as direct:
        direct.execute(
            sql.SQL(
                "CREATE TABLE {} (id int PRIMARY KEY, name text, payload bytea, n bigint)"
            ).format(name)
        )
    yield name
    with postgres.connect() as direct:
        direct.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(name))


def make_rows(count: int, seed: int = 1) -> list[Row]:
    rng = random.Random(seed)
    rows: list[Row] = []
    for i in range(1, count + 1):
        name = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 5)))
        payload = rng.randbytes(rng.randint(0, 24))
        n = None if i % 13 == 0 else rng.randint(-(2**62), 2**62)
        rows.append((i, name, payload, n))
    return rows


def escape(value: str) -> str:
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def copy_text(rows: list[Row]) -> bytes:
    """The rows as COPY text format, exactly as PostgreSQL writes them out."""
    lines = []
    for i, name, payload, n in rows:
        number = NULL if n is None else str(n)
        lines.append(f"{i}\t{escape(name)}\t\\\\x{payload.hex()}\t{number}\n")
    return "".join(lines).encode("utf-8")


def python_checksum(rows: list[Row]) -> tuple[int, int, str]:
    lines = (
        f"{i}|{name}|{payload.hex()}|{'<null>' if n is None else n}" for i, name, payload, n in rows
    )
    digest = hashlib.md5("\n".join(lines).encode("utf-8")).hexdigest()  # noqa: S324
    return len(rows), sum(r[0] for r in rows), digest


def server_checksum(postgres: Postgres, table: sql.Identifier) -> tuple[int, int, str]:
    """Count, sum of ids and md5 of every row, computed by PostgreSQL (not through the proxy)."""
    query = sql.SQL(
        "SELECT count(*), coalesce(sum(id), 0), md5(coalesce(string_agg("
        "  id || '|' || name || '|' || encode(payload, 'hex') || '|'"
        "  || coalesce(n::text, '<null>'), E'\\n' ORDER BY id), '')) FROM {}"
    ).format(table)
    with postgres.connect() as direct:
        row = direct.execute(query).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), str(row[2])  # type: ignore[call-overload]


def copy_out(conn: Conn, statement: sql.SQL | sql.Composed) -> bytes:
    with conn.cursor() as cur, cur.copy(statement) as copy:
        return b"".join(bytes(chunk) for chunk in copy)


def chunks(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    pos, k = 0, 0
    while pos < len(data):
        size = sizes[k % len(sizes)]
        yield data[pos : pos + size]
        pos += size
        k += 1


def test_copy_from_stdin_text(conn: Conn, postgres: Postgres, table: sql.Identifier) -> None:
    rows = make_rows(100_000)
    data = copy_text(rows)
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy:
            for chunk in chunks(data, [1, 5, 4099, 65536, 3, 100_003]):
                copy.write(chunk)
        assert cur.rowcount == 100_000
    assert server_checksum(postgres, table) == python_checksum(rows)
    out = copy_out(conn, sql.SQL("COPY (SELECT * FROM {} ORDER BY id) TO STDOUT").format(table))
    assert hashlib.sha256(out).hexdigest() == hashlib.sha256(data).hexdigest()


def test_copy_binary_round_trip(conn: Conn, postgres: Postgres, table: sql.Identifier) -> None:
    rows = make_rows(100_000, seed=2)
    types = ["int4", "text", "bytea", "int8"]
    with conn.cursor() as cur:
        statement = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(table)
        with cur.copy(statement) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
        assert cur.rowcount == 100_000
    assert server_checksum(postgres, table) == python_checksum(rows)

    back: list[tuple[object, ...]] = []
    with conn.cursor() as cur:
        copy_to = sql.SQL("COPY (SELECT * FROM {} ORDER BY id) TO STDOUT (FORMAT BINARY)")
        with cur.copy(copy_to.format(table)) as copy:
            copy.set_types(types)
            back.extend(copy.rows())
    assert back == rows


def test_copy_more_than_10_mb(conn: Conn, postgres: Postgres, table: sql.Identifier) -> None:
    rng = random.Random(3)
    rows: list[Row] = [
        (i, "".join(rng.choice("abcdefghij\t\n\\é") for _ in range(2000)), b"", i)
        for i in range(1, 5001)
    ]
    rows.append((5001, "z" * 3_000_000, b"\x00" * 1000, None))
    data = copy_text(rows)
    assert len(data) > 10 * 1024 * 1024
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy:
            for chunk in chunks(data, [1 << 20, 777, 1 << 16]):
                copy.write(chunk)
        assert cur.rowcount == 5001
    assert server_checksum(postgres, table) == python_checksum(rows)
    out = copy_out(conn, sql.SQL("COPY (SELECT * FROM {} ORDER BY id) TO STDOUT").format(table))
    assert len(out) == len(data)
    assert hashlib.sha256(out).hexdigest() == hashlib.sha256(data).hexdigest()


def test_copy_to_stdout_of_generated_rows(conn: Conn) -> None:
    def line(g: int) -> str:
        digest = hashlib.md5(str(g).encode()).hexdigest()  # noqa: S324
        return f"{g}\t{digest}\t{'é' * (g % 7) if g % 10 else NULL}\n"

    expected = "".join(line(g) for g in range(1, 100_001)).encode("utf-8")
    out = copy_out(
        conn,
        sql.SQL(
            "COPY (SELECT g, md5(g::text),"
            " CASE WHEN g % 10 = 0 THEN NULL ELSE repeat('é', g % 7) END"
            " FROM generate_series(1, 100000) g) TO STDOUT"
        ),
    )
    assert out == expected
    # The session goes on normally after a long CopyOut.
    assert conn.execute("SELECT 'after copy'").fetchone() == ("after copy",)


@pytest.mark.parametrize("bad_line", [2, 60_000], ids=["early", "late"])
def test_bad_row_gives_the_server_error(
    conn: Conn, postgres: Postgres, table: sql.Identifier, bad_line: int
) -> None:
    rows = make_rows(80_000, seed=4)
    lines = copy_text(rows).splitlines(keepends=True)
    lines[bad_line - 1] = b"oops\tbad\t\\\\x00\t1\n"
    with (
        conn.cursor() as cur,
        pytest.raises(psycopg.errors.InvalidTextRepresentation) as info,
        cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy,
    ):
        for chunk in chunks(b"".join(lines), [65536]):
            copy.write(chunk)
    error = info.value
    assert error.diag.sqlstate == "22P02"
    assert error.diag.message_primary == 'invalid input syntax for type integer: "oops"'
    assert error.diag.context is not None
    assert f"line {bad_line}, column id" in error.diag.context
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
    assert server_checksum(postgres, table)[0] == 0

    # And the same table loads fine on the same connection afterwards.
    with conn.cursor() as cur, cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy:
        copy.write(copy_text(rows[:1000]))
    assert server_checksum(postgres, table) == python_checksum(rows[:1000])


def test_copy_fail_from_client_in_autocommit(
    conn: Conn, postgres: Postgres, table: sql.Identifier
) -> None:
    rows = make_rows(20_000, seed=5)
    with (
        conn.cursor() as cur,
        pytest.raises(ZeroDivisionError),
        cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy,
    ):
        for i, chunk in enumerate(chunks(copy_text(rows), [8192])):
            copy.write(chunk)
            if i == 50:
                _ = 1 / 0
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert conn.execute("SELECT 'usable'").fetchone() == ("usable",)
    assert server_checksum(postgres, table)[0] == 0


def test_copy_fail_inside_a_transaction(
    proxy: RunningProxy, postgres: Postgres, table: sql.Identifier
) -> None:
    with psycopg.connect(proxy.dsn()) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (0, 'kept', '', 0)").format(table))
        conn.commit()
        conn.execute(sql.SQL("INSERT INTO {} VALUES (-1, 'discarded', '', 0)").format(table))
        with (
            conn.cursor() as cur,
            pytest.raises(RuntimeError, match="give up"),
            cur.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy,
        ):
            copy.write(copy_text(make_rows(100)))
            raise RuntimeError("give up")
        # The server saw the CopyFail: the transaction is now failed, not idle or open.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        conn.rollback()
        assert conn.execute("SELECT 'usable'").fetchone() == ("usable",)
        conn.commit()
    assert server_checksum(postgres, table)[:2] == (1, 0)


def test_copy_fail_message_reaches_the_server(conn: Conn, table: sql.Identifier) -> None:
    pgconn = conn.pgconn
    statement = sql.SQL("COPY {} FROM STDIN").format(table).as_bytes(conn)
    result = pgconn.exec_(statement)
    assert result.status == psycopg.pq.ExecStatus.COPY_IN
    assert pgconn.put_copy_data(copy_text(make_rows(10))) == 1
    assert pgconn.put_copy_end(b"the client changed its mind") == 1
    failed = pgconn.get_result()
    assert failed is not None
    assert failed.status == psycopg.pq.ExecStatus.FATAL_ERROR
    assert failed.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"57014"
    message = failed.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY)
    assert message == b"COPY from stdin failed: the client changed its mind"
    assert pgconn.get_result() is None
    assert conn.execute("SELECT 'usable'").fetchone() == ("usable",)
