"""How the answer is chosen with an LLM (`[llm] selection`), and whether two readings of a
question agree.

`llm-first` (the default): the sketch models' own answer is found first (the PLM-only search,
milliseconds); the LLM then writes its own query, with a few values of the columns that answer
names, an error fed back and its literals calibrated, and that query is the answer when it
returns values; else the sketch models' answer stands. `first`: ZeroNL2SQL's execution-based
selection: every candidate in order (the LLM completing the best sketches, then its own query,
then the sketch models' completions), the first whose result passes the checks.

Two results agree when they hold the same multiset of rows, each row's values compared as a
set (two queries may order their columns differently), numbers rounded to `DIGITS` places. A
result with no value in it (no rows, or only NULLs) agrees with nothing: two empty answers
agreeing is no evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

LLM_FIRST = "llm-first"
FIRST = "first"
SELECTIONS = (LLM_FIRST, FIRST)

DIGITS = 6

ResultKey = tuple[tuple[str, ...], ...]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, Decimal | float | int):
        number = float(value)
        if math.isfinite(number):
            rounded = round(number, DIGITS)
            return repr(0.0 if rounded == 0 else rounded)
    if isinstance(value, memoryview | bytearray):
        return repr(bytes(value))
    return repr(value)


def result_key(rows: Sequence[Sequence[Any]] | None) -> ResultKey | None:
    """What two results must share to agree; None for a result with no value in it."""
    if not rows or all(value is None for row in rows for value in row):
        return None
    return tuple(sorted(tuple(sorted(_value(v) for v in row)) for row in rows))


def same_result(a: Sequence[Sequence[Any]] | None, b: Sequence[Sequence[Any]] | None) -> bool:
    """Whether two results agree (see the module docstring)."""
    key = result_key(a)
    return key is not None and key == result_key(b)
