"""A flow's runs and offset map appended to Delta behind its copies (adapter).

A continuous loop on a Spark Connect server hands each copy job's `runs` rows to the
flow's `Recorder` instead of appending them itself; a thread of the loop's process appends
them in one batch per `ferry.state.record.interval.seconds` (`ferry.core.recording`), with
the offset map recorded from the target's offset-map topic as a job does
(`record_offset_map`). The copy's critical path is then lanes only: the records, their
offset-map entries and positions are committed to Kafka in the cycle, as always.

The batches append with delta-rs (`ferry.state.writer`), in the loop's own process, not
through the Connect server: a batch's few rows take milliseconds there, where a Spark
append waits its turn behind every other flow's on a shared server (twenty flows' batches
took minutes each). The appends are Delta idempotent writes as a job's are, so a batch and
a Spark job recording the same entries at once still record them once.

Nothing is lost to a batch not yet written: the offset map and the runs of the copies that
committed are rebuilt from the offset-map topic by the next job or batch of any process
(`record_offset_map`), with the times their lanes reported (`runs_from_entries`); only a
failed, handed-over or skipped range's row of an unwritten batch is gone (its outcome was
the cycle's result, and logged).

Delta is an audit copy (G9): its trouble never stops copying. A batch that fails is tried
again in the recorder's thread after a backoff (`ferry.core.recording.Batching`), its rows
kept when they were not written; a cycle never sees the failure, and never waits for a
batch, even one that hangs. The rows waiting for Delta are bounded (`max_rows`): past the
bound the oldest runs' rows are dropped whole and logged, and a later batch rebuilds them
from their offset-map entries like a dead job's, so no copied range goes unrecorded. How far
Delta is behind is `behind()` here, and `ferry_state_behind_*` for any process.

A loop whose next run follows at once (the `@continuous` DAG) says when it ends
(`end_at`) and closes with `hand_over`: no batch outlasts it, and copied rows still
pending are left to the next run's first batch instead of a last batch of its own, which
the next run's first cycle would wait for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ferry.core.recording import RETRY_S, Batching
from ferry.core.tables import RangeOutcome, RunRow, StatePaths
from ferry.errors import FerryError, first_line
from ferry.runtime.recording import Unwritten

if TYPE_CHECKING:
    from ferry.config import Flow
    from ferry.runtime.recording import Append

log = logging.getLogger(__name__)

MAX_ROWS = 100_000
"""The `runs` rows a recorder keeps waiting for Delta at most (a few tens of MB)."""


class Recorder:
    """Appends one flow's runs and offset map to Delta in batches, in a thread of its own."""

    def __init__(self, flow: Flow, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[list[RunRow]], None] | None = None,
                 retry_s: float = RETRY_S, max_rows: int = MAX_ROWS,
                 append: Append | None = None) -> None:
        """`write(rows)`: appends one batch (default: the runs rows, then the offset
        map from the target's offset-map topic, each table through `append`); rows it
        raises on without appending go back to the head of the next batch only when it says
        so (`Unwritten`). A batch that raised is tried again after `retry_s`, doubling, at
        most the interval. `max_rows`: the rows kept waiting for Delta at most (past it,
        the oldest runs' rows are left to their offset-map entries). `append(path, ddl,
        rows, once)`: how the default `write` appends to one Delta table (default:
        delta-rs, `ferry.state.writer.append`); whatever it raises fails the batch, which
        is retried, and should it raise after its rows were committed (an unacknowledged
        commit), the retry records them once all the same."""
        self.flow = flow
        self._write = write or self._record
        self._append = append
        self.paths = StatePaths(flow.ferry.state_dir)
        self._clock = clock
        self._batching = Batching(flow.ferry.state_record_interval_seconds, retry_s=retry_s)
        self._max_rows = max_rows
        self._rows: list[RunRow] = []
        self._since: float | None = None
        """When the oldest row of `_rows` was handed over (None: none is waiting)."""
        self._in_flight: tuple[int, float | None] = (0, None)
        """The batch being written: its rows, and when the oldest was handed over."""
        self._copying: set[str] = set()
        """Runs whose copy is under way: their rows are still to come."""
        self._abandoned: set[str] = set()
        """Runs whose cycle the loop abandoned as hung: rebuilt from their entries."""
        self._failure: Exception | None = None
        self._flushing = self._closed = False
        self._batches = 0
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"ferry-record-{flow.name}")
        self._thread.start()

    @property
    def batches(self) -> int:
        """Batches written so far."""
        return self._batches

    def begin(self, run_id: str) -> None:
        """The copy job of `run_id` starts. Until it hands over its rows (`add`) or ends
        without them (`end`), a batch that reads its committed offset-map entries knows
        their rows are still to come, and rebuilds none from them (the run would then have
        two rows per range)."""
        with self._changed:
            self._copying.add(run_id)

    def end(self, run_id: str) -> None:
        """The copy job of `run_id` ended without rows (it raised): the runs of what it
        committed are rebuilt from its offset-map entries, as a dead job's."""
        with self._changed:
            self._copying.discard(run_id)

    def abandon(self, run_id: str) -> None:
        """The loop abandoned the cycle of `run_id` as hung: its rows are no longer waited
        for (a batch rebuilds them from its entries, and Delta's offset map goes on past
        them), and are dropped should its copy still return."""
        with self._changed:
            self._copying.discard(run_id)
            self._abandoned.add(run_id)

    def add(self, run_id: str, rows: list[RunRow]) -> None:
        """Hand over the `runs` rows of the copy job of `run_id` (its offset-map entries
        are on the target), to be appended with a later batch. Never waits and never
        raises for Delta: a batch failing or hanging holds no copy back. Past `max_rows`
        waiting, the oldest runs' rows are dropped whole (logged): their offset-map
        entries give them to a later batch."""
        with self._changed:
            self._copying.discard(run_id)
            if run_id in self._abandoned:  # its rows may be rebuilt already: not twice
                log.info("cycle %s, abandoned as hung, returned: its runs rows are those "
                         "rebuilt from its offset-map entries", run_id,
                         extra={"flow": self.flow.name})
                return
            if self._since is None:
                self._since = self._clock()
            self._rows.extend(rows)
            self._bound()
            self._batching.pending = True
            self._changed.notify_all()

    def _bound(self) -> None:
        """Keep at most `max_rows` rows waiting: drop the oldest runs' rows, whole (a run
        with only some of its rows recorded would not be rebuilt from its entries)."""
        if len(self._rows) <= self._max_rows:
            return
        order = list(dict.fromkeys(row["run_id"] for row in self._rows))
        dropped: set[str] = set()
        left = len(self._rows)
        for run in order:
            if left <= self._max_rows:
                break
            dropped.add(run)
            left -= sum(1 for row in self._rows if row["run_id"] == run)
        lost = [r for r in self._rows if r["run_id"] in dropped]
        self._rows = [r for r in self._rows if r["run_id"] not in dropped]
        log.warning("Delta is behind by more than %d runs rows: the rows of %d runs are left "
                    "to their offset-map entries, which a later batch records (%d rows of "
                    "ranges not copied, which have none, are not recorded)", self._max_rows,
                    len(dropped), sum(1 for r in lost if r.get("outcome") != "copied"),
                    extra={"flow": self.flow.name})

    def behind(self) -> tuple[int, float]:
        """How far Delta is behind this recorder: the `runs` rows waiting for it (the batch
        being written included), and the seconds since the oldest of them was handed over
        (0 when none waits)."""
        with self._changed:
            writing, writing_since = self._in_flight
            times = [t for t in (writing_since, self._since) if t is not None]
            count = writing + len(self._rows)
            return count, (self._clock() - min(times)) if times and count else 0.0

    def catch_up(self) -> None:
        """Record what earlier runs left for the offset-map topic to give (handed over, or
        not written) in a first batch, now, even should no cycle of this loop copy: the
        loop's first plan then needs not read how far Delta lags."""
        with self._changed:
            if not self._batches and self._batching.last_started is None:
                self._batching.pending = True
            self._changed.notify_all()

    def end_at(self, when: float | None) -> None:
        """The loop ends at `when` (this recorder's clock) and leaves what is pending then
        to the next run (`close(hand_over=True)`): no batch starts within twice the last
        one's time of it, at most twice the interval (`Batching.due`). None: no end is
        known."""
        with self._changed:
            self._batching.ends_at = when
            self._changed.notify_all()

    def flush(self, timeout_s: float | None = None) -> None:
        """Write what is pending now and wait until it is written, at most `timeout_s`
        (None: as long as it takes); raise a batch's failure, or that it is still being
        written after `timeout_s`. A batch begun before the call is waited for first: its
        failure is not this flush's (what it held is pending again, and written now)."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._changed:
            self._await_batch(deadline, timeout_s)
            self._failure = None  # an earlier batch's failure is retried now
            self._flushing = True
            self._changed.notify_all()
            while ((self._batching.pending or self._batching.writing_since is not None)
                   and self._failure is None):
                if deadline is not None and self._clock() >= deadline:
                    self._flushing = False
                    raise self._still_writing(timeout_s)
                self._changed.wait(0.1)
            self._flushing = False
            self._raise_failure()

    def close(self, timeout_s: float | None = None, hand_over: bool = False) -> None:
        """`flush` (at most `timeout_s`), then end the thread. `hand_over` (a run followed
        by the next at once): only wait for the batch being written, and leave the rows
        pending to the next run when its first batch rebuilds them as they are: rows of
        copied ranges, which the offset-map topic holds with their lanes' times. A failed,
        handed-over or skipped range's row has no entry, and is flushed as without
        `hand_over`; so is what a run that wrote no batch yet has pending."""
        try:
            left = self._leave_copied(timeout_s) if hand_over else None
            if left is None:
                self.flush(timeout_s)
            elif left:
                log.info("left %d runs rows of %d runs to the next run, whose first Delta "
                         "batch records them from the offset-map topic", len(left),
                         len({row["run_id"] for row in left}), extra={"flow": self.flow.name})
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()
            self._thread.join(0 if timeout_s is not None and self._thread.is_alive()
                              and self._batching.writing_since is not None else 60)

    def _await_batch(self, deadline: float | None, timeout_s: float | None) -> None:
        """With the lock held: wait until no batch is being written, raising that one still
        is at `deadline` (`timeout_s` after the caller began)."""
        while self._batching.writing_since is not None:
            if deadline is not None and self._clock() >= deadline:
                raise self._still_writing(timeout_s)
            self._changed.wait(0.1)

    def _leave_copied(self, timeout_s: float | None) -> list[RunRow] | None:
        """Wait for the batch being written (at most `timeout_s`; its failure raised), then
        take the pending rows off the next batch when all are of copied ranges (the next
        run rebuilds them as they are) and this run wrote a batch of its own (so however
        short the runs, each moves Delta on); None, taking nothing, otherwise. One hold of
        the lock from the wait's end to the taking: no batch starts in between."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._changed:
            self._await_batch(deadline, timeout_s)
            if not self._batches or self._batching.failures or not all(
                    row["outcome"] == RangeOutcome.COPIED for row in self._rows):
                return None  # a last batch (tried now, even after failures)
            left, self._rows, self._since = self._rows, [], None
            self._batching.pending = False
            return left

    def _still_writing(self, timeout_s: float | None) -> FerryError:
        return FerryError(
            f"flow {self.flow.name}: the last Delta batch is still being written after "
            f"{timeout_s or 0:.0f} s; left to the flow's next run, which records what Delta "
            "lacks from the target's offset-map topic")

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise FerryError(f"flow {self.flow.name}: recording the runs and the offset map "
                             f"in Delta ({self.paths.root}) failed: {first_line(failure)} "
                             "(the copies are committed on the target; the next run "
                             "records them from its offset-map topic)") from failure

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._closed and not self._batching.due(self._clock(),
                                                                  self._flushing):
                    self._changed.wait(self._batching.wait_for_next(self._clock()) or None)
                if self._closed:
                    return
                rows, self._rows = self._rows, []
                self._in_flight, self._since = (len(rows), self._since), None
                self._batching.started(self._clock())
            try:
                self._write(rows)
                failure = None
            except Unwritten as exc:  # its rows go with the next batch
                with self._changed:
                    self._rows[:0] = rows
                    self._since = self._in_flight[1] if self._since is None \
                        else min(self._since, self._in_flight[1] or self._since)
                    self._bound()
                failure = exc.cause
            except Exception as exc:  # its rows written: the retry records the offset map
                failure = exc
            with self._changed:
                self._in_flight = (0, None)
                if failure is not None:
                    self._batching.failed(self._clock())
                    log.warning("flow %s: a Delta batch failed (%s); copying goes on, and "
                                "the batch is tried again in %.1fs (%d failed in a row)",
                                self.flow.name, first_line(failure),
                                self._batching.retry_at - self._clock()
                                if self._batching.retry_at is not None else 0.0,
                                self._batching.failures, extra={"flow": self.flow.name})
                    self._failure = failure
                else:
                    self._batching.ended(self._clock())
                    self._failure = None
                    self._batches += 1
                self._changed.notify_all()

    def _record(self, rows: list[RunRow]) -> None:
        from ferry.runtime.recording import record_runs
        from ferry.state.writer import append

        started = self._clock()
        timings: dict[str, float] = {}
        mapped = record_runs(self._append or append, self.flow, self.paths, rows, timings,
                             self._pending)
        log.info("recorded behind the copy: %d runs rows, %d offset-map rows in %.2fs (%s)",
                 len(rows), mapped, self._clock() - started,
                 ", ".join(f"{part} {seconds:.2f}s" for part, seconds in timings.items()),
                 extra={"flow": self.flow.name})


    def _pending(self) -> set[str]:
        """Runs whose rows are still to come: copies under way, and rows handed over since
        the batch being written took its own."""
        with self._changed:
            return self._copying | {row["run_id"] for row in self._rows}

