"""`ferry positions reset`: set where a flow continues copying a topic (adapter).

A flow's positions are the offsets of the group `__ferry-positions.<source>` on the remote
topic's partitions: the next source offset to copy. After a source topic was deleted and
recreated, planning stops (the positions are past the new topic's end); the operator
either deletes the remote topic (Kafka drops the positions on it too) or keeps it and
resets the positions: to the new topic's start (`earliest`), its end (`latest`) or an
offset. Records already on the target are not touched; look-ups prefer offset-map entries
written after the reset.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.config import Flow
from ferry.core.internal import positions_group
from ferry.core.planner import TopicPartition as TP
from ferry.core.sync.topics import mirrored_topics
from ferry.errors import TerminalError, UsageError
from ferry.steps.ports import KafkaCluster, Partitions, PositionsTarget


@dataclass(frozen=True)
class Reset:
    topic: str
    partition: int
    before: int | None
    after: int


def reset(flow: Flow, topic: str, to: str, dry_run: bool = False, *,
          source: Partitions | None = None, target: PositionsTarget | None = None
          ) -> list[Reset]:
    """Set the flow's positions on every partition of the remote topic of `topic` to `to`:
    `earliest` (the source's log start), `latest` (its last stable offset) or an offset
    within them. Returns each partition's position before (None: none) and after; with
    `dry_run`, changes nothing. `source` and `target` default to the flow's clusters."""
    source = source or KafkaCluster(flow.source_admin)
    target = target or KafkaCluster(flow.target_admin)
    counts = mirrored_topics(flow, {t.name: t.partitions for t in source.topics().values()})
    if topic not in counts:
        raise UsageError(f"flow {flow.name} does not mirror a source topic {topic!r} (it "
                         f"mirrors: {', '.join(counts) or 'none'})")
    tps = [TP(topic, p) for p in range(counts[topic])]
    marks = source.watermarks(tps)
    remote = flow.remote_topic(topic)
    group = positions_group(flow)
    before = target.group_offsets(group, [(remote, tp.partition) for tp in tps])
    resets = [Reset(topic, tp.partition, before.get((remote, tp.partition)),
                    _target(to, marks[tp].low, marks[tp].high, tp)) for tp in tps]
    if dry_run:
        return resets
    target.alter_offsets(group, [(remote, r.partition, r.after, "") for r in resets],
                         f"resetting the positions of {remote}",
                         {"GROUP": f"READ on GROUP {group}",
                          "TOPIC": f"DESCRIBE on TOPIC {remote}"})
    return resets


def _target(to: str, low: int, high: int, tp: TP) -> int:
    if to == "earliest":
        return low
    if to == "latest":
        return high
    try:
        offset = int(to)
    except ValueError:
        raise UsageError(f"--to {to!r}: give earliest, latest or an offset") from None
    if not low <= offset <= high:
        raise TerminalError(f"--to {offset}: {tp} holds offsets {low}..{high - 1}; a position "
                            "outside them would skip records or wait for ones not written")
    return offset
