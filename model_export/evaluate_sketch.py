"""Sketch accuracy on Spider dev, as in ZeroNL2SQL's Table 4: exact-set match of the SELECT, FROM
and KEYWORDS parts, top-1 (the first ranked sketch) and top-k (the gold part is among the K1, K2,
K3 hypotheses: the first K1 distinct SELECT sets, K2 FROM sets and K3 keyword sets of the ranked
sketches, which is what the stage hands on), for three rankings of the SELECT x KEYWORDS pairs:
the aligner's log-odds plus the sketch model's log-probability (pgnl's default), the aligner
alone (the paper's), and the sketch model alone (the ablation without aligner). Also the top-k
of the sketch model's own candidates, before the rules that repair them (`sketcher.rank`).

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


def proposed(sketches: Sequence[Sketch], ks: Sequence[int]) -> list[list[object]]:
    """Each part's first k distinct values in ranked sketches (k from `ks`, in PARTS order):
    the part's k hypotheses as the sketch stage proposes them, best first."""
    found: list[list[object]] = [[] for _ in PARTS]
    for sketch in sketches:
        for values, value, k in zip(found, _parts(sketch), ks, strict=True):
            if len(values) < k and value not in values:
                values.append(value)
    return found


def accuracy(
    sketcher: Sketcher, questions: Sequence[Question], *, progress: bool = True
) -> dict[str, Any]:
    """Exact-set match (%) of each part: top-1 under each ranking (`result[ranking]`); top-k,
    the gold part among the first K1 SELECT, K2 FROM and K3 KEYWORDS sets of that ranking's
    sketches (`result["top_k_by_ranking"][ranking]`; `result["top_k"]`: under pgnl's default
    ranking); and `result["model_top_k"]`: among the sketch model's own K1, K2, K3 candidates,
    before the ranking's rules (`rank` with `named`) add or change any."""
    settings = sketcher.settings
    ks = (settings.select_k, settings.from_k, settings.keywords_k)
    rankings = RANKINGS if sketcher.aligns else ("sketch",)
    default = ("combined" if settings.combine else "aligner") if sketcher.aligns else "sketch"
    hits = {name: dict.fromkeys(PARTS, 0) for name in rankings}
    top_k_hits = {name: dict.fromkeys(PARTS, 0) for name in rankings}
    model_top_k = dict.fromkeys(PARTS, 0)
    started = time.monotonic()
    for number, item in enumerate(questions, 1):
        found = sketcher.hypotheses(item.question, item.schema)
        if item.gold is not None:
            gold = _parts(item.gold)
            for name in rankings:
                ranked = rank(
                    found.scores,
                    found.selects,
                    found.keywords,
                    found.froms,
                    None if name == "sketch" else found.aligned,
                    combine=name == "combined",
                    named=(item.schema, item.question) if settings.named_from else None,
                    more_where=settings.more_where_logit,
                )
                for part, mine, right in zip(PARTS, _parts(ranked[0]), gold, strict=True):
                    hits[name][part] += mine == right
                for part, values, right in zip(PARTS, proposed(ranked, ks), gold, strict=True):
                    top_k_hits[name][part] += right in values
            candidates: tuple[list[Any], list[Any], list[Any]] = (
                [s for s, _ in found.selects],
                [t for t, _ in found.froms],
                [k for k, _ in found.keywords],
            )
            for part, own, right in zip(PARTS, candidates, gold, strict=True):
                model_top_k[part] += right in own
        if progress and (number % 50 == 0 or number == len(questions)):
            rate = number / max(time.monotonic() - started, 1e-9)
            sys.stderr.write(f"\r  {number}/{len(questions)} questions, {rate:.1f}/s".ljust(60))
            sys.stderr.flush()
    if progress:
        sys.stderr.write("\n")
    total = max(len(questions), 1)

    def percent(counts: dict[str, int]) -> dict[str, float]:
        return {part: round(100.0 * count / total, 1) for part, count in counts.items()}

    result: dict[str, Any] = {name: percent(counts) for name, counts in hits.items()}
    result["top_k_by_ranking"] = {name: percent(counts) for name, counts in top_k_hits.items()}
    result["top_k"] = result["top_k_by_ranking"][default]
    result["model_top_k"] = percent(model_top_k)
    result["questions"] = len(questions)
    result["unlabelled"] = sum(q.gold is None for q in questions)
    return result
