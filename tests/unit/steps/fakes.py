"""In-memory stand-ins for the clusters, as the steps see them (`ferry.steps.ports`).

Each fake holds what a cluster would (topics, configs, ACLs, watermarks, groups, MM2's
topics, topic IDs, the offset-map topic) and records what a step changed, so a test states
a cluster, runs a step and reads the cluster back. They fake Ferry's own ports, not confluent-kafka.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ferry.config import Flow
from ferry.core.checkpoints import Checkpoint, TargetGroup
from ferry.core.internal import offset_map_topic
from ferry.core.offsetmap import MapCursor, MapEntry, MapWindow, Segment
from ferry.core.planner import Gap, TopicPartition, Watermarks
from ferry.core.positions import UNREAD, PositionMoved, PositionWrite
from ferry.core.sync.acls import Acl
from ferry.core.sync.configs import (
    AlterTopicConfig,
    ConfigValue,
    ReplaceTopicConfig,
    TopicConfig,
)
from ferry.core.sync.topics import TopicActions
from ferry.core.tables import JOB_TABLES, SCHEMAS, MapRow, map_row, unrecorded
from ferry.kafka.acls import NoAuthorizer
from ferry.kafka.admin import TopicInfo
from ferry.kafka.configs import IncrementalUnsupported
from ferry.kafka.mm2topics import Record


@dataclass
class FakeCluster:
    """One cluster. `marks` gives each partition's (log start, last stable offset);
    `groups` each group's committed (offset, metadata) per (topic, partition)."""

    cluster: str = "fake"
    partitions: dict[str, int] = field(default_factory=dict)
    marks: dict[TopicPartition, Watermarks] = field(default_factory=dict)
    groups: dict[str, dict[tuple[str, int], tuple[int, str]]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    """Group -> Kafka's group state on this cluster (default: EMPTY if it has offsets)."""
    stamps: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)
    """(topic, partition) -> offset -> record time (ms) of the records in the log."""
    records: dict[str, list[Record]] = field(default_factory=dict)
    """MM2's one-partition topics (heartbeats, ...): their records."""
    checkpoints: dict[str, list[Checkpoint]] = field(default_factory=dict)
    digested: dict[tuple[str, int], dict[int, bytes]] = field(default_factory=dict)
    """(topic, partition) -> offset -> digest of each record in the log (verify)."""
    ids: dict[str, str] = field(default_factory=dict)
    cursor: MapCursor = field(default_factory=lambda: MapCursor("map-id", -1, False))
    map_topic: list[tuple[int, MapEntry]] = field(default_factory=list)
    """The offset-map topic's committed entries, (topic offset, entry)."""
    configs: dict[str, dict[str, ConfigValue]] = field(default_factory=dict)
    """Topic -> its config entries, as DescribeConfigs answers them."""
    acl_list: list[Acl] | None = field(default_factory=list)
    """The cluster's ACLs; None: it has no authorizer."""
    incremental: bool = True
    """Whether the cluster implements IncrementalAlterConfigs."""
    created: list[str] = field(default_factory=list)
    """Topics created, in order (remote, offset-map and plain topics)."""
    config_changes: list[AlterTopicConfig | ReplaceTopicConfig] = field(default_factory=list)
    ensured: list[tuple[str, int, str]] = field(default_factory=list)
    altered: list[tuple[str, list[tuple[str, int, int, str]]]] = field(default_factory=list)
    timestamps_read: list[tuple[str, int, int]] = field(default_factory=list)
    positions_written: list[PositionWrite] = field(default_factory=list)
    """Positions written through `write_positions`, in order."""
    topic_listings: int = 0
    """How often a step listed the cluster's topics."""
    starts_read: list[TopicPartition] = field(default_factory=list)
    """Partitions whose log start a step read (`log_starts`), in order."""
    ids_read: list[str] = field(default_factory=list)
    """Topics whose ID a step read, in order."""

    def topic(self, name: str, *ends: int, start: int = 0) -> FakeCluster:
        """Add topic `name` with one partition per end offset (all starting at `start`)."""
        self.partitions[name] = len(ends)
        for p, end in enumerate(ends):
            self.marks[TopicPartition(name, p)] = Watermarks(start, end)
        return self

    def topics(self) -> dict[str, TopicInfo]:
        self.topic_listings += 1
        return {name: TopicInfo(name, n) for name, n in self.partitions.items()}

    def watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Watermarks]:
        return {tp: self.marks[tp] for tp in tps}

    def last_stable(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.marks[tp].high for tp in tps}

    def log_starts(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        self.starts_read.extend(tps)
        return {tp: self.marks[tp].low for tp in tps}

    def offsets_at(self, tps: Iterable[TopicPartition], time_ms: int
                   ) -> dict[TopicPartition, int]:
        found = {}
        for tp in tps:
            times = self.stamps.get((tp.topic, tp.partition), {})
            later = sorted(o for o, t in times.items() if t >= time_ms)
            found[tp] = later[0] if later else self.marks[tp].high
        return found

    def _create(self, name: str, partitions: int, configs: Mapping[str, str]) -> bool:
        if name in self.partitions:
            return False
        self.topic(name, *[0] * partitions)
        self.configs[name] = {k: ConfigValue(v) for k, v in configs.items()}
        self.created.append(name)
        return True

    def topic_configs(self, topics: Iterable[str]) -> dict[str, TopicConfig]:
        return {t: dict(self.configs.get(t, {})) for t in sorted(set(topics))}

    def acls(self) -> list[Acl]:
        if self.acl_list is None:
            raise NoAuthorizer(self.cluster)
        return list(self.acl_list)

    def apply_topology(self, flow: Flow, actions: TopicActions) -> None:
        for c in actions.create:
            self._create(c.name, c.partitions, c.configs)
        for g in actions.grow:
            for p in range(self.partitions[g.name], g.to_partitions):
                self.marks[TopicPartition(g.name, p)] = Watermarks(0, 0)
            self.partitions[g.name] = g.to_partitions

    def ensure_offset_map_topic(self, flow: Flow, existing: Collection[str] | None = None
                                ) -> None:
        self._create(offset_map_topic(flow), 1, {"retention.ms": "-1"})

    def create_plain_topics(self, flow: Flow, partitions: dict[str, int]) -> list[str]:
        return [name for name, n in partitions.items() if self._create(name, n, {})]

    def alter_configs(self, changes: Iterable[AlterTopicConfig]) -> None:
        if not self.incremental:
            raise IncrementalUnsupported(self.cluster)
        for change in changes:
            self.config_changes.append(change)
            entries = self.configs.setdefault(change.topic, {})
            entries.update({k: ConfigValue(v) for k, v in change.set})
            for key in change.delete:
                entries.pop(key, None)

    def replace_configs(self, replacements: Iterable[ReplaceTopicConfig]) -> None:
        for change in replacements:
            self.config_changes.append(change)
            self.configs[change.topic] = {k: ConfigValue(v) for k, v in change.configs}

    def create_acls(self, acls: Iterable[Acl]) -> None:
        if self.acl_list is None:
            raise NoAuthorizer(self.cluster)
        self.acl_list.extend(acls)

    def committed(self, group: str, tps: Iterable[tuple[str, int]] | None = None,
                  stable: bool = True) -> dict[tuple[str, int], tuple[int, str]]:
        found = self.groups.get(group, {})
        wanted = set(found) if tps is None else set(tps)
        return {k: v for k, v in found.items() if k in wanted}

    def group_offsets(self, group: str, tps: Iterable[tuple[str, int]]
                      ) -> dict[tuple[str, int], int]:
        return {k: offset for k, (offset, _) in self.committed(group, tps).items()}

    def alter_offsets(self, group: str, offsets: Sequence[tuple[str, int, int, str]],
                      action: str, needs: Mapping[str, str]) -> None:
        self.altered.append((group, list(offsets)))
        for topic, partition, offset, metadata in offsets:
            self.groups.setdefault(group, {})[(topic, partition)] = (offset, metadata)

    def write_positions(self, flow: Flow, writes: Sequence[PositionWrite]
                        ) -> list[PositionMoved]:
        from ferry.core.internal import positions_group, transactional_id
        from ferry.core.lanes import writer_of
        from ferry.core.positions import decode_position, encode_position

        group, moved = self.groups.setdefault(positions_group(flow), {}), []
        for w in writes:
            key = (flow.remote_topic(w.topic), w.partition)
            found = group.get(key)
            if w.expect is not UNREAD and (found[0] if found else None) != w.expect:
                moved.append(PositionMoved(w, found[0] if found else None,
                                           decode_position(found[1]).owner if found else ""))
                continue
            after = max((o for o, _ in self.map_topic), default=-1)
            self.map_topic += [(after + 1 + i, e) for i, e in enumerate(w.entries)]
            owner = transactional_id(flow, writer_of(w.topic, w.partition, flow.ferry.writers))
            group[key] = (w.position, encode_position(w.target_end, owner, w.source_id,
                                                        adopted=w.adopted,
                                                        target_id=w.target_id))
            self.positions_written.append(w)
        return moved

    def list_groups(self) -> list[str]:
        return sorted(self.groups)

    def describe_groups(self, groups: list[str]) -> dict[str, TargetGroup]:
        found = {}
        for group in groups:
            state = self.states.get(group, "EMPTY" if group in self.groups else "ABSENT")
            offsets = self.group_offsets(group, self.groups.get(group, {})) \
                if state == "EMPTY" else {}
            found[group] = TargetGroup(state, offsets)
        return found

    def commit(self, group: str, checkpoints: list[Checkpoint]) -> None:
        self.alter_offsets(group, [(c.topic, c.partition, c.downstream_offset, c.metadata)
                                   for c in checkpoints], "commit", {})

    def ensure_mm2_topic(self, topic: str, replication_factor: int, setting: str) -> bool:
        self.ensured.append((topic, replication_factor, setting))
        created = topic not in self.partitions
        self.partitions.setdefault(topic, 1)
        return created

    def read_checkpoints(self, flow: Flow, topic: str) -> list[Checkpoint]:
        return list(self.checkpoints.get(topic, []))

    def write_checkpoints(self, flow: Flow, topic: str, checkpoints: list[Checkpoint]
                          ) -> None:
        self.checkpoints.setdefault(topic, []).extend(checkpoints)

    def append(self, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
        log = self.records.setdefault(topic, [])
        log += [Record(len(log) + i, key, value, ts) for i, (key, value, ts) in
                enumerate(records)]

    def read_all(self, topic: str, group: str) -> list[Record]:
        return list(self.records.get(topic, []))

    def digests(self, topic: str, partition: int, start: int, end: int, group: str,
                timeout: float) -> Iterator[tuple[int, bytes]]:
        found = self.digested.get((topic, partition), {})
        return iter(sorted((o, d) for o, d in found.items() if start <= o < end))

    def timestamp_at(self, topic: str, partition: int, offset: int, group: str) -> int | None:
        self.timestamps_read.append((topic, partition, offset))
        later = sorted(o for o in self.stamps.get((topic, partition), {}) if o >= offset)
        return self.stamps[(topic, partition)][later[0]] if later else None

    def topic_ids(self, names: Iterable[str]) -> dict[str, str]:
        names = sorted(set(names))
        self.ids_read.extend(names)
        return {name: self.ids[name] for name in names if name in self.ids}

    def map_cursor(self, flow: Flow) -> MapCursor:
        return self.cursor

    def map_entries(self, flow: Flow, after: int) -> list[tuple[int, MapEntry]]:
        return [(o, e) for o, e in self.map_topic if o > after and e.flow == flow.name]


def entry(source: str, partition: int, covered: tuple[int, int],
          segments: Sequence[tuple[int, int, int]] = (), *, flow: str = "A->B",
          target: str | None = None, run: str = "r1", committed_at_ms: int = 0,
          source_id: str = "", target_id: str = "", target_end: int | None = None
          ) -> MapEntry:
    """An offset-map entry: source offsets `covered` [start, end), and segments
    (source start, target start, count) of the records written to `target`
    (default: `A.<source>`)."""
    parts = tuple(Segment(*s) for s in segments)
    return MapEntry(flow, run, 0, source, partition, target or f"A.{source}", partition,
                    covered[0], covered[1], parts, committed_at_ms,
                    target_end=target_end if target_end is not None or not parts
                    else parts[-1].target_end, source_id=source_id, target_id=target_id)


class FakeOffsetMaps:
    """The offset maps of flows, by flow name: what `partition_entries` would answer."""

    def __init__(self, entries: Iterable[MapEntry] = ()) -> None:
        self.entries = list(entries)
        self.asked: list[tuple[str, frozenset[str]]] = []

    def __call__(self, flow: Flow, topics: Collection[str]
                 ) -> dict[tuple[str, int], list[MapEntry]]:
        self.asked.append((flow.name, frozenset(topics)))
        found: dict[tuple[str, int], list[MapEntry]] = {}
        for e in self.entries:
            if e.flow == flow.name and e.source_topic in topics:
                found.setdefault((e.source_topic, e.source_partition), []).append(e)
        return {k: sorted(v, key=lambda e: e.covered_start) for k, v in found.items()}


@dataclass
class MemoryStore:
    """A flow's state in memory, satisfying `StateStore`: each table a list of row dicts,
    with the Delta store's rules where the steps rely on them (a name it knows; the
    `syncs` table's latest run of each step; a gap recorded once)."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def rows(self, table: str, flow: str, **equal: object) -> list[dict[str, Any]]:
        assert table in SCHEMAS, table
        return [dict(r) for r in self.tables.get(table, [])
                if r["flow"] == flow and all(r.get(k) == v for k, v in equal.items())]

    def append(self, table: str, rows: list[dict[str, Any]]) -> None:
        assert table in SCHEMAS and table not in JOB_TABLES, table
        self.tables.setdefault(table, []).extend(dict(r) for r in rows)

    def last_steps(self, flow: str) -> dict[str, datetime]:
        last: dict[str, datetime] = {}
        for row in self.rows("syncs", flow):
            last[row["step"]] = max(row["synced_at"], last.get(row["step"], row["synced_at"]))
        return last

    def unrecorded_gaps(self, flow: str, gaps: Sequence[Gap]) -> list[Gap]:
        return unrecorded(gaps, self.rows("gaps", flow))

    def map_rows(self, flow: str, topics: Collection[str] | None = None,
                 windows: Collection[MapWindow] | None = None) -> list[MapRow]:
        found = [map_row(r) for r in self.rows("offset_map", flow)
                 if topics is None or r["source_topic"] in topics]
        if windows is None:
            return found
        return [r for r in found if any(_reads(w, r.entry, found) for w in windows)]


def _reads(window: MapWindow, entry: MapEntry, rows: list[MapRow]) -> bool:
    """Whether `window` reads `entry` (`MapWindow`): of its partition, ending after its
    offset, or ending last of its source topic incarnation."""
    if (entry.source_topic, entry.source_partition) != (window.topic, window.partition):
        return False
    last = max(r.entry.covered_end for r in rows
               if (r.entry.source_topic, r.entry.source_partition, r.entry.source_id)
               == (entry.source_topic, entry.source_partition, entry.source_id))
    return window.holds(entry) or entry.covered_end == last
