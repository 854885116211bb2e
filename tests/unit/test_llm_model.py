"""Joining a packaged GGUF model from its part packages: in order, hash-checked, nothing
half-written left, checked once. Parts are small files made here (the real ones are joined by
the embedded-LLM tests); the package look-up is the real one, through installed metadata."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from proxy.llm_model import (
    PACKAGED_MODELS,
    QWEN_CODER_1_5B,
    ModelInstallError,
    PackagedModel,
    install_model,
    is_verified,
    packaged_model,
    part_path,
    parts_installed,
)

SLICES = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]


def model_of(slices: list[bytes], **changes: object) -> PackagedModel:
    joined = b"".join(slices)
    model = PackagedModel(
        name="tiny",
        title="Tiny (test)",
        package="tiny-part{n}",
        parts=len(slices),
        size=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        file_name="tiny.gguf",
    )
    return replace(model, **changes)  # type: ignore[arg-type]


def parts_in(
    folder: Path, slices: list[bytes]
) -> tuple[Callable[[PackagedModel, int], Path], list[int]]:
    """A part finder over files in `folder`, and the list of part numbers it was asked for."""
    asked: list[int] = []
    for number, data in enumerate(slices, 1):
        (folder / f"part{number:02d}.bin").write_bytes(data)

    def find(model: PackagedModel, number: int) -> Path:
        asked.append(number)
        return folder / f"part{number:02d}.bin"

    return find, asked


def test_parts_are_joined_in_order_and_verified_once(tmp_path: Path) -> None:
    find, asked = parts_in(tmp_path, SLICES)
    model = model_of(SLICES)
    lines: list[str] = []
    target = install_model(model, tmp_path / "models", progress=lines.append, part=find)
    assert target.read_bytes() == b"".join(SLICES)
    assert is_verified(model, target)
    assert asked == [1, 2, 3]
    assert lines[0].startswith("pgnl: joining Tiny (test): part 1/3") and lines[-1].endswith("done")
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny.gguf", "tiny.gguf.sha256"]
    # A second call finds the verified file and reads no part.
    assert install_model(model, tmp_path / "models", progress=None, part=find) == target
    assert asked == [1, 2, 3]


def test_a_changed_file_is_joined_again(tmp_path: Path) -> None:
    find, asked = parts_in(tmp_path, SLICES)
    model = model_of(SLICES)
    target = install_model(model, tmp_path / "models", progress=None, part=find)
    data = bytearray(target.read_bytes())
    data[5] ^= 0xFF  # same size, other bytes, newer modification time
    target.write_bytes(bytes(data))
    assert not is_verified(model, target)
    install_model(model, tmp_path / "models", progress=None, part=find)
    assert target.read_bytes() == b"".join(SLICES) and len(asked) == 6


@pytest.mark.parametrize(
    "wrong",
    [
        {"sha256": "0" * 64},
        {"size": sum(map(len, SLICES)) + 1},
    ],
)
def test_a_join_that_is_not_the_published_file_is_refused_and_removed(
    tmp_path: Path, wrong: dict[str, object]
) -> None:
    find, _ = parts_in(tmp_path, SLICES)
    model = model_of(SLICES, **wrong)
    models = tmp_path / "models"
    with pytest.raises(ModelInstallError) as caught:
        install_model(model, models, progress=None, part=find)
    message = str(caught.value)
    assert "tiny-part1" in message and "tiny-part3" in message
    assert model.sha256 in message and "pip install --force-reinstall" in message
    assert list(models.iterdir()) == []  # nothing half-written left


def test_slices_in_another_order_are_refused(tmp_path: Path) -> None:
    find, _ = parts_in(tmp_path, [SLICES[1], SLICES[0], SLICES[2]])
    with pytest.raises(ModelInstallError, match="not the published"):
        install_model(model_of(SLICES), tmp_path / "models", progress=None, part=find)


def test_a_missing_part_package_is_named_with_the_install_command() -> None:
    model = model_of(SLICES, package="pgnl-no-such-package-part{n}")
    with pytest.raises(ModelInstallError) as caught:
        part_path(model, 2)
    assert "pgnl-no-such-package-part2" in str(caught.value)
    assert "pip install 'pgnl[llm]'" in str(caught.value)
    assert not parts_installed(model)


def test_an_unknown_model_name_lists_the_known_ones() -> None:
    with pytest.raises(ModelInstallError) as caught:
        packaged_model("qwen-7b")
    assert all(name in str(caught.value) for name in PACKAGED_MODELS)
    assert "model_path" in str(caught.value)


def test_the_pinned_models_are_the_published_qwen_files() -> None:
    assert QWEN_CODER_1_5B.size == 1_117_320_768
    assert QWEN_CODER_1_5B.sha256.startswith("cc324af0")
    assert PACKAGED_MODELS["qwen2.5-coder-0.5b"].sha256.startswith("1d961463")


@pytest.mark.skipif(not parts_installed(QWEN_CODER_1_5B), reason="pgnl[llm] is not installed")
def test_installed_parts_are_found_through_their_metadata() -> None:
    first = part_path(QWEN_CODER_1_5B, 1)
    last = part_path(QWEN_CODER_1_5B, QWEN_CODER_1_5B.parts)
    assert first.name == "part01.bin" and last.name == "part22.bin"
    sizes = sum(part_path(QWEN_CODER_1_5B, n).stat().st_size for n in range(1, 23))
    assert sizes == QWEN_CODER_1_5B.size
