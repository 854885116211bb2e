"""How many clients pgnl takes: its own limit ([proxy] max_client_connections) refuses the extra
client with pgnl's 53300 while the others go on, and the server's own limits (here a role's
CONNECTION LIMIT) reach the client with the server's message and a hint of what to set in pgnl."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from tests.fix_pg import TEST_DB, Postgres
from tests.fix_proxy import RunningProxy

pytestmark = pytest.mark.integration


def test_the_proxys_limit_refuses_the_extra_client_only(
    make_proxy: Callable[..., RunningProxy],
) -> None:
    pgnl = make_proxy("--max-client-connections", "2")
    first = psycopg.connect(pgnl.dsn(), autocommit=True)
    second = psycopg.connect(pgnl.dsn(), autocommit=True)
    try:
        with pytest.raises(psycopg.OperationalError) as refused:
            psycopg.connect(pgnl.dsn(), autocommit=True)
        assert "pgnl accepts at most 2 connections" in str(refused.value)
        assert "max_client_connections" in str(refused.value)
        assert first.execute("SELECT 1").fetchone() == (1,)
        second.close()
        with psycopg.connect(pgnl.dsn(), autocommit=True) as third:  # a place came free
            assert third.execute("SELECT 2").fetchone() == (2,)
    finally:
        first.close()
        second.close()


@pytest.fixture
def limited_role(postgres: Postgres) -> Iterator[str]:
    with postgres.connect(TEST_DB) as admin:
        admin.execute("CREATE ROLE pgnl_limited LOGIN PASSWORD 'limited-pw' CONNECTION LIMIT 1")
    try:
        yield "pgnl_limited"
    finally:
        with postgres.connect(TEST_DB) as admin:
            admin.execute("DROP ROLE pgnl_limited")


def test_the_servers_limit_comes_with_a_hint(proxy: RunningProxy, limited_role: str) -> None:
    dsn = proxy.dsn(user=limited_role, password="limited-pw")
    with psycopg.connect(dsn, autocommit=True) as first:
        with pytest.raises(psycopg.OperationalError) as refused:
            psycopg.connect(dsn, autocommit=True)
        assert "too many connections for role" in str(refused.value)  # the server's message
        assert "[proxy] max_client_connections" in str(refused.value)  # pgnl's hint
        assert first.execute("SELECT 1").fetchone() == (1,)
