"""Every ErrorResponse the proxy itself sends, each a named builder with a fixed SQLSTATE.

No error reaches a client without a code, and each message says what to do next. Errors that come
from the upstream server are relayed untouched and never pass through here, but one: the server's
"too many clients" at connection, which `server_full` gives a hint of what to set in pgnl.
"""

from __future__ import annotations

from proxy.wire.messages import DETAIL, HINT, MESSAGE, SEVERITY, SEVERITY_V, SQLSTATE, ErrorResponse

PROTOCOL_VIOLATION = "08P01"
CONNECTION_FAILURE = "08006"
INVALID_AUTHORIZATION = "28000"
TOO_MANY_CONNECTIONS = "53300"
ADMIN_SHUTDOWN = "57P01"
INTERNAL_ERROR = "XX000"


def _fatal(sqlstate: str, message: str, hint: str = "", detail: str = "") -> ErrorResponse:
    fields = {SEVERITY: "FATAL", SEVERITY_V: "FATAL", SQLSTATE: sqlstate, MESSAGE: message}
    if detail:
        fields[DETAIL] = detail
    if hint:
        fields[HINT] = hint
    return ErrorResponse(fields)


def protocol_violation(what: str) -> ErrorResponse:
    """The client sent bytes that are not a valid frontend message (08P01)."""
    return _fatal(
        PROTOCOL_VIOLATION,
        f"invalid frontend message: {what}",
        hint="The client sent bytes that do not follow the PostgreSQL protocol; "
        "use a PostgreSQL driver, or report this to the driver's authors.",
    )


def unsupported_protocol(what: str) -> ErrorResponse:
    """The client asked for a protocol version the proxy cannot speak (08P01)."""
    return _fatal(
        PROTOCOL_VIOLATION,
        what,
        hint="Connect with a driver that speaks protocol 3 (any PostgreSQL driver since 2003).",
    )


def upstream_unreachable(target: str, reason: str) -> ErrorResponse:
    """The proxy could not open a connection to the upstream server (08006)."""
    return _fatal(
        CONNECTION_FAILURE,
        f"pgnl could not connect to the upstream server at {target}: {reason}",
        hint="Check that PostgreSQL is running there and that pgnl's upstream setting "
        "(--upstream, PGNL_PROXY_UPSTREAM) points at it.",
    )


def upstream_lost() -> ErrorResponse:
    """The upstream connection ended without the server saying why (08006)."""
    return _fatal(
        CONNECTION_FAILURE,
        "the upstream server closed the connection unexpectedly",
        hint="The server may have crashed or been restarted, or the network failed. "
        "Reconnect; a transaction that was open has been rolled back.",
    )


def channel_binding_refused(mechanism: str) -> ErrorResponse:
    """A client picked a channel-binding SASL mechanism the proxy cannot carry (28000)."""
    return _fatal(
        INVALID_AUTHORIZATION,
        f"SASL mechanism {mechanism} is not available through pgnl",
        hint="Channel binding cannot survive pgnl's TLS termination; connect with "
        "channel_binding=disable (or prefer), so that SCRAM-SHA-256 is used.",
    )


def too_many_connections(limit: int) -> ErrorResponse:
    """The proxy is at its configured connection limit (53300)."""
    return _fatal(
        TOO_MANY_CONNECTIONS,
        f"sorry, too many clients already: pgnl accepts at most {limit} connections",
        hint="Close idle connections, or raise [proxy] max_client_connections "
        "(PGNL_PROXY_MAX_CLIENT_CONNECTIONS).",
    )


SERVER_FULL_HINT = (
    "Each pgnl client holds a server connection of its own, so the server's limits "
    "(max_connections, a role's or database's CONNECTION LIMIT) count pgnl's clients: set "
    "[proxy] max_client_connections (PGNL_PROXY_MAX_CLIENT_CONNECTIONS) below them, so that pgnl "
    "refuses the extra clients itself, or raise the server's limit."
)


def server_full(upstream: ErrorResponse) -> ErrorResponse:
    """The upstream's own "too many connections" (53300), with a hint of what to set in pgnl."""
    fields = dict(upstream.fields)
    fields.setdefault(HINT, SERVER_FULL_HINT)
    return ErrorResponse(fields)


def direct_tls_unsupported() -> ErrorResponse:
    """A TLS handshake arrived with no SSLRequest before it (sslnegotiation=direct) (08P01)."""
    return _fatal(
        PROTOCOL_VIOLATION,
        "pgnl does not accept direct TLS connections",
        hint="Connect with sslnegotiation=postgres (the default): the client asks for TLS with "
        "an SSLRequest first.",
    )


def shutting_down() -> ErrorResponse:
    """The proxy is stopping and closes the connection (57P01)."""
    return _fatal(
        ADMIN_SHUTDOWN,
        "terminating connection because pgnl is shutting down",
        hint="Reconnect once pgnl is running again.",
    )


def internal_error(what: str) -> ErrorResponse:
    """pgnl itself failed (a bug); the connection is closed (XX000)."""
    return _fatal(
        INTERNAL_ERROR,
        f"pgnl failed: {what}",
        hint="This is a bug in pgnl: reconnect, and report it with pgnl's log.",
    )
