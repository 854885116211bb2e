"""Authentication relayed transparently: trust, cleartext, md5 and SCRAM-SHA-256, right and wrong.

The proxy holds no passwords: each exchange is between the client and PostgreSQL.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.fix_proxy import RunningProxy

METHODS = {
    "scram_user": "scram-sha-256",
    "md5_user": "md5",
    "clear_user": "password",
    "trust_user": "trust",
}


@pytest.mark.parametrize("user", sorted(METHODS))
def test_each_method_logs_in_through_the_proxy(proxy: RunningProxy, user: str) -> None:
    with psycopg.connect(proxy.dsn(user=user), autocommit=True) as conn:
        row = conn.execute("SELECT current_user").fetchone()
        assert row == (user,)


@pytest.mark.parametrize("user", ["scram_user", "md5_user", "clear_user"])
def test_wrong_password_gets_the_servers_own_error(proxy: RunningProxy, user: str) -> None:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(proxy.dsn(user=user, password="wrong"))
    assert "password authentication failed" in str(caught.value)
    # the proxy goes on serving
    with psycopg.connect(proxy.dsn(user=user)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_scram_never_offers_channel_binding(proxy: RunningProxy) -> None:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(proxy.dsn(user="scram_user", channel_binding="require"))
    assert "channel binding" in str(caught.value)


def test_password_hashes_stay_where_they_were(proxy: RunningProxy) -> None:
    with psycopg.connect(proxy.dsn(), autocommit=True) as conn:
        rows: dict[str, str] = dict(
            conn.execute(
                "SELECT rolname, left(rolpassword, 6) FROM pg_authid WHERE rolname LIKE '%_user'"
            ).fetchall()
        )
    assert rows["md5_user"].startswith("md5")
    assert rows["scram_user"].startswith("SCRAM-")
