"""SQL sketches: what ZeroNL2SQL's small models decide before any SQL is written.

A `Sketch` is the SELECT items (each a column, or `*`, with its aggregate), the FROM tables and the
clause KEYWORDS of a query, plus the `Slots` a completion needs without an LLM (WHERE columns with
their operators, GROUP BY, HAVING, ORDER BY, LIMIT). Schema items are global indexes into a
`Schema` (`Schema.columns`, `Schema.tables`); `STAR` stands for `*`.

The vocabularies below are shared by the labels the models are trained on
(`model_export/sketch_labels.py`), the model heads, and decoding; the repairs the question's
own words make to a sketch are in `sketch_rules/`. What a rule below was measured to change on
Spider is in docs/measurements.md ("Rules and their measured effect").
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from proxy.nl2sql.schema import Schema

STAR = -1
"""The column index of `*` (as in `count(*)`)."""

AGGREGATES = ("", "count", "max", "min", "sum", "avg")
"""Index 0 is "no aggregate"."""

OPERATORS = ("=", "!=", ">", "<", ">=", "<=", "between", "like", "not like", "in", "not in")
"""WHERE operators; `in`/`not in` take a nested query, the others a value (or a nested query,
see `Predicate.nested`)."""

KEYWORDS = (
    "where",
    "group by",
    "having",
    "order by",
    "asc",
    "desc",
    "limit",
    "distinct",
    "intersect",
    "union",
    "except",
    "nested",
)
"""Clause keywords of the outer query. `nested`: a subquery in WHERE or HAVING. `distinct`:
SELECT DISTINCT or an aggregate over DISTINCT. `asc`/`desc`: the ORDER BY direction."""

SET_OPERATIONS = ("intersect", "union", "except")


@dataclass(frozen=True, order=True)
class SelectItem:
    """An aggregate (one of AGGREGATES, "" for none) over a column (global index, or STAR)."""

    aggregate: str
    column: int

    def text(self, schema: Schema) -> str:
        name = "*" if self.column == STAR else schema.qualified(self.column)
        return f"{self.aggregate}({name})" if self.aggregate else name


@dataclass(frozen=True, order=True)
class Predicate:
    """A WHERE condition's column and operator; `nested` when its right side is a subquery."""

    column: int
    operator: str
    nested: bool = False


@dataclass(frozen=True)
class Slots:
    """What a completion needs beyond the sketch. Columns are global indexes (or STAR)."""

    where: tuple[Predicate, ...] = ()
    where_or: bool = False
    group_by: frozenset[int] = frozenset()
    having: tuple[SelectItem, ...] = ()
    order_by: tuple[SelectItem, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class Sketch:
    """One hypothesis: SELECT items, FROM tables, KEYWORDS, slots, and how it was scored."""

    select: frozenset[SelectItem]
    tables: frozenset[int]
    keywords: frozenset[str]
    slots: Slots = field(default_factory=Slots)
    score: float = 0.0

    def select_text(self, schema: Schema) -> str:
        return ", ".join(item.text(schema) for item in sorted(self.select))

    def from_text(self, schema: Schema) -> str:
        return ", ".join(schema.tables[t].name for t in sorted(self.tables))

    def keywords_text(self) -> str:
        return ", ".join(k for k in KEYWORDS if k in self.keywords)


# The sketch model's outputs (all independent yes/no logits). Per column (and `*`), in order:
# the SELECT aggregate, the WHERE operator, GROUP BY, the HAVING aggregate, the ORDER BY
# aggregate. Per table: in FROM. Per window: each keyword, then "the WHERE conditions are joined by
# OR".
SELECT_OUTPUTS = slice(0, len(AGGREGATES))
WHERE_OUTPUTS = slice(SELECT_OUTPUTS.stop, SELECT_OUTPUTS.stop + len(OPERATORS))
GROUP_BY_OUTPUT = WHERE_OUTPUTS.stop
HAVING_OUTPUTS = slice(GROUP_BY_OUTPUT + 1, GROUP_BY_OUTPUT + 1 + len(AGGREGATES))
ORDER_BY_OUTPUTS = slice(HAVING_OUTPUTS.stop, HAVING_OUTPUTS.stop + len(AGGREGATES))
COLUMN_OUTPUTS = ORDER_BY_OUTPUTS.stop
WHERE_OR_OUTPUT = len(KEYWORDS)
QUESTION_OUTPUTS = len(KEYWORDS) + 1


FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SketchScores:
    """The sketch model's logits for a whole schema, its windows merged. `column_logits` has a row
    for `*` (row 0) and one for each column c (row c + 1)."""

    column_logits: FloatArray
    table_logits: FloatArray
    question_logits: FloatArray

    def column(self, column: int) -> FloatArray:
        row: FloatArray = self.column_logits[column + 1]
        return row


def merge_windows(
    schema: Schema,
    *,
    window_columns: Sequence[Sequence[int]],
    window_tables: Sequence[Sequence[int]],
    column_logits: Sequence[FloatArray],
    table_logits: Sequence[FloatArray],
    question_logits: Sequence[FloatArray],
) -> SketchScores:
    """One set of logits from the windows' own: each item from the window(s) naming it (mean
    where several do: `*`, a table split by columns), question outputs averaged over windows."""
    columns = np.zeros((len(schema.columns) + 1, COLUMN_OUTPUTS), dtype=np.float32)
    column_counts = np.zeros(len(schema.columns) + 1, dtype=np.float32)
    tables = np.zeros(len(schema.tables), dtype=np.float32)
    table_counts = np.zeros(len(schema.tables), dtype=np.float32)
    for names, logits in zip(window_columns, column_logits, strict=True):
        rows = np.asarray(names, dtype=np.int64) + 1
        np.add.at(columns, rows, logits[: len(names)])
        np.add.at(column_counts, rows, 1.0)
    for names, logits in zip(window_tables, table_logits, strict=True):
        rows = np.asarray(names, dtype=np.int64)
        np.add.at(tables, rows, logits[: len(names)])
        np.add.at(table_counts, rows, 1.0)
    columns /= np.maximum(column_counts, 1.0)[:, None]
    tables /= np.maximum(table_counts, 1.0)
    question = np.mean(np.stack(list(question_logits)), axis=0).astype(np.float32)
    return SketchScores(column_logits=columns, table_logits=tables, question_logits=question)


def _log_sigmoid(x: FloatArray) -> FloatArray:
    result: FloatArray = -np.logaddexp(0.0, -x)
    return result


def k_best_sets(
    logits: FloatArray,
    k: int,
    valid: Callable[[frozenset[int]], bool] = bool,
    *,
    candidates: int = 24,
    tries: int = 4096,
) -> list[tuple[frozenset[int], float]]:
    """The k most probable sets of items, each item in or out independently with probability
    sigmoid(logit), among the sets `valid` accepts; each with its log-probability.

    The most probable set takes every item with a positive logit; any other set differs from it
    by flipping some items, and flipping item i costs |logit_i| of log-probability. So the sets in
    order of probability are the subsets of flips in order of their summed cost, enumerated best
    first (a heap over "extend with the next flip" / "replace the last flip with the next"). Only
    the `candidates` cheapest flips are considered, and at most `tries` sets are looked at.
    """
    logits = np.asarray(logits, dtype=np.float64).astype(np.float32)
    best = frozenset(int(i) for i in np.flatnonzero(logits > 0))
    base = float(np.sum(_log_sigmoid(np.abs(logits))))
    costs = np.abs(logits)
    order = [int(i) for i in np.argsort(costs, kind="stable")[:candidates]]
    found: list[tuple[frozenset[int], float]] = []

    def chosen(flips: tuple[int, ...]) -> frozenset[int]:
        return best.symmetric_difference(order[j] for j in flips)

    if valid(best):
        found.append((best, base))
    heap: list[tuple[float, tuple[int, ...]]] = []
    if order:
        heapq.heappush(heap, (float(costs[order[0]]), (0,)))
    looked = 0
    while heap and len(found) < k and looked < tries:
        cost, flips = heapq.heappop(heap)
        looked += 1
        items = chosen(flips)
        if valid(items):
            found.append((items, base - cost))
        last = flips[-1]
        if last + 1 < len(order):
            following = float(costs[order[last + 1]])
            heapq.heappush(heap, (cost + following, (*flips, last + 1)))
            heapq.heappush(
                heap, (cost - float(costs[order[last]]) + following, (*flips[:-1], last + 1))
            )
    return found


def valid_keywords(indexes: frozenset[int]) -> bool:
    """Clause rules a keyword set must obey: ORDER BY with exactly one direction and a direction
    only with ORDER BY; HAVING only with GROUP BY; LIMIT only with ORDER BY (without an order
    the rows kept are arbitrary, and no Spider gold query with LIMIT lacks one); at most one set
    operation."""
    chosen = {KEYWORDS[i] for i in indexes}
    directions = len(chosen & {"asc", "desc"})
    if ("order by" in chosen) != (directions == 1) or directions > 1:
        return False
    if "having" in chosen and "group by" not in chosen:
        return False
    if "limit" in chosen and "order by" not in chosen:
        return False
    return len(chosen & set(SET_OPERATIONS)) <= 1


def select_candidates(
    scores: SketchScores, k: int, schema: Schema | None = None
) -> list[tuple[frozenset[SelectItem], float]]:
    """The k most probable non-empty SELECT item sets; with `schema`, only sets that show no two
    plain columns of the same name (`city.population, country.population`: Spider's gold
    queries almost never do, and such sketches were almost always wrong)."""
    logits = scores.column_logits[:, SELECT_OUTPUTS]
    flat = logits.reshape(-1)
    width = logits.shape[1]

    def item(i: int) -> SelectItem:
        return SelectItem(AGGREGATES[i % width], i // width - 1)

    def valid(items: frozenset[int]) -> bool:
        if not items:
            return False
        if schema is None:
            return True
        names = [
            schema.columns[chosen.column].name.casefold()
            for chosen in map(item, items)
            if not chosen.aggregate and chosen.column != STAR
        ]
        return len(names) == len(set(names))

    return [(frozenset(map(item, items)), score) for items, score in k_best_sets(flat, k, valid)]


def from_candidates(scores: SketchScores, k: int) -> list[tuple[frozenset[int], float]]:
    """The k most probable non-empty FROM table sets."""
    return k_best_sets(scores.table_logits, k)


def keyword_candidates(scores: SketchScores, k: int) -> list[tuple[frozenset[str], float]]:
    """The k most probable keyword sets that obey the clause rules."""
    return [
        (frozenset(KEYWORDS[i] for i in items), score)
        for items, score in k_best_sets(scores.question_logits[: len(KEYWORDS)], k, valid_keywords)
    ]


def _positive_or_best(logits: FloatArray, required: bool) -> list[int]:
    """Indexes of positive logits; the single best one when none is positive but one is needed."""
    chosen = [int(i) for i in np.flatnonzero(logits > 0)]
    if not chosen and required and logits.size:
        chosen = [int(np.argmax(logits))]
    return chosen


def slots_for(scores: SketchScores, keywords: frozenset[str], *, more_where: float = 0.0) -> Slots:
    """The most probable slots, consistent with the keywords: a clause's slots are filled only
    when its keyword is in the set, and then with at least one item. A WHERE predicate after
    the most probable one needs a logit above `more_where` (`[sketch] more_where_logit`)."""
    columns = scores.column_logits
    width = len(AGGREGATES)

    def items(outputs: slice, keyword: str) -> tuple[SelectItem, ...]:
        if keyword not in keywords:
            return ()
        flat = columns[:, outputs].reshape(-1)
        order = _positive_or_best(flat, True)
        order.sort(key=lambda i: -flat[i])
        return tuple(SelectItem(AGGREGATES[i % width], i // width - 1) for i in order)

    where: tuple[Predicate, ...] = ()
    if "where" in keywords:
        flat = columns[1:, WHERE_OUTPUTS].reshape(-1)
        count = len(OPERATORS)
        chosen = sorted(_positive_or_best(flat, True), key=lambda i: -flat[i])
        where = tuple(
            Predicate(
                i // count, OPERATORS[i % count], nested=OPERATORS[i % count] in ("in", "not in")
            )
            for n, i in enumerate(chosen)
            if n == 0 or flat[i] > more_where
        )
    group_by: frozenset[int] = frozenset()
    if "group by" in keywords:
        group_by = frozenset(i for i in _positive_or_best(columns[1:, GROUP_BY_OUTPUT], True))
    return Slots(
        where=where,
        where_or="where" in keywords and bool(scores.question_logits[WHERE_OR_OUTPUT] > 0),
        group_by=group_by,
        having=items(HAVING_OUTPUTS, "having"),
        order_by=items(ORDER_BY_OUTPUTS, "order by"),
        limit=1 if "limit" in keywords else None,
    )


SketchParts = tuple[frozenset[SelectItem], frozenset[str], Slots]
"""A sketch's SELECT, KEYWORDS and slots, as the repairs of `sketch_rules` return them."""
