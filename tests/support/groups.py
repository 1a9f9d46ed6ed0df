"""Consumer groups' offsets on real clusters: committed as a group's consumers commit them,
and read back."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from ferry.config import Flow
from tests.support.kafka_data import (
    conf,
)


def commit_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer(conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def positions(clusters: dict[str, str], flow: Flow, tps: list[tuple[str, int]]) -> list[int]:
    """The flow's committed positions on these remote partitions (-1001: none)."""
    from ferry.core.internal import positions_group

    return committed(clusters["target"], positions_group(flow), tps)


def target_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)])])[group].result(30)
    return {tp.partition: tp.offset for tp in found.topic_partitions if tp.offset >= 0}


def committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> list[int]:
    """The group's committed offsets of `tps` (-1001: none). A new client finds the group's
    coordinator first: on brokers the whole suite loads that took more than 10 s."""
    consumer = Consumer(conf(bootstrap, **{"group.id": group}))
    try:
        return [tp.offset for tp in consumer.committed(
            [TopicPartition(t, p) for t, p in tps], timeout=30)]
    finally:
        consumer.close()
