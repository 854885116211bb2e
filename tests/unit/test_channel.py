"""The channel between a backend and its worker (`pg_functions.channel`).

Pins: a message larger than a pipe holds goes through whole between two ends that pass `idle`;
an end that passes `idle` calls it while the other end sends nothing, stops half-way through a
message, or reads nothing, and what `idle` raises ends the wait (the backend's cancel), where a
plain blocking read would wait for ever; the other end closing is `ChannelClosed`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from pg_functions.channel import ChannelClosed, receive, send  # installed as proxy.pg_functions


class Cancelled(Exception):
    pass


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose two ends are non-blocking, as the backend's are."""
    reading, writing = os.pipe()
    os.set_blocking(reading, False)
    os.set_blocking(writing, False)
    yield reading, writing
    for fd in (reading, writing):
        with contextlib.suppress(OSError):  # a test closed it
            os.close(fd)


def cancel_after(calls: int) -> tuple[list[int], Callable[[], None]]:
    """An `idle` that raises on its `calls`-th call, and the list that counts its calls."""
    counted: list[int] = []

    def idle() -> None:
        counted.append(1)
        if len(counted) >= calls:
            raise Cancelled

    return counted, idle


def test_a_message_larger_than_the_pipe_goes_through_whole(pipe: tuple[int, int]) -> None:
    reading, writing = pipe
    message = ("run", "INSERT …", [["harbour"] * 50_000, list(range(50_000))])
    got: list[tuple[object, ...]] = []
    reader = threading.Thread(target=lambda: got.append(receive(reading, lambda: None)))
    reader.start()
    send(writing, message, lambda: None)
    reader.join(timeout=30)
    assert got == [message]


def test_a_silent_worker_is_a_wait_that_a_cancel_ends(pipe: tuple[int, int]) -> None:
    reading, _ = pipe
    counted, idle = cancel_after(3)
    with pytest.raises(Cancelled):
        receive(reading, idle)
    assert len(counted) == 3


def test_a_message_cut_half_way_is_a_wait_that_a_cancel_ends(pipe: tuple[int, int]) -> None:
    reading, writing = pipe
    data = pickle.dumps(("run", "x" * 10_000))
    os.write(writing, struct.pack("!I", len(data)) + data[:1000])  # the rest never comes
    counted, idle = cancel_after(2)
    with pytest.raises(Cancelled):
        receive(reading, idle)
    assert len(counted) == 2


def test_a_worker_that_does_not_read_is_a_wait_that_a_cancel_ends(
    pipe: tuple[int, int],
) -> None:
    _, writing = pipe
    counted, idle = cancel_after(2)
    with pytest.raises(Cancelled):
        send(writing, ("rows", ["a value"] * 1_000_000), idle)
    assert len(counted) == 2


def test_the_other_end_closing_is_channel_closed(pipe: tuple[int, int]) -> None:
    reading, writing = pipe
    os.write(writing, struct.pack("!I", 100) + b"partial")
    os.close(writing)
    with pytest.raises(ChannelClosed):
        receive(reading, lambda: None)
