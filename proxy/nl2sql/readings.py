"""A candidate's SQL read as the parts two readings of a question can differ in: the tables it
reads and the join edges between them, what it selects and aggregates, DISTINCT, its predicates
with their literals, grouping, ordering and LIMIT (`Parts`, `read`).

The ambiguity stage (`ambiguity`) compares these parts between candidates. Every column is
named as `table.column`, through the query's aliases and, for an unqualified column, the one
table of the query that has it, so `T1.name` and `singer.name` are the same part. The tree is
PostgreSQL's own (pglast); a query that does not parse has no parts (None).
"""

from __future__ import annotations

from dataclasses import dataclass

from pglast import ast, parse_sql
from pglast.enums import A_Expr_Kind
from pglast.parser import ParseError
from pglast.stream import RawStream

from proxy.nl2sql.calibrate import function_name, nodes_of
from proxy.nl2sql.schema import Schema

AGGREGATES = frozenset({"count", "sum", "avg", "min", "max"})


@dataclass(frozen=True)
class Predicate:
    """A condition between a column and constants: `column operator literal`."""

    column: str  # table.column
    operator: str  # =, <>, <, like, ilike, in, between, ...
    values: tuple[str, ...]  # the constant(s) as text: one, or IN's list, or BETWEEN's two

    @property
    def literal(self) -> str:
        return ", ".join(self.values)

    def text(self) -> str:
        return f"{self.column} {self.operator} {', '.join(repr(v) for v in self.values)}"


@dataclass(frozen=True)
class Parts:
    sql: str
    tables: frozenset[str]  # every table read, anywhere in the query
    joins: frozenset[tuple[str, str]]  # column = column edges, each pair sorted
    projection: tuple[str, ...]  # the outer SELECT list, normalised
    aggregates: frozenset[str]  # e.g. "count(DISTINCT singer.name)"
    distinct: bool  # SELECT DISTINCT (aggregates carry their own)
    predicates: frozenset[Predicate]
    grouping: frozenset[str]
    ordering: tuple[str, ...]  # "expression ASC|DESC"
    limit: str | None
    nested: bool  # a subquery or a set operation

    def columns(self) -> frozenset[str]:
        """The columns the query uses other than in its join conditions."""
        used: set[str] = set()
        for text in (*self.projection, *self.aggregates, *self.grouping, *self.ordering):
            used.update(_columns_in(text))
        used.update(p.column for p in self.predicates)
        return frozenset(used)


def _columns_in(text: str) -> set[str]:
    # normalised text names columns as "table.column"; the dotted words are those
    words = text.replace("(", " ").replace(")", " ").replace(",", " ").split()
    return {w for w in words if w.count(".") == 1 and not w[0].isdigit()}


def read(sql: str, schema: Schema) -> Parts | None:
    """The parts of `sql` over `schema`; None when it is not one SELECT that parses."""
    try:
        statements = parse_sql(sql)
    except ParseError:
        return None
    if len(statements) != 1 or not isinstance(statements[0].stmt, ast.SelectStmt):
        return None
    select = statements[0].stmt
    return _Reader(schema, select).parts(sql)


class _Reader:
    def __init__(self, schema: Schema, select: ast.SelectStmt) -> None:
        self.schema = schema
        self.select = select
        self.aliases: dict[str, str] = {}
        self.read: list[str] = []
        for node in nodes_of(select, ast.RangeVar, inside=True):
            assert isinstance(node, ast.RangeVar)
            name = str(node.relname).lower()
            self.read.append(name)
            self.aliases[name] = name
            if node.alias is not None:
                self.aliases[str(node.alias.aliasname).lower()] = name
        self._columns_of: dict[str, set[str]] = {}
        for table in set(self.read):
            try:
                index = schema.table_index(table)
            except KeyError:
                continue
            self._columns_of[table] = {
                schema.columns[c].name.lower() for c in schema.table_columns[index]
            }

    def parts(self, sql: str) -> Parts:
        top = self.select
        nested = top.larg is not None or any(
            True for _ in nodes_of(top, ast.SubLink | ast.RangeSubselect)
        )
        while top.larg is not None:  # a set operation: its first branch stands for it
            top = top.larg
        self._resolve(self.select)
        projection = tuple(
            self._render(t.val) for t in top.targetList or () if isinstance(t, ast.ResTarget)
        )
        aggregates = frozenset(
            self._render(f)
            for f in nodes_of(top.targetList or (), ast.FuncCall, inside=True)
            if isinstance(f, ast.FuncCall) and function_name(f) in AGGREGATES
        ) | frozenset(
            self._render(f)
            for f in nodes_of((top.havingClause, top.sortClause), ast.FuncCall, inside=True)
            if isinstance(f, ast.FuncCall) and function_name(f) in AGGREGATES
        )
        ordering = tuple(
            f"{self._render(s.node)} {'DESC' if s.sortby_dir == 2 else 'ASC'}"
            for s in top.sortClause or ()
            if isinstance(s, ast.SortBy)
        )
        return Parts(
            sql=sql,
            tables=frozenset(self.read),
            joins=frozenset(self._joins()),
            projection=projection,
            aggregates=aggregates,
            distinct=top.distinctClause is not None,
            predicates=frozenset(self._predicates()),
            grouping=frozenset(self._render(g) for g in top.groupClause or ()),
            ordering=ordering,
            limit=self._render(top.limitCount) if top.limitCount is not None else None,
            nested=nested,
        )

    def _resolve(self, node: ast.Node) -> None:
        """Every column reference rewritten as table.column (aliases and unqualified names
        resolved), so that rendering compares readings, not spellings."""
        for ref in nodes_of(node, ast.ColumnRef, inside=True):
            assert isinstance(ref, ast.ColumnRef)
            fields = ref.fields or ()
            names = [str(f.sval).lower() for f in fields if isinstance(f, ast.String)]
            if len(names) != len(fields) or not names:
                continue  # t.* or *
            column = names[-1]
            if len(names) >= 2:
                table = self.aliases.get(names[-2], names[-2])
            else:
                owners = [t for t, cols in self._columns_of.items() if column in cols]
                if len(owners) != 1:
                    continue  # an output alias, or a name two tables share
                table = owners[0]
            ref.fields = (ast.String(sval=table), ast.String(sval=column))

    def _render(self, node: object) -> str:
        if not isinstance(node, ast.Node | tuple):
            return "" if node is None else repr(node)
        try:
            return str(RawStream()(node)).lower()
        except Exception:  # a node RawStream cannot print alone: compare by its repr
            return repr(node)

    def _joins(self) -> list[tuple[str, str]]:
        edges: list[tuple[str, str]] = []
        for expr in nodes_of(self.select, ast.A_Expr, inside=True):
            assert isinstance(expr, ast.A_Expr)
            if expr.kind != A_Expr_Kind.AEXPR_OP or _operator(expr) != "=":
                continue
            if isinstance(expr.lexpr, ast.ColumnRef) and isinstance(expr.rexpr, ast.ColumnRef):
                a, b = sorted((self._render(expr.lexpr), self._render(expr.rexpr)))
                edges.append((a, b))
        return edges

    def _predicates(self) -> list[Predicate]:
        found: list[Predicate] = []
        clauses = (self.select.whereClause, self.select.havingClause)
        for expr in nodes_of(clauses, ast.A_Expr, inside=True):
            assert isinstance(expr, ast.A_Expr)
            predicate = self._predicate(expr)
            if predicate is not None:
                found.append(predicate)
        return found

    def _predicate(self, expr: ast.A_Expr) -> Predicate | None:
        column, constant = expr.lexpr, expr.rexpr
        operator = _operator(expr)
        if not isinstance(column, ast.ColumnRef) and isinstance(constant, ast.ColumnRef):
            column, constant = constant, column
            operator = _MIRRORED.get(operator, operator)
        if not isinstance(column, ast.ColumnRef):
            return None
        if expr.kind in (A_Expr_Kind.AEXPR_LIKE, A_Expr_Kind.AEXPR_ILIKE):
            operator = {"~~": "like", "~~*": "ilike", "!~~": "not like", "!~~*": "not ilike"}.get(
                operator, operator
            )
        elif expr.kind == A_Expr_Kind.AEXPR_IN:
            operator = "in" if operator == "=" else "not in"
        elif expr.kind in (A_Expr_Kind.AEXPR_BETWEEN, A_Expr_Kind.AEXPR_NOT_BETWEEN):
            operator = "between" if expr.kind == A_Expr_Kind.AEXPR_BETWEEN else "not between"
        elif expr.kind != A_Expr_Kind.AEXPR_OP:
            return None
        values = constant if isinstance(constant, tuple | list) else (constant,)
        texts = [_constant(v) for v in values]
        if not texts or any(t is None for t in texts):
            return None
        return Predicate(self._render(column), operator, tuple(t for t in texts if t is not None))


_MIRRORED = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _operator(expr: ast.A_Expr) -> str:
    names = [str(n.sval) for n in expr.name or () if isinstance(n, ast.String)]
    return names[-1] if names else ""


def _constant(node: object) -> str | None:
    if isinstance(node, ast.TypeCast):
        return _constant(node.arg)
    if isinstance(node, ast.A_Const):
        value = node.val
        if isinstance(value, ast.String):
            return str(value.sval)
        if isinstance(value, ast.Integer):
            return str(value.ival)
        if isinstance(value, ast.Float):
            return str(value.fval)
        if isinstance(value, ast.Boolean):
            return "true" if value.boolval else "false"
    return None
