"""Apply topic actions on the target, and create Ferry's internal topic (adapter)."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.cimpl import NewPartitions, NewTopic

from ferry.config import Flow
from ferry.internal import offset_map_topic
from ferry.kafka.admin import Admin
from ferry.sync.topics import TopicActions

log = logging.getLogger(__name__)


def apply_topology(flow: Flow, target: Admin, actions: TopicActions) -> None:
    """Create missing remote topics and add partitions; an existing topic is not an error."""
    if actions.create:
        futures = target.raw.create_topics(
            [NewTopic(c.name, c.partitions, c.replication_factor, config=dict(c.configs))
             for c in actions.create], request_timeout=target.timeout)
        for name, future in futures.items():
            _settle(future, target, f"creating remote topic {name}", exists_ok=True,
                    needs=f"CREATE on TOPIC {name}")
            log.info("created remote topic %s on %s", name, flow.target,
                     extra={"flow": flow.name, "topic": name})
    if actions.grow:
        futures = target.raw.create_partitions(
            [NewPartitions(g.name, g.to_partitions) for g in actions.grow],
            request_timeout=target.timeout)
        for name, future in futures.items():
            _settle(future, target, f"adding partitions to {name}",
                    needs=f"ALTER on TOPIC {name}")
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
    _settle(future, target, f"creating Ferry's offset-map topic {name}", exists_ok=True,
            needs=f"CREATE on TOPIC {name}")
    return name


def _settle(future: object, admin: Admin, action: str, exists_ok: bool = False,
            needs: str | None = None) -> None:
    try:
        future.result(timeout=admin.timeout)  # type: ignore[attr-defined]
    except KafkaException as exc:
        err = exc.args[0]
        if exists_ok and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise admin.error(exc, action, needs) from None
