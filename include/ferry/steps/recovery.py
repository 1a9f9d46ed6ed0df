"""Durable positions (G9): where each partition was mirrored to, from the offset map.

A flow's positions are offsets of the memberless group `__ferry-positions.<source>` on the
target, committed in the same transactions as the records. Kafka deletes such an offset
`offsets.retention.minutes` after its last commit (7 days by default), so a partition
that stays idle that long loses its position. The offset map is the truth they are a
cache of: every transaction also wrote an entry whose `covered_end` is the position it
committed. When the group has no position for a partition the offset map knows, the run
takes the position from the offset map (the latest entry written into the flow's remote
topic: Delta's rows plus the entries committed on the target since) and commits it back
into the group, with a warning naming the partition. A partition is never started from
scratch after it was mirrored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ferry.config import Flow
from ferry.core.offsetmap import MapEntry
from ferry.core.planner import TopicPartition
from ferry.core.positions import PositionWrite
from ferry.steps.ports import HasTopicIds, OffsetMapTarget, PositionsTarget

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recorded:
    """A partition's position as the offset map records it."""

    position: int
    """The next source offset to copy: the latest entry's covered end."""
    target_end: int | None
    """The remote partition's next offset after the last mirrored record (None: none)."""
    run_id: str
    source_id: str = ""
    """The source topic ID the latest entry was written for ("" in older entries)."""
    target_id: str = ""
    """The remote topic ID the latest entry was written for ("" in older entries)."""


def latest_positions(flow: Flow, entries: Iterable[tuple[Any, MapEntry]]
                     ) -> dict[TopicPartition, Recorded]:
    """Per source partition, the position the latest entry (highest order key: its offset
    in the offset-map topic) written into the flow's remote topic left: a backfill into a
    topic of its own moves no position of the flow. Pure."""
    latest: dict[TopicPartition, tuple[Any, MapEntry]] = {}
    ends: dict[TopicPartition, tuple[Any, int]] = {}
    for offset, entry in entries:
        if entry.target_topic != flow.remote_topic(entry.source_topic):
            continue
        tp = TopicPartition(entry.source_topic, entry.source_partition)
        if tp not in latest or offset > latest[tp][0]:
            latest[tp] = (offset, entry)
        if entry.segments and (tp not in ends or offset > ends[tp][0]):
            ends[tp] = (offset, entry.segments[-1].target_end)
    return {tp: Recorded(entry.covered_end, ends[tp][1] if tp in ends else None, entry.run_id,
                         entry.source_id, entry.target_id)
            for tp, (_, entry) in latest.items()}


def recorded_positions(flow: Flow, tps: Iterable[TopicPartition], *,
                       source: HasTopicIds | None = None,
                       target: OffsetMapTarget | None = None
                       ) -> tuple[dict[TopicPartition, Recorded], dict[TopicPartition, str]]:
    """The offset map's positions of `tps` (those it knows), from the entries of the current
    topic incarnations: the Delta table's and the ones committed on the target's offset-map
    topic that Delta does not hold yet; and the partitions of `tps` it knows only from an
    older incarnation of their source topic (-> that incarnation's topic ID: the topic was
    deleted and created again). `source` and `target` default to the flow's clusters."""
    from ferry.steps.lookup import entries_and_older

    wanted = set(tps)
    if not wanted:
        return {}, {}
    found, older = entries_and_older(flow, {tp.topic for tp in wanted}, source=source,
                                     target=target)
    entries = [pair for pairs in found.values() for pair in pairs]
    return ({tp: r for tp, r in latest_positions(flow, entries).items() if tp in wanted},
            {tp: old for (t, p), old in older.items() if (tp := TopicPartition(t, p)) in wanted})


def restore(flow: Flow, recovered: Mapping[TopicPartition, Recorded], *,
            target: PositionsTarget | None = None) -> None:
    """Commit recovered positions back into the flow's positions group, as the lanes commit
    them: under each partition's writer id (a run writing it meanwhile is fenced, and a
    position it committed is left as it is), with the remote partition's end and the source
    topic ID as metadata (so a recreated source is still noticed). `target` defaults to the
    flow's target cluster."""
    from ferry.core.internal import positions_group
    from ferry.steps.clusters import Cluster

    if not recovered:
        return
    target = target or Cluster(flow.target_admin)
    group = positions_group(flow)
    moved = target.write_positions(flow, [
        PositionWrite(tp.topic, tp.partition, r.position, r.target_end, r.source_id,
                      expect=None, target_id=r.target_id) for tp, r in sorted(recovered.items())])
    left = {(m.write.topic, m.write.partition) for m in moved}
    for tp, r in sorted(recovered.items()):
        if (tp.topic, tp.partition) in left:
            log.info("the position of %s was committed by a run meanwhile; not restored",
                     tp, extra={"flow": flow.name, "topic": tp.topic,
                                "partition": tp.partition})
            continue
        log.warning("the position of %s was gone from group %s (expired under Kafka's "
                    "offsets.retention.minutes, or the group was deleted); restored %d from "
                    "the offset map (run %s)",
                    tp, group, r.position, r.run_id,
                    extra={"flow": flow.name, "topic": tp.topic, "partition": tp.partition})
