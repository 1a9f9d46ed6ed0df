"""A writer slot's clients kept from one cycle to the next (adapter).

A continuous loop on the local copy runner (`ferry.copy.runner`) keeps its lanes: it hands
each writer (`kafka/lane.py`'s `Lane`) the `KeptClients` of its slot as its client source
(`kafka/lane_clients.py`'s `LaneClients`): the transactional producer, once
`init_transactions` has run, and the source consumer and the target's position reader of
the lane that runs the slot (`LaneReaders`, shared by the lane's slots). The writer of the
next cycle starts from them instead of from new clients, so its cycle is read, send,
commit. New clients learn every topic of the flow at once (`flow_topics`): librdkafka
holds state for each partition of a topic a client has learnt, so the loop's memory
reaches its level with its first copy and stays there.

What keeping changes nothing of (G11): the producer holds the slot's transactional id
from its initialisation on. Every other writer of the slot (a CLI run, a backfill, an
older loop) takes the id with its own `init_transactions`, which fences this producer, so
its next transaction fails and the writer stops (`WriterTaken`): a kept producer never
commits over a newer writer's positions. Each cycle still reads the committed positions
before it reads a record. A writer whose run raised, or ended on a one-record-per-request
producer, drops its clients (`discard`), and so does one whose consumer cannot be left
with nothing assigned; the next cycle's writer makes new ones, whose initialisation
fences whatever the old ones still held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException

from ferry.kafka.lane_clients import HeldProducer

log = logging.getLogger(__name__)


@dataclass
class LaneReaders:
    """The source consumer and the target's position reader of one lane of a continuous
    loop, shared by the writer slots the lane runs one after another (never two at once):
    they belong to no transaction, and librdkafka's state for a topic (about 1.7 KiB a
    partition) is held once per lane instead of once per slot."""

    consumer: Consumer | None = None
    """Assigned nothing between writers."""
    reader: Consumer | None = None

    def discard(self) -> None:
        """Close both (best effort); the lane's next writer makes new ones."""
        consumer, reader = self.consumer, self.reader
        self.consumer = self.reader = None
        for client in (consumer, reader):
            if client is not None:
                try:
                    client.close()
                except Exception as exc:  # closed already, or its cluster is gone
                    log.debug("closing a kept client: %s", exc)


@dataclass
class KeptClients:
    """One writer slot's clients between cycles (a `LaneClients`); none until a writer
    made them."""

    txn_id: str
    flow: str = ""
    slot: int = 0
    """The flow and the writer slot, as log lines name them."""
    held: HeldProducer | None = None
    """The producer, transactions initialised, no transaction open."""
    readers: LaneReaders = field(default_factory=LaneReaders)
    """The consumer and reader of the lane that runs the slot this cycle."""
    flow_topics: frozenset[str] = frozenset()
    """The flow's source topics, idle ones included (the plan's `topics`): a new client
    learns them all when made, so a loop's memory is what it will stay from its first
    copy on, not climbing as cycles happen to touch one topic after another."""

    def check(self, txn_id: str, delivery: str) -> None:
        """Only the writer of this slot's id, exactly once, may use these clients."""
        if txn_id != self.txn_id or delivery != "exactly_once":
            raise ValueError(f"clients kept for {self.txn_id} given to the writer of "
                             f"{txn_id} ({delivery})")

    def reader(self, make: Callable[[], Consumer]) -> Consumer:
        return self.readers.reader or make()

    def consumer(self, make: Callable[[], Consumer]) -> Consumer:
        return self.readers.consumer or make()

    def producer(self) -> HeldProducer | None:
        return self.held

    def topics_to_learn(self) -> frozenset[str]:
        return self.flow_topics

    def release(self, consumer: Consumer, reader: Consumer, producer: HeldProducer | None,
                healthy: bool) -> None:
        """Keep the clients for the slot's next writer, or, when the run was not healthy or
        its consumer cannot be left with nothing assigned, drop them all."""
        self.readers.consumer, self.readers.reader = consumer, reader
        self.held = producer
        if not healthy or producer is None or not self._unassigned(consumer):
            self.discard()

    def _unassigned(self, consumer: Consumer) -> bool:
        """Leave `consumer` with nothing assigned or paused, for the next writer to assign
        its own; False when it cannot be (it is then not kept)."""
        try:
            assigned = consumer.assignment()
            if assigned:  # a paused partition stays paused through an unassign
                consumer.resume(assigned)
            consumer.unassign()
            return True
        except KafkaException as exc:
            log.info("writer %s: its consumer is not kept (%s)", self.slot, exc,
                     extra={"flow": self.flow, "lane": self.slot})
            return False

    def discard(self) -> None:
        """Drop every client, the lane's consumer and reader with them: the next writer of
        the slot (and of the lane) starts afresh. Closing is best effort; a producer
        another writer fenced has nothing left to flush."""
        self.held = None
        self.readers.discard()
