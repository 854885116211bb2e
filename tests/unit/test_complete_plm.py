"""PLM-only completion: hand-checked sketches over a small concert_singer-like schema, the
literals of questions, the LIMIT phrases, the sketches that cannot be completed, and every
Spider dev gold sketch (parsed by pglast as one SELECT)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
from pglast import ast, parse_sql

from benchmarks.completion_oracle import gold_literals
from model_export.sketch_labels import Unlabelable, label
from model_export.spider import NOT_FOUND, spider_dir
from proxy.nl2sql.complete_plm import (
    CompletionError,
    Literal,
    complete,
    limit_in_question,
    question_literals,
    quote_identifier,
)
from proxy.nl2sql.joins import implicit_keys
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table, load_spider_schemas
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots

SPIDER = spider_dir()

# (schema, table) -> columns as (name, type, primary key)
_TABLES: dict[tuple[str, str], tuple[tuple[str, str, bool], ...]] = {
    ("public", "stadium"): (
        ("stadium_id", "integer", True),
        ("location", "text", False),
        ("name", "text", False),
        ("capacity", "integer", False),
    ),
    ("public", "singer"): (
        ("singer_id", "integer", True),
        ("name", "text", False),
        ("country", "text", False),
        ("Age", "integer", False),
        ("Song Name", "text", False),
    ),
    ("public", "concert"): (
        ("concert_id", "integer", True),
        ("concert_name", "text", False),
        ("theme", "text", False),
        ("stadium_id", "integer", False),
        ("year", "integer", False),
    ),
    ("public", "singer_in_concert"): (
        ("concert_id", "integer", True),
        ("singer_id", "integer", True),
    ),
    ("sales", "Ticket"): (
        ("ticket_id", "integer", True),
        ("concert_id", "integer", False),
        ("price", "numeric(8,2)", False),
    ),
    ("public", "award"): (
        ("award_id", "integer", True),
        ("title", "text", False),
    ),
    # no declared key: joined to singer by the implicit key record.singer_id -> singer
    ("public", "record"): (
        ("record_id", "integer", True),
        ("singer_id", "integer", False),
        ("label", "text", False),
        ("copies", "varchar(20)", False),  # numbers kept as text
    ),
}

_KEYS = (
    ("concert.stadium_id", "stadium.stadium_id"),
    ("singer_in_concert.concert_id", "concert.concert_id"),
    ("singer_in_concert.singer_id", "singer.singer_id"),
    ("Ticket.concert_id", "concert.concert_id"),
)


def _schema() -> Schema:
    tables = tuple(Table(name, schema=schema) for schema, name in _TABLES)
    columns = tuple(
        Column(table=index, name=name, type=kind, primary_key=primary)
        for index, spec in enumerate(_TABLES.values())
        for name, kind, primary in spec
    )
    bare = Schema(name="concert_singer", tables=tables, columns=columns)
    keys = tuple(ForeignKey(_column(bare, a), _column(bare, b)) for a, b in _KEYS)
    return Schema(name=bare.name, tables=tables, columns=columns, foreign_keys=keys)


def _column(schema: Schema, qualified: str) -> int:
    if qualified == "*":
        return STAR
    table, name = qualified.split(".", 1)
    return schema.column_index(schema.table_index(table), name)


SCHEMA = _schema()
_ITEM = re.compile(r"(?:(\w+)\((.+)\)|(.+))")


def _item(text: str) -> SelectItem:
    """A SelectItem from its text: `count(*)`, `avg(singer.Age)`, `singer.name`."""
    match = _ITEM.fullmatch(text)
    assert match is not None
    aggregate, inner, plain = match.groups()
    return SelectItem(aggregate or "", _column(SCHEMA, inner or plain))


@dataclass(frozen=True)
class Case:
    """A question, its sketch in short form, and the SQL it must complete to."""

    question: str
    select: tuple[str, ...]
    tables: tuple[str, ...]
    expected: str
    keywords: tuple[str, ...] = ()
    where: tuple[tuple[str, str], ...] = ()  # (column, operator); operator "not in*": nested
    where_or: bool = False
    group_by: tuple[str, ...] = ()
    having: tuple[str, ...] = ()
    order_by: tuple[str, ...] = ()
    limit: int | None = None
    literals: tuple[Literal, ...] | None = field(default=None)  # None: from the question

    def sketch(self) -> Sketch:
        return Sketch(
            select=frozenset(_item(text) for text in self.select),
            tables=frozenset(SCHEMA.table_index(name) for name in self.tables),
            keywords=frozenset(self.keywords),
            slots=Slots(
                where=tuple(
                    Predicate(_column(SCHEMA, c), op.rstrip("*"), nested=op.endswith("*"))
                    for c, op in self.where
                ),
                where_or=self.where_or,
                group_by=frozenset(_column(SCHEMA, c) for c in self.group_by),
                having=tuple(_item(text) for text in self.having),
                order_by=tuple(_item(text) for text in self.order_by),
                limit=self.limit,
            ),
        )


CASES = (
    Case(
        "How many singers do we have?",
        ("count(*)",),
        ("singer",),
        "SELECT count(*) FROM singer",
    ),
    Case(
        "Which singers sang in the concert 'Auditions'?",
        ("singer.name",),
        ("singer", "concert"),
        "SELECT t1.name FROM singer AS t1"
        " JOIN singer_in_concert AS t2 ON t1.singer_id = t2.singer_id"
        " JOIN concert AS t3 ON t2.concert_id = t3.concert_id"
        " WHERE t3.concert_name = 'Auditions'",
        keywords=("where",),
        where=(("concert.concert_name", "="),),
    ),
    Case(
        "Which stadiums hosted at least 2 concerts?",
        ("stadium.name",),
        ("stadium", "concert"),
        "SELECT t1.name FROM stadium AS t1 JOIN concert AS t2 ON t1.stadium_id = t2.stadium_id"
        " GROUP BY t1.stadium_id HAVING count(*) >= 2",
        keywords=("group by", "having"),
        group_by=("stadium.stadium_id",),
        having=("count(*)",),
    ),
    Case(
        "Which stadiums hosted at least 2 concerts? (grouped by the stadium's name)",
        ("stadium.name",),
        ("stadium", "concert"),
        # two stadiums may share a name: the groups are the stadiums, by their key
        "SELECT t1.name FROM stadium AS t1 JOIN concert AS t2 ON t1.stadium_id = t2.stadium_id"
        " GROUP BY t1.stadium_id, t1.name HAVING count(*) >= 2",
        keywords=("group by", "having"),
        group_by=("stadium.name",),
        having=("count(*)",),
    ),
    Case(
        # the words before "greater than" name the aggregated column; the slots repeat the item
        "Which countries have singers whose average age is greater than 30?",
        ("singer.country",),
        ("singer",),
        'SELECT country FROM singer GROUP BY country HAVING avg("Age") > 30',
        keywords=("group by", "having"),
        group_by=("singer.country",),
        having=("avg(singer.singer_id)", "avg(singer.singer_id)"),
    ),
    Case(
        "Which locations hosted at least 2 concerts?",
        ("stadium.location",),
        ("stadium", "concert"),
        # a location names no row of stadium: the groups stay the locations
        "SELECT t1.location FROM stadium AS t1"
        " JOIN concert AS t2 ON t1.stadium_id = t2.stadium_id"
        " GROUP BY t1.location HAVING count(*) >= 2",
        keywords=("group by", "having"),
        group_by=("stadium.location",),
        having=("count(*)",),
    ),
    Case(
        "How many concerts per theme, by the stadium's location?",
        ("stadium.location", "count(*)"),
        ("stadium", "concert"),
        # the slot head grouped by concert.theme, which identifies no shown row: dropped
        "SELECT t1.location, count(*) FROM stadium AS t1"
        " JOIN concert AS t2 ON t1.stadium_id = t2.stadium_id GROUP BY t1.location",
        keywords=("group by",),
        group_by=("concert.theme",),
    ),
    Case(
        "Which singers are younger than 30?",
        ("singer.name",),
        ("singer",),
        # the slot head said >; the question says "younger than"
        'SELECT name FROM singer WHERE "Age" < 30',
        keywords=("where",),
        where=(("singer.Age", ">"),),
    ),
    Case(
        "Which singers are not from 'France'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country <> 'France'",
        keywords=("where",),
        where=(("singer.country", "="),),
    ),
    Case(
        'Which singers are not from "France"?',
        ("singer.name",),
        ("singer",),
        # the slot head said LIKE: the "not" still holds
        "SELECT name FROM singer WHERE country NOT ILIKE '%France%'",
        keywords=("where",),
        where=(("singer.country", "like"),),
    ),
    Case(
        "Which singers have a name that contains the letter 'e'?",
        ("singer.name",),
        ("singer",),
        # the slot head said =: "contains the letter" is a pattern
        "SELECT name FROM singer WHERE name ILIKE '%e%'",
        keywords=("where",),
        where=(("singer.name", "="),),
    ),
    Case(
        "Which singers have an age equal to 40?",
        ("singer.name",),
        ("singer",),
        # the slot head said >; "equal to" says =
        'SELECT name FROM singer WHERE "Age" = 40',
        keywords=("where",),
        where=(("singer.Age", ">"),),
    ),
    Case(
        "Which singers are no older than 40?",
        ("singer.name",),
        ("singer",),
        # the slot head said >; "no older than" says <=
        'SELECT name FROM singer WHERE "Age" <= 40',
        keywords=("where",),
        where=(("singer.Age", ">"),),
    ),
    Case(
        "Which singers are not younger than 30?",
        ("singer.name",),
        ("singer",),
        'SELECT name FROM singer WHERE "Age" >= 30',
        keywords=("where",),
        where=(("singer.Age", "<"),),
    ),
    Case(
        "Which singers are from 'France', not older than 40?",
        ("singer.name",),
        ("singer",),
        # "not" before the number, not before the value: = stays
        "SELECT name FROM singer WHERE country = 'France' AND \"Age\" <= 40",
        keywords=("where",),
        where=(("singer.country", "="), ("singer.Age", "<=")),
    ),
    Case(
        "Which stadium hosted the most concerts?",
        ("stadium.name",),
        ("stadium", "concert"),
        "SELECT t1.name FROM stadium AS t1 JOIN concert AS t2 ON t1.stadium_id = t2.stadium_id"
        " GROUP BY t2.stadium_id, t1.name ORDER BY count(*) DESC LIMIT 1",
        keywords=("group by", "order by", "desc", "limit"),
        group_by=("concert.stadium_id",),
        order_by=("count(*)",),
        limit=1,
    ),
    Case(
        "List the singers by age from high to low.",
        ("singer.name",),
        ("singer",),
        # the keywords said nothing of DESC; the question says it in words
        'SELECT name FROM singer ORDER BY "Age" DESC',
        keywords=("order by",),
        order_by=("singer.Age",),
    ),
    Case(
        "List the singers' names in reverse alphabetical order.",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer ORDER BY name DESC",
        keywords=("order by", "asc"),
        order_by=("singer.name",),
    ),
    Case(
        "What are the names of the 3 oldest singers?",
        ("singer.name",),
        ("singer",),
        'SELECT name FROM singer ORDER BY "Age" DESC LIMIT 3',
        keywords=("order by", "desc", "limit"),
        order_by=("singer.Age",),
        limit=1,
    ),
    Case(
        "Which of the largest stadiums had the fewest concerts?",
        ("stadium.name",),
        ("stadium",),
        # the superlatives disagree: the sketch's direction stands
        "SELECT name FROM stadium ORDER BY capacity DESC LIMIT 1",
        keywords=("order by", "desc", "limit"),
        order_by=("stadium.capacity",),
        limit=1,
    ),
    Case(
        "List the top five stadiums by capacity.",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium ORDER BY capacity DESC LIMIT 5",
        keywords=("order by", "desc", "limit"),
        order_by=("stadium.capacity",),
    ),
    Case(
        "Names of the top 3 singers older than 30, youngest first",
        ("singer.name",),
        ("singer",),
        'SELECT name FROM singer WHERE "Age" > 30 ORDER BY "Age" LIMIT 3',
        keywords=("where", "order by", "asc", "limit"),
        where=(("singer.Age", ">"),),
        order_by=("singer.Age",),
        limit=1,
    ),
    Case(
        "Names of singers from 'France' older than 30",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country = 'France' AND \"Age\" > 30",
        keywords=("where",),
        where=(("singer.country", "="), ("singer.Age", ">")),
    ),
    Case(
        "Names of singers older than 30 from 'France'",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country = 'France' AND \"Age\" > 30",
        keywords=("where",),
        where=(("singer.country", "="), ("singer.Age", ">")),
    ),
    Case(
        "Singers from 'France' or 'Japan'",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country = 'France' OR country = 'Japan'",
        keywords=("where",),
        where=(("singer.country", "="), ("singer.country", "=")),
        where_or=True,
    ),
    Case(
        "Concerts held between 2014 and 2010",
        ("concert.concert_name",),
        ("concert",),
        "SELECT concert_name FROM concert WHERE year BETWEEN 2010 AND 2014",
        keywords=("where",),
        where=(("concert.year", "between"),),
    ),
    Case(
        "Which songs have 'Love' in their name?",
        ("singer.Song Name",),
        ("singer",),
        """SELECT "Song Name" FROM singer WHERE "Song Name" ILIKE '%Love%'""",
        keywords=("where",),
        where=(("singer.Song Name", "like"),),
    ),
    Case(
        "Which concerts do not have the theme 'Free%'?",
        ("concert.concert_name",),
        ("concert",),
        "SELECT concert_name FROM concert WHERE theme NOT ILIKE 'Free%'",
        keywords=("where",),
        where=(("concert.theme", "not like"),),
    ),
    Case(
        "Names of stadiums that had no concert",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium WHERE stadium_id NOT IN (SELECT stadium_id FROM concert)",
        keywords=("where", "nested"),
        where=(("stadium.stadium_id", "not in*"),),
    ),
    Case(
        "Stadiums whose capacity is above the average",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium WHERE capacity > (SELECT avg(capacity) FROM stadium)",
        keywords=("where", "nested"),
        where=(("stadium.capacity", ">*"),),
    ),
    Case(
        # grouping by concert_id would put one concert in each group: the shown stadium_id,
        # a key of stadium, is what the groups are
        "Which stadium ids have more than 2 concerts?",
        ("concert.stadium_id",),
        ("concert",),
        "SELECT stadium_id FROM concert GROUP BY stadium_id HAVING count(*) > 2",
        keywords=("group by", "having"),
        group_by=("concert.concert_id",),
        having=("count(*)",),
    ),
    Case(
        # the slot head said =; "before" says <
        "Which concerts took place before 2014?",
        ("concert.concert_name",),
        ("concert",),
        "SELECT concert_name FROM concert WHERE year < 2014",
        keywords=("where",),
        where=(("concert.year", "="),),
    ),
    Case(
        # the slot head said >; "under age" says <
        "Which countries have singers under age 30?",
        ("singer.country",),
        ("singer",),
        'SELECT country FROM singer WHERE "Age" < 30',
        keywords=("where",),
        where=(("singer.Age", ">"),),
    ),
    Case(
        # the slot head said >; the question says between
        "Stadiums with a capacity between 5000 and 10000",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium WHERE capacity BETWEEN 5000 AND 10000",
        keywords=("where",),
        where=(("stadium.capacity", ">"),),
    ),
    Case(
        # two comparisons of the one column: one range
        "Stadiums with a capacity between 5000 and 10000",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium WHERE capacity BETWEEN 5000 AND 10000",
        keywords=("where",),
        where=(("stadium.capacity", ">"), ("stadium.capacity", ">")),
    ),
    Case(
        "Which singers are from 'France' or 'Spain'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country IN ('France', 'Spain')",
        keywords=("where",),
        where=(("singer.country", "="),),
    ),
    Case(
        "Which singers are not from 'France' or 'Spain'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country NOT IN ('France', 'Spain')",
        keywords=("where",),
        where=(("singer.country", "="),),
    ),
    Case(
        # "or the country of" between the two values: still a list of alternatives
        "Which singers are from either the country of 'France' or the country of 'Spain'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country IN ('France', 'Spain')",
        keywords=("where",),
        where=(("singer.country", "="),),
    ),
    Case(
        # the value taken first is the second the question says ("Dutch or English")
        "Which singers are from 'Spain' or 'France'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country IN ('France', 'Spain')",
        keywords=("where",),
        where=(("singer.country", "="),),
        literals=(Literal("France", "string"), Literal("Spain", "string")),
    ),
    Case(
        # two numbers said as alternatives, whatever comparison the slot head chose
        "Which singers are aged either 32 or 33?",
        ("singer.name",),
        ("singer",),
        'SELECT name FROM singer WHERE "Age" IN (32, 33)',
        keywords=("where",),
        where=(("singer.age", ">"),),
    ),
    Case(
        # a comparison the question says stays one: the second number is left over
        "Which singers are older than 32 or 33?",
        ("singer.name",),
        ("singer",),
        'SELECT name FROM singer WHERE "Age" > 32',
        keywords=("where",),
        where=(("singer.age", ">"),),
    ),
    Case(
        # a number compared in words goes to the numeric column those words name, not to the
        # text column the slot head chose
        "Which singers have an age greater than 30?",
        ("singer.name",),
        ("singer",),
        'SELECT name FROM singer WHERE "Age" > 30',
        keywords=("where",),
        where=(("singer.country", "="),),
    ),
    Case(
        # and from a numeric column the words do not name to one they do
        "Which concerts have a year greater than 2010?",
        ("concert.concert_name",),
        ("concert",),
        "SELECT concert_name FROM concert WHERE year > 2010",
        keywords=("where",),
        where=(("concert.stadium_id", ">"),),
    ),
    Case(
        # "2014 or after" is at least 2014
        "Which concerts were held in 2014 or after?",
        ("concert.concert_name",),
        ("concert",),
        "SELECT concert_name FROM concert WHERE year >= 2014",
        keywords=("where",),
        where=(("concert.year", "="),),
    ),
    Case(
        # a LIKE goes to the text column named before "containing", not the slot head's
        "Which singers come from a country containing the letter 'e'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country ILIKE '%e%'",
        keywords=("where",),
        where=(("singer.name", "like"),),
    ),
    Case(
        # a BETWEEN with one number the question compares is that comparison
        "Stadiums with a capacity less than 5000",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium WHERE capacity < 5000",
        keywords=("where",),
        where=(("stadium.capacity", "between"),),
    ),
    Case(
        # "and" between the values is not a list of alternatives: the second is left over
        "Which singers are from 'France' and sing 'Hello'?",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country = 'France'",
        keywords=("where",),
        where=(("singer.country", "="),),
    ),
    Case(
        # a comparison the model did not mark as nested, with no number to compare with
        "Which stadiums are smaller than the average?",
        ("stadium.name",),
        ("stadium",),
        "SELECT name FROM stadium WHERE capacity < (SELECT avg(capacity) FROM stadium)",
        keywords=("where",),
        where=(("stadium.capacity", ">"),),
    ),
    Case(
        "What are the different countries of singers above age 20?",
        ("singer.country",),
        ("singer",),
        'SELECT DISTINCT country FROM singer WHERE "Age" > 20',
        keywords=("where", "distinct"),
        where=(("singer.Age", ">"),),
    ),
    Case(
        "How many different countries do singers come from?",
        ("count(singer.country)",),
        ("singer",),
        "SELECT count(DISTINCT country) FROM singer",
        keywords=("distinct",),
    ),
    Case(
        "How many singers are from each country?",
        ("singer.country", "count(*)"),
        ("singer",),
        "SELECT country, count(*) FROM singer GROUP BY country",
        keywords=("group by",),
    ),
    Case(
        "Which countries have more than one singer?",
        ("singer.country",),
        ("singer",),
        "SELECT country FROM singer GROUP BY country HAVING count(*) > 1",
        keywords=("group by", "having"),
        group_by=("singer.country",),
        having=("count(*)",),
    ),
    Case(
        "Which countries do several singers share?",
        ("singer.country",),
        ("singer",),
        "SELECT country FROM singer GROUP BY country HAVING count(*) > 1",
        keywords=("group by", "having"),
        group_by=("singer.country",),
        having=("count(*)",),
    ),
    Case(
        "Which countries with singers under 40 have between 2 and 5 singers?",
        ("singer.country",),
        ("singer",),
        'SELECT country FROM singer WHERE "Age" < 40 GROUP BY country'
        " HAVING count(*) BETWEEN 2 AND 5",
        keywords=("where", "group by", "having"),
        where=(("singer.Age", "<"),),
        group_by=("singer.country",),
        having=("count(*)",),
    ),
    Case(
        "What is the name and the age of the oldest singer?",
        ("singer.name", "max(singer.Age)"),
        ("singer",),
        'SELECT name, max("Age") FROM singer GROUP BY name ORDER BY max("Age") DESC LIMIT 1',
    ),
    Case(
        "What is the average ticket price of the concert 'Auditions'?",
        ("avg(Ticket.price)",),
        ("Ticket",),
        'SELECT avg(t2.price) FROM concert AS t1 JOIN sales."Ticket" AS t2'
        " ON t1.concert_id = t2.concert_id WHERE t1.concert_name = 'Auditions'",
        keywords=("where",),
        where=(("concert.concert_name", "="),),
    ),
    Case(
        "Which labels recorded the singer 'Joe Sharp'?",
        ("record.label",),
        ("record",),
        "SELECT t2.label FROM singer AS t1 JOIN record AS t2 ON t1.singer_id = t2.singer_id"
        " WHERE t1.name = 'Joe Sharp'",
        keywords=("where",),
        where=(("singer.name", "="),),
    ),
    Case(
        "Countries with singers above 40 and singers below 30",
        ("singer.country",),
        ("singer",),
        # the right side: the same query with the next number, its operator from "below"
        'SELECT country FROM singer WHERE "Age" > 40'
        ' INTERSECT SELECT country FROM singer WHERE "Age" < 30',
        keywords=("where", "intersect"),
        where=(("singer.Age", ">"),),
    ),
    Case(
        "Which countries have both 'rock' and 'jazz' concerts?",
        ("singer.country",),
        ("singer", "concert"),
        "SELECT t1.country FROM singer AS t1"
        " JOIN singer_in_concert AS t2 ON t1.singer_id = t2.singer_id"
        " JOIN concert AS t3 ON t2.concert_id = t3.concert_id WHERE t3.theme = 'rock'"
        " INTERSECT SELECT t1.country FROM singer AS t1"
        " JOIN singer_in_concert AS t2 ON t1.singer_id = t2.singer_id"
        " JOIN concert AS t3 ON t2.concert_id = t3.concert_id WHERE t3.theme = 'jazz'",
        keywords=("where", "intersect"),
        where=(("concert.theme", "="),),
    ),
    Case(
        "Singers from 'France' (one value: no right side to write)",
        ("singer.name",),
        ("singer",),
        "SELECT name FROM singer WHERE country = 'France'",
        keywords=("where", "except"),
        where=(("singer.country", "="),),
    ),
    Case(
        "Concerts of 2014 (literals given, e.g. by calibration)",
        ("concert.concert_name", "concert.theme"),
        ("concert",),
        "SELECT concert_name, theme FROM concert WHERE year = 2014 AND theme = '2014'",
        keywords=("where",),
        where=(("concert.year", "="), ("concert.theme", "=")),
        literals=(Literal("2014", "string"), Literal(2014, "number")),
    ),
    Case(
        "How many singers sang in a concert? (a singer of two concerts is one singer)",
        ("count(*)",),
        ("singer", "singer_in_concert"),
        "SELECT count(DISTINCT t1.singer_id) FROM singer AS t1"
        " JOIN singer_in_concert AS t2 ON t1.singer_id = t2.singer_id",
    ),
    Case(
        "How many singers sang in a concert of 2014? (singer left out: its key counts it)",
        ("count(*)",),
        ("singer_in_concert", "concert"),
        "SELECT count(DISTINCT t2.singer_id) FROM concert AS t1"
        " JOIN singer_in_concert AS t2 ON t1.concert_id = t2.concert_id WHERE t1.year = 2014",
        keywords=("where",),
        where=(("concert.year", "="),),
    ),
    Case(
        "How many singers sang? (a table named in the plural is counted by its key)",
        ("count(*)",),
        ("singer_in_concert",),
        "SELECT count(DISTINCT singer_id) FROM singer_in_concert",
    ),
    Case(
        "How many concert appearances did singers make? (a singular name counts no table)",
        ("count(*)",),
        ("singer_in_concert",),
        "SELECT count(*) FROM singer_in_concert",
    ),
    Case(
        "Count the number of concert appearances of singers (no table counted)",
        ("count(*)",),
        ("singer", "singer_in_concert"),
        "SELECT count(*) FROM singer AS t1"
        " JOIN singer_in_concert AS t2 ON t1.singer_id = t2.singer_id",
    ),
    Case(
        "What is the average number of copies of a record? (numbers kept as text)",
        ("avg(record.copies)",),
        ("record",),
        "SELECT avg(CASE WHEN copies"
        " ~ '^\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*$'"
        " THEN copies::numeric END) FROM record",
    ),
    Case(
        # numbers kept as text, compared with their average: both sides read as numbers
        "How many records have fewer copies than the average?",
        ("count(*)",),
        ("record",),
        "SELECT count(*) FROM record WHERE CASE WHEN copies ~ '^\\s*[-+]?([0-9]+\\.?[0-9]*|"
        "\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*$' THEN copies::numeric END < (SELECT avg(CASE WHEN"
        " copies ~ '^\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*$' THEN"
        " copies::numeric END) FROM record)",
        keywords=("where", "nested"),
        where=(("record.copies", "<"),),
    ),
)


@pytest.mark.parametrize("case", CASES, ids=[case.question for case in CASES])
def test_complete(case: Case) -> None:
    literals = question_literals(case.question) if case.literals is None else case.literals
    sql = complete(case.sketch(), SCHEMA, literals, question=case.question)
    assert sql == case.expected
    _assert_one_select(sql)


def test_enough_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is the singer's name with 'Hey' in it?", ["Hey"]),
        ("older than 30 and younger than 40.5", [30, 40.5]),
        ("population above 1,000,000", [1000000]),
        ('Which country does Airline "JetBlue Airways" belong to?', ["JetBlue Airways"]),
        ("\u201cSmith\u201d and \u2018Jones\u2019, not Brazil\u2019s", ["Smith", "Jones"]),
        ("hometown is not `` Little Lever Urban District '' .", ["Little Lever Urban District"]),
        ("the students' names and John's age", []),
        ("more than one pet, at least two, three or more, more than once", [1, 2, 3, 1]),
        ("documents with between one and two paragraphs", [1, 2]),
        ("more than a single document", [1]),
        ("with text 'Korea ' in it", ["Korea "]),
        ("model 'A4 2014' made in 2015", ["A4 2014", 2015]),
        ("below -5 degrees", [-5]),
        ("which one is the oldest", []),
    ],
)
def test_question_literals(question: str, expected: list[object]) -> None:
    found = question_literals(question)
    assert [literal.value for literal in found] == expected
    for literal in found:
        assert literal.kind == ("string" if isinstance(literal.value, str) else "number")
        assert literal.span is not None


def test_literal_equality_ignores_span() -> None:
    assert Literal("x", "string", (0, 3)) == Literal("x", "string")


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("List the top 3 stadiums", 3),
        ("the first five concerts", 5),
        ("the 3 youngest winners", 3),
        ("What are 3 most highly rated episodes?", 3),
        ("Return the names of the 3 countries with the fewest people.", 3),
        ("top ten singers", 10),
        ("For all of the 4 cylinder cars, which model has the most horsepower?", None),
        ("Which singer is the oldest?", None),
    ],
)
def test_limit_in_question(question: str, expected: int | None) -> None:
    found = limit_in_question(question)
    assert (found[0] if found else None) == expected


@pytest.mark.parametrize(
    ("name", "quoted"),
    [
        ("name", "name"),
        ("year", "year"),
        ("Age", '"Age"'),
        ("Song Name", '"Song Name"'),
        ("user", '"user"'),
        ("order", '"order"'),
        ("position", '"position"'),
        ('say "hi"', '"say ""hi"""'),
        ("1st", '"1st"'),
    ],
)
def test_quote_identifier(name: str, quoted: str) -> None:
    assert quote_identifier(name) == quoted


@pytest.mark.parametrize(
    ("sketch", "literals", "reason"),
    [
        (
            Sketch(
                frozenset({SelectItem("", _column(SCHEMA, "singer.name"))}),
                frozenset({SCHEMA.table_index("singer")}),
                frozenset({"where"}),
                Slots(where=(Predicate(_column(SCHEMA, "singer.country"), "="),)),
            ),
            (),
            "no value",
        ),
        (
            Sketch(
                frozenset({SelectItem("", _column(SCHEMA, "singer.name"))}),
                frozenset({SCHEMA.table_index("singer")}),
                frozenset({"where"}),
                Slots(where=(Predicate(_column(SCHEMA, "singer.Age"), "between"),)),
            ),
            (Literal(30, "number"),),
            "no value",
        ),
        (
            Sketch(
                frozenset({SelectItem("", _column(SCHEMA, "award.title"))}),
                frozenset({SCHEMA.table_index("award"), SCHEMA.table_index("singer")}),
                frozenset(),
            ),
            (),
            "tables not connected",
        ),
        (
            Sketch(frozenset(), frozenset({SCHEMA.table_index("singer")}), frozenset()),
            (),
            "unsupported item",
        ),
        (
            Sketch(frozenset({SelectItem("avg", STAR)}), frozenset({0}), frozenset()),
            (),
            "unsupported item",
        ),
    ],
    ids=["no literal", "between with one", "no key path", "empty SELECT", "avg(*)"],
)
def test_cannot_complete(sketch: Sketch, literals: tuple[Literal, ...], reason: str) -> None:
    with pytest.raises(CompletionError) as caught:
        complete(sketch, SCHEMA, literals)
    assert caught.value.reason == reason


def test_comparison_number_is_not_an_equality_value() -> None:
    """A number after "more than" is a HAVING value, not the value of a text = predicate."""
    case = Case(
        "Which countries in europe have more than 3 singers?",
        ("singer.country",),
        ("singer",),
        "",
        keywords=("where", "group by", "having"),
        where=(("singer.country", "="),),
        group_by=("singer.country",),
        having=("count(*)",),
    )
    with pytest.raises(CompletionError, match="no value"):
        complete(case.sketch(), SCHEMA, question_literals(case.question), question=case.question)


def _assert_one_select(sql: str) -> None:
    statements = parse_sql(sql)
    assert len(statements) == 1
    assert isinstance(statements[0].stmt, ast.SelectStmt)


@pytest.fixture(scope="module")
def dev() -> list[tuple[Schema, dict[str, str]]]:
    if not (SPIDER / "dev.json").is_file() or not (SPIDER / "tables.json").is_file():
        pytest.skip(NOT_FOUND)
    schemas = load_spider_schemas(SPIDER / "tables.json")
    examples = json.loads((SPIDER / "dev.json").read_text(encoding="utf-8"))
    return [(schemas[example["db_id"]], example) for example in examples]


def test_every_dev_gold_sketch_completes(dev: list[tuple[Schema, dict[str, str]]]) -> None:
    """With its own literals, every labelled dev gold sketch completes to one SELECT; with only
    the question's literals, it completes or lacks a value."""
    completed = lacking = 0
    for schema, example in dev:
        try:
            sketch = label(example["query"], schema)
        except Unlabelable:
            continue
        question = example["question"]
        sql = complete(sketch, schema, gold_literals(example["query"]), question=question)
        _assert_one_select(sql)
        completed += 1
        try:
            sql = complete(sketch, schema, question_literals(question), question=question)
        except CompletionError as error:
            assert error.reason == "no value", (question, error)
            lacking += 1
            continue
        _assert_one_select(sql)
    assert completed >= 1000
    assert lacking < completed / 4


@pytest.mark.parametrize(
    ("db_id", "column", "referenced"),
    [
        ("flight_2", "flights.SourceAirport", "airports.AirportCode"),  # ends with a table's name
        ("car_1", "model_list.Maker", "car_makers.Id"),  # a table's last word
        ("car_1", "car_names.Model", "model_list.Model"),  # a table's first word, namesake
        ("flight_4", "routes.dst_apid", "airports.apid"),  # a role before the key's name
        ("company_office", "Office_locations.building_id", "buildings.id"),  # X_id -> Xs.id
        ("customer_deliveries", "Order_Deliveries.driver_employee_id", "Employees.employee_id"),
    ],
)
def test_implicit_keys_find_undeclared_foreign_keys(
    db_id: str, column: str, referenced: str
) -> None:
    """With tables.json's declared keys hidden, the implicit keys find these."""
    if not (SPIDER / "tables.json").is_file():
        pytest.skip(NOT_FOUND)
    schema = load_spider_schemas(SPIDER / "tables.json")[db_id]
    bare = Schema(name=schema.name, tables=schema.tables, columns=schema.columns)
    found = {(bare.qualified(k.column), bare.qualified(k.referenced)) for k in implicit_keys(bare)}
    assert (_qualified(bare, column), _qualified(bare, referenced)) in found


def test_implicit_keys_leave_generic_words_alone() -> None:
    """`charge_type` says nothing of which table it points to (not `Treatment_Types`), nor
    does `BlockCode` point to every table whose key is `Code`."""
    if not (SPIDER / "tables.json").is_file():
        pytest.skip(NOT_FOUND)
    schemas = load_spider_schemas(SPIDER / "tables.json")
    for db_id, name in (("dog_kennels", "Charges.charge_type"), ("hospital_1", "Room.BlockCode")):
        schema = schemas[db_id]
        bare = Schema(name=schema.name, tables=schema.tables, columns=schema.columns)
        column = _column_of(bare, name)
        assert not [k for k in implicit_keys(bare) if k.column == column], db_id


def _column_of(schema: Schema, qualified: str) -> int:
    table, name = qualified.split(".", 1)
    return schema.column_index(schema.table_index(table), name)


def _qualified(schema: Schema, qualified: str) -> str:
    return schema.qualified(_column_of(schema, qualified))


CITIES = Schema(
    "cities",
    (Table("city"),),
    (
        Column(0, "id", "integer", primary_key=True),
        Column(0, "district"),
        Column(0, "population", "integer"),
    ),
)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # "how many people" of a table with a population: its sum
        (
            "How many people live in 'Gelderland' district?",
            "SELECT sum(population) FROM city WHERE district = 'Gelderland'",
        ),
        # how many cities: the rows
        (
            "How many cities are in 'Gelderland' district?",
            "SELECT count(*) FROM city WHERE district = 'Gelderland'",
        ),
    ],
)
def test_people_counted_as_a_population(question: str, expected: str) -> None:
    sketch = Sketch(
        select=frozenset({SelectItem("count", STAR)}),
        tables=frozenset({0}),
        keywords=frozenset({"where"}),
        slots=Slots(where=(Predicate(1, "="),)),
    )
    assert complete(sketch, CITIES, question_literals(question), question=question) == expected
