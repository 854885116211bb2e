"""ZeroNL2SQL's question-aware aligner: a cross-encoder that re-ranks SELECT x KEYWORDS pairs.

The sketch model proposes its top K1 SELECT sets and top K3 keyword sets independently; the
aligner reads the question beside each combination, as text,

    user question: how many singers are there?  |  our solution: count ( * ) ; keywords: none

and scores how likely it is that both parts are right (one logit, trained with label 1 iff both
are, on the sketch model's own top-k over Spider train: `model_export/train_aligner.py`). Schema
items appear by their words (`singer . name`), so the aligner judges meaning, not indexes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from proxy.nl2sql.schema import Schema
from proxy.nl2sql.sketch import KEYWORDS, STAR, SelectItem
from proxy.runtime import pad_encodings

MAX_LENGTH = 128

FloatArray = npt.NDArray[np.float32]


def select_words(items: Iterable[SelectItem], schema: Schema) -> str:
    """SELECT items in words, e.g. `count ( * ) , singer . name` (sorted, so a set has one
    text)."""
    parts = []
    for item in sorted(items):
        if item.column == STAR:
            name = "*"
        else:
            column = schema.columns[item.column]
            name = f"{schema.tables[column.table].label} . {column.label}"
        parts.append(f"{item.aggregate} ( {name} )" if item.aggregate else name)
    return " , ".join(parts)


def keywords_words(keywords: Iterable[str]) -> str:
    chosen = set(keywords)
    return ", ".join(k for k in KEYWORDS if k in chosen) or "none"


def pair_text(
    question: str, select: Iterable[SelectItem], keywords: Iterable[str], schema: Schema
) -> tuple[str, str]:
    """The aligner's two input texts for one SELECT x KEYWORDS pair."""
    return (
        f"user question: {question}",
        f"our solution: {select_words(select, schema)} ; keywords: {keywords_words(keywords)}",
    )


class Aligner:
    """Scores (question, SELECT, KEYWORDS) pairs with the exported cross-encoder. Thread-safe."""

    def __init__(self, session: ort.InferenceSession, tokenizer: Tokenizer) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_LENGTH)
        self._inputs = {node.name for node in session.get_inputs()}
        self._output = session.get_outputs()[0].name

    def score(self, pairs: Sequence[tuple[str, str]]) -> FloatArray:
        """One logit a pair (higher: both parts more likely right)."""
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        input_ids, attention_mask, token_type_ids = pad_encodings(
            self._tokenizer.encode_batch(list(pairs))
        )
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = token_type_ids
        (logits,) = self._session.run([self._output], feed)
        return np.asarray(logits, dtype=np.float32).reshape(-1)
