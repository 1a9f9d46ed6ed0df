"""The names MM2 knows: its connector settings, client keys and worker keys.

`CONNECTOR_KEYS` are what MM2 takes from the top level into every flow
(`MirrorMakerConfig.allConfigNames`); other top-level keys are either client fallbacks,
Connect worker settings (recognised, not used by Ferry) or unknown (a warning).
"""

from __future__ import annotations

from typing import Final

CONNECTOR_KEYS: Final = frozenset({
    "enabled", "topics", "topics.exclude", "topics.blacklist", "groups", "groups.exclude",
    "groups.blacklist", "config.properties.exclude", "config.properties.blacklist",
    "topic.filter.class", "group.filter.class", "config.property.filter.class",
    "replication.factor", "refresh.topics.enabled", "refresh.topics.interval.seconds",
    "refresh.groups.enabled", "refresh.groups.interval.seconds",
    "sync.topic.configs.enabled", "sync.topic.configs.interval.seconds",
    "sync.topic.acls.enabled", "sync.topic.acls.interval.seconds",
    "emit.heartbeats.enabled", "emit.heartbeats.interval.seconds",
    "emit.checkpoints.enabled", "emit.checkpoints.interval.seconds",
    "sync.group.offsets.enabled", "sync.group.offsets.interval.seconds", "offset.lag.max",
    "offset-syncs.topic.location", "offset-syncs.topic.replication.factor",
    "heartbeats.topic.replication.factor", "checkpoints.topic.replication.factor",
    "emit.offset-syncs.enabled", "heartbeats.replication.enabled",
    "use.incremental.alter.configs", "add.source.alias.to.metrics",
    "consumer.poll.timeout.ms", "admin.timeout.ms", "replication.policy.class",
    "replication.policy.separator", "replication.policy.internal.topic.separator.enabled",
    "source.cluster.alias", "target.cluster.alias", "tasks.max",
    "forwarding.admin.class", "metric.reporters", "exactly.once.support",
    "transaction.boundary", "name", "connector.class",
})

# Settings MM2 reads only per flow (S->T.<key>): defined by a filter's own config, not by
# the connectors, so MirrorMakerConfig drops them at the top level.
FLOW_ONLY_KEYS: Final = frozenset({"use.defaults.from"})

# Connect's single message transforms and predicates: MM2 applies them to records; Ferry
# copies records byte for byte, so a config that relies on them is refused.
TRANSFORM_PREFIXES: Final = ("transforms", "predicates")

DEFAULT_FILTERS: Final = {
    "topic.filter.class": "DefaultTopicFilter",
    "group.filter.class": "DefaultGroupFilter",
    "config.property.filter.class": "DefaultConfigPropertyFilter",
}

# Connect worker / dedicated-mode settings MM2 accepts at the top level; Ferry has no
# Connect worker, so they are recognised and ignored.
_WORKER_PREFIXES: Final = (
    "offset.storage", "config.storage", "status.storage", "key.converter",
    "value.converter", "header.converter", "task", "worker", "replication.policy",
    "config.providers", "offset.flush", "dedicated.mode", "listeners", "rest.",
    "admin.listeners", "exactly.once.source.support", "scheduled.rebalance",
    "plugin.path", "connector.client.config.override.policy", "clusters",
)

_CLIENT_EXACT: Final = frozenset({"bootstrap.servers", "security.protocol", "client.dns.lookup"})


def is_client_key(key: str) -> bool:
    """MM2's `MirrorClientConfig.CLIENT_CONFIG_DEF` names: connection and security keys."""
    return key in _CLIENT_EXACT or key.startswith(("ssl.", "sasl."))


def is_known_top_level(key: str) -> bool:
    return (key in CONNECTOR_KEYS or key in FLOW_ONLY_KEYS or is_client_key(key)
            or key.startswith(_WORKER_PREFIXES) or key.startswith("ferry."))
