"""Table names, locations and schemas (pure: no Spark, no delta-rs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ferry.offsetmap import MapEntry
from ferry.planner import Gap

SCHEMA_VERSION = 1

OFFSET_MAP_DDL = (
    "flow string, source_topic string, source_partition int, target_topic string, "
    "target_partition int, covered_start bigint, covered_end bigint, records bigint, "
    "segments array<struct<source_start:bigint,target_start:bigint,count:bigint>>, "
    "run_id string, lane int, committed_at timestamp, map_topic string, map_offset bigint, "
    "schema_version int")
RUNS_DDL = (
    "flow string, run_id string, lane int, topic string, partition int, range_start bigint, "
    "range_end bigint, records bigint, bytes bigint, seconds double, max_record_age_ms bigint, "
    "outcome string, error string, delivery string, duplicates bigint, "
    "finished_at timestamp, schema_version int")
GAPS_DDL = (
    "flow string, run_id string, topic string, partition int, gap_start bigint, "
    "gap_end bigint, records bigint, action string, detected_at timestamp, schema_version int")


@dataclass(frozen=True)
class StatePaths:
    root: str

    def table(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    @property
    def offset_map(self) -> str:
        return self.table("offset_map")

    @property
    def runs(self) -> str:
        return self.table("runs")

    @property
    def gaps(self) -> str:
        return self.table("gaps")


def offset_map_row(entry: MapEntry, map_topic: str, map_offset: int) -> dict[str, Any]:
    return {
        "flow": entry.flow, "source_topic": entry.source_topic,
        "source_partition": entry.source_partition, "target_topic": entry.target_topic,
        "target_partition": entry.target_partition, "covered_start": entry.covered_start,
        "covered_end": entry.covered_end, "records": entry.records,
        "segments": [{"source_start": s.source_start, "target_start": s.target_start,
                      "count": s.count} for s in entry.segments],
        "run_id": entry.run_id, "lane": entry.lane,
        "committed_at": datetime.fromtimestamp(entry.committed_at_ms / 1000, UTC),
        "map_topic": map_topic, "map_offset": map_offset, "schema_version": SCHEMA_VERSION,
    }


def gap_row(flow: str, run_id: str, gap: Gap, action: str) -> dict[str, Any]:
    return {
        "flow": flow, "run_id": run_id, "topic": gap.topic, "partition": gap.partition,
        "gap_start": gap.start, "gap_end": gap.end, "records": gap.count, "action": action,
        "detected_at": datetime.now(UTC), "schema_version": SCHEMA_VERSION,
    }
