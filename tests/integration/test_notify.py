"""Asynchronous server messages through the proxy: NotificationResponse, NoticeResponse and
ParameterStatus, which arrive between or inside the answers to queries.

Pins: LISTEN/NOTIFY across two proxied connections (psycopg `notifies()` with a timeout, and
asyncpg `add_listener`, which gets them while the connection sits idle), with channel and
payload intact (unicode, up to the 7999-byte limit) and the sender pid equal to the sending
connection's `info.backend_pid` (the pid the proxy passed on in BackendKeyData); thousands of
notifications from one transaction, in order; notifications that arrive while the listener is
idle are delivered with its next query; NOTICE and WARNING from `RAISE` with detail, hint and
SQLSTATE, and server-generated notices, reach psycopg's notice handler and asyncpg's log
listener; ParameterStatus after SET, and again when a ROLLBACK undoes the SET; the FATAL error of a
terminated backend reaches the idle client, and the proxy closes the connection after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import asyncpg
import psycopg
import pytest

from tests.fix_pg import Postgres
from tests.fix_proxy import RunningProxy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("proxy_stays_healthy")]

Conn = psycopg.Connection[tuple[object, ...]]


@pytest.fixture
def listener(proxy: RunningProxy) -> Iterator[Conn]:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def sender(proxy: RunningProxy) -> Iterator[Conn]:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        yield conn


def test_notify_across_connections(listener: Conn, sender: Conn) -> None:
    channel = "chan Ü 🐘"
    payload = "héllo\tworld\n" + "日本語" * 3
    listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    sender.execute("SELECT pg_notify(%s, %s)", [channel, payload])
    received = list(listener.notifies(timeout=10, stop_after=1))
    assert len(received) == 1
    note = received[0]
    assert (note.channel, note.payload) == (channel, payload)
    assert note.pid == sender.info.backend_pid
    assert note.pid != listener.info.backend_pid
    row = sender.execute("SELECT pg_backend_pid()").fetchone()
    assert row == (note.pid,)


def test_notify_to_itself_and_longest_payload(listener: Conn) -> None:
    listener.execute("LISTEN self_chan")
    longest = "x" * 7999  # NOTIFY payloads must be shorter than 8000 bytes
    listener.execute("SELECT pg_notify('self_chan', %s)", [longest])
    (note,) = listener.notifies(timeout=10, stop_after=1)
    assert note.payload == longest
    assert note.pid == listener.info.backend_pid
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="payload string too long"):
        listener.execute("SELECT pg_notify('self_chan', %s)", ["x" * 8000])
    assert listener.execute("SELECT 1").fetchone() == (1,)


def test_many_notifications_from_one_transaction_in_order(listener: Conn, sender: Conn) -> None:
    listener.execute("LISTEN bulk")
    count = 3000
    with sender.transaction():
        sender.execute(
            "SELECT pg_notify('bulk', g::text || ':' || repeat('p', g %% 50))"
            " FROM generate_series(1, %s) g",
            [count],
        )
    received: list[str] = []
    deadline = time.monotonic() + 30
    while len(received) < count and time.monotonic() < deadline:
        for note in listener.notifies(timeout=5, stop_after=count - len(received)):
            assert note.channel == "bulk"
            assert note.pid == sender.info.backend_pid
            received.append(note.payload)
    assert received == [f"{g}:{'p' * (g % 50)}" for g in range(1, count + 1)]


def test_notifications_while_idle_come_with_the_next_query(listener: Conn, sender: Conn) -> None:
    got: list[psycopg.Notify] = []
    listener.add_notify_handler(got.append)
    listener.execute("LISTEN idle_chan")
    for i in range(5):
        sender.execute("SELECT pg_notify('idle_chan', %s)", [f"n{i}"])
    time.sleep(0.3)  # the notifications reach the listener's socket while it is idle
    rows = listener.execute("SELECT g FROM generate_series(1, 1000) g").fetchall()
    assert len(rows) == 1000 and rows[-1] == (1000,)
    assert [n.payload for n in got] == [f"n{i}" for i in range(5)]
    assert {n.pid for n in got} == {sender.info.backend_pid}


def test_notices_reach_the_handler(listener: Conn) -> None:
    # A Diagnostic is only valid inside the handler (libpq frees the result after): copy it.
    notices: list[tuple[str | None, ...]] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        notices.append(
            (
                diag.severity_nonlocalized,
                diag.sqlstate,
                diag.message_primary,
                diag.message_detail,
                diag.message_hint,
            )
        )

    listener.add_notice_handler(keep)
    listener.execute(
        """
        DO $$
        BEGIN
          RAISE NOTICE 'hello %', 42 USING DETAIL = 'some détail', HINT = 'a hint';
          RAISE WARNING 'careful' USING ERRCODE = '01007';
          RAISE NOTICE 'bye';
        END $$
        """
    )
    assert notices == [
        ("NOTICE", "00000", "hello 42", "some détail", "a hint"),
        ("WARNING", "01007", "careful", None, None),
        ("NOTICE", "00000", "bye", None, None),
    ]

    notices.clear()
    listener.execute("DROP TABLE IF EXISTS surely_not_a_table_here")
    assert [n[2] for n in notices] == ['table "surely_not_a_table_here" does not exist, skipping']

    notices.clear()
    listener.execute("SET client_min_messages = warning")
    listener.execute("DO $$ BEGIN RAISE NOTICE 'hidden'; RAISE WARNING 'shown'; END $$")
    assert [n[2] for n in notices] == ["shown"]


def test_notices_in_the_middle_of_a_result(listener: Conn) -> None:
    notices: list[str] = []
    listener.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    listener.execute(
        """
        CREATE FUNCTION pg_temp.noisy(i int) RETURNS int LANGUAGE plpgsql AS $$
        BEGIN
          IF i % 1000 = 0 THEN RAISE NOTICE 'at %', i; END IF;
          RETURN i;
        END $$
        """
    )
    rows = listener.execute("SELECT pg_temp.noisy(g) FROM generate_series(1, 10000) g").fetchall()
    assert rows == [(g,) for g in range(1, 10001)]
    assert notices == [f"at {g}" for g in range(1000, 10001, 1000)]


def test_parameter_status(listener: Conn) -> None:
    info = listener.info
    assert info.parameter_status("server_encoding") == "UTF8"
    assert info.parameter_status("client_encoding") == "UTF8"
    assert (info.parameter_status("server_version") or "").startswith("18")
    listener.execute("SET TimeZone = 'Asia/Kolkata'")
    assert info.parameter_status("TimeZone") == "Asia/Kolkata"
    listener.execute("SET DateStyle = 'German, DMY'")
    assert info.parameter_status("DateStyle") == "German, DMY"
    listener.execute("SET IntervalStyle = 'iso_8601'")
    assert info.parameter_status("IntervalStyle") == "iso_8601"
    listener.execute("SET application_name = 'outside'")
    with listener.transaction(force_rollback=True):
        listener.execute("SET application_name = 'inside'")
        assert info.parameter_status("application_name") == "inside"
    # The rollback undid the SET; the server says so with another ParameterStatus.
    assert info.parameter_status("application_name") == "outside"
    assert listener.execute("SHOW application_name").fetchone() == ("outside",)


def test_fatal_error_from_a_terminated_backend(listener: Conn, postgres: Postgres) -> None:
    pid = listener.info.backend_pid
    with postgres.connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
    # The server's FATAL ErrorResponse arrived unprompted; the next query reads it.
    with pytest.raises(psycopg.errors.AdminShutdown, match="terminating connection"):
        listener.execute("SELECT 1")
    assert listener.closed


async def _asyncpg_listener(proxy: RunningProxy) -> None:
    listen = await asyncpg.connect(proxy.dsn())
    send = await asyncpg.connect(proxy.dsn())
    try:
        queue: asyncio.Queue[tuple[int, str, str]] = asyncio.Queue()

        def on_notify(
            connection: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
            pid: int,
            channel: str,
            payload: object,
        ) -> None:
            queue.put_nowait((pid, channel, str(payload)))

        logs: list[tuple[str, str]] = []

        def on_log(
            connection: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy,
            message: asyncpg.PostgresLogMessage,
        ) -> None:
            logs.append((str(message.severity), str(message.message)))

        await listen.add_listener("async chan", on_notify)
        listen.add_log_listener(on_log)
        send_pid = send.get_server_pid()
        for i in range(3):
            await send.execute(f"NOTIFY \"async chan\", 'payload {i} ✓'")
        # The listener runs no query: asyncpg reads the notifications as they arrive.
        got = [await asyncio.wait_for(queue.get(), 10) for _ in range(3)]
        assert got == [(send_pid, "async chan", f"payload {i} ✓") for i in range(3)]
        assert await listen.fetchval("SELECT pg_backend_pid()") == listen.get_server_pid()

        await listen.execute("DO $$ BEGIN RAISE NOTICE 'from asyncpg %', 1; END $$")
        for _ in range(100):  # log listeners are called soon after, not inside execute()
            if logs:
                break
            await asyncio.sleep(0.01)
        assert logs == [("NOTICE", "from asyncpg 1")]
        await listen.remove_listener("async chan", on_notify)
    finally:
        await send.close()
        await listen.close()


def test_asyncpg_listener(proxy: RunningProxy) -> None:
    asyncio.run(_asyncpg_listener(proxy))
