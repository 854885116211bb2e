"""Relay and friends: message boundaries found the same however the stream is chunked, by the
pure-Python relay and by its C build alike (each case runs on both)."""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import framing
from proxy.wire.framing import MessageReader, PyRelay, StartupReader
from proxy.wire.messages import (
    MAX_STARTUP_PACKET,
    DecodeError,
    ReadyForQuery,
    StartupMessage,
    Terminate,
    typed,
)

IMPLEMENTATIONS: list[type[PyRelay]] = [PyRelay]
if framing.ACCELERATED:
    IMPLEMENTATIONS.append(framing.Relay)


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda cls: cls.__module__)
def relay_class(request: pytest.FixtureRequest) -> type[PyRelay]:
    cls: type[PyRelay] = request.param
    return cls


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here"
)
def test_the_c_build_is_used_where_a_compiler_is() -> None:
    """The C relay must be there after `pip install` on a machine with a compiler (CI's)."""
    assert framing.ACCELERATED, "proxy/wire/_framing.c was not compiled at install time"


@dataclass
class Sink:
    """What a relay wrote and reported."""

    written: list[bytes] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def relay(self, cls: type[PyRelay]) -> PyRelay:
        return cls(self.written.append, self.violations.append)


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


@pytest.mark.parametrize("cls", IMPLEMENTATIONS)
@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
@settings(max_examples=200)
def test_any_chunking_gives_the_same_facts(cls: type[PyRelay], cuts: list[int]) -> None:
    sink = Sink()
    relay = sink.relay(cls)
    pieces = chunks(SERVER_STREAM, cuts)
    for piece in pieces:
        relay.feed(piece)
    assert sink.written == pieces  # the very chunks, in order
    assert relay.at_boundary
    assert relay.message_count == 6 and relay.byte_count == len(SERVER_STREAM)  # the metrics
    assert relay.status == ord("E")
    assert relay.last_type == ord("Z")
    assert not relay.terminated and not sink.violations


def test_ready_for_query_messages_are_counted(relay_class: type[PyRelay]) -> None:
    """`ready_count` is how the session knows every request so far has been answered."""
    for cut in range(len(SERVER_STREAM) + 1):
        relay = Sink().relay(relay_class)
        relay.feed(SERVER_STREAM[:cut])
        relay.feed(SERVER_STREAM[cut:])
        assert relay.ready_count == 2, cut
    relay = Sink().relay(relay_class)
    relay.feed(SERVER_STREAM[: SERVER_STREAM.index(b"Z") + 5])  # header seen, status byte not
    assert relay.ready_count == 1 and not relay.at_boundary


def test_every_single_byte_split_tracks_ready_for_query_status(relay_class: type[PyRelay]) -> None:
    for cut in range(1, len(SERVER_STREAM)):
        relay = Sink().relay(relay_class)
        relay.feed(SERVER_STREAM[:cut])
        relay.feed(SERVER_STREAM[cut:])
        assert (relay.status, relay.at_boundary) == (ord("E"), True), cut


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
def test_boundary(relay_class: type[PyRelay], stream: bytes, boundary: bool) -> None:
    relay = Sink().relay(relay_class)
    relay.feed(stream)
    assert relay.at_boundary is boundary


def test_terminate_is_noticed_even_before_more_messages(relay_class: type[PyRelay]) -> None:
    relay = Sink().relay(relay_class)
    relay.feed(Terminate().encode() + typed(b"Q", b"SELECT 1\x00"))
    assert relay.terminated and relay.last_type == ord("Q")


@pytest.mark.parametrize(
    "header",
    [
        b"Q" + struct.pack("!I", 3),
        b"Q" + struct.pack("!I", 0),
        b"d" + struct.pack("!I", 0x7FFFFFFF),
        b"\x00" + struct.pack("!I", 0xFFFFFFFF),
    ],
)
def test_impossible_lengths_are_reported_even_when_split(
    relay_class: type[PyRelay], header: bytes
) -> None:
    whole = Sink()
    whole.relay(relay_class).feed(header)
    assert whole.written == []
    assert len(whole.violations) == 1 and "invalid message length" in whole.violations[0]

    split = Sink()
    relay = split.relay(relay_class)
    relay.feed(header[:2])
    relay.feed(header[2:])
    relay.feed(typed(b"Q", b"SELECT 1\x00"))  # nothing more is relayed after a violation
    assert split.written == [header[:2]] and len(split.violations) == 1 and relay.broken
    assert split.violations == whole.violations


def test_large_message_streams_without_buffering(relay_class: type[PyRelay]) -> None:
    sink = Sink()
    relay = sink.relay(relay_class)
    message = typed(b"d", b"x" * 1_000_000)
    relay.feed(message[:100])
    assert not relay.at_boundary
    for start in range(100, len(message), 65536):
        relay.feed(message[start : start + 65536])
    assert relay.at_boundary and relay.last_type == ord("d")
    assert b"".join(sink.written) == message


def test_write_can_be_replaced(relay_class: type[PyRelay]) -> None:
    first, second = Sink(), Sink()
    relay = first.relay(relay_class)
    relay.feed(b"Q")
    relay.write = second.written.append
    relay.feed(b"\x00\x00\x00\x04")
    assert first.written == [b"Q"] and second.written == [b"\x00\x00\x00\x04"]


# A stream of typed messages, some with impossible lengths, cut anywhere: the two builds agree.
message = st.one_of(
    st.tuples(st.sampled_from(b"QPBDEHSXZCTdcfp"), st.binary(max_size=40)).map(
        lambda m: typed(bytes([m[0]]), m[1])
    ),
    st.tuples(st.integers(0, 255), st.sampled_from([0, 1, 2, 3, 0x40000000, 0xFFFFFFFF])).map(
        lambda m: bytes([m[0]]) + struct.pack("!I", m[1])
    ),
)


@pytest.mark.skipif(not framing.ACCELERATED, reason="the C relay was not compiled")
@given(
    st.lists(message, max_size=12).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=600), max_size=10),
)
@settings(max_examples=500)
def test_c_and_python_relays_agree(stream: bytes, cuts: list[int]) -> None:
    def run(cls: type[PyRelay]) -> tuple[object, ...]:
        sink = Sink()
        relay = sink.relay(cls)
        for piece in chunks(stream, cuts):
            relay.feed(piece)
        return (
            sink.written,
            sink.violations,
            relay.at_boundary,
            relay.last_type,
            relay.status,
            relay.ready_count,
            relay.message_count,
            relay.byte_count,
            relay.terminated,
            relay.broken,
        )

    assert run(framing.Relay) == run(PyRelay)


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
