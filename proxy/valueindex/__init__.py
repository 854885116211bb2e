"""The value index: every distinct value of the database's name-like text columns, embedded, so
that predicate calibration can replace a literal that is not in the database by the closest value
that is (`nl.value_index`, created by `pgnl migrate`, filled by `pgnl index`).

- `scan`: which columns are read and which values kept;
- `build`: `build_index`, the incremental refresh;
- `lookup`: `ValueIndex`, the look-ups, as the asking role;
- `common`: `ColumnRef`, `Scope`, `Candidate`, the `Embedder` protocol, `normalise`.
"""

from proxy.valueindex.build import BuildReport, build_index
from proxy.valueindex.common import (
    Candidate,
    ColumnRef,
    Embedder,
    Scope,
    ValueIndexError,
    normalise,
)
from proxy.valueindex.lookup import ValueIndex

__all__ = [
    "BuildReport",
    "Candidate",
    "ColumnRef",
    "Embedder",
    "Scope",
    "ValueIndex",
    "ValueIndexError",
    "build_index",
    "normalise",
]
