"""Evidence for a dimension along which two readings differ (`ambiguity.Dimension`): small
read-only queries, the catalog, and the readings' own results (`probe`).

Each probe says which reading the evidence supports (`Evidence.favours`: "seed", "other", or
"" when it settles nothing) and why, in words the trace shows:

    value, value column, condition   the literal looked up in its own column: a reading whose
                                     value no row holds, where the other's is held, is refuted
    join path, tables                a join the foreign keys contradict (a foreign key's column
                                     joined to another column than the one it references, or
                                     two tables' own keys joined), where the other reading joins
                                     too and the keys contradict none of its joins, is refuted;
                                     an extra table whose rows repeat the join key (one-to-many)
                                     and that the reading only joins, under a SUM or AVG, counts
                                     rows twice, and is refuted
    distinct                         the column's count with and without DISTINCT, for the
                                     record
    any                              a result of only NULLs and empty strings against one with
                                     values: the degenerate one is refuted

Every query runs through the caller's `run` (the question's `Database`, its role, its read-only
transaction, its time budget); a probe that fails (`QueryFailed`) settles nothing, and anything
else `run` raises (a lost connection, the budget spent) ends the probing. Identifiers come from the
schema and are quoted; literals are parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.nl2sql.ambiguity import INTENT, VALUE, Dimension
from proxy.nl2sql.database import QueryFailed
from proxy.nl2sql.readings import Parts, Predicate
from proxy.nl2sql.schema import Schema
from proxy.valueindex.common import quote_ident

SEED = "seed"
OTHER = "other"
OPEN = ""

Run = Callable[[str, Sequence[object]], list[tuple[Any, ...]]]
"""Runs one probe query with its parameters; raises on an error of the query."""

_EXISTENCE = {"=": "=", "like": "LIKE", "ilike": "ILIKE", "in": "IN"}


@dataclass(frozen=True)
class Evidence:
    dimension: Dimension
    probe: str  # the SQL run, "catalog" or "results"
    finding: str
    favours: str = OPEN  # SEED, OTHER or OPEN


class Prober:
    """The probes of one question (its schema, its way to run queries)."""

    def __init__(self, schema: Schema, run: Run) -> None:
        self.schema = schema
        self.run = run
        self.ran: list[str] = []  # every probe query, in order

    def probe(
        self,
        dimension: Dimension,
        seed: Parts,
        other: Parts,
        seed_rows: Sequence[tuple[Any, ...]],
        other_rows: Sequence[tuple[Any, ...]],
    ) -> list[Evidence]:
        """The evidence for one dimension (none where no probe applies to it)."""
        if dimension.kind == VALUE:
            return self._values(dimension)
        if dimension.name in ("tables", "join path"):
            return self._joins(dimension, seed, other)
        if dimension.name == "distinct":
            return self._distinct(dimension, seed, other)
        return []

    def _distinct(self, dimension: Dimension, seed: Parts, other: Parts) -> list[Evidence]:
        """How many values the column counted with DISTINCT holds, and how many distinct: for
        the record (which count the question means, the data cannot say)."""
        for aggregate in sorted(seed.aggregates | other.aggregates):
            head, _, rest = aggregate.partition("(distinct ")
            if head != "count" or not rest.endswith(")"):
                continue
            located = self._column(rest[:-1].strip())
            if located is None:
                continue
            table, column = located
            sql = f"SELECT count({column}), count(DISTINCT {column}) FROM {table}"  # noqa: S608
            rows = self._fetch(sql, ())
            if rows:
                values, distinct = rows[0]
                finding = f"{rest[:-1].strip()}: {values} values, {distinct} distinct"
                return [Evidence(dimension, sql, finding)]
        return []

    def degenerate(
        self, seed_rows: Sequence[tuple[Any, ...]], other_rows: Sequence[tuple[Any, ...]]
    ) -> Evidence | None:
        """A result of only NULLs and empty strings against one with values (a count of 0 is
        an answer, not a degenerate one)."""
        a, b = _degenerate(seed_rows), _degenerate(other_rows)
        if a == b:
            return None
        which = "seed's" if a else "other reading's"
        return Evidence(
            Dimension(INTENT, "result", "", ""),
            "results",
            f"the {which} result holds only NULLs or empty strings",
            OTHER if a else SEED,
        )

    # ------------------------------------------------------------------ values

    def _values(self, dimension: Dimension) -> list[Evidence]:
        first = len(self.ran)
        seed = self._rows_holding(dimension.seed_predicate)
        other = self._rows_holding(dimension.other_predicate)
        if seed is None and other is None:
            return []
        finding = "; ".join(
            f"{p.text()}: {n} rows"
            for p, n in ((dimension.seed_predicate, seed), (dimension.other_predicate, other))
            if p is not None and n is not None
        )
        favours = OPEN
        if seed == 0 and other:
            favours = OTHER
        elif other == 0 and seed:
            favours = SEED
        elif dimension.name == "condition":
            # a condition only one reading has, whose value no row holds
            if dimension.seed_predicate is not None and seed == 0:
                favours = OTHER
            elif dimension.other_predicate is not None and other == 0:
                favours = SEED
        return [Evidence(dimension, "; ".join(self.ran[first:]), finding, favours)]

    def _rows_holding(self, predicate: Predicate | None) -> int | None:
        """How many rows of its table hold the predicate's value in its column (None where
        the predicate tests no value, or the probe could not run)."""
        if predicate is None or predicate.operator not in _EXISTENCE:
            return None
        located = self._column(predicate.column)
        if located is None:
            return None
        table, column = located
        operator = _EXISTENCE[predicate.operator]
        if operator == "IN":
            marks = ", ".join(f"${i}" for i in range(1, len(predicate.values) + 1))
            condition = f"{column}::text IN ({marks})"
        else:
            condition = f"{column}::text {operator} $1"
        sql = f"SELECT count(*) FROM {table} WHERE {condition}"  # noqa: S608 (quoted names)
        params = predicate.values if operator == "IN" else predicate.values[:1]
        rows = self._fetch(sql, params)
        return int(rows[0][0]) if rows else None

    # ------------------------------------------------------------------ joins

    def _joins(self, dimension: Dimension, seed: Parts, other: Parts) -> list[Evidence]:
        found: list[Evidence] = []
        seed_loose = [e for e in seed.joins if self.loose(e)]
        other_loose = [e for e in other.joins if self.loose(e)]
        # evidence only where both join: a reading that joins nothing is another reading, not
        # a better-keyed one
        if seed.joins and other.joins and bool(seed_loose) != bool(other_loose):
            loose = seed_loose or other_loose
            whose = "seed" if seed_loose else "other reading"
            found.append(
                Evidence(
                    dimension,
                    "catalog",
                    f"the {whose} joins on "
                    + ", ".join(f"{a} = {b}" for a, b in sorted(loose))
                    + ", which the foreign keys contradict",
                    OTHER if seed_loose else SEED,
                )
            )
        for parts, favours in ((seed, OTHER), (other, SEED)):
            first = len(self.ran)
            doubled = self._doubled_sum(parts, seed if parts is other else other)
            if doubled:
                found.append(Evidence(dimension, "; ".join(self.ran[first:]), doubled, favours))
        return found

    def loose(self, edge: tuple[str, str]) -> bool:
        """Whether a join edge the catalog does not declare (`declared`) contradicts it: a
        foreign key's column joined to a column other than the one it references, or two
        tables' own primary keys joined to each other (`id = id`). A key joined to a plain
        column may be a foreign key nobody declared, and two plain columns of one kind
        ("the states where both owners and professionals live": state = state) a join on
        values chosen on purpose: neither is evidence."""
        if self.declared(edge):
            return False
        a, b = (self._index(column) for column in edge)
        if a is None or b is None:
            return False
        columns = self.schema.columns
        if columns[a].primary_key and columns[b].primary_key:
            return True
        return any(key.column in (a, b) for key in self.schema.foreign_keys)

    def declared(self, edge: tuple[str, str]) -> bool:
        """Whether a foreign key links the two columns (either way), or they share a name and
        exactly one of them is its table's primary key."""
        a, b = (self._index(column) for column in edge)
        if a is None or b is None:
            return False
        for key in self.schema.foreign_keys:
            if {key.column, key.referenced} == {a, b}:
                return True
        first, second = self.schema.columns[a], self.schema.columns[b]
        # `department_id` = `department_id` where one is the key; `id` = `id`, two tables' own
        # keys, links nothing
        return first.name.lower() == second.name.lower() and first.primary_key != second.primary_key

    def _doubled_sum(self, parts: Parts, other: Parts) -> str:
        """Where `parts` reads a table the other reading does not, uses none of its columns
        but to join it, sums or averages another table's column, and the extra table repeats
        its join key: what the probe found (else "")."""
        sums = [
            a for a in parts.aggregates if a.startswith(("sum(", "avg(")) and "(distinct" not in a
        ]
        if not sums:
            return ""
        used = parts.columns()
        for extra in sorted(parts.tables - other.tables):
            if any(c.split(".")[0] == extra for c in used):
                continue
            for edge in parts.joins:
                key = next((c for c in edge if c.split(".")[0] == extra), None)
                if key is None:
                    continue
                located = self._column(key)
                if located is None:
                    continue
                table, column = located
                sql = f"SELECT count({column}) - count(DISTINCT {column}) FROM {table}"  # noqa: S608
                rows = self._fetch(sql, ())
                if rows and rows[0][0] and int(rows[0][0]) > 0:
                    return (
                        f"{key} repeats ({int(rows[0][0])} rows more than keys): joining "
                        f"{extra} only to reach it multiplies {', '.join(sorted(sums))}"
                    )
        return ""

    # ------------------------------------------------------------------ helpers

    def _index(self, column: str) -> int | None:
        table, _, name = column.partition(".")
        try:
            return self.schema.column_index(self.schema.table_index(table), name)
        except KeyError:
            return None

    def _column(self, column: str) -> tuple[str, str] | None:
        """The quoted table (schema-qualified) and column of a `table.column` part."""
        index = self._index(column)
        if index is None:
            return None
        item = self.schema.columns[index]
        table = self.schema.tables[item.table]
        return f"{quote_ident(table.schema)}.{quote_ident(table.name)}", quote_ident(item.name)

    @property
    def queries(self) -> int:
        return len(self.ran)

    def _fetch(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        self.ran.append(sql)
        try:
            return self.run(sql, params)
        except QueryFailed:  # a probe that fails settles nothing
            return []


def _degenerate(rows: Sequence[tuple[Any, ...]]) -> bool:
    return all(v is None or (isinstance(v, str) and not v.strip()) for row in rows for v in row)
