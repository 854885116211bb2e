"""Sketch labels: a Spider gold query (SQLite dialect) turned into the `Sketch` it should decode to.

A label is what the sketch models are trained to predict for a question: the outer query's SELECT
items (aggregate and column, `STAR` for `*`), its FROM tables, its clause KEYWORDS, and the `Slots`
a completion needs (WHERE columns with their operators in query order and whether an OR joins
them, GROUP BY columns, the aggregate side of each HAVING condition, the ORDER BY items, the LIMIT).
Columns and tables are global indexes into a `Schema` (`proxy/nl2sql/schema.py`); the vocabularies
are those of `proxy/nl2sql/sketch.py`.

The outer query decides the label:

- For `INTERSECT`/`UNION`/`EXCEPT` the left-most SELECT gives the items, tables and slots, and the
  set operation right after it is added as a keyword; the right side adds nothing.
- Table aliases (`T1`, `AS t2`) are resolved to tables, and columns to global column indexes:
  qualified ones through their table or alias, unqualified ones against the FROM tables of their
  own SELECT, the first table in FROM order that has the column (as Spider's own parser does).
  Names match case-insensitively, quoted (`"..."`, `` `...` ``) or not. A table joined twice
  counts once. An unqualified ORDER BY or HAVING name that is a SELECT alias means that item.
- A double-quoted name on the right of a WHERE condition is a string value (Spider's gold queries
  quote strings with double quotes), never a column.
- Keywords: "where", "group by", "having", "order by" with exactly one of "asc"/"desc" (asc by
  default), "limit", "distinct" (`SELECT DISTINCT`, or an aggregate over DISTINCT in SELECT),
  the set operation, and "nested" when a subquery appears in the outer WHERE or HAVING.
- WHERE operators: `<>` and `!=` are "!="; `NOT IN`, `NOT LIKE`, `BETWEEN` are "not in",
  "not like", "between"; `IN (1, 2)` is "in" with `nested` False, `IN (SELECT ...)` with True.
- What the slots have no place for is left out: the right side of a condition (values, the
  subquery), JOIN conditions, a DISTINCT inside an aggregate of HAVING or ORDER BY, and an OR
  between HAVING conditions.

What cannot be labelled raises `Unlabelable`; its `reason` is one short category per kind of
query the sketch cannot represent (the message adds the offending SQL):

- "subquery in FROM" (a CTE included), "unsupported FROM" (anything else not a table), "no
  FROM", "unknown table", "unknown column" (also for an unknown qualifier);
- "arithmetic in <clause>", "subquery in <clause>", "value in <clause>" and "function or
  expression in <clause>" where a column, or an aggregate over one, is expected, for <clause> one
  of SELECT, WHERE (left side), GROUP BY, HAVING (aggregate side), ORDER BY; "aggregate in WHERE"
  and "aggregate of an aggregate in <clause>";
- "column compared with column in WHERE" (an implicit join, or `a < b`);
- "IS NULL in <clause>", "EXISTS in <clause>", "negated condition in <clause>" (`NOT BETWEEN`,
  `NOT (a = 1)`) and "unsupported operator in <clause>" for WHERE and HAVING conditions outside
  OPERATORS;
- "mixed ORDER BY directions", "ORDER BY or LIMIT after a set operation", "OFFSET", "expression
  in LIMIT", "UNION ALL", "unsupported set operation", "unparsable" and "not a SELECT".

`python -m model_export.sketch_labels [SPIDER_DIR]` labels Spider train and dev and prints how
many were labelled, why the rest were not, and, on dev, how often the labels agree with the
SELECT, FROM, keywords and slots read from Spider's own parsed `sql` (`spider_parts`), listing
every disagreement.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from model_export.spider import spider_dir
from proxy.nl2sql.schema import Schema, load_spider_schemas
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots


class Unlabelable(ValueError):
    """A gold query the sketch cannot represent; `.reason` is a short category, e.g.
    "subquery in FROM" (the message adds the offending detail)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


_AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Max: "max",
    exp.Min: "min",
    exp.Sum: "sum",
    exp.Avg: "avg",
}

_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv, exp.Neg, exp.DPipe)

_COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "!=",
    exp.GT: ">",
    exp.LT: "<",
    exp.GTE: ">=",
    exp.LTE: "<=",
}

_SET_OPERATIONS: dict[type[exp.Expr], str] = {
    exp.Intersect: "intersect",
    exp.Union: "union",
    exp.Except: "except",
}


@dataclass(frozen=True)
class _Scope:
    """The FROM of one SELECT: its tables in order and the names (aliases, table names, lower
    case) that refer to them, plus the SELECT's own aliases (for ORDER BY and HAVING)."""

    tables: tuple[int, ...]
    names: Mapping[str, int]
    select_aliases: Mapping[str, SelectItem]


def label(query: str, schema: Schema) -> Sketch:
    """The sketch label of a gold `query` (SQLite dialect) over `schema`, with score 0.0.

    Raises `Unlabelable` (with a `reason`) for a query the sketch cannot represent."""
    try:
        tree = sqlglot.parse_one(query, read="sqlite")
    except SqlglotError as error:
        raise Unlabelable("unparsable", str(error).splitlines()[0]) from error
    if tree.find(exp.CTE) is not None:
        raise Unlabelable("subquery in FROM", "WITH")
    select, set_operation = _leftmost(tree)
    keywords: set[str] = set()
    if set_operation is not None:
        keywords.add(set_operation)

    scope = _scope(select, schema)
    items: set[SelectItem] = set()
    for expression in select.expressions:
        item, distinct = _item(expression, scope, schema, "SELECT")
        items.add(item)
        if distinct:
            keywords.add("distinct")
    if select.args.get("distinct"):
        keywords.add("distinct")
    aliases = {
        expression.alias.lower(): _item(expression.this, scope, schema, "SELECT")[0]
        for expression in select.expressions
        if isinstance(expression, exp.Alias)
    }
    scope = _Scope(scope.tables, scope.names, aliases)

    where: tuple[Predicate, ...] = ()
    where_or = False
    where_clause = select.args.get("where")
    if where_clause is not None:
        keywords.add("where")
        conditions, where_or = _conditions(where_clause.this)
        predicates = [_predicate(condition, scope, schema) for condition in conditions]
        where = tuple(predicate for predicate, _ in predicates)
        if any(nested for _, nested in predicates):
            keywords.add("nested")

    group_by: frozenset[int] = frozenset()
    group = select.args.get("group")
    if group is not None:
        keywords.add("group by")
        group_by = frozenset(_group_column(e, scope, schema) for e in group.expressions)

    having: tuple[SelectItem, ...] = ()
    having_clause = select.args.get("having")
    if having_clause is not None:
        keywords.add("having")
        conditions, _ = _conditions(having_clause.this)
        having_items = [_having(condition, scope, schema) for condition in conditions]
        having = tuple(item for item, _ in having_items)
        if any(nested for _, nested in having_items):
            keywords.add("nested")

    order_by: tuple[SelectItem, ...] = ()
    order = select.args.get("order")
    if order is not None:
        keywords.add("order by")
        directions = {
            "desc" if ordered.args.get("desc") else "asc" for ordered in order.expressions
        }
        if len(directions) > 1:
            raise Unlabelable("mixed ORDER BY directions", order.sql(dialect="sqlite"))
        keywords.update(directions)
        order_by = tuple(
            _item(ordered.this, scope, schema, "ORDER BY")[0] for ordered in order.expressions
        )

    limit = _limit(select)
    if limit is not None:
        keywords.add("limit")

    slots = Slots(
        where=where,
        where_or=where_or,
        group_by=group_by,
        having=having,
        order_by=order_by,
        limit=limit,
    )
    return Sketch(
        select=frozenset(items),
        tables=frozenset(scope.tables),
        keywords=frozenset(keywords),
        slots=slots,
    )


def label_examples(
    examples: Sequence[Mapping[str, Any]], schemas: Mapping[str, Schema]
) -> tuple[list[Sketch | None], Counter[str]]:
    """The label of each example (`db_id`, `query`), None where it cannot be labelled, and how
    many could not be labelled, by reason ("unknown database" when `db_id` has no schema)."""
    labels: list[Sketch | None] = []
    reasons: Counter[str] = Counter()
    for example in examples:
        schema = schemas.get(example["db_id"])
        if schema is None:
            labels.append(None)
            reasons["unknown database"] += 1
            continue
        try:
            labels.append(label(example["query"], schema))
        except Unlabelable as error:
            labels.append(None)
            reasons[error.reason] += 1
    return labels, reasons


# --- the outer query ---------------------------------------------------------------------------


def _leftmost(tree: exp.Expr) -> tuple[exp.Select, str | None]:
    """The left-most SELECT of a query and the set operation right after it (None if none)."""
    node = _unwrap(tree)
    operation: str | None = None
    while isinstance(node, exp.SetOperation):
        if node.args.get("order") is not None or node.args.get("limit") is not None:
            raise Unlabelable("ORDER BY or LIMIT after a set operation")
        name = _SET_OPERATIONS.get(type(node))
        if name is None:
            raise Unlabelable("unsupported set operation", type(node).__name__)
        if name == "union" and node.args.get("distinct") is False:
            raise Unlabelable("UNION ALL")
        operation = name
        node = _unwrap(node.this)
    if not isinstance(node, exp.Select):
        raise Unlabelable("not a SELECT", type(node).__name__)
    return node, operation


def _unwrap(node: exp.Expr) -> exp.Expr:
    """`node` without enclosing parentheses (and, for a parenthesised query, the subquery)."""
    while isinstance(node, exp.Paren | exp.Subquery) and not (
        isinstance(node, exp.Subquery) and node.alias
    ):
        node = node.this
    return node


def _scope(select: exp.Select, schema: Schema) -> _Scope:
    """The FROM and JOIN tables of `select`, in order, with the names that refer to them."""
    source = select.args.get("from_")
    if source is None:
        raise Unlabelable("no FROM")
    tables: list[int] = []
    names: dict[str, int] = {}
    table_names: dict[str, int] = {}
    for node in [source.this, *(join.this for join in select.args.get("joins") or [])]:
        if isinstance(node, exp.Subquery | exp.Select | exp.SetOperation | exp.Paren):
            raise Unlabelable("subquery in FROM")
        if not isinstance(node, exp.Table) or not node.name:
            raise Unlabelable("unsupported FROM", node.sql(dialect="sqlite"))
        try:
            index = schema.table_index(node.name)
        except KeyError:
            raise Unlabelable("unknown table", node.name) from None
        tables.append(index)
        if node.alias:
            names[node.alias.lower()] = index
        table_names.setdefault(node.name.lower(), index)
    for name, index in table_names.items():
        names.setdefault(name, index)
    return _Scope(tuple(dict.fromkeys(tables)), names, {})


def _column(column: exp.Column, scope: _Scope, schema: Schema) -> int:
    """The global index of a column reference (STAR for `*` or `T1.*`)."""
    qualifier = column.table
    if qualifier:
        table = scope.names.get(qualifier.lower())
        if table is None:
            raise Unlabelable("unknown column", column.sql(dialect="sqlite"))
        if isinstance(column.this, exp.Star):
            return STAR
        try:
            return schema.column_index(table, column.name)
        except KeyError:
            raise Unlabelable("unknown column", column.sql(dialect="sqlite")) from None
    if isinstance(column.this, exp.Star):
        return STAR
    for table in scope.tables:
        try:
            return schema.column_index(table, column.name)
        except KeyError:
            continue
    raise Unlabelable("unknown column", column.sql(dialect="sqlite"))


def _not_a_column(expression: exp.Expr, clause: str) -> Unlabelable:
    """The reason an expression is not a column or an aggregate over one, in `clause`."""
    detail = expression.sql(dialect="sqlite")
    if isinstance(expression, _ARITHMETIC):
        return Unlabelable(f"arithmetic in {clause}", detail)
    if isinstance(expression, exp.Subquery | exp.Select):
        return Unlabelable(f"subquery in {clause}", detail)
    if isinstance(expression, exp.Literal | exp.Null | exp.Boolean):
        return Unlabelable(f"value in {clause}", detail)
    return Unlabelable(f"function or expression in {clause}", detail)


def _item(
    expression: exp.Expr, scope: _Scope, schema: Schema, clause: str
) -> tuple[SelectItem, bool]:
    """A SELECT, HAVING or ORDER BY item as an aggregate over a column, and whether the
    aggregate is over DISTINCT."""
    node = _unwrap(expression)
    if isinstance(node, exp.Alias):
        node = _unwrap(node.this)
    if isinstance(node, exp.Star):
        return SelectItem("", STAR), False
    if isinstance(node, exp.Column):
        if not node.table and not isinstance(node.this, exp.Star):
            aliased = scope.select_aliases.get(node.name.lower())
            if aliased is not None:
                return aliased, False
        return SelectItem("", _column(node, scope, schema)), False
    aggregate = _AGGREGATES.get(type(node))
    if aggregate is None:
        raise _not_a_column(node, clause)
    if node.expressions:
        raise _not_a_column(node, clause)
    argument = _unwrap(node.this)
    distinct = isinstance(argument, exp.Distinct)
    if isinstance(argument, exp.Distinct):
        if len(argument.expressions) != 1:
            raise _not_a_column(node, clause)
        argument = _unwrap(argument.expressions[0])
    if isinstance(argument, exp.Star):
        return SelectItem(aggregate, STAR), distinct
    if isinstance(argument, exp.Column):
        return SelectItem(aggregate, _column(argument, scope, schema)), distinct
    if type(argument) in _AGGREGATES:
        raise Unlabelable(f"aggregate of an aggregate in {clause}", node.sql(dialect="sqlite"))
    raise _not_a_column(argument, clause)


def _group_column(expression: exp.Expr, scope: _Scope, schema: Schema) -> int:
    node = _unwrap(expression)
    if not isinstance(node, exp.Column):
        raise _not_a_column(node, "GROUP BY")
    return _column(node, scope, schema)


def _limit(select: exp.Select) -> int | None:
    if select.args.get("offset") is not None:
        raise Unlabelable("OFFSET")
    limit = select.args.get("limit")
    if limit is None:
        return None
    value = limit.expression
    if not isinstance(value, exp.Literal) or value.is_string or not value.is_int:
        raise Unlabelable("expression in LIMIT", limit.sql(dialect="sqlite"))
    return int(value.this)


# --- conditions --------------------------------------------------------------------------------


def _conditions(node: exp.Expr) -> tuple[list[exp.Expr], bool]:
    """The conditions an AND/OR tree joins, in query order, and whether any OR joins them."""
    conditions: list[exp.Expr] = []
    found_or = False

    def walk(current: exp.Expr) -> None:
        nonlocal found_or
        current = _unwrap(current)
        if isinstance(current, exp.And | exp.Or):
            found_or = found_or or isinstance(current, exp.Or)
            walk(current.this)
            walk(current.expression)
        else:
            conditions.append(current)

    walk(node)
    return conditions, found_or


def _operator(condition: exp.Expr, clause: str) -> tuple[str, exp.Expr, list[Any]]:
    """A condition's operator (one of OPERATORS), its left side, and its right-hand operands."""
    negated = False
    node = condition
    if isinstance(node, exp.Not):
        negated = True
        node = _unwrap(node.this)
    if isinstance(node, exp.Like) and node.args.get("negate"):
        negated = not negated
    if isinstance(node, exp.In) and node.args.get("negate"):
        negated = not negated
    detail = condition.sql(dialect="sqlite")
    if isinstance(node, exp.Is):
        raise Unlabelable(f"IS NULL in {clause}", detail)
    if isinstance(node, exp.Exists):
        raise Unlabelable(f"EXISTS in {clause}", detail)
    if isinstance(node, exp.In):
        query = node.args.get("query")
        operands: list[Any] = [query] if query is not None else list(node.expressions)
        return ("not in" if negated else "in"), node.this, operands
    if isinstance(node, exp.Like):
        return ("not like" if negated else "like"), node.this, [node.expression]
    if negated:
        raise Unlabelable(f"negated condition in {clause}", detail)
    if isinstance(node, exp.Between):
        return "between", node.this, [node.args.get("low"), node.args.get("high")]
    comparison = _COMPARISONS.get(type(node))
    if comparison is not None:
        return comparison, node.this, [node.expression]
    raise Unlabelable(f"unsupported operator in {clause}", detail)


def _nested(operands: list[Any]) -> bool:
    """Whether any right-hand operand is a subquery."""
    return any(
        isinstance(_unwrap(operand), exp.Select | exp.SetOperation)
        or isinstance(operand, exp.Subquery)
        for operand in operands
        if isinstance(operand, exp.Expr)
    )


def _is_value_column(column: exp.Column) -> bool:
    """A double-quoted unqualified name: a string value in Spider's gold SQL."""
    identifier = column.this
    return not column.table and isinstance(identifier, exp.Identifier) and bool(identifier.quoted)


def _predicate(condition: exp.Expr, scope: _Scope, schema: Schema) -> tuple[Predicate, bool]:
    """A WHERE condition as a Predicate, and whether its right side is a subquery."""
    operator, left, operands = _operator(condition, "WHERE")
    left = _unwrap(left)
    if not isinstance(left, exp.Column):
        if type(left) in _AGGREGATES:
            raise Unlabelable("aggregate in WHERE", condition.sql(dialect="sqlite"))
        raise _not_a_column(left, "WHERE")
    column = _column(left, scope, schema)
    nested = _nested(operands)
    if not nested:
        for operand in operands:
            if isinstance(operand, exp.Expr) and any(
                not _is_value_column(other) for other in operand.find_all(exp.Column)
            ):
                raise Unlabelable(
                    "column compared with column in WHERE", condition.sql(dialect="sqlite")
                )
    return Predicate(column, operator, nested), nested


def _having(condition: exp.Expr, scope: _Scope, schema: Schema) -> tuple[SelectItem, bool]:
    """A HAVING condition's aggregate side, and whether its right side is a subquery."""
    _, left, operands = _operator(condition, "HAVING")
    return _item(left, scope, schema, "HAVING")[0], _nested(operands)


# --- Spider's parsed sql, for checking ----------------------------------------------------------

_SPIDER_AGGREGATES = ("", "max", "min", "count", "sum", "avg")
_SPIDER_OPERATORS = ("", "between", "=", ">", "<", ">=", "<=", "!=", "in", "like", "is", "exists")
_SPIDER_NEGATED = {"in": "not in", "like": "not like"}


@dataclass(frozen=True)
class SpiderParts:
    """The SELECT items, FROM tables, keywords and slots read from Spider's own parsed `sql`;
    `select`, `tables` or `slots` is None where the sketch has no way to say it."""

    select: frozenset[SelectItem] | None
    tables: frozenset[int] | None
    keywords: frozenset[str]
    slots: Slots | None


def spider_parts(sql: Mapping[str, Any]) -> SpiderParts:
    """SELECT, FROM, keywords and slots of Spider's parsed `sql` (the `sql` field of dev.json),
    in the terms of a Sketch (global column index = Spider's minus one, `*` = STAR). `select`
    is None where an item is arithmetic, `tables` None where FROM has a subquery, `slots` None
    where a condition or an ORDER BY item is outside the sketch's vocabulary."""
    distinct, units = sql["select"]
    keywords: set[str] = set()
    if distinct:
        keywords.add("distinct")
    items: set[SelectItem] = set()
    arithmetic = False
    for aggregate_id, (unit_op, (inner_id, column_id, column_distinct), _) in units:
        if column_distinct:
            keywords.add("distinct")
        arithmetic = arithmetic or unit_op != 0
        items.add(
            SelectItem(_SPIDER_AGGREGATES[aggregate_id or inner_id], _spider_column(column_id))
        )
    tables: frozenset[int] | None = None
    table_units = sql["from"]["table_units"]
    if all(kind == "table_unit" for kind, _ in table_units):
        tables = frozenset(unit for _, unit in table_units)
    if sql["where"]:
        keywords.add("where")
    if sql["groupBy"]:
        keywords.add("group by")
    if sql["having"]:
        keywords.add("having")
    if sql["orderBy"]:
        keywords.update(("order by", sql["orderBy"][0]))
    if sql["limit"] is not None:
        keywords.add("limit")
    for operation in ("intersect", "union", "except"):
        if sql[operation] is not None:
            keywords.add(operation)
    if any(_spider_nested(sql[clause]) for clause in ("where", "having")):
        keywords.add("nested")
    return SpiderParts(
        select=None if arithmetic else frozenset(items),
        tables=tables,
        keywords=frozenset(keywords),
        slots=_spider_slots(sql),
    )


def _spider_column(column_id: int) -> int:
    return STAR if column_id == 0 else column_id - 1


def _spider_unit(val_unit: Sequence[Any]) -> SelectItem | None:
    """A Spider val_unit as a SelectItem (its col_unit holds the aggregate); None if arithmetic."""
    unit_op, (aggregate_id, column_id, _), _ = val_unit
    if unit_op != 0:
        return None
    return SelectItem(_SPIDER_AGGREGATES[aggregate_id], _spider_column(column_id))


def _spider_slots(sql: Mapping[str, Any]) -> Slots | None:
    where: list[Predicate] = []
    for condition in sql["where"][::2]:
        negated, operator_id, val_unit, *values = condition
        column = _spider_unit(val_unit)
        operator = _SPIDER_OPERATORS[operator_id]
        if negated:
            operator = _SPIDER_NEGATED.get(operator, "")
        if column is None or column.aggregate or operator in ("", "is", "exists"):
            return None
        nested = any(isinstance(value, dict) for value in values)
        where.append(Predicate(column.column, operator, nested))
    having: list[SelectItem] = []
    for condition in sql["having"][::2]:
        item = _spider_unit(condition[2])
        if item is None:
            return None
        having.append(item)
    order_by: list[SelectItem] = []
    for val_unit in sql["orderBy"][1] if sql["orderBy"] else []:
        item = _spider_unit(val_unit)
        if item is None:
            return None
        order_by.append(item)
    return Slots(
        where=tuple(where),
        where_or="or" in sql["where"][1::2],
        group_by=frozenset(_spider_column(column_id) for _, column_id, _ in sql["groupBy"]),
        having=tuple(having),
        order_by=tuple(order_by),
        limit=sql["limit"],
    )


def _spider_nested(conditions: Sequence[Any]) -> bool:
    return any(
        isinstance(value, dict)
        for condition in conditions
        if isinstance(condition, list)
        for value in condition[3:5]
    )


# --- the report --------------------------------------------------------------------------------

_CLAUSE_KEYWORDS = frozenset(
    (
        "where",
        "group by",
        "having",
        "order by",
        "asc",
        "desc",
        "limit",
        "intersect",
        "union",
        "except",
    )
)


def _report(
    name: str, examples: Sequence[Mapping[str, Any]], schemas: Mapping[str, Schema]
) -> Iterator[str]:
    labels, reasons = label_examples(examples, schemas)
    labelled = sum(sketch is not None for sketch in labels)
    yield f"{name}: {labelled} of {len(examples)} labelled ({labelled / len(examples):.2%})"
    for reason, count in reasons.most_common():
        yield f"  not labelled, {reason}: {count}"
    if not all("sql" in example for example in examples):
        return
    agree = Counter[str]()
    disagreements: list[str] = []
    for example, sketch in zip(examples, labels, strict=True):
        if sketch is None:
            continue
        parts = spider_parts(example["sql"])
        checks = {
            "SELECT": parts.select == sketch.select,
            "FROM": parts.tables == sketch.tables,
            "KEYWORDS": parts.keywords & _CLAUSE_KEYWORDS == sketch.keywords & _CLAUSE_KEYWORDS,
            "distinct, nested": parts.keywords - _CLAUSE_KEYWORDS
            == sketch.keywords - _CLAUSE_KEYWORDS,
            "slots": parts.slots == sketch.slots,
        }
        for part, same in checks.items():
            agree[part] += same
            if not same:
                disagreements.append(f"    {part}: {example['query']}")
    for part in ("SELECT", "FROM", "KEYWORDS", "distinct, nested", "slots"):
        yield (
            f"  agreement with Spider's parsed sql, {part}: {agree[part]} of {labelled}"
            f" ({agree[part] / max(labelled, 1):.2%})"
        )
    if disagreements:
        yield "  disagreements:"
        yield from disagreements


def main(argv: Sequence[str] | None = None) -> None:
    """Label Spider train and dev; print counts, reasons and agreement with Spider's parse."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "spider",
        nargs="?",
        type=Path,
        default=spider_dir(),
        help="the Spider folder (train.json, dev.json, tables.json; default: $PGNL_SPIDER_DIR)",
    )
    arguments = parser.parse_args(argv)
    schemas = load_spider_schemas(arguments.spider / "tables.json")
    for name in ("train", "dev"):
        examples = json.loads((arguments.spider / f"{name}.json").read_text(encoding="utf-8"))
        for line in _report(name, examples, schemas):
            print(line)


if __name__ == "__main__":
    main()
