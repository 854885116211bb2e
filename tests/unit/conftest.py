"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from model_export.spider import NOT_FOUND, spider_dir
from proxy.nl2sql.schema import Schema, load_spider_schemas

SPIDER = spider_dir()


@pytest.fixture(scope="session")
def spider() -> dict[str, Schema]:
    """Every Spider schema (tables.json) by database name; the test is skipped without Spider."""
    tables = SPIDER / "tables.json"
    if not tables.exists():
        pytest.skip(NOT_FOUND)
    return load_spider_schemas(tables)
