"""The offset map's pure core: segments, the entry each transaction writes, and look-ups.

A **segment** is a run of mirrored records whose source offsets and target offsets both
advance by one: source `[source_start, source_start+count)` went to target
`[target_start, target_start+count)`. A gap on either side starts a new segment: on the
source, transaction markers, aborted records and compaction; on the target, the commit
marker between two of Ferry's transactions.

A **map entry** is what one lane transaction records for one source partition: the source
offsets it *covered* (`[covered_start, covered_end)`, contiguous with the previous entry's,
including offsets that hold no record) and the segments of the records it wrote. Entries
are written into the same target transaction as the records (topic
`ferry-offset-map.<source>.internal`), so they become visible exactly when the records do,
and the Delta `offset_map` table can always be rebuilt from them. Rows per range stay
O(1) when the source has no gaps: one entry per transaction, one segment per entry.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

FORMAT_VERSION = 1
MAX_ENTRY_SEGMENTS = 10_000
"""Segments one entry holds at most (about 250 kB encoded): a transaction whose records
break into more segments (one-record source transactions put a marker after every record;
compaction leaves a hole after every kept record) writes several entries, so an entry
stays far below the broker's default 1 MB record limit."""


@dataclass(frozen=True)
class Segment:
    source_start: int
    target_start: int
    count: int

    @property
    def source_end(self) -> int:
        return self.source_start + self.count

    @property
    def target_end(self) -> int:
        return self.target_start + self.count

    def target_of(self, source_offset: int) -> int | None:
        if self.source_start <= source_offset < self.source_end:
            return self.target_start + (source_offset - self.source_start)
        return None


@dataclass(frozen=True)
class MapEntry:
    flow: str
    run_id: str
    lane: int
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    covered_start: int
    covered_end: int
    segments: tuple[Segment, ...]
    committed_at_ms: int
    bytes: int = 0  # keys + values written, so the runs table can be rebuilt from entries
    target_end: int | None = None
    """The remote partition's next offset after this entry: its last segment's end, or for
    an entry without records the end the lane saw (where a group at or past everything
    mirrored resumes, empty partitions included); None in entries of older versions."""
    source_id: str = ""
    """The source topic's ID (Kafka's topic ID); empty where unknown (older entries)."""
    target_id: str = ""
    """The target topic's ID: a topic deleted and created again has another (G10)."""
    duplicates: int = 0
    """at_least_once: records an unfinished earlier run wrote to the remote partition that
    this entry's run copied again (kept so a `runs` row rebuilt from entries counts them)."""
    lane_started_ms: int = 0
    """When the entry's lane started copying (epoch ms; 0 in entries of older versions):
    with `age_ms`, a `runs` row rebuilt from entries has the times its lane reported."""
    age_ms: int = 0
    """The `max_record_age_ms` of the partition's range as its lane knew it at this entry
    (0: none read yet, or an older version)."""

    @property
    def records(self) -> int:
        return sum(s.count for s in self.segments)

    def target_of(self, source_offset: int) -> int | None:
        """The target offset holding the record at `source_offset`; None if that source
        offset holds no mirrored record (a marker, aborted, compacted) or is not covered.
        The segments are in source order (as a lane writes them), so this is a binary
        search: an entry of a compacted source holds thousands."""
        at = bisect.bisect_right(self.segments, source_offset, key=_source_start) - 1
        return self.segments[at].target_of(source_offset) if at >= 0 else None


def _source_start(segment: Segment) -> int:
    return segment.source_start


ADOPTED_LANE = -1
"""The lane of entries that record history another mirror copied (`ferry adopt`)."""
RESET_LANE = -2
"""The lane of the entry a `ferry positions reset` writes: it covers no record."""


class SegmentError(ValueError):
    """Target offsets are not what a single writer would have produced."""


class SegmentBuilder:
    """Collects the source offsets of the records a transaction writes to one partition,
    in order; `finish` pairs them with the target offsets the broker assigned."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: list[list[int]] = []  # [source_start, count]

    def add(self, source_offset: int) -> None:
        if self._runs:
            last = self._runs[-1]
            if source_offset == last[0] + last[1]:
                last[1] += 1
                return
            if source_offset < last[0] + last[1]:
                raise SegmentError(f"source offset {source_offset} is not after "
                                   f"{last[0] + last[1] - 1}")
        self._runs.append([source_offset, 1])

    @property
    def count(self) -> int:
        return sum(run[1] for run in self._runs)

    def runs(self) -> list[tuple[int, int]]:
        """(first source offset, count) of each run of consecutive offsets, in order."""
        return [(start, run) for start, run in self._runs]

    def truncate(self, end: int) -> None:
        """Forget the source offsets at or after `end` (records not to be recorded)."""
        kept = []
        for start, run in self._runs:
            if start < end:
                kept.append([start, min(run, end - start)])
        self._runs = kept

    def finish(self, target_first: int, target_last: int) -> tuple[Segment, ...]:
        """Segments for records written at target offsets `[target_first, target_last]`.

        Within one transaction one producer's records to a partition take contiguous
        offsets; anything else means another writer interleaved, and the mapping would
        be wrong: SegmentError.
        """
        count = self.count
        if target_last - target_first + 1 != count:
            raise SegmentError(
                f"{count} records were written but the target assigned offsets "
                f"{target_first}..{target_last}: another producer writes to this partition")
        segments = []
        target = target_first
        for source_start, run in self._runs:
            segments.append(Segment(source_start, target, run))
            target += run
        return tuple(segments)


def split_entry(entry: MapEntry, max_segments: int = MAX_ENTRY_SEGMENTS) -> list[MapEntry]:
    """`entry` as consecutive entries of at most `max_segments` segments each. Together they
    cover exactly `[covered_start, covered_end)`, contiguously and in order: each piece ends
    where the next piece's first segment starts. The bytes and duplicates stay on the first
    piece (their sums are unchanged)."""
    if max_segments <= 0:
        raise ValueError("max_segments must be above 0")
    if len(entry.segments) <= max_segments:
        return [entry]
    chunks = [entry.segments[i:i + max_segments]
              for i in range(0, len(entry.segments), max_segments)]
    starts = [entry.covered_start] + [chunk[0].source_start for chunk in chunks[1:]]
    ends = [*starts[1:], entry.covered_end]
    last = len(chunks) - 1
    return [replace(entry, covered_start=start, covered_end=end, segments=chunk,
                    bytes=entry.bytes if i == 0 else 0,
                    duplicates=entry.duplicates if i == 0 else 0,
                    target_end=entry.target_end if i == last else chunk[-1].target_end)
            for i, (start, end, chunk) in enumerate(zip(starts, ends, chunks, strict=True))]


def encode(entry: MapEntry) -> tuple[bytes, bytes]:
    """(key, value) of the entry's record in the offset-map topic. Versioned JSON."""
    key = f"{entry.flow}|{entry.source_topic}|{entry.source_partition}".encode()
    value = {
        "v": FORMAT_VERSION,
        "flow": entry.flow,
        "run": entry.run_id,
        "lane": entry.lane,
        "st": entry.source_topic,
        "sp": entry.source_partition,
        "tt": entry.target_topic,
        "tp": entry.target_partition,
        "cs": entry.covered_start,
        "ce": entry.covered_end,
        "seg": [[s.source_start, s.target_start, s.count] for s in entry.segments],
        "at": entry.committed_at_ms,
        "b": entry.bytes,
    }
    if entry.target_end is not None:
        value["te"] = entry.target_end
    if entry.source_id:
        value["si"] = entry.source_id
    if entry.target_id:
        value["ti"] = entry.target_id
    if entry.duplicates:
        value["d"] = entry.duplicates
    if entry.lane_started_ms:
        value["ls"] = entry.lane_started_ms
    if entry.age_ms:
        value["ag"] = entry.age_ms
    return key, json.dumps(value, separators=(",", ":")).encode()


def decode(value: bytes) -> MapEntry:
    """Parse a record of the offset-map topic; ValueError for a foreign or newer record."""
    data = json.loads(value)
    if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
        raise ValueError(f"not a version-{FORMAT_VERSION} offset-map entry")
    return MapEntry(
        flow=data["flow"], run_id=data["run"], lane=int(data["lane"]),
        source_topic=data["st"], source_partition=int(data["sp"]),
        target_topic=data["tt"], target_partition=int(data["tp"]),
        covered_start=int(data["cs"]), covered_end=int(data["ce"]),
        segments=tuple(Segment(int(a), int(b), int(c)) for a, b, c in data["seg"]),
        committed_at_ms=int(data["at"]),
        bytes=int(data.get("b", 0)),
        target_end=int(data["te"]) if data.get("te") is not None else None,
        source_id=str(data.get("si", "")), target_id=str(data.get("ti", "")),
        duplicates=int(data.get("d", 0)),
        lane_started_ms=int(data.get("ls", 0)), age_ms=int(data.get("ag", 0)),
    )


def restrict(entry: MapEntry, start: int, end: int) -> MapEntry | None:
    """The part of `entry` covering source offsets `[start, end)` (None when it covers none
    of them): its segments cut to that range. The bytes and duplicates stay with the piece
    that holds the entry's start."""
    low, high = max(start, entry.covered_start), min(end, entry.covered_end)
    if low >= high:
        return None
    if (low, high) == (entry.covered_start, entry.covered_end) and (
            not entry.segments or entry.target_end == entry.segments[-1].target_end):
        return entry  # all of it: the pieces below would make the same entry again
    segments = []
    for segment in entry.segments:
        a, b = max(low, segment.source_start), min(high, segment.source_end)
        if a < b:
            segments.append(Segment(a, segment.target_start + (a - segment.source_start), b - a))
    target_end = segments[-1].target_end if segments else (
        entry.target_end if high == entry.covered_end else None)
    return replace(entry, covered_start=low, covered_end=high, segments=tuple(segments),
                   bytes=entry.bytes if low == entry.covered_start else 0,
                   duplicates=entry.duplicates if low == entry.covered_start else 0,
                   target_end=target_end)


def lookup(entries: Iterable[MapEntry], source_offset: int) -> tuple[MapEntry, int | None] | None:
    """The entry covering `source_offset` and its target offset (None when that offset
    holds no mirrored record); None when the offset was never mirrored."""
    for entry in entries:
        if entry.covered_start <= source_offset < entry.covered_end:
            return entry, entry.target_of(source_offset)
    return None


def covering(entries: Sequence[MapEntry], source_offset: int
             ) -> tuple[MapEntry, int | None] | None:
    """`lookup` in entries in source order that do not overlap (as `latest_cover` gives
    them), by binary search: a partition mirrored for a day in sub-second transactions
    has 100,000s of entries."""
    at = bisect.bisect_right(entries, source_offset, key=_covered_start) - 1
    while at >= 0 and entries[at].covered_start == entries[at].covered_end:
        at -= 1  # an empty entry (a reset's) covers nothing
    return lookup(entries[at:at + 1], source_offset) if at >= 0 else None


def _covered_start(entry: MapEntry) -> int:
    return entry.covered_start


def check_contiguous(entries: Sequence[MapEntry]) -> list[str]:
    """Problems in one partition's entries (sorted by covered_start): holes or overlaps."""
    problems = []
    for before, after in itertools.pairwise(entries):
        if after.covered_start != before.covered_end:
            problems.append(f"{before.source_topic}-{before.source_partition}: covered "
                            f"{before.covered_start}..{before.covered_end} then "
                            f"{after.covered_start}..{after.covered_end}")
    return problems


def next_mirrored(entries: Sequence[MapEntry], source_offset: int) -> tuple[int, int] | None:
    """(source offset, target offset) of the first mirrored record at or after
    `source_offset`, or None when there is none (yet). `entries` in source order."""
    for entry in entries:
        if entry.covered_end <= source_offset:
            continue
        for segment in entry.segments:
            if segment.source_end > source_offset:
                source = max(source_offset, segment.source_start)
                return source, segment.target_start + (source - segment.source_start)
    return None


def latest_cover(entries: Sequence[tuple[Any, MapEntry]]) -> list[MapEntry]:
    """Entries in source order, where overlapping ones (an at_least_once crash, or positions
    reset after a source topic was recreated) resolve to the one written later (the higher
    key: its offset in the offset-map topic, or a (incarnation, offset) pair). An older
    entry keeps the part no later one covers: a partial overlap cuts it, never drops it."""
    kept: list[MapEntry] = []
    # What the entries taken so far cover: disjoint intervals in source order, those that
    # touch merged into one, so a partition's adjacent entries keep it one interval long
    # (a look-up over a day of sub-second transactions reads 100,000s of entries).
    starts: list[int] = []
    ends: list[int] = []
    for _, entry in sorted(entries, key=lambda pair: pair[0], reverse=True):
        low, high = entry.covered_start, entry.covered_end
        if low == high:
            kept.append(entry)
            continue
        first = bisect.bisect_left(ends, low)  # the intervals that overlap or touch it
        last = bisect.bisect_right(starts, high)
        free, at = [], low
        for start, end in zip(starts[first:last], ends[first:last], strict=True):
            if at < min(start, high):
                free.append((at, min(start, high)))
            at = max(at, end)
        if at < high:
            free.append((at, high))
        kept.extend(p for a, b in free if (p := restrict(entry, a, b)) is not None)
        merged = (min(low, starts[first]), max(high, ends[last - 1])) if first < last \
            else (low, high)
        starts[first:last], ends[first:last] = [merged[0]], [merged[1]]
    return sorted(kept, key=lambda e: (e.covered_start, e.covered_end))


@dataclass(frozen=True)
class MapWindow:
    """The part of one source partition's offset map that a look-up or a translation at
    `ends_after` or later reads: the entries whose covered range ends after it, and, of
    each source topic incarnation, the entries that end last (where its mirrored range
    ends: the answer past everything mirrored). Entries ending at or before the offset
    never change an answer at or after it (`latest_cover` resolves an offset among the
    entries covering it), so a look-up reads what is recent, however long the partition
    has been mirrored."""

    topic: str
    partition: int
    ends_after: int

    def holds(self, entry: MapEntry) -> bool:
        return (entry.source_topic, entry.source_partition) == (self.topic, self.partition) \
            and entry.covered_end > self.ends_after


@dataclass(frozen=True)
class MapCursor:
    """Where the Delta offset map stands against the offset-map topic on the target."""

    topic_id: str
    """The offset-map topic's ID ("" when it does not exist yet)."""
    after: int
    """The last offset of that topic the Delta table holds (-1: none): read on from here."""
    legacy_current: bool
    """Rows an older Ferry wrote without the topic's ID belong to this topic."""
