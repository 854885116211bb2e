"""How well the question embedder tells a paraphrase of the same query from another question
of the same database: what a threshold on the similarity of a query history record can separate.

    python -m benchmarks.paraphrase_similarity [--split train] [--thresholds 0.7 0.8 0.9]

For each Spider question (train by default, so that dev stays unseen), the nearest other
question of its database by cosine of their embeddings (all-MiniLM-L6-v2, as the query
history embeds questions); a pair is the same query when their gold SQL is the same text (case
and spacing aside). Prints, for each threshold, the share of questions whose nearest is at
least that close, and of those the share that are the same query (precision) and the share of
all same-query pairs kept (recall), beside the share over all questions.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from benchmarks.spider_pg import spider_dir
from proxy.runtime import load_embedder


def _normalised(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.strip().rstrip(";").lower())


def nearest_pairs(split: str) -> list[tuple[float, bool]]:
    """(similarity of the nearest other question of the database, whether it is the same
    query) for each question of the split."""
    examples = json.loads((spider_dir() / f"{split}.json").read_text())
    by_database: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for example in examples:
        by_database[example["db_id"]].append((example["question"], _normalised(example["query"])))
    embedder = load_embedder()
    pairs: list[tuple[float, bool]] = []
    for done, items in enumerate(by_database.values(), 1):
        if len(items) > 1:
            vectors = np.asarray(embedder.embed([q for q, _ in items]), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            similarity = vectors @ vectors.T
            np.fill_diagonal(similarity, -1.0)
            for i, j in enumerate(similarity.argmax(axis=1)):
                pairs.append((float(similarity[i, j]), items[i][1] == items[j][1]))
        print(f"\r{done}/{len(by_database)} databases", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return pairs


def report(pairs: Sequence[tuple[float, bool]], thresholds: Sequence[float]) -> list[str]:
    similarity = np.array([s for s, _ in pairs])
    same = np.array([m for _, m in pairs])
    lines = [
        f"{len(pairs)} questions; the nearest other question of the database is the same query "
        f"for {same.mean():.0%}",
        "| at least | questions | same query among them | same-query pairs kept |",
        "| --- | --- | --- | --- |",
    ]
    for threshold in thresholds:
        kept = similarity >= threshold
        precision = f"{same[kept].mean():.0%}" if kept.any() else "none kept"
        recall = (same & kept).sum() / max(same.sum(), 1)
        lines.append(f"| {threshold:.2f} | {kept.mean():.0%} | {precision} | {recall:.0%} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.paraphrase_similarity")
    parser.add_argument("--split", default="train", choices=("train", "dev"))
    parser.add_argument(
        "--thresholds", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.85, 0.9, 0.95]
    )
    args = parser.parse_args(argv)
    print("\n".join(report(nearest_pairs(args.split), args.thresholds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
