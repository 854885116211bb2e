"""Fixtures the unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.nl2sql.schema import Schema, load_spider_schemas

SPIDER = Path(__file__).resolve().parents[3] / "shared" / "data" / "spider"


@pytest.fixture(scope="session")
def spider() -> dict[str, Schema]:
    """Every Spider schema (tables.json) by database name; the test is skipped without Spider."""
    tables = SPIDER / "tables.json"
    if not tables.exists():
        pytest.skip(f"Spider is not at {SPIDER}")
    return load_spider_schemas(tables)
