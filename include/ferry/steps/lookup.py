"""`ferry offsets`: where a source record went, from the Delta offset map (delta-rs, no
JVM), completed from the offset-map topic when Delta has not caught up yet."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ferry.config import Flow
from ferry.core.offsetmap import MapEntry, MapWindow, covering, latest_cover, next_mirrored
from ferry.state.store import DeltaStore
from ferry.steps.clusters import Cluster
from ferry.steps.ports import HasTopicIds, OffsetMapTarget, StateStore

log = logging.getLogger(__name__)


class Found(StrEnum):
    """Where a source offset went."""

    MIRRORED = "mirrored"
    """Its record is on the target, at `target_offset`."""
    NO_RECORD = "no-record"
    """It is in a mirrored range but holds no record to copy (a transaction marker, an
    aborted or a compacted record)."""
    NOT_MIRRORED = "not-mirrored"
    """It is past what was mirrored."""


@dataclass(frozen=True)
class Answer:
    flow: str
    topic: str
    partition: int
    source_offset: int
    status: Found
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
        if self.status == Found.MIRRORED:
            return (f"{where} -> {self.target_topic}-{self.target_partition}@"
                    f"{self.target_offset} (run {self.run_id})")
        if self.status == Found.NO_RECORD:
            nxt = (f"; the next mirrored record, {self.topic}-{self.partition}@"
                   f"{self.next_source}, is at {self.target_topic}-{self.target_partition}@"
                   f"{self.next_target}") if self.next_source is not None else ""
            return (f"{where} holds no mirrored record (a transaction marker, an aborted or a "
                    f"compacted record){nxt}")
        upto = (f"mirrored up to offset {self.mirrored_up_to}" if self.mirrored_up_to
                is not None else "nothing of this partition is mirrored yet")
        return f"{where} is not mirrored yet ({upto})"


def find(flow: Flow, topic: str, partition: int, source_offset: int, *,
         source: HasTopicIds | None = None, target: OffsetMapTarget | None = None,
         state: StateStore | None = None) -> Answer:
    """Where `source_offset` of the source partition went (see `partition_entries`; the
    clusters and the state default to the flow's)."""
    # only the entries a look-up at this offset reads (`MapWindow`): the recent ones
    entries = partition_entries(flow, [topic], source=source, target=target, state=state,
                                windows=[MapWindow(topic, partition, source_offset)]).get(
        (topic, partition), [])
    remote = flow.remote_topic(topic)
    base = {"flow": flow.name, "topic": topic, "partition": partition,
            "source_offset": source_offset, "target_topic": remote,
            "target_partition": partition}
    found = covering(entries, source_offset)
    if found is None:
        upto = entries[-1].covered_end if entries else None
        return Answer(**base, status=Found.NOT_MIRRORED, target_offset=None,  # type: ignore[arg-type]
                      mirrored_up_to=upto)
    entry, target_offset = found
    if target_offset is not None:
        return Answer(**base, status=Found.MIRRORED,  # type: ignore[arg-type]
                      target_offset=target_offset, run_id=entry.run_id)
    nxt = next_mirrored(entries, source_offset)
    return Answer(**base, status=Found.NO_RECORD, target_offset=None,  # type: ignore[arg-type]
                  next_source=nxt[0] if nxt else None, next_target=nxt[1] if nxt else None,
                  run_id=entry.run_id)


Key = tuple[int, int, int]
"""Orders entries by when they were written: (of the current offset-map topic, commit
time for entries of an older one, offset in the offset-map topic)."""


Grouped = dict[tuple[str, int], list[tuple[Key, MapEntry]]]


def current_entries(flow: Flow, topics: Collection[str] | None = None,
                    into: Callable[[str], str] | None = None, claims: bool = False, *,
                    source: HasTopicIds | None = None, target: OffsetMapTarget | None = None,
                    state: StateStore | None = None,
                    windows: Collection[MapWindow] | None = None) -> Grouped:
    """Each source partition's offset-map entries (of `topics` only, when given) with their
    order keys: Delta first, completed from the offset-map topic where Delta has not caught
    up (a job that died between the Kafka commit and the Delta write).

    Only the current incarnations count (G10): entries written for a source or destination
    topic that has since been deleted and created again (another topic ID) are left out
    (entries of an older Ferry carry no IDs and are kept). Without the source cluster (a
    disaster), source IDs are not checked. With `claims`, entries of a destination topic
    deleted since are kept: what the offset map claims is on the target, for a verify to
    find missing. Only entries of records written into
    `into(source topic)` count: by default the flow's remote topic, so a backfill into a
    topic of its own never answers for the mirror.

    `source` and `target` default to the flow's clusters: the target's offset-map topic and
    both sides' topic IDs are read through them; `state` defaults to the Delta tables under
    `ferry.state.dir`. With `windows`, only the entries each reads of its source partition
    (`MapWindow`)."""
    every, target_ids, _ = _claims(flow, topics, into, source, target, state, windows=windows)
    return every if claims else _live(every, target_ids)


def entries_and_older(flow: Flow, topics: Collection[str], *,
                      source: HasTopicIds | None = None,
                      target: OffsetMapTarget | None = None, state: StateStore | None = None
                      ) -> tuple[Grouped, dict[tuple[str, int], str]]:
    """`current_entries`, and the source partitions that have entries only of an older
    incarnation of their topic: (topic, partition) -> that incarnation's topic ID. For
    positions to be written from: the source topics' IDs must be read (a failure to read
    them raises; entries of a deleted topic are never taken for the current one's)."""
    every, target_ids, older = _claims(flow, topics, None, source, target, state,
                                       source_ids_required=True)
    live = _live(every, target_ids)
    # only entries of records still on the target: a remote topic deleted since took
    # those with it, and the new source topic may start over in the new remote topic
    return live, {key: e.source_id for key, found in _live(older, target_ids).items()
                  if key not in live for _, e in found[-1:]}


def entries_and_claims(flow: Flow, topics: Collection[str] | None = None,
                       into: Callable[[str], str] | None = None, *,
                       source: HasTopicIds | None = None,
                       target: OffsetMapTarget | None = None, state: StateStore | None = None
                       ) -> tuple[dict[tuple[str, int], list[MapEntry]],
                                  dict[tuple[str, int], list[MapEntry]]]:
    """`partition_entries` without and with `claims`, from one read. For a backfill, which
    writes: the source topics' IDs must be read (see `entries_and_older`)."""
    every, target_ids, _ = _claims(flow, topics, into, source, target, state,
                                   source_ids_required=True)
    return _covers(_live(every, target_ids)), _covers(every)


def _live(grouped: Grouped, target_ids: Mapping[str, str]) -> Grouped:
    """The entries whose destination is the topic there now (no ID recorded: assumed);
    the records of the others are gone with the topic they were written to."""
    live = {key: [(k, e) for k, e in found
                  if not e.target_id or e.target_id == target_ids.get(e.target_topic)]
            for key, found in grouped.items()}
    return {key: found for key, found in live.items() if found}


def _covers(grouped: Grouped) -> dict[tuple[str, int], list[MapEntry]]:
    return {key: latest_cover(found) for key, found in grouped.items()}


def _claims(flow: Flow, topics: Collection[str] | None,
            into: Callable[[str], str] | None, source: HasTopicIds | None,
            target: OffsetMapTarget | None, state: StateStore | None,
            source_ids_required: bool = False,
            windows: Collection[MapWindow] | None = None
            ) -> tuple[Grouped, dict[str, str], Grouped]:
    """Every entry of the current source incarnations (see `current_entries`), the
    destinations' current topic IDs, and the entries of other source incarnations. The
    source topics' IDs unread (the source cluster down: a disaster a look-up or a failover
    must still answer in) leave every entry current, with a warning; with
    `source_ids_required` (a caller that writes positions from them) that failure
    raises."""
    from ferry.errors import FerryError

    destination = into or flow.remote_topic
    if topics is not None and not topics:
        return {}, {}, {}
    asked = {(w.topic, w.partition) for w in windows or ()}
    target = target or Cluster(flow.target_admin)
    cursor = target.map_cursor(flow)
    keyed: list[tuple[Key, MapEntry]] = []
    for row in (state or DeltaStore.of(flow)).map_rows(flow.name, topics, windows):
        current = row.map_topic_id == cursor.topic_id or (
            not row.map_topic_id and cursor.legacy_current)
        keyed.append(((1, 0, row.offset) if current
                      else (0, row.entry.committed_at_ms, row.offset), row.entry))
    keyed += [((1, 0, offset), entry) for offset, entry in target.map_entries(flow, cursor.after)
              if (topics is None or entry.source_topic in topics)
              and (windows is None or (entry.source_topic, entry.source_partition) in asked)]
    keyed = [(k, e) for k, e in keyed if e.target_topic == destination(e.source_topic)]
    names = {e.source_topic for _, e in keyed}
    try:
        source_ids = (source or Cluster(flow.source_admin)).topic_ids(names)
    except FerryError as exc:
        if source_ids_required:
            raise
        log.warning("source topic IDs not checked (%s)", exc, extra={"flow": flow.name})
        source_ids = {}
    target_ids = target.topic_ids({destination(t) for t in names})
    grouped: Grouped = {}
    older: Grouped = {}
    for key, entry in keyed:
        if entry.source_id and entry.source_id != source_ids.get(entry.source_topic,
                                                                 entry.source_id):
            older.setdefault((entry.source_topic, entry.source_partition), []).append(
                (key, entry))
            continue
        grouped.setdefault((entry.source_topic, entry.source_partition), []).append(
            (key, entry))
    return grouped, target_ids, older


def partition_entries(flow: Flow, topics: Collection[str] | None = None,
                      into: Callable[[str], str] | None = None, claims: bool = False, *,
                      source: HasTopicIds | None = None,
                      target: OffsetMapTarget | None = None, state: StateStore | None = None,
                      windows: Collection[MapWindow] | None = None
                      ) -> dict[tuple[str, int], list[MapEntry]]:
    """Each source partition's current offset-map entries (`current_entries`), overlaps
    resolved to the later written, in source order."""
    return _covers(current_entries(flow, topics, into, claims, source=source, target=target,
                                   state=state, windows=windows))
