"""Consumer groups and the checkpoints topic (adapter for `ferry.checkpoints`)."""

from __future__ import annotations

import logging
import time

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from ferry.checkpoints import Checkpoint, TargetGroup, decode, encode
from ferry.config import Flow
from ferry.internal import reader_group
from ferry.kafka import mm2topics
from ferry.kafka.admin import Admin

log = logging.getLogger(__name__)

def list_groups(admin: Admin) -> list[str]:
    """Every consumer group id of the cluster."""
    result = admin.wait(admin.raw.list_consumer_groups(request_timeout=admin.timeout),
                        "listing consumer groups", "DESCRIBE on GROUP *")
    return sorted(g.group_id for g in result.valid)


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
            offsets = {k: v for k, (v, _) in admin.committed(group).items()} \
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


def read_checkpoints(flow: Flow, topic: str) -> list[Checkpoint]:
    """Every checkpoint in the topic, in order (records that do not parse are skipped)."""
    records = mm2topics.read_all(flow.target_admin, topic,
                                 reader_group(flow, "checkpoints-reader"))
    return [c for r in records if (c := decode(r.key, r.value)) is not None]


def write_checkpoints(flow: Flow, topic: str, checkpoints: list[Checkpoint]) -> None:
    """Append checkpoint records (idempotent producer, all acks) and wait for them."""
    now = int(time.time() * 1000)
    mm2topics.append(flow.target_admin, topic,
                     [(*encode(c), now) for c in checkpoints])
