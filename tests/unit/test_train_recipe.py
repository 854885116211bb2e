"""The sketch model's recipe (`train_sketch --recipe`): stages run in turn, each from the weights of
the one before, a finished stage is not trained again, and the last stage's weights and every
stage's epochs end up where `export_sketch` reads them, with the command that made them. And the
examples a run trains on: with `--values`, the values each question names beside their columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_export.export_sketch import training_command
from model_export.spider import NOT_FOUND
from model_export.train_sketch import (
    SHIPPED_RECIPE,
    SPIDER,
    Stage,
    read_examples,
    reads_values,
    run_recipe,
    window_length,
)
from proxy.nl2sql.encoding import MAX_LENGTH, WindowEncoder
from proxy.nl2sql.schema import load_spider_schemas
from proxy.nl2sql.serialize import serialize
from proxy.runtime import SHIPPED_MODELS_DIR, load_tokenizer, read_manifest

STAGES = (
    Stage(epochs=2, lr=1e-3, head_lr=1e-2, seed=1),
    Stage(epochs=1, lr=1e-4, head_lr=1e-3, seed=2),
)


class _Trainer:
    """Stands in for a training run: writes what a finished run leaves in its workdir (a
    model.pt that names its stage and where it started from, and history.json), and records
    each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Stage, Path, Path | None]] = []

    def __call__(self, stage: Stage, workdir: Path, init: Path | None) -> None:
        self.calls.append((stage, workdir, init))
        workdir.mkdir(parents=True)
        start = init.read_text(encoding="utf-8") if init is not None else "base"
        (workdir / "model.pt").write_text(f"{start} -> seed {stage.seed}", encoding="utf-8")
        history = [
            {"epoch": e + 1, "dev_top1": {"select": stage.seed}} for e in range(stage.epochs)
        ]
        (workdir / "history.json").write_text(json.dumps(history), encoding="utf-8")


def test_each_stage_starts_from_the_one_before(tmp_path: Path) -> None:
    trainer = _Trainer()
    history = run_recipe(STAGES, tmp_path, trainer)
    assert trainer.calls == [
        (STAGES[0], tmp_path / "stage-1", None),
        (STAGES[1], tmp_path / "stage-2", tmp_path / "stage-1" / "model.pt"),
    ]
    assert (tmp_path / "model.pt").read_text(encoding="utf-8") == "base -> seed 1 -> seed 2"
    assert [(entry["stage"], entry["epoch"]) for entry in history] == [(1, 1), (1, 2), (2, 1)]
    assert json.loads((tmp_path / "history.json").read_text(encoding="utf-8")) == history


def test_a_finished_stage_is_kept(tmp_path: Path) -> None:
    first = _Trainer()
    run_recipe(STAGES[:1], tmp_path, first)
    again = _Trainer()
    run_recipe(STAGES, tmp_path, again)
    assert [call[0] for call in again.calls] == [STAGES[1]]
    assert (tmp_path / "model.pt").read_text(encoding="utf-8") == "base -> seed 1 -> seed 2"


def test_an_empty_recipe_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one stage"):
        run_recipe((), tmp_path, _Trainer())


def test_the_manifest_names_the_command_that_trained_the_weights(tmp_path: Path) -> None:
    single = "python -m model_export.train_sketch"
    assert training_command(tmp_path, single) == single
    (tmp_path / "config.json").write_text(
        json.dumps({"command": f"{single} --recipe"}), encoding="utf-8"
    )
    assert training_command(tmp_path, single) == f"{single} --recipe"


def test_a_recipe_starts_from_the_base_model(capsys: pytest.CaptureFixture[str]) -> None:
    from model_export.train_sketch import main

    assert SHIPPED_RECIPE
    with pytest.raises(SystemExit):
        main(["--recipe", "--init", "model.pt"])
    assert "leave out --init" in capsys.readouterr().err


def test_a_run_reads_values_where_its_config_says_so(tmp_path: Path) -> None:
    assert not reads_values(tmp_path)
    for flag, expected in (("True", True), ("False", False)):
        (tmp_path / "config.json").write_text(json.dumps({"values": flag}), encoding="utf-8")
        assert reads_values(tmp_path) is expected


def test_a_run_reads_windows_as_long_as_its_config_says(tmp_path: Path) -> None:
    assert window_length(tmp_path) == MAX_LENGTH  # no config: as runs before --max-length
    (tmp_path / "config.json").write_text(json.dumps({"values": "True"}), encoding="utf-8")
    assert window_length(tmp_path) == MAX_LENGTH
    (tmp_path / "config.json").write_text(json.dumps({"max_length": "512"}), encoding="utf-8")
    assert window_length(tmp_path) == 512


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-length", "64"], "--max-length must be between 128 and 512"),
        (["--max-length", "1024"], "--max-length must be between 128 and 512"),
        (["--shuffle-schemas", "-0.1"], "--shuffle-schemas is a probability: between 0 and 1"),
        (["--shuffle-schemas", "1.5"], "--shuffle-schemas is a probability: between 0 and 1"),
    ],
)
def test_a_setting_out_of_its_range_is_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from model_export.train_sketch import main

    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_training_examples_show_the_values_their_question_names() -> None:
    """With --values, a question's windows show the database's values it names beside their
    columns (read from Spider's SQLite file); without, the schema alone."""
    if not (SPIDER / "dev.json").exists():
        pytest.skip(NOT_FOUND)
    schemas = load_spider_schemas(SPIDER / "tables.json")
    # the base model's tokenizer, as the shipped sketch model carries it (no torch needed)
    encoder = WindowEncoder(load_tokenizer(SHIPPED_MODELS_DIR / "sketch" / "tokenizer.json", 512))
    plain, _ = read_examples(SPIDER / "dev.json", schemas, encoder, 20)
    marked, _ = read_examples(SPIDER / "dev.json", schemas, encoder, 20, values=True)
    assert [e.question for e in plain] == [e.question for e in marked]
    france = [e for e in marked if "France" in e.question]
    assert france
    for example in france:
        assert "country = france" in example.windows[0].window.text
    for before, after in zip(plain, marked, strict=True):
        assert " = france" not in before.windows[0].window.text
        assert before.windows[0].window == serialize(before.schema)
        if "France" not in after.question and "french" not in after.question.lower():
            assert after.windows == before.windows, after.question


def test_the_shipped_model_reads_values_as_its_recipe_ends() -> None:
    manifest = read_manifest(SHIPPED_MODELS_DIR)["models"]["sketch"]
    assert manifest["reads_values"] is SHIPPED_RECIPE[-1].values
    assert manifest["max_length"] == SHIPPED_RECIPE[-1].max_length
    assert manifest["training"]["command"] == "python -m model_export.train_sketch --recipe"
