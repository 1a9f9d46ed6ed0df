"""Aligning a partition another mirror already copied (pure): which target offset holds
each source record.

To adopt a partition that MirrorMaker 2 (at-least-once) mirrored, Ferry reads the source
partition and its remote partition as `(offset, digest)` streams (`ferry.core.verify.digest`),
in increasing offset order with any gaps, and pairs them record by record. What `align`
yields are the pairs as offset-map segments and, apart, what does not pair:

- **doubled**: a target record equal to a source record already paired (MM2 re-sent a run
  after a restart). A source record maps to its *first* copy; later copies are doubled.
- **missing**: a source record with no copy on the target (never sent, remote compacted).
- **extra**: a target record with no source record (source compacted or deleted since,
  foreign writes).
- **altered**: a source record and a target record at the same place that differ, neither
  seen elsewhere within the windows. The pair is not mapped.

The algorithm: two cursors, one per side. While the heads are equal they pair (the hot
path: no window, no index, O(1) per record). When they differ:

1. the target head equals one of the last `window` paired source records: doubled (a
   running replay is followed record by record, so the copy is attributed to the right
   source record even when digests repeat);
2. else each side's lookahead is filled to `window` records (head included), indexed by
   digest: if the target head lies `a` records ahead in the source lookahead, the `a`
   source records before it are missing; if the source head lies `b` records ahead in the
   target lookahead, the `b` target records before it are extra (the shorter skip wins,
   missing on a tie);
3. else the two heads are an altered pair and both sides advance.

Equal heads always pair first, so identical records repeating in the source pair one to
one in order. Memory is O(window) whatever the partition size: the lookaheads, a ring of
the last `window` paired source records and a digest index over it (rebuilt lazily at a
mismatch, amortised O(1) per record). Runs of missing or extra records longer than the
window cannot be recognised and come out as altered pairs: start both reads at
corresponding positions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass

from ferry.core.offsetmap import ADOPTED_LANE, MAX_ENTRY_SEGMENTS, MapEntry, Segment

MISSING, DOUBLED, EXTRA, ALTERED = "missing", "doubled", "extra", "altered"

Record = tuple[int, bytes]
"""(offset, digest) of one record."""


@dataclass(frozen=True)
class Finding:
    """Records that do not pair, as half-open offset ranges from the first record to after
    the last. Consecutive findings of one kind (nothing else between them in either
    stream; for doubled, copies of consecutive paired source records) are one finding, so
    `count` (the records in it) is below the range's length where offsets have gaps."""

    kind: str
    """MISSING, DOUBLED, EXTRA or ALTERED."""
    source_start: int | None
    """Missing or altered source records; for doubled, the source records copied. None
    for extra."""
    source_end: int | None
    target_start: int | None
    """Doubled, extra or altered target records. None for missing."""
    target_end: int | None
    count: int


@dataclass
class AlignmentSummary:
    """Records per outcome. matched + missing + altered is the source's record count;
    matched + doubled + extra + altered the target's. Complete once `align` is exhausted."""

    matched: int = 0
    missing: int = 0
    doubled: int = 0
    extra: int = 0
    altered: int = 0
    last_source: int | None = None
    """The highest source offset paired; None when none was."""
    last_target: int | None = None
    """The highest target offset paired or classified; None for an empty target."""


def align(source: Iterable[Record], target: Iterable[Record], *, window: int = 100_000,
          summary: AlignmentSummary | None = None) -> Iterator[Segment | Finding]:
    """Pair the source records with the target records holding their copies.

    Yields Segments (maximal runs where both offsets advance by exactly one; a gap on either
    side starts a new one), strictly increasing and disjoint on both sides, interleaved in
    stream order with Findings once they can no longer grow. Doubled target records never
    appear in segments. Lazy: it reads at most `window` records of either side beyond what
    it has yielded or is extending, and remembers the last `window` paired source records
    (memory about 600 bytes per window slot, whatever the partition size). Fills `summary`,
    if given, when exhausted. ValueError for a window below 1 (at the call) and for offsets
    that do not increase or are negative (when reached).
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    return _Aligner(source, target, window).run(summary)


def _increasing(records: Iterable[Record], side: str) -> Iterator[Record]:
    last = -1
    for record in records:
        if record[0] <= last:
            raise ValueError(f"{side} offsets must increase and be at least 0: "
                             f"{record[0]} after {last}")
        last = record[0]
        yield record


class _Lookahead:
    """One side's records pulled beyond its head, indexed by digest. Positions count the
    records that entered the buffer; only their differences mean anything."""

    __slots__ = ("base", "buffer", "first", "later", "records")

    def __init__(self, records: Iterator[Record]) -> None:
        self.records = records
        self.buffer: deque[Record] = deque()
        self.first: dict[bytes, int] = {}  # digest -> position of its first buffered record
        self.later: dict[bytes, deque[int]] = {}  # digest -> positions of repeats after it
        self.base = 0  # position of buffer[0]

    def next(self) -> Record | None:
        """The side's next record (None at its end)."""
        if not self.buffer:
            return next(self.records, None)
        record = self.buffer.popleft()
        self.base += 1
        digest = record[1]
        repeats = self.later.get(digest)
        if repeats:
            self.first[digest] = repeats.popleft()
            if not repeats:
                del self.later[digest]
        else:
            del self.first[digest]
        return record

    def fill(self, size: int) -> None:
        buffer, first = self.buffer, self.first
        while len(buffer) < size:
            record = next(self.records, None)
            if record is None:
                return
            position = self.base + len(buffer)
            buffer.append(record)
            if record[1] in first:
                self.later.setdefault(record[1], deque()).append(position)
            else:
                first[record[1]] = position

    def distance(self, digest: bytes) -> int | None:
        """How many buffered records precede the first one with `digest`; None if none has."""
        position = self.first.get(digest)
        return None if position is None else position - self.base


class _Aligner:
    """The state `align` keeps; `run` holds the hot path, `_resolve` the rest."""

    def __init__(self, source: Iterable[Record], target: Iterable[Record], window: int) -> None:
        self.window = window
        self.source = _Lookahead(_increasing(source, "source"))
        self.target = _Lookahead(_increasing(target, "target"))
        self.paired: list[Record] = []  # source record of pairing n at [n % window]
        self.recent: dict[bytes, int] = {}  # digest -> its latest pairing number, built lazily
        self.indexed = 0  # pairings below this number are in `recent`
        self.replay_next = -1  # pairing a running replay copies next
        self.counts = {MISSING: 0, DOUBLED: 0, EXTRA: 0, ALTERED: 0}
        self.last_target = -1
        # the finding that may still grow: kind, source range, target range, count, copy
        self.kind: str | None = None
        self.ranges: list[int] = [-1, -1, -1, -1]
        self.count = 0
        self.copy = -1

    def run(self, summary: AlignmentSummary | None) -> Iterator[Segment | Finding]:
        window, paired = self.window, self.paired
        source, target = self.source, self.target
        sources, targets = source.records, target.records
        sbuffer, tbuffer = source.buffer, target.buffer
        n = 0  # pairings so far
        start_s = start_t = -1  # the open segment: starts, count, next offsets
        count = 0
        next_s = next_t = -1
        s = next(sources, None)
        t = next(targets, None)
        while s is not None and t is not None:
            if s[1] == t[1]:
                if s[0] == next_s and t[0] == next_t:
                    count += 1
                    next_s += 1
                    next_t += 1
                else:
                    if count:
                        yield Segment(start_s, start_t, count)
                    if self.kind is not None:
                        yield self._flush()
                    start_s, start_t, count = s[0], t[0], 1
                    next_s, next_t = start_s + 1, start_t + 1
                if n < window:
                    paired.append(s)
                else:
                    paired[n % window] = s
                n += 1
                s = source.next() if sbuffer else next(sources, None)
                t = target.next() if tbuffer else next(targets, None)
            else:
                if count:  # whatever differs lies between this segment and the next
                    yield Segment(start_s, start_t, count)
                    self.last_target = next_t - 1
                    count, next_s, next_t = 0, -1, -1
                s, t = yield from self._resolve(s, t, n)
        if count:
            yield Segment(start_s, start_t, count)
            self.last_target = max(self.last_target, next_t - 1)
        while t is not None:  # the source ended
            copy = self._copied(t[1], n)
            yield from self._doubled(t, copy) if copy >= 0 else self._note(EXTRA, None, t)
            t = target.next()
        while s is not None:  # the target ended
            yield from self._note(MISSING, s, None)
            s = source.next()
        if self.kind is not None:
            yield self._flush()
        if summary is not None:
            summary.matched = n
            summary.missing, summary.doubled = self.counts[MISSING], self.counts[DOUBLED]
            summary.extra, summary.altered = self.counts[EXTRA], self.counts[ALTERED]
            summary.last_source = paired[(n - 1) % window][0] if n else None
            summary.last_target = self.last_target if self.last_target >= 0 else None

    def _resolve(self, s: Record, t: Record, n: int
                 ) -> Generator[Finding, None, tuple[Record | None, Record | None]]:
        """Classify records from heads `s` and `t` that differ; the new heads."""
        source, target = self.source, self.target
        copy = self._copied(t[1], n)
        if copy >= 0:
            yield from self._doubled(t, copy)
            return s, target.next()
        source.fill(self.window - 1)
        target.fill(self.window - 1)
        missing, extra = source.distance(t[1]), target.distance(s[1])
        if missing is not None and (extra is None or missing <= extra):
            head: Record | None = s
            for _ in range(missing + 1):
                assert head is not None  # within the filled lookahead
                yield from self._note(MISSING, head, None)
                head = source.next()
            return head, t
        if extra is not None:
            head = t
            for _ in range(extra + 1):
                assert head is not None
                yield from self._note(EXTRA, None, head)
                head = target.next()
            return s, head
        yield from self._note(ALTERED, s, t)
        return source.next(), target.next()

    def _copied(self, digest: bytes, n: int) -> int:
        """The pairing among the last `window` (of `n`) whose source record has `digest`,
        preferring the one a running replay copies next, else the latest; -1 if none."""
        window, low = self.window, max(0, n - self.window)
        replay = self.replay_next
        if low <= replay < n and self.paired[replay % window][1] == digest:
            return replay
        if n - self.indexed > window or len(self.recent) > 2 * window:
            self.recent.clear()
            self.indexed = low
        recent, paired = self.recent, self.paired
        for number in range(self.indexed, n):
            recent[paired[number % window][1]] = number
        self.indexed = n
        number = recent.get(digest, -1)
        return number if number >= low else -1

    def _doubled(self, t: Record, copy: int) -> Iterator[Finding]:
        self.replay_next = copy + 1
        yield from self._note(DOUBLED, self.paired[copy % self.window], t, copy)

    def _note(self, kind: str, s: Record | None, t: Record | None,
              copy: int = -1) -> Iterator[Finding]:
        """Add one record (or pair) to the finding that may still grow, or start another."""
        self.counts[kind] += 1
        if t is not None:
            self.last_target = t[0]
        ranges = self.ranges
        if self.kind == kind and (kind != DOUBLED or copy == self.copy + 1):
            if s is not None:
                ranges[1] = s[0] + 1
            if t is not None:
                ranges[3] = t[0] + 1
            self.count += 1
        else:
            if self.kind is not None:
                yield self._flush()
            self.kind, self.count = kind, 1
            ranges[0], ranges[1] = (s[0], s[0] + 1) if s is not None else (-1, -1)
            ranges[2], ranges[3] = (t[0], t[0] + 1) if t is not None else (-1, -1)
        self.copy = copy

    def _flush(self) -> Finding:
        assert self.kind is not None
        ss, se, ts, te = self.ranges
        finding = Finding(self.kind, ss if ss >= 0 else None, se if se >= 0 else None,
                          ts if ts >= 0 else None, te if te >= 0 else None, self.count)
        self.kind = None
        return finding


def adopted_entries(segments: Iterable[Segment], *, flow: str, run_id: str, source_topic: str,
                    source_partition: int, target_topic: str, target_partition: int,
                    covered_start: int, covered_end: int, committed_at_ms: int,
                    chunk_records: int = 50_000, source_id: str = "",
                    target_id: str = "") -> Iterator[MapEntry]:
    """Offset-map entries (lane ADOPTED_LANE, bytes 0) recording `segments`, the pairs of
    one partition's adopted history, in source order.

    Together the entries cover `[covered_start, covered_end)` contiguously and in order;
    each holds at most `chunk_records` records (a longer segment is split) and at most
    MAX_ENTRY_SEGMENTS segments, each wholly inside its covered range; an entry ends where
    the next one's first segment starts. `target_end` is the entry's last segment's end.
    Without segments: one entry covering the whole range, target_end None. An empty range
    yields nothing. ValueError for a segment outside the range, out of order or
    overlapping the one before on either side, or for a bad range or chunk size. Streams:
    holds one entry's segments at a time.
    """
    if chunk_records < 1:
        raise ValueError(f"chunk_records must be at least 1, got {chunk_records}")
    if covered_start > covered_end:
        raise ValueError(f"covered range {covered_start}..{covered_end} is reversed")
    if covered_start == covered_end:
        for segment in segments:
            raise ValueError(f"segment {segment} lies outside the empty covered range "
                             f"at {covered_start}")
        return

    def entry(start: int, end: int, chunk: list[Segment]) -> MapEntry:
        return MapEntry(flow, run_id, ADOPTED_LANE, source_topic, source_partition,
                        target_topic, target_partition, start, end, tuple(chunk),
                        committed_at_ms, bytes=0,
                        target_end=chunk[-1].target_end if chunk else None,
                        source_id=source_id, target_id=target_id)

    start = covered_start
    chunk: list[Segment] = []
    records = 0
    full = False  # the chunk waits only for the next segment's start to end its range
    source_end, target_end = covered_start, -1
    for segment in segments:
        if segment.count < 1 or not covered_start <= segment.source_start \
                or segment.source_end > covered_end:
            raise ValueError(f"segment {segment} is empty or lies outside the covered range "
                             f"{covered_start}..{covered_end}")
        if segment.source_start < source_end or segment.target_start < target_end:
            raise ValueError(f"segment {segment} is out of order: it starts before source "
                             f"{source_end} or target {target_end}")
        source_end, target_end = segment.source_end, segment.target_end
        while segment.count:
            if full:
                yield entry(start, segment.source_start, chunk)
                start, chunk, records, full = segment.source_start, [], 0, False
            take = min(segment.count, chunk_records - records)
            chunk.append(Segment(segment.source_start, segment.target_start, take))
            records += take
            full = records == chunk_records or len(chunk) == MAX_ENTRY_SEGMENTS
            segment = Segment(segment.source_start + take, segment.target_start + take,
                              segment.count - take)
    yield entry(start, covered_end, chunk)
