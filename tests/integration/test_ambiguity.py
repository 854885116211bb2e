"""The ambiguity stage over small real databases (`settle`, `probes`): two readings that return
other rows, probed in the data, and the choice that follows; as the asking role, within the
probe budget.

- a column pair that both could hold a city: the reading whose value no row holds is refuted;
  when both hold it, the seed stands and a NOTICE names the other reading with its SQL;
- the seed refuted on its value alone, beside other differences: repaired, not replaced;
- a one-to-many join that doubles a sum is refuted;
- a join on columns no key links is refuted where the other reading joins by its key;
- a DISTINCT that changes a count is recorded, and settles nothing;
- a probe the role may not run settles nothing (and reads nothing);
- the probe budget holds on a 1M-row table;
- a reading the data leaves open is chosen where the query history matches it clearly better
  than the seed, and only then.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from proxy.config import AmbiguitySettings, Settings
from proxy.nl2sql.ambiguity import VALUE, Dimension
from proxy.nl2sql.budget import Budget
from proxy.nl2sql.candidate import ANSWERED, UNGUIDED, Candidate, Chosen
from proxy.nl2sql.completion import Completer
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.execution import Executor
from proxy.nl2sql.grounding import Grounding
from proxy.nl2sql.history import Retrieved, record_of
from proxy.nl2sql.question import Question
from proxy.nl2sql.readings import Parts, Predicate, read
from proxy.nl2sql.schema import Schema, introspect
from proxy.nl2sql.settle import Ambiguity
from proxy.nl2sql.sketch import Sketch
from proxy.nl2sql.trace import Trace
from tests.fix_pg import Postgres, scratch_database

pytestmark = pytest.mark.integration

SHOP = """
CREATE TABLE customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    city text NOT NULL,
    state text NOT NULL
);
CREATE TABLE orders (
    id integer PRIMARY KEY,
    customer_id integer NOT NULL REFERENCES customers (id),
    total numeric NOT NULL
);
CREATE TABLE items (
    order_id integer NOT NULL REFERENCES orders (id),
    sku text NOT NULL
);
INSERT INTO customers VALUES
    (1, 'Ann', 'New York', 'New York'),
    (2, 'Bo', 'Buffalo', 'New York'),
    (3, 'Cy', 'Albany', 'New York'),
    (4, 'Di', 'Boston', 'Massachusetts'),
    (5, 'Ed', 'Boston', 'Massachusetts');
INSERT INTO orders VALUES (1, 1, 10), (2, 2, 20), (3, 4, 30), (4, 4, 40);
INSERT INTO items VALUES (1, 'a'), (1, 'b'), (2, 'a'), (3, 'c'), (3, 'd'), (3, 'e'), (4, 'a');
"""

NOWHERE = Sketch(frozenset(), frozenset(), frozenset())


@pytest.fixture(scope="module")
def shop(postgres: Postgres) -> Iterator[str]:
    name = "pgnl_ambiguity"
    try:
        with scratch_database(postgres, name):
            with postgres.connect(name) as conn:
                conn.execute(SHOP.encode())
                conn.execute("DROP ROLE IF EXISTS pgnl_clerk")
                conn.execute("CREATE ROLE pgnl_clerk LOGIN PASSWORD 'clerk'")
                conn.execute("GRANT SELECT (id, name, city) ON customers TO pgnl_clerk")
                conn.execute(
                    "CREATE TABLE big AS SELECT g AS id, 'v' || g AS label "
                    "FROM generate_series(1, 1000000) AS g"
                )
            yield name
    finally:  # the role outlives the database its grants were in
        with postgres.connect("postgres") as admin:
            admin.execute("DROP ROLE IF EXISTS pgnl_clerk")


class Settled:
    """The stage run on a seed and other readings, as the pipeline's driver wires it."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        seed: str,
        *others: str,
        unguided_seed: bool = False,
        settings: AmbiguitySettings | None = None,
        history: Sequence[str] = (),
    ) -> None:
        config = Settings()
        db = PsycopgDatabase(conn)
        self.trace = Trace("which readings?")
        self.schema = introspect(db)
        asked = Question.over("which readings?", self.schema, self.trace)
        grounding = Grounding(asked, None, value_match=0.5, threshold=0.65)
        completer = Completer(asked, grounding, None, selection="llm-first", max_completions=3)
        executor = Executor(
            asked,
            db,
            grounding=grounding,
            completer=completer,
            settings=config.pipeline,
            calibration=config.calibration,
            budget=Budget(config.pipeline.budget_s),
        )
        self.seed = self.candidate(db, UNGUIDED if unguided_seed else 1, seed)
        self.others = [self.candidate(db, n, sql) for n, sql in enumerate(others, start=2)]
        near = [_retrieved(sql, self.schema) for sql in history]
        self.stage = Ambiguity(asked, executor, settings or config.ambiguity, near)
        start = time.perf_counter()
        self.chosen = self.stage.settle(
            Chosen(self.seed, ANSWERED),
            self.others,
            independent=self.others[0] if unguided_seed else None,
        )
        self.seconds = time.perf_counter() - start

    @staticmethod
    def candidate(db: PsycopgDatabase, number: int, sql: str) -> Candidate:
        candidate = Candidate(number, NOWHERE, sql=sql, unguided=number == UNGUIDED)
        candidate.rows = db.fetch(sql)
        return candidate

    def rows(self) -> list[tuple[str, str]]:
        return [
            (r.outcome, r.calibration) for r in self.trace.result.trace if r.stage == "ambiguity"
        ]

    def parts(self) -> tuple[Parts, Parts]:
        seed, other = read(self.seed.sql, self.schema), read(self.others[0].sql, self.schema)
        assert seed is not None and other is not None
        return seed, other

    @property
    def last(self) -> str:
        return self.rows()[-1][0]


def _retrieved(sql: str, schema: Schema, similarity: float = 0.9) -> Retrieved:
    """A statement of the query history as the history stage retrieves it."""
    record = record_of(sql, schema)
    assert record is not None
    return Retrieved(sql, frozenset(record.features), None, 1, similarity)


@pytest.fixture
def conn(postgres: Postgres, shop: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres.dsn(dbname=shop)) as connection:
        connection.read_only = True
        yield connection


def test_the_reading_whose_value_no_row_holds_is_refuted(
    conn: psycopg.Connection[Any],
) -> None:
    # "customers in Buffalo": the seed looks in state, where no row holds it
    settled = Settled(
        conn,
        "SELECT name FROM customers WHERE state = 'Buffalo'",
        "SELECT name FROM customers WHERE city = 'Buffalo'",
    )
    assert settled.chosen.candidate is settled.others[0]
    outcome, finding = settled.rows()[0]
    assert outcome.startswith("AmbiValue value column")
    assert "refutes the seed" in outcome
    assert finding == ("customers.state = 'Buffalo': 0 rows; customers.city = 'Buffalo': 1 rows")
    assert "instead of the seed" in settled.last


def test_both_readings_held_the_seed_stands_and_a_notice_names_the_other(
    conn: psycopg.Connection[Any],
) -> None:
    # "customers in New York": the city and the state of that name both exist
    settled = Settled(
        conn,
        "SELECT name FROM customers WHERE state = 'New York'",
        "SELECT name FROM customers WHERE city = 'New York'",
    )
    assert settled.chosen.candidate is settled.seed
    outcome, finding = settled.rows()[0]
    assert outcome.endswith(": open")
    assert finding == "customers.state = 'New York': 3 rows; customers.city = 'New York': 1 rows"
    assert "1 open" in settled.last
    notice = settled.chosen.notice
    assert "can be read another way" in notice
    assert "candidate 2 (AmbiValue value column)" in notice
    assert "SELECT name FROM customers WHERE city = 'New York'" in notice


def test_readings_that_agree_settle_nothing(conn: psycopg.Connection[Any]) -> None:
    settled = Settled(
        conn,
        "SELECT count(*) FROM customers WHERE city = 'Boston'",
        "SELECT count(*) FROM customers WHERE state = 'Massachusetts'",
    )
    assert settled.chosen.candidate is settled.seed
    assert settled.rows() == [("1 other readings, all agreeing", "")]
    assert settled.chosen.notice == ""


def test_a_seed_wrong_only_on_its_value_is_repaired(conn: psycopg.Connection[Any]) -> None:
    # the seed's literal is held by no row; the other reading has that value right but also
    # selects another column: only the value is taken from it
    settled = Settled(
        conn,
        "SELECT name FROM customers WHERE city = 'Bostn' OR id = 1",
        "SELECT id FROM customers WHERE city = 'Boston' OR id = 1",
    )
    chosen = settled.chosen.candidate
    assert chosen is not settled.seed and chosen is not settled.others[0]
    assert chosen.sql == "SELECT name FROM customers WHERE city = 'Boston' OR id = 1"
    assert sorted(chosen.rows) == [("Ann",), ("Di",), ("Ed",)]
    assert "repaired along value" in settled.last


def test_a_join_that_doubles_a_sum_is_refuted(conn: psycopg.Connection[Any]) -> None:
    # items repeats order_id: joining it only to reach orders counts each order per item
    settled = Settled(
        conn,
        "SELECT sum(o.total) FROM orders AS o JOIN items AS i ON i.order_id = o.id",
        "SELECT sum(total) FROM orders",
    )
    assert settled.chosen.candidate is settled.others[0]
    (outcome, finding), _ = settled.rows()
    assert outcome.startswith("AmbiSchema tables") and "refutes the seed" in outcome
    assert finding.startswith("items.order_id repeats (3 rows more than keys)")


def test_a_join_no_key_links_is_refuted(conn: psycopg.Connection[Any]) -> None:
    settled = Settled(
        conn,
        "SELECT c.name, o.total FROM customers AS c JOIN orders AS o ON o.id = c.id",
        "SELECT c.name, o.total FROM customers AS c JOIN orders AS o ON o.customer_id = c.id",
        unguided_seed=True,
    )
    assert settled.chosen.candidate is settled.others[0]
    outcome, finding = settled.rows()[0]
    assert outcome.startswith("AmbiSchema join path")
    assert finding == (
        "the seed joins on customers.id = orders.id, which the foreign keys contradict"
    )


def test_a_join_on_values_is_no_evidence(conn: psycopg.Connection[Any]) -> None:
    # "cities that are also a state's name": city = state joins two plain columns on purpose
    settled = Settled(
        conn,
        "SELECT DISTINCT a.city FROM customers AS a JOIN customers AS b ON a.city = b.state",
        "SELECT DISTINCT a.city FROM customers AS a JOIN orders AS o ON o.customer_id = a.id",
        unguided_seed=True,
    )
    assert settled.chosen.candidate is settled.seed
    assert all("refutes" not in outcome for outcome, _ in settled.rows())


def test_a_distinct_that_changes_a_count_is_recorded_and_settles_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    settled = Settled(
        conn,
        "SELECT count(city) FROM customers",
        "SELECT count(DISTINCT city) FROM customers",
        unguided_seed=True,
    )
    assert settled.chosen.candidate is settled.seed
    outcome, finding = settled.rows()[0]
    assert outcome == "AmbiIntent distinct: (none) | count(distinct customers.city): open"
    assert finding == "customers.city: 5 values, 4 distinct"
    # the other reading is the other model's answer: named to the user though no value differs
    assert "candidate 2 (AmbiIntent distinct)" in settled.chosen.notice


def test_a_probe_the_role_may_not_run_settles_nothing(postgres: Postgres, shop: str) -> None:
    # the clerk may read customers' id, name and city, not its state
    dsn = postgres.server.dsn(shop, user="pgnl_clerk", password="clerk")
    with psycopg.connect(dsn) as clerk:
        clerk.read_only = True
        settled = Settled(
            clerk,
            "SELECT name FROM customers WHERE city = 'Albany'",
            "SELECT name FROM customers WHERE city = 'Boston'",
        )
        assert settled.chosen.candidate is settled.seed  # both values are held: open
        assert settled.rows()[0][1] == (
            "customers.city = 'Albany': 1 rows; customers.city = 'Boston': 2 rows"
        )
        refused = Dimension(
            VALUE,
            "value column",
            "",
            "",
            Predicate("customers.state", "=", ("New York",)),
            Predicate("customers.city", "=", ("New York",)),
        )
        (evidence,) = settled.stage.prober.probe(refused, *settled.parts(), [], [])
        # the state probe was refused by the server: only the city's count is known
        assert evidence.finding == "customers.city = 'New York': 1 rows"
        assert evidence.favours == ""


def test_the_probe_budget_holds_on_a_million_rows(conn: psycopg.Connection[Any]) -> None:
    readings = (
        "SELECT id FROM big WHERE label = 'v7' OR label = 'v8'",
        "SELECT id FROM big WHERE label = 'v9'",
        "SELECT id FROM big WHERE label = 'v10'",
        "SELECT id FROM big WHERE label = 'v11'",
    )
    unbounded = Settled(conn, *readings, settings=AmbiguitySettings(probe_budget_s=0))
    bounded = Settled(conn, *readings, settings=AmbiguitySettings(probe_budget_s=0.15))
    # each probe scans the million rows: the budget stops the probing, not the question
    assert unbounded.stage.prober.queries >= 6
    assert 1 <= bounded.stage.prober.queries < unbounded.stage.prober.queries
    assert bounded.seconds < 1.5
    assert bounded.chosen.candidate is bounded.seed


def test_an_open_reading_the_history_matches_better_is_chosen(
    conn: psycopg.Connection[Any],
) -> None:
    # "customers in New York" again: the data holds both readings, and the database's users
    # filter customers by their city
    readings = (
        "SELECT name FROM customers WHERE state = 'New York'",
        "SELECT name FROM customers WHERE city = 'New York'",
    )
    history = ["SELECT name FROM customers WHERE city = 'Albany'"]
    settled = Settled(conn, *readings, history=history)
    assert settled.chosen.candidate is settled.others[0]
    assert settled.last == (
        "candidate 2 instead of the seed (candidate 1): it matches the query history 0.90, "
        "the seed 0.00"
    )
    assert settled.rows()[-1][1].startswith("the history's nearest match (0.90 close")
    # without a history, with one that holds only queries like the other reading, or with
    # one that holds both, the seed stands
    assert Settled(conn, *readings).chosen.candidate.sql == readings[0]
    alike = ["SELECT name FROM customers WHERE city = 'Albany' AND state = 'New York'"]
    assert Settled(conn, *readings, history=alike).chosen.candidate.sql == readings[0]
    both = [*history, "SELECT name FROM customers WHERE state = 'Ohio'"]
    assert Settled(conn, *readings, history=both).chosen.candidate.sql == readings[0]


def test_the_history_never_overrules_the_data(conn: psycopg.Connection[Any]) -> None:
    # the history filters by state, but no customer's state is Buffalo: the data decides
    settled = Settled(
        conn,
        "SELECT name FROM customers WHERE state = 'Buffalo'",
        "SELECT name FROM customers WHERE city = 'Buffalo'",
        history=["SELECT name FROM customers WHERE state = 'Ohio'"],
    )
    assert settled.chosen.candidate is settled.others[0]
    assert "whose reading the data refutes" in settled.last
