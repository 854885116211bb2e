"""Train the sketch model on Spider train: `python -m model_export.train_sketch`.

Reads Spider from $PGNL_SPIDER_DIR (Spider's folder: train.json, dev.json, tables.json;
`model_export.spider`), labels every gold query (`sketch_labels`), serializes each schema into
windows beside its question (`proxy.nl2sql.encoding`) and fine-tunes all-MiniLM-L6-v2 with the
sketch heads (`sketch_model`), multi-task binary cross-entropy, AdamW with linear warm-up and
decay, bf16 autocast where the CPU computes bf16 natively (`--precision`; fp32 elsewhere;
docs/models.md has how long an epoch takes). The word embeddings stay frozen (they are the base
model's, and training them on 7000 questions only overfits).

Long runs survive interruption: every `--checkpoint-every` steps the model, optimizer and
position are written to `<workdir>/checkpoint.pt` (atomically); started again with the same
arguments, training resumes from there with the same batches. After each epoch the model is
evaluated on Spider dev (top-1 exact-set accuracy of SELECT, FROM and KEYWORDS, no aligner) and the
figures are appended to `<workdir>/history.json`. The trained weights are `<workdir>/model.pt`,
which `python -m model_export.export_sketch` exports to ONNX.

`--init` starts from trained weights instead of the base model: on a fresh checkout,
`python -m model_export.restore_weights` writes the shipped model's to
`build/sketch_model/model.pt`, and `--init build/sketch_model/model.pt --workdir <another>`
trains it further (a new schedule: warm-up and decay over the new run's epochs).

`--values` shows the model, beside each column, the values of it the question names (read from
each Spider database's SQLite file under the value index's rules; `encoding.value_marks`); the
exported model is then given them at inference (manifest.json's `reads_values`).

`--shuffle-schemas P` shows each training question, with probability P and a new order every
epoch, its schema with tables and columns shuffled and numbered anew (`schema_order`), so that the
model reads items by name rather than by where Spider's authors put them; dev is read as it is.

`--recipe` runs the stages the shipped model was trained in (`SHIPPED_RECIPE`), each a run as
above from the previous stage's weights, in `<workdir>/stage-N/`: `python -m
model_export.train_sketch --recipe` is the one command that reproduces it. A finished stage (its
`model.pt` is there) is kept, an interrupted one resumes from its checkpoint; at the end the last
stage's weights are `<workdir>/model.pt` and `<workdir>/history.json` has every stage's epochs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from model_export.spider import spider_dir
from model_export.training import (
    add_hardware_arguments,
    progress,
    use_bf16,
    write_run_config,
)
from proxy.nl2sql.encoding import (
    MAX_LENGTH,
    EncodedWindow,
    WindowEncoder,
    batch,
    value_marks,
)
from proxy.nl2sql.schema import Schema, load_spider_schemas
from proxy.nl2sql.serialize import Marks
from proxy.nl2sql.sketch import (
    COLUMN_OUTPUTS,
    QUESTION_OUTPUTS,
    Sketch,
    SketchScores,
    from_candidates,
    keyword_candidates,
    merge_windows,
    select_candidates,
)
from proxy.nl2sql.value_evidence import ColumnValues, NamedValues
from proxy.runtime import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
SPIDER = spider_dir()
DEFAULT_WORKDIR = ROOT / "build" / "sketch_model"
RECIPE_COMMAND = "python -m model_export.train_sketch --recipe"


@dataclass(frozen=True)
class Stage:
    """One run of a recipe: from the previous stage's weights (the first stage: from
    all-MiniLM-L6-v2 with new heads), with its own warm-up and decay over `epochs`."""

    epochs: int
    lr: float
    head_lr: float
    seed: int
    values: bool = False
    """Whether the stage shows the model the values each question names (`--values`)."""
    max_length: int = MAX_LENGTH
    """The tokens of a window (`--max-length`)."""


# The shipped sketch model: 3 epochs from the base model, then three further runs at a lower
# learning rate (1, 1 and 3 epochs), each of which raised the model's own dev top-1 SELECT, then
# one epoch that shows it the values each question names (the shipped one started from the
# fourth stage's int8 weights, restored; its effect: docs/measurements.md).
SHIPPED_RECIPE = (
    Stage(epochs=3, lr=8e-5, head_lr=1e-3, seed=7),
    Stage(epochs=1, lr=3e-5, head_lr=3e-4, seed=8),
    Stage(epochs=1, lr=3e-5, head_lr=3e-4, seed=9),
    Stage(epochs=3, lr=3e-5, head_lr=3e-4, seed=10),
    Stage(epochs=1, lr=2e-5, head_lr=2e-4, seed=11, values=True),
)


@dataclass(frozen=True)
class Example:
    question: str
    schema: Schema
    label: Sketch
    windows: tuple[EncodedWindow, ...]
    marks: Marks = ()
    """The values shown beside their columns (`--values`), kept to encode the question anew
    (`schema_order`)."""


def read_examples(
    path: Path,
    schemas: dict[str, Schema],
    encoder: WindowEncoder,
    limit: int = 0,
    *,
    values: bool = False,
) -> tuple[list[Example], dict[str, int]]:
    """Labelled, encoded examples of a Spider file, and the count of gold queries not labelled by
    reason. With `values`, each column is shown with the values of it the question names
    (`encoding.value_marks`), read from the database's SQLite file beside `path` as the value
    index would hold them (`evaluate_sketch.spider_values`)."""
    from model_export.evaluate_sketch import spider_values
    from model_export.sketch_labels import label_examples

    raw: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    if limit:
        raw = raw[:limit]
    labels, skipped = label_examples(raw, schemas)
    examples = []
    contents: dict[str, ColumnValues | None] = {}
    for number, (entry, label) in enumerate(zip(raw, labels, strict=True), 1):
        if label is None:
            continue
        schema = schemas[entry["db_id"]]
        marks: Marks = ()
        if values:
            if schema.name not in contents:
                read = spider_values(path.parent, schema)
                contents[schema.name] = None if read is None else ColumnValues.of(read)
            held = contents[schema.name]
            if held is not None:
                marks = value_marks(NamedValues.spoken(entry["question"], schema, held).columns)
            if number % 500 == 0:
                progress(f"  {path.name}: {number}/{len(raw)} questions with their values")
        windows = tuple(encoder.encode(entry["question"], schema, marks))
        examples.append(Example(entry["question"], schema, label, windows, marks))
    return examples, dict(skipped)


def reads_values(workdir: Path) -> bool:
    """Whether the weights in `workdir` were trained with `--values` (as its config.json, or
    that of the run restored into it, records)."""
    path = workdir / "config.json"
    if not path.exists():
        return False
    return bool(json.loads(path.read_text(encoding="utf-8")).get("values") == "True")


def window_length(workdir: Path) -> int:
    """The tokens a window took when the weights in `workdir` were trained (`--max-length`, as
    its config.json, or that of the run restored into it, records; runs from before the option
    were trained at `encoding.MAX_LENGTH`)."""
    path = workdir / "config.json"
    if not path.exists():
        return MAX_LENGTH
    return int(json.loads(path.read_text(encoding="utf-8")).get("max_length", MAX_LENGTH))


def tokenizer_path() -> Path:
    from model_export.sketch_model import base_model_dir

    return base_model_dir() / "tokenizer.json"


def scores_of(
    example: Example, outputs: Sequence[tuple[np.ndarray[Any, Any], ...]]
) -> SketchScores:
    """Merge the model outputs of an example's windows — (column, table, question) logits of
    each window, in window order, padding rows allowed — into one SketchScores."""
    return merge_windows(
        example.schema,
        window_columns=[w.window.columns for w in example.windows],
        window_tables=[w.window.tables for w in example.windows],
        column_logits=[o[0] for o in outputs],
        table_logits=[o[1] for o in outputs],
        question_logits=[o[2] for o in outputs],
    )


def top1_accuracy(examples: Sequence[Example], scores: Sequence[SketchScores]) -> dict[str, float]:
    """Exact-set match of the most probable SELECT, FROM and KEYWORDS, in %."""
    hits = {"select": 0, "from": 0, "keywords": 0}
    for example, score in zip(examples, scores, strict=True):
        hits["select"] += select_candidates(score, 1)[0][0] == example.label.select
        hits["from"] += from_candidates(score, 1)[0][0] == example.label.tables
        keywords = keyword_candidates(score, 1)
        hits["keywords"] += bool(keywords) and keywords[0][0] == example.label.keywords
    return {part: round(100.0 * count / max(len(examples), 1), 1) for part, count in hits.items()}


def batch_plan(
    examples: Sequence[Example], epoch: int, seed: int, size: int
) -> list[list[tuple[int, int]]]:
    """An epoch's batches of (example, window) pairs (`training.length_batches`)."""
    from model_export.training import length_batches

    items = [(e, w) for e, example in enumerate(examples) for w in range(len(example.windows))]
    return length_batches(
        items, lambda i: examples[i[0]].windows[i[1]].length, size, seed * 1000 + epoch
    )


def reordered(
    examples: Sequence[Example], encoder: WindowEncoder, fraction: float, seed: int, epoch: int
) -> list[Example]:
    """`examples` for one epoch of `--shuffle-schemas`: each, with probability `fraction`, with
    its schema shown in a random order (`schema_order.reordered_windows`; a schema that does not
    fit in one window is kept as it is). The same for the same seed and epoch."""
    import random

    from model_export.schema_order import reordered_windows

    rng = random.Random(seed * 1000 + epoch)
    result = []
    for example in examples:
        windows = None
        if len(example.windows) == 1 and rng.random() < fraction:
            windows = reordered_windows(
                encoder, example.question, example.schema, example.marks, rng
            )
        result.append(example if windows is None else replace(example, windows=windows))
    return result


def batch_loss(model: Any, examples: Sequence[Example], items: Sequence[tuple[int, int]]) -> Any:
    """The loss of one batch. Shapes are padded to multiples (tokens 32, columns and tables 8),
    so that few distinct shapes reach the CPU kernels (each new shape costs memory in their
    caches)."""
    import torch

    from model_export.sketch_model import loss, targets, to_torch

    windows = [examples[e].windows[w] for e, w in items]
    arrays = batch(windows, token_multiple=32, item_multiple=8)
    n, columns = arrays.column_mask.shape
    tables = arrays.table_mask.shape[1]
    column_targets = np.zeros((n, columns, COLUMN_OUTPUTS), dtype=np.float32)
    table_targets = np.zeros((n, tables), dtype=np.float32)
    question_targets = np.zeros((n, QUESTION_OUTPUTS), dtype=np.float32)
    for row, ((e, _), window) in enumerate(zip(items, windows, strict=True)):
        c, t, q = targets(examples[e].label, window)
        column_targets[row, : len(c)] = c
        table_targets[row, : len(t)] = t
        question_targets[row] = q
    device = next(model.parameters()).device

    def tensor(array: np.ndarray[Any, Any]) -> Any:
        return torch.from_numpy(array).to(device)

    outputs = model(**to_torch(arrays, device))
    return loss(
        outputs,
        column_targets=tensor(column_targets),
        table_targets=tensor(table_targets),
        question_targets=tensor(question_targets),
        column_mask=tensor(arrays.column_mask),
        table_mask=tensor(arrays.table_mask),
    )


def train(args: argparse.Namespace, train: Sequence[Example], dev: Sequence[Example]) -> None:
    import torch

    from model_export.sketch_model import SketchModel, load_encoder
    from model_export.training import Loop, choose_device

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    device = choose_device(args.device)
    model = SketchModel(load_encoder())
    if args.init is not None:
        model.load_state_dict(torch.load(args.init, weights_only=True, map_location="cpu"))
        print(f"starting from the weights in {args.init}", file=sys.stderr)
    model = model.to(device)
    model.encoder.embeddings.word_embeddings.weight.requires_grad = False
    named = list(model.named_parameters())
    body = [p for n, p in named if n.startswith("encoder.") and p.requires_grad]
    heads = [p for n, p in named if not n.startswith("encoder.")]
    encoder = (
        WindowEncoder(load_tokenizer(tokenizer_path(), 512), args.max_length)
        if args.shuffle_schemas
        else None
    )

    @functools.lru_cache(maxsize=1)
    def epoch_examples(epoch: int) -> Sequence[Example]:
        if encoder is None:
            return train
        return reordered(train, encoder, args.shuffle_schemas, args.seed, epoch)

    planned = [0]  # the epoch whose batches are being trained

    def plan(epoch: int) -> list[list[tuple[int, int]]]:
        planned[0] = epoch
        return batch_plan(epoch_examples(epoch), epoch, args.seed, args.batch_size)

    Loop(
        model=model,
        parameter_groups=[{"params": body, "lr": args.lr}, {"params": heads, "lr": args.head_lr}],
        epochs=args.epochs,
        plan=plan,
        step_loss=lambda items: batch_loss(model, epoch_examples(planned[0]), items),
        evaluate=lambda: {"dev_top1": top1_accuracy(dev, predict(model, dev, args.batch_size * 2))},
        workdir=args.workdir,
        checkpoint_every=args.checkpoint_every,
        items_per_batch=args.batch_size,
        bf16=use_bf16(args.precision, device),
        device=device,
    ).run()
    write_run_config(args.workdir, {k: str(v) for k, v in vars(args).items()}, args.init)


def run_recipe(
    stages: Sequence[Stage],
    workdir: Path,
    train_stage: Callable[[Stage, Path, Path | None], None],
) -> list[dict[str, Any]]:
    """Train `stages` in turn, stage N in `<workdir>/stage-N/` by `train_stage(stage, its
    workdir, the previous stage's model.pt or None)`, skipping a stage whose model.pt is there;
    then copy the last stage's model.pt to `<workdir>/model.pt` and write every stage's epochs
    to `<workdir>/history.json`. Returns that history."""
    if not stages:
        raise ValueError("a recipe needs at least one stage")
    history: list[dict[str, Any]] = []
    previous: Path | None = None
    for number, stage in enumerate(stages, 1):
        stage_dir = workdir / f"stage-{number}"
        if (stage_dir / "model.pt").exists():
            print(
                f"stage {number}/{len(stages)}: trained before, kept ({stage_dir})", file=sys.stderr
            )
        else:
            print(f"stage {number}/{len(stages)}: {stage}", file=sys.stderr)
            train_stage(stage, stage_dir, previous)
        epochs = json.loads((stage_dir / "history.json").read_text(encoding="utf-8"))
        history.extend({"stage": number, **entry} for entry in epochs)
        previous = stage_dir / "model.pt"
    assert previous is not None
    shutil.copyfile(previous, workdir / "model.pt")
    (workdir / "history.json").write_text(json.dumps(history, indent=2) + "\n", encoding="utf-8")
    return history


def train_recipe(
    args: argparse.Namespace,
    stages: Sequence[Stage],
    read: Callable[[bool, int], tuple[Sequence[Example], Sequence[Example]]],
) -> None:
    """`--recipe`: `stages` as runs of `train`, and the recipe in `<workdir>/config.json`.
    `read(values, max_length)`: the train and dev examples, with or without the questions'
    values, in windows of `max_length` tokens."""

    def train_stage(stage: Stage, stage_dir: Path, init: Path | None) -> None:
        stage_args = argparse.Namespace(
            **{**vars(args), **asdict(stage), "init": init, "workdir": stage_dir, "recipe": False}
        )
        train(stage_args, *read(stage.values, stage.max_length))

    run_recipe(stages, args.workdir, train_stage)
    per_stage = {f.name for f in fields(Stage)}
    settings: dict[str, Any] = {k: str(v) for k, v in vars(args).items() if k not in per_stage}
    settings["command"] = RECIPE_COMMAND
    settings["stages"] = [asdict(stage) for stage in stages]
    # what the finished model reads (`reads_values`) and in what windows (`window_length`)
    settings["values"] = str(stages[-1].values)
    settings["max_length"] = str(stages[-1].max_length)
    (args.workdir / "config.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")


def predict(model: Any, examples: Sequence[Example], batch_size: int) -> list[SketchScores]:
    """The PyTorch model's merged scores for each example (eval mode, no gradients)."""
    import torch

    from model_export.sketch_model import to_torch

    model.eval()
    device = next(model.parameters()).device
    flat = [(e, w) for e, example in enumerate(examples) for w in range(len(example.windows))]
    flat.sort(key=lambda i: examples[i[0]].windows[i[1]].length)
    outputs: dict[tuple[int, int], tuple[np.ndarray[Any, Any], ...]] = {}
    with torch.no_grad():
        for start in range(0, len(flat), batch_size):
            items = flat[start : start + batch_size]
            arrays = batch([examples[e].windows[w] for e, w in items])
            column, table, question = (
                output.float().cpu().numpy() for output in model(**to_torch(arrays, device))
            )
            for row, item in enumerate(items):
                outputs[item] = (column[row], table[row], question[row])
            done = start + len(items)
            if done == len(flat) or (start // batch_size) % 20 == 0:
                progress(f"  scoring: {done}/{len(flat)} windows")
    sys.stderr.write("\n")
    result = []
    for e, example in enumerate(examples):
        result.append(scores_of(example, [outputs[(e, w)] for w in range(len(example.windows))]))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--spider", type=Path, default=SPIDER, help="Spider folder (default: %(default)s)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help="checkpoints and the trained model (default: %(default)s)",
    )
    parser.add_argument(
        "--init",
        type=Path,
        default=None,
        help="start from these weights (a model.pt, e.g. the shipped model's from "
        "`python -m model_export.restore_weights`) instead of all-MiniLM-L6-v2 with new heads",
    )
    parser.add_argument("--epochs", type=int, default=3, help="default: %(default)s")
    parser.add_argument("--batch-size", type=int, default=16, help="default: %(default)s")
    parser.add_argument(
        "--lr", type=float, default=8e-5, help="encoder learning rate (default: %(default)s)"
    )
    parser.add_argument(
        "--head-lr", type=float, default=1e-3, help="heads' learning rate (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=7, help="default: %(default)s")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads, 0 = one a core (default)"
    )
    parser.add_argument(
        "--checkpoint-every", type=int, default=100, help="steps (default: %(default)s)"
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=0,
        help="use only the first N train and dev examples (a smoke run)",
    )
    parser.add_argument(
        "--recipe",
        action="store_true",
        help="train the shipped model's stages (SHIPPED_RECIPE) in <workdir>/stage-N, each from "
        "the last; they set --epochs, --lr, --head-lr, --seed, --values and --max-length",
    )
    parser.add_argument(
        "--values",
        action="store_true",
        help="show the model, beside each column, the values of it the question names (read "
        "from Spider's SQLite files as the value index would hold them); a model trained so is "
        "exported with `reads_values` and given them at inference",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=MAX_LENGTH,
        help="tokens a window may take, question and schema together; a schema that does not "
        "fit is split into more windows (default: %(default)s; at most 512, the base model's "
        "positions)",
    )
    parser.add_argument(
        "--shuffle-schemas",
        type=float,
        default=0.0,
        metavar="P",
        help="show each training question, with probability P and anew every epoch, its schema "
        "with tables and columns in a random order (`schema_order`; default: %(default)s, never)",
    )
    add_hardware_arguments(parser)
    args = parser.parse_args(argv)
    if not 0.0 <= args.shuffle_schemas <= 1.0:
        parser.error("--shuffle-schemas is a probability: between 0 and 1")
    if not 128 <= args.max_length <= 512:
        parser.error("--max-length must be between 128 and 512")
    if args.recipe and args.init is not None:
        parser.error("--recipe starts from the base model: leave out --init")

    schemas = load_spider_schemas(args.spider / "tables.json")
    tokenizer = load_tokenizer(tokenizer_path(), 512)
    loaded: dict[tuple[bool, int], tuple[list[Example], list[Example]]] = {}

    def examples(values: bool, max_length: int) -> tuple[list[Example], list[Example]]:
        if (values, max_length) not in loaded:
            started = time.monotonic()
            encoder = WindowEncoder(tokenizer, max_length)
            train_examples, train_skipped = read_examples(
                args.spider / "train.json", schemas, encoder, args.limit, values=values
            )
            dev, dev_skipped = read_examples(
                args.spider / "dev.json", schemas, encoder, args.limit, values=values
            )
            windows = sum(len(e.windows) for e in train_examples)
            print(
                f"train: {len(train_examples)} labelled ({windows} windows), not labelled "
                f"{train_skipped}; dev: {len(dev)} labelled, not labelled {dev_skipped}"
                f"{', with their values' if values else ''}, windows of {max_length} tokens "
                f"({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
            )
            loaded[values, max_length] = (train_examples, dev)
        return loaded[values, max_length]

    if args.recipe:
        train_recipe(args, SHIPPED_RECIPE, examples)
    else:
        train(args, *examples(args.values, args.max_length))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
