"""The client-to-server direction in READY: messages split whole, so that directives can be seen.

A `FrontendSplitter` walks the client's stream like `framing.Relay` does, and passes messages on
unchanged, one write per chunk where it can. What it does besides:

- It *offers* the session the few things that may concern directives, before they go anywhere:
  a Query whose text may be a directive (or a DEALLOCATE/DISCARD, while the session remembers
  statements made from directives), and an extended-protocol batch that holds such a Parse, or
  that names such a statement in a Bind, Describe or Close. `offer(unit)` returns True when the
  session takes the unit over: the splitter then holds everything after it, in order, until
  `resume()`. False: the unit is passed on as it came.
- To make that possible it holds extended-protocol messages (Parse, Bind, Describe, Execute,
  Close) until the batch's Sync or Flush arrives, and only then decides. It never holds CopyData,
  CopyDone, CopyFail, Query, FunctionCall or Terminate: an open batch is decided (or, before a
  Terminate, passed on) first.
- It counts the requests that the server answers with a ReadyForQuery (`syncs`: Query, Sync and
  FunctionCall passed on), less the Syncs the server ignores because they arrived while it was
  in COPY IN mode (libpq sends one after an extended-protocol COPY's Execute, and one after
  CopyDone). With the relay's `ready_count` it tells when every request is answered.

The check done on every Query and Parse is a few byte comparisons (`might_be_directive`); only
texts that start with a comment and hold "nl" are offered.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.wire.messages import MAX_MESSAGE

_U32 = struct.Struct("!I")
_unpack_u32 = _U32.unpack_from

_QUERY = ord("Q")
_PARSE = ord("P")
_BIND = ord("B")
_DESCRIBE = ord("D")
_CLOSE = ord("C")
_SYNC = ord("S")
_FLUSH = ord("H")
_FUNCTION_CALL = ord("F")
_TERMINATE = ord("X")
_EXECUTE = ord("E")
_STATEMENT = ord("S")
_BATCHED = frozenset(b"PBDEC")
_HELD = frozenset(b"QPBDECSH")  # held until whole; any other message is passed on as it comes
_COPY = frozenset(b"dcf")
# Message types PostgreSQL refuses past PQ_SMALL_MESSAGE_LIMIT bytes, on reading their length.
_SMALL = frozenset(b"CDEHSXcf")
_SMALL_LIMIT = 10000
_WHITESPACE = frozenset(b" \t\n\r\f\v")

SplitterState = tuple[int, int, int, bool, int, int]
"""The counters the native relay carries (`FrontendSplitter.native_state`): requests answered by a
ReadyForQuery, Syncs since the last other message, that message's type, whether it was a COPY
message, and the message and byte counts."""
_OPENERS = _WHITESPACE | frozenset(b"-/")


def might_be_directive(data: bytes, start: int, end: int) -> bool:
    """Whether the text in data[start:end] may be a directive: after whitespace, a comment opener,
    and "nl" in any case somewhere. (False guarantees that `directives.parse` returns None.)"""
    if start < end and data[start] not in _OPENERS:
        return False  # the usual case: a query that starts with a keyword
    while start < end and data[start] in _WHITESPACE:
        start += 1
    if not (data.startswith(b"--", start, end) or data.startswith(b"/*", start, end)):
        return False
    text = data[start:end].lower()
    return b"nl" in text


def py_scan_plain(
    data: bytes, in_run: int, last_other: int, names: bool
) -> tuple[int, int, int, int] | None:
    """Whether `data` is whole Queries and whole batches (each ended by its Sync) none of which
    may concern a directive: no text that `might_be_directive`, and, when the session has
    statements made from directives (`names`), no Bind, Describe, Close or Parse at all.

    Returns (Syncs and Queries in it, Syncs since the last other message, the type of that
    message, the messages in it), from `in_run` and `last_other` before it; None when the chunk
    needs the slow walk.
    This is the reference implementation; `_framing.c` has the same in C (`scan_plain`).
    """
    n = len(data)
    pos = 0
    syncs = 0
    messages = 0
    open_batch = False
    while n - pos >= 5:
        kind = data[pos]
        length = _unpack_u32(data, pos + 1)[0]
        end = pos + 1 + length
        if end > n or length < 4 or length > _SMALL_LIMIT:
            return None
        if kind == _SYNC:
            syncs += 1
            in_run += 1
            open_batch = False
        elif kind in _BATCHED:
            if names:
                return None
            if kind == _PARSE:
                name_end = data.find(b"\0", pos + 5, end)
                if name_end < 0 or might_be_directive(data, name_end + 1, end - 3):
                    return None
            open_batch = True
            in_run = 0
            last_other = kind
        elif kind == _QUERY:
            if open_batch or names or might_be_directive(data, pos + 5, end - 1):
                return None
            syncs += 1
            in_run = 0
            last_other = kind
        else:
            return None
        messages += 1
        pos = end
    if pos != n or open_batch:
        return None
    return syncs, in_run, last_other, messages


def _forgets_statements(data: bytes, start: int, end: int) -> bool:
    """Whether the text may be DEALLOCATE or DISCARD (which drop prepared statements)."""
    while start < end and data[start] in _WHITESPACE:
        start += 1
    word = data[start : start + 10].lower()
    return word.startswith((b"deallocate", b"discard"))


@dataclass(frozen=True)
class Unit:
    """What the splitter offers: one Query, or one extended-protocol batch.

    `messages` are (type byte, body) pairs in order; a batch ends with its Sync or Flush, or with
    neither when another kind of message cut it short. `raw` is the unit's bytes as they came.
    """

    messages: list[tuple[bytes, bytes]]
    raw: bytes

    @property
    def is_query(self) -> bool:
        return self.messages[0][0] == b"Q"


scan_plain: Callable[[bytes, int, int, bool], tuple[int, int, int, int] | None]
if TYPE_CHECKING:
    scan_plain = py_scan_plain
else:
    try:
        from proxy.wire._framing import scan_plain
    except ImportError:  # installed without a C compiler
        scan_plain = py_scan_plain


def _messages(raw: bytes) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    while pos < len(raw):
        length = _unpack_u32(raw, pos + 1)[0]
        out.append((raw[pos : pos + 1], raw[pos + 5 : pos + 1 + length]))
        pos += 1 + length
    return out


class FrontendSplitter:
    """See the module docstring. `statements`: names of the prepared statements the session made
    from directives (it keeps the set; the splitter reads it to know which batches to offer)."""

    def __init__(
        self,
        write: Callable[[bytes], object],
        offer: Callable[[Unit], bool],
        on_violation: Callable[[str], object],
        statements: Collection[bytes] = frozenset(),
        max_length: int = MAX_MESSAGE,
    ) -> None:
        self.write = write
        self.offer = offer
        self.on_violation = on_violation
        self.statements = statements
        self.max_length = max_length
        self.syncs = 0  # requests passed on that the server answers with a ReadyForQuery
        # For pgnl's metrics: the client's messages (whole headers seen) and bytes.
        self.message_count = 0
        self.byte_count = 0
        self.terminated = False
        self.broken = False
        self.paused = False
        self.skipping = False  # drop messages up to the next Sync (see `skip_until_sync`)
        self._tail = bytearray()  # an incomplete message that is held (fewer than `_need` bytes)
        self._need = 0
        self._head = b""  # the first bytes of a passed-on message's header (fewer than 5)
        self._skip = 0  # bytes of a passed-on message still to come
        self._dropping = False  # the message being passed on is dropped instead (skipping)
        self._held = bytearray()  # complete messages of an open batch, from earlier chunks
        self._interesting = False  # the open batch holds something to offer
        self._syncs_in_run = 0  # Syncs passed on since the last message other than Sync/Flush
        self._last_other = 0  # type of the last message other than Sync/Flush
        self._in_copy = False  # the last message other than Sync/Flush was CopyData/Done/Fail
        self._backlog = bytearray()  # what came while paused
        self._offering = False
        self._resume_asked = False

    @property
    def at_boundary(self) -> bool:
        """Nothing is held or half passed on: no open batch and no incomplete message."""
        return not self._tail and not self._held and not self._head and not self._skip

    # ------------------------------------------------------------ driving

    def feed(self, data: bytes) -> None:
        """Account for one chunk from the client: pass on, hold or offer what it holds."""
        if self.broken:
            return
        self.byte_count += len(data)
        if self.paused:
            self._backlog += data
            return
        if self._head or self._skip:
            data = self._stream(data)
            if not data or self.broken:
                return
        if self._tail:
            self._tail += data
            if len(self._tail) < self._need:
                return
            data = bytes(self._tail)
            self._tail.clear()
        elif not self._held and not self.skipping and self._plain(data):
            return
        self._walk(data)

    def _plain(self, data: bytes) -> bool:
        """The hot path: when the chunk is whole Queries and whole batches, none of which may
        concern a directive, pass it on as it came (True). False: nothing was done."""
        scanned = scan_plain(data, self._syncs_in_run, self._last_other, bool(self.statements))
        if scanned is None:
            return False
        syncs, self._syncs_in_run, self._last_other, messages = scanned
        self.syncs += syncs
        self.message_count += messages
        self._in_copy = False
        self.write(data)
        return True

    def resume(self) -> None:
        """The session is done with the unit it took: go on with what came meanwhile."""
        if self._offering:
            self._resume_asked = True
            return
        if not self.paused:
            return
        self.paused = False
        backlog = bytes(self._backlog)
        self._backlog.clear()
        if backlog:
            self.byte_count -= len(backlog)  # counted when it came; `feed` counts it again
            self.feed(backlog)

    def backlog_size(self) -> int:
        return len(self._backlog)

    def skip_until_sync(self) -> None:
        """Drop the client's messages up to its next Sync, which goes on: what the server does
        after an error in an extended-protocol batch, when the session ended the batch itself."""
        self.skipping = True

    def native_state(self) -> SplitterState | None:
        """The counters the native relay (`proxy.native_relay`) goes on from, when the splitter
        stands where it may take over: nothing held, half passed on, paused, skipped or offered,
        and no statements made from directives (every Bind would have to be looked at). None
        otherwise."""
        if (
            not self.at_boundary
            or self.paused
            or self.skipping
            or self.broken
            or self.terminated
            or self.statements
            or self._backlog
            or self._offering
            or self._dropping
        ):
            return None
        return (
            self.syncs,
            self._syncs_in_run,
            self._last_other,
            self._in_copy,
            self.message_count,
            self.byte_count,
        )

    def load_native_state(self, state: SplitterState) -> None:
        """Go on from the counters the native relay hands back."""
        (
            self.syncs,
            self._syncs_in_run,
            self._last_other,
            in_copy,
            self.message_count,
            self.byte_count,
        ) = state
        self._in_copy = bool(in_copy)

    # ------------------------------------------------------------ walking a chunk

    def _walk(self, data: bytes) -> None:
        n = len(data)
        pos = 0
        run = 0  # start of the bytes still to pass on
        batch = 0 if self._held else -1  # where the open batch starts in `data`
        limit = self.max_length
        while pos < n:
            kind = data[pos]
            held = kind in _HELD
            whole_header = n - pos >= 5
            length = _unpack_u32(data, pos + 1)[0] if whole_header else 0
            if whole_header:
                if length < 4 or length > limit:
                    self._violation(kind, length)
                    return
                if held and kind in _SMALL and length > _SMALL_LIMIT:
                    held = False  # PostgreSQL refuses it on reading the length: pass it on
            end = pos + 1 + length if whole_header else n + 1
            if held and end > n:
                break  # held until it is whole (and walked, and counted, then)
            if whole_header:  # (else once the header is whole, in `_stream`)
                self.message_count += 1
            if self.skipping and kind != _SYNC:
                self._pass(data, run, pos)
                if end > n:
                    self._dropping = True
                    self._to_stream(data, pos, end, whole_header)
                    return
                run = pos = end
                continue
            if self.skipping:
                self.skipping = False
            if held and kind in _BATCHED:
                if batch < 0:
                    batch = pos
                if not self._interesting and self._concerns_directives(kind, data, pos, end):
                    self._interesting = True
                self._other(kind)
                pos = end
                continue
            if batch >= 0:
                # The open batch ends here: with its Sync or Flush, or cut short by a message
                # that is never held.
                closes = held and kind in (_SYNC, _FLUSH)
                if self._interesting and kind != _TERMINATE:
                    self._pass(data, run, batch)
                    if self._take(data, batch, end if closes else pos):
                        return
                    run = end if closes else pos
                    batch = -1
                    if closes:
                        pos = end
                        continue
                else:
                    if self._held:  # the batch began in an earlier chunk: that part first
                        self.write(bytes(self._held))
                        self._held.clear()
                    self._interesting = False
                    batch = -1
            if held and kind == _SYNC:
                self.syncs += 1
                self._syncs_in_run += 1
            elif held and kind == _FLUSH:
                pass
            elif held and kind == _QUERY:
                if self._offers_query(data, pos + 5, end - 1):
                    self._pass(data, run, pos)
                    if self._take(data, pos, end):
                        return
                    run = end
                else:
                    self.syncs += 1
                    self._other(kind)
            else:
                if whole_header:  # (else once the header is whole, in `_stream`)
                    self._count(kind)
                if end > n:  # pass on what came of it; the rest follows as it comes
                    self._pass(data, run, n)
                    self._to_stream(data, pos, end, whole_header)
                    return
            pos = end
        if batch >= 0:
            self._pass(data, run, batch)
            self._held += data[batch:pos]
        else:
            self._pass(data, run, pos)
        if pos < n:
            self._tail += data[pos:]
            self._need = 5 if n - pos < 5 else 1 + _unpack_u32(data, pos + 1)[0]

    def _to_stream(self, data: bytes, pos: int, end: int, whole_header: bool) -> None:
        """The message at data[pos:] is passed on (or dropped) as it comes, not held."""
        if whole_header:
            self._skip = end - len(data)
        else:
            self._head = data[pos:]

    def _stream(self, data: bytes) -> bytes:
        """Pass on (or drop) the rest of a message that is not held; returns what follows it."""
        used = 0
        if self._head:
            header = self._head + data[: 5 - len(self._head)]
            if len(header) < 5:
                self._head = header
                used = len(data)
            else:
                used = 5 - len(self._head)
                self._head = b""
                kind = header[0]
                length = _unpack_u32(header, 1)[0]
                if length < 4 or length > self.max_length:
                    self._violation(kind, length)
                    return b""
                self.message_count += 1
                self._count(kind)
                self._skip = length - 4
        take = min(self._skip, len(data) - used)
        self._skip -= take
        used += take
        if not self._dropping:
            self.write(data if used == len(data) else data[:used])
        if not self._head and not self._skip:
            self._dropping = False
        return data[used:]

    def _other(self, kind: int) -> None:
        """A message other than Sync, Flush and the copy messages went by."""
        self._syncs_in_run = 0
        self._last_other = kind
        self._in_copy = False

    def _count(self, kind: int) -> None:
        """Account for a message that is never held."""
        if self._dropping:
            return
        if kind in _COPY:
            if not self._in_copy and self._last_other == _EXECUTE:
                # Syncs sent between a COPY's Execute and its data reached the server in COPY
                # IN mode, which ignores them (libpq sends one).
                self.syncs -= self._syncs_in_run
            self._syncs_in_run = 0
            self._in_copy = True
            return
        if kind == _FUNCTION_CALL:
            self.syncs += 1
        elif kind == _TERMINATE:
            self.terminated = True
        self._other(kind)

    def _offers_query(self, data: bytes, start: int, end: int) -> bool:
        if might_be_directive(data, start, end):
            return True
        statements = self.statements
        # The unnamed statement does not outlive a Query; DEALLOCATE and DISCARD drop others.
        return bool(statements) and (b"" in statements or _forgets_statements(data, start, end))

    def _pass(self, data: bytes, start: int, end: int) -> None:
        if start == 0 and end == len(data):
            self.write(data)
        elif end > start:
            self.write(data[start:end])

    def _take(self, data: bytes, start: int, end: int) -> bool:
        """Offer data[start:end] (with any held part of the batch before it); True when the
        session took it, and everything after it is now held until `resume()`."""
        raw = bytes(self._held) + data[start:end] if self._held else data[start:end]
        self._held.clear()
        self._interesting = False
        self._offering = True
        self._resume_asked = False
        try:
            taken = self.offer(Unit(_messages(raw), raw))
        finally:
            self._offering = False
        if not taken:
            self._count_passed(raw)
            self.write(raw)
            return False
        self._syncs_in_run = 0
        self._last_other = 0
        self._in_copy = False
        if self._resume_asked:
            return False
        self.paused = True
        self._backlog += data[end:]
        return True

    def _count_passed(self, raw: bytes) -> None:
        """A unit offered and declined goes on as it came: count the requests in it."""
        for kind, _ in _messages(raw):
            if kind == b"S":
                self.syncs += 1
                self._syncs_in_run += 1
            elif kind != b"H":
                if kind == b"Q":
                    self.syncs += 1
                self._other(kind[0])

    def _concerns_directives(self, kind: int, data: bytes, start: int, end: int) -> bool:
        """Whether this Parse, Bind, Describe or Close may concern a directive."""
        body = start + 5
        statements = self.statements
        if kind == _PARSE:
            name_end = data.find(b"\0", body, end)
            query_end = data.find(b"\0", name_end + 1, end) if name_end >= 0 else -1
            if query_end < 0:
                return False  # malformed: the server will say so
            if might_be_directive(data, name_end + 1, query_end):
                return True
            return bool(statements) and (
                data[body:name_end] in statements
                or _forgets_statements(data, name_end + 1, query_end)
            )
        if not statements:
            return False
        if kind == _BIND:
            portal_end = data.find(b"\0", body, end)
            name_end = data.find(b"\0", portal_end + 1, end) if portal_end >= 0 else -1
            return name_end >= 0 and data[portal_end + 1 : name_end] in statements
        if kind in (_DESCRIBE, _CLOSE) and data[body] == _STATEMENT:
            name_end = data.find(b"\0", body + 1, end)
            return name_end >= 0 and data[body + 1 : name_end] in statements
        return False

    def _violation(self, kind: int, length: int) -> None:
        self.broken = True
        shown = f"'{chr(kind)}'" if 32 < kind < 127 and chr(kind) not in "'\\" else f"0x{kind:02x}"
        self.on_violation(f"invalid message length {length} for message type {shown}")
