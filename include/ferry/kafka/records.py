"""Read a partition's records as digests, for verification (adapter)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ferry.config.clients import ClientConfig
from ferry.errors import TerminalError
from ferry.kafka.errors import kafka_error
from ferry.verify import digest


def _headers(raw: object) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers as (name, bytes) pairs, in order."""
    if not isinstance(raw, list):
        return []
    return [(str(k), v.encode() if isinstance(v, str) else v) for k, v in raw]


def digests(client: ClientConfig, topic: str, partition: int, start: int, end: int,
            group: str, timeout: float = 300.0) -> dict[int, bytes]:
    """offset -> digest of every committed record in [start, end) still in the log."""
    if end <= start:
        return {}
    consumer = Consumer(client.confluent({
        "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        "log_level": 3}))
    found: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return found
                    raise KafkaException(err)
                offset = msg.offset() or 0
                if offset >= end:
                    return found
                found[offset] = digest(msg.key(), msg.value(), _headers(msg.headers()),
                                       msg.timestamp()[1])
        raise TerminalError(f"cluster {client.cluster}: reading {topic}-{partition} for "
                            f"verification took over {timeout:.0f}s")
    except KafkaException as exc:
        raise kafka_error(exc, client.cluster, f"reading {topic}-{partition}",
                          principal=client.principal,
                          needs={"TOPIC": f"READ on TOPIC {topic}",
                                 "GROUP": f"DESCRIBE on GROUP {group}"}) from None
    finally:
        consumer.close()


def timestamp_at(client: ClientConfig, topic: str, partition: int, offset: int,
                 group: str) -> int | None:
    """The timestamp (ms) of the first committed record at or after `offset`, or None."""
    consumer = Consumer(client.confluent({
        "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        "log_level": 3}))
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return None
                raise kafka_error(KafkaException(err), client.cluster,
                                  f"reading {topic}-{partition}", principal=client.principal,
                                  needs=f"READ on TOPIC {topic}")
            return int(msg.timestamp()[1])
        return None
    finally:
        consumer.close()
