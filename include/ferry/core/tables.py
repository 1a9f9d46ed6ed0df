"""The state tables: names, locations, schemas, and the rows of each, built next to its
schema (pure: no Spark, no delta-rs). A row builder returns exactly its table's columns."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple, TypedDict, TypeVar

from ferry.core.offsetmap import ADOPTED_LANE, RESET_LANE, MapEntry, Segment
from ferry.core.planner import Gap

SCHEMA_VERSION = 1

OFFSET_MAP_DDL = (
    "flow string, source_topic string, source_partition int, target_topic string, "
    "target_partition int, covered_start bigint, covered_end bigint, records bigint, "
    "segments array<struct<source_start:bigint,target_start:bigint,count:bigint>>, "
    "run_id string, lane int, committed_at timestamp, map_topic string, map_offset bigint, "
    "bytes bigint, schema_version int, target_end bigint, source_topic_id string, "
    "target_topic_id string, map_topic_id string, map_offset_end bigint")
RUNS_DDL = (
    "flow string, run_id string, lane int, topic string, partition int, range_start bigint, "
    "range_end bigint, records bigint, bytes bigint, seconds double, max_record_age_ms bigint, "
    "outcome string, error string, delivery string, duplicates bigint, "
    "finished_at timestamp, schema_version int")


class RunRow(TypedDict):
    """A `runs` row (`RUNS_DDL`): one range of one run, as its writer reported it. Built by
    `run_row` (a writer's result) or `runs_from_entries` (rebuilt from the offset-map topic);
    Delta gives them back as these keys, with `outcome` a plain string."""

    flow: str
    run_id: str
    lane: int
    topic: str
    partition: int
    range_start: int
    range_end: int
    """The source range `[range_start, range_end)` the row covers."""
    records: int
    bytes: int
    seconds: float
    max_record_age_ms: int
    outcome: str
    """A `RangeOutcome` value."""
    error: str
    delivery: str
    duplicates: int
    finished_at: datetime
    schema_version: int


GAPS_DDL = (
    "flow string, run_id string, topic string, partition int, gap_start bigint, "
    "gap_end bigint, records bigint, action string, detected_at timestamp, schema_version int")

INCIDENTS_DDL = (
    "flow string, run_id string, kind string, topic string, partition int, detail string, "
    "detected_at timestamp, schema_version int")
"""One row per incident (G9, G10): something Kafka or an operator did that the copy had to
meet, named and never silent. `kind`: `source-recreated`, `offset-map-recreated`,
`position-restored`. Written with delta-rs; each incident once, however many runs meet it."""

SYNCS_DDL = (
    "flow string, run_id string, step string, synced_at timestamp, changes bigint, "
    "detail string, schema_version int")
"""One row per applied sync step (`topics`, `configs`, `acls`): written with delta-rs by the
sync step (no JVM), read to honour MM2's sync intervals; `detail` lists the changes."""

CHECKPOINTS_DDL = (
    "flow string, run_id string, group_id string, source_topic string, "
    "source_partition int, source_offset bigint, target_topic string, target_offset bigint, "
    "status string, emitted boolean, group_synced boolean, translated_at timestamp, "
    "schema_version int")
"""One row per group partition translated by a checkpoint step (delta-rs)."""

VERIFY_DDL = (
    "flow string, run_id string, topic string, partition int, source_start bigint, "
    "source_end bigint, checked bigint, altered bigint, missing bigint, skipped bigint, "
    "extra bigint, mismatches string, outcome string, verified_at timestamp, "
    "schema_version int")
"""One row per partition a `ferry verify` checked (delta-rs)."""

LAG_DDL = (
    "flow string, run_id string, topic string, partition int, source_end bigint, "
    "position bigint, lag_records bigint, lag_seconds double, recorded_at timestamp, "
    "schema_version int")
"""One row per source partition and flow run: the lag right after the run (delta-rs,
`ferry.steps.lag.record_lag`); the history behind the Ferry page's lag chart. `position` is
null while nothing of the partition has been copied."""


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

    @property
    def incidents(self) -> str:
        return self.table("incidents")

    @property
    def syncs(self) -> str:
        return self.table("syncs")

    @property
    def checkpoints(self) -> str:
        return self.table("checkpoints")

    @property
    def verify(self) -> str:
        return self.table("verify")

    @property
    def lag(self) -> str:
        return self.table("lag")


SCHEMAS = {"offset_map": OFFSET_MAP_DDL, "runs": RUNS_DDL, "gaps": GAPS_DDL,
           "incidents": INCIDENTS_DDL, "syncs": SYNCS_DDL, "checkpoints": CHECKPOINTS_DDL,
           "verify": VERIFY_DDL, "lag": LAG_DDL}
"""Each table of a flow's state, by its name under the state dir (`StatePaths.table`), and
its schema: the one source both writers read theirs from."""

JOB_TABLES = frozenset({"offset_map", "runs"})
"""The tables the copy's recording writes: through Spark in a one-off job, with delta-rs in
a continuous loop's recorder; both append by each row's key (`ROW_KEYS`), so a retry, a
second recorder or a rebuild records a row once. The steps append only to the others."""

ROW_KEYS: dict[str, tuple[str, ...]] = {
    "offset_map": ("flow", "map_topic_id", "map_offset"),
    "runs": ("flow", "run_id", "topic", "partition", "range_start", "outcome"),
}
"""The columns that name a row of the tables recorded from the offset-map topic, which
both writers (a job's Spark appends, a loop's delta-rs batches) append only where the key
is not in the table yet, so a batch retried after its commit, two recorders reading the
same entries, or a rebuild beside a run's own rows record each once. An offset-map row is
its entry's place in the topic (its incarnation's ID and offset). A runs row is one
outcome of one range of a run: an Airflow retry's other outcome of the range (copied
after failed, skipped after copied) is a row of its own, as `final_attempts` reads them; a
range's own row and the row rebuilt from its entries (their ranges start where the range
does) are one."""


RANGE_ENDS: dict[str, str] = {"map_offset": "map_offset_end"}
"""Key columns a row may hold a range of: an offset-map row maintenance folded
(`ferry.core.coalescing`) stands for its source partition's entries within
`map_offset..map_offset_end`, so the key of each of them counts as present (`held_keys`)."""
RANGE_SCOPE: dict[str, tuple[str, ...]] = {"map_offset": ("source_topic", "source_partition")}
"""What a range key holds its range of: a folded row, only its own source partition's
entries (the other partitions' entries between them in the one-partition offset-map topic
are rows of their own)."""


def held_keys(columns: Sequence[str], stored: Iterable[Mapping[str, Any]],
              candidates: Iterable[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
    """The keys of `candidates` that `stored` rows hold: the same key, or, for a key whose
    last column is a range (`RANGE_ENDS`), a stored row of the same other columns and
    scope (`RANGE_SCOPE`) whose range `column..end` includes the candidate's value."""
    stored = list(stored)
    keys = {row_key(columns, r) for r in stored}
    last = columns[-1]
    end = RANGE_ENDS.get(last)
    scope = (*columns[:-1], *RANGE_SCOPE.get(last, ()))
    ranges: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    if end is not None:
        for r in stored:
            if r.get(end) is not None:
                ranges.setdefault(row_key(scope, r), []).append((r[last], r[end]))
    held = set()
    for row in candidates:
        key = row_key(columns, row)
        if key in keys or any(a <= row[last] <= b for a, b in ranges.get(row_key(scope, row), ())):
            held.add(key)
    return held


def keyed_table(ddl: str) -> tuple[str, tuple[str, ...]] | None:
    """The table whose schema is `ddl` and its key columns (`ROW_KEYS`); None for a table
    appended without keys (or a schema of an older release)."""
    for table, columns in ROW_KEYS.items():
        if SCHEMAS[table] == ddl:
            return table, columns
    return None


def row_key(columns: Sequence[str], row: Mapping[str, Any]) -> tuple[Any, ...]:
    """`row`'s key: its values of `columns` (a missing or empty topic ID is "")."""
    return tuple((row.get(c) or "") if c == "map_topic_id" else row.get(c) for c in columns)


def absent(rows: Iterable[Mapping[str, Any]], columns: Sequence[str],
           present: Collection[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The `rows` whose key is not in `present`, each key once (the first row of it)."""
    seen = set(present)
    fresh = []
    for row in rows:
        key = row_key(columns, row)
        if key not in seen:
            seen.add(key)
            fresh.append(dict(row))
    return fresh


def offset_map_row(entry: MapEntry, map_topic: str, map_offset: int,
                   map_topic_id: str = "", map_offset_end: int | None = None
                   ) -> dict[str, Any]:
    """The row of `entry`, read at `map_offset` in the offset-map topic; a row that folds
    the entries up to `map_offset_end` (`ferry.core.coalescing`) names that offset too."""
    return {
        "flow": entry.flow, "source_topic": entry.source_topic,
        "source_partition": entry.source_partition, "target_topic": entry.target_topic,
        "target_partition": entry.target_partition, "covered_start": entry.covered_start,
        "covered_end": entry.covered_end, "records": entry.records,
        "segments": [{"source_start": s.source_start, "target_start": s.target_start,
                      "count": s.count} for s in entry.segments],
        "run_id": entry.run_id, "lane": entry.lane,
        "committed_at": datetime.fromtimestamp(entry.committed_at_ms / 1000, UTC),
        "map_topic": map_topic, "map_offset": map_offset, "bytes": entry.bytes,
        "schema_version": SCHEMA_VERSION, "target_end": entry.target_end,
        "source_topic_id": entry.source_id, "target_topic_id": entry.target_id,
        "map_topic_id": map_topic_id, "map_offset_end": map_offset_end,
    }


class MapRow(NamedTuple):
    """An offset-map entry as the Delta table holds it."""

    offset: int
    """Its offset in the offset-map topic."""
    entry: MapEntry
    map_topic_id: str
    """The ID of the offset-map topic it was read from ("" when not recorded)."""
    last: int = -1
    """The last offset-map topic offset the row stands for: past `offset` when it folds
    several entries (`ferry.core.coalescing`); -1 when it is `offset`."""


def map_row(row: Mapping[str, Any]) -> MapRow:
    """An offset-map row as `offset_map_row` wrote it (older rows may lack the ID columns)."""
    return MapRow(row["map_offset"], MapEntry(
        flow=row["flow"], run_id=row["run_id"], lane=row["lane"],
        source_topic=row["source_topic"], source_partition=row["source_partition"],
        target_topic=row["target_topic"], target_partition=row["target_partition"],
        covered_start=row["covered_start"], covered_end=row["covered_end"],
        segments=tuple(Segment(s["source_start"], s["target_start"], s["count"])
                       for s in row["segments"]),
        committed_at_ms=int(row["committed_at"].timestamp() * 1000),
        bytes=row.get("bytes") or 0, target_end=row.get("target_end"),
        source_id=row.get("source_topic_id") or "",
        target_id=row.get("target_topic_id") or ""),
        row.get("map_topic_id") or "", _last(row.get("map_offset_end")))


def _last(end: Any) -> int:
    return int(end) if end is not None else -1


R = TypeVar("R", bound=Mapping[str, Any])
"""A `runs` row: a `RunRow` a writer made, or a row as Delta gives it back."""

REBUILT = ("rebuilt from the offset-map topic: the job that copied this ended before it "
           "recorded its runs")


def final_attempts(rows: Sequence[R]) -> list[R]:
    """The `runs` rows of the last attempt at each range: an Airflow retry of a run's copy
    writes the same ranges again, and a range that failed first and was copied on retry is
    copied, not failed. A retry that found a range already committed (`skipped`) does not
    supersede the attempt that copied it: its records were copied by this run. The rows
    may come in any order (a Delta table gives them file by file, not in time order)."""
    latest: dict[tuple[Any, ...], R] = {}
    for row in sorted(rows, key=lambda r: r["finished_at"]):
        key = (row["run_id"], row["topic"], row["partition"], row["range_start"])
        before = latest.get(key)
        if before is None or not (row["outcome"] == RangeOutcome.SKIPPED
                                  and before["outcome"] == RangeOutcome.COPIED):
            latest[key] = row
    return list(latest.values())


def copied_topics(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per source topic with records copied by these (final) range rows: the records and,
    per partition, the source range `[start, end)` they span. Ranges that failed, or held
    only transaction markers and aborted records, do not count."""
    topics: dict[str, dict[str, Any]] = {}
    for row in runs:
        if row["outcome"] == RangeOutcome.COPIED and row["records"]:
            merge_copied(topics, {row["topic"]: {
                "records": row["records"],
                "partitions": {str(row["partition"]): [row["range_start"], row["range_end"]]}}})
    return dict(sorted(topics.items()))


def merge_copied(into: dict[str, dict[str, Any]],
                 more: Mapping[str, Mapping[str, Any]]) -> None:
    """Add `copied_topics` of a later run to `into` (several cycles of one task): records
    summed, each partition's range widened."""
    for topic, copied in more.items():
        mine = into.setdefault(topic, {"records": 0, "partitions": {}})
        mine["records"] += copied["records"]
        for partition, (start, end) in copied["partitions"].items():
            span = mine["partitions"].setdefault(partition, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)


Ranges = Mapping[tuple[str, str, int], Sequence[tuple[int, int]]]
"""(run id, topic, partition) -> the source ranges `[start, end)` its `runs` rows hold."""


def covered(entry: MapEntry, ranges: Ranges) -> bool:
    """Whether a `runs` row of the entry's run and partition holds the offsets it covers
    (overlapping them; an entry that covers no offset: at or within a row's range)."""
    start, end = entry.covered_start, entry.covered_end
    return any((low < end and start < high) if start < end else low <= start <= high
               for low, high in ranges.get((entry.run_id, entry.source_topic,
                                            entry.source_partition), ()))


def runs_from_entries(entries: list[MapEntry], recorded_runs: Collection[str],
                      delivery: str, recorded: Ranges | None = None
                      ) -> list[RunRow]:
    """`runs` rows for runs whose entries the target committed but whose rows are missing
    (the job died between the Kafka commit and the Delta write, or a continuous run left
    its last stretch to the next run): one row per run, lane and partition, from what the
    entries say (records, bytes, duplicates, covered offsets, commit times). No row for
    the entries of `recorded_runs`, nor for an entry a row of `recorded` covers (`covered`):
    a run with some ranges recorded (its rows, or rows rebuilt while it still copied) has
    only the others rebuilt.

    Entries that carry their lane's start and the range's age (this version's) give the
    times the lane reported, up to the commit's own milliseconds: `seconds` from the
    lane's start to the last commit, `max_record_age_ms` as read; such a row is the lane's
    own, with no note. Older entries give `seconds` between the first and the last commit,
    an age of 0, and the note REBUILT.
    Adopted history (ADOPTED_LANE) was another mirror's copy, and a reset (RESET_LANE)
    copied nothing: not runs of Ferry's, none."""
    groups: dict[tuple[str, int, str, int], list[MapEntry]] = {}
    for entry in entries:
        if entry.run_id not in recorded_runs and entry.lane not in (ADOPTED_LANE, RESET_LANE) \
                and not covered(entry, recorded or {}):
            key = (entry.run_id, entry.lane, entry.source_topic, entry.source_partition)
            groups.setdefault(key, []).append(entry)
    rows: list[RunRow] = []
    for (run_id, lane, topic, partition), found in sorted(groups.items()):
        times = [e.committed_at_ms for e in found]
        started = min(e.lane_started_ms for e in found)
        timed = started > 0
        rows.append({
            "flow": found[0].flow, "run_id": run_id, "lane": lane, "topic": topic,
            "partition": partition, "range_start": min(e.covered_start for e in found),
            "range_end": max(e.covered_end for e in found),
            "records": sum(e.records for e in found), "bytes": sum(e.bytes for e in found),
            "seconds": (max(times) - (started if timed else min(times))) / 1000,
            "max_record_age_ms": max(e.age_ms for e in found),
            "outcome": RangeOutcome.COPIED.value, "error": "" if timed else REBUILT,
            "delivery": delivery,
            "duplicates": sum(e.duplicates for e in found),
            "finished_at": datetime.fromtimestamp(max(times) / 1000, UTC),
            "schema_version": SCHEMA_VERSION,
        })
    return rows


def gap_row(flow: str, run_id: str, gap: Gap, action: str) -> dict[str, Any]:
    return {
        "flow": flow, "run_id": run_id, "topic": gap.topic, "partition": gap.partition,
        "gap_start": gap.start, "gap_end": gap.end, "records": gap.count, "action": action,
        "detected_at": datetime.now(UTC), "schema_version": SCHEMA_VERSION,
    }


def unrecorded(gaps: Sequence[Gap], recorded: Iterable[Mapping[str, Any]]) -> list[Gap]:
    """The `gaps` not among `recorded` (rows of the `gaps` table): under
    `ferry.on.gap=fail` every run finds the same gap again until the operator acts; it is
    one gap, recorded once (so the table and `ferry_gap_records_total` count records lost,
    not runs that noticed)."""
    known = {(r["topic"], r["partition"], r["gap_start"], r["gap_end"]) for r in recorded}
    return [g for g in gaps if (g.topic, g.partition, g.start, g.end) not in known]


def lag_row(flow: str, run_id: str, topic: str, partition: int, source_end: int,
            position: int | None, lag_records: int, lag_seconds: float,
            recorded_at: datetime) -> dict[str, Any]:
    return {
        "flow": flow, "run_id": run_id, "topic": topic, "partition": partition,
        "source_end": source_end, "position": position, "lag_records": lag_records,
        "lag_seconds": lag_seconds, "recorded_at": recorded_at,
        "schema_version": SCHEMA_VERSION,
    }


class RangeOutcome(StrEnum):
    """What became of a planned range: the `outcome` of its `runs` row (the enum's values
    are what the table holds, so rows read back compare equal to them).

    Of a whole run (`run_outcome`): FAILED when a range failed, else HANDED_OVER when a
    range was left to a newer run, else COPIED."""

    PENDING = "pending"
    """Not decided yet (a lane still at work); never recorded."""
    COPIED = "copied"
    SKIPPED = "skipped"
    """Already committed when the lane came to it (another run, an earlier attempt)."""
    FAILED = "failed"
    """Not copied past its last commit, for an error (the next run resumes there)."""
    HANDED_OVER = "handed-over"
    """Left to a newer run of the flow, which writes the same partitions
    (`ferry.core.takeover`): no failure, the newer run copies it. Like FAILED, nothing past
    the last commit was kept and the range counts no records of this run's."""

    @property
    def failed(self) -> bool:
        return self is RangeOutcome.FAILED


COPIED_BY_RUN = frozenset({RangeOutcome.COPIED, RangeOutcome.SKIPPED})
"""The outcomes of ranges their run finished: copied, or found committed already. A failed
or handed-over range was not (its records past the last commit are the next run's)."""


def copied_by_run(outcome: str) -> bool:
    """Whether a range of this outcome (a member, or a `runs` row's value) was finished by
    its run (`COPIED_BY_RUN`)."""
    return outcome in COPIED_BY_RUN


def run_outcome(outcomes: Iterable[str]) -> RangeOutcome:
    """A run's outcome from its final ranges' outcomes (members, or `runs` rows' values):
    FAILED when any range failed, else HANDED_OVER when any was left to a newer run, else
    COPIED (also for no range at all)."""
    found = set(outcomes)
    if RangeOutcome.FAILED in found:
        return RangeOutcome.FAILED
    if RangeOutcome.HANDED_OVER in found:
        return RangeOutcome.HANDED_OVER
    return RangeOutcome.COPIED


@dataclass
class RangeResult:
    """What happened to one planned range: a row of the `runs` table (`run_row`)."""

    topic: str
    partition: int
    start: int
    end: int
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    """From the start of its lane's copy until the range's outcome was known."""
    max_age_ms: int = 0
    outcome: RangeOutcome = RangeOutcome.PENDING
    error: str = ""
    duplicates: int = 0  # at_least_once: records a crashed run wrote that this one re-copied


def run_row(flow: str, run_id: str, lane: int, result: RangeResult, delivery: str,
            finished_at: datetime) -> RunRow:
    return {
        "flow": flow, "run_id": run_id, "lane": lane, "topic": result.topic,
        "partition": result.partition, "range_start": result.start,
        "range_end": result.end, "records": result.records, "bytes": result.bytes,
        "seconds": result.seconds, "max_record_age_ms": result.max_age_ms,
        "outcome": result.outcome.value, "error": result.error, "delivery": delivery,
        "duplicates": result.duplicates, "finished_at": finished_at,
        "schema_version": SCHEMA_VERSION,
    }


def sync_row(flow: str, run_id: str, step: str, changes: list[str],
             synced_at: datetime) -> dict[str, Any]:
    """A sync step's row; `changes` are the step's changes, one line each."""
    return {"flow": flow, "run_id": run_id, "step": step, "synced_at": synced_at,
            "changes": len(changes), "detail": json.dumps(changes),
            "schema_version": SCHEMA_VERSION}


def checkpoint_row(flow: str, run_id: str, group: str, source_topic: str,
                   source_partition: int, source_offset: int, target_topic: str,
                   target_offset: int | None, status: str, emitted: bool, group_synced: bool,
                   translated_at: datetime) -> dict[str, Any]:
    return {"flow": flow, "run_id": run_id, "group_id": group, "source_topic": source_topic,
            "source_partition": source_partition, "source_offset": source_offset,
            "target_topic": target_topic, "target_offset": target_offset,
            "status": str(status),  # a plain string in the table, whatever enum gave it
            "emitted": emitted, "group_synced": group_synced, "translated_at": translated_at,
            "schema_version": SCHEMA_VERSION}


def verify_row(flow: str, run_id: str, topic: str, partition: int, source_start: int,
               source_end: int, checked: int, altered: int, missing: int, skipped: int,
               extra: int, mismatches: list[dict[str, Any]], ok: bool,
               verified_at: datetime) -> dict[str, Any]:
    """A verified partition's row; `mismatches` keeps the first 100 runs of mismatched pairs."""
    return {"flow": flow, "run_id": run_id, "topic": topic, "partition": partition,
            "source_start": source_start, "source_end": source_end, "checked": checked,
            "altered": altered, "missing": missing, "skipped": skipped, "extra": extra,
            "mismatches": json.dumps(mismatches[:100]), "outcome": "ok" if ok else "mismatch",
            "verified_at": verified_at, "schema_version": SCHEMA_VERSION}


def incident_row(flow: str, run_id: str, kind: str, topic: str, partition: int, detail: str,
                 detected_at: datetime) -> dict[str, Any]:
    return {"flow": flow, "run_id": run_id, "kind": kind, "topic": topic,
            "partition": partition, "detail": detail, "detected_at": detected_at,
            "schema_version": SCHEMA_VERSION}
