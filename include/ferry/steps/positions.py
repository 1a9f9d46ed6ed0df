"""`ferry positions reset`: set where a flow continues copying a topic (adapter).

A flow's positions are the offsets of the group `__ferry-positions.<source>` on the remote
topic's partitions: the next source offset to copy. After a source topic was deleted and
recreated, planning stops (the positions are past the new topic's end); the operator
either deletes the remote topic (Kafka drops the positions on it too) or keeps it and
resets the positions: to the new topic's start (`earliest`), its end (`latest`) or an
offset. Records already on the target are not touched; look-ups prefer offset-map entries
written after the reset. A reset writes like a run (see `reset`): under each partition's
writer id, with an offset-map entry of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

from ferry.config import Flow
from ferry.core.internal import positions_group
from ferry.core.planner import TopicPartition as TP
from ferry.core.positions import PositionWrite, reset_entry
from ferry.core.sync.topics import mirrored_topics
from ferry.errors import TerminalError, UsageError
from ferry.steps.clusters import Cluster
from ferry.steps.ports import HasTopicIds, Partitions, PositionsTarget


class ResetSource(Partitions, HasTopicIds, Protocol):
    """The source as a reset reads it."""


class ResetTarget(PositionsTarget, HasTopicIds, Protocol):
    """The target as a reset writes it (the remote topic's ID goes with each position)."""


@dataclass(frozen=True)
class Reset:
    topic: str
    partition: int
    before: int | None
    after: int


def reset(flow: Flow, topic: str, to: str, dry_run: bool = False, *,
          source: ResetSource | None = None, target: ResetTarget | None = None
          ) -> list[Reset]:
    """Set the flow's positions on every partition of the remote topic of `topic` to `to`:
    `earliest` (the source's log start), `latest` (its last stable offset) or an offset
    within them. Returns each partition's position before (None: none) and after; with
    `dry_run`, changes nothing. `source` and `target` default to the flow's clusters.

    Each position is written as a run writes it: under the partition's writer id, with an
    offset-map entry of the reset (so a position later restored from the offset map is
    the reset one) and the source and remote topics' IDs. The writes are named the flow's
    newest run before each id is taken (`ferry.kafka.positions`), so a run of the flow
    copying meanwhile (a continuous loop) yields to them, and copies on from the reset
    positions once they are written. A partition whose position moved since it was read
    (a run committed between the read and the id's taking) is read and written again, up
    to `RESET_ATTEMPTS` times in all; one that moved each time is left as it is, and the
    reset fails naming it."""
    source = source or Cluster(flow.source_admin)
    target = target or Cluster(flow.target_admin)
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
    ids = source.topic_ids([topic])
    remote_id = target.topic_ids([remote]).get(remote, "")
    ends = target.watermarks([TP(remote, tp.partition) for tp in tps])
    run_id = f"reset-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    now_ms = int(time.time() * 1000)
    writes = []
    for r in resets:
        end = ends[TP(remote, r.partition)].high
        writes.append(PositionWrite(
            topic, r.partition, r.after, end, ids.get(topic, ""), expect=r.before,
            target_id=remote_id,
            entries=(reset_entry(flow.name, run_id, topic, r.partition, remote, r.after, end,
                                 now_ms, ids.get(topic, ""), remote_id),)))
    moved = target.write_positions(flow, writes)
    for _ in range(RESET_ATTEMPTS - 1):
        if not moved:
            break
        again = {m.write.partition for m in moved}
        found = target.group_offsets(group, [(remote, p) for p in sorted(again)])
        for i, r in enumerate(resets):
            if r.partition in again:
                resets[i] = replace(r, before=found.get((remote, r.partition)))
                writes[i] = replace(writes[i], expect=resets[i].before)
        moved = target.write_positions(flow, [w for w in writes if w.partition in again])
    if moved:
        names = ", ".join(f"{remote}-{m.write.partition} ({m.write.expect} -> {m.found})"
                          for m in moved)
        raise TerminalError(
            f"flow {flow.name}: the positions of {names} moved while resetting them (a run "
            f"of the flow committed meanwhile): those were left as they are, the other "
            f"{len(resets) - len(moved)} partitions reset; pause the flow's DAG (and stop any "
            "`ferry mirror`), then reset again")
    return resets


RESET_ATTEMPTS = 3
"""How many times a reset writes a partition whose position moved since it was read."""


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
