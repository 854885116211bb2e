"""Which MatMuls the exporter's `int8 first layer float32` and `int8 mixed` forms keep in float32,
and that the shipped sketch model's manifest records exactly those (the heads and the form's own)
when it ships in one of them."""

from __future__ import annotations

from model_export.export_sketch import COMBINATIONS, first_layer_matmul, sensitive_matmul
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


def test_first_layer_form_keeps_the_first_layer_only() -> None:
    kept = {
        (layer, w) for layer in range(6) for w in WEIGHTS if first_layer_matmul(_name(layer, w))
    }
    assert kept == {(0, w) for w in WEIGHTS}
    assert not first_layer_matmul(_name(10, "attention/self/query"))
    assert not first_layer_matmul("/column_head/layers/layers.0/MatMul")


def test_forms_are_tried_from_the_most_int8_to_float16() -> None:
    sketch_forms = [sketch for sketch, _ in COMBINATIONS]
    assert sketch_forms.index("int8") < sketch_forms.index("int8 first layer float32")
    assert sketch_forms.index("int8 first layer float32") < sketch_forms.index("int8 mixed")
    assert sketch_forms.index("int8 mixed") < sketch_forms.index("float16 weights")


def test_shipped_sketch_model_records_its_float32_matmuls() -> None:
    entry = runtime.read_manifest(runtime.SHIPPED_MODELS_DIR)["models"][SKETCH_MODEL]
    kept = entry["quantization"].get("float32_matmuls", [])
    own = {"int8 first layer float32": first_layer_matmul, "int8 mixed": sensitive_matmul}
    if entry["shipped_form"] not in own:
        assert not [name for name in kept if "/encoder/" in name]
        return
    in_float32 = own[entry["shipped_form"]]
    assert all("_head/" in name or in_float32(name) for name in kept)
    for weight in WEIGHTS:
        assert _name(0, weight) in kept
    if entry["shipped_form"] == "int8 mixed":
        for layer in range(6):
            assert _name(layer, "output/dense") in kept
