"""Sketch accuracy on Spider dev, as in ZeroNL2SQL's Table 4: exact-set match of the SELECT, FROM
and KEYWORDS parts, top-1 (the first ranked sketch) and top-k (the gold part is among the K1, K2,
K3 hypotheses), for three rankings of the SELECT x KEYWORDS pairs: the aligner's log-odds plus
the sketch model's log-probability (pgnl's default), the aligner alone (the paper's), and the
sketch model alone (the ablation without aligner).

Every dev question counts: a gold query the sketch cannot represent (`sketch_labels.Unlabelable`)
is a miss in every column. Used by `benchmarks.sketch_accuracy` and by the exporter (which records
the figures in manifest.json). No torch here.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.nl2sql.schema import Schema, load_spider_schemas
from proxy.nl2sql.sketch import Sketch
from proxy.nl2sql.sketcher import Sketcher, rank

ROOT = Path(__file__).resolve().parents[1]
SPIDER = ROOT.parent / "shared" / "data" / "spider"
RANKINGS = ("combined", "aligner", "sketch")
PARTS = ("select", "from", "keywords")


@dataclass(frozen=True)
class Question:
    question: str
    schema: Schema
    gold: Sketch | None


def dev_questions(spider: Path = SPIDER, limit: int = 0) -> list[Question]:
    """Spider dev's questions with their gold sketches (None where the gold query cannot be
    represented as a sketch)."""
    from model_export.sketch_labels import Unlabelable, label

    schemas = load_spider_schemas(spider / "tables.json")
    entries: list[dict[str, Any]] = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    if limit:
        entries = entries[:limit]
    questions = []
    for entry in entries:
        schema = schemas[entry["db_id"]]
        try:
            gold: Sketch | None = label(entry["query"], schema)
        except Unlabelable:
            gold = None
        questions.append(Question(entry["question"], schema, gold))
    return questions


def _parts(sketch: Sketch) -> tuple[object, object, object]:
    return (sketch.select, sketch.tables, sketch.keywords)


def accuracy(
    sketcher: Sketcher, questions: Sequence[Question], *, progress: bool = True
) -> dict[str, Any]:
    """Exact-set match (%) of each part, top-1 under each ranking and top-k."""
    hits = {name: dict.fromkeys(PARTS, 0) for name in (*RANKINGS, "top_k")}
    started = time.monotonic()
    for number, item in enumerate(questions, 1):
        found = sketcher.hypotheses(item.question, item.schema)
        if item.gold is not None:
            gold = _parts(item.gold)
            for name in RANKINGS:
                if name != "sketch" and found.aligned is None:
                    continue
                best = rank(
                    found.scores,
                    found.selects,
                    found.keywords,
                    found.froms,
                    None if name == "sketch" else found.aligned,
                    combine=name == "combined",
                    named=(item.schema, item.question) if sketcher.settings.named_from else None,
                )[0]
                for part, mine, right in zip(PARTS, _parts(best), gold, strict=True):
                    hits[name][part] += mine == right
            top_k = (
                any(s == item.gold.select for s, _ in found.selects),
                any(t == item.gold.tables for t, _ in found.froms),
                any(k == item.gold.keywords for k, _ in found.keywords),
            )
            for part, hit in zip(PARTS, top_k, strict=True):
                hits["top_k"][part] += hit
        if progress and (number % 50 == 0 or number == len(questions)):
            rate = number / max(time.monotonic() - started, 1e-9)
            sys.stderr.write(f"\r  {number}/{len(questions)} questions, {rate:.1f}/s".ljust(60))
            sys.stderr.flush()
    if progress:
        sys.stderr.write("\n")
    total = max(len(questions), 1)
    result: dict[str, Any] = {
        name: {part: round(100.0 * count / total, 1) for part, count in parts.items()}
        for name, parts in hits.items()
    }
    result["questions"] = len(questions)
    result["unlabelled"] = sum(q.gold is None for q in questions)
    if not sketcher.aligns:
        del result["combined"], result["aligner"]
    return result
