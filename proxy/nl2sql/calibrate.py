"""Predicate calibration: replace literals that are not in the database by the closest real value.

ZeroNL2SQL's Algorithm 1, over pgnl's value index. For each (column, literal) predicate of a
candidate query (=, <>, IN, LIKE/ILIKE, BETWEEN, on text), with table aliases resolved to real
columns: a literal present as-is is left alone; otherwise the closest value is looked for in the
predicted column, then in its table, then in the whole database, stopping at the first level
with a value whose similarity reaches the threshold r (0.65). One addition to the paper: before
any fuzzy match, the literal itself (up to case and accents) is looked for at every level, so a
value that exists in a sibling column beats a look-alike in the predicted one ('Boston' is a
city before it is near 'Massachusetts'). The query is rewritten on its
syntax tree (pglast, PostgreSQL's own parser), never by string replacement: the literal, and
when the value was found in another column of a table the query already reads, the column too
(a LIKE pattern whose text that column's values contain keeps its pattern and only moves:
"contains 'North'" is every state with North in it, not the one value found).
A value found in a table the query does not read is reported, not applied (a completer can use
it: joining a table is beyond a literal's repair). Once a predicate has moved, the table its
old column was read from may have nothing left to do in the query: `without_join` drops such a
join (the pipeline does, unless the question names the table).

Numbers, dates and booleans are never turned into strings, and nothing here raises on bad
input: a query that does not parse, or a literal too long to be a value, leaves the SQL as it was,
with the reason in `CalibrationResult.notes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import UnionType
from typing import Literal, Protocol

from pglast import ast, parse_sql
from pglast.enums import A_Expr_Kind, JoinType
from pglast.parser import ParseError
from pglast.stream import RawStream

from proxy.nl2sql import similarity
from proxy.nl2sql.database import Database
from proxy.valueindex.common import Candidate, ColumnRef, Scope

Method = Literal["char", "trigram", "semantic", "glove", "hybrid"]
Level = Literal["column", "table", "database"]
METHODS: tuple[Method, ...] = ("char", "trigram", "semantic", "glove", "hybrid")
MULTI_LEVEL: tuple[Level, ...] = ("column", "table", "database")

MAX_LITERAL = 200  # longer is not a value anyone types: left alone
CANDIDATES = 20  # nearest values fetched from the index for each level, then re-scored

_NOT_TEXT = re.compile(
    r"""^\s*(?:
        [-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?          # numbers
      | \d{4}-\d{1,2}-\d{1,2}(?:[ t]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?  # dates, timestamps
      | \d{1,2}:\d{2}(?::\d{2})?                        # times
      | true|false|t|f|yes|no|on|off                    # booleans
    )\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


class ValueLookup(Protocol):
    """What calibration needs of the value index (proxy.valueindex.lookup.ValueIndex)."""

    def contains(self, column: ColumnRef, value: str) -> bool: ...

    def search_trigram(self, literal: str, scope: Scope, k: int) -> list[Candidate]: ...

    def search_semantic(self, literal: str, scope: Scope, k: int) -> list[Candidate]: ...

    def values_in(self, scope: Scope, limit: int) -> list[Candidate]: ...


class Catalog(Protocol):
    """Resolves the tables a query names, as PostgreSQL would with the caller's search_path."""

    def resolve(self, schema: str | None, table: str) -> tuple[str, str] | None:
        """(schema, table) of a table or view the query names, or None if there is none."""
        ...

    def columns(self, schema: str, table: str) -> frozenset[str]: ...


class DatabaseCatalog:
    """`Catalog` from pg_catalog, through the pipeline's `Database`, cached for one query."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._tables: dict[tuple[str | None, str], tuple[str, str] | None] = {}
        self._columns: dict[tuple[str, str], frozenset[str]] = {}

    def resolve(self, schema: str | None, table: str) -> tuple[str, str] | None:
        key = (schema, table)
        if key not in self._tables:
            rows = self.db.fetch(
                "SELECT n.nspname, c.relname FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass("
                "CASE WHEN $1::text IS NULL THEN quote_ident($2::text) "
                "ELSE quote_ident($1::text) || '.' || quote_ident($2::text) END)",
                [schema, table],
            )
            self._tables[key] = (str(rows[0][0]), str(rows[0][1])) if rows else None
        return self._tables[key]

    def columns(self, schema: str, table: str) -> frozenset[str]:
        key = (schema, table)
        if key not in self._columns:
            rows = self.db.fetch(
                "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
                [schema, table],
            )
            self._columns[key] = frozenset(str(r[0]) for r in rows)
        return self._columns[key]


@dataclass(frozen=True)
class Calibration:
    """One literal that was not in the database, and the value (and column) found for it."""

    column: ColumnRef
    literal: str
    new_column: ColumnRef
    new_value: str
    score: float
    level: Level
    applied: bool  # rewritten in the SQL (False: the value is in a table the query does not read)


@dataclass
class CalibrationResult:
    sql: str
    calibrations: list[Calibration] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # literals left alone, and why

    @property
    def changed(self) -> bool:
        return any(c.applied for c in self.calibrations)


# ---------------------------------------------------------------- finding the predicates


@dataclass
class _Source:
    """A table the query reads, under the name the query uses for it."""

    qualifier: str
    schema: str
    table: str


@dataclass
class _Predicate:
    column: ColumnRef
    column_node: ast.ColumnRef
    sources: list[_Source]  # the tables in scope where the predicate stands
    literal: str
    set_literal: Callable[[str], None]
    pattern: bool  # LIKE / ILIKE: the literal is a pattern
    fold_case: bool  # ILIKE: the pattern ignores case


def _string_const(node: object) -> str | None:
    if isinstance(node, ast.A_Const) and isinstance(node.val, ast.String):
        return str(node.val.sval)
    if isinstance(node, ast.TypeCast):
        return _string_const(node.arg)
    return None


def _set_const(node: ast.A_Const | ast.TypeCast) -> Callable[[str], None]:
    def setter(value: str) -> None:
        target = node.arg if isinstance(node, ast.TypeCast) else node
        assert isinstance(target, ast.A_Const)
        target.val = ast.String(sval=value)

    return setter


def _column_parts(node: ast.ColumnRef) -> tuple[str | None, str] | None:
    fields = node.fields or ()
    names = [str(f.sval) for f in fields if isinstance(f, ast.String)]
    if len(names) != len(fields) or not names:
        return None
    return (names[-2] if len(names) >= 2 else None), names[-1]


def _range_sources(node: object, catalog: Catalog) -> Iterator[_Source]:
    if isinstance(node, ast.RangeVar) and node.relname:
        resolved = catalog.resolve(node.schemaname, node.relname)
        if resolved is not None:
            alias = node.alias.aliasname if node.alias is not None else None
            yield _Source(str(alias or node.relname), *resolved)
    elif isinstance(node, ast.JoinExpr):
        yield from _range_sources(node.larg, catalog)
        yield from _range_sources(node.rarg, catalog)


class _Finder:
    """Walks one statement, keeping the FROM scope of each SELECT (inner before outer)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.found: list[_Predicate] = []
        self.notes: list[str] = []

    def walk(self, node: object, scopes: list[list[_Source]]) -> None:
        if isinstance(node, ast.SelectStmt):
            own = [s for item in node.fromClause or () for s in _range_sources(item, self.catalog)]
            scopes = [own, *scopes]
        if isinstance(node, ast.A_Expr):
            self._predicate(node, scopes)
        if isinstance(node, tuple | list):
            for item in node:
                self.walk(item, scopes)
            return
        if isinstance(node, ast.Node):
            for name in node:
                self.walk(getattr(node, name), scopes)

    def _resolve(self, node: ast.ColumnRef, scopes: list[list[_Source]]) -> ColumnRef | None:
        parts = _column_parts(node)
        if parts is None:
            return None
        qualifier, column = parts
        for sources in scopes:
            for source in sources:
                if qualifier is not None and qualifier != source.qualifier:
                    continue
                if column in self.catalog.columns(source.schema, source.table):
                    return ColumnRef(source.schema, source.table, column)
        return None

    def _predicate(self, node: ast.A_Expr, scopes: list[list[_Source]]) -> None:
        kind = node.kind
        column_side, other = node.lexpr, node.rexpr
        if not isinstance(column_side, ast.ColumnRef) and isinstance(other, ast.ColumnRef):
            column_side, other = other, column_side
        if not isinstance(column_side, ast.ColumnRef):
            return
        operator = node.name[-1].sval if node.name else ""
        fold_case = kind == A_Expr_Kind.AEXPR_ILIKE
        if kind == A_Expr_Kind.AEXPR_OP and operator in ("=", "<>", "!="):
            constants = [other]
            pattern = False
        elif kind in (A_Expr_Kind.AEXPR_LIKE, A_Expr_Kind.AEXPR_ILIKE):
            constants = [other]
            pattern = True
        elif kind in (A_Expr_Kind.AEXPR_IN, A_Expr_Kind.AEXPR_BETWEEN) and isinstance(
            other, tuple | list
        ):
            constants = list(other)
            pattern = False
        else:
            return
        column = self._resolve(column_side, scopes)
        for constant in constants:
            literal = _string_const(constant)
            if literal is None or not isinstance(constant, ast.A_Const | ast.TypeCast):
                continue
            if column is None:
                self.notes.append(f"{literal[:40]!r}: its column could not be resolved")
                continue
            self.found.append(
                _Predicate(
                    column,
                    column_side,
                    scopes[0] if scopes else [],
                    literal,
                    _set_const(constant),
                    pattern,
                    fold_case,
                )
            )


# ---------------------------------------------------------------- matching


def _score(
    method: Method, literal: str, candidates: Sequence[Candidate], semantic: bool
) -> list[tuple[float, Candidate]]:
    if method == "char":
        return [(similarity.indel(literal, c.value), c) for c in candidates]
    if method == "glove":
        scores = similarity.GloVe.load().similarity(literal, [c.value for c in candidates])
        return list(zip(scores, candidates, strict=True))
    if method == "hybrid":
        return [
            (similarity.hybrid(literal, c.value, c.score if semantic else None), c)
            for c in candidates
        ]
    return [(c.score, c) for c in candidates]  # trigram, semantic: the index's own score


def best_match(
    index: ValueLookup, literal: str, scope: Scope, method: Method
) -> tuple[float, Candidate] | None:
    """The most similar value in a scope, by a method, with its score."""
    scored: list[tuple[float, Candidate]] = []
    if method in ("char", "trigram", "hybrid"):
        scored += _score(method, literal, index.search_trigram(literal, scope, CANDIDATES), False)
    if method in ("semantic", "hybrid"):
        scored += _score(method, literal, index.search_semantic(literal, scope, CANDIDATES), True)
    if method == "glove":
        scored += _score(method, literal, index.values_in(scope, 5000), False)
    if not scored:
        return None
    # ties: the more frequent value, then the shorter one
    return max(scored, key=lambda sc: (sc[0], sc[1].frequency, -len(sc[1].value)))


def _exact_match(index: ValueLookup, literal: str, scope: Scope) -> tuple[float, Candidate] | None:
    """A value equal to the literal up to case, accents and spacing, if the scope has one."""
    folded = similarity.fold(literal)
    same = [
        c
        for c in index.search_trigram(literal, scope, CANDIDATES)
        if similarity.fold(c.value) == folded
    ]
    return (1.0, max(same, key=lambda c: c.frequency)) if same else None


def _scopes(column: ColumnRef, levels: Sequence[Level]) -> Iterator[tuple[Level, Scope]]:
    """The column, its table, the database (`Scope.widening`), those of `levels` only."""
    for scope in Scope.widening(column):
        if scope.level in levels:
            yield scope.level, scope


def _pattern_core(pattern: str) -> tuple[str, str, str]:
    """('%', 'core', '%') of a LIKE pattern with wildcards only at its ends."""
    core = pattern.strip("%")
    start = pattern[: len(pattern) - len(pattern.lstrip("%"))]
    end = pattern[len(pattern.rstrip("%")) :]
    return start, core, end


def calibrate(
    sql: str,
    index: ValueLookup,
    catalog: Catalog,
    *,
    threshold: float = 0.65,
    method: Method = "hybrid",
    levels: Sequence[Level] = MULTI_LEVEL,
) -> CalibrationResult:
    """Calibrate every text predicate of one SQL statement. See the module docstring."""
    if method not in METHODS:
        raise ValueError(
            f"unknown similarity method {method!r}: use char, trigram, semantic, glove or hybrid"
        )
    if not levels or any(level not in MULTI_LEVEL for level in levels):
        raise ValueError(f"levels must be some of {', '.join(MULTI_LEVEL)}, not {levels!r}")
    try:
        statements = parse_sql(sql)
    except ParseError as exc:
        return CalibrationResult(sql, notes=[f"left unchanged: the SQL does not parse ({exc})"])
    if len(statements) != 1:
        return CalibrationResult(sql, notes=["left unchanged: not exactly one statement"])
    finder = _Finder(catalog)
    finder.walk(statements[0].stmt, [])
    result = CalibrationResult(sql, notes=finder.notes)
    matching = _Matching(index, threshold, method, levels)
    for predicate in finder.found:
        calibration = matching.calibrate(predicate, result.notes)
        if calibration is not None:
            result.calibrations.append(calibration)
    if result.changed and statements[0].stmt is not None:
        result.sql = RawStream()(statements[0].stmt)
    return result


@dataclass(frozen=True)
class _Matching:
    index: ValueLookup
    threshold: float
    method: Method
    levels: Sequence[Level]

    def calibrate(self, predicate: _Predicate, notes: list[str]) -> Calibration | None:
        """Algorithm 1 for one predicate: its new (column, value), or None to leave it."""
        index, literal = self.index, predicate.literal
        shown = repr(literal[:40])
        if len(literal) > MAX_LITERAL:
            notes.append(f"{shown}…: longer than {MAX_LITERAL} characters, not a value; left alone")
            return None
        if _NOT_TEXT.match(literal):
            notes.append(f"{shown}: a number, date or boolean; left alone")
            return None
        start, core, end = _pattern_core(literal) if predicate.pattern else ("", literal, "")
        if predicate.pattern and ("%" in core or "_" in core or not core):
            notes.append(f"{shown}: a pattern with inner wildcards; left alone")
            return None
        if index.contains(predicate.column, core) or (
            predicate.pattern
            and _pattern_matches(index, predicate.column, core, fold_case=predicate.fold_case)
        ):
            return None
        for level, scope, exact in self._searches(predicate.column):
            match = (
                _exact_match(index, core, scope)
                if exact
                else best_match(index, core, scope, self.method)
            )
            if match is None or match[0] < self.threshold:
                continue
            score, candidate = match
            found_in = (candidate.column.schema, candidate.column.table)
            source = next((s for s in predicate.sources if (s.schema, s.table) == found_in), None)
            # a pattern whose text the found column holds stays the pattern: "contains the
            # substring 'North'" matches every state with North in it, not 'NorthDakota' alone
            value = (
                literal
                if predicate.pattern
                and _pattern_matches(index, candidate.column, core, fold_case=predicate.fold_case)
                else start + candidate.value + end
            )
            if source is not None:
                predicate.set_literal(value)
                if candidate.column != predicate.column:
                    predicate.column_node.fields = (
                        ast.String(sval=source.qualifier),
                        ast.String(sval=candidate.column.column),
                    )
            return Calibration(
                predicate.column,
                literal,
                candidate.column,
                value if value == literal else candidate.value,
                round(score, 4),
                level,
                applied=source is not None,
            )
        notes.append(f"{shown}: no value in the database reaches similarity {self.threshold}")
        return None

    def _searches(self, column: ColumnRef) -> Iterator[tuple[Level, Scope, bool]]:
        """The literal itself (up to case and accents) at every level first, then the closest
        value level by level: a value that exists in a sibling column beats a look-alike in the
        predicted one ('Boston' is a city before it is near 'Massachusetts')."""
        for level, scope in _scopes(column, self.levels):
            yield level, scope, True
        for level, scope in _scopes(column, self.levels):
            yield level, scope, False


def _pattern_matches(index: ValueLookup, column: ColumnRef, core: str, *, fold_case: bool) -> bool:
    """Whether some value of the column contains the pattern's text (ILIKE: in any case)."""
    candidates = index.search_trigram(core, Scope.column(column), CANDIDATES)
    if fold_case:
        folded = similarity.fold(core)
        return any(folded in similarity.fold(c.value) for c in candidates)
    return any(core in c.value for c in candidates)


# ---------------------------------------------------------------- a table left behind


def one_select(sql: str) -> ast.SelectStmt | None:
    """The syntax tree of `sql` when it is one plain SELECT (no UNION, INTERSECT or EXCEPT at
    its top), else None (several statements, another statement, or no parse)."""
    try:
        statements = parse_sql(sql)
    except ParseError:
        return None
    select = statements[0].stmt if len(statements) == 1 else None
    return select if isinstance(select, ast.SelectStmt) and select.larg is None else None


def nodes_of(
    node: object, kind: type[ast.Node] | UnionType, skip: object = None, *, inside: bool = False
) -> Iterator[ast.Node]:
    """Every node of a kind under a node, not looking into `skip`; with `inside`, also those
    inside one of that kind (`count(*)` in `coalesce(count(*), 0)`)."""
    if node is skip:
        return
    if isinstance(node, kind):
        yield node
        if not inside:
            return
    if isinstance(node, tuple | list):
        for item in node:
            yield from nodes_of(item, kind, skip, inside=inside)
    elif isinstance(node, ast.Node):
        for name in node:
            yield from nodes_of(getattr(node, name), kind, skip, inside=inside)


def function_name(node: ast.FuncCall) -> str:
    """A function call's name, lower-case, without its schema (`pg_catalog.count` is "count")."""
    last = node.funcname[-1] if node.funcname else None
    return str(last.sval).lower() if isinstance(last, ast.String) else ""


def without_join(sql: str, table: str) -> str | None:
    """The query without its inner join of `table`, where nothing but that join's own condition
    refers to the table: what is left after calibration moved the only predicate that needed
    it to another table's column ("singers whose citizenship is not France" read
    song.title). None where the query is not one SELECT whose FROM is a tree of inner joins
    with ON conditions, the table is read more than once, a column is not qualified, or
    anything else refers to it."""
    select = one_select(sql)
    if select is None:
        return None
    sources = select.fromClause or ()
    if len(sources) != 1 or not isinstance(sources[0], ast.JoinExpr):
        return None
    joins: list[ast.JoinExpr] = []
    leaves: list[ast.RangeVar] = []

    def collect(node: object) -> bool:
        if isinstance(node, ast.RangeVar):
            leaves.append(node)
            return True
        if not isinstance(node, ast.JoinExpr):
            return False
        if node.jointype != JoinType.JOIN_INNER or node.usingClause or node.quals is None:
            return False
        joins.append(node)
        return collect(node.larg) and collect(node.rarg)

    if not collect(sources[0]):
        return None
    read = [
        r
        for r in nodes_of(select, ast.RangeVar)
        if isinstance(r, ast.RangeVar) and r.relname == table
    ]
    if len(read) != 1 or not any(read[0] is leaf for leaf in leaves):
        return None  # not read, read twice, or read in a subquery
    leaf = read[0]
    qualifier = leaf.alias.aliasname if leaf.alias is not None else leaf.relname
    join = next((j for j in joins if leaf is j.larg or leaf is j.rarg), None)
    if join is None:
        return None
    for ref in nodes_of(select, ast.ColumnRef | ast.A_Star, skip=join.quals):
        parts = _column_parts(ref) if isinstance(ref, ast.ColumnRef) else None
        if parts is None or parts[0] is None or parts[0] == qualifier:
            return None  # `*`, `t.*`, an unqualified column, or the table itself
    other = join.rarg if join.larg is leaf else join.larg

    def replace_join(node: ast.Node | None) -> ast.Node | None:
        if node is join:
            return other
        if isinstance(node, ast.JoinExpr):
            node.larg = replace_join(node.larg)
            node.rarg = replace_join(node.rarg)
        return node

    select.fromClause = (replace_join(sources[0]),)
    return str(RawStream()(select))
