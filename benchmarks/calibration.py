"""Predicate calibration, measured: recall by method and matching scope, index build throughput,
and value look-up latency with HNSW against an exact scan.

    python -m benchmarks.calibration [--dbs concert_singer,pets_1] [--methods char,hybrid]
        [--scopes in-column,multi-level] [--sizes 10000,100000,1000000]
        [--skip-recall] [--skip-latency] [--budget-s 900]

One run starts everything it needs and removes it at the end (or on Ctrl-C, or SIGTERM): an
embedded PostgreSQL of its own (temporary data directory, free port, fsync off). Then:

1. Index build. The Spider dev databases are loaded (`benchmarks.spider_pg`), each is migrated
   and its value index built with the shipped embedder (`proxy.valueindex.build_index`, timed).
   Beside each database's build, the same values are embedded again, all in one call (the model
   at its fastest: sorted by length, full batches), with no database: the ratio of the two rates
   is what indexing costs on top of the model itself (floor: build >= 0.8 x raw). Each is done
   twice, in the order build, raw, raw, build (the second build from an emptied index), and each
   side timed as the mean of its two, so that the machine's drift weighs on both alike. The
   build's own time inside the embedder is shown too; the build embeds in a worker thread while
   it writes, so the two overlap. The build embeds a text that two columns hold once, the raw
   pass every value: the floor is judged per value indexed, and the ratio per text embedded
   is shown beside it.
2. The perturbation set (`benchmarks.perturb.build_cases`): its size and composition.
3. Recall: every case through `proxy.nl2sql.calibrate.calibrate`, for each similarity method and
   each matching scope (in-column: the predicted column only; in-database: the whole database
   only; multi-level: column, then table, then database, as ZeroNL2SQL does). A perturbed case is
   value-recovered when a calibration of its literal proposes exactly the right value, and
   column-recovered when that value is proposed in the right column; an `original` case is
   untouched when its literal drew no calibration. Also shown, stricter: the share of original
   cases whose query came back unchanged as a whole (a gold query can hold another literal that
   is not in the database, such as flight_2's 'ASY', stored as ' ASY', which calibration
   repairs; that literal is not a case). The paper's Tables 5 and 6 are value recall@1 by method
   and by scope. Floors: the best configuration recovers >= 90% of perturbed literals in the
   right column, and leaves >= 99% of correct literals untouched. Cases are evaluated in one
   seeded shuffled order, so that a configuration stopped by the time budget (--budget-s) is
   measured on a random sample; the output says so wherever that happened.
4. Look-up latency, in a database of its own: tables of 10k, 100k and 1M (value, embedding
   vector(384)) rows. The first rows are the real embeddings of the Spider values indexed in
   step 1; the rest are made from them by adding Gaussian noise and re-normalising (numpy,
   seeded). The noise is chosen from the data (--noise auto): a copy ends up about as far from
   its source as a real value is from its nearest real neighbour, so the table is as dense
   around each value as the real data. (Less noise makes tight clusters of near-copies around
   each real value, a shape HNSW finds harder: --noise 0.03, cosine 0.86 to the source, gave
   recall@1 0.74 at 1M.) Rows go in with binary COPY; an HNSW index (vector_cosine_ops, with
   the m and ef_construction `pgnl index` would choose for that many values, or --m and
   --ef-construction) is built and timed; then 200 query vectors (real embeddings with noise,
   none of them in the table) are looked up with `ORDER BY embedding <=> $1 LIMIT 1`: through
   HNSW (hnsw.ef_search 40, the default, then 100, 200 and 400) and by an exact scan (index
   scans off; fewer queries at 1M, where a scan takes half a second). HNSW recall@1 is against
   the exact answer, computed for all queries in numpy and checked against PostgreSQL's own
   exact scans. Floor at 1M: p50 <= 5 ms and recall@1 >= 0.98, at the ef_search pgnl's
   look-ups use on that graph.

Progress goes to stderr; the report to stdout. Timings are wall-clock, on whatever machine runs
this, with the database, the embedder and this process sharing its cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import struct
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy
import psycopg
from numpy.typing import NDArray
from psycopg import sql

from benchmarks.perturb import KINDS, Case, Composition, build_cases
from benchmarks.proxy_overhead import free_port, workspace
from benchmarks.spider_pg import DEV_DATABASES, database_dsn, load_dev_databases
from proxy.config import IndexSettings
from proxy.embedded import EmbeddedError, EmbeddedPostgres
from proxy.migrate import migrate
from proxy.nl2sql import similarity
from proxy.nl2sql.calibrate import METHODS, Calibration, DatabaseCatalog, Level, Method, calibrate
from proxy.nl2sql.database import PsycopgDatabase
from proxy.runtime import load_embedder
from proxy.valueindex import (
    BuildReport,
    ColumnRef,
    Embedder,
    ValueIndex,
    ValueIndexError,
    build_index,
)
from proxy.valueindex.common import (
    EMBEDDING_DIMENSION,
    LARGE_GRAPH,
    MEDIUM_GRAPH,
    SMALL_GRAPH,
    HnswGraph,
    graph_for,
    graph_memory_mb,
)

Vectors = NDArray[numpy.float32]

SCOPES: dict[str, tuple[Level, ...]] = {
    "in-column": ("column",),
    "in-database": ("database",),
    "multi-level": ("column", "table", "database"),
}
PERTURBED_KINDS = tuple(kind for kind in KINDS if kind != "original")
COLUMN_RECALL_FLOOR = 0.90
UNTOUCHED_FLOOR = 0.99
BUILD_RATIO_FLOOR = 0.8
LATENCY_P50_FLOOR_MS = 5.0
HNSW_RECALL_FLOOR = 0.98
FLOOR_SIZE = 1_000_000

SEED = 20240601
QUERY_NOISE = 0.02  # per-component sigma of query vectors: cosine ~0.93 to their source
NN_SAMPLE = 2000  # rows whose nearest neighbour is looked up to describe the data
CHUNK_ROWS = 100_000
EF_SEARCH = (40, 100, 200, 400)  # the first is pgvector's default
assert all(g.ef_search in EF_SEARCH for g in (SMALL_GRAPH, MEDIUM_GRAPH, LARGE_GRAPH))
LATENCY_DB = "pgnl_calibration_latency"
COPY_CHUNK = 20_000
WARM_QUERIES = 10
TIE = 1e-5  # cosine distances this close are a tie (pgvector computes them in float32)
LARGE_SIZE = 500_000  # from this many rows on, the exact scan runs on --exact-queries only

SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "2GB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
    "log_min_messages": "warning",
}
PARALLEL_MAINTENANCE_WORKERS = 2


class BenchError(RuntimeError):
    """Something the benchmark needs did not work; the message says what."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}" if whole else "  n/a"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def percentile(values: Sequence[float], q: float) -> float:
    return float(numpy.percentile(numpy.asarray(values, dtype=numpy.float64), q))


# ---------------------------------------------------------------- the server


def start_postgres(base: Path, stack: contextlib.ExitStack) -> EmbeddedPostgres:
    server = EmbeddedPostgres.throwaway(base, f"pgnl-calibration-{os.getpid()}", free_port())
    stack.callback(server.drop)
    progress(f"starting the embedded PostgreSQL on 127.0.0.1:{server.port}")
    server.start(SERVER_SETTINGS)
    return server


# ---------------------------------------------------------------- 1. index build throughput


class TimedEmbedder:
    """An embedder that counts the time spent in the model (to split a build's time)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.texts = 0

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        started = time.perf_counter()
        try:
            return numpy.asarray(self.inner.embed(texts), dtype=numpy.float32)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += len(texts)


@dataclass
class BuildOutcome:
    reports: dict[str, BuildReport] = field(default_factory=dict)
    columns: list[list[str]] = field(default_factory=list)  # every indexed column's values
    build_values: int = 0
    build_reused: int = 0  # of build_values, the same text as another column's: embedded once
    build_seconds: float = 0.0
    build_model_seconds: float = 0.0  # of build_seconds, inside the embedder
    build_index_seconds: float = 0.0  # of build_seconds, building the search indexes
    raw_seconds: float = 0.0
    raw_by_db: dict[str, float] = field(default_factory=dict)
    embeddings: Vectors = field(
        default_factory=lambda: numpy.zeros((0, EMBEDDING_DIMENSION), dtype=numpy.float32)
    )
    labels: list[str] = field(default_factory=list)  # the value of each embedding row

    @property
    def build_rate(self) -> float:
        return self.build_values / self.build_seconds if self.build_seconds else 0.0

    @property
    def raw_rate(self) -> float:
        values = sum(len(c) for c in self.columns)
        return values / self.raw_seconds if self.raw_seconds else 0.0


def build_indexes(dsns: dict[str, str], embedder: Embedder) -> BuildOutcome:
    """Migrate and index each database twice, from an empty index, and embed the same values
    twice with no database, in the order build, raw, raw, build (so that a machine slowing down
    or speeding up during the four weighs on both sides alike); each side's time is the mean of
    its two."""
    outcome = BuildOutcome()
    timed = TimedEmbedder(embedder)
    embedder.embed([f"warm-up value {i}" for i in range(256)])  # first-run costs, untimed
    chunks: list[Vectors] = []
    for number, (db_id, dsn) in enumerate(dsns.items(), 1):
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
            first, seconds, model = timed_build(conn, timed)
            columns = indexed_columns(conn)
            # The model at its fastest: every value in one call (the embedder sorts them by
            # length and runs full batches), with no database.
            flat = [value for values in columns for value in values]
            raw = []
            for _ in range(2):
                began = time.perf_counter()
                matrix = embedder.embed(flat)
                raw.append(time.perf_counter() - began)
            conn.execute("TRUNCATE nl.value_index, nl.value_index_columns")
            report, again, model_again = timed_build(conn, timed)
            if report.values_embedded != first.values_embedded:
                raise RuntimeError(
                    f"{db_id}: the second build indexed {report.values_embedded} values, the "
                    f"first {first.values_embedded}"
                )
        seconds = (seconds + again) / 2
        outcome.reports[db_id] = report
        outcome.build_values += report.values_embedded
        outcome.build_reused += report.values_reused
        outcome.build_seconds += seconds
        outcome.build_model_seconds += (model + model_again) / 2
        outcome.build_index_seconds += (first.index_seconds + report.index_seconds) / 2
        chunks.append(numpy.asarray(matrix, dtype=numpy.float32))
        outcome.labels += flat
        outcome.columns += columns
        outcome.raw_seconds += sum(raw) / 2
        outcome.raw_by_db[db_id] = sum(raw) / 2
        progress(
            f"[{number}/{len(dsns)}] {db_id}: indexed {len(report.indexed)} columns, "
            f"{report.values_embedded:,} values in {seconds:.2f} s "
            f"({report.values_embedded / seconds if seconds else 0:,.0f} values/s); "
            f"raw embedding {sum(raw) / 2:.2f} s"
        )
    if chunks:
        outcome.embeddings = numpy.concatenate(chunks)
    return outcome


def timed_build(
    conn: psycopg.Connection[Any], timed: TimedEmbedder
) -> tuple[BuildReport, float, float]:
    """build_index, with its wall-clock seconds and the seconds it spent in the embedder."""
    model_before = timed.seconds
    started = time.perf_counter()
    report = build_index(conn, timed, progress=False)
    return report, time.perf_counter() - started, timed.seconds - model_before


def indexed_columns(conn: psycopg.Connection[Any]) -> list[list[str]]:
    """The values the index holds, column by column (most frequent first)."""
    rows = conn.execute(
        "SELECT schema_name, table_name, column_name, value FROM nl.value_index "
        "ORDER BY schema_name, table_name, column_name, frequency DESC, value"
    ).fetchall()
    columns: list[list[str]] = []
    current: tuple[str, str, str] | None = None
    for schema, table, column, value in rows:
        if (schema, table, column) != current:
            current = (schema, table, column)
            columns.append([])
        columns[-1].append(str(value))
    return columns


def report_build(outcome: BuildOutcome) -> None:
    print("== 1. Value index build throughput ==")
    print(
        f"{'database':<30} {'columns':>7} {'values':>7} {'build s':>8} {'values/s':>9} "
        f"{'raw s':>6} {'values/s':>9} {'ratio':>6}"
    )
    for db_id, report in outcome.reports.items():
        raw = outcome.raw_by_db.get(db_id, 0.0)
        raw_rate = report.values_embedded / raw if raw else 0.0
        print(
            f"{db_id:<30} {len(report.indexed):>7} {report.values_embedded:>7,} "
            f"{report.seconds:>8.2f} {report.values_per_second:>9,.0f} {raw:>6.2f} "
            f"{raw_rate:>9,.0f} {report.values_per_second / raw_rate if raw_rate else 0:>6.2f}"
        )
    raw_values = sum(len(c) for c in outcome.columns)
    print(
        f"build_index: {outcome.build_values:,} values in {outcome.build_seconds:.2f} s = "
        f"{outcome.build_rate:,.0f} values/s ({outcome.build_model_seconds:.2f} s inside the "
        "embedder, in a worker thread that embeds the next columns while the build writes)"
    )
    print(
        f"raw embedding, same model, same {raw_values:,} values, each database's in one call "
        "(sorted by length, full batches), no database, twice between that database's two "
        "builds: "
        f"{outcome.raw_seconds:.2f} s = {outcome.raw_rate:,.0f} values/s"
    )
    ratio = outcome.build_rate / outcome.raw_rate if outcome.raw_rate else 0.0
    print(
        f"build / raw = {ratio:.3f}  (floor >= {BUILD_RATIO_FLOOR}: "
        f"{verdict(ratio >= BUILD_RATIO_FLOOR)})"
    )
    texts = outcome.build_values - outcome.build_reused
    print(
        f"the build embedded {texts:,} texts for its {outcome.build_values:,} values "
        f"({outcome.build_reused:,} share the text of another column of their database and took "
        f"its vector); per text embedded, build / raw = "
        f"{texts / outcome.build_seconds / outcome.raw_rate if ratio else 0:.3f}"
    )
    rest = outcome.build_seconds - outcome.build_index_seconds
    print(
        f"of the build's {outcome.build_seconds:.2f} s, {outcome.build_index_seconds:.2f} s went "
        "to building the HNSW and trigram indexes in one pass after the rows were written; "
        f"the rest, {rest:.2f} s, against raw embedding: "
        f"{outcome.raw_seconds / rest if rest > 0 else 0:.3f}"
    )
    print()


# ---------------------------------------------------------------- 2. the perturbation set


def report_composition(cases: list[Case], composition: Composition) -> None:
    print("== 2. Perturbation set (Spider dev gold queries) ==")
    print(composition.summary())
    for reason, examples in composition.examples.items():
        print(f"  {reason}: e.g. {'; '.join(examples[:3])}")
    if composition.errors:
        print(f"  {len(composition.errors)} transpile or execution errors, e.g.:")
        for error in composition.errors[:5]:
            print(f"    {error[:160]}")
    perturbed = sum(1 for c in cases if c.kind != "original")
    print(
        f"perturbed cases: {perturbed}; original (already correct) cases: {len(cases) - perturbed}"
    )
    print()


# ---------------------------------------------------------------- 3. recall


@dataclass
class Outcome:
    """What one configuration did with one case."""

    case: Case
    value_ok: bool
    column_ok: bool
    untouched: bool  # original cases: the case's literal drew no calibration
    seconds: float
    found: Calibration | None
    error: str | None = None
    query_unchanged: bool = False  # original cases: nothing in the query was rewritten
    applied: tuple[Calibration, ...] = ()  # what was rewritten in the query


@dataclass
class ConfigResult:
    method: Method
    scope: str
    outcomes: list[Outcome] = field(default_factory=list)
    total_cases: int = 0
    seconds: float = 0.0

    @property
    def capped(self) -> bool:
        return len(self.outcomes) < self.total_cases

    def perturbed(self, kind: str | None = None) -> list[Outcome]:
        return [
            o
            for o in self.outcomes
            if o.case.kind != "original" and (kind is None or o.case.kind == kind)
        ]

    def originals(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.case.kind == "original"]

    def value_recall(self, kind: str | None = None) -> float:
        some = self.perturbed(kind)
        return sum(o.value_ok for o in some) / len(some) if some else 0.0

    def column_recall(self, kind: str | None = None) -> float:
        some = self.perturbed(kind)
        return sum(o.column_ok for o in some) / len(some) if some else 0.0

    def untouched(self) -> float:
        some = self.originals()
        return sum(o.untouched for o in some) / len(some) if some else 0.0

    def query_unchanged(self) -> float:
        some = self.originals()
        return sum(o.query_unchanged for o in some) / len(some) if some else 0.0

    def passes(self) -> bool:
        return (
            not self.capped
            and self.column_recall() >= COLUMN_RECALL_FLOOR
            and self.untouched() >= UNTOUCHED_FLOOR
        )

    @property
    def label(self) -> str:
        return f"{self.method}/{self.scope}"


def _core(literal: str, operator: str) -> str:
    """A predicate's literal as the case records it (a LIKE pattern without its end wildcards)."""
    return literal.strip("%") if "like" in operator else literal


def judge(case: Case, calibrations: Sequence[Calibration], changed: bool) -> Outcome:
    """Score one result (seconds filled in by the caller)."""
    mine = [c for c in calibrations if _core(c.literal, case.operator) == case.perturbed_literal]
    right = [c for c in mine if c.new_value == case.expected_value]
    in_column = [
        c
        for c in right
        if (c.new_column.schema, c.new_column.table, c.new_column.column)
        == tuple(case.expected_column)
    ]
    chosen = in_column or right or mine
    shown = chosen[0] if chosen else None
    return Outcome(
        case,
        value_ok=bool(right),
        column_ok=bool(in_column),
        untouched=not mine,
        seconds=0.0,
        found=shown,
        query_unchanged=not changed,
        applied=tuple(c for c in calibrations if c.applied),
    )


def run_config(
    method: Method,
    scope: str,
    cases: Sequence[Case],
    lookups: dict[str, tuple[ValueIndex, PsycopgDatabase]],
    budget_s: float,
) -> ConfigResult:
    result = ConfigResult(method, scope, total_cases=len(cases))
    started = time.perf_counter()
    last_report = started
    for number, case in enumerate(cases, 1):
        index, db = lookups[case.db_id]
        began = time.perf_counter()
        try:
            calibrated = calibrate(
                case.sql_postgres,
                index,
                DatabaseCatalog(db),
                method=method,
                levels=SCOPES[scope],
            )
            outcome = judge(case, calibrated.calibrations, calibrated.changed)
        except (psycopg.Error, ValueIndexError) as exc:
            outcome = Outcome(case, False, False, False, 0.0, None, str(exc).strip()[:200])
        outcome.seconds = time.perf_counter() - began
        result.outcomes.append(outcome)
        now = time.perf_counter()
        if now - last_report >= 30:
            last_report = now
            progress(
                f"    {result.label}: {number}/{len(cases)} cases, {now - started:.0f} s, "
                f"column recall so far {100 * result.column_recall():.1f}%"
            )
        if now - started > budget_s and number < len(cases):
            progress(
                f"    {result.label}: time budget of {budget_s:.0f} s spent after "
                f"{number}/{len(cases)} cases; the rest is not evaluated"
            )
            break
    result.seconds = time.perf_counter() - started
    return result


def evaluate(
    cases: list[Case],
    *,
    dsns: dict[str, str],
    embedder: Embedder,
    methods: Sequence[Method],
    scopes: Sequence[str],
    budget_s: float,
) -> list[ConfigResult]:
    order = list(cases)
    random.Random(SEED).shuffle(order)
    if "glove" in methods:
        similarity.GloVe.load()  # read the vectors once, before anything is timed
    results: list[ConfigResult] = []
    with contextlib.ExitStack() as stack:
        lookups: dict[str, tuple[ValueIndex, PsycopgDatabase]] = {}
        for db_id in sorted({case.db_id for case in cases}):
            conn = stack.enter_context(psycopg.connect(dsns[db_id], autocommit=True))
            db = PsycopgDatabase(conn)
            lookups[db_id] = (ValueIndex(db, embedder), db)
        total = len(methods) * len(scopes)
        for number, (method, scope) in enumerate(
            ((m, s) for m in methods for s in scopes), start=1
        ):
            progress(f"[{number}/{total}] calibrating {len(order)} cases: {method} / {scope}")
            result = run_config(method, scope, order, lookups, budget_s)
            progress(
                f"    done in {result.seconds:.1f} s: value recall "
                f"{100 * result.value_recall():.1f}%, column recall "
                f"{100 * result.column_recall():.1f}%, untouched {100 * result.untouched():.1f}% "
                f"(query unchanged {100 * result.query_unchanged():.1f}%)"
            )
            results.append(result)
    return results


def index_coverage(case: Case, reports: dict[str, BuildReport]) -> str:
    """'indexed', or why the value index holds no values of the case's right column."""
    report = reports.get(case.db_id)
    if report is None:
        return "unknown"
    ref = ColumnRef(*case.expected_column)
    if ref in report.indexed:
        return "indexed"
    return f"not indexed: {report.skipped.get(ref, 'not a column the index reads')}"


def report_recall(
    results: list[ConfigResult], scopes: Sequence[str], reports: dict[str, BuildReport]
) -> None:
    if not results:
        return
    print("== 3. Calibration recall@1 by similarity method x matching scope ==")
    first = results[0]
    perturbed, originals = len(first.perturbed()), len(first.originals())
    print(
        f"cells: value recall % / column recall % over the perturbed cases ({perturbed}), "
        f"untouched % over the original ones ({originals}: the literal drew no calibration; in "
        f"brackets, the query came back unchanged as a whole); * = meets both floors (column "
        f">= {100 * COLUMN_RECALL_FLOOR:.0f}%, untouched >= {100 * UNTOUCHED_FLOOR:.0f}%)"
    )
    by_key = {(r.method, r.scope): r for r in results}
    methods = list(dict.fromkeys(r.method for r in results))
    width = 34
    print(f"{'method':<9}" + "".join(f" {scope:>{width}}" for scope in scopes))
    for method in methods:
        cells = []
        for scope in scopes:
            r = by_key.get((method, scope))
            if r is None:
                cells.append(f"{'-':>{width}}")
                continue
            mark = "*" if r.passes() else (" ~" if r.capped else " ")
            text = (
                f"{100 * r.value_recall():.1f} / {100 * r.column_recall():.1f} | "
                f"{100 * r.untouched():.1f} ({100 * r.query_unchanged():.1f})"
            )
            cells.append(f"{text + mark:>{width}}")
        print(f"{method:<9}" + "".join(f" {c}" for c in cells))
    capped = [r for r in results if r.capped]
    for r in capped:
        print(
            f"~ {r.label}: capped by the time budget: {len(r.outcomes)} of {r.total_cases} cases "
            f"evaluated (a random sample: cases run in a seeded shuffled order); its figures are "
            "estimates, and it is not eligible for the floors"
        )
    print()
    print("Time per configuration (seconds in all; ms per case, mean and p95)")
    print(
        f"{'configuration':<24} {'cases':>6} {'seconds':>8} {'mean ms':>8} {'p95 ms':>8} "
        f"{'errors':>6}"
    )
    for r in results:
        times = [1000 * o.seconds for o in r.outcomes] or [0.0]
        errors = sum(o.error is not None for o in r.outcomes)
        print(
            f"{r.label:<24} {len(r.outcomes):>6} {r.seconds:>8.1f} "
            f"{statistics.fmean(times):>8.1f} {percentile(times, 95):>8.1f} {errors:>6}"
        )
    print()
    print("Column recall % by kind of perturbation (value recall % where it differs)")
    print(f"{'configuration':<24}" + "".join(f" {k:>13}" for k in PERTURBED_KINDS))
    for r in results:
        cells = []
        for kind in PERTURBED_KINDS:
            n = len(r.perturbed(kind))
            column = pct(r.column_recall(kind) * n, n).strip()
            value = pct(r.value_recall(kind) * n, n).strip()
            cells.append(column if column == value else f"{column} ({value})")
        print(f"{r.label:<24}" + "".join(f" {c:>13}" for c in cells))
    print()
    eligible = [r for r in results if not r.capped] or results
    best = max(eligible, key=lambda r: (r.column_recall(), r.untouched(), r.value_recall()))
    print(f"Best configuration: {best.label}")
    print(f"{'kind':<14} {'cases':>6} {'value %':>8} {'column %':>9}")
    for kind in PERTURBED_KINDS:
        n = len(best.perturbed(kind))
        print(
            f"{kind:<14} {n:>6} {pct(best.value_recall(kind) * n, n):>8} "
            f"{pct(best.column_recall(kind) * n, n):>9}"
        )
    n = len(best.perturbed())
    print(
        f"{'all perturbed':<14} {n:>6} {pct(best.value_recall() * n, n):>8} "
        f"{pct(best.column_recall() * n, n):>9}"
    )
    coverage: dict[str, list[Outcome]] = {}
    for o in best.perturbed():
        coverage.setdefault(index_coverage(o.case, reports), []).append(o)
    for where, some in sorted(coverage.items(), key=lambda item: -len(item[1])):
        kinds = Counter(o.case.kind for o in some)
        print(
            f"  right column {where}: {len(some)} cases, column recall "
            f"{pct(sum(o.column_ok for o in some), len(some)).strip()}% "
            f"({', '.join(f'{k} {n}' for k, n in kinds.most_common())})"
        )
    m = len(best.originals())
    print(
        f"{'original':<14} {m:>6} untouched {pct(best.untouched() * m, m).strip()}% (query "
        f"unchanged as a whole: {pct(best.query_unchanged() * m, m).strip()}%)"
    )
    column_ok = best.column_recall() >= COLUMN_RECALL_FLOOR
    untouched_ok = best.untouched() >= UNTOUCHED_FLOOR
    print(
        f"floor: column recall {100 * best.column_recall():.1f}% >= "
        f"{100 * COLUMN_RECALL_FLOOR:.0f}%: {verdict(column_ok)}; untouched "
        f"{100 * best.untouched():.1f}% >= {100 * UNTOUCHED_FLOOR:.0f}%: {verdict(untouched_ok)}"
    )
    passing = [r.label for r in results if r.passes()]
    print(f"configurations meeting both floors: {', '.join(passing) or 'none'}")
    strict = [r.label for r in results if r.passes() and r.query_unchanged() >= UNTOUCHED_FLOOR]
    print(
        "... and with untouched counted as the whole query unchanged: "
        f"{', '.join(strict) or 'none'}"
    )
    changed = [o for o in best.originals() if o.untouched and not o.query_unchanged]
    if changed:
        print(
            f"{best.label}: original cases whose literal was left alone but whose query was "
            "changed (another literal of the gold query, not a case):"
        )
        seen: set[str] = set()
        for o in changed:
            for c in o.applied:
                line = (
                    f"  {o.case.db_id}: {c.column.table}.{c.column.column} = {c.literal!r} -> "
                    f"{c.new_column.table}.{c.new_column.column} = {c.new_value!r} ({c.level})"
                )
                if line not in seen:
                    seen.add(line)
                    print(f"{line}  [{sum(o2.applied == o.applied for o2 in changed)} cases]")
    print()
    print(f"Misses of {best.label}, up to 4 a kind (what calibration proposed, if anything)")
    if best.column_recall() == 1.0 and best.untouched() == 1.0:
        print("  none")
    for kind in (*PERTURBED_KINDS, "original"):
        if kind == "original":
            misses = [o for o in best.originals() if not o.untouched]
        else:
            misses = [o for o in best.perturbed(kind) if not o.column_ok]
        for o in misses[:4]:
            case = o.case
            got = (
                f"error {o.error}"
                if o.error is not None
                else "nothing"
                if o.found is None
                else f"{o.found.new_column.table}.{o.found.new_column.column} = "
                f"{o.found.new_value!r} ({o.found.level}, {o.found.score:.2f})"
            )
            print(
                f"  {kind:<13} {case.db_id}: {case.predicate_column.table}."
                f"{case.predicate_column.column} {case.operator} {case.perturbed_literal!r}; "
                f"right: {case.expected_column.column} = {case.expected_value!r}; got {got}"
            )
    print()


# ---------------------------------------------------------------- 4. look-up latency


def unit_rows(matrix: NDArray[Any]) -> Vectors:
    norms = numpy.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return numpy.asarray(matrix / norms, dtype=numpy.float32)


def sigma_for_cosine(cosine: float, dimension: int) -> float:
    """Per-component sigma of the Gaussian noise that, added to a unit vector and re-normalised,
    leaves it at about `cosine` to where it was: cos = 1 / sqrt(1 + dimension * sigma^2)."""
    return float(numpy.sqrt((1.0 / cosine**2 - 1.0) / dimension))


def nearest_cosines(sample: Vectors, vectors: Vectors, own_rows: NDArray[Any]) -> NDArray[Any]:
    """Each sample row's cosine to its nearest row of `vectors` other than itself."""
    best = numpy.full(len(sample), -numpy.inf, dtype=numpy.float64)
    for start in range(0, len(vectors), CHUNK_ROWS):
        sims = sample @ vectors[start : start + CHUNK_ROWS].T
        inside = (own_rows >= start) & (own_rows < start + CHUNK_ROWS)
        sims[numpy.nonzero(inside)[0], own_rows[inside] - start] = -numpy.inf
        best = numpy.maximum(best, sims.max(axis=1))
    return best


@dataclass
class Synthetic:
    vectors: Vectors  # the first `real` rows are real embeddings
    labels: list[str]
    real: int
    queries: Vectors
    data_sigma: float
    sigma_given: bool  # --noise, rather than chosen from the real data
    data_cosine: float  # mean cosine of a generated row to its source
    query_cosine: float  # mean cosine of a query to its source
    real_nn: float  # median cosine of a real row to its nearest other real row
    generated_nn: float  # the same for generated rows, among all rows (nan: none generated)
    description: str = ""  # how the rows were made, where not by noise (--rows embedded)


def synthesise(
    embeddings: Vectors, labels: list[str], size: int, queries: int, noise: float | None
) -> Synthetic:
    """`size` rows: the real embeddings (distinct values, in a seeded order), then copies of them
    with Gaussian noise, re-normalised. `noise` None: the sigma that puts a copy as far from its
    source as a real value is from its nearest real neighbour (the median), so that the table
    is about as dense around each value as the real data is."""
    rng = numpy.random.default_rng(SEED)
    first: dict[str, int] = {}
    for row, label in enumerate(labels):
        first.setdefault(label, row)
    distinct = numpy.fromiter(first.values(), dtype=numpy.int64)
    distinct = distinct[rng.permutation(len(distinct))]
    base = embeddings[distinct]
    base_labels = [labels[i] for i in distinct]
    dimension = base.shape[1]
    sample = numpy.arange(min(NN_SAMPLE, len(base)))
    real_nn = float(numpy.median(nearest_cosines(base[sample], base, sample)))
    sigma = noise if noise is not None else sigma_for_cosine(real_nn, dimension)
    real = min(size, len(base))
    out = numpy.empty((size, dimension), dtype=numpy.float32)
    out[:real] = base[:real]
    out_labels = base_labels[:real]
    cosines: list[float] = []
    for start in range(real, size, CHUNK_ROWS):
        count = min(CHUNK_ROWS, size - start)
        source = rng.integers(0, len(base), size=count)
        noisy = base[source] + rng.normal(0.0, sigma, (count, dimension))
        out[start : start + count] = unit_rows(noisy)
        cosines.append(float(numpy.mean(numpy.sum(out[start : start + count] * base[source], 1))))
        out_labels += [f"{base_labels[s]} ~{start + i}" for i, s in enumerate(source.tolist())]
        progress(f"  generated {start + count:,}/{size:,} rows")
    generated_nn = float("nan")
    if size > real:
        rows = rng.choice(numpy.arange(real, size), size=min(NN_SAMPLE // 4, size - real))
        progress(f"  nearest neighbours of {len(rows)} generated rows among {size:,}")
        generated_nn = float(numpy.median(nearest_cosines(out[rows], out, rows)))
    source = rng.integers(0, len(base), size=queries)
    query = unit_rows(base[source] + rng.normal(0.0, QUERY_NOISE, (queries, dimension)))
    return Synthetic(
        vectors=out,
        labels=out_labels,
        real=real,
        queries=query,
        data_sigma=sigma,
        sigma_given=noise is not None,
        data_cosine=statistics.fmean(cosines) if cosines else 1.0,
        query_cosine=float(numpy.mean(numpy.sum(query * base[source], 1))),
        real_nn=real_nn,
        generated_nn=generated_nn,
    )


def embedded_rows(labels: list[str], size: int, queries: int) -> Synthetic:
    """`size` distinct values, each really embedded: the real Spider values, then new ones made
    of their words (one to three, in a seeded order). Queries: real values with one character
    changed, embedded too, as a literal with a typo would be."""
    embedder = load_embedder()
    rng = random.Random(SEED)
    real_values = sorted(set(labels))
    rng.shuffle(real_values)
    words = sorted({w for v in real_values for w in v.split() if any(c.isalpha() for c in w)})
    values = real_values[:size]
    seen = set(values)
    while len(values) < size:
        value = " ".join(rng.choice(words) for _ in range(rng.choice((1, 2, 2, 3))))
        if value not in seen:
            seen.add(value)
            values.append(value)
    out = numpy.empty((size, EMBEDDING_DIMENSION), dtype=numpy.float32)
    step = IndexSettings().batch_size * 4
    started = time.monotonic()
    for start in range(0, size, step):
        out[start : start + step] = embedder.embed(values[start : start + step])
        done = min(start + step, size)
        if done % (step * 20) == 0 or done == size:
            rate = done / max(time.monotonic() - started, 1e-9)
            progress(f"  embedded {done:,}/{size:,} values ({rate:,.0f} values/s)")
    typos = []
    for value in rng.sample(real_values, min(queries, len(real_values))):
        i = rng.randrange(len(value))
        typos.append(value[:i] + rng.choice("aeiourstn") + value[i + 1 :])
    query = embedder.embed(typos)
    real = min(size, len(real_values))
    sample = numpy.arange(min(NN_SAMPLE, real))
    return Synthetic(
        vectors=out,
        labels=values,
        real=real,
        queries=query,
        data_sigma=0.0,
        sigma_given=False,
        data_cosine=1.0,
        query_cosine=float("nan"),
        real_nn=float(numpy.median(nearest_cosines(out[sample], out[:real], sample))),
        generated_nn=float("nan"),
        description=(
            f"{size:,} distinct values, each embedded by pgnl's embedder: {real:,} real Spider "
            f"values, the rest made of one to three of their {len(words):,} words; "
            f"{len(query)} queries: real values with one character changed, embedded"
        ),
    )


def exact_nearest(vectors: Vectors, queries: Vectors) -> tuple[NDArray[Any], NDArray[Any]]:
    """Row index and cosine distance of each query's nearest row (brute force, in chunks)."""
    best = numpy.full(len(queries), -1, dtype=numpy.int64)
    best_sim = numpy.full(len(queries), -numpy.inf, dtype=numpy.float64)
    for start in range(0, len(vectors), CHUNK_ROWS):
        sims = queries @ vectors[start : start + CHUNK_ROWS].T
        rows = numpy.argmax(sims, axis=1)
        values = sims[numpy.arange(len(queries)), rows]
        better = values > best_sim
        best[better] = rows[better] + start
        best_sim[better] = values[better]
    return best, 1.0 - best_sim


def vector_text(row: Vectors) -> str:
    return "[" + ",".join(f"{x:.8g}" for x in row.tolist()) + "]"


def copy_rows(conn: psycopg.Connection[Any], table: str, data: Synthetic, size: int) -> None:
    """Binary COPY of rows 0..size-1 (id, value, embedding), in chunks, with progress."""
    dim = data.vectors.shape[1]
    vector_head = struct.pack("!ihh", 4 + 4 * dim, dim, 0)  # pgvector's binary form
    row_head = struct.pack("!hi", 3, 4)
    statement = sql.SQL("COPY {} (id, value, embedding) FROM STDIN (FORMAT binary)").format(
        sql.Identifier(table)
    )
    started = time.perf_counter()
    with conn.cursor() as cur, cur.copy(statement) as copy:
        copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0))
        for start in range(0, size, COPY_CHUNK):
            stop = min(size, start + COPY_CHUNK)
            big_endian = data.vectors[start:stop].astype(">f4")
            parts: list[bytes] = []
            for offset in range(stop - start):
                row = start + offset
                value = data.labels[row].encode()
                parts.append(
                    row_head
                    + struct.pack("!ii", row, len(value))
                    + value
                    + vector_head
                    + big_endian[offset].tobytes()
                )
            copy.write(b"".join(parts))
            if stop == size or stop % 200_000 == 0:
                elapsed = time.perf_counter() - started
                progress(f"  copied {stop:,}/{size:,} rows ({stop / elapsed:,.0f} rows/s)")
        copy.write(struct.pack("!h", -1))


@dataclass
class LatencyResult:
    size: int
    graph: HnswGraph
    real: int
    copy_seconds: float
    build_seconds: float
    table_mb: float
    index_mb: float
    notices: list[str]
    hnsw_ms: dict[int, list[float]]  # ef_search -> latencies
    hnsw_recall: dict[int, float]
    exact_ms: list[float]
    exact_agrees: int  # PostgreSQL's exact answers that match numpy's


def timed_lookups(
    conn: psycopg.Connection[Any], table: str, queries: Sequence[str], mode: str
) -> tuple[list[float], list[int]]:
    """Latency (ms) and answer of each query. `mode` goes into the statement's text: psycopg
    prepares a statement run often, and a prepared plan outlives the settings it was made with
    (enable_indexscan), so each mode needs a statement of its own."""
    statement = sql.SQL(
        "SELECT id FROM {} /* {} */ ORDER BY embedding <=> %s::vector LIMIT 1"
    ).format(sql.Identifier(table), sql.SQL(mode))
    for text in queries[:WARM_QUERIES]:  # plans, caches: untimed
        conn.execute(statement, [text]).fetchall()
    times: list[float] = []
    found: list[int] = []
    for text in queries:
        started = time.perf_counter()
        row = conn.execute(statement, [text]).fetchone()
        times.append(1000 * (time.perf_counter() - started))
        found.append(int(row[0]) if row is not None else -1)
    return times, found


def explain_uses_index(conn: psycopg.Connection[Any], table: str, query: str) -> bool:
    plan = conn.execute(
        sql.SQL("EXPLAIN SELECT id FROM {} ORDER BY embedding <=> %s::vector LIMIT 1").format(
            sql.Identifier(table)
        ),
        [query],
    ).fetchall()
    return any("Index Scan" in str(line[0]) for line in plan)


def measure_size(
    conn: psycopg.Connection[Any],
    data: Synthetic,
    size: int,
    exact_queries: int,
    graph: HnswGraph,
) -> LatencyResult:
    m, ef_construction = graph.m, graph.ef_construction
    table = f"values_{size}"
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    conn.execute(
        sql.SQL(
            "CREATE UNLOGGED TABLE {} (id integer NOT NULL, value text NOT NULL, "
            "embedding vector({}) NOT NULL)"
        ).format(sql.Identifier(table), sql.Literal(EMBEDDING_DIMENSION))
    )
    progress(f"size {size:,}: COPY")
    started = time.perf_counter()
    copy_rows(conn, table, data, size)
    copy_seconds = time.perf_counter() - started
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    notices: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        notices.append(f"{diag.severity}: {diag.message_primary}")

    conn.add_notice_handler(keep)
    conn.execute(f"SET maintenance_work_mem = '{graph_memory_mb(size)}MB'")
    conn.execute(f"SET max_parallel_maintenance_workers = {PARALLEL_MAINTENANCE_WORKERS}")
    progress(f"size {size:,}: building the HNSW index (m={m}, ef_construction={ef_construction})")
    started = time.perf_counter()
    conn.execute(
        sql.SQL(
            "CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops) "
            "WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(f"{table}_hnsw"),
            sql.Identifier(table),
            sql.Literal(m),
            sql.Literal(ef_construction),
        )
    )
    build_seconds = time.perf_counter() - started
    conn.remove_notice_handler(keep)
    progress(f"size {size:,}: index built in {build_seconds:.1f} s")
    conn.execute("RESET maintenance_work_mem")
    conn.execute("RESET max_parallel_maintenance_workers")
    sizes = conn.execute(
        "SELECT pg_relation_size(%s::regclass), pg_relation_size(%s::regclass)",
        [table, f"{table}_hnsw"],
    ).fetchone()
    assert sizes is not None
    with contextlib.suppress(psycopg.Error):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm(%s), pg_prewarm(%s)", [table, f"{table}_hnsw"])
    texts = [vector_text(q) for q in data.queries]
    truth, truth_distance = exact_nearest(data.vectors[:size], data.queries)

    def same_answer(q: int, row: int) -> bool:
        """The exact nearest row, or one at the same distance (to float32 precision)."""
        if row == truth[q]:
            return True
        if row < 0:
            return False
        distance = 1.0 - float(data.queries[q] @ data.vectors[row])
        return bool(abs(distance - truth_distance[q]) < TIE)

    if not explain_uses_index(conn, table, texts[0]):
        raise BenchError(f"the planner does not use the HNSW index on {table}")
    hnsw_ms: dict[int, list[float]] = {}
    hnsw_recall: dict[int, float] = {}
    for ef in EF_SEARCH:
        conn.execute(f"SET hnsw.ef_search = {ef}")
        progress(f"size {size:,}: {len(texts)} HNSW look-ups, ef_search {ef}")
        times, found = timed_lookups(conn, table, texts, "hnsw")
        hnsw_ms[ef] = times
        hnsw_recall[ef] = sum(same_answer(q, row) for q, row in enumerate(found)) / len(found)
    conn.execute("RESET hnsw.ef_search")
    count = len(texts) if size < LARGE_SIZE else min(exact_queries, len(texts))
    conn.execute("SET enable_indexscan = off")
    if explain_uses_index(conn, table, texts[0]):
        raise BenchError(f"enable_indexscan = off did not turn the HNSW index off on {table}")
    progress(f"size {size:,}: {count} exact look-ups (sequential scan)")
    exact_ms, exact_found = timed_lookups(conn, table, texts[:count], "exact")
    conn.execute("RESET enable_indexscan")
    agrees = sum(same_answer(q, row) for q, row in enumerate(exact_found))
    conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
    return LatencyResult(
        size=size,
        graph=graph,
        real=min(size, data.real),
        copy_seconds=copy_seconds,
        build_seconds=build_seconds,
        table_mb=sizes[0] / 2**20,
        index_mb=sizes[1] / 2**20,
        notices=notices,
        hnsw_ms=hnsw_ms,
        hnsw_recall=hnsw_recall,
        exact_ms=exact_ms,
        exact_agrees=agrees,
    )


def measure_latency(
    server: EmbeddedPostgres, build: BuildOutcome, sizes: Sequence[int], args: argparse.Namespace
) -> list[LatencyResult]:
    admin_dsn = server.dsn()
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(LATENCY_DB)))
    progress(
        f"generating {max(sizes):,} rows from {len(set(build.labels)):,} real value embeddings"
    )
    if args.rows == "embedded":
        data = embedded_rows(build.labels, max(sizes), args.queries)
    else:
        data = synthesise(
            build.embeddings, build.labels, max(sizes), args.queries, args.noise_sigma
        )
    results: list[LatencyResult] = []
    with psycopg.connect(database_dsn(admin_dsn, LATENCY_DB), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        version = str(row[0]) if row else "?"
        for size in sizes:
            results.append(measure_size(conn, data, size, args.exact_queries, graph_of(size, args)))
    report_latency(results, data, version)
    return results


def graph_of(size: int, args: argparse.Namespace) -> HnswGraph:
    """The graph `pgnl index` builds over this many values, or the one --m/--ef-construction
    ask for (searched at the ef_search pgnl would use at this size)."""
    graph = graph_for(size, IndexSettings())
    return HnswGraph(
        args.m or graph.m, args.ef_construction or graph.ef_construction, graph.ef_search
    )


def report_latency(results: list[LatencyResult], data: Synthetic, version: str) -> None:
    print("== 4. Look-up latency: HNSW against an exact scan ==")
    how = (
        "(given with --noise)"
        if data.sigma_given
        else "(chosen so that a copy is about that far from its source)"
    )
    if data.description:
        print(f"pgvector {version}. Rows: {data.description}.")
    else:
        print(
            f"pgvector {version}. Rows: {data.real:,} real embeddings (the distinct Spider values "
            f"of step 1; median cosine to their nearest other real value {data.real_nn:.3f}), then "
            f"copies of them with Gaussian noise, sigma {data.data_sigma:.4f} a component "
            f"{how}, re-normalised: "
            f"mean cosine to their source {data.data_cosine:.3f}, median cosine to their nearest "
            f"other row {data.generated_nn:.3f}. {len(data.queries)} query vectors: real "
            f"embeddings with noise (sigma {QUERY_NOISE}, mean cosine {data.query_cosine:.3f} to "
            "their source), none in the table."
        )
    print(
        "HNSW graphs as pgnl index builds them (m and ef_construction below), built with the "
        "maintenance_work_mem pgnl index sets for that many values (proxy.valueindex.common."
        f"graph_memory_mb) and {PARALLEL_MAINTENANCE_WORKERS} parallel maintenance "
        "workers; tables UNLOGGED, table and index pre-warmed; latency measured at the client "
        f"(`ORDER BY embedding <=> $1 LIMIT 1`, one connection, after {WARM_QUERIES} untimed "
        "queries); recall@1: the HNSW answer is the exact nearest row (numpy, every query; a "
        f"row at the same distance within {TIE} counts)."
    )
    print(
        f"{'rows':>9} {'m':>3} {'ef_c':>4} {'COPY s':>7} {'HNSW build s':>12} {'table MB':>9} "
        f"{'index MB':>9} {'exact scan p50 ms':>17} {'p95 ms':>8} {'queries':>7}"
    )
    for r in results:
        print(
            f"{r.size:>9,} {r.graph.m:>3} {r.graph.ef_construction:>4} {r.copy_seconds:>7.1f} "
            f"{r.build_seconds:>12.1f} {r.table_mb:>9.0f} "
            f"{r.index_mb:>9.0f} {percentile(r.exact_ms, 50):>17.2f} "
            f"{percentile(r.exact_ms, 95):>8.2f} {len(r.exact_ms):>7}"
        )
    print(f"{'rows':>9} {'ef_search':>9} {'HNSW p50 ms':>11} {'p95 ms':>8} {'recall@1':>8}")
    for r in results:
        for ef in EF_SEARCH:
            times = r.hnsw_ms[ef]
            print(
                f"{r.size:>9,} {ef:>9} {percentile(times, 50):>11.2f} "
                f"{percentile(times, 95):>8.2f} {r.hnsw_recall[ef]:>8.3f}"
            )
    for r in results:
        extra = []
        if len(r.exact_ms) < len(data.queries):
            extra.append(
                f"exact scan on the first {len(r.exact_ms)} of the {len(data.queries)} queries "
                "only (a sequential scan takes about half a second at this size)"
            )
        extra.append(
            f"PostgreSQL's exact scan agreed with numpy's answer on {r.exact_agrees}/"
            f"{len(r.exact_ms)} queries"
        )
        extra += [f"index build said: {n}" for n in r.notices]
        print(f"  {r.size:,} rows: " + "; ".join(extra))
    floor = next((r for r in results if r.size == FLOOR_SIZE), None)
    if floor is None:
        print(f"floor (at {FLOOR_SIZE:,} rows): not measured in this run")
    else:
        used = floor.graph.ef_search
        p50 = percentile(floor.hnsw_ms[used], 50)
        recall = floor.hnsw_recall[used]
        print(
            f"floor at {FLOOR_SIZE:,} rows, ef_search {used} (what pgnl's semantic look-ups use "
            f"on this graph; pgvector's default is {EF_SEARCH[0]}): p50 {p50:.2f} ms "
            f"<= {LATENCY_P50_FLOOR_MS} ms: {verdict(p50 <= LATENCY_P50_FLOOR_MS)}; recall@1 "
            f"{recall:.3f} >= {HNSW_RECALL_FLOOR}: {verdict(recall >= HNSW_RECALL_FLOOR)}"
        )
        both = [
            ef
            for ef in EF_SEARCH
            if floor.hnsw_recall[ef] >= HNSW_RECALL_FLOOR
            and percentile(floor.hnsw_ms[ef], 50) <= LATENCY_P50_FLOOR_MS
        ]
        print(
            "ef_search values measured that meet both at "
            f"{FLOOR_SIZE:,} rows: {', '.join(map(str, both)) or 'none'}"
        )
    print()


# ---------------------------------------------------------------- main


def _list(
    value: str, known: Sequence[str], what: str, parser: argparse.ArgumentParser
) -> list[str]:
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in known]
    if unknown or not chosen:
        parser.error(
            f"--{what}: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}"
        )
    return chosen


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.calibration",
        description="Calibration recall by method and scope, index build throughput, look-up "
        "latency (HNSW against an exact scan).",
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="similarity methods")
    parser.add_argument("--scopes", default=",".join(SCOPES), help="matching scopes")
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="rows of the latency tables"
    )
    parser.add_argument("--dbs", default="", help="Spider dev databases (default: all)")
    parser.add_argument("--skip-latency", action="store_true", help="no step 4")
    parser.add_argument("--skip-recall", action="store_true", help="no steps 2 and 3")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=900.0,
        help="most seconds one method x scope may take; the rest of its cases is not run "
        "(default 900)",
    )
    parser.add_argument("--queries", type=int, default=200, help="latency query vectors")
    parser.add_argument(
        "--m", type=int, default=0, help="HNSW m of the latency tables (default: what pgnl builds)"
    )
    parser.add_argument(
        "--ef-construction",
        type=int,
        default=0,
        help="HNSW ef_construction of the latency tables (default: what pgnl builds)",
    )
    parser.add_argument(
        "--rows",
        choices=("noise", "embedded"),
        default="noise",
        help="how the latency tables are filled beyond the real values: noisy copies of them "
        "(fast), or new values made of their words and really embedded (about 5 minutes a "
        "million on 2 cores)",
    )
    parser.add_argument(
        "--noise",
        default="auto",
        help="per-component sigma of the noise that makes the generated latency rows; auto: "
        "a copy as far from its source as a real value is from its nearest real neighbour",
    )
    parser.add_argument(
        "--exact-queries",
        type=int,
        default=30,
        help=f"exact-scan queries for tables of {LARGE_SIZE:,} rows or more (default 30)",
    )
    args = parser.parse_args(argv)
    args.method_list = _list(args.methods, METHODS, "methods", parser)
    args.scope_list = _list(args.scopes, tuple(SCOPES), "scopes", parser)
    args.db_list = (
        _list(args.dbs, DEV_DATABASES, "dbs", parser) if args.dbs.strip() else list(DEV_DATABASES)
    )
    try:
        args.size_list = [int(part) for part in args.sizes.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, not {args.sizes!r}")
    try:
        args.noise_sigma = None if args.noise == "auto" else float(args.noise)
    except ValueError:
        parser.error(f"--noise must be auto or a number, not {args.noise!r}")
    if not args.size_list or min(args.size_list) < 1 or args.queries < WARM_QUERIES:
        parser.error(f"--sizes must be positive; --queries at least {WARM_QUERIES}")
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, base: Path, stack: contextlib.ExitStack) -> None:
    server = start_postgres(base, stack)
    embedder = load_embedder()
    progress(f"embedder: {getattr(embedder, 'provider', '?')}; loading Spider dev databases")
    started = time.perf_counter()
    dsns = load_dev_databases(server.dsn(), args.db_list, progress=progress)
    progress(f"{len(dsns)} databases loaded in {time.perf_counter() - started:.1f} s")
    if not dsns:
        raise BenchError("no Spider dev database could be loaded")
    build = build_indexes(dsns, embedder)
    report_build(build)
    sys.stdout.flush()
    if not args.skip_recall:
        progress("building the perturbation set")
        cases, composition = build_cases(dsns)
        report_composition(cases, composition)
        sys.stdout.flush()
        if not cases:
            raise BenchError("the perturbation set is empty")
        results = evaluate(
            cases,
            dsns=dsns,
            embedder=embedder,
            methods=[m for m in METHODS if m in args.method_list],
            scopes=args.scope_list,
            budget_s=args.budget_s,
        )
        report_recall(results, args.scope_list, build.reports)
        sys.stdout.flush()
    if not args.skip_latency:
        if len(build.embeddings) == 0:
            raise BenchError("no value embeddings to build the latency tables from")
        measure_latency(server, build, sorted(set(args.size_list)), args)
    progress("stopping PostgreSQL")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # clean up on kill as on Ctrl-C
    started = time.perf_counter()
    try:
        with workspace() as base, contextlib.ExitStack() as stack:
            run(args, base, stack)
    except KeyboardInterrupt:
        progress("interrupted; the PostgreSQL started here has been stopped and removed")
        return 130
    except (BenchError, EmbeddedError, OSError, psycopg.Error, ValueIndexError) as exc:
        progress(f"benchmark failed: {exc}")
        return 1
    print(f"wall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
