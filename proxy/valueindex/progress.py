"""The progress line `pgnl index` draws on stderr: columns done, values embedded, values/s.

On a terminal the line is redrawn in place (at most ten times a second); elsewhere (a log file, a
pipe) a plain line is written at most every few seconds, and once at the end.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from proxy.valueindex.common import ColumnRef

BAR_WIDTH = 20
TERMINAL_INTERVAL_S = 0.1
LOG_INTERVAL_S = 5.0


class Progress:
    """Progress of one index build. Disabled, it only counts."""

    def __init__(self, stream: TextIO | None, total_columns: int) -> None:
        self.stream = stream
        self.total_columns = total_columns
        self.columns_done = 0
        self.values_embedded = 0
        self.current: ColumnRef | None = None
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._terminal = bool(stream is not None and stream.isatty())

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.values_embedded / elapsed if elapsed > 0 else 0.0

    def column_started(self, ref: ColumnRef) -> None:
        self.current = ref
        self._draw()

    def embedded(self, count: int) -> None:
        self.values_embedded += count
        self._draw()

    def note(self, what: str) -> None:
        """Say what is being done between columns (an index being built)."""
        if self.stream is not None:
            self.stream.write(what + "\n")
            self.stream.flush()

    def column_done(self) -> None:
        self.columns_done += 1
        self._draw()

    def line(self) -> str:
        total = max(self.total_columns, 1)
        filled = round(BAR_WIDTH * min(self.columns_done, total) / total)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        text = (
            f"[{bar}] {self.columns_done}/{self.total_columns} columns"
            f"  {self.values_embedded:,} values  {self.rate:,.0f} values/s"
        )
        if self.current is not None and self.columns_done < self.total_columns:
            text += f"  {self.current}"
        return text

    def _draw(self, final: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        interval = TERMINAL_INTERVAL_S if self._terminal else LOG_INTERVAL_S
        if not final and now - self._drawn_at < interval:
            return
        self._drawn_at = now
        text = self.line()
        if self._terminal:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r\033[K" + text[:width] + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        self._draw(final=True)
