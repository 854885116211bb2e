"""Two readings of a question compared part by part (`readings`, `ambiguity.dimensions`): the
same query spelled two ways is one reading; each kind of difference is the dimension Soma-SQL's
taxonomy names."""

from __future__ import annotations

import pytest

from proxy.nl2sql.ambiguity import INTENT, SCHEMA, VALUE, Dimension, dimensions
from proxy.nl2sql.readings import Parts, Predicate, read
from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table

SHOP = Schema(
    "shop",
    (Table("customers"), Table("orders"), Table("items")),
    (
        Column(0, "id", "integer", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(0, "city"),  # 2
        Column(0, "state"),  # 3
        Column(1, "id", "integer", primary_key=True),  # 4
        Column(1, "customer_id", "integer"),  # 5
        Column(1, "total", "numeric"),  # 6
        Column(2, "order_id", "integer"),  # 7
        Column(2, "sku"),  # 8
    ),
    (ForeignKey(5, 0), ForeignKey(7, 4)),
)


def parts(sql: str) -> Parts:
    found = read(sql, SHOP)
    assert found is not None
    return found


def named(found: list[Dimension]) -> list[tuple[str, str]]:
    return [(d.kind, d.name) for d in found]


def test_one_query_spelled_two_ways_is_one_reading() -> None:
    a = parts(
        "SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
        "WHERE c.city = 'Boston' ORDER BY c.name"
    )
    b = parts(
        "select customers.name from orders join customers on customers.id = orders.customer_id "
        "where city = 'Boston' order by name asc"
    )
    assert dimensions(a, b) == []
    assert a.joins == frozenset({("customers.id", "orders.customer_id")})
    assert a.predicates == frozenset({Predicate("customers.city", "=", ("Boston",))})


def test_a_literal_on_one_column_or_another_is_a_value_column() -> None:
    seed = parts("SELECT count(*) FROM customers WHERE city = 'New York'")
    other = parts("SELECT count(*) FROM customers WHERE state = 'New York'")
    (found,) = dimensions(seed, other)
    assert (found.kind, found.name) == (VALUE, "value column")
    assert found.seed_predicate == Predicate("customers.city", "=", ("New York",))
    assert found.other_predicate == Predicate("customers.state", "=", ("New York",))


def test_another_literal_on_the_same_column_is_a_value() -> None:
    seed = parts("SELECT name FROM customers WHERE state = 'NY'")
    other = parts("SELECT name FROM customers WHERE state = 'New York'")
    assert named(dimensions(seed, other)) == [(VALUE, "value")]


def test_a_condition_only_one_reading_has() -> None:
    seed = parts("SELECT name FROM customers WHERE state = 'NY' AND city = 'Albany'")
    other = parts("SELECT name FROM customers WHERE state = 'NY'")
    (found,) = dimensions(seed, other)
    assert (found.name, found.other_predicate) == ("condition", None)
    assert found.seed_predicate == Predicate("customers.city", "=", ("Albany",))


def test_in_like_and_between_are_predicates_with_their_values() -> None:
    found = parts(
        "SELECT name FROM customers WHERE state IN ('NY', 'NJ') AND name ILIKE '%ann%' "
        "AND id BETWEEN 3 AND 9"
    )
    assert found.predicates == frozenset(
        {
            Predicate("customers.state", "in", ("NY", "NJ")),
            Predicate("customers.name", "ilike", ("%ann%",)),
            Predicate("customers.id", "between", ("3", "9")),
        }
    )


def test_an_extra_table_and_another_join_path_are_schema_dimensions() -> None:
    seed = parts("SELECT sum(o.total) FROM orders AS o JOIN items AS i ON i.order_id = o.id")
    other = parts("SELECT sum(total) FROM orders")
    (tables,) = dimensions(seed, other)
    assert (tables.kind, tables.name, tables.seed, tables.other) == (
        SCHEMA,
        "tables",
        "items",
        "",
    )
    loose = parts("SELECT c.name FROM customers AS c JOIN orders AS o ON o.id = c.id")
    keyed = parts("SELECT c.name FROM customers AS c JOIN orders AS o ON o.customer_id = c.id")
    assert named(dimensions(loose, keyed)) == [(SCHEMA, "join path")]


@pytest.mark.parametrize(
    ("seed", "other", "expected"),
    [
        (
            "SELECT count(DISTINCT city) FROM customers",
            "SELECT count(city) FROM customers",
            [(INTENT, "distinct")],
        ),
        (
            "SELECT max(total) FROM orders",
            "SELECT sum(total) FROM orders",
            [(INTENT, "aggregation")],
        ),
        (
            "SELECT name FROM customers ORDER BY name LIMIT 3",
            "SELECT name FROM customers ORDER BY name DESC LIMIT 3",
            [(INTENT, "order")],
        ),
        (
            "SELECT name FROM customers ORDER BY name LIMIT 3",
            "SELECT name FROM customers ORDER BY name LIMIT 1",
            [(INTENT, "top-n")],
        ),
        (
            "SELECT state, count(*) FROM customers GROUP BY state",
            "SELECT city, count(*) FROM customers GROUP BY city",
            [(SCHEMA, "columns"), (SCHEMA, "grain")],
        ),
    ],
)
def test_intent_and_grain(seed: str, other: str, expected: list[tuple[str, str]]) -> None:
    assert named(dimensions(parts(seed), parts(other))) == expected


def test_sql_that_is_not_one_select_has_no_parts() -> None:
    assert read("DELETE FROM customers", SHOP) is None
    assert read("SELECT 1; SELECT 2", SHOP) is None
    assert read("SELEC name FROM customers", SHOP) is None
