"""What the value index's builder and look-ups share: column references, scopes, candidates, the
embedder they are given, and the normalisation of values.

Normalised value: Unicode compatibility decomposition (NFKD), combining marks (accents) dropped,
case-folded, runs of whitespace collapsed to one space, ends trimmed: 'Café  de Flore ' and
'CAFE DE FLORE' both become 'cafe de flore'. The trigram look-ups compare normalised text; the
embedder gets values as they are (MiniLM's tokenizer lower-cases and strips accents itself).
"""

from __future__ import annotations

import contextlib
import unicodedata
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy

from proxy.config import IndexSettings

EMBEDDING_DIMENSION = 384


OBJECT_NOT_IN_PREREQUISITE_STATE = "55000"
INSUFFICIENT_PRIVILEGE = "42501"


class ValueIndexError(RuntimeError):
    """The value index cannot be built or read; the message says why and what to do, `sqlstate`
    what kind of error it is (raised with it by nl.refresh_index)."""

    def __init__(self, message: str, sqlstate: str = OBJECT_NOT_IN_PREREQUISITE_STATE) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class Embedder(Protocol):
    """Sentence embeddings: one L2-normalised float32 row of `dimension` numbers per text."""

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> numpy.ndarray[Any, Any]: ...


@dataclass(frozen=True)
class HnswGraph:
    """How the HNSW index on nl.value_index's embeddings is built (m, ef_construction) and
    searched (hnsw.ef_search of nl.search_semantic, set by `pgnl index` when it builds the
    index)."""

    m: int
    ef_construction: int
    ef_search: int

    def __str__(self) -> str:
        return f"m = {self.m}, ef_construction = {self.ef_construction}"


SMALL_GRAPH = HnswGraph(8, 32, 200)
"""Below [index] medium_graph_values: a sparser graph, searched harder, which keeps recall and
builds faster than pgvector's default graph; building the graph is most of what indexing a
small database costs beyond running the model (benchmarks/calibration.py; docs/measurements.md)."""
MEDIUM_GRAPH = HnswGraph(16, 64, 100)
"""pgvector's build defaults, searched with ef_search 100 (pgvector's default is 40): from [index]
medium_graph_values to [index] large_graph_values; the same graph loses recall as the index grows
past that (benchmarks/calibration.py; docs/measurements.md)."""
LARGE_GRAPH = HnswGraph(32, 128, 200)
"""From [index] large_graph_values on: it keeps recall at a million values, for a slower build
(docs/measurements.md)."""
HNSW_EF_SEARCH = MEDIUM_GRAPH.ef_search
"""hnsw.ef_search that migrations/0005 sets on nl.search_semantic (for the graph the migration
creates, pgvector's default one, until pgnl index builds its own)."""


def graph_for(values: int, settings: IndexSettings) -> HnswGraph:
    """The graph an index of this many values is built with ([index] medium_graph_values and
    large_graph_values)."""
    if values >= settings.large_graph_values:
        return LARGE_GRAPH
    return MEDIUM_GRAPH if values >= settings.medium_graph_values else SMALL_GRAPH


def graph_memory_mb(values: int) -> int:
    """maintenance_work_mem for building the HNSW graph over this many values.

    pgvector builds the graph in memory when it fits (about 2.5 kB a value; this allows twice
    that, at least 64 MB, at most 4 GB) and falls back to a much slower build on disk when it
    does not. Not more than that: a parallel build allocates all of maintenance_work_mem as
    shared memory up front, which costs a small build much of its time.
    """
    return min(4096, max(64, values * 5 // 1024))


@dataclass(frozen=True, order=True)
class ColumnRef:
    """A column, by name: schema, table, column."""

    schema: str
    table: str
    column: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}.{self.column}"


@dataclass(frozen=True)
class Scope:
    """Where a look-up searches: one column, one table, or the whole database.

    Build one with `Scope.column(ref)`, `Scope.table(schema, table)` or `Scope.database()`.
    """

    schema_name: str | None = None
    table_name: str | None = None
    column_name: str | None = None

    def __post_init__(self) -> None:
        if (self.column_name is not None and self.table_name is None) or (
            self.table_name is not None and self.schema_name is None
        ):
            raise ValueError("a scope names a column within a table within a schema")
        if self.schema_name is not None and self.table_name is None:
            raise ValueError("a scope is a column, a table or the whole database, not a schema")

    @classmethod
    def column(cls, ref: ColumnRef) -> Scope:
        return cls(ref.schema, ref.table, ref.column)

    @classmethod
    def table(cls, schema: str, table: str) -> Scope:
        return cls(schema, table)

    @classmethod
    def database(cls) -> Scope:
        return cls()

    @classmethod
    def widening(cls, ref: ColumnRef) -> tuple[Scope, Scope, Scope]:
        """The column, then its table, then the whole database: calibration's search order."""
        return cls.column(ref), cls.table(ref.schema, ref.table), cls.database()

    @property
    def level(self) -> Literal["column", "table", "database"]:
        if self.column_name is not None:
            return "column"
        return "table" if self.table_name is not None else "database"

    def __str__(self) -> str:
        parts = [p for p in (self.schema_name, self.table_name, self.column_name) if p is not None]
        return ".".join(parts) if parts else "the whole database"


@dataclass(frozen=True)
class Candidate:
    """A database value offered for a literal, with its similarity to it (1.0: identical)."""

    column: ColumnRef
    value: str
    score: float
    frequency: int


def normalise(value: str) -> str:
    """The value as the trigram index compares it (see the module's documentation)."""
    decomposed = unicodedata.normalize("NFKD", value)
    unaccented = "".join(char for char in decomposed if not unicodedata.combining(char))
    return " ".join(unaccented.casefold().split())


def vector_literal(row: numpy.ndarray[Any, Any]) -> str:
    """pgvector's text form of one embedding: '[0.1,-0.2,…]'."""
    return "[" + ",".join(f"{x:.7g}" for x in row.tolist()) + "]"


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier, always quoted (for SQL built outside psycopg's `sql` module)."""
    return '"' + name.replace('"', '""') + '"'


SIGNATURE_PROBE = "pgnl value index: New York, Timmy Ward, 42nd Street"


def embedder_signature(embedder: Embedder) -> str:
    """What tells one embedding model from another: the embedder's own `signature` if it has one,
    else the 16 largest components (by magnitude) of a fixed probe text's embedding, a shape that
    another model changes and another execution provider (CPU or GPU rounding) does not."""
    own = getattr(embedder, "signature", None)
    if isinstance(own, str) and own:
        return own
    try:
        return _SIGNATURES[embedder]
    except (KeyError, TypeError):  # TypeError: an embedder that cannot be weakly referenced
        pass
    probe = checked_embeddings(embedder, [SIGNATURE_PROBE])[0]
    largest = sorted(numpy.argsort(-numpy.abs(probe), kind="stable")[:16].tolist())
    signature = f"{embedder.dimension}d:" + ",".join(str(i) for i in largest)
    with contextlib.suppress(TypeError):
        _SIGNATURES[embedder] = signature
    return signature


# An embedder's model does not change while it lives: its probe runs once (one model run of a
# build of a small database otherwise).
_SIGNATURES: weakref.WeakKeyDictionary[Embedder, str] = weakref.WeakKeyDictionary()


def checked_embeddings(
    embedder: Embedder, texts: Sequence[str]
) -> numpy.ndarray[Any, numpy.dtype[numpy.float32]]:
    """The embedder's output for `texts`, verified to be one finite 384-d row per text."""
    matrix = numpy.asarray(embedder.embed(texts), dtype=numpy.float32)
    if matrix.shape != (len(texts), EMBEDDING_DIMENSION):
        raise ValueIndexError(
            f"the embedder returned an array of shape {matrix.shape} for {len(texts)} texts; "
            f"the value index stores {EMBEDDING_DIMENSION}-dimensional embeddings"
        )
    if not numpy.isfinite(matrix).all():
        raise ValueIndexError("the embedder returned NaN or infinite numbers")
    return matrix
