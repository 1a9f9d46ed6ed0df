"""`ferry offsets`: where a source record went, from the Delta offset map (delta-rs, no
JVM), completed from the offset-map topic when Delta has not caught up yet."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from ferry.config import Flow
from ferry.offsetmap import MapEntry, lookup, next_mirrored
from ferry.state.reader import latest_cover, map_rows, max_map_offset
from ferry.state.tables import StatePaths


@dataclass(frozen=True)
class Answer:
    flow: str
    topic: str
    partition: int
    source_offset: int
    status: str  # mirrored | no-record | not-mirrored
    target_topic: str
    target_partition: int
    target_offset: int | None
    next_source: int | None = None
    next_target: int | None = None
    mirrored_up_to: int | None = None
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def text(self) -> str:
        where = f"{self.topic}-{self.partition}@{self.source_offset}"
        if self.status == "mirrored":
            return (f"{where} -> {self.target_topic}-{self.target_partition}@"
                    f"{self.target_offset} (run {self.run_id})")
        if self.status == "no-record":
            nxt = (f"; the next mirrored record, {self.topic}-{self.partition}@"
                   f"{self.next_source}, is at {self.target_topic}-{self.target_partition}@"
                   f"{self.next_target}") if self.next_source is not None else ""
            return (f"{where} holds no mirrored record (a transaction marker, an aborted or a "
                    f"compacted record){nxt}")
        upto = (f"mirrored up to offset {self.mirrored_up_to}" if self.mirrored_up_to
                is not None else "nothing of this partition is mirrored yet")
        return f"{where} is not mirrored yet ({upto})"


def find(flow: Flow, topic: str, partition: int, source_offset: int) -> Answer:
    entries = partition_entries(flow, [topic]).get((topic, partition), [])
    remote = flow.remote_topic(topic)
    base = {"flow": flow.name, "topic": topic, "partition": partition,
            "source_offset": source_offset, "target_topic": remote,
            "target_partition": partition}
    found = lookup(entries, source_offset)
    if found is None:
        upto = entries[-1].covered_end if entries else None
        return Answer(**base, status="not-mirrored", target_offset=None,  # type: ignore[arg-type]
                      mirrored_up_to=upto)
    entry, target = found
    if target is not None:
        return Answer(**base, status="mirrored", target_offset=target,  # type: ignore[arg-type]
                      run_id=entry.run_id)
    nxt = next_mirrored(entries, source_offset)
    return Answer(**base, status="no-record", target_offset=None,  # type: ignore[arg-type]
                  next_source=nxt[0] if nxt else None, next_target=nxt[1] if nxt else None,
                  run_id=entry.run_id)


def partition_entries(flow: Flow, topics: Collection[str] | None = None,
                      into: Callable[[str], str] | None = None
                      ) -> dict[tuple[str, int], list[MapEntry]]:
    """Each source partition's offset-map entries (of `topics` only, when given; overlaps
    resolved; source order): Delta first, completed from the offset-map topic where Delta
    has not caught up (a job that died between the Kafka commit and the Delta write).

    Only entries of records written into `into(source topic)` count: by default the flow's
    remote topic, so a backfill into a topic of its own never answers for the mirror."""
    destination = into or flow.remote_topic
    from ferry.kafka.mapreader import read_entries

    if topics is not None and not topics:
        return {}
    paths = StatePaths(flow.ferry.state_dir)
    pairs = map_rows(paths.offset_map, flow.name, topics)
    pairs += [(offset, entry) for offset, entry in
              read_entries(flow, max_map_offset(paths.offset_map, flow.name))
              if topics is None or entry.source_topic in topics]
    grouped: dict[tuple[str, int], list[tuple[int, MapEntry]]] = {}
    for offset, entry in pairs:
        if entry.target_topic != destination(entry.source_topic):
            continue
        key = (entry.source_topic, entry.source_partition)
        grouped.setdefault(key, []).append((offset, entry))
    return {key: latest_cover(found) for key, found in grouped.items()}
