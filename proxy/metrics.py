"""The proxy's metrics, and their Prometheus text exposition (`GET /metrics`, `[metrics] listen`).

What is counted, and where, so that counting costs the hot path nothing it did not do already:

- relayed messages and bytes: the relays count them themselves (`Relay.message_count` and
  `byte_count`, in C where it was compiled; `FrontendSplitter` likewise), per connection; a
  connection's counts are added to `ProxyCounters` when it closes, and a scrape adds those of
  the connections still open. No lock, no allocation per message;
- client connections: `ProxyCounters`, plain integers the event loop increments;
- questions: `Questions.record`, called once a question by the answer threads (a lock, taken
  once a question, never on the relay path): the outcome, and the time of each pipeline stage
  (the answer's `timings_ms`, each stage summed over the question's candidates);
- the LLM's queue: `LLM`, two integers the LLM client's event loop moves (`proxy.nl2sql.llm`).

`exposition` writes families of samples in Prometheus' text format 0.0.4; `serve` answers
`GET /metrics` over plain asyncio HTTP (no dependency).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds (seconds) of the stage and question histograms' buckets (+Inf besides)."""

ANSWERED = "answered"
FALLBACK = "fallback"
REFUSED = "refused"
ERROR = "error"
KNOWN_OUTCOMES = (ANSWERED, FALLBACK, REFUSED)
"""Outcomes exposed from the start (at 0); errors appear with their SQLSTATE when they happen."""

CLIENT_TO_SERVER = "client_to_server"
SERVER_TO_CLIENT = "server_to_client"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One line of the exposition: the family's name plus `suffix`, labels, value."""

    suffix: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class Family:
    """A metric: its name, type (counter, gauge, histogram), help text and samples."""

    name: str
    kind: str
    help: str
    samples: tuple[Sample, ...]


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it: integers without a point, +Inf, NaN."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def exposition(families: Iterable[Family]) -> str:
    """The text exposition format (version 0.0.4): HELP, TYPE, then the samples, a family at a
    time."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            name = family.name + sample.suffix
            if sample.labels:
                shown = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sample.labels)
                name = f"{name}{{{shown}}}"
            lines.append(f"{name} {format_value(sample.value)}")
    return "\n".join(lines) + "\n"


class Histogram:
    """A histogram of seconds per label set (cumulative buckets, sum, count), not thread-safe
    by itself (its owner locks)."""

    def __init__(self, buckets: Sequence[float] = STAGE_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self._series: dict[Labels, list[float]] = {}  # bucket counts..., sum, count

    def observe(self, labels: Labels, seconds: float) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self.buckets) + 2)
        for i, bound in enumerate(self.buckets):
            if seconds <= bound:
                series[i] += 1
        series[-2] += seconds
        series[-1] += 1

    def samples(self) -> tuple[Sample, ...]:
        out: list[Sample] = []
        for labels, series in sorted(self._series.items()):
            for bound, count in zip(self.buckets, series, strict=False):
                out.append(Sample("_bucket", (*labels, ("le", format_value(bound))), count))
            out.append(Sample("_bucket", (*labels, ("le", "+Inf")), series[-1]))
            out.append(Sample("_sum", labels, round(series[-2], 6)))
            out.append(Sample("_count", labels, series[-1]))
        return tuple(out)


class Questions:
    """Questions answered by this proxy: how they ended, and how long each stage took."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[Labels, int] = {(("outcome", o),): 0 for o in KNOWN_OUTCOMES}
        self._stages = Histogram()
        self._total = Histogram()

    def record(self, outcome: str, sqlstate: str, timings_ms: Mapping[str, float]) -> None:
        """One question ended: `outcome` (answered, fallback, refused, error), the SQLSTATE of
        an error, and the answer's milliseconds per stage (with "total")."""
        labels: Labels = (("outcome", outcome),)
        if outcome == ERROR:
            labels = (*labels, ("sqlstate", sqlstate))
        with self._lock:
            self._outcomes[labels] = self._outcomes.get(labels, 0) + 1
            for stage, ms in timings_ms.items():
                if stage == "total":
                    self._total.observe((), ms / 1000)
                else:
                    self._stages.observe((("stage", stage),), ms / 1000)

    def families(self) -> list[Family]:
        with self._lock:
            outcomes = tuple(Sample("", k, v) for k, v in sorted(self._outcomes.items()))
            stages = self._stages.samples()
            total = self._total.samples()
        return [
            Family(
                "pgnl_questions_total",
                "counter",
                "Questions (nl: directives) the pipeline ended, by outcome: answered, fallback "
                "(no candidate returned values; the best that ran was sent), refused (a request "
                "to change data, NL005), error (with its SQLSTATE).",
                outcomes,
            ),
            Family(
                "pgnl_question_stage_seconds",
                "histogram",
                "Seconds a question spent in each pipeline stage (summed over its candidates).",
                stages,
            ),
            Family(
                "pgnl_question_seconds",
                "histogram",
                "Seconds the pipeline took for a question, all stages.",
                total,
            ),
        ]


@dataclass
class LLMQueue:
    """Requests of this process waiting for the LLM (the embedded model answers one at a time)
    and being answered; moved by the LLM client on its own event loop only."""

    waiting: int = 0
    in_flight: int = 0

    def families(self) -> list[Family]:
        return [
            Family(
                "pgnl_llm_queue_depth",
                "gauge",
                "LLM requests waiting for the model (the embedded one answers one at a time).",
                (Sample("", (), self.waiting),),
            ),
            Family(
                "pgnl_llm_requests_in_flight",
                "gauge",
                "LLM requests sent and not yet answered.",
                (Sample("", (), self.in_flight),),
            ),
        ]


LLM = LLMQueue()
"""The process's LLM queue (one LLM client a process)."""


@dataclass
class Traffic:
    """Messages and bytes relayed, each way."""

    client_messages: int = 0
    client_bytes: int = 0
    server_messages: int = 0
    server_bytes: int = 0

    def add(self, other: Traffic) -> None:
        self.client_messages += other.client_messages
        self.client_bytes += other.client_bytes
        self.server_messages += other.server_messages
        self.server_bytes += other.server_bytes


@dataclass
class ProxyCounters:
    """The listener's counts (event loop only): connections, and the traffic of connections
    that have closed."""

    accepted: int = 0
    refused: int = 0
    closed_traffic: Traffic = field(default_factory=Traffic)

    def families(
        self, open_connections: int, live: Traffic, native: tuple[int, int] | None = None
    ) -> list[Family]:
        """`native`: (connections the native relay holds now, hand-backs so far), when it runs."""
        traffic = Traffic()
        traffic.add(self.closed_traffic)
        traffic.add(live)

        def both(client: int, server: int) -> tuple[Sample, ...]:
            return (
                Sample("", (("direction", CLIENT_TO_SERVER),), client),
                Sample("", (("direction", SERVER_TO_CLIENT),), server),
            )

        return [
            Family(
                "pgnl_client_connections_open",
                "gauge",
                "Client connections open now (authenticating or not).",
                (Sample("", (), open_connections),),
            ),
            Family(
                "pgnl_client_connections_accepted_total",
                "counter",
                "Client connections accepted (refused ones included).",
                (Sample("", (), self.accepted),),
            ),
            Family(
                "pgnl_client_connections_refused_total",
                "counter",
                "Client connections refused with 53300 at [proxy] max_client_connections.",
                (Sample("", (), self.refused),),
            ),
            Family(
                "pgnl_relayed_messages_total",
                "counter",
                "Protocol messages after authentication, by direction (client_to_server: read "
                "from clients, directives included; server_to_client: read from the servers, "
                "the replies to the queries pgnl runs for a question included).",
                both(traffic.client_messages, traffic.server_messages),
            ),
            Family(
                "pgnl_relayed_bytes_total",
                "counter",
                "Bytes of those messages, by direction.",
                both(traffic.client_bytes, traffic.server_bytes),
            ),
            *self._native_families(native),
        ]

    @staticmethod
    def _native_families(native: tuple[int, int] | None) -> list[Family]:
        if native is None:
            return []
        return [
            Family(
                "pgnl_native_relay_connections",
                "gauge",
                "Client connections the native relay holds now (plain pass-through, in C).",
                (Sample("", (), native[0]),),
            ),
            Family(
                "pgnl_native_relay_handbacks_total",
                "counter",
                "Times the native relay gave a connection back to Python (a directive, COPY, "
                "a closing side, ...).",
                (Sample("", (), native[1]),),
            ),
        ]


# ---------------------------------------------------------------- the HTTP endpoint

_MAX_REQUEST = 8192
_READ_TIMEOUT_S = 10.0


def _response(status: str, body: bytes, content_type: str, head_only: bool) -> bytes:
    headers = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return headers.encode() + (b"" if head_only else body)


async def _handle(
    render: Callable[[], str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if method not in ("GET", "HEAD"):
            reply = _response("405 Method Not Allowed", b"GET /metrics\n", "text/plain", False)
        elif path != "/metrics":
            reply = _response("404 Not Found", b"pgnl serves /metrics\n", "text/plain", head_only)
        else:
            reply = _response("200 OK", render().encode(), CONTENT_TYPE, head_only)
        writer.write(reply)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
    except Exception:
        log.exception("the metrics endpoint failed on a request")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def serve(render: Callable[[], str], host: str, port: int) -> asyncio.Server:
    """Answer `GET /metrics` on host:port with `render()`; OSError (saying what to set) when
    the address cannot be bound."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _handle(render, reader, writer)

    try:
        return await asyncio.start_server(
            handle, host, port, reuse_address=True, limit=_MAX_REQUEST
        )
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"pgnl cannot serve metrics on {host}:{port}: {exc.strerror}; choose another "
            "address with --metrics-listen or [metrics] listen (empty: no metrics)",
        ) from None
