"""The process that answers for one backend's SQL functions: `python -m proxy.pg_functions.worker`.

The pipeline does not run inside the backend: its native libraries (pglast's copy of
PostgreSQL's parser, ONNX Runtime, the tokenizers) would share the backend's address space, and
a crash there restarts the whole server. The backend starts this worker on its first call (with
the Python that ran `pgnl migrate`), and it lives as long as the backend does: the models load
once, and it ends when its stdin closes. Every query of an answer or of an index refresh is sent
back to the backend, which runs it as the caller's role (`remote`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import logging
import os
import signal
import sys
from typing import Any, TextIO, cast

from .channel import ChannelClosed, receive, send
from .remote import RemoteDatabase, RemoteIndexConnection, RemoteQueryError

log = logging.getLogger("pgnl.worker")


def _answer(pipeline: Any, question: str, db: RemoteDatabase) -> tuple[Any, ...]:
    from proxy.rewrite import check_generated

    try:
        answer = pipeline.answer(question, db)
    except RemoteQueryError as exc:
        return ("failed", exc.sqlstate or "XX000", f"pgnl could not answer: {exc}", "")
    except ChannelClosed:
        raise
    except Exception as exc:
        log.exception("the pipeline failed on a question")
        return (
            "failed",
            "XX000",
            f"pgnl failed while answering: {type(exc).__name__}: {exc}",
            "This is a bug in pgnl; report it with the server's log.",
        )
    refused = check_generated(answer.sql) if answer.sql is not None else None
    return ("answered", answer, refused)


class _Notices(io.TextIOBase):
    """A text stream whose lines reach the caller as NOTICEs (the index build's progress)."""

    def __init__(self, db: RemoteDatabase) -> None:
        self.db = db
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if line.strip():
                self.db.notice(line)
        return len(text)

    def isatty(self) -> bool:
        return False


def _names(ref: Any) -> tuple[str, str, str]:
    return (ref.schema, ref.table, ref.column)


def _refresh(
    pipeline: Any, settings: Any, schemas: list[str], db: RemoteDatabase
) -> tuple[Any, ...]:
    """`nl.refresh_index`: build or refresh the value index; a row a column, and the summary."""
    import psycopg

    from proxy.runtime import load_embedder
    from proxy.valueindex import ValueIndexError, build_index

    conn = RemoteIndexConnection(db)
    try:
        embedder = pipeline.embedder or load_embedder(settings.runtime)
        report = build_index(
            conn,
            embedder,
            settings.index,
            progress=cast(TextIO, _Notices(db)),
            only_schemas=schemas,
        )
        counts = {
            (s, t, c): int(n)
            for s, t, c, n in conn.rows(
                "SELECT schema_name, table_name, column_name, value_count "
                "FROM nl.value_index_columns"
            )
        }
    except ValueIndexError as exc:
        return ("failed", exc.sqlstate, str(exc), "")
    except psycopg.Error as exc:
        return ("failed", exc.sqlstate or "XX000", f"pgnl could not refresh the index: {exc}", "")
    except ChannelClosed:
        raise
    except Exception as exc:
        log.exception("the index refresh failed")
        return (
            "failed",
            "XX000",
            f"pgnl failed while refreshing the index: {type(exc).__name__}: {exc}",
            "This is a bug in pgnl; report it with the server's log.",
        )
    rows: list[tuple[Any, ...]] = []
    for outcome, refs in (
        ("added", report.added),
        ("changed", report.changed),
        ("unchanged", report.unchanged),
    ):
        rows += [(*_names(ref), outcome, counts.get(_names(ref)), None) for ref in refs]
    for outcome, reasons in (("removed", report.removed), ("skipped", report.skipped)):
        rows += [(*_names(ref), outcome, None, why) for ref, why in reasons.items()]
    rows.sort(key=lambda row: row[:3])
    return ("refreshed", rows, report.summary().split("\n")[0])


def _die_with_parent() -> None:
    """Be killed when the backend ends (Linux PR_SET_PDEATHSIG); end now if it is gone."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if parent == 1:
        sys.exit("pgnl worker: the backend that started it is gone")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proxy.pg_functions.worker")
    parser.add_argument("--config", default="", help="the TOML settings file (default: none)")
    args = parser.parse_args(argv)
    _die_with_parent()
    # The channel keeps stdout's pipe; anything a library prints goes to stderr (the server log).
    db = RemoteDatabase(0, os.dup(1))
    os.dup2(2, 1)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="pgnl worker: %(levelname)s %(message)s"
    )
    from proxy import config
    from proxy.answerer import start_llm
    from proxy.llm_server import resolve_provider
    from proxy.nl2sql.pipeline import load_pipeline

    llm = None
    try:
        settings = config.load(args.config or None)
        if resolve_provider(settings.llm) == "openai":
            llm = start_llm(settings)
        pipeline = load_pipeline(settings, llm)
    except Exception as exc:
        send(db.writing, ("failed", "58000", f"pgnl could not load its models: {exc}", ""))
        return 1
    import proxy

    where = f"pgnl from {proxy.__path__[0]}, Python {sys.version.split()[0]} ({sys.executable})"
    send(db.writing, ("ready", where))
    try:
        while True:
            message = receive(db.reading)
            if message[0] == "answer":
                send(db.writing, _answer(pipeline, message[1], db))
            elif message[0] == "refresh":
                send(db.writing, _refresh(pipeline, settings, message[1], db))
            else:
                raise ValueError(f"the worker was sent {message[0]!r}, not a request")
    except ChannelClosed:
        return 0
    finally:
        if llm is not None:
            llm.close()


if __name__ == "__main__":
    sys.exit(main())
