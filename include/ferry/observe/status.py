"""`ferry status`: per flow and partition, how far the mirror is behind, and how the flow's
last run, heartbeats and checkpoints look."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ferry.config import Config, Flow
from ferry.steps.lag import PartitionStatus, partition_lag

if TYPE_CHECKING:
    from ferry.steps.heartbeats import Topology

__all__ = ["FlowStatus", "PartitionStatus", "flow_status", "partition_lag", "status"]


@dataclass
class FlowStatus:
    flow: str
    source: str = ""
    target: str = ""
    partitions: list[PartitionStatus] = field(default_factory=list)
    last_run: str | None = None
    last_run_outcome: str | None = None
    """The last run's `ferry.core.tables.run_outcome` (`copied`, `handed-over` to a newer
    run of the flow, which is no failure, or `failed`); None before any run."""
    last_run_finished_at: str | None = None
    heartbeat_latency_s: float | None = None
    heartbeat_age_s: float | None = None
    checkpoint_age_s: float | None = None
    state_behind_entries: int | None = None
    """Offset-map entries committed on the target that Delta does not hold yet (a warm
    continuous loop appends them in batches, `ferry.state.record.interval.seconds`); None
    when the target could not be read."""
    state_behind_seconds: float | None = None
    """Seconds since the oldest of those entries was committed (0 when Delta holds every
    one; None when the target could not be read): `ferry.steps.recording_lag`."""

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"lag_records": self.lag_records}

    def text(self) -> str:
        def secs(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}s"

        lines = [f"flow {self.flow}: lag {self.lag_records:,} records; last run "
                 f"{self.last_run or '-'} {_said(self.last_run_outcome)}; heartbeat latency "
                 f"{secs(self.heartbeat_latency_s)} (age {secs(self.heartbeat_age_s)}); "
                 f"checkpoints age {secs(self.checkpoint_age_s)}"
                 + ("" if not self.state_behind_entries else
                    f"; Delta behind the target by {self.state_behind_entries:,} "
                    f"offset-map entries, the oldest {secs(self.state_behind_seconds)} old")]
        lines += [f"  {p.topic}-{p.partition}: end {p.source_end:,}, mirrored to "
                  f"{'-' if p.position is None else f'{p.position:,}'}, lag "
                  f"{p.lag_records:,} records / {p.lag_seconds:.0f}s" for p in self.partitions]
        return "\n".join(lines)


def _said(outcome: str | None) -> str:
    """An outcome as the text says it (`handed-over`: handed over)."""
    return (outcome or "").replace("-", " ")


def flow_status(config: Config, flow: Flow, seen: Topology | None = None) -> FlowStatus:
    """`seen`: the target's topology, when the caller has read it already."""
    from ferry.core.heartbeats import sources_of
    from ferry.core.tables import StatePaths, final_attempts, run_outcome
    from ferry.state.digest import newest, recent_runs
    from ferry.steps.heartbeats import topology

    found = FlowStatus(flow.name, flow.source, flow.target, partition_lag(flow))
    paths = StatePaths(flow.ferry.state_dir)
    runs = recent_runs(paths.runs, flow.name, newest=1)  # the latest run, not every row
    if runs:
        latest = max(runs, key=lambda r: r["finished_at"])
        mine = final_attempts([r for r in runs if r["run_id"] == latest["run_id"]])
        found.last_run = latest["run_id"]
        found.last_run_finished_at = latest["finished_at"].isoformat(timespec="seconds")
        found.last_run_outcome = run_outcome(r["outcome"] for r in mine).value
    translated = newest(paths.checkpoints, flow.name, "translated_at")
    if translated is not None:
        found.checkpoint_age_s = round((datetime.now(UTC) - translated).total_seconds(), 3)
    found.state_behind_entries, found.state_behind_seconds = _state_behind(flow)
    seen = seen or topology(config, flow.target)
    beats = [h for h in seen.heartbeats
             if sources_of(flow.policy, h.topic)[:1] == [flow.named_source]]
    if beats:
        newest_beat = max(beats, key=lambda h: h.timestamp_ms)
        found.heartbeat_latency_s = newest_beat.latency_s
        found.heartbeat_age_s = newest_beat.age_s
    return found


def _state_behind(flow: Flow) -> tuple[int | None, float | None]:
    """(entries, seconds) Delta is behind the target (`recording_lag`); (None, None) when
    the target could not be read."""
    import time

    from ferry.errors import FerryError
    from ferry.steps.recording_lag import recording_lag

    try:
        lag = recording_lag(flow)
    except FerryError:  # the partitions' lag already says the target cannot be read
        return None, None
    return lag.entries, round(lag.age_s(int(time.time() * 1000)), 3)


def status(config: Config) -> list[FlowStatus]:
    from ferry.steps.heartbeats import topology

    targets = {f.target for f in config.enabled_flows}  # each target's heartbeats read once
    seen = {target: topology(config, target) for target in sorted(targets)}
    return [flow_status(config, flow, seen[flow.target]) for flow in config.enabled_flows]
