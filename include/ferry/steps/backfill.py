"""Prepare a backfill against the clusters: resolve the window, read what the destination
holds, plan the chunks (`ferry.core.backfill`), record gaps, create destination topics, and
write one plan file per chunk for the copy job.

Nothing is created or written when the plan is refused. Each chunk is an ordinary copy-job
plan (`role: backfill`, its own transactional ids), so a chunk records its runs and
offset-map entries like a scheduled run, and a retried chunk resumes from its committed
position.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferry.config import Flow
from ferry.core.backfill import (
    EARLIEST,
    LATEST,
    OFFSET,
    BackfillPlan,
    Bound,
    Held,
    PartitionWindow,
    check_destinations,
    destination_of,
    parse_bound,
    plan_backfill,
)
from ferry.core.offsetmap import MapEntry
from ferry.core.planner import Range, TopicPartition, Watermarks
from ferry.errors import TerminalError, UsageError
from ferry.state.store import DeltaStore

if TYPE_CHECKING:
    from ferry.config.connections import Connection
    from ferry.steps.ports import BackfillSource, BackfillTarget, StateStore, SyncSource

log = logging.getLogger(__name__)
ROLE = "backfill"
"""The transactional-id role of a backfill into a topic of its own (nobody else writes
there); into the flow's remote topic a backfill copies as the flow's own lanes."""


@dataclass(frozen=True)
class BackfillRequest:
    """What the operator asked for (the DAG's Params, as given)."""

    topics: str = ".*"
    start: str = EARLIEST
    end: str = LATEST
    target_topic: str = ""
    """Empty: the flow's remote topic; else a topic name (`{topic}`: the source topic)."""
    chunk_records: int = 100_000
    on_gap: str = "fail"


@dataclass(frozen=True)
class BackfillRun:
    flow: str
    run_id: str
    plan: BackfillPlan
    destinations: dict[str, str]
    chunk_files: tuple[str, ...]

    def text(self) -> str:
        lines = [f"backfill {self.run_id} of flow {self.flow}: {len(self.plan.chunks)} chunks, "
                 f"{self.plan.span:,} offsets"]
        lines += [f"  {tp} [{a}, {b}) -> {self.destinations[tp.topic]}-{tp.partition}"
                  for tp, (a, b) in sorted(self.plan.windows.items())]
        lines += [f"  {tp}: nothing in the window" for tp in self.plan.empty]
        lines += [f"  GAP {g.topic}-{g.partition} offsets {g.start}..{g.end - 1} ({g.count:,} "
                  "records) deleted by retention" for g in self.plan.gaps]
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """Names and counts only (an XCom and `--json`; no client settings)."""

        count = len(self.plan.chunks)
        return {
            "flow": self.flow, "run_id": self.run_id,
            "chunk_labels": [chunk_label(k, count, chunk)
                             for k, chunk in enumerate(self.plan.chunks, start=1)],
            "offsets": self.plan.span, "destinations": self.destinations,
            "partitions": {str(tp): {"from": a, "to": b}
                           for tp, (a, b) in sorted(self.plan.windows.items())},
            "empty": [str(tp) for tp in self.plan.empty],
            "gaps": [{"topic": g.topic, "partition": g.partition, "start": g.start,
                      "end": g.end, "count": g.count} for g in self.plan.gaps],
        }


def _topics(flow: Flow, pattern: str, mirrored: Mapping[str, int]) -> list[str]:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"topics={pattern!r} is not a regular expression ({exc}): give one "
                         "such as 'orders|payments' or 'orders\\..*'") from None
    chosen = sorted(t for t in mirrored if regex.fullmatch(t))
    if not chosen:
        raise UsageError(f"topics={pattern!r} matches none of the topics flow {flow.name} "
                         f"mirrors ({', '.join(sorted(mirrored)[:10]) or 'none'})")
    return chosen


def _resolve(bound: Bound, tps: list[TopicPartition], marks: Mapping[TopicPartition, Watermarks],
             history: Mapping[TopicPartition, int], source: BackfillSource
             ) -> dict[TopicPartition, int]:
    """Offsets of one end of the window per partition. `earliest` reaches back to the
    oldest offset the destination ever held, so records lost to retention show as a gap."""
    if bound.kind == EARLIEST:
        return {tp: min(marks[tp].low, history.get(tp, marks[tp].low)) for tp in tps}
    if bound.kind == LATEST:
        return {tp: marks[tp].high for tp in tps}
    if bound.kind == OFFSET:
        assert bound.value is not None
        return dict.fromkeys(tps, bound.value)
    assert bound.value is not None
    return dict(source.offsets_at(tps, bound.value))


def _held(entries: list[MapEntry], exists: bool, marks: Watermarks | None) -> tuple[Held, ...]:
    """The entries whose records the destination partition still holds: not those of a
    topic since deleted (or recreated: past its end) or removed by the target's retention."""
    if not exists or marks is None:
        return ()
    held = []
    for entry in entries:
        if not entry.segments:
            continue
        end = max(s.target_end for s in entry.segments)
        if marks.low < end <= marks.high:
            held.append(Held(entry.covered_start, entry.covered_end, entry.run_id))
    return tuple(held)


def prepare_backfill(flow: Flow, request: BackfillRequest, run_id: str,
                     master: str | None = None, apply: bool = True, *,
                     source: BackfillSource | None = None,
                     target: BackfillTarget | None = None,
                     state: StateStore | None = None) -> BackfillRun:
    """Plan the backfill and (with `apply`) make it ready to copy: raises UsageError for a
    bad request and TerminalError for a refused plan or a gap under `on_gap=fail`.
    `source` and `target` default to the flow's clusters, `state` to its Delta tables."""
    from ferry.core.internal import positions_group
    from ferry.core.lanes import cores_of, lane_count
    from ferry.core.sync.topics import mirrored_topics
    from ferry.steps.clusters import Cluster
    from ferry.steps.lookup import entries_and_claims

    if request.on_gap not in ("fail", "continue"):
        raise UsageError(f"on_gap={request.on_gap!r}: give fail or continue")
    start = parse_bound(request.start, "from", start=True)
    end = parse_bound(request.end, "to", start=False)
    source = source or Cluster(flow.source_admin)
    target = target or Cluster(flow.target_admin)
    source_topics = {t.name: t.partitions for t in source.topics().values()}
    mirrored = mirrored_topics(flow, source_topics)
    topics = _topics(flow, request.topics, mirrored)
    check_destinations(request.target_topic, topics)
    destinations = {t: destination_of(request.target_topic, t, flow.remote_topic(t))
                    for t in topics}
    _check_named(flow, destinations, mirrored)
    target_topics = {t.name: t.partitions for t in target.topics().values()}
    for topic, dest in destinations.items():
        if dest in target_topics and target_topics[dest] < source_topics[topic] \
                and dest != flow.remote_topic(topic):
            raise TerminalError(f"target topic {dest} has {target_topics[dest]} partitions, "
                                f"fewer than {topic}'s {source_topics[topic]}: add partitions "
                                f"to it or name another topic")
    tps = [TopicPartition(t, p) for t in topics for p in range(source_topics[t])]
    marks = source.watermarks(tps)
    # `earliest` reaches back to what was ever mirrored, also into a destination lost
    # since (its claims): what retention took meanwhile is a gap to report.
    entries, claims = entries_and_claims(flow, topics, into=destinations.__getitem__,
                                         source=source, target=target)
    history = {TopicPartition(t, p): min(e.covered_start for e in found)
               for (t, p), found in claims.items() if found}
    starts = _resolve(start, tps, marks, history, source)
    ends = _resolve(end, tps, marks, history, source)
    dest_tps = [TopicPartition(destinations[tp.topic], tp.partition) for tp in tps
                if tp.partition < target_topics.get(destinations[tp.topic], 0)]
    dest_marks = target.watermarks(dest_tps)
    positions = target.group_offsets(positions_group(flow),
                                     [(d.topic, d.partition) for d in dest_tps])
    windows = []
    for tp in tps:
        dest = destinations[tp.topic]
        dest_tp = TopicPartition(dest, tp.partition)
        windows.append(PartitionWindow(
            tp, dest, dest == flow.remote_topic(tp.topic), marks[tp].low, marks[tp].high,
            starts[tp], ends[tp], positions.get((dest, tp.partition)),
            _held(entries.get((tp.topic, tp.partition), []), dest in target_topics,
                  dest_marks.get(dest_tp))))
    plan = plan_backfill(windows, request.chunk_records, request.on_gap)
    if plan.refusals:
        raise plan.refused()
    if apply:
        _record_gaps(flow, run_id, plan, request.on_gap, state or DeltaStore.of(flow))
    if plan.gaps and request.on_gap != "continue":
        from ferry.core.planner import describe_gaps

        raise TerminalError(f"records deleted by retention before they were copied: "
                            f"{describe_gaps(plan.gaps)} (recorded in the gaps table). Nothing "
                            f"was written; trigger again with on_gap=continue to copy from the "
                            f"oldest record, or start later")
    files: tuple[str, ...] = ()
    if apply and plan.chunks:
        _create_destinations(flow, run_id, destinations, source_topics, target_topics,
                             source, target)
        # Into the flow's own remote topic, a backfill writes under the flow's writer ids
        # (one per writer slot, whatever the lane count), so a backfill and a scheduled run
        # fence each other and never both commit a partition (G11).
        into_remote = not request.target_topic
        partitions = sum(mirrored.values()) if into_remote else len(plan.windows)
        lanes = lane_count(flow.tasks_max, cores_of(master or flow.ferry.spark_master),
                           partitions, flow.ferry.writers)
        files = _write_chunks(flow, run_id, plan, lanes, "" if into_remote else ROLE)
    result = BackfillRun(flow.name, run_id, plan, destinations, files)
    log.info("backfill %s: %d chunks, %d offsets over %d partitions, %d gaps", run_id,
             len(plan.chunks), plan.span, len(plan.windows), len(plan.gaps),
             extra={"flow": flow.name})
    return result


def _check_named(flow: Flow, destinations: Mapping[str, str],
                 mirrored: Mapping[str, int]) -> None:
    """A named destination may not be another topic's remote topic or an internal one."""
    remotes = {flow.remote_topic(t): t for t in mirrored}
    for topic, dest in destinations.items():
        owner = remotes.get(dest)
        if owner is not None and owner != topic:
            raise UsageError(f"target topic {dest!r} is the remote topic of {owner}: name a "
                             "topic of the backfill's own")
        if dest.startswith("__") or dest.endswith(".internal"):
            raise UsageError(f"target topic {dest!r} is internal by MM2's rules: name another")


def _record_gaps(flow: Flow, run_id: str, plan: BackfillPlan, on_gap: str,
                 state: StateStore) -> None:
    from ferry.core.tables import gap_row

    for gap in plan.gaps:
        log.warning("backfill %s: %s-%s offsets %d..%d (%d records) were deleted by retention "
                    "before they were copied", run_id, gap.topic, gap.partition, gap.start,
                    gap.end - 1, gap.count, extra={"flow": flow.name, "topic": gap.topic,
                                                   "partition": gap.partition})
    state.append("gaps", [gap_row(flow.name, run_id, g, on_gap)
                          for g in state.unrecorded_gaps(flow.name, plan.gaps)])


def _create_destinations(flow: Flow, run_id: str, destinations: Mapping[str, str],
                         source_topics: Mapping[str, int], target_topics: Mapping[str, int],
                         source: SyncSource, target: BackfillTarget) -> None:
    """The flow's remote topics through the sync step (configs as a scheduled run would);
    named topics with the source's partition count; and the offset-map topic."""
    from ferry.steps.sync import sync_flow

    if any(d == flow.remote_topic(t) for t, d in destinations.items()):
        sync_flow(flow, apply=True, force=True, run_id=run_id, source=source, target=target,
                  steps=("topics",))
    named = {d: source_topics[t] for t, d in destinations.items()
             if d != flow.remote_topic(t) and d not in target_topics}
    for name in target.create_plain_topics(flow, named):
        log.info("created backfill topic %s on %s", name, flow.target,
                 extra={"flow": flow.name, "topic": name})
    target.ensure_offset_map_topic(flow)


def chunk_label(index: int, count: int, ranges: Sequence[Range]) -> str:
    """What the UI shows for a chunk's mapped task: `chunk 2/5: orders-0..3, 40,000 offsets`."""
    span = sum(r.end - r.start for r in ranges)
    topics = sorted({r.topic for r in ranges})
    name = topics[0] if len(topics) == 1 else f"{len(topics)} topics"
    return f"chunk {index}/{count}: {name}, {len(ranges)} partitions, {span:,} offsets"


def _write_chunks(flow: Flow, run_id: str, plan: BackfillPlan, lanes: int,
                  role: str) -> tuple[str, ...]:
    from ferry.core import plan_file
    from ferry.steps.cycle import plans_dir

    folder = plans_dir(flow) / f"backfill-{run_id}"
    return tuple(
        plan_file.write(folder / f"chunk-{index:04d}.json", plan_file.PlanFile(
            flow.name, f"{run_id}.chunk-{index:04d}", lanes, tuple(chunk), role=role,
            label=chunk_label(index, len(plan.chunks), chunk)))
        for index, chunk in enumerate(plan.chunks, start=1))


def copy_chunks(config_path: str, flow: Flow, run: BackfillRun, master: str,
                connections: Mapping[str, Connection] | None = None) -> int:
    """Outside Airflow (`ferry backfill`): spark-submit the chunks one after the other, as
    the DAG's mapped tasks do; stops at the first that fails. Returns its exit code (0:
    every chunk copied). Job output goes to stderr. `connections`: the config's Airflow
    connections, for the jobs."""
    from ferry.spark.submit import run_job

    for index, path in enumerate(run.chunk_files, start=1):
        log.info("backfill %s: chunk %d/%d", run.run_id, index, len(run.chunk_files),
                 extra={"flow": flow.name})
        code = run_job(config_path, flow.name, path, master, loaded=flow,
                       connections=connections)
        if code != 0:
            log.error("backfill %s: chunk %d/%d failed (exit %d); run the same backfill "
                      "again to resume from what was committed", run.run_id, index,
                      len(run.chunk_files), code, extra={"flow": flow.name})
            return code
    return 0
