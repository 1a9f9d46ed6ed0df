"""Consumer groups and the checkpoints topic (adapter for `ferry.core.checkpoints`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from ferry.config import Flow
from ferry.core.checkpoints import Checkpoint, TargetGroup, decode, encode
from ferry.core.internal import reader_group
from ferry.kafka import mm2topics
from ferry.kafka.admin import Admin
from ferry.kafka.retry import transient

log = logging.getLogger(__name__)


def list_groups(admin: Admin) -> list[str]:
    """Every consumer group id of the cluster. A broker that could not answer is retried
    (transient) or an error, never a cluster with fewer groups."""

    def attempt(timeout: float) -> list[str]:
        result = admin.raw.list_consumer_groups(request_timeout=timeout) \
            .result(timeout=timeout + 1)
        for failure in result.errors or ():
            raise failure if isinstance(failure, KafkaException) else KafkaException(failure)
        return sorted(g.group_id for g in result.valid or ())

    return admin.retry(attempt, "listing consumer groups", "DESCRIBE on GROUP *")


def describe(admin: Admin, groups: list[str]) -> dict[str, TargetGroup]:
    """Each group's state on this cluster (ABSENT when unknown) and, when nobody consumes,
    its committed offsets."""
    if not groups:
        return {}
    states = admin.batch(
        {g: g for g in groups},
        lambda todo, timeout: admin.raw.describe_consumer_groups(todo, request_timeout=timeout),
        lambda group: (f"describing group {group}", f"DESCRIBE on GROUP {group}"),
        handle=lambda _group, exc: "DEAD" if exc.args and exc.args[0].code()
        == KafkaError.GROUP_ID_NOT_FOUND else None,
        coordinator=True)
    found: dict[str, TargetGroup] = {}
    for group in groups:
        state = states[group] if isinstance(states[group], str) else states[group].state.name
        if state in ("DEAD", "UNKNOWN"):
            found[group] = TargetGroup("ABSENT", {})
        else:
            offsets = {k: v for k, (v, _) in admin.committed(group).items()} \
                if state == "EMPTY" else {}
            found[group] = TargetGroup(state, offsets)
    return found


def commit(admin: Admin, group: str, checkpoints: list[Checkpoint]) -> None:
    """Commit the checkpoints' downstream offsets (and upstream metadata) into `group`."""
    alter_offsets(admin, group, [
        (c.topic, c.partition, c.downstream_offset, c.metadata) for c in checkpoints],
        f"committing translated offsets of group {group}",
        {"GROUP": f"READ on GROUP {group}",
         "TOPIC": "READ on TOPIC (the group's remote topics)"})


def alter_offsets(admin: Admin, group: str, offsets: Sequence[tuple[str, int, int, str]],
                  action: str, needs: Mapping[str, str]) -> None:
    """Set `group`'s committed offsets to `offsets`, (topic, partition, offset, commit
    metadata; "" for none) each; the group must have no members. Every partition must be
    accepted: one the broker refused is retried when the refusal is transient, else an
    error naming the group, topic and partition (`action` and `needs` say what was being
    done and which rights it takes)."""
    request = [ConsumerGroupTopicPartitions(group, [
        TopicPartition(t, p, o, m) if m else TopicPartition(t, p, o) for t, p, o, m in offsets])]

    def attempt(timeout: float) -> None:
        result = admin.raw.alter_consumer_group_offsets(request, request_timeout=timeout)[
            group].result(timeout=timeout + 1)
        for tp in result.topic_partitions or ():
            if tp.error is None:
                continue
            if transient(tp.error):
                raise KafkaException(tp.error)
            raise admin.error(KafkaException(tp.error), f"{action} ({tp.topic}-{tp.partition})",
                              {**needs, "TOPIC": f"READ on TOPIC {tp.topic}"})

    admin.retry(attempt, action, dict(needs), coordinator=True)


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
