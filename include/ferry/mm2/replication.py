"""Which topics a flow mirrors: MM2's `shouldReplicateTopic` and `isCycle`, as pure functions.

A topic is mirrored from S to T iff the topic filter accepts it (or it is a heartbeats
topic and heartbeats replication is on), it is not internal, and it is not a cycle: no
cluster in its chain of sources is T, so `T.x` on S never goes back to T.
"""

from __future__ import annotations

from ferry.mm2.filters import NameFilter
from ferry.mm2.policy import ReplicationPolicy


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when `topic` came (directly or through other clusters) from `target_alias`."""
    seen: set[str] = set()
    while topic not in seen:
        seen.add(topic)
        source = policy.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(topic)
        # The identity policy never changes the name, so it can never detect a cycle here.
        if upstream is None or upstream == topic:
            return False
        topic = upstream
    return False


def should_replicate_topic(
    policy: ReplicationPolicy,
    topic_filter: NameFilter,
    topic: str,
    target_alias: str,
    heartbeats_replication: bool = True,
) -> bool:
    """MM2's rule for whether the flow `* -> target_alias` mirrors `topic`."""
    wanted = topic_filter.accepts(topic) or (
        heartbeats_replication and policy.is_heartbeats_topic(topic)
    )
    return wanted and not policy.is_internal_topic(topic) and not is_cycle(
        policy, topic, target_alias
    )
