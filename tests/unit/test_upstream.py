"""proxy.upstream: the proxy's own queries (one write each) and their replies decoded to Python."""

from __future__ import annotations

import decimal
import math

import pytest

from proxy.upstream import (
    FETCH_SYNCS,
    Replies,
    UpstreamQueryError,
    bind_params,
    decode_value,
    fetch_messages,
    python_codec,
    rows,
)
from proxy.wire.messages import (
    Bind,
    DataRow,
    ErrorResponse,
    FieldDescription,
    Parse,
    Query,
    RowDescription,
    split_messages,
)


@pytest.mark.parametrize(
    ("oid", "raw", "value"),
    [
        (16, b"t", True),
        (16, b"f", False),
        (20, b"-9223372036854775808", -(2**63)),
        (21, b"7", 7),
        (23, b"42", 42),
        (26, b"12345", 12345),
        (700, b"1.5", 1.5),
        (701, b"-Infinity", -math.inf),
        (1700, b"12.50", decimal.Decimal("12.50")),
        (1700, b"NaN", None),  # checked below: Decimal NaN is not equal to itself
        (25, "é".encode(), "é"),
        (1043, b"varchar", "varchar"),
        (1082, b"2026-12-01", "2026-12-01"),
        (25, None, None),
    ],
)
def test_decode_value(oid: int, raw: bytes | None, value: object) -> None:
    decoded = decode_value(oid, raw, "utf-8")
    if oid == 1700 and raw == b"NaN":
        assert isinstance(decoded, decimal.Decimal) and decoded.is_nan()
    else:
        assert decoded == value and type(decoded) is type(value)


def test_a_list_is_bound_as_an_array_literal() -> None:
    (param,) = bind_params([["a", 'say "hi"', "back\\slash", None, 3, ["x"]]], "utf-8")
    assert param == b'{"a","say \\"hi\\"","back\\\\slash",NULL,"3",{"x"}}'


def test_bind_params_are_text() -> None:
    params = bind_params(
        ["é", 3, 2.5, math.nan, -math.inf, True, None, decimal.Decimal("1.10"), b"\x00\xff"],
        "latin-1",
    )
    assert params == (
        b"\xe9",
        b"3",
        b"2.5",
        b"NaN",
        b"-Infinity",
        b"t",
        None,
        b"1.10",
        b"\\x00ff",
    )


def test_fetch_is_one_write_in_a_savepoint_of_its_own() -> None:
    data = fetch_messages("SELECT $1::text", ["x"], 2.5, "utf-8")
    kinds = [kind for kind, _ in split_messages(data)]
    assert kinds == [b"Q", b"P", b"B", b"D", b"E", b"S", b"Q", b"C", b"S"]
    assert kinds.count(b"S") + kinds.count(b"Q") == FETCH_SYNCS
    messages = split_messages(data)
    assert b"SET LOCAL statement_timeout = 2500" in messages[0][1]
    assert Parse.decode(messages[1][1]) == Parse(b"pgnl_fetch", b"SELECT $1::text")
    assert Bind.decode(messages[2][1]).params == (b"x",)
    assert messages[6][1].startswith(b"ROLLBACK TO SAVEPOINT pgnl_fetch; RELEASE")
    assert Query("x").encode()[:1] == b"Q"


def reply_groups(*rows_: tuple[bytes | None, ...]) -> Replies:
    description = RowDescription(
        (
            FieldDescription(b"n", 0, 0, 23, 4, -1, 0),
            FieldDescription(b"name", 0, 0, 25, -1, -1, 0),
        )
    )
    fetched = [(b"T", description.encode()[5:])]
    fetched += [(b"D", DataRow(r).encode()[5:]) for r in rows_]
    return Replies(groups=[[], [(b"1", b""), (b"2", b""), *fetched], [], []], ready=4)


def test_rows_are_decoded_by_type() -> None:
    replies = reply_groups((b"1", b"a"), (b"2", None))
    assert rows(replies, "utf-8") == [(1, "a"), (2, None)]


def test_an_error_raises_with_its_sqlstate() -> None:
    replies = reply_groups()
    replies.error = ErrorResponse({"S": "ERROR", "C": "42P01", "M": 'relation "x" does not exist'})
    with pytest.raises(UpstreamQueryError) as caught:
        rows(replies, "utf-8")
    assert caught.value.sqlstate == "42P01" and "does not exist" in caught.value.message


@pytest.mark.parametrize(
    ("pg", "python"),
    [("UTF8", "utf-8"), ("LATIN1", "iso8859-1"), ("win1252", "cp1252"), ("MULE_INTERNAL", "utf-8")],
)
def test_python_codec(pg: str, python: str) -> None:
    assert python_codec(pg) == python
