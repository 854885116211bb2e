"""Where two readings of a question differ, named by Soma-SQL's taxonomy (`dimensions`).

Two candidates that both answer but return different rows are two readings of the question.
Their parts (`readings.Parts`) are compared, and each difference is one dimension:

    AmbiSchema  tables       one reading reads a table the other does not
                join path    the same tables, joined on other columns
                columns      other columns selected
                grain        grouped by other columns
    AmbiValue   value        the same column compared with another literal
                value column the same literal compared with another column
                condition    a condition only one reading has
    AmbiIntent  aggregation  another aggregate, or one where the other has none
                distinct     DISTINCT in one reading only
                order        another ordering
                top-n        another LIMIT
                nesting      a subquery or set operation in one reading only

`probes` gathers evidence for each dimension from the database, `settle` chooses.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.nl2sql.readings import Parts, Predicate

SCHEMA = "AmbiSchema"
VALUE = "AmbiValue"
INTENT = "AmbiIntent"


@dataclass(frozen=True)
class Dimension:
    """One way two readings differ: what the seed reads there, and what the other does."""

    kind: str  # SCHEMA, VALUE or INTENT
    name: str  # "tables", "value", ... (the module docstring)
    seed: str
    other: str
    seed_predicate: Predicate | None = None  # AmbiValue: the predicates that differ
    other_predicate: Predicate | None = None

    def text(self) -> str:
        return f"{self.kind} {self.name}: {self.seed or '(none)'} | {self.other or '(none)'}"


def _listed(items: frozenset[str] | tuple[str, ...]) -> str:
    return ", ".join(sorted(items)) if isinstance(items, frozenset) else ", ".join(items)


def dimensions(seed: Parts, other: Parts) -> list[Dimension]:
    """The dimensions along which `other` differs from `seed` (none: the same reading)."""
    found: list[Dimension] = []

    def differ(
        kind: str,
        name: str,
        a: frozenset[str] | tuple[str, ...],
        b: frozenset[str] | tuple[str, ...],
    ) -> None:
        if a != b:
            found.append(Dimension(kind, name, _listed(a), _listed(b)))

    if seed.tables != other.tables:
        found.append(
            Dimension(
                SCHEMA,
                "tables",
                _listed(seed.tables - other.tables),
                _listed(other.tables - seed.tables),
            )
        )
    elif seed.joins != other.joins:
        found.append(
            Dimension(
                SCHEMA,
                "join path",
                _edges(seed.joins - other.joins),
                _edges(other.joins - seed.joins),
            )
        )
    plain_seed = _plain_columns(seed)
    plain_other = _plain_columns(other)
    differ(SCHEMA, "columns", plain_seed, plain_other)
    differ(SCHEMA, "grain", seed.grouping, other.grouping)
    found.extend(_value_dimensions(seed.predicates, other.predicates))
    differ(INTENT, "aggregation", _functions(seed), _functions(other))
    if _distinct(seed) != _distinct(other):
        found.append(Dimension(INTENT, "distinct", _distinct_text(seed), _distinct_text(other)))
    differ(INTENT, "order", seed.ordering, other.ordering)
    if seed.limit != other.limit:
        found.append(Dimension(INTENT, "top-n", seed.limit or "", other.limit or ""))
    if seed.nested != other.nested:
        found.append(
            Dimension(
                INTENT,
                "nesting",
                "nested" if seed.nested else "",
                "nested" if other.nested else "",
            )
        )
    return found


def _edges(edges: frozenset[tuple[str, str]]) -> str:
    return ", ".join(f"{a} = {b}" for a, b in sorted(edges))


def _plain_columns(parts: Parts) -> frozenset[str]:
    """The columns the SELECT list reads, whatever aggregate wraps them."""
    columns: set[str] = set()
    for item in parts.projection:
        columns.update(w for w in _words(item) if "." in w)
    return frozenset(columns)


def _functions(parts: Parts) -> frozenset[str]:
    """The aggregates of the SELECT list by function alone ("count", "max"), "" for a plain
    column: what the readings compute, apart from which column."""
    kinds: set[str] = set()
    for item in parts.projection:
        head = item.split("(", 1)[0].strip()
        kinds.add(head if "(" in item and head in {"count", "sum", "avg", "min", "max"} else "")
    return frozenset(kinds)


def _distinct(parts: Parts) -> bool:
    return parts.distinct or any("(distinct " in a for a in parts.aggregates)


def _distinct_text(parts: Parts) -> str:
    if parts.distinct:
        return "SELECT DISTINCT"
    return ", ".join(sorted(a for a in parts.aggregates if "(distinct " in a))


def _words(text: str) -> list[str]:
    for mark in "(),":
        text = text.replace(mark, " ")
    return text.split()


def _value_dimensions(seed: frozenset[Predicate], other: frozenset[Predicate]) -> list[Dimension]:
    """The predicates the readings do not share, paired: the same column with another literal
    (value), the same literal on another column (value column), else a condition alone."""
    only_seed = sorted(seed - other, key=Predicate.text)
    only_other = sorted(other - seed, key=Predicate.text)
    found: list[Dimension] = []

    def same_column(a: Predicate, b: Predicate) -> bool:
        return a.column == b.column

    def same_literal(a: Predicate, b: Predicate) -> bool:
        return a.literal.lower() == b.literal.lower()

    for name, same in (("value", same_column), ("value column", same_literal)):
        for a in list(only_seed):
            b = next((p for p in only_other if same(a, p)), None)
            if b is None:
                continue
            only_seed.remove(a)
            only_other.remove(b)
            found.append(Dimension(VALUE, name, a.text(), b.text(), a, b))
    for a in only_seed:
        found.append(Dimension(VALUE, "condition", a.text(), "", a, None))
    for b in only_other:
        found.append(Dimension(VALUE, "condition", "", b.text(), None, b))
    return found
