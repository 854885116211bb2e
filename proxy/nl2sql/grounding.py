"""The lookup and values stages: the values of the database that the question names, found in
the value index, and given to the sketch's conditions.

- `spoken_values` (lookup): the values the question names word for word, by column, for the
  sketch stage (`value_evidence.NamedValues`).
- `with_named_values`: a condition `column = value` added for a value of the sketch's tables
  that the question names in capitals and the sketch filters on no column of.
- `ground` (values, PLM-only): the literals of a candidate's WHERE: the question's typed ones,
  then the value the question names best for each condition that wants a string the question
  does not quote, moving the condition to the column that holds it.
- `samples_for`: a few values of the text columns a sketch names, for the LLM's prompt.

Look-ups are made once per table set per question (a `Grounding` is one question's). A value
index that is missing or unusable ends look-ups and calibration for the question, with a
NOTICE (`no_index`); a failing look-up only loses its values.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

from proxy.nl2sql.calibrate import best_match
from proxy.nl2sql.candidate import Candidate
from proxy.nl2sql.complete_plm import Literal, set_operation
from proxy.nl2sql.database import connection_lost, sqlstate
from proxy.nl2sql.question import Question, Stage
from proxy.nl2sql.relaxations import without_left_tables
from proxy.nl2sql.sketch import STAR, Predicate, Sketch
from proxy.nl2sql.sketch_rules.words import tables_named_in
from proxy.nl2sql.trace import one_line
from proxy.nl2sql.value_evidence import (
    STOP_WORDS,
    NamedValues,
    capitalised_names,
    code_of_a_word,
    named_by_schema_words,
    runs,
    schema_words,
)
from proxy.valueindex.common import Candidate as Found
from proxy.valueindex.common import ColumnRef, Scope, ValueIndexError
from proxy.valueindex.lookup import ValueIndex

SAMPLE_VALUES = 3
"""Values shown to the LLM per relevant text column."""
SAMPLE_COLUMNS = 8
_TEXT_OPERATORS = ("=", "!=", "like", "not like", "in", "not in")
GUESS_GRAMS = 12
"""Words and word pairs of a question compared with a column's values when none is named."""
_OR = re.compile(r"\bor\b", re.I)
_WORD = re.compile(r"[^\W_][\w'-]*")
_CODE = re.compile(r"[A-Z][A-Z0-9]{1,4}")
_EXACT = 0.999  # a value-index score of a value the question names word for word


class Grounding(Stage):
    """One question's look-ups in the value index (`index`; None once it proved unusable)."""

    def __init__(
        self, question: Question, index: ValueIndex | None, *, value_match: float, threshold: float
    ) -> None:
        super().__init__(question)
        self.index = index
        self.value_match = value_match  # [pipeline] value_match
        self.threshold = threshold  # [calibration] threshold
        self._found: dict[tuple[str, ...] | None, list[Found]] = {}
        self._numbers: dict[ColumnRef, int] | None = None
        self._names: frozenset[str] | None = None
        self._samples: dict[int, list[str]] = {}
        self._holds: dict[tuple[int, str], bool] = {}  # (column, quoted string) -> held there

    @property
    def samples(self) -> dict[int, list[str]]:
        """The values `samples_for` found so far, by column (those with any)."""
        return {c: self._samples[c] for c in sorted(self._samples) if self._samples[c]}

    def column_ref(self, column: int) -> ColumnRef:
        schema = self.schema
        table = schema.tables[schema.columns[column].table]
        return ColumnRef(table.schema or "public", table.name, schema.columns[column].name)

    def is_text(self, column: int) -> bool:
        kind = self.schema.columns[column].type.lower()
        return any(word in kind for word in ("char", "text", "name", "citext"))

    def _wants_value(self, predicate: Predicate) -> bool:
        """A WHERE predicate that needs a string the question may name unquoted: a text
        comparison on a text column, or `=` on another column when the question holds no number
        (the slot head picked the wrong column: the value's column is the right one)."""
        if predicate.nested:
            return False
        if self.is_text(predicate.column):
            return predicate.operator in _TEXT_OPERATORS
        return predicate.operator == "=" and not any(t.kind == "number" for t in self.typed)

    def _named_values(self, tables: tuple[str, ...] | None) -> list[Found]:
        """Values the question names, in these tables of the schema (None: anywhere)."""
        if tables not in self._found:
            assert self.index is not None
            schema = self.schema
            schemas = {t.schema or "public" for t in schema.tables}
            found = self.index.search_in_text(
                self.question,
                schema=next(iter(schemas)) if tables is not None and len(schemas) == 1 else None,
                tables=tables,
                k=20,
                min_score=self.value_match,
            )
            self._found[tables] = [
                c
                for c in found
                if c.column in self.column_numbers
                and not code_of_a_word(self.question, c.value)
                and not named_by_schema_words(self.question, c.value, self.schema_words)
            ]
        return self._found[tables]

    def spoken_values(self) -> tuple[NamedValues | None, str]:
        """The values the question names word for word, by column, and the columns the value
        index holds, for the sketch stage (`value_evidence`), and what the look-up found; None
        without an index or when the look-up fails."""
        assert self.index is not None
        try:
            found = self.index.named_in(sorted(runs(self.question)))
            indexed = self.index.indexed_columns()
        except ValueIndexError as exc:
            self.no_index(exc)
            return None, "no value index"
        except Exception as exc:
            if connection_lost(sqlstate(exc)):
                raise
            return None, f"look-up failed: {one_line(str(exc))}"
        numbers = self.column_numbers
        values = NamedValues.of(
            self.question,
            self.schema,
            [(numbers[c.column], c.value) for c in found if c.column in numbers],
            [numbers[ref] for ref in indexed if ref in numbers],
            names=self.schema_words,
        )
        return values, f"{len(values.columns)} columns hold a value the question names"

    def with_named_values(self, sketch: Sketch) -> Sketch:
        """The sketch with a condition `column = value` for each value of a text column of its
        tables that the question names in capitals ("the country in Asia with the lowest life
        expectancy": continent = 'Asia') where the sketch filters on no such column: the sketch
        model often leaves such a condition out. Only where every condition the sketch has
        takes a value the question typed or a capitalised value of its own column ("the student
        named Timmothy Ward" under first_name = ?: last_name = 'Ward' is added), so that a value
        already meant for one is not given to two, and never beside OR. Words of the schema's
        names ("Package Option") and words inside a quoted string are no such values."""
        typed = [t for t in self.typed if t.kind == "string"]
        unquoted = self.question
        for literal in typed:
            if literal.span is not None:  # a quoted string is one value, not several
                start, end = literal.span
                unquoted = unquoted[:start] + " " * (end - start) + unquoted[end:]
        said = capitalised_names(unquoted) - self.schema_words
        if not said or self.index is None or sketch.slots.where_or:
            return sketch
        wanting = {p.column for p in sketch.slots.where if self._wants_value(p)}
        schema = self.schema
        names = tuple(sorted(schema.tables[t].name for t in sketch.tables))
        try:
            found = self._named_values(names)
        except ValueIndexError as exc:
            self.no_index(exc)
            return sketch
        except Exception as exc:
            if connection_lost(sqlstate(exc)):
                raise
            return sketch  # the values stage says why when it looks again
        taken = {str(t.value).casefold() for t in typed}
        for value in found:
            # a condition the question names a value of in capitals takes that value ("named
            # Timmothy Ward": first_name 'Timmothy'), so that the rest may go to other columns
            column = self.column_numbers[value.column]
            if column in wanting and value.value.casefold() in said - taken:
                wanting.discard(column)
                taken.add(value.value.casefold())
        if len(wanting) > len(typed):
            return sketch
        filtered = {p.column for p in sketch.slots.where}
        added: list[Predicate] = []
        for value in found:
            column = self.column_numbers[value.column]
            folded = value.value.casefold()
            if folded not in said or column in filtered:
                continue
            if any(f" {folded} " in f" {t} " for t in taken):
                continue  # a value taken, or words of one ("Jetblue" of "Jetblue Airways")
            if schema.columns[column].table not in sketch.tables or not self.is_text(column):
                continue
            added.append(Predicate(column, "="))
            filtered.add(column)
            taken.add(folded)
        if not added:
            return sketch
        return replace(
            sketch,
            keywords=sketch.keywords | {"where"},
            slots=replace(sketch.slots, where=(*sketch.slots.where, *added)),
        )

    def ground(self, candidate: Candidate) -> list[Literal]:
        """The `values` stage: the question's typed literals, then, for each WHERE predicate
        that wants a string the question does not quote, the value of the database the question
        names best: in the predicate's own column, else in another text column of the sketch's
        tables or of a table the question names ("how many countries have governments that are
        republics" finds 'Republic' in country.governmentform where the sketch read only
        countrylanguage; the predicate moves there), else anywhere in the database (likewise). A
        predicate on a number column that a quoted string cannot fill ("abbreviation 'UAL'"
        given to `flights.airline`) moves to the text column holding that string; a FROM table
        only a moved predicate had named goes (`without_left_tables`). Look-ups are made once
        per table set per question."""
        sketch = candidate.sketch
        predicates = list(sketch.slots.where)
        wanting = [i for i, p in enumerate(predicates) if self._wants_value(p)]
        typed = [t for t in self.typed if t.kind == "string"]
        # a quoted string cannot be the value of a number column: that predicate wants moving
        homeless = [i for i in wanting if not self.is_text(predicates[i].column)]
        if not wanting or self.index is None or (len(typed) >= len(wanting) and not homeless):
            return self.typed
        schema = self.schema
        wanted_tables = {
            *sketch.tables,
            *(schema.columns[predicates[i].column].table for i in wanting),
            *tables_named_in(self.question, schema),
            # a predicate on a foreign key: the question may name the row it references by
            # that row's name ("airports in Germany": airports.country, countries.name)
            *(t for i in wanting for t in schema.referenced_tables(predicates[i].column)),
        }
        names = tuple(sorted(schema.tables[t].name for t in wanted_tables))
        bound: list[Literal] = []
        with self.trace.stage("values", candidate) as step:
            try:
                nearby = self._named_values(names)
                anywhere = None if nearby else self._named_values(None)
                pins = self._pinned(predicates, wanting)
            except ValueIndexError as exc:
                self.no_index(exc)
                step.outcome = "no value index"
                return self.typed
            except Exception as exc:
                if connection_lost(sqlstate(exc)):
                    raise
                step.outcome = f"look-up failed: {one_line(str(exc))}"
                return self.typed
            moves: list[str] = []

            def move(i: int, column: int) -> None:
                if column != predicates[i].column:
                    moves.append(
                        f"{schema.qualified(predicates[i].column)} -> {schema.qualified(column)}"
                    )
                    predicates[i] = replace(predicates[i], column=column)

            found = nearby or anywhere or []
            for n, i, column in self._quoted_homes(predicates, wanting, pins, found):
                move(i, column)
                pins[n] = i
            pinned = set(pins.values())
            taken = {str(t.value).casefold() for t in typed}
            # quoted strings no predicate has been moved to (or holds) yet
            unplaced = {
                str(t.value).casefold()
                for n, t in enumerate(self.typed)
                if t.kind == "string" and n not in pins
            }
            free = len(typed) - len(pins)  # quoted strings not yet spoken for
            # predicates on number columns first: the quoted strings they can move to
            for i in sorted(wanting, key=lambda i: self.is_text(predicates[i].column)):
                if i in pinned:
                    continue
                predicate = predicates[i]
                home = schema.columns[predicate.column].table
                if free and self.is_text(predicate.column):
                    free -= 1  # a quoted string goes to it
                    continue
                holder = next((c for c in found if c.value.casefold() in unplaced), None)
                if free and holder is not None:
                    # the text column that holds a quoted string takes the predicate
                    move(i, self.column_numbers[holder.column])
                    unplaced.discard(holder.value.casefold())
                    free -= 1
                    continue
                equal = {
                    p.column
                    for j, p in enumerate(predicates)
                    if j != i and p.operator == "=" and not p.nested
                }
                pool = [
                    c
                    for c in found
                    if c.value.casefold() not in taken
                    # a column another condition already equals a value cannot equal a second
                    # ("title = 'The Rise of the Blue Beetle!' AND title = 'Fall of ...'")
                    and (sketch.slots.where_or or self.column_numbers[c.column] not in equal)
                ]
                own = [c for c in pool if self.column_numbers[c.column] == predicate.column]
                others = sorted(
                    (c for c in pool if self.is_text(self.column_numbers[c.column])),
                    key=lambda c: (
                        -c.score,
                        schema.columns[self.column_numbers[c.column]].table != home,
                        -len(c.value.split()),  # "Central Africa" before "Africa"
                    ),
                )
                chosen = own[0] if own else (others[0] if others else None)
                if own and others and own[0].score < _EXACT <= others[0].score:
                    # the question names another column's value word for word, and the
                    # predicate's own only in part ("countries in Asia": continent 'Asia', not
                    # region 'Nordic Countries'): the predicate moves there
                    chosen = others[0]
                if chosen is None and self.is_text(predicate.column):
                    chosen = self._guess_value(predicate.column, taken)
                if chosen is None:
                    continue
                column = self.column_numbers[chosen.column]
                move(i, column)
                taken.add(chosen.value.casefold())
                bound.append(Literal(chosen.value, "string", column=column))
                if len(wanting) == 1 and (
                    set_operation(sketch) is not None or _OR.search(self.question)
                ):
                    # "both cats and dogs": the right side of the set operation takes the
                    # second value of the same column; "English or Dutch": both are listed
                    second = next(
                        (
                            c
                            for c in pool
                            if c.column == chosen.column and c.value.casefold() not in taken
                        ),
                        None,
                    ) or self._guess_code(column, taken)  # "type code PP or PPT"
                    if second is not None:
                        taken.add(second.value.casefold())
                        bound.append(Literal(second.value, "string", column=column))
            step.outcome = f"{len(bound)} values for {len(wanting)} predicates"
            if moves:
                step.note = "moved " + ", ".join(moves)
        if moves:
            moved = replace(sketch, slots=replace(sketch.slots, where=tuple(predicates)))
            candidate.sketch = without_left_tables(moved, sketch, schema, self.question)
        literals = [
            replace(t, column=predicates[pins[n]].column) if n in pins else t
            for n, t in enumerate(self.typed)
        ]
        return [*literals, *bound]

    def _quoted_homes(
        self,
        predicates: Sequence[Predicate],
        wanting: Sequence[int],
        pins: dict[int, int],
        found: Sequence[Found],
    ) -> Iterator[tuple[int, int, int]]:
        """For each quoted string no wanting column holds (`pins`) that the value index `found`
        in a text column: the first text predicate free for it, and that column (index in the
        question's literals, index in `predicates`, column). The predicate moves there, as
        calibration would move its value later, so that no other predicate is given a second
        value of that column."""
        used = set(pins.values())
        for n, literal in enumerate(self.typed):
            if literal.kind != "string" or n in pins:
                continue
            text = str(literal.value).casefold()
            holder = next(
                (
                    c
                    for c in found
                    if c.value.casefold() == text and self.is_text(self.column_numbers[c.column])
                ),
                None,
            )
            first = next(
                (i for i in wanting if i not in used and self.is_text(predicates[i].column)),
                None,
            )
            if holder is None or first is None:
                continue
            used.add(first)
            yield n, first, self.column_numbers[holder.column]

    def _pinned(self, predicates: Sequence[Predicate], wanting: Sequence[int]) -> dict[int, int]:
        """The quoted strings that a wanting predicate's text column holds word for word, each
        with that predicate (the first that holds it; one string a predicate): index in the
        question's literals -> index in `predicates`. "What is the weekly rank for the episode
        "A Love of a Lifetime"" under a sketch filtering tv_series.channel and then
        tv_series.episode gives the title to episode, not to the first text condition."""
        assert self.index is not None
        pins: dict[int, int] = {}
        for n, literal in enumerate(self.typed):
            if literal.kind != "string":
                continue
            for i in wanting:
                column = predicates[i].column
                if i in pins.values() or not self.is_text(column):
                    continue
                key = (column, str(literal.value))
                if key not in self._holds:
                    self._holds[key] = self.index.contains(self.column_ref(column), key[1])
                if self._holds[key]:
                    pins[n] = i
                    break
        return pins

    def _guess_value(self, column: int, taken: set[str]) -> Found | None:
        """For a text column none of whose values the question names word for word: a code the
        question writes in capitals ("the PPT template") that the column holds, else the value
        closest to one of the question's words or word pairs (calibration's hybrid similarity,
        at its threshold: "French" -> 'France'). Words that name tables or columns are not
        values."""
        assert self.index is not None
        code = self._guess_code(column, taken)
        if code is not None:
            return code
        ref = self.column_ref(column)
        tokens = _WORD.findall(self.question)
        names = self.schema_words
        words = [
            t
            for t in tokens
            if t.casefold() not in STOP_WORDS and t.casefold() not in names and not t.isdigit()
        ]
        pairs = [f"{a} {b}" for a, b in itertools.pairwise(tokens) if a in words and b in words]
        best: tuple[float, Found] | None = None
        for gram in [*pairs, *words][:GUESS_GRAMS]:
            match = best_match(self.index, gram, Scope.column(ref), "hybrid")
            if match is None or match[0] < self.threshold:
                continue
            if match[1].value.casefold() in taken:
                continue
            if best is None or match[0] > best[0]:
                best = match
        return best[1] if best is not None else None

    def _guess_code(self, column: int, taken: set[str]) -> Found | None:
        """A code the question writes in capitals ("the PPT template") that the column holds,
        other than those `taken`."""
        assert self.index is not None
        ref = self.column_ref(column)
        for token in _WORD.findall(self.question):
            fresh = _CODE.fullmatch(token) and token.casefold() not in taken
            if fresh and self.index.contains(ref, token):
                return Found(ref, token, 1.0, 1)
        return None

    @property
    def schema_words(self) -> frozenset[str]:
        if self._names is None:
            self._names = schema_words(self.schema)
        return self._names

    @property
    def column_numbers(self) -> dict[ColumnRef, int]:
        """Schema column index by (schema, table, column)."""
        if self._numbers is None:
            self._numbers = {self.column_ref(c): c for c in range(len(self.schema.columns))}
        return self._numbers

    def no_index(self, exc: Exception) -> None:
        self.index = None
        self.trace.notice(f"pgnl: values were not looked up or calibrated: {exc}")

    def samples_for(self, candidate: Candidate) -> dict[int, list[str]]:
        """A few values of the text columns the sketch names, for the LLM's prompt."""
        sketch = candidate.sketch
        columns = [
            *(p.column for p in sketch.slots.where),
            *(i.column for i in sketch.select if i.column != STAR),
        ]
        wanted = [c for c in dict.fromkeys(columns) if self.is_text(c)][:SAMPLE_COLUMNS]
        for column in wanted:
            if column in self._samples or self.index is None:
                continue
            try:
                found = self.index.values_in(Scope.column(self.column_ref(column)), SAMPLE_VALUES)
            except ValueIndexError as exc:
                self.no_index(exc)
                break
            except Exception as exc:
                if connection_lost(sqlstate(exc)):
                    raise
                found = []
            self._samples[column] = [c.value for c in found]
        return {c: self._samples[c] for c in wanted if self._samples.get(c)}
