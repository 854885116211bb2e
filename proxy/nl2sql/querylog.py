"""`nl.query_log`: one row per translated question (migrations/0006_query_log.sql).

The row is written as the asking role (row-level security lets each role read its own rows
only), outside the read-only scope the pipeline's queries run in. `insert_statement` gives the
SQL and its `$n` parameters; the caller decides where it runs (the proxy: on the session's own
connection, in a savepoint when the client is inside a transaction block; `pgnl ask`: on a
connection of its own). A database without the table (never migrated) gets no log; callers log a
warning and go on: the answer never depends on its record.
"""

from __future__ import annotations

import json

from proxy.nl2sql.answer import TRACE_COLUMNS, Answer

INSERT = """
INSERT INTO nl.query_log
       (directive, question, chosen_sql, outcome, error, candidates, trace, timings_ms)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::jsonb, $7::jsonb, $8::jsonb)
"""


def insert_statement(answer: Answer, directive: str) -> tuple[str, list[object]]:
    """The INSERT that records `answer` for `directive` ("nl", "nl show", "nl explain", "ask")."""
    error = None
    if answer.error is not None:
        error = f"{answer.error.sqlstate}: {answer.error.message}"
    trace = [dict(zip(TRACE_COLUMNS, row.values(), strict=True)) for row in answer.trace]
    return INSERT, [
        directive,
        answer.question,
        answer.sql,
        answer.outcome,
        error,
        json.dumps(answer.candidates),
        json.dumps(trace),
        json.dumps(answer.timings_ms),
    ]
