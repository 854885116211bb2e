"""The flights benchmark's database: drawn reproducibly, and every flight a real route."""

from __future__ import annotations

import airportsdata

from benchmarks.flights import CARRIERS, HUBS, QUESTIONS, flight_rows


def test_flights_are_reproducible_and_between_real_airports() -> None:
    airports = dict(airportsdata.load("IATA"))
    first = list(flight_rows(airports, 2000, seed=3))
    assert first == list(flight_rows(airports, 2000, seed=3))
    assert first != list(flight_rows(airports, 2000, seed=4))
    carriers = {code for code, _ in CARRIERS}
    for _, day, carrier, _, origin, destination, delay, arrival, cancelled, miles in first:
        assert origin in HUBS and destination in HUBS and origin != destination
        assert carrier in carriers and day.year == 2024
        assert (delay is None) == cancelled == (arrival is None)
        assert 0 < miles < 6000
    jfk_lax = next(
        row[9] for row in flight_rows(airports, 50_000, seed=3) if row[4:6] == ("JFK", "LAX")
    )
    assert 2460 <= jfk_lax <= 2480  # the great-circle distance, about 2,470 miles
    cancelled_share = sum(row[8] for row in first) / len(first)
    assert 0.005 < cancelled_share < 0.05


def test_questions_are_distinct() -> None:
    assert len({q.text for q in QUESTIONS}) == len(QUESTIONS)
