"""SQL from an LLM: an OpenAI-compatible chat-completions client and a strict reader of its answer.

`LLMCompleter.complete` sends prompt messages (`proxy.nl2sql.prompts`) to the endpoint of
`[llm]`, retrying timeouts, connection errors, HTTP 429 and 5xx with exponential backoff, all
within one deadline (`[llm] deadline_s`): it returns, or raises `LLMUnavailable`, by then, so a
client waiting on a question is never left hanging on a slow model. Other HTTP errors (400, 401,
404, ...) are not retried: they say something is wrong with the configuration, and the error says
what to check. The API key is read from the environment variable PGNL_LLM_API_KEY, never from a
file.

`extract_sql` takes the model's text apart with PostgreSQL's own parser (pglast): code fences,
prose before and after the SQL, several statements. It returns the first read-only query, and
refuses the whole answer (`LLMAnswerError`) when any statement in it is not one — a `SELECT 1;
DROP TABLE x` answer gives nothing, not the `SELECT`: a model that writes a `DROP TABLE` beside
its query has been steered by something (a question, a value in the data), and its query is not
to be trusted either. This check is one layer: the pipeline still runs what it gets in a READ
ONLY transaction with a statement timeout, as the client's own role.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pglast import ast, parse_sql
from pglast.enums import SetOperation, TransactionStmtKind
from pglast.parser import ParseError, scan

from proxy import metrics
from proxy.config import ConfigError, LLMSettings
from proxy.nl2sql.calibrate import function_name
from proxy.nl2sql.prompts import Message

if TYPE_CHECKING:
    from proxy.llm_server import EmbeddedLLM

log = logging.getLogger(__name__)

API_KEY_VARIABLE = "PGNL_LLM_API_KEY"
"""The environment variable the API key is read from (the only place it is read from)."""
PLACEHOLDER_KEY = "no-key"
"""Sent when PGNL_LLM_API_KEY is unset: servers without authentication ignore it, the others
answer 401, which `LLMUnavailable` turns into "set PGNL_LLM_API_KEY"."""
BACKOFF_S = 0.5
"""Wait before the first retry; doubled for each further one, with jitter (x0.5 to x1)."""
MAX_BACKOFF_S = 8.0
MAX_ANSWER_CHARS = 100_000
"""Only this much of an answer is read (max_tokens keeps real answers far shorter)."""
MAX_PARSES = 2000
"""Parse attempts `extract_sql` may make on one answer."""


@dataclass(frozen=True)
class Completion:
    """The LLM's query, and the tokens its request cost (prompt and completion, as the server
    counted them; 0 where it did not say)."""

    sql: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class LLMError(Exception):
    """The LLM gave no usable SQL; the pipeline answers without it."""


class LLMUnavailable(LLMError):
    """No answer from the LLM: it is down, slow, refuses the request, or the deadline passed.
    `reason` says which, and what to check."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class LLMAnswerError(LLMError):
    """The LLM answered, but with no read-only query in its answer (or with a statement that is
    not one). `answer` is the text it sent (its first 2000 characters)."""

    def __init__(self, reason: str, answer: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.answer = answer[:2000]


# ---------------------------------------------------------------- reading an answer

_THINKING = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.DOTALL | re.IGNORECASE)
# A Markdown fence line: ``` or ~~~, an optional info string (```sql), nothing else.
_FENCE = re.compile(r"^[ \t]*(?:```|~~~)[ \t]*[\w+.-]*[ \t]*$", re.MULTILINE)
# Where a statement may start: the start of a line, or after `;` or `:` (as in "Query: SELECT"),
# before a letter, `(` or a comment; past a language name left by a one-line fence
# (```sql SELECT 1```).
_START = re.compile(
    r"(?:^|(?<=[;:]))[ \t]*(?:(?i:sql|postgres|postgresql|pgsql)[ \t]+)?(?=[A-Za-z(]|/\*|--)",
    re.MULTILINE,
)
_INLINE_CODE = re.compile(r"`+")

_ALLOWED_TRANSACTION = frozenset(
    {
        TransactionStmtKind.TRANS_STMT_BEGIN,
        TransactionStmtKind.TRANS_STMT_START,
        TransactionStmtKind.TRANS_STMT_COMMIT,
        TransactionStmtKind.TRANS_STMT_ROLLBACK,
    }
)

_WRITING_NODES: tuple[type[ast.Node], ...] = (
    ast.InsertStmt,
    ast.UpdateStmt,
    ast.DeleteStmt,
    ast.MergeStmt,
)

# Functions with effects beyond the query's result (or that run SQL given as text, out of the
# parser's sight), refused by name whatever their schema. A READ ONLY transaction stops writes to
# tables but not these: signalling backends, reading server files, advisory locks, settings.
_SIDE_EFFECT_FUNCTIONS = frozenset(
    {
        "set_config",
        "nextval",
        "setval",
        "txid_current",
        "pg_current_xact_id",
        "pg_notify",
        "pg_stat_file",
        "pg_switch_wal",
        "pg_promote",
        "pg_import_system_collations",
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
    }
)
_SIDE_EFFECT_PREFIXES = (
    "pg_advisory",
    "pg_try_advisory",
    "pg_terminate",
    "pg_cancel",
    "pg_reload",
    "pg_rotate",
    "pg_read",
    "pg_ls_",
    "pg_sleep",
    "pg_create",
    "pg_drop",
    "pg_replication",
    "pg_logical",
    "pg_backup",
    "pg_start_backup",
    "pg_stop_backup",
    "pg_log_",
    "pg_file_",
    "pg_stat_reset",
    "pg_wal_replay",
    "lo_",
    "dblink",
)

_STATEMENT_NAMES = {
    "CreateStmt": "CREATE TABLE",
    "VariableSetStmt": "SET",
    "VariableShowStmt": "SHOW",
    "VacuumStmt": "VACUUM or ANALYZE",
    "CreatedbStmt": "CREATE DATABASE",
    "DropdbStmt": "DROP DATABASE",
    "DoStmt": "DO",
    "ExplainStmt": "EXPLAIN",
}


def _statement_name(node: ast.Node) -> str:
    kind = type(node).__name__
    if kind in _STATEMENT_NAMES:
        return _STATEMENT_NAMES[kind]
    words = re.findall(r"[A-Z][a-z]*", kind.removesuffix("Stmt"))
    return " ".join(words).upper() or kind


def _walk(node: object) -> Iterator[ast.Node]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple | list):
            stack.extend(reversed(item))
        elif isinstance(item, ast.Node):
            yield item
            stack.extend(getattr(item, name) for name in reversed(list(item)))


def _has_side_effects(function: str) -> bool:
    return function in _SIDE_EFFECT_FUNCTIONS or function.startswith(_SIDE_EFFECT_PREFIXES)


def read_only_problem(statement: ast.Node) -> str | None:
    """Why `statement` (a parsed statement, `RawStmt.stmt`) is not a read-only query, or None.

    A read-only query is a SELECT (or WITH ... SELECT, VALUES, TABLE) with no INSERT, UPDATE,
    DELETE or MERGE anywhere in it (a data-modifying WITH), no SELECT ... INTO, no FOR
    UPDATE/SHARE, and no call of a function known to act beyond its result (set_config,
    nextval, pg_terminate_backend, pg_read_file, lo_export, dblink, pg_sleep, ...).
    """
    if not isinstance(statement, ast.SelectStmt):
        return f"a {_statement_name(statement)} statement"
    for node in _walk(statement):
        if isinstance(node, _WRITING_NODES):
            return f"a data-modifying {_statement_name(node)} inside the query"
        if isinstance(node, ast.SelectStmt):
            if node.intoClause is not None:
                return "SELECT ... INTO, which creates a table"
            if node.lockingClause:
                return "FOR UPDATE or FOR SHARE, which locks rows"
        if isinstance(node, ast.FuncCall):
            function = function_name(node)
            if _has_side_effects(function):
                return f"a call of {function}(), which acts beyond returning rows"
    return None


@dataclass(frozen=True)
class FoundStatement:
    """A statement found in an answer: its text (no surrounding comments, no `;`), whether it
    stood in a fenced code block, where it ends in the answer (after thinking is removed), and
    why it is not a read-only query (None when it is one; "" for what is ignored: BEGIN, COMMIT,
    ROLLBACK, and a SELECT of no columns)."""

    sql: str
    fenced: bool
    end: int
    problem: str | None


def _segments(text: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, inside a fence) of the parts of `text` between fence lines and backticks;
    no statement crosses from one part to another."""
    position = 0
    fenced = False
    for fence in _FENCE.finditer(text):
        yield from _unticked(text, position, fence.start(), fenced)
        fenced = not fenced
        position = fence.end()
    yield from _unticked(text, position, len(text), fenced)


def _unticked(text: str, start: int, end: int, fenced: bool) -> Iterator[tuple[int, int, bool]]:
    for tick in _INLINE_CODE.finditer(text, start, end):
        yield start, tick.start(), fenced
        start = tick.end()
    yield start, end, fenced


def _trimmed(text: str) -> tuple[int, int]:
    """The span of `text` from its first to its last token that is not a comment."""
    tokens = [t for t in scan(text) if t.name not in ("SQL_COMMENT", "C_COMMENT")]
    if not tokens:
        return (0, 0)
    return (tokens[0].start, tokens[-1].end + 1)


def _classify(statement: ast.Node) -> str | None:
    if isinstance(statement, ast.TransactionStmt) and statement.kind in _ALLOWED_TRANSACTION:
        return ""
    if (
        isinstance(statement, ast.SelectStmt)
        and statement.op == SetOperation.SETOP_NONE
        and not statement.targetList
        and not statement.valuesLists
    ):
        return ""  # `SELECT` alone, or `SELECT FROM t`: no columns (a word of prose, "Select")
    return read_only_problem(statement)


def find_statements(text: str) -> list[FoundStatement]:
    """Every SQL statement in `text` (an LLM's answer, thinking blocks removed), in order.

    A statement starts at the start of a line, or after `;` or `:`, and runs to the end of a
    line, a `;`, or the end of its part of the text (parts are separated by fence lines and
    backticks); from each start the longest stretch that PostgreSQL parses is taken, so prose
    after the SQL is left out. Prose that does not parse is skipped.
    """
    found: list[FoundStatement] = []
    parses = 0
    for begin, finish, fenced in _segments(text):
        part = text[begin:finish]
        ends = sorted(
            {len(part)}
            | {i + 1 for i, c in enumerate(part) if c == ";"}
            | {i for i, c in enumerate(part) if c == "\n"},
            reverse=True,
        )
        consumed = 0
        for start in (m.end() for m in _START.finditer(part)):
            if start < consumed:
                continue
            limit = len(part)
            for end in ends:
                if end <= start:
                    break
                if end > limit:
                    continue
                if parses >= MAX_PARSES:
                    return found
                parses += 1
                try:
                    statements = parse_sql(part[start:end])
                except ParseError as exc:
                    location = exc.args[1] if len(exc.args) > 1 else None
                    if not isinstance(location, int) or location <= 0:
                        break
                    limit = start + location
                    continue
                piece = part[start:end]
                for raw in statements:
                    location = raw.stmt_location or 0
                    stop = location + raw.stmt_len if raw.stmt_len else len(piece)
                    statement_text = piece[location:stop]
                    first, last = _trimmed(statement_text)
                    if raw.stmt is None or first == last:
                        continue
                    found.append(
                        FoundStatement(
                            sql=statement_text[first:last],
                            fenced=fenced,
                            end=begin + start + location + last,
                            problem=_classify(raw.stmt),
                        )
                    )
                consumed = end
                break
    return found


def extract_sql(text: str, *, truncated: bool = False) -> str:
    """The read-only query in an LLM's answer, as PostgreSQL will read it.

    Reads SQL in code fences (```sql ... ```) or bare, with prose before and after it, and
    thinking blocks (<think>...</think>) removed. Of several statements, the first read-only
    query (SELECT, WITH ... SELECT, VALUES) is taken, one from a code fence before any outside
    fences. BEGIN/COMMIT/ROLLBACK around it are ignored. `truncated`: the answer was cut short
    (the model hit max_tokens), so a statement that runs to the very end of it may be incomplete
    and is refused.

    Raises LLMAnswerError when there is no query, or when any statement in the answer is not a
    read-only query (INSERT, UPDATE, DELETE, MERGE, DDL, COPY, SET, a data-modifying WITH,
    SELECT ... INTO, FOR UPDATE, functions acting beyond their result): the whole answer is
    refused then, not only that statement.
    """
    cleaned = _THINKING.sub("", text[:MAX_ANSWER_CHARS])
    found = find_statements(cleaned)
    for statement in found:
        if statement.problem:
            raise LLMAnswerError(
                f"the LLM's answer is refused as a whole: it holds {statement.problem}, and "
                "pgnl runs only read-only queries",
                text,
            )
    queries = [s for s in found if s.problem is None]
    if not queries:
        raise LLMAnswerError("the LLM's answer holds no SQL query", text)
    chosen = next((s for s in queries if s.fenced), queries[0])
    if truncated and chosen.end >= len(cleaned.rstrip()):
        raise LLMAnswerError(
            "the LLM's answer was cut at [llm] max_tokens before its query was complete; "
            "raise max_tokens",
            text,
        )
    return chosen.sql


# ---------------------------------------------------------------- talking to the LLM


def api_key_from_environment(environ: Mapping[str, str] | None = None) -> str:
    """The API key: $PGNL_LLM_API_KEY ("" when unset). OPENAI_API_KEY is not read."""
    env = os.environ if environ is None else environ
    return env.get(API_KEY_VARIABLE, "")


def _openai_message(message: Message) -> ChatCompletionMessageParam:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    if message.role == "assistant":
        return {"role": "assistant", "content": message.content}
    return {"role": "user", "content": message.content}


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """The server's Retry-After, in seconds, when it gives one as a number."""
    value = exc.response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own error message (OpenAI's `{"error": {"message": ...}}`), else the
    client's."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return exc.message


def _refusal(status: int, message: str) -> str:
    """What a non-retryable HTTP status means for the configuration."""
    advice = {
        401: f"check the API key in {API_KEY_VARIABLE}",
        403: f"check the API key in {API_KEY_VARIABLE} and its access to [llm] model",
        404: "check [llm] base_url (it usually ends in /v1) and [llm] model",
    }.get(status, "check [llm] model, max_tokens and temperature against what the server accepts")
    detail = " ".join(message.split())[:300]
    return f"HTTP {status} ({detail}): {advice}"


class LLMCompleter:
    """SQL from an OpenAI-compatible chat-completions endpoint, within a deadline.

    One per proxy (it holds a connection pool); use it from one event loop, and close it with
    `aclose()` or `async with`. `backoff_s` is the wait before the first retry (tests shorten
    it).
    """

    def __init__(
        self,
        settings: LLMSettings,
        *,
        environ: Mapping[str, str] | None = None,
        backoff_s: float = BACKOFF_S,
        concurrency: int = 0,
    ) -> None:
        if not settings.base_url:
            raise ConfigError("[llm] base_url is empty: set it to use an LLM")
        if not settings.model:
            raise ConfigError(
                "[llm] model is empty: set it to the name of a model the server at "
                f"{settings.base_url} serves"
            )
        if settings.timeout_s <= 0 or settings.deadline_s <= 0:
            raise ConfigError("[llm] timeout_s and deadline_s must be more than 0")
        if settings.max_retries < 0:
            raise ConfigError("[llm] max_retries must be 0 or more")
        self.settings = settings
        self.backoff_s = backoff_s
        self._slots = asyncio.Semaphore(concurrency) if concurrency > 0 else None
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=api_key_from_environment(environ) or PLACEHOLDER_KEY,
            timeout=settings.timeout_s,
            max_retries=0,
        )

    @classmethod
    def from_settings(
        cls, settings: LLMSettings, environ: Mapping[str, str] | None = None
    ) -> LLMCompleter | None:
        """A completer for `[llm]`, or None when no LLM is configured (base_url empty)."""
        return cls(settings, environ=environ) if settings.base_url else None

    async def aclose(self) -> None:
        """Close the connections to the server."""
        await self._client.close()

    async def __aenter__(self) -> LLMCompleter:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def complete(self, messages: Sequence[Message]) -> str:
        """The read-only query of `completion(messages)`."""
        return (await self.completion(messages)).sql

    async def completion(self, messages: Sequence[Message]) -> Completion:
        """The read-only query the LLM answers `messages` with (see `extract_sql`).

        Raises LLMUnavailable when no answer came within [llm] deadline_s (after up to
        max_retries retries of timeouts, connection errors, HTTP 429 and 5xx) or the server
        refused the request; LLMAnswerError when the answer holds no read-only query.
        """
        text, truncated, usage = await self.answer(messages)
        return Completion(extract_sql(text, truncated=truncated), *usage)

    async def answer(self, messages: Sequence[Message]) -> tuple[str, bool, tuple[int, int]]:
        """The LLM's raw text for `messages`, whether it was cut at max_tokens, and the prompt
        and completion tokens the server counted (0 where it does not say); retried and bounded
        by the deadline as `complete` says. With `concurrency`, at most that many requests are
        in flight from this completer, and the wait for one counts against the deadline."""
        settings = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.deadline_s
        if self._slots is None:
            return await self._counted(messages, deadline)
        queue = metrics.LLM
        queue.waiting += 1  # pgnl_llm_queue_depth (this loop alone moves it)
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            raise LLMUnavailable(
                f"the LLM ({settings.model}) was busy with other questions for all of [llm] "
                f"deadline_s = {settings.deadline_s:g} s: raise deadline_s, or serve the model "
                "where it answers several at once (provider openai)"
            ) from None
        finally:
            queue.waiting -= 1
        try:
            return await self._counted(messages, deadline)
        finally:
            self._slots.release()

    async def _counted(
        self, messages: Sequence[Message], deadline: float
    ) -> tuple[str, bool, tuple[int, int]]:
        queue = metrics.LLM
        queue.in_flight += 1  # pgnl_llm_requests_in_flight
        try:
            return await self._answer(messages, deadline)
        finally:
            queue.in_flight -= 1

    async def _answer(
        self, messages: Sequence[Message], deadline: float
    ) -> tuple[str, bool, tuple[int, int]]:
        settings = self.settings
        loop = asyncio.get_running_loop()
        payload = [_openai_message(m) for m in messages]
        failures: list[str] = []
        attempt = 0
        while True:
            remaining = deadline - loop.time()
            budget = min(settings.timeout_s, remaining)
            retry_after: float | None = None
            try:
                if budget <= 0:
                    raise TimeoutError
                async with asyncio.timeout(budget):
                    completion = await self._client.chat.completions.create(
                        model=settings.model,
                        messages=payload,
                        temperature=settings.temperature,
                        max_tokens=settings.max_tokens,
                        timeout=budget,
                    )
            except (TimeoutError, openai.APITimeoutError):
                failures.append(f"no answer within {max(budget, 0):.3g} s")
            except openai.APIConnectionError as exc:
                failures.append(f"connection failed ({exc})")
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status != 429 and status < 500:
                    raise LLMUnavailable(
                        f"the LLM at {settings.base_url} refused the request: "
                        + _refusal(status, _server_message(exc))
                    ) from None
                failures.append(f"HTTP {status}")
                retry_after = _retry_after(exc)
            except openai.OpenAIError as exc:
                raise LLMUnavailable(
                    f"the LLM at {settings.base_url} sent an answer pgnl cannot read ({exc}): "
                    "check that [llm] base_url is an OpenAI-compatible endpoint"
                ) from None
            else:
                return _answer_text(completion)
            attempt += 1
            wait = self.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
            wait = max(min(wait, MAX_BACKOFF_S), retry_after or 0.0)
            remaining = deadline - loop.time()
            if attempt > settings.max_retries or wait >= remaining:
                raise LLMUnavailable(
                    f"the LLM at {settings.base_url} gave no answer in {attempt} attempt(s) "
                    f"within {settings.deadline_s:g} s ({'; '.join(failures)}): check that it "
                    "is up and reachable, or raise [llm] timeout_s, deadline_s or max_retries"
                )
            log.info("LLM attempt %d failed (%s); retrying in %.2f s", attempt, failures[-1], wait)
            await asyncio.sleep(wait)


def _answer_text(completion: ChatCompletion) -> tuple[str, bool, tuple[int, int]]:
    """The text of the first choice, whether it was cut at max_tokens, and the tokens used."""
    if not completion.choices:
        raise LLMAnswerError("the LLM answered with no choices")
    choice = completion.choices[0]
    text = choice.message.content
    if not text:
        refusal = getattr(choice.message, "refusal", None)
        raise LLMAnswerError(
            f"the LLM refused to answer: {refusal}" if refusal else "the LLM answered with no text"
        )
    usage = completion.usage
    tokens = (usage.prompt_tokens, usage.completion_tokens) if usage is not None else (0, 0)
    return text, choice.finish_reason == "length", tokens


class BlockingLLM:
    """An `LLMCompleter` called from worker threads: each call runs on the event loop that owns
    the completer and blocks the calling thread until it returns (never call it on that loop).

    `BlockingLLM.start(settings)` starts the LLM `[llm]` asks for (`[llm] provider`: the embedded
    model's server, `proxy.llm_server.EmbeddedLLM`, which answers one request at a time, so this
    process queues its requests; or a remote endpoint) with a loop of its own in a daemon thread;
    `close()` stops both. The wait is bounded by the completer's deadline, so a stalled LLM
    cannot hold a thread for longer.
    """

    def __init__(self, completer: LLMCompleter, loop: asyncio.AbstractEventLoop) -> None:
        self.completer = completer
        self.loop = loop
        self._thread: threading.Thread | None = None
        self.embedded: EmbeddedLLM | None = None

    @classmethod
    def start(
        cls, settings: LLMSettings, environ: Mapping[str, str] | None = None
    ) -> BlockingLLM | None:
        """The LLM of `[llm]` on a loop thread of its own; None when provider resolves to none.

        Raises ConfigError for provider openai without base_url, and EmbeddedLLMError or
        ModelInstallError when the embedded model cannot start (the messages say what to do).
        """
        from proxy.llm_server import EmbeddedLLM, resolve_provider

        provider = resolve_provider(settings)
        if provider == "none":
            return None
        embedded: EmbeddedLLM | None = None
        concurrency = 0
        if provider == "embedded":
            embedded = EmbeddedLLM(settings)
            settings = embedded.start()
            concurrency = 1
        elif not settings.base_url:
            raise ConfigError(
                "[llm] provider is openai but base_url is empty: set base_url to the endpoint "
                "(it usually ends in /v1), or set provider to embedded or none"
            )
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="pgnl-llm", daemon=True)
        thread.start()

        async def make() -> LLMCompleter:
            return LLMCompleter(settings, environ=environ, concurrency=concurrency)

        try:
            completer = asyncio.run_coroutine_threadsafe(make(), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            if embedded is not None:
                embedded.stop()
            raise
        bridge = cls(completer, loop)
        bridge._thread = thread
        bridge.embedded = embedded
        return bridge

    @property
    def model(self) -> str:
        return self.completer.settings.model

    def complete(self, messages: Sequence[Message]) -> Completion:
        """`LLMCompleter.completion`, from a thread that is not the loop's."""
        future = asyncio.run_coroutine_threadsafe(self.completer.completion(messages), self.loop)
        return future.result(self.completer.settings.deadline_s + 5)

    def text(self, messages: Sequence[Message]) -> str:
        """The LLM's raw answer to `messages` (`LLMCompleter.answer`: not read as SQL), from a
        thread that is not the loop's."""
        future = asyncio.run_coroutine_threadsafe(self.completer.answer(messages), self.loop)
        return future.result(self.completer.settings.deadline_s + 5)[0]

    def close(self) -> None:
        """Close the completer; stop the loop when it is this bridge's own."""
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.completer.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self._thread = None
        self.loop.close()
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
