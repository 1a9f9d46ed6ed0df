"""Apply topic actions on the target, and create Ferry's internal topic (adapter)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from confluent_kafka.cimpl import NewTopic

from ferry.config import Flow
from ferry.core.internal import offset_map_topic
from ferry.core.sync.topics import TopicActions
from ferry.errors import TerminalError
from ferry.kafka.admin import Admin

log = logging.getLogger(__name__)


def apply_topology(flow: Flow, target: Admin, actions: TopicActions) -> None:
    """Create missing remote topics and add partitions; an existing topic is not an error."""
    created = target.create_topics(
        [NewTopic(c.name, c.partitions, c.replication_factor, config=dict(c.configs))
         for c in actions.create], lambda name: f"creating remote topic {name}")
    for name in created:
        log.info("created remote topic %s on %s", name, flow.target,
                 extra={"flow": flow.name, "topic": name})
    if actions.grow:
        already = target.grow_topics(
            {g.name: (g.from_partitions, g.to_partitions) for g in actions.grow},
            lambda name: f"adding partitions to {name}")
        for name in (n for n, had in already.items() if had):
            log.info("remote topic %s on %s had its partitions already (an earlier attempt "
                     "or another run added them)", name, flow.target,
                     extra={"flow": flow.name, "topic": name})
        for g in actions.grow:
            log.info("grew remote topic %s on %s to %d partitions", g.name, flow.target,
                     g.to_partitions, extra={"flow": flow.name, "topic": g.name})


MAP_TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
"""The offset-map topic keeps every entry forever: it is the map's truth (G9)."""


def ensure_offset_map_topic(flow: Flow, target: Admin,
                            existing: Collection[str] | None = None) -> str:
    """Create the offset-map topic (one partition, kept forever) when missing; refuse one
    that would forget entries (a retention, compaction): TerminalError naming the setting
    and the fix. One DescribeConfigs, unless `existing` (the target's topics, when the
    caller has just listed them) already says it is missing. Only Ferry creates it
    (writers never create a topic by writing to it)."""
    from ferry.kafka.configs import describe_topic_configs

    name = offset_map_topic(flow)
    found = {} if existing is not None and name not in existing else \
        describe_topic_configs(target, [name], missing_ok=True)
    if name not in found:
        target.create_topics(
            [NewTopic(name, 1, flow.replication_factor, config=dict(MAP_TOPIC_CONFIGS))],
            lambda topic: f"creating Ferry's offset-map topic {topic}")
        return name
    configs = found[name]
    wrong = [f"{key}={configs[key].value}" for key in ("retention.ms", "retention.bytes")
             if key in configs and configs[key].value not in ("-1", None)]
    if "cleanup.policy" in configs and "compact" in str(configs["cleanup.policy"].value):
        wrong.append(f"cleanup.policy={configs['cleanup.policy'].value}")
    if wrong:
        fix = " ".join(f"--add-config {k}={v}" for k, v in MAP_TOPIC_CONFIGS.items())
        raise TerminalError(
            f"flow {flow.name}: Ferry's offset-map topic {name} on {flow.target} has "
            f"{', '.join(wrong)}: Kafka would delete offset-map entries, the record of what "
            f"was copied where. Nothing was copied. Set it back as Ferry created it: "
            f"kafka-configs.sh --alter --entity-type topics --entity-name {name} {fix}")
    return name


def create_plain_topics(flow: Flow, target: Admin, partitions: dict[str, int]) -> list[str]:
    """Create topics of Ferry's own (a backfill's named destination) with the flow's
    replication factor and the target's default configs; returns those created."""
    return target.create_topics(
        [NewTopic(name, count, flow.replication_factor) for name, count in partitions.items()],
        lambda name: f"creating topic {name}")
