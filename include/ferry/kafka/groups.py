"""Consumer groups and the checkpoints topic (adapter for `ferry.checkpoints`)."""

from __future__ import annotations

import logging
import time

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.cimpl import NewTopic

from ferry.checkpoints import Checkpoint, TargetGroup, decode, encode
from ferry.config import Flow
from ferry.errors import TerminalError
from ferry.internal import reader_group
from ferry.kafka.admin import Admin
from ferry.kafka.errors import kafka_error

log = logging.getLogger(__name__)

Committed = dict[tuple[str, int], tuple[int, str]]
"""(topic, partition) -> (committed offset, commit metadata)."""


def list_groups(admin: Admin) -> list[str]:
    """Every consumer group id of the cluster."""
    result = admin.wait(admin.raw.list_consumer_groups(request_timeout=admin.timeout),
                        "listing consumer groups", "DESCRIBE on GROUP *")
    return sorted(g.group_id for g in result.valid)


def committed(admin: Admin, group: str) -> Committed:
    """The group's committed offsets (stable ones: pending transactional commits wait)."""
    futures = admin.raw.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], require_stable=True,
        request_timeout=admin.timeout)
    result = admin.wait(futures[group], f"reading offsets of group {group}",
                        {"GROUP": f"DESCRIBE on GROUP {group}",
                         "TOPIC": "DESCRIBE on TOPIC (the group's topics)"})
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
            for tp in result.topic_partitions if tp.offset >= 0}


def describe(admin: Admin, groups: list[str]) -> dict[str, TargetGroup]:
    """Each group's state on this cluster (ABSENT when unknown) and, when nobody consumes,
    its committed offsets."""
    if not groups:
        return {}
    futures = admin.raw.describe_consumer_groups(groups, request_timeout=admin.timeout)
    found: dict[str, TargetGroup] = {}
    for group, future in futures.items():
        try:
            state = future.result(timeout=admin.timeout).state.name
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                state = "DEAD"
            else:
                raise admin.error(exc, f"describing group {group}",
                                  f"DESCRIBE on GROUP {group}") from None
        if state in ("DEAD", "UNKNOWN"):
            found[group] = TargetGroup("ABSENT", {})
        else:
            offsets = {k: v for k, (v, _) in committed(admin, group).items()} \
                if state == "EMPTY" else {}
            found[group] = TargetGroup(state, offsets)
    return found


def commit(admin: Admin, group: str, checkpoints: list[Checkpoint]) -> None:
    """Commit the checkpoints' downstream offsets (and upstream metadata) into `group`."""
    request = [ConsumerGroupTopicPartitions(group, [
        TopicPartition(c.topic, c.partition, c.downstream_offset, c.metadata)
        if c.metadata else TopicPartition(c.topic, c.partition, c.downstream_offset)
        for c in checkpoints])]
    futures = admin.raw.alter_consumer_group_offsets(request, request_timeout=admin.timeout)
    admin.wait(futures[group], f"committing translated offsets of group {group}",
               {"GROUP": f"READ on GROUP {group}",
                "TOPIC": "READ on TOPIC (the group's remote topics)"})


def ensure_topic(flow: Flow, admin: Admin, topic: str, replication_factor: int) -> None:
    """Create the checkpoints topic as MM2 does (one partition, compacted) when missing."""
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
        raise admin.error(exc, f"creating the checkpoints topic {topic} (replication factor "
                               f"{replication_factor}: checkpoints.topic.replication.factor)",
                          f"CREATE on TOPIC {topic}") from None
    log.info("created checkpoints topic %s on %s", topic, flow.target,
             extra={"flow": flow.name, "topic": topic})


def read_checkpoints(flow: Flow, topic: str, timeout: float = 60.0) -> list[Checkpoint]:
    """Every checkpoint in the topic, in order (records that do not parse are skipped)."""
    consumer = Consumer(flow.target_admin.confluent({
        "group.id": reader_group(flow, "checkpoints-reader"), "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed", "log_level": 3}))
    found: list[Checkpoint] = []
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
                checkpoint = decode(msg.key(), msg.value())
                if checkpoint is not None:
                    found.append(checkpoint)
        raise TimeoutError(f"reading {topic} took over {timeout:.0f}s")
    except KafkaException as exc:
        raise kafka_error(exc, flow.target, f"reading checkpoints topic {topic}",
                          principal=flow.target_admin.principal, needs={
                              "TOPIC": f"READ on TOPIC {topic}",
                              "GROUP": f"DESCRIBE on GROUP "
                                       f"{reader_group(flow, 'checkpoints-reader')}"}) from None
    finally:
        consumer.close()


def write_checkpoints(flow: Flow, topic: str, checkpoints: list[Checkpoint]) -> None:
    """Append checkpoint records (idempotent producer, all acks) and wait for them."""
    if not checkpoints:
        return
    producer = Producer(flow.target_admin.confluent({
        "enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3}))
    failed: list[str] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err.str())

    for checkpoint in checkpoints:
        key, value = encode(checkpoint)
        producer.produce(topic, value, key, partition=0, timestamp=int(time.time() * 1000),
                         on_delivery=report)
    left = producer.flush(60)
    if failed or left:
        reason = failed[0] if failed else f"{left} not acknowledged in 60s"
        raise TerminalError(f"cluster {flow.target}: writing checkpoints to {topic} failed: "
                            f"{reason}" + (f"; {flow.target_admin.principal} needs WRITE on "
                                           f"TOPIC {topic}" if "uthoriz" in reason else ""))
