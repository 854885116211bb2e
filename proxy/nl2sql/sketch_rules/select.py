"""What the SELECT says: the rules that make a sketch's SELECT the aggregates and columns the
question spells out ("the average, minimum and maximum age", "name, country, age for all
singers", "the smallest weight"), count or sum the one number it asks for, and show what a
grouped SELECT of aggregates groups by.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import STAR, SelectItem, Slots
from proxy.nl2sql.sketch_rules.words import (
    AGGREGATE_WINDOW,
    FILLER_WORDS,
    LEADING_FILLER,
    OWNER_WORDS,
    PHRASE_END,
    QUESTION_WORD,
    SPOKEN_AGGREGATE,
    column_namings,
    column_phrase,
    naming,
    own_words,
    word_match,
)

_AGGREGATE_WORD = "(?:" + "|".join(SPOKEN_AGGREGATE) + ")"
_AGGREGATE_LIST = re.compile(
    rf"\b({_AGGREGATE_WORD}(?:\s*(?:,\s*(?:and\s+)?|\band\s+){_AGGREGATE_WORD})+)\b((?:\s+\w+)*)",
    re.IGNORECASE,
)


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
        dict.fromkeys(SPOKEN_AGGREGATE[w] for w in re.findall(_AGGREGATE_WORD, match[1].lower()))
    )
    if len(aggregates) < 2:
        return None
    following = [w for w in QUESTION_WORD.findall(match[2].lower()) if w not in FILLER_WORDS][
        :AGGREGATE_WINDOW
    ]
    said = set(QUESTION_WORD.findall(question.lower()))
    named = [item.column for item in select if item.column != STAR]

    def said_score(column: int) -> tuple[int, int, int]:
        near = naming(schema, column, following)
        words = schema.columns[column].label.lower().split()
        anywhere = sum(w in said for w in words if w not in FILLER_WORDS)
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
        words = QUESTION_WORD.findall(segment.lower())
        if not words or words[0] not in SPOKEN_AGGREGATE:
            break
        if words[:3] == ["total", "number", "of"]:
            return None  # a count ("the total number of airlines")
        phrase = column_phrase(words[1:])

        def score(column: int, phrase: list[str] = phrase) -> tuple[int, bool, bool]:
            return (
                naming(schema, column, phrase),
                column in named,
                schema.columns[column].table in read,
            )

        best = max(range(len(schema.columns)), key=score, default=None)
        if best is None or score(best)[0] == 0:
            return None
        items.append(SelectItem(SPOKEN_AGGREGATE[words[0]], best))
    if not items or any(item.column in group_by for item in items):
        return None
    kept = {item for item in select if not item.aggregate and item.column in group_by}
    return frozenset({*kept, *items})


_SENTENCE_END = re.compile(r"[?.!;]\s*")


def _counts(words: Sequence[str]) -> bool:
    """Whether a spoken item is a count or an aggregate ("the number of songs", "how many",
    "average age"), not a column ("version numbers")."""
    while words and words[0] in ("the", "a", "an"):
        words = words[1:]
    if not words:
        return False
    if words[0] in ("number", "numbers", "total"):
        return words[1:2] == ["of"] or words[0] == "total"
    return words[0] in ("count", "how") or words[0] in SPOKEN_AGGREGATE


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
        said, wholly = column_namings(schema, tuple(phrase))[column]
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
            words = [w for w in QUESTION_WORD.findall(segment.lower()) if w not in OWNER_WORDS]
            if _counts(words):
                counting = _spoken_count(words)
                if not aggregated or counted or counting is None:
                    return None
                counted = True
                if any(w in PHRASE_END for w in words[counting:]):
                    break  # the list ends here ("the number of accounts that she has")
                continue
            phrases.append(column_phrase(words))
            if len(phrases[-1]) < len([w for w in words if w not in LEADING_FILLER]):
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
        return any(entire for _, entire in column_namings(schema, tuple(phrase)))

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


def _explained(schema: Schema, column: int, phrase: tuple[str, ...]) -> int:
    """How many words of `phrase` a column's name and its table's name say between them: "owner
    id" is all said by owners.owner_id (its own word "id", its table "owner") as much as by
    dogs.owner_id."""
    column_of = schema.columns[column]
    words = (
        *column_of.label.lower().split(),
        *schema.tables[column_of.table].label.lower().split(),
    )
    return sum(1 for said in phrase if any(word_match(w, said) for w in words))


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
    words = QUESTION_WORD.findall(question.lower())
    changed = dict(aggregated)
    for at, word in enumerate(words):
        if word not in SPOKEN_AGGREGATE or words[at : at + 3] == ["total", "number", "of"]:
            continue
        phrase = column_phrase(words[at + 1 :], stop=SPOKEN_AGGREGATE)
        scores = {column: naming(schema, column, phrase) for column in aggregated}
        best = max(scores, key=lambda c: scores[c])
        if scores[best] and sum(1 for v in scores.values() if v == scores[best]) == 1:
            changed[best] = SelectItem(SPOKEN_AGGREGATE[word], best)
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
    words = QUESTION_WORD.findall(question.lower())
    changed: dict[SelectItem, SelectItem] = {}
    for at, word in enumerate(words):
        if word not in _EXTREMES:
            continue
        phrase = column_phrase(words[at + 1 :])
        full = [
            item
            for item in plain
            if naming(schema, item.column, phrase) == len(own_words(schema, item.column))
            and naming(schema, item.column, phrase)
        ]
        if len(full) == 1:
            changed[full[0]] = SelectItem(_EXTREMES[word], full[0].column)
    if not changed:
        return None
    return (select - set(changed)) | set(changed.values())
