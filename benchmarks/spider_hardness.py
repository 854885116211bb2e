"""Spider's difficulty levels (easy, medium, hard, extra) of a gold query, as Spider computes them.

A port of `Evaluator.eval_hardness` and the counting functions it uses (`count_component1`,
`count_component2`, `count_others`, `get_nestedSQL`, `count_agg`) from Spider's `evaluation.py`
(github.com/taoyds/spider; the same code in test-suite-sql-eval). They read the parsed query that
dev.json and train.json carry in each example's `sql` field, not the SQL text.

The port keeps Spider's quirks, so that the levels are the published ones (dev: 248 easy, 446
medium, 174 hard, 166 extra):

- `has_agg(unit)` is `unit[0] != 0`. On a condition (`[not_op, op_id, val_unit, val1, val2]`) that
  is its NOT flag, so a negated WHERE condition counts as an aggregate; HAVING is passed whole, its
  "and"/"or" strings included, and a string's first character is never 0, so each of those counts.
- Only the outer query is counted, except that each nested query (a subquery as a condition's
  value, or the right side of INTERSECT/UNION/EXCEPT) adds one to component 2.

    >>> hardness({"select": [False, [[3, [0, [0, 0, False], None]]]], "from": {"table_units":
    ...     [["table_unit", 1]], "conds": []}, "where": [], "groupBy": [], "having": [],
    ...     "orderBy": [], "limit": None, "intersect": None, "union": None, "except": None})
    'easy'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

Hardness = Literal["easy", "medium", "hard", "extra"]
LEVELS: tuple[Hardness, ...] = ("easy", "medium", "hard", "extra")

WHERE_OPS = ("not", "between", "=", ">", "<", ">=", "<=", "!=", "in", "like", "is", "exists")
AGG_OPS = ("none", "max", "min", "count", "sum", "avg")

SpiderSQL = Mapping[str, Any]
"""A parsed query as in dev.json's `sql` field (process_sql.get_sql's output)."""


def _has_agg(unit: Sequence[Any]) -> bool:
    return bool(unit[0] != AGG_OPS.index("none"))


def _count_agg(units: Sequence[Sequence[Any]]) -> int:
    return sum(1 for unit in units if _has_agg(unit))


def nested_queries(sql: SpiderSQL) -> list[SpiderSQL]:
    """Spider's `get_nestedSQL`: subqueries that are condition values, then the set operations'
    right sides (intersect, except, union)."""
    nested: list[SpiderSQL] = []
    for cond_unit in sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]:
        if isinstance(cond_unit[3], dict):
            nested.append(cond_unit[3])
        if isinstance(cond_unit[4], dict):
            nested.append(cond_unit[4])
    for operation in ("intersect", "except", "union"):
        if sql[operation] is not None:
            nested.append(sql[operation])
    return nested


def count_component1(sql: SpiderSQL) -> int:
    """WHERE, GROUP BY, ORDER BY, LIMIT (one each), joins, ORs and LIKEs of the outer query."""
    count = 0
    if len(sql["where"]) > 0:
        count += 1
    if len(sql["groupBy"]) > 0:
        count += 1
    if len(sql["orderBy"]) > 0:
        count += 1
    if sql["limit"] is not None:
        count += 1
    if len(sql["from"]["table_units"]) > 0:  # joins
        count += len(sql["from"]["table_units"]) - 1
    conjunctions = sql["from"]["conds"][1::2] + sql["where"][1::2] + sql["having"][1::2]
    count += sum(1 for token in conjunctions if token == "or")
    cond_units = sql["from"]["conds"][::2] + sql["where"][::2] + sql["having"][::2]
    count += sum(1 for unit in cond_units if unit[1] == WHERE_OPS.index("like"))
    return count


def count_component2(sql: SpiderSQL) -> int:
    """Nested queries: subqueries in conditions and set operations."""
    return len(nested_queries(sql))


def count_others(sql: SpiderSQL) -> int:
    """More than one aggregate, SELECT item, WHERE condition or GROUP BY column (one each)."""
    count = 0
    aggregates = _count_agg(sql["select"][1])
    aggregates += _count_agg(sql["where"][::2])
    aggregates += _count_agg(sql["groupBy"])
    if len(sql["orderBy"]) > 0:
        aggregates += _count_agg(
            [unit[1] for unit in sql["orderBy"][1] if unit[1]]
            + [unit[2] for unit in sql["orderBy"][1] if unit[2]]
        )
    aggregates += _count_agg(sql["having"])
    if aggregates > 1:
        count += 1
    if len(sql["select"][1]) > 1:
        count += 1
    if len(sql["where"]) > 1:
        count += 1
    if len(sql["groupBy"]) > 1:
        count += 1
    return count


def hardness(sql: SpiderSQL) -> Hardness:
    """Spider's `Evaluator.eval_hardness` of a parsed gold query."""
    component1 = count_component1(sql)
    component2 = count_component2(sql)
    others = count_others(sql)
    if component1 <= 1 and others == 0 and component2 == 0:
        return "easy"
    if (others <= 2 and component1 <= 1 and component2 == 0) or (
        component1 <= 2 and others < 2 and component2 == 0
    ):
        return "medium"
    if (
        (others > 2 and component1 <= 2 and component2 == 0)
        or (2 < component1 <= 3 and others <= 2 and component2 == 0)
        or (component1 <= 1 and others == 0 and component2 <= 1)
    ):
        return "hard"
    return "extra"
