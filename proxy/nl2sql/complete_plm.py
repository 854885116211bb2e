"""PLM-only completion: a `Sketch` made into one PostgreSQL SELECT without any LLM.

This is how pgnl answers with no LLM configured, and its fall-back when the LLM fails
(docs/method.md, "Completion"). Everything comes from the sketch and its `Slots`, the schema's keys,
the literals found in the question (`question_literals`) or by calibration, and a few cues of
the question's wording:

    complete(sketch, schema, literals, question=question) -> "SELECT ... FROM ... WHERE ..."

The query is written clause by clause (`CLAUSES`, one small function each). Choices, where the
sketch does not say:

- FROM: the sketch's tables, plus the table of every column a clause names, joined along the
  foreign-key graph (`joins.join_tree`: declared keys, implicit ones only where those leave
  tables apart, a Steiner-tree approximation, deterministic). Tables still apart raise
  `CompletionError` ("tables not connected"): a CROSS JOIN returns rows that look like an answer
  and are not one.
- Aliases: with one table, none (columns unqualified); with several, `t1, t2, ...` in FROM order.
- Identifiers are quoted only where PostgreSQL needs it (`quote_identifier`): anything but a
  lower-case simple identifier, and any keyword that is not unreserved. A table outside schema
  `public` is qualified with its schema.
- SELECT items in a fixed order (the sketch holds a set): plain columns first, by column number,
  then aggregates by column (`*` first). "distinct": `count(DISTINCT col)` when the SELECT has no
  plain column and counts a column, else `SELECT DISTINCT`. `count(*)` over a join, in a
  question that counts one of its tables ("how many dogs went through a treatment"), counts
  that table's distinct key (`_counted_table`).
- avg and sum over a text column take the values that read as numbers, cast (the rest NULL).
- `count(*)` in a question that asks "how many people" of a table with a population column is
  the sum of that population (`_people_counted`). (The sketch stage has already counted the
  distinct values of "how many different ..." and summed "... together":
  `sketch_rules.select.one_number_asked`.)
- SQLite's bare column beside one max or min (`SELECT name, max(age) FROM t`: the name of the
  oldest), in a sketch with no GROUP BY, HAVING, ORDER BY or LIMIT, becomes what PostgreSQL can
  say: grouped by the plain columns, ORDER BY that max DESC (min: ASC) LIMIT 1.
- WHERE: `slots.where` in order, joined by AND, or OR when `slots.where_or`. Literals go to the
  predicates that need one (`between` two) in four passes, each over the predicates in order and
  taking the first fitting unused literal: (1) a value found among the predicate's own column's
  values (`Literal.column`; such a value goes to no other column), or a number the question puts
  after a comparison ("older than 30", "at least 2") goes to a predicate of that direction (>, >= or
  <, <=, or BETWEEN), (2) the kind a predicate prefers (a number for a numeric column; a string for
  =, !=, LIKE, IN on a text column), (3) any literal for predicates that prefer neither (a
  comparison on a text or date column), (4) the other kind where it can be meant (a number for a
  text column, a numeric-looking string for a numeric one). A number after a comparison ("more
  than", "under age", "before") is never the value of !=, LIKE or IN, nor of = in a query with
  HAVING (whose number it may be); an = takes it with the cue's operator. When a HAVING counts, the
  number words of the question ("more than one") are left to it. BETWEEN puts two numbers in
  ascending order. LIKE becomes ILIKE (a question that says "contains" means it regardless of case,
  as SQLite's LIKE does in Spider), wrapped in `%...%` when the literal has no `%`. A number is
  written as a number for a numeric column and as a string constant otherwise (PostgreSQL has no
  `text = integer`). The question's words overrule the slot head's operator where they contradict
  it: a number after "less than" is compared with <, even if the head said >, one after "equal
  to" or "exactly" with =, and a value a few
  words after "not" ("other than", "except") with != instead of =, and with NOT LIKE where the
  head said LIKE; a value after "contains",
  "substring" or "the letter" is matched with LIKE where the head said =.
- A single numeric comparison (>, <, >=, <=) becomes BETWEEN when the question says "between
  5000 and 10000" or "1 to 2"; a BETWEEN with one number that the question compares ("less than
  200000") becomes that comparison.
- `col = value` where the question says "value or other" and `other` is a literal of the same
  kind left over becomes `col IN (value, other)` ("state 'NY' or 'CA'", "English or Dutch"); so
  does a comparison of two numbers the question says with no comparison word ("aged either 32
  or 33").
- A comparison on a numeric column with no number left, in a question that says "average"
  ("weighing less than the average"), compares with the column's average over its table, the
  direction read from the words before "average" (as a nested comparison below).
- Any other predicate with no literal left raises `CompletionError` ("no value"): no placeholder
  in the SQL, and no silently dropped condition, which would return more rows that look right; the
  pipeline goes on to its next candidate. Literals left over are ignored.
- Nested predicates: `in`/`not in` become `col IN (SELECT x FROM other)`, `x` a column joined
  to `col` by a key, declared before implicit: one that references `col` (in a table the
  question names first, then outside FROM), else one that references what `col` references,
  else what `col` references; with no key at all on `col`,
  `col IN (SELECT s1.col FROM t AS s1 JOIN neighbour AS s2 ON ...)` (rows of t with related
  rows in the nearest table that a key joins to t); a table with no key
  raises ("no foreign key for IN"). A comparison with `nested` compares with an aggregate of the
  column over its whole table, `col > (SELECT avg(col) FROM t)`: the aggregate the question
  names (average, maximum, minimum), else the first superlative it uses ("largest" max,
  "youngest" min), else "all" (max) or "any" (min), else avg for <, >, <=, >= and max for =,
  !=. The subquery's own conditions have no slot and are left out. Any other nested operator
  takes literals like a plain one.
- GROUP BY: `slots.group_by`; with aggregates beside plain SELECT columns, only those of its
  columns that identify a shown column's row (its table's primary key, or a foreign key to
  it: `GROUP BY concert.stadium_id`), else the shown columns themselves (a grouping column of
  another table made wrong answers); a grouping column that is its table's whole primary key
  gives way to
  the shown foreign keys of that table (`SELECT paragraphs.document_id ... GROUP BY
  paragraphs.document_id`, not `paragraph_id`: one row a group); a grouping column that names
  its row (`highschooler.name`) in a table another FROM table references by its one-column key
  is grouped with that key (`GROUP BY t2.id, t2.name`: two students may share a name); with
  none, and aggregates
  beside plain columns anywhere in the query,
  the plain columns. Every plain column of SELECT and ORDER BY that the grouping does not
  determine (its table's primary key is not all grouped) is added, so that PostgreSQL accepts
  the query.
- HAVING: each item compared with the next unused number, the operator read from the question
  around it ("at least 2" >=, "more than one" >, "fewer than 3" <, "2 or more" >=, "between 1
  and 2" / "1 to 2" BETWEEN), `=` without a cue. With no number left, a count is compared
  `> 1` (groups of more than one row, the usual reading of "shared by", "more than once"), any
  other aggregate raises ("no value"); an item the slots repeat counts once. With the keyword
  "nested" and no nested WHERE predicate,
  the first HAVING item is compared with its aggregate over the whole table.
- ORDER BY: `slots.order_by` in order, DESC when the keywords say "desc", unless the question
  says the direction in so many words ("descending", "from high to low", "alphabetical":
  `sketch_rules.order.said_direction`). (The sketch stage has already ordered "the youngest"
  and "the oldest" by age or birth date, in their direction: `spoken_age_order`.)
- LIMIT: with "limit" in the keywords or a `slots.limit`, the N of "top 3", "first five",
  "3 most", "the 3 youngest" (`limit_in_question`), else `slots.limit`, else 1. That N is not
  used as a value.
- INTERSECT / UNION / EXCEPT: a sketch holds the left query only. When the left side took one
  value and another of the same kind (found in the same column) is left over, the right side
  is the same query with that value ("students with both cats and dogs": `... WHERE pettype =
  'cat' INTERSECT ... WHERE pettype = 'dog'`); otherwise only the left side is completed
  (`set_operation` says when a right side was left out). The benchmark
  (`benchmarks/completion_oracle.py`) counts how often that costs the answer.

`question_literals` reads quoted strings ('x', "x", curly quotes, LaTeX's ``x''; kept as typed,
spaces included, except LaTeX's padding), numbers (integers, decimals, 1,000-style thousands, a
leading minus) and, after a comparison cue ("more than one", "at least two", "two or more",
"more than once", "a single"), number words up to ten; in order, each with its place in the
question (`Literal.span`, which equality ignores). An apostrophe inside or after a word
("singer's", "students'") opens no string, and a number inside a string is not a number.

The result always parses with pglast as exactly one SELECT: `complete` checks it before
returning and raises `CompletionError` ("unparsable") otherwise, so a bug here never reaches the
database as SQL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field, replace

from pglast import ast, keywords, parse_sql
from pglast.parser import ParseError

from proxy.nl2sql import rules
from proxy.nl2sql.joins import (
    JoinError,
    JoinStep,
    implicit_keys,
    join_tree,
    links,
    references_to,
)
from proxy.nl2sql.schema import Column, Schema
from proxy.nl2sql.sketch import (
    AGGREGATES,
    SET_OPERATIONS,
    STAR,
    Predicate,
    SelectItem,
    Sketch,
    Slots,
)
from proxy.nl2sql.sketch_rules.order import said_direction
from proxy.nl2sql.sketch_rules.words import plurals, tables_named_in, wholly_named

# --- literals -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    """A value for a predicate: a string, or a number (int or float). `span` is where it was
    found in the question ((start, end) character offsets), None when it did not come from one;
    `column`, the schema column whose values it was found among (by the value index), None when
    it was typed; equality ignores both."""

    value: str | int | float
    kind: str  # "string" | "number"
    span: tuple[int, int] | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)


NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
_COUNT_WORDS = {**NUMBER_WORDS, "once": 1, "twice": 2, "a single": 1, "single": 1}

# Quoted strings. An opening quote follows the start or a non-word character (so "singer's"
# opens nothing); a closing one is followed by the end or a non-word character.
_QUOTED = re.compile(
    r"``\s*(?P<latex>.+?)\s*''"
    r"|(?<![\w'])'(?P<single>[^']+?)'(?!\w)"
    r'|(?<![\w"])"(?P<double>[^"]+?)"(?!\w)'
    "|\u201c(?P<curly>[^\u201d]+?)\u201d"  # curly double quotes
    "|(?<!\\w)\u2018(?P<curly_single>[^\u2019]+?)\u2019(?!\\w)"  # curly single quotes
)
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>-)?(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?![\w])"
)
_WORD_ALTERNATIVES = "|".join(
    re.escape(word) for word in sorted(_COUNT_WORDS, key=len, reverse=True)
)
_COMPARISON_CUE = r"(?:than|least|most|exactly|only|over|under|above|below|between)"
_NUMBER_WORDS_IN_CONTEXT = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        rf"\b{_COMPARISON_CUE}\s+(?P<word>{_WORD_ALTERNATIVES})\b",
        rf"\b(?P<word>{_WORD_ALTERNATIVES})\s+or\s+(?:more|fewer|less|greater)\b",
        rf"\bbetween\s+\S+\s+and\s+(?P<word>{_WORD_ALTERNATIVES})\b",
    )
)


def question_literals(question: str) -> list[Literal]:
    """The literals a question spells out, in order: quoted strings, numbers, and number words
    after a comparison cue."""
    found: list[Literal] = []
    taken: list[tuple[int, int]] = []
    for match in _QUOTED.finditer(question):
        group = match.lastgroup
        assert group is not None
        found.append(Literal(match.group(group), "string", match.span()))
        taken.append(match.span())

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    for match in _NUMBER.finditer(question):
        if not free(*match.span()):
            continue
        text = match.group("number").replace(",", "")
        value: int | float = float(text) if "." in text else int(text)
        if match.group("sign"):
            value = -value
        found.append(Literal(value, "number", match.span()))
    for pattern in _NUMBER_WORDS_IN_CONTEXT:
        for match in pattern.finditer(question):
            span = match.span("word")
            if free(*span):
                found.append(Literal(_COUNT_WORDS[match.group("word").lower()], "number", span))
                taken.append(span)
    found.sort(key=lambda literal: literal.span or (0, 0))
    return found


# --- errors -------------------------------------------------------------------------------------


class CompletionError(ValueError):
    """A sketch that cannot be made into SQL. `.reason` is a short category ("tables not
    connected", "no value", "no foreign key for IN", "no table", "unsupported item",
    "unparsable"); the message adds the detail. `column`: for "no value" in WHERE, the column
    of the predicate that found none."""

    def __init__(self, reason: str, detail: str = "", *, column: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.column = column


# --- identifiers and constants -----------------------------------------------------------------

_SIMPLE = re.compile(r"[a-z_][a-z0-9_$]*")
_NEEDS_QUOTES = (
    keywords.RESERVED_KEYWORDS | keywords.TYPE_FUNC_NAME_KEYWORDS | keywords.COL_NAME_KEYWORDS
)


def quote_identifier(name: str) -> str:
    """`name` as PostgreSQL reads it back unchanged: bare when it is a lower-case simple
    identifier and not a keyword that needs quotes, else double-quoted."""
    if _SIMPLE.fullmatch(name) and name not in _NEEDS_QUOTES:
        return name
    return '"' + name.replace('"', '""') + '"'


def _string_constant(text: str) -> str:
    return "'" + text.replace("\x00", "").replace("'", "''") + "'"


def _number_text(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:.1f}"
    return repr(value)


_TEXT_TYPE = re.compile(r"\s*(?:text|varchar|character varying|char|character|bpchar)\b", re.I)
_NUMBER_PATTERN = r"^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"


def _as_number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# --- the question's cues -----------------------------------------------------------------------

_LIMIT_NUMBER = rf"(?:\d{{1,3}}|{'|'.join(NUMBER_WORDS)})"
_LIMIT = re.compile(
    rf"\b(?:top|first)\s+(?P<a>{_LIMIT_NUMBER})\b"
    rf"|\bthe\s+(?P<b>{_LIMIT_NUMBER})\s+(?:\w+\s+){{0,3}}?(?:most|least|\w+est)\b"
    rf"|\b(?P<c>{_LIMIT_NUMBER})\s+(?:most|least|\w+est)\b",
    re.IGNORECASE,
)


def limit_in_question(question: str) -> tuple[int, tuple[int, int]] | None:
    """The N of "top N", "first N", "N most/largest/youngest...", "the N countries with the
    fewest..." (digits up to 999 or a number word up to ten) and its span; None when there is
    none or N is 0."""
    for match in _LIMIT.finditer(question):
        group = match.lastgroup
        assert group is not None
        text = match.group(group).lower()
        value = NUMBER_WORDS.get(text) or int(text)
        if value > 0:
            return value, match.span(group)
    return None


_NOT_BELOW = r"(?:less|fewer|smaller|lower|shorter|younger|under|below)(?:\s+than)?"
_NOT_ABOVE = r"(?:more|greater|larger|higher|bigger|longer|older|over|above)(?:\s+than)?"
_CUES_BEFORE = (
    (re.compile(rf"(?:at least|\b(?:no|not)\s+{_NOT_BELOW}|minimum of)\s*$"), ">="),
    (re.compile(rf"(?:at most|\b(?:no|not)\s+{_NOT_ABOVE}|up to|maximum of)\s*$"), "<="),
    (re.compile(r"between\s*$"), "between"),
    (
        re.compile(
            r"(?:more|greater|larger|higher|bigger|longer|older|over|above|exceeds?|exceeding)"
            r"(?:\s+than)?(?:\s+a)?\s*$"
        ),
        ">",
    ),
    (
        re.compile(
            r"(?:less|fewer|smaller|lower|shorter|younger|under|below)(?:\s+than)?(?:\s+a)?\s*$"
        ),
        "<",
    ),
    # "under age 30", "over age 20": the column's name between the cue and the number
    (re.compile(r"\b(?:over|above)\s+(?:the\s+)?(?:age|aged)\s*$"), ">"),
    (re.compile(r"\b(?:under|below)\s+(?:the\s+)?(?:age|aged)\s*$"), "<"),
    # years: "founded before 2003", "after 2010"
    (re.compile(r"\b(?:after|later than|since)\s*$"), ">"),
    (re.compile(r"\b(?:before|earlier than|prior to)\s*$"), "<"),
)
_CUES_AFTER = (
    (re.compile(r"^\s*to\s+(?:\d|" + _WORD_ALTERNATIVES + r")"), "between"),
    (re.compile(r"^\s*or\s+(?:more|greater|above|higher|over|after|later|older)\b"), ">="),
    (re.compile(r"^\s*or\s+(?:less|fewer|below|lower|under|before|earlier|younger)\b"), "<="),
)


def _operator_cue(question: str, span: tuple[int, int] | None) -> str:
    """The comparison a question puts around a number at `span`; "=" without a cue."""
    if span is None:
        return "="
    before = question[max(0, span[0] - 30) : span[0]].lower()
    after = question[span[1] : span[1] + 20].lower()
    for pattern, operator in _CUES_AFTER:
        if pattern.search(after):
            return operator
    for pattern, operator in _CUES_BEFORE:
        if pattern.search(before):
            return operator
    return "="


def _find_span(question: str, literal: Literal) -> tuple[int, int] | None:
    """Where a literal without a span appears in the question, as digits or a number word."""
    if literal.span is not None or not question:
        return literal.span
    texts = [str(literal.value)]
    if literal.kind == "number":
        texts += [word for word, value in _COUNT_WORDS.items() if value == literal.value]
    for text in texts:
        match = re.search(rf"(?<![\w.]){re.escape(text)}(?![\w])", question, re.IGNORECASE)
        if match:
            return match.span()
    return None


# The aggregate a nested comparison means: explicit words first, then superlatives, then the
# weak "all" (> all: > max) and "any" (> any: > min); within a level, the first in the question.
_MAX_WORDS = "largest highest biggest greatest most oldest longest latest heaviest best"
_MIN_WORDS = "smallest lowest least fewest youngest shortest earliest lightest worst"
_AGGREGATE_CUES: tuple[dict[str, str], ...] = (
    {"average": "avg", "avg": "avg", "mean": "avg", "maximum": "max", "max": "max"}
    | {"minimum": "min", "min": "min"},
    dict.fromkeys(_MAX_WORDS.split(), "max") | dict.fromkeys(_MIN_WORDS.split(), "min"),
    {"all": "max", "any": "min"},
)


def _nested_aggregate(question: str, operator: str) -> str:
    """The aggregate of `col op (SELECT aggregate(col) FROM t)` the question asks for."""
    words = re.findall(r"[a-z]+", question.lower())
    for cues in _AGGREGATE_CUES:
        for word in words:
            if word in cues:
                return cues[word]
    return "max" if operator in ("=", "!=") else "avg"


# --- the query ----------------------------------------------------------------------------------

_SQL_OPERATORS = {"!=": "<>", "like": "ILIKE", "not like": "NOT ILIKE", "not in": "NOT IN"}
_COMPARISONS = ("=", "!=", ">", "<", ">=", "<=")


class _Writer:
    """The names of one query: tables (schema-qualified where needed) and columns (through
    their table's alias)."""

    def __init__(self, schema: Schema, joined: Sequence[JoinStep]) -> None:
        self.schema = schema
        many = len(joined) > 1
        self.alias = {j.table: f"t{i}" if many else None for i, j in enumerate(joined, 1)}

    def table(self, table: int) -> str:
        item = self.schema.tables[table]
        name = quote_identifier(item.name)
        return name if item.schema == "public" else f"{quote_identifier(item.schema)}.{name}"

    def column(self, column: int, *, bare: bool = False) -> str:
        item = self.schema.columns[column]
        name = quote_identifier(item.name)
        alias = None if bare else self.alias.get(item.table)
        return f"{alias}.{name}" if alias else name

    def item(self, item: SelectItem, *, distinct: bool = False) -> str:
        if item.aggregate not in AGGREGATES:
            raise CompletionError("unsupported item", f"aggregate {item.aggregate!r}")
        if item.column == STAR:
            if item.aggregate not in ("", "count"):
                raise CompletionError("unsupported item", f"{item.aggregate}(*)")
            return "count(*)" if item.aggregate else "*"
        name = self.column(item.column)
        if not item.aggregate:
            return name
        # numbers kept as text: the ones that read as numbers, cast (the rest are NULL)
        name = _text_numbers(name, self.schema.columns[item.column], item.aggregate)
        return f"{item.aggregate}(DISTINCT {name})" if distinct else f"{item.aggregate}({name})"

    def from_clause(self, joined: Sequence[JoinStep]) -> str:
        parts: list[str] = []
        for entry in joined:
            alias = self.alias[entry.table]
            source = self.table(entry.table) + (f" AS {alias}" if alias else "")
            if entry.parent is None:
                parts.append(source)
                continue
            condition = " AND ".join(f"{self.column(a)} = {self.column(b)}" for a, b in entry.pairs)
            parts.append(f"JOIN {source} ON {condition}")
        return " ".join(parts)


def _value(literal: Literal, column: Column, *, pattern: bool = False) -> str:
    if pattern:
        text = str(literal.value)
        return _string_constant(text if "%" in text else f"%{text}%")
    if isinstance(literal.value, str):
        return _string_constant(literal.value)
    if column.numeric and math.isfinite(literal.value):
        return _number_text(literal.value)
    return _string_constant(_number_text(literal.value))


def _preferred_kind(predicate: Predicate, column: Column) -> str | None:
    if column.numeric:
        return "number"
    if predicate.operator in ("=", "!=", "like", "not like", "in", "not in"):
        return "string"
    return None


def _can_mean(literal: Literal, column: Column) -> bool:
    """Whether a literal of the other kind can still be a value of `column`."""
    if literal.kind == "number":
        return not column.numeric
    return _as_number(str(literal.value)) is not None


def _needs(predicate: Predicate) -> int:
    """How many literals a predicate takes (nested IN and nested comparisons take none)."""
    if predicate.nested and predicate.operator in ("in", "not in", *_COMPARISONS):
        return 0
    return 2 if predicate.operator == "between" else 1


_DIRECTIONS = {">": ">", ">=": ">", "<": "<", "<=": "<", "between": "between"}


def _assign(
    predicates: Sequence[Predicate],
    schema: Schema,
    pool: Sequence[Literal],
    question: str = "",
    reserved: Container[int] = frozenset(),
    *,
    cued_equality: bool = False,
) -> tuple[list[list[Literal]], list[bool]]:
    """The literals of each predicate (see the module's docstring), and which pool entries
    were used; `reserved` pool entries are left alone. `cued_equality`: an = predicate may take
    a number after a comparison cue (its operator then follows the cue)."""
    used = [i in reserved for i in range(len(pool))]
    chosen: list[list[Literal]] = [[] for _ in predicates]
    cues = [
        _DIRECTIONS.get(_operator_cue(question, _find_span(question, literal)))
        if literal.kind == "number"
        else None
        for literal in pool
    ]

    def accepts(pass_: int, position: int, predicate: Predicate) -> bool:
        literal, cue = pool[position], cues[position]
        column = schema.columns[predicate.column]
        kind = _preferred_kind(predicate, column)
        direction = _DIRECTIONS.get(predicate.operator)
        equality = cued_equality and predicate.operator == "="
        if cue is not None and direction is None and not equality:
            return False  # "more than 3" is no value for =, LIKE or IN
        if literal.column is not None:
            return pass_ == 0 and literal.column == predicate.column
        if pass_ == 0:
            return cue is not None and cue == direction and kind in (None, literal.kind)
        if pass_ == 1:
            return kind is not None and literal.kind == kind
        if pass_ == 2:
            return kind is None
        return _can_mean(literal, column)

    for pass_ in range(4):
        for index, predicate in enumerate(predicates):
            for position in range(len(pool)):
                if len(chosen[index]) >= _needs(predicate):
                    break
                if not used[position] and accepts(pass_, position, predicate):
                    used[position] = True
                    chosen[index].append(pool[position])
    return chosen, [u and i not in reserved for i, u in enumerate(used)]


def _spelt_out(question: str, literal: Literal) -> bool:
    """Whether a literal is a number word of the question ("more than one"): a count, which a
    HAVING over count(...) takes before WHERE does."""
    if literal.span is None:
        return False
    return re.fullmatch(r"[a-z ]+", question[literal.span[0] : literal.span[1]].lower()) is not None


def _membership(writer: _Writer, column: int, outer: set[int], question: str = "") -> str:
    """The subquery of a nested `col IN (...)` (see the module's docstring): the column of
    another table that a key joins to `col` (declared keys first, then implicit ones; of a
    table the question names first), else `col` itself over its table joined to a neighbour
    (rows with related rows there)."""
    schema = writer.schema
    table = schema.columns[column].table
    said = tables_named_in(question, schema) if question else frozenset()

    def best(candidates: Iterable[int]) -> int | None:
        others = [c for c in candidates if schema.columns[c].table != table]
        if not others:
            return None
        return min(
            others,
            key=lambda c: (
                schema.columns[c].table not in said,
                schema.columns[c].table in outer,
                c,
            ),
        )

    declared = sorted(schema.foreign_keys, key=lambda k: (k.column, k.referenced))
    for keys in (declared, implicit_keys(schema)):
        targets = [k.referenced for k in keys if k.column == column]
        for candidates in (
            [k.column for k in keys if k.referenced == column],
            [k.column for k in keys if k.referenced in targets and k.column != column],
            targets,
        ):
            found = best(candidates)
            if found is not None:
                source = writer.table(schema.columns[found].table)
                return f"(SELECT {writer.column(found, bare=True)} FROM {source})"  # noqa: S608 (quoted names)
    neighbours = sorted(
        (other in outer, link.cost, other, link) for other, link in links(schema)[table]
    )
    if not neighbours:
        raise CompletionError("no foreign key for IN", schema.qualified(column))
    *_, other, link = neighbours[0]

    def name(index: int) -> str:
        return quote_identifier(schema.columns[index].name)

    condition = " AND ".join(f"s1.{name(a)} = s2.{name(b)}" for a, b in link.seen_from(table))
    return (
        f"(SELECT s1.{name(column)} FROM {writer.table(table)} AS s1"  # noqa: S608 (quoted names)
        f" JOIN {writer.table(other)} AS s2 ON {condition})"
    )


@dataclass
class _Query:
    """What the clause writers share: the sketch, the names, and the literals still unused."""

    sketch: Sketch
    schema: Schema
    question: str
    writer: _Writer
    joined: list[JoinStep]
    select: list[SelectItem]
    plain: list[int]  # plain columns of SELECT and ORDER BY, in order
    pool: list[Literal]
    used: list[bool]
    limit: int | None

    @property
    def slots(self) -> Slots:
        return self.sketch.slots


def _select_clause(query: _Query) -> str:
    select = query.select
    distinct_select = distinct_count = False
    if "distinct" in query.sketch.keywords:
        counts_a_column = any(i.aggregate == "count" and i.column != STAR for i in select)
        if counts_a_column and all(i.aggregate for i in select):
            distinct_count = True
        else:
            distinct_select = True
    items = [
        query.writer.item(
            i, distinct=distinct_count and i.aggregate == "count" and i.column != STAR
        )
        for i in select
    ]
    return ("SELECT DISTINCT " if distinct_select else "SELECT ") + ", ".join(items)


def _from_clause(query: _Query) -> str:
    return "FROM " + query.writer.from_clause(query.joined)


def _where_clause(query: _Query) -> str:
    schema, writer, predicates = query.schema, query.writer, query.slots.where
    reserved: set[int] = set()
    if any(item.aggregate == "count" for item in query.slots.having):
        reserved = {
            i for i, literal in enumerate(query.pool) if _spelt_out(query.question, literal)
        }
    chosen, query.used = _assign(
        predicates,
        schema,
        query.pool,
        query.question,
        reserved,
        cued_equality=not query.slots.having,  # with HAVING, "more than 3" may be its number
    )
    outer = {j.table for j in query.joined}
    conditions: list[str] = []
    for predicate, values in zip(predicates, chosen, strict=True):
        target = schema.columns[predicate.column]
        name = writer.column(predicate.column)
        if not predicate.nested and len(values) == 1:
            said = rules.apply(
                "cued_operator",
                predicate.operator,
                _cued_operator,
                *(query.question, predicate.operator, values[0]),
            )
        else:
            said = predicate.operator
        pattern = said in ("like", "not like")
        if values and (pattern or (said in _COMPARED and values[0].kind == "number")):
            compared = rules.found(
                "compared_column",
                _compared_column,
                *(query, values[0], outer, predicates),
                text=pattern,
            )
            if compared is not None:
                name, target = writer.column(compared), schema.columns[compared]
        operator = _SQL_OPERATORS.get(said, said.upper())
        if predicate.nested and predicate.operator in ("in", "not in"):
            subquery = _membership(writer, predicate.column, outer, query.question)
            conditions.append(f"{name} {operator} {subquery}")
        elif predicate.nested and predicate.operator in _COMPARISONS:
            aggregate = _nested_aggregate(query.question, predicate.operator)
            whole = _whole_table(writer, aggregate, predicate.column)
            conditions.append(f"{_text_numbers(name, target, aggregate)} {operator} {whole}")
        elif (
            predicate.operator == "between"
            and len(values) == 1
            and (cue := _operator_cue(query.question, _find_span(query.question, values[0])))
            in _COMPARED
        ):
            # "earnings less than 200000" under a BETWEEN the slot head chose: one bound
            conditions.append(f"{name} {cue} {_value(values[0], target)}")
        elif len(values) < _needs(predicate):
            implied = rules.found(
                "compared_with_average",
                _compared_with_average,
                *(query.question, predicate, target),
            )
            if implied is None:
                raise CompletionError(
                    "no value",
                    f"{schema.qualified(predicate.column)} {predicate.operator}",
                    column=predicate.column,
                )
            whole = _whole_table(writer, "avg", predicate.column)
            conditions.append(f"{_text_numbers(name, target, 'avg')} {implied} {whole}")
        elif (
            partner := rules.found("or_partner", _or_partner, query, predicate, values)
        ) is not None:
            listed = f"{_value(values[0], target)}, {_value(partner, target)}"
            conditions.append(f"{name} {'NOT IN' if said == '!=' else 'IN'} ({listed})")
        elif predicate.operator == "between":
            bounds = values
            if all(isinstance(v.value, int | float) for v in values):
                bounds = sorted(values, key=lambda v: float(v.value))
            low, high = (_value(v, target) for v in bounds)
            conditions.append(f"{name} BETWEEN {low} AND {high}")
        elif said in ("like", "not like"):
            conditions.append(f"{name} {operator} {_value(values[0], target, pattern=True)}")
        elif predicate.operator in ("in", "not in"):
            conditions.append(f"{name} {operator} ({_value(values[0], target)})")
        else:
            conditions.append(f"{name} {operator} {_value(values[0], target)}")
    if not conditions:
        return ""
    return "WHERE " + (" OR " if query.slots.where_or else " AND ").join(conditions)


_QUOTES = "'\"`\u2018\u2019\u201c\u201d"
_OR_BETWEEN = re.compile(
    rf"^[\s{_QUOTES}]*(?:,\s*)?(?:or|and/or)\s+(?:the\s+)?"
    r"(?:[a-z]+\s+(?:[a-z]+\s+)?(?:of|in)\s+(?:the\s+)?)?"  # "Hawaii or the state of Wisconsin"
    rf"[\s{_QUOTES}]*$",
    re.IGNORECASE,
)


_COMPARED = (">", "<", ">=", "<=")
_COMPARISON_WORDS = re.compile(
    r"\b(?:is|are|was|were)?\s*(?:greater|more|larger|bigger|higher|later|older|longer|less"
    r"|fewer|smaller|lower|earlier|younger|shorter)\s+than\s*$",
    re.IGNORECASE,
)
_CONTAINING_WORDS = re.compile(
    r"\b(?:(?:that|which)\s+)?(?:contains?|containing|includes?|including)"
    r"(?:\s+(?:the|a)\s+(?:substring|word|letters?|string))?\s*[\"'`\u2018\u201c]*$",
    re.IGNORECASE,
)


def _compared_column(
    query: _Query,
    literal: Literal,
    tables: set[int],
    predicates: Sequence[Predicate],
    *,
    text: bool = False,
) -> int | None:
    """The column of the query's tables that the words right before "greater than", "later
    than" (...) name whole, numeric, where the slot put the number on another column:
    "templates with a version number later than 5" compares version_number, not
    template_type_code; "a surface area greater than 3000" surfacearea, not population; with
    `text`, the text column named before "containing" for a LIKE ("a city containing the
    substring 'West'": city, not street). None where the words name no such column, or more
    than one, or one another condition is on (the slot's own included)."""
    span = _find_span(query.question, literal)
    if span is None:
        return None
    before = query.question[: span[0]]
    cue = (_CONTAINING_WORDS if text else _COMPARISON_WORDS).search(before)
    if cue is None:
        return None
    words = re.findall(r"[a-z0-9]+", before[: cue.start()].lower())[-2:]
    schema = query.schema
    taken = {p.column for p in predicates}
    found = [
        c
        for c in wholly_named(schema, words)
        if schema.columns[c].table in tables
        and schema.columns[c].numeric != text
        and c not in taken
    ]
    return found[0] if len(found) == 1 else None


def _or_partner(query: _Query, predicate: Predicate, values: Sequence[Literal]) -> Literal | None:
    """For `col = value` where the question says "value or other" ("state 'NY' or 'CA'",
    "English or Dutch") and `other` is an unused literal of the same kind: `other` (marked used),
    so that the predicate becomes `col IN (value, other)`. Also for a comparison the slot head
    chose where the question says two numbers so with no comparison word ("aged either 32 or
    33")."""
    if predicate.nested or len(values) != 1:
        return None
    first = values[0]
    span = _find_span(query.question, first)
    if span is None:
        return None
    if predicate.operator not in ("=", "!="):
        said = _operator_cue(query.question, span)
        if predicate.operator not in _DIRECTIONS or first.kind != "number" or said != "=":
            return None
    for position, literal in enumerate(query.pool):
        if query.used[position] or literal.kind != first.kind or literal == first:
            continue
        if literal.column is not None and literal.column != first.column:
            continue
        other = _find_span(query.question, literal)
        if other is None:
            continue
        # "English or Dutch", or "Dutch or English" with English the value taken first
        first_span, second_span = (span, other) if other[0] >= span[1] else (other, span)
        between = query.question[first_span[1] : second_span[0]]
        if second_span[0] >= first_span[1] and _OR_BETWEEN.match(between):
            query.used[position] = True
            return literal
    return None


_NEGATION = re.compile(r"\b(?:not|n't|other than|except|excluding|never)\b[^,.;?]{0,25}$", re.I)


_EQUAL = re.compile(r"\b(?:equal to|equals|exactly)\s*$", re.I)
_CONTAINS = re.compile(
    r"\b(?:contains?|containing|substring|includes?|including|letters?)\b[^,.;?]{0,20}$", re.I
)


def _cued_operator(question: str, operator: str, literal: Literal) -> str:
    """The operator the question's words say around the literal, where they contradict the
    slot's: a number after "less than" is compared with <, whatever direction the slot head
    chose, one after "at least" or "not higher than" with >= and <=, and one after "equal to"
    or "exactly" with =; a value after "not" is compared with !=
    (NOT LIKE where the slot said LIKE); a value after "contains", "substring" or "the letter"
    with LIKE."""
    span = _find_span(question, literal)
    if span is None:
        return operator
    if literal.kind == "number":
        cue = _operator_cue(question, span)
        comparisons = set(_DIRECTIONS) - {"between"}
        if cue in ("<=", ">=") and (operator in comparisons or operator == "="):
            return cue  # "at least", "not higher than 4", "2 or more"
        if _NEGATION.search(question[max(0, span[0] - 30) : span[0]]):
            return operator  # "not from France, older than 40": the "not" may be another's
        if cue in comparisons and (operator in comparisons or operator == "="):
            return cue
        if operator in comparisons and _EQUAL.search(question[max(0, span[0] - 30) : span[0]]):
            return "="
        return operator
    before = question[: span[0]]
    if operator in ("=", "like") and _NEGATION.search(before):
        return "!=" if operator == "=" else "not like"
    if operator == "=" and _CONTAINS.search(before):
        return "like"
    return operator


_AVERAGE = re.compile(r"\b(?:the\s+)?(?:average|mean)\b", re.I)


def _compared_with_average(question: str, predicate: Predicate, column: Column) -> str | None:
    """For a comparison on a numeric column (or numbers kept as text) that found no value: the
    operator of "below the average", "higher than average" (the cue before the word, else the
    slot's), or None when the question compares with no average."""
    if predicate.operator not in _COMPARISONS:
        return None
    if not column.numeric and not _TEXT_TYPE.match(column.type):
        return None
    match = _AVERAGE.search(question)
    if match is None:
        return None
    cue = _operator_cue(question, match.span())
    operator = cue if cue in (">", "<", ">=", "<=") else predicate.operator
    return operator if operator in (">", "<", ">=", "<=") else None


def _whole_table(writer: _Writer, aggregate: str, column: int) -> str:
    """`(SELECT aggregate(column) FROM its table)`; avg and sum of numbers kept as text take
    the values that read as numbers (`_text_numbers`)."""
    target = writer.schema.columns[column]
    source = writer.table(target.table)
    name = _text_numbers(writer.column(column, bare=True), target, aggregate)
    return f"(SELECT {aggregate}({name}) FROM {source})"  # noqa: S608 (quoted names)


def _text_numbers(name: str, column: Column, aggregate: str) -> str:
    """A text column's values as numbers (those that read as numbers, the rest NULL) where it
    is averaged or summed, or compared with its average or sum: PostgreSQL has no avg(text) and
    no text < numeric (Spider's dogs.age is text: "dogs of an age below the average")."""
    if aggregate not in ("avg", "sum") or not _TEXT_TYPE.match(column.type):
        return name
    return f"CASE WHEN {name} ~ {_string_constant(_NUMBER_PATTERN)} THEN {name}::numeric END"


def _group_clause(query: _Query) -> str:
    schema, slots = query.schema, query.slots
    aggregated = any(i.aggregate for i in (*query.select, *slots.having, *slots.order_by))
    shown = [i.column for i in query.select if not i.aggregate and i.column != STAR]
    group = sorted(slots.group_by)
    if shown and aggregated:
        shown_tables = {schema.columns[c].table for c in shown}
        group = [c for c in group if _keys_table(schema, c) & shown_tables] or sorted(set(shown))
        group = rules.apply("by_shown_reference", group, _by_shown_reference, schema, group, shown)
    if not group and aggregated:
        group = sorted(set(query.plain))
    if not group:
        return ""
    if aggregated:
        group = rules.apply("by_entity_key", group, _by_entity_key, query, group)
    grouped = set(group)
    for column in dict.fromkeys(query.plain):
        if column in grouped:
            continue
        keys = [
            c
            for c in schema.table_columns[schema.columns[column].table]
            if schema.columns[c].primary_key
        ]
        if not keys or not grouped.issuperset(keys):
            group.append(column)
            grouped.add(column)
    return "GROUP BY " + ", ".join(query.writer.column(c) for c in group)


def _by_shown_reference(schema: Schema, group: list[int], shown: list[int]) -> list[int]:
    """Grouping by a table's own primary key puts one row in each group; when SELECT shows a
    foreign key of that table instead (`SELECT paragraphs.document_id ... GROUP BY
    paragraphs.paragraph_id HAVING count(*) >= 2`), the groups are what that key refers to:
    group by it."""
    references = {fk.column for fk in schema.foreign_keys}
    regrouped: list[int] = []
    for column in group:
        table = schema.columns[column].table
        shown_reference = [c for c in shown if c in references and schema.columns[c].table == table]
        if schema.primary_key(table) == (column,) and shown_reference:
            regrouped.extend(c for c in shown_reference if c not in regrouped)
        elif column not in regrouped:
            regrouped.append(column)
    return regrouped


_NAMING = re.compile(r"name|title", re.IGNORECASE)


def _by_entity_key(query: _Query, group: list[int]) -> list[int]:
    """Counting over a join groups the rows of the table the others point at: "names of high
    schoolers who have at least 3 friends" counts friends per high schooler, not per name two
    high schoolers may share. A grouping column that names its row (`name`, `fname`, `title`)
    in a table that another FROM table references by its one-column primary key is grouped
    together with that key. Other columns are left: `GROUP BY country.continent` counts per
    continent, not per country."""
    schema = query.schema
    joined_keys = {c for step in query.joined for pair in step.pairs for c in pair}
    regrouped: list[int] = []
    for column in group:
        key = schema.primary_key(schema.columns[column].table)
        if (
            _NAMING.search(schema.columns[column].name)
            and len(key) == 1
            and key[0] in joined_keys
            and key[0] not in regrouped + group
        ):
            regrouped.append(key[0])
        if column not in regrouped:
            regrouped.append(column)
    return regrouped


def _keys_table(schema: Schema, column: int) -> set[int]:
    """The tables whose rows `column` identifies: its own, where it is (part of) the primary
    key, and the table its foreign keys reference."""
    found = {schema.columns[column].table} if schema.columns[column].primary_key else set()
    found |= {schema.columns[k.referenced].table for k in schema.foreign_keys if k.column == column}
    return found


def _having_clause(query: _Query) -> str:
    slots, question, writer = query.slots, query.question, query.writer
    nested = "nested" in query.sketch.keywords and not any(p.nested for p in slots.where)
    numbers = [
        query.pool[i]
        for i, literal in enumerate(query.pool)
        if not query.used[i] and _as_number(str(literal.value)) is not None
    ]
    conditions: list[str] = []
    having = list(dict.fromkeys(slots.having))  # the same aggregate twice asks for one number
    for index, item in enumerate(having):
        name = writer.item(item)
        if index == 0 and nested and item.column != STAR:
            aggregate = item.aggregate or _nested_aggregate(question, ">")
            conditions.append(f"{name} > {_whole_table(writer, aggregate, item.column)}")
            continue
        if not numbers:
            if item.aggregate != "count":
                raise CompletionError("no value", f"HAVING {item.text(query.schema)}")
            conditions.append(f"{name} > 1")
            continue
        literal = numbers.pop(0)
        value = _number_text(_number(literal))
        operator = _operator_cue(question, _find_span(question, literal))
        if item.aggregate in ("avg", "sum", "max", "min") and rules.enabled("compared_column"):
            # "whose average life expectancy is longer than 72": the column the words name
            tables = {j.table for j in query.joined}
            compared = _compared_column(query, literal, tables, ())
            if compared is not None and compared != item.column:
                rules.noted("compared_column", item.column, compared)
                name = writer.item(SelectItem(item.aggregate, compared))
        if operator == "between" and numbers:
            conditions.append(f"{name} BETWEEN {value} AND {_number_text(_number(numbers.pop(0)))}")
            continue
        conditions.append(f"{name} {'>=' if operator == 'between' else operator} {value}")
    return "HAVING " + " AND ".join(conditions) if conditions else ""


def _number(literal: Literal) -> int | float:
    value = _as_number(str(literal.value))
    if value is None:
        raise CompletionError("no value", f"{literal.value!r} is not a number")
    return value


def _order_clause(query: _Query) -> str:
    if not query.slots.order_by:
        return ""
    default = " DESC" if "desc" in query.sketch.keywords else ""
    way = said_direction(query.question)
    said = None if way is None else (" DESC" if way == "desc" else "")
    direction = default if said is None else said
    return "ORDER BY " + ", ".join(query.writer.item(i) + direction for i in query.slots.order_by)


def _limit_clause(query: _Query) -> str:
    return "" if query.limit is None else f"LIMIT {query.limit}"


CLAUSES = (
    _select_clause,
    _from_clause,
    _where_clause,
    _group_clause,
    _having_clause,
    _order_clause,
    _limit_clause,
)
"""The clause writers, in the order of the query they write (WHERE before HAVING: HAVING takes
the number literals WHERE left)."""


def _extreme_row(sketch: Sketch) -> Sketch:
    """`SELECT name, max(age) FROM t` (SQLite: the name of the oldest) as PostgreSQL can say it:
    ordered by that max (min: ascending), LIMIT 1. Only for one max or min beside plain columns
    in a sketch with no GROUP BY, HAVING, ORDER BY or LIMIT of its own (grouping by the plain
    columns, which follows, then gives the row of the extreme value)."""
    slots = sketch.slots
    extremes = [i for i in sketch.select if i.aggregate in ("max", "min") and i.column != STAR]
    others = [i for i in sketch.select if i not in extremes]
    if (
        len(extremes) != 1
        or not others
        or any(i.aggregate or i.column == STAR for i in others)
        or sketch.keywords & {"group by", "having", "order by", "limit"}
        or slots.group_by
        or slots.having
        or slots.order_by
        or slots.limit is not None
    ):
        return sketch
    (extreme,) = extremes
    direction = "desc" if extreme.aggregate == "max" else "asc"
    return replace(
        sketch,
        keywords=sketch.keywords | {"order by", direction, "limit"},
        slots=replace(slots, order_by=(extreme,), limit=1),
    )


def _spoken_range(
    sketch: Sketch, schema: Schema, literals: Sequence[Literal], question: str
) -> Sketch:
    """The sketch with its one numeric comparison made BETWEEN when the question says "between
    5000 and 10000" (or "1 to 2"), and no other comparison, the slot head having chosen >, <,
    >= or <=; two comparisons of the same column ("population > 160000 AND population >
    900000") become that one BETWEEN. Not with HAVING, which may be what the range is about."""
    cues = {
        _operator_cue(question, _find_span(question, literal))
        for literal in literals
        if literal.kind == "number"
    }
    if sketch.slots.having or "between" not in cues or cues & {">", "<", ">=", "<="}:
        return sketch  # the range is HAVING's, or another comparison takes a number
    where = sketch.slots.where
    comparisons = [
        i
        for i, p in enumerate(where)
        if not p.nested
        and p.operator in (">", "<", ">=", "<=")
        and schema.columns[p.column].numeric
    ]
    if not comparisons or len({where[i].column for i in comparisons}) != 1:
        return sketch
    first, *others = comparisons
    ranged_where = tuple(
        replace(p, operator="between") if i == first else p
        for i, p in enumerate(where)
        if i not in others
    )
    return replace(sketch, slots=replace(sketch.slots, where=ranged_where))


_COUNTED = re.compile(
    r"\b(?:how many|(?:count|number|total number) of)\s+(?:the\s+)?(?:different\s+|distinct\s+)?"
    r"(\w+(?:\s+\w+)?)",
    re.IGNORECASE,
)


def _counted_table(sketch: Sketch, schema: Schema, question: str) -> Sketch:
    """`count(*)` over a join, in a question that counts a table of that join ("how many dogs
    went through a treatment"), as `count(DISTINCT` that table's key`)`: a dog with three
    treatments is one dog. The same number where the join does not repeat the table's rows. A
    counted table the join leaves out, said in the plural, is counted by the one key of the join
    that references it (`_referencing`).
    Only for a table with a one-column primary key, and not with GROUP BY or HAVING."""
    match = _COUNTED.search(question)
    if (
        match is None
        or sketch.select != {SelectItem("count", STAR)}
        or sketch.slots.group_by
        or sketch.slots.having
        or "distinct" in sketch.keywords
    ):
        return sketch
    columns = [
        *(p.column for p in sketch.slots.where),
        *(i.column for i in sketch.slots.order_by if i.column != STAR),
    ]
    tables = {*sketch.tables, *(schema.columns[c].table for c in columns)}
    named = tables_named_in("of " + match[1], schema)
    counted = tables & named
    if len(counted) == 1 and len(tables) > 1:
        (table,) = counted
        keys = schema.primary_key(table)
        key = keys[0] if len(keys) == 1 else None
    elif not counted and len(named) == 1 and _said_in_plural(match[1], schema, *named):
        key = _referencing(schema, tables, *named)
    else:
        key = None
    if key is None:
        return sketch
    return replace(
        sketch,
        select=frozenset({SelectItem("count", key)}),
        keywords=sketch.keywords | {"distinct"},
    )


def _said_in_plural(phrase: str, schema: Schema, table: int) -> bool:
    """Whether `phrase` says the last word of `table`'s name in the plural (as `dogs` names
    it, or as `concert` would be "concerts"): what is counted ("how many dogs"), not a word that
    describes it ("concert appearances")."""
    last = schema.tables[table].label.lower().split()[-1]
    return any(
        word in (last, *plurals(last)) and word.endswith("s") for word in phrase.lower().split()
    )


def _referencing(schema: Schema, tables: set[int], table: int) -> int | None:
    """The one column of `tables` that references `table`'s one-column primary key: how a
    join that leaves the counted table out ("how many dogs went through a treatment" reads
    treatments alone) still counts its rows (`count(DISTINCT treatments.dog_id)`)."""
    found = {c for c in references_to(schema, table) if schema.columns[c].table in tables}
    return found.pop() if len(found) == 1 else None


_PEOPLE = re.compile(r"\bhow many (?:people|persons|inhabitants|residents)\b", re.IGNORECASE)


def _people_counted(sketch: Sketch, schema: Schema, question: str) -> Sketch:
    """`count(*)` in a question that asks "how many people" of a table that holds a population
    (`city.population`) as the sum of that population: "how many people live in Gelderland
    district" asks how many live there, not how many cities it has. Only where exactly one
    table of the query has a population column."""
    counted = SelectItem("count", STAR)
    if counted not in sketch.select or not _PEOPLE.search(question):
        return sketch
    tables = {*sketch.tables, *(schema.columns[p.column].table for p in sketch.slots.where)}
    populations = [
        i
        for i, c in enumerate(schema.columns)
        if c.table in tables and c.numeric and "population" in c.label.lower().split()
    ]
    if len(populations) != 1:
        return sketch
    return replace(sketch, select=(sketch.select - {counted}) | {SelectItem("sum", populations[0])})


def complete(
    sketch: Sketch, schema: Schema, literals: Sequence[Literal] = (), *, question: str = ""
) -> str:
    """The sketch as one PostgreSQL SELECT (see the module's docstring for every choice).

    `literals` are the values to put in WHERE and HAVING, in order (`question_literals`, then
    what calibration found); `question`, when given, supplies the cues the sketch lacks: the
    N of "top N", HAVING comparisons, the aggregate of a nested comparison. Raises
    `CompletionError` for a sketch that cannot be made into SQL. The rewrites before the
    clauses are written and those of the clause writers are `rules.RULES`' completion rules,
    each applied by its name (`rules.applying` can disable it)."""
    if not sketch.select:
        raise CompletionError("unsupported item", "empty SELECT")
    sketch = rules.apply("extreme_row", sketch, _extreme_row, sketch)
    sketch = rules.apply("spoken_range", sketch, _spoken_range, sketch, schema, literals, question)
    for name, rewrite in (
        ("counted_table", _counted_table),
        ("people_counted", _people_counted),
    ):
        sketch = rules.apply(name, sketch, rewrite, sketch, schema, question)
    slots = sketch.slots
    select = sorted(
        sketch.select, key=lambda i: (i.aggregate != "", i.column, AGGREGATES.index(i.aggregate))
    )
    plain = [i.column for i in (*select, *slots.order_by) if not i.aggregate and i.column != STAR]
    mentioned = [
        *(i.column for i in (*select, *slots.having, *slots.order_by) if i.column != STAR),
        *(p.column for p in slots.where),
        *slots.group_by,
    ]
    for column in mentioned:
        if not 0 <= column < len(schema.columns):
            raise CompletionError("unsupported item", f"column {column}")
    for table in sketch.tables:
        if not 0 <= table < len(schema.tables):
            raise CompletionError("unsupported item", f"table {table}")
    try:
        joined = join_tree(schema, {*sketch.tables, *(schema.columns[c].table for c in mentioned)})
    except JoinError as error:
        raise CompletionError(error.reason, error.detail) from error

    # LIMIT is decided first: the number of "top 3" in the question is not a value.
    limit: int | None = None
    limit_span: tuple[int, int] | None = None
    if "limit" in sketch.keywords or slots.limit is not None:
        found = limit_in_question(question) if question else None
        if found is not None:
            limit, limit_span = found
        else:
            limit = slots.limit if slots.limit is not None else 1
    pool = [literal for literal in literals if limit_span is None or literal.span != limit_span]

    query = _Query(
        sketch=sketch,
        schema=schema,
        question=question,
        writer=_Writer(schema, joined),
        joined=joined,
        select=select,
        plain=plain,
        pool=pool,
        used=[False] * len(pool),
        limit=limit,
    )
    sql = " ".join(text for clause in CLAUSES if (text := clause(query)))
    operation = set_operation(sketch)
    if operation is not None and not query.limit and not slots.order_by:
        sql += _right_side(query, operation)
    _check(sql)
    return sql


def _right_side(query: _Query, operation: str) -> str:
    """` INTERSECT <the same query with the next value>` for a set operation whose sides differ
    in one value ("students with both cats and dogs"): when the left side used a value, and a
    literal of the same kind (found in the same column, where the first was) is left over."""
    taken = [literal for literal, used in zip(query.pool, query.used, strict=True) if used]
    rest = [literal for literal, used in zip(query.pool, query.used, strict=True) if not used]
    strings = [t for t in taken if t.kind == "string"]
    if len(taken) != 1 and len(strings) != 1:
        return ""
    first = strings[0] if strings else taken[0]
    others = [
        literal
        for literal in rest
        if literal.kind == first.kind and literal.column == first.column and literal != first
    ]
    if not others:
        return ""
    right = replace(query, pool=[*(t for t in taken if t is not first), others[0]])
    right.used = [False] * len(right.pool)
    text = " ".join(clause_text for clause in CLAUSES if (clause_text := clause(right)))
    return f" {operation.upper()} {text}"


def _check(sql: str) -> None:
    """Raise CompletionError unless `sql` is exactly one SELECT for PostgreSQL's parser."""
    try:
        statements = parse_sql(sql)
    except ParseError as error:
        raise CompletionError("unparsable", f"{error}: {sql}") from error
    if len(statements) != 1 or not isinstance(statements[0].stmt, ast.SelectStmt):
        raise CompletionError("unparsable", f"not one SELECT: {sql}")


def set_operation(sketch: Sketch) -> str | None:
    """The set operation whose right side `complete` leaves out, if the sketch has one."""
    return next((op for op in SET_OPERATIONS if op in sketch.keywords), None)
