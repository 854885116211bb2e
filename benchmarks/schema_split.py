"""How long it takes to split a schema too wide for one window into the sketch model's windows:
`python -m benchmarks.schema_split`.

Side by side in one run, on Spider's widest schema and on wider ones made by putting Spider's
widest schemas together (each keeping its own foreign keys): `serialize.windows`, which adds up
the token counts of the schema's pieces (`serialize.Sizes`, counted once per schema and kept by
the sketch stage), against `windows_by_whole_text`, the split as first written, which tokenized
every window it tried. Both must give the same windows (the run stops if they do not): the model
is shown exactly what it was trained on. A question that names values (`encoding.value_marks`)
or leaves another amount of room changes the split, so a wide schema is split again for most
questions; the sizes are not.

Spider's schemas are in tables.json (CC BY-SA 4.0; Yu et al., EMNLP 2018).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from model_export.spider import spider_dir
from proxy.nl2sql.encoding import MAX_LENGTH
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table, load_spider_schemas
from proxy.nl2sql.serialize import (
    Marks,
    Sizes,
    Window,
    neighbourhood_order,
    serialize,
    windows,
)
from proxy.runtime import load_tokenizer

SPIDER = spider_dir()
QUESTION_TOKENS = 20
"""The question beside the schema: 20 tokens, one value named."""
TOKENIZER = Path(__file__).resolve().parents[1] / "proxy" / "models" / "sketch" / "tokenizer.json"


def windows_by_whole_text(
    schema: Schema, budget: int, count_tokens: Callable[[str], int], marks: Marks = ()
) -> list[Window]:
    """`serialize.windows` as it was first written: every window it tries is serialized and
    tokenized whole (time quadratic in the schema's width)."""
    whole = serialize(schema, marks=marks)
    if count_tokens(whole.text) <= budget:
        return [whole]
    pieces: list[tuple[int, list[int]]] = []
    for table in neighbourhood_order(schema):
        part: list[int] = []
        for column in schema.table_columns[table]:
            tried = serialize(schema, [(table, [*part, column])], marks)
            if part and count_tokens(tried.text) > budget:
                pieces.append((table, part))
                part = []
            part.append(column)
        pieces.append((table, part))
    result: list[Window] = []
    current: list[tuple[int, list[int]]] = []
    for piece in pieces:
        if current and count_tokens(serialize(schema, [*current, piece], marks).text) > budget:
            result.append(serialize(schema, current, marks))
            current = []
        current.append(piece)
    if current:
        result.append(serialize(schema, current, marks))
    return result


def merged(name: str, schemas: Sequence[Schema]) -> Schema:
    """One schema holding every table of `schemas` (named `<db>_<table>`) and their keys."""
    tables: list[Table] = []
    columns: list[Column] = []
    keys: list[ForeignKey] = []
    for schema in schemas:
        first_table, first_column = len(tables), len(columns)
        tables.extend(Table(f"{schema.name}_{t.name}", words=t.label) for t in schema.tables)
        columns.extend(
            Column(c.table + first_table, c.name, c.type, words=c.label) for c in schema.columns
        )
        keys.extend(
            ForeignKey(k.column + first_column, k.referenced + first_column)
            for k in schema.foreign_keys
        )
    return Schema(name, tuple(tables), tuple(columns), tuple(keys))


def _median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spider", type=Path, default=SPIDER, help=f"default: {SPIDER}")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each split (default: 5)")
    args = parser.parse_args(argv)
    tables = args.spider / "tables.json"
    if not tables.exists():
        print(f"Spider's tables.json is not at {tables}: pass --spider", file=sys.stderr)
        return 2
    tokenizer = load_tokenizer(TOKENIZER, MAX_LENGTH)
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    widest = sorted(load_spider_schemas(tables).values(), key=lambda s: -len(s.columns))
    cases = [widest[0], merged("10 widest", widest[:10]), merged("40 widest", widest[:40])]
    # the room beside a question of QUESTION_TOKENS tokens ([CLS] and two [SEP] besides)
    budget = MAX_LENGTH - QUESTION_TOKENS - 3
    print(
        "| schema | tables | columns | windows | whole text ms | pieces ms | pieces, sizes kept ms "
        "| whole text / sizes kept |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for schema in cases:
        print(f"splitting {schema.name} ...", file=sys.stderr, flush=True)
        text = next(c for c, column in enumerate(schema.columns) if column.type == "text")
        marks: Marks = ((text, "boston"),)
        sizes = Sizes.of(schema, count_tokens)
        expected = windows_by_whole_text(schema, budget, count_tokens, marks)
        for got in (
            windows(schema, budget, count_tokens, marks),
            windows(schema, budget, count_tokens, marks, sizes),
        ):
            if got != expected:
                print(f"{schema.name}: the two splits differ", file=sys.stderr)
                return 1
        whole = _median_ms(
            functools.partial(windows_by_whole_text, schema, budget, count_tokens, marks),
            args.repeat,
        )
        pieces = _median_ms(
            functools.partial(windows, schema, budget, count_tokens, marks), args.repeat
        )
        kept = _median_ms(
            functools.partial(windows, schema, budget, count_tokens, marks, sizes), args.repeat
        )
        print(
            f"| {schema.name} | {len(schema.tables)} | {len(schema.columns)} | {len(expected)} "
            f"| {whole:.1f} | {pieces:.1f} | {kept:.1f} | {whole / kept:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
