"""`ferry status`: per flow and partition, how far the mirror is behind, and how the flow's
last run, heartbeats and checkpoints look."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ferry.config import Flow, MirrorConfig

if TYPE_CHECKING:
    from ferry.heartbeating import Topology


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


@dataclass
class FlowStatus:
    flow: str
    source: str = ""
    target: str = ""
    partitions: list[PartitionStatus] = field(default_factory=list)
    last_run: str | None = None
    last_run_outcome: str | None = None
    last_run_finished_at: str | None = None
    heartbeat_latency_s: float | None = None
    heartbeat_age_s: float | None = None
    checkpoint_age_s: float | None = None

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"lag_records": self.lag_records}

    def text(self) -> str:
        def secs(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}s"

        lines = [f"flow {self.flow}: lag {self.lag_records:,} records; last run "
                 f"{self.last_run or '-'} {self.last_run_outcome or ''}; heartbeat latency "
                 f"{secs(self.heartbeat_latency_s)} (age {secs(self.heartbeat_age_s)}); "
                 f"checkpoints age {secs(self.checkpoint_age_s)}"]
        lines += [f"  {p.topic}-{p.partition}: end {p.source_end:,}, mirrored to "
                  f"{'-' if p.position is None else f'{p.position:,}'}, lag "
                  f"{p.lag_records:,} records / {p.lag_seconds:.0f}s" for p in self.partitions]
        return "\n".join(lines)


def partition_lag(flow: Flow) -> list[PartitionStatus]:
    """Per mirrored source partition: the source end (read_committed), the flow's position,
    and the lag in records and seconds. Reads the clusters only (no Delta)."""
    from ferry.internal import positions_group, reader_group
    from ferry.kafka.admin import Admin
    from ferry.kafka.records import timestamp_at
    from ferry.planner import TopicPartition
    from ferry.sync.topics import mirrored_topics

    source, target = Admin(flow.source_admin), Admin(flow.target_admin)
    topics = mirrored_topics(flow, {t.name: t.partitions for t in source.topics().values()})
    tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    marks = source.watermarks(tps)
    committed = target.group_offsets(
        positions_group(flow), [(flow.remote_topic(tp.topic), tp.partition) for tp in tps])
    now = time.time()
    found = []
    for tp in tps:
        position = committed.get((flow.remote_topic(tp.topic), tp.partition))
        start = max(position if position is not None else marks[tp].low, marks[tp].low)
        lag = max(0, marks[tp].high - start)
        stamp = timestamp_at(flow.source_admin, tp.topic, tp.partition, start,
                             reader_group(flow, "status")) if lag else None
        found.append(PartitionStatus(
            tp.topic, tp.partition, marks[tp].high, position, lag,
            round(max(0.0, now - stamp / 1000), 3) if stamp else 0.0,
            flow.remote_topic(tp.topic)))
    return found


def flow_status(config: MirrorConfig, flow: Flow, seen: Topology | None = None) -> FlowStatus:
    """`seen`: the target's topology, when the caller has read it already."""
    from ferry.heartbeating import topology
    from ferry.heartbeats import sources_of
    from ferry.state.digest import newest, recent_runs
    from ferry.state.tables import StatePaths, final_attempts

    found = FlowStatus(flow.name, flow.source, flow.target, partition_lag(flow))
    paths = StatePaths(flow.ferry.state_dir)
    runs = recent_runs(paths.runs, flow.name, newest=1)  # the latest run, not every row
    if runs:
        latest = max(runs, key=lambda r: r["finished_at"])
        mine = final_attempts([r for r in runs if r["run_id"] == latest["run_id"]])
        found.last_run = latest["run_id"]
        found.last_run_finished_at = latest["finished_at"].isoformat(timespec="seconds")
        found.last_run_outcome = ("failed" if any(r["outcome"] == "failed" for r in mine)
                                  else "copied")
    translated = newest(paths.checkpoints, flow.name, "translated_at")
    if translated is not None:
        found.checkpoint_age_s = round((datetime.now(UTC) - translated).total_seconds(), 3)
    seen = seen or topology(config, flow.target)
    beats = [h for h in seen.heartbeats
             if sources_of(flow.policy, h.topic)[:1] == [flow.source]]
    if beats:
        newest_beat = max(beats, key=lambda h: h.timestamp_ms)
        found.heartbeat_latency_s = newest_beat.latency_s
        found.heartbeat_age_s = newest_beat.age_s
    return found


def record_lag(flow: Flow, run_id: str) -> int:
    """Append the flow's per-partition lag, as it is now, to the Delta `lag` table (one row
    per source partition, tagged with `run_id`): the history behind the Ferry page's lag
    chart. Called once per flow run, after the run recorded its ranges. Returns the number
    of rows written (0 when the flow mirrors no partition yet)."""
    from ferry.state.tables import LAG_DDL, StatePaths, lag_row
    from ferry.state.writer import append

    now = datetime.now(UTC)
    found = [lag_row(flow.name, run_id, p.topic, p.partition, p.source_end, p.position,
                     p.lag_records, p.lag_seconds, now) for p in partition_lag(flow)]
    append(StatePaths(flow.ferry.state_dir).lag, LAG_DDL, found)
    return len(found)


def status(config: MirrorConfig) -> list[FlowStatus]:
    from ferry.heartbeating import topology

    targets = {f.target for f in config.enabled_flows}  # each target's heartbeats read once
    seen = {target: topology(config, target) for target in sorted(targets)}
    return [flow_status(config, flow, seen[flow.target]) for flow in config.enabled_flows]
