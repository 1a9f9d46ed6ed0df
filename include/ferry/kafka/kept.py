"""A writer slot's clients kept from one cycle to the next (adapter).

A continuous loop that keeps its lanes (`ferry.continuous.lanes=kept`) hands each writer
(`kafka/lane.py`'s `Lane`) the `KeptClients` of its slot: the transactional producer, once
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
before it reads a record. A writer whose run raised drops its clients (`discard`); the
next cycle's writer makes new ones, whose initialisation fences whatever the old ones
still held.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer

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
    """One writer slot's clients between cycles; all None until a writer made them."""

    txn_id: str
    producer: Producer | None = None
    """Transactions initialised, no transaction open."""
    fatal: Any = None
    """The producer's error callback (`lane.FatalError`), which keeps its fatal error."""
    readers: LaneReaders = field(default_factory=LaneReaders)
    """The consumer and reader of the lane that runs the slot this cycle."""
    topics: set[str] = field(default_factory=set)
    """Topics whose metadata the producer asked for already (`Lane.learn_targets`)."""
    flow_topics: frozenset[str] = frozenset()
    """The flow's source topics, idle ones included (the plan's `topics`): a new client
    learns them all when made, so a loop's memory is what it will stay from its first
    copy on, not climbing as cycles happen to touch one topic after another."""

    @property
    def consumer(self) -> Consumer | None:
        return self.readers.consumer

    @consumer.setter
    def consumer(self, consumer: Consumer | None) -> None:
        self.readers.consumer = consumer

    @property
    def reader(self) -> Consumer | None:
        return self.readers.reader

    @reader.setter
    def reader(self, reader: Consumer | None) -> None:
        self.readers.reader = reader

    def take_producer(self, producer: Producer, fatal: Any, topics: set[str]) -> None:
        """`producer` (initialised, knowing `topics`) replaces the kept one, which a new
        producer of the same transactional id has fenced already."""
        self.producer, self.fatal, self.topics = producer, fatal, topics

    def discard(self) -> None:
        """Drop every client, the lane's consumer and reader with them: the next writer of
        the slot (and of the lane) starts afresh. Closing is best effort; a producer
        another writer fenced has nothing left to flush."""
        self.producer = self.fatal = None
        self.topics = set()
        self.readers.discard()
