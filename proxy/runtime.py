"""ONNX Runtime sessions and tokenizers for the shipped models, loaded once and shared.

The models live in a folder (`proxy/models/` as shipped, or `[runtime] models_dir`) with a
`manifest.json` that lists, for each model, its files and their sha256; every file is checked
against it before a session is created, so a damaged or mismatched install fails at load time with
a message that names the file, instead of producing wrong embeddings later.

Where the models run is chosen by `[runtime] provider` (auto|cpu|cuda): CUDA when onnxruntime-gpu
and a GPU are present, else CPU with the reason logged (see `choose_providers`).

Sessions are thread-safe (ONNX Runtime's `InferenceSession.run` may be called concurrently), and
tokenizers are configured once at load and never changed afterwards, so one `Embedder` serves every
thread of the proxy. Nothing here imports torch: the export side is `model_export/`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from proxy.config import RuntimeSettings

log = logging.getLogger(__name__)

SHIPPED_MODELS_DIR = Path(__file__).resolve().parent / "models"
MANIFEST_FILE = "manifest.json"
VALUE_EMBEDDER = "value_embedder"
PROVIDER_CHOICES = ("auto", "cpu", "cuda")

_CPU = "CPUExecutionProvider"
_CUDA = "CUDAExecutionProvider"
_HASH_CHUNK = 1 << 20

FloatArray = npt.NDArray[np.float32]


class ModelFilesError(RuntimeError):
    """A model file is missing, damaged or does not match manifest.json; the message names the
    file and says how to fix it."""


def choose_providers(wanted: str) -> tuple[list[str], str]:
    """The onnxruntime providers for `[runtime] provider` = `wanted` (auto|cpu|cuda), and why.

    CUDA is used only when this onnxruntime offers CUDAExecutionProvider (onnxruntime-gpu
    installed); otherwise CPU, with the reason logged: a warning when CUDA was asked for
    explicitly, info for auto.
    """
    choice = wanted.strip().lower()
    if choice not in PROVIDER_CHOICES:
        raise ValueError(
            f"unknown ONNX provider {wanted!r} ([runtime] provider): use one of "
            + ", ".join(PROVIDER_CHOICES)
        )
    if choice == "cpu":
        return [_CPU], "cpu requested ([runtime] provider = cpu)"
    available = ort.get_available_providers()
    if _CUDA in available:
        return [_CUDA, _CPU], f"{choice} requested and CUDAExecutionProvider is available"
    reason = (
        f"{choice} requested but this onnxruntime has no CUDAExecutionProvider (available: "
        f"{', '.join(available)}); running the models on CPU. For GPU inference install "
        "onnxruntime-gpu (pip install 'pgnl[gpu]') on a machine with a CUDA GPU"
    )
    if choice == "cuda":
        log.warning("%s", reason)
    else:
        log.info("%s", reason)
    return [_CPU], reason


def resolve_models_dir(settings: RuntimeSettings | None = None) -> Path:
    """The folder holding manifest.json: `[runtime] models_dir`, or the models shipped in pgnl."""
    configured = settings.models_dir if settings is not None else ""
    return Path(configured).expanduser().resolve() if configured else SHIPPED_MODELS_DIR


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


EXPORTERS = {
    VALUE_EMBEDDER: "python -m model_export.export_embedder",
    "sketch": "python -m model_export.export_sketch",
    "aligner": "python -m model_export.export_sketch",
}
"""The command that makes each shipped model (named in the errors that say how to fix them)."""


def _fix_hint(models_dir: Path, model: str = "") -> str:
    export = EXPORTERS.get(model, " or ".join(sorted(set(EXPORTERS.values()))))
    if models_dir == SHIPPED_MODELS_DIR:
        return (
            "The models shipped with pgnl are damaged or incomplete: reinstall pgnl "
            "(pip install --force-reinstall pgnl), or in a source checkout re-run the export "
            f"({export}) or restore proxy/models/ from git"
        )
    return (
        f"Fix the folder {models_dir} ([runtime] models_dir): copy the model files and their "
        f"manifest.json together from one export ({export}), or "
        "leave models_dir empty to use the models shipped with pgnl"
    )


def read_manifest(models_dir: Path) -> dict[str, Any]:
    path = models_dir / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFilesError(f"{path} is missing. {_fix_hint(models_dir)}") from None
    except (OSError, ValueError) as exc:
        raise ModelFilesError(f"{path} cannot be read ({exc}). {_fix_hint(models_dir)}") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("models"), dict):
        raise ModelFilesError(f"{path} has no 'models' object. {_fix_hint(models_dir)}")
    return manifest


@dataclass(frozen=True)
class VerifiedModel:
    """A model's folder whose files all matched their sha256 in manifest.json."""

    name: str
    folder: Path
    entry: dict[str, Any]

    def file(self, name: str) -> Path:
        return self.folder / name


def verify_model(models_dir: Path, name: str, required: Sequence[str] = ()) -> VerifiedModel:
    """Check every file manifest.json lists for model `name` against its sha256; `required`
    names files that must be among them."""
    manifest = read_manifest(models_dir)
    entry = manifest["models"].get(name)
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
        raise ModelFilesError(
            f"{models_dir / MANIFEST_FILE} has no entry for model {name!r} with its files. "
            f"{_fix_hint(models_dir, name)}"
        )
    unlisted = [file_name for file_name in required if file_name not in entry["files"]]
    if unlisted:
        raise ModelFilesError(
            f"{models_dir / MANIFEST_FILE} lists no {', '.join(unlisted)} for model {name!r}. "
            f"{_fix_hint(models_dir, name)}"
        )
    folder = models_dir / str(entry.get("folder", name))
    for file_name, facts in entry["files"].items():
        path = folder / file_name
        expected = facts.get("sha256") if isinstance(facts, dict) else None
        if not path.is_file():
            raise ModelFilesError(f"model file {path} is missing. {_fix_hint(models_dir, name)}")
        actual = sha256_file(path)
        if actual != expected:
            raise ModelFilesError(
                f"model file {path} does not match manifest.json (sha256 {actual}, expected "
                f"{expected}). {_fix_hint(models_dir, name)}"
            )
    return VerifiedModel(name=name, folder=folder, entry=entry)


def create_session(
    model_path: Path, providers: Sequence[str], threads: int = 0
) -> ort.InferenceSession:
    """An ONNX Runtime session with full graph optimisation and `threads` intra-op threads
    (0: ONNX Runtime's default, one a core) that do not spin while idle. Falls back to CPU,
    with a warning, when a CUDA session cannot be created."""
    if threads < 0:
        raise ValueError(f"[runtime] threads must be 0 (all cores) or more, not {threads}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle intra-op threads sleep instead of spinning: they share the cores with PostgreSQL, the
    # proxy's event loop and the Python between two model runs (spinning threads made the sketch
    # stage slower: docs/measurements.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(str(model_path), options, providers=list(providers))
    except Exception as exc:
        if list(providers) == [_CPU]:
            raise
        log.warning("%s: cannot start on %s (%s); running on CPU", model_path, providers, exc)
        session = ort.InferenceSession(str(model_path), options, providers=[_CPU])
    in_use = session.get_providers()
    if providers and providers[0] != in_use[0]:
        log.warning(
            "%s: asked for %s but onnxruntime runs it on %s (no usable GPU?)",
            model_path.name,
            providers[0],
            in_use[0],
        )
    return session


IntArray = npt.NDArray[np.int64]


def pad_encodings(
    encodings: Sequence[Encoding], width: int | None = None
) -> tuple[IntArray, IntArray, IntArray]:
    """Token ids, attention mask and token type ids of `encodings`, right-padded with zeros to
    `width` (default: the longest)."""
    if width is None:
        width = max((len(e.ids) for e in encodings), default=0)
    input_ids = np.zeros((len(encodings), width), dtype=np.int64)
    attention_mask = np.zeros_like(input_ids)
    token_type_ids = np.zeros_like(input_ids)
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        input_ids[row, :n] = encoding.ids
        attention_mask[row, :n] = 1
        token_type_ids[row, :n] = encoding.type_ids
    return input_ids, attention_mask, token_type_ids


def load_tokenizer(path: Path, max_length: int) -> Tokenizer:
    """A tokenizer that truncates to `max_length` tokens and does not pad (callers pad)."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


class Embedder:
    """Text → unit-length float32 vectors (all-MiniLM-L6-v2, pooled and normalised in the graph).

    Thread-safe: the session may run concurrently and the tokenizer is never reconfigured.
    """

    dimension: int
    provider: str
    max_length: int
    batch_size: int

    def __init__(
        self,
        session: ort.InferenceSession,
        tokenizer: Tokenizer,
        *,
        max_length: int,
        batch_size: int = 64,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self._session = session
        self._tokenizer = tokenizer
        self._inputs = {node.name for node in session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise ModelFilesError(f"the embedding model has no input {sorted(missing)}")
        outputs = session.get_outputs()
        self._output = outputs[0].name
        shape = outputs[0].shape
        if len(shape) != 2 or not isinstance(shape[1], int):
            raise ModelFilesError(f"the embedding model's output has shape {shape}, not (n, d)")
        self.dimension = shape[1]
        self.provider = session.get_providers()[0]
        self.max_length = max_length
        self.batch_size = batch_size

    @classmethod
    def from_files(
        cls,
        model_path: Path,
        tokenizer_path: Path,
        *,
        providers: Sequence[str] = (_CPU,),
        threads: int = 0,
        max_length: int = 128,
        batch_size: int = 64,
    ) -> Embedder:
        """An embedder over these files, unchecked (load_embedder checks them first)."""
        return cls(
            create_session(model_path, providers, threads),
            load_tokenizer(tokenizer_path, max_length),
            max_length=max_length,
            batch_size=batch_size,
        )

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """One L2-normalised row per text, in the order given; float32 (len(texts), dimension).

        Texts are truncated to `max_length` tokens and run in batches of similar length (less
        padding than one batch of mixed lengths). The shipped int8 model quantizes activations
        per run, so a text's vector depends a little on its batch-mates (manifest.json,
        int8_alone_vs_batched, has the measured agreement); repeated calls with the same texts in
        the same order give identical results.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not one string")
        count = len(texts)
        result = np.empty((count, self.dimension), dtype=np.float32)
        if count == 0:
            return result
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=count)
        order = np.argsort(lengths, kind="stable")
        for start in range(0, count, self.batch_size):
            rows = order[start : start + self.batch_size]
            result[rows] = self._run([encodings[i] for i in rows], int(lengths[rows].max()))
        return result

    def _run(self, encodings: list[Encoding], width: int) -> FloatArray:
        input_ids, attention_mask, token_type_ids = pad_encodings(encodings, width)
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = token_type_ids
        (embeddings,) = self._session.run([self._output], feed)
        return np.asarray(embeddings, dtype=np.float32)


_cache: dict[tuple[str, str, int], Embedder] = {}
_cache_lock = threading.Lock()


def load_embedder(settings: RuntimeSettings | None = None) -> Embedder:
    """The value embedder for these settings, loaded (and its files verified) once per
    (models_dir, provider, threads) and shared."""
    settings = settings if settings is not None else RuntimeSettings()
    models_dir = resolve_models_dir(settings)
    key = (str(models_dir), settings.provider.strip().lower(), settings.threads)
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            providers, reason = choose_providers(settings.provider)
            model = verify_model(models_dir, VALUE_EMBEDDER, ("model.onnx", "tokenizer.json"))
            embedder = Embedder.from_files(
                model.file("model.onnx"),
                model.file("tokenizer.json"),
                providers=providers,
                threads=settings.threads,
                max_length=int(model.entry.get("max_length", 128)),
            )
            log.info(
                "value embedder loaded from %s on %s (%s)", model.folder, embedder.provider, reason
            )
            _cache[key] = embedder
        return embedder
