"""Which LLM `[llm]` asks for, and the embedded server's failures: each a clear error that says
what to do. (The real model answering is tests/integration/test_embedded_llm.py.)"""

from __future__ import annotations

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
