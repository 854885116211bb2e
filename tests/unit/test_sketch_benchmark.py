"""`benchmarks.sketch_accuracy --sketch-workdir`: trained sketch weights measured beside the shipped
aligner, read as their run's config.json says, before they are exported; `--ensemble`: the
shipped model's logits averaged with theirs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sketch_accuracy import MeanSketcher, trained_sketchers
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR
from proxy.nl2sql.sketcher import load_sketcher

SCHEMA = Schema(
    name="concert_singer",
    tables=(Table("singer"), Table("concert")),
    columns=(
        Column(0, "singer_id", "number", primary_key=True),
        Column(0, "name"),
        Column(0, "age", "number"),
        Column(1, "concert_id", "number", primary_key=True),
        Column(1, "singer_id", "number"),
        Column(1, "year", "number"),
    ),
    foreign_keys=(ForeignKey(4, 0),),
)


def sketch_run(tmp_path: Path, config: dict[str, str] | None = None) -> Path:
    """A train_sketch workdir holding a new sketch model's weights (MiniLM, heads seeded 0) and,
    where given, its config.json; skips where the export extra (torch) is not installed."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from model_export.sketch_model import SketchModel, load_encoder

    torch.manual_seed(0)
    workdir = tmp_path / "run"
    workdir.mkdir()
    torch.save(SketchModel(load_encoder()).state_dict(), workdir / "model.pt")
    if config is not None:
        (workdir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return workdir


def test_trained_weights_are_measured_beside_the_shipped_aligner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = sketch_run(tmp_path, {"values": "True", "max_length": "384"})
    shipped = load_sketcher()
    measured = trained_sketchers([workdir, tmp_path / "untrained"], shipped)
    assert list(measured) == [f"PyTorch fp32 {workdir}, shipped aligner"]
    assert f"{tmp_path / 'untrained'} skipped: no model.pt" in capsys.readouterr().err
    (sketcher,) = measured.values()
    assert sketcher.aligner is shipped.aligner and sketcher.aligner is not None
    assert sketcher.aligns and sketcher.reads_values and sketcher.max_length == 384
    assert sketcher.settings == shipped.settings
    sketches = sketcher.sketch("How many singers are older than 30?", SCHEMA)
    assert sketches
    for sketch in sketches:
        assert sketch.tables and sketch.tables <= {0, 1}
        assert all(item.column == STAR or 0 <= item.column < 6 for item in sketch.select)


def test_an_ensemble_decodes_the_mean_of_its_members_logits(tmp_path: Path) -> None:
    shipped = load_sketcher()
    (other,) = trained_sketchers([sketch_run(tmp_path)], shipped).values()
    question = "How many singers are older than 30?"
    mine, theirs = shipped.scores(question, SCHEMA), other.scores(question, SCHEMA)
    assert not np.allclose(mine.table_logits, theirs.table_logits)  # two different models

    mean = MeanSketcher([shipped, other])
    scores = mean.scores(question, SCHEMA)
    assert np.allclose(scores.column_logits, (mine.column_logits + theirs.column_logits) / 2)
    assert np.allclose(scores.table_logits, (mine.table_logits + theirs.table_logits) / 2)
    assert np.allclose(scores.question_logits, (mine.question_logits + theirs.question_logits) / 2)
    assert mean.aligner is shipped.aligner and mean.settings == shipped.settings
    for sketch in mean.sketch(question, SCHEMA):
        assert sketch.tables and sketch.tables <= {0, 1}
    # one member alone is that member
    alone = MeanSketcher([shipped])
    assert alone.sketch(question, SCHEMA) == shipped.sketch(question, SCHEMA)
    with pytest.raises(ValueError, match="at least one"):
        MeanSketcher([])
