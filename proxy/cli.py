"""The `pgnl` command: serve, demo, config, rules, migrate, index, ask, doctor."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy import config
from proxy.embedded import EmbeddedError, EmbeddedPostgres
from proxy.llm_server import describe_provider
from proxy.server import Proxy, Upstream, tls_context

if TYPE_CHECKING:
    import psycopg

    from proxy.valueindex import Embedder

log = logging.getLogger("pgnl")


def _split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise config.ConfigError(
            f"listen address {listen!r} must be HOST:PORT, e.g. 127.0.0.1:6432"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run a coroutine on uvloop where it is installed, on asyncio's own loop otherwise."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:
        log.info("uvloop is not installed; using asyncio's default event loop")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def _serve_until_stopped(
    settings: config.Settings,
    upstream: Upstream,
    announce: Callable[[str, int], None],
    *,
    preload: bool = False,
) -> None:
    p = settings.proxy
    proxy = Proxy(
        upstream,
        tls=tls_context(p.tls_cert_file, p.tls_key_file),
        max_clients=p.max_client_connections,
        connect_timeout=p.connect_timeout_s,
        startup_timeout=p.startup_timeout_s,
        settings=settings,
    )
    if preload:  # else on the first directive
        proxy.answerer.preload()
    host, port = _split_listen(p.listen)
    bound = await proxy.listen(host, port)
    if settings.metrics.listen:
        metrics_host, metrics_port = _split_listen(settings.metrics.listen)
        served = await proxy.serve_metrics(metrics_host, metrics_port)
        log.info("metrics: http://%s:%d/metrics", *served)
    announce(*bound)
    try:
        await _until_stopped()
    finally:
        log.info("stopping: closing %d client connection(s)", len(proxy.clients))
        await proxy.close()


EMBEDDED_SPARE_CONNECTIONS = 10
"""Server connections the embedded PostgreSQL keeps beyond the proxy's clients: pgnl migrate,
index and ask, and the superuser_reserved_connections (3)."""


def embedded_server_settings(settings: config.Settings) -> dict[str, str]:
    """The embedded server's max_connections (room for every client the proxy accepts), and
    pg_stat_statements loaded, so that `pgnl learn` can read the database's query history."""
    limit = settings.proxy.max_client_connections + EMBEDDED_SPARE_CONNECTIONS
    return {"max_connections": str(limit), "shared_preload_libraries": "pg_stat_statements"}


def cmd_serve(settings: config.Settings) -> int:
    log.info("%s", describe_provider(settings.llm))  # a bad [llm] provider fails here
    embedded: EmbeddedPostgres | None = None
    if settings.proxy.upstream:
        upstream = Upstream.from_dsn(settings.proxy.upstream)
    else:
        embedded = EmbeddedPostgres(settings.embedded)
        embedded.start(embedded_server_settings(settings))
        upstream = Upstream("127.0.0.1", embedded.port)

    def announce(host: str, port: int) -> None:
        log.info("pgnl listening on %s:%d, relaying to %s", host, port, upstream)
        print(f"listening: {host}:{port}", flush=True)

    try:
        _run(lambda: _serve_until_stopped(settings, upstream, announce))
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def load_sample(embedded: EmbeddedPostgres, database: str) -> None:
    """Create the demo database and load the sample into it, unless it is there already."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(embedded.dsn(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    with psycopg.connect(embedded.dsn(database)) as conn:
        loaded = conn.execute("SELECT to_regclass('public.enrollments')").fetchone()
        if loaded and loaded[0] is not None:
            return
        log.info("loading the sample database into %s", database)
        script = resources.files("proxy.demo").joinpath("sample.sql").read_text()
        conn.execute(script.encode())


DEMO_QUESTIONS = (
    "/* nl: how many students are from new york? */;",
    "/* nl show: what is the name of the department with the largest budget? */;",
    "/* nl explain: show the first and last names of students from boston */;",
)
"""Printed by `pgnl demo` to paste into psql (checked against the sample by test_demo)."""


DEMO_FUNCTION_CALL = "SELECT * FROM nl.ask('how many students are from new york?')"
"""The SQL-function call `pgnl demo` prints to paste (checked by test_demo)."""


def index_sample(
    embedded: EmbeddedPostgres, database: str, settings: config.Settings, config_file: str | None
) -> str:
    """Migrate the demo database and build (or refresh) its value index, showing progress; the
    line that says how to call the SQL functions, or why they are not there."""
    import psycopg

    from proxy.migrate import SQL_FUNCTIONS, migrate
    from proxy.runtime import load_embedder
    from proxy.valueindex import build_index

    skipped: dict[str, str] = {}
    with psycopg.connect(embedded.dsn(database), autocommit=True) as conn:
        migrate(conn, config_file=_config_file(config_file), skipped=skipped)
        report = build_index(conn, load_embedder(settings.runtime), settings.index, progress=True)
        installed = conn.execute(
            "SELECT 1 FROM nl.schema_migrations WHERE name = %s", [SQL_FUNCTIONS]
        ).fetchone()
    log.info("value index: %s", report.summary().splitlines()[0])
    if installed is None:
        return f"SQL functions: not installed: {skipped.get(SQL_FUNCTIONS, 'see pgnl migrate')}"
    e = settings.embedded
    dsn = f"postgresql://{e.user}:{e.password}@127.0.0.1:{embedded.port}/{database}"
    return f"Or straight on PostgreSQL, no proxy: psql '{dsn}' -c \"{DEMO_FUNCTION_CALL}\""


def _config_file(given: str | None) -> str | None:
    """The settings file given to pgnl (--config, else $PGNL_CONFIG) as an absolute path: the
    one the SQL functions' workers read."""
    chosen = given or os.environ.get("PGNL_CONFIG")
    return os.path.abspath(chosen) if chosen else None


def cmd_demo(settings: config.Settings, config_file: str | None = None) -> int:
    describe_provider(settings.llm)  # a bad [llm] provider fails before anything starts
    embedded = EmbeddedPostgres(settings.embedded)
    embedded.start(embedded_server_settings(settings))
    try:
        load_sample(embedded, settings.demo.database)
        functions_line = index_sample(embedded, settings.demo.database, settings, config_file)
        upstream = Upstream("127.0.0.1", embedded.port)
        e = settings.embedded

        def announce(host: str, port: int) -> None:
            dsn = f"postgresql://{e.user}:{e.password}@{host}:{port}/{settings.demo.database}"
            print(f"ready: {dsn}", flush=True)
            print(f"Connect with psql '{dsn}' and paste a question:", flush=True)
            for question in DEMO_QUESTIONS:
                print(f"  {question}", flush=True)
            print(describe_provider(settings.llm), flush=True)
            print(functions_line, flush=True)

        _run(lambda: _serve_until_stopped(settings, upstream, announce, preload=True))
    finally:
        embedded.stop()
    return 0


def cmd_config(settings: config.Settings) -> int:
    sys.stdout.write(config.example_toml())
    return 0


def cmd_rules(settings: config.Settings) -> int:
    """The PLM-only rules in the order they apply: stage, name, purpose; `*` marks those
    `[pipeline] disabled_rules` turns off."""
    from proxy.nl2sql.rules import RULES

    disabled = set(settings.pipeline.disabled_rules)
    width = max(len(rule.name) for rule in RULES) + 2
    lines = [f"{'stage':<10}{'name':<{width}}purpose"]
    for rule in RULES:
        mark = "*" if rule.name in disabled else " "
        lines.append(f"{rule.stage:<10}{rule.name + mark:<{width}}{rule.purpose}")
    if disabled:
        lines.append("* disabled by [pipeline] disabled_rules")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _database_error(exc: Exception) -> str:
    """A psycopg error as one line for `pgnl: ...`."""
    return " ".join(str(exc).split()) or type(exc).__name__


def cmd_migrate(settings: config.Settings, args: argparse.Namespace) -> int:
    import psycopg

    from proxy.migrate import MigrationError, migrate

    skipped: dict[str, str] = {}
    try:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            applied = migrate(conn, config_file=_config_file(args.config), skipped=skipped)
    except MigrationError as exc:
        print(f"pgnl: {exc}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"pgnl: migrate failed: {_database_error(exc)}", file=sys.stderr)
        return 1
    if applied:
        print(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        print("nothing to apply: the database is up to date")
    for name, reason in skipped.items():
        print(f"not applied: {name}: {reason}")
    return 0


def cmd_index(settings: config.Settings, args: argparse.Namespace) -> int:
    import psycopg

    from proxy.runtime import ModelFilesError, load_embedder
    from proxy.valueindex import ValueIndexError, build_index

    index = settings.index
    for key in ("schemas", "max_distinct_per_column", "max_value_length", "batch_size"):
        if (value := getattr(args, key, None)) is not None:
            setattr(index, key, value)
    try:
        embedder = load_embedder(settings.runtime)
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            report = build_index(conn, embedder, index, progress=not args.no_progress)
    except (ValueIndexError, ModelFilesError) as exc:
        print(f"pgnl: {exc}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"pgnl: index failed: {_database_error(exc)}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0


def cmd_learn(settings: config.Settings, args: argparse.Namespace) -> int:
    import psycopg

    from proxy.learn import FILE, QUERY_LOG, STAT_STATEMENTS, LearnError, learn
    from proxy.learn_questions import without_question
    from proxy.runtime import ModelFilesError, load_embedder
    from proxy.valueindex import ValueIndexError

    sources = [
        source
        for source, off in (
            (STAT_STATEMENTS, args.no_stat_statements),
            (QUERY_LOG, args.no_query_log),
        )
        if not off
    ]
    try:
        texts = [Path(f).read_text(encoding="utf-8") for f in args.file]
    except OSError as exc:
        print(f"pgnl: learn --file: {exc}", file=sys.stderr)
        return 1
    if not sources and not texts:
        print(
            "pgnl: learn: nothing to read (give --file, or leave pg_stat_statements or "
            "nl.query_log on)",
            file=sys.stderr,
        )
        return 2
    try:
        embedder = load_embedder(settings.runtime)
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            report = learn(
                conn,
                embedder,
                sources=sources + ([FILE] if texts else []),
                files=texts,
                progress=not args.no_progress,
            )
            print(report.summary())
            if not args.no_questions and without_question(conn):
                print(_learn_questions(settings, conn, embedder, progress=not args.no_progress))
    except (LearnError, ModelFilesError, ValueIndexError) as exc:
        print(f"pgnl: {exc}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"pgnl: learn failed: {_database_error(exc)}", file=sys.stderr)
        return 1
    return 0


def _learn_questions(
    settings: config.Settings,
    conn: psycopg.Connection[Any],
    embedder: Embedder,
    *,
    progress: bool,
) -> str:
    """The LLM's questions for the records without one (`proxy.learn_questions`): a line on
    what was written, or on why nothing was."""
    from proxy.answerer import start_llm
    from proxy.learn_questions import write_questions
    from proxy.nl2sql.database import PsycopgDatabase
    from proxy.nl2sql.schema import introspect

    try:
        llm = start_llm(settings)
    except config.ConfigError as exc:
        return f"no questions written by the LLM: {exc}"
    if llm is None:
        return (
            "no LLM ([llm] provider none, or it did not start): the statements learned without "
            "a question are found by their words; configure [llm] and run pgnl learn again to "
            "have it write their questions"
        )
    try:
        schema = introspect(PsycopgDatabase(conn), name=conn.info.dbname)
        stream = sys.stderr if progress else None
        return write_questions(conn, embedder, llm, schema, stream=stream).summary()
    finally:
        llm.close()


def _table(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    """Rows aligned under their column names, as psql prints them."""
    shown = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in shown)]) for i, c in enumerate(columns)]
    lines = [" | ".join(c.center(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in shown]
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines)


def cmd_ask(settings: config.Settings, args: argparse.Namespace) -> int:
    import psycopg

    from proxy.answerer import start_llm
    from proxy.nl2sql.database import PsycopgDatabase
    from proxy.nl2sql.pipeline import load_pipeline
    from proxy.nl2sql.querylog import insert_statement
    from proxy.runtime import ModelFilesError

    question = " ".join(args.question.split())
    if not question:
        print("pgnl: the question is empty: write it after pgnl ask", file=sys.stderr)
        return 2
    llm = start_llm(settings)
    try:
        pipeline = load_pipeline(settings, llm)
        with psycopg.connect(args.dsn) as conn:
            conn.read_only = True  # every query of the answer runs in a READ ONLY transaction
            answer = pipeline.answer(question, PsycopgDatabase(conn))
            columns: list[str] = []
            rows = answer.rows
            if answer.sql is not None and not args.show:
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(answer.sql.encode())
                    columns = [d.name for d in cur.description or ()]
                    rows = cur.fetchall()
        with psycopg.connect(args.dsn, autocommit=True) as log_conn:
            statement, params = insert_statement(answer, "ask")
            try:
                psycopg.RawCursor(log_conn).execute(statement.encode(), params)
            except psycopg.Error as exc:
                log.warning("the question was not logged in nl.query_log: %s", exc)
    except ModelFilesError as exc:
        print(f"pgnl: {exc}", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"pgnl: ask failed: {_database_error(exc)}", file=sys.stderr)
        return 1
    finally:
        if llm is not None:
            llm.close()
    for notice in answer.notices:
        print(f"NOTICE: {notice}", file=sys.stderr)
    if args.explain:
        from proxy.nl2sql.answer import TRACE_COLUMNS

        print(_table(list(TRACE_COLUMNS), [row.values() for row in answer.trace]))
        return 0 if answer.error is None else 1
    if answer.error is not None:
        error = answer.error
        print(f"pgnl: ERROR {error.sqlstate}: {error.message}", file=sys.stderr)
        for label, text in (("DETAIL", error.detail), ("HINT", error.hint)):
            if text:
                print(f"{label}: {text}", file=sys.stderr)
        return 1
    print(answer.sql if args.show else f"-- {answer.sql}\n{_table(columns, rows)}")
    return 0


def cmd_doctor(settings: config.Settings, args: argparse.Namespace) -> int:
    from proxy.doctor import run

    return run(settings, args.dsn, llm_speed=args.llm_speed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgnl", description="Natural-language questions for PostgreSQL, through a proxy."
    )
    parser.add_argument("--config", help="TOML settings file (default: $PGNL_CONFIG, ./pgnl.toml)")
    parser.add_argument("--log-level", help="debug, info, warning or error")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the proxy in front of a PostgreSQL server")
    serve.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:6432)")
    serve.add_argument("--upstream", help="DSN of the server to relay to (default: embedded)")
    serve.add_argument("--tls-cert", dest="tls_cert_file", help="PEM certificate for client TLS")
    serve.add_argument("--tls-key", dest="tls_key_file", help="PEM key for client TLS")
    serve.add_argument("--max-client-connections", type=int)

    demo = commands.add_parser(
        "demo", help="embedded PostgreSQL + sample database + proxy, until Ctrl-C"
    )
    demo.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:6432)")
    for command in (serve, demo):
        command.add_argument(
            "--no-llm",
            action="store_true",
            help="answer with the sketch models alone ([llm] provider = none)",
        )
        command.add_argument(
            "--metrics-listen",
            help="HOST:PORT to serve Prometheus metrics on, GET /metrics ([metrics] listen)",
        )

    commands.add_parser("config", help="print every setting with its documentation and default")
    commands.add_parser(
        "rules", help="list the PLM-only rules (sketch repairs, completion rewrites) in order"
    )

    migrate = commands.add_parser(
        "migrate", help="create or update the nl schema (value index, functions) in a database"
    )
    migrate.add_argument("--dsn", required=True, help="the database, as a libpq DSN or URI")

    index = commands.add_parser(
        "index", help="build or refresh the value index of a database (after pgnl migrate)"
    )
    index.add_argument("--dsn", required=True, help="the database, as a libpq DSN or URI")
    index.add_argument("--schemas", help="comma-separated schemas to read (default: all)")
    index.add_argument("--max-distinct-per-column", type=int, help="values kept per column")
    index.add_argument("--max-value-length", type=int, help="longer values are free text")
    index.add_argument("--batch-size", type=int, help="values embedded together")
    index.add_argument("--no-progress", action="store_true", help="no progress line on stderr")

    learn = commands.add_parser(
        "learn",
        help="learn a database's query history (pg_stat_statements, nl.query_log, SQL files) "
        "for later questions (after pgnl migrate)",
    )
    learn.add_argument("--dsn", required=True, help="the database, as a libpq DSN or URI")
    learn.add_argument(
        "--file",
        action="append",
        default=[],
        help="a file of SQL statements that run on the database (repeatable)",
    )
    learn.add_argument(
        "--no-stat-statements", action="store_true", help="do not read pg_stat_statements"
    )
    learn.add_argument("--no-query-log", action="store_true", help="do not read nl.query_log")
    learn.add_argument(
        "--no-questions",
        action="store_true",
        help="do not ask the LLM ([llm]) for the question of each statement learned without "
        "one (default: ask it, where an LLM is configured)",
    )
    learn.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")

    ask = commands.add_parser(
        "ask", help="answer a question from the command line (the SQL, then the rows)"
    )
    ask.add_argument("--dsn", required=True, help="the database, as a libpq DSN or URI")
    shown = ask.add_mutually_exclusive_group()
    shown.add_argument("--show", action="store_true", help="print the chosen SQL only")
    shown.add_argument("--explain", action="store_true", help="print the trace")
    ask.add_argument(
        "--no-llm", action="store_true", help="the sketch models alone ([llm] provider = none)"
    )
    ask.add_argument("question", help="the question, in quotes")

    doctor = commands.add_parser(
        "doctor", help="check the database, the models and the LLM; say what to fix"
    )
    doctor.add_argument("--dsn", help="the database to check, as a libpq DSN or URI")
    doctor.add_argument(
        "--llm-speed", action="store_true", help="also time one short completion of the LLM"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    proxy_flags = {
        key: value
        for key in ("listen", "upstream", "tls_cert_file", "tls_key_file", "max_client_connections")
        if (value := getattr(args, key, None)) is not None
    }
    overrides: dict[str, dict[str, object]] = {"proxy": proxy_flags}
    if args.log_level:
        overrides["log"] = {"level": args.log_level}
    if getattr(args, "no_llm", False):
        overrides["llm"] = {"provider": "none"}
    if getattr(args, "metrics_listen", None) is not None:
        overrides["metrics"] = {"listen": args.metrics_listen}
    try:
        settings = config.load(args.config, overrides=overrides)
    except config.ConfigError as exc:
        print(f"pgnl: {exc}", file=sys.stderr)
        if args.command == "rules":  # the list a misspelt disabled rule's error points to
            cmd_rules(config.Settings())
        return 2
    logging.basicConfig(
        level=getattr(logging, settings.log.level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handlers: dict[str, Callable[[config.Settings], int]] = {
        "serve": cmd_serve,
        "demo": lambda settings: cmd_demo(settings, args.config),
        "config": cmd_config,
        "rules": cmd_rules,
        "migrate": lambda settings: cmd_migrate(settings, args),
        "index": lambda settings: cmd_index(settings, args),
        "learn": lambda settings: cmd_learn(settings, args),
        "ask": lambda settings: cmd_ask(settings, args),
        "doctor": lambda settings: cmd_doctor(settings, args),
    }
    try:
        return handlers[args.command](settings)
    except (EmbeddedError, config.ConfigError, ValueError, OSError) as exc:
        print(f"pgnl: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
