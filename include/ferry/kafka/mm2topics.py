"""MM2's single-partition compacted topics (`heartbeats`, `<source>.checkpoints.internal`):
create, read whole, append (adapter)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.cimpl import NewTopic

from ferry.config.clients import ClientConfig
from ferry.errors import TerminalError
from ferry.kafka.admin import Admin
from ferry.kafka.errors import kafka_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def ensure(admin: Admin, topic: str, replication_factor: int, setting: str) -> None:
    """Create `topic` as MM2 does (one partition, compacted) when missing; `setting` is the
    key that sets its replication factor (named when the broker refuses it)."""
    if topic in admin.topics():
        return
    future = admin.raw.create_topics(
        [NewTopic(topic, 1, replication_factor, config={"cleanup.policy": "compact"})],
        request_timeout=admin.timeout)[topic]
    try:
        future.result(timeout=admin.timeout)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise admin.error(exc, f"creating {topic} (replication factor {replication_factor}: "
                               f"{setting})", f"CREATE on TOPIC {topic}") from None
    log.info("created %s on %s", topic, admin.cluster, extra={"topic": topic})


def read_all(client: ClientConfig, topic: str, group: str, timeout: float = 60.0
             ) -> list[Record]:
    """Every committed record of partition 0, start to end (`group` is never joined)."""
    consumer = Consumer(client.confluent({
        "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed", "log_level": 3}))
    found: list[Record] = []
    try:
        low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        if end <= low:
            return []
        consumer.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return found
                    raise KafkaException(err)
                found.append(Record(msg.offset() or 0, msg.key(), msg.value(),
                                    msg.timestamp()[1]))
        raise TerminalError(f"cluster {client.cluster}: reading {topic} took over "
                            f"{timeout:.0f}s")
    except KafkaException as exc:
        raise kafka_error(exc, client.cluster, f"reading {topic}", principal=client.principal,
                          needs={"TOPIC": f"READ on TOPIC {topic}",
                                 "GROUP": f"DESCRIBE on GROUP {group}"}) from None
    finally:
        consumer.close()


def append(client: ClientConfig, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """Write (key, value, timestamp ms) records to partition 0 (idempotent, all acks)."""
    if not records:
        return
    producer = Producer(client.confluent({
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3}))
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for key, value, timestamp in records:
        producer.produce(topic, value, key, partition=0, timestamp=timestamp,
                         on_delivery=report)
    left = producer.flush(60)
    if failed:
        raise kafka_error(KafkaException(failed[0]), client.cluster, f"writing to {topic}",
                          principal=client.principal, needs=f"WRITE on TOPIC {topic}")
    if left:
        raise TerminalError(f"cluster {client.cluster}: writing to {topic}: {left} records "
                            "not acknowledged in 60s")
