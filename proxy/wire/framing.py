"""Message boundaries in a byte stream, found without copying or decoding message bodies.

Two readers:

- `StartupReader` collects the untyped packets a connection opens with (SSLRequest,
  GSSENCRequest, CancelRequest, StartupMessage): int32 length, then the packet.
- `FrameScanner` walks typed messages (one type byte, int32 length, body) as chunks arrive and
  keeps only how far into the current message the stream is. Chunks are relayed as they came; the
  scanner just watches them go by, so a 64 KiB chunk of DataRows costs one loop step a message
  and no copies. It tells the session the few facts it needs: that every length is sane, the type
  of the last complete message, the status byte of the last ReadyForQuery, and whether the
  stream stands at a message boundary (so that the proxy may add a message of its own).

`MessageReader` is the slow, simple one for the phases where the proxy reads whole messages
(authentication): it buffers and hands out (type, body) pairs.
"""

from __future__ import annotations

import struct

from proxy.wire.messages import MAX_MESSAGE, MAX_STARTUP_PACKET, DecodeError

_U32 = struct.Struct("!I")
_unpack_u32 = _U32.unpack_from


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


class FrameScanner:
    """Tracks typed-message boundaries across chunks. See the module docstring."""

    __slots__ = ("_head", "_skip", "_status_at", "last_type", "max_length", "status")

    def __init__(self, max_length: int = MAX_MESSAGE) -> None:
        self._skip = 0  # bytes of the current message's body still to come
        self._head = b""  # a message header split across chunks (fewer than 5 bytes)
        self._status_at = -1  # where in the next chunk a split ReadyForQuery's status byte is
        self.last_type = 0  # type byte of the last message whose header was seen
        self.status = 73  # ord("I"): the status byte of the last ReadyForQuery
        self.max_length = max_length

    @property
    def at_boundary(self) -> bool:
        """True when every message begun so far has been seen whole."""
        return self._skip == 0 and not self._head

    def feed(self, data: bytes) -> None:
        """Account for one chunk. Raises DecodeError on an impossible message length."""
        n = len(data)
        pos = self._skip
        if pos >= n and not self._head and self._status_at < 0:
            self._skip = pos - n  # the chunk lies inside one long message
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
                return
            self._head = b""
            kind = header[0]
            length = _unpack_u32(header, 1)[0]
            if length < 4 or length > self.max_length:
                raise DecodeError(f"invalid message length {length} for message type {kind!r}")
            self.last_type = kind
            if kind == 90:  # "Z"
                self._note_status(data, need)
            pos = need + length - 4
        limit = self.max_length
        unpack = _unpack_u32
        kind = -1
        while pos < n:
            if n - pos < 5:
                self._head = data[pos:]
                pos = n
                break
            kind = data[pos]
            length = unpack(data, pos + 1)[0]
            if length < 4 or length > limit:
                raise DecodeError(f"invalid message length {length} for message type {kind!r}")
            if kind == 90:  # "Z": ReadyForQuery, whose one byte is the transaction status
                if pos + 5 < n:
                    self.status = data[pos + 5]
                else:
                    self._status_at = pos + 5 - n
            pos += 1 + length
        if kind >= 0:
            self.last_type = kind
        self._skip = pos - n

    def _note_status(self, data: bytes, at: int) -> None:
        if at < len(data):
            self.status = data[at]
        else:
            self._status_at = at - len(data)


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
