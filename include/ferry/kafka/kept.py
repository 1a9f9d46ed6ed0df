"""A writer slot's clients kept from one cycle to the next (adapter).

A continuous loop that keeps its lanes (`ferry.continuous.lanes=kept`) hands each writer
(`kafka/lane.py`'s `Lane`) the `KeptClients` of its slot: the transactional producer, once
`init_transactions` has run, the source consumer and the target's position reader. The
writer of the next cycle starts from them instead of from new clients, so its cycle is
read, send, commit.

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
class KeptClients:
    """One writer slot's clients between cycles; all None until a writer made them."""

    txn_id: str
    producer: Producer | None = None
    """Transactions initialised, no transaction open."""
    fatal: Any = None
    """The producer's error callback (`lane.FatalError`), which keeps its fatal error."""
    consumer: Consumer | None = None
    """Assigned nothing between cycles."""
    reader: Consumer | None = None
    topics: set[str] = field(default_factory=set)
    """Topics whose metadata the kept clients asked for already (`Lane.learn_targets`)."""

    def take_producer(self, producer: Producer, fatal: Any, topics: set[str]) -> None:
        """`producer` (initialised, knowing `topics`) replaces the kept one, which a new
        producer of the same transactional id has fenced already."""
        self.producer, self.fatal, self.topics = producer, fatal, topics

    def discard(self) -> None:
        """Drop every client: the next writer of the slot starts afresh. Closing is best
        effort; a producer another writer fenced has nothing left to flush."""
        consumer, reader = self.consumer, self.reader
        self.producer = self.fatal = self.consumer = self.reader = None
        self.topics = set()
        for client in (consumer, reader):
            if client is not None:
                try:
                    client.close()
                except Exception as exc:  # closed already, or its cluster is gone
                    log.debug("closing a kept client of %s: %s", self.txn_id, exc)
