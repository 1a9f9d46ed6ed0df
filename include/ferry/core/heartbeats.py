"""Heartbeats and the topology they reveal (pure): MM2's `Heartbeat` wire format and
`MirrorClient`'s `upstreamClusters` / `replicationHops`.

Each pair S->T with heartbeats on writes a heartbeat (key: S and T; value: version 0 and
the time) to `heartbeats` on T. A flow T->U mirrors that topic like MM2 does (`T.heartbeats`
on U), so every cluster's heartbeat topics name the clusters upstream of it and how many
hops away they are; a heartbeat's arrival on the far side (when the mirror committed it)
measures the link's end-to-end latency.

Wire format, big-endian, STRING = int16 length + UTF-8: key `sourceClusterAlias,
targetClusterAlias`; value `version:int16=0, timestamp:int64` (ms).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from ferry.mm2.policy import ReplicationPolicy
from ferry.mm2.wire import Reader, string

VERSION = 0


@dataclass(frozen=True)
class Heartbeat:
    source: str
    target: str
    timestamp_ms: int


def encode(heartbeat: Heartbeat) -> tuple[bytes, bytes]:
    """(key, value) exactly as MM2's `Heartbeat.recordKey()/recordValue()`."""
    return (string(heartbeat.source) + string(heartbeat.target),
            struct.pack(">hq", VERSION, heartbeat.timestamp_ms))


def decode(key: bytes | None, value: bytes | None) -> Heartbeat | None:
    """A heartbeat record, or None for one that does not parse (MM2 skips those)."""
    if key is None or value is None:
        return None
    try:
        k, v = Reader(key), Reader(value)
        source, target = k.string(), k.string()
        version, timestamp = v.take(">hq")
    except (ValueError, UnicodeDecodeError, struct.error):
        return None
    return Heartbeat(source, target, timestamp) if version == VERSION else None


def heartbeat_topics(policy: ReplicationPolicy, topics: Iterable[str]) -> list[str]:
    """The cluster's heartbeat topics: `heartbeats` and its remote copies."""
    return sorted(t for t in topics if policy.is_heartbeats_topic(t))


def sources_of(policy: ReplicationPolicy, topic: str) -> list[str]:
    """Every cluster a topic passed through, nearest first (`B.A.heartbeats` -> B, A)."""
    found: list[str] = []
    while True:
        source = policy.topic_source(topic)
        if source is None or source in found:
            return found
        found.append(source)
        upstream = policy.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return found
        topic = upstream


def hops(policy: ReplicationPolicy, topic: str, alias: str) -> int:
    """MM2's `countHopsForTopic`: how many hops `topic` is from cluster `alias`, or -1."""
    chain = sources_of(policy, topic)
    return chain.index(alias) + 1 if alias in chain else -1


def upstream_clusters(policy: ReplicationPolicy, topics: Iterable[str]) -> set[str]:
    """MM2's `upstreamClusters`: every source of every heartbeat topic."""
    return {s for t in heartbeat_topics(policy, topics) for s in sources_of(policy, t)}


def replication_hops(policy: ReplicationPolicy, topics: Iterable[str], alias: str) -> int:
    """MM2's `replicationHops`: the fewest hops to `alias` over the heartbeat topics, or
    -1 when it is not upstream."""
    found = [h for t in heartbeat_topics(policy, topics) if (h := hops(policy, t, alias)) > 0]
    return min(found, default=-1)
