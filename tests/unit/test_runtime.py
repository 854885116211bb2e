"""The ONNX runtime: the shipped value embedder loads only when its files match manifest.json, and
gives unit-length, deterministic, order-preserving vectors in which close strings are close."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from proxy import runtime
from proxy.config import RuntimeSettings

TEXTS = [
    "New York",
    "NY city",
    "banana bread",
    "timmothy ward",
    "Timmy Ward",
    "Computer Science",
    "",
    "São Paulo",
    "a rather longer value that runs to a dozen words or so, with punctuation",
    "42",
    "Introduction to Databases",
    "東京",
]


@pytest.fixture(scope="module")
def embedder() -> runtime.Embedder:
    return runtime.load_embedder(RuntimeSettings(provider="cpu", threads=1))


def test_shipped_model_matches_manifest(embedder: runtime.Embedder) -> None:
    manifest = runtime.read_manifest(runtime.SHIPPED_MODELS_DIR)
    entry = manifest["models"][runtime.VALUE_EMBEDDER]
    assert set(entry["files"]) == {"model.onnx", "tokenizer.json"}
    for name, facts in entry["files"].items():
        path = runtime.SHIPPED_MODELS_DIR / entry["folder"] / name
        assert runtime.sha256_file(path) == facts["sha256"]
        assert path.stat().st_size == facts["bytes"]
    assert embedder.dimension == entry["dimension"] == 384
    assert embedder.max_length == entry["max_length"]
    assert embedder.provider == "CPUExecutionProvider"
    # The export measured its int8 model against sentence-transformers' PyTorch embeddings.
    assert entry["measured"]["int8_vs_pytorch"]["mean_cosine"] > 0.98


def test_loaded_once_per_settings(embedder: runtime.Embedder) -> None:
    assert runtime.load_embedder(RuntimeSettings(provider="cpu", threads=1)) is embedder
    assert runtime.load_embedder(RuntimeSettings(provider="cpu", threads=2)) is not embedder


def test_concurrent_first_loads_share_one_embedder(tmp_path: Path) -> None:
    settings = RuntimeSettings(provider="cpu", models_dir=str(_copy_models(tmp_path)), threads=1)
    with ThreadPoolExecutor(4) as pool:
        loaded = list(pool.map(lambda _: runtime.load_embedder(settings), range(4)))
    assert all(e is loaded[0] for e in loaded)


def test_concurrent_embedding(embedder: runtime.Embedder) -> None:
    expected = embedder.embed(TEXTS)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: embedder.embed(TEXTS), range(8)))
    assert all(np.array_equal(r, expected) for r in results)


def test_runtime_does_not_import_torch() -> None:
    code = "import sys, proxy.runtime; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def _copy_models(tmp_path: Path) -> Path:
    target = tmp_path / "models"
    shutil.copytree(runtime.SHIPPED_MODELS_DIR, target)
    return target


def test_tampered_model_is_refused(tmp_path: Path) -> None:
    models = _copy_models(tmp_path)
    model = models / "value_embedder" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    model.write_bytes(bytes(data))
    settings = RuntimeSettings(provider="cpu", models_dir=str(models))
    with pytest.raises(runtime.ModelFilesError) as caught:
        runtime.load_embedder(settings)
    message = str(caught.value)
    assert str(model) in message
    assert "does not match manifest.json" in message
    assert "export_embedder" in message


def test_missing_file_is_refused(tmp_path: Path) -> None:
    models = _copy_models(tmp_path)
    (models / "value_embedder" / "tokenizer.json").unlink()
    with pytest.raises(runtime.ModelFilesError, match=r"tokenizer\.json is missing"):
        runtime.load_embedder(RuntimeSettings(provider="cpu", models_dir=str(models)))


def test_missing_manifest_is_refused(tmp_path: Path) -> None:
    models = _copy_models(tmp_path)
    (models / "manifest.json").unlink()
    with pytest.raises(runtime.ModelFilesError, match=r"manifest\.json is missing"):
        runtime.load_embedder(RuntimeSettings(provider="cpu", models_dir=str(models)))


def test_intact_copy_loads(tmp_path: Path) -> None:
    models = _copy_models(tmp_path)
    manifest = json.loads((models / "manifest.json").read_text())
    assert runtime.VALUE_EMBEDDER in manifest["models"]
    copy = runtime.load_embedder(RuntimeSettings(provider="cpu", models_dir=str(models)))
    assert copy.embed(["New York"]).shape == (1, 384)


def test_unit_norm_float32(embedder: runtime.Embedder) -> None:
    vectors = embedder.embed(TEXTS)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input(embedder: runtime.Embedder) -> None:
    assert embedder.embed([]).shape == (0, 384)
    assert embedder.embed([]).dtype == np.float32


def test_one_string_is_not_a_sequence_of_texts(embedder: runtime.Embedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("New York")


def test_deterministic(embedder: runtime.Embedder) -> None:
    assert np.array_equal(embedder.embed(TEXTS), embedder.embed(TEXTS))


def test_order_preserved_across_batch_sizes(embedder: runtime.Embedder) -> None:
    texts = TEXTS * 3 + [f"value {i}" for i in range(20)]
    batched = embedder.embed(texts)
    one_by_one = np.concatenate([embedder.embed([t]) for t in texts])
    folder = runtime.SHIPPED_MODELS_DIR / runtime.VALUE_EMBEDDER
    files = (folder / "model.onnx", folder / "tokenizer.json")
    small = runtime.Embedder.from_files(*files, threads=1, batch_size=5)
    alone = runtime.Embedder.from_files(*files, threads=1, batch_size=1)
    # Each text run alone is independent of the others: exactly the same vectors.
    assert np.array_equal(alone.embed(texts), one_by_one)
    reversed_alone = alone.embed(texts[::-1])[::-1]
    assert np.array_equal(reversed_alone, one_by_one)
    # In batches, int8 activations are quantized per run: the same text, close but not equal.
    for vectors in (batched, small.embed(texts)):
        same = (vectors * one_by_one).sum(axis=1)
        assert same.min() > 0.95
        # ... and row i is still text i: each row is nearest its own text's lone vector.
        nearest = (vectors @ one_by_one.T).argmax(axis=1)
        assert all(texts[j] == texts[i] for i, j in enumerate(nearest))


def test_truncated_to_max_length(embedder: runtime.Embedder) -> None:
    long_text = "word " * 600
    longer = long_text + "entirely different ending about bananas " * 50
    vectors = embedder.embed([long_text, longer])
    assert vectors.shape == (2, 384)
    assert float(vectors[0] @ vectors[1]) > 0.999


def test_close_strings_score_higher_than_unrelated(embedder: runtime.Embedder) -> None:
    a, b, c, d, e, f = embedder.embed(
        ["New York", "NY city", "banana bread", "timmothy ward", "Timmy Ward", "Computer Science"]
    )
    assert float(a @ b) > float(a @ c) + 0.2
    assert float(a @ b) > float(b @ c) + 0.2
    assert float(d @ e) > 0.65  # calibration's threshold r
    assert float(d @ e) > max(float(d @ a), float(d @ c), float(d @ f)) + 0.3


def test_choose_cpu() -> None:
    providers, reason = runtime.choose_providers("cpu")
    assert providers == ["CPUExecutionProvider"]
    assert "cpu" in reason
    assert runtime.choose_providers(" CPU ")[0] == ["CPUExecutionProvider"]


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="this onnxruntime has CUDA",
)
def test_cuda_falls_back_to_cpu_with_a_logged_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="proxy.runtime"):
        providers, reason = runtime.choose_providers("cuda")
    assert providers == ["CPUExecutionProvider"]
    assert "onnxruntime-gpu" in reason
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "CUDAExecutionProvider" in warnings[0].getMessage()

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="proxy.runtime"):
        providers, _ = runtime.choose_providers("auto")
    assert providers == ["CPUExecutionProvider"]
    assert [r.levelno for r in caplog.records] == [logging.INFO]


@pytest.mark.parametrize("wanted", ["gpu", "", "tensorrt"])
def test_unknown_provider_is_refused(wanted: str) -> None:
    with pytest.raises(ValueError, match=r"unknown ONNX provider .* auto, cpu, cuda"):
        runtime.choose_providers(wanted)
    with pytest.raises(ValueError, match="unknown ONNX provider"):
        runtime.load_embedder(RuntimeSettings(provider=wanted))


def test_negative_threads_refused(tmp_path: Path) -> None:
    models = _copy_models(tmp_path)
    with pytest.raises(ValueError, match="threads"):
        runtime.load_embedder(RuntimeSettings(provider="cpu", models_dir=str(models), threads=-1))


def test_idle_threads_do_not_spin() -> None:
    # spinning threads take the cores PostgreSQL and the proxy share with the models
    model = runtime.resolve_models_dir(RuntimeSettings()) / "value_embedder" / "model.onnx"
    session = runtime.create_session(model, ["CPUExecutionProvider"], threads=2)
    options = session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
