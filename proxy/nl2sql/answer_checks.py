"""The checks an answered candidate must pass to be chosen: a result that says something the
question did not, with every value the question typed and its "not".

A candidate whose result has values but fails one is kept as a partial answer (`search`): it
is chosen only when no candidate passes them all, after the anti-join relaxation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pglast import ast
from pglast.enums import A_Expr_Kind, BoolExprType

from proxy.nl2sql.calibrate import nodes_of, one_select
from proxy.nl2sql.complete_plm import Literal
from proxy.nl2sql.schema import Schema


def answers(question: str, sql: str, schema: Schema, typed: Sequence[Literal]) -> bool:
    """Whether an SQL whose result has values answers the question: it holds every value the
    question typed, does not only show the value it asks by, keeps the question's "not", and
    does not count groups of one row."""
    return (
        uses_every_literal(sql, typed)
        and not echoes_its_value(sql)
        and not ignores_a_negation(question, sql)
        and not counts_single_rows(sql, schema)
    )


def uses_every_literal(sql: str, typed: Sequence[Literal]) -> bool:
    """Whether the SQL holds every value the question typed: each quoted string (case aside;
    one that calibration replaced counts as left out) and each number."""
    sql = sql.casefold()
    for literal in typed:
        text = str(literal.value).casefold()
        if literal.kind == "number":
            if not re.search(rf"(?<![\w.]){re.escape(text)}(?![\w])", sql):
                return False
        elif text.strip() not in sql:
            return False
    return True


_COMPARATIVE = (
    r"(?:less|more|higher|lower|greater|fewer|larger|smaller|later|earlier|older|younger"
    r"|longer|shorter|bigger|after|before|above|below|over|under)\b"
)
NEGATION_SAID = re.compile(
    rf"\b(?:not|never|without)\b(?!\s+{_COMPARATIVE})|n't\b(?!\s+{_COMPARATIVE})"
    rf"|\bno\s+(?!{_COMPARATIVE})(?=[a-z])",
    re.IGNORECASE,
)
_NEGATION_WRITTEN = re.compile(r"\bNOT\b|<>|!=|\bEXCEPT\b", re.IGNORECASE)


def ignores_a_negation(question: str, sql: str) -> bool:
    """Whether the question says "not" ("do not play poker", "with no students", "never",
    "without"; not "no more than") and the query negates nothing (no NOT, <>, != or EXCEPT):
    such a query answers the question without its "not"."""
    return bool(NEGATION_SAID.search(question)) and not _NEGATION_WRITTEN.search(sql)


def counts_single_rows(sql: str, schema: Schema) -> bool:
    """Whether the query reads one table, groups it by its whole primary key and counts
    (`SELECT name FROM museum GROUP BY museum_id ORDER BY count(*) DESC LIMIT 1`): every group
    is one row, so the count is 1 and says nothing; the question counts rows of another
    table ("the museum that has the most staff")."""
    select = one_select(sql)
    if select is None:
        return False
    sources = select.fromClause or ()
    if len(sources) != 1 or not isinstance(sources[0], ast.RangeVar) or not select.groupClause:
        return False
    try:
        table = schema.table_index(str(sources[0].relname))
    except KeyError:
        return False
    key = {schema.columns[c].name.lower() for c in schema.primary_key(table)}
    grouped = {
        str(g.fields[-1].sval).lower()
        for g in select.groupClause
        if isinstance(g, ast.ColumnRef) and g.fields and isinstance(g.fields[-1], ast.String)
    }
    counts = any(
        isinstance(f, ast.FuncCall) and tuple(n.sval for n in f.funcname or ()) == ("count",)
        for f in nodes_of(select, ast.FuncCall, inside=True)
    )
    return bool(key) and key <= grouped and counts


def echoes_its_value(sql: str) -> bool:
    """Whether the query shows one plain column that its WHERE sets equal to a constant
    (`SELECT abbreviation FROM airlines WHERE abbreviation = 'UAL'`): every row it returns is
    the question's own value, so it answers nothing the question did not say."""
    select = one_select(sql)
    if select is None:
        return False
    targets = select.targetList or ()
    if len(targets) != 1 or not isinstance(targets[0].val, ast.ColumnRef):
        return False
    shown = targets[0].val.fields
    where = select.whereClause
    conjuncts = (
        where.args or ()
        if isinstance(where, ast.BoolExpr) and where.boolop == BoolExprType.AND_EXPR
        else (where,)
    )
    return any(
        isinstance(c, ast.A_Expr)
        and c.kind == A_Expr_Kind.AEXPR_OP
        and tuple(n.sval for n in c.name or ()) == ("=",)
        and isinstance(c.lexpr, ast.ColumnRef)
        and _same_column(c.lexpr.fields, shown)
        and isinstance(c.rexpr, ast.A_Const)
        for c in conjuncts
    )


def _same_column(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> bool:
    """Whether two column references name one column: the same name, and the same table where
    both say one (a bare name stands for the only table that has it)."""
    a_names = [getattr(f, "sval", None) for f in a or ()]
    b_names = [getattr(f, "sval", None) for f in b or ()]
    if not a_names or not b_names or a_names[-1] != b_names[-1] or a_names[-1] is None:
        return False
    return len(a_names) == 1 or len(b_names) == 1 or a_names[:-1] == b_names[:-1]
