"""The value index against the real PostgreSQL 18 with pgvector and the shipped MiniLM embedder:
which columns are indexed, the incremental refresh, privileges (two roles, column grants, schema
usage, row-level security), the look-ups, columns that vanish, and `pgnl index`."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy
import psycopg
import pytest

from proxy.config import IndexSettings
from proxy.nl2sql.database import PsycopgDatabase
from proxy.runtime import load_embedder
from proxy.valueindex import (
    BuildReport,
    ColumnRef,
    Embedder,
    Scope,
    ValueIndex,
    ValueIndexError,
    build_index,
    normalise,
)
from proxy.valueindex import build as build_module
from proxy.valueindex.common import (
    HNSW_EF_SEARCH,
    LARGE_GRAPH,
    MEDIUM_GRAPH,
    SMALL_GRAPH,
    graph_for,
    graph_memory_mb,
)
from proxy.valueindex.connection import IndexConnection
from proxy.valueindex.scan import (
    ColumnInfo,
    discover_columns,
    name_skip_reason,
    sample_skip_reason,
    value_shape,
)
from tests.fix_pg import Postgres
from tests.fix_proxy import run_pgnl

pytestmark = pytest.mark.integration

Connection = psycopg.Connection[tuple[Any, ...]]

SAMPLE = """
CREATE TYPE mood AS ENUM ('happy', 'sad', 'curious');
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
CREATE TABLE cities (id serial PRIMARY KEY, name text NOT NULL, country char(2));
CREATE TABLE people (
    id serial PRIMARY KEY,
    name text,
    city_name varchar(40),
    country text REFERENCES countries (code),
    email text,
    homepage text,
    api_key text,
    external_uuid text,
    bio text,
    born text,
    phone text,
    mood mood,
    nickname varchar(20)
);
CREATE TABLE pets (id serial PRIMARY KEY, owner_id int REFERENCES people (id), name text);
CREATE TABLE links (target text);
CREATE TABLE blobs (label text);

INSERT INTO countries VALUES ('US', 'United States'), ('FR', 'France');
INSERT INTO cities (name, country) VALUES
    ('New York', 'US'), ('Boston', 'US'), ('Chicago', 'US'), ('Los Angeles', 'US'),
    ('Paris', 'FR'), ('Lyon', 'FR');
INSERT INTO people (name, city_name, country, email, homepage, api_key, external_uuid, bio, born,
                    phone, mood, nickname) VALUES
    ('Timmy', 'New York', 'US', 'timmy@example.com', 'https://timmy.example.com', 'k1',
     '9b2f8c1e-8f0e-4d55-9a3e-1c2b3d4e5f60', repeat('A long life story. ', 20), '1990-01-02',
     '+1 555 0100', 'happy', 'tim'),
    ('Thomas', 'Boston', 'US', 'tom@example.com', NULL, 'k2', NULL,
     repeat('Another long story. ', 20), '1985-03-04', '+1 555 0101', 'sad', 'tom'),
    ('Anna', 'Chicago', 'US', NULL, NULL, NULL, NULL, repeat('Yet another story. ', 20),
     '1979-05-06', '555-0102', 'curious', 'annie'),
    ('Bob', 'Paris', 'FR', NULL, NULL, NULL, NULL, NULL, '2001-07-08', NULL, 'happy', 'bobby'),
    ('Zoë', 'Boston', 'FR', NULL, NULL, NULL, NULL, NULL, '1999-09-10', NULL, 'happy', 'zo'),
    ('Anna', 'Los Angeles', 'US', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO pets (owner_id, name) VALUES (1, 'Rex'), (2, 'Whiskers'), (3, 'Rex');
INSERT INTO links SELECT 'https://example.com/page/' || i FROM generate_series(1, 30) i;
INSERT INTO blobs SELECT md5(i::text) FROM generate_series(1, 30) i;
"""


def ref(table: str, column: str, schema: str = "public") -> ColumnRef:
    return ColumnRef(schema, table, column)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder()


@pytest.fixture
def new_database(make_database: Callable[..., str]) -> Callable[..., str]:
    """A factory of migrated databases of this test's own holding `setup` SQL, dropped at the
    end."""
    return lambda setup, migrated=True: make_database(setup, migrated=migrated)


def connect(postgres: Postgres, dbname: str, user: str = "postgres") -> Connection:
    return postgres.connect(dbname, user)


def build(conn: Connection, embedder: Embedder, **settings: Any) -> BuildReport:
    return build_index(conn, embedder, IndexSettings(**settings), progress=False)


def index_rows(conn: Connection) -> dict[ColumnRef, dict[str, int]]:
    rows = conn.execute(
        "SELECT schema_name, table_name, column_name, value, frequency FROM nl.value_index"
    ).fetchall()
    found: dict[ColumnRef, dict[str, int]] = {}
    for schema, table, column, value, frequency in rows:
        found.setdefault(ColumnRef(schema, table, column), {})[value] = frequency
    return found


def column_times(conn: Connection) -> dict[ColumnRef, tuple[Any, Any]]:
    rows = conn.execute(
        "SELECT schema_name, table_name, column_name, indexed_at, checked_at "
        "FROM nl.value_index_columns"
    ).fetchall()
    return {ColumnRef(s, t, c): (indexed, checked) for s, t, c, indexed, checked in rows}


def embeddings(conn: Connection, column: ColumnRef) -> dict[str, str]:
    rows = conn.execute(
        "SELECT value, embedding::text FROM nl.value_index "
        "WHERE schema_name = %s AND table_name = %s AND column_name = %s",
        [column.schema, column.table, column.column],
    ).fetchall()
    return dict(rows)


INDEXED = {
    ref("countries", "code"),  # keys, but short codes ([index] max_key_values, max_key_length)
    ref("people", "country"),
    ref("countries", "name"),
    ref("cities", "name"),
    ref("cities", "country"),
    ref("people", "name"),
    ref("people", "city_name"),
    ref("people", "mood"),
    ref("people", "nickname"),
    ref("pets", "name"),
}


def test_first_build_indexes_names_and_skips_ids_keys_urls_hashes_dates_and_free_text(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        report = build(conn, embedder)
        assert set(report.added) == INDEXED
        assert report.changed == [] and report.unchanged == [] and report.removed == {}
        reasons = {str(column): why for column, why in report.skipped.items()}
        assert reasons == {
            "public.people.email": "its name looks like an e-mail address",
            "public.people.homepage": "its name looks like a URL",
            "public.people.api_key": "its name looks like a key, hash or secret",
            "public.people.external_uuid": "its name looks like an identifier",
            "public.people.bio": ("its values are mostly longer than 120 characters (free text)"),
            "public.people.born": "its values are mostly dates or times",
            "public.people.phone": "its values are mostly numbers or codes without a letter",
            "public.links.target": "its values are mostly URLs",
            "public.blobs.label": "its values are mostly hashes",
        }
        assert report.columns_scanned == len(INDEXED) + len(reasons)
        rows = index_rows(conn)
        assert set(rows) == INDEXED
        assert rows[ref("people", "name")] == {
            "Timmy": 1,
            "Thomas": 1,
            "Anna": 2,
            "Bob": 1,
            "Zoë": 1,
        }
        assert rows[ref("people", "mood")] == {"happy": 3, "sad": 1, "curious": 1}
        assert rows[ref("cities", "country")] == {"US": 4, "FR": 2}
        assert report.values_embedded == sum(len(values) for values in rows.values())
        assert report.values_per_second > 0
        normalised = conn.execute(
            "SELECT normalised FROM nl.value_index WHERE value = 'Zoë'"
        ).fetchone()
        assert normalised == ("zoe",)
        stored, own = conn.execute(
            "SELECT embedding::text, embedding <=> %s::vector FROM nl.value_index "
            "WHERE table_name = 'cities' AND value = 'Paris'",
            ["[" + ",".join(map(str, embedder.embed(["Paris"])[0].tolist())) + "]"],
        ).fetchone() or (None, None)
        assert stored is not None and own < 0.05  # the embedder's own vector for the value


def test_refresh_picks_up_exactly_the_change(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        build(conn, embedder)
        times = column_times(conn)
        names_before = embeddings(conn, ref("people", "name"))
        cities_before = embeddings(conn, ref("people", "city_name"))

        conn.execute("INSERT INTO people (name, city_name) VALUES ('Zelda', 'Boston')")
        conn.execute("DELETE FROM people WHERE name = 'Bob'")
        conn.execute("ALTER TABLE people DROP COLUMN nickname")
        conn.execute("DROP TABLE pets")

        report = build(conn, embedder)
        assert report.values_embedded == 1  # Zelda; nothing else goes through the embedder
        assert set(report.changed) == {
            ref("people", "name"),  # + Zelda, - Bob
            ref("people", "city_name"),  # - Paris, Boston 2 -> 3
            ref("people", "mood"),  # happy 3 -> 2
            ref("people", "country"),  # FR 2 -> 1
        }
        assert report.added == []
        assert set(report.removed) == {ref("people", "nickname"), ref("pets", "name")}
        assert set(report.unchanged) == INDEXED - set(report.changed) - set(report.removed)
        # Bob, Paris; tim, tom, annie, bobby, zo; Rex, Whiskers.
        assert report.values_removed == 2 + 5 + 2

        rows = index_rows(conn)
        assert set(rows) == INDEXED - set(report.removed)
        assert rows[ref("people", "name")] == {
            "Timmy": 1,
            "Thomas": 1,
            "Anna": 2,
            "Zoë": 1,
            "Zelda": 1,
        }
        assert rows[ref("people", "city_name")] == {
            "New York": 1,
            "Boston": 3,
            "Chicago": 1,
            "Los Angeles": 1,
        }
        assert rows[ref("people", "mood")] == {"happy": 2, "sad": 1, "curious": 1}
        # Values already embedded kept their embeddings, count updates included.
        names_after = embeddings(conn, ref("people", "name"))
        assert {v: names_after[v] for v in names_before if v != "Bob"} == {
            v: e for v, e in names_before.items() if v != "Bob"
        }
        cities_after = embeddings(conn, ref("people", "city_name"))
        assert cities_after["Boston"] == cities_before["Boston"]
        # Unchanged columns were not rewritten, only checked.
        after = column_times(conn)
        assert set(after) == set(rows)
        for column in report.unchanged:
            assert after[column][0] == times[column][0], column
            assert after[column][1] > times[column][1], column
        for column in report.changed:
            assert after[column][0] > times[column][0], column

        again = build(conn, embedder)
        assert again.values_embedded == 0 and again.values_removed == 0
        assert again.changed == [] and again.added == [] and again.removed == {}
        assert set(again.unchanged) == set(rows)


def test_a_new_embedder_re_embeds_every_column(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    class Renamed:
        signature = "another model"
        dimension = embedder.dimension

        def embed(self, texts: Sequence[str]) -> numpy.ndarray[Any, Any]:
            return embedder.embed(texts)

    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        first = build(conn, embedder)
        second = build(conn, Renamed())
        assert second.values_embedded == first.values_embedded
        assert second.values_removed == first.values_embedded
        assert set(second.changed) == INDEXED
        assert build(conn, Renamed()).values_embedded == 0


def test_capped_columns_keep_the_most_frequent_values_and_contains_asks_the_table(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        build(conn, embedder, max_distinct_per_column=2)
        rows = index_rows(conn)
        assert rows[ref("people", "mood")] == {"happy": 3, "curious": 1}  # ties by value
        assert rows[ref("people", "name")] == {"Anna": 2, "Bob": 1}
        complete: dict[str, bool] = dict(
            conn.execute(
                "SELECT column_name, complete FROM nl.value_index_columns "
                "WHERE table_name = 'cities'"
            ).fetchall()
        )
        assert complete == {"name": False, "country": True}
        index = ValueIndex(PsycopgDatabase(conn))
        # Not in the index (capped), but in the table: the table answers.
        assert index.contains(ref("people", "name"), "Timmy")
        assert not index.contains(ref("people", "name"), "Timothy")
        # Complete column: the index answers on its own.
        assert index.contains(ref("cities", "country"), "FR")
        assert not index.contains(ref("cities", "country"), "DE")
        # A column that is not indexed at all (skipped): the table answers.
        assert index.contains(ref("people", "email"), "tom@example.com")


def test_lookups_find_the_nearest_value_by_spelling_and_by_meaning(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        build(conn, embedder)
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        name = ref("people", "name")
        city = ref("people", "city_name")

        by_spelling = index.search_trigram("Timothy", Scope.column(name), k=3)
        assert by_spelling[0].value == "Timmy" and by_spelling[0].column == name
        assert 0 < by_spelling[0].score < 1
        assert [c.score for c in by_spelling] == sorted(
            (c.score for c in by_spelling), reverse=True
        )
        nearest = index.search_trigram("Timothy", Scope.database(), k=2)
        assert {c.value for c in nearest} == {"Timmy", "tim"}  # people.nickname has 'tim'
        assert index.search_trigram("ZOE", Scope.column(name), k=1)[0].value == "Zoë"
        assert index.search_trigram("zoe", Scope.column(name), k=1)[0].score == pytest.approx(1.0)

        for literal in ("NY", "New York City"):
            for scope in Scope.widening(city):
                best = index.search_semantic(literal, scope, k=3)[0]
                assert best.value == "New York", (literal, scope, best)
        assert index.search_semantic("New York City", Scope.column(city), k=1)[0].column == city
        assert index.search_semantic("LA", Scope.column(city), k=1)[0].value == "Los Angeles"
        table_hits = index.search_semantic("cheerful", Scope.table("public", "people"), k=10)
        assert {c.column.table for c in table_hits} == {"people"}

        most = index.values_in(Scope.column(ref("people", "mood")), limit=2)
        assert [(c.value, c.frequency) for c in most] == [("happy", 3), ("curious", 1)]
        assert len(index.values_in(Scope.database(), limit=1000)) == sum(
            len(v) for v in index_rows(conn).values()
        )
        assert {c.column for c in index.values_in(Scope.table("public", "cities"))} == {
            ref("cities", "name"),
            ref("cities", "country"),
        }

        assert index.contains(name, "Timmy")
        assert not index.contains(name, "timmy")
        assert not index.contains(name, "Timothy")
        assert index.contains(ref("people", "mood"), "sad")
        assert not index.contains(ref("people", "mood"), "angry")
        assert index.search_trigram("", Scope.database()) == []
        assert index.search_semantic("  ", Scope.database()) == []


PRIVILEGES = """
CREATE TABLE agents (id serial PRIMARY KEY, codename text, cover_name text);
INSERT INTO agents (codename, cover_name) VALUES ('Nightingale', 'Mary Poppins'),
                                                 ('Kestrel', 'John Smith');
INSERT INTO agents (codename) SELECT 'Agent ' || i FROM generate_series(1, 150) i;
GRANT SELECT ON agents TO scram_user;
GRANT SELECT (id, cover_name) ON agents TO md5_user;

CREATE TABLE accounts (id serial PRIMARY KEY, owner_role text NOT NULL, customer text);
INSERT INTO accounts (owner_role, customer) VALUES
    ('scram_user', 'Alice Cooper'), ('md5_user', 'Bruce Wayne'),
    ('scram_user', 'Shared Name'), ('md5_user', 'Shared Name');
ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON accounts USING (owner_role = current_user);
GRANT SELECT ON accounts TO scram_user, md5_user;

CREATE SCHEMA vault;
CREATE TABLE vault.gold (id serial PRIMARY KEY, bar_name text);
INSERT INTO vault.gold (bar_name) VALUES ('Sovereign'), ('Krugerrand');
GRANT SELECT ON vault.gold TO scram_user, md5_user;
GRANT USAGE ON SCHEMA vault TO scram_user;
"""

AGENTS = {"Nightingale", "Kestrel"} | {f"Agent {i}" for i in range(1, 151)}


def visible_values(index: ValueIndex) -> set[str]:
    return {c.value for c in index.values_in(Scope.database(), limit=10_000)}


def test_lookups_return_only_what_the_asking_role_may_read(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(PRIVILEGES)
    with connect(postgres, db) as conn:
        report = build(conn, embedder)
        assert {str(c) for c in report.indexed} == {
            "public.agents.codename",
            "public.agents.cover_name",
            "public.accounts.owner_role",
            "public.accounts.customer",
            "vault.gold.bar_name",
        }
        everything = visible_values(ValueIndex(PsycopgDatabase(conn), embedder))
        assert AGENTS | {"Alice Cooper", "Bruce Wayne", "Sovereign"} <= everything

    codename = ref("agents", "codename")
    customer = ref("accounts", "customer")
    gold = ref("gold", "bar_name", schema="vault")
    with connect(postgres, db, "md5_user") as conn:
        conn.execute("SET enable_seqscan = off")  # make the planner take the indexes
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        allowed = {"Mary Poppins", "John Smith", "md5_user", "Bruce Wayne", "Shared Name"}
        assert visible_values(index) == allowed
        # The table itself, not only the look-up functions, holds the line.
        direct = {row[0] for row in conn.execute("SELECT value FROM nl.value_index")}
        assert direct == allowed
        # Counts in a table with row-level security would tell about hidden rows: not recorded.
        counts = {c.value: c.frequency for c in index.values_in(Scope.database(), 100)}
        assert counts["Shared Name"] == 0 and counts["Mary Poppins"] == 1
        for literal in ("Nightingale", "Agent 7", "Alice Cooper", "Sovereign"):
            for search in (index.search_trigram, index.search_semantic):
                found = search(literal, Scope.database(), 3)
                assert len(found) == 3, (literal, search)  # HNSW/GiST scans go on past hidden rows
                assert {c.value for c in found} <= allowed, (literal, found)
        assert index.search_trigram("Nightingale", Scope.column(codename), 5) == []
        assert index.search_semantic("Kestrel", Scope.column(codename), 5) == []
        assert not index.contains(codename, "Kestrel")
        assert index.contains(ref("agents", "cover_name"), "John Smith")
        assert not index.contains(customer, "Alice Cooper")
        assert index.contains(customer, "Bruce Wayne")
        assert not index.contains(gold, "Sovereign")
        # values named word for word: only those of columns this role may read
        named = index.named_in(["mary poppins", "kestrel", "alice cooper", "sovereign", "x"])
        assert [(c.column, c.value, c.score) for c in named] == [
            (ref("agents", "cover_name"), "Mary Poppins", 1.0)
        ]
        assert index.named_in([]) == []
        assert set(index.indexed_columns()) == {
            ref("agents", "cover_name"),
            ref("accounts", "owner_role"),
            customer,
        }
        columns = {
            tuple(row)
            for row in conn.execute("SELECT table_name, column_name FROM nl.value_index_columns")
        }
        assert columns == {
            ("agents", "cover_name"),
            ("accounts", "owner_role"),
            ("accounts", "customer"),
        }
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT fingerprint FROM nl.value_index_columns")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM nl.value_index")
        # Both look-up indexes serve a role the policy applies to.
        probe = "[" + ",".join(["0.05"] * 384) + "]"
        semantic_plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT value FROM nl.value_index ORDER BY embedding <=> %s::vector "
                "LIMIT 3",
                [probe],
            )
        )
        assert "value_index_embedding" in semantic_plan
        trigram_plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT value FROM nl.value_index ORDER BY normalised <-> 'kestrel' LIMIT 3"
            )
        )
        assert "value_index_trigram" in trigram_plan
        exact_plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN SELECT value FROM nl.value_index "
                "WHERE normalised = ANY('{kestrel,mary poppins}'::text[])"
            )
        )
        assert "value_index_normalised" in exact_plan

    with connect(postgres, db, "scram_user") as conn:
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        assert visible_values(index) == AGENTS | {
            "Mary Poppins",
            "John Smith",
            "scram_user",
            "Alice Cooper",
            "Shared Name",
            "Sovereign",
            "Krugerrand",
        }
        assert index.search_trigram("Nightingal", Scope.column(codename), 1)[0].value == (
            "Nightingale"
        )
        assert index.search_trigram("Bruce Wayne", Scope.column(customer), 5)[0].value != (
            "Bruce Wayne"
        )
        assert index.contains(codename, "Kestrel")
        assert index.contains(customer, "Alice Cooper")
        assert not index.contains(customer, "Bruce Wayne")
        assert index.contains(gold, "Sovereign")


def test_a_role_that_does_not_own_the_index_may_not_build_it(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(PRIVILEGES)
    with (
        connect(postgres, db, "scram_user") as conn,
        pytest.raises(
            ValueIndexError, match=r"run pgnl index \(or call nl.refresh_index\) as postgres"
        ),
    ):
        build(conn, embedder)


KEYS = """
CREATE TABLE airports (code char(3) PRIMARY KEY, city text);
CREATE TABLE flights (id serial PRIMARY KEY, origin char(3) REFERENCES airports (code));
CREATE TABLE tickets (number text PRIMARY KEY);
CREATE TABLE accounts (handle text PRIMARY KEY);
INSERT INTO airports VALUES ('BOS', 'Boston'), ('JFK', 'New York'), ('ORD', 'Chicago');
INSERT INTO flights (origin) VALUES ('BOS'), ('BOS'), ('JFK');
INSERT INTO tickets SELECT 'T-' || i FROM generate_series(1, 1500) AS i;
INSERT INTO accounts SELECT 'customer-account-' || i FROM generate_series(1, 20) AS i;
"""


def test_key_columns_are_indexed_when_they_hold_codes(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(KEYS)
    with connect(postgres, db) as conn:
        report = build(conn, embedder)
        assert {ref("airports", "code"), ref("flights", "origin")} <= set(report.added)
        reasons = {str(column): why for column, why in report.skipped.items()}
        assert reasons["public.tickets.number"] == (
            "it is part of a primary or foreign key with more than 1,000 distinct values "
            "(identifiers, not codes)"
        )
        assert reasons["public.accounts.handle"] == (
            "it is part of a primary or foreign key with values longer than 12 characters "
            "(identifiers, not codes)"
        )
        rows = index_rows(conn)
        assert rows[ref("flights", "origin")] == {"BOS": 2, "JFK": 1}
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        assert index.contains(ref("airports", "code"), "ORD")
        # and none at all, with max_key_values = 0
        conn.execute("DELETE FROM nl.value_index")
        conn.execute("DELETE FROM nl.value_index_columns")
        never = build(conn, embedder, max_key_values=0)
        assert ref("airports", "code") in never.skipped


def run_after_discovery(monkeypatch: pytest.MonkeyPatch, ddl: str) -> None:
    """Make the next build run `ddl` right after it has read the catalog (a column or table
    that vanishes while the build runs)."""
    real_discover = discover_columns

    def discover_then_change(conn: IndexConnection, settings: IndexSettings) -> list[ColumnInfo]:
        found = real_discover(conn, settings)
        conn.run(ddl.encode())
        return found

    monkeypatch.setattr(build_module, "discover_columns", discover_then_change)


def test_columns_that_vanish_after_or_during_indexing_are_handled(
    postgres: Postgres,
    new_database: Callable[..., str],
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = new_database(SAMPLE + "GRANT SELECT ON ALL TABLES IN SCHEMA public TO scram_user;")
    city = ref("people", "city_name")
    pets = ref("pets", "name")
    with connect(postgres, db) as conn:
        build(conn, embedder)
        conn.execute("ALTER TABLE people DROP COLUMN city_name")
        conn.execute("DROP TABLE pets")
        conn.execute("ALTER TABLE people ADD COLUMN city_name text")  # same name, new column
        conn.execute("UPDATE people SET city_name = 'Atlantis'")
    for user in ("postgres", "scram_user"):
        with connect(postgres, db, user) as conn:
            index = ValueIndex(PsycopgDatabase(conn), embedder)
            seen = [
                *index.values_in(Scope.database(), 1000),
                *index.search_trigram("Boston", Scope.database(), 50),
                *index.search_semantic("New York", Scope.database(), 50),
                *index.search_trigram("Boston", Scope.column(city), 5),
                *index.search_semantic("Rex", Scope.table("public", "pets"), 5),
            ]
            assert seen, user
            assert {c.column for c in seen}.isdisjoint({city, pets}), user
            assert not index.contains(city, "Boston")
            assert index.contains(city, "Atlantis")  # the table answers for the new column
            assert not index.contains(pets, "Rex")

    run_after_discovery(monkeypatch, "ALTER TABLE cities DROP COLUMN country")
    with connect(postgres, db) as conn:
        report = build(conn, embedder)
        assert report.skipped[ref("cities", "country")] == "it no longer exists"
        assert set(report.removed) == {ref("cities", "country"), pets}
        assert report.changed == [city]  # same name, another column: its values replaced
        assert report.added == []
        rows = index_rows(conn)
        assert rows[city] == {"Atlantis": 6}
        assert ref("cities", "country") not in rows and pets not in rows


def test_a_column_that_fails_to_read_does_not_stop_the_rest_of_its_table(
    postgres: Postgres,
    new_database: Callable[..., str],
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = new_database(SAMPLE)
    # people.city_name vanishes between the catalog read and its own, after people.name's
    run_after_discovery(monkeypatch, "ALTER TABLE people DROP COLUMN city_name")
    with connect(postgres, db) as conn:
        report = build(conn, embedder)
        rows = index_rows(conn)
    city = ref("people", "city_name")
    assert report.skipped[city] == "it no longer exists"
    assert set(report.added) == INDEXED - {city}  # people.mood and .nickname come after it
    assert set(rows) == INDEXED - {city}


def test_a_table_locked_by_ddl_is_given_up_whole_and_keeps_its_entries(
    postgres: Postgres,
    new_database: Callable[..., str],
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = new_database(SAMPLE)
    people = {c for c in INDEXED if c.table == "people"}
    assert len(people) > 1
    with connect(postgres, db) as conn:
        build(conn, embedder)
        before = index_rows(conn)
        conn.execute("UPDATE cities SET name = 'New Amsterdam' WHERE name = 'New York'")
    monkeypatch.setattr(build_module, "LOCK_TIMEOUT", "1s")
    with connect(postgres, db) as locker, locker.transaction():
        locker.execute("LOCK TABLE people IN ACCESS EXCLUSIVE MODE")
        with connect(postgres, db) as conn:
            started = time.monotonic()
            report = build(conn, embedder)
            waited = time.monotonic() - started
            rows = index_rows(conn)
    # One wait for the lock, not one a column: waiting for each column would take at least
    # len(people) seconds.
    assert waited < len(people)
    for column in people:
        assert report.skipped[column].startswith("it could not be read now (canceling statement")
        assert rows[column] == before[column]
    assert report.changed == [ref("cities", "name")]  # the other tables were read
    assert "New Amsterdam" in rows[ref("cities", "name")]
    assert not report.removed


def test_concurrent_builds_take_turns(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    start = threading.Barrier(2)
    reports: list[BuildReport] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with connect(postgres, db) as conn:
                start.wait()
                reports.append(build(conn, embedder))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    first, second = sorted(reports, key=lambda r: -r.values_embedded)
    assert set(first.added) == INDEXED and second.values_embedded == 0
    assert set(second.unchanged) == INDEXED


def test_lookups_in_a_database_without_the_index_say_what_to_run(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE, migrated=False)
    with connect(postgres, db) as conn:
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        with pytest.raises(ValueIndexError, match="run pgnl migrate"):
            index.search_semantic("x", Scope.database())
        with pytest.raises(ValueIndexError, match="run pgnl migrate"):
            index.contains(ref("t", "c"), "x")
        with pytest.raises(ValueIndexError, match="run pgnl migrate first"):
            build(conn, embedder)


def pgnl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_pgnl(*args)


def test_command_line_builds_with_progress_and_prints_a_summary(
    postgres: Postgres, new_database: Callable[..., str]
) -> None:
    db = new_database(SAMPLE)
    dsn = postgres.dsn(dbname=db)
    first = pgnl("index", "--dsn", dsn)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(
        f"indexed {len(INDEXED)} of 19 text columns: {len(INDEXED)} new,"
    )
    assert "public.people.email: its name looks like an e-mail address" in first.stdout
    progress = [line for line in first.stderr.splitlines() if "values/s" in line]
    # Every column past the catalog rules is read (13); 5 of them turn out not to be names.
    assert (
        progress and "15/15 columns" in progress[-1]
    )  # the 19 text columns less the 4 skipped by name
    second = pgnl("index", "--dsn", dsn, "--no-progress", "--schemas", "public")
    assert second.returncode == 0, second.stderr
    assert f"0 new, 0 changed, {len(INDEXED)} unchanged" in second.stdout
    assert "values/s" not in second.stderr
    bare = new_database(SAMPLE, migrated=False)
    missing = pgnl("index", "--dsn", postgres.dsn(dbname=bare), "--no-progress")
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith("run pgnl migrate first")
    assert "pgnl: this database has no value index" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.parametrize(
    ("column", "reason"),
    [
        ("id", "an identifier"),
        ("customer_id", "an identifier"),
        ("customerId", "an identifier"),
        ("uuid", "an identifier"),
        ("api_key", "a key, hash or secret"),
        ("password_hash", "a key, hash or secret"),
        ("profile_url", "a URL"),
        ("email", "an e-mail address"),
        ("contact_email_address", "an e-mail address"),
        ("name", None),
        ("paid", None),
        ("monkey", None),
        ("keywords", None),
        ("valid", None),
    ],
)
def test_column_names_that_mean_identifiers_secrets_or_addresses(
    column: str, reason: str | None
) -> None:
    assert name_skip_reason(column) == (None if reason is None else f"its name looks like {reason}")


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ("https://example.com/a", "URLs"),
        ("www.example.com", "URLs"),
        ("ann@example.org", "e-mail addresses"),
        ("9b2f8c1e-8f0e-4d55-9a3e-1c2b3d4e5f60", "UUIDs"),
        ("d41d8cd98f00b204e9800998ecf8427e", "hashes"),
        ("dGhpcyBpcyBhIHRva2VuIDEyMzQ1Njc4OTA", "hashes or tokens"),
        ("2024-01-31", "dates or times"),
        ("2024-01-31 12:00:00+00", "dates or times"),
        ("31/01/2024", "dates or times"),
        ("12:30", "dates or times"),
        ("+1 555 0100", "numbers or codes without a letter"),
        ("42", "numbers or codes without a letter"),
        ("x" * 121, "long free text"),
        ("New York", None),
        ("Timmy Ward", None),
        ("Supercalifragilisticexpialidocious", None),
        ("R2-D2", None),
        ("Zoë", None),
    ],
)
def test_value_shapes_that_are_not_names(value: str, shape: str | None) -> None:
    assert value_shape(value, 120) == shape


def test_a_column_is_skipped_only_when_half_its_sample_is_not_names() -> None:
    assert sample_skip_reason([], 120) is None
    assert sample_skip_reason(["Boston", "https://a.example", "Paris"], 120) is None
    assert sample_skip_reason(["https://a.example", "https://b.example", "Paris"], 120) == (
        "its values are mostly URLs"
    )


def test_normalised_values_fold_case_accents_and_spaces() -> None:
    assert normalise("  Café   de\tFLORE ") == "cafe de flore"
    assert normalise("Zoë") == "zoe"
    assert normalise("Straße") == "strasse"


def test_scopes_name_a_column_a_table_or_the_database() -> None:
    column = ref("people", "name")
    assert [s.level for s in Scope.widening(column)] == ["column", "table", "database"]
    assert str(Scope.column(column)) == "public.people.name"
    assert str(Scope.database()) == "the whole database"
    with pytest.raises(ValueError, match="not a schema"):
        Scope("public")
    with pytest.raises(ValueError, match="within a table"):
        Scope("public", None, "name")


SEARCH_INDEXES = {"value_index_embedding", "value_index_trigram", "value_index_normalised"}


def search_indexes(conn: Connection) -> set[str]:
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'nl' AND tablename = 'value_index' "
        "AND indexname <> 'value_index_pkey'"
    ).fetchall()
    return {str(name) for (name,) in rows}


def test_a_bulk_refresh_rebuilds_the_search_indexes_in_one_pass(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        before = search_indexes(conn)
        assert before == SEARCH_INDEXES
        first = build(conn, embedder, bulk_min_values=10)
        assert first.bulk and first.values_embedded >= 10
        assert search_indexes(conn) == before
        assert conn.execute("SELECT count(*) FROM nl.value_index_deferred").fetchone() == (0,)
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        assert index.search_trigram("Timothy", Scope.database(), 3)
        conn.execute("INSERT INTO people (name) VALUES ('Zebedee')")
        small = build(conn, embedder, bulk_min_values=10)
        assert not small.bulk and small.values_embedded == 1  # a small refresh keeps them


def test_the_first_build_builds_the_search_indexes_once_at_the_end(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        first = build(conn, embedder)  # far fewer values than bulk_min_values
        assert first.bulk and first.values_embedded > 0
        assert search_indexes(conn) == SEARCH_INDEXES
        assert not build(conn, embedder).bulk  # nothing new: the indexes stay


class Recording:
    """The shipped embedder, with the texts of each call kept (to see how a build batches)."""

    def __init__(self, inner: Embedder, fail_on_call: int | None = None) -> None:
        self.inner = inner
        self.dimension = inner.dimension
        self.calls: list[list[str]] = []
        self.fail_on_call = fail_on_call

    def embed(self, texts: Sequence[str]) -> numpy.ndarray[Any, Any]:
        self.calls.append(list(texts))
        if self.fail_on_call is not None and len(self.calls) >= self.fail_on_call:
            raise RuntimeError("the model ran out of memory")
        return self.inner.embed(texts)


def test_a_build_embeds_whole_columns_together_in_groups_of_batch_size(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    recording = Recording(embedder)
    with connect(postgres, db) as conn:
        report = build(conn, recording, batch_size=4)
        rows = index_rows(conn)
    calls = recording.calls[1:]  # the first embeds the signature probe
    columns = [sorted(rows[column]) for column in report.added]  # in the order written
    texts = [text for call in calls for text in call]
    # each text once: cities.name and people.city_name share four cities
    assert sorted(texts) == sorted({value for values in columns for value in values})
    assert report.values_embedded == sum(map(len, columns))
    assert report.values_reused == report.values_embedded - len(texts) > 0
    assert len(calls) > 1
    taken = 0
    together = 0
    seen: set[str] = set()
    for call in calls:  # each call: whole columns' new texts, in order, together while they fit
        gathered: list[str] = []
        first = taken
        while sorted(gathered) != sorted(call):
            assert taken < len(columns) and len(gathered) < len(call), call
            gathered += [v for v in columns[taken] if v not in seen and v not in gathered]
            taken += 1
        seen.update(gathered)
        assert len(call) <= 4 or taken - first == 1, call
        together = max(together, taken - first)
    assert together > 1
    assert all(set(values) <= seen for values in columns[taken:])
    with connect(postgres, db) as conn:
        city = embeddings(conn, ref("cities", "name"))["Boston"]
        lived_in = embeddings(conn, ref("people", "city_name"))["Boston"]
    assert lived_in == city  # the same text, embedded once, written to both columns
    vector = numpy.array(city.strip("[]").split(","), dtype=numpy.float32)
    assert float(vector @ embedder.embed(["Boston"])[0]) > 0.95  # its own, not a neighbour's


def test_a_text_two_columns_hold_is_embedded_again_past_the_memory_bound(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    towns = ("Avignon", "Bergen", "Cadiz", "Dakar", "Essen")
    db = new_database(
        "CREATE TABLE people (home text); CREATE TABLE towns (name text);"
        "INSERT INTO people VALUES ('Avignon'), ('Bergen'), ('Cadiz'), ('Dakar'), ('Essen'), "
        "('Faro'); INSERT INTO towns VALUES ('Avignon'), ('Bergen'), ('Cadiz'), ('Dakar'), "
        "('Essen');"
    )
    recording = Recording(embedder)
    with connect(postgres, db) as conn:
        # groups of one column; at most 2 x 1 vectors kept for the later column
        report = build(conn, recording, batch_size=1)
        assert report.added == [ref("people", "home"), ref("towns", "name")]
        homes = embeddings(conn, ref("people", "home"))
        names = embeddings(conn, ref("towns", "name"))
    first, again = recording.calls[1:]
    assert sorted(first) == sorted((*towns, "Faro"))
    assert len(again) == 3 and set(again) < set(towns)  # the 3 not kept, embedded again
    assert report.values_reused == 5
    for town in towns:
        a, b = (
            numpy.array(v.strip("[]").split(","), dtype=numpy.float32)
            for v in (homes[town], names[town])
        )
        assert float(a @ b) > 0.99, town
        if town not in again:
            assert homes[town] == names[town]


def test_a_model_failure_during_a_build_keeps_the_index_whole(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        with pytest.raises(RuntimeError, match="out of memory"):
            build(conn, Recording(embedder, fail_on_call=3), batch_size=4)
        # the columns written before the failure are whole, the search indexes are back
        assert search_indexes(conn) == SEARCH_INDEXES
        assert conn.execute("SELECT count(*) FROM nl.value_index_deferred").fetchone() == (0,)
        partial = index_rows(conn)
        written = conn.execute(
            "SELECT schema_name, table_name, column_name, value_count FROM nl.value_index_columns"
        ).fetchall()
        assert {ColumnRef(s, t, c): n for s, t, c, n in written} == {
            column: len(values) for column, values in partial.items()
        }
        report = build(conn, embedder)  # the next refresh finishes the job
        assert set(report.indexed) == INDEXED
        assert report.values_embedded == sum(
            len(values) for column, values in index_rows(conn).items() if column not in partial
        )


def test_indexes_dropped_by_an_interrupted_bulk_refresh_are_rebuilt(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        build(conn, embedder)
        definition = conn.execute(
            "SELECT pg_get_indexdef('nl.value_index_embedding'::regclass)"
        ).fetchone()
        assert definition is not None
        # what a refresh killed between dropping and rebuilding leaves behind
        conn.execute(
            "INSERT INTO nl.value_index_deferred (index_name, definition) VALUES (%s, %s)",
            ["value_index_embedding", definition[0]],
        )
        conn.execute("DROP INDEX nl.value_index_embedding")
        report = build(conn, embedder)
        assert report.values_embedded == 0
        assert "value_index_embedding" in search_indexes(conn)
        assert conn.execute("SELECT count(*) FROM nl.value_index_deferred").fetchone() == (0,)


def search_ef(conn: Connection) -> str:
    row = conn.execute(
        "SELECT proconfig FROM pg_proc WHERE oid = "
        "'nl.search_semantic(text, integer, text, text, text)'::regprocedure"
    ).fetchone()
    assert row is not None
    return next(str(s) for s in row[0] if str(s).startswith("hnsw.ef_search="))


def hnsw_options(conn: Connection) -> list[str]:
    row = conn.execute(
        "SELECT coalesce(reloptions, '{}') FROM pg_class "
        "WHERE oid = 'nl.value_index_embedding'::regclass"
    ).fetchone()
    assert row is not None
    return sorted(row[0])


def test_an_index_that_grows_past_each_graph_threshold_gets_the_larger_graph(
    postgres: Postgres, new_database: Callable[..., str], embedder: Embedder
) -> None:
    db = new_database(SAMPLE)
    with connect(postgres, db) as conn:
        first = build(conn, embedder)
        assert first.graph == SMALL_GRAPH
        assert hnsw_options(conn) == ["ef_construction=32", "m=8"]
        assert search_ef(conn) == f"hnsw.ef_search={SMALL_GRAPH.ef_search}"
        held = first.values_embedded
        conn.execute("INSERT INTO people (name) VALUES ('Zebedee'), ('Ysolde')")
        medium = build(conn, embedder, medium_graph_values=held + 2)
        assert not medium.bulk and medium.values_embedded == 2
        assert medium.graph == MEDIUM_GRAPH
        assert hnsw_options(conn) == ["ef_construction=64", "m=16"]  # pgvector's defaults
        assert search_ef(conn) == f"hnsw.ef_search={MEDIUM_GRAPH.ef_search}"
        conn.execute("INSERT INTO people (name) VALUES ('Xanthe')")
        grown = build(conn, embedder, medium_graph_values=held + 2, large_graph_values=held + 3)
        assert not grown.bulk and grown.values_embedded == 1
        assert grown.graph == LARGE_GRAPH
        assert hnsw_options(conn) == ["ef_construction=128", "m=32"]
        assert search_ef(conn) == f"hnsw.ef_search={LARGE_GRAPH.ef_search}"
        assert "HNSW graph built with m = 32, ef_construction = 128" in grown.summary()
        index = ValueIndex(PsycopgDatabase(conn), embedder)
        assert [m.value for m in index.search_semantic("Zebedee", Scope.database(), 1)] == [
            "Zebedee"
        ]
        again = build(conn, embedder, large_graph_values=held + 3)
        assert again.graph is None  # built once
        conn.execute("DELETE FROM people WHERE name IN ('Zebedee', 'Ysolde', 'Xanthe')")
        shrunk = build(conn, embedder, large_graph_values=held + 3)
        assert shrunk.graph is None and hnsw_options(conn) == ["ef_construction=128", "m=32"]


def test_the_graph_and_its_build_memory_follow_the_number_of_values() -> None:
    settings = IndexSettings()
    assert (settings.medium_graph_values, settings.large_graph_values) == (20_000, 100_000)
    assert graph_for(19_999, settings) == SMALL_GRAPH
    assert graph_for(20_000, settings) == MEDIUM_GRAPH
    assert graph_for(99_999, settings) == MEDIUM_GRAPH
    assert graph_for(100_000, settings) == LARGE_GRAPH
    # in memory (about 2.5 kB a value, twice that allowed), never a 1 GB floor
    assert graph_memory_mb(100) == 64
    assert graph_memory_mb(100_000) * 1024 * 1024 >= 100_000 * 2 * 2500
    assert graph_memory_mb(10_000_000) == 4096


def test_semantic_lookups_search_with_the_documented_ef_search(
    postgres: Postgres, new_database: Callable[..., str]
) -> None:
    db = new_database("")
    with connect(postgres, db) as conn:
        row = conn.execute(
            "SELECT proconfig FROM pg_proc WHERE oid = "
            "'nl.search_semantic(text, integer, text, text, text)'::regprocedure"
        ).fetchone()
    assert row is not None
    assert f"hnsw.ef_search={HNSW_EF_SEARCH}" in row[0]
    assert "hnsw.iterative_scan=relaxed_order" in row[0]
