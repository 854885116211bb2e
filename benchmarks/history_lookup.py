"""The query history's look-up (`History.near`, the stage `history`) on a large history, with
and without the HNSW index of migration 0012, side by side.

    python -m benchmarks.history_lookup [--records 5000 50000] [--repeat 50]

For each size: a throwaway embedded PostgreSQL database, `pgnl migrate`, a table, and that many
records in nl.ambiguity (random embeddings); then `History.near(question, 8)` `--repeat` times,
as the owner (row-level security does not apply) and as a role that may read the table (the
policy's nl.may_read checked on the records read), first with the index dropped, then with it.
Prints the median milliseconds of each and the ratio. The question is embedded each time, as
in the pipeline (all-MiniLM-L6-v2 on the CPU: a few of the milliseconds).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.execution_accuracy import start_postgres
from proxy.migrate import migrate
from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.history import History
from proxy.runtime import load_embedder
from proxy.valueindex.common import Embedder

READER, PASSWORD = "pgnl_history_reader", "reader"

RECORDS = """
INSERT INTO nl.ambiguity (statement_hash, fingerprint, statement, source, table_oids,
       column_oids, column_attnums, features, description, embedding)
SELECT md5(g::text), md5((g %% 500)::text), 'SELECT a FROM t WHERE d = ' || g, 'file',
       ARRAY['t'::regclass::oid], ARRAY['t'::regclass::oid, 't'::regclass::oid],
       ARRAY[1, 4]::smallint[], ARRAY['table t', 'select t.a'], 'a t where d',
       (SELECT array_agg(random() - 0.5)::vector(384) FROM generate_series(1, 384) WHERE g > 0)
  FROM generate_series(1, %s) g
"""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median_ms(dsn: str, embedder: Embedder, repeat: int) -> float:
    with psycopg.connect(dsn) as conn:
        conn.read_only = True
        history = History(PsycopgDatabase(conn), embedder, timeout_s=30)
        found = history.near("which a has the largest d?", 8)  # warm
        if len(found) != 8:
            raise RuntimeError(f"{len(found)} records found, not 8")
        times = []
        for i in range(repeat):
            started = time.perf_counter()
            history.near(f"which a has the largest d, {i}?", 8)
            times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def measure(admin: str, records: int, repeat: int, embedder: Embedder) -> list[str]:
    name = f"history_{records}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    dsn = make_conninfo(admin, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute("CREATE TABLE t (a int, b text, c text, d int)")
        conn.execute(f"GRANT SELECT ON t TO {READER}")
        conn.execute(f"GRANT USAGE ON SCHEMA nl TO {READER}")
        progress(f"{records:,} records: writing them")
        conn.execute(RECORDS, [records])
        conn.execute("DROP INDEX nl.ambiguity_embedding")
        conn.execute("ANALYZE nl.ambiguity")
        reader = make_conninfo(dsn, user=READER, password=PASSWORD)
        without = [median_ms(d, embedder, repeat) for d in (dsn, reader)]
        progress(f"{records:,} records: building the HNSW index")
        conn.execute(
            "CREATE INDEX ambiguity_embedding ON nl.ambiguity "
            "USING hnsw (embedding vector_cosine_ops)"
        )
        conn.execute("ANALYZE nl.ambiguity")
        indexed = [median_ms(d, embedder, repeat) for d in (dsn, reader)]
    return [
        f"| {records:,} | {who} | {a:.1f} | {b:.1f} | {a / b:.1f} |"
        for who, a, b in zip(("owner", "a reader (RLS)"), without, indexed, strict=True)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history_lookup")
    parser.add_argument("--records", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    embedder = load_embedder()
    lines = [
        "| records | as | no index: median ms | HNSW: median ms | ratio |",
        "|---|---|---|---|---|",
    ]
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as base:
        admin = start_postgres(Path(base), stack)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {READER} LOGIN PASSWORD '{PASSWORD}'")
        for records in args.records:
            lines += measure(admin, records, args.repeat, embedder)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
