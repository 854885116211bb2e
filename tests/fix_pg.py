"""A real PostgreSQL for the integration tests: the embedded server, started once a test session.

Roles, one for each way of authenticating the proxy must relay (pg_hba.conf is first match):

| role         | password    | method        |
| ------------ | ----------- | ------------- |
| postgres     | pgnl        | scram-sha-256 |
| scram_user   | scram-pw    | scram-sha-256 |
| md5_user     | md5-pw      | md5           |
| clear_user   | clear-pw    | password      |
| trust_user   | (none)      | trust         |
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from proxy.config import EmbeddedSettings
from proxy.embedded import EmbeddedPostgres

ROLES = {
    "scram_user": ("scram-pw", "scram-sha-256"),
    "md5_user": ("md5-pw", "md5"),
    "clear_user": ("clear-pw", "password"),
    "trust_user": ("", "trust"),
}
TEST_DB = "pgnl_test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Postgres:
    server: EmbeddedPostgres
    port: int

    def dsn(
        self, user: str = "postgres", password: str | None = None, dbname: str = TEST_DB
    ) -> str:
        if password is None:
            password = "pgnl" if user == "postgres" else ROLES[user][0]
        return self.server.dsn(dbname, user=user, password=password)

    def connect(self, **kwargs: object) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.dsn(), autocommit=True, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    base = Path(tempfile.mkdtemp(prefix="pgnl-test-"))
    base.chmod(0o755)  # the account that runs PostgreSQL must reach its data directory
    port = free_port()
    settings = EmbeddedSettings(
        data_dir=str(base / "data"), port=port, instance=f"pgnl-test-{os.getpid()}"
    )
    server = EmbeddedPostgres(settings)
    # `pg0 drop` runs as the account that runs PostgreSQL and deletes the data directory: the
    # account must own its parent.
    server.chown_to_owner(base)
    server.start({"fsync": "off", "max_connections": "300", "log_min_messages": "warning"})
    try:
        hba = [f"host all {role} 127.0.0.1/32 {method}" for role, (_, method) in ROLES.items()]
        server.set_hba([*hba, "host all all 127.0.0.1/32 scram-sha-256"])
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEST_DB}")
            for role, (password, method) in ROLES.items():
                encryption = "md5" if method == "md5" else "scram-sha-256"
                conn.execute(f"SET password_encryption = '{encryption}'")
                if password:
                    conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
                else:
                    conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT ALL ON DATABASE {TEST_DB} TO {', '.join(ROLES)}")
        with psycopg.connect(server.dsn(TEST_DB), autocommit=True) as conn:
            conn.execute(f"GRANT ALL ON SCHEMA public TO {', '.join(ROLES)}")
        yield Postgres(server, port)
    finally:
        server.drop()
        shutil.rmtree(base, ignore_errors=True)
