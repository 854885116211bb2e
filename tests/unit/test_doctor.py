"""`pgnl doctor`'s checks that need no database: the report's lines and exit status, the
OpenAI-compatible endpoint (GET /v1/models, against a real HTTP server), the embedded model's
file and hash (a small stand-in model), and the timed completion (the scripted LLM)."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from proxy import doctor, llm_model, llm_server
from proxy.config import LLMSettings, Settings
from proxy.doctor import FAIL, OK, WARN, Check
from tests.fix_llm import ScriptedLLM
from tests.fix_pg import free_port


def test_a_line_says_what_to_do_only_when_not_ok() -> None:
    assert (
        Check("server", OK, "PostgreSQL 18.1", "nothing").line() == "ok   server: PostgreSQL 18.1"
    )
    assert (
        Check("migrations", FAIL, "none applied", "run pgnl migrate").line()
        == "FAIL migrations: none applied; next: run pgnl migrate"
    )


def test_without_a_dsn_the_database_is_a_warning_and_the_rest_is_checked() -> None:
    settings = Settings()
    settings.llm.provider = "none"
    out = io.StringIO()
    assert doctor.run(settings, None, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("WARN database: not checked: no --dsn given; next: pgnl doctor")
    for model in ("aligner", "sketch", "value_embedder"):
        assert any(line.startswith(f"ok   model {model}: model.onnx ") for line in lines)
    assert "ok   llm: none ([llm] provider = none)" in out.getvalue()
    assert lines[-1].endswith(" ok, 1 WARN, 0 FAIL")


def test_a_damaged_model_file_fails_with_what_to_do(tmp_path: Path) -> None:
    shipped = Path(doctor.__file__).parent / "models"
    manifest = json.loads((shipped / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    for name, entry in manifest["models"].items():
        folder = tmp_path / entry.get("folder", name)
        folder.mkdir()
        for file in entry["files"]:
            (folder / file).write_bytes((shipped / entry.get("folder", name) / file).read_bytes())
    (tmp_path / "sketch" / "tokenizer.json").write_text("{}")
    settings = Settings()
    settings.runtime.models_dir = str(tmp_path)
    settings.llm.provider = "none"
    out = io.StringIO()
    assert doctor.run(settings, None, out=out) == 1
    failed = [line for line in out.getvalue().splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1
    assert failed[0].startswith("FAIL model sketch: model file ")
    assert "does not match manifest.json" in failed[0]
    assert "; next: Fix the folder" in failed[0]


class _Models(BaseHTTPRequestHandler):
    status = 200
    listed: tuple[str, ...] = ("coder-7b", "other")
    seen: list[dict[str, str]] = []  # noqa: RUF012 (one test at a time)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append({"path": self.path, **dict(self.headers.items())})
        body = json.dumps({"object": "list", "data": [{"id": m} for m in self.listed]}).encode()
        self.send_response(self.status if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def models_server() -> Iterator[tuple[str, type[_Models]]]:
    handler = type("Models", (_Models,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _openai(base_url: str, model: str = "coder-7b") -> LLMSettings:
    return LLMSettings(provider="openai", base_url=base_url, model=model)


def test_an_endpoint_that_lists_the_model_is_ok(
    models_server: tuple[str, type[_Models]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = models_server
    monkeypatch.setenv("PGNL_LLM_API_KEY", "sk-test")
    (check,) = doctor.llm_checks(_openai(url))
    assert (check.status, check.summary) == (OK, f"openai at {url} answers and serves coder-7b")
    assert handler.seen[0]["path"] == "/v1/models"
    assert handler.seen[0]["Authorization"] == "Bearer sk-test"
    (check,) = doctor.llm_checks(_openai(url, "gpt-x"))
    assert check.status == WARN and "does not list gpt-x (it lists coder-7b, other)" in check.line()


def test_an_endpoint_that_refuses_the_key_or_is_not_there_fails(
    models_server: tuple[str, type[_Models]],
) -> None:
    url, handler = models_server
    handler.status = 401
    (check,) = doctor.llm_checks(_openai(url))
    assert check.status == FAIL and "HTTP 401" in check.summary
    assert "PGNL_LLM_API_KEY" in check.next
    (check,) = doctor.llm_checks(_openai(url.removesuffix("/v1")))
    assert check.status == FAIL and "answered HTTP 404" in check.summary
    assert "/v1" in check.next
    (check,) = doctor.llm_checks(_openai(f"http://127.0.0.1:{free_port()}/v1"))
    assert check.status == FAIL and check.summary.startswith("no answer from GET ")
    down = _openai(f"http://127.0.0.1:{free_port()}/v1")
    _, speed = doctor.llm_checks(down, speed=True)
    assert speed.status == FAIL and "not timed" in speed.summary


def test_the_speed_of_one_completion_is_timed(llm_server: ScriptedLLM) -> None:
    llm_server.script("SELECT city, count(*) FROM students GROUP BY city")
    check = doctor.speed_check(_openai(llm_server.base_url, "scripted"))
    assert check.status == OK, check.line()
    assert check.summary.startswith("scripted: 12 tokens in ")
    assert " tokens/s (its " in check.summary
    assert doctor.SPEED_PROMPT in llm_server.last.content("user")


SMALL = b"not really a GGUF file, but hashed like one\n" * 100


@pytest.fixture
def small_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> llm_model.PackagedModel:
    """A packaged model of a few kB whose parts are not installed, in tmp_path."""
    model = replace(
        llm_model.QWEN_CODER_0_5B,
        name="tiny",
        package="pgnl-test-no-such-part{n}",
        size=len(SMALL),
        sha256=hashlib.sha256(SMALL).hexdigest(),
        file_name="tiny.gguf",
    )
    monkeypatch.setitem(llm_model.PACKAGED_MODELS, "tiny", model)
    monkeypatch.setattr(llm_server, "llama_cpp_installed", lambda: True)
    return model


def test_the_embedded_model_is_hashed_where_it_is_and_nothing_is_written(
    small_model: llm_model.PackagedModel, tmp_path: Path
) -> None:
    settings = LLMSettings(provider="embedded", embedded_model="tiny", data_dir=str(tmp_path))
    check = doctor.embedded_check(settings)
    assert check.status == FAIL and "neither joined" in check.summary
    assert check.next == "pip install 'pgnl[llm]'"
    target = tmp_path / "tiny.gguf"
    target.write_bytes(SMALL)
    check = doctor.embedded_check(settings)
    assert (check.status, check.summary) == (OK, f"embedded tiny, {target}: SHA-256 verified now")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.gguf"]  # no stamp written
    target.write_bytes(SMALL[:-1] + b"?")
    check = doctor.embedded_check(settings)
    assert check.status == FAIL and "is not" in check.summary and "delete it" in check.next
    target.write_bytes(SMALL)
    Path(f"{target}.sha256").write_text(llm_model._stamp_text(small_model, target))
    check = doctor.embedded_check(settings)
    assert check.summary.endswith("SHA-256 verified when joined")


def test_the_embedded_provider_without_llama_cpp_fails_with_the_build_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(llm_server, "llama_cpp_installed", lambda: False)
    (check,) = doctor.llm_checks(LLMSettings(provider="embedded"))
    assert check.status == FAIL and "llama-cpp-python" in check.summary
    assert "CMAKE_ARGS" in check.next
