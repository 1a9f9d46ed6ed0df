"""Emit heartbeats and read the topology they reveal (`ferry topology`).

Every ordered pair S->T with `emit.heartbeats.enabled` (default true, also for pairs whose
data flow is off, as in MM2) writes a heartbeat to `heartbeats` on T: a flow's DAG emits
its own pair's at the start of every run; the `ferry_heartbeats` DAG emits those of the
pairs that have no DAG. Flows mirror heartbeat topics like MM2 (`A.heartbeats` on B).

On any cluster, the heartbeat topics name the clusters upstream and their hops; the latest
heartbeat of each gives its age, and, for one that arrived through Ferry, its latency: the
time the flow committed it on this cluster (from the flow's offset map) minus the time it
was written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ferry.config import Config, Flow
from ferry.config.clients import ClientConfig
from ferry.core.heartbeats import (
    Heartbeat,
    decode,
    encode,
    heartbeat_topics,
    replication_hops,
    sources_of,
    upstream_clusters,
)
from ferry.errors import UsageError
from ferry.mm2.policy import DefaultReplicationPolicy, ReplicationPolicy
from ferry.steps.clusters import Cluster
from ferry.steps.ports import EntriesOf, HeartbeatsReader, HeartbeatsTarget

log = logging.getLogger(__name__)


def heartbeat_only_pairs(config: Config) -> list[Flow]:
    """Pairs that emit heartbeats but have no DAG of their own (data flow off)."""
    return [f for f in config.flows if not f.enabled and f.emit_heartbeats.active]


def emit(flows: list[Flow], *,
         connect: Callable[[ClientConfig], HeartbeatsTarget] | None = None) -> list[Heartbeat]:
    """Write one heartbeat per pair (S, T) with heartbeats on to `heartbeats` on T (created
    when missing); returns them. `connect` makes the client of a flow's target from its
    admin client config (default: `Cluster`)."""
    connect = connect or Cluster
    sent: list[Heartbeat] = []
    for flow in flows:
        if not flow.emit_heartbeats.active:
            continue
        topic = flow.policy.heartbeats_topic()
        target = connect(flow.target_admin)
        target.ensure_mm2_topic(topic, flow.heartbeats_replication_factor,
                                "heartbeats.topic.replication.factor")
        beat = Heartbeat(flow.named_source, flow.named_target, int(time.time() * 1000))
        target.append(topic, [(*encode(beat), beat.timestamp_ms)])
        sent.append(beat)
        log.info("heartbeat %s->%s written to %s", flow.source, flow.target, topic,
                 extra={"flow": flow.name, "topic": topic})
    return sent


@dataclass(frozen=True)
class SeenHeartbeat:
    topic: str
    source: str
    target: str
    timestamp_ms: int
    age_s: float
    latency_s: float | None
    """Commit on this cluster minus emission, when it arrived through a flow of the
    config; None for the cluster's own `heartbeats` (written here directly)."""


@dataclass
class Topology:
    cluster: str
    upstream: dict[str, int] = field(default_factory=dict)
    """Upstream cluster -> replication hops (MM2's upstreamClusters/replicationHops)."""
    heartbeats: list[SeenHeartbeat] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster,
                "upstream": [{"cluster": c, "hops": h} for c, h in sorted(self.upstream.items())],
                "heartbeats": [h.__dict__ for h in self.heartbeats]}

    def text(self) -> str:
        lines = [f"cluster {self.cluster}: " + (
            f"{len(self.upstream)} upstream clusters" if self.upstream
            else "no upstream clusters (no remote heartbeat topics)")]
        lines += [f"  {c}: {h} hop{'s' if h > 1 else ''}"
                  for c, h in sorted(self.upstream.items(), key=lambda x: (x[1], x[0]))]
        for h in self.heartbeats:
            latency = f", latency {h.latency_s:.1f}s" if h.latency_s is not None else ""
            lines.append(f"  {h.topic}: {h.source}->{h.target} {h.age_s:.0f}s ago{latency}")
        return "\n".join(lines)


def _policy_for(config: Config, cluster: str) -> ReplicationPolicy:
    for flow in config.flows:
        if cluster in (flow.target, flow.source):
            return flow.policy
    return DefaultReplicationPolicy()


def topology(config: Config, cluster: str, *, client: HeartbeatsReader | None = None,
             entries_of: EntriesOf | None = None) -> Topology:
    """What `cluster`'s heartbeat topics say about the clusters upstream of it. `client`
    defaults to the cluster's admin client, `entries_of` to the offset maps as
    `ferry.steps.lookup.partition_entries` reads them (the arrivals of heartbeats)."""
    from ferry.steps.lookup import partition_entries

    if cluster not in config.clusters:
        raise UsageError(f"no cluster {cluster!r} in {config.path} (clusters: "
                         f"{', '.join(config.clusters)})")
    client = client or Cluster(config.clusters[cluster].admin)
    policy = _policy_for(config, cluster)
    topics = list(client.topics())
    found = Topology(cluster, {alias: replication_hops(policy, topics, alias)
                               for alias in upstream_clusters(policy, topics)})
    now = time.time()
    for topic in heartbeat_topics(policy, topics):
        group = f"__ferry-topology.{cluster}"
        latest: dict[tuple[str, str], tuple[int, Heartbeat]] = {}
        for record in client.read_all(topic, group):
            beat = decode(record.key, record.value)
            if beat is not None:
                latest[(beat.source, beat.target)] = (record.offset, beat)
        arrivals = _arrivals(config, policy, cluster, topic,
                             {offset for offset, _ in latest.values()},
                             entries_of or partition_entries)
        for offset, beat in latest.values():
            arrived = arrivals.get(offset)
            found.heartbeats.append(SeenHeartbeat(
                topic, beat.source, beat.target, beat.timestamp_ms,
                round(now - beat.timestamp_ms / 1000, 3),
                None if arrived is None else round((arrived - beat.timestamp_ms) / 1000, 3)))
    return found


def _arrivals(config: Config, policy: ReplicationPolicy, cluster: str, topic: str,
              offsets: set[int], entries_of: EntriesOf) -> dict[int, int]:
    """Each of `offsets` in `topic` -> when the flow that filled it committed it (ms)."""
    sources = sources_of(policy, topic)
    if not sources:
        return {}
    flow = next((f for f in config.enabled_flows
                 if f.named_source == sources[0] and f.target == cluster), None)
    upstream = policy.upstream_topic(topic)
    if flow is None or upstream is None:
        return {}
    arrivals: dict[int, int] = {}
    for entry in entries_of(flow, [upstream]).get((upstream, 0), []):
        for segment in entry.segments:
            arrivals.update({offset: entry.committed_at_ms for offset in offsets
                             if segment.target_start <= offset < segment.target_end})
    return arrivals
