"""Grouping: the rules that group a sketch by the column the question groups by ("each year",
"which grades"), and no longer by what is no group: a column it gives a number of ("4
cylinders"), a column the SELECT averages, a GROUP BY where nothing is aggregated.
"""

from __future__ import annotations

import re
from dataclasses import replace

from proxy.nl2sql.joins import implicit_keys
from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, SketchParts, Slots
from proxy.nl2sql.sketch_rules.words import (
    QUESTION_WORD,
    SPOKEN_AGGREGATE,
    column_namings,
    column_phrase,
    columns_moved,
    columns_used,
    key_columns,
    naming,
    own_words,
    tables_named_in,
    word_match,
)


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
        phrase = column_phrase(QUESTION_WORD.findall(match[1].lower()))
        if not phrase or naming(schema, grouped, phrase):
            continue
        if tables_named_in("each " + " ".join(phrase), schema):
            continue
        namings = column_namings(schema, tuple(phrase))
        whole = [c for c in columns if namings[c][1] and namings[c][0] == len(phrase)]
        if len(whole) == 1:
            return columns_moved(select, slots, {grouped: whole[0]})
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
    phrase = column_phrase(QUESTION_WORD.findall(match[1].lower()))
    if not phrase or tables_named_in("which " + " ".join(phrase), schema):
        return None
    keys = key_columns(schema)
    shown = [
        i.column
        for i in select
        if not i.aggregate
        and i.column != STAR
        and i.column not in keys
        and schema.columns[i.column].table == column.table
    ]
    namings = column_namings(schema, tuple(phrase))
    asked = [c for c in shown if namings[c][1]]
    if len(asked) != 1:
        return None
    return replace(slots, group_by=frozenset(asked))


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
    if any(word in SPOKEN_AGGREGATE for word in QUESTION_WORD.findall(question.lower())):
        return None
    return (
        select,
        keywords - {"group by", "having"},
        replace(slots, group_by=frozenset(), having=()),
    )


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
        column_phrase(QUESTION_WORD.findall(m[1].lower()))
        for m in _NUMBER_THEN_WORDS.finditer(question)
    ]

    def said_with_a_number(column: int) -> bool:
        own = own_words(schema, column)
        return any(
            len(own) <= len(phrase)
            and all(word_match(w, s) for w, s in zip(own, phrase, strict=False))
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
        phrase = column_phrase(QUESTION_WORD.findall(match[1].lower()))
        pointless = frozenset(c for c in pointless if not naming(schema, c, phrase))
    if not pointless:
        return None
    return _ungrouped(select, keywords, slots, pointless)
