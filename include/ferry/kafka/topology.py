"""Apply topic actions on the target, and create Ferry's internal topic (adapter)."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, ConfigSource
from confluent_kafka.cimpl import NewPartitions, NewTopic

from ferry.config import Flow
from ferry.internal import offset_map_topic
from ferry.kafka.admin import Admin
from ferry.kafka.errors import kafka_error
from ferry.sync.topics import TopicActions, diff_topics, mirrored_topics

log = logging.getLogger(__name__)


def non_default_configs(admin: Admin, topics: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's configs set on the topic itself (not defaults, not read-only/secret)."""
    if not topics:
        return {}
    futures = admin.raw.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics],
        request_timeout=admin.timeout)
    result: dict[str, dict[str, str]] = {}
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=admin.timeout)
        except KafkaException as exc:
            raise kafka_error(exc, admin.cluster, f"describing configs of {resource.name}") \
                from None
        result[resource.name] = {
            name: entry.value for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and not entry.is_read_only and not entry.is_sensitive and entry.value is not None
        }
    return result


def plan_topology(flow: Flow, source: Admin, target: Admin) -> tuple[TopicActions, dict[str,
                                                                                   int]]:
    """(actions to apply on the target, the mirrored source topics with partition counts)."""
    source_topics = {t.name: t.partitions for t in source.topics().values()}
    target_topics = {t.name: t.partitions for t in target.topics().values()}
    mirrored = mirrored_topics(flow, source_topics)
    missing = [t for t in mirrored if flow.remote_topic(t) not in target_topics]
    actions = diff_topics(flow, source_topics, target_topics,
                          non_default_configs(source, missing))
    return actions, mirrored


def apply_topology(flow: Flow, target: Admin, actions: TopicActions) -> None:
    """Create missing remote topics and add partitions; an existing topic is not an error."""
    if actions.create:
        futures = target.raw.create_topics(
            [NewTopic(c.name, c.partitions, c.replication_factor, config=dict(c.configs))
             for c in actions.create], request_timeout=target.timeout)
        for name, future in futures.items():
            _settle(future, target, f"creating remote topic {name}", exists_ok=True)
            log.info("created remote topic %s on %s", name, flow.target,
                     extra={"flow": flow.name, "topic": name})
    if actions.grow:
        futures = target.raw.create_partitions(
            [NewPartitions(g.name, g.to_partitions) for g in actions.grow],
            request_timeout=target.timeout)
        for name, future in futures.items():
            _settle(future, target, f"adding partitions to {name}")
            log.info("grew remote topic %s on %s", name, flow.target,
                     extra={"flow": flow.name, "topic": name})


def ensure_offset_map_topic(flow: Flow, target: Admin) -> str:
    """Create the offset-map topic (one partition, kept forever) when missing."""
    name = offset_map_topic(flow)
    if name in target.topics():
        return name
    rf = flow.replication_factor
    future = target.raw.create_topics(
        [NewTopic(name, 1, rf, config={"retention.ms": "-1", "retention.bytes": "-1",
                                       "cleanup.policy": "delete"})],
        request_timeout=target.timeout)[name]
    _settle(future, target, f"creating Ferry's offset-map topic {name}", exists_ok=True)
    return name


def _settle(future: object, admin: Admin, action: str, exists_ok: bool = False) -> None:
    try:
        future.result(timeout=admin.timeout)  # type: ignore[attr-defined]
    except KafkaException as exc:
        err = exc.args[0]
        if exists_ok and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise kafka_error(exc, admin.cluster, action) from None
