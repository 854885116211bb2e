"""Where Spider (Yu et al., 2018; CC BY-SA 4.0) is read from, for training, the benchmarks and the
tests that need it.

Spider's folder (train.json, dev.json, tables.json and database/) is $PGNL_SPIDER_DIR. Without it,
a `data/spider` folder is looked for in the project's shared folder, beside the checkout or one
level above it; the tests that need Spider are skipped where it is not found.
"""

from __future__ import annotations

import os
from pathlib import Path

ENVIRONMENT = "PGNL_SPIDER_DIR"
ROOT = Path(__file__).resolve().parents[1]
NOT_FOUND = f"Spider is not here: set ${ENVIRONMENT} (Spider's folder)"
"""What a test that needs Spider says when it is skipped."""


def spider_dir() -> Path:
    """Spider's folder: $PGNL_SPIDER_DIR, else the shared folder's copy beside or above the
    checkout (which may not exist: callers check for the files they read)."""
    configured = os.environ.get(ENVIRONMENT)
    if configured:
        return Path(configured)
    shared = [ROOT / "shared", ROOT.parent / "shared"]
    for candidate in shared:
        if (candidate / "data" / "spider" / "tables.json").exists():
            return candidate / "data" / "spider"
    return shared[1] / "data" / "spider"
