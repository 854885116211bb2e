from decimal import Decimal

import pytest

from proxy.nl2sql.agreement import result_key, same_result


def test_results_agree_whatever_the_order_of_their_rows_and_columns() -> None:
    assert same_result([("a", 1), ("b", 2)], [(2, "b"), (1, "a")])
    assert not same_result([("a", 1), ("b", 2)], [("a", 2), ("b", 1)])


def test_a_row_counts_as_often_as_it_comes() -> None:
    assert not same_result([("a",), ("a",)], [("a",)])


def test_numbers_agree_across_types_to_six_places() -> None:
    assert same_result([(Decimal("2.5000000001"),)], [(2.5,)])
    assert same_result([(3,)], [(3.0,)])
    assert not same_result([(2.5,)], [(2.50001,)])


@pytest.mark.parametrize("empty", [[], [(None,)], [(None, None), (None, None)], None])
def test_a_result_with_no_value_agrees_with_nothing(empty: list[tuple[None, ...]] | None) -> None:
    assert result_key(empty) is None
    assert not same_result(empty, empty)


def test_booleans_are_not_numbers() -> None:
    assert not same_result([(True,)], [(1,)])
