"""CancelRequest sent to the proxy cancels the running query on the right upstream backend."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.fix_proxy import RunningProxy


def test_cancel_of_a_long_query_returns_within_a_second(proxy: RunningProxy) -> None:
    with (
        psycopg.connect(proxy.dsn(), autocommit=True) as victim,
        psycopg.connect(proxy.dsn(), autocommit=True) as bystander,
    ):
        bystander.execute("SELECT 1")
        timer = threading.Timer(0.3, victim.cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            victim.execute("SELECT pg_sleep(10)")
        elapsed = time.monotonic() - started
        timer.join()
        assert elapsed < 1.3, f"cancel took {elapsed:.2f}s"
        # both sessions keep working; the cancel hit only the victim's backend
        assert victim.execute("SELECT 'still here'").fetchone() == ("still here",)
        assert bystander.execute("SELECT 2").fetchone() == (2,)


def test_cancel_reaches_only_its_own_backend(proxy: RunningProxy) -> None:
    with (
        psycopg.connect(proxy.dsn(), autocommit=True) as one,
        psycopg.connect(proxy.dsn(), autocommit=True) as two,
    ):
        results: dict[str, object] = {}

        def run_two() -> None:
            try:
                results["two"] = two.execute("SELECT pg_sleep(1.5), 'done'").fetchone()
            except psycopg.Error as exc:
                results["two"] = exc

        worker = threading.Thread(target=run_two)
        worker.start()
        timer = threading.Timer(0.3, one.cancel)
        timer.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            one.execute("SELECT pg_sleep(10)")
        worker.join()
        timer.join()
        assert results["two"] == ("", "done")
