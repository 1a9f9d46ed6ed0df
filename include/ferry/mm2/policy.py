"""Replication policies: how remote topics are named, exactly as MM2 names them.

Ports `DefaultReplicationPolicy` and `IdentityReplicationPolicy` from MM2's client
(`connect/mirror-client`), including their corner cases, because topic names are the
contract between Ferry, MM2 and every consumer that reads a remote topic:

- `topic_source` splits on the separator like Java's `String.split`, which drops trailing
  empty parts: `"a."` is not a remote topic, `".a"` has the source `""`. An empty separator
  (MM2 takes it as given) splits between every character, as Java's split does.
- `original_topic` peels sources until there is none or the name stops changing (the
  identity policy never changes it).
- Internal topics (`__*`, `.*`, `*.internal`, `*-internal`) are never replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_POLICY_CLASS: Final = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY_CLASS: Final = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
HEARTBEATS_TOPIC: Final = "heartbeats"


@dataclass(frozen=True)
class DefaultReplicationPolicy:
    """Remote topics are `<source alias><separator><topic>`.

    `internal_separator_enabled=False` keeps `.` in internal topic names even with a custom
    separator (MM2's `replication.policy.internal.topic.separator.enabled`).
    """

    separator: str = "."
    internal_separator_enabled: bool = True

    @property
    def class_name(self) -> str:
        return DEFAULT_POLICY_CLASS

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return source_alias + self.separator + topic

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster `topic` was mirrored from, or None for a local topic."""
        parts = topic.split(self.separator) if self.separator else list(topic)
        while parts and parts[-1] == "":
            parts.pop()
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream, or None for a local topic."""
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator) :]

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster where it was first written."""
        while True:
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic:
                return topic
            topic = upstream

    @property
    def _isep(self) -> str:
        return self.separator if self.internal_separator_enabled else "."

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs{self._isep}{cluster_alias}{self._isep}internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._isep}checkpoints{self._isep}internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self._isep}checkpoints{self._isep}internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(f"{self._isep}internal")

    def is_internal_topic(self, topic: str) -> bool:
        """Kafka's, Connect's and MM2's internal topics: never mirrored."""
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith(("__", "."))
            or topic.endswith(("-internal", ".internal"))
        )


@dataclass(frozen=True)
class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Remote topics keep their names; only heartbeats are renamed as by the default.

    `source_alias` is the flow's source cluster (MM2 passes `source.cluster.alias`); without
    it `topic_source` is None for every non-heartbeat topic. This policy cannot prevent
    cycles: `ferry validate` checks the topology instead.
    """

    source_alias: str | None = None

    @property
    def class_name(self) -> str:
        return IDENTITY_POLICY_CLASS

    def _looks_like_heartbeat(self, topic: str) -> bool:
        # MM2 uses endsWith here, so "my-heartbeats" is renamed like a heartbeats topic.
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeat(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().topic_source(topic)
        return self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().upstream_topic(topic)
        return topic


ReplicationPolicy = DefaultReplicationPolicy
"""Every policy Ferry supports is a DefaultReplicationPolicy or a subclass of it."""
