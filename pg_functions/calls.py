"""What `nl.sql`, `nl.ask`, `nl.explain` and `nl.refresh_index` do, called from their PL/Python
bodies with `plpy`.

The backend runs none of the pipeline itself: it starts a pgnl worker on its first call
(`worker`: the Python that ran `pgnl migrate`, reading the settings file it was given) and
serves the worker's queries, each through `PlpyDatabase`, so each runs as the caller's own role
(SECURITY INVOKER: grants and row-level security hold). An answer's queries run inside one
subtransaction that is made read-only and always rolled back, so the caller's transaction is
exactly as it was, writable if it was. The proxy's errors are raised with the same SQLSTATE,
message, detail and hint. An index refresh writes nl.value_index in the caller's transaction,
each of the build's transactions a subtransaction (`remote.RemoteIndexConnection`).

While it waits on the worker, reading or writing, the backend checks for a cancel
(statement_timeout, pg_cancel_backend, Ctrl-C) every `channel.POLL_S`; a cancelled call stops
its worker, and the next call starts a new one. The worker runs in a session of its own: a
statement timeout and pg_cancel_backend signal the backend's whole process group, and a SIGINT
reaching the worker half-way through a message would leave the two ends out of step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from proxy.directives import MAX_QUESTION_CHARS, PROGRAM_LIMIT_EXCEEDED, SYNTAX_ERROR
from proxy.nl2sql.answer import Answer, AnswerError

from .channel import receive, send
from .plpy_database import Cancelled, Plpy, PlpyDatabase, bind

MODELS_UNAVAILABLE = "58000"
PROHIBITED_STATEMENT = "2F003"
INTERNAL_ERROR = "XX000"
INVALID_SCHEMA_NAME = "3F000"
READ_ONLY_SQL_TRANSACTION = "25006"

# The worker's start: the folders of nl.plpython_path first (pgnl's own installation, which the
# server's Python may run when it is the same Python version), then that Python's own.
_BOOT = """\
import os, runpy, site, sys
before = list(sys.path)
for folder in os.environ.pop("PGNL_SITE_DIRS", "").split(os.pathsep):
    if folder:
        site.addsitedir(folder)
sys.path[:] = [p for p in sys.path if p not in before] + before
runpy.run_module("proxy.pg_functions.worker", run_name="__main__", alter_sys=True)
"""


class _Worker:
    """This backend's worker process (None until the first call, and after one is stopped)."""

    process: subprocess.Popen[bytes] | None = None
    where = ""


_WORKER = _Worker()


class _RollBack(Exception):
    """Ends the read-only subtransaction of an answer: its work is always undone."""


def raise_error(plpy: Plpy, error: AnswerError) -> NoReturn:
    """Raise `error` from the function, as the proxy sends it."""
    fields: dict[str, str] = {"sqlstate": error.sqlstate}
    if error.detail:
        fields["detail"] = error.detail
    if error.hint:
        fields["hint"] = error.hint
    plpy.error(error.message, **fields)
    raise AssertionError("plpy.error returned")  # it raises plpy.Error


# ---------------------------------------------------------------- the worker


def _stop_worker() -> None:
    process, _WORKER.process = _WORKER.process, None
    if process is not None:
        process.kill()
        process.wait()


def _cancel_point(plpy: Plpy) -> Callable[[], None]:
    """The channel's `idle` for this call: a cancelled call raises there, and stops the worker."""

    def idle() -> None:
        try:
            plpy.execute("SELECT 1")  # raises here when the call was cancelled
        except BaseException:
            _stop_worker()
            raise

    return idle


def _receive(plpy: Plpy, worker: subprocess.Popen[bytes]) -> tuple[Any, ...]:
    """The worker's next message; meanwhile a cancel of the call ends the wait (and the worker)."""
    assert worker.stdout is not None
    try:
        return receive(worker.stdout.fileno(), _cancel_point(plpy))
    except EOFError:
        code = worker.wait()
        _stop_worker()
        raise_error(
            plpy,
            AnswerError(
                MODELS_UNAVAILABLE,
                f"pgnl's worker ended (exit code {code})",
                hint="The server's log says why; the next call starts a new one.",
            ),
        )


def worker(plpy: Plpy) -> tuple[subprocess.Popen[bytes], str]:
    """This backend's worker, started on first use, and where its pgnl was found."""
    running = _WORKER.process
    if running is not None and running.poll() is None:
        return running, _WORKER.where
    rows = plpy.execute("SELECT python, config_file FROM nl.plpython_setup")
    python = rows[0]["python"] if rows.nrows() else None
    config_file = rows[0]["config_file"] if rows.nrows() else None
    if not python or not os.access(python, os.X_OK):
        python = sys.executable  # the server's own Python
    found = plpy.execute("SELECT dir FROM nl.plpython_path ORDER BY position")
    folders = [row["dir"] for row in found]
    command = [python, "-c", _BOOT]
    if config_file:
        command += ["--config", config_file]
    environment = dict(os.environ, PGNL_SITE_DIRS=os.pathsep.join(folders))
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            start_new_session=True,  # out of reach of the signals sent to the backend's group
        )
    except OSError as exc:
        raise_error(
            plpy,
            AnswerError(
                MODELS_UNAVAILABLE,
                f"pgnl's worker could not be started with {python}: {exc}",
                hint="Run pgnl migrate again with the pgnl the server's account may run.",
            ),
        )
    assert process.stdin is not None and process.stdout is not None
    os.set_blocking(process.stdin.fileno(), False)  # the channel waits in select, cancellable
    os.set_blocking(process.stdout.fileno(), False)
    _WORKER.process = process
    first = _receive(plpy, process)
    if first[0] != "ready":
        _stop_worker()
        raise_error(plpy, AnswerError(first[1], first[2], hint=first[3]))
    _WORKER.where = str(first[1])
    return process, _WORKER.where


def where(plpy: Plpy) -> str:
    """`nl.pgnl_import()`: start the worker (so its models load) and say where pgnl is."""
    return worker(plpy)[1]


# ---------------------------------------------------------------- one answer


def _question(plpy: Plpy, function: str, text: str | None) -> str:
    question = " ".join((text or "").split())
    if not question:
        raise_error(
            plpy,
            AnswerError(
                SYNTAX_ERROR,
                f"{function} was given no question",
                hint=f"Pass the question as text, e.g. SELECT {function}('how many "  # noqa: S608
                "students are from new york?');",
            ),
        )
    if len(question) > MAX_QUESTION_CHARS:
        raise_error(
            plpy,
            AnswerError(
                PROGRAM_LIMIT_EXCEEDED,
                f"the question is {len(question)} characters long; "
                f"a question may be at most {MAX_QUESTION_CHARS} characters",
                hint="Shorten the question: ask for what you need in a sentence or two.",
            ),
        )
    return question


@contextmanager
def read_only(plpy: Plpy) -> Iterator[None]:
    """A subtransaction that may not write and is always rolled back."""
    try:
        with plpy.subtransaction():
            plpy.execute("SET LOCAL transaction_read_only = on")
            yield
            raise _RollBack
    except _RollBack:
        pass


class _Subtransactions:
    """The subtransactions the worker has opened (`("begin",)`), innermost last."""

    def __init__(self, plpy: Plpy) -> None:
        self.plpy = plpy
        self.open: list[Any] = []

    def begin(self) -> None:
        subtransaction = self.plpy.subtransaction()
        subtransaction.__enter__()
        self.open.append(subtransaction)

    def end(self, commit: bool) -> None:
        subtransaction = self.open.pop()
        if commit:
            subtransaction.__exit__(None, None, None)
        else:
            subtransaction.__exit__(_RollBack, _RollBack(), None)

    def roll_back_all(self) -> None:
        while self.open:
            self.end(commit=False)


def _run(db: PlpyDatabase, subtransactions: _Subtransactions, message: tuple[Any, ...]) -> Any:
    """Do what the worker asks of the database; the reply."""
    kind = message[0]
    if kind == "fetch":
        return ("rows", db.fetch(message[1], message[2]))
    if kind == "run":
        return ("done", db.run(message[1], message[2]))
    if kind == "begin":
        subtransactions.begin()
    elif kind in ("commit", "rollback"):
        subtransactions.end(commit=kind == "commit")
    else:
        raise ValueError(f"pgnl's worker asked for {kind!r}")
    return ("done", 0)


def _serve(plpy: Plpy, request: tuple[Any, ...]) -> tuple[Any, ...]:
    """Send the worker a request and run each query it sends until it is done; its last
    message (`answered` or `refreshed`)."""
    process, _ = worker(plpy)
    assert process.stdin is not None
    channel = process.stdin.fileno()
    idle = _cancel_point(plpy)
    db = PlpyDatabase(plpy)
    subtransactions = _Subtransactions(plpy)
    finished = False  # the worker is done with this request
    try:
        send(channel, request, idle)
        while True:
            message = _receive(plpy, process)
            if message[0] in ("answered", "refreshed"):
                finished = True
                return message
            if message[0] == "failed":
                finished = True
                raise_error(plpy, AnswerError(message[1], message[2], hint=message[3]))
            if message[0] == "notice":
                plpy.notice(message[1])
                continue
            try:
                reply = _run(db, subtransactions, message)
            except Cancelled as exc:
                raise exc.error from None
            except plpy.SPIError as exc:
                send(channel, ("error", getattr(exc, "sqlstate", None), str(exc)), idle)
            else:
                send(channel, reply, idle)
    except BaseException:
        if not finished:  # it may still be working, out of step with the next call
            _stop_worker()
        raise
    finally:
        subtransactions.roll_back_all()  # none, unless the request ended half-way


def _answer(plpy: Plpy, function: str, text: str | None) -> tuple[Answer, str | None]:
    question = _question(plpy, function, text)
    with read_only(plpy):
        _, answer, refused = _serve(plpy, ("answer", question))
    _log(plpy, answer, function)
    for notice in answer.notices:
        plpy.notice(notice)
    return answer, refused


def _chosen_sql(plpy: Plpy, answer: Answer, refused: str | None) -> str:
    """The answer's SQL, or the error that says why there is none."""
    if answer.sql is None or answer.error is not None:
        raise_error(
            plpy,
            answer.error
            or AnswerError(
                INTERNAL_ERROR,
                "pgnl found no SQL for the question",
                hint="Rephrase the question, naming the tables and columns it is about.",
            ),
        )
    if refused is not None:
        raise_error(
            plpy,
            AnswerError(
                PROHIBITED_STATEMENT,
                f"pgnl refused to run the SQL it generated: {refused}",
                hint="pgnl runs a single read-only query for a question; ask for data to read.",
                detail=answer.sql,
            ),
        )
    return answer.sql


def _log(plpy: Plpy, answer: Answer, function: str) -> None:
    """Record the answer in nl.query_log, where the caller's transaction may write."""
    from proxy.nl2sql.querylog import insert_statement

    statement, params = insert_statement(answer, function)
    try:
        with plpy.subtransaction():
            plpy.execute(bind(statement, params, plpy.quote_literal))
    except plpy.SPIError:
        pass  # a read-only transaction: the answer never depends on its record


# ---------------------------------------------------------------- the functions


def sql(plpy: Plpy, question: str | None) -> str:
    """`nl.sql(question)`: the chosen SQL."""
    return _chosen_sql(plpy, *_answer(plpy, "nl.sql", question))


def ask(plpy: Plpy, question: str | None) -> list[str]:
    """`nl.ask(question)`: the chosen SQL's rows, one JSON object each (as jsonb text)."""
    query = _chosen_sql(plpy, *_answer(plpy, "nl.ask", question))
    body = query.rstrip().removesuffix(";")
    with read_only(plpy):
        rows = plpy.execute(f"SELECT to_jsonb(q)::text AS row FROM (\n{body}\n) AS q")  # noqa: S608
        found = [str(row["row"]) for row in rows]
    return found


def explain(plpy: Plpy, question: str | None) -> list[tuple[Any, ...]]:
    """`nl.explain(question)`: the trace, a row a step, as `-- nl explain:` shows it."""
    answer, _ = _answer(plpy, "nl.explain", question)
    if answer.error is not None:
        plpy.notice(f"pgnl found no SQL for the question: {answer.error.message}")
    return [row.values() for row in answer.trace]


# The settings the index build changes for its own statements (set_config(..., true), SET
# LOCAL): inside a function they would outlive the call, to the end of the caller's transaction.
_BUILD_SETTINGS = ("row_security", "lock_timeout", "maintenance_work_mem")


def refresh_index(plpy: Plpy, schema: str | None) -> list[tuple[Any, ...]]:
    """`nl.refresh_index(schema)`: what `pgnl index` does, in the caller's transaction, as the
    caller; a row a column (schema, table, column, outcome, values held, why)."""
    schemas = [name.strip() for name in (schema or "").split(",") if name.strip()]
    for name in schemas:
        found = plpy.execute(
            f"SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = {plpy.quote_literal(name)}"  # noqa: S608
        )
        if not found.nrows():
            raise_error(
                plpy,
                AnswerError(
                    INVALID_SCHEMA_NAME,
                    f'schema "{name}" does not exist',
                    hint="Pass the name of a schema (or several, separated by commas), or NULL "
                    "for every schema pgnl indexes.",
                ),
            )
    read_only_now = plpy.execute("SELECT current_setting('transaction_read_only') AS ro")
    if read_only_now[0]["ro"] == "on":
        raise_error(
            plpy,
            AnswerError(
                READ_ONLY_SQL_TRANSACTION,
                "nl.refresh_index writes the value index: it cannot run in a read-only transaction",
                hint="Call it outside the read-only transaction, as the owner of nl.value_index.",
            ),
        )
    saved = {
        name: plpy.execute(f"SELECT current_setting('{name}') AS value")[0]["value"]
        for name in _BUILD_SETTINGS
    }
    _, rows, summary = _serve(plpy, ("refresh", schemas))
    for name, value in saved.items():
        plpy.execute(f"SELECT set_config('{name}', {plpy.quote_literal(value)}, true)")
    plpy.notice(summary)
    return list(rows)
