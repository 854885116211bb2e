"""The pipe between a backend and its pgnl worker: length-prefixed pickles, one message each.

Messages, as tuples whose first item names them:

- backend → worker: `("answer", question)`; `("rows", rows)` or `("error", sqlstate, message)`
  in reply to a fetch;
- worker → backend: `("ready", where)` once loaded; `("fetch", query, params)`; then
  `("answered", answer, refused)` (an `Answer`, and why its SQL may not run, or None) or
  `("failed", sqlstate, message, hint)`.

Both ends are pgnl's own processes, run by the server's account: the pickles come from no one
else.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

_LENGTH = struct.Struct("!I")


class ChannelClosed(EOFError):
    """The other end is gone."""


def send(fd: int, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exactly(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        part = os.read(fd, size)
        if not part:
            raise ChannelClosed("the other end of the pgnl channel closed it")
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def receive(fd: int) -> tuple[Any, ...]:
    (size,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size))
    message = pickle.loads(_read_exactly(fd, size))  # noqa: S301 (pgnl's own processes only)
    if not isinstance(message, tuple) or not message:
        raise ValueError(f"not a pgnl channel message: {type(message).__name__}")
    return message
