"""The proxy's Prometheus endpoint (`[metrics] listen`), scraped over real HTTP while psycopg
sends plain SQL and one question through the real proxy: the connection gauges and counters
(a refused connection included), the relayed messages and bytes to the exact amounts simple
queries take, the question's outcome and its stages' latencies."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

import psycopg
import pytest

from proxy.metrics import CONTENT_TYPE
from proxy.nl2sql.pipeline import STAGES
from proxy.wire.messages import Query
from tests.fix_pg import free_port
from tests.fix_proxy import RunningProxy
from tests.prometheus import Parsed, parse

pytestmark = pytest.mark.integration

STUDENTS = """
CREATE TABLE students (id integer PRIMARY KEY, name text NOT NULL, city text NOT NULL);
INSERT INTO students VALUES (1, 'Timmy Ward', 'Boston'), (2, 'Ana Lopez', 'Chicago'),
                            (3, 'Wei Chen', 'Boston');
"""
MESSAGES = "pgnl_relayed_messages_total"
BYTES = "pgnl_relayed_bytes_total"
UP, DOWN = {"direction": "client_to_server"}, {"direction": "server_to_client"}

# `SELECT 1` in the simple protocol: one Query up; RowDescription (one int4 column "?column?"),
# DataRow, CommandComplete "SELECT 1", ReadyForQuery down.
QUERY = Query("SELECT 1").encode()
REPLY_BYTES = (1 + 4 + 2 + len(b"?column?\0") + 18) + (1 + 4 + 2 + 4 + 1) + (1 + 4 + 9) + 6


def scrape(port: int, path: str = "/metrics") -> tuple[str, str]:
    url = f"http://127.0.0.1:{port}{path}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.headers["Content-Type"], reply.read().decode()


def metrics(port: int) -> Parsed:
    content_type, text = scrape(port)
    assert content_type == CONTENT_TYPE
    return parse(text)


def eventually(port: int, test: Callable[[Parsed], bool]) -> Parsed:
    """The first scrape within 10 s that passes `test` (a closed socket's end reaches the proxy
    a moment after the client has let go)."""
    deadline = time.monotonic() + 10
    while True:
        found = metrics(port)
        if test(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_connections_traffic_and_a_question_are_counted(
    make_proxy: Callable[..., RunningProxy], make_database: Callable[..., str]
) -> None:
    db = make_database(STUDENTS, migrated=True)
    port = free_port()
    proxy = make_proxy("--metrics-listen", f"127.0.0.1:{port}", "--max-client-connections", "1")
    start = metrics(port)
    assert start.type["pgnl_client_connections_open"] == "gauge"
    assert start.type[MESSAGES] == "counter" and start.type[BYTES] == "counter"
    assert start.type["pgnl_question_stage_seconds"] == "histogram"
    assert start.value("pgnl_client_connections_accepted_total") == 0
    assert start.value("pgnl_questions_total", outcome="answered") == 0
    assert start.value(MESSAGES, **UP) == 0 and start.value(BYTES, **DOWN) == 0
    assert start.value("pgnl_llm_queue_depth") == 0

    with psycopg.connect(proxy.dsn(dbname=db), autocommit=True) as conn:
        before = metrics(port)
        assert before.value("pgnl_client_connections_open") == 1
        assert before.value("pgnl_client_connections_accepted_total") == 1
        for _ in range(3):
            result = conn.pgconn.exec_(b"SELECT 1")
            assert result.status == psycopg.pq.ExecStatus.TUPLES_OK
        plain = metrics(port)
        assert plain.value(MESSAGES, **UP) - before.value(MESSAGES, **UP) == 3
        assert plain.value(BYTES, **UP) - before.value(BYTES, **UP) == 3 * len(QUERY)
        assert plain.value(MESSAGES, **DOWN) - before.value(MESSAGES, **DOWN) == 3 * 4
        assert plain.value(BYTES, **DOWN) - before.value(BYTES, **DOWN) == 3 * REPLY_BYTES

        with pytest.raises(psycopg.OperationalError, match="at most 1 connection"):
            psycopg.connect(proxy.dsn(dbname=db), connect_timeout=10)
        refused = eventually(port, lambda m: m.value("pgnl_client_connections_open") == 1)
        assert refused.value("pgnl_client_connections_open") == 1
        assert refused.value("pgnl_client_connections_accepted_total") == 2
        assert refused.value("pgnl_client_connections_refused_total") == 1

        cur = conn.execute("-- nl: how many students are there?")
        assert cur.fetchall() == [(3,)]
        asked = metrics(port)
    assert asked.value("pgnl_questions_total", outcome="answered") == 1
    assert [s for s in asked.samples if s[0] == "pgnl_questions_total" and s[2]] == [
        ("pgnl_questions_total", {"outcome": "answered"}, 1)
    ]
    stage = "pgnl_question_stage_seconds"
    stages = {ls["stage"] for n, ls, _ in asked.samples if n == f"{stage}_count"}
    assert {"schema", "lookup", "sketch", "complete", "check"} <= stages <= set(STAGES)
    for name in stages:  # one question: one sample a stage, its time summed over candidates
        assert asked.value(f"{stage}_count", stage=name) == 1, name
        assert asked.value(f"{stage}_bucket", stage=name, le="+Inf") == 1
        assert asked.value(f"{stage}_sum", stage=name) >= 0
    assert asked.value("pgnl_question_seconds_count") == 1
    total = asked.value("pgnl_question_seconds_sum")
    assert 0 < total < 60
    assert asked.value(f"{stage}_sum", stage="sketch") <= total
    # The question's messages (the directive up; the answer and the pipeline's own queries'
    # replies down) are counted too.
    for labels in (UP, DOWN):
        assert asked.value(MESSAGES, **labels) > plain.value(MESSAGES, **labels)
        assert asked.value(BYTES, **labels) > plain.value(BYTES, **labels)

    closed = eventually(port, lambda m: m.value("pgnl_client_connections_open") == 0)
    assert closed.value("pgnl_client_connections_open") == 0
    assert closed.value("pgnl_client_connections_accepted_total") == 2
    for name in (MESSAGES, BYTES):  # a closed connection's counts stay
        for labels in (UP, DOWN):
            assert closed.value(name, **labels) >= asked.value(name, **labels)
    assert closed.value(MESSAGES, **UP) == asked.value(MESSAGES, **UP) + 1  # the Terminate
    assert proxy.internal_errors() == []


def test_other_paths_are_not_found_and_no_listen_means_no_endpoint(
    make_proxy: Callable[..., RunningProxy],
) -> None:
    port = free_port()
    make_proxy("--metrics-listen", f"127.0.0.1:{port}")
    with pytest.raises(urllib.error.HTTPError) as missing:
        scrape(port, "/")
    assert missing.value.code == 404
    missing.value.close()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as posted:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310 (http, built above)
    assert posted.value.code == 405
    posted.value.close()
    quiet = free_port()
    make_proxy()
    with pytest.raises(urllib.error.URLError):
        scrape(quiet)
