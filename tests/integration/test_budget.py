"""One time budget a question ([pipeline] budget_s), on a real PostgreSQL where every candidate
is slow: a row-level security policy that sleeps for each row of `students`, for the asking role.

Pins: the question stops once its budget is spent and says so (NL004, with what to raise), where
without a budget every candidate runs into its statement timeout in turn; a candidate whose plan
costs at least as much as one that timed out is not run.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from proxy.config import Settings
from proxy.nl2sql.answer import Answer
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.pipeline import load_pipeline
from tests.fix_pg import Postgres, demo_database

pytestmark = pytest.mark.integration

DB = "pgnl_budget"
QUESTION = "how many students are there?"  # every candidate reads every row


@pytest.fixture(scope="module")
def slow(postgres: Postgres) -> Iterator[str]:
    """The demo database, where scram_user's every read of students sleeps 10 ms a row."""
    with demo_database(postgres, DB) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION slow_row() RETURNS boolean LANGUAGE sql VOLATILE "
                "AS 'SELECT true FROM pg_sleep(0.01)'"
            )
            conn.execute("ALTER TABLE students ENABLE ROW LEVEL SECURITY")
            conn.execute("CREATE POLICY slowly ON students FOR SELECT USING (slow_row())")
            conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO scram_user")
        yield postgres.dsn(user="scram_user", dbname=DB)


def ask(dsn: str, question: str = QUESTION, **pipeline: float) -> Answer:
    settings = Settings()
    for key, value in pipeline.items():
        setattr(settings.pipeline, key, value)
    with psycopg.connect(dsn) as conn:
        conn.read_only = True
        return load_pipeline(settings).answer(question, PsycopgDatabase(conn))


def timed_out(answer: Answer) -> list[str]:
    return [row.outcome for row in answer.trace if row.stage == "check" and "57014" in row.outcome]


def test_the_question_stops_when_its_budget_is_spent(slow: str) -> None:
    # a candidate takes 2.4 s here: the first one's 5 s statement timeout is cut to what is left
    answer = ask(slow, statement_timeout_s=5.0, budget_s=1.5)
    assert answer.error is not None and answer.error.sqlstate == "NL004"
    assert "budget_s" in answer.error.hint
    checks = [row.outcome for row in answer.trace if row.stage == "check"]
    assert checks == ["stopped: the question's time budget ran out"]
    assert any(r.stage == "select" and "out of time" in r.outcome for r in answer.trace)
    assert answer.timings_ms["total"] < 4000


def test_a_candidate_that_costs_as_much_as_one_that_timed_out_is_not_run(slow: str) -> None:
    answer = ask(slow, statement_timeout_s=0.5, budget_s=0)
    skipped = [r for r in answer.trace if r.stage == "check" and r.outcome.startswith("not run")]
    assert timed_out(answer) and skipped
    assert "a candidate that ran into the statement timeout" in skipped[0].outcome
    assert answer.error is not None and answer.error.sqlstate == "NL001"
    assert "statement_timeout_s" in answer.error.hint  # what to raise
