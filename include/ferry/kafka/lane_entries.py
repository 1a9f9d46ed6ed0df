"""A batch's offset-map entries, and what its commit settles (adapter).

At each commit the writer sends, in the same transaction as the records and the new
positions, one offset-map entry per partition the batch touched (`record`): the source
range it covered, `[covered, covered_end)`, and its segments, built from the delivery
reports of the first and last record (their distance must equal the record count, or the
batch is refused: `SegmentError`). A batch that copied nothing on a partition (a marker, a
range's end, an accepted gap) still records an entry, without segments. An entry is split
so each record stays far below the record limit (`split_entry`), and each is sent with its
delivery checked (`send_entry`): positions are never committed over an entry the target
did not take. Once the commit is through, `settle` counts the batch's records into their
ranges and finishes the ranges it completed.
"""

from __future__ import annotations

import time
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from ferry.core.offsetmap import MapEntry, SegmentError, encode, split_entry
from ferry.core.tables import RangeOutcome
from ferry.errors import TerminalError
from ferry.kafka.delivery import Lane as DeliveryLane
from ferry.kafka.delivery import Refused
from ferry.kafka.lane_errors import refused, unanswered
from ferry.kafka.lane_state import Part, Refusal


class Lane(DeliveryLane, Protocol):
    """What this module uses of its lane (`ferry.kafka.lane.Lane`): declared here, so this
    module does not import the lane that imports it."""

    run_id: str
    map_topic: str
    started: float
    """When the lane's run started (`time.monotonic`)."""
    started_ms: int
    """The same as a clock time: its entries carry it."""


def record(lane: Lane, producer: Producer, part: Part, covered_end: int, now_ms: int) -> None:
    """Send the offset-map entry of what the batch covered on `part` (its segments from the
    delivery reports; none for markers, ends and gaps)."""
    flow, txn = lane.flow, part.txn
    count = txn.builder.count
    try:
        segments = (txn.builder.finish(txn.first_target, txn.last_target)
                    if count and txn.first_target is not None
                    and txn.last_target is not None else ())
    except SegmentError as exc:
        raise TerminalError(f"flow {flow.name}: remote partition "
                            f"{part.remote}-{part.partition}: {exc}") from None
    if count and not segments:
        raise Refused(f"no delivery report for {part.topic}-{part.partition}")
    if segments:
        part.target_end = segments[-1].target_end
    elif part.target_end is None and lane.reader is not None:
        # nothing mirrored yet: where the remote partition ends (this batch wrote nothing)
        part.target_end = lane.remote_end(lane.reader, part)
    entry = MapEntry(flow.name, lane.run_id, lane.lane, part.topic, part.partition,
                     part.remote, part.partition, part.covered, covered_end,
                     segments, now_ms, bytes=txn.bytes, target_end=part.target_end,
                     source_id=part.source_id, target_id=part.target_id,
                     duplicates=part.duplicates, lane_started_ms=lane.started_ms,
                     age_ms=max((r.max_age_ms for r in part.ranges), default=0))
    part.duplicates = 0  # counted once, in the partition's first entry of this run
    for piece in split_entry(entry):  # an entry stays far below the record limit
        send_entry(lane, producer, piece)


def send_entry(lane: Lane, producer: Producer, entry: MapEntry) -> None:
    """Produce one offset-map entry, its delivery checked: positions are never committed
    over an entry the target did not take (at_least_once has no transaction to fail)."""
    flow = lane.flow

    def report(err: KafkaError | None, _msg: Message) -> None:
        if err is not None and lane.refused is None:
            lane.refused = Refusal(
                f"flow {flow.name}: cluster {flow.target} {refused(err)} the offset-map "
                f"entry of {entry.source_topic}-{entry.source_partition} offsets "
                f"{entry.covered_start}..{entry.covered_end - 1} on {lane.map_topic}: "
                f"{err.str()}", unanswered(err))

    key, value = encode(entry)
    while True:
        try:
            producer.produce(lane.map_topic, value, key, partition=0, on_delivery=report)
            return
        except BufferError:
            producer.poll(0.05)
        except KafkaException as exc:
            raise lane.kafka_error(exc, flow.target, "writing the offset-map entry to "
                                   f"{lane.map_topic}") from None


def settle(lane: Lane, parts: list[Part], touched: list[Part],
           ends: dict[tuple[str, int], int]) -> None:
    """The batch is committed: count its records, and finish the ranges it completed."""
    for part in touched:
        part.committed(ends[(part.topic, part.partition)])
    for part in parts:
        for result in part.ranges:
            if result.outcome == RangeOutcome.PENDING and part.covered >= result.end:
                result.outcome = RangeOutcome.COPIED
                result.seconds = round(time.monotonic() - lane.started, 3)
