"""How far a flow is behind, per source partition (read from the clusters), and the lag
history the Ferry page charts: one row per partition and run in the Delta `lag` table,
written by the cycle's record step."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from ferry.config import Flow
from ferry.errors import FerryError
from ferry.state.store import DeltaStore
from ferry.steps.clusters import Cluster
from ferry.steps.ports import LagSource, ReadsGroupOffsets, StateStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    """The source topic."""
    partition: int
    source_end: int
    """The source's last stable offset (read_committed end)."""
    position: int | None
    """The next source offset the flow copies (None: nothing copied yet)."""
    lag_records: int
    lag_seconds: float
    """Age of the oldest record not mirrored yet (0 when caught up)."""
    remote_topic: str = ""
    """The topic on the target the partition is mirrored to (the flow's replication policy)."""
    retention_seconds: float | None = None
    """The source topic's retention by time (None: records kept for ever, only compacted, or
    its config unreadable): a record not mirrored when it is this old may be lost."""


def partition_lag(flow: Flow, *, source: LagSource | None = None,
                  target: ReadsGroupOffsets | None = None,
                  retention: bool = True) -> list[PartitionStatus]:
    """Per mirrored source partition: the source end (read_committed), the flow's position,
    and the lag in records and seconds. Reads the clusters only (no Delta); `source` and
    `target` default to the flow's clusters."""
    from ferry.core.internal import positions_group, reader_group
    from ferry.core.planner import TopicPartition
    from ferry.core.sync.topics import mirrored_topics

    source = source or Cluster(flow.source_admin)
    target = target or Cluster(flow.target_admin)
    topics = mirrored_topics(flow, {t.name: t.partitions for t in source.topics().values()})
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    marks = source.watermarks(tps)
    # The lag history keeps no retention: a cycle's record step does not describe configs.
    kept = _retention(flow, source, set(topics)) if retention else {}
    committed = target.group_offsets(
        positions_group(flow), [(flow.remote_topic(tp.topic), tp.partition) for tp in tps])
    now = time.time()
    found = []
    for tp in tps:
        position = committed.get((flow.remote_topic(tp.topic), tp.partition))
        start = max(position if position is not None else marks[tp].low, marks[tp].low)
        lag = max(0, marks[tp].high - start)
        stamp = source.timestamp_at(tp.topic, tp.partition, start,
                                    reader_group(flow, "status")) if lag else None
        found.append(PartitionStatus(
            tp.topic, tp.partition, marks[tp].high, position, lag,
            round(max(0.0, now - stamp / 1000), 3) if stamp else 0.0,
            flow.remote_topic(tp.topic), kept.get(tp.topic)))
    return found


def _retention(flow: Flow, source: LagSource, topics: set[str]) -> dict[str, float | None]:
    """Each topic's retention by time; none when the configs cannot be read (the lag itself
    is still reported; the line says why the retention is not)."""
    from ferry.core.sync.configs import time_retention_seconds

    try:
        configs = source.topic_configs(topics)
    except FerryError as exc:
        log.warning("flow %s: the source topics' retention is unknown: %s", flow.name, exc,
                    extra={"flow": flow.name})
        return {}
    return {topic: time_retention_seconds(config) for topic, config in configs.items()}


def record_lag(flow: Flow, run_id: str, *, source: LagSource | None = None,
               target: ReadsGroupOffsets | None = None, state: StateStore | None = None
               ) -> int:
    """Append the flow's per-partition lag, as it is now, to the Delta `lag` table (one row
    per source partition, tagged with `run_id`): the history behind the Ferry page's lag
    chart. Called once per flow run, after the run recorded its ranges. Returns the number
    of rows written (0 when the flow mirrors no partition yet)."""
    from ferry.core.tables import lag_row

    now = datetime.now(UTC)
    found = [lag_row(flow.name, run_id, p.topic, p.partition, p.source_end, p.position,
                     p.lag_records, p.lag_seconds, now)
             for p in partition_lag(flow, source=source, target=target, retention=False)]
    (state or DeltaStore.of(flow)).append("lag", found)
    return len(found)
