"""The embedded LLM: a GGUF model served by llama.cpp on a loopback port, for this process.

pgnl talks to every LLM the same way, over the OpenAI chat-completions API
(`proxy.nl2sql.llm.LLMCompleter`); the embedded one is llama-cpp-python's own OpenAI-compatible
server (`python -m llama_cpp.server`), started as a child process on 127.0.0.1 and a free port,
and stopped with its owner. A separate process rather than the library in this one because:
the proxy's event loop and answer threads never share a GIL or an address space with native
inference (a crash in llama.cpp costs the LLM, not the proxy: questions fall back to the sketch
models and plain SQL keeps flowing); the deadline, retry and answer-reading code that serves a
remote endpoint serves this one unchanged; and the server keeps the tokens of its last prompt in
its KV cache, so a prompt that begins as the previous one did (the instructions and the schema
of the same database) is read only from where it differs.

`resolve_provider` says which LLM `[llm]` asks for; `EmbeddedLLM.start` joins the packaged model
if needed (`proxy.llm_model`), launches the server, waits until it answers, and returns the
`LLMSettings` that point a completer at it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from proxy.config import ConfigError, LLMSettings
from proxy.llm_model import (
    ModelInstallError,
    default_data_dir,
    install_model,
    packaged_model,
    parts_installed,
)

log = logging.getLogger(__name__)

PROVIDERS = ("auto", "embedded", "openai", "none")
BUILD_HINT = (
    "pip install 'pgnl[llm]' with "
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF '
    '-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" set (scripts/demo does it)'
)
_POLL_S = 0.25
_LOG_TAIL = 2000


# The server's process, before it runs the module `python -m` would: on Linux it asks to be
# killed when the thread that started it ends (PR_SET_PDEATHSIG), so a pgnl that is killed or
# crashes leaves no orphaned model holding a gigabyte; and it ends at once if that parent is
# already gone. (Start it from a thread that lives as long as the server should: pgnl starts it
# from its answer threads or its main thread.)
_DIE_WITH_PARENT = """\
import ctypes, os, runpy, signal, sys
parent = int(sys.argv.pop(1))
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    sys.exit("pgnl: the process that started this server is gone")
module = sys.argv.pop(1)
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class EmbeddedLLMError(RuntimeError):
    """The embedded LLM could not be started; the message says what to do."""


def llama_cpp_installed() -> bool:
    """Whether llama-cpp-python and its server's dependencies are importable (not imported)."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "uvicorn", "fastapi"))


def embedded_available(settings: LLMSettings) -> bool:
    """Whether the embedded provider can run: llama-cpp-python, and the model file or parts."""
    if not llama_cpp_installed():
        return False
    if settings.model_path:
        return Path(settings.model_path).is_file()
    try:
        return parts_installed(packaged_model(settings.embedded_model))
    except ModelInstallError:
        return False


def resolve_provider(settings: LLMSettings) -> str:
    """`embedded`, `openai` or `none`: what `[llm] provider` asks for, `auto` resolved."""
    provider = settings.provider.strip().lower()
    if provider not in PROVIDERS:
        raise ConfigError(
            f"[llm] provider must be one of {', '.join(PROVIDERS)}, not {settings.provider!r}"
        )
    if provider != "auto":
        return provider
    if settings.base_url:
        return "openai"
    return "embedded" if embedded_available(settings) else "none"


def describe_provider(settings: LLMSettings) -> str:
    """One line for a ready message: which LLM answers, or how to get one."""
    provider = resolve_provider(settings)
    if provider == "openai":
        return f"LLM: {settings.model or '(no model named)'} at {settings.base_url}"
    if provider == "embedded":
        name = settings.model_path or settings.embedded_model
        return f"LLM: {name}, embedded (llama.cpp on this machine's CPU)"
    if settings.provider.strip().lower() == "none":
        return "LLM: none ([llm] provider = none): the sketch models alone"
    return (
        "LLM: none installed, so the sketch models alone answer; for the embedded one: "
        + BUILD_HINT
    )


def model_file(settings: LLMSettings) -> Path:
    """The GGUF file the embedded provider runs: model_path, or the packaged model, joined now
    when it is not yet (with a progress line)."""
    if settings.model_path:
        path = Path(settings.model_path).expanduser()
        if not path.is_file():
            raise EmbeddedLLMError(
                f"[llm] model_path {settings.model_path} is not a file: point it at a GGUF "
                "model, or leave it empty for the packaged embedded_model"
            )
        return path
    model = packaged_model(settings.embedded_model)
    data_dir = Path(settings.data_dir).expanduser() if settings.data_dir else default_data_dir()
    return install_model(model, data_dir)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EmbeddedLLM:
    """llama.cpp's OpenAI-compatible server for `[llm]`, as a child process (see the module
    docstring). Use as a context manager, or `start()` then `stop()`."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.model_path: Path | None = None
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def alias(self) -> str:
        """The model name the server answers to (and the NOTICEs name)."""
        if self.settings.model_path:
            return Path(self.settings.model_path).stem
        return self.settings.embedded_model

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client_settings(self) -> LLMSettings:
        """`[llm]` pointed at this server (base_url and model set)."""
        return dataclasses.replace(self.settings, base_url=self.base_url, model=self.alias)

    def command(self, model_path: Path, port: int) -> list[str]:
        s = self.settings
        threads = s.threads or os.cpu_count() or 1
        return [
            sys.executable,
            "-c",
            _DIE_WITH_PARENT,
            str(os.getpid()),
            "llama_cpp.server",
            "--model",
            str(model_path),
            "--model_alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(s.context_tokens),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--n_gpu_layers",
            str(s.gpu_layers),
        ]

    def start(self) -> LLMSettings:
        """Join the model if needed, start the server and wait until it lists the model;
        returns `client_settings()`. Raises EmbeddedLLMError (or ModelInstallError) saying
        what to do."""
        if not llama_cpp_installed():
            raise EmbeddedLLMError(
                f"[llm] provider embedded needs llama-cpp-python and its server: {BUILD_HINT}; "
                "or set [llm] provider to openai (with base_url) or none"
            )
        self.model_path = model_file(self.settings)
        self.port = _free_port()
        self._log = tempfile.TemporaryFile(prefix="pgnl-llm-")  # noqa: SIM115 (closed by stop)
        started = time.monotonic()
        log.info("starting the embedded LLM %s on 127.0.0.1:%d", self.alias, self.port)
        self._process = subprocess.Popen(
            self.command(self.model_path, self.port),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_until_ready(started + self.settings.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        log.info(
            "embedded LLM %s ready in %.1f s (%s)",
            self.alias,
            time.monotonic() - started,
            self.model_path,
        )
        return self.client_settings()

    def _wait_until_ready(self, deadline: float) -> None:
        url = f"{self.base_url}/models"
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = process.returncode if process is not None else None
                raise EmbeddedLLMError(
                    f"the embedded LLM's server exited (code {code}) before it was ready; its "
                    f"output ends: {self.output_tail()} -- if it crashed in ggml, rebuild "
                    f"llama-cpp-python with portable flags: {BUILD_HINT}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 (loopback)
                    listed = json.load(reply)
                if any(m.get("id") == self.alias for m in listed.get("data", ())):
                    return
            except (OSError, ValueError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise EmbeddedLLMError(
                    f"the embedded LLM did not answer within [llm] start_timeout_s = "
                    f"{self.settings.start_timeout_s:g} s; raise it, or check its output: "
                    f"{self.output_tail()}"
                )
            time.sleep(_POLL_S)

    def output_tail(self) -> str:
        """The last lines the server wrote (for error messages)."""
        if self._log is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._log.flush()
            size = self._log.seek(0, os.SEEK_END)
            self._log.seek(max(0, size - _LOG_TAIL))
            return " ".join(self._log.read().decode(errors="replace").split())
        return ""

    @property
    def pid(self) -> int:
        """The server's process id (0 when it is not running)."""
        return self._process.pid if self._process is not None else 0

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EmbeddedLLM:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
