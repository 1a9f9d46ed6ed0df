"""Verification (pure): does every mirrored record on the target equal its source record?

The offset map pairs each mirrored source offset with its target offset. Each side's
record becomes a digest of its key, value, headers and timestamp; a pair whose digests
differ is *altered*, a pair whose target record is gone is *missing*. Source records that
retention already deleted cannot be checked and are counted apart.

Where the map's target offsets rise with its source offsets (a partition Ferry or an
adopted mirror copied in order, the usual case), both sides are compared as they are read,
in memory flat in the partition's size (`compare_in_order`). A map whose targets do not
rise (a range written after a later one, as a refill of a recreated remote topic may be)
is compared in memory (`compare_in_memory`), to the same result.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ferry.core.offsetmap import MapEntry

ALTERED, MISSING = "altered", "missing"


def digest(key: bytes | None, value: bytes | None,
           headers: Sequence[tuple[str, bytes | None]] | None, timestamp_ms: int) -> bytes:
    """A digest of what a mirror must keep; null and empty stay distinct."""
    h = hashlib.sha256()

    def field(data: bytes | None) -> None:
        h.update(b"\x00" if data is None else b"\x01" + struct.pack(">I", len(data)) + data)

    field(key)
    field(value)
    for name, data in headers or ():
        field(name.encode())
        field(data)
    h.update(struct.pack(">q", timestamp_ms))
    return h.digest()


def iter_pairs(entries: Iterable[MapEntry], low: int = 0) -> Iterator[tuple[int, int]]:
    """(source offset, target offset) of every mirrored record at or after source `low`,
    in the entries' order, one at a time."""
    return ((s, seg.target_start + (s - seg.source_start))
            for entry in entries for seg in entry.segments
            for s in range(max(seg.source_start, low), seg.source_end))


def pairs(entries: Iterable[MapEntry], low: int = 0) -> list[tuple[int, int]]:
    """iter_pairs as a list."""
    return list(iter_pairs(entries, low))


@dataclass(frozen=True)
class TargetSpan:
    """The target offsets a partition's pairs point into."""

    start: int
    """The lowest target offset paired."""
    end: int
    """One past the highest."""
    in_order: bool
    """Whether, in the entries' order, source and target offsets both rise (no source
    offset paired twice, no target offset before one already passed): then both sides can
    be compared as they are read."""


def target_span(entries: Iterable[MapEntry], low: int = 0) -> TargetSpan | None:
    """The span of the pairs at or after source `low`; None when there are none. Reads the
    segments only, never each pair."""
    start = end = None
    in_order = True
    source_end = -1
    for entry in entries:
        for seg in entry.segments:
            first = max(seg.source_start, low)
            if first >= seg.source_end:
                continue
            target_first = seg.target_start + (first - seg.source_start)
            if end is not None and (target_first < end or first < source_end):
                in_order = False
            start = target_first if start is None else min(start, target_first)
            end = seg.target_end if end is None else max(end, seg.target_end)
            source_end = max(source_end, seg.source_end)
    return None if start is None or end is None else TargetSpan(start, end, in_order)


@dataclass(frozen=True)
class Mismatch:
    """`records` pairs of one kind, from (source_offset, target_offset) on, each the next
    offset on both sides."""

    source_offset: int
    target_offset: int
    kind: str
    records: int = 1


@dataclass(frozen=True)
class Skipped:
    """Source offsets [start, end), every one a record no pair names."""

    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass
class Comparison:
    """What comparing one partition found. Problems are kept as runs of consecutive
    offsets, so what a comparison holds grows with the runs, not the records in them."""

    checked: int = 0
    """Pairs whose source record is still in the log."""
    mismatches: list[Mismatch] = field(default_factory=list)
    """Runs of pairs whose target record is altered or missing, in the pairs' order."""
    skipped: list[Skipped] = field(default_factory=list)
    """Runs of source records read that no pair names (never mirrored), in order."""
    extra: int = 0
    """Target records read that no pair names (duplicates an at_least_once crash left)."""

    def mismatch(self, source_offset: int, target_offset: int, kind: str) -> None:
        """Add one mismatched pair, to the last run when it continues that."""
        last = self.mismatches[-1] if self.mismatches else None
        if last is not None and last.kind == kind \
                and last.source_offset + last.records == source_offset \
                and last.target_offset + last.records == target_offset:
            self.mismatches[-1] = replace(last, records=last.records + 1)
        else:
            self.mismatches.append(Mismatch(source_offset, target_offset, kind))

    def skip(self, source_offset: int) -> None:
        """Add one skipped source record, to the last run when it continues that."""
        last = self.skipped[-1] if self.skipped else None
        if last is not None and last.end == source_offset:
            self.skipped[-1] = Skipped(last.start, source_offset + 1)
        else:
            self.skipped.append(Skipped(source_offset, source_offset + 1))

    def count(self, kind: str) -> int:
        """Records mismatched so (ALTERED or MISSING)."""
        return sum(m.records for m in self.mismatches if m.kind == kind)

    @property
    def skipped_records(self) -> int:
        return sum(s.records for s in self.skipped)


def compare_in_order(paired: Iterable[tuple[int, int]], source: Iterable[tuple[int, bytes]],
                     target: Iterable[tuple[int, bytes]]) -> Comparison:
    """Compare as the three are read, each consumed once and never held: `paired` with
    source and target offsets both rising (TargetSpan.in_order), `source` the (offset,
    digest) of its records over the pairs' source range, `target` those over their target
    span, each in offset order."""
    found = Comparison()
    sources, targets = iter(source), iter(target)
    at_source, at_target = next(sources, None), next(targets, None)
    for s, t in paired:
        while at_source is not None and at_source[0] < s:
            found.skip(at_source[0])
            at_source = next(sources, None)
        while at_target is not None and at_target[0] < t:
            found.extra += 1
            at_target = next(targets, None)
        copy = at_target if at_target is not None and at_target[0] == t else None
        if at_source is not None and at_source[0] == s:  # else deleted: cannot be checked
            found.checked += 1
            if copy is None:
                found.mismatch(s, t, MISSING)
            elif copy[1] != at_source[1]:
                found.mismatch(s, t, ALTERED)
            at_source = next(sources, None)
        if copy is not None:
            at_target = next(targets, None)
    while at_source is not None:
        found.skip(at_source[0])
        at_source = next(sources, None)
    found.extra += sum(1 for _ in targets) + (at_target is not None)
    return found


def compare_in_memory(paired: Sequence[tuple[int, int]], source: Mapping[int, bytes],
                      target: Mapping[int, bytes]) -> Comparison:
    """Compare pairs in any order with the (offset -> digest) records read of each side."""
    found = Comparison()
    for s, t in paired:
        if s not in source:
            continue  # deleted on the source since (retention): cannot be checked
        found.checked += 1
        if t not in target:
            found.mismatch(s, t, MISSING)
        elif target[t] != source[s]:
            found.mismatch(s, t, ALTERED)
    mirrored = {s for s, _ in paired}
    for s in sorted(source):
        if s not in mirrored:
            found.skip(s)
    written = {t for _, t in paired}
    found.extra = sum(1 for t in target if t not in written)
    return found
