"""FrameScanner and friends: message boundaries found the same however the stream is chunked."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire.framing import FrameScanner, MessageReader, StartupReader
from proxy.wire.messages import (
    MAX_STARTUP_PACKET,
    DecodeError,
    ReadyForQuery,
    StartupMessage,
    typed,
)

SERVER_STREAM = (
    typed(b"T", b"\x00\x01abc\x00" + b"\x00" * 18)
    + typed(b"D", b"\x00\x01\x00\x00\x00\x03xyz")
    + typed(b"C", b"SELECT 1\x00")
    + ReadyForQuery(b"T").encode()
    + typed(b"D", b"")
    + ReadyForQuery(b"E").encode()
)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, start = [], 0
    for point in [*points, len(data)]:
        out.append(data[start:point])
        start = point
    return out


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
@settings(max_examples=300)
def test_any_chunking_gives_the_same_facts(cuts: list[int]) -> None:
    scanner = FrameScanner()
    for piece in chunks(SERVER_STREAM, cuts):
        scanner.feed(piece)
    assert scanner.at_boundary
    assert scanner.status == ord("E")
    assert scanner.last_type == ord("Z")


def test_every_single_byte_split_tracks_ready_for_query_status() -> None:
    for cut in range(1, len(SERVER_STREAM)):
        scanner = FrameScanner()
        scanner.feed(SERVER_STREAM[:cut])
        scanner.feed(SERVER_STREAM[cut:])
        assert (scanner.status, scanner.at_boundary) == (ord("E"), True), cut


@pytest.mark.parametrize(
    ("stream", "boundary"),
    [
        (b"", True),
        (b"Q", False),
        (typed(b"Q", b"SELECT 1\x00")[:-1], False),
        (typed(b"Q", b"SELECT 1\x00"), True),
        (typed(b"S", b"") + b"Z\x00\x00", False),
    ],
)
def test_boundary(stream: bytes, boundary: bool) -> None:
    scanner = FrameScanner()
    scanner.feed(stream)
    assert scanner.at_boundary is boundary


@pytest.mark.parametrize(
    "header",
    [
        b"Q" + struct.pack("!I", 3),
        b"Q" + struct.pack("!I", 0),
        b"d" + struct.pack("!I", 0x7FFFFFFF),
    ],
)
def test_impossible_lengths_are_rejected_even_when_split(header: bytes) -> None:
    with pytest.raises(DecodeError, match="invalid message length"):
        FrameScanner().feed(header)
    scanner = FrameScanner()
    scanner.feed(header[:2])
    with pytest.raises(DecodeError):
        scanner.feed(header[2:])


def test_large_message_streams_without_buffering() -> None:
    scanner = FrameScanner()
    body = b"x" * 1_000_000
    message = typed(b"d", body)
    scanner.feed(message[:100])
    assert not scanner.at_boundary
    for start in range(100, len(message), 65536):
        scanner.feed(message[start : start + 65536])
    assert scanner.at_boundary and scanner.last_type == ord("d")


def test_message_reader_yields_whole_messages() -> None:
    reader = MessageReader()
    stream = typed(b"R", b"\x00\x00\x00\x00") + typed(b"S", b"a\x00b\x00")
    reader.feed(stream[:7])
    assert reader.next_message() is None
    reader.feed(stream[7:])
    assert reader.next_message() == (b"R", b"\x00\x00\x00\x00")
    assert reader.next_message() == (b"S", b"a\x00b\x00")
    assert reader.next_message() is None


def test_startup_reader_limits() -> None:
    reader = StartupReader()
    packet = StartupMessage(196608, {"user": "u"}).encode()
    reader.feed(packet + b"extra")
    assert reader.next_packet() == packet
    assert reader.take_rest() == b"extra"
    for bad in (struct.pack("!I", 7), struct.pack("!I", MAX_STARTUP_PACKET + 1)):
        reader = StartupReader()
        reader.feed(bad)
        with pytest.raises(DecodeError, match="invalid length of startup packet"):
            reader.next_packet()
