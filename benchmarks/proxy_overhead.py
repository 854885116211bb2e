"""What pgnl costs a client: pgbench throughput and latency direct, through pgnl, through PgBouncer.

    python -m benchmarks.proxy_overhead [--seconds 10] [--clients 1,8,32] [--scale 10] [--repeat 1]

One run starts everything it needs and removes it at the end (or on Ctrl-C): an embedded
PostgreSQL of its own (temporary data directory, free port, fsync off), a `bench` role it trusts
on 127.0.0.1, pgbench data at the chosen scale, then `pgnl serve` and PgBouncer (session mode,
a pool big enough for every client, so that neither makes clients wait) in front of it.

It then runs the select-only pgbench workload (`pgbench -S`: one primary-key lookup a
transaction, about the smallest query there is, so the per-message cost of a proxy is as visible
as it gets) for each number of clients and each query protocol (`-M simple`, `-M prepared`)
against the three targets, all over TCP on 127.0.0.1:

- direct: pgbench to PostgreSQL, the baseline;
- pgnl: pgbench to `pgnl serve` to PostgreSQL;
- pgbouncer: pgbench to PgBouncer to PostgreSQL, a mature proxy in C doing the same job (one
  server connection for each client connection), i.e. what pgnl should be compared with.

The three targets of one cell (clients x protocol) run one after another, in an order that
rotates from cell to cell and repeat to repeat, so that whatever else the machine is doing is
shared between them rather than charged to one. With --repeat N each cell is run N times and the
median is reported.

Read the numbers for what they are: on a small machine (two cores, say) pgbench, the proxy and
the PostgreSQL backends all share the same cores, so a proxy costs twice: the latency it adds,
and the CPU it takes away from the server and from pgbench. Throughput through any proxy is then
well below direct, even for a perfect one; the pgnl/pgbouncer ratio is the fairer measure of
pgnl's own overhead, and the proxy CPU column (CPU seconds the proxy process used per second of
the run; 1.0 is one core) shows when a single-threaded proxy is the bottleneck, and us/txn (its
CPU microseconds per transaction) compares the proxies' work independently of throughput.
Absolute numbers only compare within one run on one machine, and one client's numbers (a few
tens of microseconds a round trip) move with where the scheduler puts pgbench and the backend:
use --repeat for those.

Progress goes to stderr, one line a pgbench run; the tables go to stdout, the last line being a
one-line summary of the TPS ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

import psycopg

from proxy.embedded import DEFAULT_HBA, EmbeddedError, EmbeddedPostgres

ROLE = "bench"
DATABASE = "bench"
TARGETS = ("direct", "pgnl", "pgbouncer")
PROTOCOLS = ("simple", "prepared")
PGBOUNCER = Path("/usr/sbin/pgbouncer")
REPO_ROOT = Path(__file__).resolve().parent.parent
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "256MB",
    "log_min_messages": "warning",
}
# libpq settings for every client here: no TLS or GSS negotiation, so that all three targets see
# the same connection start.
CLIENT_ENV = {"PGSSLMODE": "disable", "PGGSSENCMODE": "disable"}
STARTUP_TIMEOUT_S = 30.0

_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)
_LATENCY = re.compile(r"^latency average = ([0-9.]+) ms", re.MULTILINE)


class BenchError(RuntimeError):
    """Something the benchmark needs did not work; the message says what."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client_env() -> dict[str, str]:
    return {**os.environ, **CLIENT_ENV}


def bench_dsn(port: int) -> str:
    return f"postgresql://{ROLE}@127.0.0.1:{port}/{DATABASE}?sslmode=disable&gssencmode=disable"


def wait_until_serving(port: int, process: subprocess.Popen[bytes] | None, name: str) -> None:
    """Wait until a query as the bench role works through `port` (or the process died)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if process is not None and process.poll() is not None:
            raise BenchError(f"{name} exited with status {process.returncode} while starting")
        try:
            with psycopg.connect(bench_dsn(port), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise BenchError(f"{name} on port {port} did not answer: {exc}") from None
        time.sleep(0.1)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a process has used, from /proc (None where that is not there)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; fields[0] is the state
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------- the processes


@dataclass
class Service:
    """A proxy this benchmark started: its process, where it listens, where it logs."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.process.returncode}; its log:\n"
                f"{tail(self.log)}"
            )


def start_postgres(base: Path, stack: contextlib.ExitStack) -> EmbeddedPostgres:
    server = EmbeddedPostgres.throwaway(base, f"pgnl-bench-{os.getpid()}", free_port())
    stack.callback(server.drop)
    progress(f"starting the embedded PostgreSQL on 127.0.0.1:{server.port}")
    server.start(SERVER_SETTINGS)
    # The bench role connects without a password (trust) from 127.0.0.1, as PgBouncer's
    # auth_type=trust needs; everything else stays as the embedded server sets it.
    server.set_hba([f"host all {ROLE} 127.0.0.1/32 trust", *DEFAULT_HBA])
    server.execute(f"CREATE ROLE {ROLE} LOGIN")
    server.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
    return server


def find_pgbench(server: EmbeddedPostgres) -> Path:
    """The server's own pgbench (same major version) where it is there, else the system's."""
    with contextlib.suppress(EmbeddedError):
        own = server.bin_dir / "pgbench"
        if own.exists():
            return own
    found = shutil.which("pgbench")
    if found is None:
        raise BenchError("no pgbench found (neither the embedded server's nor on PATH)")
    return Path(found)


def load_pgbench_data(server: EmbeddedPostgres, pgbench: Path, scale: int) -> None:
    progress(f"initialising pgbench data at scale {scale}")
    started = time.monotonic()
    argv = [str(pgbench), "-i", "-q", "-s", str(scale), "-h", "127.0.0.1"]
    argv += ["-p", str(server.port), "-U", ROLE, DATABASE]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=client_env(),
        check=False,
    )
    if result.returncode != 0:
        raise BenchError(f"pgbench -i failed: {result.stderr.strip()}")
    with psycopg.connect(server.dsn(DATABASE), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pgbench_branches").fetchone()
    if row is None or row[0] != scale:
        raise BenchError(f"pgbench -i left {row and row[0]} branches, not {scale}")
    # Read the table and its index into shared_buffers, so that the first target measured does
    # not pay for the others' cache misses (best effort: pg_prewarm is an optional extension).
    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(server.dsn(DATABASE), autocommit=True) as conn,
    ):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm('pgbench_accounts'), pg_prewarm('pgbench_accounts_pkey')")
    progress(f"  done in {time.monotonic() - started:.1f} s")


def start_pgnl(
    base: Path, pg_port: int, stack: contextlib.ExitStack, *, native: bool = True
) -> Service:
    """`pgnl serve`; native=False: with [proxy] native_relay off (every message in Python)."""
    name = "pgnl" if native else "pgnl-py"
    log = base / f"{name}.log"
    argv = [sys.executable, "-m", "proxy", "--log-level", "warning", "serve"]
    argv += ["--listen", "127.0.0.1:0", "--upstream", f"postgresql://127.0.0.1:{pg_port}"]
    env = {**os.environ, "PGNL_PROXY_NATIVE_RELAY": "true" if native else "false"}
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=REPO_ROOT,
            env=env,
            start_new_session=True,  # Ctrl-C reaches this program, which then stops pgnl
        )
    service = Service(name, process, 0, log)
    stack.callback(service.stop)
    assert process.stdout is not None
    line = read_line(process.stdout, STARTUP_TIMEOUT_S)
    if not line.startswith("listening: "):
        raise BenchError(f"pgnl serve did not start ({line!r}); its log:\n{tail(log)}")
    service.port = int(line.rpartition(":")[2])
    wait_until_serving(service.port, process, name)
    progress(f"{name} listening on 127.0.0.1:{service.port}")
    return service


def read_line(stream: IO[bytes], timeout: float) -> str:
    """One line from a pipe, or what came before the timeout or the end of the stream."""
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            break
        chunk = os.read(stream.fileno(), 1)
        if not chunk:
            break
        line += chunk
    return line.decode(errors="replace").strip()


def start_pgbouncer(
    server: EmbeddedPostgres, base: Path, max_clients: int, stack: contextlib.ExitStack
) -> Service:
    if not PGBOUNCER.exists():
        raise BenchError(f"{PGBOUNCER} is not there (apt-get install pgbouncer)")
    # PgBouncer refuses to run as root: it runs as the account that runs PostgreSQL, from a
    # directory of its own.
    home = base / "pgbouncer"
    home.mkdir(mode=0o700)
    server.chown_to_owner(home)
    port = free_port()
    userlist = home / "userlist.txt"
    userlist.write_text(f'"{ROLE}" ""\n')
    ini = home / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"{DATABASE} = host=127.0.0.1 port={server.port} dbname={DATABASE} user={ROLE}\n"
        "\n[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {userlist}\n"
        "pool_mode = session\n"
        f"default_pool_size = {max_clients + 8}\n"
        f"max_client_conn = {max(100, 2 * max_clients)}\n"
        f"logfile = {home / 'pgbouncer.log'}\n"
        "log_connections = 0\n"
        "log_disconnections = 0\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    for path in (userlist, ini):
        server.chown_to_owner(path)
        path.chmod(0o600)
    log = home / "pgbouncer.out"
    with log.open("wb") as output:
        process = server.run_as_owner(
            [str(PGBOUNCER), str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=str(home),
            start_new_session=True,
        )
    service = Service("pgbouncer", process, port, home / "pgbouncer.log")
    stack.callback(service.stop)
    try:
        wait_until_serving(port, process, "pgbouncer")
    except BenchError as exc:
        raise BenchError(f"{exc}; its output:\n{tail(log)}\n{tail(service.log)}") from None
    progress(f"pgbouncer listening on 127.0.0.1:{port}")
    return service


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Run:
    tps: float
    latency_ms: float
    proxy_cpu: float | None  # CPU seconds of the proxy process per second of wall time


@dataclass(frozen=True)
class Cell:
    clients: int
    protocol: str

    @property
    def label(self) -> str:
        return f"c{self.clients}/{self.protocol}"


def run_pgbench(
    pgbench: Path,
    port: int,
    *,
    clients: int,
    jobs: int,
    protocol: str,
    seconds: int,
    proxy: Service | None,
    log_prefix: Path | None = None,
) -> Run:
    """One pgbench run; `log_prefix`: also write each transaction's latency (pgbench -l)."""
    argv = [str(pgbench), "-n", "-S", "-M", protocol, "-T", str(seconds)]
    argv += ["-c", str(clients), "-j", str(jobs), "-h", "127.0.0.1", "-p", str(port)]
    if log_prefix is not None:
        argv += ["-l", "--log-prefix", str(log_prefix)]
    argv += ["-U", ROLE, DATABASE]
    pid = proxy.process.pid if proxy is not None else None
    cpu_before = cpu_seconds(pid) if pid is not None else None
    started = time.monotonic()
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=client_env(),
        timeout=seconds + 120,
        check=False,
    )
    wall = time.monotonic() - started
    cpu_after = cpu_seconds(pid) if pid is not None else None
    if proxy is not None:
        proxy.check_alive()
    tps = _TPS.search(result.stdout)
    latency = _LATENCY.search(result.stdout)
    if result.returncode != 0 or tps is None or latency is None:
        raise BenchError(
            f"pgbench exited with status {result.returncode}: "
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )
    proxy_cpu = None
    if cpu_before is not None and cpu_after is not None and wall > 0:
        proxy_cpu = (cpu_after - cpu_before) / wall
    return Run(float(tps.group(1)), float(latency.group(1)), proxy_cpu)


def median_run(runs: Sequence[Run]) -> Run:
    cpus = [run.proxy_cpu for run in runs if run.proxy_cpu is not None]
    return Run(
        statistics.median(run.tps for run in runs),
        statistics.median(run.latency_ms for run in runs),
        statistics.median(cpus) if cpus else None,
    )


def rotated(items: Sequence[str], by: int) -> list[str]:
    by %= len(items)
    return [*items[by:], *items[:by]]


def measure(
    pgbench: Path,
    ports: dict[str, int],
    proxies: dict[str, Service],
    cells: list[Cell],
    *,
    seconds: int,
    repeat: int,
    jobs: int,
    targets: Sequence[str] = TARGETS,
) -> dict[tuple[Cell, str], Run | None]:
    """Every cell, targets interleaved; the median of each (cell, target), None where it failed."""
    runs: dict[tuple[Cell, str], list[Run]] = {}
    failed: set[tuple[Cell, str]] = set()
    total = len(cells) * repeat * len(targets)
    done = 0
    turn = 0
    for cell in cells:
        threads = jobs or min(cell.clients, os.cpu_count() or 1)
        for attempt in range(repeat):
            for target in rotated(targets, turn):
                done += 1
                prefix = f"[{done}/{total}] {cell.label:<13} {target:<9} try {attempt + 1}:"
                try:
                    run = run_pgbench(
                        pgbench,
                        ports[target],
                        clients=cell.clients,
                        jobs=threads,
                        protocol=cell.protocol,
                        seconds=seconds,
                        proxy=proxies.get(target),
                    )
                except (BenchError, subprocess.TimeoutExpired) as exc:
                    failed.add((cell, target))
                    progress(f"{prefix} FAILED: {exc}")
                    if target in proxies:
                        proxies[target].check_alive()  # a dead proxy ends the benchmark
                    continue
                runs.setdefault((cell, target), []).append(run)
                cpu = f", proxy CPU {run.proxy_cpu:.2f}" if run.proxy_cpu is not None else ""
                progress(f"{prefix} {run.tps:10.1f} tps, {run.latency_ms:.3f} ms{cpu}")
            turn += 1
    return {
        (cell, target): (
            median_run(runs[(cell, target)])
            if (cell, target) in runs and (cell, target) not in failed
            else None
        )
        for cell in cells
        for target in targets
    }


def warm_up(pgbench: Path, ports: dict[str, int], clients: int, seconds: int) -> None:
    """A short untimed run through each target: caches, pools and the proxies' code paths."""
    for target, port in ports.items():
        progress(f"warm-up: {target}, {clients} clients, {seconds} s")
        run_pgbench(
            pgbench,
            port,
            clients=clients,
            jobs=min(clients, os.cpu_count() or 1),
            protocol="simple",
            seconds=seconds,
            proxy=None,
        )


# ---------------------------------------------------------------- questions under load

QUESTION = "-- nl: how many accounts are there?"


def latencies_ms(prefix: Path) -> list[float]:
    """Every transaction's latency from pgbench's -l files (the third field, microseconds)."""
    values: list[float] = []
    for log_file in prefix.parent.glob(prefix.name + ".*"):
        for line in log_file.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3:
                values.append(int(fields[2]) / 1000)
        log_file.unlink()
    return sorted(values)


def percentile(values: Sequence[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def questions_under_load(
    server: EmbeddedPostgres, pgbench: Path, pgnl: Service, base: Path, seconds: int
) -> list[str]:
    """Plain SQL through pgnl at 32 clients, quiet and while one more connection asks a question
    over and over: plain-SQL p50 / p99 both ways, and the questions answered meanwhile (the
    report's lines)."""
    from proxy.migrate import migrate

    with psycopg.connect(server.dsn(DATABASE), autocommit=True) as admin:
        migrate(admin)
    progress("asking once, untimed: the first question loads the models")
    with psycopg.connect(bench_dsn(pgnl.port), autocommit=True) as conn:
        conn.execute(QUESTION).fetchone()
    clients, jobs = 32, min(32, os.cpu_count() or 1)
    rows: list[tuple[str, Run, list[float]]] = []
    asked: list[float] = []
    answers: set[object] = set()
    for label in ("quiet", "questions"):
        stop = threading.Event()

        def ask(stop: threading.Event = stop) -> None:
            with psycopg.connect(bench_dsn(pgnl.port), autocommit=True) as conn:
                while not stop.is_set():
                    started = time.monotonic()
                    answers.add(conn.execute(QUESTION).fetchone())
                    asked.append((time.monotonic() - started) * 1000)

        asker = threading.Thread(target=ask, daemon=True)
        if label == "questions":
            asker.start()
        prefix = base / f"latency-{label}"
        progress(f"plain SQL through pgnl, {clients} clients, {seconds} s, {label}")
        run = run_pgbench(
            pgbench,
            pgnl.port,
            clients=clients,
            jobs=jobs,
            protocol="simple",
            seconds=seconds,
            proxy=pgnl,
            log_prefix=prefix,
        )
        stop.set()
        if asker.is_alive():
            asker.join(60)
        rows.append((label, run, latencies_ms(prefix)))
    out = [
        "",
        f"plain SQL through pgnl at {clients} clients (pgbench -S, simple), quiet and while one",
        f"more connection asks {QUESTION!r} over and over",
        f"{'':<10}  {'TPS':>10}  {'p50 ms':>7}  {'p99 ms':>7}  {'max ms':>7}",
    ]
    for label, run, values in rows:
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        out.append(f"{label:<10}  {run.tps:>10.1f}  {p50:>7.3f}  {p99:>7.3f}  {values[-1]:>7.3f}")
    asked.sort()
    out.append(
        f"questions answered meanwhile: {len(asked)}, p50 {percentile(asked, 0.5):.0f} ms, "
        f"answers {sorted(map(str, answers))}"
    )
    return out


# ---------------------------------------------------------------- reporting


def ratio(
    results: dict[tuple[Cell, str], Run | None], cell: Cell, over: str, of: str = "pgnl"
) -> float | None:
    pgnl, other = results[(cell, of)], results[(cell, over)]
    if pgnl is None or other is None or other.tps == 0:
        return None
    return pgnl.tps / other.tps


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def report(
    results: dict[tuple[Cell, str], Run | None],
    cells: list[Cell],
    seconds: int,
    targets: Sequence[str] = TARGETS,
) -> None:
    print()
    print(
        f"pgbench -S, {seconds} s a run (median over repeats); proxy CPU: cores the proxy "
        "process used; us/txn: its CPU microseconds per transaction"
    )
    print(
        f"{'clients':>7}  {'protocol':<8}  {'target':<9}  {'TPS':>10}  {'mean ms':>8}  "
        f"{'proxy CPU':>9}  {'us/txn':>6}"
    )
    for cell in cells:
        for target in targets:
            run = results[(cell, target)]
            if run is None:
                print(f"{cell.clients:>7}  {cell.protocol:<8}  {target:<9}  {'FAILED':>10}")
                continue
            cpu = per_txn = "-"
            if target != "direct":
                cpu = _fmt(run.proxy_cpu, ".2f")
                if run.proxy_cpu is not None and run.tps > 0:
                    per_txn = f"{run.proxy_cpu * 1e6 / run.tps:.1f}"
            print(
                f"{cell.clients:>7}  {cell.protocol:<8}  {target:<9}  {run.tps:>10.1f}  "
                f"{run.latency_ms:>8.3f}  {cpu:>9}  {per_txn:>6}"
            )
    print()
    python = "pgnl-py" in targets
    print("TPS ratios (above 1: pgnl faster)")
    extra = f"  {'pgnl-py/pgbouncer':>17}  {'pgnl/pgnl-py':>12}" if python else ""
    print(f"{'clients':>7}  {'protocol':<8}  {'pgnl/direct':>11}  {'pgnl/pgbouncer':>14}{extra}")
    for cell in cells:
        direct = _fmt(ratio(results, cell, "direct"), ".3f")
        bouncer = _fmt(ratio(results, cell, "pgbouncer"), ".3f")
        if python:
            old = _fmt(ratio(results, cell, "pgbouncer", of="pgnl-py"), ".3f")
            gain = _fmt(ratio(results, cell, "pgnl-py"), ".3f")
            extra = f"  {old:>17}  {gain:>12}"
        print(f"{cell.clients:>7}  {cell.protocol:<8}  {direct:>11}  {bouncer:>14}{extra}")
    print()
    parts = []
    for over in ("direct", "pgbouncer", *(["pgnl-py"] if python else [])):
        listed = ", ".join(f"{c.label} {_fmt(ratio(results, c, over), '.2f')}" for c in cells)
        parts.append(f"pgnl/{over}: {listed}")
    print("ratios " + " ; ".join(parts), flush=True)


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.proxy_overhead",
        description="pgbench -S direct, through pgnl and through PgBouncer (session mode).",
    )
    parser.add_argument("--seconds", type=int, default=10, help="length of each pgbench run")
    parser.add_argument(
        "--clients", default="1,8,32", help="comma-separated client counts (default 1,8,32)"
    )
    parser.add_argument("--scale", type=int, default=10, help="pgbench scale factor")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each cell; the median is reported"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="pgbench threads (-j); default: the number of clients, at most the CPU count",
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="seconds of untimed warm-up per target (0: none)"
    )
    parser.add_argument(
        "--questions",
        type=int,
        default=0,
        metavar="SECONDS",
        help="then plain-SQL latency at 32 clients through pgnl, quiet and while questions run",
    )
    parser.add_argument(
        "--python-relay",
        action="store_true",
        help="also pgnl with [proxy] native_relay off (target pgnl-py), side by side",
    )
    args = parser.parse_args(argv)
    try:
        args.client_counts = [int(part) for part in args.clients.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--clients must be comma-separated integers, not {args.clients!r}")
    if not args.client_counts or min(args.client_counts) < 1:
        parser.error("--clients needs at least one count, each at least 1")
    if args.seconds < 1 or args.repeat < 1 or args.scale < 1 or args.jobs < 0 or args.warmup < 0:
        parser.error("--seconds, --repeat and --scale must be positive; --jobs and --warmup >= 0")
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="pgnl-bench-"))
    base.chmod(0o755)  # the account that runs PostgreSQL and PgBouncer must reach its folders
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # clean up on kill as on Ctrl-C
    cells = [Cell(clients, protocol) for clients in args.client_counts for protocol in PROTOCOLS]
    max_clients = max(args.client_counts)
    try:
        with workspace() as base, contextlib.ExitStack() as stack:
            server = start_postgres(base, stack)
            pgbench = find_pgbench(server)
            progress(f"pgbench: {pgbench}")
            load_pgbench_data(server, pgbench, args.scale)
            pgnl = start_pgnl(base, server.port, stack)
            bouncer = start_pgbouncer(server, base, max_clients, stack)
            ports = {"direct": server.port, "pgnl": pgnl.port, "pgbouncer": bouncer.port}
            proxies = {"pgnl": pgnl, "pgbouncer": bouncer}
            if args.python_relay:
                proxies["pgnl-py"] = start_pgnl(base, server.port, stack, native=False)
                ports["pgnl-py"] = proxies["pgnl-py"].port
            targets = list(ports)
            if args.warmup:
                warm_up(pgbench, ports, max_clients, args.warmup)
            results = measure(
                pgbench,
                ports,
                proxies,
                cells,
                seconds=args.seconds,
                repeat=args.repeat,
                jobs=args.jobs,
                targets=targets,
            )
            loaded: list[str] = []
            if args.questions:
                loaded = questions_under_load(server, pgbench, pgnl, base, args.questions)
            progress("stopping the proxies and PostgreSQL")
        report(results, cells, args.seconds, targets)
        print("\n".join(loaded), flush=True)
    except KeyboardInterrupt:
        progress("interrupted; everything started here has been stopped")
        return 130
    except (BenchError, EmbeddedError, OSError, psycopg.Error) as exc:
        progress(f"benchmark failed: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
