"""Fuzzing pgnl with malformed frontend messages: raw sockets, hypothesis, a real PostgreSQL.

Pins, over more than 10,000 malformed, truncated and oversized messages (`MIN_FUZZED`):

- The proxy never crashes and never logs an internal error (a traceback or an ERROR line);
  client faults are logged at INFO.
- Framing violations the proxy detects itself (startup packet length < 8 or > 10000, a protocol
  version other than 3.x, a malformed StartupMessage or CancelRequest, a body on SSLRequest or
  GSSENCRequest, a second GSSENCRequest, data pipelined after an SSLRequest that TLS will answer,
  a TLS handshake with no SSLRequest, typed message length < 4 or > 1 GiB) get exactly one FATAL
  ErrorResponse with SQLSTATE 08P01, then the proxy closes the connection by itself. (Only when
  a typed message's header comes split across reads may PostgreSQL answer first, seeing an
  unknown type byte the proxy has already relayed: then two such errors arrive.)
- During authentication the proxy reads the client's SASLInitialResponse: a malformed one gets
  08P01 and a channel-binding (-PLUS) mechanism 28000, from the proxy; any message type but 'p'
  goes to PostgreSQL, which refuses it with 08P01.
- Well-framed nonsense after authentication goes to PostgreSQL, which answers it: unknown
  message types end in its FATAL 08P01; random bodies of known types leave the session usable
  (a query after them is answered). Truncated and lying messages end when the client closes.
  No exchange ever hangs: every read has a timeout.
- A well-behaved psycopg connection opened before the fuzzing keeps working throughout.

Each test's expectations come from an oracle written here from the protocol's rules, not from
the proxy's code. Runs are derandomized, so a failure reproduces.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import itertools
import socket
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import trustme
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.wire.messages import (
    CANCEL_REQUEST_CODE,
    GSSENC_REQUEST_CODE,
    MAX_MESSAGE,
    MAX_STARTUP_PACKET,
    PROTOCOL_3_0,
    PROTOCOL_3_2,
    SSL_REQUEST_CODE,
    ErrorResponse,
    StartupMessage,
    split_messages,
    typed,
)
from tests.fix_pg import TEST_DB, Postgres
from tests.fix_proxy import RunningProxy, start_proxy

pytestmark = pytest.mark.integration

T = TypeVar("T")

MIN_FUZZED = 10_000  # over the module; each test has a floor of its own too (runs are
# derandomized, so the counts move only when the strategies do)
TIMEOUT = 10.0  # seconds any single read may wait: longer is a hang
CHECK_EVERY = 200  # examples between checks of the bystander connection and the proxy's log

# PostgreSQL's own rules for typed messages after authentication (postgres.c, SocketBackend):
# these types are accepted, any other is FATAL 08P01 as soon as its type byte is read; those of
# SMALL_TYPES may be at most 10000 bytes long (PQ_SMALL_MESSAGE_LIMIT), or the backend drops the
# connection without a word (COMMERROR).
FRONTEND_TYPES = b"QPBEDCHSFdcfX"
SMALL_TYPES = b"CDEHSXcf"
PG_SMALL_MESSAGE_LIMIT = 10000
UNKNOWN_TYPES = bytes(b for b in range(256) if b not in FRONTEND_TYPES)


# ---------------------------------------------------------------- bookkeeping


@dataclass
class Tally:
    """Messages thrown at the proxy: `fuzzed` malformed ones, `valid` queries mixed in."""

    fuzzed: int = 0
    valid: int = 0
    connections: int = 0


TALLY = Tally()
MESSAGES_BY_TEST: dict[str, int] = {}
OUTCOMES: collections.Counter[str] = collections.Counter()


def note(outcome: str) -> None:
    """Count an outcome (printed at the end with -s; hypothesis reports it as an event too)."""
    OUTCOMES[outcome] += 1
    event(outcome)


class Bystander:
    """A well-behaved client, connected through the proxy before the fuzzing starts."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        self.conn = conn
        self.pid = self._backend_pid()
        self.queries = 0

    def _backend_pid(self) -> object:
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return row[0]

    def check(self) -> None:
        self.queries += 1
        row = self.conn.execute("SELECT %s::int + 1, pg_backend_pid()", [self.queries]).fetchone()
        assert row == (self.queries + 1, self.pid), f"the bystander connection broke: {row}"


class Guard:
    """Watches one proxy while it is fuzzed: alive, quiet, and serving the bystander."""

    def __init__(self, proxy: RunningProxy, bystander: Bystander) -> None:
        self.proxy = proxy
        self.bystander = bystander
        self.examples = 0
        self._errors_before = len(proxy.internal_errors())

    def example_done(self) -> None:
        self.examples += 1
        assert self.proxy.alive(), f"the proxy died:\n{''.join(self.proxy.log[-30:])}"
        if self.examples % CHECK_EVERY == 0:
            self.check()

    def check(self) -> None:
        assert self.proxy.alive(), f"the proxy died:\n{''.join(self.proxy.log[-30:])}"
        self.bystander.check()
        time.sleep(0.05)  # let the log drain thread catch up
        errors = self.proxy.internal_errors()[self._errors_before :]
        assert not errors, "the proxy logged internal errors:\n" + "".join(errors[:20])


def _open_bystander(proxy: RunningProxy, **params: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(proxy.dsn(**params), autocommit=True)


@pytest.fixture(scope="module")
def guard(proxy: RunningProxy) -> Iterator[Guard]:
    with _open_bystander(proxy) as conn:
        yield Guard(proxy, Bystander(conn))


@pytest.fixture(scope="module")
def tls_proxy(
    postgres: Postgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    """A proxy of its own with a certificate, so that it answers SSLRequest with 'S'."""
    pem: Path = tmp_path_factory.mktemp("fuzz-tls") / "server.pem"
    trustme.CA().issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(pem)
    )
    running = start_proxy(
        postgres.port,
        env={"PGNL_PROXY_TLS_CERT_FILE": str(pem), "PGNL_PROXY_TLS_KEY_FILE": str(pem)},
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tls_guard(tls_proxy: RunningProxy) -> Iterator[Guard]:
    with _open_bystander(tls_proxy, sslmode="require") as conn:
        assert conn.info.pgconn.ssl_in_use
        yield Guard(tls_proxy, Bystander(conn))


FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------- a raw client


class RawClient:
    """One TCP connection to the proxy, with everything it received kept in `received`."""

    def __init__(self, proxy: RunningProxy) -> None:
        self.sock = socket.create_connection((proxy.host, proxy.port), timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.received = bytearray()
        self.at_eof = False
        self.reset = False
        self._pos = 0  # where the next typed message starts in `received`
        TALLY.connections += 1

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """Send it all; False when the proxy had already closed the connection."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def send_pieces(self, data: bytes, cuts: Sequence[int]) -> bool:
        """Send data in pieces, cut at these offsets, so that headers straddle reads."""
        bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
        return all(self.send(data[a:b]) for a, b in itertools.pairwise(bounds))

    def shut_write(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def _recv(self) -> bool:
        if self.at_eof:
            return False
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise AssertionError(
                f"hang: nothing from the proxy for {TIMEOUT}s; received so far "
                f"{bytes(self.received)[-200:]!r}"
            ) from None
        except ConnectionResetError:
            self.reset = True
            chunk = b""
        if not chunk:
            self.at_eof = True
            return False
        self.received += chunk
        return True

    def read_bytes(self, count: int) -> None:
        """Read until `count` bytes in all have arrived (or the connection ended)."""
        while len(self.received) < count and self._recv():
            pass

    def read_to_eof(self) -> bytes:
        while self._recv():
            pass
        return bytes(self.received)

    def next_message(self) -> tuple[bytes, bytes] | None:
        """The next typed message, or None once the connection has ended."""
        while True:
            buf = self.received
            if len(buf) - self._pos >= 5:
                length = struct.unpack_from("!I", buf, self._pos + 1)[0]
                assert length >= 4, f"the proxy sent a message of length {length}"
                end = self._pos + 1 + length
                if len(buf) >= end:
                    kind = bytes(buf[self._pos : self._pos + 1])
                    body = bytes(buf[self._pos + 5 : end])
                    self._pos = end
                    return kind, body
            if not self._recv():
                return None


def _whole_messages(data: bytes) -> list[tuple[bytes, bytes]]:
    """Split what the proxy sent; it must be whole messages, and every error must have a code."""
    messages = split_messages(data)
    assert sum(5 + len(body) for _, body in messages) == len(data), (
        f"the proxy sent a broken message: {data[-200:]!r}"
    )
    for kind, body in messages:
        if kind == b"E":
            error = ErrorResponse.decode(body)
            assert error.sqlstate and error.severity, f"an error without a code: {error}"
    return messages


def _assert_protocol_violation(data: bytes, context: object, at_most: int = 1) -> None:
    """What arrived is a FATAL ErrorResponse with SQLSTATE 08P01 (or up to `at_most` of them)."""
    messages = _whole_messages(data)
    assert 1 <= len(messages) <= at_most, f"{context}: got {messages}"
    for kind, body in messages:
        assert kind == b"E", f"{context}: got {messages}"
        error = ErrorResponse.decode(body)
        assert (error.sqlstate, error.severity) == ("08P01", "FATAL"), f"{context}: got {error}"


# ---------------------------------------------------------------- strategies: shared


def _short(value: object) -> str:
    if isinstance(value, bytes) and len(value) > 64:
        return f"{value[:48]!r}+<{len(value) - 48} more bytes>"
    if isinstance(value, tuple):
        items = [_short(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return repr(value)


class Compact:
    """A dataclass repr that abbreviates long bytes, for hypothesis' reports and ours."""

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{f.name}={_short(getattr(self, f.name))}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        )
        return f"{type(self).__name__}({fields})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """One of the strategies, each chosen in proportion to its weight.

    (Not `st.one_of` with repeats: it drops duplicate strategies, so weights would be lost.)
    """
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


def _u32(value: int) -> bytes:
    return struct.pack("!I", value & 0xFFFFFFFF)


def _filler(size: int) -> bytes:
    return bytes(i % 251 + 1 for i in range(size))  # no NUL, no pattern of interest


_nul_free = st.binary(max_size=12).map(lambda b: b.replace(b"\0", b"."))
_any_u32 = st.integers(0, 0xFFFFFFFF)


# ---------------------------------------------------------------- strategies: startup phase


def _startup_lengths(honest: int) -> st.SearchStrategy[int]:
    """The honest length mostly; else one that lies, in range or out."""
    return weighted(
        (4, st.just(honest)),
        (1, st.integers(0, 7)),
        (1, st.integers(8, MAX_STARTUP_PACKET)),
        (1, st.integers(MAX_STARTUP_PACKET + 1, 0xFFFFFFFF)),
        (1, st.sampled_from([MAX_STARTUP_PACKET, MAX_STARTUP_PACKET + 1, 0x7FFFFFFF, 0xFFFFFFFF])),
    )


@st.composite
def _request_packets(draw: st.DrawFn) -> bytes:
    """SSLRequest and GSSENCRequest, mostly well formed, sometimes with a body or a lie."""
    code = draw(st.sampled_from([SSL_REQUEST_CODE, GSSENC_REQUEST_CODE]))
    body = draw(weighted((4, st.just(b"")), (1, st.binary(min_size=1, max_size=16))))
    length = draw(weighted((4, st.just(8 + len(body))), (1, _startup_lengths(8 + len(body)))))
    return _u32(length) + _u32(code) + body


@st.composite
def _cancel_packets(draw: st.DrawFn) -> bytes:
    secret = draw(weighted((3, st.binary(max_size=8)), (1, st.integers(0, 300).map(_filler))))
    pid = draw(st.integers(-(2**31), 2**31 - 1))
    body = struct.pack("!i", pid) + secret
    length = draw(_startup_lengths(8 + len(body)))
    return _u32(length) + _u32(CANCEL_REQUEST_CODE) + body


_VERSIONS = st.one_of(
    st.sampled_from(
        [PROTOCOL_3_0, PROTOCOL_3_2, 2 << 16, 4 << 16, (3 << 16) | 0xFFFF, (1234 << 16) | 5679, 0]
    ),
    _any_u32,
)
_KEYS = weighted(
    (3, st.sampled_from([b"user", b"database", b"application_name", b"options", b"_pq_.x"])),
    (1, _nul_free),
)
_VALUES = weighted(
    (3, st.sampled_from([b"trust_user", b"nobody", TEST_DB.encode(), b""])),
    (2, _nul_free),
    (1, st.integers(9970, 10000).map(_filler)),  # around the 10000-byte limit
)


@st.composite
def _startup_packets(draw: st.DrawFn) -> bytes:
    """StartupMessages: any protocol version, missing user, missing terminators, lying length."""
    version = draw(_VERSIONS)
    pairs = draw(st.lists(st.tuples(_KEYS, _VALUES), max_size=4))
    body = b"".join(key + b"\0" + value + b"\0" for key, value in pairs)
    layout = draw(st.sampled_from(["whole", "whole", "no final terminator", "cut", "trailing"]))
    if layout == "whole":
        body += b"\0"
    elif layout == "cut":
        body = body[: draw(st.integers(0, len(body)))]
    elif layout == "trailing":
        body += b"\0" + draw(st.binary(min_size=1, max_size=8))
    length = draw(_startup_lengths(8 + len(body)))
    return _u32(length) + _u32(version) + body


_VALID_STARTUPS = st.builds(
    lambda version, user, extra: StartupMessage(
        version, {"user": user, "database": TEST_DB, **extra}
    ).encode(),
    st.sampled_from([PROTOCOL_3_0, PROTOCOL_3_2]),
    st.sampled_from(["trust_user", "trust_user", "nobody", "scram_user"]),
    st.dictionaries(
        st.sampled_from(["application_name", "DateStyle", "no_such_setting"]),
        st.text(max_size=8).map(lambda t: t.replace("\0", "")),
    ),
)

_BAD_STARTUP_LENGTHS = st.one_of(st.integers(0, 7), st.integers(MAX_STARTUP_PACKET + 1, 0xFFFFFFFF))

_STARTUP_PACKETS = weighted(
    (3, _request_packets()),
    (2, _cancel_packets()),
    (5, _startup_packets()),
    (1, _VALID_STARTUPS),  # goes upstream: what follows is relayed during authentication
    (2, st.binary(min_size=1, max_size=40)),  # garbage
    (1, st.binary(max_size=40).map(lambda b: b"\x16\x03\x01" + b)),  # a direct TLS handshake
    (1, st.tuples(_BAD_STARTUP_LENGTHS, st.binary(max_size=16)).map(lambda t: _u32(t[0]) + t[1])),
    (
        1,  # a real packet past the limit: the header alone must be enough to refuse it
        st.integers(MAX_STARTUP_PACKET + 1, MAX_STARTUP_PACKET + 2000).map(
            lambda n: _u32(n) + _u32(PROTOCOL_3_0) + _filler(n - 8)
        ),
    ),
)


@dataclass(frozen=True, repr=False)
class StartupScript(Compact):
    """Packets, sent in chunks; after each chunk the client reads the one-byte answers due."""

    packets: tuple[bytes, ...]
    chunks: tuple[bytes, ...]


@st.composite
def startup_scripts(draw: st.DrawFn) -> StartupScript:
    packets = draw(st.lists(_STARTUP_PACKETS, min_size=1, max_size=5))
    cuts: set[int] = set()
    offset = 0
    for packet in packets:
        offset += len(packet)
        if draw(st.booleans()):
            cuts.add(offset)
    stream = b"".join(packets)
    if len(stream) > 1:
        cuts.update(draw(st.lists(st.integers(1, len(stream) - 1), max_size=2)))
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(stream)), len(stream)]
    chunks = tuple(stream[a:b] for a, b in itertools.pairwise(bounds))
    return StartupScript(tuple(packets), chunks)


# ---------------------------------------------------------------- the startup oracle


class StartupEnd(enum.Enum):
    OPEN = "the proxy still waits for the rest of a packet"
    VIOLATION = "the proxy answers 08P01 and closes"
    CANCEL = "a CancelRequest: the proxy closes without a word"
    UPSTREAM = "a valid StartupMessage: the proxy connects upstream"
    TLS = "the proxy answered 'S' and starts a TLS handshake"


@dataclass(frozen=True)
class StartupExpectation:
    end: StartupEnd
    at_chunk: int  # the chunk in which it ends (the last one when OPEN)
    answers: tuple[bytes, ...]  # the one-byte answers received by the end of each chunk
    why: str


def expect_startup(chunks: Sequence[bytes], tls: bool) -> StartupExpectation:
    """What the proxy must do with these chunks, from the protocol's rules for startup packets."""
    buffer = b""
    answered = b""
    answers: list[bytes] = []
    gss_answered = False

    def done(end: StartupEnd, at: int, why: str) -> StartupExpectation:
        return StartupExpectation(end, at, (*answers, answered), why)

    if chunks and chunks[0][:1] == b"\x16":  # a TLS record: sslnegotiation=direct
        return done(StartupEnd.VIOLATION, 0, "a TLS handshake without SSLRequest")
    for at, chunk in enumerate(chunks):
        buffer += chunk
        while len(buffer) >= 4:
            length = struct.unpack_from("!I", buffer)[0]
            if not 8 <= length <= MAX_STARTUP_PACKET:
                return done(StartupEnd.VIOLATION, at, f"packet length {length}")
            if len(buffer) < length:
                break
            packet, buffer = buffer[:length], buffer[length:]
            code = struct.unpack_from("!I", packet, 4)[0]
            if code in (SSL_REQUEST_CODE, GSSENC_REQUEST_CODE):
                if length != 8:
                    return done(StartupEnd.VIOLATION, at, "SSL/GSSENCRequest with a body")
                if code == GSSENC_REQUEST_CODE:
                    if gss_answered:
                        return done(StartupEnd.VIOLATION, at, "a second GSSENCRequest")
                    gss_answered = True
                    answered += b"N"
                elif not tls:
                    answered += b"N"
                elif buffer:
                    return done(StartupEnd.VIOLATION, at, "data pipelined after SSLRequest")
                else:
                    answered += b"S"
                    return done(StartupEnd.TLS, at, "SSLRequest")
            elif code == CANCEL_REQUEST_CODE:
                if not 16 <= length <= 12 + 256:
                    return done(StartupEnd.VIOLATION, at, f"CancelRequest of length {length}")
                return done(StartupEnd.CANCEL, at, "CancelRequest")
            elif code >> 16 != 3:
                return done(StartupEnd.VIOLATION, at, f"protocol {code >> 16}.{code & 0xFFFF}")
            else:
                problem = _startup_parameters_problem(packet)
                if problem:
                    return done(StartupEnd.VIOLATION, at, problem)
                return done(StartupEnd.UPSTREAM, at, "StartupMessage")
        answers.append(answered)
    return StartupExpectation(StartupEnd.OPEN, len(chunks) - 1, tuple(answers), "incomplete")


def _startup_parameters_problem(packet: bytes) -> str:
    """What is wrong with a StartupMessage's name/value list, or '' if nothing is."""
    names: set[bytes] = set()
    pos = 8
    while True:
        if pos >= len(packet):
            return "no final terminator"
        if packet[pos] == 0:
            if pos != len(packet) - 1:
                return "bytes after the final terminator"
            break
        strings: list[bytes] = []
        for _ in range(2):
            end = packet.find(b"\0", pos)
            if end < 0:
                return "a string without terminator"
            strings.append(packet[pos:end])
            pos = end + 1
        names.add(strings[0])
    return "" if b"user" in names else "no user"


# ---------------------------------------------------------------- startup-phase tests


def run_startup_script(guard: Guard, script: StartupScript, tls: bool) -> None:
    expected = expect_startup(script.chunks, tls)
    note(f"startup {expected.end.name}")
    context = f"{expected.end.name} ({expected.why}) for {script}"
    with RawClient(guard.proxy) as client:
        sent = 0
        for at, chunk in enumerate(script.chunks):
            if at > expected.at_chunk and expected.end is not StartupEnd.UPSTREAM:
                if expected.end is StartupEnd.TLS:  # what follows 'S' is a bogus handshake
                    sent += len(chunk) if client.send(chunk) else 0
                break
            if not client.send(chunk):
                break
            sent += len(chunk)
            if at < len(expected.answers):
                client.read_bytes(len(expected.answers[at]))
        offset = 0
        for packet in script.packets:  # count those the proxy was sent (at least in part)
            if offset < sent:
                TALLY.fuzzed += 1
            offset += len(packet)
        if expected.end in (StartupEnd.OPEN, StartupEnd.UPSTREAM, StartupEnd.TLS):
            client.shut_write()  # else the proxy must close by itself
        received = client.read_to_eof()
    answers = expected.answers[-1] if expected.answers else b""
    assert received[: len(answers)] == answers, f"{context}: received {received[:100]!r}"
    rest = received[len(answers) :]
    if expected.end is StartupEnd.VIOLATION:
        _assert_protocol_violation(rest, context)
    elif expected.end in (StartupEnd.OPEN, StartupEnd.CANCEL):
        assert rest == b"", f"{context}: received {rest[:200]!r}"
        assert not client.reset, f"{context}: connection reset"
    elif expected.end is StartupEnd.TLS:  # the handshake failed: at most a TLS alert
        assert rest[:1] in (b"", b"\x15"), f"{context}: received {rest[:200]!r}"
    else:  # PostgreSQL had its say; whatever it was, it came whole and the connection ended
        _whole_messages(rest)
    guard.example_done()


def test_startup_phase(guard: Guard) -> None:
    before = TALLY.fuzzed

    @settings(FUZZ, max_examples=4000)
    @given(script=startup_scripts())
    def fuzz(script: StartupScript) -> None:
        run_startup_script(guard, script, tls=False)

    fuzz()
    guard.check()
    MESSAGES_BY_TEST["startup"] = TALLY.fuzzed - before
    assert MESSAGES_BY_TEST["startup"] >= 6000


def test_startup_phase_with_tls_available(tls_guard: Guard) -> None:
    before = TALLY.fuzzed

    @settings(FUZZ, max_examples=800)
    @given(script=startup_scripts())
    def fuzz(script: StartupScript) -> None:
        run_startup_script(tls_guard, script, tls=True)

    fuzz()
    tls_guard.check()
    MESSAGES_BY_TEST["startup tls"] = TALLY.fuzzed - before
    assert MESSAGES_BY_TEST["startup tls"] >= 1200


# ---------------------------------------------------------------- strategies: after auth


@dataclass(frozen=True, repr=False)
class Msg(Compact):
    kind: int
    body: bytes
    valid: bool = False  # a well-formed query mixed in, not counted as fuzz

    def encode(self) -> bytes:
        return typed(bytes([self.kind]), self.body)

    @property
    def ends_session(self) -> bool:
        """PostgreSQL drops the connection on reading it (Terminate, or too long for its type)."""
        too_long = self.kind in SMALL_TYPES and 4 + len(self.body) > PG_SMALL_MESSAGE_LIMIT
        return self.kind == ord("X") or too_long


_FIELDS = st.one_of(
    _nul_free.map(lambda b: b + b"\0"),
    st.integers(-(2**15), 2**15 - 1).map(lambda n: struct.pack("!h", n)),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack("!i", n)),
    st.sampled_from([b"S", b"P", b"\xff\xff\xff\xff", b"\0\0"]),
)
_BODIES = weighted(
    (8, st.binary(max_size=48)),
    (8, st.lists(_FIELDS, max_size=6).map(b"".join)),  # plausible fields, wrong counts
    (1, st.integers(PG_SMALL_MESSAGE_LIMIT - 8, PG_SMALL_MESSAGE_LIMIT + 3000).map(_filler)),
)
_KNOWN_KINDS = weighted(
    (24, st.sampled_from(list(FRONTEND_TYPES.replace(b"X", b"")))), (1, st.just(ord("X")))
)
_VALID_QUERIES = [
    "SELECT 1",
    "",
    "SELECT repeat('x', 3000)",
    "SHOW server_version",
    "SELECT 1/0",
    "SELECT 1; SELECT 2",
    "SET application_name = 'pgnl-fuzz'",
    "SELECT relname FROM pg_class LIMIT 20",
]
_MESSAGES = weighted(
    (8, st.builds(Msg, _KNOWN_KINDS, _BODIES)),
    (1, st.sampled_from(_VALID_QUERIES).map(lambda q: Msg(ord("Q"), q.encode() + b"\0", True))),
)


@dataclass(frozen=True, repr=False)
class Batch(Compact):
    messages: tuple[Msg, ...]
    cuts: tuple[int, ...]  # where to split the batch's bytes into separate sends


_BATCHES = st.builds(
    Batch,
    st.lists(_MESSAGES, min_size=1, max_size=8).map(tuple),
    st.lists(st.integers(1, 300), max_size=3).map(tuple),
)


class Ending(enum.Enum):
    BAD_LENGTH = "a length < 4 or > 1 GiB: the proxy answers 08P01 and closes"
    UNKNOWN_TYPE = "an unknown type byte: PostgreSQL answers 08P01 and closes"
    TRUNCATED = "a message cut short (or lying long), then the client closes"
    LYING_SHORT = "a length shorter than the body, then the client closes"
    GARBAGE = "random bytes, then the client closes"
    SENTINEL = "nothing broken: a last query is answered"


@dataclass(frozen=True, repr=False)
class Terminal(Compact):
    ending: Ending
    data: bytes
    cut: int  # send data[:cut] and data[cut:] apart
    close: str  # "shutdown" (half close, then read to the end), "abort" or "" (wait)


_BAD_LENGTHS = weighted(
    (2, st.integers(0, 3)),
    (2, st.integers(MAX_MESSAGE + 1, 0xFFFFFFFF)),
    (2, st.sampled_from([0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x40000000, MAX_MESSAGE + 1])),
)
_CLOSES = st.sampled_from(["shutdown", "abort"])


@st.composite
def _terminals(draw: st.DrawFn) -> Terminal:
    ending = draw(st.sampled_from(list(Ending)))
    cut = draw(st.integers(0, 8))
    if ending is Ending.SENTINEL:
        return Terminal(ending, b"", 0, "")
    if ending is Ending.BAD_LENGTH:
        kind = draw(st.integers(0, 255))
        data = bytes([kind]) + _u32(draw(_BAD_LENGTHS)) + draw(st.binary(max_size=32))
        return Terminal(ending, data, cut, draw(st.sampled_from(["", "shutdown"])))
    if ending is Ending.UNKNOWN_TYPE:
        kind = draw(st.sampled_from(list(UNKNOWN_TYPES)))
        body = draw(st.binary(max_size=32))
        length = draw(st.one_of(st.just(4 + len(body)), st.integers(4, MAX_MESSAGE)))
        return Terminal(ending, bytes([kind]) + _u32(length) + body, cut, "")
    if ending is Ending.TRUNCATED:
        kind = draw(st.sampled_from(list(FRONTEND_TYPES)))
        body = draw(st.binary(max_size=32))
        extra = draw(st.one_of(st.integers(1, 100), st.integers(1, MAX_MESSAGE - 4 - len(body))))
        data = bytes([kind]) + _u32(4 + len(body) + extra) + body
        return Terminal(ending, data, cut, draw(_CLOSES))
    if ending is Ending.LYING_SHORT:
        kind = draw(st.sampled_from(list(FRONTEND_TYPES)))
        body = draw(st.binary(min_size=1, max_size=48))
        data = bytes([kind]) + _u32(draw(st.integers(4, 3 + len(body)))) + body
        return Terminal(ending, data, cut, draw(_CLOSES))
    return Terminal(ending, draw(st.binary(min_size=1, max_size=64)), cut, draw(_CLOSES))


@dataclass(frozen=True, repr=False)
class SessionScript(Compact):
    batches: tuple[Batch, ...]
    terminal: Terminal


_SESSION_SCRIPTS = st.builds(SessionScript, st.lists(_BATCHES, max_size=3).map(tuple), _terminals())


# ---------------------------------------------------------------- after-auth tests


def login(proxy: RunningProxy) -> RawClient:
    """A raw client logged in as trust_user, past its first ReadyForQuery."""
    client = RawClient(proxy)
    params = {
        "user": "trust_user",
        "database": TEST_DB,
        "application_name": "pgnl-fuzz",
        "statement_timeout": "5s",  # a random FunctionCall could land on pg_sleep
    }
    try:
        client.send(StartupMessage(PROTOCOL_3_0, params).encode())
        while (message := client.next_message()) is not None:
            assert message[0] != b"E", f"login failed: {ErrorResponse.decode(message[1])}"
            if message[0] == b"Z":
                return client
        raise AssertionError("the proxy closed the connection during login")
    except BaseException:
        client.sock.close()
        raise


_SENTINELS = itertools.count()


def _sync_with_sentinel(client: RawClient, batch: Batch) -> bool:
    """Send a batch, then Sync and a query; True when the query was answered (else it ended)."""
    token = f"pgnl-fuzz-sentinel-{next(_SENTINELS)}".encode()
    data = b"".join(m.encode() for m in batch.messages)
    sentinel = typed(b"S", b"") + typed(b"Q", b"SELECT '" + token + b"'\0")
    if not client.send_pieces(data + sentinel, batch.cuts):
        client.read_to_eof()
        return False
    TALLY.fuzzed += sum(not m.valid for m in batch.messages)
    TALLY.valid += sum(m.valid for m in batch.messages)
    seen_token = False
    while (message := client.next_message()) is not None:
        kind, body = message
        if kind == b"D" and token in body:
            seen_token = True
        elif kind == b"Z" and seen_token:
            return True
    return False


def run_session_script(guard: Guard, script: SessionScript) -> None:
    context = repr(script)
    with login(guard.proxy) as client:
        for batch in script.batches:
            ends = any(m.ends_session for m in batch.messages)
            answered = _sync_with_sentinel(client, batch)
            assert answered != ends, f"{context}: batch {batch} answered={answered}"
            if not answered:
                note("after auth: PostgreSQL dropped the connection mid-script")
                _whole_messages(client.read_to_eof())
                guard.example_done()
                return
        terminal = script.terminal
        note(f"after auth {terminal.ending.name}")
        if terminal.ending is Ending.SENTINEL:
            assert _sync_with_sentinel(client, Batch((), ())), context
            guard.example_done()
            return
        start = len(client.received)
        if client.send_pieces(terminal.data, [terminal.cut]):
            TALLY.fuzzed += 1
        if terminal.close == "abort":
            client.sock.close()
            guard.example_done()
            return
        if terminal.close == "shutdown":
            client.shut_write()
        rest = client.read_to_eof()[start:]
    if terminal.ending is Ending.BAD_LENGTH:
        # The proxy relays a header split across reads before it has seen the length whole; an
        # unknown type byte makes PostgreSQL answer 08P01 first, and the proxy may add its own.
        split = 0 < terminal.cut < 5 and terminal.data[0] in UNKNOWN_TYPES
        _assert_protocol_violation(rest, context, at_most=2 if split else 1)
    elif terminal.ending is Ending.UNKNOWN_TYPE:
        _assert_protocol_violation(rest, context)
    else:
        _whole_messages(rest)
    guard.example_done()


def test_after_authentication(guard: Guard) -> None:
    before = TALLY.fuzzed

    @settings(FUZZ, max_examples=2500)
    @given(script=_SESSION_SCRIPTS)
    def fuzz(script: SessionScript) -> None:
        run_session_script(guard, script)

    fuzz()
    guard.check()
    MESSAGES_BY_TEST["after auth"] = TALLY.fuzzed - before
    assert MESSAGES_BY_TEST["after auth"] >= 12000


# ---------------------------------------------------------------- during authentication
#
# The one place after startup where the proxy reads a client message's body: the SASL mechanism
# a client picks, which must not be a channel-binding (-PLUS) one.


@dataclass(frozen=True, repr=False)
class AuthScript(Compact):
    user: str
    data: bytes  # what the client sends once the server asked for a password or SASL
    cut: int


_MECHANISMS = weighted(
    (3, st.sampled_from([b"SCRAM-SHA-256", b"SCRAM-SHA-256-PLUS", b"OAUTHBEARER", b""])),
    (1, _nul_free),
)
_SASL_DATA = weighted(
    (2, st.sampled_from([b"n,,n=,r=fuzz", b"y,,n=,r=fuzz", b"p=tls-server-end-point,,n=,r=x"])),
    (1, st.binary(max_size=40)),
)


@st.composite
def _sasl_bodies(draw: st.DrawFn) -> bytes:
    """SASLInitialResponse bodies: name, NUL, int32 size, data, each of them possibly wrong."""
    mechanism = draw(_MECHANISMS)
    data = draw(_SASL_DATA)
    size = draw(weighted((4, st.just(len(data))), (1, st.just(-1)), (1, st.integers(-5, 50))))
    body = mechanism + b"\0" + struct.pack("!i", size) + data
    if draw(st.integers(0, 5)) == 0:  # cut it anywhere: no NUL, no size, half a size
        body = body[: draw(st.integers(0, len(body)))]
    return body


@st.composite
def auth_scripts(draw: st.DrawFn) -> AuthScript:
    user = draw(st.sampled_from(["scram_user"] * 4 + ["md5_user", "clear_user"]))
    kind = draw(weighted((5, st.just(ord("p"))), (1, st.integers(0, 255))))
    body = draw(weighted((5, _sasl_bodies()), (1, st.binary(max_size=48))))
    length = draw(
        weighted(
            (6, st.just(4 + len(body))),
            (1, _BAD_LENGTHS),
            (1, st.integers(4, 3 + len(body) + 40)),  # lies, shorter or longer
        )
    )
    return AuthScript(user, bytes([kind]) + _u32(length) + body, draw(st.integers(0, 8)))


def expect_auth(script: AuthScript) -> tuple[str, str]:
    """(SQLSTATE of the one FATAL error due, or "" if it depends: the client closes; why)."""
    kind, body = script.data[0], script.data[5:]
    length = struct.unpack_from("!I", script.data, 1)[0]
    if not 4 <= length <= MAX_MESSAGE:
        return "08P01", "the proxy refuses a length < 4 or > 1 GiB"
    if length != 4 + len(body):
        return "", "a lying length"
    if kind != ord("p"):  # PostgreSQL: "expected password/SASL response, got message type"
        return "08P01", "PostgreSQL refuses a message type other than 'p'"
    if script.user != "scram_user":
        return "", "a password PostgreSQL judges"
    end = body.find(b"\0")
    if end < 0 or len(body) < end + 5:
        return "08P01", "the proxy refuses a SASLInitialResponse cut short"
    size = struct.unpack_from("!i", body, end + 1)[0]
    if size not in (-1, len(body) - end - 5):
        return "08P01", "the proxy refuses SASLInitialResponse data of the wrong size"
    if body[:end].endswith(b"-PLUS"):
        return "28000", "the proxy refuses a channel-binding mechanism"
    return "", "a SASL exchange PostgreSQL judges"


def run_auth_script(guard: Guard, script: AuthScript) -> None:
    sqlstate, why = expect_auth(script)
    note(f"authentication: {why}")
    context = f"{why}: {script}"
    with RawClient(guard.proxy) as client:
        params = {"user": script.user, "database": TEST_DB}
        client.send(StartupMessage(PROTOCOL_3_0, params).encode())
        message = client.next_message()
        assert message is not None and message[0] == b"R", f"{context}: got {message}"
        assert struct.unpack_from("!i", message[1])[0] in (3, 5, 10), f"{context}: {message}"
        start = len(client.received)
        if client.send_pieces(script.data, [script.cut]):
            TALLY.fuzzed += 1
        if not sqlstate:
            client.shut_write()  # PostgreSQL may wait for more
        rest = client.read_to_eof()[start:]
    messages = _whole_messages(rest)
    if sqlstate:
        assert [kind for kind, _ in messages] == [b"E"], f"{context}: got {messages}"
        error = ErrorResponse.decode(messages[0][1])
        assert (error.sqlstate, error.severity) == (sqlstate, "FATAL"), f"{context}: {error}"
    guard.example_done()


def test_during_authentication(guard: Guard) -> None:
    before = TALLY.fuzzed

    @settings(FUZZ, max_examples=1000)
    @given(script=auth_scripts())
    def fuzz(script: AuthScript) -> None:
        run_auth_script(guard, script)

    fuzz()
    guard.check()
    MESSAGES_BY_TEST["during auth"] = TALLY.fuzzed - before
    assert MESSAGES_BY_TEST["during auth"] >= 950


def test_at_least_10000_messages_were_thrown(guard: Guard) -> None:
    """Runs last: the whole module threw MIN_FUZZED messages, and the bystander survived."""
    print(f"\n{TALLY}; by test: {MESSAGES_BY_TEST}")  # shown with -s
    print("\n".join(f"{count:6} {outcome}" for outcome, count in sorted(OUTCOMES.items())))
    if len(MESSAGES_BY_TEST) < 4:
        pytest.skip("counts only when the module's fuzz tests all ran")
    guard.check()
    assert TALLY.fuzzed >= MIN_FUZZED, TALLY
