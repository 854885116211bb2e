"""The sketch edits that make more candidates when the ranked ones do not answer, in the order
the search tries them (`search`):

1. `anti_join`: a question that says its rows have no related rows ("countries with no car
   makers"), asked as `key NOT IN (SELECT ...)`, when no candidate kept the question's "not";
2. `relaxations`: a sketch whose WHERE condition found no value in the question, without that
   condition (then without any WHERE), with a NOTICE naming what was left out.

And the edits the other stages share: `without_left_tables` (a FROM table only a moved
predicate had named goes), `tables_named_by` (the tables a sketch's clauses name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from proxy.nl2sql.answer_checks import NEGATION_SAID
from proxy.nl2sql.candidate import Candidate
from proxy.nl2sql.joins import references_to
from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import STAR, Predicate, Sketch, Slots
from proxy.nl2sql.sketch_rules.words import tables_named_in


def tables_named_by(sketch: Sketch, schema: Schema) -> frozenset[int]:
    """The tables of the columns a sketch's clauses name."""
    slots = sketch.slots
    return frozenset(
        schema.columns[column].table
        for column in (
            *(i.column for i in (*sketch.select, *slots.having, *slots.order_by)),
            *(p.column for p in slots.where),
            *slots.group_by,
        )
        if column != STAR
    )


def without_where(sketch: Sketch) -> Sketch:
    """The sketch with no WHERE predicates (and not "nested" where a WHERE predicate was)."""
    gone = {"where", "nested"} if any(p.nested for p in sketch.slots.where) else {"where"}
    return replace(
        sketch,
        keywords=sketch.keywords - gone,
        slots=replace(sketch.slots, where=(), where_or=False),
    )


_NEGATED_WORDS = 8  # words after the "not" where the table it is about is named


def anti_join(sketch: Sketch, schema: Schema, question: str) -> Sketch | None:
    """For a question that says its rows have no related rows of a table ("countries with no
    car makers", "templates not used by any document", "students who do not have friends"),
    the sketch's rows of one table T as `T.key NOT IN (SELECT ... FROM X)`, X the table named
    after the "not" that a key joins to T's one-column primary key. T is the table of every
    column the sketch shows (of the one FROM table the question names before the "not", for a
    `count(*)`). None where the question or the sketch does not fit. The sketch model rarely
    proposes such a nested NOT IN."""
    said = NEGATION_SAID.search(question)
    if said is None:
        return None
    after = " ".join(question[said.end() :].split()[:_NEGATED_WORDS])
    shown = {schema.columns[i.column].table for i in sketch.select if i.column != STAR}
    if not shown:
        shown = set(sketch.tables & tables_named_in(question[: said.start()], schema))
    if len(shown) != 1:
        return None
    (table,) = shown
    keys = schema.primary_key(table)
    if len(keys) != 1:
        return None
    related = {schema.columns[c].table for c in references_to(schema, table)} - {table}
    if not related & tables_named_in("of " + after, schema):
        return None
    return replace(
        sketch,
        tables=frozenset({table}),
        keywords=frozenset({"where", "nested"}) | (sketch.keywords & {"distinct"}),
        slots=Slots(where=(Predicate(keys[0], "not in", nested=True),)),
    )


def without_left_tables(moved: Sketch, before: Sketch, schema: Schema, question: str) -> Sketch:
    """`moved` (the sketch after the values stage moved predicates) without the FROM tables
    that only a moved predicate's old column had named, unless the question names them:
    "how many countries are in Asia" on city.district, moved to country.continent, no longer
    joins city (which would count cities)."""
    left = (tables_named_by(before, schema) - tables_named_by(moved, schema)) & moved.tables
    left -= tables_named_in(question, schema)
    if not left or not moved.tables - left:
        return moved
    return replace(moved, tables=moved.tables - left)


def relaxations(
    candidate: Candidate, schema: Schema, question: str, complete: Callable[[Candidate], bool]
) -> Iterator[tuple[Candidate, str]]:
    """The unfilled candidate completed without the WHERE conditions it found no value for,
    each with the conditions left out: first without only those its completion named, one
    at a time, while a condition with a value stays ("the weekly rank for the episode "A
    Love of a Lifetime"" under a sketch that also filters tv_series.channel: the episode's
    condition stays, with FROM tables only the left-out conditions named gone), then
    without any WHERE condition."""
    sketch = candidate.sketch
    left_out: list[str] = []
    column = candidate.unvalued
    while column is not None:
        where = sketch.slots.where
        position = next(
            (i for i, p in enumerate(where) if p.column == column and not p.nested), None
        )
        if position is None or len(where) == 1:
            break
        left_out.append(f"{schema.qualified(column)} {where[position].operator}")
        kept = replace(
            sketch, slots=replace(sketch.slots, where=where[:position] + where[position + 1 :])
        )
        sketch = without_left_tables(kept, sketch, schema, question)
        narrower = Candidate(candidate.number, sketch)
        if complete(narrower):
            yield narrower, ", ".join(left_out)
            break
        column = narrower.unvalued if narrower.unfilled else None
    relaxed = Candidate(candidate.number, without_where(candidate.sketch))
    if complete(relaxed):
        yield relaxed, candidate.sketch.keywords_text()
