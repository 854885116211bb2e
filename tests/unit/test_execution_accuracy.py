"""The pure parts of benchmarks.execution_accuracy: when order matters, comparing rows, reading
the chosen candidate and the stage timings from a trace, and attributing a miss to a stage."""

from __future__ import annotations

from decimal import Decimal

import pytest

from benchmarks.execution_accuracy import (
    ANSWERED_EMPTY,
    ANSWERED_NESTED,
    ANSWERED_SET_OPERATION,
    ANSWERED_WRONG,
    NO_CANDIDATE_RAN,
    TIMEOUT,
    SketchView,
    blank_result,
    chosen_candidate,
    compare,
    gold_orders,
    loss,
    sketch_differences,
    slot_differences,
    stage_of,
    stage_times,
    trace_rows,
)
from proxy.nl2sql.answer import TraceRow
from proxy.nl2sql.sketch import STAR, Predicate, SelectItem, Sketch, Slots


@pytest.mark.parametrize(
    ("query", "ordered"),
    [
        ("SELECT name FROM singer", False),
        ("SELECT name FROM singer ORDER BY age DESC", True),
        ("SELECT name FROM singer ORDER BY age LIMIT 1", True),
        # an ORDER BY inside a subquery does not order the result
        (
            "SELECT name FROM singer WHERE age > (SELECT age FROM singer ORDER BY age LIMIT 1)",
            False,
        ),
        ("SELECT name FROM a UNION SELECT name FROM b", False),
        ("SELECT count(*) FROM singer GROUP BY country", False),
    ],
)
def test_gold_orders(query: str, ordered: bool) -> None:
    assert gold_orders(query) is ordered


def test_compare_numeric_and_float() -> None:
    gold = [(Decimal("29.3333333333333333"), 3)]
    assert compare(gold, [(29.333333333333332, 3)], ordered=False) == (True, True)
    assert compare(gold, [(29.3334, 3)], ordered=False) == (False, False)


def test_compare_order_only_when_the_gold_orders() -> None:
    gold = [("a",), ("b",), ("b",)]
    assert compare(gold, [("b",), ("a",), ("b",)], ordered=False) == (True, True)
    assert compare(gold, [("b",), ("a",), ("b",)], ordered=True) == (False, False)
    assert compare(gold, [("a",), ("b",)], ordered=False) == (False, False)  # a multiset


def test_compare_columns_in_another_order() -> None:
    gold = [("France", 3), ("Spain", 1)]
    assert compare(gold, [(1, "Spain"), (3, "France")], ordered=False) == (True, False)
    assert compare([], [], ordered=False) == (True, True)
    assert compare([], [(None,)], ordered=False) == (False, False)


def _trace(*rows: tuple[str, int | None, str]) -> list[TraceRow]:
    return [
        TraceRow(stage, candidate, None, "", outcome, 1.0) for stage, candidate, outcome in rows
    ]


@pytest.mark.parametrize(
    ("trace", "chosen"),
    [
        (_trace(("schema", None, "2 tables"), ("sketch", None, "16 sketches")), None),
        (
            _trace(
                ("schema", None, "2 tables"),
                ("complete", 1, "PLM"),
                ("check", 1, "3 rows"),
                ("calibrate", 1, "literals as found"),
            ),
            1,
        ),
        # candidate 1 fails, 2 returns nothing, 3 answers
        (
            _trace(
                ("complete", 1, "PLM"),
                ("check", 1, "error 42883 (operator does not exist)"),
                ("complete", 2, "PLM"),
                ("check", 2, "0 rows"),
                ("complete", 3, "PLM"),
                ("check", 3, "1 rows"),
            ),
            3,
        ),
        # nothing answers: the first candidate that ran is the fall-back
        (
            _trace(
                ("complete", 1, "no SQL: nested subquery"),
                ("complete", 2, "PLM"),
                ("check", 2, "0 rows"),
                ("complete", 3, "PLM"),
                ("check", 3, "0 rows"),
            ),
            2,
        ),
        # calibration's corrected SQL returns rows: the candidate answers
        (
            _trace(
                ("complete", 1, "PLM"),
                ("check", 1, "0 rows"),
                ("calibrate", 1, "1 literals corrected"),
                ("execute", 1, "2 rows"),
            ),
            1,
        ),
        (_trace(("complete", 1, "PLM"), ("check", 1, "error 42P01 (no table)")), None),
    ],
)
def test_chosen_candidate(trace: list[TraceRow], chosen: int | None) -> None:
    assert chosen_candidate(trace) == chosen


def test_stage_times_and_trace_rows() -> None:
    rows = [
        ("schema", None, None, "", "2 tables", 1.5),
        ("complete", 1, -0.5, "", "PLM", 0.25),
        ("complete", 2, -1.0, None, "PLM", 0.75),
        ("check", 1, -0.5, "", "3 rows", Decimal("2.0")),
    ]
    trace = trace_rows(rows)
    assert trace[2] == TraceRow("complete", 2, -1.0, "", "PLM", 0.75)
    assert stage_times(trace) == {"schema": 1.5, "complete": 1.0, "check": 2.0}


# A small schema is not needed: sketches name columns and tables by index.
NAME, AGE, COUNTRY = 1, 2, 3
SINGER, CONCERT = 0, 1


def _sketch(
    select: tuple[SelectItem, ...] = (SelectItem("", NAME),),
    tables: tuple[int, ...] = (SINGER,),
    keywords: tuple[str, ...] = ("where",),
    where: tuple[Predicate, ...] = (Predicate(COUNTRY, "="),),
    **slots: object,
) -> Sketch:
    return Sketch(
        frozenset(select),
        frozenset(tables),
        frozenset(keywords),
        Slots(where=where, **slots),  # type: ignore[arg-type]
    )


GOLD = _sketch()


def test_sketch_and_slot_differences() -> None:
    assert sketch_differences(GOLD, GOLD) == []
    other = _sketch(select=(SelectItem("count", STAR),), tables=(SINGER, CONCERT))
    assert sketch_differences(GOLD, other) == ["SELECT", "FROM"]
    assert slot_differences(GOLD, _sketch(where=(Predicate(AGE, ">"),))) == ["WHERE"]
    assert slot_differences(GOLD, _sketch(limit=1, group_by=frozenset({NAME}))) == [
        "GROUP BY",
        "LIMIT",
    ]
    two = (Predicate(COUNTRY, "="), Predicate(AGE, ">"))
    assert slot_differences(_sketch(where=two), _sketch(where=two[::-1])) == []


def _view(gold: Sketch | None, *candidates: Sketch) -> SketchView:
    return SketchView(gold, "" if gold else "subquery in FROM", candidates)


def _loss(view: SketchView | None, chosen: int | None = 1, **kwargs: object) -> str:
    arguments: dict[str, object] = {
        "timed_out": False,
        "sqlstate": "",
        "error": "",
        "view": view,
        "chosen": chosen,
        "predicted_rows": 3,
    }
    arguments.update(kwargs)
    return loss(**arguments)  # type: ignore[arg-type]


def test_loss_attribution() -> None:
    wrong_from = _sketch(tables=(SINGER, CONCERT))
    assert _loss(_view(GOLD, GOLD), timed_out=True) == TIMEOUT
    assert _loss(_view(GOLD, GOLD), sqlstate="NL001", error="NL001: none ran") == NO_CANDIDATE_RAN
    assert _loss(_view(GOLD, GOLD), sqlstate="42P01", error="x") == "proxy error 42P01"
    assert _loss(_view(None, GOLD)).startswith("gold outside the sketch grammar")
    assert _loss(_view(GOLD, GOLD)) == ANSWERED_WRONG
    assert _loss(_view(GOLD, GOLD), predicted_rows=0) == ANSWERED_EMPTY
    # the chosen candidate's sketch is judged, numbered from 1
    assert _loss(_view(GOLD, GOLD, wrong_from), chosen=2) == "sketch wrong: FROM"
    assert _loss(_view(GOLD, wrong_from, GOLD), chosen=2) == ANSWERED_WRONG
    assert _loss(_view(GOLD, wrong_from, GOLD), chosen=None) == "sketch wrong: FROM"
    assert _loss(_view(GOLD, _sketch(order_by=(SelectItem("", AGE),)))) == (
        "sketch right, slot wrong: ORDER BY"
    )
    union = _sketch(keywords=("where", "union"))
    assert _loss(_view(union, union)) == ANSWERED_SET_OPERATION
    nested = _sketch(keywords=("where", "nested"))
    assert _loss(_view(nested, nested)) == ANSWERED_NESTED


def test_every_category_is_charged_to_a_stage() -> None:
    assert stage_of("sketch wrong: SELECT") == "sketch (SELECT/FROM/KEYWORDS)"
    assert stage_of("sketch right, slot wrong: WHERE").startswith("sketch slots")
    assert stage_of(ANSWERED_EMPTY) == stage_of(ANSWERED_SET_OPERATION)
    assert stage_of(NO_CANDIDATE_RAN) == stage_of(TIMEOUT) == "no answer (error or timeout)"
    assert stage_of("gold outside the sketch grammar (OFFSET)") == "not attributable"


@pytest.mark.parametrize(
    ("rows", "blank"),
    [
        ([], True),
        ([(0,)], True),
        ([(None, 0), (0, None)], True),
        ([(0,), (1,)], False),
        ([("",)], False),
        ([("Boston",)], False),
    ],
)
def test_blank_result(rows: list[tuple[object, ...]], blank: bool) -> None:
    assert blank_result(rows) is blank
