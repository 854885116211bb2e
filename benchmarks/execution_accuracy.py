"""Execution accuracy on Spider dev, asked through a real `pgnl serve` as a client would ask it.

    python -m benchmarks.execution_accuracy [--dsn ADMIN_DSN] [--db DB_ID ...]
        [--limit N | --sample N [--seed S] | --numbers N,N,...] [--llm MODEL ...]
        [--modes plm,alone,full,url] [--checkpoint FILE] [--timeout 30] [--llm-timeout 600]
        [--show N] [--details results.jsonl] [--no-attribution] [--no-warmup] [--no-query-log]

1. Set-up. PostgreSQL: a throwaway embedded server (pgvector included) started for this run and
   removed at its end, or the server `--dsn` names (an admin DSN; what this run loads there stays,
   so a second run re-uses it). Each Spider dev database that the chosen questions need is loaded
   into a database of its own, `spider_<db_id>` (`benchmarks.spider_pg`; one already loaded from
   the same file is re-used), migrated (`pgnl migrate`) and given its value index
   (`build_index`, as `pgnl index` does: a column already indexed with the same values is not
   embedded again, so an index already built costs one read of each column). Then, per mode, a
   real `pgnl serve` subprocess in front of that server, with this program's environment and the
   mode's settings on top (`mode_environment`; `--modes` chooses among the kinds, all by default):
   - plm, "PLM-only": PGNL_LLM_PROVIDER=none and PGNL_LLM_BASE_URL="", whatever the environment
     or a pgnl.toml says (else `auto` would pick up the embedded LLM where it is installed);
   - url, "LLM", only when PGNL_LLM_BASE_URL is set: PGNL_LLM_PROVIDER=openai, with
     PGNL_LLM_MODEL, PGNL_LLM_API_KEY and the other [llm] settings of the environment;
   - for each `--llm MODEL` (a packaged model, qwen2.5-coder-0.5b or qwen2.5-coder-1.5b, given to
     the proxy as PGNL_LLM_EMBEDDED_MODEL; or a .gguf file, as PGNL_LLM_MODEL_PATH), the embedded
     LLM (PGNL_LLM_PROVIDER=embedded: the proxy runs llama.cpp's server as a child process) twice:
     alone, "LLM alone MODEL": the LLM's own query only, written from the question and the schema
     without a sketch (the pipeline's unguided candidate, number 0): PGNL_PIPELINE_MAX_CANDIDATES=0
     (no sketch is tried, so no PLM-only candidate either), PGNL_LLM_UNGUIDED=true,
     PGNL_LLM_SELECTION=first, PGNL_PIPELINE_FEEDBACK_ROUNDS=0 and PGNL_CALIBRATION_THRESHOLD=2
     (no similarity reaches 2, so calibration corrects no literal and asks the LLM for no
     rewrite: [calibration] has no switch of its own, and its look-ups still run, in the trace's
     calibrate stage);
     full, "full MODEL": the whole pipeline with the [pipeline] and [llm] settings of the
     environment (the defaults unless PGNL_* variables say otherwise; the report's mode line
     gives them): by default [llm] selection llm-first, the sketch models' answer, then the
     LLM's own query with the values of that answer's columns, corrected and calibrated, the
     answer when it returns values; PGNL_LLM_SELECTION=first measures ZeroNL2SQL's order (the
     LLM completing the best [llm] max_completions sketches, then its own query, then PLM-only
     completion for the other sketches, the first that passes the checks).
   A mode's proxy starts when the mode has a first question to ask (never, when a checkpoint
   holds all of them), and first answers warm-up questions, not measured: PLM-only and LLM, one
   per database, so that loading the models and introspecting a schema are not charged to the
   first question; an embedded mode one, on the first database (it loads the pipeline and starts
   the LLM's server, which is then checked to be running: a proxy whose LLM did not start would
   silently answer from the sketch models alone), since each further one costs seconds of LLM
   time against the tens of milliseconds a database's first schema read adds to its first
   question. `--no-warmup` keeps them all in (an embedded mode's first question then also pays
   for starting the LLM).
2. Each dev question (dev.json's order; `--db` and `--limit` choose a subset, or `--sample N`
   draws N of the executable questions (of `--db`'s databases) at random with `--seed S` (0),
   reproducibly, and asks them in dev.json's order: better for a slow LLM run than the first N,
   since dev.json is ordered by database), for each mode, on a psycopg connection to the proxy
   (autocommit, one per database, as the `postgres` role): `-- nl: <question>` for the rows (its
   time, measured on the client from sending the query to the last row, is the end-to-end
   latency), then, on the same connection, the record of that answer that the proxy wrote in
   nl.query_log (`LOG_QUERY`, plain SQL through the proxy: the proxy writes the row before it
   tells the client it is ready for the next query, and the postgres role reads every row): the
   chosen SQL, the trace (the chosen candidate, the LLM's tokens) and timings_ms (per-stage
   timings). Where the latest row is not that answer's (a database without the table), or with
   `--no-query-log`, `-- nl show: <question>` and `-- nl explain: <question>` are asked instead:
   two more runs of the pipeline, seconds each with an LLM (the report counts the questions read
   each way). A request that takes longer than its mode's timeout is cancelled and counts as a
   miss (nothing more is asked for it); its connection is replaced, and the proxy must still be
   alive (it is restarted, and the restart reported, if not). Timeouts: `--timeout` (30 s) for
   PLM-only and LLM; `--llm-timeout` (600 s) for the embedded modes, whose one question may hold
   about ten LLM requests, each bounded by the proxy's own [llm] deadline_s (60 s): up to
   max_completions (3) sketch completions and the LLM's own query, each with a correction per
   feedback round and a rewrite after calibration (on a CPU such a question can take minutes:
   docs/measurements.md). The LLM timeout is there for a proxy that hangs, not to cut slow
   questions short (a miss by timeout is no measure of the LLM's accuracy); lower it on a GPU
   build. (A question cancelled
   by the client goes on in the proxy until its pipeline's next query, so an LLM request of it
   may still delay the next.)
   The gold query is transpiled to PostgreSQL (`spider_pg.to_postgres`) and run on a direct
   connection; a gold query that does not transpile or fails on PostgreSQL is listed, and that
   question is judged against the gold's rows from SQLite instead. Where both run, PostgreSQL's
   and SQLite's gold rows are compared too, and the questions where they differ are listed
   (ties under ORDER BY ... LIMIT, mostly): those are judged against PostgreSQL's.
3. Comparison: the rows of `-- nl:` against the gold's as multisets, or as sequences when the
   gold query has an outer ORDER BY; columns may come in another order (as in Spider's test-suite
   evaluation); numbers compare after rounding to 6 decimals, NUMERIC as float.
4. Difficulty: Spider's hardness of each gold query (`benchmarks.spider_hardness`): execution
   accuracy per mode by easy, medium, hard and extra.
5. Loss attribution, for each miss (the first that applies): timeout; no candidate ran (the
   proxy's NL001) or another error, by SQLSTATE; the chosen candidate is the LLM's own query
   (candidate 0: no sketch to judge it by); gold query outside what a sketch can represent
   (`model_export.sketch_labels`); the chosen candidate's sketch differs from the gold sketch in
   SELECT, FROM or KEYWORDS (which parts); the sketch is right but a slot is wrong (WHERE
   columns/operators, WHERE's OR, GROUP BY, HAVING, ORDER BY, LIMIT: the first that differs);
   sketch and slots right, and the gold has a set operation, or a nested subquery, or the result
   is empty, or other rows (literals, joins or the rest of the completion). The sketches are the
   shipped sketch model's over the database's introspected schema, computed here in-process with
   the settings the proxy reads ([sketch], [runtime], [pipeline] max_candidates); the gold
   sketch is labelled over the same schema. The chosen candidate (n: the n-th ranked sketch, 0:
   the LLM's own query) is the one that wrote the chosen SQL among the record's candidates
   (`candidate_of_sql`), else, where those do not line up with the trace (or with
   `--no-query-log`), read from the trace alone (`chosen_candidate`). A
   second table sets chosen sketch right/wrong against result right/wrong, and counts the misses
   whose gold sketch was among the sketches tried (a selection loss rather than a sketch loss);
   not for "LLM alone", which tries no sketch.
6. Checkpoint: with `--checkpoint FILE`, one JSON line per question and mode is appended (and
   flushed) as soon as it is judged, and one per mode with its LLM server's memory at the end of
   a run. A run given a file that holds lines asks only the questions that are not in it for the
   mode (by mode name), and counts the others from the file, so a long run can be interrupted
   and resumed, and its report is the same as that of a run done in one go: the gold rows, the
   sketches and the loss categories are recomputed, "s asking" sums each question's own time,
   proxy health is counted per question, and memory is the largest reading of the runs. A line
   for another question under the same number (another dev.json) is refused.

The report (Markdown) goes to stdout; progress, with the running accuracy, to stderr. Per mode:
execution accuracy by hardness; p50/p95 latency; per-stage time (mean ms per question, and the
stage that dominates); the chosen candidate; the LLM's requests and prompt and completion tokens
per question (summed from the trace's "N prompt + M completion tokens" notes) and the resident
memory (VmRSS at the end of the run, of it RssFile, and its peak VmHWM, MiB) of the mode's
llama_cpp.server process (the child of the mode's `pgnl serve` whose command line names it);
where the misses come from. `--show N` prints N misses of each loss category to stderr, and
`--details FILE` writes one JSON line per question and mode. Floors, on the 972 executable dev
questions in PLM-only mode: execution accuracy >= 55%, p50 latency <= 200 ms (judged only on a
full run).

A small LLM run, resumable (run the same command again after an interruption):

    python -m benchmarks.execution_accuracy --sample 100 --seed 1 --llm qwen2.5-coder-1.5b \
        --checkpoint /tmp/ea-1.5b.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol

import numpy
import psycopg
import sqlglot
from psycopg import conninfo
from sqlglot import exp
from sqlglot.errors import SqlglotError

from benchmarks import query_history
from benchmarks.completion_oracle import Executor, same_rows
from benchmarks.proxy_overhead import free_port, read_line, workspace
from benchmarks.query_history import LeaveOut
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
from proxy.llm_model import PACKAGED_MODELS
from proxy.migrate import MigrationError, migrate
from proxy.nl2sql.answer import TRACE_COLUMNS, TraceRow
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.llm import BlockingLLM
from proxy.nl2sql.pipeline import NO_ANSWER, STAGES, UNGUIDED
from proxy.nl2sql.schema import Schema, introspect
from proxy.nl2sql.settle import ALL_AGREEING, NO_OTHER_READING
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
TIMEOUT_S = 30.0
"""Client timeout of a request, PLM-only and LLM (a remote endpoint)."""
LLM_TIMEOUT_S = 600.0
"""Client timeout of a request in the embedded modes (see the module docstring)."""
WARMUP_TIMEOUT_S = 600.0
"""Client timeout of a mode's first warm-up request (it loads the models, and may join and start
the embedded LLM)."""
WARMUP_QUESTION = "how many rows are there?"

# mode kinds (`--modes`) and names
PLM = "plm"
URL = "url"
ALONE = "alone"
FULL = "full"
KINDS = (PLM, URL, ALONE, FULL)
EMBEDDED_KINDS = (ALONE, FULL)
PLM_ONLY = "PLM-only"
LLM = "LLM"
LLM_SERVER = "llama_cpp.server"
"""What the command line of the embedded LLM's server process holds."""

ALONE_SETTINGS = {
    "PGNL_PIPELINE_MAX_CANDIDATES": "0",
    "PGNL_PIPELINE_FEEDBACK_ROUNDS": "0",
    "PGNL_LLM_UNGUIDED": "true",
    "PGNL_LLM_SELECTION": "first",
    "PGNL_CALIBRATION_THRESHOLD": "2",
    "PGNL_AMBIGUITY_ENABLED": "false",
}
"""The "LLM alone" mode's settings: the LLM's own query, uncorrected and uncalibrated."""
FREQUENT_EXAMPLES = ", frequent examples"
"""The name's ending of a mode run with PGNL_AMBIGUITY_HISTORY_EXAMPLES_BY=frequent
(`--frequent-examples`)."""
NO_AMBIGUITY = ", no ambiguity stage"
"""The name's ending of a mode run with PGNL_AMBIGUITY_ENABLED=false and
PGNL_AMBIGUITY_HISTORY_RECORDS=0 (`--without-ambiguity`): no ambiguity stage, no query
history."""

LOG_QUERY = (
    "SELECT question, directive, chosen_sql, trace, timings_ms, candidates FROM nl.query_log "
    "ORDER BY id DESC LIMIT 1"
)
"""The record of the latest answer (on the connection that asked it: this one's)."""
QUERY_LOG = "query log"
DIRECTIVES = "show/explain"

Rows = list[tuple[Any, ...]]
_ROWS = re.compile(r"(\d+) rows?")
_TOKENS = re.compile(r"(\d+) prompt \+ (\d+) completion tokens")


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


def choose(numbers: Sequence[int], *, limit: int = 0, sample: int = 0, seed: int = 0) -> list[int]:
    """`numbers` cut to the first `limit` (0: all), or, with `sample`, that many of them drawn at
    random with `seed` (the same numbers and seed draw the same), in their order."""
    if sample:
        drawn = random.Random(seed).sample(list(numbers), min(sample, len(numbers)))
        return sorted(drawn)
    return list(numbers[:limit] if limit else numbers)


def dev_items(
    dbs: Sequence[str] | None,
    limit: int,
    sample: int = 0,
    seed: int = 0,
    numbers: Collection[int] = (),
) -> tuple[list[Item], int, Counter[str]]:
    """The executable dev questions (those whose database Spider ships), filtered by `dbs` and
    `numbers` (their places in dev.json; empty: all) and chosen by `choose`; also dev.json's
    size and the questions left out for a missing database, by db_id."""
    examples = json.loads((spider_dir() / "dev.json").read_text(encoding="utf-8"))
    missing: Counter[str] = Counter()
    executable: list[int] = []
    for number, example in enumerate(examples):
        db_id = example["db_id"]
        if not sqlite_path(db_id).exists():
            missing[db_id] += 1
            continue
        if (dbs and db_id not in dbs) or (numbers and number not in numbers):
            continue
        executable.append(number)
    items: list[Item] = []
    for number in choose(executable, limit=limit, sample=sample, seed=seed):
        example = examples[number]
        gold_pg: str | None
        try:
            gold_pg, error = to_postgres(example["query"]), ""
        except TranspileError as exc:
            gold_pg, error = None, str(exc)
        items.append(
            Item(
                number,
                example["db_id"],
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
LLM_OWN_QUERY = "the LLM's own query (candidate 0, no sketch)"


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
    from 1, best sketch first); the top sketch when the candidate is unknown. Candidate 0, the
    LLM's own query, has no sketch: callers count it apart (`LLM_OWN_QUERY`)."""
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
    if chosen == UNGUIDED:
        return LLM_OWN_QUERY
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
    if category == LLM_OWN_QUERY:
        return "the LLM's own query (no sketch to judge)"
    if category in (TIMEOUT, NO_CANDIDATE_RAN) or category.startswith("proxy error"):
        return "no answer (error or timeout)"
    return "not attributable"


def chosen_candidate(trace: Sequence[TraceRow]) -> int | None:
    """The number of the candidate the pipeline chose, read from its trace (None: none ran; 0:
    the LLM's own query, `UNGUIDED`, which the pipeline tries among the sketches' candidates).

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


_ADDS_A_CANDIDATE = ("LLM", "LLM, without the sketch", "LLM, after the error", "PLM")
"""The outcomes of the `complete` rows whose SQL the pipeline adds to its candidates (as every
`execute` row's; `proxy.nl2sql.completion` and `proxy.nl2sql.execution` add them)."""


def candidate_of_sql(
    trace: Sequence[TraceRow], candidates: Sequence[str], sql: str | None
) -> int | None:
    """The number of the candidate whose SQL is the chosen `sql`, from nl.query_log's
    `candidates` (every SQL tried, in order: one per trace row that adds one, see
    `_ADDS_A_CANDIDATE`); the first that wrote it (a later duplicate is not run). None when
    there is no chosen SQL, or the trace and the candidates do not line up (then
    `chosen_candidate` reads the trace alone): the pipeline goes on after an answer that leaves
    out a value of the question, and chooses that answer when nothing better comes, so the
    last candidate with rows is not always the one chosen."""
    adding = [
        row.candidate
        for row in trace
        if row.stage == "execute" or (row.stage == "complete" and row.outcome in _ADDS_A_CANDIDATE)
    ]
    if not sql or len(adding) != len(candidates):
        return None
    chosen = _one_line(sql)
    return next(
        (
            number
            for number, text in zip(adding, candidates, strict=True)
            if _one_line(text) == chosen
        ),
        None,
    )


def stage_times(trace: Sequence[TraceRow]) -> dict[str, float]:
    """Milliseconds spent in each stage of one answer, summed over its candidates."""
    times: dict[str, float] = defaultdict(float)
    for row in trace:
        times[row.stage] += row.ms
    return dict(times)


def logged_stage_times(timings_ms: Mapping[str, Any]) -> dict[str, float]:
    """nl.query_log's timings_ms (each stage's milliseconds, and "total") without the total."""
    return {stage: float(ms) for stage, ms in timings_ms.items() if stage != "total"}


@dataclass(frozen=True)
class LLMUsage:
    """What one answer asked of the LLM."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def llm_usage(trace: Sequence[TraceRow]) -> LLMUsage:
    """The LLM requests of one answer (its `complete` rows whose outcome is the LLM's: "LLM",
    "LLM, without the sketch", "LLM, after the error", "LLM failed: ..." and the like) and the
    tokens they cost, summed from the notes "N prompt + M completion tokens" (in the trace's
    calibration column) of those that came back."""
    requests = prompt = completion = 0
    for row in trace:
        if row.stage != "complete":
            continue
        if row.outcome.startswith("LLM"):
            requests += 1
        tokens = _TOKENS.search(row.calibration)
        if tokens is not None:
            prompt += int(tokens.group(1))
            completion += int(tokens.group(2))
    return LLMUsage(requests, prompt, completion)


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


_RULES_NOTE = re.compile(r"\brules: (\w+(?:, \w+)*)")


def rules_fired(trace: Sequence[TraceRow]) -> list[str]:
    """The PLM-only rules that changed a sketch or a completion of the question, in order, each
    once: the names in the trace's "rules: a, b" notes (the sketch row, PLM complete rows)."""
    fired: dict[str, None] = {}
    for row in trace:
        for match in _RULES_NOTE.finditer(row.calibration or ""):
            fired.update(dict.fromkeys(match.group(1).split(", ")))
    return list(fired)


AGREE = "agree"  # the ambiguity stage found no reading returning other rows than the answer
DISAGREE = "disagree"  # it found one at least


def ambiguity_outcomes(trace: Sequence[TraceRow]) -> list[str]:
    """The outcomes of the trace's ambiguity rows, in order."""
    return [row.outcome for row in trace if row.stage == "ambiguity"]


def readings_of(outcomes: Sequence[str]) -> str:
    """Whether the question's candidates agree (AGREE), disagree (DISAGREE), or were not
    compared (""), from the outcomes of its ambiguity rows (`ambiguity_outcomes`): the stage
    says in one row that no other reading returns other rows, or it compares them; no row: the
    stage is off, or nothing answered."""
    if any(o.endswith(ALL_AGREEING) or o == NO_OTHER_READING for o in outcomes):
        return AGREE
    return DISAGREE if outcomes else ""


def logged_trace(trace: Sequence[Mapping[str, Any]]) -> list[TraceRow]:
    """nl.query_log's trace (a list of objects keyed by TRACE_COLUMNS) as TraceRows."""
    return trace_rows([[row.get(column) for column in TRACE_COLUMNS] for row in trace])


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(numpy.percentile(numpy.asarray(values, dtype=numpy.float64), q))


# ---------------------------------------------------------------- the modes


@dataclass(frozen=True)
class ModeSpec:
    """A mode: what it is called, its kind (`KINDS`), its model (`--llm`, embedded kinds)."""

    name: str
    kind: str
    model: str = ""
    timeout_s: float = TIMEOUT_S
    ambiguity: bool = True  # False: PGNL_AMBIGUITY_ENABLED=false
    frequent_examples: bool = False  # True: PGNL_AMBIGUITY_HISTORY_EXAMPLES_BY=frequent

    @property
    def embedded(self) -> bool:
        return self.kind in EMBEDDED_KINDS


def model_label(model: str) -> str:
    """A packaged model's name, or a GGUF file's name without .gguf."""
    return model if model in PACKAGED_MODELS else Path(model).stem


def model_environment(model: str) -> dict[str, str]:
    """The settings that name `--llm MODEL` to the proxy: a packaged model's name, or a path."""
    if model in PACKAGED_MODELS:
        return {"PGNL_LLM_EMBEDDED_MODEL": model, "PGNL_LLM_MODEL_PATH": ""}
    if model.endswith(".gguf"):
        return {"PGNL_LLM_MODEL_PATH": str(Path(model).expanduser().resolve())}
    raise ValueError(
        f"--llm {model}: not a packaged model ({', '.join(PACKAGED_MODELS)}) nor a .gguf file"
    )


def mode_environment(spec: ModeSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The proxy's environment for a mode: `environ` with the mode's settings on top."""
    env = dict(environ)
    if spec.kind == PLM:
        env["PGNL_LLM_PROVIDER"] = "none"
        env["PGNL_LLM_BASE_URL"] = ""
    elif spec.kind == URL:
        env["PGNL_LLM_PROVIDER"] = "openai"
    else:
        env["PGNL_LLM_PROVIDER"] = "embedded"
        env["PGNL_LLM_BASE_URL"] = ""
        env.update(model_environment(spec.model))
        if spec.kind == ALONE:
            env.update(ALONE_SETTINGS)
    if not spec.ambiguity:
        env["PGNL_AMBIGUITY_ENABLED"] = "false"
        env["PGNL_AMBIGUITY_HISTORY_RECORDS"] = "0"
    if spec.frequent_examples:
        env["PGNL_AMBIGUITY_HISTORY_EXAMPLES_BY"] = "frequent"
    return env


def mode_specs(
    kinds: Sequence[str],
    models: Sequence[str],
    environ: Mapping[str, str],
    *,
    timeout_s: float = TIMEOUT_S,
    llm_timeout_s: float = LLM_TIMEOUT_S,
    without_ambiguity: bool = False,
    frequent_examples: bool = False,
) -> list[ModeSpec]:
    """The modes of a run, in the report's order: PLM-only, LLM (when PGNL_LLM_BASE_URL is
    set), then for each model "LLM alone" and "full" (those of `kinds`); with
    `without_ambiguity`, PLM-only and each full mode followed by its twin without the
    ambiguity stage; with `frequent_examples`, each full mode followed by its twin that shows
    the LLM the history's most run statements (beside the schema) rather than those nearest
    the question."""
    specs: list[ModeSpec] = []
    if PLM in kinds:
        specs.append(ModeSpec(PLM_ONLY, PLM, timeout_s=timeout_s))
        if without_ambiguity:
            specs.append(
                ModeSpec(PLM_ONLY + NO_AMBIGUITY, PLM, timeout_s=timeout_s, ambiguity=False)
            )
    if URL in kinds and environ.get("PGNL_LLM_BASE_URL"):
        specs.append(ModeSpec(LLM, URL, timeout_s=timeout_s))
    for model in models:
        label = model_label(model)
        if ALONE in kinds:
            specs.append(ModeSpec(f"LLM alone {label}", ALONE, model, llm_timeout_s))
        if FULL in kinds:
            specs.append(ModeSpec(f"full {label}", FULL, model, llm_timeout_s))
            if frequent_examples:
                specs.append(
                    ModeSpec(
                        f"full {label}{FREQUENT_EXAMPLES}",
                        FULL,
                        model,
                        llm_timeout_s,
                        frequent_examples=True,
                    )
                )
            if without_ambiguity:
                specs.append(
                    ModeSpec(
                        f"full {label}{NO_AMBIGUITY}", FULL, model, llm_timeout_s, ambiguity=False
                    )
                )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise BenchError(f"two modes have one name: {names} (two --llm files of one name?)")
    return specs


def describe(spec: ModeSpec, environ: Mapping[str, str]) -> str:
    """One line on what the mode's proxy does, from the settings it will read."""
    if spec.frequent_examples:
        return (
            _describe(spec, environ) + "; the LLM shown the history's most run statements, "
            "beside the schema (PGNL_AMBIGUITY_HISTORY_EXAMPLES_BY=frequent)"
        )
    if not spec.ambiguity:
        return (
            _describe(spec, environ) + "; no ambiguity stage and no query history "
            "(PGNL_AMBIGUITY_ENABLED=false, PGNL_AMBIGUITY_HISTORY_RECORDS=0)"
        )
    return _describe(spec, environ)


def _describe(spec: ModeSpec, environ: Mapping[str, str]) -> str:
    settings = config.load(environ=mode_environment(spec, environ))
    llm, pipeline = settings.llm, settings.pipeline
    if spec.kind == PLM:
        return (
            "no LLM: queries completed from the sketch model's slots "
            '(PGNL_LLM_PROVIDER=none, PGNL_LLM_BASE_URL="")'
        )
    if spec.kind == URL:
        return f"LLM {llm.model or '(no model named)'} at {llm.base_url}"
    label = model_label(spec.model)
    if spec.kind == ALONE:
        return (
            f"the embedded LLM {label} alone: its own query from the question and the schema, "
            "no sketch, no correction, no calibration (PGNL_LLM_PROVIDER=embedded, "
            + ", ".join(f"{k}={v}" for k, v in ALONE_SETTINGS.items())
            + ")"
        )
    rounds = (
        f"{pipeline.feedback_rounds} feedback round(s), calibration threshold "
        f"{settings.calibration.threshold:g}"
    )
    if llm.selection == "llm-first":
        return (
            f"the embedded LLM {label} in the whole pipeline (PGNL_LLM_PROVIDER=embedded, "
            "selection llm-first): the sketch models' answer, then the LLM's own query, which "
            f"is the answer when it returns values; {rounds}"
        )
    return (
        f"the embedded LLM {label} in the whole pipeline (PGNL_LLM_PROVIDER=embedded, "
        f"selection {llm.selection}): it completes the best {llm.max_completions} of "
        f"{pipeline.max_candidates} sketches"
        + (", then writes its own query" if llm.unguided else "")
        + f"; PLM-only completion for the rest; {rounds}"
    )


# ---------------------------------------------------------------- processes


@dataclass(frozen=True)
class Memory:
    """The resident memory of a process, MiB: now (VmRSS), its peak (VmHWM), and the part of
    VmRSS that is file pages (RssFile: for the LLM's server, mostly the mmapped GGUF model)."""

    rss_mib: float
    peak_mib: float
    file_mib: float = 0.0


def child_process(parent: int, needle: str, proc: Path = Path("/proc")) -> int | None:
    """The id of a child process of `parent` whose command line contains `needle`, if any."""
    for entry in sorted(proc.iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(errors="replace")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        fields = stat.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, ...
        if len(fields) > 1 and fields[1] == str(parent) and needle.encode() in cmdline:
            return int(entry.name)
    return None


def process_memory(pid: int, proc: Path = Path("/proc")) -> Memory | None:
    """VmRSS and VmHWM of a process, from /proc/PID/status (None: gone, or not reported)."""
    try:
        status = (proc / str(pid) / "status").read_text(errors="replace")
    except OSError:
        return None
    kib: dict[str, int] = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if key in ("VmRSS", "VmHWM", "RssFile") and parts and parts[0].isdigit():
            kib[key] = int(parts[0])
    if "VmRSS" not in kib:
        return None
    return Memory(
        kib["VmRSS"] / 1024, kib.get("VmHWM", kib["VmRSS"]) / 1024, kib.get("RssFile", 0) / 1024
    )


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
    log_read: int = 0  # bytes of the log read by `new_internal_errors`

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

    def new_internal_errors(self) -> list[str]:
        """Log lines that mean the proxy itself failed (as tests/fix_proxy.py judges them),
        written since the last call (the log is one file across restarts)."""
        if not self.log.exists():
            return []
        with self.log.open("rb") as handle:
            handle.seek(self.log_read)
            text = handle.read()
        self.log_read += len(text)
        lines = text.decode(errors="replace").splitlines()
        return [line for line in lines if "Traceback" in line or " ERROR " in line]

    def log_tail(self, size: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""


def start_proxy(
    mode: str,
    upstream: str,
    base: Path,
    log_name: str,
    env: Mapping[str, str],
    *,
    root: Path = REPO_ROOT,
) -> ProxyProcess:
    """`pgnl serve` of the checkout at `root` (this one by default), its log in base/log_name."""
    log = base / log_name
    argv = [sys.executable, "-m", "proxy", "--log-level", "warning", "serve"]
    argv += ["--listen", "127.0.0.1:0", "--upstream", upstream]
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=root,
            env=dict(env),
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

    async def request(self, db_id: str, text: str, timeout_s: float | None = None) -> Reply:
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
            reply.rows = await asyncio.wait_for(run(), timeout_s or self.timeout_s)
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
    """One mode's answer to one question, judged (a checkpoint line holds these fields)."""

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
    llm_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    source: str = ""  # where the SQL and trace were read: QUERY_LOG, DIRECTIVES, "" (neither)
    elapsed_ms: float = 0.0  # this question's requests, all of them
    restarted: bool = False  # the proxy was found dead after it, and restarted
    internal_errors: list[str] = field(default_factory=list)  # proxy log lines meanwhile
    rules: list[str] = field(default_factory=list)  # the PLM-only rules that fired (`rules_fired`)
    ambiguity: list[str] = field(default_factory=list)  # `ambiguity_outcomes`


def _one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Logged:
    """nl.query_log's record of one answer."""

    sql: str  # "" when none was chosen
    trace: list[TraceRow]
    stages: dict[str, float]
    candidates: list[str]

    @property
    def chosen(self) -> int | None:
        number = candidate_of_sql(self.trace, self.candidates, self.sql)
        return number if number is not None else chosen_candidate(self.trace)


def _json(value: Any) -> Any:
    """A jsonb value as psycopg loads it (parsed), or as text."""
    return json.loads(value) if isinstance(value, str) else value


def logged_answer(reply: Reply, question: str) -> Logged:
    """The record in the LOG_QUERY reply, when its row records the `-- nl:` answer to
    `question`; else a LookupError."""
    if reply.error or reply.timed_out or not reply.rows:
        raise LookupError(reply.error or "no row")
    logged_question, directive, sql, trace, timings, candidates = reply.rows[0][:6]
    if directive != "nl" or logged_question != _one_line(question):
        raise LookupError(f"the latest row is {directive}: {logged_question}")
    return Logged(
        _one_line(sql or ""),
        logged_trace(_json(trace)),
        logged_stage_times(_json(timings)),
        [str(c) for c in _json(candidates)],
    )


def _traced(asked: Asked, trace: Sequence[TraceRow], chosen: int | None) -> None:
    asked.chosen = chosen
    asked.rules = rules_fired(trace)
    asked.ambiguity = ambiguity_outcomes(trace)
    usage = llm_usage(trace)
    asked.llm_requests = usage.requests
    asked.prompt_tokens = usage.prompt_tokens
    asked.completion_tokens = usage.completion_tokens


async def ask(
    client: Client, item: Item, gold: Rows, ordered: bool, *, query_log: bool = True
) -> Asked:
    """One question on one mode: `-- nl:`, then its record in nl.query_log (or, with
    `query_log` false or when the record is not there, `-- nl show:` and `-- nl explain:`)."""
    asked = Asked()
    started = time.perf_counter()
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
    if not run.timed_out:
        found = False
        if query_log:
            record = await client.request(item.db_id, LOG_QUERY)
            try:
                logged = logged_answer(record, item.question)
            except LookupError as exc:
                progress(f"  #{item.number}: no nl.query_log record ({exc}); show/explain instead")
            else:
                found = True
                asked.sql, asked.stages, asked.source = logged.sql, logged.stages, QUERY_LOG
                _traced(asked, logged.trace, logged.chosen)
        if not found:
            show = await client.request(item.db_id, f"-- nl show: {item.question}")
            if not show.error and not show.timed_out and show.rows:
                asked.sql = _one_line(str(show.rows[0][0]))
            explain = await client.request(item.db_id, f"-- nl explain: {item.question}")
            if not explain.error and not explain.timed_out:
                trace = trace_rows(explain.rows)
                asked.stages = stage_times(trace)
                asked.source = DIRECTIVES
                _traced(asked, trace, chosen_candidate(trace))
    asked.elapsed_ms = (time.perf_counter() - started) * 1000.0
    return asked


def record_of(mode: str, item: Item, asked: Asked) -> dict[str, Any]:
    """A checkpoint line (and a --details line) for one question and mode."""
    return {
        "mode": mode,
        "number": item.number,
        "db_id": item.db_id,
        "question": item.question,
        "hardness": item.hardness,
        "gold": item.gold_pg or item.gold_sqlite,
        **dataclasses.asdict(asked),
    }


_ASKED_FIELDS = tuple(f.name for f in dataclasses.fields(Asked))


def asked_of(record: Mapping[str, Any]) -> Asked:
    """The Asked a checkpoint line holds (fields it lacks take their defaults)."""
    return Asked(**{name: record[name] for name in _ASKED_FIELDS if name in record})


@dataclass
class Resumed:
    """What a checkpoint file holds: answers by (mode, dev number), with the question each was
    asked as, and the memory readings of each mode's runs."""

    results: dict[tuple[str, int], Asked] = field(default_factory=dict)
    questions: dict[tuple[str, int], str] = field(default_factory=dict)
    memory: dict[str, list[Memory]] = field(default_factory=lambda: defaultdict(list))


def read_checkpoint(path: Path) -> Resumed:
    """The lines of a checkpoint file (none when it does not exist). A line that is not JSON
    (cut short by a kill while it was written) is skipped; its question is asked again."""
    resumed = Resumed()
    if not path.exists():
        return resumed
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict) or "mode" not in record:
            continue
        mode = str(record["mode"])
        if "memory" in record:
            reading = record["memory"]
            resumed.memory[mode].append(
                Memory(reading["rss_mib"], reading["peak_mib"], reading.get("file_mib", 0.0))
            )
        elif "number" in record:
            key = (mode, int(record["number"]))
            resumed.results[key] = asked_of(record)
            resumed.questions[key] = str(record.get("question", ""))
    return resumed


class Checkpoint:
    """A checkpoint file open for appending; each line is flushed as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
        self.handle: IO[str] = path.open("a", encoding="utf-8")
        if torn:  # a line cut short: the next one starts on a line of its own
            self.handle.write("\n")

    def write(self, record: Mapping[str, Any]) -> None:
        self.handle.write(json.dumps(record, default=str) + "\n")
        self.handle.flush()

    def memory(self, mode: str, reading: Memory) -> None:
        self.write({"mode": mode, "memory": dataclasses.asdict(reading)})

    def close(self) -> None:
        self.handle.close()


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
    """One mode's results (what the report reads)."""

    name: str
    kind: str = PLM
    description: str = ""
    timeout_s: float = TIMEOUT_S
    results: dict[int, Asked] = field(default_factory=dict)  # by dev number
    memory: list[Memory] = field(default_factory=list)  # its LLM server's, one per run
    asked_now: int = 0  # questions this run asked (the others came from a checkpoint)

    @property
    def embedded(self) -> bool:
        return self.kind in EMBEDDED_KINDS


@dataclass
class Run:
    items: list[Item]
    dev_size: int
    missing: Counter[str]
    modes: list[Mode]
    views: dict[int, SketchView] = field(default_factory=dict)
    judged: list[Item] = field(default_factory=list)
    blank_gold: set[int] = field(default_factory=set)  # numbers of items; see `blank_result`
    gold_failures: list[tuple[Item, str]] = field(default_factory=list)
    gold_disagreements: list[Item] = field(default_factory=list)
    warmup: bool = True


class GoldRows(Protocol):
    """`Gold`'s interface to `ask_all`."""

    failures: list[tuple[Item, str]]
    disagreements: list[Item]

    def rows(self, item: Item, *, ordered: bool) -> Rows | None: ...


Asker = Callable[[Mode, Item, Rows, bool], Awaitable[Asked]]
"""Asks one question on one mode (mode, item, gold rows, whether the gold orders)."""


def attribute(asked: Asked, view: SketchView | None) -> str:
    """The loss category of a miss ("" for a match)."""
    if asked.match:
        return ""
    return loss(
        timed_out=asked.timed_out,
        sqlstate=asked.sqlstate,
        error=asked.error,
        view=view,
        chosen=asked.chosen,
        predicted_rows=asked.rows,
    )


async def ask_all(
    run: Run,
    gold: GoldRows,
    views: Callable[[Item], SketchView] | None,
    asker: Asker,
    *,
    resumed: Resumed | None = None,
    checkpoint: Checkpoint | None = None,
    around: Callable[[Item], contextlib.AbstractContextManager[None]] | None = None,
) -> None:
    """Judge every question on every mode: from the checkpoint `resumed` where it holds the
    answer, else asked (and written to `checkpoint`); `around` an item's questions (the query
    history's leave-out)."""
    resumed = resumed or Resumed()
    started = time.perf_counter()
    total = len(run.items)
    for position, item in enumerate(run.items, 1):
        ordered = gold_orders(item.gold_sqlite)
        rows = gold.rows(item, ordered=ordered)
        if rows is None:
            continue
        run.judged.append(item)
        if blank_result(rows):
            run.blank_gold.add(item.number)
        view = views(item) if views is not None else None
        if view is not None:
            run.views[item.number] = view
        with around(item) if around is not None else contextlib.nullcontext():
            await _ask_modes(
                run, item, rows, ordered, asker=asker, resumed=resumed, checkpoint=checkpoint
            )
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
    run.gold_failures = list(gold.failures)
    run.gold_disagreements = list(gold.disagreements)


async def _ask_modes(
    run: Run,
    item: Item,
    rows: Rows,
    ordered: bool,
    *,
    asker: Asker,
    resumed: Resumed,
    checkpoint: Checkpoint | None,
) -> None:
    view = run.views.get(item.number)
    for mode in run.modes:
        key = (mode.name, item.number)
        asked = resumed.results.get(key)
        if asked is not None:
            if resumed.questions.get(key) != item.question:
                raise BenchError(
                    f"the checkpoint's question #{item.number} for {mode.name} is "
                    f"{resumed.questions.get(key)!r}, not {item.question!r}: another "
                    "dev.json? Use another --checkpoint file"
                )
            asked = dataclasses.replace(asked)  # the loss is recomputed below
        else:
            asked = await asker(mode, item, rows, ordered)
            mode.asked_now += 1
        asked.loss = attribute(asked, view)
        mode.results[item.number] = asked
        if key not in resumed.results and checkpoint is not None:
            checkpoint.write(record_of(mode.name, item, asked))


class Runner:
    """One mode's `pgnl serve` and its client, started on the mode's first question (with its
    warm-up), restarted when found dead after an error."""

    def __init__(
        self,
        spec: ModeSpec,
        environment: Mapping[str, str],
        upstream: str,
        base: Path,
        dsns: dict[str, str],
        *,
        warm_dbs: Sequence[str],
        query_log: bool = True,
    ) -> None:
        self.spec = spec
        self.environment = dict(environment)
        self.upstream = upstream
        self.base = base
        self.dsns = dsns
        self.warm_dbs = list(warm_dbs)  # empty: no warm-up
        self.query_log = query_log
        self.proxy: ProxyProcess | None = None
        self.client: Client | None = None
        self.restarts = 0
        self.llm_pid: int | None = None
        self.log_name = "pgnl-" + re.sub(r"[^A-Za-z0-9.-]+", "-", spec.name).lower() + ".log"

    async def ask(self, item: Item, gold: Rows, ordered: bool) -> Asked:
        if self.proxy is None:
            await self._start()
        assert self.client is not None
        asked = await ask(self.client, item, gold, ordered, query_log=self.query_log)
        if self.spec.embedded and self.llm_pid is None and not asked.timed_out:
            self._find_llm()
        if asked.timed_out or asked.error:
            asked.restarted = await self._restart_if_dead()
        assert self.proxy is not None
        asked.internal_errors = [line.strip()[:200] for line in self.proxy.new_internal_errors()]
        return asked

    async def _start(self) -> None:
        env = mode_environment(self.spec, self.environment)
        self.proxy = start_proxy(self.spec.name, self.upstream, self.base, self.log_name, env)
        self.client = Client(self.proxy, self.dsns, self.spec.timeout_s)
        if not self.warm_dbs:
            return
        started = time.perf_counter()
        for number, db_id in enumerate(self.warm_dbs):
            timeout = max(WARMUP_TIMEOUT_S, self.spec.timeout_s) if number == 0 else None
            reply = await self.client.request(db_id, f"-- nl: {WARMUP_QUESTION}", timeout)
            if reply.timed_out:
                progress(f"warm-up ({self.spec.name}) on {db_id} timed out")
        progress(
            f"warm-up ({self.spec.name}): one question on each of {len(self.warm_dbs)} "
            f"database(s), {time.perf_counter() - started:.1f} s"
        )
        if self.spec.embedded:
            self._find_llm()

    def _find_llm(self) -> None:
        """The embedded LLM's server, which the proxy starts on its first question: a proxy
        without it answers from the sketch models alone, which is no measure of the mode."""
        assert self.proxy is not None
        self.llm_pid = child_process(self.proxy.process.pid, LLM_SERVER)
        if self.llm_pid is None:
            raise BenchError(
                f"pgnl serve ({self.spec.name}) runs no {LLM_SERVER} after its first question: "
                f"the embedded LLM did not start. Its log ends:\n{self.proxy.log_tail()}"
            )

    async def _restart_if_dead(self) -> bool:
        assert self.proxy is not None and self.client is not None
        if self.proxy.alive():
            return False
        progress(
            f"pgnl serve ({self.spec.name}) died (status {self.proxy.process.returncode}); "
            "restarting"
        )
        await self.client.close()
        read = self.proxy.log_read
        self.stop()
        env = mode_environment(self.spec, self.environment)
        self.proxy = start_proxy(self.spec.name, self.upstream, self.base, self.log_name, env)
        self.proxy.log_read = read
        self.client.proxy = self.proxy
        self.restarts += 1
        return True

    def memory(self) -> Memory | None:
        """The LLM server's resident memory now (None: no such process)."""
        return process_memory(self.llm_pid) if self.llm_pid is not None else None

    async def close_client(self) -> None:
        if self.client is not None:
            await self.client.close()

    def stop(self) -> None:
        """Stop the proxy; and its LLM server, should the proxy have left it running."""
        if self.proxy is not None:
            self.proxy.stop()
        pid, self.llm_pid = self.llm_pid, None
        if pid is not None and child_alive(pid, LLM_SERVER):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)


def child_alive(pid: int, needle: str, proc: Path = Path("/proc")) -> bool:
    """Whether process `pid` still runs a command line that contains `needle`."""
    try:
        return needle.encode() in (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


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


def _results(run: Run, mode: Mode) -> list[Asked]:
    """The mode's answers in the questions' order (so that a resumed run reads them as a run in
    one go does)."""
    return [mode.results[i.number] for i in run.judged if i.number in mode.results]


def _stage_order(stages: set[str]) -> list[str]:
    return [s for s in STAGES if s in stages] + sorted(stages - set(STAGES))


def _candidate_label(chosen: int | None) -> str:
    if chosen is None:
        return "none (no candidate ran, or no trace)"
    if chosen == UNGUIDED:
        return "0: the LLM's own query"
    return f"{chosen}: sketch {chosen}"


def _mean(values: Sequence[float]) -> float:
    return float(numpy.mean(values)) if values else float("nan")


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
        + f", {len(judged)} judged. "
        + (
            "Warm-up questions first, not measured (one per database; an embedded LLM mode "
            "one, on the first database)."
            if run.warmup
            else "No warm-up."
        )
    )
    lines.append("")
    for mode in run.modes:
        lines.append(
            f"- **{mode.name}** (client timeout {mode.timeout_s:g} s a request): {mode.description}"
        )
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
        values = [r.latency_ms for r in _results(run, mode) if r.latency_ms is not None]
        lines.append(
            f"| {mode.name} | {len(values)} | {percentile(values, 50):.0f} | "
            f"{percentile(values, 95):.0f} | {_mean(values):.0f} "
            f"| {max(values, default=float('nan')):.0f} |"
        )
    lines.append("")

    lines += _twin_table(run)

    llm_modes = [m for m in run.modes if m.kind != PLM]
    if llm_modes:
        lines += [
            "### LLM use per question (means over the questions traced; tokens from the trace's "
            '"N prompt + M completion tokens" notes) and the LLM server\'s memory',
            "",
            "| mode | traced | LLM requests | prompt tokens | completion tokens | "
            "llama_cpp.server RSS MiB at the end | of it file pages (the model) | its peak MiB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mode in llm_modes:
            traced = [r for r in _results(run, mode) if r.source]
            largest = max(mode.memory, key=lambda m: m.rss_mib, default=None)
            peak = max((m.peak_mib for m in mode.memory), default=None)
            lines.append(
                f"| {mode.name} | {len(traced)} | "
                f"{_mean([r.llm_requests for r in traced]):.2f} | "
                f"{_mean([r.prompt_tokens for r in traced]):.0f} | "
                f"{_mean([r.completion_tokens for r in traced]):.0f} | "
                + (
                    f"{largest.rss_mib:.0f} | {largest.file_mib:.0f} | {peak:.0f} |"
                    if largest is not None and peak is not None
                    else "- | - | - |"
                )
            )
        lines += [
            "",
            "(Memory: the largest VmRSS of the mode's runs, read from /proc at the end of each, "
            "with its RssFile, and the largest VmHWM; - where no embedded server ran.)",
            "",
        ]

    for mode in run.modes:
        results = _results(run, mode)
        per_stage: dict[str, list[float]] = defaultdict(list)
        traced = [r for r in results if r.stages]
        for result in traced:
            for stage, ms in result.stages.items():
                per_stage[stage].append(ms)
        sources = Counter(r.source for r in results if r.source)
        where = ", ".join(f"{count} from {source}" for source, count in sorted(sources.items()))
        lines += [
            f"### Per-stage time, {mode.name} ({len(traced)} traces: {where or 'none'}; a "
            "stage's time summed over its candidates)",
            "",
            "| stage | questions | p50 ms | mean ms | p95 ms | ms per question | share |",
            "|---|---|---|---|---|---|---|",
        ]
        whole = sum(sum(values) for values in per_stage.values())
        for stage in _stage_order(set(per_stage)):
            values = per_stage[stage]
            lines.append(
                f"| {stage} | {len(values)} | {percentile(values, 50):.1f} | "
                f"{_mean(values):.1f} | {percentile(values, 95):.1f} | "
                f"{sum(values) / len(traced):.1f} | {sum(values) / whole if whole else 0:.1%} |"
            )
        if per_stage and whole:
            top = max(_stage_order(set(per_stage)), key=lambda s: sum(per_stage[s]))
            lines += [
                "",
                f"Dominant stage: **{top}**, {sum(per_stage[top]) / len(traced):.0f} ms per "
                f"question ({sum(per_stage[top]) / whole:.0%} of the stages' time).",
            ]
        lines.append("")

    labels = sorted(
        {r.chosen for m in run.modes for r in _results(run, m)},
        key=lambda c: -1 if c is None else c,
    )
    lines += [
        "### The chosen candidate (answers, of which right)",
        "",
        "| chosen candidate | " + " | ".join(m.name for m in run.modes) + " |",
        "|---|" + "---|" * len(run.modes),
    ]
    for chosen_label in labels:
        cells = []
        for mode in run.modes:
            picked = [r for r in _results(run, mode) if r.chosen == chosen_label]
            cells.append(f"{len(picked)} ({sum(r.match for r in picked)})" if picked else "-")
        lines.append(f"| {_candidate_label(chosen_label)} | " + " | ".join(cells) + " |")
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
            if mode.kind == ALONE:
                lines += ["(No sketch table: this mode tries no sketch.)", ""]
            else:
                lines += _sketch_table(run, mode)

    for mode in run.modes:
        outcomes = Counter(
            "fallback notice" if any("fall" in n.lower() for n in r.notices) else "no fallback"
            for r in _results(run, mode)
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
    failing = [(i, why) for i, why in run.gold_failures if i.gold_pg is not None]
    lines.append("")
    lines.append(
        f"{len(failing)} transpiled gold queries fail on PostgreSQL" + (":" if failing else ".")
    )
    for item, why in failing:
        lines.append(f"- #{item.number} {item.db_id}: `{item.gold_sqlite}`: {why}")
    lines.append("")
    disagreeing = run.gold_disagreements
    lines.append(
        f"{len(disagreeing)} gold queries return other rows on PostgreSQL than on SQLite (judged "
        "against PostgreSQL's)" + (":" if disagreeing else ".")
    )
    for item in disagreeing:
        lines.append(f"- #{item.number} {item.db_id}: `{item.gold_sqlite}`")
    lines.append("")

    lines += ["### Proxy health", ""]
    for mode in run.modes:
        results = _results(run, mode)
        errors = [line for r in results for line in r.internal_errors]
        timeouts = sum(r.timed_out for r in results)
        restarts = sum(r.restarted for r in results)
        lines.append(
            f"- {mode.name}: {timeouts} timeouts, {restarts} restarts, "
            f"{len(errors)} internal errors logged" + (f" (first: {errors[0]})" if errors else "")
        )
    lines.append("")

    plm = next((m for m in run.modes if m.kind == PLM), None)
    if plm is not None and judged:
        hits = sum(plm.results[i.number].match for i in judged)
        accuracy = hits / len(judged)
        values = [r.latency_ms for r in _results(run, plm) if r.latency_ms is not None]
        p50 = percentile(values, 50)
        scope = "" if full else f" (on {len(judged)} questions, not the {FULL_RUN}: indicative)"
        lines.append(
            f"Floors, PLM-only{scope}: execution accuracy {accuracy:.1%} >= "
            f"{ACCURACY_FLOOR:.0%}: {_verdict(accuracy >= ACCURACY_FLOOR)}; p50 latency "
            f"{p50:.0f} ms <= {P50_FLOOR_MS:.0f} ms: {_verdict(p50 <= P50_FLOOR_MS)}"
        )
    seconds = sum(r.elapsed_ms for m in run.modes for r in _results(run, m)) / 1000
    lines.append(f"({seconds:.0f} s asking, summed over the questions and modes)")
    return "\n".join(lines)


def twin_of(mode: str) -> str:
    """The name of the mode without the ambiguity stage and the history that `mode` is measured
    against (`--without-ambiguity`)."""
    return mode.removesuffix(FREQUENT_EXAMPLES) + NO_AMBIGUITY


def _twin_table(run: Run) -> list[str]:
    """Each mode with the ambiguity stage against its twin without it: EX where the stage found
    the candidates disagreeing and where it found them agreeing (as that mode's trace says),
    the answers won and lost, and the latency."""
    modes = {m.name: m for m in run.modes}
    pairs = [
        (m, modes[twin_of(m.name)])
        for m in run.modes
        if not m.name.endswith(NO_AMBIGUITY) and twin_of(m.name) in modes
    ]
    if not pairs:
        return []
    lines = [
        "### The ambiguity stage and the query history against the pipeline without them",
        "",
        "Questions are split by the mode's own trace: its candidates disagree (another reading "
        "returns other rows than the answer), agree, or were not compared (nothing answered, or "
        "no trace). EX of the mode / of its twin without the stage on each part.",
        "",
        "| mode | disagree: questions | EX | agree: questions | EX | not compared | EX | "
        "won / lost | p50 ms | p50 ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    judged = run.judged
    for mode, twin in pairs:
        cells = []
        for part in (DISAGREE, AGREE, ""):
            numbers = [
                i.number for i in judged if readings_of(mode.results[i.number].ambiguity) == part
            ]
            mine = sum(mode.results[n].match for n in numbers)
            theirs = sum(twin.results[n].match for n in numbers)
            cells += [str(len(numbers)), f"{mine} / {theirs}"]
        won = sum(mode.results[i.number].match > twin.results[i.number].match for i in judged)
        lost = sum(mode.results[i.number].match < twin.results[i.number].match for i in judged)
        p50s = [
            percentile([r.latency_ms for r in _results(run, m) if r.latency_ms is not None], 50)
            for m in (mode, twin)
        ]
        ratio = p50s[0] / p50s[1] if p50s[1] else float("nan")
        lines.append(
            f"| {mode.name} | " + " | ".join(cells) + f" | {won} / {lost} | "
            f"{p50s[0]:.0f} / {p50s[1]:.0f} | {ratio:.2f} |"
        )
    lines.append("")
    return lines


SKETCH_KEYS = (
    "chosen sketch right",
    "chosen sketch wrong",
    "the LLM's own query (no sketch)",
    "no gold sketch or no candidate",
)


def _sketch_table(run: Run, mode: Mode) -> list[str]:
    """Chosen sketch right or wrong against result right or wrong, and, for misses whose sketch
    is wrong, whether the gold sketch was among the candidates at all."""
    table: Counter[tuple[str, bool]] = Counter()
    among = 0
    sketch_misses = 0
    for item in run.judged:
        view = run.views.get(item.number)
        asked = mode.results[item.number]
        if asked.chosen == UNGUIDED:
            key = SKETCH_KEYS[2]
        elif view is None or view.gold is None or not view.candidates:
            key = SKETCH_KEYS[3]
        else:
            chosen = view.candidates[sketch_index(asked.chosen, len(view.candidates))]
            right = not sketch_differences(view.gold, chosen)
            key = SKETCH_KEYS[0] if right else SKETCH_KEYS[1]
            if not right and not asked.match:
                sketch_misses += 1
                among += any(
                    not sketch_differences(view.gold, candidate) for candidate in view.candidates
                )
        table[(key, asked.match)] += 1
    lines = ["| sketch (SELECT, FROM, KEYWORDS) | result right | result wrong |", "|---|---|---|"]
    for key in SKETCH_KEYS:
        if key == SKETCH_KEYS[2] and not (table[(key, True)] or table[(key, False)]):
            continue
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
                record = record_of(mode.name, item, mode.results[item.number])
                handle.write(json.dumps(record, default=str) + "\n")


# ---------------------------------------------------------------- main


async def run_benchmark(args: argparse.Namespace, base: Path, stack: contextlib.ExitStack) -> Run:
    items, dev_size, missing = dev_items(
        args.db, args.limit, args.sample, args.seed, numbers=frozenset(args.numbers)
    )
    if not items:
        raise BenchError("no dev question chosen (check --db, --limit and --sample)")
    environ = dict(os.environ)
    specs = mode_specs(
        args.modes,
        args.llm,
        environ,
        timeout_s=args.timeout,
        llm_timeout_s=args.llm_timeout,
        without_ambiguity=args.without_ambiguity,
        frequent_examples=args.frequent_examples,
    )
    if not specs:
        raise BenchError("no mode to run (check --modes, --llm and PGNL_LLM_BASE_URL)")
    resumed = read_checkpoint(args.checkpoint) if args.checkpoint else Resumed()
    checkpoint = Checkpoint(args.checkpoint) if args.checkpoint else None
    if checkpoint is not None:
        stack.callback(checkpoint.close)
    admin_dsn = args.dsn or start_postgres(base, stack)
    db_ids = sorted({item.db_id for item in items}, key=DEV_DATABASES.index)
    dsns = prepare_databases(admin_dsn, db_ids)
    gold = Gold(dsns)
    stack.callback(gold.close)
    leave_out = LeaveOut(dsns, args.history)
    stack.callback(leave_out.close)
    if args.history != query_history.NONE:
        writer = args.llm[0] if args.llm else config.LLMSettings().embedded_model
        learn_history(dsns, db_ids, args.history_questions, writer)
    upstream = upstream_of(admin_dsn)
    modes: list[Mode] = []
    runners: dict[str, Runner] = {}
    for spec in specs:
        mode = Mode(spec.name, spec.kind, describe(spec, environ), spec.timeout_s)
        mode.memory += resumed.memory.get(spec.name, [])
        modes.append(mode)
        pending = [i for i in items if (spec.name, i.number) not in resumed.results]
        pending_dbs = list(dict.fromkeys(i.db_id for i in pending))
        warm_dbs = [] if args.no_warmup else pending_dbs[:1] if spec.embedded else pending_dbs
        runner = Runner(
            spec, environ, upstream, base, dsns, warm_dbs=warm_dbs, query_log=not args.no_query_log
        )
        stack.callback(runner.stop)
        runners[spec.name] = runner
        if args.checkpoint:
            progress(
                f"{spec.name}: {len(items) - len(pending)} of {len(items)} questions in the "
                f"checkpoint, {len(pending)} to ask"
            )
    sketches = None
    if not args.no_attribution:
        sketches = Sketches(dsns)
        progress(f"in-process sketcher on {sketches.sketcher.provider}, for the loss attribution")
    run = Run(items, dev_size, missing, modes, warmup=not args.no_warmup)

    async def asker(mode: Mode, item: Item, rows: Rows, ordered: bool) -> Asked:
        return await runners[mode.name].ask(item, rows, ordered)

    started = time.perf_counter()
    try:
        views = sketches.view if sketches else None
        await ask_all(
            run,
            gold,
            views,
            asker,
            resumed=resumed,
            checkpoint=checkpoint,
            around=lambda item: leave_out.around(item.db_id, item.gold_pg),
        )
        for mode in modes:
            reading = runners[mode.name].memory()
            if reading is not None:
                mode.memory.append(reading)
                if checkpoint is not None:
                    checkpoint.memory(mode.name, reading)
            proxy = runners[mode.name].proxy
            if proxy is not None and not proxy.alive():
                progress(f"pgnl serve ({mode.name}) is not alive at the end of the run")
    finally:
        for runner in runners.values():
            await runner.close_client()
    progress(
        f"this run asked {sum(m.asked_now for m in modes)} (question, mode) pairs in "
        f"{time.perf_counter() - started:.0f} s"
    )
    return run


def learn_history(
    dsns: Mapping[str, str],
    db_ids: Sequence[str],
    questions: Path | None = None,
    model: str = "",
) -> None:
    """Each database's query history: the gold statements of all its dev questions
    (`benchmarks.query_history`), with the questions the embedded `model` writes for them
    where `questions` (the file of its answers) is given."""
    every, _, _ = dev_items(list(db_ids), 0, 0, 0)
    statements: dict[str, list[str]] = {db_id: [] for db_id in db_ids}
    for item in every:
        if item.gold_pg is not None:
            statements[item.db_id].append(item.gold_pg)
    started = time.perf_counter()
    writer = None
    if questions is not None:
        writer = query_history.CachedQuestions(questions, lambda: _question_llm(model))
    try:
        reports = query_history.learn_gold(dsns, statements, load_embedder(), writer)
    finally:
        if writer is not None:
            writer.close()
    added = sum(r.added for r, _ in reports.values())
    skipped = sum(r.skipped for r, _ in reports.values())
    line = (
        f"query history: {added} records over {len(reports)} databases ({skipped} gold "
        f"statements not read as one SELECT)"
    )
    if writer is not None:
        written = sum(q.written for _, q in reports.values())
        line += (
            f", {written} with a question by {model_label(model)} ({writer.asked} asked now, "
            f"the others from {questions})"
        )
    progress(f"{line}, {time.perf_counter() - started:.1f} s")


def _question_llm(model: str) -> BlockingLLM:
    """The embedded `model`, started to write the history's questions."""
    environ = {**os.environ, **model_environment(model), "PGNL_LLM_PROVIDER": "embedded"}
    environ["PGNL_LLM_BASE_URL"] = ""
    progress(f"query history: starting {model_label(model)} to write the questions")
    llm = BlockingLLM.start(config.load(environ=environ).llm)
    if llm is None:
        raise BenchError(f"--history-questions: {model} did not start")
    return llm


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"--modes takes a comma list of {', '.join(KINDS)}, not {text!r}"
        )
    return kinds


def _numbers(text: str) -> list[int]:
    try:
        return [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--numbers takes a comma list of dev.json places, not {text!r}"
        ) from None


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
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--limit", type=int, default=0, help="the first N questions (0: all)")
    chosen.add_argument(
        "--sample",
        type=int,
        default=0,
        help="N questions drawn at random (reproducibly, with --seed) across the databases",
    )
    chosen.add_argument(
        "--numbers",
        type=_numbers,
        default=[],
        help="only these questions: their places in dev.json, a comma list (as --details "
        "numbers them)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample (0)")
    parser.add_argument(
        "--llm",
        action="append",
        default=[],
        metavar="MODEL",
        help="an embedded LLM to measure, alone and in the full pipeline (repeatable): "
        f"{' or '.join(PACKAGED_MODELS)}, or a .gguf file",
    )
    parser.add_argument(
        "--modes",
        type=_kinds,
        default=list(KINDS),
        help="comma list of the modes to run: plm (PLM-only), alone and full (each --llm), "
        "url (the LLM at PGNL_LLM_BASE_URL, when set); default all",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="JSON lines file: each question's result is appended as it is judged, and those "
        "already there are not asked again (resume)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        help=f"seconds a request, PLM-only and url ({TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--llm-timeout",
        type=float,
        default=LLM_TIMEOUT_S,
        help=f"seconds a request in the embedded LLM modes ({LLM_TIMEOUT_S:g})",
    )
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
    parser.add_argument(
        "--without-ambiguity",
        action="store_true",
        help="beside PLM-only and each full mode, the same mode without the ambiguity stage "
        "(PGNL_AMBIGUITY_ENABLED=false), side by side",
    )
    parser.add_argument(
        "--history",
        choices=query_history.SETTINGS,
        default=query_history.NONE,
        help="each database's query history made of the gold SQL of its dev questions, without "
        "their questions; while a question is asked its own statement is left out "
        "(leave-one-out), or every statement of its pattern (leave-pattern-out). Default: none",
    )
    parser.add_argument(
        "--history-questions",
        type=Path,
        metavar="FILE",
        help="with --history: the records get the questions the (first) --llm model, else the "
        "default embedded model, writes for them (as pgnl learn has the LLM write them), its "
        "answers kept in FILE so that a later run asks only for what FILE lacks. Default: none "
        "(the records are found by their words)",
    )
    parser.add_argument(
        "--frequent-examples",
        action="store_true",
        help="beside each full mode, the same showing the LLM the query history's most run "
        "statements rather than those nearest the question (PGNL_AMBIGUITY_HISTORY_EXAMPLES_BY="
        "frequent), side by side",
    )
    parser.add_argument(
        "--no-query-log",
        action="store_true",
        help="read the chosen SQL and the trace with -- nl show: and -- nl explain: (two more "
        "pipeline runs a question) rather than from nl.query_log",
    )
    args = parser.parse_args(argv)
    if args.limit < 0 or args.sample < 0 or args.timeout <= 0 or args.llm_timeout <= 0:
        parser.error("--limit and --sample must be >= 0, --timeout and --llm-timeout > 0")
    for model in args.llm:
        if model not in PACKAGED_MODELS and not (
            model.endswith(".gguf") and Path(model).expanduser().is_file()
        ):
            parser.error(
                f"--llm {model}: not a packaged model ({', '.join(PACKAGED_MODELS)}) nor a "
                ".gguf file"
            )
    if args.llm and not set(args.modes) & set(EMBEDDED_KINDS):
        parser.error("--llm needs alone or full among --modes")
    if set(args.modes) <= set(EMBEDDED_KINDS) and not args.llm:
        parser.error("--modes alone/full need --llm MODEL")
    if args.history_questions is not None and args.history == query_history.NONE:
        parser.error("--history-questions needs --history")
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
        config.ConfigError,
        psycopg.Error,
        ValueIndexError,
    ) as exc:
        progress(f"benchmark failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
