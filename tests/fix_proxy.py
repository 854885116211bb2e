"""pgnl itself, run as a real `pgnl serve` subprocess in front of the test PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fix_pg import ROLES, TEST_DB, Postgres


@dataclass
class RunningProxy:
    process: subprocess.Popen[str]
    host: str
    port: int
    log: list[str] = field(default_factory=list)
    drain: threading.Thread | None = None

    def dsn(
        self,
        user: str = "postgres",
        password: str | None = None,
        dbname: str = TEST_DB,
        **params: str,
    ) -> str:
        if password is None:
            password = "pgnl" if user == "postgres" else ROLES[user][0]
        auth = f"{user}:{password}@" if password else f"{user}@"
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{auth}{self.host}:{self.port}/{dbname}" + (
            f"?{query}" if query else ""
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def internal_errors(self) -> list[str]:
        """Log lines that mean the proxy itself failed (a bug), as opposed to a client's."""
        return [line for line in self.log if "Traceback" in line or " ERROR " in line]

    def stop(self) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.drain is not None:
            self.drain.join(5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return self.process.returncode


def run_pgnl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the `pgnl` command (as `python -m proxy`) to completion, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_proxy(upstream_port: int, *extra: str, env: dict[str, str] | None = None) -> RunningProxy:
    """Start `pgnl serve` on a free port and wait for its `listening:` line."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "--log-level",
            "info",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            f"postgresql://127.0.0.1:{upstream_port}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline()
    if not line.startswith("listening: "):
        process.kill()
        raise RuntimeError(f"pgnl serve did not start: {line!r} {process.stderr.read()}")
    host, _, port = line.removeprefix("listening: ").strip().rpartition(":")
    running = RunningProxy(process, host, int(port))

    def drain(stream: object) -> None:
        for text in stream:  # type: ignore[attr-defined]
            running.log.append(text)

    running.drain = threading.Thread(target=drain, args=(process.stderr,), daemon=True)
    running.drain.start()
    return running


@pytest.fixture(scope="session")
def proxy(postgres: Postgres) -> Iterator[RunningProxy]:
    running = start_proxy(postgres.port)
    yield running
    running.stop()


@pytest.fixture
def proxy_stays_healthy(proxy: RunningProxy) -> Iterator[None]:
    """The shared proxy is alive after the test and logged no internal error during it."""
    before = len(proxy.internal_errors())
    yield
    assert proxy.alive()
    assert proxy.internal_errors()[before:] == []


@pytest.fixture
def make_proxy(postgres: Postgres) -> Iterator[Callable[..., RunningProxy]]:
    """A factory for proxies of a test's own (other flags, other upstreams)."""
    started: list[RunningProxy] = []

    def make(
        *extra: str, upstream_port: int | None = None, env: dict[str, str] | None = None
    ) -> RunningProxy:
        running = start_proxy(upstream_port or postgres.port, *extra, env=env)
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop()


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pgnl-scratch-") as name:
        yield Path(name)
