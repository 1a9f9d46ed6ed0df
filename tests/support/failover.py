"""Consumer groups failed over in tests: their offsets committed on the source, and where
they resume on the target, checked record by record."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ferry.config import Flow
from ferry.core.checkpoints import decode
from ferry.steps.checkpoints import checkpoints_topic
from tests.support.kafka_data import (
    Rec,
    read_all,
)

SYNC = "sync.group.offsets.enabled = true\n"


def commit_source(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """The group's consumers committed these offsets on the source (with metadata)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group, [
        TopicPartition(topic, p, o, f"meta-{p}") for p, o in offsets.items()])]
    admin.alter_consumer_group_offsets(request)[group].result(timeout=30)


def assert_exact_failover(flow: Flow, clusters: dict[str, str], topic: str, partitions: int,
                          group: str, offsets: Mapping[int, int]) -> None:
    """After failover the group reads on the target exactly the source records at or after
    what it committed (everything, where it committed nothing): zero duplicates, zero
    losses."""
    got = resume_on_target(clusters["target"], group, flow.remote_topic(topic), partitions)
    for p in range(partitions):
        source = read_all(clusters["source"], topic, p)
        start = offsets.get(p, 0)
        done = {r.content() for r in source if r.offset < start}
        expected = [r.content() for r in source if r.offset >= start]
        read = [r.content() for r in got[p]]
        duplicates = sum(1 for c in read if c in done)
        lost = len([c for c in expected if c not in read])
        assert (duplicates, lost) == (0, 0), f"partition {p}"
        assert read == expected, f"partition {p}"


def read_checkpoints(clusters: dict[str, str], flow: Flow) -> list[tuple[str, int, int]]:
    return [(c.group, c.upstream_offset, c.downstream_offset) for r in
            read_all(clusters["target"], checkpoints_topic(flow), 0)
            if (c := decode(r.key, r.value)) is not None]


def resume_on_target(bootstrap: str, group: str, topic: str, partitions: int
                     ) -> dict[int, list[Rec]]:
    """What the group's consumer reads on the target after failover: from its committed
    offset (auto.offset.reset=earliest where it has none) to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                       timeout=30)
        consumer.assign([TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0
                                        else -2) for tp in committed])
        got: dict[int, list[Rec]] = {p: [] for p in range(partitions)}
        done: set[int] = set()
        deadline = time.monotonic() + 60
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    done.add(msg.partition())  # type: ignore[arg-type]
                    continue
                got[msg.partition()].append(  # type: ignore[index]
                    Rec(msg.offset(), msg.key(), msg.value(),  # type: ignore[arg-type]
                        tuple(msg.headers() or ()), msg.timestamp()[1]))
        assert len(done) == partitions, "the target consumer did not reach the end"
        return got
    finally:
        consumer.close()
