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
