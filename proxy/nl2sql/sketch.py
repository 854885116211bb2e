"""SQL sketches: what ZeroNL2SQL's small models decide before any SQL is written.

A `Sketch` is the SELECT items (each a column, or `*`, with its aggregate), the FROM tables and the
clause KEYWORDS of a query, plus the `Slots` a completion needs without an LLM (WHERE columns with
their operators, GROUP BY, HAVING, ORDER BY, LIMIT). Schema items are global indexes into a
`Schema` (`Schema.columns`, `Schema.tables`); `STAR` stands for `*`.

The vocabularies below are shared by the labels the models are trained on
(`model_export/sketch_labels.py`), the model heads, and decoding. What each repair below was
measured to change on Spider is in docs/measurements.md ("Rules and their measured effect").
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from proxy.nl2sql.joins import (
    connected,
    implicit_keys,
    references_to,
    without_unused_lookups,
)
from proxy.nl2sql.schema import Schema, words_of

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


_QUESTION_WORD = re.compile(r"[a-z0-9]+")


_REQUESTS = frozenset({"show", "list", "give", "find", "return", "tell", "display"})
"""Verbs that ask for rows: a question word among them names no table, even a table so named."""


def plurals(word: str) -> tuple[str, ...]:
    """The plural forms a word may take: +s, +es, and y -> ies ("city", "cities")."""
    if word.endswith("y") and len(word) > 2:
        return (word + "s", word[:-1] + "ies")
    return (word + "s", word + "es")


@functools.lru_cache(maxsize=16384)  # `rank` asks the same again for each pair it repairs
def _word_match(name: str, said: str) -> int:
    """How closely a word of a table's name matches a word of the question: 2 equal, or a
    plural or singular of it (`plurals`); 1 the same in their first five letters or more with
    at most four letters after them ("enrolment", "enrolled"); 0 not at all."""
    if said in _REQUESTS:
        return 0
    if name == said or said in plurals(name) or name in plurals(said):
        return 2
    common = next(
        (i for i, (a, b) in enumerate(zip(name, said, strict=False)) if a != b),
        min(len(name), len(said)),
    )
    return 1 if common >= 5 and common >= max(len(name), len(said)) - 4 else 0


def _name_matches(said: list[str], table_words: str) -> dict[tuple[int, int], int]:
    """Where in the question's words a table's name is said: (start, number of words) -> how
    closely (the weakest of its words' `_word_match`)."""
    words = table_words.lower().split()
    found: dict[tuple[int, int], int] = {}
    for i in range(len(said) - len(words) + 1 if words else 0):
        span = zip(words, said[i : i + len(words)], strict=True)
        closeness = min(_word_match(w, s) for w, s in span)
        if closeness:
            found[i, len(words)] = closeness
    return found


def names_table(question: str, table_words: str) -> bool:
    """Whether the question says a table's name (`Table.label`), its words in order ("poker
    players" for "poker player"). The question's first word is not looked at: it is the verb of
    a request ("Show ...", "List ..."), and tables are named like that too."""
    return bool(_name_matches(_QUESTION_WORD.findall(question.lower())[1:], table_words))


def tables_named_in(question: str, schema: Schema) -> frozenset[int]:
    """The tables whose names the question says (`names_table`), by their words or by their
    name itself (Spider's visitor table reads "customer"); where the same words say two names,
    the closer one only: "visitors" names visitor, not visit."""
    said = _QUESTION_WORD.findall(question.lower())[1:]
    matches: dict[int, dict[tuple[int, int], int]] = {}
    for t, table in enumerate(schema.tables):
        found = _name_matches(said, table.label)
        for span, closeness in _name_matches(said, words_of(table.name)).items():
            found[span] = max(found.get(span, 0), closeness)
        matches[t] = found
    closest: dict[tuple[int, int], int] = {}
    for found in matches.values():
        for span, closeness in found.items():
            closest[span] = max(closest.get(span, 0), closeness)
    return frozenset(
        t
        for t, found in matches.items()
        if any(closeness == closest[span] for span, closeness in found.items())
    )


def named_tables(
    schema: Schema,
    select: frozenset[SelectItem],
    slots: Slots,
    said: frozenset[int],
    model_tables: frozenset[int],
    *,
    counted: frozenset[int] | None = None,
) -> frozenset[int] | None:
    """The FROM a SELECT x KEYWORDS pair calls for itself: the tables of the columns its SELECT
    and slots name, plus those of `model_tables` (the sketch model's best FROM set) that the
    question names (`said`: `tables_named_in`), unless a WHERE condition is a subquery, whose
    tables those are ("singers that do not have any song": singer alone, the song table is the
    subquery's); for a pair that counts rows, plus every table
    the question names (what is counted is a table no column names: "how many pets do students
    older than 20 own" counts pets of students); and the tables that join them
    (`joins.connected`: "singers in concerts of 2014" is singer, singer_in_concert and concert,
    as completion writes it), less the lookups none of its columns is read from
    (`joins.without_unused_lookups`), plus the table whose rows a count per key counts
    (`counted_per_key`), and, given the tables the question counts (`counted`:
    `tables_counted_in`), the table whose rows a count over another counts (`counted_rows`).
    None when that leaves no table, or when a counting pair
    has a nested predicate (the table named may be the subquery's: "dogs that have not had a
    treatment").

    The sketch model scores tables on their own, and its FROM sets often carry a table nothing
    asks for; joined in, it multiplies or drops rows ("singers by net worth" joined with their
    songs). A counting pair loses its unused lookups too, as Spider's gold queries write it:
    "how many dogs went through treatments" reads treatments alone, and completion counts the
    dogs by the key that references them (count(DISTINCT treatments.dog_id):
    `complete_plm._counted_table`)."""
    items = (*select, *slots.having, *slots.order_by)
    counts = any(item.aggregate == "count" for item in items)
    columns = [
        *(item.column for item in items if item.column != STAR),
        *(predicate.column for predicate in slots.where),
        *slots.group_by,
    ]
    if counts and any(p.nested for p in slots.where):
        return None
    if not columns and not counts:
        return None
    named = {schema.columns[column].table for column in columns}
    if counts:
        named.update(said)
    elif not any(p.nested for p in slots.where):
        named.update(said & model_tables)
    if not named:
        return None
    joined = without_unused_lookups(schema, connected(schema, named), columns)
    keyed = counted_per_key(
        schema, items, slots.group_by, joined, said=said, model_tables=model_tables
    )
    if counted is None:
        return keyed
    return counted_rows(
        schema, items, slots.group_by, keyed, counted=counted, model_tables=model_tables
    )


def counted_per_key(
    schema: Schema,
    items: Sequence[SelectItem],
    group_by: frozenset[int],
    tables: frozenset[int],
    *,
    said: frozenset[int],
    model_tables: frozenset[int],
) -> frozenset[int]:
    """`tables` with the rows a count(*) per key counts: a FROM of one table, grouped by its
    primary key, counts one row a group, which is no question's answer ("the department that
    offers the most degrees" counts degree programs per department). The table whose key
    references that primary key joins it: the one the question names (`said`), else the one
    the sketch model's FROM holds (`model_tables`), else the only one. Unchanged otherwise,
    and where the key is itself a key of another table (Spider's friend.student_id)."""
    if len(tables) != 1 or not any(i.aggregate == "count" and i.column == STAR for i in items):
        return tables
    (table,) = tables
    keys = schema.primary_key(table)
    if len(keys) != 1 or keys[0] not in group_by:
        return tables
    if any(k.column == keys[0] for k in (*schema.foreign_keys, *implicit_keys(schema))):
        return tables  # a key that is another table's (Spider's friend.student_id): its rows
    referencing = {schema.columns[c].table for c in references_to(schema, table)} - {table}
    for found in (referencing & said, referencing & model_tables, referencing):
        if len(found) == 1:
            return tables | found
    return tables


_COUNTED = re.compile(
    r"\b(?:how many|number of|count of|count the|more than one|most|fewest|least)"
    r"((?:\s+[a-z0-9]+){1,3})",
    re.IGNORECASE,
)


def tables_counted_in(question: str, schema: Schema) -> frozenset[int]:
    """The tables whose rows the question counts: those it names in the three words after "how
    many", "number of", "count the", "more than one", "most", "fewest" or "least" ("how many
    pets", "the number of car models", "the most languages")."""
    counted: set[int] = set()
    for match in _COUNTED.finditer(question):
        counted |= tables_named_in("of" + match[1], schema)
    return frozenset(counted)


def counted_rows(
    schema: Schema,
    items: Sequence[SelectItem],
    group_by: frozenset[int],
    tables: frozenset[int],
    *,
    counted: frozenset[int],
    model_tables: frozenset[int],
) -> frozenset[int]:
    """`tables` with the rows a count(*) over one other table counts: "how many car models
    were produced by American Motor Company" reads car_makers.fullname and counts model_list,
    the table whose key references car_makers. The referencing table is the one the question
    counts (`counted`: `tables_counted_in`), else the one the sketch model's FROM holds
    (`model_tables`). Unchanged where the question counts the table itself ("how many pets
    weigh more than 10"), where the count is per the table's key (`counted_per_key`), and where
    no single such table is found."""
    if len(tables) != 1 or not any(i.aggregate == "count" and i.column == STAR for i in items):
        return tables
    (table,) = tables
    if table in counted or set(schema.primary_key(table)) & group_by:
        return tables
    referencing = {schema.columns[c].table for c in references_to(schema, table)} - {table}
    for found in (referencing & counted, referencing & model_tables):
        if len(found) == 1:
            return tables | found
    return tables


_SPOKEN_AGGREGATE = {
    "average": "avg",
    "mean": "avg",
    "maximum": "max",
    "max": "max",
    "minimum": "min",
    "min": "min",
    "total": "sum",
}
_AGGREGATE_WORD = "(?:" + "|".join(_SPOKEN_AGGREGATE) + ")"
_AGGREGATE_LIST = re.compile(
    rf"\b({_AGGREGATE_WORD}(?:\s*(?:,\s*(?:and\s+)?|\band\s+){_AGGREGATE_WORD})+)\b((?:\s+\w+)*)",
    re.IGNORECASE,
)
_FILLER_WORDS = frozenset({"the", "of", "a", "an", "all", "number", "numbers", "value", "values"})
_AGGREGATE_WINDOW = 4  # words after the list where its column is named


def spoken_aggregates(
    question: str, schema: Schema, select: frozenset[SelectItem], group_by: frozenset[int]
) -> frozenset[SelectItem] | None:
    """The SELECT a question spells out as a list of aggregates of one column ("the average,
    minimum, and maximum age", "the maximum and minimum share"), in place of `select`'s items
    on that column and its other aggregates; its bare columns that `group_by` holds stay ("for
    each type of pet"). The column is the one whose words the list is followed by, among those
    `select` names first; else `select`'s first aggregated column. None where the question has
    no such list, or where the column is grouped by itself. A column's words that name its
    table ("singer" of singer.singer_id) do not count as naming it. The sketch model rarely puts
    two aggregates of one column in its SELECT."""
    match = _AGGREGATE_LIST.search(question)
    if match is None:
        return None
    aggregates = list(
        dict.fromkeys(_SPOKEN_AGGREGATE[w] for w in re.findall(_AGGREGATE_WORD, match[1].lower()))
    )
    if len(aggregates) < 2:
        return None
    following = [w for w in _QUESTION_WORD.findall(match[2].lower()) if w not in _FILLER_WORDS][
        :_AGGREGATE_WINDOW
    ]
    said = set(_QUESTION_WORD.findall(question.lower()))
    named = [item.column for item in select if item.column != STAR]

    def said_score(column: int) -> tuple[int, int, int]:
        near = _naming(schema, column, following)
        words = schema.columns[column].label.lower().split()
        anywhere = sum(w in said for w in words if w not in _FILLER_WORDS)
        return near, int(column in named), anywhere

    best = max(range(len(schema.columns)), key=said_score, default=None)
    target: int | None = None
    if best is not None and said_score(best)[0] > 0:
        target = best
    else:
        target = next((i.column for i in select if i.aggregate and i.column != STAR), None)
    if target is None or target in group_by:
        return None
    kept = {item for item in select if not item.aggregate and item.column in group_by}
    return frozenset({*kept, *(SelectItem(aggregate, target) for aggregate in aggregates)})


_ASKS_FOR = re.compile(
    r"^\s*(?:what\s+(?:is|are|was|were)|find|show|list|give|return|compute|tell|display)"
    r"(?:\s+me)?(?:\s+the)?\s+",
    re.IGNORECASE,
)
_LISTS_FOR = re.compile(rf"^\s*(?:for\s+(?:each|every)\s+[^,]+,\s*)?{_ASKS_FOR.pattern[1:]}", re.I)
"""`_ASKS_FOR`, after the groups a list is asked for: "For each continent, list its id, ..."."""
_ITEM_SEPARATOR = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+", re.IGNORECASE)
_PHRASE_END = frozenset(
    {
        "in", "for", "among", "across", "from", "with", "that", "who", "whose", "where", "by",
        "per", "of", "at", "on", "each", "all", "over", "to", "which", "when", "do", "does",
        "did", "is", "are", "was", "were", "has", "have",
    }
)  # fmt: skip
_LEADING_FILLER = frozenset({"the", "a", "an", "number", "numbers", "of", "value", "values"})


def spoken_select(
    question: str, schema: Schema, select: frozenset[SelectItem], group_by: frozenset[int]
) -> frozenset[SelectItem] | None:
    """The SELECT a question asks for in its first words as aggregates of columns it names:
    "What is the total population and maximum GNP in Asia?" (sum(population), max(gnp)),
    "Find the average life expectancy and total population for each continent". Each
    aggregate word (average, mean, maximum, minimum, total) takes the column whose words follow
    it (up to a word like "in", "of" or "for"), preferring a column `select` names, then one
    of a table `select` reads; `select`'s bare columns that `group_by` holds stay. None unless
    every aggregate named a column, where a column is grouped by itself, and for "the total
    number of", which counts."""
    lead = _ASKS_FOR.match(question)
    if lead is None:
        return None
    named = {item.column for item in select if item.column != STAR}
    read = {schema.columns[c].table for c in named}
    items: list[SelectItem] = []
    for segment in _ITEM_SEPARATOR.split(question[lead.end() :]):
        words = _QUESTION_WORD.findall(segment.lower())
        if not words or words[0] not in _SPOKEN_AGGREGATE:
            break
        if words[:3] == ["total", "number", "of"]:
            return None  # a count ("the total number of airlines")
        phrase = _phrase(words[1:])

        def score(column: int, phrase: list[str] = phrase) -> tuple[int, bool, bool]:
            return (
                _naming(schema, column, phrase),
                column in named,
                schema.columns[column].table in read,
            )

        best = max(range(len(schema.columns)), key=score, default=None)
        if best is None or score(best)[0] == 0:
            return None
        items.append(SelectItem(_SPOKEN_AGGREGATE[words[0]], best))
    if not items or any(item.column in group_by for item in items):
        return None
    kept = {item for item in select if not item.aggregate and item.column in group_by}
    return frozenset({*kept, *items})


_SENTENCE_END = re.compile(r"[?.!;]\s*")
_OWNER_WORDS = frozenset({"his", "her", "their", "its", "or", "also", "both", "all", "each"})
"""Words before a column's own in a spoken list: "List his or her id, last name and cell phone"."""


def _counts(words: Sequence[str]) -> bool:
    """Whether a spoken item is a count or an aggregate ("the number of songs", "how many",
    "average age"), not a column ("version numbers")."""
    while words and words[0] in ("the", "a", "an"):
        words = words[1:]
    if not words:
        return False
    if words[0] in ("number", "numbers", "total"):
        return words[1:2] == ["of"] or words[0] == "total"
    return words[0] in ("count", "how") or words[0] in _SPOKEN_AGGREGATE


def spoken_columns(
    question: str, schema: Schema, select: frozenset[SelectItem]
) -> frozenset[SelectItem] | None:
    """`select` with the columns a sentence of the question lists in its first words and the
    sketch left out: "Show name, country, age for all singers" where the sketch selects country
    and age; "List his or her role, street, city and state". Each item of the list (split at
    commas and "and", ended by a word like "of", "for" or "who") takes the column whose own
    words and its table's name say most between them (`_explained`: "owner id" says
    owners.owner_id as much as dogs.owner_id), wholly said first, then one `select` names, then
    one of a table it reads. Only where the list has two items or more, every bare column
    `select` has is one the list names, and a column is missing; an item that names no column
    adds nothing. `select` takes no aggregate, nor does the list ("the name and average age"),
    except one count both say ("List the name, id and the number of cars of each maker", over
    makers.name and count(*): the count stays). The list may follow the groups it is asked
    for ("For each maker, list its id, name and ...")."""
    aggregated = frozenset(item for item in select if item.aggregate or item.column == STAR)
    if not select or len(aggregated) > 1 or any(i.aggregate != "count" for i in aggregated):
        return None  # a list of columns, or of columns and one count
    named = {item.column for item in select - aggregated}
    read = {schema.columns[c].table for c in named}

    def score(column: int, phrase: list[str]) -> tuple[int, bool, bool, bool, int]:
        said, wholly = _namings(schema, tuple(phrase))[column]
        if not said:
            return (0, False, False, False, 0)
        explained = _explained(schema, column, tuple(phrase))
        return (explained, wholly, column in named, schema.columns[column].table in read, said)

    for sentence in _SENTENCE_END.split(question):
        lead = _LISTS_FOR.match(sentence)
        if lead is None:
            continue
        listed: list[int] = []
        segments = _ITEM_SEPARATOR.split(sentence[lead.end() :])
        phrases: list[list[str]] = []
        counted = False
        for segment in segments:
            words = [w for w in _QUESTION_WORD.findall(segment.lower()) if w not in _OWNER_WORDS]
            if _counts(words):
                counting = _spoken_count(words)
                if not aggregated or counted or counting is None:
                    return None
                counted = True
                if any(w in _PHRASE_END for w in words[counting:]):
                    break  # the list ends here ("the number of accounts that she has")
                continue
            phrases.append(_phrase(words))
            if len(phrases[-1]) < len([w for w in words if w not in _LEADING_FILLER]):
                break  # the list ends here ("age for all singers")
        for phrase in _elided(schema, phrases):
            scores = {c: score(c, phrase) for c in range(len(schema.columns))}
            best = max(scores, key=lambda c: scores[c], default=None)
            if (
                best is not None
                and scores[best][0]
                and list(scores.values()).count(scores[best]) == 1
            ):
                listed.append(best)
        if len(segments) < 2 or not named <= set(listed) or named == set(listed):
            continue
        if counted != bool(aggregated):
            continue
        return frozenset(SelectItem("", c) for c in listed) | aggregated
    return None


def _spoken_count(words: Sequence[str]) -> int | None:
    """Where the words a spoken count counts start ("the number of | paragraphs", "how many |
    cars it has"), or None for an item that is no count ("the average age")."""
    start = 0
    while start < len(words) and words[start] in ("the", "a", "an", "total"):
        start += 1
    if words[start : start + 2] in (["number", "of"], ["how", "many"]):
        return start + 2
    return start + 1 if words[start : start + 1] == ["count"] else None


def _elided(schema: Schema, phrases: list[list[str]]) -> list[list[str]]:
    """A spoken list's items with the noun the last one ends in added to a one-word item that
    names no column whole by itself, where the two words do: "first, middle, and last names"
    lists "first names" and "middle names" ("email, cell phone and home phone" keeps "email";
    "addresses and author ids", a plural, keeps "addresses")."""
    if len(phrases) < 2 or len(phrases[-1]) < 2:
        return phrases

    def whole(phrase: list[str]) -> bool:
        return any(entire for _, entire in _namings(schema, tuple(phrase)))

    noun = phrases[-1][-1]
    return [
        [*phrase, noun]
        if len(phrase) == 1
        and not phrase[0].endswith("s")  # a noun of its own: "addresses and author ids"
        and not whole(phrase)
        and whole([*phrase, noun])
        else phrase
        for phrase in phrases
    ]


def _phrase(words: Iterable[str], stop: Iterable[str] = ()) -> list[str]:
    """The words that name a column after a cue ("maximum", "largest"): leading filler ("the
    number of") skipped, up to a word like "in", "of" or "for" (or one of `stop`), at most
    `_AGGREGATE_WINDOW` of them."""
    phrase: list[str] = []
    for word in words:
        if word in _LEADING_FILLER and not phrase:
            continue
        if word in _PHRASE_END or word in stop or len(phrase) == _AGGREGATE_WINDOW:
            break
        phrase.append(word)
    return phrase


def _naming(schema: Schema, column: int, phrase: Sequence[str]) -> int:
    """How many of a column's own words (`_own_words`) the phrase says, a word or two or three
    of it run together counting as one: "life expectancy" says `lifeexpectancy`, a name no
    split into known words (`schema.spelled_out`) found."""
    said = [
        *phrase,
        *("".join(phrase[i : i + n]) for n in (2, 3) for i in range(len(phrase) - n + 1)),
    ]
    return sum(any(_word_match(w, s) for s in said) for w in _own_words(schema, column))


@functools.lru_cache(maxsize=4096)
def _own_words(schema: Schema, column: int) -> tuple[str, ...]:
    """A column's words, less filler and the words that name its table ("singer" of
    singer.singer_id), unless nothing else is left."""
    words = [w for w in schema.columns[column].label.lower().split() if w not in _FILLER_WORDS]
    table = schema.tables[schema.columns[column].table].label.lower().split()
    own = [w for w in words if not any(_word_match(t, w) == 2 for t in table)] or words
    return tuple(own)


def _explained(schema: Schema, column: int, phrase: tuple[str, ...]) -> int:
    """How many words of `phrase` a column's name and its table's name say between them: "owner
    id" is all said by owners.owner_id (its own word "id", its table "owner") as much as by
    dogs.owner_id."""
    column_of = schema.columns[column]
    words = (
        *column_of.label.lower().split(),
        *schema.tables[column_of.table].label.lower().split(),
    )
    return sum(1 for said in phrase if any(_word_match(w, said) for w in words))


@functools.lru_cache(maxsize=1024)
def _namings(schema: Schema, phrase: tuple[str, ...]) -> tuple[tuple[int, bool], ...]:
    """For each column of the schema: how many of its own words the phrase says (`_naming`),
    and whether that is all of them. Once per phrase: every pair of a question asks again."""
    found = []
    for column in range(len(schema.columns)):
        said = _naming(schema, column, phrase)
        found.append((said, said == len(_own_words(schema, column))))
    return tuple(found)


def wholly_named(schema: Schema, words: Sequence[str]) -> list[int]:
    """The columns all of whose own words `words` say (`_naming`): "version number" names
    templates.version_number."""
    namings = _namings(schema, tuple(w.lower() for w in words))
    return [c for c, (said, whole) in enumerate(namings) if said and whole]


def spoken_aggregate_of(
    question: str, schema: Schema, select: frozenset[SelectItem]
) -> frozenset[SelectItem] | None:
    """`select` with the aggregate the question says for a column it aggregates: "the maximum
    net worth of singers of each citizenship" over sum(net_worth), "the total sales of their
    songs" over avg(sales). Only an average, sum, maximum or minimum that `select` already
    takes of that column changes; None where nothing does."""
    items = [item for item in select if item.aggregate in ("avg", "sum", "max", "min")]
    aggregated = {item.column: item for item in items}
    if not aggregated or len(aggregated) != len(items):
        return None  # none, or a column with several
    words = _QUESTION_WORD.findall(question.lower())
    changed = dict(aggregated)
    for at, word in enumerate(words):
        if word not in _SPOKEN_AGGREGATE or words[at : at + 3] == ["total", "number", "of"]:
            continue
        phrase = _phrase(words[at + 1 :], stop=_SPOKEN_AGGREGATE)
        scores = {column: _naming(schema, column, phrase) for column in aggregated}
        best = max(scores, key=lambda c: scores[c])
        if scores[best] and sum(1 for v in scores.values() if v == scores[best]) == 1:
            changed[best] = SelectItem(_SPOKEN_AGGREGATE[word], best)
    if changed == aggregated:
        return None
    return (select - set(items)) | set(changed.values())


def shown_groups(select: frozenset[SelectItem], slots: Slots) -> frozenset[SelectItem]:
    """A SELECT of aggregates only, grouped, with no HAVING, ORDER BY or LIMIT ("how many
    friends does each student have"), with the columns it groups by shown too: a list of counts
    without what each counts is no answer. Other SELECTs as they are."""
    if (
        not slots.group_by
        or not all(item.aggregate for item in select)
        or slots.having
        or slots.order_by
        or slots.limit is not None
    ):
        return select
    return select | {SelectItem("", column) for column in slots.group_by}


_HOW_MANY_DIFFERENT = re.compile(
    r"^\s*(?:how many|count the number of|what is the number of)\s+(?:\w+\s+)?"
    r"(?:different|distinct|unique)\b",
    re.IGNORECASE,
)
_TOGETHER = re.compile(r"\b(?:together|combined|altogether|in total)\b", re.IGNORECASE)


def one_number_asked(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
) -> tuple[frozenset[SelectItem], frozenset[str]] | None:
    """A SELECT of one bare column where the question asks for one number: "how many different
    types of pet" counts the distinct types (`count(DISTINCT pettype)`), "how much surface area
    do they cover together" sums it. Not with GROUP BY; a sum only of a number column that is
    no key. None where nothing changes."""
    if len(select) != 1 or slots.group_by:
        return None
    (item,) = select
    if item.aggregate or item.column == STAR:
        return None
    column = schema.columns[item.column]
    if _HOW_MANY_DIFFERENT.search(question):
        return frozenset({SelectItem("count", item.column)}), keywords | {"distinct"}
    key = column.primary_key or any(k.column == item.column for k in schema.foreign_keys)
    if _TOGETHER.search(question) and column.numeric and not key:
        return frozenset({SelectItem("sum", item.column)}), keywords
    return None


_EXTREMES = {
    "smallest": "min",
    "lowest": "min",
    "minimum": "min",
    "earliest": "min",
    "largest": "max",
    "highest": "max",
    "maximum": "max",
    "biggest": "max",
    "greatest": "max",
    "latest": "max",
}


def spoken_extreme(
    question: str, schema: Schema, select: frozenset[SelectItem], keywords: frozenset[str]
) -> frozenset[SelectItem] | None:
    """`select` with a plain column the question names right after "smallest", "highest",
    "maximum" (...) as that column's min or max, in a sketch that neither groups nor orders
    ("the smallest weight of the cars with 8 cylinders": min(weight), not every weight); None
    where nothing changes. Where Spider train's questions put such a word before a column their
    gold query shows, outside GROUP BY, the gold query mostly takes its min or max."""
    if keywords & {"group by", "order by"}:
        return None
    plain = [item for item in select if not item.aggregate and item.column != STAR]
    if not plain:
        return None
    words = _QUESTION_WORD.findall(question.lower())
    changed: dict[SelectItem, SelectItem] = {}
    for at, word in enumerate(words):
        if word not in _EXTREMES:
            continue
        phrase = _phrase(words[at + 1 :])
        full = [
            item
            for item in plain
            if _naming(schema, item.column, phrase) == len(_own_words(schema, item.column))
            and _naming(schema, item.column, phrase)
        ]
        if len(full) == 1:
            changed[full[0]] = SelectItem(_EXTREMES[word], full[0].column)
    if not changed:
        return None
    return (select - set(changed)) | set(changed.values())


_ASKS_FOR_ID = re.compile(r"\bids?\b", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def readable_names(schema: Schema) -> Mapping[int, int]:
    """Key columns named like a column of the table they reference, of another kind: the id a
    row holds, and the name it stands for (`flights.airline` -> airlines.uid, beside
    `airlines.airline`; `degrees.campus` -> `campuses.campus`). Each such key, to that column."""
    keys = _keys(schema)
    found: dict[int, int] = {}
    for key in (*schema.foreign_keys, *implicit_keys(schema)):
        column = schema.columns[key.column]
        same = [
            c
            for c in schema.table_columns[schema.columns[key.referenced].table]
            if schema.columns[c].name.lower() == column.name.lower()
            and c not in keys
            and schema.columns[c].numeric != column.numeric
        ]
        if len(same) == 1:
            found.setdefault(key.column, same[0])
    return found


def read_by_name(
    question: str, schema: Schema, select: frozenset[SelectItem], slots: Slots
) -> tuple[frozenset[SelectItem], Slots]:
    """`select` (its bare columns) and GROUP BY with each key that `readable_names` maps moved
    to the column it stands for: "which airlines have the most flights" shows and groups by
    airlines.airline, not flights.airline, the airline's id. Not where the question asks for
    an id ("the full name of each car maker, along with its id"). Spider's gold queries that
    select one of such a pair mostly select the name."""
    if _ASKS_FOR_ID.search(question):
        return select, slots
    return _moved(select, slots, readable_names(schema))


def _moved(
    select: frozenset[SelectItem], slots: Slots, moves: Mapping[int, int]
) -> tuple[frozenset[SelectItem], Slots]:
    """`select`'s bare columns and GROUP BY with each column `moves` maps replaced by its
    image; aggregates and the other slots as they are."""
    if not moves:
        return select, slots
    items = frozenset(
        SelectItem("", moves.get(i.column, i.column)) if not i.aggregate else i for i in select
    )
    group_by = frozenset(moves.get(c, c) for c in slots.group_by)
    return items, replace(slots, group_by=group_by)


def spoken_group(
    question: str, schema: Schema, select: frozenset[SelectItem], slots: Slots
) -> tuple[frozenset[SelectItem], Slots] | None:
    """`select` and slots grouped by the column the question groups by, "each year", "per
    director", where the sketch groups by one column those words do not name: the one column
    of a table the sketch reads that the words name whole, and nothing more. Shown where the
    grouped column was shown. None where nothing changes, and where the words name a table
    ("each product" groups by the product's key, whichever column names it). A looser rule,
    the column named most, was tried and not kept."""
    if len(slots.group_by) != 1:
        return None
    (grouped,) = slots.group_by
    read = {schema.columns[c].table for c in columns_used(select, slots)}
    columns = [c for c, column in enumerate(schema.columns) if column.table in read]
    for match in _EACH.finditer(question):
        phrase = _phrase(_QUESTION_WORD.findall(match[1].lower()))
        if not phrase or _naming(schema, grouped, phrase):
            continue
        if tables_named_in("each " + " ".join(phrase), schema):
            continue
        namings = _namings(schema, tuple(phrase))
        whole = [c for c in columns if namings[c][1] and namings[c][0] == len(phrase)]
        if len(whole) == 1:
            return _moved(select, slots, {grouped: whole[0]})
    return None


_WHICH = re.compile(r"^\s*(?:which|what)\s+((?:\w+\s*){1,4})", re.IGNORECASE)


def grouped_by_asked(
    question: str, schema: Schema, select: frozenset[SelectItem], slots: Slots
) -> Slots | None:
    """`slots` grouped by the shown column the question asks "which" of, where the sketch groups
    by its table's primary key and counts: "which grades have 4 or more high schoolers" groups
    by grade; grouped by id, each group is one high schooler and counts 1. Only where the
    words after "which" name that column whole and no table. None otherwise."""
    if len(slots.group_by) != 1:
        return None
    counts = any(i.aggregate == "count" for i in (*slots.having, *slots.order_by))
    (grouped,) = slots.group_by
    column = schema.columns[grouped]
    if not counts or not column.primary_key or len(schema.primary_key(column.table)) != 1:
        return None
    match = _WHICH.search(question)
    if match is None:
        return None
    phrase = _phrase(_QUESTION_WORD.findall(match[1].lower()))
    if not phrase or tables_named_in("which " + " ".join(phrase), schema):
        return None
    keys = _keys(schema)
    shown = [
        i.column
        for i in select
        if not i.aggregate
        and i.column != STAR
        and i.column not in keys
        and schema.columns[i.column].table == column.table
    ]
    namings = _namings(schema, tuple(phrase))
    asked = [c for c in shown if namings[c][1]]
    if len(asked) != 1:
        return None
    return replace(slots, group_by=frozenset(asked))


def columns_used(select: frozenset[SelectItem], slots: Slots) -> set[int]:
    """The columns (not `*`) a sketch's SELECT and slots read."""
    return {
        *(i.column for i in (*select, *slots.having, *slots.order_by)),
        *(p.column for p in slots.where),
        *slots.group_by,
    } - {STAR}


def tables_shown(schema: Schema, select: Iterable[SelectItem]) -> set[int]:
    """The tables of the columns (not `*`) a SELECT shows."""
    return {schema.columns[i.column].table for i in select if i.column != STAR}


@functools.lru_cache(maxsize=64)
def equal_columns(schema: Schema) -> Mapping[int, frozenset[int]]:
    """Columns a key makes equal in every joined row: a foreign key and the column it
    references, of the same name and kind (`car_names.model` -> `model_list.model`). Each such
    column, to the others."""
    found: dict[int, set[int]] = {}
    for key in (*schema.foreign_keys, *implicit_keys(schema)):
        one, other = schema.columns[key.column], schema.columns[key.referenced]
        if one.table == other.table or one.name.lower() != other.name.lower():
            continue
        if one.numeric != other.numeric:
            continue
        found.setdefault(key.column, set()).add(key.referenced)
        found.setdefault(key.referenced, set()).add(key.column)
    return {column: frozenset(others) for column, others in found.items()}


def nearest_equals(
    schema: Schema, select: frozenset[SelectItem], slots: Slots
) -> tuple[frozenset[SelectItem], Slots]:
    """`select` (its bare columns) and GROUP BY with each column that a key makes equal to
    another (`equal_columns`) moved to the one of them whose table joins the tables the other
    columns read in fewest tables: "the model of the car with the least horsepower" is
    car_names.model beside cars_data.horsepower, not model_list.model one join further. Ties
    and columns alone stay. Spider's gold queries that select such a column beside others
    mostly take the nearer one."""
    equals = equal_columns(schema)
    moved: dict[int, int] = {}
    shown = [i.column for i in select if not i.aggregate and i.column in equals]
    for column in shown:
        others = {schema.columns[c].table for c in columns_used(select, slots) - {column}}
        if not others:
            continue

        def joins(candidate: int, others: set[int] = others) -> int:
            return len(connected(schema, others | {schema.columns[candidate].table}))

        best = min(sorted(equals[column]), key=joins)
        if joins(best) < joins(column):
            moved[column] = best
    return _moved(select, slots, moved)


def aggregates_of_one_table(schema: Schema, select: frozenset[SelectItem]) -> frozenset[SelectItem]:
    """A SELECT of aggregates only whose columns lie in two tables or more, read from the one
    of those tables that has a column of every name ("the total population and maximum GNP in
    Asia": sum(country.population) beside max(country.gnp), not sum(city.population)); where
    several have, the one that already holds most of the items, unless that ties. Unchanged
    otherwise.

    No Spider train gold query aggregates columns of two tables in a SELECT of aggregates only;
    the sketch model proposes such SELECTs."""
    items = [i for i in select if i.column != STAR]
    if len(select) < 2 or not items or any(not i.aggregate for i in select):
        return select
    tables = {schema.columns[i.column].table for i in items}
    if len(tables) < 2:
        return select
    named: dict[tuple[int, str], int] = {
        (column.table, column.name.lower()): c for c, column in enumerate(schema.columns)
    }
    names = {schema.columns[i.column].name.lower() for i in items}
    holders = sorted(
        (sum(schema.columns[i.column].table == t for i in items), t)
        for t in tables
        if all((t, name) in named for name in names)
    )
    if not holders or (len(holders) > 1 and holders[-1][0] == holders[-2][0]):
        return select
    table = holders[-1][1]
    return frozenset(
        i
        if i.column == STAR
        else replace(i, column=named[(table, schema.columns[i.column].name.lower())])
        for i in select
    )


def one_nested_condition(schema: Schema, select: frozenset[SelectItem], slots: Slots) -> Slots:
    """`slots` with a nested condition said twice kept once: two with the same operator on
    columns a key makes equal (`equal_columns`: student.stuid NOT IN (...) beside
    has_pet.stuid NOT IN (...), the second the subquery's own column) are one condition. The
    one on a table the rest of the sketch reads stays, else the first. Spider's gold queries
    never hold such a pair."""
    equals = equal_columns(schema)
    nested = [p for p in slots.where if p.nested]
    used = columns_used(select, slots)
    dropped: set[Predicate] = set()
    for n, first in enumerate(nested):
        for second in nested[n + 1 :]:
            if first in dropped or second in dropped or first.operator != second.operator:
                continue
            if second.column not in equals.get(first.column, frozenset()):
                continue
            rest = used - {first.column, second.column}
            read = {schema.columns[c].table for c in rest}
            second_read = schema.columns[second.column].table in read
            first_read = schema.columns[first.column].table in read
            dropped.add(first if second_read and not first_read else second)
    if not dropped:
        return slots
    return replace(slots, where=tuple(p for p in slots.where if p not in dropped))


def nested_on_shown_table(schema: Schema, select: frozenset[SelectItem], slots: Slots) -> Slots:
    """`slots` with an IN or NOT IN subquery condition on a table nothing else in the sketch
    reads moved to the one table its SELECT shows: to the column of that table a key makes
    equal to the condition's, else to its primary key ("the countries that do not speak
    English": city.id NOT IN (...) -> country.code NOT IN (...)); kept once where that column
    already has such a condition. Unchanged where the SELECT shows several tables or none, or
    where the table has no single key. Spider's gold queries mostly put such a condition on a
    table the rest of the query reads."""
    shown = tables_shown(schema, select)
    if len(shown) != 1 or not any(p.nested for p in slots.where):
        return slots
    (table,) = shown
    where: list[Predicate] = []
    for n, condition in enumerate(slots.where):
        placed = condition
        if condition.nested and condition.operator in ("in", "not in"):
            rest = [p.column for p in slots.where[:n] + slots.where[n + 1 :]]
            read = shown | {schema.columns[c].table for c in (*rest, *slots.group_by)}
            if schema.columns[condition.column].table not in read:
                column = _keyed_column(schema, condition.column, table)
                if column is not None:
                    placed = replace(condition, column=column)
        if placed not in where:
            where.append(placed)
    return replace(slots, where=tuple(where))


def ordered_on_shown_table(schema: Schema, select: frozenset[SelectItem], slots: Slots) -> Slots:
    """`slots` with each ORDER BY column of a table nothing else in the sketch reads moved to
    the one column of the table the SELECT shows whose name ends in its name, of the same
    kind ("cartoon titles ordered by their air date": tv_series.air_date ->
    cartoon.original_air_date; "contestants ordered by contestant name": votes' ->
    contestants'). Unchanged where the SELECT shows several tables or none, and where no
    such column, or more than one, is found."""
    shown = tables_shown(schema, select)
    if len(shown) != 1 or not slots.order_by:
        return slots
    (table,) = shown
    rest = (
        *(p.column for p in slots.where),
        *slots.group_by,
        *(i.column for i in slots.having if i.column != STAR),
    )
    read = shown | {schema.columns[c].table for c in rest}
    ordered: list[SelectItem] = []
    for item in slots.order_by:
        column = item.column
        if column != STAR and schema.columns[column].table not in read:
            name = words_of(schema.columns[column].name).split()
            same = [
                c
                for c in schema.table_columns[table]
                if words_of(schema.columns[c].name).split()[-len(name) :] == name
                and schema.columns[c].numeric == schema.columns[column].numeric
            ]
            if len(same) == 1:
                column = same[0]
        ordered.append(replace(item, column=column))
    return replace(slots, order_by=tuple(ordered))


def _keyed_column(schema: Schema, column: int, table: int) -> int | None:
    """The column of `table` a key joins `column` to, else the table's single primary key."""
    for key in (*schema.foreign_keys, *implicit_keys(schema)):
        for one, other in ((key.column, key.referenced), (key.referenced, key.column)):
            if one == column and schema.columns[other].table == table:
                return other
    keys = schema.primary_key(table)
    return keys[0] if len(keys) == 1 else None


def columns_of_named_tables(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    slots: Slots,
    said: frozenset[int] | None = None,
    *,
    holding: Container[int] = frozenset(),
) -> tuple[frozenset[SelectItem], Slots]:
    """`select` and `slots` with each column of a table the question does not name moved to
    the column of the same name in the one table it names that has it: "the names of countries
    with the top 3 largest population" orders by country.population, not city.population.
    Likewise a column that is alone in its table moves to the column of its name in a table
    the other columns use ("the population and life expectancy in Brazil": country's, not
    city's). Keys (primary, foreign or implicit) stay where they are: they say how tables
    join; so does a WHERE column that holds a value the question names (`holding`), unless
    the column it would move to holds one too ("what region is Kabul in" is city.name = ?,
    not country.name). `said`: `tables_named_in(question, schema)`, where the caller has it."""
    said = tables_named_in(question, schema) if said is None else said
    keys = {k.column for k in (*schema.foreign_keys, *implicit_keys(schema))} | {
        i for i, c in enumerate(schema.columns) if c.primary_key
    }
    holds = {p.column for p in slots.where if p.column in holding}

    def kept(column: int, to: int) -> bool:
        return column in holds and to not in holding  # a named value stays where it is held

    moved: dict[int, int] = {}

    def move(column: int) -> int:
        if column == STAR or column in keys or schema.columns[column].table in said:
            return column
        if column not in moved:
            name = schema.columns[column].name.lower()
            same = [
                i
                for i, c in enumerate(schema.columns)
                if c.table in said and c.name.lower() == name and i not in keys
            ]
            moved[column] = same[0] if len(same) == 1 and not kept(column, same[0]) else column
        return moved[column]

    used = columns_used(select, slots)
    for column in used:
        move(column)
    # A column alone in its table, where a table the other columns use has one of that name:
    # "the population and life expectancy in Brazil" is the country's population.
    placed = {moved.get(c, c) for c in used}
    shown = {i.column for i in select}
    for column in used:
        if moved.get(column, column) != column or column in keys:
            continue
        table = schema.columns[column].table
        if any(schema.columns[c].table == table for c in placed - {column}):
            continue
        others = {schema.columns[c].table for c in placed - {column}}
        name = schema.columns[column].name.lower()
        same = [
            i
            for i, c in enumerate(schema.columns)
            if c.table in others and c.name.lower() == name and i not in keys
        ]
        if len(same) == 1 and same[0] not in shown and not kept(column, same[0]):
            moved[column] = same[0]
            placed = (placed - {column}) | {same[0]}

    def items(found: Iterable[SelectItem]) -> list[SelectItem]:
        return [SelectItem(i.aggregate, move(i.column)) for i in found]

    new_select = frozenset(items(select))
    new_slots = Slots(
        where=tuple(Predicate(move(p.column), p.operator, p.nested) for p in slots.where),
        where_or=slots.where_or,
        group_by=frozenset(move(c) for c in slots.group_by),
        having=tuple(items(slots.having)),
        order_by=tuple(dict.fromkeys(items(slots.order_by))),
        limit=slots.limit,
    )
    return new_select, new_slots


_SUPERLATIVE = re.compile(
    r"\b(?:largest|smallest|highest|lowest|biggest|greatest|shortest|longest|most|least|fewest)"
    r"\s+((?:\w+\s*){1,4})",
    re.IGNORECASE,
)
_ORDERED_BY = re.compile(
    r"\b(?:order(?:ed)?|sort(?:ed)?)\s+(?:by|of)\s+((?:\w+\s*){1,4})", re.IGNORECASE
)


def _ordering_phrase(question: str, explicit: bool = False) -> list[str] | None:
    """The words that name what the question orders by: after its superlative ("the largest
    area"), else (or, `explicit`, only) after "ordered by", "sorted by", "in descending order
    of" (less "his", "their" ...); None where it says neither."""
    superlative = None if explicit else _SUPERLATIVE.search(question)
    match = superlative or _ORDERED_BY.search(question)
    if match is None:
        return None
    words = [w for w in _QUESTION_WORD.findall(match[1].lower()) if w not in _OWNER_WORDS]
    return _phrase(words)


def spoken_order(
    question: str, schema: Schema, select: frozenset[SelectItem], slots: Slots
) -> Slots:
    """`slots` ordered by the column the question's superlative names, or the words after
    "ordered by", "sorted by", "in alphabetical order of" (`_ordering_phrase`), where the sketch
    orders by one plain column and the question names another: "the country with the largest
    area" orders by surfacearea, not population; "names and birth dates of people, ordered by
    their names" by name. The column is one of a table the sketch reads. Where the sketch orders
    by several columns, or by a count that "order by" overrules, `_said_order` picks."""
    phrase = _ordering_phrase(question)
    if phrase is None or not slots.order_by:
        return slots
    said = _said_order(schema, select, slots, phrase, explicit=_ordering_phrase(question, True))
    if said is not None:
        return replace(slots, order_by=(said,))
    if len(slots.order_by) != 1 or slots.order_by[0].aggregate or slots.order_by[0].column == STAR:
        return slots
    current = slots.order_by[0].column
    read = tables_shown(schema, select)
    read.add(schema.columns[current].table)

    def near(column: int) -> int:
        return _naming(schema, column, phrase)

    candidates = [i for i, c in enumerate(schema.columns) if c.table in read]
    best = max(candidates, key=near, default=current)
    if near(best) == 0 or near(current) >= near(best):
        return slots
    return replace(slots, order_by=(SelectItem("", best),))


def _said_order(
    schema: Schema,
    select: frozenset[SelectItem],
    slots: Slots,
    phrase: Sequence[str],
    *,
    explicit: Sequence[str] | None,
) -> SelectItem | None:
    """The one plain column the ordering words (`phrase`) name whole where the sketch orders by
    several columns, one of them that ("in alphabetical order of name" over ORDER BY
    birth_date, name), or the one the words after "order by" (`explicit`) name whole where it
    orders by a count and SELECT shows that column ("the number of paragraphs in each document.
    Order by document id"; not "the most common hometown", which orders by the count), or in
    part where none is named whole ("ordered by id" of the document ids shown). None
    otherwise."""
    order_by = slots.order_by
    if len(order_by) > 1:
        pool = [i.column for i in order_by if not i.aggregate and i.column != STAR]
    elif order_by[0].aggregate == "count" and explicit:
        pool = [i.column for i in select if not i.aggregate and i.column != STAR]
        phrase = explicit
    else:
        return None
    namings = _namings(schema, tuple(phrase))
    named = [c for c in pool if namings[c][1]]
    if not named and explicit and order_by[0].aggregate:
        # "ordered by id" of the document ids shown: the one shown column the words say in part
        named = [c for c in pool if namings[c][0]]
    return SelectItem("", named[0]) if len(named) == 1 else None


SketchParts = tuple[frozenset[SelectItem], frozenset[str], Slots]
"""A sketch's SELECT, KEYWORDS and slots, as the repairs below return them."""


def grouped_without_aggregate(
    question: str, select: frozenset[SelectItem], keywords: frozenset[str], slots: Slots
) -> SketchParts | None:
    """The sketch without GROUP BY where nothing is aggregated (SELECT, HAVING, ORDER BY): such
    groups only repeat their rows' columns ("each charge type and its amount" lists charges).
    None where something is, where there is no GROUP BY, or where the question speaks of an
    aggregate the sketch lacks ("the treatment type that costs the least money in total").
    Spider's gold queries that group almost always aggregate something."""
    if "group by" not in keywords:
        return None
    if any(item.aggregate for item in (*select, *slots.having, *slots.order_by)):
        return None
    if any(word in _SPOKEN_AGGREGATE for word in _QUESTION_WORD.findall(question.lower())):
        return None
    return (
        select,
        keywords - {"group by", "having"},
        replace(slots, group_by=frozenset(), having=()),
    )


_SAID_DESCENDING = re.compile(
    r"\b(?:descending|decreasing|reverse(?:d)? (?:alphabetical|lexicographical)"
    r"|(?:high|highest|large|largest|big|biggest|most|greatest|z) to (?:low|lowest|small"
    r"|smallest|least|fewest|a)\b)",
    re.IGNORECASE,
)
_SAID_ASCENDING = re.compile(
    r"\b(?:ascending|increasing|(?<!reverse )(?<!reversed )alphabetical"
    r"|(?:low|lowest|small|smallest|least|fewest|a) to (?:high|highest|large|largest|big"
    r"|biggest|most|greatest|z)\b)",
    re.IGNORECASE,
)


def said_direction(question: str) -> str | None:
    """ "desc" or "asc" where the question says which way to sort in so many words
    ("descending", "from high to low", "in alphabetical order"); None where it says neither
    or both. The sketch's keywords follow it (`in_said_direction`), and so does completion's
    ORDER BY. Spider's gold queries that order where the question says a direction almost all
    order as it says."""
    down, up = _SAID_DESCENDING.search(question), _SAID_ASCENDING.search(question)
    if bool(down) == bool(up):
        return None
    return "desc" if down else "asc"


def in_said_direction(question: str, keywords: frozenset[str]) -> frozenset[str]:
    """`keywords` with the ORDER BY direction the question says in so many words
    (`said_direction`), where they order; else as they are."""
    said = said_direction(question)
    if said is None or "order by" not in keywords:
        return keywords
    return (keywords - {"asc", "desc"}) | {said}


_BY_FREQUENCY = re.compile(
    r"\b(?:by (?:their |its |the )?frequency|order of (?:their |its |the )?(?:count|frequency)"
    r"|by (?:their |its |the )?count\b|how often)",
    re.IGNORECASE,
)


def ordered_by_frequency(
    question: str, select: frozenset[SelectItem], keywords: frozenset[str], slots: Slots
) -> SketchParts | None:
    """The sketch grouped by its SELECT's columns and ordered by count(*) where the question
    sorts "by frequency" or "in order of count" ("the record formats of orchestras, sorted by
    their frequency"). Only for a SELECT of plain columns and a sketch that does not order by
    count(*) already; the direction is the sketch's, ascending where it has none. None
    otherwise. Spider train's gold queries of such questions all order by count(*)."""
    if not _BY_FREQUENCY.search(question) or not select:
        return None
    if any(item.aggregate or item.column == STAR for item in select):
        return None
    counted = (SelectItem("count", STAR),)
    if slots.order_by == counted:
        return None
    direction = {"desc"} if "desc" in keywords else {"asc"}
    chosen = (keywords - {"asc", "desc"}) | {"group by", "order by"} | direction
    grouped = replace(slots, group_by=frozenset(item.column for item in select), order_by=counted)
    return select, chosen, grouped


_AGE_WORDS = re.compile(r"\b(youngest|oldest)\b", re.IGNORECASE)


def _age_kind(schema: Schema, column: int, *, dated: bool = True) -> str:
    """ "age" for a column of an age, "birth" for one of a birth date (with `dated`, any date),
    else ""."""
    words = schema.columns[column].label.lower().split()
    if "age" in words:
        return "age"
    if any(w in ("birth", "born", "birthday") for w in words):
        return "birth"
    kind = schema.columns[column].type.lower()
    if dated and ("date" in words or kind in ("date", "datetime", "timestamp")):
        return "birth"
    return ""


_RECENCY = re.compile(r"\b(?:(most|least) recent(?:ly)?|(latest|newest|earliest))\b", re.IGNORECASE)


def spoken_recency(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
) -> tuple[frozenset[str], Slots] | None:
    """`keywords` and `slots` ordered by the one date column of the tables the sketch reads
    where the question asks for the most recent, latest, newest (descending) or earliest
    (ascending) and the sketch orders by one plain column that is no date ("the cost of the
    most recent treatment" orders by date_of_treatment, not cost_of_treatment). None where
    nothing changes; where it orders by several columns, one of them the date, by that alone."""
    match = _RECENCY.search(question)
    if match is None or not slots.order_by:
        return None
    dated = [i for i in slots.order_by if i.column != STAR and _dated(schema, i.column)]
    if len(slots.order_by) > 1 and len(dated) == 1 and not dated[0].aggregate:
        # "the most recently performed treatment" over ORDER BY cost, date: by the date alone
        return _latest(keywords, slots, dated[0].column, match)
    current = slots.order_by[0]
    if len(slots.order_by) > 1 or current.aggregate or current.column == STAR or dated:
        return None
    read = {schema.columns[c].table for c in columns_used(select, slots)}
    dates = [
        c for c, column in enumerate(schema.columns) if column.table in read and _dated(schema, c)
    ]
    if len(dates) != 1:
        return None
    return _latest(keywords, slots, dates[0], match)


def _latest(
    keywords: frozenset[str], slots: Slots, column: int, match: re.Match[str]
) -> tuple[frozenset[str], Slots]:
    """`keywords` and `slots` ordered by the date `column`, newest first where `match` (of
    `_RECENCY`) says "most recent", "latest" or "newest", else oldest first."""
    latest = (match[1] or match[2]).lower() in ("most", "latest", "newest")
    direction = "desc" if latest else "asc"
    ordered = replace(slots, order_by=(SelectItem("", column),))
    return (keywords - {"asc", "desc"}) | {direction}, ordered


def _dated(schema: Schema, column: int) -> bool:
    """Whether a column holds dates: by its type, or by the word "date" in its name."""
    kind = schema.columns[column].type.lower()
    return (
        kind in ("date", "datetime")
        or kind.startswith("timestamp")
        or "date" in schema.columns[column].label.lower().split()
    )


def spoken_age_order(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
) -> tuple[frozenset[str], Slots]:
    """`keywords` and `slots` ordered as "youngest" or "oldest" says: by the one column the
    sketch orders by where that is of an age or a birth date of a table its SELECT reads, else
    by the one column of an age (else of a birth date) of the tables its SELECT reads, in place
    of the plain columns it orders by ("the youngest pet" orders by pets.pet_age, not
    student.age and pets.weight; "the weight of the youngest dog" not by student.age), else by
    the one it orders by where that is of an age or a birth date;
    the youngest is the least age and the latest birth date, the oldest the greatest age and
    the earliest date. Unchanged for a sketch that orders by an aggregate, or by nothing,
    where no such column is found, and for another question. Spider's gold queries that order
    by one column for such a word almost all order as the word says."""
    match = _AGE_WORDS.search(question)
    order_by = slots.order_by
    if match is None or "order by" not in keywords or not order_by:
        return keywords, slots
    if any(item.aggregate or item.column == STAR for item in order_by):
        return keywords, slots
    kinds = {item.column: _age_kind(schema, item.column) for item in order_by}
    column = next((c for c, kind in kinds.items() if kind), None)
    read = tables_shown(schema, select)
    if len(order_by) != 1 or column is None or schema.columns[column].table not in read:
        columns = [c for c, col in enumerate(schema.columns) if col.table in read]
        ages = [c for c in columns if _age_kind(schema, c, dated=False) == "age"]
        births = [c for c in columns if _age_kind(schema, c, dated=False) == "birth"]
        found = ages if ages else births
        if len(found) == 1:
            column = found[0]
        elif len(order_by) != 1 or column is None:
            return keywords, slots
    ascending = (_age_kind(schema, column) == "age") == (match[1].lower() == "youngest")
    direction = "asc" if ascending else "desc"
    ordered = replace(slots, order_by=(SelectItem("", column),))
    return (keywords - {"asc", "desc"}) | {direction}, ordered


_GROUP_CUES = frozenset({"common", "popular", "frequent", "frequently", "often", "total"})
"""Words after a superlative that ask about groups, not one row's value: "the most common age" is
`GROUP BY age ORDER BY count(*)`, "the most total injuries" `ORDER BY sum(injured)`."""


def _keys(schema: Schema) -> frozenset[int]:
    """Columns of a primary or foreign key: identifiers, never a quantity to order by."""
    keys = {c for c, column in enumerate(schema.columns) if column.primary_key}
    for key in schema.foreign_keys:
        keys.update((key.column, key.referenced))
    return frozenset(keys)


def ordered_by_a_quantity(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
) -> SketchParts | None:
    """The sketch ordered by the numeric column the question's superlative names, not by the
    count of a group: "the museum that has the most staff members" is `ORDER BY num_of_staff`,
    "the player with the most tours" `ORDER BY tours`, where the sketch grouped and ordered by
    count(*). Only for a sketch that orders by count(*) alone, selects no aggregate and has no
    HAVING; the column is the one the words after the superlative name best, not a key, of a
    table the sketch reads if one there is named as well as any; the words must name no table
    ("the most employees" counts rows of employees) nor ask about groups (`_GROUP_CUES`). GROUP
    BY goes. None where any of this does not hold. Where a Spider train question's superlative
    names such a column, the gold query mostly orders by it."""
    counted = slots.order_by == (SelectItem("count", STAR),)
    if not counted or slots.having or any(item.aggregate for item in select):
        return None
    phrase = _ordering_phrase(question)
    if not phrase or phrase[0] in _GROUP_CUES:
        return None
    if any(_name_matches(phrase, table.label) for table in schema.tables):
        return None
    keys = _keys(schema)
    read = tables_shown(schema, select)
    read.update(schema.columns[c].table for c in slots.group_by)
    read.update(schema.columns[p.column].table for p in slots.where)

    def score(column: int) -> tuple[int, bool]:
        return (_naming(schema, column, phrase), schema.columns[column].table in read)

    quantities = [c for c, column in enumerate(schema.columns) if column.numeric and c not in keys]
    best = max(quantities, key=score, default=None)
    if best is None or score(best)[0] == 0:
        return None
    if sum(1 for c in quantities if score(c) == score(best)) > 1:
        return None
    ordered = replace(slots, order_by=(SelectItem("", best),), group_by=frozenset(), having=())
    return select, keywords - {"group by", "having"}, ordered


_NUMBER_THEN_WORDS = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s+([a-z][a-z\s-]*)", re.IGNORECASE)


def counted_by_value(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
) -> SketchParts | None:
    """The sketch with a grouped numeric column turned into a WHERE condition where the
    question puts a number right before the column's words: "cars with more than 4 cylinders"
    filters on cylinders (the number is its value), it does not group by cylinders and count
    the groups. The column leaves GROUP BY (and SELECT, where it was shown beside something
    else); with nothing left to group by, GROUP BY and HAVING go. The operator is the
    completion's to read from the words ("more than"). None where no grouped column is
    said that way. Keys are never moved: "more than 2 car makers" counts makers."""
    grouped = sorted(c for c in slots.group_by if c != STAR and schema.columns[c].numeric)
    if not grouped:
        return None
    keys = {k.column for k in (*schema.foreign_keys, *implicit_keys(schema))}
    said = [
        _phrase(_QUESTION_WORD.findall(m[1].lower())) for m in _NUMBER_THEN_WORDS.finditer(question)
    ]

    def said_with_a_number(column: int) -> bool:
        own = _own_words(schema, column)
        return any(
            len(own) <= len(phrase)
            and all(_word_match(w, s) for w, s in zip(own, phrase, strict=False))
            for phrase in said
        )

    valued = [
        c
        for c in grouped
        if not schema.columns[c].primary_key and c not in keys and said_with_a_number(c)
    ]
    if not valued:
        return None
    column = valued[0]
    select, keywords, slots = _ungrouped(select, keywords, slots, frozenset({column}))
    where = slots.where
    if not any(p.column == column for p in where):
        where = (*where, Predicate(column, "="))
    return select, keywords | {"where"}, replace(slots, where=where)


def _ungrouped(
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
    columns: frozenset[int],
) -> SketchParts:
    """The sketch no longer grouped by `columns`: they leave GROUP BY and SELECT's bare items
    (unless nothing else would be selected); with nothing left to group by, GROUP BY and HAVING
    go."""
    group_by = slots.group_by - columns
    having = slots.having
    if not group_by:
        keywords = keywords - {"group by", "having"}
        having = ()
    shown = frozenset(i for i in select if i.aggregate or i.column not in columns)
    return shown or select, keywords, replace(slots, group_by=group_by, having=having)


_EACH = re.compile(r"\b(?:each|every|per)\s+((?:\w+\s*){1,4})", re.IGNORECASE)


def grouped_by_its_aggregate(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    keywords: frozenset[str],
    slots: Slots,
) -> SketchParts | None:
    """The sketch without grouping by a column it takes the average, maximum or minimum of:
    each group holds one value of that column, so `SELECT injured, avg(injured) ... GROUP BY
    injured` answers nothing ("the average number of injuries caused each time" is one
    average). The column leaves GROUP BY and SELECT's bare items; with nothing left to group
    by, GROUP BY (and HAVING) go. None where no such column is grouped, or where the question
    groups by it in words ("the average weight and year for each year")."""
    summarised = {i.column for i in select if i.aggregate in ("avg", "max", "min")}
    pointless = (slots.group_by & summarised) - {STAR}
    for match in _EACH.finditer(question):
        phrase = _phrase(_QUESTION_WORD.findall(match[1].lower()))
        pointless = frozenset(c for c in pointless if not _naming(schema, c, phrase))
    if not pointless:
        return None
    return _ungrouped(select, keywords, slots, pointless)
