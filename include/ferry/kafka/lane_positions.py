"""Where a writer reads from and resumes at (adapter).

Two kinds of position, both read here:

- committed positions: the positions group's offsets on the remote partitions (stable
  reads only), with their metadata (`core/positions.py`). `resume_from_committed` reads
  them once the writer holds its id, before it reads a record; `catch_up` again after
  every later initialisation (G11: a writer never writes from a position read before it
  took the id). A position committed for an earlier incarnation of the remote topic is
  none; a partition's read error is an error, never "no position". A position moved
  below where the writer was to go on (a reset, an adoption, written outside a copy) is
  left as written: the partition is handed over (`moved_back`), unless the plan chained
  it to an earlier range of its own (`Range.chained`: that range is not committed yet).
- the consumer's positions on the source: `seek_committed` and `rewind` read a partition
  again from its committed position; `check_positions` finds partitions done by a marker
  or compaction when no record comes.

`remote_end` reads a remote partition's last stable offset (the target end of an entry
that mirrored nothing yet). Log lines go to the lane's logger.
"""

from __future__ import annotations

from typing import Protocol

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KTP

from ferry.core.positions import decode_position
from ferry.core.tables import RangeOutcome
from ferry.errors import TerminalError, TransientError
from ferry.kafka import lane_topics
from ferry.kafka.delivery import CALL_TIMEOUT_S, Delivery
from ferry.kafka.delivery import Lane as DeliveryLane
from ferry.kafka.errors import raise_partition_error
from ferry.kafka.lane_state import Part
from ferry.kafka.lane_topics import learn_partition
from ferry.kafka.limits import PER_CALL, chunks
from ferry.kafka.metadata import unknown_partition
from ferry.kafka.watermarks import watermarks


class Lane(DeliveryLane, lane_topics.Lane, Protocol):
    """What this module uses of its lane (`ferry.kafka.lane.Lane`): declared here, so this
    module does not import the lane that imports it."""

    delivery: Delivery
    moved_back: set[tuple[str, int]]
    """Partitions whose position moved back under this writer (`moved_back`)."""


def resume_from_committed(lane: Lane, reader: Consumer) -> None:
    """Read the committed positions: each partition resumes where the last committed batch
    ended; ranges wholly before it are skipped. A position committed for an earlier
    incarnation of the remote topic (`PositionMeta.stale_for`) is none: the records it
    counts went with the deleted topic."""
    flow, keys = lane.flow, list(lane.parts)
    for key, tp in zip(keys, committed(lane, reader, keys), strict=True):
        part = lane.parts[key]
        recorded = decode_position(tp.metadata) if tp.offset >= 0 else None
        if recorded is not None and recorded.stale_for(part.target_id):
            lane.log.warning("%s-%s: the position %d was committed for remote topic ID %s, "
                             "not %s (the remote topic was created again); not resumed "
                             "from", part.remote, part.partition, tp.offset,
                             recorded.target_id, part.target_id,
                             extra={"flow": flow.name, "topic": part.topic,
                                    "partition": part.partition})
            recorded = None
        if recorded is None:
            if part.expect is not None:
                raise TransientError(
                    f"flow {flow.name}: {part.topic}-{part.partition}: the plan expects the "
                    f"position {part.expect} committed on {part.remote}, but there is none: "
                    "an earlier range (a backfill chunk) is not committed yet, or Kafka "
                    "expired the position. Nothing was copied, so nothing is doubled or "
                    "skipped; run the earlier chunk first, or plan again (a run restores an "
                    "expired position from the offset map)")
            continue
        part.owner, part.target_end = recorded.owner, recorded.target_end
        lane.delivery.found_position(lane, reader, part)
        if part.skip_from is not None and tp.offset == part.skip_from:
            # An accepted gap: the first entry covers it, with no records.
            part.covered = part.skip_from
            part.txn.touched = True
            continue
        if tp.offset < part.start:
            if part.chained:  # the earlier range is not committed yet
                raise TerminalError(
                    f"flow {flow.name}: {part.topic}-{part.partition} is committed at "
                    f"{tp.offset} but the plan starts at {part.start}; re-plan the run")
            moved_back(lane, part, tp.offset, part.start)
            continue
        part.covered = min(tp.offset, part.end)
        for result in part.ranges:
            if tp.offset >= result.end:
                result.outcome = RangeOutcome.SKIPPED
        if tp.offset >= part.end and part.start < part.end:
            part.done = True


def catch_up(lane: Lane, reader: Consumer) -> None:
    """Positions read again after a re-initialisation: a partition another writer moved
    resumes where it left it; ranges wholly before that are that writer's (skipped). A
    partition moved back (`moved_back`) is left as written."""
    keys = list(lane.parts)
    for key, tp in zip(keys, committed(lane, reader, keys), strict=True):
        part = lane.parts[key]
        if tp.offset < 0 or part.covered >= part.end \
                or decode_position(tp.metadata).stale_for(part.target_id):
            continue
        if tp.offset < part.covered:
            moved_back(lane, part, tp.offset, part.covered)
            continue
        if tp.offset == part.covered:
            continue
        lane.log.warning("%s-%s: another writer committed up to %d meanwhile; resuming there",
                         part.topic, part.partition, tp.offset,
                         extra={"flow": lane.flow.name, "topic": part.topic,
                                "partition": part.partition})
        part.covered = min(tp.offset, part.end)
        part.target_end = decode_position(tp.metadata).target_end
        for result in part.ranges:
            if result.outcome == RangeOutcome.PENDING and tp.offset >= result.end:
                result.outcome = RangeOutcome.SKIPPED


def moved_back(lane: Lane, part: Part, position: int, expected: int) -> None:
    """`part`'s committed position is `position`, below `expected`, where the writer was to
    go on from: only positions written outside a copy move back (a reset, an adoption),
    after this run planned, and the writer took the id after they were written. The
    partition is left as written: its unfinished ranges are handed over (no failure) in
    one line, and the next run plans from the position."""
    flow = lane.flow
    why = (f"flow {flow.name}: {part.topic}-{part.partition}: its position was moved back "
           f"to {position} (positions written outside a copy: a reset or an adoption) after "
           f"this run planned from {expected}; left as written, for the next run to plan "
           "from")
    lane.log.warning("%s", why, extra={"flow": flow.name, "topic": part.topic,
                                       "partition": part.partition})
    part.done = True
    lane.moved_back.add((part.topic, part.partition))
    for result in part.ranges:
        if result.outcome == RangeOutcome.PENDING:
            result.outcome, result.error = RangeOutcome.HANDED_OVER, why


def committed(lane: Lane, reader: Consumer, keys: list[tuple[str, int]]) -> list[KTP]:
    """The committed positions of the parts `keys` (a partition's error is never taken for
    "no position")."""
    request = [KTP(lane.parts[k].remote, k[1]) for k in keys]

    def read() -> list[KTP]:
        answer = [tp for part in chunks(request, PER_CALL)
                  for tp in reader.committed(part, timeout=CALL_TIMEOUT_S)]
        raise_partition_error(answer)
        return answer

    return list(lane.call(read, lane.flow.target, "reading committed positions"))


def remote_end(lane: Lane, reader: Consumer, part: Part) -> int:
    """The remote partition's last stable offset (an answer that is no offset is asked
    again: `ferry.kafka.watermarks`). A partition the reader's metadata does not list yet
    (grown since it learnt the topic) is asked for first."""

    def read() -> tuple[int, int]:
        try:
            return watermarks(reader, part.remote, part.partition, CALL_TIMEOUT_S)
        except KafkaException as exc:
            if not unknown_partition(exc) or not learn_partition(lane, reader, part):
                raise
        return watermarks(reader, part.remote, part.partition, CALL_TIMEOUT_S)

    _, end = lane.call(read, lane.flow.target,
                       f"reading the end of {part.remote}-{part.partition}")
    return int(end)


def check_positions(consumer: Consumer, active: list[Part]) -> None:
    """No record came: a partition whose consumer position moved (markers, compaction)
    moved; one at or past its range's end is done."""
    waiting = [p for p in active if not p.done]
    if not waiting:
        return
    positions = consumer.position([KTP(p.topic, p.partition) for p in waiting])
    for part, tp in zip(waiting, positions, strict=True):
        if tp.offset > part.position_seen:  # markers and compaction move it too
            if part.position_seen >= 0:
                part.moved()
            part.position_seen = tp.offset
        if tp.offset >= part.end:
            part.done, part.txn.touched = True, True


def rewind(consumer: Consumer, active: list[Part]) -> None:
    """Read each unfinished partition again from what is committed."""
    for part in active:
        part.done = part.covered >= part.end
        seek_committed(consumer, part)


def seek_committed(consumer: Consumer, part: Part) -> None:
    """Read `part` (unless done) again from its committed position, resumed if paused."""
    if part.done:
        return
    if part.paused:
        consumer.resume([KTP(part.topic, part.partition)])
        part.paused = False
    consumer.seek(KTP(part.topic, part.partition, part.read_from))
