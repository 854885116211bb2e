"""Execution accuracy on Spider dev, asked through a real `pgnl serve` as a client would ask it.

    python -m benchmarks.execution_accuracy [--dsn ADMIN_DSN] [--limit N] [--db DB_ID ...]
        [--timeout 30] [--show N] [--details results.jsonl] [--no-attribution] [--no-warmup]

1. Set-up. PostgreSQL: a throwaway embedded server (pgvector included) started for this run and
   removed at its end, or the server `--dsn` names (an admin DSN; what this run loads there stays,
   so a second run re-uses it). Each Spider dev database that the chosen questions need is loaded
   into a database of its own, `spider_<db_id>` (`benchmarks.spider_pg`; one already loaded from
   the same file is re-used), migrated (`pgnl migrate`) and given its value index
   (`build_index`, as `pgnl index` does: a column already indexed with the same values is not
   embedded again, so an index already built costs one read of each column). Then a real
   `pgnl serve` subprocess in front of that server, per mode: PLM-only always (the proxy gets
   PGNL_LLM_BASE_URL="" whatever the environment or a pgnl.toml says), and LLM as well when
   PGNL_LLM_BASE_URL is set (the proxy inherits the environment: PGNL_LLM_MODEL,
   PGNL_LLM_API_KEY and the other [llm] settings). Each proxy first answers one warm-up question
   per database, not measured, so that loading the models and introspecting a schema are not
   charged to the first question (`--no-warmup` keeps them in).
2. Each dev question (dev.json's order; `--db` and `--limit` choose a subset), for each mode, on a
   psycopg connection to the proxy (autocommit, one per database, as the `postgres` role):
   `-- nl: <question>` for the rows (its time, measured on the client from sending the query to
   the last row, is the end-to-end latency), `-- nl show: <question>` for the chosen SQL, and
   `-- nl explain: <question>` for the trace (per-stage timings, the chosen candidate). A request
   that takes longer than `--timeout` seconds is cancelled and counts as a miss; its connection is
   replaced, and the proxy must still be alive (it is restarted, and the restart reported, if
   not). The gold query is transpiled to PostgreSQL (`spider_pg.to_postgres`) and run on a direct
   connection; a gold query that does not transpile or fails on PostgreSQL is listed, and that
   question is judged against the gold's rows from SQLite instead. Where both run, PostgreSQL's
   and SQLite's gold rows are compared too, and the questions where they differ are listed
   (ties under ORDER BY ... LIMIT, mostly): those are judged against PostgreSQL's.
3. Comparison: the rows of `-- nl:` against the gold's as multisets, or as sequences when the
   gold query has an outer ORDER BY; columns may come in another order (as in Spider's test-suite
   evaluation); numbers compare after rounding to 6 decimals, NUMERIC as float.
4. Difficulty: Spider's hardness of each gold query (`benchmarks.spider_hardness`).
5. Loss attribution, for each miss (the first that applies): timeout; no candidate ran (the
   proxy's NL001) or another error, by SQLSTATE; gold query outside what a sketch can represent
   (`model_export.sketch_labels`); the chosen candidate's sketch differs from the gold sketch in
   SELECT, FROM or KEYWORDS (which parts); the sketch is right but a slot is wrong (WHERE
   columns/operators, WHERE's OR, GROUP BY, HAVING, ORDER BY, LIMIT: the first that differs);
   sketch and slots right, and the gold has a set operation, or a nested subquery, or the result
   is empty, or other rows (literals, joins or the rest of the completion). The sketches are the
   shipped sketch model's over the database's introspected schema, computed here in-process with
   the settings the proxy reads ([sketch], [runtime], [pipeline] max_candidates); the gold
   sketch is labelled over the same schema. The chosen candidate is read from the explain trace
   (`chosen_candidate`), candidate n being the n-th ranked sketch. A second table sets chosen
   sketch right/wrong against result right/wrong, and counts the misses whose gold sketch was
   among the sketches tried (a selection loss rather than a sketch loss).

The report (Markdown) goes to stdout; progress, with the running accuracy, to stderr; `--show N`
prints N misses of each loss category to stderr, and `--details FILE` writes one JSON line per
question and mode. Floors, on the 972 executable dev questions in PLM-only mode: execution
accuracy >= 55%, p50 latency <= 200 ms (judged only on a full run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

import numpy
import psycopg
import sqlglot
from psycopg import conninfo
from sqlglot import exp
from sqlglot.errors import SqlglotError

from benchmarks.completion_oracle import Executor, same_rows
from benchmarks.proxy_overhead import free_port, read_line, workspace
from benchmarks.spider_hardness import LEVELS, Hardness, hardness
from benchmarks.spider_pg import (
    DEV_DATABASES,
    TranspileError,
    load_dev_databases,
    spider_dir,
    sqlite_path,
    to_postgres,
)
from model_export.sketch_labels import Unlabelable, label
from proxy import config
from proxy.embedded import EmbeddedError, EmbeddedPostgres
from proxy.migrate import MigrationError, migrate
from proxy.nl2sql.answer import TRACE_COLUMNS, TraceRow
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.pipeline import NO_ANSWER
from proxy.nl2sql.schema import Schema, introspect
from proxy.nl2sql.sketch import SET_OPERATIONS, Sketch
from proxy.nl2sql.sketcher import Sketcher, load_sketcher
from proxy.runtime import load_embedder
from proxy.valueindex import Embedder, ValueIndexError, build_index

REPO_ROOT = Path(__file__).resolve().parents[1]
ACCURACY_FLOOR = 0.55
P50_FLOOR_MS = 200.0
FULL_RUN = 972  # executable dev questions (wta_1's 62 have no database)
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "512MB",
    "log_min_messages": "warning",
}
STARTUP_TIMEOUT_S = 120.0
GOLD_TIMEOUT_S = 30.0
WARMUP_QUESTION = "how many rows are there?"
PLM_ONLY = "PLM-only"
LLM = "LLM"

Rows = list[tuple[Any, ...]]
_ROWS = re.compile(r"(\d+) rows?")


class BenchError(RuntimeError):
    """Something the benchmark needs did not work; the message says what."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the questions


@dataclass(frozen=True)
class Item:
    """One executable dev question with its gold query."""

    number: int  # position in dev.json, from 0
    db_id: str
    question: str
    gold_sqlite: str
    hardness: Hardness
    gold_pg: str | None  # None: it does not transpile
    transpile_error: str = ""


def dev_items(dbs: Sequence[str] | None, limit: int) -> tuple[list[Item], int, Counter[str]]:
    """The executable dev questions (those whose database Spider ships), filtered by `dbs` and
    cut to the first `limit` (0: all); also dev.json's size and the questions left out for a
    missing database, by db_id."""
    examples = json.loads((spider_dir() / "dev.json").read_text(encoding="utf-8"))
    missing: Counter[str] = Counter()
    items: list[Item] = []
    for number, example in enumerate(examples):
        db_id = example["db_id"]
        if not sqlite_path(db_id).exists():
            missing[db_id] += 1
            continue
        if dbs and db_id not in dbs:
            continue
        if limit and len(items) >= limit:
            continue
        gold_pg: str | None
        try:
            gold_pg, error = to_postgres(example["query"]), ""
        except TranspileError as exc:
            gold_pg, error = None, str(exc)
        items.append(
            Item(
                number,
                db_id,
                example["question"],
                example["query"],
                hardness(example["sql"]),
                gold_pg,
                error,
            )
        )
    return items, len(examples), missing


def gold_orders(gold_sqlite: str) -> bool:
    """Whether the gold query's outer query has an ORDER BY (then row order matters)."""
    try:
        tree = sqlglot.parse_one(gold_sqlite, read="sqlite")
    except SqlglotError:
        return "order by" in " ".join(gold_sqlite.lower().split())
    node: exp.Expr | None = tree
    if tree.args.get("order") is not None:
        return True
    while isinstance(node, exp.SetOperation | exp.Subquery | exp.Paren):
        node = node.this
    return isinstance(node, exp.Select) and node.args.get("order") is not None


# ---------------------------------------------------------------- comparing rows


def _canonical(value: object) -> object:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def canonical_rows(rows: Sequence[Sequence[object]]) -> Rows:
    """Rows with NUMERIC as float (so that PostgreSQL's numeric and SQLite's REAL compare)."""
    return [tuple(_canonical(value) for value in row) for row in rows]


def compare(gold: Rows, predicted: Rows, *, ordered: bool) -> tuple[bool, bool]:
    """(match with the columns in any order, match in the gold's column order); multisets of
    rows, or sequences when `ordered`. See `completion_oracle.same_rows`."""
    return same_rows(canonical_rows(gold), canonical_rows(predicted), ordered=ordered)


# ---------------------------------------------------------------- loss attribution

SKETCH_PARTS = ("SELECT", "FROM", "KEYWORDS")
SLOT_NAMES = ("WHERE", "WHERE OR", "GROUP BY", "HAVING", "ORDER BY", "LIMIT")
TIMEOUT = "timeout"
NO_CANDIDATE_RAN = f"no candidate ran ({NO_ANSWER})"
ANSWERED_SET_OPERATION = "sketch and slots right: set operation (its right side)"
ANSWERED_NESTED = "sketch and slots right: nested subquery"
ANSWERED_EMPTY = "sketch and slots right: empty result"
ANSWERED_WRONG = "sketch and slots right: other rows (literals, joins or the rest)"
COMPLETION_LOSSES = (ANSWERED_SET_OPERATION, ANSWERED_NESTED, ANSWERED_EMPTY, ANSWERED_WRONG)


def sketch_differences(gold: Sketch, predicted: Sketch) -> list[str]:
    """The parts (SELECT, FROM, KEYWORDS) in which `predicted` differs from `gold`."""
    pairs = (
        (gold.select, predicted.select),
        (gold.tables, predicted.tables),
        (gold.keywords, predicted.keywords),
    )
    return [name for name, (a, b) in zip(SKETCH_PARTS, pairs, strict=True) if a != b]


def slot_differences(gold: Sketch, predicted: Sketch) -> list[str]:
    """The slots in which `predicted` differs from `gold` (WHERE compared as a multiset)."""
    a, b = gold.slots, predicted.slots
    pairs = (
        (sorted(a.where), sorted(b.where)),
        (a.where_or and len(a.where) > 1, b.where_or and len(b.where) > 1),
        (a.group_by, b.group_by),
        (sorted(a.having), sorted(b.having)),
        (a.order_by, b.order_by),
        (a.limit, b.limit),
    )
    return [name for name, (x, y) in zip(SLOT_NAMES, pairs, strict=True) if x != y]


@dataclass(frozen=True)
class SketchView:
    """What the sketch stage did for one question, seen from the gold side."""

    gold: Sketch | None
    unlabelable: str  # why there is no gold sketch ("" when there is one)
    candidates: tuple[Sketch, ...]
    error: str = ""  # the in-process sketcher failed


def sketch_index(chosen: int | None, count: int) -> int:
    """The position in the ranked sketches of the pipeline's candidate number `chosen` (numbered
    from 1, best sketch first); the top sketch when the candidate is unknown."""
    return chosen - 1 if chosen is not None and 1 <= chosen <= count else 0


def loss(
    *,
    timed_out: bool,
    sqlstate: str,
    error: str,
    view: SketchView | None,
    chosen: int | None,
    predicted_rows: int,
) -> str:
    """Where a miss comes from (the first that applies; see the module docstring)."""
    if timed_out:
        return TIMEOUT
    if sqlstate == NO_ANSWER:
        return NO_CANDIDATE_RAN
    if error:
        return f"proxy error {sqlstate or error}"
    if view is None:
        return "not attributed (--no-attribution)"
    if view.error:
        return "not attributed: the sketcher failed here"
    if view.gold is None:
        return f"gold outside the sketch grammar ({view.unlabelable})"
    if not view.candidates:
        return "no sketch"
    predicted = view.candidates[sketch_index(chosen, len(view.candidates))]
    parts = sketch_differences(view.gold, predicted)
    if parts:
        return "sketch wrong: " + " + ".join(parts)
    slots = slot_differences(view.gold, predicted)
    if slots:
        return f"sketch right, slot wrong: {slots[0]}"
    if view.gold.keywords & set(SET_OPERATIONS):
        return ANSWERED_SET_OPERATION
    if "nested" in view.gold.keywords:
        return ANSWERED_NESTED
    return ANSWERED_EMPTY if predicted_rows == 0 else ANSWERED_WRONG


def stage_of(category: str) -> str:
    """The pipeline stage a loss category is charged to."""
    if category.startswith("sketch wrong"):
        return "sketch (SELECT/FROM/KEYWORDS)"
    if category.startswith("sketch right, slot wrong"):
        return "sketch slots (PLM completion's inputs)"
    if category in COMPLETION_LOSSES:
        return "completion and calibration (sketch right)"
    if category in (TIMEOUT, NO_CANDIDATE_RAN) or category.startswith("proxy error"):
        return "no answer (error or timeout)"
    return "not attributable"


def chosen_candidate(trace: Sequence[TraceRow]) -> int | None:
    """The number of the candidate the pipeline chose, read from its trace (None: none ran).

    The pipeline tries candidates in turn and stops at the first whose result has values
    ("answered"), so when the last candidate traced ran and returned rows, it is the one; else
    ("fallback") it is the first candidate that ran. A candidate ran when its `check` (or, after
    calibration, `execute`) row says "N rows"; the last such row gives its row count. (A
    non-empty result of NULLs only is taken for an answer here: rare, and then misread.)
    """
    rows: dict[int, int | None] = {}  # candidate -> rows of its last successful run
    for row in trace:
        if row.candidate is None:
            continue
        rows.setdefault(row.candidate, None)
        if row.stage in ("check", "execute"):
            count = _ROWS.fullmatch(row.outcome.strip())
            if count is not None:
                rows[row.candidate] = int(count.group(1))
    if not rows:
        return None
    last = list(rows)[-1]
    if rows[last]:
        return last
    return next((number for number, count in rows.items() if count is not None), None)


def stage_times(trace: Sequence[TraceRow]) -> dict[str, float]:
    """Milliseconds spent in each stage of one answer, summed over its candidates."""
    times: dict[str, float] = defaultdict(float)
    for row in trace:
        times[row.stage] += row.ms
    return dict(times)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def trace_rows(rows: Sequence[Sequence[Any]]) -> list[TraceRow]:
    """`-- nl explain:` rows (TRACE_COLUMNS, typed or as text) as TraceRows."""
    out: list[TraceRow] = []
    for row in rows:
        stage, candidate, score, calibration, outcome, ms = row[: len(TRACE_COLUMNS)]
        out.append(
            TraceRow(
                str(stage),
                None if _blank(candidate) else int(candidate),
                None if _blank(score) else float(score),
                "" if calibration is None else str(calibration),
                "" if outcome is None else str(outcome),
                0.0 if _blank(ms) else float(ms),
            )
        )
    return out


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(numpy.percentile(numpy.asarray(values, dtype=numpy.float64), q))


# ---------------------------------------------------------------- PostgreSQL and the proxy


def start_postgres(base: Path, stack: contextlib.ExitStack) -> str:
    """A throwaway embedded server; its admin DSN."""
    server = EmbeddedPostgres.throwaway(base, f"pgnl-exec-{os.getpid()}", free_port())
    stack.callback(server.drop)
    progress(f"starting the embedded PostgreSQL on 127.0.0.1:{server.port}")
    server.start(SERVER_SETTINGS)
    return server.dsn()


def prepare_databases(admin_dsn: str, db_ids: Sequence[str]) -> dict[str, str]:
    """Load, migrate and index each database; db_id -> DSN."""
    started = time.perf_counter()
    dsns = load_dev_databases(admin_dsn, db_ids, progress=lambda line: progress("  " + line))
    progress(f"{len(dsns)} databases ready in {time.perf_counter() - started:.1f} s; indexing")
    embedder: Embedder | None = None
    for number, (db_id, dsn) in enumerate(dsns.items(), 1):
        with psycopg.connect(dsn, autocommit=True) as conn:
            applied = migrate(conn)
            if embedder is None:
                embedder = load_embedder()
            began = time.perf_counter()
            report = build_index(conn, embedder, progress=False)
        progress(
            f"  [{number}/{len(dsns)}] {db_id}: {len(applied)} migrations applied; value index "
            f"{len(report.indexed)} columns ({len(report.added)} new, {len(report.changed)} "
            f"changed, {len(report.unchanged)} unchanged), {report.values_embedded:,} values "
            f"embedded, {time.perf_counter() - began:.1f} s"
        )
    return dsns


@dataclass
class ProxyProcess:
    """A `pgnl serve` started here, its log in a file."""

    mode: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    restarts: int = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def internal_errors(self) -> list[str]:
        """Log lines that mean the proxy itself failed (as tests/fix_proxy.py judges them)."""
        if not self.log.exists():
            return []
        lines = self.log.read_text(errors="replace").splitlines()
        return [line for line in lines if "Traceback" in line or " ERROR " in line]


def mode_environment(mode: str) -> dict[str, str]:
    """The proxy's environment for a mode: PLM-only forces no LLM."""
    env = dict(os.environ)
    if mode == PLM_ONLY:
        env["PGNL_LLM_BASE_URL"] = ""
    return env


def start_proxy(mode: str, upstream: str, base: Path, log_name: str) -> ProxyProcess:
    log = base / log_name
    argv = [sys.executable, "-m", "proxy", "--log-level", "warning", "serve"]
    argv += ["--listen", "127.0.0.1:0", "--upstream", upstream]
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=REPO_ROOT,
            env=mode_environment(mode),
            start_new_session=True,  # Ctrl-C reaches this program, which then stops pgnl
        )
    assert process.stdout is not None
    line = read_line(process.stdout, STARTUP_TIMEOUT_S)
    if not line.startswith("listening: "):
        process.kill()
        process.wait()
        tail = log.read_text(errors="replace")[-2000:]
        raise BenchError(f"pgnl serve ({mode}) did not start ({line!r}); its log:\n{tail}")
    port = int(line.rpartition(":")[2])
    progress(f"pgnl serve ({mode}) listening on 127.0.0.1:{port}")
    return ProxyProcess(mode, process, port, log)


def upstream_of(admin_dsn: str) -> str:
    params = conninfo.conninfo_to_dict(admin_dsn)
    host = str(params.get("host") or "127.0.0.1")
    port = str(params.get("port") or 5432)
    return f"postgresql://{host}:{port}"


def through_proxy(dsn: str, port: int) -> str:
    """`dsn` (a database's direct DSN) with the proxy's address instead of the server's."""
    return conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(port), sslmode="disable")


# ---------------------------------------------------------------- asking


@dataclass
class Reply:
    """One request's result: rows, or why there are none."""

    rows: Rows = field(default_factory=list)
    ms: float = 0.0
    error: str = ""  # "SQLSTATE: message"
    sqlstate: str = ""
    timed_out: bool = False
    notices: list[str] = field(default_factory=list)


class Client:
    """psycopg connections to one proxy, one per database, as a client application has them."""

    def __init__(self, proxy: ProxyProcess, dsns: dict[str, str], timeout_s: float) -> None:
        self.proxy = proxy
        self.dsns = dsns
        self.timeout_s = timeout_s
        self.connections: dict[str, psycopg.AsyncConnection[Any]] = {}
        self.notices: list[str] = []

    async def _connection(self, db_id: str) -> psycopg.AsyncConnection[Any]:
        conn = self.connections.get(db_id)
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                through_proxy(self.dsns[db_id], self.proxy.port), autocommit=True
            )
            conn.add_notice_handler(lambda diag: self.notices.append(diag.message_primary or ""))
            self.connections[db_id] = conn
        return conn

    async def _drop(self, db_id: str) -> None:
        conn = self.connections.pop(db_id, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)

    async def request(self, db_id: str, text: str) -> Reply:
        reply = Reply()
        try:
            conn = await self._connection(db_id)
        except psycopg.Error as exc:
            reply.error = f"connect: {exc}".splitlines()[0]
            return reply
        self.notices = reply.notices

        async def run() -> Rows:
            async with conn.cursor() as cur:
                await cur.execute(text.encode(), prepare=False)
                return list(await cur.fetchall()) if cur.description is not None else []

        started = time.perf_counter()
        try:
            reply.rows = await asyncio.wait_for(run(), self.timeout_s)
        except TimeoutError:
            reply.timed_out = True
            await self._drop(db_id)
        except psycopg.Error as exc:
            reply.sqlstate = exc.sqlstate or ""
            message = (exc.diag.message_primary if exc.diag else None) or str(exc)
            reply.error = f"{reply.sqlstate or '-----'}: {message.splitlines()[0]}"
            if conn.closed or conn.broken:
                await self._drop(db_id)
        reply.ms = (time.perf_counter() - started) * 1000.0
        return reply

    async def close(self) -> None:
        for db_id in list(self.connections):
            await self._drop(db_id)


@dataclass
class Asked:
    """One mode's answer to one question, judged."""

    rows: int = 0  # rows returned by `-- nl:`
    latency_ms: float | None = None
    error: str = ""
    sqlstate: str = ""
    timed_out: bool = False
    sql: str = ""
    notices: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
    chosen: int | None = None
    match: bool = False
    same_order: bool = False
    loss: str = ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def ask(client: Client, item: Item, gold: Rows, ordered: bool) -> Asked:
    asked = Asked()
    run = await client.request(item.db_id, f"-- nl: {item.question}")
    asked.timed_out, asked.notices = run.timed_out, run.notices
    if run.timed_out:
        asked.error = f"timeout after {client.timeout_s:g} s"
    elif run.error:
        asked.error, asked.sqlstate = run.error, run.sqlstate
    else:
        asked.latency_ms = run.ms
        asked.rows = len(run.rows)
        asked.match, asked.same_order = compare(gold, run.rows, ordered=ordered)
    show = await client.request(item.db_id, f"-- nl show: {item.question}")
    if not show.error and not show.timed_out and show.rows:
        asked.sql = _one_line(str(show.rows[0][0]))
    explain = await client.request(item.db_id, f"-- nl explain: {item.question}")
    if not explain.error and not explain.timed_out:
        trace = trace_rows(explain.rows)
        asked.stages = stage_times(trace)
        asked.chosen = chosen_candidate(trace)
    return asked


# ---------------------------------------------------------------- gold rows and sketches


class Gold:
    """The gold rows of each question: the PostgreSQL translation run on a direct connection,
    or SQLite's rows when there is none or it fails (recorded in `failures`). Where both run,
    their rows are compared too (`disagreements`: what the loading and the transpilation change,
    which a pipeline on PostgreSQL cannot be asked to reproduce)."""

    def __init__(self, dsns: dict[str, str]) -> None:
        self.dsns = dsns
        self.connections: dict[str, psycopg.Connection[Any]] = {}
        self.sqlite = Executor(spider_dir(), GOLD_TIMEOUT_S)
        self.failures: list[tuple[Item, str]] = []
        self.disagreements: list[Item] = []

    def _postgres(self, item: Item, query: str) -> Rows:
        conn = self.connections.get(item.db_id)
        if conn is None:
            conn = psycopg.connect(self.dsns[item.db_id], autocommit=True)
            conn.execute(f"SET statement_timeout = {int(GOLD_TIMEOUT_S * 1000)}")
            self.connections[item.db_id] = conn
        return list(conn.execute(query.encode()).fetchall())

    def rows(self, item: Item, *, ordered: bool) -> Rows | None:
        try:
            sqlite_rows: Rows | None = self.sqlite.run(item.db_id, item.gold_sqlite)
            sqlite_error = ""
        except sqlite3.Error as exc:
            sqlite_rows, sqlite_error = None, str(exc)
        if item.gold_pg is not None:
            try:
                rows = self._postgres(item, item.gold_pg)
            except psycopg.Error as exc:
                message = (exc.diag.message_primary if exc.diag else None) or str(exc)
                why = f"fails on PostgreSQL: {exc.sqlstate}: {message.splitlines()[0]}"
            else:
                if sqlite_rows is not None and not compare(sqlite_rows, rows, ordered=ordered)[1]:
                    self.disagreements.append(item)
                return rows
        else:
            why = f"does not transpile: {item.transpile_error.splitlines()[0]}"
        if sqlite_rows is None:
            self.failures.append((item, f"{why}; fails on SQLite too ({sqlite_error}): not judged"))
            return None
        self.failures.append((item, f"{why}; judged against SQLite's rows"))
        return sqlite_rows

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.sqlite.close()


class Sketches:
    """The sketch stage, in-process, over each database's introspected schema (as the proxy
    sees it), and the gold sketch over the same schema."""

    def __init__(self, dsns: dict[str, str]) -> None:
        self.dsns = dsns
        settings = config.load()  # as the proxy reads them (file and environment)
        self.sketcher: Sketcher = load_sketcher(settings.runtime, settings.sketch)
        self.tried = settings.pipeline.max_candidates  # the sketches the pipeline tries
        self.schemas: dict[str, Schema] = {}

    def schema(self, db_id: str) -> Schema:
        schema = self.schemas.get(db_id)
        if schema is None:
            with psycopg.connect(self.dsns[db_id], autocommit=True) as conn:
                schema = introspect(PsycopgDatabase(conn), name=db_id)
            self.schemas[db_id] = schema
        return schema

    def view(self, item: Item) -> SketchView:
        schema = self.schema(item.db_id)
        gold: Sketch | None = None
        unlabelable = ""
        try:
            gold = label(item.gold_sqlite, schema)
        except Unlabelable as exc:
            unlabelable = exc.reason
        try:
            candidates = tuple(self.sketcher.sketch(item.question, schema)[: self.tried])
        except ValueError as exc:
            return SketchView(gold, unlabelable, (), error=str(exc))
        return SketchView(gold, unlabelable, candidates)


# ---------------------------------------------------------------- the run


@dataclass
class Mode:
    name: str
    proxy: ProxyProcess
    client: Client
    results: dict[int, Asked] = field(default_factory=dict)
    description: str = ""

    def stop(self) -> None:
        self.proxy.stop()


@dataclass
class Run:
    items: list[Item]
    dev_size: int
    missing: Counter[str]
    modes: list[Mode]
    gold: Gold
    views: dict[int, SketchView] = field(default_factory=dict)
    judged: list[Item] = field(default_factory=list)
    blank_gold: set[int] = field(default_factory=set)  # numbers of items; see `blank_result`
    seconds: float = 0.0
    warmup: bool = True
    timeout_s: float = 30.0


async def restart_if_dead(mode: Mode, upstream: str, base: Path) -> None:
    if mode.proxy.alive():
        return
    progress(f"pgnl serve ({mode.name}) died (status {mode.proxy.process.returncode}); restarting")
    await mode.client.close()
    restarts = mode.proxy.restarts + 1
    mode.proxy.stop()
    mode.proxy = start_proxy(mode.name, upstream, base, mode.proxy.log.name)
    mode.proxy.restarts = restarts
    mode.client.proxy = mode.proxy


async def warm_up(modes: Sequence[Mode], db_ids: Sequence[str]) -> None:
    for mode in modes:
        started = time.perf_counter()
        for db_id in db_ids:
            await mode.client.request(db_id, f"-- nl: {WARMUP_QUESTION}")
        progress(
            f"warm-up ({mode.name}): one question on each of {len(db_ids)} databases, "
            f"{time.perf_counter() - started:.1f} s"
        )


async def ask_all(run: Run, sketches: Sketches | None, upstream: str, base: Path) -> None:
    started = time.perf_counter()
    total = len(run.items)
    for position, item in enumerate(run.items, 1):
        ordered = gold_orders(item.gold_sqlite)
        gold = run.gold.rows(item, ordered=ordered)
        if gold is None:
            continue
        run.judged.append(item)
        if blank_result(gold):
            run.blank_gold.add(item.number)
        view = sketches.view(item) if sketches is not None else None
        if view is not None:
            run.views[item.number] = view
        for mode in run.modes:
            asked = await ask(mode.client, item, gold, ordered)
            if not asked.match:
                asked.loss = loss(
                    timed_out=asked.timed_out,
                    sqlstate=asked.sqlstate,
                    error=asked.error,
                    view=view,
                    chosen=asked.chosen,
                    predicted_rows=asked.rows,
                )
            mode.results[item.number] = asked
            if asked.timed_out or asked.error:
                await restart_if_dead(mode, upstream, base)
        if position % 10 == 0 or position == total:
            parts = []
            for mode in run.modes:
                hits = sum(r.match for r in mode.results.values())
                latencies = [r.latency_ms for r in mode.results.values() if r.latency_ms]
                parts.append(
                    f"{mode.name} {hits}/{len(mode.results)} "
                    f"({hits / max(1, len(mode.results)):.1%}), "
                    f"p50 {percentile(latencies, 50):.0f} ms"
                )
            elapsed = time.perf_counter() - started
            progress(f"[{position}/{total}] {'; '.join(parts)}; {elapsed:.0f} s")
    run.seconds = time.perf_counter() - started


# ---------------------------------------------------------------- the report


def blank_result(rows: Rows) -> bool:
    """A result that says nothing: no rows, or only 0 and NULL. A wrong query returns one
    easily (a join whose keys do not match in the data counts 0), so the report shows how many
    of the right answers are of this kind."""
    return all(value in (0, None) for row in rows for value in row)


def _pct(part: int, whole: int) -> str:
    return f"{part} ({part / whole:.1%})" if whole else "0"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(run: Run) -> str:
    judged = run.judged
    full = len(judged) == FULL_RUN
    lines = ["## Execution accuracy on Spider dev (benchmarks.execution_accuracy)", ""]
    skipped = sum(run.missing.values())
    lines.append(
        f"{run.dev_size} dev questions; {skipped} have no database in Spider's release "
        f"({', '.join(f'{db} {n}' for db, n in sorted(run.missing.items())) or 'none'}); "
        f"{len(run.items)} executable questions asked"
        + ("" if full else f" (a subset: a full run asks {FULL_RUN})")
        + f", {len(judged)} judged. Client timeout {run.timeout_s:g} s a request; "
        + (
            "one warm-up question per database first, not measured."
            if run.warmup
            else "no warm-up."
        )
    )
    lines.append("")
    for mode in run.modes:
        lines.append(f"- **{mode.name}**: {mode.description}")
    lines.append("")

    header = "| hardness | questions | " + " | ".join(m.name + " EX" for m in run.modes) + " |"
    lines += [header, "|---|---|" + "---|" * len(run.modes)]
    for level in (*LEVELS, "all"):
        chosen = [i for i in judged if level in ("all", i.hardness)]
        cells = []
        for mode in run.modes:
            hits = sum(mode.results[i.number].match for i in chosen)
            cell = _pct(hits, len(chosen))
            cells.append(f"**{cell}**" if level == "all" else cell)
        lines.append(f"| {level} | {len(chosen)} | " + " | ".join(cells) + " |")
    same_order = [
        _pct(sum(mode.results[i.number].same_order for i in judged), len(judged))
        for mode in run.modes
    ]
    lines.append(
        "| all, in the gold's column order | " + f"{len(judged)} | " + " | ".join(same_order) + " |"
    )
    blank = [i for i in judged if i.number in run.blank_gold]
    lines.append(
        "| all, gold result empty or only 0/NULL | "
        + f"{len(blank)} | "
        + " | ".join(
            _pct(sum(m.results[i.number].match for i in blank), len(blank)) for m in run.modes
        )
        + " |"
    )
    lines.append("")

    lines += ["### End-to-end latency of `-- nl:` (client side, answered requests)", ""]
    lines += [
        "| mode | answered | p50 ms | p95 ms | mean ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for mode in run.modes:
        values = [r.latency_ms for r in mode.results.values() if r.latency_ms is not None]
        lines.append(
            f"| {mode.name} | {len(values)} | {percentile(values, 50):.0f} | "
            f"{percentile(values, 95):.0f} | {numpy.mean(values) if values else float('nan'):.0f} "
            f"| {max(values, default=float('nan')):.0f} |"
        )
    lines.append("")

    for mode in run.modes:
        per_stage: dict[str, list[float]] = defaultdict(list)
        traced = 0
        for result in mode.results.values():
            if result.stages:
                traced += 1
            for stage, ms in result.stages.items():
                per_stage[stage].append(ms)
        lines += [
            f"### Per-stage time, {mode.name} (from `-- nl explain:`, {traced} traces; a stage's "
            "time summed over its candidates)",
            "",
            "| stage | questions | p50 ms | mean ms | p95 ms |",
            "|---|---|---|---|---|",
        ]
        for stage, values in per_stage.items():
            lines.append(
                f"| {stage} | {len(values)} | {percentile(values, 50):.1f} | "
                f"{numpy.mean(values):.1f} | {percentile(values, 95):.1f} |"
            )
        lines.append("")

    for mode in run.modes:
        misses = [mode.results[i.number] for i in judged if not mode.results[i.number].match]
        categories = Counter(r.loss for r in misses)
        stages = Counter(stage_of(r.loss) for r in misses)
        lines += [
            f"### Where the misses come from, {mode.name} ({len(misses)} misses)",
            "",
            "| stage charged | misses | % of misses |",
            "|---|---|---|",
        ]
        for stage, count in stages.most_common():
            lines.append(f"| {stage} | {count} | {count / len(misses):.1%} |")
        lines += ["", "| category | misses |", "|---|---|"]
        for category, count in categories.most_common():
            lines.append(f"| {category} | {count} |")
        lines.append("")
        if run.views:
            lines += _sketch_table(run, mode)

    for mode in run.modes:
        outcomes = Counter(
            "fallback notice" if any("fall" in n.lower() for n in r.notices) else "no fallback"
            for r in mode.results.values()
            if not r.error
        )
        if outcomes.get("fallback notice"):
            lines.append(
                f"{mode.name}: {outcomes['fallback notice']} answers came with a fall-back "
                "notice (no candidate returned a non-empty result)."
            )
    lines += ["", "### Gold queries", ""]
    untranspiled = [i for i in run.items if i.gold_pg is None]
    lines.append(
        f"{len(untranspiled)} of {len(run.items)} gold queries do not transpile to PostgreSQL"
        + (":" if untranspiled else ".")
    )
    for item in untranspiled:
        lines.append(
            f"- #{item.number} {item.db_id}: `{item.gold_sqlite}` ({item.transpile_error})"
        )
    failing = [(i, why) for i, why in run.gold.failures if i.gold_pg is not None]
    lines.append("")
    lines.append(
        f"{len(failing)} transpiled gold queries fail on PostgreSQL" + (":" if failing else ".")
    )
    for item, why in failing:
        lines.append(f"- #{item.number} {item.db_id}: `{item.gold_sqlite}`: {why}")
    lines.append("")
    disagreeing = run.gold.disagreements
    lines.append(
        f"{len(disagreeing)} gold queries return other rows on PostgreSQL than on SQLite (judged "
        "against PostgreSQL's)" + (":" if disagreeing else ".")
    )
    for item in disagreeing:
        lines.append(f"- #{item.number} {item.db_id}: `{item.gold_sqlite}`")
    lines.append("")

    lines += ["### Proxy health", ""]
    for mode in run.modes:
        errors = mode.proxy.internal_errors()
        timeouts = sum(r.timed_out for r in mode.results.values())
        lines.append(
            f"- {mode.name}: {timeouts} timeouts, {mode.proxy.restarts} restarts, "
            f"{len(errors)} internal errors logged"
            + (f" (first: {errors[0].strip()[:200]})" if errors else "")
            + f"; alive at the end: {mode.proxy.alive()}"
        )
    lines.append("")

    plm = next((m for m in run.modes if m.name == PLM_ONLY), None)
    if plm is not None and judged:
        hits = sum(plm.results[i.number].match for i in judged)
        accuracy = hits / len(judged)
        values = [r.latency_ms for r in plm.results.values() if r.latency_ms is not None]
        p50 = percentile(values, 50)
        scope = "" if full else f" (on {len(judged)} questions, not the {FULL_RUN}: indicative)"
        lines.append(
            f"Floors, PLM-only{scope}: execution accuracy {accuracy:.1%} >= "
            f"{ACCURACY_FLOOR:.0%}: {_verdict(accuracy >= ACCURACY_FLOOR)}; p50 latency "
            f"{p50:.0f} ms <= {P50_FLOOR_MS:.0f} ms: {_verdict(p50 <= P50_FLOOR_MS)}"
        )
    lines.append(f"({run.seconds:.0f} s asking)")
    return "\n".join(lines)


def _sketch_table(run: Run, mode: Mode) -> list[str]:
    """Chosen sketch right or wrong against result right or wrong, and, for misses whose sketch
    is wrong, whether the gold sketch was among the candidates at all."""
    table: Counter[tuple[str, bool]] = Counter()
    among = 0
    sketch_misses = 0
    for item in run.judged:
        view = run.views.get(item.number)
        asked = mode.results[item.number]
        if view is None or view.gold is None or not view.candidates:
            key = "no gold sketch or no candidate"
        else:
            chosen = view.candidates[sketch_index(asked.chosen, len(view.candidates))]
            right = not sketch_differences(view.gold, chosen)
            key = "chosen sketch right" if right else "chosen sketch wrong"
            if not right and not asked.match:
                sketch_misses += 1
                among += any(
                    not sketch_differences(view.gold, candidate) for candidate in view.candidates
                )
        table[(key, asked.match)] += 1
    lines = ["| sketch (SELECT, FROM, KEYWORDS) | result right | result wrong |", "|---|---|---|"]
    for key in ("chosen sketch right", "chosen sketch wrong", "no gold sketch or no candidate"):
        lines.append(f"| {key} | {table[(key, True)]} | {table[(key, False)]} |")
    lines += [
        "",
        f"Of the {sketch_misses} misses with a wrong chosen sketch, the gold sketch was among "
        f"the sketches the pipeline tries ([pipeline] max_candidates) in {among}.",
        "",
    ]
    return lines


def show_examples(run: Run, count: int) -> None:
    for mode in run.modes:
        shown: Counter[str] = Counter()
        for item in run.judged:
            asked = mode.results[item.number]
            if asked.match or shown[asked.loss] >= count:
                continue
            shown[asked.loss] += 1
            progress(
                f"--- {mode.name}: {asked.loss}\n  #{item.number} [{item.hardness}] {item.db_id}: "
                f"{item.question}\n    gold: {item.gold_pg or item.gold_sqlite}\n"
                f"    sql:  {asked.sql or '(none)'}\n    error: {asked.error or '-'}; "
                f"{asked.rows} rows; chosen candidate {asked.chosen}"
            )


def write_details(run: Run, path: Path) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for item in run.judged:
            for mode in run.modes:
                asked = mode.results[item.number]
                record = {
                    "number": item.number,
                    "db_id": item.db_id,
                    "question": item.question,
                    "hardness": item.hardness,
                    "gold": item.gold_pg or item.gold_sqlite,
                    "mode": mode.name,
                    "sql": asked.sql,
                    "match": asked.match,
                    "same_order": asked.same_order,
                    "rows": asked.rows,
                    "latency_ms": asked.latency_ms,
                    "error": asked.error,
                    "loss": asked.loss,
                    "chosen": asked.chosen,
                    "stages": asked.stages,
                    "notices": asked.notices,
                }
                handle.write(json.dumps(record, default=str) + "\n")


# ---------------------------------------------------------------- main


def mode_names() -> list[str]:
    return [PLM_ONLY] + ([LLM] if os.environ.get("PGNL_LLM_BASE_URL") else [])


def describe(mode: str) -> str:
    if mode == PLM_ONLY:
        return 'no LLM: queries completed from the sketch model\'s slots (PGNL_LLM_BASE_URL="")'
    settings = config.load().llm
    return f"LLM {settings.model or '(no model named)'} at {settings.base_url}"


async def run_benchmark(args: argparse.Namespace, base: Path, stack: contextlib.ExitStack) -> Run:
    items, dev_size, missing = dev_items(args.db, args.limit)
    if not items:
        raise BenchError("no dev question chosen (check --db and --limit)")
    admin_dsn = args.dsn or start_postgres(base, stack)
    db_ids = sorted({item.db_id for item in items}, key=DEV_DATABASES.index)
    dsns = prepare_databases(admin_dsn, db_ids)
    gold = Gold(dsns)
    stack.callback(gold.close)
    upstream = upstream_of(admin_dsn)
    modes: list[Mode] = []
    for name in mode_names():
        proxy = start_proxy(name, upstream, base, f"pgnl-{name.lower()}.log")
        mode = Mode(name, proxy, Client(proxy, dsns, args.timeout), description=describe(name))
        stack.callback(mode.stop)  # the proxy of the moment: a restart replaces it
        modes.append(mode)
    sketches = None
    if not args.no_attribution:
        sketches = Sketches(dsns)
        progress(f"in-process sketcher on {sketches.sketcher.provider}, for the loss attribution")
    if not args.no_warmup:
        await warm_up(modes, db_ids)
    run = Run(items, dev_size, missing, modes, gold, warmup=not args.no_warmup)
    run.timeout_s = args.timeout
    try:
        await ask_all(run, sketches, upstream, base)
    finally:
        for mode in modes:
            await mode.client.close()
    return run


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.execution_accuracy",
        description="Execution accuracy on Spider dev through a real pgnl serve.",
    )
    parser.add_argument(
        "--dsn",
        help="admin DSN of a PostgreSQL server with pgvector (default: a throwaway embedded one)",
    )
    parser.add_argument(
        "--db",
        action="append",
        choices=DEV_DATABASES,
        metavar="DB_ID",
        help="only this dev database's questions (repeatable)",
    )
    parser.add_argument("--limit", type=int, default=0, help="the first N questions (0: all)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a request (30)")
    parser.add_argument("--show", type=int, default=0, help="misses of each category (stderr)")
    parser.add_argument("--details", type=Path, help="one JSON line per question and mode")
    parser.add_argument(
        "--no-attribution",
        action="store_true",
        help="no in-process sketches, so no loss attribution",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="measure the first question of each database cold"
    )
    args = parser.parse_args(argv)
    if args.limit < 0 or args.timeout <= 0:
        parser.error("--limit must be >= 0 and --timeout > 0")
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # clean up on kill as on Ctrl-C
    try:
        with workspace() as base, contextlib.ExitStack() as stack:
            run = asyncio.run(run_benchmark(args, base, stack))
            if args.show:
                show_examples(run, args.show)
            if args.details:
                write_details(run, args.details)
            print(report(run), flush=True)
    except KeyboardInterrupt:
        progress("interrupted; what this run started has been stopped")
        return 130
    except (
        BenchError,
        EmbeddedError,
        MigrationError,
        OSError,
        psycopg.Error,
        ValueIndexError,
    ) as exc:
        progress(f"benchmark failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
