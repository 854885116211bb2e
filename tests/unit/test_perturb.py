"""The pure parts of the calibration benchmark's perturbation set (benchmarks.perturb) and of the
Spider gold SQL's transpilation (benchmarks.spider_pg): no database."""

from __future__ import annotations

import random

import pytest

from benchmarks.perturb import (
    KINDS,
    PERTURBATIONS,
    abbreviate,
    change_case,
    find_sites,
    is_text_like,
    partial,
    perturb,
    plural,
    resolve_predicates,
    seed_of,
    substitute,
    typo,
    word_order,
)
from benchmarks.spider_pg import choose_type, parse_sqlite, render_postgres, to_postgres

SEEDS = range(200)


def rng(seed: int = 0) -> random.Random:
    return random.Random(seed)


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance (a transposition counts as one edit)."""
    d = [[max(i, j) if min(i, j) == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


# ---------------------------------------------------------------- the kinds, one by one


@pytest.mark.parametrize("value", ["Hawaii", "New York", "Timmy Ward", "students", "Tokyo"])
def test_typo_is_one_or_two_letter_edits(value: str) -> None:
    for seed in SEEDS:
        out = typo(value, rng(seed))
        assert out is not None and out != value
        assert 1 <= edit_distance(value, out) <= 2
        assert [c for c in out if not c.isalpha()] == [c for c in value if not c.isalpha()]


def test_typo_makes_one_edit_under_six_letters_and_uses_all_four_edits() -> None:
    outs = {typo("Tokyo", rng(seed)) for seed in SEEDS}
    assert all(o is not None and edit_distance("Tokyo", o) == 1 for o in outs)
    lengths = {len(o) for o in outs if o is not None}
    assert lengths == {4, 5, 6}  # deletion, substitution/transposition, insertion
    assert any(o is not None and sorted(o) == sorted("Tokyo") for o in outs)  # transposition


@pytest.mark.parametrize("value", ["A", "NY", "", "12", "A1"])
def test_typo_leaves_values_under_three_letters_alone(value: str) -> None:
    assert typo(value, rng()) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Hawaii", {"hawaii", "HAWAII"}),
        ("New York", {"new york", "NEW YORK"}),
        ("students", {"STUDENTS"}),
        ("USA", {"usa"}),
        ("A", {"a"}),
        ("123", set()),
    ],
)
def test_case(value: str, expected: set[str | None]) -> None:
    outs = {change_case(value, rng(seed)) for seed in range(20)}
    assert outs == (expected or {None})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Hawaii", "HI"),
        ("hawaii", "HI"),
        ("New York", "NY"),
        ("North  Carolina", "NC"),
        ("Timmy Ward", "TW"),
        ("United States", "USA"),
        ("United Kingdom", "UK"),
        ("France", "FR"),
        ("A Love of a Lifetime", "ALOAL"),
        ("students", None),
        ("A", None),
        ("Boston", None),
    ],
)
def test_abbreviation(value: str, expected: str | None) -> None:
    assert abbreviate(value, rng()) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Timmy Ward", {"Timmy", "Ward"}),
        ("New York", {"New", "York"}),
        ("American Motor Company", {"American", "Company", "American Motor", "Motor Company"}),
        ("students", {"stude", "studen"}),
        ("Hawaii", set()),  # one word of fewer than 7 characters: no prefix of 5+ that is short
        ("A", set()),
        ("A B", set()),  # no word of 2+ letters left
    ],
)
def test_partial(value: str, expected: set[str | None]) -> None:
    outs = {partial(value, rng(seed)) for seed in SEEDS}
    assert outs == (expected or {None})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("students", "student"),
        ("student", "students"),
        ("Hawaii", "Hawaiis"),
        ("boxes", "box"),
        ("box", "boxes"),
        ("class", "classes"),
        ("Timmy Ward", "Timmy Wards"),
        ("CATS", "CAT"),
        ("DOG", "DOGS"),
        ("A", None),
        ("B12", None),
    ],
)
def test_plural(value: str, expected: str | None) -> None:
    assert plural(value, rng()) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Timmy Ward", {"Ward Timmy"}),
        ("New York", {"York New"}),
        ("The Rise of Blue", {"Rise The of Blue", "The of Rise Blue", "The Rise Blue of"}),
        ("Hawaii", set()),
        ("A", set()),
        ("New New", set()),
    ],
)
def test_word_order(value: str, expected: set[str | None]) -> None:
    outs = {word_order(value, rng(seed)) for seed in SEEDS}
    assert outs == (expected or {None})


# ---------------------------------------------------------------- perturb(), determinism


@pytest.mark.parametrize("kind", sorted(PERTURBATIONS))
@pytest.mark.parametrize("value", ["Hawaii", "New York", "Timmy Ward", "students", "A"])
def test_perturb_is_deterministic_and_never_the_original(kind: str, value: str) -> None:
    seed = seed_of("db", "table", "column", value, kind)
    first = perturb(kind, value, seed)
    assert all(perturb(kind, value, seed) == first for _ in range(5))
    assert first != value


def test_seed_of_is_stable_across_runs() -> None:
    # a fixed number: hash() is salted per process, seed_of must not be
    assert seed_of("a", "b") == 0xF04CDCED9736A69D
    assert seed_of("a", "b") != seed_of("ab", "")
    assert perturb("typo", "Hawaii", seed_of("x")) == perturb("typo", "Hawaii", seed_of("x"))


def test_different_cases_get_different_typos() -> None:
    outs = {perturb("typo", "Timmy Ward", seed_of(str(i))) for i in range(50)}
    assert len(outs) > 20


def test_kinds_cover_every_perturbation() -> None:
    assert set(PERTURBATIONS) | {"original", "wrong_column"} == set(KINDS)


@pytest.mark.parametrize(
    ("literal", "text_like"),
    [("Hawaii", True), ("T", False), ("t", False), ("yes", False), ("1970", False),
     ("3.5", False), ("2009-01-02", False), ("", False), ("A1", True)],
)  # fmt: skip
def test_is_text_like(literal: str, text_like: bool) -> None:
    assert is_text_like(literal) is text_like


# ---------------------------------------------------------------- transpiling Spider's SQL


def test_double_quoted_strings_become_literals_and_identifiers_lower_case() -> None:
    assert (
        to_postgres('SELECT AirportName FROM AIRPORTS WHERE AirportCode  =  "AKO";')
        == "SELECT airportname FROM airports WHERE airportcode = 'AKO'"
    )


def test_like_becomes_ilike_and_odd_names_are_quoted() -> None:
    sql = to_postgres('SELECT T1.Name FROM singer AS T1 WHERE T1.song_name LIKE "%Hey%"')
    assert sql == "SELECT t1.name FROM singer AS t1 WHERE t1.song_name ILIKE '%Hey%'"
    assert to_postgres("SELECT `Order`, [Year] FROM t") == 'SELECT "order", year FROM t'


def test_transpile_errors_are_raised() -> None:
    from benchmarks.spider_pg import TranspileError

    with pytest.raises(TranspileError):
        to_postgres("SELECT FROM WHERE (")
    with pytest.raises(TranspileError):
        to_postgres("SELECT 1; SELECT 2")


@pytest.mark.parametrize(
    ("declared", "values", "expected"),
    [
        ("INT", [1, 2, None], ("bigint", None)),
        ("INTEGER", [1, 2.5], ("double precision", "2.5")),
        ("INT", [1, ""], ("text", "")),
        ("REAL", [1, 2.5], ("double precision", None)),
        ("DECIMAL(19,4)", [1.5, "n/a"], ("text", "n/a")),
        ("VARCHAR(20)", [1, "x"], ("text", None)),
        ("bool", ["T", "F"], ("text", None)),
        ("", [1, 2], ("bigint", None)),
        ("", [1, 2.5], ("double precision", None)),
        ("", [None], ("text", None)),
        ("INT", [2**70], ("double precision", str(2**70))),
    ],
)
def test_column_types(
    declared: str, values: list[object], expected: tuple[str, str | None]
) -> None:
    assert choose_type(declared, values) == expected


# ---------------------------------------------------------------- resolving columns

SCHEMA = {
    "singer": ["singer_id", "name", "country", "song_name"],
    "concert": ["concert_id", "concert_name", "theme", "stadium_id", "year"],
    "singer_in_concert": ["concert_id", "singer_id"],
    "stadium": ["stadium_id", "location", "name", "capacity"],
    "students": ["student_id", "first_name", "last_name"],
}


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "SELECT count(*) FROM singer WHERE country = 'France'",
            [("singer", "country", "France")],
        ),
        (
            "SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 "
            "ON T1.singer_id = T2.singer_id JOIN concert AS T3 ON T1.concert_id = T3.concert_id "
            'WHERE T3.theme = "Free choice"',
            [("concert", "theme", "Free choice")],
        ),
        (  # unqualified, in a join: the one table that has the column
            "SELECT T1.name FROM stadium AS T1 JOIN concert AS T2 "
            "ON T1.stadium_id = T2.stadium_id WHERE theme = 'Happy Tonight'",
            [("concert", "theme", "Happy Tonight")],
        ),
        (  # ambiguous unqualified column: not resolved
            "SELECT * FROM stadium JOIN singer WHERE name = 'Joe Sharp'",
            [(None, "name", "Joe Sharp")],
        ),
        (  # the same alias names different tables in the outer and inner SELECT
            "SELECT T1.name FROM stadium AS T1 WHERE T1.location = 'Raith' AND T1.stadium_id "
            "NOT IN (SELECT T1.stadium_id FROM concert AS T1 WHERE T1.theme = 'Party')",
            [("stadium", "location", "Raith"), ("concert", "theme", "Party")],
        ),
        (  # correlated subquery: an outer alias resolved from inside
            "SELECT name FROM singer AS S WHERE EXISTS (SELECT 1 FROM singer_in_concert AS C "
            "WHERE C.singer_id = S.singer_id AND S.country = 'Netherlands')",
            [("singer", "country", "Netherlands")],
        ),
        (
            "SELECT name FROM singer WHERE country IN ('France', \"Netherlands\") "
            "AND song_name LIKE '%Hey%'",
            [
                ("singer", "country", "France"),
                ("singer", "country", "Netherlands"),
                ("singer", "song_name", "Hey"),
            ],
        ),
        (
            "SELECT name FROM singer WHERE country = 'France' INTERSECT "
            "SELECT name FROM singer WHERE country = 'Netherlands'",
            [("singer", "country", "France"), ("singer", "country", "Netherlands")],
        ),
        (  # literal on the left; numbers are not text literals
            "SELECT first_name FROM Students WHERE 'Timmothy' = first_name AND student_id = 3",
            [("students", "first_name", "Timmothy")],
        ),
        (  # a column of a subquery in FROM is not a table's column
            "SELECT t.name FROM (SELECT name FROM singer) AS t WHERE t.name = 'Joe'",
            [(None, "name", "Joe")],
        ),
    ],
)
def test_alias_resolution(sql: str, expected: list[tuple[str | None, str, str]]) -> None:
    assert resolve_predicates(sql, SCHEMA) == expected


def test_operators_and_problems() -> None:
    tree = parse_sqlite(
        "SELECT name FROM singer WHERE country NOT IN ('France') AND name NOT LIKE 'J%e' "
        "AND song_name = 'Sun'"
    )
    sites = find_sites(tree, SCHEMA)
    assert [(s.operator, s.problem) for s in sites] == [
        ("not in", None),
        ("not like", "LIKE pattern with inner wildcards"),
        ("=", None),
    ]


def test_substitute_changes_only_the_site_on_the_tree() -> None:
    tree = parse_sqlite(
        "SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.concert_id = T2.singer_id "
        "WHERE T2.country = 'France' AND T1.theme = 'France'"
    )
    first, second = find_sites(tree, SCHEMA)
    assert render_postgres(substitute(tree, second, "Frnace")) == (
        "SELECT t2.name FROM concert AS t1 JOIN singer AS t2 ON t1.concert_id = t2.singer_id "
        "WHERE t2.country = 'France' AND t1.theme = 'Frnace'"
    )
    assert render_postgres(substitute(tree, first, "France", "song_name")).endswith(
        "WHERE t2.song_name = 'France' AND t1.theme = 'France'"
    )
    assert "'France' AND t1.theme = 'France'" in render_postgres(tree)  # the original is intact


def test_substitute_keeps_like_wildcards_and_qualifies_a_moved_column() -> None:
    tree = parse_sqlite(
        "SELECT T1.name FROM stadium AS T1 JOIN concert AS T2 ON T1.stadium_id = T2.stadium_id "
        "WHERE theme LIKE '%Happy%'"
    )
    (site,) = find_sites(tree, SCHEMA)
    assert (site.literal, site.prefix, site.suffix) == ("Happy", "%", "%")
    assert render_postgres(substitute(tree, site, "Hapy", "concert_name")).endswith(
        "WHERE t2.concert_name ILIKE '%Hapy%'"
    )
