"""What the SQL functions cost beside the proxy: `nl.sql` called in the database, and the same
question as an `nl show:` directive through `pgnl serve`, in one run.

    python -m benchmarks.sql_functions [--repeat 5]

One run starts an embedded PostgreSQL of its own (temporary data directory, free port), loads
the demo database, migrates it (with the SQL functions) and indexes it, and starts `pgnl serve`
in front of it. Then, for each of the two ways:

- first call: a new connection's first question (for the functions, the backend starts its
  worker, which loads the models; the proxy loaded its models when it started, so its first
  call is close to a warm one);
- warm calls: the demo's questions, `--repeat` times, the two ways taking turns question by
  question so that whatever else the machine does is shared between them.

Both ways answer with the sketch models alone (`PGNL_LLM_PROVIDER=none` for the server and the
proxy this run starts): the functions' workers never start the embedded LLM, so the proxy's
would measure the LLM, not the two ways of reaching the pipeline.

It prints the latencies (p50, p95, mean of the warm calls), their ratio, and the memory (RSS)
of the backend and of its worker after the calls.

Then the index, both ways, on a table of `--values` distinct names in a schema of its own:
`pgnl index`'s build (`build_index` over psycopg, the embedder loaded once) and
`nl.refresh_index('bench')` on the connection whose worker is already up, `--index-rounds`
times, taking turns: a full build (the schema's entries deleted first), then a refresh that
finds nothing changed. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.proxy_overhead import Service, progress, start_pgnl, start_postgres
from proxy.embedded import EmbeddedPostgres
from proxy.migrate import SQL_FUNCTIONS, migrate
from proxy.runtime import load_embedder
from proxy.valueindex import build_index

DATABASE = "demo"
QUESTIONS = (
    "how many students are from new york?",
    "what is the name of the department with the largest budget?",
    "show the first and last names of students from boston",
    "which course has the highest score for timmothy ward?",
    "how many courses does each department offer?",
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def function_call(conn: psycopg.Connection[Any], question: str) -> Callable[[], Any]:
    return lambda: conn.execute("SELECT nl.sql(%s)", [question]).fetchone()


def directive_call(conn: psycopg.Connection[Any], question: str) -> Callable[[], Any]:
    return lambda: conn.execute(f"/* nl show: {question} */;").fetchall()


def set_up(server: EmbeddedPostgres) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {DATABASE}")
    skipped: dict[str, str] = {}
    with psycopg.connect(server.dsn(DATABASE), autocommit=True) as conn:
        conn.execute(resources.files("proxy.demo").joinpath("sample.sql").read_text().encode())
        migrate(conn, skipped=skipped)
        build_index(conn, load_embedder(), progress=False)
    if SQL_FUNCTIONS in skipped:
        raise SystemExit(f"the SQL functions could not be installed: {skipped[SQL_FUNCTIONS]}")


BENCH_SCHEMA = "bench"


def index_rounds(
    conn: psycopg.Connection[Any], values: int, rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Full builds and unchanged refreshes of BENCH_SCHEMA, both ways, `rounds` times (ms)."""
    conn.execute(f"CREATE SCHEMA {BENCH_SCHEMA}")
    conn.execute(
        f"CREATE TABLE {BENCH_SCHEMA}.harbours AS "  # noqa: S608 (constants)
        f"SELECT 'Harbour ' || i AS name FROM generate_series(1, {int(values)}) AS i"
    )
    embedder = load_embedder()

    def clear() -> None:
        for table in ("value_index", "value_index_columns"):
            conn.execute(f"DELETE FROM nl.{table} WHERE schema_name = %s", [BENCH_SCHEMA])  # noqa: S608

    def by_pgnl_index() -> None:
        build_index(conn, embedder, progress=False, only_schemas=[BENCH_SCHEMA])

    def by_function() -> None:
        conn.execute("SELECT count(*) FROM nl.refresh_index(%s)", [BENCH_SCHEMA]).fetchone()

    times: dict[str, dict[str, list[float]]] = {
        "pgnl index": {"full": [], "unchanged": []},
        "nl.refresh_index": {"full": [], "unchanged": []},
    }
    for number in range(rounds):
        progress(f"index round {number + 1} of {rounds}")
        ways = [("pgnl index", by_pgnl_index), ("nl.refresh_index", by_function)]
        if number % 2:
            ways.reverse()
        for name, build in ways:
            clear()
            times[name]["full"].append(timed(build))
            times[name]["unchanged"].append(timed(build))
    return times


def summary(name: str, first: float, warm: list[float]) -> list[str]:
    ordered = sorted(warm)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return [
        name,
        f"{first:.0f}",
        f"{statistics.median(warm):.1f}",
        f"{p95:.1f}",
        f"{statistics.fmean(warm):.1f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sql_functions")
    parser.add_argument("--repeat", type=int, default=5, help="warm rounds of the questions")
    parser.add_argument(
        "--values", type=int, default=4000, help="distinct values of the table the index reads"
    )
    parser.add_argument("--index-rounds", type=int, default=3, help="rounds of index builds")
    args = parser.parse_args(argv)
    os.environ["PGNL_LLM_PROVIDER"] = "none"  # inherited by the server, its workers and pgnl
    with (
        tempfile.TemporaryDirectory(prefix="pgnl-bench-") as scratch,
        contextlib.ExitStack() as stack,
    ):
        base = Path(scratch)
        server = start_postgres(base, stack)
        progress("loading, migrating and indexing the demo database")
        set_up(server)
        pgnl: Service = start_pgnl(base, server.port, stack)
        password = server.settings.password
        direct = psycopg.connect(server.dsn(DATABASE), autocommit=True)
        proxied = psycopg.connect(
            f"postgresql://{server.settings.user}:{password}@127.0.0.1:{pgnl.port}/{DATABASE}",
            autocommit=True,
        )
        stack.callback(direct.close)
        stack.callback(proxied.close)
        backend = direct.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None
        progress("first calls")
        first_function = timed(function_call(direct, QUESTIONS[0]))
        first_proxy = timed(directive_call(proxied, QUESTIONS[0]))
        warm: dict[str, list[float]] = {"nl.sql": [], "nl show: (proxy)": []}
        for round_number in range(args.repeat):
            progress(f"warm round {round_number + 1} of {args.repeat}")
            for i, question in enumerate(QUESTIONS):
                ways = [
                    ("nl.sql", function_call(direct, question)),
                    ("nl show: (proxy)", directive_call(proxied, question)),
                ]
                if (i + round_number) % 2:
                    ways.reverse()
                for name, call in ways:
                    warm[name].append(timed(call))
        workers = children(backend[0])
        backend_rss = rss_mib(backend[0])
        worker_rss = sum(rss_mib(pid) for pid in workers)
        proxy_rss = rss_mib(pgnl.process.pid)
        indexing = index_rounds(direct, args.values, args.index_rounds)
    rows = [
        ["way", "first call ms", "warm p50 ms", "warm p95 ms", "warm mean ms"],
        summary("nl.sql", first_function, warm["nl.sql"]),
        summary("nl show: (proxy)", first_proxy, warm["nl show: (proxy)"]),
    ]
    print(f"SQL functions beside the proxy, {len(QUESTIONS)} questions x {args.repeat} rounds\n")
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows[1:]:
        print("| " + " | ".join(row) + " |")
    ratio = statistics.median(warm["nl.sql"]) / statistics.median(warm["nl show: (proxy)"])
    print(
        f"\nwarm p50 nl.sql / proxy: {ratio:.2f}; memory after the calls: backend "
        f"{backend_rss:.0f} MiB, its worker{'s' if len(workers) != 1 else ''} "
        f"{worker_rss:.0f} MiB; the proxy {proxy_rss:.0f} MiB"
    )
    print(
        f"\nThe value index of {args.values:,} distinct values, {args.index_rounds} rounds "
        "(median ms)\n"
    )
    print("| way | full build ms | unchanged refresh ms |")
    print("|---|---|---|")
    for name, kinds in indexing.items():
        full, unchanged = statistics.median(kinds["full"]), statistics.median(kinds["unchanged"])
        print(f"| {name} | {full:.0f} | {unchanged:.0f} |")
    ratio = statistics.median(indexing["nl.refresh_index"]["full"]) / statistics.median(
        indexing["pgnl index"]["full"]
    )
    print(f"\nfull build nl.refresh_index / pgnl index: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
