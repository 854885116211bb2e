"""Rebuild the trained PyTorch weights from the shipped ONNX models:
`python -m model_export.restore_weights`.

Training writes `build/sketch_model/model.pt` and `build/aligner/model.pt`, but `build/` is not
shipped: a fresh checkout has only the ONNX models in `proxy/models/`. This reads them back into
the PyTorch modules `train_sketch` and `train_aligner` define, so that on a fresh checkout

- `python -m model_export.export_sketch` can make the fp32 and int8 forms again (the
  benchmark's side-by-side rows: `python -m benchmarks.sketch_accuracy`), and
- a training run can start from the shipped weights instead of the base model.

Every weight of each module must be found in the ONNX graph, or nothing is written. The weights
are read as shipped: float16 weights widened to float32 (exact), int8 weights dequantized
(`(q - zero_point) * scale`, per output channel): so a model shipped in int8 comes back as the
int8 model's weights in float32, not as the float32 weights it was quantized from. Which file and
form each model was read from is written to `<workdir>/restored.json` beside `model.pt`, with the
training history and settings copied from the manifest; the exporter records all three in the
manifest again (`restored_from`), so a model exported from restored weights says so.

The largest logit difference between the restored PyTorch model and the shipped ONNX model, on
dev windows, is printed for each model: float16 weights compute in float32 on both sides (small
differences from onnxruntime's fused kernels); an int8 model's activations are quantized by
onnxruntime and not by PyTorch, so its difference is larger.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model_export.evaluate_sketch import dev_questions
from model_export.train_aligner import DEFAULT_WORKDIR as ALIGNER_WORKDIR
from model_export.train_sketch import DEFAULT_WORKDIR as SKETCH_WORKDIR
from proxy.config import RuntimeSettings, SketchSettings
from proxy.nl2sql.sketcher import ALIGNER_MODEL, SKETCH_MODEL, load_sketcher
from proxy.runtime import SHIPPED_MODELS_DIR, read_manifest

Arrays = dict[str, np.ndarray[Any, Any]]

UNUSED = ("encoder.pooler.",)
"""Parameters the models never compute with (MiniLM's pooler: its output is not read), which the
export leaves out; they keep the base model's weights, as training left them."""

_ATTENTION = re.compile(r"Attention_(\d+)_qkv_(weight|bias)")


class RestoreError(Exception):
    """The ONNX graph does not hold every weight of the module."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _initializers(graph: Any) -> Arrays:
    """Every initializer as float32 (float16 widened, int8/uint8 dequantized per channel), under
    the name the graph's float32 computation uses it by (`x_fp16` cast to `x`, `x_quantized` with
    `x_scale` and `x_zero_point` read as `x`)."""
    from onnx import numpy_helper

    raw = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    values: Arrays = {}
    for name, array in raw.items():
        if name.endswith("_quantized"):
            base = name.removesuffix("_quantized")
            scale = raw[f"{base}_scale"].astype(np.float32)
            zero = raw[f"{base}_zero_point"].astype(np.float32)
            values[base] = (array.astype(np.float32) - zero) * scale
        elif not name.endswith(("_scale", "_zero_point")):
            values[name] = array.astype(np.float32) if array.dtype == np.float16 else array
    for node in graph.node:  # a float16 weight is cast to float32 under its own name
        if node.op_type == "Cast" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]].astype(np.float32)
    return values


def _module_path(output: str) -> str:
    """`/column_head/layers/layers.0/MatMul_output_0` -> `column_head.layers.0`: the module a
    node's output name was traced in (a Sequential's child repeats its parent's name)."""
    parts = output.strip("/").split("/")[:-1]
    kept: list[str] = []
    for part in parts:
        if kept and part.startswith(kept[-1] + "."):
            kept.pop()
        kept.append(part)
    return ".".join(kept)


def onnx_weights(path: Path) -> Arrays:
    """The PyTorch state-dict entries an exported graph holds, by their PyTorch names: named
    initializers as they are, MatMul weights under the module they were traced in and a
    quantized Gemm's `<name>_Transposed` weight under `<name>` (both transposed back), the fused
    attention's packed query/key/value split again."""
    import onnx

    graph = onnx.load(str(path)).graph
    values = _initializers(graph)
    weights: Arrays = {name: array for name, array in values.items() if "." in name}
    for name, array in values.items():  # a Gemm's weight, transposed before it was quantized
        if name.endswith(".weight_Transposed"):
            weights[name.removesuffix("_Transposed")] = np.ascontiguousarray(array.T)
    for node in graph.node:
        operand = node.input[1].removesuffix("_quantized") if len(node.input) > 1 else ""
        if node.op_type in ("MatMul", "MatMulInteger") and operand in values:
            weight = values[operand]
            weights[f"{_module_path(node.output[0])}.weight"] = np.ascontiguousarray(weight.T)
        for name in node.input:
            match = _ATTENTION.fullmatch(name)
            if match is None:
                continue
            layer, kind = match.groups()
            packed = values[name]
            for part, chunk in zip(
                ("query", "key", "value"), np.split(packed, 3, axis=-1), strict=True
            ):
                key = f"encoder.encoder.layer.{layer}.attention.self.{part}.{kind}"
                weights[key] = np.ascontiguousarray(chunk.T if kind == "weight" else chunk)
    return weights


def restore(module: Any, path: Path) -> list[str]:
    """Load `path`'s weights into `module` (every parameter must be found, with its shape);
    returns the names of the module's state entries left as they were (the `UNUSED`
    parameters, and any buffer the graph does not hold)."""
    import torch

    weights = onnx_weights(path)
    state = module.state_dict()
    parameters = {name for name, _ in module.named_parameters()}
    missing = sorted(
        name for name in parameters if name not in weights and not name.startswith(UNUSED)
    )
    if missing:
        raise RestoreError(
            f"{path}: no weight for {', '.join(missing[:5])} ({len(missing)} in all)"
        )
    loaded = {}
    for name, tensor in state.items():
        if name not in weights:
            continue
        array = weights[name]
        if tuple(array.shape) != tuple(tensor.shape):
            raise RestoreError(
                f"{path}: {name} is {tuple(array.shape)} in the graph, {tuple(tensor.shape)} "
                "in the module"
            )
        loaded[name] = torch.from_numpy(np.array(array, dtype=np.float32))
    module.load_state_dict(loaded, strict=False)
    return sorted(name for name in state if name not in loaded)


def largest_differences(
    sketch: Any, aligner: Any, models_dir: Path, limit: int
) -> tuple[float, float]:
    """The largest logit difference, the PyTorch models against the ONNX models of `models_dir`,
    over the first `limit` dev questions, both run through the same `Sketcher` code: the sketch
    model's merged logits, and the aligner's over the SELECT x KEYWORDS pairs (where both
    proposed the same pairs; the aligner reads every pair, `[sketch] align_within` = inf)."""
    from model_export.sketch_model import sketcher_of

    every = SketchSettings(align_within=float("inf"))
    shipped = load_sketcher(RuntimeSettings(models_dir=str(models_dir)), every)
    restored = sketcher_of(
        sketch, aligner, models_dir / SKETCH_MODEL / "tokenizer.json", settings=every
    )
    sketch_worst, aligner_worst = 0.0, 0.0
    for item in dev_questions(limit=limit):
        theirs = shipped.hypotheses(item.question, item.schema)
        ours = restored.hypotheses(item.question, item.schema)
        for name in ("column_logits", "table_logits", "question_logits"):
            difference = np.abs(getattr(ours.scores, name) - getattr(theirs.scores, name))
            sketch_worst = max(sketch_worst, float(np.max(difference, initial=0.0)))
        same_pairs = [s for s, _ in ours.selects] == [s for s, _ in theirs.selects] and [
            k for k, _ in ours.keywords
        ] == [k for k, _ in theirs.keywords]
        if same_pairs and ours.aligned is not None and theirs.aligned is not None:
            difference = np.abs(ours.aligned - theirs.aligned)
            aligner_worst = max(aligner_worst, float(np.max(difference, initial=0.0)))
    return sketch_worst, aligner_worst


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models-dir",
        type=Path,
        default=SHIPPED_MODELS_DIR,
        help="shipped models (default: %(default)s)",
    )
    parser.add_argument(
        "--sketch-workdir", type=Path, default=SKETCH_WORKDIR, help="default: %(default)s"
    )
    parser.add_argument(
        "--aligner-workdir", type=Path, default=ALIGNER_WORKDIR, help="default: %(default)s"
    )
    parser.add_argument(
        "--check-questions",
        type=int,
        default=50,
        help="dev questions the restored models are compared on (default: %(default)s; 0: none)",
    )
    args = parser.parse_args(argv)
    import torch

    from model_export.sketch_model import SketchModel, load_encoder
    from model_export.train_aligner import aligner_model

    entries = read_manifest(args.models_dir)["models"]
    aligner_entry = entries[ALIGNER_MODEL]
    sketch = SketchModel(load_encoder())
    aligner = aligner_model(int(aligner_entry["layers"]))
    restored: list[tuple[str, Any, Path]] = [
        (SKETCH_MODEL, sketch, args.sketch_workdir),
        (ALIGNER_MODEL, aligner, args.aligner_workdir),
    ]
    for name, module, _ in restored:
        path = args.models_dir / entries[name]["folder"] / "model.onnx"
        try:
            kept = restore(module, path)
        except RestoreError as exc:
            say(f"cannot restore the {name} model: {exc}")
            return 1
        module.eval()
        say(f"{name}: weights read from {path} ({entries[name]['shipped_form']}); kept {kept}")
    if args.check_questions:
        sketch_worst, aligner_worst = largest_differences(
            sketch, aligner, args.models_dir, args.check_questions
        )
        say(
            f"largest logit difference to the shipped models on {args.check_questions} dev "
            f"questions: sketch model {sketch_worst:.2e}, aligner {aligner_worst:.2e}"
        )
    for name, module, workdir in restored:
        entry = entries[name]
        workdir.mkdir(parents=True, exist_ok=True)
        torch.save(module.state_dict(), workdir / "model.pt")
        training = entry.get("training", {})
        (workdir / "history.json").write_text(
            json.dumps(training.get("history", []), indent=2) + "\n", encoding="utf-8"
        )
        if "config" in training:
            (workdir / "config.json").write_text(
                json.dumps(training["config"], indent=2), encoding="utf-8"
            )
        elif name == ALIGNER_MODEL:
            (workdir / "config.json").write_text(
                json.dumps({"layers": str(entry["layers"])}, indent=2), encoding="utf-8"
            )
        (workdir / "restored.json").write_text(
            json.dumps(
                {
                    "from": str(args.models_dir / entry["folder"] / "model.onnx"),
                    "sha256": entry["files"]["model.onnx"]["sha256"],
                    "form": entry["shipped_form"],
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        say(f"wrote {workdir / 'model.pt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
