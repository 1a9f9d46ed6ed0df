"""The planner: positions + watermarks + limits -> half-open ranges per source partition.

A pure function. `position` is the next source offset to copy (None for a partition never
mirrored); `Watermarks.high` is the partition's last stable offset (LSO, the read_committed
end), never the high watermark, so a range never waits behind an open transaction.

- New partition: start at the low watermark, or with `auto.offset.reset=latest` at the
  high one (an empty *start* range records that position, so records produced after this
  run are not skipped by the next).
- `position < low`: retention deleted `[position, low)` before it was mirrored: a `Gap`,
  always reported. With `on_gap="continue"` copying resumes at `low`; with `"fail"` the
  partition gets no range (the caller records the gap, then fails the run).
- `position > high`: the source partition is behind what was already mirrored (the topic
  was deleted and recreated, or truncated): `PositionAheadError`, never a guess.
- A backlog larger than `max_records` is split into several ranges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ferry.errors import TerminalError


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Watermarks:
    """`low`: log start offset; `high`: last stable offset (end for read_committed)."""

    low: int
    high: int


@dataclass(frozen=True, order=True)
class Range:
    """Source offsets `[start, end)` of one partition. `start == end` only for a start
    marker (a new partition under `latest`): nothing to copy, a position to record."""

    topic: str
    partition: int
    start: int
    end: int
    skip_from: int | None = None
    """Set on the first range after an accepted gap: the mirrored position it skips from."""
    target_topic: str | None = None
    """Where the records go; None: the flow's remote topic (a backfill may name another)."""
    expect: int | None = None
    """The position the lane must find committed before it copies this range: the one the
    plan was made from (`skip_from` after an accepted gap, else `start`), or None for a
    partition that had none (never mirrored). A lane that finds no position where one is
    expected copies nothing (an earlier range is not committed, or the position vanished):
    starting from scratch would copy twice or leave a hole."""
    chained: bool = False
    """`expect` is where an earlier range of the same plan ends (a backfill's later chunk,
    run as a job of its own), not a position the plan read: a lower position means that
    range is not committed yet, and the copy fails for a re-plan. Otherwise a position
    below `expect` was moved back after the plan read it (a reset or an adoption: copies
    only move positions forward), and the partition is left as written (handed over)."""
    source_id: str = ""
    """The source topic's ID when planned (Kafka's topic ID; empty: unknown), recorded with
    each position so a deleted-and-recreated source topic is detected (G10)."""
    target_id: str = ""
    """The destination topic's ID when planned (empty: unknown), recorded with each
    offset-map entry: entries of a remote topic deleted since never answer look-ups."""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def span(self) -> int:
        """Offsets covered; records may be fewer (markers, compaction, aborted)."""
        return self.end - self.start


@dataclass(frozen=True, order=True)
class Gap:
    """Source offsets `[start, end)` deleted before they were mirrored (G6)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Limits:
    max_records: int = 1_000_000
    reset: str = "earliest"  # for new partitions: earliest | latest
    on_gap: str = "fail"  # fail | continue


@dataclass(frozen=True)
class Plan:
    ranges: tuple[Range, ...] = ()
    gaps: tuple[Gap, ...] = field(default=())

    @property
    def copies(self) -> tuple[Range, ...]:
        """Ranges with records to copy (start markers excluded)."""
        return tuple(r for r in self.ranges if r.span > 0)

    @property
    def is_idle(self) -> bool:
        """Nothing to copy and nothing to record: no job needs to start."""
        return not self.ranges and not self.gaps

    @property
    def span(self) -> int:
        return sum(r.span for r in self.ranges)


class PositionAheadError(TerminalError):
    """The mirrored position is past the source's end: the source was recreated."""

    def __init__(self, tp: TopicPartition, position: int, high: int) -> None:
        self.tp, self.position, self.high = tp, position, high
        super().__init__(
            f"source partition {tp} ends at offset {high} but offsets up to {position} were "
            f"already mirrored: the source topic was deleted and recreated (or truncated). "
            f"Nothing was copied. To mirror the new topic from its start, either delete the "
            f"remote topic on the target (the flow's positions on it go with it), or keep it "
            f"and run `ferry positions reset CONFIG --flow FLOW --topic {tp.topic} --to "
            f"earliest --execute`; then run again.")


def plan(
    positions: Mapping[TopicPartition, int | None],
    watermarks: Mapping[TopicPartition, Watermarks],
    limits: Limits = Limits(),
) -> Plan:
    """The ranges (and gaps) of one run, for every partition in `watermarks`.

    Partitions absent from `positions` are new. Raises PositionAheadError for the first
    partition whose position is past its end (all such partitions are named).
    """
    if limits.max_records <= 0:
        raise ValueError("max_records must be above 0")
    ranges: list[Range] = []
    gaps: list[Gap] = []
    ahead: list[PositionAheadError] = []
    for tp in sorted(watermarks):
        marks = watermarks[tp]
        position = positions.get(tp)
        if position is None:
            start = marks.high if limits.reset == "latest" else marks.low
            if start == marks.high:
                ranges.append(Range(tp.topic, tp.partition, start, start))
                continue
        elif position > marks.high:
            ahead.append(PositionAheadError(tp, position, marks.high))
            continue
        elif position < marks.low:
            gaps.append(Gap(tp.topic, tp.partition, position, marks.low))
            if limits.on_gap != "continue":
                continue
            split = _split(tp, marks.low, marks.high, limits.max_records) or [
                Range(tp.topic, tp.partition, marks.low, marks.low)]
            split[0] = replace(split[0], skip_from=position, expect=position)
            ranges.extend(split)
            continue
        else:
            start = position
        split = _split(tp, start, marks.high, limits.max_records)
        if split and position is None:
            split[0] = replace(split[0], expect=None)
        ranges.extend(split)
    if ahead:
        if len(ahead) == 1:
            raise ahead[0]
        names = ", ".join(str(e.tp) for e in ahead)
        raise TerminalError(f"{len(ahead)} source partitions ({names}) end before what was "
                            f"already mirrored; first: {ahead[0]}")
    return Plan(tuple(ranges), tuple(gaps))


def _split(tp: TopicPartition, start: int, end: int, max_records: int) -> list[Range]:
    """`[start, end)` in ranges of at most `max_records`, each expecting its own start."""
    return [Range(tp.topic, tp.partition, s, min(s + max_records, end), expect=s)
            for s in range(start, end, max_records)]


def describe_gaps(gaps: tuple[Gap, ...]) -> str:
    """The gaps in one line: `topic-partition offsets a..b (n records)`, `; `-separated."""
    return "; ".join(f"{g.topic}-{g.partition} offsets {g.start}..{g.end - 1} ({g.count} "
                     "records)" for g in gaps)
