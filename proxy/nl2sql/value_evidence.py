"""What the database's own values say about a question, for the sketch stage.

The sketch model reads only the schema: "what are the population and life expectancies in Brazil"
gives it no way to tell that Brazil is a value of `country.name`, and its WHERE column is then
often a column that holds no such value (`city.district`), which puts the wrong tables in FROM.
`NamedValues` is the values the question names word for word, by column, and the columns whose
values were looked at at all; `conditions_on_named_values` moves a WHERE condition from a column
that holds none of the question's values to one that holds a value no other condition takes, and
gives a value no condition took, named in capitals or quotes, a condition of its own.

Where the values come from: in the pipeline, the value index (`ValueIndex.named_in`: the
question's `runs` of words looked up among the normalised values, and the columns
`nl.value_index_columns` lists); for Spider, the databases' own values read under the same rules
as the index (`model_export.evaluate_sketch.spider_values`), looked up by `NamedValues.spoken`.
Both go through `NamedValues.of`, which leaves out what the question says only as the schema's
names, as a common word, or as part of a longer value it names.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, replace

from proxy.nl2sql.complete_plm import NUMBER_WORDS, question_literals
from proxy.nl2sql.schema import Schema, words_of
from proxy.nl2sql.sketch import Predicate, SelectItem, Slots
from proxy.nl2sql.sketch_rules.words import (
    columns_used,
    plurals,
    tables_named_in,
    tables_shown,
    wholly_named,
)
from proxy.valueindex.common import normalise

_WORD = re.compile(r"[^\W_][\w'-]*")
_ALPHANUMERIC = re.compile(r"[^\W_]+")
STOP_WORDS = frozenset(
    """a about above after all also an and any are as at be before below between both but by can
    count different distinct do does each every find for from give has have how in is it its
    list many maximum minimum more most much name names number of on or other show than that the
    their them there these they this those to total was were what when where which who whose
    with without average sum least fewest largest smallest highest lowest""".split()  # noqa: SIM905
)
_CAPITALISED_RUN = re.compile(r"(?<![\w'])[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,3}")
_NUMBER = re.compile(
    rf"\d|\b(?:{'|'.join(NUMBER_WORDS)}|first|second|third|fourth|fifth)\b", re.IGNORECASE
)
_LONGEST_VALUE = 6  # words: a longer value is never found in a question word for word
_AROUND = ".,;:!?\"'()[]\u201c\u201d\u2018\u2019"  # punctuation around a word
# conditions a named value can be the right side of; a LIKE pattern is not a value
_VALUE_OPERATORS = frozenset({"=", "!=", "in", "not in"})
# words that put a value on the other side of a negation, a set operation or an OR
_OTHER_SIDE = re.compile(r"\b(?:not|n't|no|never|without|but|both|either|or)\b", re.IGNORECASE)


def _quoted(question: str) -> list[str]:
    """The question's quoted strings, as completion reads them (`question_literals`)."""
    return [str(t.value) for t in question_literals(question) if t.kind == "string"]


def code_of_a_word(question: str, value: str) -> bool:
    """Whether a value is a code in capitals that the question says only as one of its common
    words, in lower case: "is", "in", "by" and "do" are no country codes 'IS', 'IN', 'BY' and
    'DO' ("where Chinese is spoken")."""
    if not value.isupper() or value.casefold() not in STOP_WORDS:
        return False
    return re.search(rf"\b{re.escape(value)}\b", question) is None


def named_by_schema_words(question: str, value: str, schema_words: Container[str]) -> bool:
    """Whether the question names a value only by words that name tables or columns
    (`schema_words`, lower case): "the stadium with the most concerts" says no 'Bayview
    Stadium'. A value it names by none of its words (found by meaning: "French" -> 'France')
    is not."""
    said = {w.casefold() for w in _WORD.findall(question)}
    shared = {w.casefold() for w in _WORD.findall(value)} & said
    return bool(shared) and all(w in schema_words for w in shared)


def capitalised_names(question: str) -> set[str]:
    """The question's runs of capitalised words and their shorter runs, case-folded, leaving
    out its first word (capitalised as the start of a sentence): "the country in Asia", "by Ben
    Jones" -> {"asia"}, {"ben jones", "ben", "jones"}."""
    found: set[str] = set()
    for match in _CAPITALISED_RUN.finditer(question):
        words = match[0].split()
        if match.start() == len(question) - len(question.lstrip()):
            words = words[1:]
        for n in range(1, len(words) + 1):
            found.update(" ".join(words[i : i + n]).casefold() for i in range(len(words) - n + 1))
    return found


def schema_words(schema: Schema) -> frozenset[str]:
    """The words of the schema's table and column names, and their plurals, lower case."""
    names = [t.name for t in schema.tables] + [c.name for c in schema.columns]
    found = {w for name in names for w in words_of(name).split()}
    return frozenset(found | {p for w in found for p in plurals(w)})


def words(text: str) -> str:
    """`text` as the words pg_trgm compares (runs of letters and digits, normalised as the
    value index normalises values), one space apart: "Brazil's" -> "brazil s"."""
    return " ".join(_ALPHANUMERIC.findall(normalise(text)))


def runs(question: str) -> frozenset[str]:
    """What a value the question names word for word looks like, normalised as the value index
    normalises values (`nl.value_index.normalised`): its runs of up to `_LONGEST_VALUE` words,
    the words as written ("st. louis"), without the punctuation around them ("brazil", of
    "Brazil?"), and as pg_trgm splits them (`words`: "brazil", of "Brazil's"); and its quoted
    strings."""
    text = normalise(question)
    found: set[str] = set()
    for split in (text.split(), [w.strip(_AROUND) for w in text.split()], words(text).split()):
        said = [w for w in split if w]
        found.update(
            " ".join(said[i : i + n])
            for n in range(1, _LONGEST_VALUE + 1)
            for i in range(len(said) - n + 1)
        )
    return frozenset(found | {normalise(quoted) for quoted in _quoted(question)})


@dataclass(frozen=True)
class NamedValues:
    """The values a question names (as `words`), by schema column, and the columns whose values
    were looked at (`searched`): a column outside it may hold a value the question names
    without anyone knowing."""

    columns: Mapping[int, frozenset[str]]
    searched: frozenset[int]

    @classmethod
    def of(
        cls,
        question: str,
        schema: Schema,
        found: Iterable[tuple[int, str]],
        searched: Iterable[int],
        *,
        names: Container[str] | None = None,
    ) -> NamedValues:
        """The (column, value) pairs `found`, less those the question names only by the
        schema's words or by a common word (`named_by_schema_words`, `code_of_a_word`; a
        common word or a letter only in quotes) and values that are part of a longer value it names
        ("Ford" in "Ford Motor Company"). `names`: the schema's words (`schema_words`), where
        the caller has them."""
        names = schema_words(schema) if names is None else names
        quoted = {words(q) for q in _quoted(question)}
        kept: dict[int, set[str]] = {}
        for column, value in found:
            folded = words(value)
            if not folded or (folded not in quoted and (folded in STOP_WORDS or len(folded) < 2)):
                continue  # a common word, or a letter, the question does not quote
            if code_of_a_word(question, value) or named_by_schema_words(question, value, names):
                continue
            kept.setdefault(column, set()).add(folded)
        every = {v for values in kept.values() for v in values}
        inside = {v for v in every if any(v != u and f" {v} " in f" {u} " for u in every)}
        columns = {c: frozenset(v - inside) for c, v in kept.items() if v - inside}
        return cls(columns, frozenset(searched))

    @classmethod
    def spoken(cls, question: str, schema: Schema, values: ColumnValues) -> NamedValues:
        """The values of `values` the question names word for word (the value index's exact
        match, without the index)."""
        found = [pair for run in runs(question) for pair in values.by_normalised.get(run, ())]
        return cls.of(question, schema, found, values.columns)


@dataclass(frozen=True)
class ColumnValues:
    """Columns' values, by their normalised form: what `NamedValues.spoken` looks a question's
    `runs` up in, as the value index does (`ValueIndex.named_in`)."""

    by_normalised: Mapping[str, tuple[tuple[int, str], ...]]
    columns: frozenset[int]

    @classmethod
    def of(cls, values: Mapping[int, Iterable[str]]) -> ColumnValues:
        found: dict[str, list[tuple[int, str]]] = {}
        for column, column_values in values.items():
            for value in column_values:
                found.setdefault(normalise(value), []).append((column, value))
        return cls({w: tuple(pairs) for w, pairs in found.items()}, frozenset(values))


def conditions_on_named_values(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    slots: Slots,
    named: NamedValues,
    *,
    said: frozenset[int] | None = None,
) -> Slots:
    """`slots` with each WHERE condition that takes a value (=, !=, IN, NOT IN; not a nested
    one, not a LIKE pattern) on a column holding none of the question's values, of those the
    index holds, moved to a text column that holds one no other condition has: the column of
    the longest such value, then one of a table the sketch already reads, then one of a table
    the question names (`said`: `tables_named_in`), then one of the condition's own table
    ("what are the population and life expectancies in Brazil": city.district = ? ->
    country.name = ?). A condition on a number column moves only where it is `=` and the
    question holds no number it may take ("3 years old", "first grade"). In a SELECT that
    counts, a condition stays on a table the question names, itself or by one of its columns:
    what is counted may be that table ("the number of makers of cars in France" counts
    car_makers, "the number of languages used in Aruba" countrylanguage), and the pipeline's
    values stage moves such a condition later, keeping the table (`pipeline.without_left_tables`).
    Then a value the question names in capitals or quotes that no condition took gets one of its
    own, where nothing says it belongs elsewhere (`_conditions_for_free_values`). A condition on a
    foreign key (whose values the index does not hold) moves only to a column of the table the
    key references, and not where the question may name a code (`_names_a_code`): "the TV
    channel with series name Sky Radio" is tv_channel.series_name, not cartoon.channel. The
    variants tried beside these choices (counting SELECTs moving every condition or none, free
    values in lower case, no code guard) are in docs/measurements.md."""
    if not named.columns or not slots.where:
        return slots
    counts = any(item.aggregate == "count" for item in select)
    number = _NUMBER.search(question) is not None
    conditions = list(slots.where)
    held = {p.column for p in conditions if not p.nested and p.column in named.columns}
    free = {v for c, values in named.columns.items() if c not in held for v in values}
    for column in held:
        free -= named.columns[column]
    read = {schema.columns[c].table for c in columns_used(select, slots)}
    said = tables_named_in(question, schema) if said is None else said
    named_columns = wholly_named(schema, _ALPHANUMERIC.findall(question.lower())) if counts else []
    taken = {p.column for p in conditions}
    for i, condition in enumerate(conditions):
        column = condition.column
        within: frozenset[int] | None = None  # the tables its new column may be in
        if condition.nested or condition.operator not in _VALUE_OPERATORS:
            continue
        if column in named.columns:
            continue
        table = schema.columns[column].table
        if counts and (
            table in said or any(schema.columns[c].table == table for c in named_columns)
        ):
            continue  # what is counted may be this table: the values stage moves it, keeping it
        if schema.columns[column].numeric:
            if condition.operator != "=" or number:
                continue
        elif column not in named.searched:
            referenced = schema.referenced_tables(column)
            if not referenced or _names_a_code(question, free):
                continue  # its values are not known: nothing says they are not the question's
            within = referenced  # a key: the question names a row of the table it references
        homes = [
            c
            for c, values in named.columns.items()
            if values & free
            and c not in taken
            and not schema.columns[c].numeric
            and (within is None or schema.columns[c].table in within)
        ]
        if not homes:
            continue

        def preference(
            c: int, free: set[str] = free, table: int = table
        ) -> tuple[int, bool, bool, bool]:
            home = schema.columns[c].table
            longest = max(len(v.split()) for v in named.columns[c] & free)
            return (-longest, home not in read, home not in said, home != table)

        home = min(sorted(homes), key=preference)
        conditions[i] = replace(condition, column=home)
        taken.add(home)
        free -= named.columns[home]
    if not slots.where_or:
        conditions += _conditions_for_free_values(
            question, schema, named, conditions, free=free, taken=taken
        )
    return replace(slots, where=tuple(conditions))


_YEAR = re.compile(r"\b(?:1[89]|20)\d\d\b")


def conditions_on_a_year(
    question: str,
    schema: Schema,
    select: frozenset[SelectItem],
    slots: Slots,
    named: NamedValues,
    *,
    said: frozenset[int] | None = None,
) -> Slots:
    """`slots` with a WHERE condition that takes a value (not nested) on a text column that
    holds none of the question's values moved to the one year column (a number column whose
    name ends in "year") of the tables the SELECT shows or the question names, where the
    question gives a year and names nothing in capitals or quotes: "the minimum weight of the
    cars with 8 cylinders produced in 1974" is cars_data.year = ?, not car_names.make = ?."""
    if not slots.where or not _YEAR.search(question):
        return slots
    if capitalised_names(question) or _quoted(question):
        return slots  # a text value the question names, which the condition may be for
    said = tables_named_in(question, schema) if said is None else said
    tables = tables_shown(schema, select) | said
    taken = {p.column for p in slots.where}
    years = [
        c
        for c in range(len(schema.columns))
        if c not in taken
        and schema.columns[c].table in tables
        and schema.columns[c].numeric
        and words_of(schema.columns[c].name).split()[-1:] == ["year"]
    ]
    if len(years) != 1:
        return slots
    conditions = list(slots.where)
    for i, condition in enumerate(conditions):
        column = condition.column
        if condition.nested or condition.operator not in _VALUE_OPERATORS:
            continue
        if schema.columns[column].numeric or column in named.columns:
            continue
        conditions[i] = replace(condition, column=years[0])
        break
    return replace(slots, where=tuple(conditions))


_CODE = re.compile(r"\bcodes?\b", re.IGNORECASE)
_CAPITALS = re.compile(r"\b[A-Z0-9]*[A-Z][A-Z0-9]+\b")


def _names_a_code(question: str, values: Iterable[str]) -> bool:
    """Whether the question may name a code rather than what it stands for: it says "code",
    or it spells one of `values` in capitals as one word ("incidents of type NOISE",
    "documents in type CV")."""
    if _CODE.search(question):
        return True
    capitals = {word.lower() for word in _CAPITALS.findall(question)}
    return any(value in capitals for value in values)


def _conditions_for_free_values(
    question: str,
    schema: Schema,
    named: NamedValues,
    conditions: list[Predicate],
    *,
    free: set[str],
    taken: set[int],
) -> list[Predicate]:
    """`column = ?` for each value the question names in capitals or quotes that no condition
    took and only one text column holds ("the names of the races held after 2017 in Spain":
    circuits.country = ? beside races.year > ?), where every condition found its value (none
    is nested, none on a text column that holds none of the question's values) and the
    question says nothing that puts a value on another side (not, no, never, without, but,
    both, either, or: a NOT IN subquery's, a set operation's, an OR's); not beside OR."""
    if not free or _OTHER_SIDE.search(question):
        return []
    for condition in conditions:
        if condition.nested or (
            condition.operator in _VALUE_OPERATORS
            and not schema.columns[condition.column].numeric
            and condition.column not in named.columns
        ):
            return []  # the value may be that condition's
    said = {words(name) for name in capitalised_names(question)}
    said |= {words(quoted) for quoted in _quoted(question)}
    added: list[Predicate] = []
    for column, values in sorted(named.columns.items()):
        wanted = values & free & said
        if not wanted or column in taken or schema.columns[column].numeric:
            continue
        if any(c != column and other & wanted for c, other in named.columns.items()):
            continue  # two columns hold it: which one is meant is not known
        added.append(Predicate(column, "="))
        taken.add(column)
        free -= values
    return added
