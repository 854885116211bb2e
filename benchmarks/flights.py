"""Questions on a real-world database that is not Spider: airports, carriers and flights.

    python -m benchmarks.flights [--flights 320000] [--seed 7] [--before ROOT] [--llm]
        [--timeout 60] [--details results.jsonl]

The database (`build`): every airport with an IATA code (7,884, from the `airportsdata` package:
code, ICAO code, name, city, state, country, elevation in feet, position, time zone), the
countries of ISO 3166 (`iso3166`: code and name), eleven US carriers (code and name) and a
table of `--flights` flights drawn at random (reproducibly, `--seed`) between 40 of the busiest
US airports: date (2024), carrier, flight number, origin and destination (airport codes,
foreign keys), departure and arrival delay in minutes, cancelled, and the distance in miles
between the two airports' real positions. The codes (airports, carriers, countries) are the
primary and foreign keys, as in the databases users have.

`QUESTIONS`: everyday questions about it, written by hand with their SQL, as a new user of the
database would ask them: counts over the large table, codes the user types, names that live in
another table than the code the question filters by ("flights from Boston"), months, extremes.

For each pgnl checkout (this one, and with `--before ROOT` another, e.g. a `git worktree` of an
earlier commit, for before/after figures), run from that checkout's own code: a copy of the
database (CREATE DATABASE ... TEMPLATE), `pgnl migrate`, `pgnl index`, then `pgnl serve` in
front of it (PLM-only unless `--llm`, which leaves [llm] to the environment: the embedded LLM
where it is installed), a warm-up question, and each question once on a psycopg connection
through the proxy. A question is right when its rows equal the hand-written SQL's (as
`benchmarks.execution_accuracy` compares them). The report gives per checkout the accuracy, the
p50, p95 and worst question time, the errors and timeouts, and per question both checkouts side
by side. The server is a throwaway embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from psycopg import conninfo, sql

from benchmarks.execution_accuracy import (
    LOG_QUERY,
    SERVER_SETTINGS,
    BenchError,
    Client,
    ProxyProcess,
    Rows,
    compare,
    logged_answer,
    percentile,
    progress,
    start_proxy,
    through_proxy,
    upstream_of,
)
from benchmarks.proxy_overhead import free_port, workspace
from proxy.embedded import EmbeddedPostgres

REPO_ROOT = Path(__file__).resolve().parents[1]
DATABASE = "flights"
TIMEOUT_S = 60.0
WARMUP = "how many carriers are there?"

CARRIERS = (
    ("AA", "American Airlines"),
    ("DL", "Delta Air Lines"),
    ("UA", "United Airlines"),
    ("WN", "Southwest Airlines"),
    ("B6", "JetBlue Airways"),
    ("AS", "Alaska Airlines"),
    ("NK", "Spirit Airlines"),
    ("F9", "Frontier Airlines"),
    ("HA", "Hawaiian Airlines"),
    ("G4", "Allegiant Air"),
    ("SY", "Sun Country Airlines"),
)
CARRIER_WEIGHTS = (18, 18, 15, 20, 6, 6, 5, 4, 2, 4, 2)
HUBS = (
    "ATL",
    "DFW",
    "DEN",
    "ORD",
    "LAX",
    "JFK",
    "LAS",
    "MCO",
    "MIA",
    "CLT",
    "SEA",
    "PHX",
    "EWR",
    "SFO",
    "IAH",
    "BOS",
    "FLL",
    "MSP",
    "LGA",
    "DTW",
    "PHL",
    "SLC",
    "DCA",
    "SAN",
    "BWI",
    "TPA",
    "AUS",
    "IAD",
    "BNA",
    "MDW",
    "HNL",
    "DAL",
    "PDX",
    "STL",
    "HOU",
    "SMF",
    "MSY",
    "RDU",
    "SJC",
    "ANC",
)

SCHEMA = """
CREATE TABLE countries (
    code char(2) PRIMARY KEY,
    name text NOT NULL
);
CREATE TABLE airports (
    iata char(3) PRIMARY KEY,
    icao text,
    name text NOT NULL,
    city text,
    state text,
    country char(2) REFERENCES countries (code),
    elevation real,
    latitude double precision,
    longitude double precision,
    timezone text
);
CREATE TABLE carriers (
    code char(2) PRIMARY KEY,
    name text NOT NULL
);
CREATE TABLE flights (
    id bigint PRIMARY KEY,
    flight_date date NOT NULL,
    carrier char(2) NOT NULL REFERENCES carriers (code),
    flight_number integer NOT NULL,
    origin char(3) NOT NULL REFERENCES airports (iata),
    destination char(3) NOT NULL REFERENCES airports (iata),
    dep_delay integer,
    arr_delay integer,
    cancelled boolean NOT NULL,
    distance integer NOT NULL
);
"""


@dataclass(frozen=True)
class Question:
    text: str
    gold: str
    ordered: bool = False


QUESTIONS = (
    Question("How many flights are there?", "SELECT count(*) FROM flights"),
    Question(
        "How many flights did each carrier have?",
        "SELECT carrier, count(*) FROM flights GROUP BY carrier",
    ),
    Question("How many flights were cancelled?", "SELECT count(*) FROM flights WHERE cancelled"),
    Question(
        "What is the average departure delay of flights from ORD?",
        "SELECT avg(dep_delay) FROM flights WHERE origin = 'ORD'",
    ),
    Question(
        "How many flights went from JFK to LAX?",
        "SELECT count(*) FROM flights WHERE origin = 'JFK' AND destination = 'LAX'",
    ),
    Question(
        "How many flights did DL operate?", "SELECT count(*) FROM flights WHERE carrier = 'DL'"
    ),
    Question("What is the longest flight distance?", "SELECT max(distance) FROM flights"),
    Question(
        "Which airport has the most departing flights?",
        "SELECT origin FROM flights GROUP BY origin ORDER BY count(*) DESC LIMIT 1",
    ),
    Question(
        "How many airports are in Germany?",
        "SELECT count(*) FROM airports AS a JOIN countries AS c ON a.country = c.code "
        "WHERE c.name = 'Germany'",
    ),
    Question(
        "List the names of the airports in Massachusetts.",
        "SELECT name FROM airports WHERE state = 'Massachusetts'",
    ),
    Question(
        "What is the elevation of Denver International Airport?",
        "SELECT elevation FROM airports WHERE name = 'Denver International Airport'",
    ),
    Question(
        "How many flights left Boston?",
        "SELECT count(*) FROM flights AS f JOIN airports AS a ON f.origin = a.iata "
        "WHERE a.city = 'Boston'",
    ),
    Question(
        "What is the average arrival delay of Delta Air Lines flights?",
        "SELECT avg(f.arr_delay) FROM flights AS f JOIN carriers AS c ON f.carrier = c.code "
        "WHERE c.name = 'Delta Air Lines'",
    ),
    Question(
        "Which carrier has the highest average departure delay?",
        "SELECT carrier FROM flights GROUP BY carrier ORDER BY avg(dep_delay) DESC LIMIT 1",
    ),
    Question(
        "How many flights were there in March 2024?",
        "SELECT count(*) FROM flights WHERE flight_date >= '2024-03-01' "
        "AND flight_date < '2024-04-01'",
    ),
    Question(
        "What is the name of the airport with code SFO?",
        "SELECT name FROM airports WHERE iata = 'SFO'",
    ),
    Question("Which city is the airport LAS in?", "SELECT city FROM airports WHERE iata = 'LAS'"),
    Question(
        "How many United Airlines flights were cancelled?",
        "SELECT count(*) FROM flights AS f JOIN carriers AS c ON f.carrier = c.code "
        "WHERE c.name = 'United Airlines' AND f.cancelled",
    ),
    Question(
        "How many cancelled flights did each origin airport have?",
        "SELECT origin, count(*) FROM flights WHERE cancelled GROUP BY origin",
    ),
    Question(
        "Which airport has the highest elevation?",
        "SELECT name FROM airports ORDER BY elevation DESC LIMIT 1",
    ),
    Question(
        "How many airports are in the US?", "SELECT count(*) FROM airports WHERE country = 'US'"
    ),
    Question(
        "What is the average distance of flights from ATL?",
        "SELECT avg(distance) FROM flights WHERE origin = 'ATL'",
    ),
    Question(
        "Which destinations do flights from SEA go to?",
        "SELECT DISTINCT destination FROM flights WHERE origin = 'SEA'",
    ),
    Question(
        "How many flights had a departure delay of more than 60 minutes?",
        "SELECT count(*) FROM flights WHERE dep_delay > 60",
    ),
    Question("What is the timezone of ANC?", "SELECT timezone FROM airports WHERE iata = 'ANC'"),
    Question(
        "Which carrier has the most flights from DFW?",
        "SELECT carrier FROM flights WHERE origin = 'DFW' GROUP BY carrier "
        "ORDER BY count(*) DESC LIMIT 1",
    ),
    Question(
        "What is the total distance flown by WN?",
        "SELECT sum(distance) FROM flights WHERE carrier = 'WN'",
    ),
    Question("What is the name of the carrier B6?", "SELECT name FROM carriers WHERE code = 'B6'"),
    Question(
        "How many flights departed from Chicago?",
        "SELECT count(*) FROM flights AS f JOIN airports AS a ON f.origin = a.iata "
        "WHERE a.city = 'Chicago'",
    ),
    Question(
        "What is the average departure delay in each month?",
        "SELECT extract(month FROM flight_date), avg(dep_delay) FROM flights "
        "GROUP BY extract(month FROM flight_date)",
    ),
    Question(
        "Which airports in Canada have an elevation above 1000?",
        "SELECT a.name FROM airports AS a JOIN countries AS c ON a.country = c.code "
        "WHERE c.name = 'Canada' AND a.elevation > 1000",
    ),
    Question(
        "How many flights from LGA were cancelled?",
        "SELECT count(*) FROM flights WHERE origin = 'LGA' AND cancelled",
    ),
    # "How many X did each Y have?" over the large table, the shape of question that ran every
    # candidate into the statement timeout before the time budget
    Question(
        "How many flights departed from each city?",
        "SELECT a.city, count(*) FROM flights AS f JOIN airports AS a ON f.origin = a.iata "
        "GROUP BY a.city",
    ),
    Question(
        "How many flights did each carrier operate from each origin airport?",
        "SELECT carrier, origin, count(*) FROM flights GROUP BY carrier, origin",
    ),
    Question(
        "How many flights arrived at each airport in California?",
        "SELECT a.name, count(*) FROM flights AS f JOIN airports AS a ON f.destination = a.iata "
        "WHERE a.state = 'California' GROUP BY a.name",
    ),
    Question(
        "How many flights did each airline have, by airline name?",
        "SELECT c.name, count(*) FROM flights AS f JOIN carriers AS c ON f.carrier = c.code "
        "GROUP BY c.name",
    ),
)


# ---------------------------------------------------------------- the database


def _miles(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """Great-circle distance between two airports, in miles."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a["lat"], a["lon"], b["lat"], b["lon"]))
    h = math.sin((lat2 - lat1) / 2) ** 2
    h += math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return round(2 * 3958.8 * math.asin(math.sqrt(h)))


def _copy(cur: psycopg.Cursor[Any], table: str, rows: Iterator[Sequence[Any]]) -> None:
    with cur.copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table))) as copy:
        for row in rows:
            copy.write_row(row)


def flight_rows(
    airports: Mapping[str, Mapping[str, Any]], count: int, seed: int
) -> Iterator[tuple[Any, ...]]:
    """`count` flights between HUBS, drawn from `seed`: busier airports and carriers more often,
    delays mostly small with a long tail, about 2% cancelled (no delays then)."""
    chance = random.Random(seed)
    weights = [len(HUBS) - rank for rank in range(len(HUBS))]
    codes = [code for code, _ in CARRIERS]
    first = date(2024, 1, 1)
    for number in range(1, count + 1):
        origin, destination = chance.choices(HUBS, weights, k=2)
        while destination == origin:
            destination = chance.choices(HUBS, weights)[0]
        cancelled = chance.random() < 0.02
        delay: int | None = None
        arrival: int | None = None
        if not cancelled:
            delay = (
                round(chance.expovariate(1 / 25))
                if chance.random() < 0.35
                else -chance.randint(0, 10)
            )
            arrival = delay + round(chance.gauss(-4, 9))
        yield (
            number,
            first + timedelta(days=chance.randrange(366)),
            chance.choices(codes, CARRIER_WEIGHTS)[0],
            chance.randint(1, 6999),
            origin,
            destination,
            delay,
            arrival,
            cancelled,
            _miles(airports[origin], airports[destination]),
        )


def build(dsn: str, flights: int, seed: int) -> None:
    """The database's tables and rows (see the module docstring)."""
    import airportsdata
    import iso3166

    airports: dict[str, Any] = dict(airportsdata.load("IATA"))
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(SCHEMA)
        _copy(cur, "countries", ((c.alpha2, c.name) for c in iso3166.countries))
        known = {c.alpha2 for c in iso3166.countries}
        _copy(
            cur,
            "airports",
            (
                (
                    a["iata"],
                    a["icao"] or None,
                    a["name"],
                    a["city"] or None,
                    a["subd"] or None,
                    a["country"] if a["country"] in known else None,
                    a["elevation"],
                    a["lat"],
                    a["lon"],
                    a["tz"] or None,
                )
                for a in airports.values()
            ),
        )
        _copy(cur, "carriers", iter(CARRIERS))
        progress(f"drawing {flights:,} flights")
        _copy(cur, "flights", flight_rows(airports, flights, seed))
        cur.execute("ANALYZE")
    progress(f"database built in {time.perf_counter() - started:.1f} s")


# ---------------------------------------------------------------- a checkout under test


def _environment(root: Path, llm: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    if not llm:
        env["PGNL_LLM_PROVIDER"] = "none"
        env["PGNL_LLM_BASE_URL"] = ""
    return env


def _pgnl(root: Path, env: Mapping[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=root,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"pgnl {args[0]} in {root} failed:\n{done.stderr[-2000:]}")


def commit_of(root: Path) -> str:
    done = subprocess.run(
        ["git", "log", "-1", "--format=%h %s"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()[:70] or str(root)


@dataclass
class Answer:
    question: str
    match: bool = False
    ms: float = 0.0
    rows: int = 0
    error: str = ""
    timed_out: bool = False
    notices: list[str] = field(default_factory=list)
    sql: str = ""  # the chosen SQL, from nl.query_log


@dataclass
class Result:
    root: str
    commit: str
    answers: list[Answer]

    def times(self) -> list[float]:
        return [a.ms for a in self.answers]


async def _ask_all(
    proxy: ProxyProcess, dsn: str, golds: Sequence[Rows], timeout_s: float
) -> list[Answer]:
    client = Client(proxy, {DATABASE: dsn}, timeout_s)
    try:
        warm = await client.request(DATABASE, f"-- nl: {WARMUP}", 600)
        if warm.error or warm.timed_out:
            raise BenchError(f"the warm-up question failed: {warm.error or 'timeout'}")
        answers = []
        for number, (question, gold) in enumerate(zip(QUESTIONS, golds, strict=True), 1):
            reply = await client.request(DATABASE, f"-- nl: {question.text}")
            answer = Answer(question.text, ms=reply.ms, rows=len(reply.rows), error=reply.error)
            answer.timed_out, answer.notices = reply.timed_out, reply.notices
            if not reply.timed_out:
                with contextlib.suppress(LookupError):
                    record = await client.request(DATABASE, LOG_QUERY)
                    answer.sql = logged_answer(record, question.text).sql
            if not reply.error and not reply.timed_out:
                answer.match = compare(gold, reply.rows, ordered=question.ordered)[0]
            verdict = (
                "ok"
                if answer.match
                else (
                    answer.error or "timeout"
                    if not reply.rows and (answer.error or answer.timed_out)
                    else "wrong"
                )
            )
            progress(
                f"  [{number}/{len(QUESTIONS)}] {reply.ms / 1000:.2f} s {verdict}: {question.text}"
            )
            answers.append(answer)
        return answers
    finally:
        await client.close()


def run_checkout(
    root: Path, admin_dsn: str, base: Path, golds: Sequence[Rows], args: argparse.Namespace
) -> Result:
    name = f"{DATABASE}_{len(list(base.glob('*.log')))}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(DATABASE)
            )
        )
    dsn = conninfo.make_conninfo(admin_dsn, dbname=name)
    env = _environment(root, args.llm)
    progress(f"{commit_of(root)}: pgnl migrate, pgnl index")
    began = time.perf_counter()
    _pgnl(root, env, "migrate", "--dsn", dsn)
    _pgnl(root, env, "index", "--dsn", dsn, "--no-progress")
    progress(f"  migrated and indexed in {time.perf_counter() - began:.1f} s")
    proxy = start_proxy(str(root), upstream_of(admin_dsn), base, f"{name}.log", env, root=root)
    try:
        answers = asyncio.run(_ask_all(proxy, through_proxy(dsn, proxy.port), golds, args.timeout))
    finally:
        proxy.stop()
    return Result(str(root), commit_of(root), answers)


# ---------------------------------------------------------------- the report


def summary(result: Result) -> list[str]:
    times = result.times()
    right = sum(a.match for a in result.answers)
    errors = sum(bool(a.error) for a in result.answers)
    timeouts = sum(a.timed_out for a in result.answers)
    return [
        result.commit,
        f"{right}/{len(result.answers)} ({100 * right / len(result.answers):.0f}%)",
        f"{percentile(times, 50) / 1000:.2f}",
        f"{percentile(times, 95) / 1000:.2f}",
        f"{max(times) / 1000:.2f}",
        str(errors),
        str(timeouts),
    ]


def report(results: Sequence[Result], flights: int, llm: bool, out: io.TextIOBase | Any) -> None:
    print(
        f"# {len(QUESTIONS)} questions on airports, carriers and {flights:,} flights "
        f"({'[llm] from the environment' if llm else 'PLM-only'})\n",
        file=out,
    )
    print("| checkout | right | p50 s | p95 s | worst s | errors | timeouts |", file=out)
    print("|---|---|---|---|---|---|---|", file=out)
    for result in results:
        print("| " + " | ".join(summary(result)) + " |", file=out)
    print(
        "\n| question | " + " | ".join(f"checkout {n}" for n in range(1, len(results) + 1)) + " |",
        file=out,
    )
    print("|---|" + "---|" * len(results), file=out)
    for number, question in enumerate(QUESTIONS):
        cells = []
        for result in results:
            answer = result.answers[number]
            verdict = (
                "right"
                if answer.match
                else (
                    answer.error.split(":")[0] or "timeout"
                    if answer.error or answer.timed_out
                    else "wrong"
                )
            )
            cells.append(f"{verdict}, {answer.ms / 1000:.2f} s")
        print(f"| {question.text} | " + " | ".join(cells) + " |", file=out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flights", type=int, default=320_000, help="rows of flights (320,000)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the flights drawn (7)")
    parser.add_argument("--before", type=Path, help="another pgnl checkout to measure first")
    parser.add_argument("--llm", action="store_true", help="[llm] from the environment")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="client timeout, s (60)")
    parser.add_argument("--details", type=Path, help="one JSON line per question and checkout")
    return parser.parse_args(argv)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    roots = ([args.before.resolve()] if args.before else []) + [REPO_ROOT]
    try:
        with workspace() as base, contextlib.ExitStack() as stack:
            server = EmbeddedPostgres.throwaway(base, f"pgnl-flights-{os.getpid()}", free_port())
            stack.callback(server.drop)
            progress(f"starting the embedded PostgreSQL on 127.0.0.1:{server.port}")
            server.start(SERVER_SETTINGS)
            admin = server.dsn()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
            direct = conninfo.make_conninfo(admin, dbname=DATABASE)
            build(direct, args.flights, args.seed)
            with psycopg.connect(direct) as conn:
                golds = [list(conn.execute(q.gold).fetchall()) for q in QUESTIONS]
            results = [run_checkout(root, admin, base, golds, args) for root in roots]
    except BenchError as exc:
        print(f"flights: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    report(results, args.flights, args.llm, sys.stdout)
    if args.details:
        with args.details.open("w") as out:
            for result in results:
                for answer in result.answers:
                    out.write(json.dumps({"commit": result.commit, **asdict(answer)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
