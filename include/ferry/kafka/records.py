"""Read one partition's committed records start to end: the offset map, MM2's internal
topics, verification and lag all read this way (adapter)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ferry.config.clients import ClientConfig
from ferry.core.verify import digest
from ferry.errors import TransientError
from ferry.kafka.errors import kafka_error
from ferry.kafka.retry import retrying, transient
from ferry.kafka.watermarks import watermarks

log = logging.getLogger(__name__)
SCAN_FETCH_WAIT_MS = 10
_MISSING = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
            KafkaError._UNKNOWN_PARTITION)


def scan(client: ClientConfig, topic: str, partition: int, start: int, group: str,
         end: int | None = None, missing_ok: bool = False, timeout: float = 300.0,
         committed: bool = True) -> Iterator[Message]:
    """Committed records of the partition from `start` (or the log start, if later) up to
    `end` (default: the last stable offset when the scan begins), with an assigned consumer
    that never joins `group` (librdkafka insists on one). With `committed` False, every
    record up to the high watermark, of open and aborted transactions too (as MM1 and MM2
    read). A missing topic yields nothing with `missing_ok`. Transient broker states are
    waited out (reading the offsets: up to the client's `retry_seconds`; reading records:
    within `timeout`); any other failure is a Ferry error naming the principal."""
    consumer = Consumer(client.confluent({
        "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "auto.offset.reset": "earliest",
        # The end is known and the records are there: the fetch that finds the end (the
        # partition EOF) would otherwise wait the broker's default 500 ms for more.
        "fetch.wait.max.ms": SCAN_FETCH_WAIT_MS, "log_level": 3}))
    try:
        try:
            low, high = retrying(
                lambda: watermarks(consumer, topic, partition,
                                   max(1.0, min(30.0, client.retry_seconds))),
                cluster=client.cluster, action=f"reading the offsets of {topic}-{partition}",
                budget_s=client.retry_seconds)
        except KafkaException as exc:
            if missing_ok and exc.args and exc.args[0].code() in _MISSING:
                return
            raise
        end = high if end is None else min(end, high)
        start = max(start, low)
        if start >= end:
            return
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # consume() waits out its whole timeout unless the batch fills: keep it short,
            # or every scan ends with that wait.
            for msg in consumer.consume(5000, 0.05):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    if transient(err):  # the consumer recovers by itself: read on
                        log.debug("cluster %s: reading %s-%s: %s", client.cluster, topic,
                                  partition, err.str())
                        continue
                    raise KafkaException(err)
                offset = msg.offset() or 0
                if offset >= end:
                    return
                yield msg
                if offset >= end - 1:
                    return
        raise TransientError(f"cluster {client.cluster}: reading {topic}-{partition} up to "
                             f"offset {end} took longer than {timeout:.0f}s")
    except KafkaException as exc:
        raise kafka_error(exc, client.cluster, f"reading {topic}-{partition}",
                          principal=client.principal,
                          needs={"TOPIC": f"READ on TOPIC {topic}",
                                 "GROUP": f"DESCRIBE on GROUP {group}"}) from None
    finally:
        consumer.close()


def _headers(raw: object) -> list[tuple[str, bytes | None]]:
    """A consumed record's headers as (name, bytes) pairs, in order."""
    if not isinstance(raw, list):
        return []
    return [(str(k), v.encode() if isinstance(v, str) else v) for k, v in raw]


def digest_stream(client: ClientConfig, topic: str, partition: int, start: int, end: int,
                  group: str, timeout: float, committed: bool = True
                  ) -> Iterator[tuple[int, bytes]]:
    """(offset, digest) of every committed record (every record, with `committed` False)
    in [start, end) still in the log, in order, read as it is consumed (memory flat in the
    partition's size); all of it within `timeout` seconds, counted from the first record
    asked for."""
    for msg in scan(client, topic, partition, start, group, end, timeout=timeout,
                    committed=committed):
        yield (msg.offset() or 0, digest(msg.key(), msg.value(), _headers(msg.headers()),
                                         msg.timestamp()[1]))


def timestamp_at(client: ClientConfig, topic: str, partition: int, offset: int,
                 group: str) -> int | None:
    """The timestamp (ms) of the first committed record at or after `offset`, or None."""
    for msg in scan(client, topic, partition, offset, group):
        return int(msg.timestamp()[1])
    return None
