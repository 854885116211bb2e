"""Perturbed literals in Spider's gold SQL: the test set of predicate calibration.

Calibration (proxy.nl2sql.calibrate) repairs text literals that are not in the database. To
measure it, this module takes the Spider dev gold queries, finds their text predicates
(`column = 'literal'`, IN lists, LIKE/ILIKE with wildcards only at the ends), resolves each
column through the FROM clause (aliases, joins, subqueries) to a real (table, column), keeps the
predicates whose literal is a value of that column in the loaded PostgreSQL database, and makes
deterministic variants of each that a person or a model might have written instead:

| kind           | what                                                                    |
| -------------- | ----------------------------------------------------------------------- |
| `original`     | the literal as it is: calibration must leave it alone                   |
| `typo`         | one or two letter edits (substitution by a keyboard neighbour, deletion, |
|                | insertion, transposition); values of fewer than 3 letters get none       |
| `case`         | lower- or upper-cased (not for LIKE, which runs as ILIKE: case is no error) |
| `abbreviation` | initials of a multi-word value ("New York" -> "NY"); a single word only  |
|                | with a known code: US states, a few countries ("Hawaii" -> "HI")          |
| `partial`      | words dropped ("Timmy Ward" -> "Timmy"), or of one word of 7+ characters, |
|                | a prefix of 5 or more letters                                             |
| `plural`       | a trailing s/es added or removed ("students" -> "student")               |
| `word_order`   | words of a multi-word value swapped ("Timmy Ward" -> "Ward Timmy")        |
| `wrong_column` | the literal kept, the predicate pointed at a sibling text column of the  |
|                | same table that does not hold it: the right repair is the column          |

A variant identical to the original, or that is itself a value of the column (so not wrong), is
skipped. Substitutions are made on the SQL's syntax tree (sqlglot), never on its text, and every
variant is seeded by a hash of its case, so the set is the same on every run and machine.

`build_cases(dsns)` needs the databases that `benchmarks.spider_pg.load_dev_databases` loads; the
pure parts (the perturbation functions, `find_sites`) need no database.

    python -m benchmarks.perturb --dsn postgresql://postgres:pw@127.0.0.1:5432/postgres [--show 3]

loads the dev databases (re-using loaded ones) and prints the set's composition, with examples.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psycopg
from sqlglot import exp

from benchmarks.spider_pg import (
    TranspileError,
    gold_queries,
    identifier,
    load_dev_databases,
    parse_sqlite,
    render_postgres,
)

KINDS: tuple[str, ...] = (
    "original",
    "typo",
    "case",
    "abbreviation",
    "partial",
    "plural",
    "word_order",
    "wrong_column",
)
SCHEMA = "public"
STATEMENT_TIMEOUT_MS = 5000

# A literal that is a number, a date, a time or a boolean is not a value to calibrate
# (proxy.nl2sql.calibrate leaves the same ones alone).
_NOT_TEXT = re.compile(
    r"""^\s*(?:
        [-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?
      | \d{4}-\d{1,2}-\d{1,2}(?:[ t]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?
      | \d{1,2}:\d{2}(?::\d{2})?
      | true|false|t|f|yes|no|on|off
    )\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


def is_text_like(literal: str) -> bool:
    return bool(literal.strip()) and not _NOT_TEXT.match(literal)


def seed_of(*parts: str) -> int:
    """A seed from the parts of a case, the same on every run (unlike hash())."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


# ---------------------------------------------------------------- perturbations (pure)

_KEY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _keyboard_neighbours() -> dict[str, str]:
    out: dict[str, str] = {}
    for r, row in enumerate(_KEY_ROWS):
        for i, key in enumerate(row):
            near = [row[j] for j in (i - 1, i + 1) if 0 <= j < len(row)]
            for other in (r - 1, r + 1):
                if 0 <= other < len(_KEY_ROWS):
                    near += [
                        _KEY_ROWS[other][j] for j in (i - 1, i) if 0 <= j < len(_KEY_ROWS[other])
                    ]
            out[key] = "".join(sorted(set(near) - {key}))
    return out


KEYBOARD = _keyboard_neighbours()


def _neighbour(ch: str, rng: random.Random, upper: bool) -> str:
    near = KEYBOARD.get(ch.lower()) or "etaoinshrdlu"
    choice = rng.choice([c for c in near if c != ch.lower()])
    return choice.upper() if upper else choice


def _letter_positions(value: str) -> list[int]:
    return [i for i, ch in enumerate(value) if ch.isalpha()]


def _one_edit(value: str, rng: random.Random, i: int) -> str:
    """One edit of the letter at `i`: it and the next character at most are touched."""
    op = rng.choice(("substitute", "delete", "insert", "transpose"))
    if op == "transpose":
        if i + 1 < len(value) and value[i + 1].isalpha() and value[i] != value[i + 1]:
            return value[:i] + value[i + 1] + value[i] + value[i + 2 :]
        op = "substitute"
    if op == "delete" and len(_letter_positions(value)) > 2:
        return value[:i] + value[i + 1 :]
    if op == "insert":
        after = value[i + 1] if i + 1 < len(value) else ""
        upper = value[i].isupper() and (not after.isalpha() or after.isupper())
        return value[: i + 1] + _neighbour(value[i], rng, upper) + value[i + 1 :]
    return value[:i] + _neighbour(value[i], rng, value[i].isupper()) + value[i + 1 :]


def typo(value: str, rng: random.Random) -> str | None:
    """One letter edit (two, half the time, for 6+ letters), letters only; None under 3 letters.

    Two edits are 3+ characters apart, so that they do not merge into something else.
    """
    letters = _letter_positions(value)
    if len(letters) < 3:
        return None
    positions = [rng.choice(letters)]
    if len(letters) >= 6 and rng.random() < 0.5:
        apart = [i for i in letters if abs(i - positions[0]) >= 3]
        if apart:
            positions.append(rng.choice(apart))
    out = value
    for i in sorted(positions, reverse=True):  # the later edit first: no index shifts
        out = _one_edit(out, rng, i)
    return out if out != value else None


def change_case(value: str, rng: random.Random) -> str | None:
    """Lower- or upper-cased, whichever differs (a seeded choice when both do)."""
    options = [v for v in (value.lower(), value.upper()) if v != value]
    return rng.choice(options) if options else None


US_STATES: dict[str, str] = {
    "alabama": "AL", "alaska": "AK", "arizona": "AZ", "arkansas": "AR", "california": "CA",
    "colorado": "CO", "connecticut": "CT", "delaware": "DE", "florida": "FL", "georgia": "GA",
    "hawaii": "HI", "idaho": "ID", "illinois": "IL", "indiana": "IN", "iowa": "IA",
    "kansas": "KS", "kentucky": "KY", "louisiana": "LA", "maine": "ME", "maryland": "MD",
    "massachusetts": "MA", "michigan": "MI", "minnesota": "MN", "mississippi": "MS",
    "missouri": "MO", "montana": "MT", "nebraska": "NE", "nevada": "NV",
    "new hampshire": "NH", "new jersey": "NJ", "new mexico": "NM", "new york": "NY",
    "north carolina": "NC", "north dakota": "ND", "ohio": "OH", "oklahoma": "OK",
    "oregon": "OR", "pennsylvania": "PA", "rhode island": "RI", "south carolina": "SC",
    "south dakota": "SD", "tennessee": "TN", "texas": "TX", "utah": "UT", "vermont": "VT",
    "virginia": "VA", "washington": "WA", "west virginia": "WV", "wisconsin": "WI",
    "wyoming": "WY",
}  # fmt: skip
# Commonly typed country abbreviations: ISO 3166-1 alpha-2, but USA/UK/UAE as people write them.
COUNTRIES: dict[str, str] = {
    "united states": "USA", "united states of america": "USA", "usa": "US",
    "united kingdom": "UK", "great britain": "GB", "united arab emirates": "UAE",
    "france": "FR", "germany": "DE", "italy": "IT", "spain": "ES", "portugal": "PT",
    "netherlands": "NL", "belgium": "BE", "switzerland": "CH", "austria": "AT",
    "sweden": "SE", "norway": "NO", "denmark": "DK", "finland": "FI", "ireland": "IE",
    "poland": "PL", "russia": "RU", "china": "CN", "japan": "JP", "india": "IN",
    "canada": "CA", "mexico": "MX", "brazil": "BR", "argentina": "AR", "australia": "AU",
    "new zealand": "NZ", "south africa": "ZA", "south korea": "KR", "egypt": "EG",
}  # fmt: skip
KNOWN_ABBREVIATIONS: dict[str, str] = {**US_STATES, **COUNTRIES}

_WORD = re.compile(r"[^\W\d_]+")


def abbreviate(value: str, rng: random.Random) -> str | None:
    """A known code (US state, country), else initials of 2+ words; None for other words."""
    del rng  # no choice to make: the same signature as the others
    known = KNOWN_ABBREVIATIONS.get(" ".join(value.split()).casefold())
    if known is not None:
        return known
    words = _WORD.findall(value)
    if len(value.split()) < 2 or len(words) < 2:
        return None
    return "".join(w[0] for w in words).upper()


def partial(value: str, rng: random.Random) -> str | None:
    """Words dropped (first or last only, or one end dropped), or a 5+ letter prefix of a
    single word of 7+ characters."""
    words = value.split()
    if len(words) >= 2:
        options = [words[0], words[-1]]
        if len(words) >= 3:
            options += [" ".join(words[:-1]), " ".join(words[1:])]
        kept = [
            o
            for i, o in enumerate(options)
            if o not in options[:i] and sum(ch.isalpha() for ch in o) >= 2 and o != value
        ]
        return rng.choice(kept) if kept else None
    word = value.strip()
    if len(word) < 7 or not word[:5].isalpha():
        return None
    return word[: rng.randint(5, len(word) - 2)]


def plural(value: str, rng: random.Random) -> str | None:
    """A trailing s/es removed from, or added to, the last word (of 3+ letters)."""
    del rng
    match = re.search(r"[A-Za-z]+$", value)
    if match is None or len(match.group()) < 3:
        return None
    word = match.group()
    lower = word.lower()
    sibilant = ("s", "x", "z", "ch", "sh")
    if lower.endswith("es") and lower[:-2].endswith(sibilant):
        new = word[:-2]
    elif lower.endswith("s") and not lower.endswith("ss"):
        new = word[:-1]
    else:
        suffix = "es" if lower.endswith(sibilant) else "s"
        new = word + (suffix.upper() if word.isupper() else suffix)
    return value[: match.start()] + new


def word_order(value: str, rng: random.Random) -> str | None:
    """Two words swapped: the two of a two-word value, else a seeded adjacent pair."""
    words = value.split()
    if len(words) < 2:
        return None
    i = 0 if len(words) == 2 else rng.randrange(len(words) - 1)
    words[i], words[i + 1] = words[i + 1], words[i]
    out = " ".join(words)
    return None if out == value else out


PERTURBATIONS: dict[str, Callable[[str, random.Random], str | None]] = {
    "typo": typo,
    "case": change_case,
    "abbreviation": abbreviate,
    "partial": partial,
    "plural": plural,
    "word_order": word_order,
}


def perturb(kind: str, value: str, seed: int) -> str | None:
    """The `kind` variant of `value` (None: the kind does not apply, or changes nothing)."""
    out = PERTURBATIONS[kind](value, random.Random(seed))
    return None if out is None or out == value else out


# ---------------------------------------------------------------- predicates (pure)


@dataclass(frozen=True)
class Source:
    """A relation a SELECT reads, under the name the query gives it; table None: a subquery."""

    qualifier: str
    table: str | None


@dataclass(frozen=True)
class Site:
    """One text literal of a predicate, with its column resolved (table None: unresolved)."""

    operator: str  # "=", "in", "like" (with NOT: "not in", "not like")
    table: str | None
    column: str
    qualifier: str | None  # the column's qualifier in the query, if it has one
    literal: str  # for LIKE, the pattern's core
    prefix: str  # LIKE wildcards before the core
    suffix: str  # ... and after it
    literal_node: int  # positions of the nodes in tree.walk() order
    column_node: int
    scope: tuple[Source, ...]  # the innermost SELECT's sources
    problem: str | None = None  # why it cannot be used, before looking at the data


def _sources(select: exp.Select) -> list[Source]:
    items: list[exp.Expression] = []
    from_ = select.args.get("from_") or select.args.get("from")
    if isinstance(from_, exp.From):
        items.append(from_.this)
    items += [j.this for j in select.args.get("joins") or [] if isinstance(j, exp.Join)]
    out = []
    for item in items:
        if isinstance(item, exp.Table) and item.name:
            out.append(Source(item.alias_or_name.lower(), item.name.lower()))
        elif item.alias_or_name:
            out.append(Source(item.alias_or_name.lower(), None))
    return out


def _resolve(
    column: exp.Column,
    scopes: list[list[Source]],
    schema: Mapping[str, Collection[str]],
) -> tuple[str | None, str | None]:
    """(table, None) for the column, or (None, why not)."""
    name = column.name.lower()
    qualifier = column.table.lower() if column.table else None
    for sources in scopes:
        if qualifier is not None:
            source = next((s for s in sources if s.qualifier == qualifier), None)
            if source is None:
                continue
            if source.table is None:
                return None, "column of a subquery in FROM"
            if name not in schema.get(source.table, ()):
                return None, f"no column {name} in {source.table}"
            return source.table, None
        found = {s.table for s in sources if s.table and name in schema.get(s.table, ())}
        if len(found) > 1:
            return None, "ambiguous unqualified column"
        if found:
            return found.pop(), None
        if any(s.table is None for s in sources):
            return None, "unqualified column, and a subquery in FROM"
    return None, "column not found in FROM"


def _walk(
    node: exp.Expression,
    scopes: list[list[Source]],
    schema: Mapping[str, Collection[str]],
    positions: dict[int, int],
    out: list[Site],
) -> None:
    if isinstance(node, exp.Select):
        scopes = [_sources(node), *scopes]
    if isinstance(node, exp.EQ | exp.In | exp.Like | exp.ILike):
        out.extend(_sites(node, scopes, schema, positions))
    for child in node.iter_expressions():
        _walk(child, scopes, schema, positions, out)


def _sites(
    node: exp.EQ | exp.In | exp.Like | exp.ILike,
    scopes: list[list[Source]],
    schema: Mapping[str, Collection[str]],
    positions: dict[int, int],
) -> Iterator[Site]:
    negated = isinstance(node.parent, exp.Not) or bool(node.args.get("negate"))
    if isinstance(node, exp.In):
        column: exp.Expression = node.this
        literals = list(node.expressions)
        operator = "in"
    else:
        column, other = node.this, node.expression
        if not isinstance(column, exp.Column) and isinstance(other, exp.Column):
            column, other = other, column
        literals = [other]
        operator = "=" if isinstance(node, exp.EQ) else "like"
    if negated and operator != "=":
        operator = "not " + operator
    if not isinstance(column, exp.Column):
        return
    table, problem = _resolve(column, scopes, schema)
    for literal in literals:
        if not (isinstance(literal, exp.Literal) and literal.is_string):
            continue
        text = str(literal.this)
        prefix = suffix = ""
        if operator.endswith("like"):
            core = text.strip("%")
            prefix = text[: len(text) - len(text.lstrip("%"))]
            suffix = text[len(text.rstrip("%")) :]
            if not core or "%" in core or "_" in core:
                problem = problem or "LIKE pattern with inner wildcards"
            text = core
        yield Site(
            operator,
            table,
            column.name.lower(),
            column.table.lower() if column.table else None,
            text,
            prefix,
            suffix,
            positions[id(literal)],
            positions[id(column)],
            tuple(scopes[0]) if scopes else (),
            problem if table is not None else (problem or "column unresolved"),
        )


def find_sites(tree: exp.Expression, schema: Mapping[str, Collection[str]]) -> list[Site]:
    """The string literals of =, IN and LIKE predicates of a tree from `parse_sqlite`.

    `schema`: table -> its columns, lower-cased (`benchmarks.spider_pg.schema_columns`, or the
    database's catalog). Qualified columns are resolved through the aliases of the nearest
    SELECT that defines the qualifier, unqualified ones in the innermost SELECT whose tables
    have them (then outwards, as SQL does).
    """
    positions = {id(node): i for i, node in enumerate(tree.walk())}
    out: list[Site] = []
    _walk(tree, [], schema, positions, out)
    return out


def resolve_predicates(
    sql_sqlite: str, schema: Mapping[str, Collection[str]]
) -> list[tuple[str | None, str, str]]:
    """(table, column, literal) of each text predicate of Spider SQL: `find_sites`, briefly."""
    return [(s.table, s.column, s.literal) for s in find_sites(parse_sqlite(sql_sqlite), schema)]


def substitute(
    tree: exp.Expression, site: Site, literal: str, column: str | None = None
) -> exp.Expression:
    """A copy of the tree with the site's literal (and, if given, its column) replaced."""
    copy = tree.copy()
    nodes = list(copy.walk())
    node = nodes[site.literal_node]
    assert isinstance(node, exp.Literal), node
    node.replace(exp.Literal.string(site.prefix + literal + site.suffix))
    if column is not None:
        target = nodes[site.column_node]
        assert isinstance(target, exp.Column), target
        target.set("this", identifier(column))
        if site.qualifier is None and len(site.scope) > 1:
            source = next((s for s in site.scope if s.table == site.table), None)
            if source is not None:
                target.set("table", identifier(source.qualifier))
    return copy


# ---------------------------------------------------------------- cases (need the databases)


class QualifiedColumn(NamedTuple):
    schema: str
    table: str
    column: str


@dataclass(frozen=True)
class Case:
    kind: str
    db_id: str
    sql_postgres: str  # with the perturbed literal (or column)
    expected_column: QualifiedColumn  # where the right value is
    expected_value: str  # the right value (for LIKE, the pattern's core)
    original_literal: str
    perturbed_literal: str  # for LIKE, the core; equal to original_literal for wrong_column
    predicate_column: QualifiedColumn  # the column the SQL names (a sibling for wrong_column)
    operator: str  # "=", "in", "like", "not in", "not like"
    gold_sql_postgres: str  # the unperturbed gold query
    question: str
    gold_index: int  # position in dev.json


@dataclass
class Composition:
    """What the perturbation set is made of, and what was left out and why."""

    gold_total: int = 0
    gold_usable: int = 0  # gold queries with at least one usable literal
    sites_usable: int = 0  # usable (predicate, literal) sites
    by_kind: Counter[str] = field(default_factory=Counter)
    by_db: Counter[str] = field(default_factory=Counter)
    by_operator: Counter[str] = field(default_factory=Counter)
    dropped_queries: Counter[str] = field(default_factory=Counter)  # reason -> gold queries
    dropped_sites: Counter[str] = field(default_factory=Counter)  # reason -> literals
    skipped_variants: Counter[str] = field(default_factory=Counter)  # "kind: reason" -> count
    duplicates: int = 0  # cases identical to one already made (Spider repeats gold SQL)
    errors: list[str] = field(default_factory=list)  # the transpile / execution errors
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> a few literals

    def drop_site(self, reason: str, db_id: str, site: Site) -> None:
        self.dropped_sites[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < 5:
            shown.append(f"{db_id}.{site.table}.{site.column} {site.operator} {site.literal!r}")

    def summary(self) -> str:
        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{k} {v}" for k, v in counter.most_common()) or "none"

        return "\n".join(
            [
                f"cases: {sum(self.by_kind.values())} from {self.sites_usable} literals in "
                f"{self.gold_usable} of {self.gold_total} gold queries "
                f"({self.duplicates} duplicate cases removed)",
                f"by kind: {counts(self.by_kind)}",
                f"by operator: {counts(self.by_operator)}",
                f"by database: {counts(self.by_db)}",
                f"gold queries without a usable literal: {counts(self.dropped_queries)}",
                f"literals not used: {counts(self.dropped_sites)}",
                f"variants skipped: {counts(self.skipped_variants)}",
            ]
        )


class _Database:
    """One loaded Spider database: its catalog, and the distinct values of columns asked for."""

    def __init__(self, dsn: str) -> None:
        self.conn: psycopg.Connection[Any] = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        self.types: dict[str, dict[str, str]] = {}
        for table, column, kind in self.conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
            [SCHEMA],
        ):
            self.types.setdefault(str(table), {})[str(column)] = str(kind)
        self._values: dict[tuple[str, str], frozenset[str]] = {}

    def values(self, table: str, column: str) -> frozenset[str]:
        key = (table, column)
        if key not in self._values:
            rows = self.conn.execute(
                psycopg.sql.SQL("SELECT DISTINCT {} FROM {} WHERE {} IS NOT NULL").format(
                    psycopg.sql.Identifier(column),
                    psycopg.sql.Identifier(SCHEMA, table),
                    psycopg.sql.Identifier(column),
                )
            ).fetchall()
            self._values[key] = frozenset(str(r[0]) for r in rows)
        return self._values[key]

    def error(self, sql: str) -> str | None:
        """None if the SQL runs, else PostgreSQL's message."""
        try:
            self.conn.execute(sql).fetchall()
        except psycopg.Error as exc:
            return (exc.diag.message_primary or str(exc)).strip()
        return None

    def close(self) -> None:
        self.conn.close()


def _site_problem(site: Site, db: _Database) -> str | None:
    if site.problem is not None:
        return site.problem
    assert site.table is not None
    if db.types[site.table].get(site.column) != "text":
        return "column is not text"
    if not is_text_like(site.literal):
        return "literal is a number, date or boolean"
    if site.literal not in db.values(site.table, site.column):
        return (
            "LIKE core is not a whole value" if "like" in site.operator else "literal not in column"
        )
    return None


def build_cases(dsns: dict[str, str]) -> tuple[list[Case], Composition]:
    """The perturbation set over the dev gold queries of the databases in `dsns` (db_id -> DSN,
    from `load_dev_databases`), with its composition. Gold queries that do not transpile or do
    not run on PostgreSQL are left out (counted), and so are perturbed queries that do not run.
    """
    composition = Composition()
    cases: list[Case] = []
    seen: set[tuple[str, str, str, QualifiedColumn, str]] = set()
    databases: dict[str, _Database] = {}
    try:
        for index, gold in enumerate(gold_queries("dev")):
            composition.gold_total += 1
            if gold.db_id not in dsns:
                composition.dropped_queries["database not loaded"] += 1
                continue
            if gold.db_id not in databases:
                databases[gold.db_id] = _Database(dsns[gold.db_id])
            db = databases[gold.db_id]
            try:
                tree = parse_sqlite(gold.sql_sqlite)
                gold_pg = render_postgres(tree)
            except TranspileError as exc:
                composition.dropped_queries["transpile failed"] += 1
                composition.errors.append(f"{gold.db_id} #{index}: {exc}")
                continue
            sites = find_sites(tree, {t: set(c) for t, c in db.types.items()})
            if not sites:
                composition.dropped_queries["no text literal in =, IN or LIKE"] += 1
                continue
            usable: list[Site] = []
            for site in sites:
                problem = _site_problem(site, db)
                if problem is None:
                    usable.append(site)
                else:
                    composition.drop_site(problem, gold.db_id, site)
            if not usable:
                composition.dropped_queries["no usable literal"] += 1
                continue
            error = db.error(gold_pg)
            if error is not None:
                composition.dropped_queries["gold fails on PostgreSQL"] += 1
                composition.dropped_sites["gold fails on PostgreSQL"] += len(usable)
                composition.errors.append(f"{gold.db_id} #{index}: {error}: {gold_pg}")
                continue
            composition.gold_usable += 1
            composition.sites_usable += len(usable)
            prepared = _Gold(index, gold.db_id, gold.question, tree, gold_pg)
            for site in usable:
                for case in _variants(prepared, site, db, composition):
                    key = (
                        case.kind,
                        case.db_id,
                        case.sql_postgres,
                        case.expected_column,
                        case.expected_value,
                    )
                    if key in seen:
                        composition.duplicates += 1
                        continue
                    seen.add(key)
                    cases.append(case)
                    composition.by_kind[case.kind] += 1
                    composition.by_db[case.db_id] += 1
                    composition.by_operator[case.operator] += 1
    finally:
        for db in databases.values():
            db.close()
    return cases, composition


@dataclass(frozen=True)
class _Gold:
    index: int
    db_id: str
    question: str
    tree: exp.Expression
    sql_postgres: str


def _variants(gold: _Gold, site: Site, db: _Database, composition: Composition) -> Iterator[Case]:
    index, db_id, question, tree, gold_pg = (
        gold.index,
        gold.db_id,
        gold.question,
        gold.tree,
        gold.sql_postgres,
    )
    assert site.table is not None
    values = db.values(site.table, site.column)
    expected = QualifiedColumn(SCHEMA, site.table, site.column)
    for kind in KINDS:
        seed = seed_of(db_id, site.table, site.column, site.literal, gold_pg, kind)
        column = site.column
        literal: str | None = site.literal
        if kind == "wrong_column":
            siblings = [
                c
                for c, t in db.types[site.table].items()
                if t == "text" and c != site.column and site.literal not in db.values(site.table, c)
            ]
            if not siblings:
                composition.skipped_variants[f"{kind}: no sibling text column"] += 1
                continue
            column = random.Random(seed).choice(siblings)
        elif kind != "original":
            if kind == "case" and "like" in site.operator:
                composition.skipped_variants[f"{kind}: LIKE runs as ILIKE"] += 1
                continue
            literal = perturb(kind, site.literal, seed)
            if literal is None:
                composition.skipped_variants[f"{kind}: does not apply"] += 1
                continue
            if literal in values:
                composition.skipped_variants[f"{kind}: variant is a value too"] += 1
                continue
        assert literal is not None
        perturbed = substitute(tree, site, literal, column if column != site.column else None)
        sql = render_postgres(perturbed)
        error = db.error(sql)
        if error is not None:
            composition.skipped_variants[f"{kind}: perturbed SQL fails"] += 1
            composition.errors.append(f"{db_id} #{index} {kind}: {error}: {sql}")
            continue
        yield Case(
            kind,
            db_id,
            sql,
            expected,
            site.literal,
            site.literal,
            literal,
            QualifiedColumn(SCHEMA, site.table, column),
            site.operator,
            gold_pg,
            question,
            index,
        )


def cases_by_kind(cases: list[Case]) -> dict[str, list[Case]]:
    out: dict[str, list[Case]] = {kind: [] for kind in KINDS}
    for case in cases:
        out[case.kind].append(case)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Composition of the calibration test set.")
    parser.add_argument("--dsn", required=True, help="admin DSN of the PostgreSQL server")
    parser.add_argument("--show", type=int, default=3, help="examples to print per kind")
    args = parser.parse_args(argv)
    dsns = load_dev_databases(args.dsn, progress=lambda line: print(line, file=sys.stderr))
    cases, composition = build_cases(dsns)
    print(composition.summary())
    for reason, examples in composition.examples.items():
        print(f"  {reason}: e.g. {'; '.join(examples)}")
    for error in composition.errors:
        print(f"  error: {error}")
    for kind, some in cases_by_kind(cases).items():
        for case in some[: args.show]:
            column = f"{case.predicate_column.table}.{case.predicate_column.column}"
            print(
                f"{kind:>12}  {case.db_id}  {column} = {case.perturbed_literal!r}"
                f"  (right: {case.expected_column.column} = {case.expected_value!r})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
