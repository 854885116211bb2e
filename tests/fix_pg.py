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

import itertools
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from proxy.embedded import EmbeddedPostgres

ROLES = {
    "scram_user": ("scram-pw", "scram-sha-256"),
    "md5_user": ("md5-pw", "md5"),
    "clear_user": ("clear-pw", "password"),
    "trust_user": ("", "trust"),
}
TEST_DB = "pgnl_test"


# md5 of every table's rows in schema public: a write anywhere changes it.
_CHECKSUM = """
SELECT string_agg(t.relname || ':' || t.sum, ',' ORDER BY t.relname) FROM (
    SELECT c.relname, (xpath('/row/s/text()', query_to_xml(
        format('SELECT md5(coalesce(string_agg(x::text, '','' ORDER BY x::text), '''')) AS s
                  FROM %I.%I AS x', n.nspname, c.relname), false, true, '')))[1]::text AS sum
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND c.relkind = 'r') AS t
"""


def table_checksum(dsn: str) -> str:
    """A checksum of every row of every table of schema public in the database at `dsn`."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(_CHECKSUM).fetchone()
        assert row is not None
        return str(row[0])


def closed_to_the_server() -> list[str]:
    """Folders on the way to pgnl's installation that the server's account may not enter, when
    it is another account (tests as root run PostgreSQL as `pgnl`): the SQL functions cannot be
    installed then, and `pgnl migrate` says so."""
    from proxy.migrate import pgnl_site_dirs

    if os.geteuid() != 0:
        return []
    closed = []
    for folder in map(Path, pgnl_site_dirs()):
        for part in [*reversed(folder.parents), folder]:
            if part.exists() and not part.stat().st_mode & stat.S_IXOTH:
                closed.append(str(part))
                break
    return closed


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

    def connect(
        self, dbname: str = TEST_DB, user: str = "postgres"
    ) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit connection straight to PostgreSQL (not through the proxy)."""
        return psycopg.connect(self.dsn(user=user, dbname=dbname), autocommit=True)


_databases = itertools.count()


@contextmanager
def scratch_database(postgres: Postgres, name: str) -> Iterator[str]:
    """A database `name` of its own (dropped first if a crashed run left one), its DSN yielded,
    dropped after the block, connections and all."""
    with postgres.connect("postgres") as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield postgres.dsn(dbname=name)
    finally:
        with postgres.connect("postgres") as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def demo_database(
    postgres: Postgres,
    name: str,
    setup: Callable[[psycopg.Connection[Any]], object] | None = None,
    *,
    indexed: bool = True,
    skipped: dict[str, str] | None = None,
) -> Iterator[str]:
    """The demo's sample database as `pgnl demo` makes it, in a scratch database `name`: the
    sample loaded, then `setup` run on it, migrated (what migrate skipped goes in `skipped`)
    and, when `indexed`, its value index built; its DSN yielded, the database dropped after the
    block."""
    from proxy.migrate import migrate
    from proxy.runtime import load_embedder
    from proxy.valueindex import build_index

    with scratch_database(postgres, name) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(resources.files("proxy.demo").joinpath("sample.sql").read_text().encode())
            if setup is not None:
                setup(conn)
            migrate(conn, skipped=skipped)
            if indexed:
                build_index(conn, load_embedder(), progress=False)
        yield dsn


@pytest.fixture
def make_database(postgres: Postgres) -> Iterator[Callable[..., str]]:
    """A factory of databases of the test's own: `make(setup_sql="", migrated=False)` creates
    one (with the nl schema when `migrated`, then `setup_sql` run in it) and returns its name;
    all are dropped after the test."""
    from proxy.migrate import migrate

    made: list[str] = []

    def make(setup_sql: str = "", migrated: bool = False) -> str:
        name = f"pgnl_t{os.getpid()}_{next(_databases)}"
        with postgres.connect("postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        made.append(name)
        with postgres.connect(name) as conn:
            if migrated:
                migrate(conn)
            if setup_sql:
                conn.execute(setup_sql.encode())
        return name

    yield make
    with postgres.connect("postgres") as conn:
        for name in made:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    base = Path(tempfile.mkdtemp(prefix="pgnl-test-"))
    port = free_port()
    server = EmbeddedPostgres.throwaway(base, f"pgnl-test-{os.getpid()}", port)
    server.start(
        {
            "fsync": "off",
            "max_connections": "300",
            "log_min_messages": "warning",
            "shared_preload_libraries": "pg_stat_statements",
        }
    )
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
