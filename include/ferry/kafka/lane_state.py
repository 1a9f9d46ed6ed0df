"""A lane's per-partition bookkeeping: lasting progress apart from the open transaction.

`Part` is what a lane knows of one source partition across transactions (where its
committed position is, whether it is done, who owned it). `Txn` is what the open
transaction did on it; a commit or an abort replaces it whole, so nothing of a transaction
outlives it by accident. `LaneResult` is what the writer's run hands back. No client calls
here: the lane does those.

Positions carry JSON commit metadata (`position_metadata`): the remote partition's end
after what was recorded, the transactional id that committed it and the source topic's ID.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import Message

from ferry.core.offsetmap import SegmentBuilder
from ferry.core.planner import Range
from ferry.core.tables import RangeResult


class Refusal(NamedTuple):
    """The first record (or offset-map entry) of a batch the target did not take."""

    text: str
    """The operator's message: flow, cluster, record, the client's error."""
    unanswered: bool = False
    """The cluster did not acknowledge it in time (`lane_errors.UNANSWERED`): a state
    that passes (a leader moving, too few in-sync replicas), not a refusal of the record."""


@dataclass
class Txn:
    """What the open transaction did on one partition."""

    builder: SegmentBuilder = field(default_factory=SegmentBuilder)
    pending: Message | None = None
    """The last record read, not yet sent: it goes at the next record or at the commit, with
    a delivery report, so the transaction's last target offset is known."""
    sent: int = 0
    first_target: int | None = None
    last_target: int | None = None
    last_offset: int = -1  # the last source offset read
    sizes: list[int] = field(default_factory=list)
    """Bytes (key + value) of each record read, in the order of the builder's offsets:
    counted into its range's result only when committed (an aborted or re-read record is
    not copied). Offsets are the builder's runs, not kept per record: the lane's per-record
    work is what it costs beside librdkafka's."""
    touched: bool = False  # something to record at the commit (records, an end, a gap)
    refused_at: int | None = None  # at_least_once: the first source offset the target refused

    @property
    def bytes(self) -> int:
        """Bytes of the records this transaction records (after a truncation, only those
        before the refused record)."""
        return sum(self.sizes[:self.builder.count])

    def refuse(self, source_offset: int) -> None:
        if self.refused_at is None or source_offset < self.refused_at:
            self.refused_at = source_offset


@dataclass
class Part:
    """One source partition's lasting state inside the lane."""

    topic: str
    partition: int
    remote: str
    start: int
    end: int
    ranges: list[RangeResult]
    expect: int | None = None  # the committed position the plan was made from (Range.expect)
    chained: bool = False  # `expect` is an earlier range's end, not read (Range.chained)
    source_id: str = ""  # the source topic's ID (Range.source_id)
    target_id: str = ""  # the remote topic's ID (Range.target_id)
    covered: int = 0  # next source offset not yet committed
    skip_from: int | None = None  # committed position before an accepted retention gap
    done: bool = False
    paused: bool = False
    target_end: int | None = None  # next remote offset after what this lane recorded
    duplicates: int = 0
    """at_least_once: records an unfinished run wrote that this lane copies again, not yet
    in an offset-map entry (the next entry carries them)."""
    owner: str = ""  # the transactional id that committed the position this lane found
    progress_at: float = field(default_factory=time.monotonic)
    """When this partition last moved (a record, its end, its position): across
    transactions, so a partition that never moves is found however often empty
    transactions commit."""
    position_seen: int = -1
    age_from: int = 0
    """The first source offset whose range has no age yet: a range's age is taken from
    the first record read in it (`aged`)."""
    txn: Txn = field(default_factory=Txn)

    @property
    def read_from(self) -> int:
        """Where the consumer reads: a skipped gap is covered, but never read."""
        return max(self.covered, self.start)

    @property
    def covered_end(self) -> int:
        """The next source offset after what the open transaction covers: the range's end
        once done, else one past the last record this transaction read (never past what it
        read: records of an aborted transaction are not covered)."""
        return self.end if self.done else max(self.read_from, self.txn.last_offset + 1)

    def moved(self) -> None:
        self.progress_at = time.monotonic()

    def aged(self, offset: int, timestamp: tuple[int, int]) -> None:
        """The record at `offset`, with `timestamp` (kind, ms), is the first read at or
        after `age_from`: its range's age (how old its first record was when copied)."""
        for result in self.ranges:
            if result.start <= offset < result.end:
                kind, ms = timestamp
                if kind and not result.max_age_ms:
                    result.max_age_ms = max(1, int(time.time() * 1000) - ms)
                self.age_from = result.end
                return
        self.age_from = offset + 1  # not in a range (never read): ask again at the next

    def committed(self, covered_end: int) -> None:
        """The open transaction committed up to `covered_end`: count its records into
        their ranges and forget it."""
        self.covered = covered_end
        sizes, index = self.txn.sizes, 0
        for start, count in self.txn.builder.runs():
            for result in self.ranges:
                low = max(start, result.start)
                high = min(start + count, result.end, covered_end)
                if low < high:
                    result.records += high - low
                    result.bytes += sum(sizes[index + low - start:index + high - start])
            index += count
        self.txn = Txn()

    def aborted(self) -> None:
        """The open transaction was aborted: its records are read again from the committed
        position. An accepted retention gap not yet committed stays to be recorded."""
        gap = self.txn.touched and self.covered < self.start
        self.done = self.covered >= self.end
        self.txn = Txn(touched=gap)

    def keep_before_refusal(self) -> None:
        """at_least_once: record only the records before the first refused one (all of
        them acknowledged, at contiguous target offsets); the refused record is where the
        partition's position stops."""
        txn = self.txn
        assert txn.refused_at is not None
        txn.builder.truncate(txn.refused_at)
        count = txn.builder.count
        self.done = False
        txn.last_offset = txn.refused_at - 1
        txn.last_target = (txn.first_target + count - 1
                           if count and txn.first_target is not None else None)
        if not count:
            txn.first_target = None


def parts_of(ranges: Sequence[Range], remote_topic: Callable[[str], str]
             ) -> dict[tuple[str, int], Part]:
    """One `Part` per source partition of `ranges`, whose ranges of a partition must be
    adjacent; `remote_topic` names a partition's remote topic when its range does not."""
    parts: dict[tuple[str, int], Part] = {}
    for r in sorted(ranges):
        key = (r.topic, r.partition)
        result = RangeResult(r.topic, r.partition, r.start, r.end)
        if key in parts:
            part = parts[key]
            if r.start != part.end:
                raise ValueError(f"ranges of {r.topic}-{r.partition} are not adjacent")
            part.end = r.end
            part.ranges.append(result)
        else:
            parts[key] = Part(r.topic, r.partition, r.target_topic or remote_topic(r.topic),
                              r.start, r.end, [result], expect=r.expect, chained=r.chained,
                              source_id=r.source_id, target_id=r.target_id,
                              covered=r.start, skip_from=r.skip_from)
    return parts


@dataclass
class LaneResult:
    """What one writer's run copied: its ranges' results, transactions and time."""
    lane: int
    ranges: list[RangeResult]
    transactions: int = 0
    seconds: float = 0.0

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)


def offset_of(message: Message) -> int:
    """A delivered or consumed record's offset (never None for those)."""
    offset = message.offset()
    assert offset is not None
    return offset
