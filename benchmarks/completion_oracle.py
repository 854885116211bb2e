"""The upper bound of PLM-only completion: Spider dev's GOLD sketches completed, and executed.

    python -m benchmarks.completion_oracle [--spider DIR] [--timeout 5] [--show N]

For every Spider dev question whose gold query can be labelled (`model_export.sketch_labels`),
the gold sketch is completed (`proxy.nl2sql.complete_plm.complete`, with the question for its
cues) twice:

(a) with the gold query's own literals: those of the outer query's WHERE and HAVING, in order,
    subqueries left out (their conditions have no slot), Spider's double-quoted strings included;
(b) with only `question_literals(question)`: quoted strings and numbers typed in the question, what
    pgnl has before calibration finds values in the database.

Each completed query (PostgreSQL) is transpiled to SQLite (sqlglot, read="postgres",
write="sqlite") and run, with the gold query, on the dev database (`sqlite3`, read-only URI, a
timeout through `set_progress_handler`). A question matches when both return the same multiset
of rows, in the same order when the gold query has an outer ORDER BY. Columns may come in
another order (a sketch holds its SELECT as a set); the table also counts the matches in the
gold's column order, and the matches on an empty gold result (any query that returns nothing
matches them). `wta_1`'s database is not in Spider's release: its 62 questions are
left out, and the report says so. A question that cannot be labelled counts as a miss.

Mismatches are put under one reason each, the first that applies: the completion failed (by
`CompletionError.reason`), the SQL did not transpile or run, the sketch has a set operation (its
right side is left out) or a nested subquery, a literal (a: a gold literal missing from the SQL;
b: the question's literals differ from the gold's), the join path (tables added to connect the
sketch's, or the gold joins on other columns), grouping added, LIMIT, other.

The report (Markdown) goes to stdout, progress to stderr; `--show N` prints N examples of each
reason to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from model_export.sketch_labels import Unlabelable, label
from model_export.spider import spider_dir
from proxy.nl2sql.complete_plm import (
    CompletionError,
    Literal,
    complete,
    question_literals,
    set_operation,
)
from proxy.nl2sql.joins import connected
from proxy.nl2sql.schema import Schema, load_spider_schemas
from proxy.nl2sql.sketch import STAR, Sketch

SPIDER = spider_dir()
MODES = ("gold literals", "question literals only")

Rows = list[tuple[Any, ...]]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- gold literals ------------------------------------------------------------------------------


def _outer_select(tree: exp.Expr) -> exp.Select | None:
    node = tree
    while isinstance(node, exp.SetOperation | exp.Subquery | exp.Paren):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _literals_in(node: exp.Expr) -> list[Literal]:
    """The literals of a condition, left to right, subqueries left out."""
    if isinstance(node, exp.Select | exp.Subquery | exp.SetOperation):
        return []
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        inner = _literal(node.this)
        if isinstance(inner.value, int | float):
            return [Literal(-inner.value, "number")]
    if isinstance(node, exp.Literal):
        return [_literal(node)]
    if isinstance(node, exp.Column) and not node.table:
        identifier = node.this
        if isinstance(identifier, exp.Identifier) and identifier.quoted:
            return [Literal(identifier.name, "string")]  # Spider's "value"
    found: list[Literal] = []
    for child in node.iter_expressions():
        found.extend(_literals_in(child))
    return found


def _literal(node: exp.Literal) -> Literal:
    text = node.name
    if node.is_string:
        return Literal(text, "string")
    try:
        return Literal(int(text), "number")
    except ValueError:
        return Literal(float(text), "number")


def gold_literals(query: str) -> list[Literal]:
    """The literals of the outer query's WHERE and HAVING of a Spider gold query, in order."""
    tree = sqlglot.parse_one(query, read="sqlite")
    select = _outer_select(tree)
    if select is None:
        return []
    found: list[Literal] = []
    for clause in ("where", "having"):
        node = select.args.get(clause)
        if node is not None:
            found.extend(_literals_in(node.this))
    return found


# --- execution ----------------------------------------------------------------------------------


class Executor:
    """Read-only connections to the dev databases, each query under a timeout."""

    def __init__(self, spider: Path, timeout_s: float) -> None:
        self.spider = spider
        self.timeout_s = timeout_s
        self.connections: dict[str, sqlite3.Connection] = {}

    def available(self, db_id: str) -> bool:
        return self._path(db_id).is_file()

    def _path(self, db_id: str) -> Path:
        return self.spider / "database" / db_id / f"{db_id}.sqlite"

    def run(self, db_id: str, sql: str) -> Rows:
        connection = self.connections.get(db_id)
        if connection is None:
            uri = f"file:{self._path(db_id)}?mode=ro"
            connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            connection.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
            self.connections[db_id] = connection
        deadline = time.monotonic() + self.timeout_s
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            return [tuple(row) for row in connection.execute(sql).fetchall()]
        finally:
            connection.set_progress_handler(None, 0)

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()


def _normal(rows: Rows) -> Rows:
    return [
        tuple(round(value, 6) if isinstance(value, float) else value for value in row)
        for row in rows
    ]


def same_rows(gold: Rows, predicted: Rows, *, ordered: bool) -> tuple[bool, bool]:
    """(match allowing the columns in any order, match in the gold's column order)."""
    gold, predicted = _normal(gold), _normal(predicted)

    def equal(a: Rows, b: Rows) -> bool:
        return a == b if ordered else Counter(a) == Counter(b)

    if equal(gold, predicted):
        return True, True
    width = len(gold[0]) if gold else 0
    if not gold or not predicted or len(predicted[0]) != width or width > 6:
        return False, False
    for order in itertools.permutations(range(width)):
        if equal(gold, [tuple(row[i] for i in order) for row in predicted]):
            return True, False
    return False, False


# --- one question -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    match: bool
    same_order: bool
    reason: str  # "" when it matches
    sql: str


def _limit_of(select: exp.Select) -> int | None:
    limit = select.args.get("limit")
    if limit is None:
        return None
    value = limit.expression if isinstance(limit, exp.Limit) else limit
    try:
        return int(value.name)
    except (ValueError, AttributeError):
        return None


def _join_columns(select: exp.Select) -> frozenset[frozenset[str]]:
    """The pairs of column names joined in a query's ON conditions (lower case, unqualified)."""
    pairs: set[frozenset[str]] = set()
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        if on is None:
            continue
        for equality in on.find_all(exp.EQ):
            if isinstance(equality.this, exp.Column) and isinstance(
                equality.expression, exp.Column
            ):
                pairs.add(frozenset((equality.this.name.lower(), equality.expression.name.lower())))
    return frozenset(pairs)


@dataclass(frozen=True)
class Question:
    """A labelled, executable dev question."""

    db_id: str
    text: str
    query: str
    sketch: Sketch
    schema: Schema
    gold_rows: Rows
    gold_values: tuple[Literal, ...]


def _reason(
    question: Question,
    gold: exp.Select,
    completed: exp.Select,
    literals: Sequence[Literal],
    mode: str,
) -> str:
    """Why a completed query that ran differs from the gold (the first reason that applies)."""
    sketch, schema, gold_values = question.sketch, question.schema, question.gold_values
    if set_operation(sketch) is not None:
        return "set operation (right side left out)"
    if "nested" in sketch.keywords:
        return "nested subquery"
    text = completed.sql(dialect="postgres")
    if mode == MODES[0]:
        if any(str(v.value) not in text for v in gold_values):
            return "gold literal not placed"
    elif sorted(map(str, (v.value for v in literals))) != sorted(
        map(str, (v.value for v in gold_values))
    ):
        return "question literals differ from gold's"
    mentioned = {schema.columns[c].table for i in sketch.select if (c := i.column) != STAR}
    tables = connected(schema, set(sketch.tables) | mentioned)
    if tables != sketch.tables:
        return "join path adds tables"
    if len(tables) > 1 and _join_columns(gold) != _join_columns(completed):
        return "join on other columns"
    if completed.args.get("group") is not None and gold.args.get("group") is None:
        return "grouping added"
    if _limit_of(completed) != _limit_of(gold):
        return "LIMIT differs"
    if "order by" in sketch.keywords:
        return "other (with ORDER BY: ties or order)"
    return "other"


def evaluate(
    executor: Executor, question: Question, literals: Sequence[Literal], mode: str
) -> Outcome:
    """Complete the gold sketch with `literals`, run it, and compare with the gold's rows."""
    try:
        sql = complete(question.sketch, question.schema, literals, question=question.text)
    except CompletionError as error:
        return Outcome(False, False, f"completion: {error.reason}", "")
    try:
        sqlite_sql = sqlglot.transpile(sql, read="postgres", write="sqlite")[0]
    except SqlglotError:
        return Outcome(False, False, "does not transpile to SQLite", sql)
    try:
        rows = executor.run(question.db_id, sqlite_sql)
    except sqlite3.Error:
        return Outcome(False, False, "SQL error on SQLite", sql)
    gold_tree = sqlglot.parse_one(question.query, read="sqlite")
    gold_select = _outer_select(gold_tree)
    ordered = gold_tree.args.get("order") is not None or (
        gold_select is not None and gold_select.args.get("order") is not None
    )
    match, same_order = same_rows(question.gold_rows, rows, ordered=ordered)
    if match:
        return Outcome(True, same_order, "", sql)
    completed = _outer_select(sqlglot.parse_one(sql, read="postgres"))
    assert gold_select is not None and completed is not None
    reason = _reason(question, gold_select, completed, literals, mode)
    return Outcome(False, False, reason, sql)


# --- the report ---------------------------------------------------------------------------------


def _percent(count: int, total: int) -> str:
    return f"{count} ({count / total:.1%})" if total else str(count)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--spider", type=Path, default=SPIDER, help="the Spider folder (default: $PGNL_SPIDER_DIR)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per query")
    parser.add_argument("--show", type=int, default=0, help="examples of each reason (stderr)")
    arguments = parser.parse_args(argv)

    started = time.monotonic()
    schemas = load_spider_schemas(arguments.spider / "tables.json")
    examples = json.loads((arguments.spider / "dev.json").read_text(encoding="utf-8"))
    executor = Executor(arguments.spider, arguments.timeout)
    missing: Counter[str] = Counter()
    unlabelled: Counter[str] = Counter()
    gold_failed = 0
    executable = labelled = 0
    matches: dict[str, int] = dict.fromkeys(MODES, 0)
    same_order: dict[str, int] = dict.fromkeys(MODES, 0)
    empty: dict[str, int] = dict.fromkeys(MODES, 0)
    completed: dict[str, int] = dict.fromkeys(MODES, 0)
    reasons: dict[str, Counter[str]] = {mode: Counter() for mode in MODES}
    shown: dict[tuple[str, str], list[str]] = defaultdict(list)

    for number, example in enumerate(examples, 1):
        if number % 100 == 0:
            say(f"{number}/{len(examples)} questions, {time.monotonic() - started:.0f} s")
        db_id, question, query = example["db_id"], example["question"], example["query"]
        if not executor.available(db_id):
            missing[db_id] += 1
            continue
        try:
            gold_rows = executor.run(db_id, query)
        except sqlite3.Error:
            gold_failed += 1
            continue
        executable += 1
        schema = schemas[db_id]
        try:
            sketch = label(query, schema)
        except Unlabelable as error:
            unlabelled[error.reason] += 1
            continue
        labelled += 1
        item = Question(
            db_id, question, query, sketch, schema, gold_rows, tuple(gold_literals(query))
        )
        pools = {MODES[0]: item.gold_values, MODES[1]: tuple(question_literals(question))}
        for mode, pool in pools.items():
            outcome = evaluate(executor, item, pool, mode)
            completed[mode] += not outcome.reason.startswith("completion:")
            matches[mode] += outcome.match
            same_order[mode] += outcome.same_order
            empty[mode] += outcome.match and not gold_rows
            if not outcome.match:
                reasons[mode][outcome.reason] += 1
                examples_of = shown[(mode, outcome.reason)]
                if len(examples_of) < arguments.show:
                    examples_of.append(f"{question}\n    gold: {query}\n    sql:  {outcome.sql}")
    executor.close()

    for (mode, reason), texts in sorted(shown.items()):
        if not texts:
            continue
        say(f"--- {mode}: {reason}")
        for text in texts:
            say("  " + text)

    total = len(examples)
    skipped = sum(missing.values())
    print("## PLM-only completion of gold sketches (Spider dev)")
    print()
    print(
        f"{total} dev questions; {skipped} left out because their database is missing from "
        f"Spider's release ({', '.join(sorted(missing)) or 'none'}); {gold_failed} whose gold "
        f"query fails on SQLite; {executable} executable, of which {labelled} have a gold sketch "
        f"(the other {executable - labelled} count as misses)."
    )
    print()
    print(f"| over the {executable} executable questions | {' | '.join(MODES)} |")
    print("| --- | " + " | ".join("---" for _ in MODES) + " |")
    print(
        "| completed into SQL | "
        + " | ".join(_percent(completed[m], executable) for m in MODES)
        + " |"
    )
    print(
        "| **execution match** (any column order) | "
        + " | ".join(f"**{_percent(matches[m], executable)}**" for m in MODES)
        + " |"
    )
    print(
        "| of those, matches on an empty gold result | "
        + " | ".join(str(empty[m]) for m in MODES)
        + " |"
    )
    print(
        "| execution match, gold's column order | "
        + " | ".join(_percent(same_order[m], executable) for m in MODES)
        + " |"
    )
    print(
        f"| execution match over the {labelled} labelled | "
        + " | ".join(_percent(matches[m], labelled) for m in MODES)
        + " |"
    )
    print()
    print("### Why the others do not match (one reason each, the first that applies)")
    print()
    print(f"| reason | {' | '.join(MODES)} |")
    print("| --- | " + " | ".join("---" for _ in MODES) + " |")
    rows: Counter[str] = Counter()
    for mode in MODES:
        rows.update(reasons[mode])
    for reason, _ in rows.most_common():
        print(f"| {reason} | " + " | ".join(str(reasons[m][reason]) for m in MODES) + " |")
    for reason, count in unlabelled.most_common():
        print(f"| no gold sketch: {reason} | {count} | {count} |")
    print()
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
