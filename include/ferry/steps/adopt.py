"""Take over from MirrorMaker 2 or 1 in place (`ferry adopt`): no re-copy, no seam.

1. **The old mirror's progress.** MM2's is in Kafka Connect's offset storage on the
   target (where the config puts it, `Flow.mm2_offsets_topic`, or the Connect cluster's
   offsets topic the user names); MM1's is its consumer group's committed offsets on the
   source. It is read twice, `settle_s` apart: progress that still moves, or workers still
   members of their group (MM2's Connect workers, MM1's consumers), mean the old mirror
   still runs, and nothing is adopted.
2. **Ferry's own positions.** A partition Ferry already has a position for (other than an
   earlier adoption's) refuses the whole adoption: the flow mirrored already.
3. **Alignment.** Every partition of the flow's topics with stored progress or a remote
   partition is paired record by record with its remote partition (`ferry.core.alignment`):
   the source from its log start to its last stable offset, the target from its first
   record as recent as the source's first record (older history cannot be paired). What
   cannot be paired is reported by kind and offsets: records the old mirror *doubled*
   (at-least-once replays), *missing* ones, *extra* target records and *altered* pairs. An
   alignment that lost step, or a remote topic with fewer partitions than the source, is
   not adopted (`ferry.core.adoption` has the statuses and the rules).
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
from bisect import bisect_right
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import IO, Any

from ferry.config import Flow
from ferry.core.adoption import (
    FINDINGS_SHOWN,
    NO_PROGRESS,
    AdoptReport,
    AdoptStatus,
    PartitionAdoption,
    any_shared,
    finding_text,
    lost_step,
    moving,
    not_aligned,
    open_transaction,
    partition_check,
    position,
    tail,
)
from ferry.core.alignment import (
    ALTERED,
    EXTRA,
    AlignmentSummary,
    Finding,
    adopted_entries,
    align,
)
from ferry.core.internal import positions_group, reader_group
from ferry.core.offsetmap import Segment
from ferry.core.planner import TopicPartition
from ferry.errors import TerminalError, UsageError
from ferry.steps.clusters import Cluster

log = logging.getLogger(__name__)
MM2, MM1 = "mm2", "mm1"


def adoption_owner(flow: Flow) -> str:
    """The transactional id adoptions of earlier releases committed positions under (their
    positions count as adopted; adoptions now write under the partitions' writer ids)."""
    return f"ferry.{flow.source}->{flow.target}.adopt"


def adopt(flow: Flow, old: str, *, offsets_topic: str | None = None,
          connector: str | None = None, group: str | None = None, settle_s: float = 65.0,
          execute: bool = False, window: int = 100_000,
          sleep: Callable[[float], None] = time.sleep) -> AdoptReport:
    """Adopt the old mirror's progress for `flow` (module docstring). Refused (TerminalError)
    while the old mirror runs (its workers or group have members, or its progress moves),
    when Ferry has positions of its own there, or, executed, for a target without
    transactions. Partitions that cannot be adopted safely are reported (`report.refused`)
    and left unwritten."""
    if execute and flow.ferry.delivery != "exactly_once":
        raise TerminalError(f"flow {flow.name}: adopt writes positions and offset-map entries "
                            "in target transactions; ferry.delivery=at_least_once targets "
                            "cannot be adopted yet (run adopt as a dry run to see the "
                            "alignment)")
    source, target = Cluster(flow.source_admin), Cluster(flow.target_admin)
    read, where = _progress_reader(flow, old, target, source, offsets_topic, connector, group)
    first = read()
    if not first:
        raise TerminalError(f"flow {flow.name}: no progress of {old.upper()} for "
                            f"{flow.source}'s topics in {where}")
    sleep(settle_s)
    # After the wait: a crashed worker stays a member until its session times out.
    _refuse_running(flow, old, offsets_topic, group)
    second = read()
    if changed := moving(first, second):
        names = ", ".join(f"{t}-{p} ({first.get((t, p))} -> {second.get((t, p))})"
                          for t, p in changed[:10])
        raise TerminalError(f"flow {flow.name}: {old.upper()}'s progress still moves ({names}"
                            f"): stop it first, then adopt")
    run_id = f"adopted-{old}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    report = AdoptReport(flow.name, old, execute, run_id, where)
    source_topics, remote_topics = source.topics(), target.topics()
    report.partitions = _partitions(flow, second, source_topics, remote_topics)
    _refuse_ferry_positions(flow, target, report.partitions)
    if execute:
        target.ensure_offset_map_topic(flow)
    writer = None
    try:
        if execute:
            from ferry.kafka.adoption import AdoptionWriter

            writer = AdoptionWriter(flow, run_id)
            # the topics' IDs once for all their partitions (recorded with each entry)
            writer.ids = (source.topic_ids({p.topic for p in report.partitions}),
                          target.topic_ids({p.remote for p in report.partitions
                                            if p.remote in remote_topics}))
        for part in report.partitions:
            if part.status == AdoptStatus.WOULD_ADOPT:
                _check_remote(part, source_topics, remote_topics)
            if part.status == AdoptStatus.WOULD_ADOPT:
                _adopt_partition(flow, source, target, part, run_id, window, writer)
            log.log(logging.WARNING if part.reason else logging.INFO, "%s",
                    part.text().splitlines()[0].strip(),
                    extra={"flow": flow.name, "topic": part.topic,
                           "partition": part.partition})
    finally:
        if writer is not None:
            writer.close()
    return report


def _partitions(flow: Flow, progress: dict[tuple[str, int], int],
                source_topics: dict[str, Any], remote_topics: dict[str, Any]
                ) -> list[PartitionAdoption]:
    """Every partition of the flow's topics that has stored progress or a remote topic:
    the old mirror may have copied records it never flushed progress for."""
    found = {tp: at for tp, at in progress.items() if flow.topics.accepts(tp[0])}
    for name, info in source_topics.items():
        if flow.topics.accepts(name) and flow.remote_topic(name) in remote_topics:
            for partition in range(info.partitions):
                found.setdefault((name, partition), NO_PROGRESS)
    return [PartitionAdoption(t, p, flow.remote_topic(t), at)
            for (t, p), at in sorted(found.items())]


def _check_remote(part: PartitionAdoption, source_topics: dict[str, Any],
                  remote_topics: dict[str, Any]) -> None:
    source, remote = source_topics.get(part.topic), remote_topics.get(part.remote)
    part.status, part.reason = partition_check(
        part.partition, source.partitions if source else None,
        remote.partitions if remote else None, part.topic, part.remote)


def _refuse_running(flow: Flow, old: str, offsets_topic: str | None, group: str | None
                    ) -> None:
    """Refuse while the old mirror's processes are still members of their group: MM2's
    Connect workers (`Flow.mm2_worker_group` on the target), MM1's consumers."""
    from ferry.kafka.adoption import group_members

    if old == MM2 and offsets_topic is None:
        client, name = flow.target_admin, flow.mm2_worker_group
        who = f"MirrorMaker 2's workers (group {name} on {flow.target})"
    elif old == MM1 and group:
        client, name = flow.source_admin, group
        who = f"MirrorMaker 1 (group {name} on {flow.source})"
    else:
        return  # a Connect cluster's workers run other connectors too
    state, members = group_members(client, name)
    if members:
        raise TerminalError(f"flow {flow.name}: {who} still run ({members} members, group "
                            f"state {state}): stop them first, then adopt")


def _progress_reader(flow: Flow, old: str, target: Cluster, source: Cluster,
                     offsets_topic: str | None, connector: str | None, group: str | None
                     ) -> tuple[Callable[[], dict[tuple[str, int], int]], str]:
    if old == MM2:
        from ferry.kafka.adoption import connect_progress

        topic = offsets_topic or flow.mm2_offsets_topic

        def read_mm2() -> dict[tuple[str, int], int]:
            try:
                return connect_progress(flow.target_admin, topic, flow.named_source,
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


def _refuse_ferry_positions(flow: Flow, target: Cluster,
                            parts: list[PartitionAdoption]) -> None:
    """Mark partitions an earlier adoption took; refuse when Ferry has positions there."""
    from ferry.core.positions import decode_position

    committed = target.committed(positions_group(flow),
                                 [(p.remote, p.partition) for p in parts])
    owner = adoption_owner(flow)
    taken = []
    for part in parts:
        found = committed.get((part.remote, part.partition))
        if found is None or found[0] < 0:
            continue
        recorded = decode_position(found[1])
        if recorded.adopted or recorded.owner == owner:
            part.status, part.position = AdoptStatus.ALREADY, found[0]
        else:
            taken.append(f"{part.remote}-{part.partition}@{found[0]}")
    if taken:
        raise TerminalError(
            f"flow {flow.name}: Ferry already mirrors {', '.join(taken[:10])} (positions in "
            f"{positions_group(flow)}): adopt is for partitions Ferry has not mirrored; "
            "`ferry positions reset` moves Ferry's own positions")


def _adopt_partition(flow: Flow, source: Cluster, target: Cluster,
                     part: PartitionAdoption, run_id: str, window: int, writer: Any) -> None:
    from ferry.kafka.records import digest_stream

    started = time.monotonic()
    tp, remote = TopicPartition(part.topic, part.partition), \
        TopicPartition(part.remote, part.partition)
    # The source's end before its last stable offset: a transaction opened in between
    # starts at or past that end, so a stable offset below it is a transaction open before.
    source_end = source.ends([tp])[tp]
    at_source, at_target = source.watermarks([tp])[tp], target.watermarks([remote])[remote]
    low, high, t_low, t_high = at_source.low, at_source.high, at_target.low, at_target.high
    if part.progress == NO_PROGRESS and t_high <= t_low:
        part.status = AdoptStatus.NOTHING
        return
    group = reader_group(flow, "adopt")
    first = source.timestamp_at(part.topic, part.partition, low, group) if high > low else None
    t_start = t_low if first is None else max(t_low, target.offsets_at([remote], first)[remote])
    part.source_start, part.source_end, part.target_start, part.target_end = \
        low, high, t_start, t_high
    summary = AlignmentSummary()
    # A scan's deadline counts the time the other side is read too: generous per record.
    timeout = 600.0 + (high - low + t_high - t_start) / 1_000
    pairs = align(digest_stream(flow.source_admin, part.topic, part.partition, low, high, group,
                                timeout),
                  digest_stream(flow.target_admin, part.remote, part.partition, t_start, t_high,
                                group, timeout), window=window, summary=summary)
    with tempfile.TemporaryFile(prefix="ferry-adopt-") as spool:
        shown, after = _spool(pairs, spool, part, flow)
        end = tail(after, part.progress)
        part.matched, part.doubled = summary.matched, summary.doubled
        part.extra = summary.extra + end.altered  # their source records are copied again
        part.altered, part.missing = summary.altered - end.altered, \
            summary.missing - end.missing
        part.to_copy = end.to_copy
        part.position = position(summary.last_source, low, part.progress)
        part.findings = (shown + end.shown)[:FINDINGS_SHOWN]
        _log_findings(flow, part, end.shown, len(shown))
        part.seconds = round(time.monotonic() - started, 3)
        part.reason = not_aligned(summary.matched, summary.altered,
                                  summary.matched + summary.missing + summary.altered,
                                  summary.matched + summary.doubled + summary.extra
                                  + summary.altered) or lost_step(end, window)
        if part.reason:
            part.status = AdoptStatus.NOT_ALIGNED
            return
        if high < source_end and end.unpaired_copies and _copied_from_open(
                flow, part, after, (high, source_end), end.unpaired_copies, group, timeout):
            part.reason = open_transaction(f"{part.topic}-{part.partition}",
                                           f"{part.remote}-{part.partition}", high,
                                           source_end, end.unpaired_copies)
            part.status = AdoptStatus.OPEN_TRANSACTION
            return
        if writer is not None:
            ids, target_ids = writer.ids
            entries = adopted_entries(
                _unspool(spool), flow=flow.name, run_id=run_id, source_topic=part.topic,
                source_partition=part.partition, target_topic=part.remote,
                target_partition=part.partition, covered_start=low,
                covered_end=max(low, part.position), committed_at_ms=int(time.time() * 1000),
                source_id=ids.get(part.topic, ""), target_id=target_ids.get(part.remote, ""))
            part.entries = writer.adopt(entries, part.topic, part.remote, part.partition,
                                        part.position, t_high, ids.get(part.topic, ""))
            part.status = AdoptStatus.ADOPTED
    part.seconds = round(time.monotonic() - started, 3)


def _copied_from_open(flow: Flow, part: PartitionAdoption, after: list[Finding],
                      open_range: tuple[int, int], unpaired: int, group: str, timeout: float
                      ) -> bool:
    """Whether a target record after the last pair (altered or extra, `after`) is a copy of
    a source record in `open_range` [last stable offset, end), read uncommitted as the old
    mirror read: one of an open transaction, which pairs once it is committed. Copies of
    aborted records, say, never pair: waiting for them would never end on a source that
    always has a transaction open. The smaller side is held in memory."""
    from ferry.kafka.records import digest_stream

    ranges = sorted((f.target_start, f.target_end) for f in after
                    if f.kind in (ALTERED, EXTRA) and f.target_start is not None
                    and f.target_end is not None)
    if not ranges:
        return False
    starts = [start for start, _ in ranges]

    def unpaired_at(offset: int) -> bool:
        i = bisect_right(starts, offset) - 1
        return i >= 0 and offset < ranges[i][1]

    copies = (d for o, d in digest_stream(flow.target_admin, part.remote, part.partition,
                                          ranges[0][0], ranges[-1][1], group, timeout)
              if unpaired_at(o))
    stable, end = open_range
    uncommitted = (d for _, d in digest_stream(flow.source_admin, part.topic, part.partition,
                                               stable, end, group, timeout, committed=False))
    if unpaired <= end - stable:
        return any_shared(copies, uncommitted)
    return any_shared(uncommitted, copies)


def _log_findings(flow: Flow, part: PartitionAdoption, more: list[Finding], logged: int
                  ) -> None:
    """Warn of the findings after the last pair (the ones before it were logged as they
    came), at most FINDINGS_SHOWN in all, then how many were left out."""
    extra = {"flow": flow.name, "topic": part.topic, "partition": part.partition}
    for finding in more[:max(0, FINDINGS_SHOWN - logged)]:
        log.warning("%s-%s: %s", part.topic, part.partition, finding_text(finding), extra=extra)
    left = part.doubled + part.extra + part.altered + part.missing
    if left and logged + len(more) > FINDINGS_SHOWN:
        log.warning("%s-%s: more findings than the %s shown: %s records in all are doubled, "
                    "extra, altered or missing", part.topic, part.partition, FINDINGS_SHOWN,
                    f"{left:,}", extra=extra)


def _spool(pairs: Iterator[Segment | Finding], spool: IO[bytes], part: PartitionAdoption,
           flow: Flow) -> tuple[list[Finding], list[Finding]]:
    """Write the segments to `spool` (three int64 each) and count the pairs at or after the
    old mirror's progress. Returns the first findings before the last pair (at most
    FINDINGS_SHOWN, each logged as it comes) and every finding after it."""
    shown: list[Finding] = []
    after: list[Finding] = []
    batch = array("q")
    since = max(part.progress, 0)
    extra = {"flow": flow.name, "topic": part.topic, "partition": part.partition}
    for item in pairs:
        if isinstance(item, Segment):
            batch.extend((item.source_start, item.target_start, item.count))
            part.after_progress += max(0, item.source_end - max(item.source_start, since))
            if len(batch) >= 30_000:
                batch.tofile(spool)
                del batch[:]
            for finding in after[:FINDINGS_SHOWN - len(shown)]:
                log.warning("%s-%s: %s", part.topic, part.partition, finding_text(finding),
                            extra=extra)
                shown.append(finding)
            after = []
        else:
            after.append(item)
    batch.tofile(spool)
    spool.flush()
    return shown, after


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
