"""A scripted LLM: a real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions API.

The `llm_server` fixture starts one per test. A test scripts its replies in order with
`llm_server.script(...)`: `Answer(text)` (a string is short for it), `Status(500)` (an error
response, optionally with Retry-After), or `Stall(seconds, then=...)` (read the request, wait,
then reply `then` or drop the connection). Each POST /v1/chat/completions takes the next step;
when the script is spent, the `then` given to `script` answers every further request, and without
one the request gets HTTP 500 and is recorded as unscripted, which fails the test at teardown.
Every request is recorded (`requests`) so that tests can check the prompts and headers.

Stalls end when the server closes (at teardown), so no test waits out a long stall, and closing
joins every handler thread.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Answer:
    """A 200 response whose first choice is `text`, finished for `finish_reason`."""

    text: str
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Status:
    """An error response with OpenAI's error body; `retry_after` sets the Retry-After header."""

    code: int
    message: str = "scripted error"
    retry_after: float | None = None


@dataclass(frozen=True)
class Stall:
    """Read the request, then wait `seconds` (less if the server closes), then reply `then`, or
    close the connection without a reply when `then` is None."""

    seconds: float
    then: Answer | Status | None = None


Step = Answer | Status | Stall


@dataclass(frozen=True)
class Request:
    """One request the server received: method, path, headers (names in lower case), JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body.get("messages", [])
        return messages

    def content(self, role: str) -> str:
        """The contents of the messages of `role`, joined by blank lines."""
        return "\n\n".join(str(m.get("content", "")) for m in self.messages if m["role"] == role)


@dataclass
class ScriptedLLM:
    """The server's state, shared with its handler threads."""

    base_url: str = ""
    requests: list[Request] = field(default_factory=list)
    unscripted: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)
    _steps: list[Step] = field(default_factory=list)
    _then: Step | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *steps: Step | str, then: Step | str | None = None) -> None:
        """Replace the script: reply `steps` in order, then `then` to every further request."""
        with self._lock:
            self._steps = [Answer(s) if isinstance(s, str) else s for s in steps]
            self._then = Answer(then) if isinstance(then, str) else then

    def _next(self, request: Request) -> Step:
        with self._lock:
            self.requests.append(request)
            if self._steps:
                return self._steps.pop(0)
            if self._then is not None:
                return self._then
            self.unscripted.append(request)
            return Status(500, "the test's script has no more replies")

    @property
    def last(self) -> Request:
        assert self.requests, "the LLM server received no request"
        return self.requests[-1]


def _completion(request: Request, answer: Answer, number: int) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content", ""))) for m in request.messages) // 4
    completion = max(1, len(answer.text) // 4)
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.body.get("model", "scripted"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.text, "refusal": None},
                "logprobs": None,
                "finish_reason": answer.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "system_fingerprint": None,
    }


def _error(status: Status) -> dict[str, Any]:
    kind = "server_error" if status.code >= 500 else "invalid_request_error"
    return {"error": {"message": status.message, "type": kind, "param": None, "code": None}}


def _handler(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30  # an idle keep-alive connection (a client that was not closed) ends

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _step(self, request: Request, step: Step) -> None:
            if isinstance(step, Stall):
                llm.closing.wait(step.seconds)
                if step.then is None or llm.closing.is_set():
                    self.close_connection = True
                    return
                step = step.then
            if isinstance(step, Answer):
                self._reply(200, _completion(request, step, len(llm.requests)), {})
            else:
                headers = {}
                if step.retry_after is not None:
                    headers["Retry-After"] = f"{step.retry_after:g}"
                self._reply(step.code, _error(step), headers)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"unreadable": raw.decode(errors="replace")}
            request = Request(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
                at=time.monotonic(),
            )
            if self.path.rstrip("/") != "/v1/chat/completions":
                llm.unscripted.append(request)
                self._reply(404, _error(Status(404, f"no route {self.path}")), {})
                return
            try:
                self._step(request, llm._next(request))
            except OSError:  # the client gave up (a timeout): nothing to reply to
                self.close_connection = True

        def do_GET(self) -> None:
            self._reply(404, _error(Status(404, f"no route {self.path}")), {})

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads
    block_on_close = True

    def __init__(self, llm: ScriptedLLM) -> None:
        super().__init__(("127.0.0.1", 0), _handler(llm))
        self.llm = llm
        self.open: set[socket.socket] = set()
        self.open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.open_lock:
            self.open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.open_lock:
            self.open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.llm.errors.append(traceback.format_exc())

    def hang_up(self) -> None:
        """End every open connection, so that handlers waiting on a client return."""
        with self.open_lock:
            for connection in self.open:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLM]:
    """A scripted OpenAI-compatible server on 127.0.0.1, for one test."""
    llm = ScriptedLLM()
    server = _Server(llm)
    host, port = server.server_address[:2]
    llm.base_url = f"http://{host!s}:{port}/v1"
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="scripted-llm", daemon=True
    )
    thread.start()
    try:
        yield llm
    finally:
        llm.closing.set()
        server.shutdown()
        server.hang_up()
        server.server_close()
        thread.join(10)
    assert not llm.errors, "the scripted LLM server failed:\n" + "\n".join(llm.errors)
    assert not llm.unscripted, (
        f"the scripted LLM server got {len(llm.unscripted)} request(s) beyond its script "
        f"(paths: {[r.path for r in llm.unscripted]})"
    )
