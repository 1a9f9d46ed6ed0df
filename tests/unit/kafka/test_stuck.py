"""A call librdkafka may never return from is bounded: its result or error when it returns
in time, `ProducerStuck` when it does not."""

from __future__ import annotations

import threading

import pytest

from ferry.kafka.stuck import ProducerStuck, bounded


def test_a_call_that_returns_in_time_gives_its_result() -> None:
    assert bounded(lambda: 42, 5, "answering") == 42


def test_a_call_that_fails_in_time_raises_its_own_error() -> None:
    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        bounded(fail, 5, "failing")


def test_a_call_that_never_returns_is_given_up_on_naming_it() -> None:
    never = threading.Event()
    with pytest.raises(ProducerStuck, match="committing positions did not return within 0s"):
        bounded(lambda: never.wait(30), 0.2, "committing positions")
    never.set()  # the abandoned thread ends


def test_a_call_given_up_on_is_counted_left_behind_while_its_thread_lives() -> None:
    from ferry.kafka.stuck import LeftBehind, within

    left, never = LeftBehind(bound=1), threading.Event()

    # when: one call returns in time, two do not
    assert within(lambda: 7, 5, "answering", left) == (True, 7)
    assert within(lambda: never.wait(30), 0.1, "waiting", left) == (False, None)
    assert left.alive() == 1 and left.over() is None
    assert within(lambda: never.wait(30), 0.1, "waiting", left) == (False, None)

    # then: past the bound, one line names it; once the threads end, nothing is left
    assert left.alive() == 2
    over = left.over()
    assert over is not None and "more than its bound of 1" in over and "\n" not in over
    never.set()
    for thread in list(left.threads):
        thread.join(5)
    assert left.alive() == 0 and left.over() is None
