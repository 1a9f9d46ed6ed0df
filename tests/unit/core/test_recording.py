"""When a warm continuous loop appends its runs and offset map to Delta: one batch per
interval, behind the copies, never further behind than twice the interval."""

from __future__ import annotations

import pytest

from ferry.core.recording import Batching


def batching(last: float | None = None, writing: float | None = None,
             pending: bool = True) -> Batching:
    return Batching(10.0, last_started=last, writing_since=writing, pending=pending)


@pytest.mark.parametrize(("state", "now", "flushing", "due"), [
    (batching(), 0.0, False, True),                        # the first batch: at once
    (batching(pending=False), 0.0, False, False),          # nothing handed over
    (batching(last=0.0), 9.9, False, False),               # within the interval
    (batching(last=0.0), 10.0, False, True),               # the interval has passed
    (batching(last=0.0), 3.0, True, True),                 # a flush does not wait for it
    (batching(last=0.0, writing=0.0), 30.0, True, False),  # one batch at a time
])
def test_a_batch_is_due_once_per_interval_with_work_pending_and_none_being_written(
    state: Batching, now: float, flushing: bool, due: bool
) -> None:
    assert state.due(now, flushing) is due


@pytest.mark.parametrize(("state", "now", "wait"), [
    (batching(last=0.0), 4.0, 6.0),
    (batching(last=0.0), 12.0, 0.0),
    (batching(), 4.0, 0.0),
    (batching(last=0.0, pending=False), 4.0, 0.0),
])
def test_the_recorder_sleeps_until_the_next_batch_is_due(state: Batching, now: float,
                                                         wait: float) -> None:
    assert state.wait_for_next(now) == wait


def test_a_started_batch_takes_what_is_pending_and_ends_when_written() -> None:
    state = batching()
    state.started(5.0)
    assert (state.pending, state.last_started, state.writing_since) == (False, 5.0, 5.0)
    state.ended(8.5)
    assert state.writing_since is None and not state.due(100.0)
    assert state.last_took == 3.5


@pytest.mark.parametrize(("now", "flushing", "due"), [
    (50.0, False, True),    # the last batch took 20 s: this one ends well before the loop
    (65.0, False, False),   # it might still be written when the loop ends at 100 s
    (99.0, True, True),     # the loop's own last flush is never held back
])
def test_a_loop_that_hands_over_starts_no_batch_that_would_outlast_it(
    now: float, flushing: bool, due: bool
) -> None:
    state = Batching(30.0, last_started=0.0, pending=True, ends_at=100.0, last_took=20.0)
    assert state.due(now, flushing) is due


def test_a_slow_batch_keeps_the_last_ones_of_a_run_off_for_two_intervals_at_most() -> None:
    # a first batch of 200 s (ten flows starting theirs together) would otherwise leave a
    # run of five minutes all to the next
    state = Batching(10.0, last_started=0.0, pending=True, ends_at=300.0, last_took=200.0)
    assert state.due(279.0) is True
    assert state.due(281.0) is False
