"""How a writer goes on after a batch that did not commit (adapter).

Every way back starts from the committed positions; none keeps anything of the failed
batch:

- `abort`: the batch's transaction aborted, its partitions read again from their
  committed positions (a refused batch, before it is re-run one record per request to name
  the refused record).
- `wait_out`: the target did not acknowledge the batch in time (a partition without a
  leader, too few in-sync replicas): aborted, then, after a backoff, copied again by a new
  producer of the id, until `ferry.kafka.retry.seconds` have passed since the first such
  batch since the last commit; then the writer fails as transient.
- `replace_stuck`: the producer is stuck inside a call (`kafka/stuck.py`): a new producer
  of the id, at most `MAX_REPLACED` times per writer.
- `restart`: the new producer itself. Its `init_transactions` fences whoever holds the id
  now, so the positions are read again before anything more is read or sent (G11); a
  writer that is to yield to a newer run (`yield_to_newer`: the flow's newest run, as the
  lane's `newest` reads it) stops instead (`WriterTaken`), so it never fences the writer
  it yields to.

Log lines go to the lane's logger.
"""

from __future__ import annotations

import random
import time
from typing import Protocol

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP

from ferry.core.takeover import Named, newer_run, yielded
from ferry.errors import TransientError, WriterTaken
from ferry.kafka import lane_positions
from ferry.kafka.lane_state import Part
from ferry.kafka.retry import backoff
from ferry.kafka.runs import ReadsNewest
from ferry.kafka.stuck import ProducerStuck

ABORT_UNANSWERED_S = 10.0
"""How long a batch the target left unacknowledged waits for its abort (`wait_out`)
before the next producer of the id takes the abort over."""
MAX_REPLACED = 3


class Lane(lane_positions.Lane, Protocol):
    """What this module uses of its lane (`ferry.kafka.lane.Lane`): declared here, so this
    module does not import the lane that imports it."""

    diagnose: bool
    """Sending one record per request, each reported, to name a refusal."""
    unanswered_since: float | None
    unanswered_attempts: int
    replaced: int
    newest: ReadsNewest | None
    owner: Named

    def _start_producer(self, diagnose: bool = False) -> Producer: ...


def abort(lane: Lane, producer: Producer, consumer: Consumer, active: list[Part]) -> None:
    """Abort the batch (made again while the abort fails retriably: a refused record's
    batch, on a target that answers); its partitions are read again from what is
    committed."""
    lane.delivery.abort(lane, producer, again=True)
    for part in active:
        part.aborted()
        lane_positions.seek_committed(consumer, part)


def wait_out(lane: Lane, producer: Producer, consumer: Consumer, active: list[Part],
             exc: Exception) -> Producer:
    """The batch failed because the target did not acknowledge it in time: a state that
    passes, such as a partition between leaders or short of in-sync replicas in a broker's
    restart. Its transaction is aborted; after a backoff, a new producer of the same id
    (fresh connections and metadata) copies it again from the committed positions. Once
    `ferry.kafka.retry.seconds` have passed since the first such failure since the last
    commit, the lane fails as transient. exactly_once only (`Refused.unanswered`): an
    at_least_once batch has no transaction to abort, and what it wrote before timing out
    could not be counted as duplicates.

    The abort may not finish: its markers go to the same partitions, which take no write
    until enough replicas are in sync. Then the new producer's `init_transactions`
    completes it (Kafka answers it CONCURRENT_TRANSACTIONS until the abort is written, a
    transient state it waits out) before anything is sent."""
    extra = {"flow": lane.flow.name, "lane": lane.lane}
    try:
        lane.delivery.abort(lane, producer, seconds=ABORT_UNANSWERED_S)
    except TransientError as failed:
        lane.log.warning("writer %s: %s; the next producer of its id aborts it", lane.lane,
                         failed, extra=extra)
    for part in active:
        part.aborted()
    now = time.monotonic()
    if lane.unanswered_since is None:
        lane.unanswered_since, lane.unanswered_attempts = now, 0
    lane.unanswered_attempts += 1
    waited, budget = now - lane.unanswered_since, lane.flow.ferry.kafka_retry_seconds
    if waited >= budget:
        raise TransientError(lane.explain.unanswered_too_long(
            str(exc), waited, lane.unanswered_attempts)) from None
    lane.log.warning("writer %s: %s; a transient state, copying the batch again from the "
                     "committed positions with a new producer (attempt %d, %.0fs of "
                     "ferry.kafka.retry.seconds=%g left)", lane.lane, exc,
                     lane.unanswered_attempts, budget - waited, budget, extra=extra)
    time.sleep(backoff(lane.unanswered_attempts, random.random()))
    lane.refused = None
    return restart(lane, consumer, [p for p in active if p.start < p.end],
                   diagnose=lane.diagnose)


def replace_stuck(lane: Lane, consumer: Consumer, parts: list[Part],
                  exc: ProducerStuck) -> Producer:
    """The producer is stuck inside a call (`kafka/stuck.py`): a new one of the same id
    (whose `init_transactions` fences it and aborts its transaction), and the batch read
    again from the committed positions. At most `MAX_REPLACED` times per writer."""
    flow = lane.flow
    lane.replaced += 1
    if lane.replaced > MAX_REPLACED:
        raise TransientError(
            f"flow {flow.name} writer {lane.lane}: {exc}, {lane.replaced} times; is the "
            f"positions group's coordinator reachable on {flow.target}? Nothing past the "
            "last commit was kept; the next run resumes there") from None
    lane.log.warning("flow %s writer %s: %s (a client that lost the group coordinator in a "
                     "broker restart); replacing its producer and copying the batch again "
                     "from the committed positions", flow.name, lane.lane, exc,
                     extra={"flow": flow.name, "lane": lane.lane})
    for part in parts:
        part.aborted()
    return restart(lane, consumer, [p for p in parts if p.start < p.end])


def restart(lane: Lane, consumer: Consumer, active: list[Part], diagnose: bool = False
            ) -> Producer:
    """A new producer of the same transactional id. Its `init_transactions` fences whoever
    holds the id now (a newer run may have taken it since this one's start and committed),
    so the positions are read again before anything more is read or sent: every
    initialisation is followed by a read of the positions (G11). Another run named the
    flow's newest since (`newest`) is yielded to first: `WriterTaken`."""
    yield_to_newer(lane)
    producer = lane._start_producer(diagnose)
    if lane.reader is not None:
        lane_positions.catch_up(lane, lane.reader)
    lane_positions.rewind(consumer, active)
    left = [p for p in active if (p.topic, p.partition) in lane.moved_back]
    for part in left:  # `rewind` reopened it: read it no further
        part.done = True
        if not part.paused:
            consumer.pause([KTP(part.topic, part.partition)])
            part.paused = True
    return producer


def yield_to_newer(lane: Lane) -> None:
    """Raise `WriterTaken` when another run (or a later cycle of this one) is named the
    flow's newest: its writers write the slot now, and this one is not to fence them."""
    if lane.newest is None:
        return
    newer = newer_run(lane.newest.read(), lane.owner)
    if newer is not None:
        raise WriterTaken(f"flow {lane.flow.name} writer {lane.lane}: not initialising "
                          f"{lane.txn_id} again: {yielded(lane.flow.name, newer)}")
