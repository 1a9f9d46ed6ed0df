"""A writer's clients: how they are made, where they come from, where they go (adapter).

A `Lane` (`kafka/lane.py`) runs with three clients: the source consumer, the target's
position reader (a consumer in the positions group) and the producer of its slot's
transactional id. It asks its `LaneClients` for them at the start of its run and hands
them back, once, at the end. Which clients it gets is the source's business alone:

- `FreshClients` (the default, every batch run): a new client each time, closed when the
  run ends, whatever its outcome.
- `KeptClients` (`kafka/kept.py`, a continuous loop's): the clients the slot's writer of
  the cycle before left, its producer's transactions initialised; kept again when the run
  ends healthy, dropped when it does not.

The contract of a source:

- `check(txn_id, delivery)`: raise ValueError when the clients are not for that writer.
- `reader(make)`, `consumer(make)`: a client to use now; `make()` makes a new one (the
  lane's own factory, which has it learn `topics_to_learn()` first).
- `producer()`: a producer kept for the writer's transactional id, transactions
  initialised and no transaction open, or None: the lane then starts its own, whose
  `init_transactions` fences every other writer of the slot.
- `topics_to_learn()`: source topics a new client learns at once, beyond the writer's own
  (empty: only the writer's).
- `release(consumer, reader, producer, healthy)`: the run ended; `producer` is the one it
  ended with (None: it made none), `healthy` is False when the run raised or ended on a
  one-record-per-request producer, and then nothing of it is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from ferry.config import Flow
from ferry.config.clients import RdValue
from ferry.core.internal import positions_group, reader_group
from ferry.kafka.delivery import Delivery
from ferry.kafka.lane_errors import is_fenced
from ferry.kafka.records import SCAN_FETCH_WAIT_MS

__all__ = ["FatalError", "FreshClients", "HeldProducer", "LaneClients", "new_consumer",
           "new_producer", "new_reader"]

PRODUCER_DEFAULTS: dict[str, str | int] = {"linger.ms": 20, "batch.size": 1_000_000,
                                           "compression.type": "none"}


class FatalError:
    """A producer's error callback: keeps its first fatal error (librdkafka's produce and
    delivery reports say only "Fatal error"; the callback says why)."""

    def __init__(self) -> None:
        self.error: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        if self.error is None and (err.fatal() or is_fenced(err)):
            self.error = err

    def serve(self, producer: Producer) -> None:
        """Serve the producer's callbacks, so a fatal error's cause is kept. A fatal
        producer may raise that error from the poll itself: it is kept the same way."""
        try:
            producer.poll(0)
        except KafkaException as exc:
            self(exc.args[0])
        except SystemError:  # a callback failed inside librdkafka's poll: nothing to add
            pass

    def lost_id(self, producer: Producer, err: KafkaError) -> bool:
        """Whether a producer error means a newer writer took the producer's id: a fencing
        error, or librdkafka's generic fatal error whose cause (kept here) is one."""
        if is_fenced(err):
            return True
        if err.code() != KafkaError._FATAL:
            return False
        self.serve(producer)
        return self.error is not None and is_fenced(self.error)


@dataclass
class HeldProducer:
    """A writer's producer with what goes with it from one writer to the next."""

    producer: Producer
    fatal: FatalError
    """Its error callback (`error_cb`)."""
    topics: set[str] = field(default_factory=set)
    """Topics whose metadata it asked for already (`lane_topics.learn_targets`)."""


class LaneClients(Protocol):
    """Where a writer's clients come from and go to; see the module's docstring."""

    def check(self, txn_id: str, delivery: str) -> None: ...

    def reader(self, make: Callable[[], Consumer]) -> Consumer: ...

    def consumer(self, make: Callable[[], Consumer]) -> Consumer: ...

    def producer(self) -> HeldProducer | None: ...

    def topics_to_learn(self) -> frozenset[str]: ...

    def release(self, consumer: Consumer, reader: Consumer, producer: HeldProducer | None,
                healthy: bool) -> None: ...


class FreshClients:
    """New clients for every writer, closed when its run ends (a producer is dropped: a
    newer writer of the id fences whatever it still holds)."""

    def check(self, txn_id: str, delivery: str) -> None:
        return None  # new clients suit any writer

    def reader(self, make: Callable[[], Consumer]) -> Consumer:
        return make()

    def consumer(self, make: Callable[[], Consumer]) -> Consumer:
        return make()

    def producer(self) -> HeldProducer | None:
        return None

    def topics_to_learn(self) -> frozenset[str]:
        return frozenset()

    def release(self, consumer: Consumer, reader: Consumer, producer: HeldProducer | None,
                healthy: bool) -> None:
        consumer.close()
        reader.close()


def new_producer(flow: Flow, delivery: Delivery, txn_id: str, diagnose: bool = False
                 ) -> HeldProducer:
    """A new producer of `txn_id` for `delivery`; `diagnose`: one record per request, so a
    refusal names its record."""
    overrides: dict[str, RdValue] = {k: v for k, v in PRODUCER_DEFAULTS.items()
                                     if k not in flow.producer.settings}
    if diagnose:
        overrides.update({"linger.ms": 0, "batch.num.messages": 1})
    # Never create a topic by writing to it: a deleted offset-map (or remote) topic would
    # come back with the brokers' defaults (a 7-day retention: a map that forgets). Only
    # Ferry's sync and plan create them, with their configs.
    overrides.update({"enable.idempotence": True, "acks": "all", "log_level": 3,
                      "allow.auto.create.topics": False})
    overrides.update(delivery.producer_settings(flow, txn_id))
    conf: dict[str, Any] = flow.producer.confluent(overrides)
    fatal = FatalError()
    conf["error_cb"] = fatal  # not a bound method: no cycle keeps the client
    return HeldProducer(Producer(conf), fatal)


def new_consumer(flow: Flow) -> Consumer:
    """A source consumer that commits nothing and reports each partition's end."""
    # A lane reads ranges that are there: a range ending at a transaction marker ends with
    # the partition EOF, whose fetch would otherwise wait the default 500 ms.
    wait = {} if "fetch.wait.max.ms" in flow.consumer.settings else {
        "fetch.wait.max.ms": SCAN_FETCH_WAIT_MS}
    return Consumer(flow.consumer.confluent({
        "group.id": reader_group(flow, "reader"), "enable.auto.commit": False,
        "enable.auto.offset.store": False, "enable.partition.eof": True,
        "auto.offset.reset": "error", "log_level": 3, **wait}))


def new_reader(flow: Flow) -> Consumer:
    """A target consumer in the positions group: its metadata goes with each commit."""
    return Consumer(flow.target_admin.confluent({
        "group.id": positions_group(flow), "enable.auto.commit": False,
        "isolation.level": "read_committed", "log_level": 3}))
