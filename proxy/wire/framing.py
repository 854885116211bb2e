"""Message boundaries in a byte stream, found without copying or decoding message bodies.

Two readers:

- `StartupReader` collects the untyped packets a connection opens with (SSLRequest,
  GSSENCRequest, CancelRequest, StartupMessage): int32 length, then the packet.
- `Relay` walks typed messages (one type byte, int32 length, body) as chunks arrive and keeps
  only how far into the current message the stream is. Chunks are relayed as they came; the
  relay just watches them go by, so a 64 KiB chunk of DataRows costs one loop step a message
  and no copies. It tells the session the few facts it needs: that every length is sane, the type
  of the last message, the status byte of the last ReadyForQuery, whether a Terminate went by,
  and whether the stream stands at a message boundary (so that the proxy may add a message of
  its own). It is the proxy's hot path, so it also comes compiled (`_framing.c`).

`MessageReader` is the slow, simple one for the phases where the proxy reads whole messages
(authentication): it buffers and hands out (type, body) pairs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.wire.messages import MAX_MESSAGE, MAX_STARTUP_PACKET, DecodeError

_U32 = struct.Struct("!I")
_unpack_u32 = _U32.unpack_from

RelayState = tuple[int, bytes, int, int, int, int, int, int, bool]
"""A relay's state (`Relay.export`): bytes of the current message still to come, a split
header, where a split ReadyForQuery's status byte is (-1: nowhere), last type, status, and the
ReadyForQuery, message and byte counts, and whether a Terminate went by."""


class StartupReader:
    """Accumulates one untyped startup-phase packet at a time."""

    __slots__ = ("_buffer", "first_byte", "max_length")

    def __init__(self, max_length: int = MAX_STARTUP_PACKET) -> None:
        self._buffer = bytearray()
        self.first_byte = -1  # the connection's very first byte, once it has come
        self.max_length = max_length

    def feed(self, data: bytes) -> None:
        if self.first_byte < 0 and data:
            self.first_byte = data[0]
        self._buffer += data

    def next_packet(self) -> bytes | None:
        """The next whole packet, or None until more bytes arrive. Raises DecodeError."""
        if len(self._buffer) < 4:
            return None
        length = _unpack_u32(self._buffer, 0)[0]
        if length < 8 or length > self.max_length:
            raise DecodeError(f"invalid length of startup packet ({length} bytes)")
        if len(self._buffer) < length:
            return None
        packet = bytes(self._buffer[:length])
        del self._buffer[:length]
        return packet

    def take_rest(self) -> bytes:
        """Whatever arrived after the packets read so far (typed messages, once started up)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest

    @property
    def pending(self) -> int:
        return len(self._buffer)


class PyRelay:
    """One direction of a relayed connection: watches message boundaries go by, passes chunks on.

    `feed(chunk)` walks the headers in the chunk (a few bytes each; bodies are skipped, not read)
    and calls `write(chunk)` with the very same object. On an impossible length it calls
    `on_violation(message)` instead, and relays nothing more. Facts kept for the session:
    `at_boundary`, `last_type`, `status` (of the last ReadyForQuery), `ready_count` (how many
    ReadyForQuery headers went by), `terminated` (a Terminate went by); and, for pgnl's metrics,
    `message_count` (message headers seen) and `byte_count` (bytes fed). `write` may be replaced,
    e.g. by a no-op once the other side has gone, or by the session while it reads the stream
    itself.

    This is the reference implementation; `proxy/wire/_framing.c` is the same in C, used when it
    was compiled at install time (`ACCELERATED`), and tested against this one.
    """

    __slots__ = (
        "_head",
        "_skip",
        "_status_at",
        "broken",
        "byte_count",
        "last_type",
        "max_length",
        "message_count",
        "on_violation",
        "ready_count",
        "status",
        "terminated",
        "write",
    )

    def __init__(
        self,
        write: Callable[[bytes], object],
        on_violation: Callable[[str], object],
        max_length: int = MAX_MESSAGE,
    ) -> None:
        self.write = write
        self.on_violation = on_violation
        self.max_length = max_length
        self._skip = 0  # bytes of the current message's body still to come
        self._head = b""  # a message header split across chunks (fewer than 5 bytes)
        self._status_at = -1  # where in the next chunk a split ReadyForQuery's status byte is
        self.last_type = 0  # type byte of the last message whose header was seen
        self.status = 73  # ord("I"): the status byte of the last ReadyForQuery
        self.ready_count = 0  # ReadyForQuery messages whose header was seen
        self.message_count = 0  # message headers seen
        self.byte_count = 0  # bytes fed
        self.terminated = False
        self.broken = False

    @property
    def at_boundary(self) -> bool:
        """True when every message begun so far has been seen whole."""
        return self._skip == 0 and not self._head

    def feed(self, data: bytes) -> None:
        """Account for one chunk and pass it to `write`, or report a violation."""
        if self.broken:
            return
        n = len(data)
        self.byte_count += n
        pos = self._skip
        if pos >= n and not self._head and self._status_at < 0:
            self._skip = pos - n  # the chunk lies inside one long message
            self.write(data)
            return
        if self._status_at >= 0:
            if self._status_at < n:
                self.status = data[self._status_at]
                self._status_at = -1
            else:
                self._status_at -= n
        if self._head:
            need = 5 - len(self._head)
            header = self._head + data[:need]
            if len(header) < 5:
                self._head = header
                self._skip = 0
                self.write(data)
                return
            self._head = b""
            kind = header[0]
            length = _unpack_u32(header, 1)[0]
            if length < 4 or length > self.max_length:
                self._violation(kind, length)
                return
            self._note(data, kind, need)
            pos = need + length - 4
        limit = self.max_length
        unpack = _unpack_u32
        while pos < n:
            if n - pos < 5:
                self._head = data[pos:]
                pos = n
                break
            kind = data[pos]
            length = unpack(data, pos + 1)[0]
            if length < 4 or length > limit:
                self._violation(kind, length)
                return
            self._note(data, kind, pos + 5)
            pos += 1 + length
        self._skip = pos - n
        self.write(data)

    def export(self) -> RelayState:
        """The walk's state, for the native relay (`proxy.native_relay`) to go on from."""
        return (
            self._skip,
            self._head,
            self._status_at,
            self.last_type,
            self.status,
            self.ready_count,
            self.message_count,
            self.byte_count,
            self.terminated,
        )

    def load(self, state: RelayState) -> None:
        """Go on from a state `export` (or the native relay) gave."""
        (
            self._skip,
            self._head,
            self._status_at,
            self.last_type,
            self.status,
            self.ready_count,
            self.message_count,
            self.byte_count,
            terminated,
        ) = state
        self.terminated = bool(terminated)

    def _note(self, data: bytes, kind: int, body: int) -> None:
        self.last_type = kind
        self.message_count += 1
        if kind == 90:  # "Z": ReadyForQuery, whose one byte is the transaction status
            self.ready_count += 1
            if body < len(data):
                self.status = data[body]
            else:
                self._status_at = body - len(data)
        elif kind == 88:  # "X": Terminate
            self.terminated = True

    def _violation(self, kind: int, length: int) -> None:
        self.broken = True
        shown = f"'{chr(kind)}'" if 32 < kind < 127 and chr(kind) not in "'\\" else f"0x{kind:02x}"
        self.on_violation(f"invalid message length {length} for message type {shown}")


ACCELERATED: bool
"""True when the C build of the relay is in use."""
if TYPE_CHECKING:
    Relay = PyRelay
    ACCELERATED = False
else:
    try:
        from proxy.wire._framing import Relay

        ACCELERATED = True
    except ImportError:  # installed without a C compiler: the pure-Python relay, slower
        Relay = PyRelay
        ACCELERATED = False


class MessageReader:
    """Buffers typed messages and yields them whole, as (type byte, body)."""

    __slots__ = ("_buffer", "max_length")

    def __init__(self, max_length: int = MAX_MESSAGE) -> None:
        self._buffer = bytearray()
        self.max_length = max_length

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_message(self) -> tuple[bytes, bytes] | None:
        """The next whole message, or None until more bytes arrive. Raises DecodeError."""
        if len(self._buffer) < 5:
            return None
        length = _unpack_u32(self._buffer, 1)[0]
        if length < 4 or length > self.max_length:
            raise DecodeError(
                f"invalid message length {length} for message type {bytes(self._buffer[:1])!r}"
            )
        if len(self._buffer) < 1 + length:
            return None
        kind = bytes(self._buffer[:1])
        body = bytes(self._buffer[5 : 1 + length])
        del self._buffer[: 1 + length]
        return kind, body

    def take_rest(self) -> bytes:
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest
