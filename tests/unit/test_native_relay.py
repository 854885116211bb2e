"""The native relay (proxy/_relay_loop.c) against the Python path, its reference: real sockets
(socketpairs), the loop's own thread, streams cut at random places and sent a piece at a time.

Client to server: whatever the native loop passes on, then what the Python splitter does with
the rest once the connection is handed back, must equal what the splitter alone does with the
whole stream: the same bytes in the same order, the same units offered to the session, the same
counts; and the native loop must never pass on a unit the session would have been offered.
Server to client: the loop's walk, handed back anywhere, goes on in a Python relay to the same
facts as one relay that saw everything.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy import native_relay
from proxy.wire.framing import PyRelay
from proxy.wire.messages import ReadyForQuery, typed
from proxy.wire.splitter import FrontendSplitter, Unit

pytestmark = pytest.mark.skipif(not native_relay.AVAILABLE, reason="the native relay is not built")


@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler here"
)
def test_the_native_relay_is_built_where_a_compiler_is() -> None:
    assert native_relay.AVAILABLE, "proxy/_relay_loop.c was not compiled at install time"


@pytest.fixture(scope="module")
def loop() -> Iterator[object]:
    native = native_relay._relay_loop.Loop()
    yield native
    native.close()


# ---------------------------------------------------------------- streams

IDS = count(100)


def query(text: str) -> bytes:
    return typed(b"Q", text.encode() + b"\0")


def parse(text: str, name: bytes = b"") -> bytes:
    return typed(b"P", name + b"\0" + text.encode() + b"\0\0\0")


BIND = typed(b"B", b"\0\0\0\0\0\0\0\0")
DESCRIBE = typed(b"D", b"P\0")
EXECUTE = typed(b"E", b"\0\0\0\0\0")
SYNC = typed(b"S", b"")
FLUSH = typed(b"H", b"")


def batch(text: str) -> bytes:
    return parse(text) + BIND + DESCRIBE + EXECUTE + SYNC


CLIENT_UNITS = {
    "select": query("SELECT 1"),
    "long select": query("SELECT '" + "x" * 70_000 + "'"),
    "spaced select": query("  SELECT 2"),
    "comment": query("-- a comment\nSELECT 3"),
    "directive": query("-- nl: how many students are there?"),
    "block directive": query("/* NL */ SELECT 4"),
    "batch": batch("SELECT $1"),
    "directive batch": batch("-- nl: which course is best?"),
    "flushed": parse("SELECT 5", b"s1") + DESCRIBE + FLUSH,
    "copy data": typed(b"d", b"1\t2\n") + typed(b"c", b""),
    "function call": typed(b"F", b"\0\0\0\1\0\0\0\0\0\0"),
    "terminate": typed(b"X", b""),
}


def offered_units(stream: bytes, pieces: list[bytes]) -> tuple[bytes, list[bytes], tuple[int, ...]]:
    """The reference: the Python splitter alone, declining every unit it offers (so that all
    goes on): what it wrote, the units it offered, and its counts."""
    out: list[bytes] = []
    offers: list[bytes] = []

    def offer(unit: Unit) -> bool:
        offers.append(unit.raw)
        return False

    splitter = FrontendSplitter(out.append, offer, pytest.fail)
    for piece in pieces:
        splitter.feed(piece)
    return b"".join(out), offers, (splitter.syncs, splitter.message_count, splitter.byte_count)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, start = [], 0
    for point in [*points, len(data)]:
        if point > start:
            out.append(data[start:point])
        start = point
    return out


def read_all(sock: socket.socket, until_eof: bool = False, wait: float = 0.05) -> bytes:
    got = bytearray()
    while True:
        ready, _, _ = select.select([sock], [], [], wait if not until_eof else 5)
        if not ready:
            return bytes(got)
        data = sock.recv(1 << 20)
        if not data:
            return bytes(got)
        got += data


def handed_back(native: object, ident: int, timeout: float = 5) -> native_relay.HandBack:
    """The record of connection `ident`, once the loop hands it back on its own."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        select.select([native.notify_fd], [], [], 0.05)  # type: ignore[attr-defined]
        for record in native.take():  # type: ignore[attr-defined]
            if record[0] == ident:
                return native_relay.HandBack.of(record)
    raise AssertionError("the native relay did not hand the connection back")


def fresh_splitter(out: list[bytes], offers: list[bytes]) -> FrontendSplitter:
    def offer(unit: Unit) -> bool:
        offers.append(unit.raw)
        return False

    return FrontendSplitter(out.append, offer, pytest.fail)


@dataclass
class Pair:
    """A client and a server socket with the native loop between them. The loop gets duplicates
    of its two ends, as it does of asyncio's sockets in real use; the ends stay here, to read
    what the loop left unread once it hands back."""

    client: socket.socket
    client_end: socket.socket
    server_end: socket.socket
    server: socket.socket

    def close(self) -> None:
        for sock in (self.client, self.client_end, self.server_end, self.server):
            sock.close()


def attached(native: object, ident: int, buffers: int = 0) -> Pair:
    """`buffers`: small socket buffers, to make the sockets fill up."""
    client, client_end = socket.socketpair()
    server_end, server = socket.socketpair()
    for sock in (client, client_end, server, server_end):
        if buffers:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffers)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffers)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    state = fresh_splitter([], []).native_state()
    assert state is not None
    native.attach(  # type: ignore[attr-defined]
        ident,
        os.dup(client_end.fileno()),
        os.dup(server_end.fileno()),
        PyRelay(print, print).export(),
        state,
    )
    return Pair(client, client_end, server_end, server)


def run_client_case(native: object, stream: bytes, pieces: list[bytes], ident: int) -> None:
    expected, expected_offers, expected_counts = offered_units(stream, pieces)
    assert expected == stream  # declining every offer, the splitter passes everything on

    pair = attached(native, ident)
    for piece in pieces:
        pair.client.sendall(piece)
        time.sleep(0.0003)
    pair.client.shutdown(socket.SHUT_WR)
    back = handed_back(native, ident)
    natively = read_all(pair.server) + back.to_server
    unread = read_all(pair.client_end, until_eof=True)  # the loop stopped at a unit: the rest
    out: list[bytes] = []
    offers: list[bytes] = []
    splitter = fresh_splitter(out, offers)
    splitter.load_native_state(back.splitter)
    if back.from_client:
        splitter.feed(back.from_client)
    if unread:
        splitter.feed(unread)
    pair.close()

    assert natively + b"".join(out) == stream
    assert offers == expected_offers
    assert (splitter.syncs, splitter.message_count, splitter.byte_count) == expected_counts
    # Nothing the session would be offered went by natively.
    if expected_offers:
        first = stream.index(expected_offers[0])
        assert len(natively) <= first
    assert back.reason in ("client unit", "client closed")


@given(
    st.lists(st.sampled_from(sorted(CLIENT_UNITS)), min_size=1, max_size=8),
    st.lists(st.integers(min_value=0, max_value=200_000), max_size=10),
)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_client_streams_go_on_as_the_python_splitter_sends_them(
    loop: object, names: list[str], cuts: list[int]
) -> None:
    stream = b"".join(CLIENT_UNITS[name] for name in names)
    run_client_case(loop, stream, cut(stream, cuts), next(IDS))


def test_every_split_of_a_mixed_stream(loop: object) -> None:
    """Plain units, then a directive: cut at every byte, one cut at a time."""
    stream = query("SELECT 1") + batch("SELECT $1") + query("-- nl: how many?") + query("SELECT 2")
    for at in range(len(stream) + 1):
        run_client_case(loop, stream, cut(stream, [at]), at)


def test_plain_units_stay_native_until_the_client_goes(loop: object) -> None:
    stream = query("SELECT 1") + batch("SELECT $1") + parse("SELECT 2", b"s") + FLUSH
    pair = attached(loop, 7)
    pair.client.sendall(stream)
    assert read_all(pair.server, wait=0.5) == stream
    assert loop.take() == []  # type: ignore[attr-defined]
    traffic = loop.traffic(7)  # type: ignore[attr-defined]
    assert traffic[:2] == (8, len(stream))
    back = native_relay.HandBack.of(loop.detach(7))  # type: ignore[attr-defined]
    assert back.reason == "asked"
    assert back.splitter[0] == 2  # the Query and the Sync: two ReadyForQuery to come
    assert loop.detach(7) is None  # type: ignore[attr-defined]
    pair.close()


# ---------------------------------------------------------------- server to client


SERVER_MESSAGES = {
    "row description": typed(b"T", b"\x00\x01abc\x00" + b"\x00" * 18),
    "data row": typed(b"D", b"\x00\x01\x00\x00\x00\x03xyz"),
    "big data row": typed(b"D", b"\x00\x01" + b"\x00\x04\x00\x00" + b"y" * 300_000),
    "complete": typed(b"C", b"SELECT 1\x00"),
    "idle": ReadyForQuery(b"I").encode(),
    "in transaction": ReadyForQuery(b"T").encode(),
    "failed": ReadyForQuery(b"E").encode(),
    "notice": typed(b"N", b"SNOTICE\x00Mhello\x00\x00"),
    "empty": typed(b"D", b""),
}


@given(
    st.lists(st.sampled_from(sorted(SERVER_MESSAGES)), min_size=1, max_size=10),
    st.lists(st.integers(min_value=0, max_value=400_000), max_size=10),
    st.integers(min_value=0, max_value=10),
)
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_server_streams_keep_the_relays_facts_wherever_handed_back(
    loop: object, names: list[str], cuts: list[int], stop_after: int
) -> None:
    stream = b"".join(SERVER_MESSAGES[name] for name in names)
    pieces = cut(stream, cuts)
    reference = PyRelay(lambda data: None, pytest.fail)
    for piece in pieces:
        reference.feed(piece)

    ident = 1_000_000 + stop_after
    pair = attached(loop, ident)
    client, server = pair.client, pair.server
    native_part, python_part = pieces[:stop_after], pieces[stop_after:]
    received = bytearray()
    for piece in native_part:
        server.sendall(piece)
        received += read_all(client, wait=0.002)
    expected_native = b"".join(native_part)
    deadline = time.monotonic() + 5
    while len(received) < len(expected_native) and time.monotonic() < deadline:
        received += read_all(client, wait=0.05)
    back = native_relay.HandBack.of(loop.detach(ident))  # type: ignore[attr-defined]
    received += back.to_client
    assert back.from_server == b""
    out: list[bytes] = []
    relay = PyRelay(out.append, pytest.fail)
    relay.load(back.relay)
    for piece in python_part:
        relay.feed(piece)
    pair.close()
    assert bytes(received) + b"".join(out) == stream
    assert relay.export() == reference.export()


def test_an_impossible_length_from_the_server_comes_back_unrelayed(loop: object) -> None:
    good = ReadyForQuery(b"I").encode()
    bad = b"D\x00\x00\x00\x02"
    pair = attached(loop, 9)
    client, server = pair.client, pair.server
    server.sendall(good)
    assert read_all(client, wait=0.5) == good
    server.sendall(bad)
    back = handed_back(loop, 9)
    assert back.reason == "server unit"
    assert back.from_server == bad
    violations: list[str] = []
    relay = PyRelay(lambda data: pytest.fail(f"relayed {data!r}"), violations.append)
    relay.load(back.relay)
    assert relay.ready_count == 1
    relay.feed(back.from_server)
    assert violations == ["invalid message length 2 for message type 'D'"]
    pair.close()


def test_a_slow_reader_holds_the_other_side_back(loop: object) -> None:
    """The client reads nothing for a while: the loop keeps what the socket would not take and
    stops reading from the server, then passes everything on, in order, once the client reads."""
    pair = attached(loop, 11, buffers=4096)
    client, server = pair.client, pair.server
    row = typed(b"D", b"\x00\x01\x00\x00\x03\xe8" + b"r" * 1000)
    stream = row * 2000 + ReadyForQuery(b"I").encode()
    server.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 2
    while sent < len(stream) and time.monotonic() < deadline:
        try:
            sent += server.send(stream[sent : sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
    assert sent < len(stream)  # the server's side filled up: the loop stopped reading it
    received = bytearray()
    server.setblocking(True)
    client.setblocking(False)
    deadline = time.monotonic() + 10
    while len(received) < len(stream) and time.monotonic() < deadline:
        with contextlib.suppress(BlockingIOError):
            received += client.recv(65536)
        if sent < len(stream):
            try:
                server.setblocking(False)
                sent += server.send(stream[sent : sent + 65536])
            except BlockingIOError:
                time.sleep(0.001)
    assert bytes(received) == stream
    back = native_relay.HandBack.of(loop.detach(11))  # type: ignore[attr-defined]
    assert back.relay[5] == 1  # one ReadyForQuery seen
    pair.close()
