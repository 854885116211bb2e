"""ZeroNL2SQL's database-aware serialization: a schema as text that names every item by index.

    concert singer: * | t0: stadium ( c0: stadium id , c1: location , c2: name ) |
    t1: singer ( c0: singer id , c1: name , c2: country ) | t2: concert ( ... ) | t2.c3 = t0.c0

Tables are `t<i>` (their index in `Schema.tables`), columns `c<j>` (their position in their table),
foreign keys `t<a>.c<x> = t<b>.c<y>`, and `*` (as in `count(*)`) comes first. Names are the words
the models read (`Table.label`, `Column.label`). Every item's name is recorded as a character span
of the text, so a model reads an item at its own tokens, and whatever it picks is mapped back to a
real schema item by index: it cannot name a table or column that does not exist.

A model that reads the database's values (`Marks`) also sees, after a column's name, the values of
that column the question names: `c2: name = kabul`. The value is not part of the column's span: the
column is still read at its name's tokens, which attend to the value beside them.

Long schemas are never cut. When the schema does not fit beside the question in the model's
window, it is split into several windows (`windows`): tables are taken in foreign-key
neighbourhood order (a table, then the tables it joins, breadth first) and packed greedily, so
joined tables tend to share a window; a table too wide for a window on its own is split by
columns, each part repeating the table's name. Each window carries the foreign keys between its
own tables. The model scores every window; each table and column is read in the window that holds
it (a table split by columns: the mean of its parts), and question-level outputs (keywords) are
averaged over windows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import STAR

Span = tuple[int, int]
Marks = tuple[tuple[int, str], ...]
"""(column, text) pairs, sorted by column: what a value-reading model is shown after a column's
name (`encoding.value_marks`)."""


@dataclass(frozen=True)
class Window:
    """One piece of serialized schema. `columns[k]` (a global column index, or STAR) is named at
    `column_spans[k]` of `text`; `tables[k]` at `table_spans[k]`. A table split across windows
    appears in each of them, with the columns that window holds."""

    text: str
    tables: tuple[int, ...]
    table_spans: tuple[Span, ...]
    columns: tuple[int, ...]
    column_spans: tuple[Span, ...]


class _Writer:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0

    def add(self, text: str) -> Span:
        start = self.length
        self.parts.append(text)
        self.length += len(text)
        return (start, self.length)

    def text(self) -> str:
        return "".join(self.parts)


def serialize(
    schema: Schema,
    parts: Sequence[tuple[int, Sequence[int]]] | None = None,
    marks: Marks = (),
) -> Window:
    """The serialization of `parts` — (table, its columns to show) pairs, in order — or of the
    whole schema. Foreign keys are those between tables in `parts` (both columns shown). A
    column in `marks` is followed by ` = <its text>`."""
    marked = dict(marks)
    if parts is None:
        parts = [(t, schema.table_columns[t]) for t in range(len(schema.tables))]
    out = _Writer()
    out.add(f"{schema.name.replace('_', ' ')}: ")
    column_spans: list[Span] = [out.add("*")]
    columns: list[int] = [STAR]
    tables: list[int] = []
    table_spans: list[Span] = []
    for table, shown in parts:
        out.add(f" | t{table}: ")
        tables.append(table)
        table_spans.append(out.add(schema.tables[table].label))
        out.add(" (")
        for position, column in enumerate(shown):
            index = schema.table_columns[table].index(column)
            out.add(f"{' ,' if position else ''} c{index}: ")
            columns.append(column)
            column_spans.append(out.add(schema.columns[column].label))
            if column in marked:
                out.add(f" = {marked[column]}")
        out.add(" )")
    visible = set(columns)
    for key in schema.foreign_keys:
        if key.column in visible and key.referenced in visible:
            a, b = schema.columns[key.column], schema.columns[key.referenced]
            out.add(
                f" | t{a.table}.c{schema.table_columns[a.table].index(key.column)}"
                f" = t{b.table}.c{schema.table_columns[b.table].index(key.referenced)}"
            )
    return Window(
        text=out.text(),
        tables=tuple(tables),
        table_spans=tuple(table_spans),
        columns=tuple(columns),
        column_spans=tuple(column_spans),
    )


def neighbourhood_order(schema: Schema) -> list[int]:
    """Tables breadth first along foreign keys (either direction), starting from table 0 and
    then from each table not yet reached, so that joined tables sit next to each other."""
    neighbours: dict[int, set[int]] = {t: set() for t in range(len(schema.tables))}
    for a, b in schema.table_edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    order: list[int] = []
    seen: set[int] = set()
    for start in range(len(schema.tables)):
        if start in seen:
            continue
        seen.add(start)
        queue = deque([start])
        while queue:
            table = queue.popleft()
            order.append(table)
            for other in sorted(neighbours[table] - seen):
                seen.add(other)
                queue.append(other)
    return order


def windows(
    schema: Schema, budget: int, count_tokens: Callable[[str], int], marks: Marks = ()
) -> list[Window]:
    """The schema in as few windows as fit: each window's text is at most `budget` tokens by
    `count_tokens` (when one column alone is over budget it still gets a window). One window,
    the whole schema in table order, whenever it fits. `marks`: as in `serialize`."""
    whole = serialize(schema, marks=marks)
    if count_tokens(whole.text) <= budget:
        return [whole]
    pieces: list[tuple[int, list[int]]] = []
    for table in neighbourhood_order(schema):
        columns = list(schema.table_columns[table])
        # A table wider than a window is cut into parts that each fit alone.
        part: list[int] = []
        for column in columns:
            if (
                part
                and count_tokens(serialize(schema, [(table, [*part, column])], marks).text) > budget
            ):
                pieces.append((table, part))
                part = []
            part.append(column)
        pieces.append((table, part))
    result: list[Window] = []
    current: list[tuple[int, Sequence[int]]] = []
    for piece in pieces:
        if current and count_tokens(serialize(schema, [*current, piece], marks).text) > budget:
            result.append(serialize(schema, current, marks))
            current = []
        current.append(piece)
    if current:
        result.append(serialize(schema, current, marks))
    return result
