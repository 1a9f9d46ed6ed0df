"""Take over from MirrorMaker 2 or 1 in place (`ferry adopt`): no re-copy, no seam.

1. **The old mirror's progress.** MM2's is in Kafka Connect's offset storage
   (`mm2-offsets.<source>.internal` on the target in dedicated mode, or the Connect
   cluster's offsets topic); MM1's is its consumer group's committed offsets on the
   source. It is read twice, `settle_s` apart: progress that still moves means the old
   mirror still runs, and nothing is adopted.
2. **Ferry's own positions.** A partition Ferry already has a position for (other than an
   earlier adoption's) refuses the whole adoption: the flow mirrored already.
3. **Alignment.** Each partition the old mirror has progress for is paired record by
   record with its remote partition (`ferry.core.alignment`): the source from its log
   start to its last stable offset, the target from its first record as recent as the
   source's first record (older history cannot be paired). What cannot be paired is
   reported by kind and offsets: records the old mirror *doubled* (at-least-once replays),
   *missing* ones, *extra* target records and *altered* pairs.
4. **Where Ferry continues:** one past the last source record with a copy on the target.
   That is the old mirror's progress when it stopped cleanly; past it when it copied
   records after its last flush (copying them again would double them); before it when
   records it counted are not on the target (they are copied again, never lost).
5. **Executed:** per partition, one transaction on the target holds the adopted offset-map
   entries (lane -1, run `adopted-<mm2|mm1>-<time>`; translation, `ferry offsets` and
   `ferry verify` then cover that history exactly) and the position. The next cycle's job
   records those entries into the Delta offset map. Without `execute` nothing is written.

Memory stays flat in partition size: both sides stream, the alignment keeps bounded
windows, and the pairs spool to a temporary file until the position is known.
"""

from __future__ import annotations

import logging
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from ferry.config import Flow
from ferry.core.alignment import (
    MISSING,
    AlignmentSummary,
    Finding,
    adopted_entries,
    align,
)
from ferry.core.internal import positions_group, reader_group
from ferry.core.offsetmap import Segment
from ferry.core.planner import TopicPartition
from ferry.errors import TerminalError, UsageError
from ferry.steps.ports import KafkaCluster

log = logging.getLogger(__name__)
MM2, MM1 = "mm2", "mm1"
ADOPTED, WOULD_ADOPT, ALREADY, NO_REMOTE = "adopted", "would-adopt", "already-adopted", \
    "no-remote-topic"
FINDINGS_SHOWN = 50
"""Findings listed per partition in the report (all are counted)."""


def adoption_owner(flow: Flow) -> str:
    """The transactional id adoptions commit positions under (fenced by the first lane)."""
    return f"ferry.{flow.source}->{flow.target}.adopt"


def default_offsets_topic(flow: Flow) -> str:
    """Where MM2 in dedicated mode keeps its progress for this flow (on the target)."""
    return f"mm2-offsets.{flow.source}.internal"


@dataclass
class PartitionAdoption:
    """What adopting one source partition found and did."""

    topic: str
    partition: int
    remote: str
    progress: int
    """The old mirror's next source offset to copy, as it stored it."""
    position: int = 0
    """Where Ferry continues copying."""
    source_start: int = 0
    source_end: int = 0
    target_start: int = 0
    target_end: int = 0
    matched: int = 0
    missing: int = 0
    doubled: int = 0
    extra: int = 0
    altered: int = 0
    after_progress: int = 0
    """Records the old mirror copied at or after its stored progress (after its last
    flush): adopted, so they are not copied again."""
    to_copy: int = 0
    """Source records from the position on: the next cycle copies them."""
    entries: int = 0
    status: str = WOULD_ADOPT
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [asdict(f) for f in self.findings]
        return data

    def text(self) -> str:
        line = (f"  {self.topic}-{self.partition} -> {self.remote}-{self.partition}: "
                f"{self.status}")
        if self.status in (ALREADY, NO_REMOTE):
            return line
        line += (f"; old mirror at {self.progress}, Ferry continues at {self.position}; "
                 f"{self.matched:,} records paired, {self.missing:,} missing, "
                 f"{self.doubled:,} doubled, {self.extra:,} extra, {self.altered:,} altered"
                 f"; {self.after_progress:,} copied after its last flush; "
                 f"{self.to_copy:,} left to copy ({self.seconds:.1f}s)")
        for f in self.findings:
            line += "\n    " + _finding_text(f)
        return line


def _finding_text(f: Finding) -> str:
    source = f"source {f.source_start}..{(f.source_end or 0) - 1}" \
        if f.source_start is not None else ""
    target = f"target {f.target_start}..{(f.target_end or 0) - 1}" \
        if f.target_start is not None else ""
    return f"{f.kind}: {f.count:,} records, " + ", ".join(x for x in (source, target) if x)


@dataclass
class AdoptReport:
    flow: str
    old: str
    executed: bool
    run_id: str
    progress_from: str
    partitions: list[PartitionAdoption] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"flow": self.flow, "from": self.old, "executed": self.executed,
                "run_id": self.run_id, "progress_from": self.progress_from,
                "partitions": [p.to_json() for p in self.partitions]}

    def text(self) -> str:
        lines = [f"flow {self.flow}: adopting {self.old.upper()}'s progress from "
                 f"{self.progress_from}" + ("" if self.executed else " (dry run)")]
        lines += [p.text() for p in self.partitions]
        return "\n".join(lines)


def adopt(flow: Flow, old: str, *, offsets_topic: str | None = None,
          connector: str | None = None, group: str | None = None, settle_s: float = 65.0,
          execute: bool = False, window: int = 100_000,
          sleep: Callable[[float], None] = time.sleep) -> AdoptReport:
    """Adopt the old mirror's progress for `flow` (module docstring). Refused (TerminalError)
    while that progress moves or when Ferry has positions of its own there."""
    source, target = KafkaCluster(flow.source_admin), KafkaCluster(flow.target_admin)
    read, where = _progress_reader(flow, old, target, source, offsets_topic, connector, group)
    first = read()
    if not first:
        raise TerminalError(f"flow {flow.name}: no progress of {old.upper()} for "
                            f"{flow.source}'s topics in {where}")
    sleep(settle_s)
    second = read()
    moving = sorted(tp for tp in set(first) | set(second) if first.get(tp) != second.get(tp))
    if moving:
        names = ", ".join(f"{t}-{p} ({first.get((t, p))} -> {second.get((t, p))})"
                          for t, p in moving[:10])
        raise TerminalError(f"flow {flow.name}: {old.upper()}'s progress still moves ({names}"
                            f"): stop it first, then adopt")
    run_id = f"adopted-{old}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    report = AdoptReport(flow.name, old, execute, run_id, where)
    wanted = {tp: at for tp, at in second.items() if flow.topics.accepts(tp[0])}
    report.partitions = [PartitionAdoption(t, p, flow.remote_topic(t), at)
                         for (t, p), at in sorted(wanted.items())]
    _refuse_ferry_positions(flow, target, report.partitions)
    if execute:
        target.ensure_offset_map_topic(flow)
    writer = None
    try:
        if execute:
            from ferry.kafka.adoption import AdoptionWriter

            writer = AdoptionWriter(flow, adoption_owner(flow))
        for part in report.partitions:
            if part.status == WOULD_ADOPT:
                _adopt_partition(flow, source, target, part, run_id, window, writer)
            log.info("%s", part.text().splitlines()[0].strip(),
                     extra={"flow": flow.name, "topic": part.topic,
                            "partition": part.partition})
    finally:
        if writer is not None:
            writer.close()
    return report


def _progress_reader(flow: Flow, old: str, target: KafkaCluster, source: KafkaCluster,
                     offsets_topic: str | None, connector: str | None, group: str | None
                     ) -> tuple[Callable[[], dict[tuple[str, int], int]], str]:
    if old == MM2:
        from ferry.kafka.adoption import connect_progress

        topic = offsets_topic or default_offsets_topic(flow)

        def read_mm2() -> dict[tuple[str, int], int]:
            try:
                return connect_progress(flow.target_admin, topic, flow.source,
                                        reader_group(flow, "adopt"), connector)
            except ValueError as exc:
                raise UsageError(str(exc)) from None

        return read_mm2, f"{topic} on {flow.target}"
    if old == MM1:
        if not group:
            raise UsageError("--from mm1 needs --group: MirrorMaker 1's consumer group "
                             "(its consumer.config's group.id)")

        def read_mm1() -> dict[tuple[str, int], int]:
            return {tp: offset for tp, (offset, _) in source.committed(group).items()
                    if offset >= 0}

        return read_mm1, f"group {group} on {flow.source}"
    raise UsageError(f"--from {old!r}: use mm2 or mm1")


def _refuse_ferry_positions(flow: Flow, target: KafkaCluster,
                            parts: list[PartitionAdoption]) -> None:
    """Mark partitions an earlier adoption took; refuse when Ferry has positions there."""
    from ferry.kafka.lane_state import recorded_owner

    committed = target.committed(positions_group(flow),
                                 [(p.remote, p.partition) for p in parts])
    owner = adoption_owner(flow)
    taken = []
    for part in parts:
        found = committed.get((part.remote, part.partition))
        if found is None or found[0] < 0:
            continue
        if recorded_owner(found[1]) == owner:
            part.status, part.position = ALREADY, found[0]
        else:
            taken.append(f"{part.remote}-{part.partition}@{found[0]}")
    if taken:
        raise TerminalError(
            f"flow {flow.name}: Ferry already mirrors {', '.join(taken[:10])} (positions in "
            f"{positions_group(flow)}): adopt is for partitions Ferry has not mirrored; "
            "`ferry positions reset` moves Ferry's own positions")


def _adopt_partition(flow: Flow, source: KafkaCluster, target: KafkaCluster,
                     part: PartitionAdoption, run_id: str, window: int, writer: Any) -> None:
    from ferry.kafka.records import digest_stream

    started = time.monotonic()
    tp, remote = TopicPartition(part.topic, part.partition), \
        TopicPartition(part.remote, part.partition)
    if part.remote not in target.topics():
        part.status = NO_REMOTE
        return
    at_source, at_target = source.watermarks([tp])[tp], target.watermarks([remote])[remote]
    low, high, t_low, t_high = at_source.low, at_source.high, at_target.low, at_target.high
    group = reader_group(flow, "adopt")
    first = source.timestamp_at(part.topic, part.partition, low, group) if high > low else None
    t_start = t_low if first is None else max(t_low, target.offsets_at([remote], first)[remote])
    part.source_start, part.source_end, part.target_start, part.target_end = \
        low, high, t_start, t_high
    summary = AlignmentSummary()
    pairs = align(digest_stream(flow.source_admin, part.topic, part.partition, low, high, group),
                  digest_stream(flow.target_admin, part.remote, part.partition, t_start, t_high,
                                group), window=window, summary=summary)
    with tempfile.TemporaryFile(prefix="ferry-adopt-") as spool:
        shown, tail = _spool(pairs, spool, part)
        part.matched, part.doubled, part.extra, part.altered = \
            summary.matched, summary.doubled, summary.extra, summary.altered
        part.position = low if summary.last_source is None else summary.last_source + 1
        # Source records after the last one paired are not lost: the next cycle copies them.
        part.to_copy = sum(f.count for f in tail if f.kind == MISSING)
        part.missing = summary.missing - part.to_copy
        shown += [f for f in tail if f.kind != MISSING]
        part.findings = shown[:FINDINGS_SHOWN]
        if writer is not None:
            ids = source.topic_ids([part.topic])
            target_ids = target.topic_ids([part.remote])
            entries = adopted_entries(
                _unspool(spool), flow=flow.name, run_id=run_id, source_topic=part.topic,
                source_partition=part.partition, target_topic=part.remote,
                target_partition=part.partition, covered_start=low,
                covered_end=part.position, committed_at_ms=int(time.time() * 1000),
                source_id=ids.get(part.topic, ""), target_id=target_ids.get(part.remote, ""))
            part.entries = writer.write(entries, part.remote, part.partition, part.position,
                                        t_high, ids.get(part.topic, ""))
            part.status = ADOPTED
    part.seconds = round(time.monotonic() - started, 3)


def _spool(pairs: Iterator[Segment | Finding], spool: IO[bytes], part: PartitionAdoption
           ) -> tuple[list[Finding], list[Finding]]:
    """Write the segments to `spool` (three int64 each) and count the pairs at or after the
    old mirror's progress. Returns the first findings before the last pair (at most
    FINDINGS_SHOWN, each logged) and every finding after it."""
    shown: list[Finding] = []
    tail: list[Finding] = []
    batch = array("q")
    for item in pairs:
        if isinstance(item, Segment):
            batch.extend((item.source_start, item.target_start, item.count))
            part.after_progress += max(0, item.source_end - max(item.source_start,
                                                                 part.progress))
            if len(batch) >= 30_000:
                batch.tofile(spool)
                del batch[:]
            for finding in tail:
                log.warning("%s-%s: %s", part.topic, part.partition, _finding_text(finding),
                            extra={"topic": part.topic, "partition": part.partition})
            shown += tail[:FINDINGS_SHOWN - len(shown)]
            tail = []
        else:
            tail.append(item)
    batch.tofile(spool)
    spool.flush()
    return shown, tail


def _unspool(spool: IO[bytes]) -> Iterator[Segment]:
    spool.seek(0)
    while True:
        batch = array("q")
        data = spool.read(8 * 30_000)
        if not data:
            return
        batch.frombytes(data)
        for i in range(0, len(batch), 3):
            yield Segment(batch[i], batch[i + 1], batch[i + 2])
