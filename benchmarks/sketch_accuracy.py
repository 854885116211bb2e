"""The sketch stage, measured on Spider dev: accuracy as in ZeroNL2SQL's Table 4, and latency.

    python -m benchmarks.sketch_accuracy [--limit N] [--latency-questions 200] [--skip-accuracy]
        [--skip-latency] [--sketch-workdir build/<a train_sketch run> ...] [--ensemble]

1. Accuracy (`model_export.evaluate_sketch`): all 1034 dev questions (schemas from tables.json;
   a gold query the sketch cannot represent counts as a miss), exact-set match of SELECT, FROM and
   KEYWORDS, top-1 under each ranking of the SELECT x KEYWORDS pairs (aligner log-odds + sketch
   log-probability, pgnl's default; the aligner alone, the paper's; the sketch model alone, the
   ablation), and top-k under each (the gold part among the first K1 = 4 SELECT, K2 = 2 FROM and
   K3 = 2 KEYWORDS sets of the ranked sketches; and among the sketch model's own candidates,
   before the rules that repair them; and among its first 4 to 32 SELECT and 2 to 8 FROM and
   KEYWORDS candidates, the most any re-ranking of them could reach). The sketch stage reads
   the values the question names, as the pipeline gives it them from the value index: here
   from each dev database's SQLite file, read under the value index's rules
   (`evaluate_sketch.spider_values`; wta_1 has no file, its 62 questions go without); one more
   row ranks as the default does without them (the schema alone). For the shipped models (the
   form manifest.json names), for them with the aligner ranking only the paper's K1 SELECT sets
   (`[sketch] select_pool` = `select_k`, where it is wider), for them with the aligner reading
   every pair (`[sketch] align_within` = inf), and for the fp32 and int8 ONNX
   models, and the sketch model in int8 mixed (`export_sketch.sensitive_matmul`), when
   `build/onnx/` holds them (made by `python -m model_export.export_sketch`; on a fresh
   checkout, after `python -m model_export.restore_weights`). With `--sketch-workdir`, also for
   the sketch weights a `train_sketch` run left there (PyTorch, fp32) beside the shipped aligner:
   a trained model measured as the shipped one is, before it is exported. With `--ensemble`
   too, for the shipped sketch model's logits averaged with those of every `--sketch-workdir`
   (`MeanSketcher`): whether a mean of several models, which would cost one sketch model run
   each, would be more accurate than one.
2. Latency of one question (sketch model + aligner + decoding, `Sketcher.sketch`, given the
   values the question names as above): the first `--latency-questions` dev questions, each run
   once with the shipped models (and the narrower pool and every pair read, above), ONNX fp32,
   ONNX int8, int8 mixed and PyTorch eager (the trained checkpoints in `build/`, through the
   same `Sketcher` code), interleaved question by question so that the machine's noise falls on
   all alike; p50 and p95 and their ratios. What is not built (or torch, when missing) is
   skipped with a note.

Progress goes to stderr; the report (Markdown tables) to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from model_export.evaluate_sketch import PARTS, SCHEMA_ONLY, Question, accuracy, dev_questions
from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import SketchScores
from proxy.nl2sql.sketcher import SKETCH_MODEL, Sketcher, load_sketcher
from proxy.nl2sql.value_evidence import NamedValues
from proxy.runtime import read_manifest, resolve_models_dir

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
BUILT = {
    "ONNX fp32": (BUILD / "onnx" / "sketch.fp32.onnx", BUILD / "onnx" / "aligner.fp32.onnx"),
    "ONNX int8": (BUILD / "onnx" / "sketch.int8.onnx", BUILD / "onnx" / "aligner.int8.onnx"),
    # the sketch model's form shipped until 2026-12-03; the exporter writes it only when it gets
    # as far as trying that form
    "ONNX, sketch model int8 mixed, aligner int8": (
        BUILD / "onnx" / "sketch.int8_mixed.onnx",
        BUILD / "onnx" / "aligner.int8.onnx",
    ),
}

ROW_NAMES = {
    "combined": "aligner log-odds + sketch log-probability (default)",
    "aligner": "aligner alone (the paper's ranking)",
    "sketch": "sketch model alone (no aligner: ablation)",
    SCHEMA_ONLY: "default, without the database's values (schema only)",
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def torch_sketcher() -> Sketcher | None:
    """The trained PyTorch checkpoints behind a Sketcher, or None (with a note) without them."""
    try:
        import json

        import torch

        from model_export.sketch_model import sketcher_of
        from model_export.train_aligner import DEFAULT_WORKDIR, aligner_model, load_sketch_model
        from model_export.train_sketch import DEFAULT_WORKDIR as SKETCH_WORKDIR
        from model_export.train_sketch import reads_values, tokenizer_path, window_length
    except ImportError as exc:
        say(f"PyTorch eager skipped: {exc} (pip install -e '.[export]')")
        return None
    if not (SKETCH_WORKDIR / "model.pt").exists() or not (DEFAULT_WORKDIR / "model.pt").exists():
        say("PyTorch eager skipped: no trained checkpoints in build/ (train_sketch, train_aligner)")
        return None
    torch.set_num_threads(max(1, torch.get_num_threads()))
    config = json.loads((DEFAULT_WORKDIR / "config.json").read_text(encoding="utf-8"))
    aligner = aligner_model(int(config["layers"]))
    aligner.load_state_dict(torch.load(DEFAULT_WORKDIR / "model.pt", weights_only=True))
    return sketcher_of(
        load_sketch_model(SKETCH_WORKDIR),
        aligner,
        tokenizer_path(),
        reads_values=reads_values(SKETCH_WORKDIR),
        max_length=window_length(SKETCH_WORKDIR),
    )


def trained_sketchers(workdirs: Sequence[Path], shipped: Sketcher) -> dict[str, Sketcher]:
    """`--sketch-workdir`: the trained sketch weights in each workdir (`model.pt`, PyTorch in
    fp32, read as its config.json says: values, window length), each beside the shipped aligner
    and settings; a workdir without weights, or no torch, is skipped with a note."""
    try:
        from model_export.sketch_model import sketcher_of
        from model_export.train_aligner import load_sketch_model
        from model_export.train_sketch import reads_values, tokenizer_path, window_length
    except ImportError as exc:
        say(f"--sketch-workdir skipped: {exc} (pip install -e '.[export]')")
        return {}
    if shipped.aligner is None:
        say("--sketch-workdir skipped: the shipped sketcher has no aligner ([sketch] aligner)")
        return {}
    result = {}
    for workdir in workdirs:
        if not (workdir / "model.pt").exists():
            say(f"{workdir} skipped: no model.pt (python -m model_export.train_sketch)")
            continue
        result[f"PyTorch fp32 {workdir}, shipped aligner"] = sketcher_of(
            load_sketch_model(workdir),
            shipped.aligner,
            tokenizer_path(),
            reads_values=reads_values(workdir),
            max_length=window_length(workdir),
            settings=shipped.settings,
        )
    return result


class MeanSketcher(Sketcher):
    """`--ensemble`: a sketcher whose sketch model logits are the mean of its members' (each
    reading the question with its own window length and values, as it was trained), decoded and
    ranked with the first member's aligner and settings."""

    def __init__(self, members: Sequence[Sketcher]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one sketcher")
        first = members[0]
        super().__init__(
            first._session,
            first.aligner,
            first._encoder,
            first.settings,
            reads_values=first.reads_values,
        )
        self.members = tuple(members)

    def scores(
        self, question: str, schema: Schema, values: NamedValues | None = None
    ) -> SketchScores:
        each = [member.scores(question, schema, values) for member in self.members]
        return SketchScores(
            column_logits=np.mean([s.column_logits for s in each], axis=0, dtype=np.float32),
            table_logits=np.mean([s.table_logits for s in each], axis=0, dtype=np.float32),
            question_logits=np.mean([s.question_logits for s in each], axis=0, dtype=np.float32),
        )


def accuracy_table(figures: dict[str, Any], title: str) -> str:
    lines = [
        f"### {title}: exact-set match on Spider dev, % ({figures['questions']} questions, "
        f"{figures['unlabelled']} not representable as a sketch, counted as misses)",
        "",
        "| ranking of SELECT x KEYWORDS pairs | SELECT | FROM | KEYWORDS "
        "| SELECT top-4 | FROM top-2 | KEYWORDS top-2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label in ROW_NAMES.items():
        if name in figures:
            top1 = " | ".join(f"{figures[name][p]:.1f}" for p in PARTS)
            top_k = " | ".join(f"{figures['top_k_by_ranking'][name][p]:.1f}" for p in PARTS)
            lines.append(f"| {label} | {top1} | {top_k} |")
    model = " / ".join(f"{figures['model_top_k'][p]:.1f}" for p in PARTS)
    reach = "; ".join(
        f"{part.upper()} "
        + ", ".join(
            f"{share:.1f} in {depth}" for depth, share in figures["model_reach"][part].items()
        )
        for part in PARTS
    )
    lines += [
        "",
        "Top-k: the gold part among the first K1 / K2 / K3 distinct parts of the ranked sketches. "
        f"Among the sketch model's own candidates, before the rules that repair them: {model}.",
        "The gold part among the sketch model's own first N candidates, the most a re-ranking of "
        f"them could reach: {reach}.",
    ]
    return "\n".join(lines)


def latency(variants: dict[str, Sketcher], questions: Sequence[Question]) -> str:
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for sketcher in variants.values():  # warm-up: first runs allocate
        for item in questions[:3]:
            sketcher.sketch(item.question, item.schema, item.values)
    for number, item in enumerate(questions, 1):
        for name, sketcher in variants.items():
            started = time.perf_counter()
            sketcher.sketch(item.question, item.schema, item.values)
            timings[name].append((time.perf_counter() - started) * 1000.0)
        if number % 20 == 0 or number == len(questions):
            sys.stderr.write(f"\r  latency: {number}/{len(questions)} questions".ljust(60))
            sys.stderr.flush()
    sys.stderr.write("\n")
    first = next(iter(timings))
    base = float(np.percentile(timings[first], 50))
    lines = [
        f"### Latency per question, sketch model + aligner + decoding ({len(questions)} dev "
        "questions, interleaved in one run)",
        "",
        f"| runtime | p50 ms | p95 ms | p50 / {first} |",
        "|---|---|---|---|",
    ]
    for name, values in timings.items():
        p50, p95 = np.percentile(values, 50), np.percentile(values, 95)
        lines.append(f"| {name} | {p50:.1f} | {p95:.1f} | {p50 / base:.2f} |")
    mean_windows = statistics.mean(
        len(variants[first]._encoder.encode(q.question, q.schema)) for q in questions
    )
    lines.append("")
    lines.append(f"Schema windows a question (mean): {mean_windows:.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="first N dev questions (default all)")
    parser.add_argument("--latency-questions", type=int, default=200, help="default: %(default)s")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument(
        "--sketch-workdir",
        type=Path,
        action="append",
        default=[],
        help="also measure the accuracy of the sketch weights trained in this workdir "
        "(train_sketch; PyTorch, fp32) beside the shipped aligner; may be given more than once",
    )
    parser.add_argument(
        "--ensemble",
        action="store_true",
        help="also measure the shipped sketch model's logits averaged with those of every "
        "--sketch-workdir (one sketch model run each)",
    )
    args = parser.parse_args(argv)
    if args.ensemble and not args.sketch_workdir:
        parser.error("--ensemble averages the shipped model with --sketch-workdir runs: give one")

    questions = dev_questions(limit=args.limit)
    shipped = load_sketcher()
    entries = read_manifest(resolve_models_dir())["models"]
    form = entries[SKETCH_MODEL].get("shipped_forms") or entries[SKETCH_MODEL].get("shipped_form")
    say(f"shipped models ({form}) on {shipped.provider}")
    variants = {f"ONNX {form} (shipped)": shipped}
    settings = shipped.settings
    if shipped.aligns and settings.select_pool > settings.select_k:
        # the ablation of the wider pool: the aligner ranks the pairs of select_k SELECT sets only
        narrow = replace(settings, select_pool=settings.select_k)
        variants[f"ONNX {form} (shipped), select_pool = select_k = {settings.select_k}"] = (
            load_sketcher(settings=narrow)
        )
    if shipped.aligns and settings.align_within != float("inf"):
        # the ablation of reading only the probable pairs: the aligner reads every pair
        every = replace(settings, align_within=float("inf"))
        variants[f"ONNX {form} (shipped), align_within = inf"] = load_sketcher(settings=every)
    tokenizer = resolve_models_dir() / SKETCH_MODEL / "tokenizer.json"
    for name, (sketch_path, aligner_path) in BUILT.items():
        if sketch_path.exists() and aligner_path.exists():
            variants[name] = Sketcher.from_files(
                sketch_path,
                aligner_path,
                tokenizer,
                reads_values=shipped.reads_values,
                max_length=shipped.max_length,
            )
        else:
            say(f"{name} skipped: {sketch_path} not built (python -m model_export.export_sketch)")
    report = ["## Sketch accuracy and latency (benchmarks.sketch_accuracy)", ""]
    if not args.skip_accuracy:
        trained = trained_sketchers(args.sketch_workdir, shipped)
        if args.ensemble and trained:
            name = f"mean of the shipped sketch model and {len(trained)} trained, shipped aligner"
            trained[name] = MeanSketcher([shipped, *trained.values()])
        for name, sketcher in {**variants, **trained}.items():
            say(f"accuracy, {name}, {len(questions)} questions")
            report += [accuracy_table(accuracy(sketcher, questions), name), ""]
    if not args.skip_latency:
        eager = torch_sketcher()
        if eager is not None:
            variants["PyTorch eager"] = eager
        report.append(latency(variants, questions[: args.latency_questions]))
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
