"""A live stream into a source topic, and how far a flow is behind it: what the fault
tests (network, state, Airflow) copy while their fault lasts. Records go to the source
directly, never through a fault."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.support.groups import positions

PARTITIONS = 4
RATE = 100
"""Records a second the source receives."""


def records(count: int, first: int = 0, size: int = 0, partitions: int = PARTITIONS
            ) -> list[tuple[bytes | None, bytes | None, int]]:
    """Records `first`.. of `count`, round-robin over `partitions`, their values `size`
    bytes more of random bytes (which no compression shrinks)."""
    return [(f"k{i}".encode(), f"v{i}".encode() + os.urandom(size), i % partitions)
            for i in range(first, first + count)]


class Feeder:
    """Records into the source at `rate` a second, through one idempotent producer, until
    stopped; `sent` counts them."""

    def __init__(self, bootstrap: str, topic: str, size: int = 0, rate: int = RATE,
                 partitions: int = PARTITIONS) -> None:
        self.bootstrap, self.topic, self.size, self.sent = bootstrap, topic, size, 0
        self.rate, self.partitions = rate, partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                             "enable.idempotence": True})
        started, step = time.monotonic(), max(1, self.rate // 10)
        while not self._stop.is_set():
            for key, value, partition in records(step, self.sent, self.size,
                                                 self.partitions):
                producer.produce(self.topic, value, key, partition=partition)
            self.sent += step
            assert producer.flush(30) == 0
            # paced by what was sent, not by the sleeps: `rate` a second on average
            self._stop.wait(max(0.0, started + self.sent / self.rate - time.monotonic()))
        assert producer.flush(30) == 0

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def __exit__(self, *_: object) -> None:
        self.stop()


def ends(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[int]:
    """The topic's end offset of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ferry-test-end"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def lag(clusters: dict[str, str], flow: Any, topic: str, partitions: int = PARTITIONS,
        mark: list[int] | None = None) -> int:
    """Records on the source not yet copied: the source's ends (or `mark`, its ends at some
    earlier time) less the flow's committed positions (read through the direct listeners)."""
    remote = flow.remote_topic(topic)
    at = positions(clusters, flow, [(remote, p) for p in range(partitions)])
    upto = mark if mark is not None else ends(clusters["source"], topic, partitions)
    return sum(max(0, end - max(p, 0)) for end, p in zip(upto, at, strict=True))


def caught_up(clusters: dict[str, str], flow: Any, topic: str,
              partitions: int = PARTITIONS) -> Callable[[], bool]:
    return lambda: lag(clusters, flow, topic, partitions) == 0
