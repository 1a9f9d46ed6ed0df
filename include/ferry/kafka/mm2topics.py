"""MM2's single-partition compacted topics (`heartbeats`, `<source>.checkpoints.internal`):
create, read whole, append (adapter)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.cimpl import NewTopic

from ferry.config.clients import ClientConfig
from ferry.errors import TransientError
from ferry.kafka.admin import Admin
from ferry.kafka.errors import kafka_error
from ferry.kafka.records import scan
from ferry.kafka.retry import transient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def ensure(admin: Admin, topic: str, replication_factor: int, setting: str) -> bool:
    """Create `topic` as MM2 does (one partition, compacted) when missing; `setting` is the
    key that sets its replication factor (named when the broker refuses it). True when
    this call created it (its leader elected, see `Admin.create_topics`): it holds
    nothing, and another client asked at once may not know it yet, so its creator need
    not read it back."""
    if topic in admin.topics():
        return False
    new = NewTopic(topic, 1, replication_factor, config={"cleanup.policy": "compact"})
    if not admin.create_topics([new], lambda name: f"creating {name} (replication factor "
                                                   f"{replication_factor}: {setting})"):
        return False  # created meanwhile by another run
    log.info("created %s on %s", topic, admin.cluster, extra={"topic": topic})
    return True


def read_all(client: ClientConfig, topic: str, group: str) -> list[Record]:
    """Every committed record of partition 0, start to end (`group` is never joined)."""
    return [Record(msg.offset() or 0, msg.key(), msg.value(), msg.timestamp()[1])
            for msg in scan(client, topic, 0, 0, group, timeout=60.0)]


def producer_for(client: ClientConfig) -> Producer:
    """The producer `append` writes with (idempotent, all acks). Keep it to append again:
    a new one costs a connection and a producer ID, about half a second."""
    budget_ms = max(1000, int(client.retry_seconds * 1000))
    return Producer(client.confluent({
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3,
        "message.timeout.ms": budget_ms}))


def append(client: ClientConfig, topic: str, records: list[tuple[bytes, bytes, int]],
           producer: Producer | None = None) -> None:
    """Write (key, value, timestamp ms) records to partition 0 (idempotent, all acks), with
    `producer` (from `producer_for`; default: a new one).

    The producer itself waits out transient broker states, retrying each record for up
    to the client's `retry_seconds` (its message timeout); a record still not written
    then is a TransientError naming the cluster and the last error, a refused one an error
    naming the right it needs. After an error, make a new producer."""
    if not records:
        return
    budget_ms = max(1000, int(client.retry_seconds * 1000))
    producer = producer or producer_for(client)
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for key, value, timestamp in records:
        producer.produce(topic, value, key, partition=0, timestamp=timestamp,
                         on_delivery=report)
    left = producer.flush(budget_ms / 1000 + 30)
    action = f"writing to {topic}"
    if failed:
        last = KafkaException(failed[-1])
        if transient(last) or failed[-1].code() == KafkaError._MSG_TIMED_OUT:
            raise TransientError(f"{kafka_error(last, client.cluster, action)}; still failing "
                                 f"after ferry.kafka.retry.seconds={client.retry_seconds:g}")
        raise kafka_error(last, client.cluster, action, principal=client.principal,
                          needs=f"WRITE on TOPIC {topic}")
    if left:
        raise TransientError(f"cluster {client.cluster}: {action}: {left} records not "
                             f"acknowledged in {budget_ms / 1000 + 30:.0f}s")


class Appender:
    """`append` to one cluster with one producer, kept across appends (a new producer costs
    a connection and a producer ID, about half a second: most of a heartbeat), and replaced
    after an error."""

    def __init__(self, client: ClientConfig) -> None:
        self.client = client
        self._producer: Producer | None = None

    def __call__(self, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
        if self._producer is None:
            self._producer = producer_for(self.client)
        try:
            append(self.client, topic, records, self._producer)
        except Exception:
            self._producer = None
            raise
