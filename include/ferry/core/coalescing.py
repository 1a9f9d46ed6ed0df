"""Coalescing the offset map: adjacent entries of one run folded into one row (pure).

A continuous flow commits a transaction a second, so each source partition gains one
offset-map entry a second (86,400 a day). Each entry's Delta row repeats the flow, topics,
IDs, run and times; what differs is its covered range and its segments. Maintenance folds
a run's adjacent, settled entries of one partition into one row that covers their ranges
and holds their segments, so the rows a look-up reads grow with runs, not transactions.

A folded row keeps every fact a look-up or a translation reads: the covered range is the
union (the entries were adjacent), the segments are theirs in order (touching ones
joined), the records and bytes are their sums, and `target_end` and `committed_at` are the
last entry's. It names the offset-map topic offsets it stands for, `first..last`, so
both writers' key check (`ferry.state.reader.present_keys`) and the cursor
(`max_map_offsets`) read a folded entry as recorded.

Only entries that follow one another in the partition's write order fold: no other entry
of the partition was written between them, so resolving overlaps by write order
(`ferry.core.offsetmap.latest_cover`) gives the same answer before and after.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ferry.core.offsetmap import MapEntry, Segment

MAX_ROW_SEGMENTS = 100_000
"""Segments one folded row holds at most (about 2.4 MB in Parquet): a day of one-second
transactions of one partition is 86,400, so a row stays a day or more of one run."""


@dataclass(frozen=True)
class StoredEntry:
    """An offset-map row: an entry and the offset-map topic offsets it stands for."""

    map_topic_id: str
    first: int
    """Its offset in the offset-map topic (`map_offset`)."""
    last: int
    """The last offset it stands for (`map_offset_end`; `first` for an entry unfolded)."""
    entry: MapEntry

    @property
    def folded(self) -> int:
        """How many offset-map entries the row stands for."""
        return self.last - self.first + 1 if self.last >= self.first else 1


def coalesce(rows: Iterable[StoredEntry], settled_before_ms: int,
             max_segments: int = MAX_ROW_SEGMENTS) -> list[StoredEntry]:
    """`rows` with each run of foldable neighbours (`foldable`) folded into one row
    (`fold`), in the partition's write order: per source partition and offset-map topic,
    by `first`. Entries committed at or after `settled_before_ms` stay as they are
    (writers may still be reading them back). A row left alone is returned as given."""
    partitions: dict[tuple[str, str, int, str], list[StoredEntry]] = {}
    for row in rows:
        entry = row.entry
        key = (entry.flow, entry.source_topic, entry.source_partition, row.map_topic_id)
        partitions.setdefault(key, []).append(row)
    out: list[StoredEntry] = []
    for key in sorted(partitions):
        group: list[StoredEntry] = []
        segments = 0
        for row in sorted(partitions[key], key=lambda r: r.first):
            if group and foldable(group[-1], row, settled_before_ms) \
                    and segments + len(row.entry.segments) <= max_segments:
                group.append(row)
                segments += len(row.entry.segments)
                continue
            if group:
                out.append(fold(group))
            group, segments = [row], len(row.entry.segments)
        if group:
            out.append(fold(group))
    return out


def foldable(before: StoredEntry, row: StoredEntry, settled_before_ms: int) -> bool:
    """Whether `row` (next in its partition's write order) folds onto `before`: both
    settled, one run's lane writing to one remote partition of the same topic
    incarnations, `row` covering from where `before` ends. An empty entry (a reset's,
    covering nothing) never folds: where it says a partition resumes is its whole point."""
    a, b = before.entry, row.entry
    return (a.committed_at_ms < settled_before_ms and b.committed_at_ms < settled_before_ms
            and a.covered_start < a.covered_end and b.covered_start < b.covered_end
            and b.covered_start == a.covered_end
            and before.map_topic_id == row.map_topic_id and row.first > before.last
            and (a.run_id, a.lane, a.target_topic, a.target_partition, a.source_id,
                 a.target_id) == (b.run_id, b.lane, b.target_topic, b.target_partition,
                                  b.source_id, b.target_id))


def fold(group: Sequence[StoredEntry]) -> StoredEntry:
    """A run of rows, each foldable onto the one before, as one row (a single row: itself)."""
    if len(group) == 1:
        return group[0]
    first, last = group[0], group[-1]
    entries = [row.entry for row in group]
    entry = replace(
        first.entry, covered_end=last.entry.covered_end,
        segments=join([s for e in entries for s in e.segments]),
        committed_at_ms=last.entry.committed_at_ms, bytes=sum(e.bytes for e in entries),
        target_end=last.entry.target_end, duplicates=sum(e.duplicates for e in entries),
        age_ms=max(e.age_ms for e in entries))
    return StoredEntry(first.map_topic_id, first.first, last.last, entry)


def join(segments: Sequence[Segment]) -> tuple[Segment, ...]:
    """`segments` (in source order) with each one that continues the one before on both
    sides joined to it."""
    out: list[Segment] = []
    for segment in segments:
        if out and out[-1].source_end == segment.source_start \
                and out[-1].target_end == segment.target_start:
            last = out.pop()
            segment = Segment(last.source_start, last.target_start,
                              last.count + segment.count)
        out.append(segment)
    return tuple(out)
