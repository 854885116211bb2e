"""`calibrate.without_join`: a join that nothing but its own condition refers to is dropped."""

from __future__ import annotations

import pytest

from proxy.nl2sql.calibrate import without_join

SINGERS = "SELECT t1.name FROM singer AS t1 JOIN song AS t2 ON t1.singer_id = t2.singer_id"


@pytest.mark.parametrize(
    ("sql", "table", "expected"),
    [
        # the right side of a join, referred to only in its ON
        (
            SINGERS + " WHERE t1.citizenship <> 'France'",
            "song",
            "SELECT t1.name FROM singer AS t1 WHERE t1.citizenship <> 'France'",
        ),
        # the left-most table of a longer chain
        (
            "SELECT t3.b FROM singer AS t1 JOIN song AS t2 ON t1.singer_id = t2.singer_id"
            " JOIN album AS t3 ON t3.song_id = t2.song_id WHERE t3.b = 1",
            "singer",
            "SELECT t3.b FROM song AS t2 INNER JOIN album AS t3 ON t3.song_id = t2.song_id"
            " WHERE t3.b = 1",
        ),
        # a table without an alias
        (
            "SELECT singer.name FROM singer JOIN song ON singer.singer_id = song.singer_id",
            "song",
            "SELECT singer.name FROM singer",
        ),
    ],
)
def test_an_unused_join_is_dropped(sql: str, table: str, expected: str) -> None:
    assert without_join(sql, table) == expected


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        (SINGERS + " WHERE t2.title <> 'France'", "song"),  # WHERE needs it
        (SINGERS.replace("t1.name", "t2.title"), "song"),  # SELECT shows it
        (SINGERS + " ORDER BY t2.sales", "song"),  # ORDER BY needs it
        (SINGERS.replace("t1.name", "*"), "song"),  # * shows its columns
        (SINGERS.replace("t1.name", "t2.*"), "song"),
        (SINGERS.replace("t1.name", "name"), "song"),  # whose name is it?
        (SINGERS.replace("JOIN", "LEFT JOIN"), "song"),  # an outer join keeps rows
        (
            SINGERS + " JOIN album AS t3 ON t3.song_id = t2.song_id",
            "song",
        ),  # another join goes through it
        (
            "SELECT t1.name FROM singer AS t1 JOIN song AS t2 ON t1.singer_id = t2.singer_id"
            " WHERE t1.singer_id IN (SELECT s.singer_id FROM song AS s)",
            "song",
        ),  # read twice
        ("SELECT name FROM singer", "singer"),  # no join
        (SINGERS + " UNION " + SINGERS, "song"),  # not one SELECT
        ("SELECT FROM WHERE", "song"),  # does not parse
        (SINGERS, "album"),  # not read
    ],
)
def test_a_join_that_is_needed_or_unclear_stays(sql: str, table: str) -> None:
    assert without_join(sql, table) is None
