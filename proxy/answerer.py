"""Where the proxy's questions are answered: the pipeline, in worker threads, off the event loop.

`Answerer` belongs to the `Proxy`: it owns a thread pool ([pipeline] workers threads) and the
pipeline, loaded once per process (at start for `pgnl serve` and `pgnl demo`, else on the first
directive; a load that fails is tried again on the next directive). A session asks it for an
answer (`SessionIO.answer`); the pipeline runs in a worker with an `UpstreamDatabase`, whose
`fetch` hands each query to the event loop (`asyncio.run_coroutine_threadsafe`), where the session
runs it on the client's own upstream connection, and blocks the worker until the rows come back.
The answer, or an `AnswerError` saying why there is none, goes back to the session on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from proxy import metrics
from proxy.config import Settings
from proxy.nl2sql.answer import Answer, AnswerError
from proxy.nl2sql.intent import WRITE_REQUEST
from proxy.upstream import Fetch, FetchResult, UpstreamQueryError, connection_gone

if TYPE_CHECKING:
    from proxy.nl2sql.llm import BlockingLLM
    from proxy.nl2sql.pipeline import Pipeline

log = logging.getLogger(__name__)

MODELS_UNAVAILABLE = "58000"
"""SQLSTATE when the pipeline cannot be loaded (system_error: files missing or unreadable)."""
PIPELINE_FAILED = "XX000"

_GRACE_S = 30.0
"""How much longer than its statement timeout a worker waits for a fetch's rows."""
_POLL_S = 0.5
"""How often a waiting worker checks that the proxy is not stopping."""


class UpstreamDatabase:
    """`Database` over a session's upstream connection, called from a worker thread."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fetch: Fetch,
        default_timeout_s: float,
        stopping: threading.Event | None = None,
    ) -> None:
        self._loop = loop
        self._fetch = fetch
        self._default_timeout_s = default_timeout_s
        self._stopping = stopping or threading.Event()

    def fetch(
        self, query: str, params: Sequence[object] = (), *, timeout_s: float | None = None
    ) -> list[tuple[Any, ...]]:
        timeout = self._default_timeout_s if timeout_s is None else timeout_s

        async def run() -> FetchResult:
            done: asyncio.Future[FetchResult] = self._loop.create_future()

            def finished(result: FetchResult) -> None:
                if not done.done():
                    done.set_result(result)

            self._fetch(query, list(params), timeout, finished)
            return await done

        try:
            future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        except RuntimeError:  # the event loop is closed: the proxy is stopping
            raise connection_gone() from None
        waited = 0.0
        while True:
            try:
                result = future.result(_POLL_S)
                break
            except concurrent.futures.TimeoutError:
                waited += _POLL_S
                if self._stopping.is_set() or waited > timeout + _GRACE_S:
                    future.cancel()
                    raise connection_gone() from None
            except concurrent.futures.CancelledError:
                raise connection_gone() from None
        if isinstance(result, UpstreamQueryError):
            raise result
        return result


def start_llm(settings: Settings) -> BlockingLLM | None:
    """The LLM `[llm]` asks for, started; None for provider none, and when the LLM cannot be
    started (logged with what to do: questions are then answered by the sketch models alone)."""
    from proxy.llm_model import ModelInstallError
    from proxy.llm_server import EmbeddedLLMError
    from proxy.nl2sql.llm import BlockingLLM

    try:
        return BlockingLLM.start(settings.llm)
    except (EmbeddedLLMError, ModelInstallError) as exc:
        log.warning("no LLM: questions are answered by the sketch models alone: %s", exc)
        return None


class Answerer:
    """See the module docstring."""

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.loop = loop
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, settings.pipeline.workers), thread_name_prefix="pgnl-answer"
        )
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._pipeline: Pipeline | None = None
        self._llm: BlockingLLM | None = None
        self.questions = metrics.Questions()

    def preload(self) -> None:
        """Load the pipeline now, in a worker (a failure is logged and tried again later)."""
        self._executor.submit(self._preload)

    def answer(
        self, question: str, fetch: Fetch, done: Callable[[Answer | AnswerError], None]
    ) -> None:
        """Answer `question` in a worker; `done` is called on the event loop."""
        self._executor.submit(self._answer, question, fetch, done)

    def close(self) -> None:
        self._stopping.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._llm is not None:
            self._llm.close()

    # ------------------------------------------------------------ in the workers

    def _load(self) -> Pipeline:
        with self._lock:
            if self._pipeline is None:
                from proxy.nl2sql.pipeline import load_pipeline

                if self._llm is None:
                    self._llm = start_llm(self.settings)
                self._pipeline = load_pipeline(self.settings, self._llm)
                log.info("pipeline loaded")
            return self._pipeline

    def _preload(self) -> None:
        try:
            self._load()
        except Exception as exc:
            log.warning("could not load the pipeline (directives will say why): %s", exc)

    def _answer(
        self, question: str, fetch: Fetch, done: Callable[[Answer | AnswerError], None]
    ) -> None:
        result: Answer | AnswerError
        try:
            pipeline = self._load()
        except Exception as exc:
            log.warning("could not load the pipeline: %s", exc)
            result = AnswerError(
                MODELS_UNAVAILABLE,
                f"pgnl could not load its models: {exc}",
                hint="Check [runtime] models_dir (PGNL_RUNTIME_MODELS_DIR) and that the model "
                "files are there; plain SQL works meanwhile.",
            )
        else:
            timeout = self.settings.pipeline.statement_timeout_s
            db = UpstreamDatabase(self.loop, fetch, timeout, self._stopping)
            try:
                result = pipeline.answer(question, db)
            except UpstreamQueryError as exc:
                result = AnswerError(exc.sqlstate, f"pgnl could not answer: {exc.message}")
            except Exception as exc:
                log.exception("the pipeline failed on a question")
                result = AnswerError(
                    PIPELINE_FAILED,
                    f"pgnl failed while answering: {type(exc).__name__}: {exc}",
                    hint="This is a bug in pgnl; plain SQL works meanwhile. Report it with "
                    "pgnl's log.",
                )
        self._record(result)
        if self._stopping.is_set():
            return
        with contextlib.suppress(RuntimeError):  # the event loop is closed: the proxy is stopping
            self.loop.call_soon_threadsafe(done, result)

    def _record(self, result: Answer | AnswerError) -> None:
        """Count the question's outcome and its stages' times (`metrics`)."""
        if isinstance(result, AnswerError):
            self.questions.record(metrics.ERROR, result.sqlstate, {})
        elif result.error is None:
            self.questions.record(result.outcome, "", result.timings_ms)
        elif result.error.sqlstate == WRITE_REQUEST:
            self.questions.record(metrics.REFUSED, "", result.timings_ms)
        else:
            self.questions.record(metrics.ERROR, result.error.sqlstate, result.timings_ms)
