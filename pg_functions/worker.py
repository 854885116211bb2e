"""The process that answers for one backend's SQL functions: `python -m proxy.pg_functions.worker`.

The pipeline does not run inside the backend: its native libraries (pglast's copy of
PostgreSQL's parser, ONNX Runtime, the tokenizers) would share the backend's address space, and
a crash there restarts the whole server. The backend starts this worker on its first call (with
the Python that ran `pgnl migrate`), and it lives as long as the backend does: the models load
once, and it ends when its stdin closes. Every query of an answer is sent back to the backend,
which runs it as the caller's role (`RemoteDatabase`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from .channel import ChannelClosed, receive, send

log = logging.getLogger("pgnl.worker")


class RemoteQueryError(Exception):
    """A query the backend ran for the worker failed; it carries the database's SQLSTATE."""

    def __init__(self, sqlstate: str | None, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class RemoteDatabase:
    """`Database` whose queries the backend runs (see the module docstring), over the channel's
    two file descriptors."""

    def __init__(self, reading: int, writing: int) -> None:
        self.reading = reading
        self.writing = writing

    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        send(self.writing, ("fetch", query, list(params)))
        reply = receive(self.reading)
        if reply[0] == "rows":
            rows: list[tuple[Any, ...]] = reply[1]
            return rows
        raise RemoteQueryError(reply[1], reply[2])


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
            if message[0] != "answer":
                raise ValueError(f"the worker was sent {message[0]!r}, not a question")
            send(db.writing, _answer(pipeline, message[1], db))
    except ChannelClosed:
        return 0
    finally:
        if llm is not None:
            llm.close()


if __name__ == "__main__":
    sys.exit(main())
