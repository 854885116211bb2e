"""The pipe between a backend and its pgnl worker: length-prefixed pickles, one message each.

Messages, as tuples whose first item names them:

- backend → worker: `("answer", question)`; `("rows", rows)` or `("error", sqlstate, message)`
  in reply to a fetch;
- worker → backend: `("ready", where)` once loaded; `("fetch", query, params)`; then
  `("answered", answer, refused)` (an `Answer`, and why its SQL may not run, or None) or
  `("failed", sqlstate, message, hint)`.

The worker's ends block. The backend's ends are non-blocking and it passes `idle`, which is
called whenever the other end has been silent (or not reading) for `POLL_S`: there the backend
checks whether its call was cancelled, so no wait on the worker, even half-way through a
message, outlasts a cancel.

Both ends are pgnl's own processes, run by the server's account: the pickles come from no one
else.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from collections.abc import Callable
from typing import Any

_LENGTH = struct.Struct("!I")
POLL_S = 0.2
"""How long an end passing `idle` waits on the other before calling it."""

Idle = Callable[[], None]


class ChannelClosed(EOFError):
    """The other end is gone."""


def _wait(fd: int, writing: bool, idle: Idle) -> None:
    """Until `fd` may be read (or written), calling `idle` every `POLL_S` meanwhile."""
    watched = [fd]
    while True:
        ready = select.select([] if writing else watched, watched if writing else [], [], POLL_S)
        if ready[0] or ready[1]:
            return
        idle()


def send(fd: int, message: tuple[Any, ...], idle: Idle | None = None) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        if idle is not None:
            _wait(fd, True, idle)
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[written:]


def _read_exactly(fd: int, size: int, idle: Idle | None) -> bytes:
    parts: list[bytes] = []
    while size:
        if idle is not None:
            _wait(fd, False, idle)
        try:
            part = os.read(fd, size)
        except BlockingIOError:
            continue
        if not part:
            raise ChannelClosed("the other end of the pgnl channel closed it")
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def receive(fd: int, idle: Idle | None = None) -> tuple[Any, ...]:
    (size,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size, idle))
    message = pickle.loads(_read_exactly(fd, size, idle))  # noqa: S301 (pgnl's own processes only)
    if not isinstance(message, tuple) or not message:
        raise ValueError(f"not a pgnl channel message: {type(message).__name__}")
    return message
