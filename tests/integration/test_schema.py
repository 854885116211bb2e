"""`introspect` and `catalog_fingerprint` against the real PostgreSQL: what a role sees (tables,
views, columns, keys, comments, in the documented order), what column and table grants hide,
what DDL changes the fingerprint and what data changes do not, and that every column index
names a real column."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from proxy.nl2sql.database import PsycopgDatabase
from proxy.nl2sql.schema import Schema, catalog_fingerprint, introspect
from tests.fix_pg import Postgres

pytestmark = pytest.mark.integration

Connection = psycopg.Connection[tuple[Any, ...]]

SHOP = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, city varchar(40));
COMMENT ON TABLE customers IS 'People who buy';
COMMENT ON COLUMN customers.name IS 'Full name';
CREATE TABLE orders (id serial PRIMARY KEY, customer_id int REFERENCES customers (id),
                     placed date, total numeric(10, 2));
ALTER TABLE orders DROP COLUMN placed;
CREATE VIEW big_orders AS SELECT id, total FROM orders WHERE total > 100;
CREATE TABLE "Zebra Crossing" ("Lane Count" int);
CREATE TABLE measurements (at date, value int) PARTITION BY RANGE (at);
CREATE TABLE measurements_2024 PARTITION OF measurements
    FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');

CREATE SCHEMA shop;
COMMENT ON SCHEMA shop IS 'not a table comment';
CREATE TABLE shop.products (sku text, region text, title text, PRIMARY KEY (sku, region));
COMMENT ON COLUMN shop.products.region IS 'Sales region';
CREATE TABLE shop.order_lines (
    order_id int REFERENCES public.orders (id),
    sku text,
    region text,
    quantity int,
    FOREIGN KEY (region, sku) REFERENCES shop.products (region, sku)
);
CREATE MATERIALIZED VIEW shop.titles AS SELECT title FROM shop.products;
CREATE FOREIGN DATA WRAPPER nowhere;
CREATE SERVER far_away FOREIGN DATA WRAPPER nowhere;
CREATE FOREIGN TABLE shop.remote_stock (sku text, amount int) SERVER far_away;

CREATE SCHEMA archive;
CREATE TABLE archive.old_orders (id int, note text);
COMMENT ON TABLE archive.old_orders IS 'Before 2020';
INSERT INTO customers VALUES (1, 'Ann', 'Oslo');
"""

# (schema, table, table comment, [(column, type, primary key, column comment)])
SHOP_TABLES = [
    ("public", "Zebra Crossing", "", [("Lane Count", "integer", False, "")]),
    (
        "public",
        "big_orders",
        "",
        [("id", "integer", False, ""), ("total", "numeric(10,2)", False, "")],
    ),
    (
        "public",
        "customers",
        "People who buy",
        [
            ("id", "integer", True, ""),
            ("name", "text", False, "Full name"),
            ("city", "character varying(40)", False, ""),
        ],
    ),
    ("public", "measurements", "", [("at", "date", False, ""), ("value", "integer", False, "")]),
    (
        "public",
        "orders",
        "",
        [
            ("id", "integer", True, ""),
            ("customer_id", "integer", False, ""),
            ("total", "numeric(10,2)", False, ""),
        ],
    ),
    (
        "archive",
        "old_orders",
        "Before 2020",
        [("id", "integer", False, ""), ("note", "text", False, "")],
    ),
    (
        "shop",
        "order_lines",
        "",
        [
            ("order_id", "integer", False, ""),
            ("sku", "text", False, ""),
            ("region", "text", False, ""),
            ("quantity", "integer", False, ""),
        ],
    ),
    (
        "shop",
        "products",
        "",
        [
            ("sku", "text", True, ""),
            ("region", "text", True, "Sales region"),
            ("title", "text", False, ""),
        ],
    ),
    ("shop", "remote_stock", "", [("sku", "text", False, ""), ("amount", "integer", False, "")]),
    ("shop", "titles", "", [("title", "text", False, "")]),
]

SHOP_KEYS = {
    ("public.orders.customer_id", "public.customers.id"),
    ("shop.order_lines.order_id", "public.orders.id"),
    ("shop.order_lines.sku", "shop.products.sku"),
    ("shop.order_lines.region", "shop.products.region"),
}

PRIVILEGES = """
CREATE TABLE customers (id int PRIMARY KEY, name text, secret text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int REFERENCES customers (id), total int);
CREATE TABLE payments (order_id int REFERENCES orders (id), amount int);
CREATE TABLE audit (id int, what text);
CREATE TABLE notices (body text);
CREATE VIEW customer_names AS SELECT id, name FROM customers;
CREATE SCHEMA hidden;
CREATE TABLE hidden.stuff (id int);
CREATE SCHEMA shared;
CREATE TABLE shared.notes (body text);

GRANT SELECT (id, name) ON customers TO md5_user;
GRANT SELECT (customer_id, total), UPDATE (id) ON orders TO md5_user;
GRANT SELECT ON payments TO md5_user;
GRANT INSERT ON audit TO md5_user;
GRANT SELECT ON notices TO PUBLIC;
GRANT SELECT ON hidden.stuff TO md5_user;
GRANT USAGE ON SCHEMA shared TO md5_user;
GRANT SELECT ON shared.notes TO md5_user;

GRANT SELECT ON ALL TABLES IN SCHEMA public TO scram_user;
"""


def layout(schema: Schema) -> list[tuple[str, str, str, list[tuple[str, str, bool, str]]]]:
    return [
        (
            table.schema,
            table.name,
            table.comment,
            [
                (
                    schema.columns[i].name,
                    schema.columns[i].type,
                    schema.columns[i].primary_key,
                    schema.columns[i].comment,
                )
                for i in schema.table_columns[t]
            ],
        )
        for t, table in enumerate(schema.tables)
    ]


def full_name(schema: Schema, column: int) -> str:
    table = schema.tables[schema.columns[column].table]
    return f"{table.schema}.{table.name}.{schema.columns[column].name}"


def key_names(schema: Schema) -> set[tuple[str, str]]:
    return {
        (full_name(schema, key.column), full_name(schema, key.referenced))
        for key in schema.foreign_keys
    }


def introspect_as(postgres: Postgres, db: str, user: str = "postgres", **kwargs: Any) -> Schema:
    with postgres.connect(db, user) as conn:
        return introspect(PsycopgDatabase(conn), **kwargs)


def test_introspect_reads_tables_views_columns_keys_and_comments_in_order(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(SHOP, migrated=True)
    schema = introspect_as(postgres, db)
    assert schema.name == db
    assert layout(schema) == SHOP_TABLES
    assert key_names(schema) == SHOP_KEYS
    keys = [(key.column, key.referenced) for key in schema.foreign_keys]
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    assert schema.tables[0].qualified_name == "Zebra Crossing"
    assert schema.tables[5].qualified_name == "archive.old_orders"
    assert schema.qualified(schema.column_index(5, "note")) == "old_orders.note"
    # Tables that the foreign keys join, by position.
    names = [table.name for table in schema.tables]
    assert {(names[a], names[b]) for a, b in schema.table_edges} == {
        ("orders", "customers"),
        ("order_lines", "orders"),
        ("order_lines", "products"),
    }
    assert introspect_as(postgres, db, name="shop").name == "shop"


def test_an_empty_database_gives_an_empty_schema_named_after_it(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(migrated=True)  # only pgnl's own nl schema, which is never shown
    schema = introspect_as(postgres, db)
    assert schema == Schema(name=db, tables=(), columns=())


def test_a_role_sees_only_the_columns_and_tables_it_may_select(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(PRIVILEGES)
    limited = introspect_as(postgres, db, "md5_user")
    assert layout(limited) == [
        ("public", "customers", "", [("id", "integer", True, ""), ("name", "text", False, "")]),
        (
            "public",
            "notices",
            "",
            [("body", "text", False, "")],
        ),
        (
            "public",
            "orders",
            "",
            [("customer_id", "integer", False, ""), ("total", "integer", False, "")],
        ),
        (
            "public",
            "payments",
            "",
            [("order_id", "integer", False, ""), ("amount", "integer", False, "")],
        ),
        ("shared", "notes", "", [("body", "text", False, "")]),
    ]
    # payments.order_id references orders.id, which md5_user may not read: no key.
    assert key_names(limited) == {("public.orders.customer_id", "public.customers.id")}

    whole_tables = introspect_as(postgres, db, "scram_user")
    assert [table.qualified_name for table in whole_tables.tables] == [
        "audit",
        "customer_names",
        "customers",
        "notices",
        "orders",
        "payments",
    ]
    assert key_names(whole_tables) == {
        ("public.orders.customer_id", "public.customers.id"),
        ("public.payments.order_id", "public.orders.id"),
    }
    everything = introspect_as(postgres, db)
    assert [table.qualified_name for table in everything.tables] == [
        "audit",
        "customer_names",
        "customers",
        "notices",
        "orders",
        "payments",
        "hidden.stuff",
        "shared.notes",
    ]


def test_the_fingerprint_follows_ddl_and_grants_but_not_data(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    db = make_database(PRIVILEGES)
    with postgres.connect(db) as admin, postgres.connect(db, "md5_user") as conn:
        database = PsycopgDatabase(conn)
        seen: list[str] = []

        def unchanged_after(statement: str) -> None:
            before = catalog_fingerprint(database)
            admin.execute(statement.encode())
            assert catalog_fingerprint(database) == before, statement

        def changed_after(statement: str) -> None:
            before = catalog_fingerprint(database)
            admin.execute(statement.encode())
            after = catalog_fingerprint(database)
            assert after != before, statement
            assert after not in seen, statement
            seen.append(before)

        admin.execute("INSERT INTO customers VALUES (1, 'Ann', 'x')")
        first = catalog_fingerprint(database)
        assert len(first) == 32 and int(first, 16) >= 0
        assert catalog_fingerprint(database) == first
        unchanged_after("INSERT INTO customers VALUES (2, 'Bob', 'y'), (3, 'Cy', 'z')")
        unchanged_after("UPDATE customers SET name = 'Ann B' WHERE id = 1")
        unchanged_after("INSERT INTO orders VALUES (1, 1, 10)")
        unchanged_after("DELETE FROM orders")
        unchanged_after("VACUUM ANALYZE customers")
        unchanged_after("TRUNCATE audit")

        changed_after("ALTER TABLE customers ADD COLUMN born date")
        changed_after("GRANT SELECT (born) ON customers TO md5_user")
        assert "born" in {c.name for c in introspect(database).columns}
        changed_after("ALTER TABLE customers RENAME COLUMN born TO birthday")
        changed_after("ALTER TABLE customers ALTER COLUMN birthday TYPE timestamp")
        changed_after("COMMENT ON COLUMN customers.name IS 'Given name'")
        changed_after("COMMENT ON TABLE customers IS 'Buyers'")
        changed_after("GRANT SELECT ON audit TO md5_user")
        changed_after("REVOKE SELECT ON payments FROM md5_user")
        assert "payments" not in {t.name for t in introspect(database).tables}
        changed_after("ALTER TABLE payments ADD PRIMARY KEY (order_id)")
        changed_after("ALTER TABLE payments DROP CONSTRAINT payments_order_id_fkey")
        changed_after("REVOKE USAGE ON SCHEMA shared FROM md5_user")
        changed_after("DROP TABLE notices")
        changed_after("CREATE TABLE extra (id int)")
        unchanged_after("INSERT INTO extra VALUES (1)")


def test_every_column_index_names_a_real_column(
    postgres: Postgres, make_database: Callable[..., str]
) -> None:
    shop = make_database(SHOP)
    privileged = make_database(PRIVILEGES)
    for db, user in ((shop, "postgres"), (privileged, "md5_user"), (privileged, "postgres")):
        schema = introspect_as(postgres, db, user)
        with postgres.connect(db) as conn:
            # information_schema knows no materialized views: pg_attribute stands in for those.
            rows: list[tuple[Any, ...]] = conn.execute(
                "SELECT table_schema, table_name, column_name, ordinal_position "
                "FROM information_schema.columns "
                "UNION ALL "
                "SELECT n.nspname, c.relname, a.attname, a.attnum FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind = 'm' AND a.attnum > 0 AND NOT a.attisdropped"
            ).fetchall()
        positions = {(s, t, c): int(position) for s, t, c, position in rows}
        assert schema.columns
        for i, column in enumerate(schema.columns):
            table = schema.tables[column.table]
            assert (table.schema, table.name, column.name) in positions, (db, user, i)
            assert schema.column_index(column.table, column.name) == i
            assert schema.qualified(i) == f"{table.name}.{column.name}"
        for t, columns in enumerate(schema.table_columns):
            table = schema.tables[t]
            ordinals = [
                positions[(table.schema, table.name, schema.columns[i].name)] for i in columns
            ]
            assert ordinals == sorted(ordinals)
