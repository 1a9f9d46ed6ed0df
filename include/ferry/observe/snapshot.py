"""What the Ferry page and the metrics endpoint show of one flow, and the pure summaries
drawn from the state tables' rows (runs, checkpoints, gaps, verify, lag).

A `FlowSnapshot` is gathered by `ferry.observe.collect` (the adapter that reads Kafka and
Delta); everything here works on plain rows, so it is tested with tables. Timestamps in
rows are `datetime`s (Delta `timestamp` columns); a naive one is taken as UTC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ferry.core.tables import RangeOutcome, copied_by_run, run_outcome
from ferry.observe.status import FlowStatus

Row = dict[str, Any]
Key = tuple[str, int]
"""(source topic, partition)."""


@dataclass
class FlowSnapshot:
    """One enabled flow as seen now. `status` is None when the clusters could not be read
    (`error` says why); the state tables' rows are there whenever the state dir is."""

    flow: str
    source: str
    target: str
    status: FlowStatus | None = None
    error: str | None = None
    remote_topics: dict[str, str] = field(default_factory=dict)
    """Source topic -> remote topic, for every topic in `status` or the rows."""
    runs: list[Row] = field(default_factory=list)
    """`runs` rows of the latest runs (`ferry.state.digest.recent_runs`)."""
    copied: dict[Key, tuple[int, int]] | None = None
    """(records, bytes) ever copied per source partition; None: add up `runs`."""
    checkpoints: list[Row] = field(default_factory=list)
    """The newest translation of each group partition (older rows may be left out)."""
    gaps: list[Row] = field(default_factory=list)
    verify: list[Row] = field(default_factory=list)
    lag: list[Row] = field(default_factory=list)
    """Rows of the `lag` table in the chart's window."""
    down: tuple[str, ...] = ()
    """Its clusters that did not answer the collection's probe (`ferry.kafka.reach`)."""

    def remote(self, topic: str) -> str:
        return self.remote_topics.get(topic, topic)


def epoch(value: datetime) -> float:
    """Seconds since the epoch; a naive datetime is UTC."""
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True)
class PartitionTotals:
    """What the `runs` table says of one source partition.

    `records`/`bytes` add up every copied range (bytes are key + value). The ages describe
    the partition's latest run: `record_age_ms` is the age of the oldest record of its
    latest range when it was read, `latency_ms` that age plus the time the range took to
    commit (so the oldest record's time from its timestamp to the target); `*_max` are the
    largest over the ranges of that run."""

    records: int
    bytes: int
    record_age_ms: int | None
    record_age_ms_max: int | None
    latency_ms: int | None
    latency_ms_max: int | None
    record_rate: float | None = None
    """Records per second while the partition's latest run copied it (None: no time)."""
    byte_rate: float | None = None


def copied_totals(runs: list[Row]) -> dict[Key, tuple[int, int]]:
    """(records, bytes) per source partition over `runs` rows; failed and handed-over
    ranges count nothing (their records were aborted, or are copied again by the next
    run)."""
    found: dict[Key, tuple[int, int]] = {}
    for row in runs:
        if copied_by_run(row["outcome"]):
            key = (row["topic"], row["partition"])
            records, size = found.get(key, (0, 0))
            found[key] = (records + int(row["records"] or 0), size + int(row["bytes"] or 0))
    return found


def partition_totals(runs: list[Row], copied: dict[Key, tuple[int, int]] | None = None
                     ) -> dict[Key, PartitionTotals]:
    """Per source partition: the counts of `copied` (default: added up from `runs`), the
    ages from the latest copied range in `runs` (None when `runs` has none)."""
    totals = copied_totals(runs) if copied is None else copied
    by_key: dict[Key, list[Row]] = {key: [] for key in totals}
    for row in runs:
        by_key.setdefault((row["topic"], row["partition"]), []).append(row)
    found = {}
    for key, rows in sorted(by_key.items()):
        records, size = totals.get(key, (0, 0))
        copied_rows = [r for r in rows if copied_by_run(r["outcome"])]
        if not copied_rows:
            found[key] = PartitionTotals(records, size, None, None, None, None)
            continue
        latest = max(copied_rows, key=lambda r: (epoch(r["finished_at"]), r["range_end"]))
        run = [r for r in copied_rows if r["run_id"] == latest["run_id"]]

        def latency(row: Row) -> int:
            return int(row["max_record_age_ms"] or 0) + round(1000 * (row["seconds"] or 0))

        seconds = sum(float(r["seconds"] or 0) for r in run)
        found[key] = PartitionTotals(
            records=records, bytes=size, record_age_ms=int(latest["max_record_age_ms"] or 0),
            record_age_ms_max=max(int(r["max_record_age_ms"] or 0) for r in run),
            latency_ms=latency(latest), latency_ms_max=max(latency(r) for r in run),
            record_rate=round(sum(int(r["records"] or 0) for r in run) / seconds, 3)
            if seconds > 0 else None,
            byte_rate=round(sum(int(r["bytes"] or 0) for r in run) / seconds, 3)
            if seconds > 0 else None)
    return found


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    finished_at: datetime
    ranges: int
    records: int
    bytes: int
    seconds: float
    """The longest range's copy time."""
    outcome: RangeOutcome
    """FAILED when any range failed, else HANDED_OVER when any was left to a newer run of
    the flow (no failure), else COPIED (`ferry.core.tables.run_outcome`)."""
    duplicates: int
    error: str | None


def run_summaries(runs: list[Row], limit: int = 10) -> list[RunSummary]:
    """The latest `limit` runs, newest first, one line per run id."""
    by_run: dict[str, list[Row]] = {}
    for row in runs:
        by_run.setdefault(row["run_id"], []).append(row)
    found = []
    for run_id, rows in by_run.items():
        failed = [r for r in rows if r["outcome"] == RangeOutcome.FAILED]
        found.append(RunSummary(
            run_id=run_id, finished_at=max(rows, key=lambda r: epoch(r["finished_at"]))[
                "finished_at"],
            ranges=len(rows), records=sum(int(r["records"] or 0) for r in rows),
            bytes=sum(int(r["bytes"] or 0) for r in rows),
            seconds=max(float(r["seconds"] or 0) for r in rows),
            outcome=run_outcome(r["outcome"] for r in rows),
            duplicates=sum(int(r.get("duplicates") or 0) for r in rows),
            error=next((r["error"] for r in failed if r["error"]), None)))
    found.sort(key=lambda s: (epoch(s.finished_at), s.run_id), reverse=True)
    return found[:limit]


@dataclass(frozen=True)
class CheckpointSeen:
    group: str
    topic: str
    """The source topic (labels use its remote name)."""
    partition: int
    translated_at: datetime


def latest_checkpoints(rows: list[Row]) -> list[CheckpointSeen]:
    """The newest translation of each group partition."""
    newest: dict[tuple[str, str, int], datetime] = {}
    for row in rows:
        key = (row["group_id"], row["source_topic"], row["source_partition"])
        if key not in newest or epoch(row["translated_at"]) > epoch(newest[key]):
            newest[key] = row["translated_at"]
    return [CheckpointSeen(g, t, p, at) for (g, t, p), at in sorted(newest.items())]


def gap_records(rows: list[Row]) -> dict[Key, int]:
    """Records lost to retention before they were mirrored, per source partition."""
    found: dict[Key, int] = {}
    for row in rows:
        key = (row["topic"], row["partition"])
        found[key] = found.get(key, 0) + int(row["records"] or 0)
    return dict(sorted(found.items()))


def latest_verify(rows: list[Row]) -> dict[Key, Row]:
    """The newest `verify` row of each source partition."""
    found: dict[Key, Row] = {}
    for row in rows:
        key = (row["topic"], row["partition"])
        if key not in found or epoch(row["verified_at"]) > epoch(found[key]["verified_at"]):
            found[key] = row
    return dict(sorted(found.items()))


def mismatched(row: Row) -> int:
    """Records a verify found altered, missing or extra on the target."""
    return sum(int(row.get(column) or 0) for column in ("altered", "missing", "extra"))


@dataclass(frozen=True)
class LagPoint:
    at: float
    """Seconds since the epoch."""
    records: int
    """Lag in records, summed over the flow's partitions."""
    seconds: float
    """The largest lag in seconds of any partition."""


def lag_series(rows: list[Row], max_points: int = 240) -> list[LagPoint]:
    """The flow's lag over time from `lag` rows (one point per recorded run), oldest first;
    at most `max_points`, the newest kept."""
    by_run: dict[tuple[str, float], list[Row]] = {}
    for row in rows:
        by_run.setdefault((row["run_id"], epoch(row["recorded_at"])), []).append(row)
    points = [LagPoint(at, sum(int(r["lag_records"] or 0) for r in found),
                       max(float(r["lag_seconds"] or 0) for r in found))
              for (_, at), found in by_run.items()]
    points.sort(key=lambda p: p.at)
    return points[-max_points:]


def _iso(value: datetime) -> str:
    return datetime.fromtimestamp(epoch(value), UTC).isoformat(timespec="seconds")


def to_json(snap: FlowSnapshot, now: float) -> dict[str, Any]:
    """What the page shows of one flow, as JSON (the page's API)."""
    return {
        "flow": snap.flow, "source": snap.source, "target": snap.target, "error": snap.error,
        "status": snap.status.to_json() if snap.status else None,
        "runs": [{"run_id": r.run_id, "finished_at": _iso(r.finished_at), "ranges": r.ranges,
                  "records": r.records, "bytes": r.bytes, "seconds": r.seconds,
                  "outcome": r.outcome, "duplicates": r.duplicates, "error": r.error}
                 for r in run_summaries(snap.runs)],
        "checkpoints": [{"group": c.group, "topic": c.topic,
                         "remote_topic": snap.remote(c.topic), "partition": c.partition,
                         "translated_at": _iso(c.translated_at),
                         "age_s": round(max(0.0, now - epoch(c.translated_at)), 3)}
                        for c in latest_checkpoints(snap.checkpoints)],
        "gaps": [{"topic": r["topic"], "partition": r["partition"], "start": r["gap_start"],
                  "end": r["gap_end"], "records": r["records"], "action": r["action"],
                  "run_id": r["run_id"], "detected_at": _iso(r["detected_at"])}
                 for r in sorted(snap.gaps, key=lambda r: epoch(r["detected_at"]))],
        "verify": [{"topic": t, "partition": p, "source_start": r["source_start"],
                    "source_end": r["source_end"], "checked": r["checked"],
                    "mismatched": mismatched(r), "outcome": r["outcome"],
                    "mismatches": r.get("mismatches"), "verified_at": _iso(r["verified_at"])}
                   for (t, p), r in latest_verify(snap.verify).items()],
        "lag_history": [{"at": datetime.fromtimestamp(p.at, UTC).isoformat(timespec="seconds"),
                         "records": p.records, "seconds": p.seconds}
                        for p in lag_series(snap.lag)],
    }
