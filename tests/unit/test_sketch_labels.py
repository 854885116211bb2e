"""Sketch labels of Spider gold queries: hand-checked queries over a small concert_singer-like
schema, the queries that cannot be labelled, and all of Spider dev against Spider's own parse."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from model_export.sketch_labels import Unlabelable, label, label_examples, spider_parts
from model_export.spider import NOT_FOUND, spider_dir
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table, load_spider_schemas
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots

SPIDER = spider_dir()

_TABLES = {
    "stadium": ("Stadium_ID", "Location", "Name", "Capacity", "Highest", "Lowest", "Average"),
    "singer": ("Singer_ID", "Name", "Country", "Song_Name", "Song release year", "Age"),
    "concert": ("concert_ID", "concert_Name", "Theme", "Stadium_ID", "Year"),
    "singer_in_concert": ("concert_ID", "Singer_ID"),
}


def _schema() -> Schema:
    tables = tuple(Table(name) for name in _TABLES)
    columns = tuple(
        Column(table=index, name=name)
        for index, names in enumerate(_TABLES.values())
        for name in names
    )
    schema = Schema(name="concert_singer", tables=tables, columns=columns)
    keys = (
        ("concert.Stadium_ID", "stadium.Stadium_ID"),
        ("singer_in_concert.concert_ID", "concert.concert_ID"),
        ("singer_in_concert.Singer_ID", "singer.Singer_ID"),
    )
    return Schema(
        name=schema.name,
        tables=tables,
        columns=columns,
        foreign_keys=tuple(ForeignKey(_index(schema, a), _index(schema, b)) for a, b in keys),
    )


def _index(schema: Schema, qualified: str) -> int:
    """The global index of "table.column", STAR for "*"."""
    if qualified == "*":
        return STAR
    table, column = qualified.split(".", 1)
    return schema.column_index(schema.table_index(table), column)


SCHEMA = _schema()


@dataclass(frozen=True)
class Case:
    """An expected label written with names: items are (aggregate, "table.column" or "*")."""

    query: str
    select: set[tuple[str, str]]
    tables: set[str]
    keywords: set[str] = field(default_factory=set)
    where: tuple[tuple[str, str, bool], ...] = ()
    where_or: bool = False
    group_by: set[str] = field(default_factory=set)
    having: tuple[tuple[str, str], ...] = ()
    order_by: tuple[tuple[str, str], ...] = ()
    limit: int | None = None

    def sketch(self) -> Sketch:
        def item(pair: tuple[str, str]) -> SelectItem:
            return SelectItem(pair[0], _index(SCHEMA, pair[1]))

        return Sketch(
            select=frozenset(item(pair) for pair in self.select),
            tables=frozenset(SCHEMA.table_index(name) for name in self.tables),
            keywords=frozenset(self.keywords),
            slots=Slots(
                where=tuple(
                    Predicate(_index(SCHEMA, column), operator, nested)
                    for column, operator, nested in self.where
                ),
                where_or=self.where_or,
                group_by=frozenset(_index(SCHEMA, column) for column in self.group_by),
                having=tuple(item(pair) for pair in self.having),
                order_by=tuple(item(pair) for pair in self.order_by),
                limit=self.limit,
            ),
        )


CASES = [
    Case("SELECT count(*) FROM singer", {("count", "*")}, {"singer"}),
    Case(
        "SELECT T2.Name, T1.concert_Name FROM concert AS T1 JOIN stadium AS T2"
        " ON T1.Stadium_ID = T2.Stadium_ID",
        {("", "stadium.Name"), ("", "concert.concert_Name")},
        {"concert", "stadium"},
    ),
    Case(
        "SELECT count(DISTINCT Country) FROM singer",
        {("count", "singer.Country")},
        {"singer"},
        {"distinct"},
    ),
    Case(
        "SELECT DISTINCT country FROM singer WHERE age > 20",
        {("", "singer.Country")},
        {"singer"},
        {"distinct", "where"},
        where=(("singer.Age", ">", False),),
    ),
    Case(
        "SELECT T2.name, count(*) FROM concert AS T1 JOIN stadium AS T2"
        " ON T1.stadium_id = T2.stadium_id GROUP BY T1.stadium_id HAVING count(*) >= 2",
        {("", "stadium.Name"), ("count", "*")},
        {"concert", "stadium"},
        {"group by", "having"},
        group_by={"concert.Stadium_ID"},
        having=(("count", "*"),),
    ),
    Case(
        "SELECT name, capacity FROM stadium ORDER BY average DESC LIMIT 1",
        {("", "stadium.Name"), ("", "stadium.Capacity")},
        {"stadium"},
        {"order by", "desc", "limit"},
        order_by=(("", "stadium.Average"),),
        limit=1,
    ),
    Case(
        "SELECT name FROM singer ORDER BY age, name",
        {("", "singer.Name")},
        {"singer"},
        {"order by", "asc"},
        order_by=(("", "singer.Age"), ("", "singer.Name")),
    ),
    Case(
        'SELECT name FROM singer WHERE country = "France" AND age > 30 OR age < 20',
        {("", "singer.Name")},
        {"singer"},
        {"where"},
        where=(
            ("singer.Country", "=", False),
            ("singer.Age", ">", False),
            ("singer.Age", "<", False),
        ),
        where_or=True,
    ),
    Case(
        "SELECT location, name FROM stadium WHERE capacity BETWEEN 5000 AND 10000"
        " AND location <> 'Ayr' AND name != 'x'",
        {("", "stadium.Location"), ("", "stadium.Name")},
        {"stadium"},
        {"where"},
        where=(
            ("stadium.Capacity", "between", False),
            ("stadium.Location", "!=", False),
            ("stadium.Name", "!=", False),
        ),
    ),
    Case(
        "SELECT song_name FROM singer WHERE song_name LIKE '%Hey%' AND name NOT LIKE \"%a%\"",
        {("", "singer.Song_Name")},
        {"singer"},
        {"where"},
        where=(("singer.Song_Name", "like", False), ("singer.Name", "not like", False)),
    ),
    Case(
        "SELECT name FROM stadium WHERE stadium_id NOT IN (SELECT stadium_id FROM concert)",
        {("", "stadium.Name")},
        {"stadium"},
        {"where", "nested"},
        where=(("stadium.Stadium_ID", "not in", True),),
    ),
    Case(
        "SELECT name FROM singer WHERE country IN ('France', 'Spain')"
        " AND age > (SELECT avg(age) FROM singer)",
        {("", "singer.Name")},
        {"singer"},
        {"where", "nested"},
        where=(("singer.Country", "in", False), ("singer.Age", ">", True)),
    ),
    Case(
        "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id"
        " WHERE T1.Year = 2014 INTERSECT SELECT T2.name FROM concert AS T1 JOIN stadium AS T2"
        " ON T1.stadium_id = T2.stadium_id WHERE T1.Year = 2015",
        {("", "stadium.Name")},
        {"concert", "stadium"},
        {"where", "intersect"},
        where=(("concert.Year", "=", False),),
    ),
    Case(
        "SELECT name FROM stadium EXCEPT SELECT T2.name FROM concert AS T1 JOIN stadium AS T2"
        " ON T1.stadium_id = T2.stadium_id WHERE T1.year = 2014",
        {("", "stadium.Name")},
        {"stadium"},
        {"except"},
    ),
    Case(
        "SELECT country FROM singer WHERE age > 40 UNION SELECT country FROM singer WHERE age < 30",
        {("", "singer.Country")},
        {"singer"},
        {"where", "union"},
        where=(("singer.Age", ">", False),),
    ),
    Case(
        'SELECT "Name", `Song release year` FROM "SINGER" s WHERE S.AGE >= 18',
        {("", "singer.Name"), ("", "singer.Song release year")},
        {"singer"},
        {"where"},
        where=(("singer.Age", ">=", False),),
    ),
    Case(
        "SELECT concert_name, theme, count(*) FROM singer_in_concert AS t1 JOIN concert AS t2"
        " ON t1.concert_id = t2.concert_id GROUP BY t2.concert_id",
        {("", "concert.concert_Name"), ("", "concert.Theme"), ("count", "*")},
        {"singer_in_concert", "concert"},
        {"group by"},
        group_by={"concert.concert_ID"},
    ),
    Case(
        "SELECT max(capacity), avg(capacity), min(T1.capacity), sum(average) FROM stadium T1",
        {
            ("max", "stadium.Capacity"),
            ("avg", "stadium.Capacity"),
            ("min", "stadium.Capacity"),
            ("sum", "stadium.Average"),
        },
        {"stadium"},
    ),
    Case(
        "SELECT country, count(*) AS n FROM singer GROUP BY country ORDER BY n DESC LIMIT 3",
        {("", "singer.Country"), ("count", "*")},
        {"singer"},
        {"group by", "order by", "desc", "limit"},
        group_by={"singer.Country"},
        order_by=(("count", "*"),),
        limit=3,
    ),
    Case(
        "SELECT * FROM singer AS a JOIN singer AS b ON a.singer_id = b.singer_id",
        {("", "*")},
        {"singer"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.query[:60])
def test_label(case: Case) -> None:
    assert label(case.query, SCHEMA) == case.sketch()


UNLABELABLE = [
    ("SELECT count(*) FROM (SELECT name FROM singer GROUP BY country)", "subquery in FROM"),
    ("SELECT name FROM singer JOIN (SELECT 1) AS x", "subquery in FROM"),
    ("WITH a AS (SELECT name FROM singer) SELECT name FROM a", "subquery in FROM"),
    ("SELECT highest - lowest FROM stadium", "arithmetic in SELECT"),
    ("SELECT avg(highest - lowest) FROM stadium", "arithmetic in SELECT"),
    ("SELECT name FROM stadium ORDER BY highest - lowest", "arithmetic in ORDER BY"),
    ("SELECT name FROM stadium WHERE highest - lowest > 3", "arithmetic in WHERE"),
    ("SELECT upper(name) FROM singer", "function or expression in SELECT"),
    ("SELECT (SELECT 1) FROM singer", "subquery in SELECT"),
    ("SELECT nickname FROM singer", "unknown column"),
    ("SELECT T9.name FROM singer AS T1", "unknown column"),
    ("SELECT name FROM stadium WHERE theme = 'x'", "unknown column"),
    ("SELECT name FROM band", "unknown table"),
    (
        "SELECT T1.name FROM singer AS T1, singer_in_concert AS T2"
        " WHERE T1.singer_id = T2.singer_id",
        "column compared with column in WHERE",
    ),
    ("SELECT name FROM stadium WHERE highest > lowest", "column compared with column in WHERE"),
    ("SELECT country FROM singer WHERE count(*) > 2", "aggregate in WHERE"),
    ("SELECT name FROM singer WHERE age IS NULL", "IS NULL in WHERE"),
    ("SELECT name FROM singer WHERE age IS NOT NULL", "IS NULL in WHERE"),
    ("SELECT name FROM singer WHERE age NOT BETWEEN 1 AND 2", "negated condition in WHERE"),
    (
        "SELECT name FROM stadium WHERE EXISTS (SELECT 1 FROM concert)",
        "EXISTS in WHERE",
    ),
    ("SELECT name FROM singer ORDER BY age DESC, name ASC", "mixed ORDER BY directions"),
    (
        "SELECT name FROM singer UNION SELECT name FROM stadium ORDER BY name",
        "ORDER BY or LIMIT after a set operation",
    ),
    ("SELECT name FROM singer UNION ALL SELECT name FROM stadium", "UNION ALL"),
    ("SELECT name FROM singer LIMIT 1 OFFSET 2", "OFFSET"),
    ("SELECT 1", "no FROM"),
    ("SELECT FROM WHERE", "unparsable"),
]


@pytest.mark.parametrize(("query", "reason"), UNLABELABLE, ids=[q for q, _ in UNLABELABLE])
def test_unlabelable(query: str, reason: str) -> None:
    with pytest.raises(Unlabelable) as raised:
        label(query, SCHEMA)
    assert raised.value.reason == reason


def test_label_examples_counts_reasons() -> None:
    examples = [
        {"db_id": "concert_singer", "query": "SELECT count(*) FROM singer"},
        {"db_id": "concert_singer", "query": "SELECT highest - lowest FROM stadium"},
        {"db_id": "nowhere", "query": "SELECT count(*) FROM singer"},
    ]
    labels, reasons = label_examples(examples, {"concert_singer": SCHEMA})
    count = Sketch(frozenset({SelectItem("count", STAR)}), frozenset({1}), frozenset())
    assert labels == [count, None, None]
    assert reasons == {"arithmetic in SELECT": 1, "unknown database": 1}


def test_spider_parts_reads_spider_parse() -> None:
    # SELECT count(DISTINCT T1.x), max(T2.y) FROM t AS T1 JOIN u AS T2 ... WHERE T1.z IN (...)
    # GROUP BY T2.y ORDER BY count(*) DESC LIMIT 1 (Spider column ids: 0 is *).
    nested = {"select": [False, []]}
    sql = {
        "select": [False, [[3, [0, [0, 1, True], None]], [1, [0, [0, 4, False], None]]]],
        "from": {"table_units": [["table_unit", 0], ["table_unit", 1]], "conds": []},
        "where": [[False, 8, [0, [0, 2, False], None], nested, None]],
        "groupBy": [[0, 4, False]],
        "having": [],
        "orderBy": ["desc", [[0, [3, 0, False], None]]],
        "limit": 1,
        "intersect": None,
        "union": None,
        "except": None,
    }
    parts = spider_parts(sql)
    assert parts.select == frozenset({SelectItem("count", 0), SelectItem("max", 3)})
    assert parts.tables == frozenset({0, 1})
    assert parts.keywords == {
        "distinct",
        "where",
        "nested",
        "group by",
        "order by",
        "desc",
        "limit",
    }
    assert parts.slots == Slots(
        where=(Predicate(1, "in", True),),
        group_by=frozenset({3}),
        order_by=(SelectItem("count", STAR),),
        limit=1,
    )


@pytest.mark.skipif(not (SPIDER / "dev.json").exists(), reason=NOT_FOUND)
def test_spider_dev_agrees_with_spider_parse() -> None:
    schemas = load_spider_schemas(SPIDER / "tables.json")
    examples = json.loads((SPIDER / "dev.json").read_text(encoding="utf-8"))
    labels, reasons = label_examples(examples, schemas)
    labelled = [(e, s) for e, s in zip(examples, labels, strict=True) if s is not None]
    assert len(labelled) >= 0.99 * len(examples), reasons
    for example, sketch in labelled:
        parts = spider_parts(example["sql"])
        assert (parts.select, parts.tables) == (sketch.select, sketch.tables), example["query"]
        assert parts.keywords == sketch.keywords, example["query"]
        assert parts.slots == sketch.slots, example["query"]
