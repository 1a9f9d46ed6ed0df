"""How far Delta is behind the offset-map topic on the target: the recording lag.

The records, their offset-map entries and positions are committed to the target in each
copy; the Delta `offset_map` and `runs` tables are written after (by the copy job, or by a
continuous loop's recorder in batches, `ferry.runtime.recorder`). What the target holds and
Delta does not yet is the recording lag: the committed entries past Delta's cursor in the
offset-map topic, and how long ago the oldest of them was committed. It is read from the
topic and Delta alone, so any process sees it (the exporter runs apart from the loop, whose
recorder knows only its own rows, `Recorder.behind`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ferry.core.internal import offset_map_topic
from ferry.core.planner import TopicPartition

if TYPE_CHECKING:
    from ferry.config import Flow
    from ferry.steps.ports import OffsetMapTarget, ReadsWatermarks

    class RecordingTarget(OffsetMapTarget, ReadsWatermarks, Protocol):
        """A flow's target, as the recording lag reads it."""


@dataclass(frozen=True)
class RecordingLag:
    entries: int
    """Committed offset-map entries of the flow that Delta's offset map does not hold."""
    oldest_ms: int | None
    """When the oldest of them was committed (its lane's `committed_at_ms`, epoch ms);
    None when none waits."""

    def age_s(self, now_ms: int) -> float:
        """Seconds since the oldest entry Delta lacks was committed at `now_ms` (epoch ms);
        0 when none waits (and never below 0, whatever the clocks)."""
        if self.oldest_ms is None:
            return 0.0
        return max(0.0, (now_ms - self.oldest_ms) / 1000)


def recording_lag(flow: Flow, target: RecordingTarget | None = None) -> RecordingLag:
    """The flow's recording lag, read from its target (default: `flow.target_admin`'s
    cluster): the committed entries after Delta's cursor (`map_cursor`), markers and
    aborted entries not counted, and the earliest commit time among them. A Delta whose
    cursor is at most the commit marker short of the topic's end is caught up, and no
    entry is read."""
    if target is None:
        from ferry.steps.clusters import Cluster

        target = Cluster(flow.target_admin)
    cursor = target.map_cursor(flow)
    if not cursor.topic_id:
        return RecordingLag(0, None)
    tp = TopicPartition(offset_map_topic(flow), 0)
    if target.watermarks([tp])[tp].high <= cursor.after + 2:
        return RecordingLag(0, None)
    count, oldest = 0, None
    for _, entry in target.map_entries(flow, cursor.after):
        count += 1
        oldest = entry.committed_at_ms if oldest is None else min(oldest,
                                                                  entry.committed_at_ms)
    return RecordingLag(count, oldest)
