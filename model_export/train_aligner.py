"""Train the question-aware aligner: `python -m model_export.train_aligner`.

As in ZeroNL2SQL (§4.2): the trained sketch model (`<sketch-workdir>/model.pt`, from
`python -m model_export.train_sketch`) proposes its top K1 = 4 SELECT sets and top K3 = 2 keyword
sets for every Spider train question; each of the K1 x K3 combinations becomes a training pair,
labelled 1 iff both its SELECT and its KEYWORDS are right. Where the right combination is not
among them it is added, so that every question has one positive. The pairs are written once to
`<workdir>/pairs.json` and reused when training resumes.

The aligner is a MiniLM cross-encoder (the first `--layers` layers of all-MiniLM-L6-v2, mean
pooling, one logit), trained with binary cross-entropy through the shared checkpointed loop
(`training.Loop`). After each epoch it is measured on Spider dev: top-1 SELECT and KEYWORDS of
the sketch model alone and after re-ranking by the aligner.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model_export.train_sketch import (
    DEFAULT_WORKDIR as SKETCH_WORKDIR,
)
from model_export.train_sketch import (
    SPIDER,
    Example,
    predict,
    read_examples,
    reads_values,
    tokenizer_path,
    window_length,
)
from model_export.training import add_hardware_arguments, use_bf16, write_run_config
from proxy.nl2sql.aligner import MAX_LENGTH, pair_text
from proxy.nl2sql.encoding import WindowEncoder
from proxy.nl2sql.schema import load_spider_schemas
from proxy.nl2sql.sketch import SketchScores, keyword_candidates, select_candidates
from proxy.runtime import load_tokenizer, pad_encodings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = ROOT / "build" / "aligner"
K_SELECT = 4
K_KEYWORDS = 2

Pair = dict[str, Any]


def candidate_pairs(
    example: Example,
    scores: SketchScores,
    *,
    add_gold: bool,
    select_k: int = K_SELECT,
    max_pairs: int = 0,
) -> list[Pair]:
    """The `select_k` x K3 combinations of one question (with `max_pairs`, only that many, the
    most probable under the sketch model), each with its texts, its sketch log-probability and
    its label."""
    pairs = []
    selects = select_candidates(scores, select_k)
    keywords = keyword_candidates(scores, K_KEYWORDS)
    combos = [(s, sp, k, kp) for s, sp in selects for k, kp in keywords]
    if max_pairs:
        combos = sorted(combos, key=lambda c: -(c[1] + c[3]))[:max_pairs]
    gold = (example.label.select, example.label.keywords)
    if add_gold and not any((s, k) == gold for s, _, k, _ in combos):
        combos.append((gold[0], 0.0, gold[1], 0.0))
    for select, select_logp, chosen, keywords_logp in combos:
        first, second = pair_text(example.question, select, chosen, example.schema)
        pairs.append(
            {
                "first": first,
                "second": second,
                "sketch_logp": select_logp + keywords_logp,
                "select_right": select == example.label.select,
                "keywords_right": chosen == example.label.keywords,
            }
        )
    return pairs


def make_pairs(
    examples: Sequence[Example],
    sketch_model: Any,
    *,
    add_gold: bool,
    batch_size: int = 32,
    select_k: int = K_SELECT,
    max_pairs: int = 0,
) -> list[list[Pair]]:
    started = time.monotonic()
    scores = predict(sketch_model, examples, batch_size)
    print(
        f"sketch model ran over {len(examples)} questions in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return [
        candidate_pairs(e, s, add_gold=add_gold, select_k=select_k, max_pairs=max_pairs)
        for e, s in zip(examples, scores, strict=True)
    ]


def load_sketch_model(workdir: Path) -> Any:
    import torch

    from model_export.sketch_model import SketchModel, load_encoder

    model = SketchModel(load_encoder())
    model.load_state_dict(torch.load(workdir / "model.pt", weights_only=True, map_location="cpu"))
    model.eval()
    return model


def truncated_encoder(layers: int) -> Any:
    """all-MiniLM-L6-v2 keeping only its first `layers` transformer layers."""
    from model_export.sketch_model import load_encoder

    encoder = load_encoder()
    encoder.encoder.layer = encoder.encoder.layer[:layers]
    encoder.config.num_hidden_layers = layers
    return encoder


def aligner_model(layers: int) -> Any:
    import torch
    from torch import nn

    from model_export.sketch_model import Head

    class AlignerModel(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = truncated_encoder(layers)
            width = int(self.encoder.config.hidden_size)
            self.head = Head(width, width, 1)

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            logits: torch.Tensor = self.head(pooled).squeeze(-1)
            return logits

    return AlignerModel()


class PairTensors:
    """Tokenized pairs, padded per batch (to a multiple of 16 tokens: fewer distinct shapes)."""

    def __init__(self, tokenizer: Any, pairs: Sequence[Pair]) -> None:
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_LENGTH)
        self.encodings = tokenizer.encode_batch([(p["first"], p["second"]) for p in pairs])
        self.labels = np.array(
            [float(p["select_right"] and p["keywords_right"]) for p in pairs], dtype=np.float32
        )

    def length(self, row: int) -> int:
        return len(self.encodings[row].ids)

    def batch(self, rows: Sequence[int], device: Any = "cpu") -> dict[str, Any]:
        import torch

        width = (max(self.length(r) for r in rows) + 15) // 16 * 16
        arrays = pad_encodings([self.encodings[r] for r in rows], width)
        names = ("input_ids", "attention_mask", "token_type_ids")
        return {
            name: torch.from_numpy(array).to(device)
            for name, array in zip(names, arrays, strict=True)
        }


def aligner_logits(model: Any, tensors: PairTensors, batch_size: int = 128) -> np.ndarray[Any, Any]:
    import torch

    model.eval()
    device = next(model.parameters()).device
    out = np.zeros(len(tensors.encodings), dtype=np.float32)
    order = sorted(range(len(tensors.encodings)), key=tensors.length)
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            out[rows] = model(**tensors.batch(rows, device)).float().cpu().numpy()
    return out


def rerank_accuracy(
    questions: Sequence[list[Pair]], logits: np.ndarray[Any, Any]
) -> dict[str, float]:
    """Top-1 SELECT / KEYWORDS (%) by sketch probability alone, by the aligner alone, and by the
    two combined (aligner log-odds + sketch log-probability)."""
    rankings: dict[str, Callable[[Pair, float], float]] = {
        "sketch": lambda p, a: float(p["sketch_logp"]),
        "aligner": lambda p, a: a,
        "combined": lambda p, a: a + float(p["sketch_logp"]),
    }
    result: dict[str, float] = {}
    offset = 0
    totals = {name: [0, 0] for name in rankings}
    for pairs in questions:
        scores = logits[offset : offset + len(pairs)]
        offset += len(pairs)
        for name, key in rankings.items():
            best = max(range(len(pairs)), key=lambda i: key(pairs[i], float(scores[i])))
            totals[name][0] += pairs[best]["select_right"]
            totals[name][1] += pairs[best]["keywords_right"]
    for name, (select, keywords) in totals.items():
        result[f"{name}_select"] = round(100.0 * select / max(len(questions), 1), 1)
        result[f"{name}_keywords"] = round(100.0 * keywords / max(len(questions), 1), 1)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spider", type=Path, default=SPIDER, help="default: %(default)s")
    parser.add_argument(
        "--sketch-workdir",
        type=Path,
        default=SKETCH_WORKDIR,
        help="the trained sketch model (default: %(default)s)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=DEFAULT_WORKDIR, help="default: %(default)s"
    )
    parser.add_argument(
        "--layers", type=int, default=4, help="MiniLM layers kept (default: %(default)s of 6)"
    )
    parser.add_argument("--epochs", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--batch-size", type=int, default=32, help="default: %(default)s")
    parser.add_argument("--lr", type=float, default=5e-5, help="default: %(default)s")
    parser.add_argument("--head-lr", type=float, default=5e-4, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=7, help="default: %(default)s")
    parser.add_argument("--threads", type=int, default=0, help="torch threads, 0 = one a core")
    parser.add_argument("--checkpoint-every", type=int, default=200, help="default: %(default)s")
    parser.add_argument("--limit", type=int, default=0, help="first N questions only (a smoke run)")
    parser.add_argument(
        "--select-k",
        type=int,
        default=K_SELECT,
        help="SELECT sets of the sketch model each train question's pairs are made of, as "
        "`[sketch] select_pool` ranks them at inference (default: %(default)s)",
    )
    parser.add_argument(
        "--max-pairs",
        type=int,
        default=0,
        help="at most this many pairs a train question, the sketch model's most probable, the "
        "right one added (default: 0, all)",
    )
    parser.add_argument(
        "--init",
        type=Path,
        default=None,
        help="start from these aligner weights (a model.pt: the shipped aligner's from `python "
        "-m model_export.restore_weights`) instead of all-MiniLM-L6-v2 with a new head",
    )
    add_hardware_arguments(parser)
    args = parser.parse_args(argv)
    if args.select_k < 1 or args.max_pairs < 0:
        parser.error("--select-k must be at least 1 and --max-pairs at least 0")

    import torch

    from model_export.training import Loop, choose_device, length_batches

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    device = choose_device(args.device)
    bf16 = use_bf16(args.precision, device)
    args.workdir.mkdir(parents=True, exist_ok=True)
    pairs_path = args.workdir / "pairs.json"
    if pairs_path.exists():
        cached = json.loads(pairs_path.read_text(encoding="utf-8"))
        train_pairs, dev_pairs = cached["train"], cached["dev"]
    else:
        schemas = load_spider_schemas(args.spider / "tables.json")
        # the sketch model sees what it was trained on: its window length, the question's values
        # if it reads them
        encoder = WindowEncoder(
            load_tokenizer(tokenizer_path(), 512), window_length(args.sketch_workdir)
        )
        values = reads_values(args.sketch_workdir)
        train, _ = read_examples(
            args.spider / "train.json", schemas, encoder, args.limit, values=values
        )
        dev, _ = read_examples(
            args.spider / "dev.json", schemas, encoder, args.limit, values=values
        )
        sketch_model = load_sketch_model(args.sketch_workdir).to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            train_pairs = make_pairs(
                train,
                sketch_model,
                add_gold=True,
                select_k=args.select_k,
                max_pairs=args.max_pairs,
            )
            dev_pairs = make_pairs(dev, sketch_model, add_gold=False)
        pairs_path.write_text(
            json.dumps({"train": train_pairs, "dev": dev_pairs}), encoding="utf-8"
        )
    flat_train = [p for pairs in train_pairs for p in pairs]
    flat_dev = [p for pairs in dev_pairs for p in pairs]
    positives = sum(p["select_right"] and p["keywords_right"] for p in flat_train)
    print(
        f"aligner pairs: train {len(flat_train)} ({positives} right), dev {len(flat_dev)}",
        file=sys.stderr,
    )
    tokenizer = load_tokenizer(tokenizer_path(), MAX_LENGTH)
    train_tensors = PairTensors(tokenizer, flat_train)
    dev_tensors = PairTensors(tokenizer, flat_dev)
    model = aligner_model(args.layers)
    if args.init is not None:
        model.load_state_dict(torch.load(args.init, weights_only=True, map_location="cpu"))
        print(f"starting from the weights in {args.init}", file=sys.stderr)
    model = model.to(device)
    model.encoder.embeddings.word_embeddings.weight.requires_grad = False
    named = list(model.named_parameters())
    body = [p for n, p in named if n.startswith("encoder.") and p.requires_grad]
    heads = [p for n, p in named if not n.startswith("encoder.")]
    loss_fn = torch.nn.functional.binary_cross_entropy_with_logits

    def plan(epoch: int) -> list[list[int]]:
        return length_batches(
            range(len(flat_train)),
            train_tensors.length,
            args.batch_size,
            args.seed * 1000 + epoch,
        )

    def step_loss(rows: list[int]) -> Any:
        logits = model(**train_tensors.batch(rows, device)).float()
        return loss_fn(logits, torch.from_numpy(train_tensors.labels[rows]).to(device))

    Loop(
        model=model,
        parameter_groups=[{"params": body, "lr": args.lr}, {"params": heads, "lr": args.head_lr}],
        epochs=args.epochs,
        plan=plan,
        step_loss=step_loss,
        evaluate=lambda: {"dev": rerank_accuracy(dev_pairs, aligner_logits(model, dev_tensors))},
        workdir=args.workdir,
        checkpoint_every=args.checkpoint_every,
        items_per_batch=args.batch_size,
        bf16=bf16,
        device=device,
    ).run()
    settings = {"layers": args.layers, **{k: str(v) for k, v in vars(args).items()}}
    write_run_config(args.workdir, settings, args.init)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
