"""Where the columns are: the repairs that read a sketch's columns from another table than the
sketch model's (the table the question names, the nearer of two columns a key makes equal, the
table its SELECT shows, the one table that holds every column it aggregates) and a key by the
name it stands for; `sketcher._repaired` applies most of them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Container, Iterable, Mapping
from dataclasses import replace

from proxy.nl2sql.joins import connected, implicit_keys
from proxy.nl2sql.schema import Schema, words_of
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Slots
from proxy.nl2sql.sketch_rules.words import (
    columns_moved,
    columns_used,
    key_columns,
    tables_named_in,
    tables_shown,
)

_ASKS_FOR_ID = re.compile(r"\bids?\b", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def readable_names(schema: Schema) -> Mapping[int, int]:
    """Key columns named like a column of the table they reference, of another kind: the id a
    row holds, and the name it stands for (`flights.airline` -> airlines.uid, beside
    `airlines.airline`; `degrees.campus` -> `campuses.campus`). Each such key, to that column."""
    keys = key_columns(schema)
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
    return columns_moved(select, slots, readable_names(schema))


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
    return columns_moved(select, slots, moved)


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
