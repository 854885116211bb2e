"""Which MatMuls the exporter's `int8 mixed` form keeps in float32, and that the shipped sketch
model's manifest records exactly those (the heads and `sensitive_matmul`'s) when it ships in that
form."""

from __future__ import annotations

from model_export.export_sketch import COMBINATIONS, sensitive_matmul
from proxy import runtime
from proxy.nl2sql.sketcher import SKETCH_MODEL

WEIGHTS = (
    "attention/self/query",
    "attention/self/key",
    "attention/self/value",
    "attention/output/dense",
    "intermediate/dense",
    "output/dense",
)


def _name(layer: int, weight: str) -> str:
    return f"/encoder/encoder/layer.{layer}/{weight}/MatMul"


def test_mixed_form_keeps_the_first_layer_and_every_feed_forward_output() -> None:
    kept = {(layer, w) for layer in range(6) for w in WEIGHTS if sensitive_matmul(_name(layer, w))}
    assert kept == {(0, w) for w in WEIGHTS} | {(layer, "output/dense") for layer in range(1, 6)}
    # Layer 10 is not layer 0, and the attention's output projection is not the feed-forward's.
    assert not sensitive_matmul(_name(10, "attention/self/query"))
    assert not sensitive_matmul(_name(3, "attention/output/dense"))


def test_mixed_form_is_tried_after_int8_and_before_float16() -> None:
    sketch_forms = [sketch for sketch, _ in COMBINATIONS]
    assert sketch_forms.index("int8") < sketch_forms.index("int8 mixed")
    assert sketch_forms.index("int8 mixed") < sketch_forms.index("float16 weights")


def test_shipped_sketch_model_records_its_float32_matmuls() -> None:
    entry = runtime.read_manifest(runtime.SHIPPED_MODELS_DIR)["models"][SKETCH_MODEL]
    kept = entry["quantization"].get("float32_matmuls", [])
    if entry["shipped_form"] != "int8 mixed":
        assert not [name for name in kept if "/encoder/" in name]
        return
    assert all("_head/" in name or sensitive_matmul(name) for name in kept)
    for layer in range(6):
        assert _name(layer, "output/dense") in kept
