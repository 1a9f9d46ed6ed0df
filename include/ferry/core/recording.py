"""When a continuous loop appends its runs and offset map to Delta behind the copy.

Every cycle commits its records, their offset-map entries and the positions to Kafka in one
transaction (G1); Delta is a record of what the target committed, rebuilt from its
offset-map topic (G9). So in a loop that keeps its Spark session, the Delta appends need
not sit between one cycle's copy and the next cycle's plan: they are taken in batches, one
batch per interval, while the loop copies on.

- The first batch is due at once: whatever an earlier process left behind is recorded
  first.
- Then a batch is due when the interval has passed since the last one started, and there
  is something to record.
- A batch that fails is tried again after a backoff (`retry_s`, doubling with each
  failure in a row, at most the interval), never by a cycle: Delta is an audit copy, and
  copying goes on whatever it does. A cycle never waits for a batch either, even one that
  hangs; the queue of rows behind it is bounded by the recorder instead
  (`ferry.runtime.recorder`), and how far Delta is behind is watched
  (`ferry_state_behind_seconds`).
- A loop that knows when it ends, and leaves its last stretch to the next run (the
  `@continuous` DAG), starts no batch that would still be written when it ends (judged by
  twice the last batch's time, at most twice the interval): its end then waits for no
  batch, and Delta still lags by no more than twice the interval before it.
"""

from __future__ import annotations

from dataclasses import dataclass

BEHIND_FACTOR = 2.0
"""How many of its intervals a batch may take to be written, as `due` judges a loop's end."""
RETRY_S = 1.0
"""The first retry's backoff after a failed batch."""


@dataclass
class Batching:
    """The schedule of one flow's batches (times from a monotonic clock, in seconds)."""

    interval_s: float
    last_started: float | None = None
    """When the last batch started (None: none yet)."""
    writing_since: float | None = None
    """When the batch being written started (None: none is)."""
    pending: bool = False
    """Whether cycles handed over work since the last batch started."""
    ends_at: float | None = None
    """When the loop ends, leaving what is pending then to the next run (None: it writes
    a last batch as it stops)."""
    last_took: float = 0.0
    """How long the last batch took."""
    retry_s: float = RETRY_S
    """The backoff after a first failed batch; it doubles with each failure in a row, up to
    the interval."""
    failures: int = 0
    """Batches failed in a row (0: the last one succeeded)."""
    retry_at: float | None = None
    """When the failed batch is tried again (None: none failed)."""

    def due(self, now: float, flushing: bool = False) -> bool:
        """Whether a batch starts now: work pending, none being written, and the interval
        passed since the last one started (at once when `flushing`, or for the first);
        never one that would outlast `ends_at`, unless flushing."""
        if not self.pending or self.writing_since is not None:
            return False
        if flushing:
            return True
        # twice the last batch's time (batches beside other flows' vary twofold), but never
        # more than the lag a batch may have anyway: a slow first batch, as ten flows start
        # theirs together, must not leave a whole run to the next
        quiet = BEHIND_FACTOR * min(self.last_took, self.interval_s)
        if self.ends_at is not None and now + quiet >= self.ends_at:
            return False
        if self.retry_at is not None:
            return now >= self.retry_at
        return self.last_started is None or now - self.last_started >= self.interval_s

    def wait_for_next(self, now: float) -> float:
        """Seconds until a pending batch is due (0: due now or nothing is pending)."""
        if not self.pending:
            return 0.0
        if self.retry_at is not None:
            return max(0.0, self.retry_at - now)
        if self.last_started is None:
            return 0.0
        return max(0.0, self.last_started + self.interval_s - now)

    def started(self, now: float) -> None:
        self.last_started, self.writing_since, self.pending = now, now, False

    def ended(self, now: float) -> None:
        """The batch being written was written."""
        if self.writing_since is not None:
            self.last_took = now - self.writing_since
        self.writing_since = None
        self.failures, self.retry_at = 0, None

    def failed(self, now: float) -> None:
        """The batch being written failed: it is tried again after the backoff (what it
        did not write is pending again, and the offset map is read again in any case)."""
        failures = self.failures + 1
        self.ended(now)
        self.failures, self.pending = failures, True
        self.retry_at = now + self.backoff()

    def backoff(self) -> float:
        """The wait before the next try after `failures` failed batches in a row."""
        return min(self.interval_s, self.retry_s * 2.0 ** max(0, self.failures - 1))
