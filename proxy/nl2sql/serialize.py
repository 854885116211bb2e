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
averaged over windows. The split is computed from each piece's token count (`Sizes`, counted once
per schema), not by tokenizing every window it tries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class Sizes:
    """The tokens each piece of a schema's serialization takes, counted once per schema: what
    `windows` packs by. `serialize` starts every piece at a space (`" | t0: "`, `" c1: "`, `" ("`,
    `" = kabul"`) or right after one (a name after `"t0: "`), and a word-piece tokenizer splits
    text at spaces before anything else, so a window's tokens are the sum of its pieces'; a
    split that tokenized every window it tried took time quadratic in the schema's width."""

    head: int
    """`"<db name>: *"`."""
    tables: tuple[int, ...]
    """A table's `" | t<i>: <name> ("` and `" )"`."""
    columns: tuple[int, ...]
    """A column's `" c<j>: <name>"`, and its ` = <value>` where it is marked (`marked`)."""
    comma: int
    """The `" ,"` before every column of a table but its first."""
    keys: tuple[int, ...]
    """A foreign key's `" | t<a>.c<x> = t<b>.c<y>"`, in `Schema.foreign_keys` order."""

    @classmethod
    def of(cls, schema: Schema, count_tokens: Callable[[str], int]) -> Sizes:
        position = {c: j for columns in schema.table_columns for j, c in enumerate(columns)}
        keys = []
        for key in schema.foreign_keys:
            a, b = schema.columns[key.column], schema.columns[key.referenced]
            x, y = position[key.column], position[key.referenced]
            keys.append(count_tokens(f" | t{a.table}.c{x} = t{b.table}.c{y}"))
        return cls(
            head=count_tokens(f"{schema.name.replace('_', ' ')}: *"),
            tables=tuple(
                count_tokens(f" | t{t}: {table.label} (") + count_tokens(" )")
                for t, table in enumerate(schema.tables)
            ),
            columns=tuple(
                count_tokens(f" c{position[c]}: {column.label}")
                for c, column in enumerate(schema.columns)
            ),
            comma=count_tokens(" ,"),
            keys=tuple(keys),
        )

    def marked(self, marks: Marks, count_tokens: Callable[[str], int]) -> Sizes:
        """These sizes with each marked column's ` = <value>` added."""
        if not marks:
            return self
        columns = list(self.columns)
        for column, text in marks:
            columns[column] += count_tokens(f" = {text}")
        return replace(self, columns=tuple(columns))


class _Packer:
    """The tokens of a window as pieces are added to it: its tables' and columns' sizes, and
    each foreign key's once both its columns are in."""

    def __init__(self, schema: Schema, sizes: Sizes) -> None:
        self.sizes = sizes
        self.keys_of: dict[int, list[tuple[int, int]]] = {}
        for index, key in enumerate(schema.foreign_keys):
            self.keys_of.setdefault(key.column, []).append((index, key.referenced))
            if key.referenced != key.column:
                self.keys_of.setdefault(key.referenced, []).append((index, key.column))
        self.clear()

    def clear(self, table: int | None = None) -> None:
        """An empty window; with `table`, holding that table's own pieces (a part of it)."""
        self.tokens = self.sizes.head + (self.sizes.tables[table] if table is not None else 0)
        self.visible: set[int] = set()

    def cost(self, table: int | None, columns: Sequence[int], *, first: bool) -> int:
        """The tokens `columns` add (with `table`'s own pieces when it is given; the first of
        them without a comma when `first`), and the keys they make whole."""
        sizes = self.sizes
        added = sizes.tables[table] if table is not None else 0
        seen: set[int] = set()
        keys: set[int] = set()
        for n, column in enumerate(columns):
            added += sizes.columns[column] + (0 if first and n == 0 else sizes.comma)
            seen.add(column)
            for key, other in self.keys_of.get(column, ()):
                if other in self.visible or other in seen:
                    keys.add(key)
        return added + sum(sizes.keys[k] for k in keys)

    def add(self, columns: Sequence[int], tokens: int) -> None:
        self.visible.update(columns)
        self.tokens += tokens


def windows(
    schema: Schema,
    budget: int,
    count_tokens: Callable[[str], int],
    marks: Marks = (),
    sizes: Sizes | None = None,
) -> list[Window]:
    """The schema in as few windows as fit: each window's text is at most `budget` tokens by
    `count_tokens` (when one column alone is over budget it still gets a window). One window,
    the whole schema in table order, whenever it fits. `marks`: as in `serialize`. `sizes`:
    `Sizes.of(schema, count_tokens)`, where the caller keeps them; `count_tokens` must add up
    over text cut at spaces, as a word-piece tokenizer's count does (`Sizes`)."""
    sizes = (sizes if sizes is not None else Sizes.of(schema, count_tokens)).marked(
        marks, count_tokens
    )
    packer = _Packer(schema, sizes)
    for table, columns in enumerate(schema.table_columns):
        packer.add(columns, packer.cost(table, columns, first=True))
    if packer.tokens <= budget:
        return [serialize(schema, marks=marks)]
    pieces: list[tuple[int, list[int]]] = []
    for table in neighbourhood_order(schema):
        # A table wider than a window is cut into parts that each fit alone.
        part: list[int] = []
        packer.clear(table)
        for column in schema.table_columns[table]:
            added = packer.cost(None, [column], first=not part)
            if part and packer.tokens + added > budget:
                pieces.append((table, part))
                part = []
                packer.clear(table)
                added = packer.cost(None, [column], first=True)
            part.append(column)
            packer.add([column], added)
        pieces.append((table, part))
    result: list[Window] = []
    current: list[tuple[int, Sequence[int]]] = []
    packer.clear()
    for table, part in pieces:
        added = packer.cost(table, part, first=True)
        if current and packer.tokens + added > budget:
            result.append(serialize(schema, current, marks))
            current = []
            packer.clear()
            added = packer.cost(table, part, first=True)
        current.append((table, part))
        packer.add(part, added)
    if current:
        result.append(serialize(schema, current, marks))
    return result
