"""FrontendSplitter: the client's stream passed on unchanged however it is chunked, extended-
protocol batches held to their Sync, what may be a directive offered, requests counted."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import splitter
from proxy.wire.messages import (
    FLUSH,
    SYNC,
    Bind,
    Close,
    Describe,
    Execute,
    Parse,
    Query,
    Terminate,
    typed,
)
from proxy.wire.splitter import FrontendSplitter, Unit, might_be_directive


def parse(query: bytes, name: bytes = b"") -> bytes:
    return Parse(name, query).encode()


def bind(statement: bytes = b"", portal: bytes = b"") -> bytes:
    return Bind(portal, statement).encode()


EXECUTE = Execute(b"").encode()
DESCRIBE = Describe(b"P", b"").encode()
COPY_DATA = typed(b"d", b"1\n")
COPY_DONE = typed(b"c", b"")


def batch(query: bytes, name: bytes = b"") -> bytes:
    return parse(query, name) + bind(name) + DESCRIBE + EXECUTE + SYNC


@dataclass
class Client:
    """A splitter and what it did: bytes written, units offered, violations."""

    take: bool = False
    statements: set[bytes] = field(default_factory=set)
    written: list[bytes] = field(default_factory=list)
    offered: list[Unit] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    splitter: FrontendSplitter = field(init=False)

    def __post_init__(self) -> None:
        self.splitter = FrontendSplitter(
            self.written.append, self.offer, self.violations.append, self.statements
        )

    def offer(self, unit: Unit) -> bool:
        self.offered.append(unit)
        return self.take

    @property
    def out(self) -> bytes:
        return b"".join(self.written)


def message_count(stream: bytes) -> int:
    """The messages in a well-framed stream."""
    count = pos = 0
    while pos < len(stream):
        pos += 1 + struct.unpack_from("!I", stream, pos + 1)[0]
        count += 1
    return count


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, start = [], 0
    for point in [*points, len(data)]:
        out.append(data[start:point])
        start = point
    return out


PLAIN = (
    Query("SELECT 1").encode()
    + batch(b"SELECT $1")
    + parse(b"-- a comment\nSELECT 2", b"s1")
    + bind(b"s1")
    + EXECUTE
    + FLUSH
    + SYNC
    + Query("COPY t FROM STDIN").encode()
    + COPY_DATA
    + COPY_DONE
    + Close(b"S", b"s1").encode()
    + SYNC
    + Terminate().encode()
)


@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
@settings(max_examples=300)
def test_plain_traffic_goes_through_unchanged_however_chunked(cuts: list[int]) -> None:
    client = Client()
    for piece in chunks(PLAIN, cuts):
        client.splitter.feed(piece)
    assert client.out == PLAIN
    assert client.offered == [] and client.violations == []
    assert client.splitter.syncs == 5  # 2 Queries, 3 Syncs
    assert client.splitter.terminated and client.splitter.at_boundary
    assert client.splitter.message_count == message_count(PLAIN) == 17  # the metrics
    assert client.splitter.byte_count == len(PLAIN)


def test_a_chunk_of_whole_messages_is_written_as_it_came() -> None:
    client = Client()
    client.splitter.feed(PLAIN)
    assert len(client.written) == 1 and client.written[0] is PLAIN


def test_a_batch_is_held_until_its_sync() -> None:
    client = Client()
    client.splitter.feed(parse(b"SELECT 1") + bind() + EXECUTE)
    assert client.written == []
    client.splitter.feed(SYNC)
    assert client.out == parse(b"SELECT 1") + bind() + EXECUTE + SYNC


def test_a_directive_query_is_offered_and_what_follows_waits() -> None:
    client = Client(take=True)
    directive = Query("-- nl: how many?").encode()
    after = Query("SELECT 2").encode()
    client.splitter.feed(Query("SELECT 1").encode() + directive + after)
    assert client.out == Query("SELECT 1").encode()
    (unit,) = client.offered
    assert unit.is_query and unit.raw == directive
    client.splitter.feed(batch(b"SELECT 3"))
    assert client.out == Query("SELECT 1").encode()  # held while the directive is answered
    client.splitter.resume()
    assert client.out == Query("SELECT 1").encode() + after + batch(b"SELECT 3")
    assert client.splitter.syncs == 3  # the directive was the session's to send


def test_a_declined_offer_goes_on_as_it_came() -> None:
    client = Client(take=False)
    stream = Query("-- only a comment\nSELECT 1").encode() + batch(b"/* nl */ SELECT 1")
    client.splitter.feed(stream)
    assert len(client.offered) == 2 and client.out == stream
    assert client.splitter.syncs == 2


def test_a_batch_with_a_directive_is_offered_whole() -> None:
    client = Client(take=True)
    begin = parse(b"BEGIN") + bind() + EXECUTE
    directive = parse(b"-- nl: q", b"S_1") + bind(b"S_1") + DESCRIBE + EXECUTE + SYNC
    client.splitter.feed(Query("SELECT 1").encode() + begin + directive[:7])
    assert client.out == Query("SELECT 1").encode()
    client.splitter.feed(directive[7:])
    (unit,) = client.offered
    assert unit.raw == begin + directive
    assert [kind for kind, _ in unit.messages] == [b"P", b"B", b"E", b"P", b"B", b"D", b"E", b"S"]


def test_binding_a_statement_made_from_a_directive_is_offered() -> None:
    client = Client(statements={b"S_1"})
    client.splitter.feed(bind(b"S_2") + EXECUTE + SYNC)
    assert client.offered == []
    client.splitter.feed(bind(b"S_1") + EXECUTE + SYNC)
    assert len(client.offered) == 1
    client.splitter.feed(Close(b"S", b"S_1").encode() + SYNC)
    assert len(client.offered) == 2


def test_queries_that_drop_statements_are_offered_while_there_are_some() -> None:
    client = Client()
    client.splitter.feed(Query("DEALLOCATE ALL").encode())
    assert client.offered == []
    client.statements.add(b"S_1")
    client.splitter.feed(Query("deallocate S_1").encode() + Query("DISCARD ALL").encode())
    assert len(client.offered) == 2


def test_syncs_sent_in_copy_in_mode_are_not_counted() -> None:
    """libpq: Parse/Bind/Describe/Execute/Sync for COPY FROM STDIN, the data, CopyDone, Sync.
    The server ignores the first Sync (it came in COPY IN mode): one ReadyForQuery in all."""
    client = Client()
    client.splitter.feed(batch(b"COPY t FROM STDIN") + COPY_DATA + COPY_DATA + COPY_DONE + SYNC)
    assert client.splitter.syncs == 1


def test_skip_until_sync() -> None:
    client = Client()
    client.splitter.skip_until_sync()
    client.splitter.feed(bind() + EXECUTE + Query("SELECT 1").encode() + SYNC + EXECUTE)
    assert client.out == SYNC and client.splitter.syncs == 1
    client.splitter.feed(SYNC)
    assert client.out == SYNC + EXECUTE + SYNC


def test_a_batch_cut_short_by_a_query_is_decided_first() -> None:
    client = Client(take=False)
    stream = parse(b"-- nl: q") + bind() + EXECUTE + Query("SELECT 1").encode()
    client.splitter.feed(stream)
    (unit,) = client.offered
    assert [kind for kind, _ in unit.messages] == [b"P", b"B", b"E"]
    assert client.out == stream and client.splitter.syncs == 1


def test_flush_ends_a_batch() -> None:
    client = Client()
    client.splitter.feed(parse(b"SELECT 1") + FLUSH)
    assert client.out == parse(b"SELECT 1") + FLUSH


def test_resume_asked_during_the_offer_goes_straight_on() -> None:
    client = Client()

    def offer(unit: Unit) -> bool:
        client.offered.append(unit)
        client.splitter.resume()  # the session answered at once
        return True

    client.splitter.offer = offer
    client.splitter.feed(Query("-- nl: q").encode() + Query("SELECT 1").encode())
    assert client.out == Query("SELECT 1").encode() and not client.splitter.paused


def test_impossible_lengths_are_violations() -> None:
    for header in (b"Q" + struct.pack("!I", 3), b"P" + struct.pack("!I", 0x7FFFFFFF)):
        client = Client()
        client.splitter.feed(header)
        assert client.written == [] and len(client.violations) == 1
        assert "invalid message length" in client.violations[0] and client.splitter.broken


def test_might_be_directive() -> None:
    for text, maybe in [
        (b"-- nl: q", True),
        (b"  \n/* NL show: q */", True),
        (b"SELECT 1 -- nl: q", False),
        (b"-- no", False),
        (b"", False),
    ]:
        assert might_be_directive(text, 0, len(text)) is maybe, text


# Well-framed messages of every frontend type (bodies that hold no directive), any chunking: once
# a last Sync closes any open batch, the server got exactly what the client sent.
_message = st.tuples(
    st.sampled_from(b"QPBDECHSFdcfX"), st.binary(max_size=30).map(lambda b: b.replace(b"-", b"+"))
).map(lambda m: typed(bytes([m[0]]), m[1]))
_big = st.sampled_from([typed(b"d", b"x" * 70_000), typed(b"F", b"y" * 12_000)])


@given(
    st.lists(st.one_of(_message, _big), max_size=14).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=200_000), max_size=10),
)
@settings(max_examples=300)
def test_any_well_framed_stream_goes_through_unchanged(stream: bytes, cuts: list[int]) -> None:
    client = Client()
    for piece in chunks(stream, cuts):
        client.splitter.feed(piece)
    client.splitter.feed(SYNC)
    assert client.out == stream + SYNC
    assert client.violations == [] and client.splitter.at_boundary
    assert client.splitter.message_count == message_count(stream) + 1
    assert client.splitter.byte_count == len(stream) + 1 + 4


def test_a_taken_unit_and_what_waited_meanwhile_are_counted_once() -> None:
    client = Client(take=True)
    question = Query("-- nl: how many?").encode()
    after = Query("SELECT 1").encode() + batch(b"SELECT 2")
    client.splitter.feed(question + after[:7])
    client.splitter.feed(after[7:])
    assert len(client.offered) == 1 and client.splitter.paused
    client.splitter.resume()
    assert client.out == after
    assert client.splitter.message_count == 1 + message_count(after)
    assert client.splitter.byte_count == len(question) + len(after)


def test_a_message_that_is_not_held_is_passed_on_as_it_comes() -> None:
    """PostgreSQL answers an unknown type byte at once, and reads CopyData as it streams."""
    client = Client()
    client.splitter.feed(b"\x8f")
    assert client.out == b"\x8f"
    client.splitter.feed(b"\x00\x00\x13\x35")
    assert client.out == b"\x8f\x00\x00\x13\x35"
    copy = typed(b"d", b"z" * 100_000)
    client = Client()
    for start in range(0, len(copy), 65536):
        client.splitter.feed(copy[start : start + 65536])
        assert client.out == copy[: start + 65536]  # nothing waits for the rest
    assert client.splitter.at_boundary


def test_a_small_type_too_long_for_postgresql_is_passed_on_at_once() -> None:
    client = Client()
    header = b"E" + struct.pack("!I", 20_000)
    client.splitter.feed(parse(b"SELECT 1") + header)
    assert client.out == parse(b"SELECT 1") + header


# The hot path's scan, in C where it was compiled, agrees with the Python reference.
_texts = st.sampled_from(
    [b"SELECT 1", b"-- nl: q", b" /*NL*/", b"--x", b"/", b"-", b"", b"\tselect nL", b"/* n l */"]
)
_plain_message = st.one_of(
    _texts.map(lambda t: typed(b"Q", t + b"\0")),
    st.tuples(_texts, st.binary(max_size=6)).map(
        lambda m: Parse(m[1].replace(b"\0", b""), m[0]).encode()
    ),
    st.sampled_from(
        [bind(), DESCRIBE, EXECUTE, SYNC, FLUSH, COPY_DATA, Close(b"S", b"x").encode()]
    ),
    st.binary(max_size=8),
)


@pytest.mark.skipif(splitter.scan_plain is splitter.py_scan_plain, reason="no C build")
@given(
    st.lists(_plain_message, max_size=8).map(b"".join),
    st.integers(0, 3),
    st.sampled_from([0, ord("E"), ord("Q")]),
    st.booleans(),
)
@settings(max_examples=2000)
def test_c_and_python_scans_agree(data: bytes, in_run: int, last_other: int, names: bool) -> None:
    expected = splitter.py_scan_plain(data, in_run, last_other, names)
    assert splitter.scan_plain(data, in_run, last_other, names) == expected
