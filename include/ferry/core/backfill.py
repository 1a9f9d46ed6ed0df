"""Backfills: copy a chosen window of source offsets, in chunks, into the flow's remote topic
or a topic of their own (pure: no clients).

A backfill request names a flow, a topic regex, a start (`earliest` | offset | ISO time), an
end (`latest` | offset | ISO time, exclusive) and a destination. The adapter resolves the
bounds to offsets per partition (times through the source's time index) and reads what the
destination already holds; `plan_backfill` then decides, per partition:

- **Gap (G6)**: the window starts before the source's log start (an explicit offset, or
  `earliest` when the destination once held records since deleted from the source): the
  missing offsets are a `Gap`, always reported; with `on_gap="fail"` nothing is copied.
- **Overlap**: source offsets the destination already holds (live offset-map entries, or
  offsets below the destination's committed position) are never written twice: refused,
  naming the offsets and how to proceed.
- **Order**: a partition only grows at its end. Into a destination that already holds
  later source offsets, writing earlier ones would put them out of order: refused.
- **The flow's remote topic** is the flow's own mirror: a backfill into it must continue
  the flow exactly where it stands (its position, or nothing mirrored yet), so the next
  scheduled run neither copies twice nor skips. Into a topic of its own a backfill may
  leave a hole after an earlier window (the position moves with the first chunk).
- **Chunks**: each partition's window is cut into pieces of at most `chunk_records`
  offsets; chunk k holds the k-th piece of every partition, so chunks run in order and each
  starts where the previous one ended.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ferry.core.planner import Gap, Range, TopicPartition
from ferry.errors import TerminalError, UsageError

EARLIEST, LATEST, OFFSET, TIME = "earliest", "latest", "offset", "time"
DESTINATION_TEMPLATE = "{topic}"


@dataclass(frozen=True)
class Bound:
    """One end of the window: `earliest`/`latest`, a source offset, or a time (ms)."""

    kind: str
    value: int | None = None

    def __str__(self) -> str:
        if self.kind == TIME and self.value is not None:
            return datetime.fromtimestamp(self.value / 1000, UTC).isoformat()
        return self.kind if self.value is None else str(self.value)


def parse_bound(text: str, name: str, *, start: bool) -> Bound:
    """`earliest` (start only), `latest` (end only), a non-negative offset, or an ISO-8601
    time (no zone: UTC). One-line UsageError naming `name` otherwise."""
    word = EARLIEST if start else LATEST
    value = str(text).strip()
    if value.lower() == word:
        return Bound(word)
    if re.fullmatch(r"\d+", value):
        return Bound(OFFSET, int(value))
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{name}={text!r}: give {word}, an offset (e.g. 1200) or an ISO "
                         f"time (e.g. 2026-11-26T08:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Bound(TIME, int(moment.timestamp() * 1000))


def destination_of(template: str, topic: str, remote: str) -> str:
    """The topic a source topic's records go to: the flow's remote topic when `template` is
    empty, else `template` with `{topic}` replaced by the source topic."""
    return template.replace(DESTINATION_TEMPLATE, topic) if template.strip() else remote


def check_destinations(template: str, topics: Sequence[str]) -> None:
    """Several source topics into one named topic would mix their partitions: refused."""
    if template.strip() and len(topics) > 1 and DESTINATION_TEMPLATE not in template:
        raise UsageError(f"target topic {template!r} would receive {len(topics)} source topics "
                         f"({', '.join(topics[:5])}): put {DESTINATION_TEMPLATE} in the name "
                         f"(e.g. investigation.{DESTINATION_TEMPLATE}) or narrow the topic "
                         f"regex to one topic")


@dataclass(frozen=True)
class Held:
    """Source offsets `[start, end)` whose records a destination partition holds (one live
    offset-map entry with records), and the run that wrote them."""

    start: int
    end: int
    run_id: str


@dataclass(frozen=True)
class PartitionWindow:
    """One source partition's window, resolved to offsets, and what its destination holds."""

    tp: TopicPartition
    destination: str
    is_remote: bool
    """The destination is the flow's own remote topic (the backfill continues the flow)."""
    low: int
    high: int
    """Source log start and last stable offset."""
    start: int
    end: int
    """Requested source offsets `[start, end)`; `start` may be below `low` (a gap)."""
    position: int | None
    """The destination's committed position (next source offset), None if it has none."""
    held: tuple[Held, ...] = ()


@dataclass(frozen=True)
class Refusal:
    tp: TopicPartition
    destination: str
    reason: str

    def text(self) -> str:
        return f"{self.tp} -> {self.destination}: {self.reason}"


@dataclass(frozen=True)
class BackfillPlan:
    chunks: tuple[tuple[Range, ...], ...] = ()
    gaps: tuple[Gap, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    empty: tuple[TopicPartition, ...] = ()
    """Partitions whose window holds no offsets."""
    windows: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    """The offsets each partition copies, after gaps."""

    @property
    def span(self) -> int:
        return sum(r.span for chunk in self.chunks for r in chunk)

    def refused(self) -> TerminalError:
        shown = "; ".join(r.text() for r in self.refusals[:5])
        more = f" (and {len(self.refusals) - 5} more)" if len(self.refusals) > 5 else ""
        return TerminalError(f"backfill refused, nothing was written: {shown}{more}")


def _fmt(start: int, end: int) -> str:
    return f"{start}..{end - 1}" if end - start > 1 else str(start)


def _refusal(window: PartitionWindow, start: int) -> str | None:
    """Why `[start, window.end)` may not be written into the destination, or None."""
    overlap = [h for h in window.held if h.start < window.end and h.end > start]
    if overlap:
        first, last = max(start, overlap[0].start), min(window.end, overlap[-1].end)
        runs = ", ".join(sorted({h.run_id for h in overlap})[:3])
        return (f"offsets {_fmt(first, last)} are already there (run {runs}). To proceed: "
                f"start at {last} (from={last}), or write into another topic (target topic), "
                f"or if {window.destination} was lost, delete it on the target first")
    later = [h for h in window.held if h.start >= window.end]
    if later:
        return (f"it already holds later offsets (from {later[0].start}); earlier ones would "
                f"be out of order. Write into another topic (target topic)")
    position = window.position
    if position is None and window.is_remote and window.low < start < window.end:
        # the flow's next cycle would start at the log start, after the backfill's records
        return (f"the flow has not mirrored it yet: starting at {start} would leave offsets "
                f"{_fmt(window.low, start)} unmirrored. To proceed: start at {window.low} "
                f"(from={window.low}), or write into another topic (target topic)")
    if position is None or position == start:
        return None
    if position > start:
        if position >= window.end:
            return (f"offsets {_fmt(start, window.end)} are already there (its position is "
                    f"{position}). To proceed: write into another topic (target topic)")
        return (f"offsets {_fmt(start, position)} are already there (its position is "
                f"{position}). To proceed: start at {position} (from={position}), or write "
                f"into another topic (target topic)")
    if window.is_remote:
        return (f"the flow stands at {position}: starting at {start} would leave offsets "
                f"{_fmt(position, start)} unmirrored. To proceed: start at {position} "
                f"(from={position}), or write into another topic (target topic)")
    return None


def plan_backfill(windows: Sequence[PartitionWindow], chunk_records: int,
                  on_gap: str = "fail") -> BackfillPlan:
    """The chunks, gaps and refusals of a backfill (see the module doc). A plan with
    refusals copies nothing; gaps under `on_gap="fail"` copy nothing either."""
    if chunk_records <= 0:
        raise UsageError(f"chunk records={chunk_records}: give a number above 0")
    gaps: list[Gap] = []
    refusals: list[Refusal] = []
    empty: list[TopicPartition] = []
    pieces: dict[TopicPartition, list[Range]] = {}
    copied: dict[TopicPartition, tuple[int, int]] = {}
    for window in sorted(windows, key=lambda w: w.tp):
        tp = window.tp
        if window.end > window.high:
            refusals.append(Refusal(tp, window.destination,
                                    f"to={window.end} is past the source's end {window.high}"))
            continue
        reason = _refusal(window, window.start)
        if reason is not None:
            refusals.append(Refusal(tp, window.destination, reason))
            continue
        if window.start < window.low:
            gaps.append(Gap(tp.topic, tp.partition, window.start, min(window.low, window.end)))
        begin = max(window.start, window.low)
        if begin >= window.end:
            empty.append(tp)
            continue
        # A position behind `begin` (inside an accepted gap, or before a hole left on
        # purpose in a topic of the backfill's own) moves with the first range's records.
        position = window.position
        skip_from = position if position is not None and position < begin else None
        cuts = range(begin, window.end, chunk_records)
        # Chunk k>1 expects chunk k-1 committed: run out of order, it copies nothing.
        pieces[tp] = [Range(tp.topic, tp.partition, s, min(s + chunk_records, window.end),
                            skip_from if s == begin else None, window.destination,
                            expect=position if s == begin else s, chained=s != begin)
                      for s in cuts]
        copied[tp] = (begin, window.end)
    if refusals or (gaps and on_gap != "continue"):
        return BackfillPlan((), tuple(gaps), tuple(refusals), tuple(empty), {})
    count = max((len(p) for p in pieces.values()), default=0)
    chunks = tuple(tuple(p[k] for p in pieces.values() if k < len(p)) for k in range(count))
    return BackfillPlan(chunks, tuple(gaps), (), tuple(empty), copied)
