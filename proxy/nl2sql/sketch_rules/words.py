"""How the question's words name the schema's tables and columns: the helpers the sketch stage's
wording rules share (`sketch_rules`), and the FROM a SELECT x KEYWORDS pair's own columns call
for.

`tables_named_in` gives the tables the question names, `tables_counted_in` those whose rows it
counts, and `named_tables` a pair's FROM from them. A rule reads a column in the words after its
cue ("maximum", "each": `column_phrase`) by how many of the column's own words they say
(`naming`, `column_namings`, `wholly_named`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from proxy.nl2sql.joins import connected, implicit_keys, references_to, without_unused_lookups
from proxy.nl2sql.schema import Schema, words_of
from proxy.nl2sql.sketch import STAR, SelectItem, Slots

QUESTION_WORD = re.compile(r"[a-z0-9]+")


_REQUESTS = frozenset({"show", "list", "give", "find", "return", "tell", "display"})
"""Verbs that ask for rows: a question word among them names no table, even a table so named."""


def plurals(word: str) -> tuple[str, ...]:
    """The plural forms a word may take: +s, +es, and y -> ies ("city", "cities")."""
    if word.endswith("y") and len(word) > 2:
        return (word + "s", word[:-1] + "ies")
    return (word + "s", word + "es")


@functools.lru_cache(maxsize=16384)  # `rank` asks the same again for each pair it repairs
def word_match(name: str, said: str) -> int:
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


def name_matches(said: list[str], table_words: str) -> dict[tuple[int, int], int]:
    """Where in the question's words a table's name is said: (start, number of words) -> how
    closely (the weakest of its words' `word_match`)."""
    words = table_words.lower().split()
    found: dict[tuple[int, int], int] = {}
    for i in range(len(said) - len(words) + 1 if words else 0):
        span = zip(words, said[i : i + len(words)], strict=True)
        closeness = min(word_match(w, s) for w, s in span)
        if closeness:
            found[i, len(words)] = closeness
    return found


def names_table(question: str, table_words: str) -> bool:
    """Whether the question says a table's name (`Table.label`), its words in order ("poker
    players" for "poker player"). The question's first word is not looked at: it is the verb of
    a request ("Show ...", "List ..."), and tables are named like that too."""
    return bool(name_matches(QUESTION_WORD.findall(question.lower())[1:], table_words))


def tables_named_in(question: str, schema: Schema) -> frozenset[int]:
    """The tables whose names the question says (`names_table`), by their words or by their
    name itself (Spider's visitor table reads "customer"); where the same words say two names,
    the closer one only: "visitors" names visitor, not visit."""
    said = QUESTION_WORD.findall(question.lower())[1:]
    matches: dict[int, dict[tuple[int, int], int]] = {}
    for t, table in enumerate(schema.tables):
        found = name_matches(said, table.label)
        for span, closeness in name_matches(said, words_of(table.name)).items():
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


SPOKEN_AGGREGATE = {
    "average": "avg",
    "mean": "avg",
    "maximum": "max",
    "max": "max",
    "minimum": "min",
    "min": "min",
    "total": "sum",
}


FILLER_WORDS = frozenset({"the", "of", "a", "an", "all", "number", "numbers", "value", "values"})
AGGREGATE_WINDOW = 4  # words after the list where its column is named


PHRASE_END = frozenset(
    {
        "in", "for", "among", "across", "from", "with", "that", "who", "whose", "where", "by",
        "per", "of", "at", "on", "each", "all", "over", "to", "which", "when", "do", "does",
        "did", "is", "are", "was", "were", "has", "have",
    }
)  # fmt: skip
LEADING_FILLER = frozenset({"the", "a", "an", "number", "numbers", "of", "value", "values"})


OWNER_WORDS = frozenset({"his", "her", "their", "its", "or", "also", "both", "all", "each"})
"""Words before a column's own in a spoken list: "List his or her id, last name and cell phone"."""


def column_phrase(words: Iterable[str], stop: Iterable[str] = ()) -> list[str]:
    """The words that name a column after a cue ("maximum", "largest"): leading filler ("the
    number of") skipped, up to a word like "in", "of" or "for" (or one of `stop`), at most
    `AGGREGATE_WINDOW` of them."""
    phrase: list[str] = []
    for word in words:
        if word in LEADING_FILLER and not phrase:
            continue
        if word in PHRASE_END or word in stop or len(phrase) == AGGREGATE_WINDOW:
            break
        phrase.append(word)
    return phrase


def naming(schema: Schema, column: int, phrase: Sequence[str]) -> int:
    """How many of a column's own words (`own_words`) the phrase says, a word or two or three
    of it run together counting as one: "life expectancy" says `lifeexpectancy`, a name no
    split into known words (`schema.spelled_out`) found."""
    said = [
        *phrase,
        *("".join(phrase[i : i + n]) for n in (2, 3) for i in range(len(phrase) - n + 1)),
    ]
    return sum(any(word_match(w, s) for s in said) for w in own_words(schema, column))


@functools.lru_cache(maxsize=4096)
def own_words(schema: Schema, column: int) -> tuple[str, ...]:
    """A column's words, less filler and the words that name its table ("singer" of
    singer.singer_id), unless nothing else is left."""
    words = [w for w in schema.columns[column].label.lower().split() if w not in FILLER_WORDS]
    table = schema.tables[schema.columns[column].table].label.lower().split()
    own = [w for w in words if not any(word_match(t, w) == 2 for t in table)] or words
    return tuple(own)


@functools.lru_cache(maxsize=1024)
def column_namings(schema: Schema, phrase: tuple[str, ...]) -> tuple[tuple[int, bool], ...]:
    """For each column of the schema: how many of its own words the phrase says (`naming`),
    and whether that is all of them. Once per phrase: every pair of a question asks again."""
    found = []
    for column in range(len(schema.columns)):
        said = naming(schema, column, phrase)
        found.append((said, said == len(own_words(schema, column))))
    return tuple(found)


def wholly_named(schema: Schema, words: Sequence[str]) -> list[int]:
    """The columns all of whose own words `words` say (`naming`): "version number" names
    templates.version_number."""
    namings = column_namings(schema, tuple(w.lower() for w in words))
    return [c for c, (said, whole) in enumerate(namings) if said and whole]


def columns_moved(
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


def key_columns(schema: Schema) -> frozenset[int]:
    """Columns of a primary or foreign key: identifiers, never a quantity to order by."""
    keys = {c for c, column in enumerate(schema.columns) if column.primary_key}
    for key in schema.foreign_keys:
        keys.update((key.column, key.referenced))
    return frozenset(keys)
