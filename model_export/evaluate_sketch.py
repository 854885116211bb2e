"""Sketch accuracy on Spider dev, as in ZeroNL2SQL's Table 4: exact-set match of the SELECT, FROM
and KEYWORDS parts, top-1 (the first ranked sketch) and top-k (the gold part is among the K1, K2,
K3 hypotheses: the first K1 distinct SELECT sets, K2 FROM sets and K3 keyword sets of the ranked
sketches, which is what the stage hands on), for three rankings of the SELECT x KEYWORDS pairs:
the aligner's log-odds plus the sketch model's log-probability (pgnl's default), the aligner
alone (the paper's), and the sketch model alone (the ablation without aligner), each with the
values each question names in its database (`value_evidence`, read from Spider's SQLite files as
the value index would hold them); and the default without those values (`SCHEMA_ONLY`; a sketch
model that reads them is then also run without them). Also the
top-k of the sketch model's own candidates, before the rules that repair them (`sketcher.rank`).

Every dev question counts: a gold query the sketch cannot represent (`sketch_labels.Unlabelable`)
is a miss in every column. Used by `benchmarks.sketch_accuracy` and by the exporter (which records
the figures in manifest.json). No torch here.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_export.spider import spider_dir
from proxy.config import IndexSettings
from proxy.nl2sql.schema import Schema, load_spider_schemas
from proxy.nl2sql.sketch import Sketch, from_candidates, keyword_candidates, select_candidates
from proxy.nl2sql.sketcher import Sketcher, rank
from proxy.nl2sql.value_evidence import ColumnValues, NamedValues
from proxy.valueindex.scan import SAMPLE_DISTINCT, name_skip_reason, sample_skip_reason, value_shape

ROOT = Path(__file__).resolve().parents[1]
SPIDER = spider_dir()
RANKINGS = ("combined", "aligner", "sketch")
REACH = {"select": (4, 8, 16, 32), "from": (2, 4, 8), "keywords": (2, 4, 8)}
"""Depths at which the sketch model's own candidates are searched for the gold part
(`accuracy`'s `model_reach`): what any re-ranking of the first N of them could reach."""
SCHEMA_ONLY = "schema_only"  # the default ranking without the database's values
PARTS = ("select", "from", "keywords")


@dataclass(frozen=True)
class Question:
    question: str
    schema: Schema
    gold: Sketch | None
    values: NamedValues | None = None
    """The values of the question's database it names (None: the database has no content)."""


def spider_values(
    spider: Path, schema: Schema, settings: IndexSettings | None = None
) -> dict[int, list[str]] | None:
    """The values of each text column of a Spider database that the value index would hold
    (`proxy.valueindex.scan`'s rules: no key or identifier columns, no columns of codes, numbers
    or free text; the most frequent `max_distinct_per_column`), read from its SQLite file; None
    when Spider ships no file for it."""
    path = spider / "database" / schema.name / f"{schema.name}.sqlite"
    if not path.exists():
        return None
    settings = settings if settings is not None else IndexSettings()
    keys = {k.column for k in schema.foreign_keys} | {k.referenced for k in schema.foreign_keys}
    found: dict[int, list[str]] = {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        for index, column in enumerate(schema.columns):
            if column.type != "text" or column.primary_key or index in keys:
                continue
            if name_skip_reason(column.name) is not None:
                continue
            table = schema.tables[column.table].name
            rows = conn.execute(
                f'SELECT "{column.name}", count(*) FROM "{table}" '  # noqa: S608
                f'WHERE "{column.name}" IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT ?',
                (settings.max_distinct_per_column,),
            ).fetchall()
            distinct = [str(value) for value, _ in rows]
            if sample_skip_reason(distinct[:SAMPLE_DISTINCT], settings.max_value_length):
                continue
            kept = [v for v in distinct if value_shape(v, settings.max_value_length) is None]
            if kept:
                found[index] = kept
    return found


def dev_questions(spider: Path = SPIDER, limit: int = 0) -> list[Question]:
    """Spider dev's questions with their gold sketches (None where the gold query cannot be
    represented as a sketch)."""
    from model_export.sketch_labels import Unlabelable, label

    schemas = load_spider_schemas(spider / "tables.json")
    entries: list[dict[str, Any]] = json.loads((spider / "dev.json").read_text(encoding="utf-8"))
    if limit:
        entries = entries[:limit]
    questions = []
    contents: dict[str, ColumnValues | None] = {}
    for entry in entries:
        schema = schemas[entry["db_id"]]
        try:
            gold: Sketch | None = label(entry["query"], schema)
        except Unlabelable:
            gold = None
        if schema.name not in contents:
            read = spider_values(spider, schema)
            contents[schema.name] = None if read is None else ColumnValues.of(read)
        values = contents[schema.name]
        named = None if values is None else NamedValues.spoken(entry["question"], schema, values)
        questions.append(Question(entry["question"], schema, gold, named))
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
    ranking); `result["model_top_k"]`: among the sketch model's own K1, K2, K3 candidates,
    before the ranking's rules (`rank` with `named`) add or change any; and
    `result["model_reach"][part][str(N)]`: among its first N candidates (N from `REACH`), the most a
    re-ranking of them could give."""
    settings = sketcher.settings
    ks = (settings.select_k, settings.from_k, settings.keywords_k)
    default = ("combined" if settings.combine else "aligner") if sketcher.aligns else "sketch"
    rankings = (*(RANKINGS if sketcher.aligns else ("sketch",)), SCHEMA_ONLY)
    hits = {name: dict.fromkeys(PARTS, 0) for name in rankings}
    top_k_hits = {name: dict.fromkeys(PARTS, 0) for name in rankings}
    model_top_k = dict.fromkeys(PARTS, 0)
    reach = {part: {str(depth): 0 for depth in REACH[part]} for part in PARTS}
    started = time.monotonic()
    for number, item in enumerate(questions, 1):
        found = sketcher.hypotheses(item.question, item.schema, item.values)
        if item.gold is not None:
            gold = _parts(item.gold)
            # a model that reads the values is scored again without them for the schema-only row
            plain = (
                sketcher.hypotheses(item.question, item.schema)
                if sketcher.reads_values and item.values is not None
                else found
            )
            for name in rankings:
                ranking = default if name == SCHEMA_ONLY else name
                base = plain if name == SCHEMA_ONLY else found
                ranked = rank(
                    base.scores,
                    base.selects,
                    base.keywords,
                    base.froms,
                    None if ranking == "sketch" else base.aligned,
                    combine=ranking == "combined",
                    select_k=settings.select_k,
                    named=(item.schema, item.question) if settings.named_from else None,
                    more_where=settings.more_where_logit,
                    values=None if name == SCHEMA_ONLY else item.values,
                )
                for part, mine, right in zip(PARTS, _parts(ranked[0]), gold, strict=True):
                    hits[name][part] += mine == right
                for part, values, right in zip(PARTS, proposed(ranked, ks), gold, strict=True):
                    top_k_hits[name][part] += right in values
            candidates: tuple[list[Any], list[Any], list[Any]] = (
                [s for s, _ in found.selects[: ks[0]]],  # the pool's most probable
                [t for t, _ in found.froms],
                [k for k, _ in found.keywords],
            )
            for part, own, right in zip(PARTS, candidates, gold, strict=True):
                model_top_k[part] += right in own
            deeper: tuple[list[Any], list[Any], list[Any]] = (
                [s for s, _ in select_candidates(found.scores, REACH["select"][-1], item.schema)],
                [t for t, _ in from_candidates(found.scores, REACH["from"][-1])],
                [k for k, _ in keyword_candidates(found.scores, REACH["keywords"][-1])],
            )
            for part, own, right in zip(PARTS, deeper, gold, strict=True):
                for depth in REACH[part]:
                    reach[part][str(depth)] += right in own[:depth]
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
    result["model_reach"] = {part: percent(counts) for part, counts in reach.items()}
    result["questions"] = len(questions)
    result["unlabelled"] = sum(q.gold is None for q in questions)
    return result
