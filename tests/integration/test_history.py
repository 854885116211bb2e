"""The query history on the demo's university database: `pgnl learn` from a file, from
pg_stat_statements and from nl.query_log; what a role may retrieve; the history stage and the
examples the LLM is shown (a real HTTP server speaking the OpenAI API, tests/fix_llm.py).

- a file's SELECTs become records, what is not one SELECT over the database's tables is
  skipped, and a second run embeds nothing again;
- pg_stat_statements gives the users' statements, not those pgnl ran for a question;
- nl.query_log gives the answers that were not asked again, with their questions;
- a role retrieves only the records whose every table and column it may read;
- the pipeline retrieves the records nearest a question (stage `history`) and shows the
  nearest statements to the LLM.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.string import TextLoader

from benchmarks.query_history import LEAVE_ONE_OUT, LEAVE_PATTERN_OUT, CachedQuestions, LeaveOut
from proxy.config import LLMSettings, Settings
from proxy.learn import FILE, QUERY_LOG, STAT_STATEMENTS, learn
from proxy.learn_questions import write_questions
from proxy.nl2sql.answer import Answer
from proxy.nl2sql.database import PGNL_MARK, PsycopgDatabase
from proxy.nl2sql.history import History
from proxy.nl2sql.llm import BlockingLLM
from proxy.nl2sql.pipeline import load_pipeline
from proxy.nl2sql.prompts import Message
from proxy.nl2sql.schema import introspect
from proxy.runtime import load_embedder
from tests.fix_llm import ScriptedLLM, Status
from tests.fix_pg import Postgres, demo_database
from tests.fix_proxy import run_pgnl

pytestmark = pytest.mark.integration

DB = "pgnl_history"
CITIES = "SELECT first_name, last_name FROM students WHERE home_city = 'Boston'"
CREDITS = (
    "SELECT c.title FROM courses AS c JOIN departments AS d ON d.id = c.department_id "
    "WHERE d.name = 'Physics' ORDER BY c.credits DESC LIMIT 1"
)
LOG = "\n".join(
    (
        f"{CITIES};",
        f"{CREDITS};",
        "SELECT count(*) FROM enrollments WHERE grade = 'A';",
        "UPDATE students SET home_city = 'Nowhere' WHERE id = 1;",
        "SELECT 1;",
        "SELECT relname FROM pg_class;",
    )
)


@pytest.fixture(scope="module")
def university(postgres: Postgres) -> Iterator[str]:
    def setup(conn: psycopg.Connection[Any]) -> None:
        conn.execute("DROP ROLE IF EXISTS pgnl_registrar")
        conn.execute("CREATE ROLE pgnl_registrar LOGIN PASSWORD 'registrar'")
        # the registrar may read students' names and cities, and courses: not departments
        conn.execute(
            "GRANT SELECT (id, first_name, last_name, home_city) ON students TO pgnl_registrar"
        )
        conn.execute("GRANT SELECT ON courses TO pgnl_registrar")

    try:
        with demo_database(postgres, DB, setup) as dsn:
            yield dsn
    finally:
        with postgres.connect("postgres") as admin:
            admin.execute("DROP ROLE IF EXISTS pgnl_registrar")


@pytest.fixture
def admin(university: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(university, autocommit=True) as conn:
        conn.execute("DELETE FROM nl.ambiguity")
        yield conn


def statements(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, int, str | None]]:
    rows = conn.execute("SELECT statement, source, calls, question FROM nl.ambiguity").fetchall()
    return {s: (source, calls, question) for s, source, calls, question in rows}


def test_a_file_becomes_records_and_a_second_run_embeds_nothing_again(
    admin: psycopg.Connection[Any],
) -> None:
    embedder = load_embedder()
    report = learn(admin, embedder, sources=(), files=[LOG, CITIES], progress=False)
    assert report.read == {FILE: 7}
    assert (report.added, report.updated, report.skipped) == (3, 0, 3)
    found = statements(admin)
    assert found[CITIES] == (FILE, 2, None)  # twice in the files
    assert set(found) == {CITIES, CREDITS, "SELECT count(*) FROM enrollments WHERE grade = 'A'"}
    features, values = admin.execute(
        "SELECT features, filter_values FROM nl.ambiguity WHERE statement = %s", [CREDITS]
    ).fetchone() or ([], {})
    assert "join courses.department_id = departments.id" in features
    assert "filter departments.name =" in features and "order courses.credits DESC" in features
    assert values == {"departments.name": ["Physics"]}
    again = learn(admin, embedder, sources=(), files=[LOG], progress=False)
    assert (again.added, again.updated) == (0, 3)
    assert statements(admin)[CITIES][1] == 2  # the count is not added up again


def test_pg_stat_statements_gives_the_users_sql_not_pgnls(
    admin: psycopg.Connection[Any], university: str
) -> None:
    admin.execute("SELECT title FROM courses WHERE credits > 3").fetchall()
    with psycopg.connect(university) as conn:  # pgnl's own queries for a question
        conn.read_only = True
        answer = load_pipeline(Settings()).answer(
            "which students live in chicago?", PsycopgDatabase(conn)
        )
    assert answer.sql is not None
    report = learn(admin, load_embedder(), sources=(STAT_STATEMENTS,), progress=False)
    assert report.read[STAT_STATEMENTS] >= 1
    found = statements(admin)
    assert found["SELECT title FROM courses WHERE credits > $1"][0] == STAT_STATEMENTS
    assert not [s for s in found if PGNL_MARK.strip() in s]
    assert "home_city" not in " ".join(found)  # the pipeline's candidates are not there


def test_the_query_log_gives_the_answers_not_asked_again(admin: psycopg.Connection[Any]) -> None:
    admin.execute(
        """
        INSERT INTO nl.query_log (logged_at, directive, question, chosen_sql, outcome)
        VALUES (now() - interval '1 hour', 'nl', 'students from boston', %s, 'answered'),
               (now() - interval '59 minutes', 'nl', 'students who live in boston', %s,
                'answered'),
               (now() - interval '30 minutes', 'nl', 'the longest physics course', %s,
                'answered'),
               (now() - interval '10 minutes', 'nl', 'what is a course?', NULL, 'error')
        """,
        [
            "SELECT first_name FROM students WHERE home_state = 'Boston'",
            CITIES,
            CREDITS,
        ],
    )
    try:
        report = learn(admin, load_embedder(), sources=(QUERY_LOG,), progress=False)
    finally:
        admin.execute("DELETE FROM nl.query_log")
    assert report.read == {"nl.query_log": 2}
    found = statements(admin)
    # the first answer was asked again a minute later: a correction, not learned
    assert found == {
        CITIES: (QUERY_LOG, 1, "students who live in boston"),
        CREDITS: (QUERY_LOG, 1, "the longest physics course"),
    }


def test_a_role_retrieves_only_the_records_it_may_read(
    admin: psycopg.Connection[Any], postgres: Postgres
) -> None:
    learn(
        admin,
        load_embedder(),
        sources=(),
        files=[LOG, "SELECT home_state FROM students WHERE home_city = 'Boston'"],
        progress=False,
    )
    dsn = postgres.server.dsn(DB, user="pgnl_registrar", password="registrar")
    with psycopg.connect(dsn) as conn:
        conn.read_only = True
        seen = [r[0] for r in conn.execute("SELECT statement FROM nl.ambiguity").fetchall()]
        # not CREDITS (departments), nor enrollments, nor students' home_state
        assert seen == [CITIES]
        near = History(PsycopgDatabase(conn), load_embedder(), timeout_s=5).near(
            "which courses does physics teach?", 8
        )
        assert [r.statement for r in near] == [CITIES]
    assert len(statements(admin)) == 4  # the owner reads them all


def test_a_role_that_may_read_few_of_a_large_history_gets_its_nearest_k(
    admin: psycopg.Connection[Any], postgres: Postgres
) -> None:
    """5,000 records the registrar may not read (departments), 20 it may (students' cities):
    the HNSW scan yields candidates before the policy's check, and goes on until 8 pass it."""
    record = """
        INSERT INTO nl.ambiguity (statement_hash, fingerprint, statement, source, table_oids,
               column_oids, column_attnums, features, description, embedding)
        SELECT md5(%(kind)s || g), md5(%(kind)s), %(statement)s || g, 'file',
               ARRAY[%(table)s::regclass::oid], ARRAY[%(table)s::regclass::oid],
               ARRAY[%(column)s]::smallint[], ARRAY['table ' || %(table)s], 'in words',
               (SELECT array_agg(random() - 0.5)::vector(384)
                  FROM generate_series(1, 384) WHERE g > 0)
          FROM generate_series(1, %(count)s) g
    """
    admin.execute(
        record,
        {
            "kind": "d",
            "statement": "SELECT name FROM departments WHERE id = ",
            "table": "departments",
            "column": 1,
            "count": 5000,
        },
    )
    admin.execute(
        record,
        {
            "kind": "s",
            "statement": "SELECT home_city FROM students WHERE id = ",
            "table": "students",
            "column": 1,
            "count": 20,
        },
    )
    admin.execute("ANALYZE nl.ambiguity")  # the plan below from statistics, not from timing
    dsn = postgres.server.dsn(DB, user="pgnl_registrar", password="registrar")
    with psycopg.connect(dsn) as conn:
        conn.read_only = True
        plan = conn.execute(
            "EXPLAIN SELECT statement FROM nl.ambiguity ORDER BY embedding <=> %s::vector LIMIT 8",
            [str([0.01] * 384)],
        ).fetchall()
        assert any("ambiguity_embedding" in row[0] for row in plan), plan  # the index is used
        near = History(PsycopgDatabase(conn), load_embedder(), timeout_s=5).near(
            "which city does each student come from?", 8
        )
    assert len(near) == 8
    assert all(r.statement.startswith("SELECT home_city FROM students") for r in near)
    assert [r.similarity for r in near] == sorted((r.similarity for r in near), reverse=True)


def llm_answer(
    university: str, llm_server: ScriptedLLM, question: str, **ambiguity: object
) -> Answer:
    """The pipeline's answer with the scripted LLM, [ambiguity] settings as given."""
    chosen = Settings()
    for key, value in ambiguity.items():
        setattr(chosen.ambiguity, key, value)
    chosen.llm = LLMSettings(
        base_url=llm_server.base_url, model="scripted", timeout_s=1.0, deadline_s=2.5
    )
    llm = BlockingLLM.start(chosen.llm)
    assert llm is not None
    try:
        with psycopg.connect(university) as conn:
            conn.read_only = True
            return load_pipeline(chosen, llm).answer(question, PsycopgDatabase(conn))
    finally:
        llm.close()


def history_block(prompt: str) -> str:
    return prompt.split("<query_history>")[1].split("</query_history>", maxsplit=1)[0]


def test_the_pipeline_retrieves_the_history_and_shows_the_llm_its_statements(
    admin: psycopg.Connection[Any], university: str, llm_server: ScriptedLLM
) -> None:
    learn(admin, load_embedder(), sources=(), files=[LOG, CITIES, CITIES], progress=False)
    reply = "SELECT first_name, last_name FROM students WHERE home_city = 'Chicago'"
    question = "which students come from chicago?"
    llm_server.script(reply, then=reply)
    answer = llm_answer(university, llm_server, question, history_examples=2)
    history = next(r for r in answer.trace if r.stage == "history")
    assert history.outcome.startswith("3 records, the nearest 0.")
    assert history.outcome.endswith("; 2 shown to the LLM")
    assert history.calibration == CITIES  # the nearest: students and a city
    # by default the statements nearest the question, after it, the nearest first
    prompt = llm_server.requests[0].content("user")
    assert prompt.index("<question>") < prompt.index("<query_history>")
    block = history_block(prompt)
    assert block.lstrip("\n").startswith(f'"{CITIES}"')  # one JSON string a statement
    assert block.count('\n"') == 2
    assert "<query_history>" in llm_server.requests[0].content("system")  # untrusted text
    # the most run instead: beside the schema, before the question, the same for every
    # question, so in the part of the prompt the LLM server keeps cached
    before = len(llm_server.requests)
    llm_answer(university, llm_server, question, history_examples_by="frequent")
    prompt = llm_server.requests[before].content("user")
    assert prompt.index("</schema>") < prompt.index("<query_history>") < prompt.index("<question>")
    assert history_block(prompt).lstrip("\n").startswith(f'"{CITIES}"')  # run twice
    # without a history: no retrieval, no row in the trace, no block
    admin.execute("DELETE FROM nl.ambiguity")
    before = len(llm_server.requests)
    answer = llm_answer(university, llm_server, question)
    assert "history" not in [r.stage for r in answer.trace]
    assert "<query_history>" not in llm_server.requests[before].content("user")


def test_pgnl_learn_from_the_command_line(
    admin: psycopg.Connection[Any], university: str, tmp_path: Any
) -> None:
    log = tmp_path / "saved.sql"
    log.write_text(LOG)
    done = run_pgnl(
        "learn", "--dsn", university, "--file", str(log), "--no-query-log", "--no-stat-statements"
    )  # the test environment names no LLM (PGNL_LLM_PROVIDER=none)
    assert done.returncode == 0, done.stderr
    assert "3 records added" in done.stdout and "3 statements skipped" in done.stdout
    assert "learn: 3/3 new statements embedded" in done.stderr
    assert "no LLM" in done.stdout  # no question written, and how to have them
    missing = run_pgnl("learn", "--dsn", university, "--file", str(tmp_path / "none.sql"))
    assert missing.returncode == 1 and "none.sql" in missing.stderr


def test_the_benchmark_leaves_a_questions_own_statement_out_and_puts_it_back(
    admin: psycopg.Connection[Any], university: str
) -> None:
    boston = CITIES.replace("Boston", "Albany")
    learn(admin, load_embedder(), sources=(), files=[LOG, CITIES, boston], progress=False)

    def table() -> list[tuple[Any, ...]]:
        return admin.execute("SELECT * FROM nl.ambiguity ORDER BY id").fetchall()

    before = table()
    leave = LeaveOut({"u": university}, LEAVE_ONE_OUT)
    try:
        with leave.around("u", CITIES):  # twice in the history: once left
            assert statements(admin)[CITIES][1] == 1
        with leave.around("u", CREDITS):
            assert CREDITS not in statements(admin) and boston in statements(admin)
        assert table() == before
        pattern = LeaveOut({"u": university}, LEAVE_PATTERN_OUT)
        with pattern.around("u", CITIES):  # the same query for another city goes too
            assert CITIES not in statements(admin) and boston not in statements(admin)
            assert CREDITS in statements(admin)
        pattern.close()
        assert table() == before
    finally:
        leave.close()


def test_the_history_reads_alike_from_a_database_that_returns_text(
    admin: psycopg.Connection[Any], university: str
) -> None:
    # the proxy's upstream connection returns every value as text, arrays and numbers too
    learn(admin, load_embedder(), sources=(), files=[LOG], progress=False)
    question = "which students come from chicago?"
    found = []
    for as_text in (False, True):
        with psycopg.connect(university) as conn:
            conn.read_only = True
            if as_text:
                for oid in (1009, 20, 701):  # text[], bigint, double precision
                    conn.adapters.register_loader(oid, TextLoader)
            history = History(PsycopgDatabase(conn), load_embedder(), timeout_s=5)
            found.append(history.near(question, 8))
    assert found[0] == found[1]
    assert "table students" in found[1][0].features


def scripted(llm_server: ScriptedLLM) -> BlockingLLM:
    llm = BlockingLLM.start(
        LLMSettings(base_url=llm_server.base_url, model="scripted", timeout_s=1.0, deadline_s=2.5)
    )
    assert llm is not None
    return llm


def distance(conn: psycopg.Connection[Any], statement: str, text: str) -> float:
    """The cosine distance of the statement's record's embedding from `text`'s."""
    (vector,) = load_embedder().embed([text])
    row = conn.execute(
        "SELECT embedding <=> %s::vector FROM nl.ambiguity WHERE statement = %s",
        [str(list(map(float, vector))), statement],
    ).fetchone()
    assert row is not None
    return float(row[0])


def test_the_llm_writes_the_questions_of_statements_learned_without_one(
    admin: psycopg.Connection[Any], llm_server: ScriptedLLM
) -> None:
    embedder = load_embedder()
    learn(admin, embedder, sources=(), files=[LOG, CITIES], progress=False)
    schema = introspect(PsycopgDatabase(admin), name=DB)
    counted = "SELECT count(*) FROM enrollments WHERE grade = 'A'"
    # the most run first (CITIES, twice); then CREDITS, whose answer holds no question
    llm_server.script(
        "Question: Which students live in Boston?",
        "SELECT c.title FROM courses c",
        "How many A grades?",
    )
    llm = scripted(llm_server)
    try:
        report = write_questions(admin, embedder, llm, schema)
    finally:
        llm.close()
    assert (report.written, report.unusable) == (2, 1)
    found = statements(admin)
    assert found[CITIES][2] == "Which students live in Boston?"
    assert found[counted][2] == "How many A grades?" and found[CREDITS][2] is None
    synthetic = dict(admin.execute("SELECT statement, synthetic FROM nl.ambiguity").fetchall())
    assert synthetic == {CITIES: True, counted: True, CREDITS: False}
    # the record is found by its question now, not by its words
    assert distance(admin, CITIES, "Which students live in Boston?") < 0.01
    first = llm_server.requests[0].content("user")
    assert f'"{CITIES}"' in first  # the statement, as data, after the whole (small) schema
    assert first.index("CREATE TABLE courses") < first.index("</schema>") < first.index(CITIES)
    # a user's own question replaces the LLM's when the statement is learned again
    admin.execute(
        "INSERT INTO nl.query_log (logged_at, directive, question, chosen_sql, outcome) "
        "VALUES (now() - interval '1 hour', 'nl', 'students from boston', %s, 'answered')",
        [CITIES],
    )
    try:
        learn(admin, embedder, sources=(QUERY_LOG,), progress=False)
    finally:
        admin.execute("DELETE FROM nl.query_log")
    assert statements(admin)[CITIES][2] == "students from boston"
    assert distance(admin, CITIES, "students from boston") < 0.01
    assert not admin.execute(
        "SELECT synthetic FROM nl.ambiguity WHERE statement = %s", [CITIES]
    ).fetchone()[0]  # type: ignore[index]


def test_the_question_pass_stops_while_the_llm_fails_and_goes_on_next_time(
    admin: psycopg.Connection[Any], llm_server: ScriptedLLM
) -> None:
    embedder = load_embedder()
    learn(admin, embedder, sources=(), files=[LOG], progress=False)
    schema = introspect(PsycopgDatabase(admin), name=DB)
    llm_server.script(then=Status(400, "no such model"))  # refused: no retry
    llm = scripted(llm_server)
    try:
        stopped = write_questions(admin, embedder, llm, schema)
        assert stopped.written == 0 and "3 LLM errors in a row" in stopped.note
        assert "run pgnl learn again" in stopped.summary()
        llm_server.script(then="What is it?")
        again = write_questions(admin, embedder, llm, schema)
    finally:
        llm.close()
    assert again.written == 3 and not again.note
    assert {q for _, _, q in statements(admin).values()} == {"What is it?"}


def test_a_large_schema_is_cut_to_the_statements_tables(
    admin: psycopg.Connection[Any], llm_server: ScriptedLLM
) -> None:
    embedder = load_embedder()
    learn(admin, embedder, sources=(), files=[CITIES], progress=False)
    schema = introspect(PsycopgDatabase(admin), name=DB)
    llm_server.script("Who lives in Boston?")
    llm = scripted(llm_server)
    try:
        write_questions(admin, embedder, llm, schema, whole_schema_columns=len(schema.columns) - 1)
    finally:
        llm.close()
    prompt = llm_server.requests[0].content("user")
    assert "CREATE TABLE students" in prompt and "CREATE TABLE courses" not in prompt


def test_pgnl_learn_has_the_llm_write_the_questions(
    admin: psycopg.Connection[Any],
    university: str,
    llm_server: ScriptedLLM,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "saved.sql"
    log.write_text(LOG)
    llm_server.script(then="What is it?")
    for name, value in {
        "PGNL_LLM_PROVIDER": "openai",
        "PGNL_LLM_BASE_URL": llm_server.base_url,
        "PGNL_LLM_MODEL": "scripted",
    }.items():
        monkeypatch.setenv(name, value)
    args = ("learn", "--dsn", university, "--file", str(log), "--no-query-log")
    done = run_pgnl(*args, "--no-stat-statements", "--no-questions")
    assert done.returncode == 0, done.stderr
    assert not llm_server.requests and "questions" not in done.stdout
    done = run_pgnl(*args, "--no-stat-statements")
    assert done.returncode == 0, done.stderr
    assert "3 questions written by the LLM" in done.stdout
    assert "learn: 3/3 statements asked for their question" in done.stderr
    assert len(llm_server.requests) == 3
    done = run_pgnl(*args, "--no-stat-statements")  # nothing left to ask
    assert done.returncode == 0 and len(llm_server.requests) == 3
    doctor = run_pgnl("--log-level", "warning", "doctor", "--dsn", university, timeout=120)
    assert "query history: 3 records this role may read, 3 of them with a question" in (
        doctor.stdout
    )


def test_the_benchmark_keeps_the_llms_answers_and_asks_only_for_new_ones(
    llm_server: ScriptedLLM, tmp_path: Any
) -> None:
    file = tmp_path / "questions.jsonl"
    llm_server.script("What is a?", "What is b?")
    started: list[BlockingLLM] = []

    def start() -> BlockingLLM:
        started.append(scripted(llm_server))
        return started[-1]

    first, second = [Message("user", "a")], [Message("user", "b")]
    writer = CachedQuestions(file, start)
    try:
        assert writer.text(first) == writer.text(first) == "What is a?"
    finally:
        writer.close()
    assert len(llm_server.requests) == 1 and writer.asked == 1
    again = CachedQuestions(file, start)
    try:
        assert again.text(first) == "What is a?" and len(started) == 1  # from the file
        assert again.text(second) == "What is b?" and len(started) == 2
    finally:
        again.close()
    assert len(llm_server.requests) == 2 and len(file.read_text().splitlines()) == 2
