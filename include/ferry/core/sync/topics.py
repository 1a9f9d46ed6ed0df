"""Remote topics and partitions: what to create so the target can take the source's data.

MM2's rules: a remote topic gets the source's partition count, the flow's replication
factor and the source's non-default configs that pass `config.properties.exclude`; more
source partitions -> more remote partitions, before any record of them is copied; never
shrink, never delete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ferry.config import Flow
from ferry.core.sync.configs import TopicConfig, creation_configs
from ferry.mm2.replication import should_replicate_topic


@dataclass(frozen=True)
class CreateTopic:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    source_topic: str = ""


@dataclass(frozen=True)
class GrowTopic:
    name: str
    from_partitions: int
    to_partitions: int
    source_topic: str = ""


@dataclass(frozen=True)
class TopicActions:
    create: tuple[CreateTopic, ...] = ()
    grow: tuple[GrowTopic, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.create and not self.grow


def over_partition_limit(flow: Flow, mirrored: Mapping[str, int]) -> str | None:
    """Why the target cannot take some mirrored topics (more partitions than its Event Hubs
    tier allows per topic), naming each with the fix; None when it can."""
    limit = flow.target_partition_limit
    over = {t: n for t, n in mirrored.items() if limit is not None and n > limit}
    if not over:
        return None
    listed = ", ".join(f"{t} ({n} partitions)" for t, n in over.items())
    return (f"flow {flow.name}: the target, an Azure Event Hubs namespace, takes at most "
            f"{limit} partitions per topic, and {listed} would need more; nothing was "
            f"copied. Set {flow.target}.ferry.eventhubs.tier to the namespace's tier "
            f"(premium: 100, dedicated: 1024), or leave these topics out with "
            f"{flow.name}.topics.exclude")


def mirrored_topics(flow: Flow, source_topics: Mapping[str, int]) -> dict[str, int]:
    """The source topics the flow mirrors, with their partition counts."""
    return {
        name: count for name, count in sorted(source_topics.items())
        if should_replicate_topic(flow.policy, flow.topics, name, flow.named_target,
                                  flow.heartbeats_replication)
    }


def diff_topics(
    flow: Flow,
    source_topics: Mapping[str, int],
    target_topics: Mapping[str, int],
    source_configs: Mapping[str, TopicConfig] | None = None,
) -> TopicActions:
    """Actions that make every mirrored topic's remote topic exist with enough partitions.

    `source_topics`/`target_topics` map names to partition counts; `source_configs` holds
    each source topic's described configs (only topics to create need them).
    """
    create: list[CreateTopic] = []
    grow: list[GrowTopic] = []
    for name, partitions in mirrored_topics(flow, source_topics).items():
        remote = flow.remote_topic(name)
        have = target_topics.get(remote)
        if have is None:
            configs = creation_configs(flow, (source_configs or {}).get(name, {}))
            create.append(CreateTopic(remote, partitions, flow.replication_factor, configs,
                                      name))
        elif have < partitions:
            grow.append(GrowTopic(remote, have, partitions, name))
    return TopicActions(tuple(create), tuple(grow))
