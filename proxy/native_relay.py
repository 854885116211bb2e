"""The native relay's Python side: which connections go to it, and taking them back.

Almost every statement a client sends through pgnl is plain SQL. Once a connection is
authenticated and in plain pass-through (`Session.native_state` says when), its two sockets are
relayed by `proxy/_relay_loop.c`: one thread of its own, outside the GIL, running an epoll loop
that walks message headers as the Python path does and passes whole units on, one write a read.
The asyncio transports stay, paused; the loop works on duplicates of their file descriptors.

The loop hands a connection back (`handed_back`) when the session must see something: a Query or
Parse that may be a directive, COPY, a FunctionCall, Terminate, an impossible length, either side
closing or failing; or when pgnl asks (`detach`: shutdown, closing). The handed-back record
carries the state to go on from and the bytes not yet dealt with, in order: what is still to be
written to each side, then what each side sent that the session must read. The Python path is the
reference and the fall-back: without a C compiler, on another OS, with TLS to the client, or with
`[proxy] native_relay = false`, nothing comes here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from proxy.wire.framing import RelayState
from proxy.wire.messages import MAX_MESSAGE
from proxy.wire.splitter import SplitterState

if TYPE_CHECKING:
    _relay_loop: Any = None
    AVAILABLE = False
else:
    try:
        from proxy import _relay_loop

        AVAILABLE = sys.platform.startswith("linux")
    except ImportError:  # installed without a C compiler, or not on Linux
        _relay_loop = None
        AVAILABLE = False

log = logging.getLogger(__name__)

Traffic4 = tuple[int, int, int, int]


_REASONS = {1: "client unit", 2: "server unit", 3: "client closed", 4: "server closed"}


@dataclass(frozen=True)
class HandBack:
    """What the native relay returns with a connection (see the module docstring)."""

    reason: str  # why: "client unit", "server unit", "client closed", "server closed", "asked"
    relay: RelayState  # the server direction's walk, for `Relay.load`
    splitter: SplitterState  # the client direction's counters, for `FrontendSplitter`
    from_client: bytes  # what the client sent that the session must read
    from_server: bytes  # what the server sent that the session must read
    to_client: bytes  # passed on, not yet written to the client
    to_server: bytes  # passed on, not yet written to the server

    @classmethod
    def of(cls, record: tuple[Any, ...]) -> HandBack:
        _, reason, *rest = record
        return cls(_REASONS.get(reason, "asked"), *rest)


class Relayed(Protocol):
    """A connection the native relay can take."""

    def handed_back(self, back: HandBack) -> None:
        """Go on in Python from what the native relay returned."""


class NativeRelay:
    """One native loop for the proxy; connections come and go (`attach`, `detach`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        if not AVAILABLE:
            raise RuntimeError("the native relay was not built (no C compiler at install time)")
        self._native = _relay_loop.Loop()
        self._loop = loop
        self._attached: dict[int, Relayed] = {}
        self._next_id = 0
        loop.add_reader(self._native.notify_fd, self._collect)

    def __len__(self) -> int:
        return len(self._attached)

    @property
    def handbacks(self) -> int:
        """Connections handed back so far (all reasons)."""
        return int(self._native.handbacks)

    def attach(
        self, conn: Relayed, fds: tuple[int, int], state: tuple[RelayState, SplitterState]
    ) -> int | None:
        """Relay `conn` natively from now on: `fds` are its client's and server's sockets (paused
        for asyncio; the loop works on duplicates), `state` the session's (`native_state`).
        Returns its id there, or None when it stays in Python."""
        client_fd, server_fd = os.dup(fds[0]), os.dup(fds[1])
        self._next_id += 1
        ident = self._next_id
        try:
            self._native.attach(ident, client_fd, server_fd, *state, MAX_MESSAGE)
        except (OSError, RuntimeError, ValueError, OverflowError, TypeError) as exc:
            os.close(client_fd)
            os.close(server_fd)
            log.warning("the native relay refused a connection (%s); it stays in Python", exc)
            return None
        self._attached[ident] = conn
        return ident

    def detach(self, ident: int) -> HandBack | None:
        """Take a connection back now (None when it was not there)."""
        self._attached.pop(ident, None)
        record = self._native.detach(ident)
        return None if record is None else HandBack.of(record)

    def traffic(self, ident: int) -> Traffic4 | None:
        """(client messages, client bytes, server messages, server bytes) of an attached one."""
        counts = self._native.traffic(ident)
        return None if counts is None else tuple(counts)

    def _collect(self) -> None:
        for record in self._native.take():
            conn = self._attached.pop(record[0], None)
            if conn is not None:
                conn.handed_back(HandBack.of(record))

    def close(self) -> None:
        """Give every connection back to Python, then stop the loop's thread."""
        for ident, conn in list(self._attached.items()):
            back = self.detach(ident)
            if back is not None:
                conn.handed_back(back)
        self._loop.remove_reader(self._native.notify_fd)
        self._native.close()
