"""A warm continuous loop's Delta recorder, its batches written by a scripted writer: rows
of cycles within one interval go in one batch, a flush writes what is pending, and a batch
that fails or hangs never holds a copy back: it is retried in the recorder's thread, its
rows kept for the next batch when they were not written. The same on a real server:
tests/integration/test_spark_connect.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.config import Flow
from ferry.errors import FerryError
from ferry.runtime.recorder import Recorder
from ferry.runtime.recording import Unwritten
from tests.unit.conftest import BASE, Loader


class Writes:
    """Records each batch; fails the batches named in `fail` (by number, from 1)."""

    def __init__(self, fail: dict[int, Exception] | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail = fail or {}
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()
        self.writing = threading.Event()

    def __call__(self, rows: list[dict[str, Any]]) -> None:
        self.calls += 1
        self.writing.set()
        self.gate.wait(10)
        if self.calls in self.fail:
            raise self.fail[self.calls]
        self.batches.append([r["run_id"] for r in rows])


def rows(run_id: str) -> list[dict[str, Any]]:
    return [{"run_id": run_id}]


@pytest.fixture
def flow(load: Loader) -> Flow:
    return load(BASE + "ferry.state.record.interval.seconds = 3600\n").flow("A->B")


@pytest.fixture
def recorder_of(flow: Flow) -> Iterator[Any]:
    made: list[Recorder] = []

    def make(writes: Writes) -> Recorder:
        made.append(Recorder(flow, write=writes))
        return made[-1]

    yield make
    for recorder in made:
        recorder._closed = True  # end the thread without a last batch
        with recorder._changed:
            recorder._changed.notify_all()


def test_the_first_batch_is_written_at_once_and_later_cycles_wait_for_the_interval(
    recorder_of: Any
) -> None:
    writes = Writes()
    recorder = recorder_of(writes)
    recorder.add("r1", rows("r1"))
    recorder.flush()  # waits for the batch under way
    recorder.add("r2", rows("r2"))
    recorder.add("r3", rows("r3"))
    assert writes.batches == [["r1"]]  # an hour's interval: r2 and r3 are pending
    recorder.flush()
    assert writes.batches == [["r1"], ["r2", "r3"]]  # one batch for both cycles
    assert recorder.batches == 2


def wait_for(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.02)


def test_a_failed_batch_fails_no_copy_and_is_retried_until_delta_takes_its_rows_once(
    flow: Flow
) -> None:
    # given: Delta refuses the first two batches (their rows not written)
    writes = Writes({1: Unwritten(RuntimeError("DELTA_CONCURRENT_APPEND\nat ...")),
                     2: Unwritten(RuntimeError("Permission denied"))})
    recorder = Recorder(flow, write=writes, retry_s=0.05)
    try:
        # when: cycles hand over their rows while the batches fail
        recorder.add("r1", rows("r1"))
        wait_for(lambda: writes.calls >= 1, "the first batch")
        recorder.add("r2", rows("r2"))  # no failure reaches the copy
        wait_for(lambda: writes.batches, "a batch after Delta recovered")
        recorder.add("r3", rows("r3"))
        recorder.flush(timeout_s=10)
    finally:
        recorder.close(timeout_s=10)

    # then: retried in the recorder's thread, every row written once, none lost
    assert writes.calls >= 3
    assert sorted(run for batch in writes.batches for run in batch) == ["r1", "r2", "r3"]


class HeldRetry(Writes):
    """`Writes`, its second batch (the retry) held until `retry` is set."""

    def __init__(self, fail: dict[int, Exception]) -> None:
        super().__init__(fail)
        self.retry = threading.Event()

    def __call__(self, rows: list[dict[str, Any]]) -> None:
        if self.calls == 1:
            self.retry.wait(10)
        super().__call__(rows)


def test_a_flush_retries_what_a_batch_begun_before_it_failed_to_write(flow: Flow) -> None:
    # given: a batch under way while Delta is down, which fails once the flush was asked
    # for (a loop stopping just as Delta recovers)
    writes = HeldRetry({1: Unwritten(RuntimeError("No space left on device"))})
    writes.gate.clear()
    recorder = Recorder(flow, write=writes, retry_s=0.01)
    try:
        recorder.add("r1", rows("r1"))
        assert writes.writing.wait(10)
        flushed: list[BaseException | None] = []

        def flush() -> None:
            try:
                recorder.flush(timeout_s=10)
                flushed.append(None)
            except BaseException as exc:
                flushed.append(exc)

        flushing = threading.Thread(target=flush)
        flushing.start()
        time.sleep(0.2)  # the flush is waiting
        writes.gate.set()  # the batch under way fails; its retry is held a moment
        time.sleep(0.5)
        writes.retry.set()
        flushing.join(15)
    finally:
        recorder.close(timeout_s=10)

    # then: the flush wrote the rows the earlier batch could not, and raised nothing
    assert flushed == [None]
    assert writes.batches == [["r1"]]


def test_a_batch_that_failed_after_writing_its_rows_is_retried_without_them(
    flow: Flow
) -> None:
    writes = Writes({1: RuntimeError("offset map append failed")})
    recorder = Recorder(flow, write=writes, retry_s=0.05)
    try:
        recorder.add("r1", rows("r1"))
        wait_for(lambda: writes.batches, "the retried batch")  # the offset map again
        recorder.add("r2", rows("r2"))
        recorder.flush(timeout_s=10)
    finally:
        recorder.close(timeout_s=10)
    assert writes.batches == [[], ["r2"]]


@pytest.mark.parametrize(("failures", "waits"), [
    (1, 0.5), (2, 1.0), (3, 2.0), (10, 60.0), (40, 60.0)])
def test_retries_back_off_to_at_most_the_interval(failures: int, waits: float) -> None:
    from ferry.core.recording import Batching

    batching = Batching(60.0, retry_s=0.5)
    for _ in range(failures):
        batching.pending = True
        batching.started(100.0)
        batching.failed(100.0)
    assert batching.wait_for_next(100.0) == waits
    assert not batching.due(100.0 + waits - 0.01) and batching.due(100.0 + waits)


def test_a_hung_batch_holds_no_copy_back_and_says_how_far_delta_is_behind(
    flow: Flow
) -> None:
    # given: a batch that never ends, for longer than twice the interval
    now = [0.0]
    writes = Writes()
    writes.gate.clear()
    recorder = Recorder(flow, clock=lambda: now[0], write=writes)
    try:
        recorder.add("r1", rows("r1"))
        assert writes.writing.wait(10)
        now[0] = 3 * 3600.0

        # when: the next cycle hands over its rows
        added = threading.Thread(target=recorder.add, args=("r2", rows("r2") * 3))
        added.start()
        added.join(5)

        # then: it returned at once; the recorder says what waits for Delta, since when
        assert not added.is_alive(), "a hung Delta write held the copy back"
        assert recorder.behind() == (4, 3 * 3600.0)
    finally:
        writes.gate.set()
        recorder.close(timeout_s=10)
    assert recorder.behind() == (0, 0.0)


def test_past_its_bound_the_queue_leaves_the_oldest_runs_to_the_offset_map_topic(
    flow: Flow
) -> None:
    # given: a hung batch, and a queue of at most 4 rows
    writes = Writes()
    writes.gate.clear()
    recorder = Recorder(flow, write=writes, max_rows=4)
    try:
        recorder.add("r0", rows("r0"))
        assert writes.writing.wait(10)

        # when: three cycles of two rows each hand theirs over
        for run in ("r1", "r2", "r3"):
            recorder.add(run, rows(run) * 2)

        # then: the oldest run's rows are dropped whole (a batch rebuilds them from its
        # entries: none is lost), the newest kept
        assert sorted({r["run_id"] for r in recorder._rows}) == ["r2", "r3"]
        assert "r1" not in recorder._pending()
    finally:
        writes.gate.set()
        recorder.close(timeout_s=10)


def test_copies_go_on_while_a_batch_is_written(recorder_of: Any) -> None:
    writes = Writes()
    writes.gate.clear()  # the first batch is slow
    recorder = recorder_of(writes)
    recorder.add("r1", rows("r1"))
    assert writes.writing.wait(10)
    recorder.add("r2", rows("r2"))  # returns at once: the batch has not taken an hour
    writes.gate.set()
    recorder.flush()
    assert writes.batches == [["r1"], ["r2"]]


def test_a_flush_gives_up_on_a_batch_that_hangs_naming_who_records_it_instead(
    recorder_of: Any
) -> None:
    writes = Writes()
    writes.gate.clear()  # the batch never ends (a server that stopped answering)
    recorder = recorder_of(writes)
    recorder.add("r1", rows("r1"))
    with pytest.raises(FerryError) as hung:
        recorder.flush(timeout_s=0.3)
    assert str(hung.value) == (
        "flow A->B: the last Delta batch is still being written after 0 s; left to the "
        "flow's next run, which records what Delta lacks from the target's offset-map topic")
    writes.gate.set()


def copied(run_id: str, outcome: str = "copied") -> list[dict[str, Any]]:
    return [{"run_id": run_id, "outcome": outcome}]


def test_a_loop_that_hands_over_leaves_copied_rows_to_the_next_run_after_the_batch_in_flight(
    recorder_of: Any
) -> None:
    writes = Writes()
    writes.gate.clear()  # the first batch is being written as the loop ends
    recorder = recorder_of(writes)
    recorder.add("r1", copied("r1"))
    assert writes.writing.wait(10)
    recorder.add("r2", copied("r2"))
    threading.Timer(0.3, writes.gate.set).start()

    recorder.close(timeout_s=10, hand_over=True)

    # the batch in flight was waited for; r2's rows were not written: the next run's
    # first batch rebuilds them from the offset-map topic as its lanes reported them
    assert writes.batches == [["r1"]]


@pytest.mark.parametrize("outcome", ["failed", "skipped"])
def test_a_loop_that_hands_over_still_writes_rows_the_offset_map_topic_cannot_give(
    recorder_of: Any, outcome: str
) -> None:
    writes = Writes()
    recorder = recorder_of(writes)
    recorder.add("r1", copied("r1"))
    recorder.flush()
    recorder.add("r2", copied("r2") + copied("r2", outcome))

    recorder.close(timeout_s=10, hand_over=True)

    assert writes.batches == [["r1"], ["r2", "r2"]]


def test_a_run_that_wrote_no_batch_yet_writes_its_last_one_even_handing_over(
    recorder_of: Any
) -> None:
    writes = Writes()
    recorder = recorder_of(writes)
    recorder.end_at(time.monotonic() - 1)  # a run so short that no batch started in it
    recorder.add("r1", copied("r1"))

    recorder.close(timeout_s=10, hand_over=True)

    assert writes.batches == [["r1"]]  # every run moves Delta on, however short


def test_a_loop_that_stops_writes_its_last_batch(recorder_of: Any) -> None:
    writes = Writes()
    recorder = recorder_of(writes)
    recorder.add("r1", copied("r1"))
    recorder.flush()
    recorder.add("r2", copied("r2"))

    recorder.close(timeout_s=10)

    assert writes.batches == [["r1"], ["r2"]]


def test_a_recorder_told_its_end_starts_no_batch_that_would_outlast_it(flow: Flow) -> None:
    now = [0.0]
    batches: list[list[str]] = []

    def half_an_hour_each(rows: list[dict[str, Any]]) -> None:
        now[0] += 1800.0
        batches.append([r["run_id"] for r in rows])

    recorder = Recorder(flow, clock=lambda: now[0], write=half_an_hour_each)
    try:
        recorder.end_at(3600.0 * 3)
        recorder.add("r1", copied("r1"))  # the first batch: at once
        recorder.flush()
        now[0] = 3600.0 * 2.6  # the interval has passed, but the loop ends in 0.4 h
        recorder.add("r2", copied("r2"))
        time.sleep(0.3)  # time for the recorder's thread to start a batch, were one due
    finally:
        recorder.close(timeout_s=10, hand_over=True)
    assert batches == [["r1"]]


def test_rows_of_a_cycle_abandoned_as_hung_are_not_waited_for_nor_taken_when_it_returns(
    recorder_of: Any
) -> None:
    writes = Writes()
    recorder = recorder_of(writes)
    recorder.begin("hung")
    recorder.abandon("hung")
    assert "hung" not in recorder._pending()  # a batch goes on past its entries

    recorder.add("hung", copied("hung"))  # its copy returns at last
    recorder.add("r2", copied("r2"))
    recorder.flush()

    assert writes.batches == [["r2"]]  # the hung run's rows are those rebuilt from entries


def test_a_loops_first_batch_records_what_earlier_runs_left_at_once(recorder_of: Any) -> None:
    writes = Writes()
    recorder = recorder_of(writes)

    recorder.catch_up()  # the loop starts: before its first cycle's plan
    recorder.flush(timeout_s=10)

    assert writes.batches == [[]]  # no rows of its own: the offset-map topic gives them
    assert recorder.batches == 1


def test_a_catch_up_after_the_first_batch_adds_none(recorder_of: Any) -> None:
    writes = Writes()
    recorder = recorder_of(writes)
    recorder.add("r1", copied("r1"))
    recorder.flush(timeout_s=10)

    recorder.catch_up()  # a later loop of the same process
    time.sleep(0.3)

    assert writes.batches == [["r1"]]
