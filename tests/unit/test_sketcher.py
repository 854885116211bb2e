"""The shipped sketch model and aligner: they load only when their files match manifest.json, and
for every Spider dev schema they return ranked sketches naming only schema items that exist."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from model_export.hand_checked import QUESTIONS, HandChecked
from model_export.spider import NOT_FOUND, spider_dir
from proxy import runtime
from proxy.config import ConfigError, RuntimeSettings, SketchSettings
from proxy.nl2sql import sketcher as sketch_stage
from proxy.nl2sql.aligner import pair_text
from proxy.nl2sql.schema import Column, Schema, Table, load_spider_schemas
from proxy.nl2sql.sketch import (
    AGGREGATES,
    KEYWORDS,
    OPERATORS,
    STAR,
    Sketch,
    valid_keywords,
)
from proxy.nl2sql.value_evidence import NamedValues

SPIDER = spider_dir()
CPU = RuntimeSettings(provider="cpu", threads=1)


@pytest.fixture(scope="module")
def sketcher() -> sketch_stage.Sketcher:
    return sketch_stage.load_sketcher(CPU)


def _check(sketch: Sketch, schema: Schema) -> None:
    columns = range(len(schema.columns))
    assert sketch.select, "a SELECT with no item"
    assert sketch.tables, "a FROM with no table"
    for item in sketch.select:
        assert item.aggregate in AGGREGATES
        assert item.column == STAR or item.column in columns
    assert all(table in range(len(schema.tables)) for table in sketch.tables)
    assert sketch.keywords <= set(KEYWORDS)
    assert valid_keywords(frozenset(KEYWORDS.index(k) for k in sketch.keywords))
    slots = sketch.slots
    assert all(p.column in columns and p.operator in OPERATORS for p in slots.where)
    assert bool(slots.where) == ("where" in sketch.keywords)
    assert bool(slots.group_by) == ("group by" in sketch.keywords)
    assert bool(slots.having) == ("having" in sketch.keywords)
    assert bool(slots.order_by) == ("order by" in sketch.keywords)
    assert all(c in columns for c in slots.group_by)
    assert all(i.column == STAR or i.column in columns for i in (*slots.having, *slots.order_by))


def test_shipped_models_match_manifest() -> None:
    manifest = runtime.read_manifest(runtime.SHIPPED_MODELS_DIR)
    for name in (sketch_stage.SKETCH_MODEL, sketch_stage.ALIGNER_MODEL):
        entry = manifest["models"][name]
        assert set(entry["files"]) == {"model.onnx", "tokenizer.json"}
        for file_name, facts in entry["files"].items():
            path = runtime.SHIPPED_MODELS_DIR / entry["folder"] / file_name
            assert runtime.sha256_file(path) == facts["sha256"]
            assert path.stat().st_size == facts["bytes"]
        # The export measured both precisions on Spider dev and shipped the smaller one only
        # where it stayed within a point of fp32.
        accuracy = entry["dev_accuracy"]
        for ranking in ("combined", "aligner", "sketch", "top_k"):
            for part in ("select", "from", "keywords"):
                loss = accuracy["fp32"][ranking][part] - accuracy["shipped"][ranking][part]
                assert loss <= 1.0
        assert entry["fp32_vs_pytorch_max_logit_difference"] < 1e-3


def test_loaded_once_per_settings(sketcher: sketch_stage.Sketcher) -> None:
    assert sketch_stage.load_sketcher(CPU) is sketcher
    assert sketch_stage.load_sketcher(CPU, SketchSettings(select_k=2)) is not sketcher
    assert sketcher.provider == "CPUExecutionProvider"


@pytest.mark.skipif(not SPIDER.exists(), reason=NOT_FOUND)
def test_every_dev_schema_gets_valid_ranked_sketches(sketcher: sketch_stage.Sketcher) -> None:
    schemas = load_spider_schemas(SPIDER / "tables.json")
    dev = json.loads((SPIDER / "dev.json").read_text(encoding="utf-8"))
    first_question: dict[str, str] = {}
    for entry in dev:
        first_question.setdefault(entry["db_id"], entry["question"])
    assert len(first_question) == 20
    settings = sketcher.settings
    for db_id, question in first_question.items():
        schema = schemas[db_id]
        hypotheses = sketcher.hypotheses(question, schema)
        # the aligner ranks the pairs of a wider pool of SELECT sets than goes on
        assert settings.select_k < settings.select_pool
        assert 1 <= len(hypotheses.selects) <= settings.select_pool
        assert 1 <= len(hypotheses.froms) <= settings.from_k
        assert 1 <= len(hypotheses.keywords) <= settings.keywords_k
        pairs = min(len(hypotheses.selects), settings.select_k) * len(hypotheses.keywords)
        # each pair of the select_k SELECT sets kept with every FROM set, and first, where it is
        # another, the FROM its own columns call for
        froms = len(hypotheses.froms)
        assert pairs * froms <= len(hypotheses.sketches) <= pairs * (froms + 1)
        for sketch in hypotheses.sketches:
            _check(sketch, schema)
        # Each part's hypotheses come most probable first and are all different.
        for candidates in (hypotheses.selects, hypotheses.froms, hypotheses.keywords):
            scores = [score for _, score in candidates]
            assert scores == sorted(scores, reverse=True)
            assert len({items for items, _ in candidates}) == len(candidates)


@pytest.mark.parametrize("item", QUESTIONS, ids=lambda item: item.question)
def test_hand_checked_questions_get_their_sketch(
    sketcher: sketch_stage.Sketcher, item: HandChecked
) -> None:
    """The plain questions a user tries first ("How many singers are there?" reads the singer
    table and counts its rows); the exporter ships no form that gets them wrong."""
    best = sketcher.sketch(item.question, item.schema)[0]
    assert best.tables == item.tables
    if item.select is not None:
        assert best.select_text(item.schema) == item.select
    assert item.keywords <= best.keywords
    assert item.answered_by(best)


def test_big_schemas_are_split_not_cut(sketcher: sketch_stage.Sketcher) -> None:
    """A schema far wider than one window still gets sketches over all of it."""
    tables = tuple(Table(f"table_{t}") for t in range(40))
    columns = tuple(
        Column(t, name) for t in range(40) for name in (f"t{t}_id", f"label_{t}", f"amount_{t}")
    )
    schema = Schema(name="wide", tables=tables, columns=columns)
    scores = sketcher.scores("what is the largest amount 39?", schema)
    assert scores.column_logits.shape == (len(columns) + 1, 30)
    assert scores.table_logits.shape == (40,)
    for sketch in sketcher.sketch("what is the largest amount 39?", schema):
        _check(sketch, schema)


def test_a_value_reading_model_sees_the_values_and_another_does_not() -> None:
    """The values reach the model's input only where the manifest says it reads them."""
    folder = runtime.SHIPPED_MODELS_DIR

    def model(reads_values: bool) -> sketch_stage.Sketcher:
        return sketch_stage.Sketcher.from_files(
            folder / "sketch" / "model.onnx",
            None,
            folder / "sketch" / "tokenizer.json",
            threads=1,
            reads_values=reads_values,
        )

    reading, unreading = model(True), model(False)
    schema = _tiny_schema()
    question = "what is the id of the singer named Adele?"
    named = NamedValues({1: frozenset({"adele"})}, frozenset({1}))
    plain = reading.scores(question, schema)
    shown = reading.scores(question, schema, named)
    assert not np.allclose(plain.column_logits, shown.column_logits)
    assert np.array_equal(plain.column_logits, reading.scores(question, schema, None).column_logits)
    unread = unreading.scores(question, schema, named)
    assert np.array_equal(unread.column_logits, unreading.scores(question, schema).column_logits)
    assert np.array_equal(unread.column_logits, plain.column_logits)


def test_whether_the_sketch_model_reads_values_comes_from_the_manifest(models_copy: Path) -> None:
    shipped = runtime.read_manifest(runtime.SHIPPED_MODELS_DIR)["models"]["sketch"]
    loaded = sketch_stage.load_sketcher(CPU)
    assert loaded.reads_values == (shipped.get("reads_values") is True)
    manifest = json.loads((models_copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["models"]["sketch"]["reads_values"] = not loaded.reads_values
    (models_copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    settings = RuntimeSettings(provider="cpu", models_dir=str(models_copy), threads=1)
    assert sketch_stage.load_sketcher(settings).reads_values == (not loaded.reads_values)


def test_a_schema_with_no_column_is_refused(sketcher: sketch_stage.Sketcher) -> None:
    empty = Schema(name="empty", tables=(), columns=())
    with pytest.raises(ValueError, match="no column this role may read"):
        sketcher.sketch("how many rows?", empty)


@pytest.mark.parametrize("name", ["select_k", "from_k", "keywords_k"])
def test_k_below_one_is_refused(name: str) -> None:
    settings = SketchSettings()
    setattr(settings, name, 0)
    with pytest.raises(ConfigError, match=rf"\[sketch\] {name} must be at least 1"):
        sketch_stage.load_sketcher(CPU, settings)


@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_negative_align_within_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match=r"\[sketch\] align_within must be 0 or more"):
        sketch_stage.load_sketcher(CPU, SketchSettings(align_within=value))


def test_the_aligner_reads_only_the_pairs_within_align_within() -> None:
    """The pairs the sketch model finds far less probable than its best are not read: they take
    the lowest logit of those read, so they rank after them."""
    schema = load_spider_schemas(SPIDER / "tables.json")["concert_singer"]
    question = "What are the names and ages of singers from France, oldest first?"
    found = sketch_stage.load_sketcher(CPU).hypotheses(question, schema)
    pairs = list(itertools.product(found.selects, found.keywords))
    probable = sketch_stage.pair_log_probabilities(found.selects, found.keywords)
    for within in (0.0, 2.0):
        sketcher = sketch_stage.load_sketcher(CPU, SketchSettings(align_within=within))
        aligned = sketcher.align(question, schema, found.selects, found.keywords)
        assert aligned is not None
        read = np.flatnonzero(probable >= probable.max() - within)
        assert 1 <= len(read) < len(pairs)  # the test reads some pairs, not all
        texts = [pair_text(question, pairs[i][0][0], pairs[i][1][0], schema) for i in read]
        assert sketcher._aligner is not None
        np.testing.assert_array_equal(aligned[read], sketcher._aligner.score(texts))
        unread = np.setdiff1d(np.arange(len(pairs)), read)
        assert np.all(aligned[unread] == aligned[read].min())
    every = sketch_stage.load_sketcher(CPU, SketchSettings(align_within=float("inf")))
    aligned = every.align(question, schema, found.selects, found.keywords)
    assert aligned is not None and len(set(aligned.tolist())) == len(pairs)


def test_without_aligner_pairs_rank_by_sketch_probability() -> None:
    plain = sketch_stage.load_sketcher(CPU, SketchSettings(aligner=False))
    assert not plain.aligns
    hypotheses = plain.hypotheses("How many singers are there?", _tiny_schema())
    pair_scores = [s.score for s in hypotheses.sketches[:: len(hypotheses.froms)]]
    assert pair_scores == sorted(pair_scores, reverse=True)


def _tiny_schema() -> Schema:
    return Schema(
        name="tiny",
        tables=(Table("singer"),),
        columns=(Column(0, "singer_id", "number"), Column(0, "name")),
    )


@pytest.fixture
def models_copy(tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "models"
    shutil.copytree(runtime.SHIPPED_MODELS_DIR, target)
    yield target


def test_tampered_aligner_is_refused(models_copy: Path) -> None:
    model = models_copy / "aligner" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 3] ^= 0x01
    model.write_bytes(bytes(data))
    settings = RuntimeSettings(provider="cpu", models_dir=str(models_copy))
    with pytest.raises(runtime.ModelFilesError) as caught:
        sketch_stage.load_sketcher(settings)
    message = str(caught.value)
    assert str(model) in message
    assert "export_sketch" in message


def test_missing_sketch_entry_is_refused(models_copy: Path) -> None:
    manifest = json.loads((models_copy / "manifest.json").read_text(encoding="utf-8"))
    del manifest["models"]["sketch"]
    (models_copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    settings = RuntimeSettings(provider="cpu", models_dir=str(models_copy))
    with pytest.raises(runtime.ModelFilesError, match="no entry for model 'sketch'"):
        sketch_stage.load_sketcher(settings)


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(), reason="this onnxruntime has CUDA"
)
def test_cuda_falls_back_to_cpu_with_a_logged_reason(
    models_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = RuntimeSettings(provider="cuda", models_dir=str(models_copy), threads=1)
    with caplog.at_level(logging.INFO):
        loaded = sketch_stage.load_sketcher(settings)
    assert loaded.provider == "CPUExecutionProvider"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("onnxruntime-gpu" in w for w in warnings)
    infos = [r.getMessage() for r in caplog.records if r.name == "proxy.nl2sql.sketcher"]
    assert any("CPUExecutionProvider" in i and "onnxruntime-gpu" in i for i in infos)


def test_the_window_length_comes_from_the_manifest(models_copy: Path) -> None:
    """The sketch model reads windows as long as it was trained on (manifest.json's `max_length`):
    a schema that fits in one window of that length is read whole, and split in a shorter one."""
    shipped = runtime.read_manifest(runtime.SHIPPED_MODELS_DIR)["models"]["sketch"]
    loaded = sketch_stage.load_sketcher(CPU)
    assert loaded.max_length == shipped["max_length"]
    manifest = json.loads((models_copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["models"]["sketch"]["max_length"] = 128
    (models_copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    settings = RuntimeSettings(provider="cpu", models_dir=str(models_copy), threads=1)
    short = sketch_stage.load_sketcher(settings)
    assert short.max_length == 128
    tables = tuple(Table(f"table_{t}") for t in range(8))
    columns = tuple(
        Column(t, name) for t in range(8) for name in (f"t{t}_id", f"label_{t}", f"amount_{t}")
    )
    schema = Schema(name="eight", tables=tables, columns=columns)
    question = "what is the largest amount 7?"
    whole, split = loaded.scores(question, schema), short.scores(question, schema)
    assert whole.column_logits.shape == split.column_logits.shape
    assert not np.allclose(whole.column_logits, split.column_logits)
