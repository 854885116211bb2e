"""A statement of the query history as a record (`history.record_of`), and the prior it gives
a reading (`history.support`): features without literals, the statement in words, the tables
and columns a role must be able to read, and the similarity of the nearest record of a
reading's own pattern."""

from __future__ import annotations

from proxy.learn import statements_of_file
from proxy.nl2sql.history import Retrieved, describe, examples, record_of, support
from proxy.nl2sql.readings import Parts, read
from tests.unit.test_ambiguity import SHOP


def parts(sql: str) -> Parts:
    found = read(sql, SHOP)
    assert found is not None
    return found


def retrieved(sql: str, similarity: float) -> Retrieved:
    record = record_of(sql, SHOP)
    assert record is not None
    return Retrieved(sql, frozenset(record.features), None, 1, similarity)


def test_a_statement_becomes_a_record_of_its_parts_without_its_literals() -> None:
    record = record_of(
        "SELECT c.name, count(*) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
        "WHERE c.city = 'Boston' GROUP BY c.name ORDER BY count(*) DESC LIMIT 3",
        SHOP,
    )
    assert record is not None
    assert record.features == (
        "aggregate count(*)",
        "filter customers.city =",
        "group customers.name",
        "join customers.id = orders.customer_id",
        "limit",
        "order count(*) DESC",
        "select count(*)",
        "select customers.name",
        "table customers",
        "table orders",
    )
    assert record.filter_values == {"customers.city": ["Boston"]}
    assert record.tables == (("public", "customers"), ("public", "orders"))
    # every column it reads, its join keys too: a role must be able to read them all
    assert record.columns == (
        ("public", "customers", "city"),
        ("public", "customers", "id"),
        ("public", "customers", "name"),
        ("public", "orders", "customer_id"),
    )
    # the same statement but for its constants: another statement, the same pattern
    other = record_of(
        "SELECT c.name, count(*) FROM customers AS c JOIN orders AS o ON o.customer_id = c.id "
        "WHERE c.city = 'Albany' GROUP BY c.name ORDER BY count(*) DESC LIMIT 5",
        SHOP,
    )
    assert other is not None
    assert other.fingerprint == record.fingerprint
    assert other.statement_hash != record.statement_hash
    assert other.features == record.features


def test_what_is_not_one_select_over_the_schema_is_no_record() -> None:
    for sql in (
        "UPDATE customers SET city = 'x'",
        "SELECT 1",
        "SELECT relname FROM pg_class",
        "SELECT * FROM customers; SELECT * FROM orders",
        "SELECT FROM WHERE",
    ):
        assert record_of(sql, SHOP) is None, sql


def test_the_statement_in_words() -> None:
    assert (
        describe(
            parts(
                "SELECT avg(total) FROM orders AS o JOIN customers AS c ON c.id = o.customer_id "
                "WHERE c.state = 'Ohio' ORDER BY avg(total) DESC"
            )
        )
        == "average orders total customers where state Ohio most"
    )
    assert describe(parts("SELECT count(DISTINCT city) FROM customers")) == (
        "number of customers city"
    )


def test_support_is_the_similarity_of_the_nearest_record_of_the_readings_pattern() -> None:
    city = parts("SELECT name FROM customers WHERE city = 'New York'")
    state = parts("SELECT name FROM customers WHERE state = 'New York'")
    near = [
        retrieved("SELECT sum(total) FROM orders", 0.9),
        retrieved("SELECT name FROM customers WHERE city = 'Albany'", 0.8),  # city's pattern
        retrieved("SELECT name FROM customers WHERE city = 'Boston'", 0.7),
        retrieved("SELECT name, state FROM customers WHERE state = 'Ohio'", 0.6),
    ]
    score, source = support(city, near)
    assert score == 0.8 and source is near[1]
    # a record that shares some of a reading's parts is no evidence for it
    assert support(state, near) == (0.0, None)
    assert support(city, []) == (0.0, None)


def test_examples_are_the_nearest_statements_close_enough() -> None:
    near = [
        retrieved("SELECT name FROM customers", 0.7),
        retrieved("SELECT city FROM customers", 0.5),
        retrieved("SELECT sum(total) FROM orders", 0.2),
    ]
    assert examples(near, 3, 0.4) == ["SELECT name FROM customers", "SELECT city FROM customers"]
    assert examples(near, 1, 0.4) == ["SELECT name FROM customers"]
    assert examples(near, 0, 0.0) == []


def test_a_file_of_sql_is_split_into_its_statements() -> None:
    text = "SELECT 'a;b' FROM customers;\n-- a comment\nSELECT name FROM customers WHERE id = 1;"
    assert [s.sql for s in statements_of_file(text)] == [
        "SELECT 'a;b' FROM customers",
        "SELECT name FROM customers WHERE id = 1",
    ]
