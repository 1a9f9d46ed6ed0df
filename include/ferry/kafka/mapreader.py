"""Read Ferry's offset-map topic on the target (adapter): committed entries only."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ferry.config import Flow
from ferry.errors import FerryError, TransientError
from ferry.internal import offset_map_topic, reader_group
from ferry.kafka.errors import kafka_error
from ferry.offsetmap import MapEntry, decode

log = logging.getLogger(__name__)


def _error(flow: Flow, exc: KafkaException, action: str) -> FerryError:
    return kafka_error(exc, flow.target, action, principal=flow.target_admin.principal,
                       needs={"TOPIC": f"READ on TOPIC {offset_map_topic(flow)}",
                              "GROUP": f"DESCRIBE on GROUP {reader_group(flow, 'map-reader')}"})


def read_entries(flow: Flow, after: int = -1, timeout: float = 60.0
                 ) -> Iterator[tuple[int, MapEntry]]:
    """(topic offset, entry) for every committed entry of `flow` after topic offset
    `after`, up to the topic's current last stable offset."""
    topic = offset_map_topic(flow)
    consumer = Consumer(flow.target_admin.confluent({
        "group.id": reader_group(flow, "map-reader"), "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True, "log_level": 3}))
    try:
        try:
            low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                   KafkaError._UNKNOWN_TOPIC,
                                                   KafkaError._UNKNOWN_PARTITION):
                return  # the flow never synced: nothing mirrored yet
            raise _error(flow, exc, f"reading the end of {topic}") from None
        start = max(after + 1, low)
        if start >= end:
            return
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + timeout
        while True:
            for msg in consumer.consume(5000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise _error(flow, KafkaException(err), f"reading {topic}")
                offset = msg.offset()
                value = msg.value()
                if offset is None or value is None:
                    continue
                try:
                    entry = decode(value)
                except (ValueError, KeyError) as exc:
                    log.warning("skipping unreadable offset-map record at %s: %s", offset, exc,
                                extra={"flow": flow.name})
                    continue
                if entry.flow == flow.name:
                    yield offset, entry
                if offset >= end - 1:
                    return
            if time.monotonic() > deadline:
                raise TransientError(f"cluster {flow.target}: reading {topic} up to {end} "
                                     f"took longer than {timeout:.0f}s")
    finally:
        consumer.close()
