"""Ordering: the rules that order a sketch by the column and in the direction the question's
words say (a superlative, "ordered by", "youngest", "most recent", "from high to low", "by
frequency").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import STAR, SelectItem, SketchParts, Slots
from proxy.nl2sql.sketch_rules.words import (
    OWNER_WORDS,
    QUESTION_WORD,
    column_namings,
    column_phrase,
    columns_used,
    key_columns,
    name_matches,
    naming,
    tables_shown,
)

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
    words = [w for w in QUESTION_WORD.findall(match[1].lower()) if w not in OWNER_WORDS]
    return column_phrase(words)


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
        return naming(schema, column, phrase)

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
    namings = column_namings(schema, tuple(phrase))
    named = [c for c in pool if namings[c][1]]
    if not named and explicit and order_by[0].aggregate:
        # "ordered by id" of the document ids shown: the one shown column the words say in part
        named = [c for c in pool if namings[c][0]]
    return SelectItem("", named[0]) if len(named) == 1 else None


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
    or both. PLM-only completion's ORDER BY follows it."""
    down, up = _SAID_DESCENDING.search(question), _SAID_ASCENDING.search(question)
    if bool(down) == bool(up):
        return None
    return "desc" if down else "asc"


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
    if any(name_matches(phrase, table.label) for table in schema.tables):
        return None
    keys = key_columns(schema)
    read = tables_shown(schema, select)
    read.update(schema.columns[c].table for c in slots.group_by)
    read.update(schema.columns[p.column].table for p in slots.where)

    def score(column: int) -> tuple[int, bool]:
        return (naming(schema, column, phrase), schema.columns[column].table in read)

    quantities = [c for c, column in enumerate(schema.columns) if column.numeric and c not in keys]
    best = max(quantities, key=score, default=None)
    if best is None or score(best)[0] == 0:
        return None
    if sum(1 for c in quantities if score(c) == score(best)) > 1:
        return None
    ordered = replace(slots, order_by=(SelectItem("", best),), group_by=frozenset(), having=())
    return select, keywords - {"group by", "having"}, ordered
